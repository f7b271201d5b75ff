// The layer-wise runs of a MatMul with an activation point on A and a weight point on a 2-D B
// (transformers' linear layers): both points (Xq * Wq), weights only (X * Wq) and activations only
// (Xq * W) against the float output, with Xq packed once and Wq's panels packed once for its two
// products (gemmBlockPair). Every output element is computed exactly as the MatMul kernel
// computes it (the same packing and micro-kernel calls), so the sums equal three runs of the node
// bit for bit (tests/analysis/test_layerwise_matmul.cpp).
#pragma once

#include "core/ir/tensor.h"
#include "core/kernels/gemm.h"
#include "core/kernels/matmul_dnnl.h"
#include "core/numeric/metrics.h"

namespace qs {

/// The three layer-wise sums of Y = X * W (X [..., M, K] float, W [K, N] float, ref = X * W as
/// the float pass gave it): into `full` (xq * wq), `weight` (x * wq) and `act` (xq * w). False,
/// touching nothing, where the shapes are not those of one GEMM of more than two rows (the MatMul
/// kernel then takes another route): the caller runs the node instead. `wqPanels`, where given,
/// is wq packed once (PackedPanels of wq, K x N): its panels are read instead of packing wq per
/// block, for the same bits. `wqDnnl`, where given, is wq in oneDNN's layout (node_paths.h,
/// PackedMatMulWeight): Xq * Wq and X * Wq are then oneDNN's products, summed in its order (each
/// element within float rounding of the kernel's), as the quantized pass computes Xq * Wq then.
bool layerwiseMatMul(const Tensor& x, const Tensor& xq, const Tensor& w, const Tensor& wq, const Tensor& ref,
                     int threads, ErrorAccumulator& full, ErrorAccumulator& weight, ErrorAccumulator& act,
                     const PackedPanels* wqPanels = nullptr, const DnnlMatMul* wqDnnl = nullptr);

}  // namespace qs
