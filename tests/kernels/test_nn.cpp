// Tests of the 'nn' kernel group: ONNX spec examples plus seeded random cases against
// naive reference loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "core/exec/kernel.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv_transpose.h"
#include "core/kernels/einsum.h"
#include "core/kernels/gemm.h"
#include "core/kernels/gemm_op.h"
#include "core/kernels/normalization.h"
#include "core/kernels/pool.h"

namespace qs {
namespace {

using Factory = Result<std::unique_ptr<Kernel>> (*)(const KernelInit&);

struct NnOp {
  Graph graph;
  Node node;
  int64_t opset;
  NnOp(const std::string& op, int64_t opsetVersion = 17) : opset(opsetVersion) {
    node.name = "n";
    node.opType = op;
  }
  NnOp& i(const std::string& k, int64_t v) {
    Attribute a;
    a.type = Attribute::Type::Int;
    a.i = v;
    node.attributes[k] = a;
    return *this;
  }
  NnOp& f(const std::string& k, float v) {
    Attribute a;
    a.type = Attribute::Type::Float;
    a.f = v;
    node.attributes[k] = a;
    return *this;
  }
  NnOp& s(const std::string& k, const std::string& v) {
    Attribute a;
    a.type = Attribute::Type::String;
    a.s = v;
    node.attributes[k] = a;
    return *this;
  }
  NnOp& ints(const std::string& k, const std::vector<int64_t>& v) {
    Attribute a;
    a.type = Attribute::Type::Ints;
    a.ints = v;
    node.attributes[k] = a;
    return *this;
  }
  // Runs the kernel; empty tensors are omitted optional inputs.
  std::vector<Tensor> run(Factory factory, const std::vector<Tensor>& inputs, size_t nOut = 1, int threads = 1) {
    node.inputs.clear();
    for (size_t k = 0; k < inputs.size(); ++k)
      node.inputs.push_back(inputs[k].empty() ? kNoValue : graph.valueId("in" + std::to_string(k)));
    node.outputs.clear();
    for (size_t k = 0; k < nOut; ++k) node.outputs.push_back(graph.valueId("out" + std::to_string(k)));
    KernelInit init{node, opset, graph};
    auto kernel = factory(init);
    EXPECT_TRUE(kernel.isOk()) << kernel.status().message();
    if (!kernel.isOk()) return {};
    std::vector<const Tensor*> ptrs;
    for (const Tensor& t : inputs) ptrs.push_back(t.empty() ? nullptr : &t);
    std::vector<Tensor> outs(nOut);
    KernelContext ctx;
    ctx.inputs = ptrs;
    ctx.outputs = outs;
    ctx.threads = threads;
    Status st = kernel.value()->run(ctx);
    EXPECT_TRUE(st.isOk()) << st.message();
    return outs;
  }
};

Tensor lit(const Shape& shape, const std::vector<float>& v) { return Tensor::fromVector<float>(v, shape); }

Tensor arange(const Shape& shape, float start = 0.f) {
  Tensor t(DType::Float, shape);
  for (int64_t k = 0; k < t.numel(); ++k) t.data<float>()[k] = start + (float)k;
  return t;
}

Tensor randn(const Shape& shape, std::mt19937& rng) {
  Tensor t(DType::Float, shape);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (int64_t k = 0; k < t.numel(); ++k) t.data<float>()[k] = d(rng);
  return t;
}

void expectClose(const Tensor& got, const Tensor& want, float tol = 1e-4f, const std::string& what = "") {
  ASSERT_EQ(shapeToString(got.shape()), shapeToString(want.shape())) << what;
  for (int64_t k = 0; k < want.numel(); ++k) {
    const double g = got.valueAsDouble(k), w = want.valueAsDouble(k);
    ASSERT_NEAR(g, w, tol * (1.0 + std::fabs(w))) << what << " at flat index " << k;
  }
}

// ------------------------------------------------------------------ naive references
struct Geo {
  int64_t s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
};

// x [N, C, D, H, W], w [M, C/G, KD, KH, KW] (3-D form; lower ranks use unit dims).
Tensor naiveConv3(const Tensor& x, const Tensor& w, const Tensor* b, int64_t G, const Geo& g) {
  const int64_t N = x.dim(0), C = x.dim(1), M = w.dim(0), Cg = C / G, Mg = M / G;
  int64_t in[3], k[3], out[3];
  for (int i = 0; i < 3; ++i) {
    in[i] = x.dim(2 + i);
    k[i] = w.dim(2 + i);
    out[i] = (in[i] + g.pb[i] + g.pe[i] - ((k[i] - 1) * g.d[i] + 1)) / g.s[i] + 1;
  }
  Tensor y = Tensor::zeros(DType::Float, {N, M, out[0], out[1], out[2]});
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  float* yp = y.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      const int64_t grp = m / Mg;
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t o2 = 0; o2 < out[2]; ++o2) {
            double acc = b ? b->data<float>()[m] : 0.0;
            for (int64_t c = 0; c < Cg; ++c)
              for (int64_t a0 = 0; a0 < k[0]; ++a0)
                for (int64_t a1 = 0; a1 < k[1]; ++a1)
                  for (int64_t a2 = 0; a2 < k[2]; ++a2) {
                    const int64_t i0 = o0 * g.s[0] - g.pb[0] + a0 * g.d[0];
                    const int64_t i1 = o1 * g.s[1] - g.pb[1] + a1 * g.d[1];
                    const int64_t i2 = o2 * g.s[2] - g.pb[2] + a2 * g.d[2];
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                    const int64_t ci = grp * Cg + c;
                    acc += (double)xp[(((n * C + ci) * in[0] + i0) * in[1] + i1) * in[2] + i2] *
                           wp[(((m * Cg + c) * k[0] + a0) * k[1] + a1) * k[2] + a2];
                  }
            yp[(((n * M + m) * out[0] + o0) * out[1] + o1) * out[2] + o2] = (float)acc;
          }
    }
  return y;
}

// x [N, C, D, H, W], w [C, M/G, KD, KH, KW]; out dims given.
Tensor naiveConvTranspose3(const Tensor& x, const Tensor& w, const Tensor* b, int64_t G, const Geo& g,
                           const int64_t out[3]) {
  const int64_t N = x.dim(0), C = x.dim(1), Mg = w.dim(1), M = Mg * G, Cg = C / G;
  int64_t in[3], k[3];
  for (int i = 0; i < 3; ++i) {
    in[i] = x.dim(2 + i);
    k[i] = w.dim(2 + i);
  }
  Tensor y = Tensor::zeros(DType::Float, {N, M, out[0], out[1], out[2]});
  float* yp = y.data<float>();
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t grp = c / Cg;
      for (int64_t m = 0; m < Mg; ++m)
        for (int64_t i0 = 0; i0 < in[0]; ++i0)
          for (int64_t i1 = 0; i1 < in[1]; ++i1)
            for (int64_t i2 = 0; i2 < in[2]; ++i2)
              for (int64_t a0 = 0; a0 < k[0]; ++a0)
                for (int64_t a1 = 0; a1 < k[1]; ++a1)
                  for (int64_t a2 = 0; a2 < k[2]; ++a2) {
                    const int64_t o0 = i0 * g.s[0] - g.pb[0] + a0 * g.d[0];
                    const int64_t o1 = i1 * g.s[1] - g.pb[1] + a1 * g.d[1];
                    const int64_t o2 = i2 * g.s[2] - g.pb[2] + a2 * g.d[2];
                    if (o0 < 0 || o0 >= out[0] || o1 < 0 || o1 >= out[1] || o2 < 0 || o2 >= out[2]) continue;
                    const int64_t mo = grp * Mg + m;
                    yp[(((n * M + mo) * out[0] + o0) * out[1] + o1) * out[2] + o2] +=
                        xp[(((n * C + c) * in[0] + i0) * in[1] + i1) * in[2] + i2] *
                        wp[(((c * Mg + m) * k[0] + a0) * k[1] + a1) * k[2] + a2];
                  }
    }
  if (b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t q = 0; q < out[0] * out[1] * out[2]; ++q) yp[(n * M + m) * out[0] * out[1] * out[2] + q] += b->data<float>()[m];
  return y;
}

