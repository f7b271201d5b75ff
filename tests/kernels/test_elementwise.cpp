// Tests of the 'elementwise' kernel group: spec literals and seeded random broadcasting cases
// against naive references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/exec/kernel_registry.h"
#include "core/ir/half.h"
#include "core/kernels/cast.h"
#include "core/kernels/elementwise.h"

namespace qs {
namespace {

Attribute attrI(int64_t v) {
  Attribute a;
  a.type = Attribute::Type::Int;
  a.i = v;
  return a;
}
Attribute attrF(float v) {
  Attribute a;
  a.type = Attribute::Type::Float;
  a.f = v;
  return a;
}
Attribute attrS(const std::string& v) {
  Attribute a;
  a.type = Attribute::Type::String;
  a.s = v;
  return a;
}

const KernelEntry* findEntry(const std::string& op, int64_t opset) {
  static const std::vector<KernelEntry> table = elementwiseKernels();
  for (const auto& e : table)
    if (e.opType == op && opset >= e.sinceVersion && opset <= e.untilVersion) return &e;
  return nullptr;
}

/// Creates the kernel of `op` at `opset` with `attrs`; fails the test when creation fails.
Result<std::unique_ptr<Kernel>> makeOp(const std::string& op, int64_t opset,
                                       const std::map<std::string, Attribute>& attrs = {}) {
  static Graph graph;
  Node node;
  node.name = "n";
  node.opType = op;
  node.attributes = attrs;
  const KernelEntry* e = findEntry(op, opset);
  if (!e) return unsupported("no kernel for " + op + " at opset " + std::to_string(opset));
  KernelInit init{node, opset, graph};
  return e->create(init);
}

/// Runs `op` on inputs (an empty Tensor stands for an omitted optional input).
Tensor runOp(const std::string& op, int64_t opset, const std::vector<Tensor>& inputs,
             const std::map<std::string, Attribute>& attrs = {}, int threads = 1, Status* status = nullptr) {
  auto k = makeOp(op, opset, attrs);
  EXPECT_TRUE(k.isOk()) << k.status().message();
  if (!k.isOk()) return {};
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : inputs) ptrs.push_back(t.empty() ? nullptr : &t);
  std::vector<Tensor> outs(1);
  KernelContext ctx;
  ctx.inputs = ptrs;
  ctx.outputs = outs;
  ctx.threads = threads;
  Status st = k.value()->run(ctx);
  if (status) {
    *status = st;
  } else {
    EXPECT_TRUE(st.isOk()) << st.message();
  }
  return outs[0];
}

template <class T>
Tensor make(const std::vector<T>& v, Shape s) {
  return Tensor::fromVector<T>(v, std::move(s));
}

template <class T>
std::vector<T> values(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DTypeOf<T>::value);
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

Tensor randomFloat(const Shape& s, std::mt19937& rng, float lo = -3.f, float hi = 3.f) {
  Tensor t(DType::Float, s);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

/// Index of output element `i` in an input of shape `in` broadcast to `out` (naive reference).
int64_t bcastIndex(const Shape& out, const Shape& in, int64_t i) {
  int64_t idx = 0, mul = 1;
  int64_t rem = i;
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t c = rem % out[d];
    rem /= out[d];
    const size_t lead = out.size() - in.size();
    if (d >= lead) {
      const int64_t dim = in[d - lead];
      idx += (dim == 1 ? 0 : c) * mul;
      mul *= dim;
    }
  }
  return idx;
}

/// A random pair of broadcast-compatible shapes.
std::pair<Shape, Shape> randomShapes(std::mt19937& rng, int64_t maxDim = 5) {
  std::uniform_int_distribution<int> rankD(0, 5), dimD(1, (int)maxDim), coin(0, 3);
  const int r = rankD(rng);
  Shape full;
  for (int i = 0; i < r; ++i) full.push_back(dimD(rng));
  Shape a = full, b = full;
  for (int i = 0; i < r; ++i) {
    const int c = coin(rng);
    if (c == 1) a[(size_t)i] = 1;
    if (c == 2) b[(size_t)i] = 1;
  }
  // Drop leading dims of one side sometimes.
  const int dropA = std::uniform_int_distribution<int>(0, r)(rng) / 2;
  const int dropB = coin(rng) == 0 ? std::uniform_int_distribution<int>(0, r)(rng) : 0;
  a.erase(a.begin(), a.begin() + std::min<int>(dropA, (int)a.size()));
  b.erase(b.begin(), b.begin() + std::min<int>(dropB, (int)b.size()));
  return {a, b};
}

// ---- broadcasting -------------------------------------------------------------------------------

TEST(EwBroadcast, PlanCollapsesDims) {
  ew::BroadcastPlan p;
  Shape a{2, 3, 4, 5}, b{1, 3, 1, 1};
  ASSERT_TRUE(ew::planBroadcast({&a, &b}, p));
  EXPECT_EQ(p.outShape, a);
  EXPECT_EQ(p.dims, (std::vector<int64_t>{2, 3, 20}));
  EXPECT_EQ(p.strides[1], (std::vector<int64_t>{0, 1, 0}));
  Shape c{4, 5}, d{4, 5};
  ASSERT_TRUE(ew::planBroadcast({&c, &d}, p));
  EXPECT_EQ(p.dims, (std::vector<int64_t>{20}));
  Shape e{}, f{3, 1};
  ASSERT_TRUE(ew::planBroadcast({&e, &f}, p));
  EXPECT_EQ(p.outShape, (Shape{3, 1}));
  Shape g{3}, h{4};
  EXPECT_FALSE(ew::planBroadcast({&g, &h}, p));
}

TEST(EwBroadcast, RandomBinaryAgainstNaive) {
  std::mt19937 rng(1234);
  const char* ops[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};
  for (int iter = 0; iter < 120; ++iter) {
    auto [sa, sb] = randomShapes(rng);
    const char* op = ops[iter % 7];
    Tensor a = randomFloat(sa, rng, std::string(op) == "Pow" ? 0.1f : -3.f, 3.f);
    Tensor b = randomFloat(sb, rng, 0.5f, 2.f);
    Tensor out = runOp(op, 13, {a, b}, {}, 1 + iter % 3);
    Shape so;
    ASSERT_TRUE(broadcastShapes(sa, sb, so));
    ASSERT_EQ(out.shape(), so) << op;
    for (int64_t i = 0; i < out.numel(); ++i) {
      const float x = a.data<float>()[bcastIndex(so, sa, i)], y = b.data<float>()[bcastIndex(so, sb, i)];
      float ref = 0;
      std::string o = op;
      if (o == "Add") ref = x + y;
      if (o == "Sub") ref = x - y;
      if (o == "Mul") ref = x * y;
      if (o == "Div") ref = x / y;
      if (o == "Max") ref = std::max(x, y);
      if (o == "Min") ref = std::min(x, y);
      if (o == "Pow") ref = std::pow(x, y);
      ASSERT_NEAR(out.data<float>()[i], ref, 1e-5f * std::max(1.f, std::fabs(ref)))
          << op << " " << shapeToString(sa) << " " << shapeToString(sb) << " at " << i;
    }
  }
}

TEST(EwBroadcast, LargeParallelChunksMatchSerial) {
  std::mt19937 rng(7);
  // Sizes well above the parallel grain so that chunks split rows.
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 7, 129, 67}, {7, 1, 67}}, {{200000}, {}}, {{1, 70001}, {3, 1}}, {{5, 3, 40000}, {5, 1, 1}}};
  for (const auto& [sa, sb] : cases) {
    Tensor a = randomFloat(sa, rng), b = randomFloat(sb, rng);
    Tensor serial = runOp("Mul", 14, {a, b}, {}, 1);
    Tensor par = runOp("Mul", 14, {a, b}, {}, 4);
    ASSERT_EQ(serial.shape(), par.shape());
    Shape so = serial.shape();
    for (int64_t i = 0; i < serial.numel(); ++i) {
      const float ref = a.data<float>()[bcastIndex(so, sa, i)] * b.data<float>()[bcastIndex(so, sb, i)];
      ASSERT_EQ(par.data<float>()[i], ref) << i;
      ASSERT_EQ(serial.data<float>()[i], ref) << i;
    }
  }
}

