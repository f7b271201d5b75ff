// Depthwise 2-D convolution (ai.onnx Conv 1..21 / ai.quantscope FusedConv with group == C == M)
// eight channels at a time, for the small planes of MobileNet- and ShuffleNet-style networks
// (issue 13): the plane-by-plane kernel (conv.h, depthwiseConvPlane) vectorises along a row, which
// wastes lanes and leaves one 9-FMA dependency chain per vector on rows of 7..28 outputs (4-12
// GFLOP/s measured). Here eight planes are interleaved into zero-padded scratch ([row][column][8
// channels]) in strips of rows, each output pixel is one 8-wide vector (bias + taps in (kh, kw)
// order, as the plane kernel sums them, so the bits are the same), eight pixels side by side, and
// the result is transposed back to NCHW with the fused activations applied.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernels/conv.h"

namespace qs {

/// Whether depthwiseConv8 takes a depthwise 2-D shape with C channels and
/// geometry g: 2-D, at least 8 channels, at most 64 taps, and output rows short
/// enough that the plane kernel wastes lanes (the measured boundary,
/// docs/performance.md "Small CNNs").
bool depthwise8Preferred(int64_t C, const WindowGeometry& g);

/// y[c] = activations(b[c] + depthwise(x[c], w[c])) for the 8 channels c0..c0+7
/// of one image: x and y point at channel 0 of the image ([C, H, W] plain
/// NCHW), w is [C, kH, kW], bias [C] or nullptr. Same bits as
/// depthwiseConvPlane followed by applyFusedActivations. Uses per-thread
/// scratch; re-entrant.
void depthwiseConv8(const float* x, const float* w, const float* bias, int64_t c0, const WindowGeometry& g,
                    const std::vector<FusedActivation>& activations, float* y);

}  // namespace qs
