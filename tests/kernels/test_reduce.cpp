// Tests of the 'reduce' kernel group: Reduce*, ArgMax/ArgMin, Resize, Upsample.
// Spec literals plus seeded random cases against naive references (the Resize reference
// follows the ONNX reference implementation's per-element algorithm: edge-padded
// neighbour search, coefficient functions, n-d recursion).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/exec/kernel.h"
#include "core/kernels/reduce.h"
#include "core/kernels/resize.h"

using namespace qs;

namespace {

using Factory = Result<std::unique_ptr<Kernel>> (*)(const KernelInit&);

struct NodeSpec {
  Node node;
  explicit NodeSpec(const std::string& op) {
    node.name = "rd_" + op;
    node.opType = op;
  }
  NodeSpec& i(const std::string& k, int64_t v) {
    Attribute a;
    a.type = Attribute::Type::Int;
    a.i = v;
    node.attributes[k] = a;
    return *this;
  }
  NodeSpec& f(const std::string& k, float v) {
    Attribute a;
    a.type = Attribute::Type::Float;
    a.f = v;
    node.attributes[k] = a;
    return *this;
  }
  NodeSpec& s(const std::string& k, const std::string& v) {
    Attribute a;
    a.type = Attribute::Type::String;
    a.s = v;
    node.attributes[k] = a;
    return *this;
  }
  NodeSpec& ints(const std::string& k, const std::vector<int64_t>& v) {
    Attribute a;
    a.type = Attribute::Type::Ints;
    a.ints = v;
    node.attributes[k] = a;
    return *this;
  }
  NodeSpec& floats(const std::string& k, const std::vector<float>& v) {
    Attribute a;
    a.type = Attribute::Type::Floats;
    a.floats = v;
    node.attributes[k] = a;
    return *this;
  }
};

std::unique_ptr<Kernel> makeK(Factory fac, const NodeSpec& spec, int64_t opset) {
  static const Graph g;
  KernelInit init{spec.node, opset, g};
  auto r = fac(init);
  EXPECT_TRUE(r.isOk()) << r.status().message();
  if (!r.isOk()) return nullptr;
  return std::move(r).value();
}

Status runK(const Kernel& k, const std::vector<const Tensor*>& inputs, Tensor& out, int threads = 3) {
  std::vector<Tensor> outs(1);
  KernelContext ctx;
  ctx.inputs = std::span<const Tensor* const>(inputs.data(), inputs.size());
  ctx.outputs = std::span<Tensor>(outs.data(), outs.size());
  ctx.threads = threads;
  Status st = k.run(ctx);
  out = outs[0];
  return st;
}

Tensor runOk(Factory fac, const NodeSpec& spec, int64_t opset, const std::vector<const Tensor*>& inputs,
             int threads = 3) {
  auto k = makeK(fac, spec, opset);
  Tensor out;
  if (!k) return out;
  Status st = runK(*k, inputs, out, threads);
  EXPECT_TRUE(st.isOk()) << st.message();
  return out;
}

template <class T>
Tensor tensorOf(const Shape& shape, const std::vector<T>& v) {
  Tensor t(DTypeOf<T>::value, shape);
  EXPECT_EQ((int64_t)v.size(), t.numel());
  for (size_t k = 0; k < v.size() && (int64_t)k < t.numel(); ++k) t.data<T>()[k] = v[k];
  return t;
}

Tensor i64(const std::vector<int64_t>& v) { return tensorOf<int64_t>({(int64_t)v.size()}, v); }
Tensor f32v(const std::vector<float>& v) { return tensorOf<float>({(int64_t)v.size()}, v); }

template <class T>
void expectNear(const Tensor& got, const Shape& shape, const std::vector<T>& want, double rtol = 1e-5,
                double atol = 1e-5) {
  ASSERT_EQ(got.shape(), shape);
  ASSERT_EQ(got.dtype(), DTypeOf<T>::value);
  for (size_t k = 0; k < want.size(); ++k) {
    double a = (double)got.data<T>()[k], b = (double)want[k];
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << "at " << k;
    } else if (std::isinf(b)) {
      EXPECT_EQ(a, b) << "at " << k;
    } else {
      EXPECT_LE(std::fabs(a - b), atol + rtol * std::fabs(b)) << "at " << k << ": got " << a << " want " << b;
    }
  }
}

std::vector<float> iota(int64_t n, float start = 1.f) {
  std::vector<float> v((size_t)n);
  for (int64_t k = 0; k < n; ++k) v[(size_t)k] = start + (float)k;
  return v;
}

// ------------------------------------------------------------------------------------------------
// Reductions

struct ROpInfo {
  const char* name;
  Factory fac;
};
const std::vector<ROpInfo>& rops() {
  static const std::vector<ROpInfo> v = {
      {"ReduceSum", createReduceSum},       {"ReduceMean", createReduceMean},
      {"ReduceMax", createReduceMax},       {"ReduceMin", createReduceMin},
      {"ReduceProd", createReduceProd},     {"ReduceL1", createReduceL1},
      {"ReduceL2", createReduceL2},         {"ReduceSumSquare", createReduceSumSquare},
      {"ReduceLogSumExp", createReduceLogSumExp}, {"ReduceLogSum", createReduceLogSum},
  };
  return v;
}

