// Einsum (ai.onnx opsets 12..21), float32 and float64.
#include "core/kernels/einsum.h"

#include <Eigen/Core>
#include <algorithm>
#include <cstring>

#include "core/kernels/gemm.h"

namespace qs {

namespace {

constexpr int kEllipsisBase = 52;  // labels 0..51 are letters (A-Z, a-z); 52+ are "..." dims

struct Term {
  std::vector<int> before;  // labels before "..." (all labels when there is none)
  bool ellipsis = false;
  std::vector<int> after;
};

struct Equation {
  std::vector<Term> inputs;
  bool explicitOutput = false;
  Term output;
};

bool parseTerm(const std::string& s, Term& t, std::string& err) {
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    if (ch == '.') {
      if (t.ellipsis || s.compare(i, 3, "...") != 0) {
        err = "malformed ellipsis in term '" + s + "'";
        return false;
      }
      t.ellipsis = true;
      i += 2;
    } else if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z')) {
      int l = ch <= 'Z' ? ch - 'A' : 26 + (ch - 'a');
      (t.ellipsis ? t.after : t.before).push_back(l);
    } else {
      err = std::string("invalid character '") + ch + "' in term '" + s + "'";
      return false;
    }
  }
  return true;
}

bool parseEquation(const std::string& raw, Equation& eq, std::string& err) {
  std::string s;
  for (char c : raw)
    if (c != ' ' && c != '\t') s += c;
  std::string lhs = s, rhs;
  size_t arrow = s.find("->");
  if (arrow != std::string::npos) {
    eq.explicitOutput = true;
    lhs = s.substr(0, arrow);
    rhs = s.substr(arrow + 2);
  }
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    Term t;
    if (!parseTerm(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start), t, err)) return false;
    eq.inputs.push_back(std::move(t));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (eq.explicitOutput) {
    if (!parseTerm(rhs, eq.output, err)) return false;
    std::vector<int> seen;
    for (const auto* v : {&eq.output.before, &eq.output.after})
      for (int l : *v) {
        if (std::find(seen.begin(), seen.end(), l) != seen.end()) {
          err = "output label repeated in '" + raw + "'";
          return false;
        }
        seen.push_back(l);
        bool found = false;
        for (const Term& t : eq.inputs)
          found = found || std::count(t.before.begin(), t.before.end(), l) || std::count(t.after.begin(), t.after.end(), l);
        if (!found) {
          err = "output label not present in any input in '" + raw + "'";
          return false;
        }
      }
  }
  return true;
}

template <class T>
void gemmT(int64_t M, int64_t N, int64_t K, const T* A, const T* B, T* C, int threads);

template <>
void gemmT<float>(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C, int threads) {
  sgemm(false, false, M, N, K, 1.f, A, K, B, N, 0.f, C, N, threads);
}

template <>
void gemmT<double>(int64_t M, int64_t N, int64_t K, const double* A, const double* B, double* C, int) {
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const Mat> a(A, M, K);
  Eigen::Map<const Mat> b(B, K, N);
  Eigen::Map<Mat> c(C, M, N);
  if (K == 0) c.setZero();
  else c.noalias() = a * b;
}

/// dst[i...] = src[sum idx_j * strides_j] over the odometer of dims (row-major).
template <class T>
void gatherStrided(const T* src, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, T* dst) {
  const size_t r = dims.size();
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  for (int64_t d : dims)
    if (d == 0) return;
  const int64_t inner = dims[r - 1], innerStride = strides[r - 1];
  std::vector<int64_t> idx(r, 0);
  int64_t off = 0;
  while (true) {
    const T* s = src + off;
    if (innerStride == 1) {
      std::memcpy(dst, s, sizeof(T) * (size_t)inner);
    } else {
      for (int64_t i = 0; i < inner; ++i) dst[i] = s[i * innerStride];
    }
    dst += inner;
    size_t k = r - 1;
    while (true) {
      if (k == 0) return;
      --k;
      off += strides[k];
      if (++idx[k] < dims[k]) break;
      off -= strides[k] * dims[k];
      idx[k] = 0;
    }
  }
}

template <class T>
struct Operand {
  std::vector<int> labels;
  std::vector<int64_t> dims;
  std::vector<T> own;
  const T* data = nullptr;