// Drops the leading unit spatial dims of a 3-D-form tensor to rank 2 + nd.
Tensor toRank(const Tensor& t, int nd) {
  Shape s = {t.dim(0), t.dim(1)};
  for (int i = 3 - nd; i < 3; ++i) s.push_back(t.dim(2 + i));
  return t.reshaped(s);
}

// ------------------------------------------------------------------ Conv
TEST(NnConv, SpecBasicWithAndWithoutPadding) {
  Tensor x = arange({1, 1, 5, 5});
  Tensor w = lit({1, 1, 3, 3}, std::vector<float>(9, 1.f));
  NnOp op("Conv", 11);
  op.ints("kernel_shape", {3, 3}).ints("pads", {1, 1, 1, 1});
  auto y = op.run(createConv, {x, w});
  expectClose(y[0], lit({1, 1, 5, 5}, {12, 21, 27, 33, 24, 33, 54, 63, 72, 51, 63, 99, 108, 117, 81,
                                       93, 144, 153, 162, 111, 72, 111, 117, 123, 84}));
  NnOp op2("Conv", 11);
  op2.ints("kernel_shape", {3, 3}).ints("pads", {0, 0, 0, 0});
  y = op2.run(createConv, {x, w});
  expectClose(y[0], lit({1, 1, 3, 3}, {54, 63, 72, 99, 108, 117, 144, 153, 162}));
}

TEST(NnConv, SpecStridesPaddingAndAsymmetric) {
  Tensor x = arange({1, 1, 7, 5});
  Tensor w = lit({1, 1, 3, 3}, std::vector<float>(9, 1.f));
  NnOp op("Conv", 11);
  op.ints("kernel_shape", {3, 3}).ints("pads", {1, 1, 1, 1}).ints("strides", {2, 2});
  auto y = op.run(createConv, {x, w});
  expectClose(y[0], lit({1, 1, 4, 3}, {12, 27, 24, 63, 108, 81, 123, 198, 141, 112, 177, 124}));
  NnOp op2("Conv", 11);
  op2.ints("kernel_shape", {3, 3}).ints("pads", {1, 0, 1, 0}).ints("strides", {2, 2});
  y = op2.run(createConv, {x, w});
  expectClose(y[0], lit({1, 1, 4, 2}, {21, 33, 99, 117, 189, 207, 171, 183}));
}

TEST(NnConv, SpecAutoPadSameLower) {
  Tensor x = arange({1, 1, 5, 5});
  Tensor w = lit({1, 1, 3, 3}, std::vector<float>(9, 1.f));
  NnOp op("Conv", 11);
  op.s("auto_pad", "SAME_LOWER").ints("kernel_shape", {3, 3}).ints("strides", {2, 2});
  auto y = op.run(createConv, {x, w});
  expectClose(y[0], lit({1, 1, 3, 3}, {12, 27, 24, 63, 108, 81, 72, 117, 84}));
}

struct ConvCase {
  int nd;
  int64_t N, G, Cg, Mg;
  int64_t in[3], k[3];
  Geo g;
  bool bias;
};

void runConvCase(const ConvCase& cc, std::mt19937& rng, int threads, const std::string& what) {
  const int64_t C = cc.Cg * cc.G, M = cc.Mg * cc.G;
  Tensor x3 = randn({cc.N, C, cc.in[0], cc.in[1], cc.in[2]}, rng);
  Tensor w3 = randn({M, cc.Cg, cc.k[0], cc.k[1], cc.k[2]}, rng);
  Tensor b = randn({M}, rng);
  Tensor want = naiveConv3(x3, w3, cc.bias ? &b : nullptr, cc.G, cc.g);
  NnOp op("Conv", 11);
  std::vector<int64_t> strides, dil, pads(2 * (size_t)cc.nd);
  for (int i = 3 - cc.nd, j = 0; i < 3; ++i, ++j) {
    strides.push_back(cc.g.s[i]);
    dil.push_back(cc.g.d[i]);
    pads[(size_t)j] = cc.g.pb[i];
    pads[(size_t)(j + cc.nd)] = cc.g.pe[i];
  }
  op.ints("strides", strides).ints("dilations", dil).ints("pads", pads).i("group", cc.G);
  auto y = op.run(createConv, {toRank(x3, cc.nd), toRank(w3, cc.nd), cc.bias ? b : Tensor()}, 1, threads);
  ASSERT_EQ(y.size(), 1u);
  expectClose(y[0], toRank(want, cc.nd), 1e-4f, what);
}

TEST(NnConv, RandomVsNaive) {
  std::mt19937 rng(1234);
  auto r = [&](int lo, int hi) { return (int64_t)std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int t = 0; t < 60; ++t) {
    ConvCase cc;
    cc.nd = (int)r(1, 3);
    cc.N = r(1, 2);
    cc.G = r(1, 3);
    cc.Cg = r(1, 3);
    cc.Mg = r(1, 3);
    cc.bias = r(0, 1) == 1;
    for (int i = 0; i < 3; ++i) {
      const bool used = i >= 3 - cc.nd;
      cc.k[i] = used ? r(1, 3) : 1;
      cc.g.s[i] = used ? r(1, 3) : 1;
      cc.g.d[i] = used ? r(1, 2) : 1;
      cc.g.pb[i] = used ? r(0, 2) : 0;
      cc.g.pe[i] = used ? r(0, 2) : 0;
      const int64_t dk = (cc.k[i] - 1) * cc.g.d[i] + 1;
      cc.in[i] = used ? std::max<int64_t>(dk, r(1, cc.nd == 3 ? 6 : 9)) : 1;
    }
    runConvCase(cc, rng, (int)r(1, 2), "case " + std::to_string(t));
  }
}

// Stride 2 over rows wide enough for im2col's 8-at-a-time gather (16 consecutive values per step)
// and its scalar tail: widths either side of the row end, every padding 0..2 at both ends,
// kernels 1..5 wide, dilation 1 and 2 (the first layers of nms_detector and det take it).
TEST(NnConv, StrideTwoWideRowsVsNaive) {
  std::mt19937 rng(4242);
  int t = 0;
  for (int64_t width : {17, 32, 33, 40, 47})
    for (int64_t k : {1, 3, 5})
      for (int64_t d : {1, 2})
        for (int64_t pb = 0; pb <= 2; ++pb)
          for (int64_t pe = 0; pe <= 2; ++pe, ++t) {
            ConvCase cc;
            cc.nd = 2;
            cc.N = 1;
            cc.G = 1;
            cc.Cg = 3;
            cc.Mg = 4;
            cc.bias = true;
            cc.in[0] = 1;
            cc.in[1] = 5;
            cc.in[2] = width;
            cc.k[0] = 1;
            cc.k[1] = 3;
            cc.k[2] = k;
            cc.g.s[1] = cc.g.s[2] = 2;
            cc.g.d[2] = d;
            cc.g.pb[1] = cc.g.pe[1] = 1;
            cc.g.pb[2] = pb;
            cc.g.pe[2] = pe;
            runConvCase(cc, rng, 1 + t % 2,
                        "width " + std::to_string(width) + " k " + std::to_string(k) + " d " + std::to_string(d) +
                            " pads " + std::to_string(pb) + "," + std::to_string(pe));
          }
}

