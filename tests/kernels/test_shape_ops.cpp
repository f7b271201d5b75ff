// Tests of the 'tensor' kernel group (shape and data-movement ops): literal cases from the ONNX spec
// and seeded random cases against naive references. Data-movement references compare raw bytes, so
// every element size (1, 2, 4, 8) is exercised.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "core/exec/kernel_registry.h"
#include "core/ir/half.h"

namespace qs {
namespace {

// ---------------------------------------------------------------- harness
class Op {
 public:
  Op(const std::string& type, int64_t opset) : m_opset(opset) {
    m_node.name = "n_" + type;
    m_node.opType = type;
  }
  Op& i(const std::string& k, int64_t v) {
    Attribute a;
    a.type = Attribute::Type::Int;
    a.i = v;
    m_node.attributes[k] = a;
    return *this;
  }
  Op& f(const std::string& k, float v) {
    Attribute a;
    a.type = Attribute::Type::Float;
    a.f = v;
    m_node.attributes[k] = a;
    return *this;
  }
  Op& ints(const std::string& k, std::vector<int64_t> v) {
    Attribute a;
    a.type = Attribute::Type::Ints;
    a.ints = std::move(v);
    m_node.attributes[k] = a;
    return *this;
  }
  Op& floats(const std::string& k, std::vector<float> v) {
    Attribute a;
    a.type = Attribute::Type::Floats;
    a.floats = std::move(v);
    m_node.attributes[k] = a;
    return *this;
  }
  Op& s(const std::string& k, const std::string& v) {
    Attribute a;
    a.type = Attribute::Type::String;
    a.s = v;
    m_node.attributes[k] = a;
    return *this;
  }
  Op& t(const std::string& k, const Tensor& v) {
    Attribute a;
    a.type = Attribute::Type::Tensor;
    a.t = v;
    m_node.attributes[k] = a;
    return *this;
  }

  /// Creates the kernel and runs it; inputs may contain nullptr for omitted optional inputs.
  Status run(const std::vector<const Tensor*>& inputs, size_t nOut, std::vector<Tensor>& outs) {
    Graph g;
    m_node.inputs.clear();
    m_node.outputs.clear();
    for (size_t k = 0; k < inputs.size(); ++k)
      m_node.inputs.push_back(inputs[k] ? g.valueId("in" + std::to_string(k)) : kNoValue);
    for (size_t k = 0; k < nOut; ++k) m_node.outputs.push_back(g.valueId("out" + std::to_string(k)));
    KernelInit init{m_node, m_opset, g};
    const KernelEntry* entry = nullptr;
    for (const auto& e : m_table)
      if (e.opType == m_node.opType && m_opset >= e.sinceVersion && m_opset <= e.untilVersion) entry = &e;
    if (!entry) return unsupported("no kernel for " + m_node.opType);
    auto k = entry->create(init);
    if (!k) return k.status();
    outs.assign(nOut, Tensor());
    KernelContext ctx;
    ctx.inputs = std::span<const Tensor* const>(inputs.data(), inputs.size());
    ctx.outputs = std::span<Tensor>(outs.data(), outs.size());
    ctx.threads = 2;
    return (*k)->run(ctx);
  }
  /// Runs expecting success; returns output 0.
  Tensor run1(const std::vector<const Tensor*>& inputs) {
    std::vector<Tensor> outs;
    Status st = run(inputs, 1, outs);
    EXPECT_TRUE(st.isOk()) << st.message();
    return outs.empty() ? Tensor() : outs[0];
  }

 private:
  Node m_node;
  int64_t m_opset;
  std::vector<KernelEntry> m_table = tensorKernels();
};

template <class T>
Tensor tv(const std::vector<T>& v, Shape s) {
  return Tensor::fromVector<T>(v, std::move(s));
}
Tensor i64(const std::vector<int64_t>& v) { return tv<int64_t>(v, {(int64_t)v.size()}); }

template <class T>
std::vector<T> vals(const Tensor& t) {
  std::vector<T> out((size_t)t.numel());
  if (t.numel()) std::memcpy(out.data(), t.raw(), t.byteSize());
  return out;
}

const DType kSizes[] = {DType::Int8, DType::Float16, DType::Float, DType::Int64};

Tensor randomTensor(DType dt, const Shape& s, std::mt19937& rng) {
  Tensor t(dt, s);
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t b = 0; b < t.byteSize(); ++b) p[b] = (uint8_t)(rng() & 0xff);
  return t;
}

Shape randomShape(std::mt19937& rng, int rank, int maxDim) {
  Shape s((size_t)rank);
  for (auto& d : s) d = 1 + (int64_t)(rng() % (uint32_t)maxDim);
  return s;
}

std::vector<int64_t> unravel(int64_t lin, const Shape& s) {
  std::vector<int64_t> c(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    c[d] = lin % s[d];
    lin /= s[d];
  }
  return c;
}
int64_t ravel(const std::vector<int64_t>& c, const Shape& s) {
  int64_t lin = 0;
  for (size_t d = 0; d < s.size(); ++d) lin = lin * s[d] + c[d];
  return lin;
}

// Expects got[i] == x[srcIndex(i)] bytewise (srcIndex -1: equals `fill` element).
template <class Fn>
void expectGather(const Tensor& got, const Tensor& x, const Shape& wantShape, Fn srcIndex,
                  const void* fill = nullptr) {
  ASSERT_EQ(got.shape(), wantShape);
  ASSERT_EQ(got.dtype(), x.dtype());
  size_t esz = dtypeSize(x.dtype());
  for (int64_t i = 0; i < got.numel(); ++i) {
    int64_t j = srcIndex(i);
    const void* want = j < 0 ? fill : static_cast<const char*>(x.raw()) + (size_t)j * esz;
    ASSERT_EQ(0, std::memcmp(static_cast<const char*>(got.raw()) + (size_t)i * esz, want, esz))
        << "element " << i << " of " << shapeToString(wantShape);
  }
}

// ---------------------------------------------------------------- Reshape / Flatten / Squeeze / Unsqueeze
TEST(TnReshape, ZeroAndMinusOne) {
  Tensor x = tv<float>(std::vector<float>(24, 1.f), {2, 3, 4});
  Tensor s = i64({0, -1});
  Tensor y = Op("Reshape", 13).run1({&x, &s});
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_TRUE(y.sharesBufferWith(x));
  Tensor s2 = i64({4, 0, -1});
  EXPECT_EQ(Op("Reshape", 13).run1({&x, &s2}).shape(), (Shape{4, 3, 2}));
  Tensor s3 = tv<int32_t>({-1}, {1});
  EXPECT_EQ(Op("Reshape", 13).run1({&x, &s3}).shape(), (Shape{24}));
}

TEST(TnReshape, AllowZero) {
  Tensor x = Tensor::zeros(DType::Float, {0, 3, 4});
  Tensor s = i64({3, 4, 0});
  Tensor y = Op("Reshape", 14).i("allowzero", 1).run1({&x, &s});
  EXPECT_EQ(y.shape(), (Shape{3, 4, 0}));
  // Without allowzero the 0 copies dim 2 (4): 3*4*4 != 0 elements.
  std::vector<Tensor> outs;
  EXPECT_FALSE(Op("Reshape", 14).run({&x, &s}, 1, outs).isOk());
}

TEST(TnReshape, Errors) {
  Tensor x = tv<float>(std::vector<float>(6, 1.f), {2, 3});
  std::vector<Tensor> outs;
  Tensor bad = i64({4, 2});
  Status st = Op("Reshape", 13).run({&x, &bad}, 1, outs);
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("[2,3]"), std::string::npos) << st.message();
  Tensor two = i64({-1, -1});
  EXPECT_FALSE(Op("Reshape", 13).run({&x, &two}, 1, outs).isOk());
}