// Naive reference: double accumulation over an odometer.
std::vector<double> naiveReduce(const std::string& op, const std::vector<double>& x, const Shape& shape,
                                const std::vector<bool>& mask) {
  const int r = (int)shape.size();
  Shape outShape;
  for (int d = 0; d < r; ++d) outShape.push_back(mask[(size_t)d] ? 1 : shape[(size_t)d]);
  const int64_t outN = numelOf(outShape);
  std::vector<std::vector<double>> groups((size_t)outN);
  std::vector<int64_t> idx((size_t)r, 0);
  for (int64_t k = 0; k < (int64_t)x.size(); ++k) {
    int64_t o = 0;
    for (int d = 0; d < r; ++d) o = o * outShape[(size_t)d] + (mask[(size_t)d] ? 0 : idx[(size_t)d]);
    groups[(size_t)o].push_back(x[(size_t)k]);
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[(size_t)d] < shape[(size_t)d]) break;
      idx[(size_t)d] = 0;
    }
  }
  std::vector<double> out((size_t)outN);
  for (int64_t o = 0; o < outN; ++o) {
    const auto& g = groups[(size_t)o];
    double acc = 0;
    if (op == "ReduceSum") {
      for (double v : g) acc += v;
    } else if (op == "ReduceMean") {
      for (double v : g) acc += v;
      acc /= (double)g.size();
    } else if (op == "ReduceMax") {
      acc = -INFINITY;
      for (double v : g) acc = std::max(acc, v);
    } else if (op == "ReduceMin") {
      acc = INFINITY;
      for (double v : g) acc = std::min(acc, v);
    } else if (op == "ReduceProd") {
      acc = 1;
      for (double v : g) acc *= v;
    } else if (op == "ReduceL1") {
      for (double v : g) acc += std::fabs(v);
    } else if (op == "ReduceL2") {
      for (double v : g) acc += v * v;
      acc = std::sqrt(acc);
    } else if (op == "ReduceSumSquare") {
      for (double v : g) acc += v * v;
    } else if (op == "ReduceLogSumExp") {
      for (double v : g) acc += std::exp(v);
      acc = std::log(acc);
    } else if (op == "ReduceLogSum") {
      for (double v : g) acc += v;
      acc = std::log(acc);
    }
    out[(size_t)o] = acc;
  }
  return out;
}

