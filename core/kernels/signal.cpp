// DFT 17..21, STFT 17..21, HannWindow / HammingWindow / BlackmanWindow 17..21, MelWeightMatrix
// 17..21, and the double-precision FFT behind DFT and STFT.
#include "core/kernels/signal.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "core/kernels/cast.h"
#include "core/kernels/shape_ops.h"

namespace qs {

using cd = std::complex<double>;

namespace {

// Below this a non-power-of-two length is summed directly (exact twiddles from one table, and
// cheaper than Bluestein's three FFTs of twice the length); above it Bluestein keeps O(n log n).
constexpr int64_t kNaiveMaxLength = 64;

bool isPowerOfTwo(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

Status invalid(std::string m) { return kernelError(StatusCode::InvalidArgument, std::move(m)); }

/// A scalar (rank 0 or [1]) int32/int64 input.
Status readScalarInt(const Tensor& t, const char* what, int64_t& v) {
  if (t.dtype() != DType::Int32 && t.dtype() != DType::Int64)
    return invalid(std::string(what) + " must be int32 or int64, got " + dtypeName(t.dtype()));
  if (t.numel() != 1 || t.rank() > 1)
    return invalid(std::string(what) + " must be a scalar, got shape " + shapeToString(t.shape()));
  v = t.dtype() == DType::Int64 ? t.data<int64_t>()[0] : (int64_t)t.data<int32_t>()[0];
  return Status::ok();
}

/// A scalar floating-point input (float, double, float16, bfloat16).
Status readScalarFloat(const Tensor& t, const char* what, double& v) {
  if (t.dtype() != DType::Float && t.dtype() != DType::Double && t.dtype() != DType::Float16 &&
      t.dtype() != DType::BFloat16)
    return invalid(std::string(what) + " must be a float scalar, got " + dtypeName(t.dtype()));
  if (t.numel() != 1 || t.rank() > 1)
    return invalid(std::string(what) + " must be a scalar, got shape " + shapeToString(t.shape()));
  v = t.valueAsDouble(0);
  return Status::ok();
}

/// A transform or frame length within (0, kMaxSignalLength].
Status checkLength(int64_t n, const char* what) {
  if (n <= 0) return invalid(std::string(what) + " must be positive, got " + std::to_string(n));
  if (n > kMaxSignalLength)
    return invalid(std::string(what) + " " + std::to_string(n) + " exceeds the limit of " +
                   std::to_string(kMaxSignalLength));
  return Status::ok();
}

Status checkOutput(const Shape& s) {
  if (checkedNumel(s, kMaxSignalOutput) < 0)
    return invalid("output shape " + shapeToString(s) + " has more than " + std::to_string(kMaxSignalOutput) +
                   " elements");
  return Status::ok();
}

bool isFloatingDtype(DType t) {
  return t == DType::Float || t == DType::Double || t == DType::Float16 || t == DType::BFloat16;
}

/// Runs fn.template operator()<T>() on `x` as float or double: float16 and bfloat16 inputs are
/// widened to float first and the outputs narrowed back afterwards.
template <class Fn>
Status withFloatInput(KernelContext& ctx, const Tensor& x, const char* op, Fn&& fn) {
  if (x.dtype() == DType::Float) return fn.template operator()<float>(x);
  if (x.dtype() == DType::Double) return fn.template operator()<double>(x);
  if (x.dtype() != DType::Float16 && x.dtype() != DType::BFloat16)
    return kernelError(StatusCode::Unsupported, std::string(op) + ": input dtype " + dtypeName(x.dtype()) +
                                                    " is not supported (float, double, float16, bfloat16)");
  auto wide = castTensor(x, DType::Float, true, &ctx);
  if (!wide) return wide.status();
  QS_RETURN_IF_ERROR(fn.template operator()<float>(*wide));
  auto narrow = castTensor(ctx.outputs[0], x.dtype(), true, &ctx);
  if (!narrow) return narrow.status();
  ctx.outputs[0] = std::move(*narrow);
  return Status::ok();
}

/// The signal's complex components: the last dim, 1 (real) or 2 (real, imaginary).
Status signalComponents(const Tensor& x, const char* what, int64_t& comps) {
  comps = x.rank() >= 1 ? x.dim(x.rank() - 1) : 0;
  if (comps != 1 && comps != 2)
    return invalid(std::string(what) + "'s last dim must be 1 (real) or 2 (complex), got shape " +
                   shapeToString(x.shape()));
  return Status::ok();
}

}  // namespace

// ---------------------------------------------------------------- FFT
FftPlan::FftPlan(int64_t n, bool inverse) : m_n(n) {
  const double sign = inverse ? 1.0 : -1.0;
  if (isPowerOfTwo(n)) {
    m_kind = Kind::Radix2;
    m_twiddle.resize((size_t)std::max<int64_t>(n / 2, 1));
    for (int64_t k = 0; k < n / 2; ++k) m_twiddle[(size_t)k] = std::polar(1.0, sign * 2 * std::numbers::pi * k / n);
    int bits = 0;
    while ((int64_t(1) << bits) < n) ++bits;
    m_bitrev.resize((size_t)n);
    for (int64_t i = 0; i < n; ++i) {
      int64_t r = 0;
      for (int b = 0; b < bits; ++b) r |= ((i >> b) & 1) << (bits - 1 - b);
      m_bitrev[(size_t)i] = r;
    }
  } else if (n <= kNaiveMaxLength) {
    m_kind = Kind::Naive;
    m_twiddle.resize((size_t)n);
    for (int64_t k = 0; k < n; ++k) m_twiddle[(size_t)k] = std::polar(1.0, sign * 2 * std::numbers::pi * k / n);
  } else {
    // Bluestein: 2jk = j^2 + k^2 - (k - j)^2 turns the DFT into a circular convolution of
    // x[j] c[j] with conj(c) (c[k] = e^(s pi i k^2 / n)), done by power-of-two FFTs of length
    // m >= 2n - 1. k^2 is reduced mod 2n (c's period) so the angles stay exact in double.
    m_kind = Kind::Bluestein;
    int64_t m = 1;
    while (m < 2 * n - 1) m <<= 1;
    m_chirp.resize((size_t)n);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t k2 = (k * k) % (2 * n);
      m_chirp[(size_t)k] = std::polar(1.0, sign * std::numbers::pi * (double)k2 / (double)n);
    }
    m_forward = std::make_shared<FftPlan>(m, false);
    m_backward = std::make_shared<FftPlan>(m, true);
    m_filter.assign((size_t)m, cd(0, 0));
    m_filter[0] = std::conj(m_chirp[0]);
    for (int64_t k = 1; k < n; ++k) m_filter[(size_t)k] = m_filter[(size_t)(m - k)] = std::conj(m_chirp[(size_t)k]);
    m_forward->radix2(m_filter.data());
  }
}

void FftPlan::radix2(cd* a) const {
  const int64_t n = m_n;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = m_bitrev[(size_t)i];
    if (i < j) std::swap(a[i], a[j]);
  }
  for (int64_t len = 2; len <= n; len <<= 1) {
    const int64_t half = len / 2, step = n / len;
    for (int64_t i = 0; i < n; i += len)
      for (int64_t j = 0; j < half; ++j) {
        const cd u = a[i + j], v = a[i + j + half] * m_twiddle[(size_t)(j * step)];
        a[i + j] = u + v;
        a[i + j + half] = u - v;
      }
  }
}