TEST(NnConv, DepthwiseVsNaive) {
  std::mt19937 rng(77);
  for (int64_t stride : {1, 2})
    for (int64_t k : {3, 5})
      for (int nd : {1, 2}) {
        ConvCase cc;
        cc.nd = nd;
        cc.N = 2;
        cc.G = 6;
        cc.Cg = 1;
        cc.Mg = 1;
        cc.bias = stride == 1;
        cc.in[0] = 1;
        cc.in[1] = nd == 2 ? 11 : 1;
        cc.in[2] = 13;
        cc.k[0] = 1;
        cc.k[1] = nd == 2 ? k : 1;
        cc.k[2] = k;
        for (int i = 3 - nd; i < 3; ++i) {
          cc.g.s[i] = stride;
          cc.g.pb[i] = k / 2;
          cc.g.pe[i] = k / 2 + (stride == 2 ? 1 : 0);
          cc.g.d[i] = k == 3 && stride == 1 ? 2 : 1;
        }
        runConvCase(cc, rng, 2, "depthwise k" + std::to_string(k) + " s" + std::to_string(stride));
      }
}

TEST(NnConv, DepthwiseWideRowsAllPaddingsVsNaive) {
  // Rows wide enough for the vector path (16 and 8 at a time) plus scalar borders, every padding
  // from none to more than the kernel's half, asymmetric too, 1-D and 2-D, H dilation.
  std::mt19937 rng(78);
  for (int64_t k : {1, 3, 5, 7})
    for (int64_t pb = 0; pb <= k / 2 + 1; ++pb)
      for (int nd : {1, 2}) {
        ConvCase cc;
        cc.nd = nd;
        cc.N = 1;
        cc.G = 3;
        cc.Cg = 1;
        cc.Mg = 1;
        cc.bias = (pb % 2) == 0;
        cc.in[0] = 1;
        cc.in[1] = nd == 2 ? 9 : 1;
        cc.in[2] = 37 + pb;
        cc.k[0] = 1;
        cc.k[1] = nd == 2 ? k : 1;
        cc.k[2] = k;
        for (int i = 3 - nd; i < 3; ++i) {
          cc.g.pb[i] = pb;
          cc.g.pe[i] = k / 2;
        }
        if (nd == 2 && k == 3) cc.g.d[1] = 2;
        runConvCase(cc, rng, 2, "depthwise wide k" + std::to_string(k) + " pad" + std::to_string(pb));
      }
}

TEST(NnConv, DepthwiseVectorBlocksBothStridesVsNaive) {
  // Rows from shorter than one vector to several 64-output blocks plus 32, 16, 8 and scalar
  // tails, W stride 1 and 2 (the even-lane loads), borders of every padding, 1-D and 2-D.
  std::mt19937 rng(79);
  for (int64_t stride : {1, 2})
    for (int64_t k : {3, 5})
      for (int64_t width : {7, 23, 40, 64, 100, 161, 203})
        for (int64_t pb : {(int64_t)0, k / 2, k / 2 + 1}) {
          ConvCase cc;
          cc.nd = width % 2 == 0 ? 2 : 1;
          cc.N = 1;
          cc.G = 2;
          cc.Cg = 1;
          cc.Mg = 1;
          cc.bias = pb != 0;
          cc.in[0] = 1;
          cc.in[1] = cc.nd == 2 ? 6 : 1;
          cc.in[2] = std::max(width, k);
          cc.k[0] = 1;
          cc.k[1] = cc.nd == 2 ? k : 1;
          cc.k[2] = k;
          for (int i = 3 - cc.nd; i < 3; ++i) {
            cc.g.s[i] = stride;
            cc.g.pb[i] = pb;
            cc.g.pe[i] = k / 2;
          }
          runConvCase(cc, rng, 1,
                      "depthwise s" + std::to_string(stride) + " k" + std::to_string(k) + " width " + std::to_string(width) +
                          " pad " + std::to_string(pb));
        }
}

TEST(NnConv, DepthwiseTwoFiltersEqualTwoSinglePasses) {
  // depthwiseConvPlane2 (the analysis's layer-wise pass) against two depthwiseConvPlane calls:
  // the same bits, for W strides 1, 2 (vector paths) and 3 (the general path).
  std::mt19937 rng(80);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t stride : {1, 2, 3})
    for (int64_t k : {3, 5})
      for (int64_t width : {9, 40, 77}) {
        WindowAttrs a;
        a.strides = {stride, stride};
        a.pads = {k / 2, k / 2, k / 2, k / 2};
        WindowGeometry g;
        ASSERT_TRUE(resolveWindow(a, {11, width}, {k, k}, false, g).isOk());
        std::vector<float> x((size_t)g.inSize()), w0((size_t)(k * k)), w1((size_t)(k * k));
        for (float& v : x) v = nd(rng);
        for (float& v : w0) v = nd(rng);
        for (float& v : w1) v = nd(rng);
        std::vector<float> a0((size_t)g.outSize()), a1(a0.size()), b0(a0.size()), b1(a0.size());
        depthwiseConvPlane(x.data(), w0.data(), 0.25f, g, a0.data());
        depthwiseConvPlane(x.data(), w1.data(), 0.25f, g, a1.data());
        depthwiseConvPlane2(x.data(), w0.data(), w1.data(), 0.25f, g, b0.data(), b1.data());
        EXPECT_EQ(0, std::memcmp(a0.data(), b0.data(), a0.size() * sizeof(float))) << stride << " " << k << " " << width;
        EXPECT_EQ(0, std::memcmp(a1.data(), b1.data(), a1.size() * sizeof(float))) << stride << " " << k << " " << width;
      }
}

TEST(NnConv, PointwiseVsNaive) {
  std::mt19937 rng(5);
  for (int64_t G : {1, 2}) {
    ConvCase cc;
    cc.nd = 2;
    cc.N = 2;
    cc.G = G;
    cc.Cg = 8;
    cc.Mg = 5;
    cc.bias = true;
    cc.in[0] = 1;
    cc.in[1] = 7;
    cc.in[2] = 9;
    for (int i = 0; i < 3; ++i) cc.k[i] = 1;
    runConvCase(cc, rng, 2, "pointwise G" + std::to_string(G));
  }
}

TEST(NnConv, AutoPadSameUpperVsNaive) {
  std::mt19937 rng(9);
  Tensor x = randn({1, 2, 1, 6, 7}, rng), w = randn({3, 2, 1, 3, 3}, rng);
  NnOp op("Conv", 11);
  op.s("auto_pad", "SAME_UPPER").ints("strides", {2, 2});
  auto y = op.run(createConv, {toRank(x, 2), toRank(w, 2)});
  // out = ceil(6/2)=3, total pad H = 2*2+3-6 = 1 -> (0,1); W: out 4, total = 3*2+3-7 = 2 -> (1,1)
  Geo g;
  g.s[1] = g.s[2] = 2;
  g.pb[1] = 0;
  g.pe[1] = 1;
  g.pb[2] = 1;
  g.pe[2] = 1;
  expectClose(y[0], toRank(naiveConv3(x, w, nullptr, 1, g), 2));
}

