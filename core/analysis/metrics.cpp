#include "core/analysis/metrics.h"

#include <algorithm>
#include <cmath>

namespace qs {

double snrDb(double signal, double noise) {
  if (noise <= 0) return std::numeric_limits<double>::infinity();
  if (signal <= 0) return -std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

void ErrorAccumulator::add(const float* y, const float* q, int64_t n) {
  double s = 0, e = 0, c = 0, d = 0, m = m_maxAbs;
  for (int64_t i = 0; i < n; ++i) {
    double a = y[i], b = q[i], diff = a - b;
    s += a * a;
    e += diff * diff;
    c += b * b;
    d += a * b;
    m = std::max(m, std::fabs(diff));
  }
  m_signal += s;
  m_noise += e;
  m_cand += c;
  m_dot += d;
  m_maxAbs = m;
  m_count += n;
}

void ErrorAccumulator::add(const Tensor& y, const Tensor& q) {
  int64_t n = std::min(y.numel(), q.numel());
  if (y.dtype() == DType::Float && q.dtype() == DType::Float) {
    add(y.data<float>(), q.data<float>(), n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    double a = y.valueAsDouble(i), b = q.valueAsDouble(i), diff = a - b;
    m_signal += a * a;
    m_noise += diff * diff;
    m_cand += b * b;
    m_dot += a * b;
    m_maxAbs = std::max(m_maxAbs, std::fabs(diff));
  }
  m_count += n;
}

void ErrorAccumulator::merge(const ErrorAccumulator& o) {
  m_signal += o.m_signal;
  m_noise += o.m_noise;
  m_cand += o.m_cand;
  m_dot += o.m_dot;
  m_maxAbs = std::max(m_maxAbs, o.m_maxAbs);
  m_count += o.m_count;
}

ErrorMetrics ErrorAccumulator::metrics() const {
  ErrorMetrics m;
  m.count = m_count;
  m.snrDb = snrDb(m_signal, m_noise);
  double denom = std::sqrt(m_signal) * std::sqrt(m_cand);
  m.cosine = denom > 0 ? m_dot / denom : (m_signal == 0 && m_cand == 0 ? 1.0 : 0.0);
  m.mse = m_count ? m_noise / (double)m_count : 0.0;
  m.maxAbs = m_maxAbs;
  return m;
}

}  // namespace qs