TEST(EwBroadcast, IncompatibleShapesFail) {
  Status st;
  runOp("Add", 13, {Tensor::zeros(DType::Float, {2, 3}), Tensor::zeros(DType::Float, {4})}, {}, 1, &st);
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("[2,3]"), std::string::npos) << st.message();
}

TEST(EwBroadcast, WhereThreeWayRandom) {
  std::mt19937 rng(99);
  for (int iter = 0; iter < 60; ++iter) {
    auto [sa, sb] = randomShapes(rng);
    auto [sc, sd] = randomShapes(rng);
    (void)sd;
    Shape ab, tmp;
    if (!broadcastShapes(sa, sb, ab) || !broadcastShapes(ab, sc, tmp)) continue;
    Tensor c(DType::Bool, sc);
    for (int64_t i = 0; i < c.numel(); ++i) c.data<bool>()[i] = rng() & 1;
    Tensor x = randomFloat(sa, rng), y = randomFloat(sb, rng);
    Tensor out = runOp("Where", 16, {c, x, y}, {}, 2);
    ASSERT_EQ(out.shape(), tmp);
    for (int64_t i = 0; i < out.numel(); ++i) {
      const bool cv = c.data<bool>()[bcastIndex(tmp, sc, i)];
      const float ref = cv ? x.data<float>()[bcastIndex(tmp, sa, i)] : y.data<float>()[bcastIndex(tmp, sb, i)];
      ASSERT_EQ(out.data<float>()[i], ref);
    }
  }
  // int64 payload
  Tensor out = runOp("Where", 16,
                     {make<bool>({true, false}, {2}), make<int64_t>({1, 2, 3, 4}, {2, 2}), make<int64_t>({9}, {})});
  EXPECT_EQ(values<int64_t>(out), (std::vector<int64_t>{1, 9, 3, 9}));
}