// ------------------------------------------------------------------ ConvTranspose
TEST(NnConvTranspose, SpecBasic) {
  Tensor x = arange({1, 1, 3, 3});
  Tensor w = lit({1, 2, 3, 3}, std::vector<float>(18, 1.f));
  NnOp op("ConvTranspose", 11);
  auto y = op.run(createConvTranspose, {x, w});
  std::vector<float> plane = {0, 1, 3, 3, 2, 3, 8, 15, 12, 7, 9, 21, 36, 27, 15, 9, 20, 33, 24, 13, 6, 13, 21, 15, 8};
  std::vector<float> both = plane;
  both.insert(both.end(), plane.begin(), plane.end());
  expectClose(y[0], lit({1, 2, 5, 5}, both));
}

TEST(NnConvTranspose, Spec1D) {
  Tensor x = arange({1, 1, 3});
  Tensor w = lit({1, 2, 3}, std::vector<float>(6, 1.f));
  NnOp op("ConvTranspose", 11);
  auto y = op.run(createConvTranspose, {x, w});
  expectClose(y[0], lit({1, 2, 5}, {0, 1, 3, 3, 2, 0, 1, 3, 3, 2}));
}

TEST(NnConvTranspose, AutoPadSameUpperAndOutputShape) {
  std::mt19937 rng(3);
  Tensor x = randn({1, 2, 1, 3, 3}, rng), w = randn({2, 2, 1, 3, 3}, rng);
  NnOp op("ConvTranspose", 11);
  op.s("auto_pad", "SAME_UPPER").ints("strides", {2, 2});
  auto y = op.run(createConvTranspose, {toRank(x, 2), toRank(w, 2)});
  Geo g;
  g.s[1] = g.s[2] = 2;
  g.pe[1] = g.pe[2] = 1;  // total = 2*2+3-6 = 1 -> begin 0, end 1
  int64_t out[3] = {1, 6, 6};
  expectClose(y[0], toRank(naiveConvTranspose3(x, w, nullptr, 1, g, out), 2));
  // output_shape larger than the full output: negative end padding (zeros).
  NnOp op2("ConvTranspose", 11);
  op2.ints("strides", {3, 2}).ints("output_shape", {10, 8});
  y = op2.run(createConvTranspose, {toRank(x, 2), toRank(w, 2)});
  Geo g2;
  g2.s[1] = 3;
  g2.s[2] = 2;
  int64_t out2[3] = {1, 10, 8};
  expectClose(y[0], toRank(naiveConvTranspose3(x, w, nullptr, 1, g2, out2), 2));
}

TEST(NnConvTranspose, RandomVsNaive) {
  std::mt19937 rng(4321);
  auto r = [&](int lo, int hi) { return (int64_t)std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int t = 0; t < 40; ++t) {
    const int nd = (int)r(1, 3);
    const int64_t N = r(1, 2), G = r(1, 2), Cg = r(1, 3), Mg = r(1, 3);
    Geo g;
    int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, out[3] = {1, 1, 1}, opad[3] = {0, 0, 0};
    std::vector<int64_t> strides, dil, pads(2 * (size_t)nd), outPad;
    for (int i = 3 - nd, j = 0; i < 3; ++i, ++j) {
      in[i] = r(1, nd == 3 ? 4 : 6);
      k[i] = r(1, 3);
      g.s[i] = r(1, 3);
      g.d[i] = r(1, 2);
      opad[i] = r(0, g.s[i] - 1);
      g.pb[i] = r(0, 1);
      g.pe[i] = r(0, 1);
      out[i] = g.s[i] * (in[i] - 1) + opad[i] + (k[i] - 1) * g.d[i] + 1 - g.pb[i] - g.pe[i];
      strides.push_back(g.s[i]);
      dil.push_back(g.d[i]);
      outPad.push_back(opad[i]);
      pads[(size_t)j] = g.pb[i];
      pads[(size_t)(j + nd)] = g.pe[i];
    }
    Tensor x = randn({N, Cg * G, in[0], in[1], in[2]}, rng), w = randn({Cg * G, Mg, k[0], k[1], k[2]}, rng);
    Tensor b = randn({Mg * G}, rng);
    const bool bias = r(0, 1) == 1;
    NnOp op("ConvTranspose", 11);
    op.ints("strides", strides).ints("dilations", dil).ints("pads", pads).ints("output_padding", outPad).i("group", G);
    auto y = op.run(createConvTranspose, {toRank(x, nd), toRank(w, nd), bias ? b : Tensor()}, 1, (int)r(1, 2));
    expectClose(y[0], toRank(naiveConvTranspose3(x, w, bias ? &b : nullptr, G, g, out), nd), 1e-4f,
                "case " + std::to_string(t));
  }
}

TEST(NnConvTranspose, TilingWindowsVsNaive) {
  // kernel == stride (det's upsampling heads): the columns are written in place with the bias.
  // Cropping pads keep the tiling; output_padding leaves positions no window covers (zeroed and
  // accumulated as usual), as does dilation.
  std::mt19937 rng(4322);
  int t = 0;
  for (int nd : {1, 2, 3})
    for (int64_t s : {2, 3})
      for (int64_t pad : {0, 1})
        for (int variant = 0; variant < 3; ++variant, ++t) {
          const int64_t N = 2, G = variant == 2 ? 2 : 1, Cg = 3, Mg = 2, opadV = variant == 1 ? 1 : 0;
          Geo g;
          int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, out[3] = {1, 1, 1};
          std::vector<int64_t> strides, dil, pads(2 * (size_t)nd), outPad;
          for (int i = 3 - nd, j = 0; i < 3; ++i, ++j) {
            in[i] = nd == 3 ? 3 : 7;
            k[i] = s;
            g.s[i] = s;
            g.pb[i] = pad;
            g.pe[i] = j == 0 ? 0 : pad;
            out[i] = s * (in[i] - 1) + opadV + k[i] - g.pb[i] - g.pe[i];
            strides.push_back(s);
            dil.push_back(1);
            outPad.push_back(opadV);
            pads[(size_t)j] = g.pb[i];
            pads[(size_t)(j + nd)] = g.pe[i];
          }
          Tensor x = randn({N, Cg * G, in[0], in[1], in[2]}, rng), w = randn({Cg * G, Mg, k[0], k[1], k[2]}, rng);
          Tensor b = randn({Mg * G}, rng);
          const bool bias = t % 2 == 0;
          NnOp op("ConvTranspose", 11);
          op.ints("strides", strides).ints("dilations", dil).ints("pads", pads).ints("output_padding", outPad).i("group", G);
          auto y = op.run(createConvTranspose, {toRank(x, nd), toRank(w, nd), bias ? b : Tensor()}, 1, 2);
          expectClose(y[0], toRank(naiveConvTranspose3(x, w, bias ? &b : nullptr, G, g, out), nd), 1e-4f,
                      "tiling case " + std::to_string(t));
        }
}

// What the GEMM + col2im path computed for a 2x2 stride-2 ConvTranspose (group 1, no pads): the
// columns W^T X from sgemm, each written to its place with + bias (0 without one).
Tensor gemmPathUpsample2x2(const Tensor& x, const Tensor& w, const Tensor* b) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), M = w.dim(1), HW = H * W;
  Tensor y(DType::Float, {N, M, 2 * H, 2 * W});
  std::vector<float> col((size_t)(4 * M * HW));
  for (int64_t n = 0; n < N; ++n) {
    sgemm(true, false, 4 * M, HW, C, 1.f, w.data<float>(), 4 * M, x.data<float>() + n * C * HW, HW, 0.f, col.data(), HW, 1);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t v = 0; v < W; ++v)
            y.data<float>()[((n * M + m) * 2 * H + 2 * h + j / 2) * 2 * W + 2 * v + j % 2] =
                col[(size_t)((m * 4 + j) * HW + h * W + v)] + (b ? b->data<float>()[m] : 0.f);
  }
  return y;
}