void FftPlan::run(cd* data, std::vector<cd>& scratch) const {
  const int64_t n = m_n;
  switch (m_kind) {
    case Kind::Radix2: radix2(data); return;
    case Kind::Naive: {
      scratch.resize((size_t)n);
      for (int64_t k = 0; k < n; ++k) {
        cd sum(0, 0);
        int64_t idx = 0;  // (j * k) mod n, kept without overflow
        for (int64_t j = 0; j < n; ++j) {
          sum += data[j] * m_twiddle[(size_t)idx];
          idx += k;
          if (idx >= n) idx -= n;
        }
        scratch[(size_t)k] = sum;
      }
      std::copy(scratch.begin(), scratch.begin() + n, data);
      return;
    }
    case Kind::Bluestein: {
      const int64_t m = m_forward->size();
      scratch.assign((size_t)m, cd(0, 0));
      for (int64_t k = 0; k < n; ++k) scratch[(size_t)k] = data[k] * m_chirp[(size_t)k];
      m_forward->radix2(scratch.data());
      for (int64_t k = 0; k < m; ++k) scratch[(size_t)k] *= m_filter[(size_t)k];
      m_backward->radix2(scratch.data());
      const double scale = 1.0 / (double)m;
      for (int64_t k = 0; k < n; ++k) data[k] = scratch[(size_t)k] * m_chirp[(size_t)k] * scale;
      return;
    }
  }
}

