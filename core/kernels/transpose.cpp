// Transpose (ONNX opsets 1..21): perm attribute (default: reversed axes). Size-1 axes are dropped and
// axes that stay adjacent are merged first; then either a view (no data movement), a row copy (the
// innermost axis stays innermost) or a tiled 2-D transpose between the output's last axis and the
// axis that is innermost in the input.
#include "core/kernels/transpose.h"

#include <algorithm>
#include <cstring>

#include "core/kernels/shape_ops.h"

namespace qs {
namespace tensorops {

namespace {

void runParallel(const KernelContext* ctx, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (ctx) {
    ctx->parallelFor(n, grain, fn);
  } else if (n > 0) {
    fn(0, n);
  }
}

// Offset contributions for an "outer" index decomposed over axes `axes` (output-order), giving the
// source and destination element offsets.
struct OuterMap {
  std::vector<int64_t> dims, srcStride, dstStride;
  void offsets(int64_t idx, int64_t& src, int64_t& dst) const {
    src = 0;
    dst = 0;
    for (size_t k = dims.size(); k-- > 0;) {
      int64_t c = idx % dims[k];
      idx /= dims[k];
      src += c * srcStride[k];
      dst += c * dstStride[k];
    }
  }
};

}  // namespace

Tensor transposeTensor(const Tensor& x, const std::vector<int64_t>& perm, const KernelContext* ctx) {
  const Shape& in = x.shape();
  size_t rank = in.size();
  Shape outShape(rank);
  for (size_t i = 0; i < rank; ++i) outShape[i] = in[(size_t)perm[i]];
  if (x.numel() <= 1) return x.reshaped(outShape);

  // Reduce: drop size-1 input axes, then merge runs of output axes that are adjacent in the input.
  std::vector<int64_t> keepIndex(rank, -1);
  Shape s1;
  for (size_t i = 0; i < rank; ++i)
    if (in[i] != 1) {
      keepIndex[i] = (int64_t)s1.size();
      s1.push_back(in[i]);
    }
  std::vector<int64_t> p1;
  for (size_t i = 0; i < rank; ++i)
    if (keepIndex[(size_t)perm[i]] >= 0) p1.push_back(keepIndex[(size_t)perm[i]]);
  // Merge: groups of consecutive output axes with consecutive input axes.
  std::vector<std::vector<int64_t>> groups;  // each: input axes (ascending, consecutive)
  for (int64_t a : p1) {
    if (!groups.empty() && groups.back().back() + 1 == a) {
      groups.back().push_back(a);
    } else {
      groups.push_back({a});
    }
  }
  // Order groups by their first input axis to form the reduced input shape.
  size_t r = groups.size();
  std::vector<size_t> byInput(r);
  for (size_t g = 0; g < r; ++g) byInput[g] = g;
  std::sort(byInput.begin(), byInput.end(), [&](size_t a, size_t b) { return groups[a][0] < groups[b][0]; });
  std::vector<int64_t> groupInputPos(r);
  Shape s(r);
  for (size_t k = 0; k < r; ++k) {
    size_t g = byInput[k];
    groupInputPos[g] = (int64_t)k;
    int64_t d = 1;
    for (int64_t a : groups[g]) d *= s1[(size_t)a];
    s[k] = d;
  }
  std::vector<int64_t> p(r);
  bool identity = true;
  for (size_t i = 0; i < r; ++i) {
    p[i] = groupInputPos[i];
    if (p[i] != (int64_t)i) identity = false;
  }
  if (identity) return x.reshaped(outShape);

  size_t esz = dtypeSize(x.dtype());
  Tensor out(x.dtype(), outShape);
  Shape o(r);
  for (size_t i = 0; i < r; ++i) o[i] = s[(size_t)p[i]];
  std::vector<int64_t> is = stridesOf(s), os = stridesOf(o);
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(out.raw());
  size_t L = r - 1;

  // r >= 2 here and p[L] != L (otherwise the last group would have merged... unless it did not):
  if (p[L] == (int64_t)L) {
    // Innermost axis stays innermost: copy rows.
    int64_t row = o[L];
    size_t rowBytes = (size_t)row * esz;
    OuterMap m;
    for (size_t i = 0; i < L; ++i) {
      m.dims.push_back(o[i]);
      m.srcStride.push_back(is[(size_t)p[i]]);
      m.dstStride.push_back(os[i]);
    }
    int64_t rows = out.numel() / row;
    runParallel(ctx, rows, std::max<int64_t>(1, 16384 / row), [&](int64_t b, int64_t e) {
      for (int64_t q = b; q < e; ++q) {
        int64_t so, dofs;
        m.offsets(q, so, dofs);
        std::memcpy(dst + (size_t)dofs * esz, src + (size_t)so * esz, rowBytes);
      }
    });
    return out;
  }

  // Tiled 2-D transpose between output axis J (input-innermost) and output axis L.
  size_t J = 0;
  for (size_t i = 0; i < r; ++i)
    if (p[i] == (int64_t)(r - 1)) J = i;
  OuterMap m;
  for (size_t i = 0; i < r; ++i) {
    if (i == J || i == L) continue;
    m.dims.push_back(o[i]);
    m.srcStride.push_back(is[(size_t)p[i]]);
    m.dstStride.push_back(os[i]);
  }
  int64_t outer = 1;
  for (int64_t d : m.dims) outer *= d;
  const int64_t nJ = o[J], nL = o[L];
  const int64_t srcStrideL = is[(size_t)p[L]];  // input stride of output's last axis
  const int64_t dstStrideJ = os[J];
  constexpr int64_t T = 16;
  const int64_t jBlocks = (nJ + T - 1) / T;
  dispatchBySize(esz, [&]<class U>() {
    const U* sp = reinterpret_cast<const U*>(src);
    U* dp = reinterpret_cast<U*>(dst);
    runParallel(ctx, outer * jBlocks, std::max<int64_t>(1, 4096 / (T * std::max<int64_t>(nL, 1))),
                [&](int64_t b, int64_t e) {
                  for (int64_t task = b; task < e; ++task) {
                    int64_t oi = task / jBlocks, jb = task % jBlocks;
                    int64_t so, dofs;
                    m.offsets(oi, so, dofs);
                    int64_t j0 = jb * T, j1 = std::min(nJ, j0 + T);
                    for (int64_t l0 = 0; l0 < nL; l0 += T) {
                      int64_t l1 = std::min(nL, l0 + T);
                      for (int64_t j = j0; j < j1; ++j) {
                        const U* s = sp + so + j;
                        U* d = dp + dofs + j * dstStrideJ;
                        for (int64_t l = l0; l < l1; ++l) d[l] = s[l * srcStrideL];
                      }
                    }
                  }
                });
  });
  return out;
}

}  // namespace tensorops

using namespace tensorops;

Result<std::unique_ptr<Kernel>> createTranspose(const KernelInit& init) {
  AttrReader a(init);
  bool hasPerm = a.has("perm");
  std::vector<int64_t> permAttr = a.ints("perm");
  if (!a.ok()) return a.status();
  return makeKernel([node = nodeTag(init.node), hasPerm, permAttr](KernelContext& ctx) -> Status {
    QS_RETURN_IF_ERROR(needInputs(node, ctx, 1));
    const Tensor& x = ctx.input(0);
    if (!dtypeSupported(x.dtype()))
      return runError(node, StatusCode::Unsupported, "dtype " + dtypeName(x.dtype()));
    size_t r = (size_t)x.rank();
    std::vector<int64_t> perm;
    if (hasPerm) {
      perm = permAttr;
      if (perm.size() != r)
        return runError(node, StatusCode::InvalidArgument,
                         "perm " + shapeToString(perm) + " does not match input " + shapeToString(x.shape()));
      std::vector<bool> seen(r, false);
      for (auto& v : perm) {
        int64_t ax = v;
        if (!normalizeAxis(ax, (int64_t)r) || seen[(size_t)ax])
          return runError(node, StatusCode::InvalidArgument,
                           "perm " + shapeToString(permAttr) + " is not a permutation of the input's " +
                               std::to_string(r) + " axes");
        seen[(size_t)ax] = true;
        v = ax;
      }
    } else {
      for (size_t i = 0; i < r; ++i) perm.push_back((int64_t)(r - 1 - i));
    }
    ctx.outputs[0] = transposeTensor(x, perm, &ctx);
    return Status::ok();
  });
}

}  // namespace qs