void expectSameBits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(shapeToString(got.shape()), shapeToString(want.shape())) << what;
  for (int64_t k = 0; k < want.numel(); ++k)
    if (std::memcmp(got.data<float>() + k, want.data<float>() + k, sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": element " << k << " is " << got.data<float>()[k] << ", want " << want.data<float>()[k];
      return;
    }
}

TEST(NnConvTranspose, Upsample2x2DirectGivesTheGemmPathsBits) {
  // The direct 2x2 stride-2 kernel: rows of 24, 8 and single pixels around their boundaries, 1 to 256
  // input channels (one FMA chain, as the GEMM's K slice), W given at run time and as a constant.
  std::mt19937 rng(4323);
  int t = 0;
  for (int64_t W : {1, 7, 8, 9, 23, 24, 25, 31, 48, 57})
    for (int64_t C : {1, 3, 24, 256})
      for (int64_t M : {1, 24}) {
        const int64_t N = t % 3 == 0 ? 2 : 1, H = 1 + t % 4;
        Tensor x = randn({N, C, H, W}, rng), w = randn({C, M, 2, 2}, rng), b = randn({M}, rng);
        const bool bias = t % 2 == 0, constant = t % 4 < 2;
        NnOp op("ConvTranspose", 11);
        op.ints("strides", {2, 2}).ints("kernel_shape", {2, 2});
        if (constant) op.graph.value(op.graph.valueId("in1")).constant = w;
        auto y = op.run(createConvTranspose, {x, w, bias ? b : Tensor()}, 1, 1 + t % 2);
        expectSameBits(y[0], gemmPathUpsample2x2(x, w, bias ? &b : nullptr), "case " + std::to_string(t));
        ++t;
      }
  // More than 256 input channels: the GEMM path (its K slices), still right.
  Tensor x = randn({1, 300, 3, 5}, rng), w = randn({300, 4, 2, 2}, rng);
  NnOp op("ConvTranspose", 11);
  op.ints("strides", {2, 2});
  auto y = op.run(createConvTranspose, {x, w}, 1, 2);
  Geo g;
  g.s[1] = g.s[2] = 2;
  int64_t out[3] = {1, 6, 10};
  expectClose(y[0], toRank(naiveConvTranspose3(x.reshaped({1, 300, 1, 3, 5}), w.reshaped({300, 4, 1, 2, 2}), nullptr, 1, g, out), 2),
              1e-3f);
}

TEST(NnConvTranspose, FusedActivationsAreTheOpsAfterIt) {
  // FusedConvTranspose (made by the graph rewrites): the plain ConvTranspose's output, then each
  // activation in order, on the direct 2x2 kernel and on the GEMM path (3x3 stride 2, pads).
  std::mt19937 rng(4324);
  const std::vector<FusedActivation> acts = {{FusedActivation::Kind::LeakyRelu, 0.1f, 0},
                                             {FusedActivation::Kind::Clip, -0.05f, 0.6f}};
  for (int64_t k : {2, 3}) {
    Tensor x = randn({2, 5, 6, 27}, rng), w = randn({5, 3, k, k}, rng), b = randn({3}, rng);
    const std::vector<int64_t> pads = k == 2 ? std::vector<int64_t>{0, 0, 0, 0} : std::vector<int64_t>{1, 1, 1, 1};
    NnOp plain("ConvTranspose", 11);
    plain.ints("strides", {2, 2}).ints("pads", pads);
    Tensor want = plain.run(createConvTranspose, {x, w, b}, 1, 2)[0].clone();
    const int64_t plane = want.dim(2) * want.dim(3);
    for (int64_t p = 0; p < want.dim(0) * want.dim(1); ++p) applyFusedActivations(want.data<float>() + p * plane, plane, 0.f, acts);
    NnOp fused(kFusedConvTransposeOp, 1);
    fused.ints("strides", {2, 2}).ints("pads", pads);
    setFusedActivations(fused.node, acts);
    auto got = fused.run(createConvTranspose, {x, w, b}, 1, 2);
    expectSameBits(got[0], want, "kernel " + std::to_string(k));
  }
}

// ------------------------------------------------------------------ Gemm / MatMul
Tensor naiveMatMul2(const float* a, const float* b, int64_t M, int64_t K, int64_t N) {
  Tensor y(DType::Float, {M, N});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += (double)a[i * K + k] * b[k * N + j];
      y.data<float>()[i * N + j] = (float)acc;
    }
  return y;
}

Tensor transpose2(const Tensor& t) {
  Tensor r(DType::Float, {t.dim(1), t.dim(0)});
  for (int64_t i = 0; i < t.dim(0); ++i)
    for (int64_t j = 0; j < t.dim(1); ++j) r.data<float>()[j * t.dim(0) + i] = t.data<float>()[i * t.dim(1) + j];
  return r;
}

TEST(NnGemm, AllAttributesAndBroadcastC) {
  std::mt19937 rng(11);
  const int64_t M = 4, K = 5, N = 3;
  Tensor a = randn({M, K}, rng), b = randn({K, N}, rng);
  Tensor ref = naiveMatMul2(a.data<float>(), b.data<float>(), M, K, N);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const Shape& cs : std::vector<Shape>{{}, {1}, {N}, {1, N}, {M, 1}, {M, N}}) {
        Tensor c = randn(cs, rng);
        NnOp op("Gemm", 13);
        op.i("transA", ta).i("transB", tb).f("alpha", 0.25f).f("beta", 0.35f);
        auto y = op.run(createGemm, {ta ? transpose2(a) : a, tb ? transpose2(b) : b, c});
        Tensor want(DType::Float, {M, N});
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            const int64_t ci = cs.size() == 2 ? (cs[0] == 1 ? 0 : i) : 0;
            const int64_t cj = cs.empty() ? 0 : (cs.back() == 1 ? 0 : j);
            const int64_t cn = cs.empty() ? 1 : cs.back();
            want.data<float>()[i * N + j] =
                0.25f * ref.data<float>()[i * N + j] + 0.35f * c.data<float>()[ci * cn + cj];
          }
        expectClose(y[0], want, 1e-5f, "ta" + std::to_string(ta) + " tb" + std::to_string(tb) + " C" + shapeToString(cs));
      }
  NnOp noC("Gemm", 13);
  auto y = noC.run(createGemm, {a, b});
  expectClose(y[0], ref);
}