TEST(RdReduce, SpecReduceSumKeepdimsAxesInput) {
  Tensor x = tensorOf<float>({3, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Tensor axes = i64({1});
  Tensor y = runOk(createReduceSum, NodeSpec("ReduceSum").i("keepdims", 1), 13, {&x, &axes});
  expectNear<float>(y, {3, 1, 2}, {4, 6, 12, 14, 20, 22});
  // Opset 11: axes as attribute, negative.
  y = runOk(createReduceSum, NodeSpec("ReduceSum").ints("axes", {-2}).i("keepdims", 0), 11, {&x});
  expectNear<float>(y, {3, 2}, {4, 6, 12, 14, 20, 22});
}

TEST(RdReduce, SpecReduceMeanDoNotKeepdims) {
  Tensor x = tensorOf<float>({3, 2, 2}, {5, 1, 20, 2, 30, 1, 40, 2, 55, 1, 60, 2});
  Tensor y = runOk(createReduceMean, NodeSpec("ReduceMean").ints("axes", {1}).i("keepdims", 0), 13, {&x});
  expectNear<float>(y, {3, 2}, {12.5f, 1.5f, 35.f, 1.5f, 57.5f, 1.5f});
  Tensor axes = i64({1});
  y = runOk(createReduceMean, NodeSpec("ReduceMean").i("keepdims", 0), 18, {&x, &axes});
  expectNear<float>(y, {3, 2}, {12.5f, 1.5f, 35.f, 1.5f, 57.5f, 1.5f});
}

TEST(RdReduce, DefaultAxesReduceEverything) {
  Tensor x = tensorOf<float>({3, 2, 2}, {5, 1, 20, 2, 30, 1, 40, 2, 55, 1, 60, 2});
  Tensor y = runOk(createReduceMax, NodeSpec("ReduceMax"), 18, {&x});
  expectNear<float>(y, {1, 1, 1}, {60});
  y = runOk(createReduceMin, NodeSpec("ReduceMin").i("keepdims", 0), 13, {&x});
  expectNear<float>(y, {}, {1});
}

TEST(RdReduce, NoopWithEmptyAxes) {
  Tensor x = tensorOf<float>({2, 2}, {1, -2, 3, 4});
  Tensor empty = tensorOf<int64_t>({0}, {});
  Tensor y = runOk(createReduceSum, NodeSpec("ReduceSum").i("noop_with_empty_axes", 1), 13, {&x, &empty});
  expectNear<float>(y, {2, 2}, {1, -2, 3, 4});
  y = runOk(createReduceSumSquare, NodeSpec("ReduceSumSquare").i("noop_with_empty_axes", 1), 18, {&x, &empty});
  expectNear<float>(y, {2, 2}, {1, 4, 9, 16});
  y = runOk(createReduceL1, NodeSpec("ReduceL1").i("noop_with_empty_axes", 1), 18, {&x});
  expectNear<float>(y, {2, 2}, {1, 2, 3, 4});
  // Without noop, empty axes reduce everything.
  y = runOk(createReduceSum, NodeSpec("ReduceSum"), 13, {&x, &empty});
  expectNear<float>(y, {1, 1}, {6});
}

TEST(RdReduce, EmptySetYieldsIdentity) {
  Tensor x(DType::Float, {2, 0, 3});
  Tensor axes = i64({1});
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    Factory fac;
    const char* name;
    float want;
  };
  for (const Case& c : {Case{createReduceSum, "ReduceSum", 0.f}, Case{createReduceProd, "ReduceProd", 1.f},
                        Case{createReduceMax, "ReduceMax", -inf}, Case{createReduceMin, "ReduceMin", inf},
                        Case{createReduceL1, "ReduceL1", 0.f}, Case{createReduceL2, "ReduceL2", 0.f},
                        Case{createReduceSumSquare, "ReduceSumSquare", 0.f},
                        Case{createReduceLogSum, "ReduceLogSum", -inf},
                        Case{createReduceLogSumExp, "ReduceLogSumExp", -inf},
                        Case{createReduceMean, "ReduceMean", NAN}}) {
    SCOPED_TRACE(c.name);
    Tensor y = runOk(c.fac, NodeSpec(c.name), 18, {&x, &axes});
    expectNear<float>(y, {2, 1, 3}, std::vector<float>(6, c.want));
  }
  Tensor xi(DType::Int32, {0, 2});
  Tensor a0 = i64({0});
  Tensor y = runOk(createReduceMin, NodeSpec("ReduceMin").i("keepdims", 0), 18, {&xi, &a0});
  expectNear<int32_t>(y, {2}, {INT32_MAX, INT32_MAX});
  // Kept dim of size 0: empty output.
  Tensor a2 = i64({2});
  y = runOk(createReduceSum, NodeSpec("ReduceSum"), 13, {&x, &a2});
  EXPECT_EQ(y.shape(), (Shape{2, 0, 1}));
}

TEST(RdReduce, LogSumExpIsStableAndMaxPropagatesNaN) {
  Tensor x = tensorOf<float>({2, 2}, {1000.f, 1000.f, -1000.f, -1001.f});
  Tensor y = runOk(createReduceLogSumExp, NodeSpec("ReduceLogSumExp").ints("axes", {1}), 13, {&x});
  expectNear<float>(y, {2, 1}, {1000.f + std::log(2.f), -1000.f + (float)std::log1p(std::exp(-1.0))});
  Tensor n = tensorOf<float>({1, 3}, {1.f, NAN, 3.f});
  y = runOk(createReduceMax, NodeSpec("ReduceMax").ints("axes", {1}), 13, {&n});
  EXPECT_TRUE(std::isnan(y.data<float>()[0]));
}

TEST(RdReduce, IntegerAndDoubleDtypes) {
  Tensor x = tensorOf<int64_t>({2, 3}, {1, -2, 3, 4, 5, -6});
  Tensor axes = i64({1});
  expectNear<int64_t>(runOk(createReduceSum, NodeSpec("ReduceSum"), 13, {&x, &axes}), {2, 1}, {2, 3});
  expectNear<int64_t>(runOk(createReduceProd, NodeSpec("ReduceProd").i("keepdims", 0), 18, {&x, &axes}), {2},
                      {-6, -120});
  expectNear<int64_t>(runOk(createReduceMean, NodeSpec("ReduceMean").i("keepdims", 0), 18, {&x, &axes}), {2},
                      {0, 1});
  Tensor xi = tensorOf<int32_t>({2, 3}, {1, -2, 3, 4, 5, -6});
  expectNear<int32_t>(runOk(createReduceL1, NodeSpec("ReduceL1").i("keepdims", 0), 18, {&xi, &axes}), {2}, {6, 15});
  expectNear<int32_t>(runOk(createReduceMax, NodeSpec("ReduceMax").i("keepdims", 0), 18, {&xi, &axes}), {2}, {3, 5});
  Tensor xd = tensorOf<double>({2, 2}, {1.5, 2.5, -1, 4});
  expectNear<double>(runOk(createReduceSumSquare, NodeSpec("ReduceSumSquare").i("keepdims", 0), 18, {&xd}), {},
                     {2.25 + 6.25 + 1 + 16});
  Tensor xu = tensorOf<uint8_t>({2, 2}, {7, 200, 3, 4});
  expectNear<uint8_t>(runOk(createReduceMax, NodeSpec("ReduceMax").i("keepdims", 0), 18, {&xu}), {}, {200});
}

TEST(RdReduce, BadAxesFail) {
  Tensor x = tensorOf<float>({2, 2}, {1, 2, 3, 4});
  Tensor axes = i64({2});
  auto k = makeK(createReduceSum, NodeSpec("ReduceSum"), 13);
  ASSERT_TRUE(k);
  Tensor y;
  Status st = runK(*k, {&x, &axes}, y);
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("axis 2"), std::string::npos) << st.message();
}

