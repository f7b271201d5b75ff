// The GEMMs of the integer Conv (core/kernels/qconv.h): portable, AVX-512 VNNI
// (qconv_gemm.cpp) and AVX2 over 16-bit weights (qconv_gemm_avx2.cpp). Internal to qconv; the
// layout is described in qconv.cpp. All compute the same exact int32 sums.
#pragma once

#include <cstdint>

#include "core/kernels/qconv.h"

namespace qs::qconv_detail {

/// Tile columns: B is read 32 consecutive words at a time (two zmm or four ymm of int32).
constexpr int64_t kTileCols = 32;

/// C[0:panels*MR, 0:panelsN*kTileCols] = A * B, A packed, B read in place: group gi of column j
/// is the word B[off[gi] + j], 4 unsigned bytes (one per reduction index of the group). C is
/// int32 row-major with leading dimension ldc; every tile is written in full (rows and columns
/// past the real ones hold sums over padding, which the epilogue drops). The caller bounds the
/// reduction length so that the int32 sums cannot overflow.
/// Portable loops over either format.
void qconvGemmGeneric(const QConvWeights::Packed& A, const uint32_t* B, const int64_t* off, int64_t panelsN,
                      int32_t* C, int64_t ldc);
/// A in bytes (not A.wide()); only where the CPU has AVX-512 VNNI.
void qconvGemmVnni(const QConvWeights::Packed& A, const uint32_t* B, const int64_t* off, int64_t panelsN, int32_t* C,
                   int64_t ldc);
/// A wide (int16); only where the CPU has AVX2.
void qconvGemmAvx2(const QConvWeights::Packed& A, const uint32_t* B, const int64_t* off, int64_t panelsN, int32_t* C,
                   int64_t ldc);

}  // namespace qs::qconv_detail