TEST(NnMatMul, BroadcastAndVectors) {
  std::mt19937 rng(12);
  struct Case {
    Shape a, b, y;
  };
  for (const Case& c : std::vector<Case>{{{3, 4}, {4, 5}, {3, 5}},
                                          {{2, 3, 4}, {4, 5}, {2, 3, 5}},
                                          {{2, 3, 4}, {2, 4, 5}, {2, 3, 5}},
                                          {{3, 4}, {2, 4, 5}, {2, 3, 5}},
                                          {{2, 1, 3, 4}, {1, 3, 4, 2}, {2, 3, 3, 2}},
                                          {{4}, {4, 5}, {5}},
                                          {{3, 4}, {4}, {3}},
                                          {{4}, {4}, {}},
                                          {{2, 3, 4}, {4}, {2, 3}},
                                          {{4}, {2, 4, 5}, {2, 5}}}) {
    Tensor a = randn(c.a, rng), b = randn(c.b, rng);
    NnOp op("MatMul", 13);
    auto y = op.run(createMatMul, {a, b}, 1, 2);
    // Reference: expand both to [batch..., M, K] / [batch..., K, N] by explicit indexing.
    Shape as = c.a, bs = c.b;
    if (as.size() == 1) as.insert(as.begin(), 1);
    if (bs.size() == 1) bs.push_back(1);
    const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
    Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2), batch;
    ASSERT_TRUE(broadcastShapes(ab, bb, batch));
    const int64_t nb = numelOf(batch);
    std::vector<float> want;
    for (int64_t t = 0; t < nb; ++t) {
      auto off = [&](const Shape& s) {
        int64_t rem = t, o = 0, mul = 1;
        for (size_t i = batch.size(); i-- > 0;) {
          const int64_t idx = rem % batch[i];
          rem /= batch[i];
          const ptrdiff_t si = (ptrdiff_t)i - (ptrdiff_t)(batch.size() - s.size());
          if (si >= 0) {
            o += (s[(size_t)si] == 1 ? 0 : idx) * mul;
            mul *= s[(size_t)si];
          }
        }
        return o;
      };
      Tensor r = naiveMatMul2(a.data<float>() + off(ab) * M * K, b.data<float>() + off(bb) * K * N, M, K, N);
      want.insert(want.end(), r.data<float>(), r.data<float>() + M * N);
    }
    expectClose(y[0], lit(c.y, want), 1e-4f, shapeToString(c.a) + " x " + shapeToString(c.b));
  }
}

// ------------------------------------------------------------------ Einsum
TEST(NnEinsum, CommonForms) {
  std::mt19937 rng(21);
  Tensor A = randn({3, 4}, rng), B = randn({4, 5}, rng), Sq = randn({4, 4}, rng);
  Tensor bA = randn({2, 3, 4}, rng), bB = randn({2, 4, 5}, rng), bSq = randn({2, 3, 3}, rng);
  Tensor v = randn({4}, rng), w = randn({4}, rng), C3 = randn({5, 2}, rng);
  auto at = [](const Tensor& t, std::initializer_list<int64_t> idx) {
    int64_t o = 0, k = 0;
    for (int64_t i : idx) o = o * t.dim((int)k++) + i;
    return t.data<float>()[o];
  };
  auto run = [&](const std::string& eq, std::vector<Tensor> in) {
    NnOp op("Einsum", 12);
    op.s("equation", eq);
    return op.run(createEinsum, in, 1, 2)[0];
  };
  // matmul, explicit and implicit
  for (const std::string eq : {"ij,jk->ik", "ij,jk"}) {
    Tensor y = run(eq, {A, B});
    expectClose(y, naiveMatMul2(A.data<float>(), B.data<float>(), 3, 4, 5), 1e-5f, eq);
  }
  // batch matmul with ellipsis and letters
  for (const std::string eq : {"bij,bjk->bik", "...ij,...jk->...ik"}) {
    Tensor y = run(eq, {bA, bB});
    std::vector<float> want;
    for (int64_t t = 0; t < 2; ++t) {
      Tensor r = naiveMatMul2(bA.data<float>() + t * 12, bB.data<float>() + t * 20, 3, 4, 5);
      want.insert(want.end(), r.data<float>(), r.data<float>() + 15);
    }
    expectClose(y, lit({2, 3, 5}, want), 1e-5f, eq);
  }
  expectClose(run("ij->ji", {A}), transpose2(A), 1e-6f, "transpose");
  expectClose(run("ji", {A}), transpose2(A), 1e-6f, "implicit transpose");
  {
    std::vector<float> d;
    float tr = 0;
    for (int64_t i = 0; i < 4; ++i) {
      d.push_back(at(Sq, {i, i}));
      tr += at(Sq, {i, i});
    }
    expectClose(run("ii->i", {Sq}), lit({4}, d), 1e-6f, "diag");
    expectClose(run("ii", {Sq}), lit({}, {tr}), 1e-5f, "trace");
  }
  {
    std::vector<float> d;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 3; ++i) d.push_back(at(bSq, {b, i, i}));
    expectClose(run("...ii->...i", {bSq}), lit({2, 3}, d), 1e-6f, "batch diag");
  }
  {
    float s = 0;
    std::vector<float> rows(3, 0.f);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        s += at(A, {i, j});
        rows[(size_t)i] += at(A, {i, j});
      }
    expectClose(run("ij->", {A}), lit({}, {s}), 1e-5f, "sum");
    expectClose(run("ij->i", {A}), lit({3}, rows), 1e-5f, "row sum");
  }
  {
    float dot = 0;
    std::vector<float> outer;
    for (int64_t i = 0; i < 4; ++i) dot += v.data<float>()[i] * w.data<float>()[i];
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 4; ++j) outer.push_back(v.data<float>()[i] * w.data<float>()[j]);
    expectClose(run("i,i", {v, w}), lit({}, {dot}), 1e-5f, "inner");
    expectClose(run("i,j->ij", {v, w}), lit({4, 4}, outer), 1e-5f, "outer");
  }
  {
    // ij,kj->ik (B transposed) and a three-operand chain ij,jk,kl->il
    Tensor Bt = transpose2(B);
    expectClose(run("ij,kj->ik", {A, Bt}), naiveMatMul2(A.data<float>(), B.data<float>(), 3, 4, 5), 1e-5f, "ij,kj");
    Tensor AB = naiveMatMul2(A.data<float>(), B.data<float>(), 3, 4, 5);
    Tensor ABC = naiveMatMul2(AB.data<float>(), C3.data<float>(), 3, 5, 2);
    expectClose(run("ij,jk,kl->il", {A, B, C3}), ABC, 1e-4f, "chain");
    // Output permuted: ij,jk->ki
    expectClose(run("ij,jk->ki", {A, B}), transpose2(AB), 1e-5f, "ki");
  }
}

TEST(NnEinsum, DoubleInputs) {
  Tensor a(DType::Double, {2, 2}), b(DType::Double, {2, 2});
  for (int i = 0; i < 4; ++i) {
    a.data<double>()[i] = i + 1;
    b.data<double>()[i] = 2 * i;
  }
  NnOp op("Einsum", 12);
  op.s("equation", "ij,jk->ik");
  auto y = op.run(createEinsum, {a, b});
  ASSERT_EQ(y[0].dtype(), DType::Double);
  // [[1,2],[3,4]] x [[0,2],[4,6]] = [[8,14],[16,30]]
  EXPECT_DOUBLE_EQ(y[0].data<double>()[0], 8);
  EXPECT_DOUBLE_EQ(y[0].data<double>()[1], 14);
  EXPECT_DOUBLE_EQ(y[0].data<double>()[2], 16);
  EXPECT_DOUBLE_EQ(y[0].data<double>()[3], 30);
}