TEST(RdReduce, RandomAgainstNaive) {
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 150; ++iter) {
    const int rank = 1 + (int)(rng() % 4);
    Shape shape;
    for (int d = 0; d < rank; ++d) shape.push_back(1 + (int64_t)(rng() % 6));
    if (iter % 10 == 0) shape[(size_t)(rng() % rank)] = 40 + (int64_t)(rng() % 300);  // bigger, parallel
    std::vector<bool> mask((size_t)rank, false);
    std::vector<int64_t> axes;
    for (int d = 0; d < rank; ++d) {
      if (rng() % 2) {
        mask[(size_t)d] = true;
        axes.push_back(rng() % 2 ? d : d - rank);
      }
    }
    if (axes.empty()) std::fill(mask.begin(), mask.end(), true);
    const bool keep = rng() % 2;
    const ROpInfo& op = rops()[(size_t)(iter % rops().size())];
    const int64_t n = numelOf(shape);
    std::uniform_real_distribution<float> dist(op.name == std::string("ReduceLogSum") ? 0.1f : -2.f, 2.f);
    std::uniform_real_distribution<float> pdist(0.8f, 1.25f);  // keeps products bounded
    std::vector<float> xv((size_t)n);
    for (auto& v : xv) v = op.name == std::string("ReduceProd") ? pdist(rng) * (rng() % 2 ? 1.f : -1.f) : dist(rng);
    Tensor x = tensorOf<float>(shape, xv);
    Tensor axesT = i64(axes);
    Tensor y = runOk(op.fac, NodeSpec(op.name).i("keepdims", keep), 18, {&x, &axesT}, 1 + iter % 4);
    std::vector<double> xd(xv.begin(), xv.end());
    std::vector<double> want = naiveReduce(op.name, xd, shape, mask);
    Shape outShape;
    for (int d = 0; d < rank; ++d) {
      if (!mask[(size_t)d]) {
        outShape.push_back(shape[(size_t)d]);
      } else if (keep) {
        outShape.push_back(1);
      }
    }
    SCOPED_TRACE(std::string(op.name) + " shape " + shapeToString(shape) + " axes " + shapeToString(axes));
    std::vector<float> wantF(want.begin(), want.end());
    expectNear<float>(y, outShape, wantF, 1e-4, 1e-4);

    // Same case in double and (for the integer-friendly ops) int32.
    Tensor xdT = tensorOf<double>(shape, xd);
    Tensor yd = runOk(op.fac, NodeSpec(op.name).i("keepdims", keep), 18, {&xdT, &axesT});
    expectNear<double>(yd, outShape, want, 1e-9, 1e-9);
    std::string nm = op.name;
    if (nm == "ReduceSum" || nm == "ReduceMax" || nm == "ReduceMin" || nm == "ReduceL1" || nm == "ReduceSumSquare") {
      std::vector<int32_t> xi((size_t)n);
      std::vector<double> xid((size_t)n);
      for (int64_t k = 0; k < n; ++k) {
        xi[(size_t)k] = (int32_t)(rng() % 21) - 10;
        xid[(size_t)k] = xi[(size_t)k];
      }
      Tensor xiT = tensorOf<int32_t>(shape, xi);
      Tensor yi = runOk(op.fac, NodeSpec(op.name).i("keepdims", keep), 18, {&xiT, &axesT});
      std::vector<double> wi = naiveReduce(op.name, xid, shape, mask);
      std::vector<int32_t> wiI(wi.begin(), wi.end());
      expectNear<int32_t>(yi, outShape, wiI, 0, 0);
    }
  }
}

// ------------------------------------------------------------------------------------------------
// ArgMax / ArgMin

TEST(RdArg, SpecExamples) {
  Tensor x = tensorOf<float>({2, 2}, {2, 1, 3, 10});
  expectNear<int64_t>(runOk(createArgMax, NodeSpec("ArgMax").i("axis", 1), 13, {&x}), {2, 1}, {0, 1});
  expectNear<int64_t>(runOk(createArgMax, NodeSpec("ArgMax"), 13, {&x}), {1, 2}, {1, 1});
  expectNear<int64_t>(runOk(createArgMin, NodeSpec("ArgMin").i("axis", -1).i("keepdims", 0), 13, {&x}), {2}, {1, 0});
  Tensor t = tensorOf<float>({2, 2}, {2, 2, 3, 10});
  expectNear<int64_t>(runOk(createArgMax, NodeSpec("ArgMax").i("axis", 1).i("select_last_index", 1), 13, {&t}),
                      {2, 1}, {1, 1});
  expectNear<int64_t>(runOk(createArgMin, NodeSpec("ArgMin").i("axis", 1).i("select_last_index", 1), 13, {&t}),
                      {2, 1}, {1, 0});
  expectNear<int64_t>(runOk(createArgMin, NodeSpec("ArgMin").i("axis", 1), 13, {&t}), {2, 1}, {0, 0});
}

TEST(RdArg, RandomAgainstNaiveWithTies) {
  std::mt19937 rng(99);
  for (int iter = 0; iter < 120; ++iter) {
    const int rank = 1 + (int)(rng() % 4);
    Shape shape;
    for (int d = 0; d < rank; ++d) shape.push_back(1 + (int64_t)(rng() % 5));
    if (iter % 8 == 0) shape[(size_t)(rng() % rank)] = 100 + (int64_t)(rng() % 400);
    const int64_t axis = (int64_t)(rng() % rank) - (rng() % 2 ? rank : 0);
    const int64_t ax = axis < 0 ? axis + rank : axis;
    const bool keep = rng() % 2, last = rng() % 2, isMax = rng() % 2;
    const int64_t n = numelOf(shape);
    std::vector<int32_t> xi((size_t)n);
    for (auto& v : xi) v = (int32_t)(rng() % 7) - 3;  // many ties
    int64_t O = 1, R = shape[(size_t)ax], I = 1;
    for (int64_t d = 0; d < ax; ++d) O *= shape[(size_t)d];
    for (int64_t d = ax + 1; d < rank; ++d) I *= shape[(size_t)d];
    std::vector<int64_t> want((size_t)(O * I));
    for (int64_t o = 0; o < O; ++o) {
      for (int64_t i = 0; i < I; ++i) {
        int64_t bi = 0;
        for (int64_t r = 1; r < R; ++r) {
          int32_t v = xi[(size_t)((o * R + r) * I + i)], b = xi[(size_t)((o * R + bi) * I + i)];
          bool better = isMax ? (last ? v >= b : v > b) : (last ? v <= b : v < b);
          if (better) bi = r;
        }
        want[(size_t)(o * I + i)] = bi;
      }
    }
    Shape outShape;
    for (int d = 0; d < rank; ++d) {
      if (d != ax) {
        outShape.push_back(shape[(size_t)d]);
      } else if (keep) {
        outShape.push_back(1);
      }
    }
    NodeSpec spec(isMax ? "ArgMax" : "ArgMin");
    spec.i("axis", axis).i("keepdims", keep).i("select_last_index", last);
    Factory fac = isMax ? createArgMax : createArgMin;
    SCOPED_TRACE(shapeToString(shape) + " axis " + std::to_string(axis));
    Tensor x32 = tensorOf<int32_t>(shape, xi);
    expectNear<int64_t>(runOk(fac, spec, 13, {&x32}, 1 + iter % 3), outShape, want, 0, 0);
    std::vector<float> xf(xi.begin(), xi.end());
    Tensor xf32 = tensorOf<float>(shape, xf);
    expectNear<int64_t>(runOk(fac, spec, 13, {&xf32}), outShape, want, 0, 0);
    std::vector<int64_t> xl(xi.begin(), xi.end());
    Tensor x64 = tensorOf<int64_t>(shape, xl);
    expectNear<int64_t>(runOk(fac, spec, 13, {&x64}), outShape, want, 0, 0);
  }
}