TEST(TnFlatten, Axes) {
  Tensor x = Tensor::zeros(DType::Int8, {2, 3, 4, 5});
  EXPECT_EQ(Op("Flatten", 13).run1({&x}).shape(), (Shape{2, 60}));
  EXPECT_EQ(Op("Flatten", 13).i("axis", 0).run1({&x}).shape(), (Shape{1, 120}));
  EXPECT_EQ(Op("Flatten", 13).i("axis", 4).run1({&x}).shape(), (Shape{120, 1}));
  EXPECT_EQ(Op("Flatten", 13).i("axis", -1).run1({&x}).shape(), (Shape{24, 5}));
  Tensor y = Op("Flatten", 13).i("axis", 2).run1({&x});
  EXPECT_EQ(y.shape(), (Shape{6, 20}));
  EXPECT_TRUE(y.sharesBufferWith(x));
}

TEST(TnSqueeze, AttrAndInputForms) {
  Tensor x = Tensor::zeros(DType::Float, {1, 3, 1, 5});
  EXPECT_EQ(Op("Squeeze", 11).run1({&x}).shape(), (Shape{3, 5}));
  EXPECT_EQ(Op("Squeeze", 11).ints("axes", {-2}).run1({&x}).shape(), (Shape{1, 3, 5}));
  Tensor ax = i64({0});
  Tensor y = Op("Squeeze", 13).run1({&x, &ax});
  EXPECT_EQ(y.shape(), (Shape{3, 1, 5}));
  EXPECT_TRUE(y.sharesBufferWith(x));
  Tensor bad = i64({1});
  std::vector<Tensor> outs;
  EXPECT_FALSE(Op("Squeeze", 13).run({&x, &bad}, 1, outs).isOk());
}

TEST(TnUnsqueeze, AttrAndInputForms) {
  Tensor x = Tensor::zeros(DType::Float, {3, 4, 5});
  EXPECT_EQ(Op("Unsqueeze", 11).ints("axes", {0, 4}).run1({&x}).shape(), (Shape{1, 3, 4, 5, 1}));
  Tensor ax = i64({5, 4, 2});  // unsorted
  EXPECT_EQ(Op("Unsqueeze", 13).run1({&x, &ax}).shape(), (Shape{3, 4, 1, 5, 1, 1}));
  Tensor neg = i64({-2});
  EXPECT_EQ(Op("Unsqueeze", 13).run1({&x, &neg}).shape(), (Shape{3, 4, 1, 5}));
  Tensor s = Tensor::scalar<float>(2.f);
  Tensor z = i64({0});
  EXPECT_EQ(Op("Unsqueeze", 13).run1({&s, &z}).shape(), (Shape{1}));
}

