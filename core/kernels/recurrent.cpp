// LSTM, GRU, RNN (ai.onnx opsets 7..21), FP32.
//
// Per direction, one GEMM projects the inputs of a chunk of time steps at once (X W^T, with the
// biases that do not depend on the state folded in), then each step multiplies the previous hidden
// state by R (RecurrentStepMatrix, core/kernels/recurrent_step.h: R packed once per direction and
// run, the batch as the micro-tile's rows) and applies the gates row by row; the product comes out
// batch-major ([batch, gates*H]). The two directions of a bidirectional node run at once, one per
// thread, when there are two. With library kernels, on CPUs where oneDNN's matmul runs AVX-512
// kernels (DnnlMatMul::preferred), the input projection of a constant W (and B) goes to oneDNN.
#include "core/kernels/recurrent.h"

#include <immintrin.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/exec/parallel.h"
#include "core/kernels/gemm.h"
#include "core/kernels/matmul_dnnl.h"
#include "core/kernels/recurrent_step.h"

namespace qs {

namespace {

enum class Cell { Rnn, Gru, Lstm };

const char* cellName(Cell c) { return c == Cell::Lstm ? "LSTM" : c == Cell::Gru ? "GRU" : "RNN"; }
// Rows of W and R per hidden unit: LSTM i,o,f,c; GRU z,r,h; RNN i.
int64_t gateCount(Cell c) { return c == Cell::Lstm ? 4 : c == Cell::Gru ? 3 : 1; }
// Activation functions per direction: LSTM f,g,h; GRU f,g; RNN f.
size_t activationsPerDirection(Cell c) { return c == Cell::Lstm ? 3 : c == Cell::Gru ? 2 : 1; }
size_t maxInputs(Cell c) { return c == Cell::Lstm ? 8 : 6; }
size_t maxOutputs(Cell c) { return c == Cell::Lstm ? 3 : 2; }

enum class ActFn {
  Sigmoid,
  Tanh,
  Relu,
  Affine,
  LeakyRelu,
  ThresholdedRelu,
  ScaledTanh,
  HardSigmoid,
  Elu,
  Softsign,
  Softplus
};

struct ActInfo {
  const char* name;
  ActFn fn;
  bool usesAlpha, usesBeta;
  float alpha, beta;  // defaults
};

// Defaults are those of the ONNX operators of the same name, as the spec says. ONNX Runtime uses 0
// for the alpha and beta of Affine, ScaledTanh and ThresholdedRelu when the model gives none, so a
// model that relies on those three defaults gets other numbers there (tests give them explicitly).
constexpr ActInfo kActivations[] = {
    {"Sigmoid", ActFn::Sigmoid, false, false, 0.f, 0.f},
    {"Tanh", ActFn::Tanh, false, false, 0.f, 0.f},
    {"Relu", ActFn::Relu, false, false, 0.f, 0.f},
    {"Affine", ActFn::Affine, true, true, 1.f, 0.f},
    {"LeakyRelu", ActFn::LeakyRelu, true, false, 0.01f, 0.f},
    {"ThresholdedRelu", ActFn::ThresholdedRelu, true, false, 1.f, 0.f},
    {"ScaledTanh", ActFn::ScaledTanh, true, true, 1.f, 1.f},
    {"HardSigmoid", ActFn::HardSigmoid, true, true, 0.2f, 0.5f},
    {"Elu", ActFn::Elu, true, false, 1.f, 0.f},
    {"Softsign", ActFn::Softsign, false, false, 0.f, 0.f},
    {"Softplus", ActFn::Softplus, false, false, 0.f, 0.f},
};

// e^x for 8 floats (Cephes' expf: range reduction by ln 2 in two parts, degree-5 polynomial, about
// 1 ulp); x is clamped to where e^x is a finite float. Sigmoid and tanh dominate a recurrent
// step once the product is small, and glibc's scalar expf/tanhf cost several times this.
inline __m256 expAvx(__m256 x) {
  // Bound first: maxps/minps return their second operand for a NaN, so NaN passes through.
  x = _mm256_min_ps(_mm256_set1_ps(88.3f), _mm256_max_ps(_mm256_set1_ps(-87.3f), x));
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// The AVX-512 forms of expAvx, sigmoidInPlace and tanhInPlace: the same operations lane by lane
// (min/max, round to nearest, FMAs, divisions), so each value gets the AVX2 form's bits. They take
// the first n/16*16 values; the AVX2 loops then the rest, so the vector/scalar split is the same.
// GCC 12 warns that the intrinsics' own _mm512_undefined_* pass-through operands "may be used
// uninitialized" (a false positive of its avx512fintrin.h); silenced for these functions only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) inline __m512 expAvx512(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.3f), _mm512_max_ps(_mm512_set1_ps(-87.3f), x));
  const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.f)));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fx), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

__attribute__((target("avx512f"))) int64_t sigmoidAvx512(float* x, int64_t n) {
  int64_t i = 0;
  const __m512 one = _mm512_set1_ps(1.f);
  for (; i + 16 <= n; i += 16) {
    const __m512 e = expAvx512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_loadu_ps(x + i)));
    _mm512_storeu_ps(x + i, _mm512_div_ps(one, _mm512_add_ps(one, e)));
  }
  return i;
}