// ------------------------------------------------------------------------------------------------
// Resize / Upsample

TEST(RdResize, SpecUpsampleScalesNearest) {
  Tensor x = tensorOf<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor scales = f32v({1, 1, 2, 3});
  Tensor y = runOk(createResize, NodeSpec("Resize").s("mode", "nearest"), 13, {&x, nullptr, &scales});
  expectNear<float>(y, {1, 1, 4, 6}, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4});
  // int8 / uint8 nearest.
  Tensor xu = tensorOf<uint8_t>({1, 1, 2, 2}, {1, 2, 3, 250});
  Tensor yu = runOk(createResize, NodeSpec("Resize"), 19, {&xu, nullptr, &scales});
  expectNear<uint8_t>(yu, {1, 1, 4, 6},
                      {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 250, 250, 250, 3, 3, 3, 250, 250, 250});
  Tensor xs = tensorOf<int8_t>({1, 1, 2, 2}, {1, -2, 3, -128});
  Tensor ys = runOk(createResize, NodeSpec("Resize"), 11, {&xs, nullptr, &scales});
  expectNear<int8_t>(ys, {1, 1, 4, 6}, {1, 1, 1, -2, -2, -2, 1, 1, 1, -2, -2, -2,
                                        3, 3, 3, -128, -128, -128, 3, 3, 3, -128, -128, -128});
}

