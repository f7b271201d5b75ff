// GEMM backends on the shapes the PaddleOCR convolutions produce, one thread each (the executor
// threads by splitting C into blocks, so single-threaded speed is what matters), and 2 threads
// through each backend's own threading for reference. Figures go to docs/performance.md.
// usage: qs_bench_gemm [REPEATS]
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/kernels/gemm.h"
#include "bench/cpu_time.h"

#ifdef QS_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 7;
  // M x N x K: (out channels, output pixels, in channels * kernel size) of det/rec convolutions.
  const int64_t shapes[][3] = {{24, 25600, 864}, {16, 102400, 27}, {32, 102400, 16}, {48, 25600, 48},
                               {96, 6400, 96},   {192, 1600, 192}, {480, 480, 480},  {384, 400, 384},
                               {480, 240, 480},  {1024, 1024, 1024}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::printf("%-18s %10s %10s %10s %10s %10s %10s   (GFLOP/s, best of %d)\n", "M x N x K", "ours 1t", "eigen 1t",
              "openblas 1t", "ours 2t", "eigen 2t", "openblas 2t", repeats);
  for (const auto& s : shapes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    std::vector<float> A((size_t)(M * K)), B((size_t)(K * N)), C((size_t)(M * N));
    for (float& x : A) x = u(rng);
    for (float& x : B) x = u(rng);
    const double gflop = 2.0 * (double)M * (double)N * (double)K / 1e9;
    double r[6] = {0, 0, 0, 0, 0, 0};
    for (int t = 1; t <= 2; ++t) {
      const int o = t == 1 ? 0 : 3;
      r[o] = gflop / qs::bench::bestMs(repeats, [&] {
               qs::sgemm(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, C.data(), N, t);
             }) * 1e3;
      Eigen::setNbThreads(t);
      Eigen::Map<const RowMat> a(A.data(), M, K), b(B.data(), K, N);
      Eigen::Map<RowMat> c(C.data(), M, N);
      r[o + 1] = gflop / qs::bench::bestMs(repeats, [&] { c.noalias() = a * b; }) * 1e3;
#ifdef QS_HAVE_OPENBLAS
      openblas_set_num_threads(t);
      r[o + 2] = gflop / qs::bench::bestMs(repeats, [&] {
                   cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.f, A.data(), (int)K,
                               B.data(), (int)N, 0.f, C.data(), (int)N);
                 }) * 1e3;
#endif
    }
    char name[64];
    std::snprintf(name, sizeof name, "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
    std::printf("%-18s %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f\n", name, r[0], r[1], r[2], r[3], r[4], r[5]);
  }
  return 0;
}
