// Signal-processing ops: DFT, STFT, the window generators and MelWeightMatrix, plus the FFT they
// share. Arithmetic is in double (inputs float, double, float16 or bfloat16; outputs in the
// input's dtype), so float outputs are within one rounding of the exact transform.
#pragma once

#include <complex>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/exec/kernel.h"

namespace qs {

/// Longest transform, frame, window or spectrogram length the signal ops accept (2^20). A
/// length beyond it (a fuzzed dft_length of 2^40, say) is refused rather than allocated; real
/// audio front ends use a few thousand.
inline constexpr int64_t kMaxSignalLength = int64_t(1) << 20;
/// Most elements a signal op may produce (2^28, 1 GiB of float).
inline constexpr int64_t kMaxSignalOutput = int64_t(1) << 28;

/// An unnormalised DFT of one length n (1..kMaxSignalLength): X[k] = sum_j x[j] e^(-+2 pi i jk/n),
/// the sign + for `inverse`. Radix-2 where n is a power of two, the plain O(n^2) sum for short
/// other lengths, Bluestein's chirp-z (three power-of-two FFTs) for long ones, all in double.
/// Immutable once made: share one plan between threads, each with its own scratch.
class FftPlan {
 public:
  FftPlan(int64_t n, bool inverse);
  int64_t size() const { return m_n; }
  /// Transforms data[0..n) in place; `scratch` is resized as needed (reuse it across calls).
  void run(std::complex<double>* data, std::vector<std::complex<double>>& scratch) const;

 private:
  enum class Kind { Radix2, Naive, Bluestein };
  void radix2(std::complex<double>* data) const;
  int64_t m_n = 0;
  Kind m_kind = Kind::Naive;
  std::vector<std::complex<double>> m_twiddle;  // radix-2: e^(s 2 pi i k/n), k < n/2; naive: k < n
  std::vector<int64_t> m_bitrev;                // radix-2 permutation
  // Bluestein: chirp c[k] = e^(s pi i k^2/n), the transformed filter, and its power-of-two plans.
  std::vector<std::complex<double>> m_chirp, m_filter;
  std::shared_ptr<const FftPlan> m_forward, m_backward;
};

// DFT 17..21: input [batch, n1, ..., nk, 1 | 2] (real or complex); optional dft_length (pads with
//   zeros or truncates the axis); axis an attribute (default 1) before opset 20, an optional input
//   (default -2) from 20; inverse (scaled by 1/n); onesided keeps the first n/2 + 1 outputs (with
//   inverse too, as the ONNX reference does). Output [..., 2].
Result<std::unique_ptr<Kernel>> createDft(const KernelInit& init);
// STFT 17..21: signal [batch, length, 1 | 2], frame_step, optional window [frame_length] and
//   frame_length; onesided (default 1). Output [batch, frames, bins, 2] with
//   frames = (length - frame_length) / frame_step + 1.
Result<std::unique_ptr<Kernel>> createStft(const KernelInit& init);
// HannWindow, HammingWindow, BlackmanWindow 17..21: size (int scalar), periodic (default 1),
//   output_datatype (default float).
Result<std::unique_ptr<Kernel>> createHannWindow(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createHammingWindow(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createBlackmanWindow(const KernelInit& init);
// MelWeightMatrix 17..21: num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
//   upper_edge_hertz -> [dft_length / 2 + 1, num_mel_bins] triangular filters (the ONNX
//   reference's bin rounding); output_datatype (default float).
Result<std::unique_ptr<Kernel>> createMelWeightMatrix(const KernelInit& init);

}  // namespace qs
