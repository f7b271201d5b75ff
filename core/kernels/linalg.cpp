// Det 11..21.
#include "core/kernels/linalg.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/kernels/shape_ops.h"

namespace qs {

namespace {

/// det(A) for a row-major n x n matrix, overwriting `a` with its LU factors. Partial pivoting
/// keeps the elimination stable; a zero pivot column means a singular matrix (det 0).
double determinant(std::vector<double>& a, int64_t n) {
  double det = 1.0;
  for (int64_t c = 0; c < n; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::abs(a[(size_t)(r * n + c)]) > std::abs(a[(size_t)(p * n + c)])) p = r;
    const double pivot = a[(size_t)(p * n + c)];
    if (pivot == 0.0) return 0.0;
    if (p != c) {
      for (int64_t k = 0; k < n; ++k) std::swap(a[(size_t)(p * n + k)], a[(size_t)(c * n + k)]);
      det = -det;
    }
    det *= pivot;
    for (int64_t r = c + 1; r < n; ++r) {
      const double f = a[(size_t)(r * n + c)] / pivot;
      if (f == 0.0) continue;
      for (int64_t k = c + 1; k < n; ++k) a[(size_t)(r * n + k)] -= f * a[(size_t)(c * n + k)];
    }
  }
  return det;
}

}  // namespace

Result<std::unique_ptr<Kernel>> createDet(const KernelInit&) {
  return makeKernel([](KernelContext& ctx) -> Status {
    if (!ctx.hasInput(0)) return kernelError(StatusCode::InvalidArgument, "Det needs input X");
    const Tensor& x = ctx.input(0);
    const DType t = x.dtype();
    if (t != DType::Float && t != DType::Double && t != DType::Float16 && t != DType::BFloat16)
      return kernelError(StatusCode::Unsupported, "Det: dtype " + dtypeName(t) + " is not supported");
    if (x.rank() < 2 || x.dim(x.rank() - 1) != x.dim(x.rank() - 2))
      return kernelError(StatusCode::InvalidArgument,
                         "Det needs square matrices [*, M, M], got shape " + shapeToString(x.shape()));
    const int64_t n = x.dim(x.rank() - 1);
    const Shape ys(x.shape().begin(), x.shape().end() - 2);
    Tensor y(t, ys);
    const int64_t count = y.numel();
    char* dst = static_cast<char*>(y.raw());
    const size_t esz = dtypeSize(t);
    ctx.parallelFor(count, std::max<int64_t>(1, 4096 / std::max<int64_t>(n * n * n, 1)), [&](int64_t b, int64_t e) {
      std::vector<double> a((size_t)(n * n));
      for (int64_t m = b; m < e; ++m) {
        for (int64_t k = 0; k < n * n; ++k) a[(size_t)k] = x.valueAsDouble(m * n * n + k);
        tensorops::writeScalar(t, determinant(a, n), dst + (size_t)m * esz);
      }
    });
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  });
}

}  // namespace qs