__attribute__((target("avx512f"))) int64_t tanhAvx512(float* x, int64_t n) {
  int64_t i = 0;
  const __m512 one = _mm512_set1_ps(1.f), two = _mm512_set1_ps(2.f);
  const __m512i signMask = _mm512_set1_epi32((int)0x80000000u);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 a = _mm512_castsi512_ps(_mm512_andnot_si512(signMask, _mm512_castps_si512(v)));
    const __m512 big = _mm512_sub_ps(one, _mm512_div_ps(two, _mm512_add_ps(expAvx512(_mm512_add_ps(a, a)), one)));
    const __m512 z = _mm512_mul_ps(v, v);
    __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954e-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531e-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036e-1f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422e-1f));
    const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), v, v);
    const __mmask16 isSmall = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
    const __m512 large = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(big), _mm512_and_si512(signMask, _mm512_castps_si512(v))));
    _mm512_storeu_ps(x + i, _mm512_mask_blend_ps(isSmall, large, small));
  }
  return i;
}
#pragma GCC diagnostic pop

// Whether the gate activations take the AVX-512 forms: where the step product does
// (RecurrentStepMatrix::bestIsa, QS_STEP_ISA=avx2 turns both off).
bool wideActivations() {
  static const bool wide = RecurrentStepMatrix::bestIsa() == RecurrentStepMatrix::Isa::Avx512;
  return wide;
}

void sigmoidInPlace(float* x, int64_t n) {
  int64_t i = wideActivations() ? sigmoidAvx512(x, n) : 0;
  const __m256 one = _mm256_set1_ps(1.f);
  for (; i + 8 <= n; i += 8) {
    const __m256 e = expAvx(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_loadu_ps(x + i)));
    _mm256_storeu_ps(x + i, _mm256_div_ps(one, _mm256_add_ps(one, e)));
  }
  for (; i < n; ++i) x[i] = 1.f / (1.f + std::exp(-x[i]));
}

// tanh: an odd polynomial below |x| = 0.625 (Cephes' tanhf), where 1 - 2 / (e^2|x| + 1) would
// lose the small values to cancellation; that form above, with the sign put back.
void tanhInPlace(float* x, int64_t n) {
  int64_t i = wideActivations() ? tanhAvx512(x, n) : 0;
  const __m256 one = _mm256_set1_ps(1.f), two = _mm256_set1_ps(2.f);
  const __m256 signMask = _mm256_set1_ps(-0.f);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 a = _mm256_andnot_ps(signMask, v);
    const __m256 big = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(expAvx(_mm256_add_ps(a, a)), one)));
    const __m256 z = _mm256_mul_ps(v, v);
    __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), v, v);
    const __m256 isSmall = _mm256_cmp_ps(a, _mm256_set1_ps(0.625f), _CMP_LT_OQ);
    const __m256 large = _mm256_or_ps(big, _mm256_and_ps(signMask, v));
    _mm256_storeu_ps(x + i, _mm256_blendv_ps(large, small, isSmall));
  }
  for (; i < n; ++i) x[i] = std::tanh(x[i]);
}

struct Activation {
  ActFn fn = ActFn::Sigmoid;
  float alpha = 0.f, beta = 0.f;

  // In place over n values; the switch is outside the loops so that each loop vectorises.
  void apply(float* x, int64_t n) const {
    switch (fn) {
      case ActFn::Sigmoid:
        sigmoidInPlace(x, n);
        break;
      case ActFn::Tanh:
        tanhInPlace(x, n);
        break;
      case ActFn::Relu:
        for (int64_t i = 0; i < n; ++i) x[i] = std::max(x[i], 0.f);
        break;
      case ActFn::Affine:
        for (int64_t i = 0; i < n; ++i) x[i] = alpha * x[i] + beta;
        break;
      case ActFn::LeakyRelu:
        for (int64_t i = 0; i < n; ++i) x[i] = x[i] >= 0.f ? x[i] : alpha * x[i];
        break;
      case ActFn::ThresholdedRelu:
        for (int64_t i = 0; i < n; ++i) x[i] = x[i] > alpha ? x[i] : 0.f;
        break;
      case ActFn::ScaledTanh:
        for (int64_t i = 0; i < n; ++i) x[i] = alpha * std::tanh(beta * x[i]);
        break;
      case ActFn::HardSigmoid:
        for (int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(alpha * x[i] + beta, 0.f), 1.f);
        break;
      case ActFn::Elu:
        for (int64_t i = 0; i < n; ++i) x[i] = x[i] >= 0.f ? x[i] : alpha * (std::exp(x[i]) - 1.f);
        break;
      case ActFn::Softsign:
        for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.f + std::fabs(x[i]));
        break;
      case ActFn::Softplus:
        // log(1 + e^x) without overflowing e^x for large x.
        for (int64_t i = 0; i < n; ++i)
          x[i] = x[i] > 0.f ? x[i] + std::log1p(std::exp(-x[i])) : std::log1p(std::exp(x[i]));
        break;
    }
  }
};

std::string lowercase(std::string s) {
  for (char& ch : s) ch = (char)std::tolower((unsigned char)ch);
  return s;
}

