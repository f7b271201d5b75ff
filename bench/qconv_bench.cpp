// The integer Conv (core/kernels/qconv.h) against the FP32 Conv kernel it replaces in the
// analysis, on PP-OCRv4 det Conv shapes, 1 and 2 threads. Columns (ms, best of REPEATS):
//   fp32       the Conv kernel from the registry on float X and W
//   fq+fp32    fakeQuantize(X) then that Conv (what one quantized pass used to cost)
//   full       qconv, full output only
//   +act       qconv, full and actOnly
//   all        qconv, full, actOnly and weightError
//   fp/full    fp32 / full: the speed-up of one quantized pass
//   3fp/all    3 * fp32 / all: the analysis ran three FP32 passes (both, activations, weights)
// usage: qs_bench_qconv [REPEATS]; QS_QCONV_GENERIC=1 forces the portable path.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/exec/kernel.h"
#include "core/exec/kernel_registry.h"
#include "core/kernels/conv.h"
#include "core/kernels/qconv.h"
#include "core/numeric/fake_quant.h"
#include "bench/cpu_time.h"

namespace {

struct Shape2d {
  const char* name;
  int64_t C, M, H, W, k, stride, pad;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace qs;
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 9;
  if (const char* g = std::getenv("QS_QCONV_GENERIC"); g && *g == '1') setQconvKernel("generic");
  const Shape2d shapes[] = {
      {"96->24 3x3 s1 160x160", 96, 24, 160, 160, 3, 1, 1},
      {"64->128 1x1 80x80", 64, 128, 80, 80, 1, 1, 0},
      {"32->64 3x3 s2 160x160", 32, 64, 160, 160, 3, 2, 1},
      {"3->16 3x3 s2 640x640", 3, 16, 640, 640, 3, 2, 1},
      {"256->96 1x1 20x20", 256, 96, 20, 20, 1, 1, 0},
      {"96->96 3x3 s1 40x40", 96, 96, 40, 40, 3, 1, 1},
  };
  const KernelRegistry registry = KernelRegistry::builtin();
  const KernelEntry* conv = registry.find("Conv", "", 17);
  if (!conv) return 1;
  std::printf("qconv path: %s; ms, best of %d\n", qconvKernelName(), repeats);
  std::printf("%-24s %6s %7s | %8s %8s %8s %8s %8s %8s | %7s %7s\n", "shape", "K", "N", "fp32", "fq+fp32", "full", "+act",
              "all", "sums", "fp/full", "3fp/all");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const Shape2d& s : shapes) {
    Tensor X(DType::Float, {1, s.C, s.H, s.W}), W(DType::Float, {s.M, s.C, s.k, s.k}), B(DType::Float, {s.M});
    for (int64_t i = 0; i < X.numel(); ++i) X.data<float>()[i] = std::max(0.f, u(rng));  // post-ReLU-like
    for (int64_t i = 0; i < W.numel(); ++i) W.data<float>()[i] = 0.1f * u(rng);
    for (int64_t i = 0; i < B.numel(); ++i) B.data<float>()[i] = u(rng);
    const float sx = 1.f / 127.f;
    std::vector<float> sw((size_t)s.M, 0.1f / 127.f);
    const Tensor Wq = fakeQuantize(W, sw, 0, QuantMode::Int8, kWeightQmin, kWeightQmax);

    Graph graph;
    Node node;
    node.name = "conv";
    node.opType = "Conv";
    Attribute strides, pads;
    strides.type = pads.type = Attribute::Type::Ints;
    strides.ints = {s.stride, s.stride};
    pads.ints = {s.pad, s.pad, s.pad, s.pad};
    node.attributes["strides"] = strides;
    node.attributes["pads"] = pads;
    node.inputs = {graph.valueId("x"), graph.valueId("w"), graph.valueId("b")};
    node.outputs = {graph.valueId("y")};
    auto kernel = conv->create(KernelInit{node, 17, graph});
    if (!kernel) {
      std::fprintf(stderr, "%s\n", kernel.status().message().c_str());
      return 1;
    }
    WindowAttrs attrs;
    attrs.strides = strides.ints;
    attrs.pads = pads.ints;
    WindowGeometry g;
    if (!resolveWindow(attrs, {s.H, s.W}, {s.k, s.k}, false, g)) return 1;
    auto qw = prepareQConvWeights(W, sw);
    if (!qw) {
      std::fprintf(stderr, "%s\n", qw.status().message().c_str());
      return 1;
    }
    const int64_t K = s.C * s.k * s.k, N = g.outSize();
    for (int threads = 1; threads <= 2; ++threads) {
      Tensor y[1];
      auto runFp32 = [&](const Tensor& x) {
        const Tensor* in[3] = {&x, &Wq, &B};
        KernelContext ctx;
        ctx.inputs = in;
        ctx.outputs = y;
        ctx.threads = threads;
        if (!kernel.value()->run(ctx)) std::abort();
      };
      const double fp32 = bench::bestMs(repeats, [&] { runFp32(X); });
      const double fqFp32 = bench::bestMs(repeats, [&] {
        runFp32(fakeQuantize(X, {sx}, 1, QuantMode::Int8, kActQmin, kActQmax, threads));
      });
      Tensor full, act, werr;
      auto q = [&](QConvOutputs o) {
        if (!qconv(X, sx, *qw.value(), B.data<float>(), g, threads, o)) std::abort();
      };
      const double tFull = bench::bestMs(repeats, [&] { q({&full, nullptr, nullptr}); });
      const double tAct = bench::bestMs(repeats, [&] { q({&full, &act, nullptr}); });
      const double tAll = bench::bestMs(repeats, [&] { q({&full, &act, &werr}); });
      // What layer-wise analysis asks: the three outputs' error sums against the float Conv's
      // output, nothing stored.
      runFp32(X);
      const Tensor ref = y[0];
      ErrorAccumulator sums[3];
      QConvOutputs so;
      so.reference = ref.data<float>();
      so.fullSums = &sums[0];
      so.actSums = &sums[1];
      so.weightSums = &sums[2];
      const double tSums = bench::bestMs(repeats, [&] { q(so); });
      char name[64];
      std::snprintf(name, sizeof name, "%s %dt", s.name, threads);
      std::printf("%-24s %6lld %7lld | %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f | %6.1fx %6.1fx\n", name, (long long)K,
                  (long long)N, fp32, fqFp32, tFull, tAct, tAll, tSums, fp32 / tFull, 3 * fp32 / tAll);
    }
  }
  return 0;
}
