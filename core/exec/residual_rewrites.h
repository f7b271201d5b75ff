// Pieces of the inference graph rewrites (core/exec/graph_rewrites.h) that need only the graph: the
// transformers' residual Add + LayerNormalization pass and the tests of the attention fusion's mask Add
// and Softmax; det's neck Adds (neck_rewrites.cpp). Internal to core/exec.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ir/graph.h"

namespace qs {

/// Whether Softmax node `n` (of `opset`) normalises the last axis of its input v: opset 13's single
/// axis, or (before 13) the 2-D coercion at the last axis, which is the same thing.
bool softmaxOverLastAxis(const Graph& g, const Node& n, ValueId v, int64_t opset);

/// Whether Add node `add` adds its input `other` to the scores just before a Softmax over the last axis
/// (the Add's only live reader, one output), `other` float or of unknown type: attention's mask or
/// position bias, which FusedMatMul then adds row by row before its Softmax (fused_matmul.h).
bool addsBeforeLastAxisSoftmax(const Graph& g, const Node& add, size_t other, const std::vector<char>& removed,
                               int64_t opset);

/// Each live Add (default domain) whose sum feeds a LayerNormalization over the last axis (ONNX's or
/// ai.quantscope's, Y only, constant Scale and B) becomes one ai.quantscope SkipLayerNormalization
/// in the Add's place (inputs the Add's two, Scale, B; outputs Y, and the sum where something else
/// reads it); the LayerNormalization is marked in `removed` and recorded in `absorbed` of the Add.
/// Consumer lists of Scale and B are kept current. Returns how many pairs were fused.
int fuseSkipLayerNorms(Graph& g, std::vector<char>& removed, std::vector<std::vector<NodeId>>& absorbed);

/// PP-OCR det's neck (neck_rewrites.cpp): each live Add (default domain) of two computed values that adds X
/// and Mul(X, S), or A and a nearest Resize by whole factors [1, 1, fh, fw] (asymmetric coordinates, floor),
/// the Mul / Resize read by that Add alone, becomes an ai.quantscope ResidualAdd (core/kernels/residual_add.h)
/// in the Add's place (inputs X, S, U; attribute "upsample"); where the first form's sum is read only by an
/// Add of the second form, that Add is absorbed too. The absorbed nodes are marked in `removed` and recorded
/// in `absorbed` of the Add. Returns how many were made.
int fuseResidualAdds(Model& model, std::vector<char>& removed, std::vector<std::vector<NodeId>>& absorbed);

/// PP-OCR det's Concat of upsampled FPN maps (neck_rewrites.cpp): each live Concat (default domain) along
/// axis 1 (or -3) with at least one input made by a nearest Resize by whole factors [1, 1, fh, fw]
/// (asymmetric coordinates, floor) that the Concat alone reads becomes an ai.quantscope UpsampleConcat
/// (core/kernels/upsample_concat.h) in the Concat's place: inputs the Resizes' inputs (the others as they
/// were), attribute "upsample" [fh, fw] per input (1, 1 where none). The Resizes are marked in `removed` and
/// recorded in `absorbed` of the Concat. Returns how many were made.
int fuseUpsampleConcats(Model& model, std::vector<char>& removed, std::vector<std::vector<NodeId>>& absorbed);

}  // namespace qs