TEST(EwBroadcast, VariadicOverNInputs) {
  std::mt19937 rng(5);
  Tensor a = randomFloat({3, 1, 4}, rng), b = randomFloat({2, 1}, rng), c = randomFloat({4}, rng);
  Shape so{3, 2, 4};
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
    Tensor out = runOp(op, 13, {a, b, c});
    ASSERT_EQ(out.shape(), so);
    for (int64_t i = 0; i < out.numel(); ++i) {
      const float x = a.data<float>()[bcastIndex(so, a.shape(), i)];
      const float y = b.data<float>()[bcastIndex(so, b.shape(), i)];
      const float z = c.data<float>()[bcastIndex(so, c.shape(), i)];
      std::string o = op;
      float ref = o == "Sum" ? x + y + z : o == "Mean" ? (x + y + z) / 3 : o == "Max" ? std::max({x, y, z}) : std::min({x, y, z});
      ASSERT_NEAR(out.data<float>()[i], ref, 1e-6f) << op;
    }
  }
  Tensor one = runOp("Max", 13, {a});
  EXPECT_EQ(values<float>(one), values<float>(a));
  Tensor mi = runOp("Max", 13, {make<int32_t>({1, 5, -3}, {3}), make<int32_t>({2}, {1})});
  EXPECT_EQ(values<int32_t>(mi), (std::vector<int32_t>{2, 5, 2}));
  // Max propagates NaN.
  Tensor nan = runOp("Max", 13, {make<float>({NAN, 1.f}, {2}), make<float>({0.f, NAN}, {2})});
  EXPECT_TRUE(std::isnan(nan.data<float>()[0]));
  EXPECT_TRUE(std::isnan(nan.data<float>()[1]));
}

// ---- binary spec literals -----------------------------------------------------------------------

TEST(EwBinary, ModSigns) {
  // fmod=0: sign of the divisor (integers)
  Tensor a = make<int32_t>({-4, 7, 5, 4, -7, 8}, {6});
  Tensor b = make<int32_t>({2, -3, 8, -2, 3, 5}, {6});
  EXPECT_EQ(values<int32_t>(runOp("Mod", 13, {a, b})), (std::vector<int32_t>{0, -2, 5, 0, 2, 3}));
  // fmod=1: sign of the dividend
  EXPECT_EQ(values<int32_t>(runOp("Mod", 13, {a, b}, {{"fmod", attrI(1)}})),
            (std::vector<int32_t>{0, 1, 5, 0, -1, 3}));
  Tensor fa = make<float>({-4.3f, 7.2f, 5.0f, 4.3f, -7.2f, 8.0f}, {6});
  Tensor fb = make<float>({2.1f, -3.4f, 8.0f, -2.1f, 3.4f, 5.0f}, {6});
  auto r = values<float>(runOp("Mod", 13, {fa, fb}, {{"fmod", attrI(1)}}));
  const float ref[] = {-0.1f, 0.4f, 5.f, 0.1f, -0.4f, 3.f};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(r[(size_t)i], ref[i], 1e-5f);
  // division by zero does not trap
  EXPECT_EQ(values<int32_t>(runOp("Mod", 13, {make<int32_t>({5}, {1}), make<int32_t>({0}, {1})})),
            (std::vector<int32_t>{0}));
  EXPECT_EQ(values<int64_t>(runOp("Div", 13, {make<int64_t>({7, -7, 5}, {3}), make<int64_t>({2, 2, 0}, {3})})),
            (std::vector<int64_t>{3, -3, 0}));
}

TEST(EwBinary, PowMixedTypes) {
  Tensor base = make<float>({1.f, 2.f, 3.f}, {3});
  EXPECT_EQ(values<float>(runOp("Pow", 15, {base, make<int64_t>({2, 3, 0}, {3})})),
            (std::vector<float>{1.f, 8.f, 1.f}));
  EXPECT_EQ(values<int32_t>(runOp("Pow", 15, {make<int32_t>({1, 2, 3}, {3}), make<float>({4.f, 5.f, 0.5f}, {3})})),
            (std::vector<int32_t>{1, 32, 1}));
  EXPECT_EQ(values<int64_t>(runOp("Pow", 15, {make<int64_t>({1, 2, -3}, {3}), make<int64_t>({4, 5, 3}, {3})})),
            (std::vector<int64_t>{1, 32, -27}));
  EXPECT_EQ(values<float>(runOp("Pow", 15, {make<float>({3.f, -2.f}, {2}), make<float>({2.f}, {})})),
            (std::vector<float>{9.f, 4.f}));
}

