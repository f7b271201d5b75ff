// 1x1 Conv (ai.onnx Conv 1..21 / ai.quantscope FusedConv; group 1, stride 1, no padding) read
// straight from NCHW: y[n, m, p] = activations(bias[m] + sum_c W[m, c] x[n, c, p]).
//
// The GEMM path packs the input (the B matrix, [C, pixels]) into 16-column panels on every call,
// once per block of output rows, and applies bias and activations in a second pass over the block.
// Here the weights are the 6-row panels the Conv kernel packed at load (PackedMatrix), the
// micro-kernel loads 16 consecutive pixels of each input channel in place (the last 1-15 of a row
// masked; the last 1-8 as one vector over two panels), and bias and the fused activations are
// applied in registers before the one store: 0.7-1.0x the GEMM path's time on the small CNNs' 1x1
// shapes (qs_bench_pointwise). Each output is summed as the GEMM sums it (K slices of 256, each an
// FMA chain from zero, the slices added, then the bias, then the activations in order), so the
// bits are those of the GEMM path. On AVX-512 CPUs the same kernel runs 16 lanes wide (12-row x
// 32-pixel tiles, masked tails), with the same sums in the same order, so the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernels/conv.h"
#include "core/kernels/gemm.h"

namespace qs {

/// Whether pointwiseConvDirect runs its AVX-512 kernel (16-pixel vectors, 12-row tiles): on CPUs with
/// AVX-512F unless QS_POINTWISE=avx2. The same bits as the AVX2 kernel either way.
bool pointwiseAvx512();

/// Whether the direct kernel should run a 1x1 Conv (group 1, stride 1, no padding) of C input and
/// M output channels over `pixels` outputs per image rather than the GEMM path: with the AVX2
/// kernel, false where the input rows, `pixels` floats apart, crowd into few L1 sets and many output
/// channels re-read them; with the AVX-512 kernel (`avx512`), always. Measured: docs/performance.md,
/// "Small CNNs", "1x1 convolutions read in place", "rec at batch 1".
bool pointwiseDirectPreferred(int64_t C, int64_t M, int64_t pixels, bool avx512 = pointwiseAvx512());

/// Whether the direct kernel should run such a conv where oneDNN's rule (DnnlConv::preferred) would
/// take it: false on oneDNN's deep shapes below 14x14 outputs, where it measured faster.
bool pointwiseDirectBeatsOneDnn(int64_t C, int64_t pixels);

/// y [N, M, P] = activations(bias + W x) for x [N, C, P] (contiguous), W the M x C matrix packed
/// in `w` (6-row panels, rows past M zero). bias (M values) may be null. Work is split over
/// (image, pixel block, output-row block) tasks on the pool; the split depends on the shape only,
/// and every output is computed by one FMA chain per K slice, so the result does not depend on
/// `threads`.
void pointwiseConvDirect(const PackedMatrix& w, const float* x, int64_t N, int64_t P, const float* bias,
                         const std::vector<FusedActivation>& activations, float* y, int threads);

}  // namespace qs
