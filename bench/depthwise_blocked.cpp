// Our nChw16c depthwise kernel (core/kernels/depthwise_blocked.h), cut by rows and by channel blocks, against
// oneDNN's jit_dw as DnnlConv runs it in a blocked region (createBlocked, nChw16c, its channel slices and tasks on
// our pool), on mobilenet_v2's depthwise shapes (224x224 input), bias + Clip(0, 6) fused. Warm caches: this times
// the kernels, not the cross-core traffic between a conv and the next (the network runs show that).
// Milliseconds, best of REPEATS calls per round, the median of ROUNDS rounds; the three alternate within each
// round. The largest |ours - jit_dw| is printed too (0: the same summation order).
// usage: qs_bench_depthwise_blocked [THREADS] [BATCH] [REPEATS] [ROUNDS]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/cpu_time.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv_dnnl.h"
#include "core/kernels/depthwise_blocked.h"

namespace {

struct DwShape {
  int64_t C, H, s;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qs;
  // DnnlConv's runBlocked then runs jit_dw at every batch; ours is called directly.
  setenv("QS_DW", "dnnl", 1);
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int64_t N = argc > 2 ? std::atoll(argv[2]) : 1;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 20;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 5;
  const std::vector<DwShape> shapes = {{32, 112, 1}, {96, 112, 2}, {144, 56, 1}, {144, 56, 2}, {192, 28, 1},
                                       {192, 28, 2}, {384, 14, 1}, {576, 14, 1}, {576, 14, 2}, {960, 7, 1}};
  const std::vector<FusedActivation> acts = {{FusedActivation::Kind::Clip, 0.f, 6.f}};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::printf("threads %d, batch %lld; ms, median over %d rounds of the best of %d calls\n", threads, (long long)N,
              rounds, repeats);
  std::printf("| depthwise 3x3 | jit_dw | ours, rows | ours, blocks | rows / jit_dw | blocks / jit_dw | max diff |\n"
              "|---|---:|---:|---:|---:|---:|---:|\n");
  double sum[3] = {0, 0, 0};
  for (const DwShape& s : shapes) {
    const int64_t Cb = (s.C + 15) / 16;
    Tensor W(DType::Float, {s.C, 1, 3, 3}), B(DType::Float, {s.C});
    for (int64_t i = 0; i < W.numel(); ++i) W.data<float>()[i] = 0.3f * u(rng);
    for (int64_t i = 0; i < s.C; ++i) B.data<float>()[i] = u(rng);
    WindowAttrs attrs;
    attrs.strides = {s.s, s.s};
    attrs.pads = {1, 1, 1, 1};
    WindowGeometry g;
    std::unique_ptr<DnnlConv> dnnl = DnnlConv::createBlocked(W, &B, s.C, acts, false, false, 16);
    std::unique_ptr<DepthwiseBlocked> ours = DepthwiseBlocked::create(W, &B, acts);
    if (!dnnl || !ours || !resolveWindow(attrs, {s.H, s.H}, {3, 3}, false, g).isOk()) {
      std::printf("| %lld @%lld s%lld | not available |\n", (long long)s.C, (long long)s.H, (long long)s.s);
      continue;
    }
    std::vector<float> x((size_t)(N * Cb * 16 * g.inSize())), y0((size_t)(N * Cb * 16 * g.outSize())), y1(y0.size()),
        y2(y0.size());
    for (float& v : x) v = u(rng);
    std::vector<double> ms[3];
    for (int r = 0; r < rounds; ++r) {
      ms[0].push_back(bench::bestMs(repeats, [&] { (void)dnnl->runBlocked(x.data(), N, s.C, g, y0.data(), nullptr, threads); }));
      ms[1].push_back(bench::bestMs(repeats, [&] { ours->runBatch(x.data(), N, g, y1.data(), true, threads); }));
      ms[2].push_back(bench::bestMs(repeats, [&] { ours->runBatch(x.data(), N, g, y2.data(), false, threads); }));
    }
    double diff = 0;
    for (size_t i = 0; i < y0.size(); ++i)
      diff = std::max({diff, (double)std::fabs(y0[i] - y1[i]), (double)std::fabs(y0[i] - y2[i])});
    const double a = median(ms[0]), b = median(ms[1]), c = median(ms[2]);
    std::printf("| %lld @%lld s%lld | %.4f | %.4f | %.4f | %.2f | %.2f | %.1e |\n", (long long)s.C, (long long)s.H,
                (long long)s.s, a, b, c, b / a, c / a, diff);
    sum[0] += a;
    sum[1] += b;
    sum[2] += c;
  }
  std::printf("sum ms: jit_dw %.3f, ours by rows %.3f (%.2f), by blocks %.3f (%.2f)\n", sum[0], sum[1],
              sum[1] / sum[0], sum[2], sum[2] / sum[0]);
  return 0;
}