// ---------------------------------------------------------------- DFT (17..21)
namespace {

class DftKernel : public Kernel {
 public:
  DftKernel(int64_t axis, bool axisInput, bool inverse, bool onesided)
      : m_axis(axis), m_axisInput(axisInput), m_inverse(inverse), m_onesided(onesided) {}

  Status run(KernelContext& ctx) const override {
    if (!ctx.hasInput(0)) return invalid("DFT needs input 'input'");
    const Tensor& x = ctx.input(0);
    if (!isFloatingDtype(x.dtype()))
      return kernelError(StatusCode::Unsupported, "DFT: input dtype " + dtypeName(x.dtype()) + " is not supported");
    if (x.rank() < 2)
      return invalid("DFT input must have rank >= 2 ([batch, ..., 1 | 2]), got shape " + shapeToString(x.shape()));
    int64_t comps = 0;
    QS_RETURN_IF_ERROR(signalComponents(x, "DFT input", comps));
    int64_t axis = m_axis;
    if (m_axisInput && ctx.hasInput(2)) QS_RETURN_IF_ERROR(readScalarInt(ctx.input(2), "axis", axis));
    const int64_t r = x.rank();
    const int64_t a = axis < 0 ? axis + r : axis;
    // The last dim holds the components, so it is never the transform's axis.
    if (a < 0 || a > r - 2)
      return invalid("axis " + std::to_string(axis) + " is out of range for input shape " + shapeToString(x.shape()) +
                     " (the last dim holds the real and imaginary parts)");
    int64_t n = x.dim((int)a);
    if (ctx.hasInput(1)) {
      QS_RETURN_IF_ERROR(readScalarInt(ctx.input(1), "dft_length", n));
      QS_RETURN_IF_ERROR(checkLength(n, "dft_length"));
    } else {
      QS_RETURN_IF_ERROR(checkLength(n, "signal length along the DFT axis"));
    }
    Shape ys = x.shape();
    ys[(size_t)a] = m_onesided ? n / 2 + 1 : n;
    ys.back() = 2;
    QS_RETURN_IF_ERROR(checkOutput(ys));
    return withFloatInput(ctx, x, "DFT", [&]<class T>(const Tensor& in) -> Status {
      ctx.outputs[0] = Tensor(DTypeOf<T>::value, ys);
      transform<T>(ctx, in, a, n, comps, ys[(size_t)a]);
      return Status::ok();
    });
  }

 private:
  template <class T>
  void transform(KernelContext& ctx, const Tensor& in, int64_t a, int64_t n, int64_t comps, int64_t outLen) const {
    const Shape& s = in.shape();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= s[(size_t)d];
    for (int64_t d = a + 1; d + 1 < (int64_t)s.size(); ++d) inner *= s[(size_t)d];
    const int64_t len = s[(size_t)a], used = std::min(len, n);
    const int64_t lanes = outer * inner;
    if (lanes == 0) return;
    const FftPlan plan(n, m_inverse);
    const double scale = m_inverse ? 1.0 / (double)n : 1.0;
    const T* x = in.data<T>();
    T* y = ctx.outputs[0].data<T>();
    ctx.parallelFor(lanes, std::max<int64_t>(1, 4096 / n), [&](int64_t b, int64_t e) {
      std::vector<cd> buf((size_t)n), scratch;
      for (int64_t lane = b; lane < e; ++lane) {
        const int64_t o = lane / inner, i = lane % inner;
        std::fill(buf.begin(), buf.end(), cd(0, 0));
        for (int64_t j = 0; j < used; ++j) {
          const T* p = x + ((o * len + j) * inner + i) * comps;
          buf[(size_t)j] = cd((double)p[0], comps == 2 ? (double)p[1] : 0.0);
        }
        plan.run(buf.data(), scratch);
        for (int64_t k = 0; k < outLen; ++k) {
          T* q = y + ((o * outLen + k) * inner + i) * 2;
          q[0] = (T)(buf[(size_t)k].real() * scale);
          q[1] = (T)(buf[(size_t)k].imag() * scale);
        }
      }
    });
  }