  int64_t numel() const { return numelOf(dims); }
  std::vector<int64_t> strides() const {
    std::vector<int64_t> s(dims.size(), 1);
    for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
    return s;
  }
  int find(int l) const {
    auto it = std::find(labels.begin(), labels.end(), l);
    return it == labels.end() ? -1 : (int)(it - labels.begin());
  }
};

/// Rearranges `op` to the label order `order` (a subset of its labels) followed by summation over
/// the labels described by sumDims / sumStrides (summed away). Source strides may be general.
template <class T>
void rearrange(Operand<T>& op, const std::vector<int>& order,
               const std::vector<int64_t>& orderDims, const std::vector<int64_t>& orderStrides,
               const std::vector<int64_t>& sumDims, const std::vector<int64_t>& sumStrides) {
  std::vector<int64_t> dims = orderDims, strides = orderStrides;
  dims.insert(dims.end(), sumDims.begin(), sumDims.end());
  strides.insert(strides.end(), sumStrides.begin(), sumStrides.end());
  const int64_t outer = numelOf(orderDims), inner = numelOf(sumDims);
  std::vector<T> tmp((size_t)(outer * inner));
  if (outer * inner > 0) gatherStrided(op.data, dims, strides, tmp.data());
  if (!sumDims.empty()) {
    std::vector<T> red((size_t)outer, T(0));
    for (int64_t o = 0; o < outer; ++o) {
      T acc = 0;
      const T* p = tmp.data() + o * inner;
      for (int64_t i = 0; i < inner; ++i) acc += p[i];
      red[(size_t)o] = acc;
    }
    tmp.swap(red);
  }
  op.own.swap(tmp);
  op.data = op.own.data();
  op.labels = order;
  op.dims = orderDims;
}

/// Permutes `op` to `order` (same label set) unless already there.
template <class T>
void permuteTo(Operand<T>& op, const std::vector<int>& order) {
  if (op.labels == order) return;
  std::vector<int64_t> st = op.strides(), dims, strides;
  for (int l : order) {
    int p = op.find(l);
    dims.push_back(op.dims[(size_t)p]);
    strides.push_back(st[(size_t)p]);
  }
  rearrange(op, order, dims, strides, {}, {});
}

template <class T>
class EinsumKernel : public Kernel {
 public:
  explicit EinsumKernel(Equation eq) : m_eq(std::move(eq)) {}

  Status run(KernelContext& ctx) const override {
    const size_t nIn = m_eq.inputs.size();
    if (ctx.inputCount() != nIn)
      return invalidArgument("Einsum equation has " + std::to_string(nIn) + " operands, got " +
                             std::to_string(ctx.inputCount()) + " inputs");
    for (size_t i = 0; i < nIn; ++i) {
      if (!ctx.hasInput(i)) return invalidArgument("Einsum input " + std::to_string(i) + " is missing");
      if (ctx.input(i).dtype() != DTypeOf<T>::value)
        return invalidArgument("Einsum inputs must share one dtype, input " + std::to_string(i) + " is " +
                               dtypeName(ctx.input(i).dtype()));
    }
    // Expand "..." per operand and find each label's size.
    int maxE = 0;
    std::vector<std::vector<int>> labels(nIn);
    for (size_t i = 0; i < nIn; ++i) {
      const Term& t = m_eq.inputs[i];
      const int letters = (int)(t.before.size() + t.after.size());
      const int e = ctx.input(i).rank() - letters;
      if (e < 0 || (e > 0 && !t.ellipsis))
        return invalidArgument("Einsum operand " + std::to_string(i) + " has shape " + shapeToString(ctx.input(i).shape()) +
                               ", which does not match its term's " + std::to_string(letters) + " labels");
      maxE = std::max(maxE, e);
    }
    int64_t size[kEllipsisBase + 64];
    std::fill(std::begin(size), std::end(size), -1);
    if (maxE > 64) return unsupported("Einsum with more than 64 ellipsis dims");
    for (size_t i = 0; i < nIn; ++i) {
      const Term& t = m_eq.inputs[i];
      const int e = ctx.input(i).rank() - (int)(t.before.size() + t.after.size());
      labels[i] = t.before;
      for (int k = 0; k < e; ++k) labels[i].push_back(kEllipsisBase + maxE - e + k);
      labels[i].insert(labels[i].end(), t.after.begin(), t.after.end());
      for (size_t k = 0; k < labels[i].size(); ++k) {
        const int64_t d = ctx.input(i).dim((int)k);
        int64_t& s = size[labels[i][k]];
        if (s == -1 || s == 1) {
          s = d;
        } else if (d != s && d != 1) {
          return invalidArgument("Einsum label dims differ: " + std::to_string(s) + " vs " + std::to_string(d) +
                                 " in operand " + std::to_string(i) + " " + shapeToString(ctx.input(i).shape()));
        }
      }
    }
    // Output labels.
    std::vector<int> outLabels;
    if (m_eq.explicitOutput) {
      outLabels = m_eq.output.before;
      if (m_eq.output.ellipsis)
        for (int k = 0; k < maxE; ++k) outLabels.push_back(kEllipsisBase + k);
      outLabels.insert(outLabels.end(), m_eq.output.after.begin(), m_eq.output.after.end());
    } else {
      for (int k = 0; k < maxE; ++k) outLabels.push_back(kEllipsisBase + k);
      int count[kEllipsisBase] = {0};
      for (const Term& t : m_eq.inputs) {
        for (int l : t.before) ++count[l];
        for (int l : t.after) ++count[l];
      }
      for (int l = 0; l < kEllipsisBase; ++l)
        if (count[l] == 1) outLabels.push_back(l);
    }
    auto contains = [](const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); };

