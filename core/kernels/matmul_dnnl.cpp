// oneDNN's matmul backend: see matmul_dnnl.h.
#include "core/kernels/matmul_dnnl.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#ifdef QS_HAVE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/kernels/dnnl_common.h"
#endif

namespace qs {

#ifndef QS_HAVE_DNNL

struct DnnlMatMul::Impl {};
bool DnnlMatMul::preferred() { return false; }
std::unique_ptr<DnnlMatMul> DnnlMatMul::create(const float*, int64_t, bool, int64_t, int64_t, const float*, float,
                                               bool, int) {
  return nullptr;
}
DnnlMatMul::DnnlMatMul(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
DnnlMatMul::~DnnlMatMul() = default;
Status DnnlMatMul::run(const float*, int64_t, int64_t, float*, int64_t, int) const {
  return unsupported("built without oneDNN");
}

#else

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DT = memory::data_type;

// One block height: the primitive and its weights in the layout it chose.
struct Plan {
  int64_t rows = 0, lda = 0, ldc = 0;
  dnnl::matmul prim;
  memory weights;
  memory::desc src;  // rows x K, row-major with the caller's lda
  size_t scratchBytes = 0;
};

// One range of the weights' columns [n0, n0 + N): its copy of B in oneDNN's layout, its bias and
// a primitive per block height.
struct Part {
  std::vector<float> B;  // [K, N] row-major, until the first plan has reordered it
  memory weights;        // B in the layout of the first plan (the later ones reorder from it)
  std::vector<float> bias;
  int64_t n0 = 0, K = 0, N = 0;
  bool gelu = false;
  std::mutex mutex;
  std::vector<std::shared_ptr<const Plan>> plans;  // newest last, at most kMaxPlans
  static constexpr size_t kMaxPlans = 8;

  std::shared_ptr<const Plan> plan(int64_t rows, int64_t lda, int64_t ldc) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& p : plans)
      if (p->rows == rows && p->lda == lda && p->ldc == ldc) return p;
    auto p = std::make_shared<Plan>();
    p->rows = rows;
    p->lda = lda;
    p->ldc = ldc;
    omp_set_num_threads(1);  // a primitive made for one thread runs without an OpenMP team
    const memory::desc a({rows, K}, DT::f32, memory::dims{lda, 1});
    const memory::desc w({K, N}, DT::f32, Tag::any);
    const memory::desc y({rows, N}, DT::f32, memory::dims{ldc, 1});
    const memory::desc bmd = bias.empty() ? memory::desc() : memory::desc({1, N}, DT::f32, Tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (gelu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, w, bmd, y), attr, dnnlCpuEngine());
    p->prim = dnnl::matmul(pd);
    p->src = a;
    p->scratchBytes = pd.scratchpad_desc().get_size();
    // The weights in the chosen layout, held once: every block height takes the same layout in
    // practice; one that differs gets its own copy, reordered from the held one.
    if (!weights) {
      dnnl::stream stream(dnnlCpuEngine());
      memory from(memory::desc({K, N}, DT::f32, Tag::ab), dnnlCpuEngine(), B.data());
      weights = memory(pd.weights_desc(), dnnlCpuEngine());
      dnnl::reorder(from, weights).execute(stream, from, weights);
      stream.wait();
      std::vector<float>().swap(B);
    }
    if (pd.weights_desc() == weights.get_desc()) {
      p->weights = weights;
    } else {
      dnnl::stream stream(dnnlCpuEngine());
      p->weights = memory(pd.weights_desc(), dnnlCpuEngine());
      dnnl::reorder(weights, p->weights).execute(stream, weights, p->weights);
      stream.wait();
    }
    if (plans.size() >= kMaxPlans) plans.erase(plans.begin());
    plans.push_back(p);
    return p;
  }
};

}  // namespace

struct DnnlMatMul::Impl {
  int64_t K = 0, N = 0;
  std::vector<std::unique_ptr<Part>> parts;  // column ranges, left to right
};

bool DnnlMatMul::preferred() {
  static const bool use = [] {
    if (const char* env = std::getenv("QS_DNNL_MATMUL")) return std::string(env) == "1";
    try {
      const memory::dims a{128, 512}, w{512, 512}, y{128, 512};
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(memory::desc(a, DT::f32, Tag::ab),
                                                         memory::desc(w, DT::f32, Tag::any), memory::desc(),
                                                         memory::desc(y, DT::f32, Tag::ab)),
                                      dnnlCpuEngine());
      const std::string impl = pd.impl_info_str();
      return impl.find("avx512") != std::string::npos || impl.find("amx") != std::string::npos;
    } catch (const std::exception&) {
      return false;
    }
  }();
  return use;
}