  int64_t m_axis;
  bool m_axisInput, m_inverse, m_onesided;
};

}  // namespace

Result<std::unique_ptr<Kernel>> createDft(const KernelInit& init) {
  AttrReader a(init);
  const bool axisInput = init.opset >= 20;
  // Opset 20 moved axis to an input (default -2); an axis attribute there is not part of the op.
  const int64_t axis = axisInput ? -2 : a.i("axis", 1);
  const int64_t inverse = a.i("inverse", 0), onesided = a.i("onesided", 0);
  if (inverse != 0 && inverse != 1) a.fail("attribute 'inverse' must be 0 or 1, got " + std::to_string(inverse));
  if (onesided != 0 && onesided != 1) a.fail("attribute 'onesided' must be 0 or 1, got " + std::to_string(onesided));
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<DftKernel>(axis, axisInput, inverse != 0, onesided != 0));
}

// ---------------------------------------------------------------- STFT (17..21)
namespace {

class StftKernel : public Kernel {
 public:
  explicit StftKernel(bool onesided) : m_onesided(onesided) {}

  Status run(KernelContext& ctx) const override {
    if (!ctx.hasInput(0) || !ctx.hasInput(1)) return invalid("STFT needs inputs 'signal' and 'frame_step'");
    const Tensor& x = ctx.input(0);
    if (!isFloatingDtype(x.dtype()))
      return kernelError(StatusCode::Unsupported, "STFT: signal dtype " + dtypeName(x.dtype()) + " is not supported");
    // [batch, length, 1 | 2]; [batch, length] is taken as real, as ONNX Runtime does.
    int64_t comps = 1;
    if (x.rank() == 3) {
      QS_RETURN_IF_ERROR(signalComponents(x, "STFT signal", comps));
    } else if (x.rank() != 2) {
      return invalid("STFT signal must be [batch, length, 1 | 2], got shape " + shapeToString(x.shape()));
    }
    const int64_t batch = x.dim(0), length = x.dim(1);
    int64_t step = 0;
    QS_RETURN_IF_ERROR(readScalarInt(ctx.input(1), "frame_step", step));
    if (step <= 0) return invalid("frame_step must be positive, got " + std::to_string(step));
    const Tensor* window = ctx.hasInput(2) ? &ctx.input(2) : nullptr;
    if (window && (window->rank() != 1 || !isFloatingDtype(window->dtype())))
      return invalid("window must be a 1-D float tensor, got " + dtypeName(window->dtype()) + " " +
                     shapeToString(window->shape()));
    int64_t frame = length;
    if (ctx.hasInput(3)) {
      QS_RETURN_IF_ERROR(readScalarInt(ctx.input(3), "frame_length", frame));
      if (window && window->dim(0) != frame)
        return invalid("window has " + std::to_string(window->dim(0)) + " values but frame_length is " +
                       std::to_string(frame));
    } else if (window) {
      frame = window->dim(0);
    }
    QS_RETURN_IF_ERROR(checkLength(frame, "frame_length"));
    if (frame > length)
      return invalid("frame_length " + std::to_string(frame) + " is larger than the signal length " +
                     std::to_string(length));
    const int64_t frames = (length - frame) / step + 1;
    const int64_t bins = m_onesided ? frame / 2 + 1 : frame;
    const Shape ys{batch, frames, bins, 2};
    QS_RETURN_IF_ERROR(checkOutput(ys));
    std::vector<double> w((size_t)frame, 1.0);
    if (window)
      for (int64_t j = 0; j < frame; ++j) w[(size_t)j] = window->valueAsDouble(j);
    return withFloatInput(ctx, x, "STFT", [&]<class T>(const Tensor& in) -> Status {
      ctx.outputs[0] = Tensor(DTypeOf<T>::value, ys);
      const int64_t jobs = batch * frames;
      if (jobs == 0) return Status::ok();
      const FftPlan plan(frame, false);
      const T* xp = in.data<T>();
      T* y = ctx.outputs[0].data<T>();
      ctx.parallelFor(jobs, std::max<int64_t>(1, 4096 / frame), [&](int64_t b, int64_t e) {
        std::vector<cd> buf((size_t)frame), scratch;
        for (int64_t job = b; job < e; ++job) {
          const int64_t bi = job / frames, f = job % frames;
          const T* p = xp + (bi * length + f * step) * comps;
          for (int64_t j = 0; j < frame; ++j)
            buf[(size_t)j] = cd((double)p[j * comps], comps == 2 ? (double)p[j * comps + 1] : 0.0) * w[(size_t)j];
          plan.run(buf.data(), scratch);
          T* q = y + job * bins * 2;
          for (int64_t k = 0; k < bins; ++k) {
            q[2 * k] = (T)buf[(size_t)k].real();
            q[2 * k + 1] = (T)buf[(size_t)k].imag();
          }
        }
      });
      return Status::ok();
    });
  }