TEST(TnShape, StartEnd) {
  Tensor x = Tensor::zeros(DType::Float, {2, 3, 4});
  EXPECT_EQ(vals<int64_t>(Op("Shape", 13).run1({&x})), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(vals<int64_t>(Op("Shape", 15).i("start", 1).run1({&x})), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(vals<int64_t>(Op("Shape", 15).i("end", -1).run1({&x})), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(vals<int64_t>(Op("Shape", 15).i("start", -10).i("end", 10).run1({&x})), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(Op("Shape", 15).i("start", 2).i("end", 1).run1({&x}).numel(), 0);
  Tensor sz = Op("Size", 13).run1({&x});
  EXPECT_EQ(sz.rank(), 0);
  EXPECT_EQ(sz.data<int64_t>()[0], 24);
}

// ---------------------------------------------------------------- Identity / Dropout / Constant(s)
TEST(TnIdentity, SharesBuffer) {
  Tensor x = tv<float>({1, 2, 3}, {3});
  EXPECT_TRUE(Op("Identity", 16).run1({&x}).sharesBufferWith(x));
}

TEST(TnDropout, InferenceAndMask) {
  Tensor x = tv<float>({1, 2, 3, 4}, {2, 2});
  std::vector<Tensor> outs;
  ASSERT_TRUE(Op("Dropout", 13).run({&x}, 2, outs).isOk());
  EXPECT_EQ(vals<float>(outs[0]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(outs[1].dtype(), DType::Bool);
  EXPECT_EQ(vals<uint8_t>(outs[1]), (std::vector<uint8_t>{1, 1, 1, 1}));
  ASSERT_TRUE(Op("Dropout", 7).f("ratio", 0.3f).run({&x}, 2, outs).isOk());
  EXPECT_EQ(outs[1].dtype(), DType::Float);
  EXPECT_EQ(vals<float>(outs[1]), (std::vector<float>{1, 1, 1, 1}));
  Tensor ratio = Tensor::scalar<float>(0.5f);
  Tensor train = Tensor::scalar<bool>(true);
  // Training mode: seeded (numpy-compatible) mask, kept values scaled by 1 / (1 - ratio).
  ASSERT_TRUE(Op("Dropout", 13).run({&x, &ratio, &train}, 2, outs).isOk());
  std::vector<float> y1 = vals<float>(outs[0]);
  std::vector<uint8_t> m1 = vals<uint8_t>(outs[1]);
  for (size_t k = 0; k < 4; ++k) EXPECT_EQ(y1[k], m1[k] ? 2.f * (float)(k + 1) : 0.f);
  // numpy: np.random.seed(0); np.random.uniform(0, 1, 4) = [0.5488, 0.7152, 0.6028, 0.5449] -> all kept at 0.5.
  EXPECT_EQ(m1, (std::vector<uint8_t>{1, 1, 1, 1}));
  Tensor r7 = Tensor::scalar<float>(0.6f);
  ASSERT_TRUE(Op("Dropout", 13).run({&x, &r7, &train}, 2, outs).isOk());
  EXPECT_EQ(vals<uint8_t>(outs[1]), (std::vector<uint8_t>{0, 1, 1, 0}));
  Tensor zero = Tensor::scalar<float>(0.f);
  EXPECT_TRUE(Op("Dropout", 13).run({&x, &zero, &train}, 2, outs).isOk());
}

TEST(TnConstant, Forms) {
  Tensor v = tv<int32_t>({1, 2, 3}, {3});
  Tensor y = Op("Constant", 13).t("value", v).run1({});
  EXPECT_EQ(y.dtype(), DType::Int32);
  EXPECT_EQ(vals<int32_t>(y), (std::vector<int32_t>{1, 2, 3}));
  y = Op("Constant", 13).f("value_float", 2.5f).run1({});
  EXPECT_EQ(y.rank(), 0);
  EXPECT_EQ(y.data<float>()[0], 2.5f);
  y = Op("Constant", 13).floats("value_floats", {1.f, 2.f}).run1({});
  EXPECT_EQ(y.shape(), (Shape{2}));
  y = Op("Constant", 13).i("value_int", 7).run1({});
  EXPECT_EQ(y.dtype(), DType::Int64);
  EXPECT_EQ(y.data<int64_t>()[0], 7);
  y = Op("Constant", 13).ints("value_ints", {4, 5, 6}).run1({});
  EXPECT_EQ(vals<int64_t>(y), (std::vector<int64_t>{4, 5, 6}));
  std::vector<Tensor> outs;
  EXPECT_FALSE(Op("Constant", 13).run({}, 1, outs).isOk());
  EXPECT_FALSE(Op("Constant", 13).s("value_string", "x").run({}, 1, outs).isOk());
}

TEST(TnConstantOfShape, ValueAndDefault) {
  Tensor s = i64({2, 3});
  Tensor y = Op("ConstantOfShape", 9).run1({&s});
  EXPECT_EQ(y.dtype(), DType::Float);
  EXPECT_EQ(vals<float>(y), std::vector<float>(6, 0.f));
  Tensor v = tv<int32_t>({7}, {1});
  y = Op("ConstantOfShape", 9).t("value", v).run1({&s});
  EXPECT_EQ(vals<int32_t>(y), std::vector<int32_t>(6, 7));
  Tensor e = tv<int64_t>({}, {0});
  y = Op("ConstantOfShape", 9).t("value", v).run1({&e});
  EXPECT_EQ(y.rank(), 0);
  EXPECT_EQ(y.data<int32_t>()[0], 7);
}

// ---------------------------------------------------------------- Expand / Tile
TEST(TnExpand, RandomAgainstNaive) {
  std::mt19937 rng(11);
  for (int iter = 0; iter < 40; ++iter) {
    DType dt = kSizes[iter % 4];
    int rank = 1 + (int)(rng() % 4);
    Shape out = randomShape(rng, rank, 4);
    Shape in = out;
    for (auto& d : in)
      if (rng() % 2) d = 1;
    int drop = (int)(rng() % (uint32_t)rank);
    in.erase(in.begin(), in.begin() + drop);
    Shape req = out;
    for (size_t k = 0; k < req.size(); ++k)
      if (rng() % 3 == 0 && k >= req.size() - in.size() && in[k - (req.size() - in.size())] != 1) req[k] = 1;
    Tensor x = randomTensor(dt, in, rng);
    Tensor s = i64(req);
    Tensor y = Op("Expand", 13).run1({&x, &s});
    expectGather(y, x, out, [&](int64_t i) {
      auto c = unravel(i, out);
      std::vector<int64_t> ci(in.size());
      for (size_t k = 0; k < in.size(); ++k) ci[k] = in[k] == 1 ? 0 : c[k + out.size() - in.size()];
      return ravel(ci, in);
    });
  }
}

TEST(TnExpand, Spec) {
  Tensor x = tv<float>({1, 2, 3}, {3, 1});
  Tensor s = i64({2, 1, 6});
  Tensor y = Op("Expand", 13).run1({&x, &s});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 6}));
  EXPECT_EQ(y.data<float>()[6], 2.f);
  Tensor bad = i64({2, 4});
  Tensor x2 = tv<float>({1, 2, 3}, {3});
  std::vector<Tensor> outs;
  EXPECT_FALSE(Op("Expand", 13).run({&x2, &bad}, 1, outs).isOk());
}

TEST(TnTile, RandomAgainstNaive) {
  std::mt19937 rng(12);
  for (int iter = 0; iter < 30; ++iter) {
    DType dt = kSizes[iter % 4];
    Shape in = randomShape(rng, 1 + (int)(rng() % 4), 4);
    std::vector<int64_t> rep(in.size());
    for (auto& r : rep) r = (int64_t)(rng() % 3) + (iter == 0 ? 0 : 1);
    Shape out(in.size());
    for (size_t k = 0; k < in.size(); ++k) out[k] = in[k] * rep[k];
    Tensor x = randomTensor(dt, in, rng);
    Tensor r = i64(rep);
    Tensor y = Op("Tile", 13).run1({&x, &r});
    expectGather(y, x, out, [&](int64_t i) {
      auto c = unravel(i, out);
      for (size_t k = 0; k < c.size(); ++k) c[k] %= in[k];
      return ravel(c, in);
    });
  }
}

// ---------------------------------------------------------------- Concat / Split
TEST(TnConcat, RandomAgainstNaive) {
  std::mt19937 rng(21);
  for (int iter = 0; iter < 30; ++iter) {
    DType dt = kSizes[iter % 4];
    int rank = 1 + (int)(rng() % 4);
    Shape base = randomShape(rng, rank, 4);
    int64_t axis = (int64_t)(rng() % (uint32_t)rank);
    int n = 1 + (int)(rng() % 4);
    std::vector<Tensor> xs;
    std::vector<const Tensor*> ptrs;
    Shape out = base;
    out[(size_t)axis] = 0;
    for (int k = 0; k < n; ++k) {
      Shape s = base;
      s[(size_t)axis] = (int64_t)(rng() % 4);  // may be 0
      out[(size_t)axis] += s[(size_t)axis];
      xs.push_back(randomTensor(dt, s, rng));
    }
    for (auto& t : xs) ptrs.push_back(&t);
    Tensor y = Op("Concat", 13).i("axis", axis - (iter % 2 ? rank : 0)).run1(ptrs);
    ASSERT_EQ(y.shape(), out);
    size_t esz = dtypeSize(dt);
    for (int64_t i = 0; i < y.numel(); ++i) {
      auto c = unravel(i, out);
      int k = 0;
      while (c[(size_t)axis] >= xs[(size_t)k].dim((int)axis)) c[(size_t)axis] -= xs[(size_t)k++].dim((int)axis);
      int64_t j = ravel(c, xs[(size_t)k].shape());
      ASSERT_EQ(0, std::memcmp(static_cast<const char*>(y.raw()) + i * esz,
                               static_cast<const char*>(xs[(size_t)k].raw()) + j * esz, esz));
    }
  }
}

TEST(TnConcat, Errors) {
  Tensor a = Tensor::zeros(DType::Float, {2, 3});
  Tensor b = Tensor::zeros(DType::Float, {3, 3});
  Tensor c = Tensor::zeros(DType::Int32, {2, 3});
  std::vector<Tensor> outs;
  EXPECT_FALSE(Op("Concat", 13).i("axis", 1).run({&a, &b}, 1, outs).isOk());
  EXPECT_FALSE(Op("Concat", 13).i("axis", 0).run({&a, &c}, 1, outs).isOk());
  EXPECT_FALSE(Op("Concat", 13).run({&a, &b}, 1, outs).isOk());
  EXPECT_TRUE(Op("Concat", 13).i("axis", 0).run({&a, &b}, 1, outs).isOk());
  EXPECT_EQ(outs[0].shape(), (Shape{5, 3}));
}

TEST(TnSplit, Forms) {
  Tensor x = tv<float>({1, 2, 3, 4, 5, 6}, {6});
  std::vector<Tensor> outs;
  ASSERT_TRUE(Op("Split", 11).run({&x}, 3, outs).isOk());
  EXPECT_EQ(vals<float>(outs[2]), (std::vector<float>{5, 6}));
  ASSERT_TRUE(Op("Split", 11).ints("split", {2, 4}).run({&x}, 2, outs).isOk());
  EXPECT_EQ(vals<float>(outs[1]), (std::vector<float>{3, 4, 5, 6}));
  Tensor sp = i64({1, 0, 5});
  ASSERT_TRUE(Op("Split", 13).run({&x, &sp}, 3, outs).isOk());
  EXPECT_EQ(outs[1].shape(), (Shape{0}));
  EXPECT_EQ(vals<float>(outs[2]), (std::vector<float>{2, 3, 4, 5, 6}));
  Tensor x7 = tv<float>({1, 2, 3, 4, 5, 6, 7}, {7});
  ASSERT_TRUE(Op("Split", 18).i("num_outputs", 3).run({&x7, nullptr}, 3, outs).isOk());
  EXPECT_EQ(vals<float>(outs[0]), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(vals<float>(outs[2]), (std::vector<float>{7}));
  EXPECT_FALSE(Op("Split", 13).run({&x7}, 3, outs).isOk());
  Tensor bad = i64({1, 2});
  EXPECT_FALSE(Op("Split", 13).run({&x, &bad}, 2, outs).isOk());
}

TEST(TnSplit, RandomAgainstNaive) {
  std::mt19937 rng(22);
  for (int iter = 0; iter < 20; ++iter) {
    DType dt = kSizes[iter % 4];
    int rank = 1 + (int)(rng() % 4);
    Shape s = randomShape(rng, rank, 5);
    int64_t axis = (int64_t)(rng() % (uint32_t)rank);
    int n = 1 + (int)(rng() % 3);
    std::vector<int64_t> split((size_t)n, 0);
    for (int64_t k = 0; k < s[(size_t)axis]; ++k) split[rng() % (uint32_t)n]++;
    Tensor x = randomTensor(dt, s, rng);
    Tensor spt = i64(split);
    std::vector<Tensor> outs;
    ASSERT_TRUE(Op("Split", 13).i("axis", axis).run({&x, &spt}, (size_t)n, outs).isOk());
    int64_t off = 0;
    for (int k = 0; k < n; ++k) {
      Shape os = s;
      os[(size_t)axis] = split[(size_t)k];
      expectGather(outs[(size_t)k], x, os, [&](int64_t i) {
        auto c = unravel(i, os);
        c[(size_t)axis] += off;
        return ravel(c, s);
      });
      off += split[(size_t)k];
    }
  }
}

// ---------------------------------------------------------------- Slice
TEST(TnSlice, Spec) {
  Tensor x = tv<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  Tensor st = i64({1, 0}), en = i64({2, 3}), ax = i64({0, 1}), sp = i64({1, 2});
  EXPECT_EQ(vals<float>(Op("Slice", 13).run1({&x, &st, &en, &ax, &sp})), (std::vector<float>{5, 7}));
  Tensor st2 = i64({0, 1}), en2 = i64({-1, 1000});
  EXPECT_EQ(vals<float>(Op("Slice", 13).run1({&x, &st2, &en2})), (std::vector<float>{2, 3, 4}));
  // Attribute form (opset < 10).
  EXPECT_EQ(vals<float>(Op("Slice", 9).ints("starts", {0, 1}).ints("ends", {-1, 1000}).run1({&x})),
            (std::vector<float>{2, 3, 4}));
  // Negative steps: reverse axis 1 fully.
  Tensor st3 = i64({-1}), en3 = i64({INT64_MIN}), ax3 = i64({1}), sp3 = i64({-1});
  EXPECT_EQ(vals<float>(Op("Slice", 13).run1({&x, &st3, &en3, &ax3, &sp3})),
            (std::vector<float>{4, 3, 2, 1, 8, 7, 6, 5}));
  // Start out of bounds -> empty.
  Tensor st4 = i64({1000}), en4 = i64({1000}), ax4 = i64({1});
  EXPECT_EQ(Op("Slice", 13).run1({&x, &st4, &en4, &ax4}).shape(), (Shape{2, 0}));
  // int32 inputs, negative axes.
  Tensor st5 = tv<int32_t>({1}, {1}), en5 = tv<int32_t>({3}, {1}), ax5 = tv<int32_t>({-1}, {1});
  EXPECT_EQ(vals<float>(Op("Slice", 13).run1({&x, &st5, &en5, &ax5})), (std::vector<float>{2, 3, 6, 7}));
  std::vector<Tensor> outs;
  Tensor zero = i64({0});
  EXPECT_FALSE(Op("Slice", 13).run({&x, &st4, &en4, &ax4, &zero}, 1, outs).isOk());
}

TEST(TnSlice, RandomAgainstNaive) {
  std::mt19937 rng(31);
  for (int iter = 0; iter < 60; ++iter) {
    DType dt = kSizes[iter % 4];
    int rank = 1 + (int)(rng() % 4);
    Shape s = randomShape(rng, rank, 6);
    Tensor x = randomTensor(dt, s, rng);
    std::vector<int64_t> starts, ends, axes, steps;
    Shape out = s;
    std::vector<int64_t> b((size_t)rank, 0), stp((size_t)rank, 1);
    for (int64_t a = 0; a < rank; ++a) {
      if (rng() % 3 == 0) continue;
      int64_t dim = s[(size_t)a];
      int64_t st = (int64_t)(rng() % 5) - 2;
      if (st == 0) st = 1;
      int64_t s0 = (int64_t)(rng() % (uint32_t)(2 * dim + 5)) - dim - 2;
      int64_t e0 = (int64_t)(rng() % (uint32_t)(2 * dim + 5)) - dim - 2;
      starts.push_back(s0);
      ends.push_back(e0);
      axes.push_back(rng() % 2 ? a : a - rank);
      steps.push_back(st);
      // Naive: python slicing semantics (same as ONNX clamping).
      auto norm = [dim](int64_t v, bool isStart, int64_t step) {
        if (v < 0) v += dim;
        if (step > 0) return std::clamp<int64_t>(v, 0, dim);
        return std::clamp<int64_t>(v, isStart ? 0 : -1, dim - 1);
      };
      int64_t ns = norm(s0, true, st), ne = norm(e0, false, st);
      int64_t cnt = 0;
      for (int64_t v = ns; st > 0 ? v < ne : v > ne; v += st) ++cnt;
      out[(size_t)a] = cnt;
      b[(size_t)a] = ns;
      stp[(size_t)a] = st;
    }
    Tensor ts = i64(starts), te = i64(ends), ta = i64(axes), tp = i64(steps);
    Tensor y = Op("Slice", 13).run1({&x, &ts, &te, &ta, &tp});
    expectGather(y, x, out, [&](int64_t i) {
      auto c = unravel(i, out);
      for (size_t k = 0; k < c.size(); ++k) c[k] = b[k] + c[k] * stp[k];
      return ravel(c, s);
    });
  }
}

// ---------------------------------------------------------------- Transpose / DepthToSpace / SpaceToDepth
TEST(TnTranspose, RandomAgainstNaive) {
  std::mt19937 rng(41);
  for (int iter = 0; iter < 60; ++iter) {
    DType dt = kSizes[iter % 4];
    int rank = 1 + (int)(rng() % 5);
    Shape s = randomShape(rng, rank, iter < 50 ? 5 : 40);
    if (iter >= 50) rank = 2, s = {37 + iter, 19 + 3 * iter};
    std::vector<int64_t> perm((size_t)rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    Tensor x = randomTensor(dt, s, rng);
    Op op("Transpose", 13);
    if (iter % 7 == 0) {  // default perm: reversed axes
      std::iota(perm.begin(), perm.end(), 0);
      std::reverse(perm.begin(), perm.end());
    } else {
      op.ints("perm", perm);
    }
    Shape out((size_t)rank);
    for (int k = 0; k < rank; ++k) out[(size_t)k] = s[(size_t)perm[(size_t)k]];
    Tensor y = op.run1({&x});
    expectGather(y, x, out, [&](int64_t i) {
      auto c = unravel(i, out);
      std::vector<int64_t> ci((size_t)rank);
      for (int k = 0; k < rank; ++k) ci[(size_t)perm[(size_t)k]] = c[(size_t)k];
      return ravel(ci, s);
    });
  }
}

TEST(TnTranspose, BadPerm) {
  Tensor x = Tensor::zeros(DType::Float, {2, 3});
  std::vector<Tensor> outs;
  EXPECT_FALSE(Op("Transpose", 13).ints("perm", {0, 0}).run({&x}, 1, outs).isOk());
  EXPECT_FALSE(Op("Transpose", 13).ints("perm", {0}).run({&x}, 1, outs).isOk());
}

TEST(TnDepthToSpace, SpecDCRAndCRD) {
  std::vector<float> v(48);
  std::iota(v.begin(), v.end(), 0.f);
  Tensor x = tv<float>(v, {1, 8, 2, 3});
  Tensor dcr = Op("DepthToSpace", 13).i("blocksize", 2).run1({&x});
  EXPECT_EQ(dcr.shape(), (Shape{1, 2, 4, 6}));
  std::vector<float> wantDcr = {0,  12, 1,  13, 2,  14, 24, 36, 25, 37, 26, 38, 3,  15, 4,  16, 5,  17, 27, 39, 28, 40, 29, 41,
                                6,  18, 7,  19, 8,  20, 30, 42, 31, 43, 32, 44, 9,  21, 10, 22, 11, 23, 33, 45, 34, 46, 35, 47};
  EXPECT_EQ(vals<float>(dcr), wantDcr);
  Tensor crd = Op("DepthToSpace", 13).i("blocksize", 2).s("mode", "CRD").run1({&x});
  std::vector<float> wantCrd = {0,  6,  1,  7,  2,  8,  12, 18, 13, 19, 14, 20, 3,  9,  4,  10, 5,  11, 15, 21, 16, 22, 17, 23,
                                24, 30, 25, 31, 26, 32, 36, 42, 37, 43, 38, 44, 27, 33, 28, 34, 29, 35, 39, 45, 40, 46, 41, 47};
  EXPECT_EQ(vals<float>(crd), wantCrd);
  // SpaceToDepth inverts DCR DepthToSpace.
  Tensor back = Op("SpaceToDepth", 13).i("blocksize", 2).run1({&dcr});
  EXPECT_EQ(back.shape(), x.shape());
  EXPECT_EQ(vals<float>(back), v);
}

// ---------------------------------------------------------------- Gather family
TEST(TnGather, SpecAndNegative) {
  Tensor x = tv<float>({1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f}, {3, 2});
  Tensor ind = tv<int64_t>({0, 1, 1, 2}, {2, 2});
  Tensor y = Op("Gather", 13).run1({&x, &ind});
  EXPECT_EQ(y.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(vals<float>(y), (std::vector<float>{1.0f, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f}));
  Tensor neg = tv<int32_t>({-1}, {1});
  EXPECT_EQ(vals<float>(Op("Gather", 13).i("axis", 1).run1({&x, &neg})), (std::vector<float>{1.2f, 3.4f, 5.7f}));
  Tensor sc = Tensor::scalar<int64_t>(2);
  Tensor r = Op("Gather", 13).run1({&x, &sc});
  EXPECT_EQ(r.shape(), (Shape{2}));
  Tensor bad = tv<int64_t>({3}, {1});
  std::vector<Tensor> outs;
  Status st = Op("Gather", 13).run({&x, &bad}, 1, outs);
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("index 3"), std::string::npos) << st.message();
}

TEST(TnGather, RandomAgainstNaive) {
  std::mt19937 rng(51);
  for (int iter = 0; iter < 30; ++iter) {
    DType dt = kSizes[iter % 4];
    int rank = 1 + (int)(rng() % 3);
    Shape s = randomShape(rng, rank, 5);
    int64_t axis = (int64_t)(rng() % (uint32_t)rank);
    Shape is = randomShape(rng, (int)(rng() % 3), 3);
    int64_t dim = s[(size_t)axis];
    std::vector<int64_t> idx((size_t)numelOf(is));
    for (auto& v : idx) v = (int64_t)(rng() % (uint32_t)(2 * dim)) - dim;
    Tensor x = randomTensor(dt, s, rng);
    Tensor ti = iter % 2 ? tv<int64_t>(idx, is) : Tensor(DType::Int32, is);
    if (iter % 2 == 0)
      for (size_t k = 0; k < idx.size(); ++k) ti.data<int32_t>()[k] = (int32_t)idx[k];
    Shape out(s.begin(), s.begin() + axis);
    out.insert(out.end(), is.begin(), is.end());
    out.insert(out.end(), s.begin() + axis + 1, s.end());
    Tensor y = Op("Gather", 13).i("axis", axis).run1({&x, &ti});
    expectGather(y, x, out, [&](int64_t i) {
      auto c = unravel(i, out);
      std::vector<int64_t> ci(c.begin(), c.begin() + axis);
      std::vector<int64_t> ic(c.begin() + axis, c.begin() + axis + (int64_t)is.size());
      int64_t v = idx[(size_t)ravel(ic, is)];
      ci.push_back(v < 0 ? v + dim : v);
      ci.insert(ci.end(), c.begin() + axis + (int64_t)is.size(), c.end());
      return ravel(ci, s);
    });
  }
}

TEST(TnGatherElements, Spec) {
  Tensor x = tv<float>({1, 2, 3, 4}, {2, 2});
  Tensor ind = tv<int64_t>({0, 0, 1, 0}, {2, 2});
  EXPECT_EQ(vals<float>(Op("GatherElements", 13).i("axis", 1).run1({&x, &ind})), (std::vector<float>{1, 1, 4, 3}));
  Tensor x2 = tv<int32_t>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  Tensor ind2 = tv<int32_t>({1, 2, 0, 2, 0, -3}, {2, 3});
  EXPECT_EQ(vals<int32_t>(Op("GatherElements", 13).i("axis", 0).run1({&x2, &ind2})),
            (std::vector<int32_t>{4, 8, 3, 7, 2, 3}));
}

TEST(TnGatherND, SpecWithBatchDims) {
  Tensor x = tv<int32_t>({0, 1, 2, 3}, {2, 2});
  Tensor i1 = tv<int64_t>({0, 0, 1, 1}, {2, 2});
  EXPECT_EQ(vals<int32_t>(Op("GatherND", 13).run1({&x, &i1})), (std::vector<int32_t>{0, 3}));
  Tensor i2 = tv<int64_t>({1, 0}, {2, 1});
  EXPECT_EQ(vals<int32_t>(Op("GatherND", 13).run1({&x, &i2})), (std::vector<int32_t>{2, 3, 0, 1}));
  Tensor x3 = tv<int32_t>({0, 1, 2, 3, 4, 5, 6, 7}, {2, 2, 2});
  Tensor i3 = tv<int64_t>({0, 1, 1, 0}, {2, 1, 2});
  Tensor y3 = Op("GatherND", 13).run1({&x3, &i3});
  EXPECT_EQ(y3.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(vals<int32_t>(y3), (std::vector<int32_t>{2, 3, 4, 5}));
  Tensor i4 = tv<int64_t>({1, 0}, {2, 1});
  Tensor y4 = Op("GatherND", 13).i("batch_dims", 1).run1({&x3, &i4});
  EXPECT_EQ(y4.shape(), (Shape{2, 2}));
  EXPECT_EQ(vals<int32_t>(y4), (std::vector<int32_t>{2, 3, 4, 5}));
}

TEST(TnScatterND, SpecAndReductions) {
  Tensor x = tv<float>({1, 2, 3, 4, 5, 6, 7, 8}, {8});
  Tensor ind = tv<int64_t>({4, 3, 1, 7}, {4, 1});
  Tensor upd = tv<float>({9, 10, 11, 12}, {4});
  EXPECT_EQ(vals<float>(Op("ScatterND", 13).run1({&x, &ind, &upd})), (std::vector<float>{1, 11, 3, 10, 9, 6, 7, 12}));
  EXPECT_EQ(vals<float>(x), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));  // input untouched
  Tensor dup = tv<int64_t>({0, 0, -1}, {3, 1});
  Tensor u3 = tv<float>({2, 3, 4}, {3});
  EXPECT_EQ(vals<float>(Op("ScatterND", 16).s("reduction", "add").run1({&x, &dup, &u3}))[0], 6.f);
  EXPECT_EQ(vals<float>(Op("ScatterND", 16).s("reduction", "mul").run1({&x, &dup, &u3}))[0], 6.f);
  EXPECT_EQ(vals<float>(Op("ScatterND", 18).s("reduction", "max").run1({&x, &dup, &u3}))[7], 8.f);
  EXPECT_EQ(vals<float>(Op("ScatterND", 18).s("reduction", "min").run1({&x, &dup, &u3}))[7], 4.f);
  std::vector<Tensor> outs;
  EXPECT_FALSE(Op("ScatterND", 16).s("reduction", "max").run({&x, &dup, &u3}, 1, outs).isOk());
  // Slices: data [2,2,2], indices [1,1] -> updates [1,2,2].
  Tensor x3 = tv<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {2, 2, 2});
  Tensor i3 = tv<int64_t>({1}, {1, 1});
  Tensor u4 = tv<int64_t>({9, 9, 9, 9}, {1, 2, 2});
  EXPECT_EQ(vals<int64_t>(Op("ScatterND", 13).run1({&x3, &i3, &u4})), (std::vector<int64_t>{0, 1, 2, 3, 9, 9, 9, 9}));
}

TEST(TnScatterElements, Spec) {
  Tensor x = tv<float>({1, 2, 3, 4, 5}, {1, 5});
  Tensor ind = tv<int64_t>({1, 3}, {1, 2});
  Tensor upd = tv<float>({1.1f, 2.1f}, {1, 2});
  EXPECT_EQ(vals<float>(Op("ScatterElements", 13).i("axis", 1).run1({&x, &ind, &upd})),
            (std::vector<float>{1, 1.1f, 3, 2.1f, 5}));
  Tensor dup = tv<int64_t>({1, 1}, {1, 2});
  EXPECT_EQ(vals<float>(Op("ScatterElements", 16).i("axis", 1).s("reduction", "add").run1({&x, &dup, &upd}))[1],
            2 + 1.1f + 2.1f);
}

// ---------------------------------------------------------------- Pad
TEST(TnPad, SpecModes) {
  Tensor x = tv<float>({1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f}, {3, 2});
  Tensor pads = i64({0, 2, 0, 0});
  EXPECT_EQ(vals<float>(Op("Pad", 13).run1({&x, &pads})),
            (std::vector<float>{0, 0, 1.0f, 1.2f, 0, 0, 2.3f, 3.4f, 0, 0, 4.5f, 5.7f}));
  EXPECT_EQ(vals<float>(Op("Pad", 13).s("mode", "reflect").run1({&x, &pads})),
            (std::vector<float>{1.0f, 1.2f, 1.0f, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f, 4.5f, 5.7f}));
  EXPECT_EQ(vals<float>(Op("Pad", 13).s("mode", "edge").run1({&x, &pads})),
            (std::vector<float>{1.0f, 1.0f, 1.0f, 1.2f, 2.3f, 2.3f, 2.3f, 3.4f, 4.5f, 4.5f, 4.5f, 5.7f}));
  Tensor pw = i64({2, 1, 1, 1});
  Tensor w = Op("Pad", 19).s("mode", "wrap").run1({&x, &pw});
  EXPECT_EQ(w.shape(), (Shape{6, 4}));
  EXPECT_EQ(vals<float>(w), (std::vector<float>{3.4f, 2.3f, 3.4f, 2.3f, 5.7f, 4.5f, 5.7f, 4.5f, 1.2f, 1.0f, 1.2f, 1.0f,
                                                3.4f, 2.3f, 3.4f, 2.3f, 5.7f, 4.5f, 5.7f, 4.5f, 1.2f, 1.0f, 1.2f, 1.0f}));
  Tensor cv = Tensor::scalar<float>(9.f);
  Tensor p1 = i64({1, 0, 0, 0});
  EXPECT_EQ(vals<float>(Op("Pad", 13).run1({&x, &p1, &cv}))[0], 9.f);
  // Attribute form (opset < 11) and negative pads (crop).
  Tensor a = Op("Pad", 2).ints("pads", {0, -1, 1, 0}).f("value", 5.f).run1({&x});
  EXPECT_EQ(a.shape(), (Shape{4, 1}));
  EXPECT_EQ(vals<float>(a), (std::vector<float>{1.2f, 3.4f, 5.7f, 5.f}));
  // Axes input (opset 18).
  Tensor ax = i64({-1});
  Tensor p2 = i64({1, 1});
  EXPECT_EQ(Op("Pad", 18).run1({&x, &p2, nullptr, &ax}).shape(), (Shape{3, 4}));
}

TEST(TnPad, RandomAgainstNaive) {
  std::mt19937 rng(61);
  const char* modes[] = {"constant", "reflect", "edge", "wrap"};
  for (int iter = 0; iter < 60; ++iter) {
    DType dt = kSizes[iter % 4];
    std::string mode = modes[(iter / 4) % 4];
    int rank = 1 + (int)(rng() % 3);
    Shape s = randomShape(rng, rank, 5);
    std::vector<int64_t> pads((size_t)(2 * rank));
    Shape out = s;
    for (int k = 0; k < rank; ++k) {
      int64_t lim = mode == "reflect" ? s[(size_t)k] - 1 : 3;
      int64_t b = (int64_t)(rng() % (uint32_t)(lim + 2)) - 1;
      int64_t e = (int64_t)(rng() % (uint32_t)(lim + 2)) - 1;
      if (b < 0 && e < 0 && s[(size_t)k] < 3) b = 0;
      if (b + e + s[(size_t)k] < 1) b = e = 0;
      if (mode == "reflect") b = std::min(b, lim), e = std::min(e, lim);
      pads[(size_t)k] = b;
      pads[(size_t)(k + rank)] = e;
      out[(size_t)k] = s[(size_t)k] + b + e;
    }
    Tensor x = randomTensor(dt, s, rng);
    Tensor tp = i64(pads);
    Tensor cv = randomTensor(dt, {}, rng);
    Tensor y = Op("Pad", 19).s("mode", mode).run1({&x, &tp, &cv});
    expectGather(
        y, x, out,
        [&](int64_t i) {
          auto c = unravel(i, out);
          for (int k = 0; k < rank; ++k) {
            int64_t n = s[(size_t)k];
            int64_t v = c[(size_t)k] - pads[(size_t)k];
            if (v < 0 || v >= n) {
              if (mode == "constant") return (int64_t)-1;
              if (mode == "edge") v = v < 0 ? 0 : n - 1;
              if (mode == "wrap") v = ((v % n) + n) % n;
              if (mode == "reflect") {
                while (v < 0 || v >= n) v = v < 0 ? -v : 2 * (n - 1) - v;
              }
            }
            c[(size_t)k] = v;
          }
          return ravel(c, s);
        },
        cv.raw());
  }
}

// ---------------------------------------------------------------- Range / CumSum / TopK / NonZero / OneHot
TEST(TnRange, Types) {
  Tensor s = Tensor::scalar<float>(1.f), l = Tensor::scalar<float>(5.f), d = Tensor::scalar<float>(2.f);
  EXPECT_EQ(vals<float>(Op("Range", 11).run1({&s, &l, &d})), (std::vector<float>{1, 3}));
  Tensor si = Tensor::scalar<int32_t>(10), li = Tensor::scalar<int32_t>(6), di = Tensor::scalar<int32_t>(-3);
  EXPECT_EQ(vals<int32_t>(Op("Range", 11).run1({&si, &li, &di})), (std::vector<int32_t>{10, 7}));
  Tensor s64 = Tensor::scalar<int64_t>(0), l64 = Tensor::scalar<int64_t>(-1), d64 = Tensor::scalar<int64_t>(1);
  EXPECT_EQ(Op("Range", 11).run1({&s64, &l64, &d64}).numel(), 0);
  Tensor sd = Tensor::scalar<double>(0.0), ld = Tensor::scalar<double>(1.0), dd = Tensor::scalar<double>(0.25);
  EXPECT_EQ(vals<double>(Op("Range", 11).run1({&sd, &ld, &dd})), (std::vector<double>{0, 0.25, 0.5, 0.75}));
  Tensor z = Tensor::scalar<int64_t>(0);
  std::vector<Tensor> outs;
  EXPECT_FALSE(Op("Range", 11).run({&s64, &l64, &z}, 1, outs).isOk());
}

template <class T>
void cumsumCheck(std::mt19937& rng) {
  for (int iter = 0; iter < 16; ++iter) {
    int rank = 1 + (int)(rng() % 3);
    Shape s = randomShape(rng, rank, 5);
    int64_t axis = (int64_t)(rng() % (uint32_t)rank);
    bool excl = iter & 1, rev = iter & 2;
    Tensor x(DTypeOf<T>::value, s);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<T>()[i] = (T)((int)(rng() % 11) - 5);
    Tensor ta = iter & 4 ? Tensor::scalar<int32_t>((int32_t)(axis - rank)) : Tensor::scalar<int64_t>(axis);
    Tensor y = Op("CumSum", 14).i("exclusive", excl).i("reverse", rev).run1({&x, &ta});
    ASSERT_EQ(y.shape(), s);
    for (int64_t i = 0; i < y.numel(); ++i) {
      auto c = unravel(i, s);
      T want = 0;
      for (int64_t j = 0; j < s[(size_t)axis]; ++j) {
        bool take = rev ? (excl ? j > c[(size_t)axis] : j >= c[(size_t)axis])
                        : (excl ? j < c[(size_t)axis] : j <= c[(size_t)axis]);
        if (!take) continue;
        auto cc = c;
        cc[(size_t)axis] = j;
        want = (T)(want + x.data<T>()[ravel(cc, s)]);
      }
      ASSERT_EQ(y.data<T>()[i], want);
    }
  }
}

TEST(TnCumSum, RandomAgainstNaive) {
  std::mt19937 rng(71);
  cumsumCheck<float>(rng);
  cumsumCheck<double>(rng);
  cumsumCheck<int32_t>(rng);
  cumsumCheck<int64_t>(rng);
  Tensor x = tv<float>({1, 2, 3, 4, 5}, {5});
  Tensor ax = Tensor::scalar<int32_t>(0);
  EXPECT_EQ(vals<float>(Op("CumSum", 11).i("exclusive", 1).i("reverse", 1).run1({&x, &ax})),
            (std::vector<float>{14, 12, 9, 5, 0}));
}

template <class T>
void topkCheck(std::mt19937& rng) {
  for (int iter = 0; iter < 16; ++iter) {
    int rank = 1 + (int)(rng() % 3);
    Shape s = randomShape(rng, rank, 6);
    int64_t axis = (int64_t)(rng() % (uint32_t)rank);
    int64_t n = s[(size_t)axis];
    int64_t k = (int64_t)(rng() % (uint32_t)(n + 1));
    bool largest = iter & 1;
    Tensor x(DTypeOf<T>::value, s);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<T>()[i] = (T)(rng() % 4);  // many ties
    Tensor tk = i64({k});
    std::vector<Tensor> outs;
    ASSERT_TRUE(Op("TopK", 11).i("axis", axis).i("largest", largest).run({&x, &tk}, 2, outs).isOk());
    Shape os = s;
    os[(size_t)axis] = k;
    ASSERT_EQ(outs[0].shape(), os);
    for (int64_t i = 0; i < outs[0].numel(); ++i) {
      auto c = unravel(i, os);
      std::vector<std::pair<T, int64_t>> lane;
      for (int64_t j = 0; j < n; ++j) {
        auto cc = c;
        cc[(size_t)axis] = j;
        lane.push_back({x.data<T>()[ravel(cc, s)], j});
      }
      std::stable_sort(lane.begin(), lane.end(),
                       [&](auto& a, auto& b) { return largest ? a.first > b.first : a.first < b.first; });
      ASSERT_EQ(outs[0].data<T>()[i], lane[(size_t)c[(size_t)axis]].first);
      ASSERT_EQ(outs[1].data<int64_t>()[i], lane[(size_t)c[(size_t)axis]].second);
    }
  }
}

TEST(TnTopK, RandomAgainstNaive) {
  std::mt19937 rng(81);
  topkCheck<float>(rng);
  topkCheck<double>(rng);
  topkCheck<int32_t>(rng);
  topkCheck<int64_t>(rng);
}

TEST(TnTopK, SpecAndOldForm) {
  std::vector<float> v = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  Tensor x = tv<float>(v, {3, 4});
  std::vector<Tensor> outs;
  ASSERT_TRUE(Op("TopK", 1).i("k", 3).run({&x}, 2, outs).isOk());
  EXPECT_EQ(vals<float>(outs[0]), (std::vector<float>{3, 2, 1, 7, 6, 5, 11, 10, 9}));
  EXPECT_EQ(vals<int64_t>(outs[1]), (std::vector<int64_t>{3, 2, 1, 3, 2, 1, 3, 2, 1}));
  Tensor k = i64({2});
  ASSERT_TRUE(Op("TopK", 11).i("largest", 0).i("axis", -2).run({&x, &k}, 2, outs).isOk());
  EXPECT_EQ(vals<float>(outs[0]), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  Tensor big = i64({5});
  EXPECT_FALSE(Op("TopK", 11).run({&x, &big}, 2, outs).isOk());
  // float16 values are returned bit-exactly.
  Tensor h(DType::Float16, {3});
  h.data<uint16_t>()[0] = floatToHalf(1.5f);
  h.data<uint16_t>()[1] = floatToHalf(-2.f);
  h.data<uint16_t>()[2] = floatToHalf(7.f);
  Tensor k1 = i64({1});
  ASSERT_TRUE(Op("TopK", 11).run({&h, &k1}, 2, outs).isOk());
  EXPECT_EQ(outs[0].data<uint16_t>()[0], floatToHalf(7.f));
}

TEST(TnNonZero, Spec) {
  Tensor x = tv<float>({1, 0, 1, 1}, {2, 2});
  Tensor y = Op("NonZero", 13).run1({&x});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(vals<int64_t>(y), (std::vector<int64_t>{0, 1, 1, 0, 0, 1}));
  Tensor b = tv<bool>({false, true, false}, {3});
  EXPECT_EQ(vals<int64_t>(Op("NonZero", 13).run1({&b})), (std::vector<int64_t>{1}));
  Tensor nz = tv<float>({-0.0f, 0.0f}, {2});
  EXPECT_EQ(Op("NonZero", 13).run1({&nz}).shape(), (Shape{1, 0}));
}

TEST(TnOneHot, AxesAndNegative) {
  Tensor ind = tv<int64_t>({0, 7, 8, -1}, {4});
  Tensor depth = Tensor::scalar<float>(8.f);
  Tensor v = tv<int32_t>({1, 3}, {2});
  Tensor y = Op("OneHot", 11).run1({&ind, &depth, &v});
  EXPECT_EQ(y.shape(), (Shape{4, 8}));
  std::vector<int32_t> want(32, 1);
  want[0] = 3;
  want[8 + 7] = 3;
  want[24 + 7] = 3;  // -1 -> 7; 8 is out of range (all off)
  EXPECT_EQ(vals<int32_t>(y), want);
  Tensor ind2 = tv<float>({1, 0}, {2});
  Tensor d3 = Tensor::scalar<int64_t>(3);
  Tensor fv = tv<float>({0, 1}, {2});
  Tensor y2 = Op("OneHot", 11).i("axis", 0).run1({&ind2, &d3, &fv});
  EXPECT_EQ(y2.shape(), (Shape{3, 2}));
  EXPECT_EQ(vals<float>(y2), (std::vector<float>{0, 1, 1, 0, 0, 0}));
}

}  // namespace
}  // namespace qs