DnnlMatMul::DnnlMatMul(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
DnnlMatMul::~DnnlMatMul() = default;

std::unique_ptr<DnnlMatMul> DnnlMatMul::create(const float* B, int64_t ldb, bool transB, int64_t K, int64_t N,
                                               const float* bias, float alpha, bool gelu, int columnParts) {
  if (!B || K <= 0 || N <= 0) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->K = K;
  impl->N = N;
  // Column ranges in whole 16-column panels (a brgemm tile's width), at least 64 columns each.
  const int64_t panels = (N + 15) / 16;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(columnParts, panels / 4));
  for (int64_t p = 0; p < parts; ++p) {
    auto part = std::make_unique<Part>();
    part->n0 = std::min(N, panels * p / parts * 16);
    const int64_t n1 = p + 1 == parts ? N : std::min(N, panels * (p + 1) / parts * 16);
    part->K = K;
    part->N = n1 - part->n0;
    part->gelu = gelu;
    part->B.resize((size_t)(K * part->N));
    // alpha * (A @ B) as A @ (alpha * B): alpha goes into the copy of the weights.
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < part->N; ++n) {
        const int64_t c = part->n0 + n;
        part->B[(size_t)(k * part->N + n)] = alpha * (transB ? B[c * ldb + k] : B[k * ldb + c]);
      }
    if (bias) part->bias.assign(bias + part->n0, bias + n1);
    impl->parts.push_back(std::move(part));
  }
  return std::unique_ptr<DnnlMatMul>(new DnnlMatMul(std::move(impl)));
}

Status DnnlMatMul::run(const float* A, int64_t lda, int64_t M, float* Y, int64_t ldc, int threads) const {
  if (M <= 0) return Status::ok();
  const Impl& im = *m_impl;
  const int64_t P = (int64_t)im.parts.size();
  const int64_t flops = 2 * M * im.K * im.N;
  const int t = flops < 4000000 ? 1 : std::max(1, threads);
  // Tasks: row blocks (at least 16 rows, a brgemm tile's height) x groups of column parts. Each
  // thread reads its rows of A and its columns of B. With more columns than rows (a Linear layer
  // at batch 1: 128 rows, 384-2048 columns) splitting the columns reads B once in all and A once
  // a thread, where splitting the rows reads B once a thread; with more rows, the rows are split.
  const int64_t groups = im.N > M ? std::min<int64_t>(P, t) : 1;
  const int64_t rowBlocks = std::max<int64_t>(1, std::min<int64_t>(t / groups, (M + 15) / 16));
  const int64_t rows = (M + rowBlocks - 1) / rowBlocks;
  const int64_t rest = M - rows * (rowBlocks - 1);
  std::vector<std::shared_ptr<const Plan>> full((size_t)P), last((size_t)P);
  try {
    for (int64_t p = 0; p < P; ++p) {
      full[(size_t)p] = im.parts[(size_t)p]->plan(rows, lda, ldc);
      last[(size_t)p] = rest == rows ? full[(size_t)p] : im.parts[(size_t)p]->plan(rest, lda, ldc);
    }
  } catch (const std::exception& e) {
    return unsupported(std::string("oneDNN refused the matmul: ") + e.what());
  }
  return dnnlParallelFor(t, rowBlocks * groups, "oneDNN matmul", [&](dnnl::stream& stream, int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t rb = task / groups, g = task % groups;
      const int64_t m0 = rb * rows;
      for (int64_t p = P * g / groups; p < P * (g + 1) / groups; ++p) {
        const Part& part = *im.parts[(size_t)p];
        const Plan& pl = rb == rowBlocks - 1 ? *last[(size_t)p] : *full[(size_t)p];
        memory src(pl.src, dnnlCpuEngine(), const_cast<float*>(A + m0 * lda));
        memory dst(memory::desc({pl.rows, part.N}, DT::f32, memory::dims{ldc, 1}), dnnlCpuEngine(),
                   Y + m0 * ldc + part.n0);
        memory pad(memory::desc({(memory::dim)std::max<size_t>(pl.scratchBytes, 1)}, DT::u8, Tag::x), dnnlCpuEngine(),
                   dnnlTaskScratch(std::max<size_t>(pl.scratchBytes, 1)));
        std::unordered_map<int, memory> args{
            {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, pl.weights}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, pad}};
        if (!part.bias.empty())
          args.emplace(DNNL_ARG_BIAS, memory(memory::desc({1, part.N}, DT::f32, Tag::ab), dnnlCpuEngine(),
                                             const_cast<float*>(part.bias.data())));
        pl.prim.execute(stream, args);
        stream.wait();
      }
    }
  });
}

#endif

}  // namespace qs