struct RecurrentParams {
  Cell cell = Cell::Rnn;
  int64_t hiddenSize = 0;  // 0: not given, taken from R
  int64_t directions = 1;
  bool reverse = false;          // direction "reverse" (one direction, run backwards)
  std::vector<Activation> acts;  // activationsPerDirection(cell) per direction
  bool hasClip = false;
  float clip = 0.f;
  int64_t layout = 0;  // 0: X [seq, batch, input]; 1: X [batch, seq, input]
  bool inputForget = false;
  bool linearBeforeReset = false;
  bool wantOutput[3] = {false, false, false};
};

// dst[j] = a[j] + b[j] (dst may be neither): the gate sums, which the compiler leaves scalar
// because it cannot tell the gate buffers from the projection and the product apart.
void addRows(float* dst, const float* a, const float* b, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(dst + j, _mm256_add_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j)));
  for (; j < n; ++j) dst[j] = a[j] + b[j];
}

void clipValues(float* x, int64_t n, float c) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], -c), c);
}

class RecurrentKernel : public Kernel {
 public:
  explicit RecurrentKernel(RecurrentParams p) : m_p(std::move(p)) {}

  // Weights packed at load, per direction, when W and R are constants of the expected layout:
  // W^T in the GEMM's 16-column panels for the input projection, R in the step's 8-row panels
  // (GRU: its z,r rows and its candidate rows apart). A run uses them when its W and R have the
  // shapes they were packed from, and packs its own otherwise.
  void prepack(const Tensor* W, const Tensor* R, const Tensor* B, bool library) {
    const int64_t G = gateCount(m_p.cell), D = m_p.directions;
    if (!R || R->dtype() != DType::Float || R->rank() != 3 || R->dim(0) != D || R->dim(2) < 1 ||
        R->dim(1) != G * R->dim(2))
      return;
    const int64_t H = R->dim(2), GH = G * H;
    const bool gru = m_p.cell == Cell::Gru;
    for (int64_t d = 0; d < D; ++d) {
      const float* rd = R->data<float>() + d * GH * H;
      m_rMain.emplace_back(rd, gru ? 2 * H : GH, H);
      m_rCand.emplace_back(rd + (gru ? 2 * H * H : 0), gru ? H : 0, H);
    }
    m_packedR = *R;
    if (!W || W->dtype() != DType::Float || W->rank() != 3 || W->dim(0) != D || W->dim(1) != GH || W->dim(2) < 1)
      return;
    const int64_t I = W->dim(2);
    for (int64_t d = 0; d < D; ++d) m_wPacked.emplace_back(W->data<float>() + d * GH * I, I, true, I, GH);
    m_packedW = *W;
    // oneDNN's matmul for the projection X W^T + bias, where it runs AVX-512: on lstm_speech at
    // batch 8 (680 x 384 x 64..192) it took a quarter off the node (docs/performance.md, "LSTM at
    // batch 8"). The bias is folded in only when B is a constant too.
    if (!library || !DnnlMatMul::preferred()) return;
    const bool constBias = B && B->dtype() == DType::Float && B->rank() == 2 && B->dim(0) == D && B->dim(1) == 2 * GH;
    for (int64_t d = 0; d < D; ++d) {
      const std::vector<float> bias =
          constBias ? projectionBias(B->data<float>() + d * 2 * GH, H) : std::vector<float>();
      auto mm = DnnlMatMul::create(W->data<float>() + d * GH * I, I, true, I, GH, constBias ? bias.data() : nullptr,
                                   1.f, false);
      if (!mm) {
        m_wLibrary.clear();
        return;
      }
      m_wLibrary.push_back(std::move(mm));
    }
    if (constBias) m_libraryB = *B;
  }

  // The biases that do not depend on the state, added to the projection: Wb + Rb, except GRU's Rbh
  // under linear_before_reset, which goes inside r * (...). wb: one direction's [Wb, Rb] (2 * GH).
  std::vector<float> projectionBias(const float* wb, int64_t H) const {
    const int64_t GH = gateCount(m_p.cell) * H;
    const float* rb = wb + GH;
    std::vector<float> bias(wb, wb + GH);
    const bool keepRbH = m_p.cell == Cell::Gru && m_p.linearBeforeReset;
    for (int64_t k = 0; k < (keepRbH ? 2 * H : GH); ++k) bias[(size_t)k] += rb[k];
    return bias;
  }

