// mobilenet_v2's 1x1 expansions with the depthwise conv after them (core/kernels/expand_depthwise_blocked.h): the two
// nChw16c kernels apart (the 1x1 over the whole image, then the depthwise conv, each split as DnnlConv splits it) against
// the pair by bands of rows, batch 1 (or BATCH), THREADS threads of our pool, bias + Clip(0, 6) on both. Milliseconds,
// best of REPEATS calls per round, the median of ROUNDS rounds, alternating; the largest difference (0: the same bits).
// usage: qs_bench_expand_depthwise [THREADS] [BATCH] [REPEATS] [ROUNDS] [BAND_ROWS]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/cpu_time.h"
#include "core/exec/parallel.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv1x1_blocked.h"
#include "core/kernels/conv_dnnl.h"
#include "core/kernels/depthwise_blocked.h"
#include "core/kernels/expand_depthwise_blocked.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qs;
  setenv("QS_EXPAND_DW_MIN_KB", "0", 1);  // runBatch by bands at every size
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int64_t N = argc > 2 ? std::atoll(argv[2]) : 1;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 20;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 5;
  const int64_t bandRows = argc > 5 ? std::atoll(argv[5]) : 0;
  struct Shape {
    int64_t C, M, H, s;
  };
  const Shape shapes[] = {{16, 96, 112, 2}, {24, 144, 56, 1}, {24, 144, 56, 2}, {32, 192, 28, 1}, {32, 192, 28, 2},
                          {64, 384, 14, 1}, {96, 576, 14, 1}, {96, 576, 14, 2}, {160, 960, 7, 1}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const std::vector<FusedActivation> clip = {{FusedActivation::Kind::Clip, 0.f, 6.f}};
  std::printf("%d threads, batch %lld, bands of %lld rows (0: bandRowsFor)\n", threads, (long long)N,
              (long long)bandRows);
  std::printf("| expansion, depthwise 3x3 | apart ms | bands ms | bands / apart | max diff |\n|---|---:|---:|---:|---:|\n");
  double sum[2] = {0, 0};
  for (const Shape& s : shapes) {
    Tensor W1(DType::Float, {s.M, s.C, 1, 1}), B1(DType::Float, {s.M}), Wd(DType::Float, {s.M, 1, 3, 3}),
        Bd(DType::Float, {s.M});
    for (Tensor* t : {&W1, &B1, &Wd, &Bd})
      for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = 0.3f * u(rng);
    auto expand = Conv1x1Blocked::create(W1, &B1, clip, false, false);
    auto dw = DepthwiseBlocked::create(Wd, &Bd, clip);
    auto pair = ExpandDepthwiseBlocked::create(W1, &B1, clip, Wd, &Bd, clip);
    WindowAttrs attrs;
    attrs.strides = {s.s, s.s};
    attrs.pads = {1, 1, 1, 1};
    WindowGeometry g, g1;
    if (!expand || !dw || !pair || !resolveWindow(attrs, {s.H, s.H}, {3, 3}, false, g).isOk()) {
      std::printf("| %lld -> %lld @%lld s%lld | not available |\n", (long long)s.C, (long long)s.M, (long long)s.H,
                  (long long)s.s);
      continue;
    }
    g1.nd = 2;
    g1.in[1] = g1.out[1] = g1.in[2] = g1.out[2] = s.H;
    const int64_t Cb = (s.C + 15) / 16, Mb = (s.M + 15) / 16, P = s.H * s.H;
    std::vector<float> x((size_t)(N * Cb * 16 * P)), mid((size_t)(N * Mb * 16 * P)),
        y0((size_t)(N * Mb * 16 * g.outSize())), y1(y0.size()),
        scratch((size_t)pair->scratchFloats(N, g, threads, bandRows));  // as the kernel's run: once, outside the timing
    for (float& v : x) v = u(rng);
    const int64_t parts = Conv1x1Blocked::partsPerImage(N, hardwareThreads());
    const auto apart = [&] {
      expand->runBatchWindow(x.data(), N, g1, mid.data(), nullptr,
                             DnnlConv::forkThreads(2.0 * expand->macs(P) * (double)N, false, parts, threads));
      dw->runBatch(mid.data(), N, g, y0.data(), DnnlConv::depthwiseByRows(s.M, g), threads);
    };
    std::vector<double> ms[2];
    for (int r = 0; r < rounds; ++r) {
      ms[0].push_back(bench::bestMs(repeats, apart));
      ms[1].push_back(bench::bestMs(
          repeats, [&] { pair->runBatch(x.data(), N, g, y1.data(), threads, scratch.data(), bandRows); }));
    }
    double diff = 0;
    for (size_t i = 0; i < y0.size(); ++i) diff = std::max(diff, (double)std::fabs(y0[i] - y1[i]));
    const double a = median(ms[0]), b = median(ms[1]);
    std::printf("| %lld -> %lld @%lld s%lld | %.4f | %.4f | %.2f | %.0e |\n", (long long)s.C, (long long)s.M,
                (long long)s.H, (long long)s.s, a, b, b / a, diff);
    sum[0] += a;
    sum[1] += b;
  }
  std::printf("sum ms: apart %.3f, bands %.3f (%.2f)\n", sum[0], sum[1], sum[1] / sum[0]);
  return 0;
}
