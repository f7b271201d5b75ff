// Our nChw16c 1x1 kernel (core/kernels/conv1x1_blocked.h) against oneDNN's jit_1x1 as DnnlConv runs it
// in a blocked region (createBlocked, nChw16c, its slices and tasks on our pool), on the 1x1 shapes of
// resnet50, densenet121 and mobilenet_v2 (224x224 input; resnet50's downsamples of stride 2 too), bias + Relu fused.
// Milliseconds, best of REPEATS calls per round, the median of ROUNDS rounds; the two alternate within
// each round. The largest |ours - oneDNN| is printed too (not 0: another summation order).
// usage: qs_bench_conv1x1_blocked [THREADS] [BATCH] [REPEATS] [ROUNDS] [CxMxHxW[sS][kK] ...] (other shapes instead;
// H, W the input's, S the stride, K x K the filter with pads K / 2: then oneDNN's direct or Winograd kernel as
// DnnlConv picks it, against our kernel over the gathered window)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "bench/cpu_time.h"
#include "core/exec/parallel.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv1x1_blocked.h"
#include "core/kernels/conv_dnnl.h"

namespace {

struct Conv1x1Shape {
  const char* model;
  int64_t C, M, H, stride = 1, k = 1;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qs;
  // DnnlConv's runBlocked then runs jit_1x1 for every shape; ours is called directly.
  setenv("QS_CONV1X1", "dnnl", 1);
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int64_t N = argc > 2 ? std::atoll(argv[2]) : 1;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 20;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 5;
  std::vector<Conv1x1Shape> shapes = {
      {"resnet50", 64, 64, 56},      {"resnet50", 256, 64, 56},     {"resnet50", 64, 256, 56},
      {"resnet50", 256, 128, 56},    {"resnet50", 512, 128, 28},    {"resnet50", 128, 512, 28},
      {"resnet50", 1024, 256, 14},   {"resnet50", 256, 1024, 14},   {"resnet50", 1024, 512, 14},
      {"resnet50", 2048, 512, 7},    {"resnet50", 512, 2048, 7},    {"densenet121", 128, 128, 56},
      {"densenet121", 256, 128, 56}, {"densenet121", 384, 128, 28}, {"densenet121", 512, 256, 28},
      {"densenet121", 768, 128, 14}, {"densenet121", 1024, 512, 14}, {"densenet121", 768, 128, 7},
      {"mobilenet_v2", 32, 16, 112}, {"mobilenet_v2", 16, 96, 112}, {"mobilenet_v2", 96, 24, 56},
      {"mobilenet_v2", 144, 24, 56}, {"mobilenet_v2", 24, 144, 56}, {"mobilenet_v2", 144, 32, 28},
      {"mobilenet_v2", 192, 32, 28}, {"mobilenet_v2", 32, 192, 28}, {"mobilenet_v2", 192, 64, 14},
      {"mobilenet_v2", 384, 64, 14}, {"mobilenet_v2", 64, 384, 14}, {"mobilenet_v2", 384, 96, 14},
      {"mobilenet_v2", 576, 96, 14}, {"mobilenet_v2", 96, 576, 14}, {"mobilenet_v2", 576, 160, 7},
      {"mobilenet_v2", 960, 160, 7}, {"mobilenet_v2", 160, 960, 7}, {"mobilenet_v2", 960, 320, 7},
      {"mobilenet_v2", 320, 1280, 7},
      {"resnet50 s2", 256, 512, 56, 2}, {"resnet50 s2", 512, 1024, 28, 2}, {"resnet50 s2", 1024, 2048, 14, 2},
      {"resnet50 3x3 s2", 128, 128, 56, 2, 3}, {"resnet50 3x3 s2", 256, 256, 28, 2, 3},
      {"resnet50 3x3 s2", 512, 512, 14, 2, 3}, {"resnet50 3x3", 256, 256, 14, 1, 3},
      {"resnet50 3x3", 512, 512, 7, 1, 3},
  };
  if (argc > 5) {
    shapes.clear();
    for (int i = 5; i < argc; ++i) {
      long long c, m, h, w, st = 1, k = 1;
      if (std::sscanf(argv[i], "%lldx%lldx%lldx%lld", &c, &m, &h, &w) != 4) continue;
      if (const char* a = std::strchr(argv[i], 's')) st = std::atoll(a + 1);
      if (const char* a = std::strchr(argv[i], 'k')) k = std::atoll(a + 1);
      shapes.push_back({"given", c, m, h, st, k});
    }
  }
  const std::vector<FusedActivation> acts = {{FusedActivation::Kind::Relu, 0.f, 0.f}};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::printf("threads %d, batch %lld; ms, median over %d rounds of the best of %d calls (GFLOP/s)\n", threads,
              (long long)N, rounds, repeats);
  std::printf("| model | 1x1 conv | oneDNN jit_1x1 | ours | ours / oneDNN | max diff |\n|---|---|---:|---:|---:|---:|\n");
  double sum[2] = {0, 0};
  for (const Conv1x1Shape& s : shapes) {
    const int64_t Ho = (s.H + 2 * (s.k / 2) - s.k) / s.stride + 1, P = Ho * Ho, Cb = (s.C + 15) / 16, Mb = (s.M + 15) / 16;
    Tensor W(DType::Float, {s.M, s.C, s.k, s.k}), B(DType::Float, {s.M});
    for (int64_t i = 0; i < W.numel(); ++i) W.data<float>()[i] = 0.3f * u(rng);
    for (int64_t i = 0; i < s.M; ++i) B.data<float>()[i] = u(rng);
    std::vector<float> x((size_t)(N * Cb * 16 * s.H * s.H)), y0((size_t)(N * Mb * 16 * P)), y1(y0.size());
    for (float& v : x) v = u(rng);
    std::unique_ptr<DnnlConv> dnnl = DnnlConv::createBlocked(W, &B, 1, acts, false, false, 16);
    std::unique_ptr<Conv1x1Blocked> ours = Conv1x1Blocked::create(W, &B, acts, false, false);
    WindowAttrs attrs;
    attrs.strides = {s.stride, s.stride};
    attrs.pads = {s.k / 2, s.k / 2, s.k / 2, s.k / 2};
    WindowGeometry g;
    if (!dnnl || !ours || !resolveWindow(attrs, {s.H, s.H}, {s.k, s.k}, false, g).isOk()) {
      std::printf("| %s | %lld->%lld @%lld | not available |\n", s.model, (long long)s.C, (long long)s.M,
                  (long long)s.H);
      continue;
    }
    const int t = DnnlConv::forkThreads(2.0 * ours->macs(P) * (double)N, false,
                                        Conv1x1Blocked::partsPerImage(N, hardwareThreads()), threads);
    std::vector<double> ms[2];
    for (int r = 0; r < rounds; ++r) {
      ms[0].push_back(bench::bestMs(repeats, [&] { (void)dnnl->runBlocked(x.data(), N, s.C, g, y0.data(), nullptr, threads); }));
      ms[1].push_back(bench::bestMs(
          repeats, [&] { ours->runBatchWindow(x.data(), N, g, y1.data(), nullptr, t); }));
    }
    double diff = 0;
    for (size_t i = 0; i < y0.size(); ++i) diff = std::max(diff, (double)std::fabs(y0[i] - y1[i]));
    const double gflop = 2e-6 * (double)(s.C * s.M * s.k * s.k * P * N), a = median(ms[0]), b = median(ms[1]);
    std::printf("| %s | %lld->%lld @%lld | %.3f (%.0f) | %.3f (%.0f) | %.2f | %.1e |\n", s.model, (long long)s.C,
                (long long)s.M, (long long)s.H, a, gflop / a, b, gflop / b, b / a, diff);
    sum[0] += a;
    sum[1] += b;
  }
  std::printf("sum ms: oneDNN %.3f, ours %.3f (%.2f)\n", sum[0], sum[1], sum[1] / sum[0]);
  return 0;
}