// ------------------------------------------------------------------ normalisations
TEST(NnBatchNorm, SpecExampleAndTraining) {
  Tensor x = lit({1, 2, 1, 3}, {-1, 0, 1, 2, 3, 4});
  Tensor s = lit({2}, {1.0f, 1.5f}), bias = lit({2}, {0, 1}), mean = lit({2}, {0, 3}), var = lit({2}, {1, 1.5f});
  NnOp op("BatchNormalization", 15);
  auto y = op.run(createBatchNormalization, {x, s, bias, mean, var});
  std::vector<float> want;
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 3; ++i) {
      const float xv = x.data<float>()[c * 3 + i];
      want.push_back(s.data<float>()[c] * (xv - mean.data<float>()[c]) / std::sqrt(var.data<float>()[c] + 1e-5f) +
                     bias.data<float>()[c]);
    }
  expectClose(y[0], lit({1, 2, 1, 3}, want));
  NnOp tr("BatchNormalization", 15);
  tr.i("training_mode", 1).f("momentum", 0.9f);
  y = tr.run(createBatchNormalization, {x, s, bias, mean, var}, 3);
  // batch mean c0 = 0, var = 2/3; c1 mean 3, var 2/3
  expectClose(y[1], lit({2}, {0.f, 0.9f * 3 + 0.1f * 3}));
  expectClose(y[2], lit({2}, {0.9f * 1 + 0.1f * (2.f / 3), 0.9f * 1.5f + 0.1f * (2.f / 3)}));
  const float a0 = 1.f / std::sqrt(2.f / 3 + 1e-5f);
  EXPECT_NEAR(y[0].data<float>()[0], -a0, 1e-5);
}

TEST(NnInstanceNorm, VsNaive) {
  std::mt19937 rng(31);
  Tensor x = randn({2, 3, 4, 5}, rng), s = randn({3}, rng), b = randn({3}, rng);
  NnOp op("InstanceNormalization", 6);
  op.f("epsilon", 1e-2f);
  auto y = op.run(createInstanceNormalization, {x, s, b}, 1, 2);
  Tensor want(DType::Float, x.shape());
  for (int64_t p = 0; p < 6; ++p) {
    double m = 0, v = 0;
    for (int i = 0; i < 20; ++i) m += x.data<float>()[p * 20 + i];
    m /= 20;
    for (int i = 0; i < 20; ++i) v += std::pow(x.data<float>()[p * 20 + i] - m, 2);
    v /= 20;
    for (int i = 0; i < 20; ++i)
      want.data<float>()[p * 20 + i] =
          (float)(s.data<float>()[p % 3] * (x.data<float>()[p * 20 + i] - m) / std::sqrt(v + 1e-2) + b.data<float>()[p % 3]);
  }
  expectClose(y[0], want, 1e-4f);
}

TEST(NnLayerNorm, AxesAndStatOutputs) {
  std::mt19937 rng(41);
  Tensor x = randn({2, 3, 4}, rng);
  for (int64_t axis : {-1, 1, 0, -2}) {
    int64_t ax = axis < 0 ? axis + 3 : axis;
    Shape ns(x.shape().begin() + ax, x.shape().end());
    Tensor s = randn(ns, rng), b = randn(ns, rng);
    NnOp op("LayerNormalization", 17);
    op.i("axis", axis).f("epsilon", 1e-3f);
    auto y = op.run(createLayerNormalization, {x, s, b}, 3);
    const int64_t inner = numelOf(ns), outer = x.numel() / inner;
    Tensor want(DType::Float, x.shape());
    std::vector<float> means, invs;
    for (int64_t r = 0; r < outer; ++r) {
      double m = 0, v = 0;
      for (int64_t i = 0; i < inner; ++i) m += x.data<float>()[r * inner + i];
      m /= inner;
      for (int64_t i = 0; i < inner; ++i) v += std::pow(x.data<float>()[r * inner + i] - m, 2);
      v /= inner;
      const double inv = 1.0 / std::sqrt(v + 1e-3);
      means.push_back((float)m);
      invs.push_back((float)inv);
      for (int64_t i = 0; i < inner; ++i)
        want.data<float>()[r * inner + i] =
            (float)((x.data<float>()[r * inner + i] - m) * inv * s.data<float>()[i] + b.data<float>()[i]);
    }
    Shape st(x.shape().begin(), x.shape().begin() + ax);
    st.resize(3, 1);
    expectClose(y[0], want, 1e-4f, "axis " + std::to_string(axis));
    expectClose(y[1], lit(st, means), 1e-4f);
    expectClose(y[2], lit(st, invs), 1e-4f);
  }
  // Broadcast scale [1] and no bias.
  NnOp op("LayerNormalization", 17);
  auto y = op.run(createLayerNormalization, {x, lit({1}, {2.f})});
  ASSERT_EQ(y[0].shape(), x.shape());
}

TEST(NnLpNorm, P1AndP2) {
  Tensor x = lit({2, 2}, {3, 4, 0, 0});
  NnOp op("LpNormalization", 1);
  auto y = op.run(createLpNormalization, {x});
  expectClose(y[0], lit({2, 2}, {0.6f, 0.8f, 0, 0}));
  NnOp op1("LpNormalization", 1);
  op1.i("axis", 0).i("p", 1);
  y = op1.run(createLpNormalization, {lit({2, 2}, {1, 2, 3, 2})});
  expectClose(y[0], lit({2, 2}, {0.25f, 0.5f, 0.75f, 0.5f}));
}

// ------------------------------------------------------------------ pools
TEST(NnPool, SpecCeilAndSameUpper) {
  Tensor x = arange({1, 1, 4, 4}, 1.f);
  NnOp mp("MaxPool", 12);
  mp.ints("kernel_shape", {3, 3}).ints("strides", {2, 2}).i("ceil_mode", 1);
  expectClose(mp.run(createMaxPool, {x})[0], lit({1, 1, 2, 2}, {11, 12, 15, 16}));
  NnOp ap("AveragePool", 12);
  ap.ints("kernel_shape", {3, 3}).ints("strides", {2, 2}).i("ceil_mode", 1);
  expectClose(ap.run(createAveragePool, {x})[0], lit({1, 1, 2, 2}, {6, 7.5f, 12, 13.5f}));
  Tensor x5 = arange({1, 1, 5, 5}, 1.f);
  NnOp mps("MaxPool", 12);
  mps.ints("kernel_shape", {3, 3}).ints("strides", {2, 2}).s("auto_pad", "SAME_UPPER");
  expectClose(mps.run(createMaxPool, {x5})[0], lit({1, 1, 3, 3}, {7, 9, 10, 17, 19, 20, 22, 24, 25}));
  NnOp aps("AveragePool", 12);
  aps.ints("kernel_shape", {3, 3}).ints("strides", {2, 2}).s("auto_pad", "SAME_UPPER");
  expectClose(aps.run(createAveragePool, {x5})[0], lit({1, 1, 3, 3}, {4, 5.5f, 7, 11.5f, 13, 14.5f, 19, 20.5f, 22}));
  NnOp apc("AveragePool", 12);
  apc.ints("kernel_shape", {5, 5}).ints("pads", {2, 2, 2, 2}).i("count_include_pad", 1);
  Tensor y = apc.run(createAveragePool, {x5})[0];
  EXPECT_NEAR(y.data<float>()[0], 2.52f, 1e-5);
  EXPECT_NEAR(y.data<float>()[1], 3.6f, 1e-5);
  EXPECT_NEAR(y.data<float>()[12], 13.f, 1e-5);
  NnOp ape("AveragePool", 12);
  ape.ints("kernel_shape", {5, 5}).ints("pads", {2, 2, 2, 2});
  y = ape.run(createAveragePool, {x5})[0];
  EXPECT_NEAR(y.data<float>()[0], 7.f, 1e-5);  // (1+2+3+6+7+8+11+12+13)/9
}

TEST(NnPool, MaxPoolIndicesStorageOrder) {
  Tensor x = arange({1, 1, 5, 5}, 1.f);
  NnOp mp("MaxPool", 12);
  mp.ints("kernel_shape", {2, 2}).ints("strides", {2, 2}).i("storage_order", 1);
  auto y = mp.run(createMaxPool, {x}, 2);
  expectClose(y[0], lit({1, 1, 2, 2}, {7, 9, 17, 19}));
  ASSERT_EQ(y[1].dtype(), DType::Int64);
  std::vector<int64_t> want = {6, 16, 8, 18};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[1].data<int64_t>()[i], want[(size_t)i]);
  NnOp mp2("MaxPool", 12);
  mp2.ints("kernel_shape", {2, 2}).ints("strides", {2, 2});
  y = mp2.run(createMaxPool, {x}, 2);
  want = {6, 8, 16, 18};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[1].data<int64_t>()[i], want[(size_t)i]);
}