 private:
  bool m_onesided;
};

}  // namespace

Result<std::unique_ptr<Kernel>> createStft(const KernelInit& init) {
  AttrReader a(init);
  const int64_t onesided = a.i("onesided", 1);
  if (onesided != 0 && onesided != 1) a.fail("attribute 'onesided' must be 0 or 1, got " + std::to_string(onesided));
  if (!a.ok()) return a.status();
  return std::unique_ptr<Kernel>(std::make_unique<StftKernel>(onesided != 0));
}

// ---------------------------------------------------------------- windows (17..21)
namespace {

/// output_datatype of the window ops and MelWeightMatrix: a numeric ONNX type writeScalar knows.
DType readOutputDatatype(AttrReader& a) {
  const int64_t v = a.i("output_datatype", (int64_t)DType::Float);
  switch ((DType)v) {
    case DType::Float: case DType::Double: case DType::Float16: case DType::BFloat16:
    case DType::Int8: case DType::UInt8: case DType::Int16: case DType::UInt16:
    case DType::Int32: case DType::UInt32: case DType::Int64: case DType::UInt64:
      return (DType)v;
    default:
      a.fail("attribute 'output_datatype' " + std::to_string(v) + " is not a supported numeric type");
      return DType::Float;
  }
}

/// w[k] = sum_i coef[i] cos(2 pi i k / N), N = size (periodic) or size - 1 (symmetric).
Result<std::unique_ptr<Kernel>> createWindow(const KernelInit& init, std::vector<double> coef) {
  AttrReader a(init);
  const int64_t periodic = a.i("periodic", 1);
  const DType out = readOutputDatatype(a);
  if (periodic != 0 && periodic != 1) a.fail("attribute 'periodic' must be 0 or 1, got " + std::to_string(periodic));
  if (!a.ok()) return a.status();
  return makeKernel([coef = std::move(coef), periodic, out](KernelContext& ctx) -> Status {
    if (!ctx.hasInput(0)) return invalid("window op needs input 'size'");
    int64_t size = 0;
    QS_RETURN_IF_ERROR(readScalarInt(ctx.input(0), "size", size));
    if (size < 0) return invalid("window size must not be negative, got " + std::to_string(size));
    if (size > kMaxSignalLength)
      return invalid("window size " + std::to_string(size) + " exceeds the limit of " + std::to_string(kMaxSignalLength));
    Tensor y(out, {size});
    const int64_t N = periodic ? size : size - 1;
    char* dst = static_cast<char*>(y.raw());
    const size_t esz = dtypeSize(out);
    for (int64_t k = 0; k < size; ++k) {
      double v = 0;
      // A symmetric window of one value (N == 0) is the single sample 1, as numpy.hanning(1).
      if (N == 0) {
        v = 1.0;
      } else {
        for (size_t i = 0; i < coef.size(); ++i) v += coef[i] * std::cos(2 * std::numbers::pi * (double)i * k / N);
      }
      tensorops::writeScalar(out, v, dst + (size_t)k * esz);
    }
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

}  // namespace

Result<std::unique_ptr<Kernel>> createHannWindow(const KernelInit& init) { return createWindow(init, {0.5, -0.5}); }

Result<std::unique_ptr<Kernel>> createHammingWindow(const KernelInit& init) {
  return createWindow(init, {25.0 / 46.0, -(1.0 - 25.0 / 46.0)});
}

Result<std::unique_ptr<Kernel>> createBlackmanWindow(const KernelInit& init) {
  return createWindow(init, {0.42, -0.5, 0.08});
}

// ---------------------------------------------------------------- MelWeightMatrix (17..21)
Result<std::unique_ptr<Kernel>> createMelWeightMatrix(const KernelInit& init) {
  AttrReader a(init);
  const DType out = readOutputDatatype(a);
  if (!a.ok()) return a.status();
  return makeKernel([out](KernelContext& ctx) -> Status {
    for (size_t i = 0; i < 5; ++i)
      if (!ctx.hasInput(i)) return invalid("MelWeightMatrix needs 5 inputs, input " + std::to_string(i) + " is missing");
    int64_t mels = 0, dft = 0, rate = 0;
    double lower = 0, upper = 0;
    QS_RETURN_IF_ERROR(readScalarInt(ctx.input(0), "num_mel_bins", mels));
    QS_RETURN_IF_ERROR(readScalarInt(ctx.input(1), "dft_length", dft));
    QS_RETURN_IF_ERROR(readScalarInt(ctx.input(2), "sample_rate", rate));
    QS_RETURN_IF_ERROR(readScalarFloat(ctx.input(3), "lower_edge_hertz", lower));
    QS_RETURN_IF_ERROR(readScalarFloat(ctx.input(4), "upper_edge_hertz", upper));
    QS_RETURN_IF_ERROR(checkLength(mels, "num_mel_bins"));
    QS_RETURN_IF_ERROR(checkLength(dft, "dft_length"));
    if (rate <= 0) return invalid("sample_rate must be positive, got " + std::to_string(rate));
    if (!(lower >= 0) || !(upper > lower) || !std::isfinite(upper))
      return invalid("need 0 <= lower_edge_hertz < upper_edge_hertz, got " + std::to_string(lower) + " and " +
                     std::to_string(upper));
    const int64_t specBins = dft / 2 + 1;
    const Shape ys{specBins, mels};
    QS_RETURN_IF_ERROR(checkOutput(ys));
    // The ONNX reference's construction: num_mel_bins + 2 edges evenly spaced on the mel scale,
    // mapped to spectrogram bins by floor((dft_length + 1) * hz / sample_rate).
    const double lowMel = 2595.0 * std::log10(1.0 + lower / 700.0);
    const double highMel = 2595.0 * std::log10(1.0 + upper / 700.0);
    const double step = (highMel - lowMel) / (double)(mels + 2);
    std::vector<int64_t> edge((size_t)mels + 2);
    for (int64_t i = 0; i < mels + 2; ++i) {
      const double hz = 700.0 * (std::pow(10.0, ((double)i * step + lowMel) / 2595.0) - 1.0);
      const double bin = std::floor((double)(dft + 1) * hz / (double)rate);
      if (!(bin >= 0) || bin >= (double)specBins)
        return invalid("upper_edge_hertz " + std::to_string(upper) + " maps beyond the " + std::to_string(specBins) +
                       " spectrogram bins of dft_length " + std::to_string(dft) + " (keep it at or below sample_rate / 2)");
      edge[(size_t)i] = (int64_t)bin;
    }
    std::vector<double> w((size_t)(specBins * mels), 0.0);
    for (int64_t i = 0; i < mels; ++i) {
      const int64_t lo = edge[(size_t)i], mid = edge[(size_t)i + 1], hi = edge[(size_t)i + 2];
      if (mid == lo) {
        w[(size_t)(mid * mels + i)] = 1.0;
      } else {
        for (int64_t j = lo; j <= mid; ++j) w[(size_t)(j * mels + i)] = (double)(j - lo) / (double)(mid - lo);
      }
      for (int64_t j = mid; j < hi; ++j) w[(size_t)(j * mels + i)] = (double)(hi - j) / (double)(hi - mid);
    }
    Tensor y(out, ys);
    char* dst = static_cast<char*>(y.raw());
    const size_t esz = dtypeSize(out);
    for (size_t k = 0; k < w.size(); ++k) tensorops::writeScalar(out, w[k], dst + k * esz);
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

}  // namespace qs