    // Prepare each operand: diagonals, broadcast squeezes, sums over labels used nowhere else.
    std::vector<Operand<T>> ops(nIn);
    std::vector<std::vector<int>> uniq(nIn);
    for (size_t i = 0; i < nIn; ++i)
      for (size_t k = 0; k < labels[i].size(); ++k) {
        int l = labels[i][k];
        if (ctx.input(i).dim((int)k) == 1 && size[l] != 1) continue;  // broadcast: squeezed away
        if (!contains(uniq[i], l)) uniq[i].push_back(l);
      }
    for (size_t i = 0; i < nIn; ++i) {
      const Tensor& x = ctx.input(i);
      Operand<T>& op = ops[i];
      op.data = x.data<T>();
      std::vector<int64_t> st(labels[i].size(), 1);
      for (size_t k = labels[i].size(); k-- > 1;) st[k - 1] = st[k] * x.dim((int)k);
      std::vector<int> keep, sum;
      std::vector<int64_t> keepDims, keepStrides, sumDims, sumStrides;
      for (int l : uniq[i]) {
        int64_t stride = 0;
        for (size_t k = 0; k < labels[i].size(); ++k)
          if (labels[i][k] == l) {
            if (x.dim((int)k) != size[l])
              return invalidArgument("Einsum repeated label with different dims in operand " + std::to_string(i) +
                                     " " + shapeToString(x.shape()));
            stride += st[k];
          }
        bool usedElsewhere = contains(outLabels, l);
        for (size_t j = 0; j < nIn && !usedElsewhere; ++j) usedElsewhere = j != i && contains(uniq[j], l);
        if (usedElsewhere) {
          keep.push_back(l);
          keepDims.push_back(size[l]);
          keepStrides.push_back(stride);
        } else {
          sum.push_back(l);
          sumDims.push_back(size[l]);
          sumStrides.push_back(stride);
        }
      }
      bool identity = sum.empty() && keep == labels[i];
      if (identity) {
        op.labels = keep;
        op.dims = keepDims;
      } else {
        rearrange(op, keep, keepDims, keepStrides, sumDims, sumStrides);
      }
    }
    // Contract left to right.
    Operand<T> cur = std::move(ops[0]);
    for (size_t i = 1; i < nIn; ++i) {
      Operand<T>& b = ops[i];
      auto needed = [&](int l) {
        if (contains(outLabels, l)) return true;
        for (size_t j = i + 1; j < nIn; ++j)
          if (contains(ops[j].labels, l)) return true;
        return false;
      };
      std::vector<int> batch, aOnly, contract, bOnly;
      for (int l : cur.labels) {
        if (b.find(l) >= 0) (needed(l) ? batch : contract).push_back(l);
        else aOnly.push_back(l);
      }
      for (int l : b.labels)
        if (cur.find(l) < 0) bOnly.push_back(l);
      std::vector<int> aOrder = batch, bOrder = batch;
      aOrder.insert(aOrder.end(), aOnly.begin(), aOnly.end());
      aOrder.insert(aOrder.end(), contract.begin(), contract.end());
      bOrder.insert(bOrder.end(), contract.begin(), contract.end());
      bOrder.insert(bOrder.end(), bOnly.begin(), bOnly.end());
      permuteTo(cur, aOrder);
      permuteTo(b, bOrder);
      auto prod = [&](const std::vector<int>& ls) {
        int64_t p = 1;
        for (int l : ls) p *= size[l];
        return p;
      };
      const int64_t nb = prod(batch), M = prod(aOnly), K = prod(contract), N = prod(bOnly);
      std::vector<T> res((size_t)(nb * M * N));
      const T* A = cur.data;
      const T* B = b.data;
      T* C = res.data();
      if (M > 0 && N > 0) {
        if (nb > 1 && ctx.threads > 1) {
          ctx.parallelFor(nb, 1, [&](int64_t s, int64_t e) {
            for (int64_t t = s; t < e; ++t) gemmT<T>(M, N, K, A + t * M * K, B + t * K * N, C + t * M * N, 1);
          });
        } else {
          for (int64_t t = 0; t < nb; ++t) gemmT<T>(M, N, K, A + t * M * K, B + t * K * N, C + t * M * N, ctx.threads);
        }
      }
      Operand<T> next;
      next.labels = batch;
      next.labels.insert(next.labels.end(), aOnly.begin(), aOnly.end());
      next.labels.insert(next.labels.end(), bOnly.begin(), bOnly.end());
      for (int l : next.labels) next.dims.push_back(size[l]);
      next.own.swap(res);
      next.data = next.own.data();
      cur = std::move(next);
    }
    // Final permutation to the output order (labels absent from cur are broadcast size-1 dims).
    Shape yShape;
    std::vector<int64_t> st = cur.strides(), gDims, gStrides;
    for (int l : outLabels) {
      int p = cur.find(l);
      const int64_t d = p >= 0 ? cur.dims[(size_t)p] : 1;
      yShape.push_back(d);
      gDims.push_back(d);
      gStrides.push_back(p >= 0 ? st[(size_t)p] : 0);
    }
    for (int l : cur.labels)
      if (!contains(outLabels, l)) return runtimeError("Einsum internal error: label left unreduced");
    ctx.outputs[0] = Tensor(DTypeOf<T>::value, yShape);
    if (numelOf(yShape) > 0) gatherStrided(cur.data, gDims, gStrides, ctx.outputs[0].data<T>());
    return Status::ok();
  }

 private:
  Equation m_eq;
};