  Status run(KernelContext& ctx) const override {
    const Cell cell = m_p.cell;
    const char* op = cellName(cell);
    auto bad = [](std::string m) { return kernelError(StatusCode::InvalidArgument, std::move(m)); };
    if (!ctx.hasInput(0) || !ctx.hasInput(1) || !ctx.hasInput(2))
      return bad(std::string(op) + " needs inputs X, W and R");
    static const char* names[] = {"X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"};
    for (size_t i = 0; i < ctx.inputCount() && i < maxInputs(cell); ++i) {
      if (i == 4 || !ctx.hasInput(i)) continue;
      if (ctx.input(i).dtype() != DType::Float)
        return kernelError(StatusCode::Unsupported, std::string(op) + " supports float32 only, input " + names[i] +
                                                        " is " + dtypeName(ctx.input(i).dtype()));
    }
    const Tensor& X = ctx.input(0);
    const Tensor& W = ctx.input(1);
    const Tensor& R = ctx.input(2);
    const Tensor* B = ctx.hasInput(3) ? &ctx.input(3) : nullptr;
    const Tensor* seqLens = ctx.hasInput(4) ? &ctx.input(4) : nullptr;
    const Tensor* initH = ctx.hasInput(5) ? &ctx.input(5) : nullptr;
    const Tensor* initC = cell == Cell::Lstm && ctx.hasInput(6) ? &ctx.input(6) : nullptr;
    const Tensor* P = cell == Cell::Lstm && ctx.hasInput(7) ? &ctx.input(7) : nullptr;

    const bool batchFirst = m_p.layout == 1;
    if (X.rank() != 3)
      return bad("X must have rank 3 (" + std::string(batchFirst ? "[batch, seq, input]" : "[seq, batch, input]") +
                 "), got " + shapeToString(X.shape()));
    const int64_t S = batchFirst ? X.dim(1) : X.dim(0);
    const int64_t N = batchFirst ? X.dim(0) : X.dim(1);
    const int64_t I = X.dim(2);
    // A zero input size or sequence length would leave the other dims of X unbounded by any data
    // (X has no elements), so a hostile shape could ask for any amount of output or of steps.
    if (S < 1) return bad("X " + shapeToString(X.shape()) + " has seq_length 0");
    if (I < 1) return bad("X " + shapeToString(X.shape()) + " has input_size 0");
    const int64_t D = m_p.directions, G = gateCount(cell);

    if (R.rank() != 3) return bad("R must have rank 3, got " + shapeToString(R.shape()));
    const int64_t H = R.dim(2);
    if (H < 1) return bad("R " + shapeToString(R.shape()) + " gives hidden_size " + std::to_string(H));
    if (m_p.hiddenSize != 0 && m_p.hiddenSize != H)
      return bad("attribute hidden_size is " + std::to_string(m_p.hiddenSize) + " but R has shape " +
                 shapeToString(R.shape()) + " (hidden_size " + std::to_string(H) + ")");
    // R holds D*G*H*H elements, so past this check G*H and H*H are bounded by real data.
    const std::string gatesH = (G == 1 ? std::string() : std::to_string(G) + "*") + "hidden_size";
    if (R.dim(0) != D || R.dim(1) % G != 0 || R.dim(1) / G != H)
      return bad("R has shape " + shapeToString(R.shape()) + ", expected [" + std::to_string(D) + "," +
                 std::to_string(G * H) + "," + std::to_string(H) + "] ([num_directions, " + gatesH + ", hidden_size])");
    const int64_t GH = G * H;
    if (W.rank() != 3 || W.dim(0) != D || W.dim(1) != GH || W.dim(2) != I)
      return bad("W has shape " + shapeToString(W.shape()) + ", expected [" + std::to_string(D) + "," +
                 std::to_string(GH) + "," + std::to_string(I) + "] ([num_directions, " + gatesH + ", input_size])");
    if (B && (B->rank() != 2 || B->dim(0) != D || B->dim(1) != 2 * GH))
      return bad("B has shape " + shapeToString(B->shape()) + ", expected [" + std::to_string(D) + "," +
                 std::to_string(2 * GH) + "] ([num_directions, 2*" + gatesH + "])");
    if (P && (P->rank() != 2 || P->dim(0) != D || P->dim(1) != 3 * H))
      return bad("P has shape " + shapeToString(P->shape()) + ", expected [" + std::to_string(D) + "," +
                 std::to_string(3 * H) + "] ([num_directions, 3*hidden_size])");
    const Shape stateShape = batchFirst ? Shape{N, D, H} : Shape{D, N, H};
    for (const Tensor* t : {initH, initC}) {
      if (t && t->shape() != stateShape)
        return bad(std::string(t == initH ? "initial_h" : "initial_c") + " has shape " + shapeToString(t->shape()) +
                   ", expected " + shapeToString(stateShape));
    }
    std::vector<int64_t> lens((size_t)N, S);
    if (seqLens) {
      if (seqLens->dtype() != DType::Int32 && seqLens->dtype() != DType::Int64)
        return bad("sequence_lens must be int32, got " + dtypeName(seqLens->dtype()));
      if (seqLens->rank() != 1 || seqLens->dim(0) != N)
        return bad("sequence_lens has shape " + shapeToString(seqLens->shape()) + ", expected [" + std::to_string(N) +
                   "] (batch_size)");
      lens = seqLens->toInt64Vector();
      for (int64_t b = 0; b < N; ++b) {
        const int64_t len = lens[(size_t)b];
        if (len < 0 || len > S)
          return bad("sequence_lens[" + std::to_string(b) + "] is " + std::to_string(len) + ", outside [0, " +
                     std::to_string(S) + "] (seq_length)");
      }
    }
    // With an empty batch there are no steps to run, whatever seq_length says.
    if (N > 0 && (checkedNumel({S, N, GH}, (int64_t)1 << 40) < 0 || checkedNumel({S, N, D, H}, (int64_t)1 << 40) < 0))
      return bad("X " + shapeToString(X.shape()) + " with hidden_size " + std::to_string(H) + " is too large");

    // Outputs (zeros: steps past a sequence's length stay zero in Y).
    const Shape yShape = batchFirst ? Shape{N, S, D, H} : Shape{S, D, N, H};
    auto want = [&](size_t o) { return o < ctx.outputCount() && m_p.wantOutput[o]; };
    Tensor Y = want(0) ? Tensor::zeros(DType::Float, yShape) : Tensor();
    float* y = want(0) ? Y.data<float>() : nullptr;
    auto yOffset = [&](int64_t t, int64_t d, int64_t b) {
      return batchFirst ? ((b * S + t) * D + d) * H : ((t * D + d) * N + b) * H;
    };
    auto stateOffset = [&](int64_t d, int64_t b) { return batchFirst ? (b * D + d) * H : (d * N + b) * H; };

    // Per direction state [N, H], filled from initial_h / initial_c.
    std::vector<float> hState((size_t)(D * N * H), 0.f), cState(cell == Cell::Lstm ? (size_t)(D * N * H) : 0, 0.f);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t b = 0; b < N; ++b) {
        if (initH)
          std::memcpy(&hState[(size_t)((d * N + b) * H)], initH->data<float>() + stateOffset(d, b),
                      sizeof(float) * (size_t)H);
        if (initC)
          std::memcpy(&cState[(size_t)((d * N + b) * H)], initC->data<float>() + stateOffset(d, b),
                      sizeof(float) * (size_t)H);
      }

