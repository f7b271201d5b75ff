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
                                               bool) {
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

}  // namespace

struct DnnlMatMul::Impl {
  std::vector<float> B;  // [K, N] row-major, until the first plan has reordered it
  memory weights;        // B in the layout of the first plan (the later ones reorder from it)
  std::vector<float> bias;
  int64_t K = 0, N = 0;
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
                                               const float* bias, float alpha, bool gelu) {
  if (!B || K <= 0 || N <= 0) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->K = K;
  impl->N = N;
  impl->gelu = gelu;
  impl->B.resize((size_t)(K * N));
  // alpha * (A @ B) as A @ (alpha * B): alpha goes into the copy of the weights.
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) impl->B[(size_t)(k * N + n)] = alpha * (transB ? B[n * ldb + k] : B[k * ldb + n]);
  if (bias) impl->bias.assign(bias, bias + N);
  return std::unique_ptr<DnnlMatMul>(new DnnlMatMul(std::move(impl)));
}

Status DnnlMatMul::run(const float* A, int64_t lda, int64_t M, float* Y, int64_t ldc, int threads) const {
  if (M <= 0) return Status::ok();
  const Impl& im = *m_impl;
  // Row blocks: one per thread, at least 16 rows (a brgemm tile's height) each.
  const int64_t flops = 2 * M * im.K * im.N;
  const int t = flops < 4000000 ? 1 : std::max(1, threads);
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(t, (M + 15) / 16));
  const int64_t rows = (M + tasks - 1) / tasks;
  std::shared_ptr<const Plan> full, last;
  try {
    full = m_impl->plan(rows, lda, ldc);
    const int64_t rest = M - rows * (tasks - 1);
    last = rest == rows ? full : m_impl->plan(rest, lda, ldc);
  } catch (const std::exception& e) {
    return unsupported(std::string("oneDNN refused the matmul: ") + e.what());
  }
  return dnnlParallelFor(t, tasks, "oneDNN matmul", [&](dnnl::stream& stream, int64_t b, int64_t e) {
    memory bias;
    if (!im.bias.empty())
      bias = memory(memory::desc({1, im.N}, DT::f32, Tag::ab), dnnlCpuEngine(), const_cast<float*>(im.bias.data()));
    for (int64_t task = b; task < e; ++task) {
      const Plan& p = task == tasks - 1 ? *last : *full;
      const int64_t m0 = task * rows;
      memory src(p.src, dnnlCpuEngine(), const_cast<float*>(A + m0 * lda));
      memory dst(memory::desc({p.rows, im.N}, DT::f32, memory::dims{ldc, 1}), dnnlCpuEngine(), Y + m0 * ldc);
      memory pad(memory::desc({(memory::dim)std::max<size_t>(p.scratchBytes, 1)}, DT::u8, Tag::x), dnnlCpuEngine(),
                 dnnlTaskScratch(std::max<size_t>(p.scratchBytes, 1)));
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, p.weights}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, pad}};
      if (!im.bias.empty()) args.emplace(DNNL_ARG_BIAS, bias);
      p.prim.execute(stream, args);
      stream.wait();
    }
  });
}

#endif

}  // namespace qs
