// The per-step product of a recurrent cell (LSTM, GRU, RNN): out[batch, M] = h[batch, K] R[M, K]^T,
// where R holds the gate rows of one direction (core/kernels/recurrent.cpp).
#pragma once

#include <cstdint>
#include <vector>

namespace qs {

/// R [M, K] packed once (per direction and run) as column panels of 8 gate rows (AVX2) or 16
/// (AVX-512), k-major ([M/P][K][P], the last panel zero-padded): a step broadcasts h's values and
/// multiplies whole panels, so the batch (1..N) is the micro-tile's row count and no column is
/// padding, and the result comes out batch-major, each row's gates contiguous for the gate loop.
/// Each output is one FMA chain over k in order, so it depends neither on the thread count or the
/// split nor on the instruction set: both paths give the same bits.
class RecurrentStepMatrix {
 public:
  /// The instruction set of the step's micro-kernel.
  enum class Isa { Avx2, Avx512 };
  /// Avx512 where the CPU has AVX-512F (asked once per process), else Avx2; QS_STEP_ISA=avx2 in
  /// the environment forces the AVX2 path.
  static Isa bestIsa();
  static bool avx512Available();

  RecurrentStepMatrix() = default;
  /// `isa` must be available on this CPU (Avx512 only where avx512Available()).
  RecurrentStepMatrix(const float* rows, int64_t M, int64_t K, Isa isa = bestIsa());

  Isa isa() const { return m_isa; }

  int64_t rows() const { return m_M; }
  int64_t depth() const { return m_K; }

  /// out[b * M + m] = sum_k h[b * K + k] * R[m, k] for b < batch; on up to `threads` threads
  /// (split by panels) when the product is worth a hand-off.
  void multiply(const float* h, int64_t batch, float* out, int threads) const;

  /// Panels [p0, p1) of the product, on the calling thread.
  void panelRange(int64_t p0, int64_t p1, const float* h, int64_t batch, float* out) const;

 private:
  Isa m_isa = Isa::Avx2;
  int64_t m_panel = 8;  // gate rows per panel: 8 (AVX2) or 16 (AVX-512)
  int64_t m_M = 0, m_K = 0, m_panels = 0;
  std::vector<float> m_packed;
};

}  // namespace qs