    if (N > 0) {
      const int64_t maxLen = *std::max_element(lens.begin(), lens.end());
      // The input projection runs on chunks of steps, so that its buffer stays near
      // kProjectionFloats however large seq_length * batch * gates * hidden_size is. A chunk first
      // gathers the X rows its steps read: running backwards, each sequence starts at its own length.
      // 1 MiB: at hidden_size 256 and batch 1 a chunk still multiplies 256 rows at once.
      constexpr int64_t kProjectionFloats = (int64_t)1 << 18;
      const int64_t chunk = std::max<int64_t>(1, std::min(maxLen, kProjectionFloats / (N * GH)));
      // One direction, on `threads` threads; directions share no state, so a bidirectional node
      // runs its two directions at once, one per thread, when it has two (each step of a small
      // recurrence is too short to split across threads: the directions are the parallelism).
      auto runDirection = [&](int64_t d, int threads) {
        // As KernelContext::parallelFor, on this direction's threads.
        auto parallelRows = [&](int64_t n, int64_t g, const std::function<void(int64_t, int64_t)>& fn) {
          parallelFor(threads, n, 4 * g, fn);
        };
        std::vector<float> xs((size_t)(chunk * N * I)), xw((size_t)(chunk * N * GH));
        std::vector<float> hr((size_t)(GH * N));
        // GRU: the activated z and r per row, r * H(t-1) (linear_before_reset=0) and its product by Rh.
        std::vector<float> zr, rh, hrH;
        if (cell == Cell::Gru) {
          zr.resize((size_t)(N * 2 * H));
          rh.assign((size_t)(N * H), 0.f);
          hrH.resize((size_t)(H * N));
        }
        const bool backward = m_p.reverse || d == 1;
        const float* wd = W.data<float>() + d * GH * I;
        const float* rd = R.data<float>() + d * GH * H;
        // Biases that do not depend on the state, added to the projection; GRU with
        // linear_before_reset keeps Rbh apart, it goes inside r * (...).
        std::vector<float> bias;
        const float* rbH = nullptr;
        if (B) {
          const float* wb = B->data<float>() + d * 2 * GH;
          bias = projectionBias(wb, H);
          if (cell == Cell::Gru && m_p.linearBeforeReset) rbH = wb + GH + 2 * H;
        }
        // What was made at load (packed W and R, oneDNN's projection with the bias folded in) serves
        // only while W, R and B are the constants it was made from: an input transform (fake
        // quantization) hands other tensors of the same shapes.
        auto madeFrom = [](const Tensor& t, const Tensor& source) {
          return t.sharesBufferWith(source) && t.shape() == source.shape();
        };
        const DnnlMatMul* library = nullptr;
        if ((int64_t)m_wLibrary.size() == D && madeFrom(W, m_packedW) &&
            (B ? B->sharesBufferWith(m_libraryB) : m_libraryB.numel() == 0))
          library = m_wLibrary[(size_t)d].get();
        const float* pd = P ? P->data<float>() + d * 3 * H : nullptr;
        const Activation* act = &m_p.acts[(size_t)d * activationsPerDirection(cell)];
        float* h = hState.data() + d * N * H;
        float* c = cell == Cell::Lstm ? cState.data() + d * N * H : nullptr;
        // GRU's candidate gate uses its own slice of R (after z and r), multiplied separately.
        const int64_t mainRows = cell == Cell::Gru ? 2 * H : GH;
        const bool rReady = (int64_t)m_rMain.size() == D && madeFrom(R, m_packedR) &&
                            m_rMain[(size_t)d].rows() == mainRows && m_rMain[(size_t)d].depth() == H;
        RecurrentStepMatrix rMainOwn, rCandOwn;
        if (!rReady) {
          rMainOwn = RecurrentStepMatrix(rd, mainRows, H);
          rCandOwn = RecurrentStepMatrix(rd + (cell == Cell::Gru ? 2 * H * H : 0), cell == Cell::Gru ? H : 0, H);
        }
        const RecurrentStepMatrix& rMain = rReady ? m_rMain[(size_t)d] : rMainOwn;
        const RecurrentStepMatrix& rCand = rReady ? m_rCand[(size_t)d] : rCandOwn;
        const bool wReady = (int64_t)m_wPacked.size() == D && madeFrom(W, m_packedW) &&
                            m_wPacked[(size_t)d].rows() == I && m_wPacked[(size_t)d].cols() == GH;
        const PackedPanels wOwn = wReady ? PackedPanels() : PackedPanels(wd, I, true, I, GH);
        const PackedPanels& wPacked = wReady ? m_wPacked[(size_t)d] : wOwn;
        const int64_t grain = std::max<int64_t>(1, 8192 / GH);

        for (int64_t s = 0; s < maxLen; ++s) {
          auto timeOf = [&](int64_t b) { return backward ? lens[(size_t)b] - 1 - s : s; };
          if (s % chunk == 0) {
            const int64_t rows = std::min(chunk, maxLen - s) * N;
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t step = s + r / N, b = r % N;
              float* dst = xs.data() + r * I;
              if (step >= lens[(size_t)b]) {
                std::fill_n(dst, I, 0.f);  // past the sequence: computed, never read
                continue;
              }
              const int64_t t = backward ? lens[(size_t)b] - 1 - step : step;
              std::memcpy(dst, X.data<float>() + (batchFirst ? b * S + t : t * N + b) * I, sizeof(float) * (size_t)I);
            }
            const bool byLibrary = library && library->run(xs.data(), I, rows, xw.data(), GH, threads).isOk();
            if (!byLibrary) sgemmPacked(false, rows, 1.f, xs.data(), I, wPacked, false, xw.data(), GH, threads);
            if (!bias.empty() && !byLibrary)
              parallelRows(rows, std::max<int64_t>(1, 16384 / GH), [&](int64_t r0, int64_t r1) {
                for (int64_t r = r0; r < r1; ++r) {
                  float* row = xw.data() + r * GH;
                  for (int64_t k = 0; k < GH; ++k) row[k] += bias[(size_t)k];
                }
              });
          }
          auto xwRow = [&](int64_t b) { return xw.data() + ((s % chunk) * N + b) * GH; };
          auto emit = [&](int64_t b) {
            if (y) std::memcpy(y + yOffset(timeOf(b), d, b), h + b * H, sizeof(float) * (size_t)H);
          };
          rMain.multiply(h, N, hr.data(), threads);
          if (cell == Cell::Gru && m_p.linearBeforeReset) rCand.multiply(h, N, hrH.data(), threads);

          if (cell == Cell::Rnn) {
            parallelRows(N, grain, [&](int64_t b0, int64_t b1) {
              for (int64_t b = b0; b < b1; ++b) {
                if (s >= lens[(size_t)b]) continue;
                const float* xr = xwRow(b);
                float* hb = h + b * H;
                for (int64_t j = 0; j < H; ++j) hb[j] = xr[j] + hr[(size_t)(b * H + j)];
                if (m_p.hasClip) clipValues(hb, H, m_p.clip);
                act[0].apply(hb, H);
                emit(b);
              }
            });
          } else if (cell == Cell::Lstm) {
            parallelRows(N, grain, [&](int64_t b0, int64_t b1) {
              float* tmp = gemmScratch(1, (size_t)(4 * H));
              float *gi = tmp, *gf = tmp + H, *gc = tmp + 2 * H, *go = tmp + 3 * H;
              for (int64_t b = b0; b < b1; ++b) {
                if (s >= lens[(size_t)b]) continue;
                const float* xr = xwRow(b);
                float* hb = h + b * H;
                float* cb = c + b * H;
                const float* hrb = hr.data() + b * GH;
                addRows(gi, xr, hrb, H);
                addRows(go, xr + H, hrb + H, H);
                addRows(gf, xr + 2 * H, hrb + 2 * H, H);
                addRows(gc, xr + 3 * H, hrb + 3 * H, H);
                if (pd)
                  for (int64_t j = 0; j < H; ++j) {
                    gi[j] += pd[j] * cb[j];
                    gf[j] += pd[2 * H + j] * cb[j];
                  }
                if (m_p.hasClip) clipValues(gi, 3 * H, m_p.clip);  // gi, gf, gc
                act[0].apply(gi, H);
                if (m_p.inputForget) {
                  // Coupled gates: forget what is let in.
                  for (int64_t j = 0; j < H; ++j) gf[j] = 1.f - gi[j];
                } else {
                  act[0].apply(gf, H);
                }
                act[1].apply(gc, H);
                for (int64_t j = 0; j < H; ++j) cb[j] = gf[j] * cb[j] + gi[j] * gc[j];
                // The output gate peeks at the new cell state.
                if (pd)
                  for (int64_t j = 0; j < H; ++j) go[j] += pd[H + j] * cb[j];
                if (m_p.hasClip) clipValues(go, H, m_p.clip);
                act[0].apply(go, H);
                std::memcpy(gc, cb, sizeof(float) * (size_t)H);
                act[2].apply(gc, H);
                for (int64_t j = 0; j < H; ++j) hb[j] = go[j] * gc[j];
                emit(b);
              }
            });
          } else {
            // GRU, in two passes when linear_before_reset=0: the candidate needs (r * H(t-1)) Rh^T
            // for the whole batch before any row's state may change.
            parallelRows(N, grain, [&](int64_t b0, int64_t b1) {
              for (int64_t b = b0; b < b1; ++b) {
                if (s >= lens[(size_t)b]) continue;
                const float* xr = xwRow(b);
                float* g = zr.data() + b * 2 * H;
                for (int64_t j = 0; j < 2 * H; ++j) g[j] = xr[j] + hr[(size_t)(b * 2 * H + j)];
                if (m_p.hasClip) clipValues(g, 2 * H, m_p.clip);
                act[0].apply(g, 2 * H);
                if (!m_p.linearBeforeReset) {
                  const float* hb = h + b * H;
                  float* rhb = rh.data() + b * H;
                  for (int64_t j = 0; j < H; ++j) rhb[j] = g[H + j] * hb[j];
                }
              }
            });
            if (!m_p.linearBeforeReset) rCand.multiply(rh.data(), N, hrH.data(), threads);
            parallelRows(N, grain, [&](int64_t b0, int64_t b1) {
              float* cand = gemmScratch(1, (size_t)H);
              for (int64_t b = b0; b < b1; ++b) {
                if (s >= lens[(size_t)b]) continue;
                const float* xr = xwRow(b) + 2 * H;
                const float* z = zr.data() + b * 2 * H;
                const float* r = z + H;
                float* hb = h + b * H;
                if (m_p.linearBeforeReset) {
                  for (int64_t j = 0; j < H; ++j)
                    cand[j] = xr[j] + r[j] * (hrH[(size_t)(b * H + j)] + (rbH ? rbH[j] : 0.f));
                } else {
                  for (int64_t j = 0; j < H; ++j) cand[j] = xr[j] + hrH[(size_t)(b * H + j)];
                }
                if (m_p.hasClip) clipValues(cand, H, m_p.clip);
                act[1].apply(cand, H);
                for (int64_t j = 0; j < H; ++j) hb[j] = (1.f - z[j]) * cand[j] + z[j] * hb[j];
                emit(b);
              }
            });
          }
        }
      };
      if (D == 2 && ctx.threads >= 2) {
        parallelForEach(2, 2, [&](int64_t d) { runDirection(d, std::max(1, ctx.threads / 2)); });
      } else {
        for (int64_t d = 0; d < D; ++d) runDirection(d, ctx.threads);
      }
    }

    // A sequence of length 0 has no last step: its final states are zero, as ONNX Runtime makes
    // them (the spec says nothing), rather than the initial state passed through.
    for (int64_t b = 0; b < N; ++b) {
      if (lens[(size_t)b] != 0) continue;
      for (int64_t d = 0; d < D; ++d) {
        std::fill_n(hState.begin() + (d * N + b) * H, H, 0.f);
        if (cell == Cell::Lstm) std::fill_n(cState.begin() + (d * N + b) * H, H, 0.f);
      }
    }

    if (want(0)) ctx.outputs[0] = std::move(Y);
    for (size_t o = 1; o <= 2; ++o) {
      if (!want(o) || (o == 2 && cell != Cell::Lstm)) continue;
      const std::vector<float>& state = o == 1 ? hState : cState;
      Tensor t(DType::Float, stateShape);
      for (int64_t d = 0; d < D; ++d)
        for (int64_t b = 0; b < N; ++b)
          std::memcpy(t.data<float>() + stateOffset(d, b), &state[(size_t)((d * N + b) * H)],
                      sizeof(float) * (size_t)H);
      ctx.outputs[o] = std::move(t);
    }
    return Status::ok();
  }

 private:
  RecurrentParams m_p;
  std::vector<PackedPanels> m_wPacked;               // per direction, or empty
  std::vector<RecurrentStepMatrix> m_rMain, m_rCand;    // per direction, or empty
  std::vector<std::unique_ptr<DnnlMatMul>> m_wLibrary;  // per direction, or empty
  Tensor m_packedW, m_packedR;                          // what m_wPacked (and m_wLibrary), m_rMain were made from
  Tensor m_libraryB;                                    // the constant B folded into m_wLibrary, or empty
};