class EinsumDispatch : public Kernel {
 public:
  explicit EinsumDispatch(const Equation& eq) : m_f(eq), m_d(eq) {}
  Status run(KernelContext& ctx) const override {
    if (ctx.inputCount() > 0 && ctx.hasInput(0)) {
      if (ctx.input(0).dtype() == DType::Float) return m_f.run(ctx);
      if (ctx.input(0).dtype() == DType::Double) return m_d.run(ctx);
      return unsupported("Einsum supports float32 and float64, got " + dtypeName(ctx.input(0).dtype()));
    }
    return invalidArgument("Einsum needs at least one input");
  }

 private:
  EinsumKernel<float> m_f;
  EinsumKernel<double> m_d;
};

}  // namespace

Result<std::unique_ptr<Kernel>> createEinsum(const KernelInit& init) {
  AttrReader a(init);
  std::string equation = a.s("equation", "");
  if (!a.ok()) return a.status();
  if (equation.empty()) return kernelError(StatusCode::InvalidModel, "missing attribute 'equation'");
  Equation eq;
  std::string err;
  if (!parseEquation(equation, eq, err)) return kernelError(StatusCode::InvalidModel, err);
  if (eq.inputs.size() != init.node.inputs.size())
    return kernelError(StatusCode::InvalidModel,
                     "equation '" + equation + "' has " + std::to_string(eq.inputs.size()) + " operands but the node has " +
                         std::to_string(init.node.inputs.size()) + " inputs");
  return std::unique_ptr<Kernel>(std::make_unique<EinsumDispatch>(eq));
}

}  // namespace qs