TEST(RdResize, SpecDownsampleLinear) {
  Tensor x = tensorOf<float>({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor scales = f32v({1, 1, 0.6f, 0.6f});
  Tensor y = runOk(createResize, NodeSpec("Resize").s("mode", "linear"), 13, {&x, nullptr, &scales});
  expectNear<float>(y, {1, 1, 1, 2}, {2.6666665f, 4.3333331f});
  y = runOk(createResize, NodeSpec("Resize").s("mode", "linear").s("coordinate_transformation_mode", "align_corners"),
            13, {&x, nullptr, &scales});
  expectNear<float>(y, {1, 1, 1, 2}, {1.f, 3.142857f});
}

TEST(RdResize, SpecUpsampleLinearAndNearestVariants) {
  Tensor x = tensorOf<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor scales = f32v({1, 1, 2, 2});
  Tensor y = runOk(createResize, NodeSpec("Resize").s("mode", "linear"), 13, {&x, nullptr, &scales});
  expectNear<float>(y, {1, 1, 4, 4},
                    {1, 1.25f, 1.75f, 2, 1.5f, 1.75f, 2.25f, 2.5f, 2.5f, 2.75f, 3.25f, 3.5f, 3, 3.25f, 3.75f, 4});
  // sizes + nearest ceil / half_pixel (spec: resize_upsample_sizes_nearest_ceil_half_pixel, first row).
  Tensor x4 = tensorOf<float>({1, 1, 4, 4}, iota(16));
  Tensor sizes = i64({1, 1, 8, 8});
  y = runOk(createResize,
            NodeSpec("Resize").s("coordinate_transformation_mode", "half_pixel").s("nearest_mode", "ceil"), 13,
            {&x4, nullptr, nullptr, &sizes});
  ASSERT_EQ(y.shape(), (Shape{1, 1, 8, 8}));
  std::vector<float> row0(y.data<float>(), y.data<float>() + 8);
  EXPECT_EQ(row0, (std::vector<float>{1, 2, 2, 3, 3, 4, 4, 4}));
  // floor / align_corners, first row.
  y = runOk(createResize,
            NodeSpec("Resize").s("coordinate_transformation_mode", "align_corners").s("nearest_mode", "floor"), 13,
            {&x4, nullptr, nullptr, &sizes});
  std::vector<float> r0(y.data<float>(), y.data<float>() + 8);
  EXPECT_EQ(r0, (std::vector<float>{1, 1, 1, 2, 2, 3, 3, 4}));
}

TEST(RdResize, SpecTfCropAndResizeExtrapolation) {
  Tensor x = tensorOf<float>({1, 1, 4, 4}, iota(16));
  Tensor roi = f32v({0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 1.7f});
  Tensor sizes = i64({1, 1, 3, 3});
  Tensor y = runOk(createResize,
                   NodeSpec("Resize")
                       .s("mode", "linear")
                       .s("coordinate_transformation_mode", "tf_crop_and_resize")
                       .f("extrapolation_value", 10.f),
                   13, {&x, &roi, nullptr, &sizes});
  expectNear<float>(y, {1, 1, 3, 3}, {7.6000004f, 10, 10, 12.400001f, 10, 10, 10, 10, 10});
}

TEST(RdResize, UpsampleOpsets7And9) {
  Tensor x = tensorOf<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  std::vector<float> want = {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4};
  Tensor y = runOk(createUpsample, NodeSpec("Upsample").floats("scales", {1, 1, 2, 3}), 7, {&x});
  expectNear<float>(y, {1, 1, 4, 6}, want);
  Tensor scales = f32v({1, 1, 2, 3});
  y = runOk(createUpsample, NodeSpec("Upsample").s("mode", "nearest"), 9, {&x, &scales});
  expectNear<float>(y, {1, 1, 4, 6}, want);
  // Linear upsample is asymmetric and clamps at the edge.
  Tensor s2 = f32v({1, 1, 2, 2});
  y = runOk(createUpsample, NodeSpec("Upsample").s("mode", "linear"), 9, {&x, &s2});
  expectNear<float>(y, {1, 1, 4, 4}, {1, 1.5f, 2, 2, 2, 2.5f, 3, 3, 3, 3.5f, 4, 4, 3, 3.5f, 4, 4});
  // Resize-10 behaves the same.
  y = runOk(createResize, NodeSpec("Resize").s("mode", "linear"), 10, {&x, &s2});
  expectNear<float>(y, {1, 1, 4, 4}, {1, 1.5f, 2, 2, 2, 2.5f, 3, 3, 3, 3.5f, 4, 4, 3, 3.5f, 4, 4});
}

TEST(RdResize, BadInputsFail) {
  Tensor x = tensorOf<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor scales = f32v({1, 2});
  auto k = makeK(createResize, NodeSpec("Resize"), 13);
  ASSERT_TRUE(k);
  Tensor y;
  EXPECT_FALSE(runK(*k, {&x, nullptr, &scales}, y).isOk());
  EXPECT_FALSE(runK(*k, {&x}, y).isOk());
  static const Graph g;
  NodeSpec bad("Resize");
  bad.s("mode", "bicubic");
  KernelInit init{bad.node, 13, g};
  auto r = createResize(init);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("bicubic"), std::string::npos);
}

// Reference Resize, per output element, after the ONNX reference implementation.
struct RefResize {
  std::string mode = "nearest", ctm = "half_pixel", nearestMode = "round_prefer_floor";
  double A = -0.75;
  bool exclude = false, antialias = false;
  double extrap = 0;

  std::vector<double> coeffs(double ratio, double scale) const {
    if (mode == "nearest") {
      if (ratio == 1) return {0, 1};
      if (nearestMode == "round_prefer_floor") return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};
      if (nearestMode == "round_prefer_ceil") return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
      if (nearestMode == "floor") return {1, 0};
      return {0, 1};
    }
    if (mode == "linear" && !antialias) return {1 - ratio, ratio};
    if (mode == "cubic" && !antialias) {
      return {((A * (ratio + 1) - 5 * A) * (ratio + 1) + 8 * A) * (ratio + 1) - 4 * A,
              ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1,
              ((A + 2) * (1 - ratio) - (A + 3)) * (1 - ratio) * (1 - ratio) + 1,
              ((A * ((1 - ratio) + 1) - 5 * A) * ((1 - ratio) + 1) + 8 * A) * ((1 - ratio) + 1) - 4 * A};
    }
    double s = std::min(scale, 1.0);
    std::vector<double> c;
    if (mode == "linear") {
      int start = (int)(std::floor(-1 / s) + 1);
      int fp = 2 - 2 * start;
      for (int i = start; i < start + fp; ++i) c.push_back(std::clamp(1 - std::fabs((i - ratio) * s), 0.0, 1.0));
    } else {
      int is = (int)(std::floor(-2 / s) + 1), ie = 2 - is;
      for (int i = is; i < ie; ++i) {
        double x = std::fabs(s * (i - ratio)), x2 = x * x, x3 = x2 * x;
        c.push_back(x <= 1 ? (A + 2) * x3 - (A + 3) * x2 + 1 : x < 2 ? A * x3 - 5 * A * x2 + 8 * A * x - 4 * A : 0.0);
      }
    }
    double sum = 0;
    for (double v : c) sum += v;
    for (double& v : c) v /= sum;
    return c;
  }

  // 1-D interpolation of `data` at output coordinate x; `rowAt(i)` lazily gives data[i].
  double interp1d(int64_t inW, double scale, double outW, int64_t outInt, int64_t x, double roi0, double roi1,
                  const std::function<double(int64_t)>& rowAt) const {
    double xo;
    const double in = (double)inW;
    if (ctm == "align_corners") {
      xo = outW == 1 ? 0.0 : x * (in - 1) / (outW - 1);
    } else if (ctm == "asymmetric") {
      xo = x / scale;
    } else if (ctm == "tf_crop_and_resize") {
      double diff = (double)((float)roi1 - (float)roi0);
      xo = outW == 1 ? diff * (in - 1) / 2 : x * diff * (in - 1) / (outW - 1);
      xo += (double)((float)roi0 * (float)(inW - 1));
      if (xo < 0 || xo > in - 1) return extrap;
    } else if (ctm == "pytorch_half_pixel") {
      xo = outW == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
    } else if (ctm == "half_pixel_symmetric") {
      double adj = (double)outInt / outW, center = in / 2, off = center * (1 - adj);
      xo = off + (x + 0.5) / scale - 0.5;
    } else if (ctm == "tf_half_pixel_for_nn") {
      xo = (x + 0.5) / scale;
    } else {
      xo = (x + 0.5) / scale - 0.5;
    }
    double fl = std::floor(xo);
    double ratio = xo == fl ? 1.0 : xo - fl;
    std::vector<double> c = coeffs(ratio, scale);
    const int n = (int)c.size();
    // n nearest indexes of the edge-padded array, ties to the smaller one.
    const int64_t pad = (n + 1) / 2, limit = inW + 2 * pad;
    const double xp = xo + (double)pad;
    std::vector<int64_t> all((size_t)limit);
    for (int64_t k = 0; k < limit; ++k) all[(size_t)k] = k;
    std::stable_sort(all.begin(), all.end(), [&](int64_t a, int64_t b) {
      double da = std::fabs(xp - (double)a), db = std::fabs(xp - (double)b);
      return da != db ? da < db : a < b;
    });
    std::vector<int64_t> idx(all.begin(), all.begin() + n);
    std::sort(idx.begin(), idx.end());
    if (exclude) {
      double s = 0;
      for (int k = 0; k < n; ++k) {
        int64_t o = idx[(size_t)k] - pad;
        if (o < 0 || o >= inW) c[(size_t)k] = 0;
        s += c[(size_t)k];
      }
      for (double& v : c) v /= s;
    }
    double acc = 0;
    for (int k = 0; k < n; ++k) {
      if (c[(size_t)k] == 0) continue;
      int64_t o = std::clamp<int64_t>(idx[(size_t)k] - pad, 0, inW - 1);
      acc += c[(size_t)k] * rowAt(o);
    }
    return acc;
  }

  // n-d recursion over axes [d, rank) at output coordinate xs, with base offset into data.
  double interpNd(const std::vector<double>& data, const Shape& inShape, const std::vector<double>& scales,
                  const std::vector<double>& outW, const Shape& outShape, const std::vector<double>& roi,
                  const std::vector<int64_t>& xs, int d, int64_t base) const {
    const int r = (int)inShape.size();
    int64_t stride = 1;
    for (int k = d + 1; k < r; ++k) stride *= inShape[(size_t)k];
    auto rowAt = [&](int64_t i) -> double {
      if (d == r - 1) return data[(size_t)(base + i)];
      return interpNd(data, inShape, scales, outW, outShape, roi, xs, d + 1, base + i * stride);
    };
    return interp1d(inShape[(size_t)d], scales[(size_t)d], outW[(size_t)d], outShape[(size_t)d], xs[(size_t)d],
                    roi[(size_t)d], roi[(size_t)(d + r)], rowAt);
  }
};