Result<std::unique_ptr<Kernel>> createRecurrent(const KernelInit& init, Cell cell) {
  AttrReader a(init);
  RecurrentParams p;
  p.cell = cell;
  const std::string direction = a.s("direction", "forward");
  const int64_t hiddenSize = a.i("hidden_size", 0);
  const std::vector<std::string> actNames = a.strings("activations");
  const std::vector<float> alphas = a.floats("activation_alpha");
  const std::vector<float> betas = a.floats("activation_beta");
  p.clip = a.f("clip", 0.f);
  p.hasClip = a.has("clip");
  p.layout = a.i("layout", 0);
  const int64_t inputForget = cell == Cell::Lstm ? a.i("input_forget", 0) : 0;
  const int64_t linearBeforeReset = cell == Cell::Gru ? a.i("linear_before_reset", 0) : 0;
  if (!a.ok()) return a.status();

  if (direction == "forward" || direction == "reverse") {
    p.directions = 1;
    p.reverse = direction == "reverse";
  } else if (direction == "bidirectional") {
    p.directions = 2;
  } else {
    a.fail("attribute 'direction' is '" + direction + "', expected forward, reverse or bidirectional");
  }
  if (a.has("hidden_size") && hiddenSize <= 0)
    a.fail("attribute 'hidden_size' is " + std::to_string(hiddenSize) + ", must be positive");
  p.hiddenSize = hiddenSize;
  // NaN fails this test too.
  if (p.hasClip && !(p.clip > 0.f)) a.fail("attribute 'clip' is " + std::to_string(p.clip) + ", must be positive");
  if (p.layout != 0 && p.layout != 1) a.fail("attribute 'layout' is " + std::to_string(p.layout) + ", expected 0 or 1");
  if (p.layout != 0 && init.opset < 14)
    a.fail("attribute 'layout' needs opset 14, the model uses opset " + std::to_string(init.opset));
  if (inputForget != 0 && inputForget != 1)
    a.fail("attribute 'input_forget' is " + std::to_string(inputForget) + ", expected 0 or 1");
  if (linearBeforeReset != 0 && linearBeforeReset != 1)
    a.fail("attribute 'linear_before_reset' is " + std::to_string(linearBeforeReset) + ", expected 0 or 1");
  p.inputForget = inputForget == 1;
  p.linearBeforeReset = linearBeforeReset == 1;

  const size_t perDir = activationsPerDirection(cell);
  std::vector<std::string> names = actNames;
  if (names.empty()) {
    static const std::vector<std::string> lstm = {"Sigmoid", "Tanh", "Tanh"}, gru = {"Sigmoid", "Tanh"}, rnn = {"Tanh"};
    const auto& def = cell == Cell::Lstm ? lstm : cell == Cell::Gru ? gru : rnn;
    for (int64_t d = 0; d < p.directions; ++d) names.insert(names.end(), def.begin(), def.end());
  } else if (p.directions == 2 && names.size() == perDir) {
    // One set for both directions, as ONNX Runtime accepts.
    names.insert(names.end(), actNames.begin(), actNames.end());
  }
  if (names.size() != perDir * (size_t)p.directions) {
    a.fail("attribute 'activations' has " + std::to_string(actNames.size()) + " names, expected " +
           std::to_string(perDir * (size_t)p.directions) + " (" + std::to_string(perDir) + " per direction)");
  } else {
    // alpha and beta values are consumed in order by the functions that take them.
    size_t nextAlpha = 0, nextBeta = 0;
    for (const std::string& name : names) {
      const ActInfo* info = nullptr;
      for (const ActInfo& k : kActivations)
        if (lowercase(name) == lowercase(k.name)) info = &k;
      if (!info) {
        a.fail("unknown activation '" + name +
               "' in attribute 'activations' (expected Sigmoid, Tanh, Relu, Affine, LeakyRelu, ThresholdedRelu, "
               "ScaledTanh, HardSigmoid, Elu, Softsign or Softplus)");
        break;
      }
      Activation act{info->fn, info->alpha, info->beta};
      if (info->usesAlpha && nextAlpha < alphas.size()) act.alpha = alphas[nextAlpha++];
      if (info->usesBeta && nextBeta < betas.size()) act.beta = betas[nextBeta++];
      p.acts.push_back(act);
    }
  }
  const Node& node = init.node;
  if (node.inputs.size() > maxInputs(cell))
    a.fail(std::string(cellName(cell)) + " takes at most " + std::to_string(maxInputs(cell)) +
           " inputs, the node has " + std::to_string(node.inputs.size()));
  if (node.outputs.size() > maxOutputs(cell))
    a.fail(std::string(cellName(cell)) + " has at most " + std::to_string(maxOutputs(cell)) +
           " outputs, the node has " + std::to_string(node.outputs.size()));
  if (!a.ok()) return a.status();
  for (size_t o = 0; o < node.outputs.size() && o < 3; ++o) p.wantOutput[o] = node.outputs[o] != kNoValue;
  auto kernel = std::make_unique<RecurrentKernel>(std::move(p));
  kernel->prepack(init.constantInput(1), init.constantInput(2),
                  node.inputs.size() > 3 ? init.constantInput(3) : nullptr, init.libraryKernels);
  return std::unique_ptr<Kernel>(std::move(kernel));
}

}  // namespace

Result<std::unique_ptr<Kernel>> createLstm(const KernelInit& init) { return createRecurrent(init, Cell::Lstm); }
Result<std::unique_ptr<Kernel>> createGru(const KernelInit& init) { return createRecurrent(init, Cell::Gru); }
Result<std::unique_ptr<Kernel>> createRnn(const KernelInit& init) { return createRecurrent(init, Cell::Rnn); }

}  // namespace qs
