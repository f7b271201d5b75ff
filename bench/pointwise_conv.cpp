// The direct 1x1 Conv (core/kernels/conv_pointwise.h) against what it replaces, on the 1x1
// shapes of mobilenet_v2, shufflenet_v2_x1_0 and regnet_y_400mf at batch 1 (224x224 input):
//   gemm     the Conv kernel's GEMM path: per block of output rows, the input columns packed
//            into 16-column panels (gemmBlock), then bias and activations over the block
//   direct   pointwiseConvDirect: the input read in place, bias and activations in registers
//   onednn   oneDNN's convolution (DnnlConv, reorders included), where built with it
// Microseconds, best of REPEATS calls per round, the best round of ROUNDS; the backends alternate
// within each round. Clip(0, 6) is fused (mobilenet's ReLU6). The largest |direct - gemm| is
// printed too (0: the same bits), and the path the Conv kernel's rules pick (with oneDNN built).
// usage: qs_bench_pointwise [THREADS] [REPEATS] [ROUNDS] [CxMxHxW ...] (other shapes instead of the list)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/cpu_time.h"
#include "core/exec/parallel.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv_dnnl.h"
#include "core/kernels/conv_pointwise.h"
#include "core/kernels/gemm.h"

namespace {

struct PointwiseShape {
  const char* model;
  int64_t C, M, H, W = 0;  // W 0: square
};

// The Conv kernel's GEMM path for a 1x1 conv (core/kernels/conv.cpp), group 1.
void gemmPath(const qs::PackedMatrix& w, const float* x, int64_t C, int64_t M, int64_t P, const float* bias,
              const std::vector<qs::FusedActivation>& acts, float* y, int threads) {
  int64_t mb, nb;
  qs::gemmBlocking(M, P, C, threads, mb, nb);
  const int64_t rowBlocks = (M + mb - 1) / mb, colBlocks = (P + nb - 1) / nb;
  qs::parallelFor(threads, rowBlocks * colBlocks, 1, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      const int64_t rb = t / colBlocks, cb = t % colBlocks;
      const int64_t m0 = rb * mb, m1 = std::min(M, m0 + mb), o0 = cb * nb, o1 = std::min(P, o0 + nb);
      float* yb = y + m0 * P + o0;
      qs::gemmBlock(w, m0, m1, x + o0, P, false, o1 - o0, yb, P, false);
      for (int64_t m = m0; m < m1; ++m) qs::applyFusedActivations(yb + (m - m0) * P, o1 - o0, bias[m], acts);
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qs;
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 20;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  std::vector<PointwiseShape> shapes = {
      {"mobilenet_v2", 32, 16, 112},  {"mobilenet_v2", 16, 96, 112},  {"mobilenet_v2", 96, 24, 56},
      {"mobilenet_v2", 24, 144, 56},  {"mobilenet_v2", 144, 24, 56},  {"mobilenet_v2", 144, 32, 28},
      {"mobilenet_v2", 32, 192, 28},  {"mobilenet_v2", 192, 32, 28},  {"mobilenet_v2", 192, 64, 14},
      {"mobilenet_v2", 64, 384, 14},  {"mobilenet_v2", 384, 64, 14},  {"mobilenet_v2", 96, 576, 14},
      {"mobilenet_v2", 576, 96, 14},  {"mobilenet_v2", 576, 160, 7},  {"mobilenet_v2", 160, 960, 7},
      {"mobilenet_v2", 960, 160, 7},  {"mobilenet_v2", 320, 1280, 7}, {"shufflenet_v2", 58, 58, 28},
      {"shufflenet_v2", 116, 116, 14}, {"shufflenet_v2", 232, 232, 7}, {"shufflenet_v2", 464, 1024, 7},
      {"regnet_y_400mf", 32, 48, 112}, {"regnet_y_400mf", 48, 48, 56},  {"regnet_y_400mf", 104, 104, 28},
      {"regnet_y_400mf", 208, 208, 14}, {"regnet_y_400mf", 440, 440, 7},
  };
  if (argc > 4) {
    shapes.clear();
    for (int i = 4; i < argc; ++i) {
      long long c, m, h, w;
      if (std::sscanf(argv[i], "%lldx%lldx%lldx%lld", &c, &m, &h, &w) == 4) shapes.push_back({"given", c, m, h, w});
    }
  }
  const std::vector<FusedActivation> acts = {{FusedActivation::Kind::Clip, 0.f, 6.f}};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::printf("threads %d; us, best of %d calls x %d rounds (GFLOP/s)\n", threads, repeats, rounds);
  std::printf("| model | 1x1 conv | gemm | direct | oneDNN | direct / gemm | max diff | rule |\n|---|---|---:|---:|---:|---:|---:|---|\n");
  double sum[3] = {0, 0, 0};
  for (const PointwiseShape& s : shapes) {
    const int64_t SW = s.W ? s.W : s.H, P = s.H * SW;
    Tensor W(DType::Float, {s.M, s.C, 1, 1}), B(DType::Float, {s.M});
    std::vector<float> x((size_t)(s.C * P)), y0((size_t)(s.M * P)), y1(y0.size()), y2(y0.size());
    for (int64_t i = 0; i < W.numel(); ++i) W.data<float>()[i] = 0.3f * u(rng);
    for (int64_t i = 0; i < s.M; ++i) B.data<float>()[i] = u(rng);
    for (float& v : x) v = u(rng);
    const PackedMatrix packed(W.data<float>(), s.C, s.M, s.C);
    std::unique_ptr<DnnlConv> dnnl = DnnlConv::create(W, &B, 1, acts);
    WindowAttrs attrs;
    WindowGeometry g;
    const bool geometry = resolveWindow(attrs, {s.H, SW}, {1, 1}, false, g).isOk();
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < rounds; ++r) {
      best[0] = std::min(best[0], bench::bestMs(repeats, [&] {
                           gemmPath(packed, x.data(), s.C, s.M, P, B.data<float>(), acts, y0.data(), threads);
                         }));
      best[1] = std::min(best[1], bench::bestMs(repeats, [&] {
                           pointwiseConvDirect(packed, x.data(), 1, P, B.data<float>(), acts, y1.data(), threads);
                         }));
      if (dnnl && geometry)
        best[2] = std::min(best[2], bench::bestMs(repeats, [&] { (void)dnnl->run(x.data(), 1, s.C, g, y2.data(), threads); }));
    }
    double diff = 0;
    for (size_t i = 0; i < y0.size(); ++i) diff = std::max(diff, (double)std::fabs(y0[i] - y1[i]));
    const double gflop = 2e-6 * (double)(s.C * s.M * P);
    auto cell = [&](double ms) {
      static char buf[64];
      if (ms >= 1e29) return "-";
      std::snprintf(buf, sizeof buf, "%.1f (%.0f)", 1e3 * ms, gflop / ms);
      return (const char*)buf;
    };
    std::printf("| %s | %lld->%lld @%lldx%lld | %s", s.model, (long long)s.C, (long long)s.M, (long long)s.H,
                (long long)SW, cell(best[0]));
    std::printf(" | %s", cell(best[1]));
    const bool onednnRule = DnnlConv::available() && geometry && DnnlConv::preferred(s.C, s.M, 1, g);
    const char* rule = !pointwiseDirectPreferred(s.C, s.M, P)                       ? (onednnRule ? "oneDNN" : "gemm")
                       : onednnRule && !pointwiseDirectBeatsOneDnn(s.C, P) ? "oneDNN"
                                                                            : "direct";
    std::printf(" | %s | %.2f | %.1e | %s |\n", cell(best[2]), best[1] / best[0], diff, rule);
    for (int i = 0; i < 3; ++i)
      if (best[i] < 1e29) sum[i] += best[i];
  }
  std::printf("sum ms: gemm %.3f, direct %.3f, oneDNN %.3f\n", sum[0], sum[1], sum[2]);
  return 0;
}