TEST(RdResize, RandomAgainstReference) {
  std::mt19937 rng(4242);
  const char* ctms[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                        "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  const char* nmodes[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  const char* modes[] = {"nearest", "linear", "cubic"};
  for (int iter = 0; iter < 160; ++iter) {
    RefResize ref;
    ref.mode = modes[iter % 3];
    ref.ctm = ctms[(iter / 3) % 7];
    ref.nearestMode = nmodes[rng() % 4];
    ref.A = rng() % 2 ? -0.75 : -0.5;
    ref.exclude = ref.mode == "cubic" && rng() % 2;
    ref.antialias = ref.mode != "nearest" && rng() % 3 == 0;
    ref.extrap = rng() % 2 ? 0.0 : 7.5;
    const int rank = 1 + (int)(rng() % 4);
    Shape inShape;
    for (int d = 0; d < rank; ++d) inShape.push_back(1 + (int64_t)(rng() % 6));
    // axes: all, or a random subset (opset 18)
    std::vector<int64_t> axes;
    const bool useAxes = rng() % 3 == 0;
    for (int d = 0; d < rank; ++d) {
      if (!useAxes || rng() % 2) axes.push_back(d);
    }
    if (axes.empty()) axes.push_back(rank - 1);
    const bool useSizes = rng() % 2;
    const int keepPolicy = useSizes ? (int)(rng() % 3) : 0;
    std::vector<float> scalesIn;
    std::vector<int64_t> sizesIn;
    for (int64_t a : axes) {
      if (useSizes) {
        sizesIn.push_back(1 + (int64_t)(rng() % 9));
      } else {
        const float choices[] = {0.5f, 0.6f, 0.75f, 1.f, 1.5f, 2.f, 2.5f, 3.f, 1.7f, 0.34f};
        float s = choices[rng() % 10];
        if ((double)s * (double)inShape[(size_t)a] < 1) s = 1.f;
        scalesIn.push_back(s);
      }
    }
    // Geometry as the reference computes it.
    std::vector<double> scales((size_t)rank, 1.0), outW((size_t)rank);
    Shape outShape = inShape;
    for (int d = 0; d < rank; ++d) outW[(size_t)d] = (double)inShape[(size_t)d];
    if (!useSizes) {
      for (size_t k = 0; k < axes.size(); ++k) {
        int64_t a = axes[k];
        scales[(size_t)a] = scalesIn[k];
        outW[(size_t)a] = (double)(scalesIn[k] * (float)inShape[(size_t)a]);
        outShape[(size_t)a] = (int64_t)((double)scalesIn[k] * (double)inShape[(size_t)a]);
      }
    } else {
      std::vector<double> sc;
      for (size_t k = 0; k < axes.size(); ++k) sc.push_back((double)sizesIn[k] / (double)inShape[(size_t)axes[k]]);
      for (size_t k = 0; k < axes.size(); ++k) {
        int64_t a = axes[k];
        double s = keepPolicy == 0   ? sc[k]
                   : keepPolicy == 1 ? *std::min_element(sc.begin(), sc.end())
                                     : *std::max_element(sc.begin(), sc.end());
        scales[(size_t)a] = s;
        outShape[(size_t)a] = keepPolicy == 0 ? sizesIn[k] : (int64_t)(s * (double)inShape[(size_t)a] + 0.5);
        outW[(size_t)a] = s * (double)inShape[(size_t)a];
      }
    }
    std::vector<double> roiFull((size_t)(2 * rank));
    std::vector<float> roiIn((size_t)(2 * axes.size()));
    for (int d = 0; d < rank; ++d) {
      roiFull[(size_t)d] = 0;
      roiFull[(size_t)(d + rank)] = 1;
    }
    for (size_t k = 0; k < axes.size(); ++k) {
      float s0 = (float)(rng() % 7) * 0.1f - 0.2f, s1 = s0 + 0.3f + (float)(rng() % 8) * 0.1f;
      roiIn[k] = s0;
      roiIn[k + axes.size()] = s1;
      roiFull[(size_t)axes[k]] = s0;
      roiFull[(size_t)(axes[k] + rank)] = s1;
    }
    const int64_t n = numelOf(inShape);
    std::vector<float> xv((size_t)n);
    std::uniform_real_distribution<float> dist(-3.f, 3.f);
    for (auto& v : xv) v = dist(rng);
    std::vector<double> xd(xv.begin(), xv.end());

    NodeSpec spec("Resize");
    spec.s("mode", ref.mode).s("coordinate_transformation_mode", ref.ctm).s("nearest_mode", ref.nearestMode);
    spec.f("cubic_coeff_a", (float)ref.A).i("exclude_outside", ref.exclude).f("extrapolation_value", (float)ref.extrap);
    spec.i("antialias", ref.antialias);
    if (useAxes) spec.ints("axes", axes);
    if (keepPolicy) spec.s("keep_aspect_ratio_policy", keepPolicy == 1 ? "not_larger" : "not_smaller");
    Tensor x = tensorOf<float>(inShape, xv);
    Tensor roiT = f32v(roiIn);
    Tensor scT = f32v(scalesIn);
    Tensor szT = i64(sizesIn);
    const bool crop = ref.ctm == "tf_crop_and_resize";
    Tensor y = runOk(createResize, spec, 19,
                     {&x, crop ? &roiT : nullptr, useSizes ? nullptr : &scT, useSizes ? &szT : nullptr},
                     1 + iter % 3);
    SCOPED_TRACE("iter " + std::to_string(iter) + " " + ref.mode + " " + ref.ctm + " " + ref.nearestMode + " in " +
                 shapeToString(inShape) + " axes " + shapeToString(axes) + (useSizes ? " sizes " : " scales ") +
                 (useSizes ? shapeToString(sizesIn) : "") + " keep " + std::to_string(keepPolicy) +
                 (ref.antialias ? " antialias" : "") + (ref.exclude ? " exclude" : ""));
    ASSERT_EQ(y.shape(), outShape);
    const int64_t on = numelOf(outShape);
    std::vector<float> want((size_t)on);
    std::vector<int64_t> xs((size_t)rank, 0);
    for (int64_t k = 0; k < on; ++k) {
      want[(size_t)k] = (float)ref.interpNd(xd, inShape, scales, outW, outShape, roiFull, xs, 0, 0);
      for (int d = rank - 1; d >= 0; --d) {
        if (++xs[(size_t)d] < outShape[(size_t)d]) break;
        xs[(size_t)d] = 0;
      }
    }
    expectNear<float>(y, outShape, want, 1e-4, 1e-4);
  }
}

// Larger NCHW cases that take the fast paths (2x nearest, bilinear) with several threads.
TEST(RdResize, FastPathsMatchReference) {
  std::mt19937 rng(7);
  Shape inShape = {2, 3, 13, 17};
  const int64_t n = numelOf(inShape);
  std::vector<float> xv((size_t)n);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (auto& v : xv) v = dist(rng);
  Tensor x = tensorOf<float>(inShape, xv);
  Tensor scales = f32v({1, 1, 2, 2});
  Tensor y = runOk(createResize, NodeSpec("Resize").s("mode", "nearest").s("coordinate_transformation_mode", "asymmetric"),
                   13, {&x, nullptr, &scales}, 4);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 26, 34}));
  for (int64_t nc = 0; nc < 6; ++nc)
    for (int64_t h = 0; h < 26; ++h)
      for (int64_t w = 0; w < 34; ++w)
        ASSERT_EQ(y.data<float>()[(nc * 26 + h) * 34 + w], xv[(size_t)((nc * 13 + h / 2) * 17 + w / 2)]);
  // Bilinear half_pixel to an odd size, against the separable closed form.
  Tensor sizes = i64({2, 3, 29, 11});
  y = runOk(createResize, NodeSpec("Resize").s("mode", "linear"), 13, {&x, nullptr, nullptr, &sizes}, 4);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 29, 11}));
  auto coord = [](int64_t o, int64_t in, int64_t out, int64_t& i0, int64_t& i1, double& t) {
    double xo = ((double)o + 0.5) / ((double)out / (double)in) - 0.5;
    xo = std::clamp(xo, 0.0, (double)(in - 1));
    i0 = (int64_t)std::floor(xo);
    i1 = std::min(i0 + 1, in - 1);
    t = xo - (double)i0;
  };
  for (int64_t nc = 0; nc < 6; ++nc) {
    for (int64_t h = 0; h < 29; ++h) {
      int64_t h0, h1;
      double th;
      coord(h, 13, 29, h0, h1, th);
      for (int64_t w = 0; w < 11; ++w) {
        int64_t w0, w1;
        double tw;
        coord(w, 17, 11, w0, w1, tw);
        auto at = [&](int64_t hh, int64_t ww) { return (double)xv[(size_t)((nc * 13 + hh) * 17 + ww)]; };
        double v = (1 - th) * ((1 - tw) * at(h0, w0) + tw * at(h0, w1)) + th * ((1 - tw) * at(h1, w0) + tw * at(h1, w1));
        ASSERT_NEAR(y.data<float>()[(nc * 29 + h) * 11 + w], v, 1e-5) << nc << "," << h << "," << w;
      }
    }
  }
}

}  // namespace