TEST(EwBinary, ComparisonsAndLogic) {
  Tensor a = make<float>({1.f, 2.f, 3.f}, {3});
  Tensor b = make<float>({2.f}, {});
  auto vb = [](const Tensor& t) {
    std::vector<int> v;
    for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.data<bool>()[i]);
    return v;
  };
  EXPECT_EQ(vb(runOp("Equal", 13, {a, b})), (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(vb(runOp("Less", 13, {a, b})), (std::vector<int>{1, 0, 0}));
  EXPECT_EQ(vb(runOp("LessOrEqual", 16, {a, b})), (std::vector<int>{1, 1, 0}));
  EXPECT_EQ(vb(runOp("Greater", 13, {a, b})), (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(vb(runOp("GreaterOrEqual", 16, {a, b})), (std::vector<int>{0, 1, 1}));
  Tensor x = make<bool>({true, true, false, false}, {2, 2});
  Tensor y = make<bool>({true, false}, {2});
  EXPECT_EQ(vb(runOp("And", 7, {x, y})), (std::vector<int>{1, 0, 0, 0}));
  EXPECT_EQ(vb(runOp("Or", 7, {x, y})), (std::vector<int>{1, 1, 1, 0}));
  EXPECT_EQ(vb(runOp("Xor", 7, {x, y})), (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(vb(runOp("Not", 1, {x})), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(vb(runOp("Equal", 13, {make<int64_t>({1, 5}, {2}), make<int64_t>({5}, {1})})), (std::vector<int>{0, 1}));
}

TEST(EwBinary, Float16ComputedInFloat) {
  Tensor a(DType::Float16, {3}), b(DType::Float16, {3});
  const float av[] = {1.5f, -2.f, 0.25f}, bv[] = {0.5f, 4.f, 0.25f};
  for (int i = 0; i < 3; ++i) {
    a.data<uint16_t>()[i] = floatToHalf(av[i]);
    b.data<uint16_t>()[i] = floatToHalf(bv[i]);
  }
  Tensor out = runOp("Add", 14, {a, b});
  ASSERT_EQ(out.dtype(), DType::Float16);
  EXPECT_EQ(halfToFloat(out.data<uint16_t>()[0]), 2.f);
  EXPECT_EQ(halfToFloat(out.data<uint16_t>()[1]), 2.f);
  EXPECT_EQ(halfToFloat(out.data<uint16_t>()[2]), 0.5f);
}

TEST(EwBinary, PReluBroadcastSlope) {
  Tensor x = make<float>({-1.f, 2.f, -3.f, 4.f, -5.f, 6.f}, {2, 3});
  Tensor s = make<float>({0.1f, 0.2f, 0.3f}, {3});
  auto r = values<float>(runOp("PRelu", 16, {x, s}));
  const float ref[] = {-0.1f, 2.f, -0.9f, 4.f, -1.0f, 6.f};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(r[(size_t)i], ref[i], 1e-6f);
  Status st;
  runOp("PRelu", 16, {make<float>({1.f}, {1}), s}, {}, 1, &st);
  EXPECT_FALSE(st.isOk());
}

// ---- unary --------------------------------------------------------------------------------------

TEST(EwUnary, RandomAgainstStd) {
  std::mt19937 rng(42);
  Tensor x = randomFloat({40000}, rng, -12.f, 12.f);
  x.data<float>()[0] = 0.f;
  x.data<float>()[1] = -0.f;
  x.data<float>()[2] = 1e-7f;
  struct Case {
    const char* op;
    std::map<std::string, Attribute> attrs;
    double (*ref)(double);
    int64_t opset;
  };
  const std::vector<Case> cases = {
      {"Relu", {}, [](double v) { return v < 0 ? 0.0 : v; }, 14},
      {"LeakyRelu", {}, [](double v) { return v < 0 ? 0.01 * v : v; }, 16},
      {"Elu", {}, [](double v) { return v > 0 ? v : std::exp(v) - 1; }, 6},
      {"Selu", {}, [](double v) { return 1.0507009873554804934193349852946 * (v > 0 ? v : 1.6732632423543772848170429916717 * (std::exp(v) - 1)); }, 6},
      {"Sigmoid", {}, [](double v) { return 1 / (1 + std::exp(-v)); }, 13},
      {"HardSigmoid", {}, [](double v) { return std::max(0.0, std::min(1.0, 0.2 * v + 0.5)); }, 6},
      {"HardSwish", {}, [](double v) { return v * std::max(0.0, std::min(1.0, v / 6 + 0.5)); }, 14},
      {"Tanh", {}, [](double v) { return std::tanh(v); }, 13},
      {"Softplus", {}, [](double v) { return std::log1p(std::exp(v)); }, 1},
      {"Erf", {}, [](double v) { return std::erf(v); }, 13},
      {"Gelu", {}, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, 20},
      {"Gelu", {{"approximate", attrS("tanh")}},
       [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }, 20},
      {"Exp", {}, [](double v) { return std::exp(v); }, 13},
      {"Neg", {}, [](double v) { return -v; }, 13},
      {"Abs", {}, [](double v) { return std::fabs(v); }, 13},
      {"Floor", {}, [](double v) { return std::floor(v); }, 13},
      {"Ceil", {}, [](double v) { return std::ceil(v); }, 13},
      {"Sign", {}, [](double v) { return double((v > 0) - (v < 0)); }, 13},
      {"Reciprocal", {}, [](double v) { return 1 / v; }, 13},
  };
  for (const auto& c : cases) {
    Tensor y = runOp(c.op, c.opset, {x}, c.attrs, 3);
    ASSERT_EQ(y.shape(), x.shape()) << c.op;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double ref = c.ref((double)x.data<float>()[i]);
      if (std::isinf(ref)) {
        ASSERT_EQ(y.data<float>()[i], ref) << c.op;
        continue;
      }
      ASSERT_NEAR(y.data<float>()[i], ref, 2e-6 * std::max(1.0, std::fabs(ref))) << c.op << " x=" << x.data<float>()[i];
    }
  }
  Tensor pos = randomFloat({5000}, rng, 1e-3f, 100.f);
  Tensor lg = runOp("Log", 13, {pos});
  Tensor sq = runOp("Sqrt", 13, {pos});
  for (int64_t i = 0; i < pos.numel(); ++i) {
    ASSERT_NEAR(lg.data<float>()[i], std::log((double)pos.data<float>()[i]), 2e-6);
    ASSERT_NEAR(sq.data<float>()[i], std::sqrt((double)pos.data<float>()[i]), 2e-6 * std::sqrt(100.0));
  }
}

TEST(EwUnary, RoundHalfToEvenAndSpecials) {
  Tensor x = make<float>({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 2.4f, -2.6f}, {8});
  EXPECT_EQ(values<float>(runOp("Round", 11, {x})), (std::vector<float>{0, 2, 2, -0.f, -2, -2, 2, -3}));
  Tensor big = make<float>({-1000.f, 1000.f, NAN}, {3});
  auto sg = values<float>(runOp("Sigmoid", 13, {big}));
  EXPECT_EQ(sg[0], 0.f);
  EXPECT_EQ(sg[1], 1.f);
  EXPECT_TRUE(std::isnan(sg[2]));
  auto sp = values<float>(runOp("Softplus", 1, {big}));
  EXPECT_EQ(sp[0], 0.f);
  EXPECT_EQ(sp[1], 1000.f);
  auto th = values<float>(runOp("Tanh", 13, {big}));
  EXPECT_EQ(th[0], -1.f);
  EXPECT_EQ(th[1], 1.f);
  auto re = values<float>(runOp("Relu", 14, {big}));
  EXPECT_TRUE(std::isnan(re[2]));
  EXPECT_EQ(values<int32_t>(runOp("Relu", 14, {make<int32_t>({-3, 4}, {2})})), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(values<int8_t>(runOp("Abs", 13, {make<int8_t>({-3, 4, -128}, {3})})), (std::vector<int8_t>{3, 4, -128}));
  EXPECT_EQ(values<int64_t>(runOp("Neg", 13, {make<int64_t>({-3, 4}, {2})})), (std::vector<int64_t>{3, -4}));
  auto d = values<double>(runOp("Exp", 13, {make<double>({0.0, 1.0}, {2})}));
  EXPECT_NEAR(d[1], M_E, 1e-14);
  Status st;
  runOp("Exp", 13, {make<int32_t>({1}, {1})}, {}, 1, &st);
  EXPECT_EQ(st.code(), StatusCode::Unsupported);
}

TEST(EwUnary, ClipForms) {
  Tensor x = make<float>({-2.f, 0.f, 2.f, NAN}, {4});
  auto a = values<float>(runOp("Clip", 6, {x}, {{"min", attrF(-1.f)}, {"max", attrF(1.f)}}));
  EXPECT_EQ(a[0], -1.f);
  EXPECT_EQ(a[2], 1.f);
  EXPECT_TRUE(std::isnan(a[3]));
  auto b = values<float>(runOp("Clip", 13, {x, Tensor(), Tensor::scalar<float>(1.f)}));
  EXPECT_EQ(b[0], -2.f);
  EXPECT_EQ(b[2], 1.f);
  auto c = values<int8_t>(runOp("Clip", 13, {make<int8_t>({-100, 5, 100}, {3}), Tensor::scalar<int8_t>(-10)}));
  EXPECT_EQ(c, (std::vector<int8_t>{-10, 5, 100}));
  auto d = values<float>(runOp("Clip", 13, {x, Tensor::scalar<float>(2.f), Tensor::scalar<float>(1.f)}));
  EXPECT_EQ(d[0], 1.f);  // min > max: all max
}

// ---- softmax ------------------------------------------------------------------------------------

void softmaxRef(const std::vector<float>& x, std::vector<double>& y, int64_t outer, int64_t L, int64_t inner, bool log) {
  y.assign(x.size(), 0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double m = -INFINITY, s = 0;
      for (int64_t l = 0; l < L; ++l) m = std::max(m, (double)x[(size_t)((o * L + l) * inner + j)]);
      for (int64_t l = 0; l < L; ++l) s += std::exp(x[(size_t)((o * L + l) * inner + j)] - m);
      for (int64_t l = 0; l < L; ++l) {
        const double v = x[(size_t)((o * L + l) * inner + j)] - m;
        y[(size_t)((o * L + l) * inner + j)] = log ? v - std::log(s) : std::exp(v) / s;
      }
    }
}

TEST(EwSoftmax, AxisFormsAgainstNaive) {
  std::mt19937 rng(3);
  Tensor x = randomFloat({3, 4, 300}, rng, -20.f, 20.f);
  std::vector<float> xv = values<float>(x);
  std::vector<double> ref;
  for (bool log : {false, true}) {
    const char* op = log ? "LogSoftmax" : "Softmax";
    struct C {
      int64_t opset, axis, outer, L, inner;
    } cases[] = {{13, -1, 12, 300, 1}, {13, 1, 3, 4, 300}, {13, 0, 1, 3, 1200}, {11, 1, 3, 1200, 1},
                 {11, 2, 12, 300, 1},  {11, 0, 1, 3600, 1}};
    for (const auto& c : cases) {
      Tensor y = runOp(op, c.opset, {x}, {{"axis", attrI(c.axis)}}, 2);
      softmaxRef(xv, ref, c.outer, c.L, c.inner, log);
      for (int64_t i = 0; i < y.numel(); ++i)
        ASSERT_NEAR(y.data<float>()[i], ref[(size_t)i], 1e-6 + 1e-5 * std::fabs(ref[(size_t)i]))
            << op << " opset " << c.opset << " axis " << c.axis << " at " << i;
    }
  }
  // defaults: opset 11 axis=1 coerces, opset 13 axis=-1
  Tensor y11 = runOp("Softmax", 11, {x});
  softmaxRef(xv, ref, 3, 1200, 1, false);
  EXPECT_NEAR(y11.data<float>()[5], ref[5], 1e-6);
  Tensor big = make<float>({10000.f, 10001.f, 10002.f}, {1, 3});
  auto v = values<float>(runOp("Softmax", 13, {big}));
  EXPECT_NEAR(v[2], 0.66524096f, 1e-6f);
}

// ---- cast ---------------------------------------------------------------------------------------

TEST(EwCast, NumpyConversions) {
  Tensor x = make<float>({1.7f, -1.7f, 300.f, -0.f, 0.5f}, {5});
  EXPECT_EQ(values<int32_t>(runOp("Cast", 13, {x}, {{"to", attrI((int)DType::Int32)}})),
            (std::vector<int32_t>{1, -1, 300, 0, 0}));
  EXPECT_EQ(values<int8_t>(runOp("Cast", 13, {x}, {{"to", attrI((int)DType::Int8)}})),
            (std::vector<int8_t>{1, -1, 44, 0, 0}));
  Tensor b = runOp("Cast", 13, {x}, {{"to", attrI((int)DType::Bool)}});
  EXPECT_EQ(b.data<bool>()[0], true);
  EXPECT_EQ(b.data<bool>()[3], false);
  Tensor h = runOp("Cast", 13, {make<double>({0.1, 65519.0, 1e6}, {3})}, {{"to", attrI((int)DType::Float16)}});
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(h.data<uint16_t>()[0], floatToHalf(0.1f));
  EXPECT_EQ(halfToFloat(h.data<uint16_t>()[1]), 65504.f);
  EXPECT_TRUE(std::isinf(halfToFloat(h.data<uint16_t>()[2])));
  Tensor bf = runOp("CastLike", 15, {make<float>({1.f, 3.14159f}, {2}), Tensor(DType::BFloat16, {0})});
  EXPECT_EQ(bf.dtype(), DType::BFloat16);
  EXPECT_EQ(bf16ToFloat(bf.data<uint16_t>()[1]), 3.140625f);
  Tensor u = runOp("Cast", 13, {make<bool>({true, false}, {2})}, {{"to", attrI((int)DType::Float)}});
  EXPECT_EQ(values<float>(u), (std::vector<float>{1.f, 0.f}));
  Tensor i64 = runOp("Cast", 13, {make<int64_t>({-1, 256}, {2})}, {{"to", attrI((int)DType::UInt8)}});
  EXPECT_EQ(values<uint8_t>(i64), (std::vector<uint8_t>{255, 0}));
  auto k = makeOp("Cast", 13, {{"to", attrI((int)DType::String)}});
  EXPECT_FALSE(k.isOk());
}

TEST(EwCast, Float8E4M3FN) {
  EXPECT_EQ(floatToFloat8e4m3fn(448.f, true), 0x7e);
  EXPECT_EQ(floatToFloat8e4m3fn(1000.f, true), 0x7e);
  EXPECT_EQ(floatToFloat8e4m3fn(-1000.f, true), 0xfe);
  EXPECT_EQ(floatToFloat8e4m3fn(1000.f, false), 0x7f);
  EXPECT_EQ(floatToFloat8e4m3fn(INFINITY, true), 0x7e);
  EXPECT_EQ(floatToFloat8e4m3fn(464.f, false), 0x7e);  // tie rounds to even (448)
  EXPECT_EQ(floatToFloat8e4m3fn(1.0f, true), 0x38);
  EXPECT_EQ(floatToFloat8e4m3fn(1.0625f, true), 0x38);  // tie between 1 and 1.125 -> even
  EXPECT_EQ(floatToFloat8e4m3fn(1.1875f, true), 0x3a);  // tie between 1.125 and 1.25 -> even (1.25)
  EXPECT_EQ(floatToFloat8e4m3fn(std::ldexp(1.f, -9), true), 0x01);  // smallest subnormal
  EXPECT_EQ(floatToFloat8e4m3fn(std::ldexp(1.f, -10), true), 0x00);  // tie -> 0
  EXPECT_TRUE(std::isnan(float8e4m3fnToFloat(0x7f)));
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    EXPECT_EQ(floatToFloat8e4m3fn(float8e4m3fnToFloat((uint8_t)b), false), b) << b;
  }
}

// ---- Q/DQ ---------------------------------------------------------------------------------------

TEST(EwQuantize, RoundHalfToEvenAndSaturation) {
  Tensor x = make<float>({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 1000.f, -1000.f}, {8});
  Tensor y = runOp("QuantizeLinear", 13, {x, Tensor::scalar<float>(1.f), Tensor::scalar<int8_t>(0)});
  EXPECT_EQ(values<int8_t>(y), (std::vector<int8_t>{0, 2, 2, 0, -2, -2, 127, -128}));
  Tensor u = runOp("QuantizeLinear", 10, {x, Tensor::scalar<float>(0.5f), Tensor::scalar<uint8_t>(128)});
  EXPECT_EQ(values<uint8_t>(u), (std::vector<uint8_t>{129, 131, 133, 127, 125, 123, 255, 0}));
  // zero_point omitted: uint8
  Tensor d = runOp("QuantizeLinear", 13, {make<float>({0.f, 2.f, 3.f, 1000.f, -254.f, -1000.f}, {6}), Tensor::scalar<float>(2.f)});
  EXPECT_EQ(values<uint8_t>(d), (std::vector<uint8_t>{0, 1, 2, 255, 0, 0}));
  // spec example
  Tensor s = runOp("QuantizeLinear", 13,
                   {make<float>({0.f, 2.f, 3.f, 1000.f, -254.f, -1000.f}, {6}), Tensor::scalar<float>(2.f),
                    Tensor::scalar<uint8_t>(128)});
  EXPECT_EQ(values<uint8_t>(s), (std::vector<uint8_t>{128, 129, 130, 255, 1, 0}));
}

TEST(EwQuantize, PerAxis) {
  // x [1,3,2,2], scales along axis 1
  std::vector<float> xv = {-162, 10, -100, 232, -20, -50, -76, 0, 0, 252, 32, -44};
  Tensor x = make<float>(xv, {1, 3, 2, 2});
  Tensor sc = make<float>({2.f, 4.f, 5.f}, {3});
  Tensor zp = make<uint8_t>({84, 24, 196}, {3});
  Tensor y = runOp("QuantizeLinear", 13, {x, sc, zp});
  EXPECT_EQ(values<uint8_t>(y), (std::vector<uint8_t>{3, 89, 34, 200, 19, 12, 5, 24, 196, 246, 202, 187}));
  Tensor dq = runOp("DequantizeLinear", 13, {y, sc, zp});
  auto back = values<float>(dq);
  for (size_t i = 0; i < back.size(); ++i) {
    const float s = i < 4 ? 2.f : i < 8 ? 4.f : 5.f;
    EXPECT_NEAR(back[i], xv[i], s / 2 + 1e-4f) << i;
  }
  // axis attribute other than 1
  Tensor y0 = runOp("QuantizeLinear", 13, {make<float>({1.f, 2.f, 3.f, 4.f}, {2, 2}), make<float>({1.f, 2.f}, {2}),
                                           make<int8_t>({0, 0}, {2})},
                    {{"axis", attrI(0)}});
  EXPECT_EQ(values<int8_t>(y0), (std::vector<int8_t>{1, 2, 2, 2}));
  Tensor y1 = runOp("QuantizeLinear", 13, {make<float>({1.f, 2.f, 3.f, 4.f}, {2, 2}), make<float>({1.f, 2.f}, {2}),
                                           make<int8_t>({0, 0}, {2})},
                    {{"axis", attrI(-1)}});
  EXPECT_EQ(values<int8_t>(y1), (std::vector<int8_t>{1, 1, 3, 2}));
  Status st;
  runOp("QuantizeLinear", 13, {x, make<float>({1.f, 2.f}, {2})}, {}, 1, &st);
  EXPECT_FALSE(st.isOk());
}

TEST(EwQuantize, DequantizeLiteralsAndFloat8) {
  Tensor dq = runOp("DequantizeLinear", 10,
                    {make<uint8_t>({0, 3, 128, 255}, {4}), Tensor::scalar<float>(2.f), Tensor::scalar<uint8_t>(128)});
  EXPECT_EQ(values<float>(dq), (std::vector<float>{-256.f, -250.f, 0.f, 254.f}));
  Tensor dq32 = runOp("DequantizeLinear", 13, {make<int32_t>({-5, 7}, {2}), Tensor::scalar<float>(0.5f)});
  EXPECT_EQ(values<float>(dq32), (std::vector<float>{-2.5f, 3.5f}));
  // float8: zero point of dtype float8e4m3fn selects the output type
  Tensor z8(DType::Float8E4M3FN, {});
  z8.data<uint8_t>()[0] = 0;
  Tensor q = runOp("QuantizeLinear", 19, {make<float>({0.f, 1.f, 1000.f, -1000.f, 3.3f}, {5}), Tensor::scalar<float>(1.f), z8});
  ASSERT_EQ(q.dtype(), DType::Float8E4M3FN);
  EXPECT_EQ(q.data<uint8_t>()[2], 0x7e);
  EXPECT_EQ(q.data<uint8_t>()[3], 0xfe);
  Tensor qn = runOp("QuantizeLinear", 19, {make<float>({1000.f}, {1}), Tensor::scalar<float>(1.f), z8},
                    {{"saturate", attrI(0)}});
  EXPECT_EQ(qn.data<uint8_t>()[0], 0x7f);
  Tensor back = runOp("DequantizeLinear", 19, {q, Tensor::scalar<float>(2.f), z8});
  EXPECT_EQ(values<float>(back), (std::vector<float>{0.f, 2.f, 896.f, -896.f, 6.5f}));
  // blocked quantization is reported at load time
  auto k = makeOp("QuantizeLinear", 21, {{"block_size", attrI(32)}});
  EXPECT_FALSE(k.isOk());
  EXPECT_EQ(k.status().code(), StatusCode::Unsupported);
}

TEST(EwExtra, HardmaxBitShiftIsInfDynamicQuantize) {
  auto h = values<float>(runOp("Hardmax", 13, {make<float>({3.f, 1.f, 3.f, 0.f, 5.f, 2.f}, {2, 3})}));
  EXPECT_EQ(h, (std::vector<float>{1, 0, 0, 0, 1, 0}));
  auto sh = values<uint8_t>(runOp("BitShift", 11, {make<uint8_t>({16, 4, 1}, {3}), make<uint8_t>({1, 2, 9}, {3})},
                                  {{"direction", attrS("RIGHT")}}));
  EXPECT_EQ(sh, (std::vector<uint8_t>{8, 1, 0}));
  Tensor inf = runOp("IsInf", 10, {make<float>({INFINITY, -INFINITY, 1.f, NAN}, {4})}, {{"detect_negative", attrI(0)}});
  EXPECT_EQ(inf.data<bool>()[0], true);
  EXPECT_EQ(inf.data<bool>()[1], false);
  EXPECT_EQ(inf.data<bool>()[3], false);
  // DynamicQuantizeLinear spec example
  auto k = makeOp("DynamicQuantizeLinear", 11);
  ASSERT_TRUE(k.isOk());
  Tensor x = make<float>({0.f, 2.f, -3.f, -2.5f, 1.34f, 0.5f}, {6});
  std::vector<const Tensor*> in{&x};
  std::vector<Tensor> outs(3);
  KernelContext ctx;
  ctx.inputs = in;
  ctx.outputs = outs;
  ASSERT_TRUE(k.value()->run(ctx).isOk());
  EXPECT_EQ(values<uint8_t>(outs[0]), (std::vector<uint8_t>{153, 255, 0, 26, 221, 179}));
  EXPECT_NEAR(outs[1].data<float>()[0], 0.019607844f, 1e-8f);
  EXPECT_EQ(outs[2].data<uint8_t>()[0], 153);
}

}  // namespace
}  // namespace qs