TEST(NnPool, RandomVsNaive2D) {
  std::mt19937 rng(51);
  auto r = [&](int lo, int hi) { return (int64_t)std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int t = 0; t < 40; ++t) {
    int64_t k[2], s[2], d[2], pb[2], pe[2], in[2], out[2];
    const bool ceil = r(0, 1) == 1, incl = r(0, 1) == 1;
    for (int i = 0; i < 2; ++i) {
      k[i] = r(1, 3);
      s[i] = r(1, 3);
      d[i] = r(1, 2);
      pb[i] = r(0, k[i] - 1);
      pe[i] = r(0, k[i] - 1);
      in[i] = std::max<int64_t>((k[i] - 1) * d[i] + 1, r(1, 9));
      const int64_t span = in[i] + pb[i] + pe[i] - ((k[i] - 1) * d[i] + 1);
      out[i] = ceil ? (span + s[i] - 1) / s[i] + 1 : span / s[i] + 1;
      if (ceil && (out[i] - 1) * s[i] >= in[i] + pb[i]) --out[i];
    }
    Tensor x = randn({2, 3, in[0], in[1]}, rng);
    Tensor wantMax(DType::Float, {2, 3, out[0], out[1]}), wantAvg(DType::Float, {2, 3, out[0], out[1]});
    for (int64_t p = 0; p < 6; ++p)
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1) {
          float mx = -INFINITY, sum = 0;
          int cnt = 0, cntPad = 0;
          for (int64_t a = 0; a < k[0]; ++a)
            for (int64_t b = 0; b < k[1]; ++b) {
              const int64_t i0 = o0 * s[0] - pb[0] + a * d[0], i1 = o1 * s[1] - pb[1] + b * d[1];
              if (i0 < in[0] + pe[0] && i1 < in[1] + pe[1]) ++cntPad;
              if (i0 < 0 || i1 < 0 || i0 >= in[0] || i1 >= in[1]) continue;
              const float v = x.data<float>()[(p * in[0] + i0) * in[1] + i1];
              mx = std::max(mx, v);
              sum += v;
              ++cnt;
            }
          const int64_t o = (p * out[0] + o0) * out[1] + o1;
          wantMax.data<float>()[o] = mx;
          wantAvg.data<float>()[o] = sum / (float)(incl ? cntPad : cnt);
        }
    NnOp mp("MaxPool", 12);
    mp.ints("kernel_shape", {k[0], k[1]}).ints("strides", {s[0], s[1]}).ints("dilations", {d[0], d[1]})
        .ints("pads", {pb[0], pb[1], pe[0], pe[1]}).i("ceil_mode", ceil);
    expectClose(mp.run(createMaxPool, {x}, 1, 2)[0], wantMax, 1e-6f, "max case " + std::to_string(t));
    NnOp ap("AveragePool", 19);
    ap.ints("kernel_shape", {k[0], k[1]}).ints("strides", {s[0], s[1]}).ints("dilations", {d[0], d[1]})
        .ints("pads", {pb[0], pb[1], pe[0], pe[1]}).i("ceil_mode", ceil).i("count_include_pad", incl);
    expectClose(ap.run(createAveragePool, {x}, 1, 2)[0], wantAvg, 1e-5f, "avg case " + std::to_string(t));
  }
}

// AveragePool over rows wide enough for the eight-outputs-at-a-time path (W stride 1 and 2, no W
// dilation), its scalar edges (padding, ceil mode, the row's end) around it: the same bits as a
// naive sum in the same tap order (rows, then columns), with and without count_include_pad.
TEST(NnPool, AveragePoolWideRowsSameBitsAsNaive) {
  std::mt19937 rng(77);
  auto r = [&](int lo, int hi) { return (int64_t)std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int t = 0; t < 60; ++t) {
    int64_t k[2], s[2], d[2], pb[2], pe[2], in[2], out[2];
    const bool ceil = r(0, 1) == 1, incl = r(0, 1) == 1;
    for (int i = 0; i < 2; ++i) {
      k[i] = r(1, 3);
      s[i] = i == 1 ? r(1, 2) : r(1, 3);
      d[i] = i == 1 ? 1 : r(1, 2);
      pb[i] = r(0, k[i] - 1);
      pe[i] = r(0, k[i] - 1);
      in[i] = std::max<int64_t>((k[i] - 1) * d[i] + 1, i == 1 ? r(16, 60) : r(1, 5));
      const int64_t span = in[i] + pb[i] + pe[i] - ((k[i] - 1) * d[i] + 1);
      out[i] = ceil ? (span + s[i] - 1) / s[i] + 1 : span / s[i] + 1;
      if (ceil && (out[i] - 1) * s[i] >= in[i] + pb[i]) --out[i];
    }
    Tensor x = randn({1, 3, in[0], in[1]}, rng);
    Tensor want(DType::Float, {1, 3, out[0], out[1]});
    for (int64_t p = 0; p < 3; ++p)
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1) {
          float sum = 0;
          int cnt = 0, cntPad = 0;
          for (int64_t a = 0; a < k[0]; ++a)
            for (int64_t b = 0; b < k[1]; ++b) {
              const int64_t i0 = o0 * s[0] - pb[0] + a * d[0], i1 = o1 * s[1] - pb[1] + b * d[1];
              if (i0 < in[0] + pe[0] && i1 < in[1] + pe[1]) ++cntPad;
              if (i0 < 0 || i1 < 0 || i0 >= in[0] || i1 >= in[1]) continue;
              sum += x.data<float>()[(p * in[0] + i0) * in[1] + i1];
              ++cnt;
            }
          want.data<float>()[(p * out[0] + o0) * out[1] + o1] = sum / (float)(incl ? cntPad : cnt);
        }
    NnOp ap("AveragePool", 19);
    ap.ints("kernel_shape", {k[0], k[1]}).ints("strides", {s[0], s[1]}).ints("dilations", {d[0], d[1]})
        .ints("pads", {pb[0], pb[1], pe[0], pe[1]}).i("ceil_mode", ceil).i("count_include_pad", incl);
    const Tensor y = ap.run(createAveragePool, {x}, 1, 1 + t % 2)[0];
    ASSERT_EQ(y.shape(), want.shape()) << "case " << t;
    EXPECT_EQ(std::memcmp(y.data<float>(), want.data<float>(), sizeof(float) * (size_t)y.numel()), 0)
        << "case " << t << ": k " << k[0] << "x" << k[1] << " s " << s[0] << "x" << s[1] << " in " << in[0] << "x"
        << in[1];
  }
}

TEST(NnPool, GlobalPools) {
  Tensor x = lit({1, 2, 2, 2}, {1, 2, 3, 4, -1, -2, -3, -8});
  NnOp ga("GlobalAveragePool", 1);
  expectClose(ga.run(createGlobalAveragePool, {x})[0], lit({1, 2, 1, 1}, {2.5f, -3.5f}));
  NnOp gm("GlobalMaxPool", 1);
  expectClose(gm.run(createGlobalMaxPool, {x})[0], lit({1, 2, 1, 1}, {4, -1}));
}

}  // namespace
}  // namespace qs
