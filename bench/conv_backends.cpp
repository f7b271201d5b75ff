// Conv backends on torchvision CNN shapes at 224x224 (issue 13): the executor's Conv kernel against
// oneDNN's convolution primitive, side by side, batch 1 and 8, 1 and 2 threads.
//   ours   the Conv / FusedConv kernel from the registry, created the way the executor creates it
//          (constant W and B, so the weights are packed at load), with the shape's activation
//          fused, with the oneDNN backend off (KernelInit::libraryKernels false)
//   omp    oneDNN convolution_forward on its own OpenMP (libgomp) team, sized with
//          omp_set_num_threads before the primitive is made and run (forward_inference,
//          convolution_direct, src/weights/dst format_tag::any, the activation as an eltwise
//          post-op). Weights and bias reordered once, as a kernel would at load; the timed call
//          includes reordering the NCHW input into oneDNN's layout and the output back to NCHW.
//   pool   core/kernels/conv_dnnl.h, the backend the Conv kernel uses: the same primitive made
//          single-threaded per task (image x output-channel slice), tasks on our pool, reorders
//          included. The Conv kernel runs this where DnnlConv::preferred says so (column "rule").
// Time: median of all timed runs (ROUNDS rounds alternating the backends, each one warm-up run and
// then runs for ~TARGET ms, at least 5). GFLOP/s counts a multiply-add as 2. `diff` is the largest
// |ours - pool| over the largest |ours| (the two sum in different orders).
//
// libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT from the environment at start-up: set them outside.
//
// usage: qs_bench_conv [--batches 1,8] [--threads 1,2] [--only SUBSTR] [--rounds R] [--target MS] [--markdown]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/exec/kernel.h"
#include "core/exec/kernel_registry.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv_dnnl.h"

#ifdef QS_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>
#endif

namespace {

using namespace qs;

enum class Act { None, Relu, Relu6 };

struct ConvShape {
  const char* model;
  const char* name;
  int64_t C, H, W, M, k, stride, pad, group;
  Act act;
};

// torchvision models at 224x224. resnet50's expanding 1x1 convs feed the residual Add (no
// activation); mobilenet_v2's projections are linear; its other convs end in ReLU6 (Clip 0..6).
const ConvShape kShapes[] = {
    {"resnet50", "stem 3->64 7x7 s2 @224", 3, 224, 224, 64, 7, 2, 3, 1, Act::Relu},
    {"resnet50", "1x1 64->64 @56", 64, 56, 56, 64, 1, 1, 0, 1, Act::Relu},
    {"resnet50", "1x1 64->256 @56", 64, 56, 56, 256, 1, 1, 0, 1, Act::None},
    {"resnet50", "1x1 256->64 @56", 256, 56, 56, 64, 1, 1, 0, 1, Act::Relu},
    {"resnet50", "1x1 256->128 @56", 256, 56, 56, 128, 1, 1, 0, 1, Act::Relu},
    {"resnet50", "3x3 128->128 s2 @56", 128, 56, 56, 128, 3, 2, 1, 1, Act::Relu},
    {"resnet50", "3x3 128->128 @28", 128, 28, 28, 128, 3, 1, 1, 1, Act::Relu},
    {"resnet50", "1x1 512->128 @28", 512, 28, 28, 128, 1, 1, 0, 1, Act::Relu},
    {"resnet50", "3x3 256->256 @14", 256, 14, 14, 256, 3, 1, 1, 1, Act::Relu},
    {"resnet50", "1x1 1024->256 @14", 1024, 14, 14, 256, 1, 1, 0, 1, Act::Relu},
    {"resnet50", "1x1 256->1024 @14", 256, 14, 14, 1024, 1, 1, 0, 1, Act::None},
    {"resnet50", "3x3 512->512 @7", 512, 7, 7, 512, 3, 1, 1, 1, Act::Relu},
    {"resnet50", "1x1 2048->512 @7", 2048, 7, 7, 512, 1, 1, 0, 1, Act::Relu},
    {"resnet50", "1x1 512->2048 @7", 512, 7, 7, 2048, 1, 1, 0, 1, Act::None},
    {"mobilenet_v2", "dw 3x3 32ch @112", 32, 112, 112, 32, 3, 1, 1, 32, Act::Relu6},
    {"mobilenet_v2", "dw 3x3 96ch s2 @112", 96, 112, 112, 96, 3, 2, 1, 96, Act::Relu6},
    {"mobilenet_v2", "dw 3x3 144ch @56", 144, 56, 56, 144, 3, 1, 1, 144, Act::Relu6},
    {"mobilenet_v2", "dw 3x3 192ch @28", 192, 28, 28, 192, 3, 1, 1, 192, Act::Relu6},
    {"mobilenet_v2", "dw 3x3 384ch @14", 384, 14, 14, 384, 3, 1, 1, 384, Act::Relu6},
    {"mobilenet_v2", "dw 3x3 576ch @14", 576, 14, 14, 576, 3, 1, 1, 576, Act::Relu6},
    {"mobilenet_v2", "dw 3x3 960ch @7", 960, 7, 7, 960, 3, 1, 1, 960, Act::Relu6},
    {"mobilenet_v2", "1x1 960->160 @7", 960, 7, 7, 160, 1, 1, 0, 1, Act::None},
    {"mobilenet_v2", "1x1 32->16 @112", 32, 112, 112, 16, 1, 1, 0, 1, Act::None},
    {"mobilenet_v2", "1x1 16->96 @112", 16, 112, 112, 96, 1, 1, 0, 1, Act::Relu6},
    {"shufflenet_v2", "dw 3x3 116ch @14", 116, 14, 14, 116, 3, 1, 1, 116, Act::None},
    {"shufflenet_v2", "dw 3x3 232ch s2 @14", 232, 14, 14, 232, 3, 2, 1, 232, Act::None},
    {"regnet_y_400mf", "g3x3 48ch g6 @56", 48, 56, 56, 48, 3, 1, 1, 6, Act::Relu},
    {"regnet_y_400mf", "g3x3 104ch g13 @28", 104, 28, 28, 104, 3, 1, 1, 13, Act::Relu},
    {"regnet_y_400mf", "g3x3 208ch g26 @14", 208, 14, 14, 208, 3, 1, 1, 26, Act::Relu},
    {"regnet_y_400mf", "g3x3 440ch g55 @7", 440, 7, 7, 440, 3, 1, 1, 55, Act::Relu},
    {"det", "3x3 96->24 @160", 96, 160, 160, 24, 3, 1, 1, 1, Act::Relu},
    {"det", "3x3 96->24 @80", 96, 80, 80, 24, 3, 1, 1, 1, Act::None},
    {"det", "3x3 96->24 @40", 96, 40, 40, 24, 3, 1, 1, 1, Act::None},
};

int64_t outDim(int64_t in, const ConvShape& s) { return (in + 2 * s.pad - s.k) / s.stride + 1; }

double flops(const ConvShape& s, int64_t n) {
  return 2.0 * (double)n * (double)s.M * (double)(outDim(s.H, s) * outDim(s.W, s)) * (double)(s.C / s.group) *
         (double)(s.k * s.k);
}

double nowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One warm-up call, then calls until `targetMs` has passed (at least 5); appends each call's ms.
template <class Fn>
void timeRuns(Fn&& fn, double targetMs, std::vector<double>& out) {
  fn();
  const double start = nowMs();
  for (int i = 0; i < 5 || nowMs() - start < targetMs; ++i) {
    const double t0 = nowMs();
    fn();
    out.push_back(nowMs() - t0);
    if (i > 2000) break;
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The executor's kernel for this shape: FusedConv when the shape has an activation (what the graph
// rewrites make of Conv + Relu / Clip), plain Conv otherwise; W and B are graph constants.
class OurConv {
 public:
  OurConv(const ConvShape& s, const Tensor& W, const Tensor& B) : m_W(W), m_B(B) {
    Node node;
    node.name = "conv";
    node.opType = s.act == Act::None ? "Conv" : kFusedConvOp;
    node.domain = s.act == Act::None ? "" : kFusedDomain;
    auto ints = [](std::vector<int64_t> v) {
      Attribute a;
      a.type = Attribute::Type::Ints;
      a.ints = std::move(v);
      return a;
    };
    node.attributes["strides"] = ints({s.stride, s.stride});
    node.attributes["pads"] = ints({s.pad, s.pad, s.pad, s.pad});
    node.attributes["kernel_shape"] = ints({s.k, s.k});
    Attribute group;
    group.type = Attribute::Type::Int;
    group.i = s.group;
    node.attributes["group"] = group;
    if (s.act == Act::Relu) setFusedActivations(node, {{FusedActivation::Kind::Relu, 0.f, 0.f}});
    if (s.act == Act::Relu6) setFusedActivations(node, {{FusedActivation::Kind::Clip, 0.f, 6.f}});
    node.inputs = {m_graph.valueId("x"), m_graph.valueId("w"), m_graph.valueId("b")};
    node.outputs = {m_graph.valueId("y")};
    m_graph.value(node.inputs[1]).constant = W;
    m_graph.value(node.inputs[2]).constant = B;
    const KernelRegistry registry = KernelRegistry::builtin();
    const KernelEntry* entry = registry.find(node.opType, node.domain, s.act == Act::None ? 17 : 1);
    if (!entry) {
      std::fprintf(stderr, "no kernel for %s\n", node.opType.c_str());
      std::exit(1);
    }
    auto kernel = entry->create(KernelInit{node, s.act == Act::None ? 17 : 1, m_graph});
    if (!kernel) {
      std::fprintf(stderr, "%s\n", kernel.status().message().c_str());
      std::exit(1);
    }
    m_kernel = std::move(kernel.value());
  }

  const Tensor& run(const Tensor& X, int threads) {
    const Tensor* in[3] = {&X, &m_W, &m_B};
    KernelContext ctx;
    ctx.inputs = in;
    ctx.outputs = m_y;
    ctx.threads = threads;
    if (Status st = m_kernel->run(ctx); !st) {
      std::fprintf(stderr, "Conv: %s\n", st.message().c_str());
      std::exit(1);
    }
    return m_y[0];
  }

 private:
  Graph m_graph;
  Tensor m_W, m_B;
  std::unique_ptr<Kernel> m_kernel;
  Tensor m_y[1];
};

#ifdef QS_HAVE_DNNL
// oneDNN's convolution for one shape, batch and thread count, set up as a kernel would at load.
class OmpDnnlConv {
 public:
  OmpDnnlConv(const ConvShape& s, int64_t n, const Tensor& W, const Tensor& B, int threads)
      : m_eng(dnnl::engine::kind::cpu, 0), m_stream(m_eng) {
    using namespace dnnl;
    using tag = memory::format_tag;
    using dt = memory::data_type;
    omp_set_num_threads(threads);
    const memory::dim OH = outDim(s.H, s), OW = outDim(s.W, s), G = s.group;
    const memory::dims src{n, s.C, s.H, s.W}, dst{n, s.M, OH, OW}, bias{s.M};
    const memory::dims wts = G == 1 ? memory::dims{s.M, s.C, s.k, s.k} : memory::dims{G, s.M / G, s.C / G, s.k, s.k};
    m_userSrc = memory::desc(src, dt::f32, tag::nchw);
    m_userDst = memory::desc(dst, dt::f32, tag::nchw);
    const memory::desc userW(wts, dt::f32, G == 1 ? tag::oihw : tag::goihw);
    convolution_forward::desc d(prop_kind::forward_inference, algorithm::convolution_direct,
                                memory::desc(src, dt::f32, tag::any), memory::desc(wts, dt::f32, tag::any),
                                memory::desc(bias, dt::f32, tag::x), memory::desc(dst, dt::f32, tag::any),
                                {s.stride, s.stride}, {s.pad, s.pad}, {s.pad, s.pad});
    post_ops po;
    if (s.act == Act::Relu) po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
    if (s.act == Act::Relu6) po.append_eltwise(1.f, algorithm::eltwise_clip, 0.f, 6.f);
    primitive_attr attr;
    attr.set_post_ops(po);
    convolution_forward::primitive_desc pd(d, attr, m_eng);
    m_impl = pd.impl_info_str();
    m_prim = convolution_forward(pd);
    // Weights and bias once.
    memory wUser(userW, m_eng, const_cast<float*>(W.data<float>()));
    m_w = memory(pd.weights_desc(), m_eng);
    reorder(wUser, m_w).execute(m_stream, wUser, m_w);
    m_b = memory(pd.bias_desc(), m_eng);
    std::memcpy(m_b.get_data_handle(), B.data<float>(), sizeof(float) * (size_t)s.M);
    m_srcUser = memory(m_userSrc, m_eng, nullptr);
    m_dstUser = memory(m_userDst, m_eng, nullptr);
    if (pd.src_desc() != m_userSrc) {
      m_src = memory(pd.src_desc(), m_eng);
      m_srcReorder = reorder(m_srcUser, m_src);
      m_srcFmt = "reordered";
    }
    if (pd.dst_desc() != m_userDst) {
      m_dst = memory(pd.dst_desc(), m_eng);
      m_dstReorder = reorder(m_dst, m_dstUser);
    }
    m_stream.wait();
  }

  void run(const float* x, float* y, int threads) {
    omp_set_num_threads(threads);
    m_srcUser.set_data_handle(const_cast<float*>(x));
    m_dstUser.set_data_handle(y);
    if (m_srcReorder) m_srcReorder->execute(m_stream, m_srcUser, m_src);
    m_prim.execute(m_stream, {{DNNL_ARG_SRC, m_srcReorder ? m_src : m_srcUser},
                              {DNNL_ARG_WEIGHTS, m_w},
                              {DNNL_ARG_BIAS, m_b},
                              {DNNL_ARG_DST, m_dstReorder ? m_dst : m_dstUser}});
    if (m_dstReorder) m_dstReorder->execute(m_stream, m_dst, m_dstUser);
    m_stream.wait();
  }

  const std::string& impl() const { return m_impl; }
  bool reordersSrc() const { return m_srcReorder.has_value(); }

 private:
  dnnl::engine m_eng;
  dnnl::stream m_stream;
  dnnl::memory::desc m_userSrc, m_userDst;
  dnnl::convolution_forward m_prim;
  dnnl::memory m_w, m_b, m_src, m_dst, m_srcUser, m_dstUser;
  std::optional<dnnl::reorder> m_srcReorder, m_dstReorder;
  std::string m_impl, m_srcFmt = "nchw";
};
#endif

std::vector<int64_t> parseList(const char* s) {
  std::vector<int64_t> v;
  for (const char* p = s; *p;) {
    v.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
    else if (*p) break;
  }
  return v;
}

}  // namespace

// The pool backend's view of a shape: geometry and activations as the Conv kernel passes them.
WindowGeometry geometryOf(const ConvShape& s) {
  WindowAttrs attrs;
  attrs.strides = {s.stride, s.stride};
  attrs.pads = {s.pad, s.pad, s.pad, s.pad};
  WindowGeometry g;
  if (!resolveWindow(attrs, {s.H, s.W}, {s.k, s.k}, false, g)) std::exit(1);
  return g;
}

std::vector<FusedActivation> activationsOf(const ConvShape& s) {
  if (s.act == Act::Relu) return {FusedActivation{FusedActivation::Kind::Relu, 0.f, 0.f}};
  if (s.act == Act::Relu6) return {FusedActivation{FusedActivation::Kind::Clip, 0.f, 6.f}};
  return {};
}

int main(int argc, char** argv) {
  std::vector<int64_t> batches{1, 8}, threadCounts{2, 1};
  std::string only;
  int rounds = 3;
  double targetMs = 150;
  bool markdown = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--batches") batches = parseList(next());
    else if (a == "--threads") threadCounts = parseList(next());
    else if (a == "--only") only = next();
    else if (a == "--rounds") rounds = std::atoi(next());
    else if (a == "--target") targetMs = std::atof(next());
    else if (a == "--markdown") markdown = true;
    else {
      std::fprintf(stderr, "usage: qs_bench_conv [--batches 1,8] [--threads 1,2] [--only SUBSTR] [--rounds R] [--target MS] [--markdown]\n");
      return 2;
    }
  }
  if (!DnnlConv::available()) std::printf("(built without oneDNN: the omp and pool columns are empty)\n");
  if (markdown)
    std::printf("| model | conv | N | thr | ours ms | ours GFLOP/s | oneDNN omp ms | oneDNN pool ms | oneDNN pool GFLOP/s | ours/pool | rule |\n"
                "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  else
    std::printf("%-15s %-22s %2s %3s | %8s %6s | %8s %6s | %8s %6s | %5s %7s %5s  %s\n", "model", "conv", "N", "thr",
                "ours ms", "GF/s", "omp ms", "GF/s", "pool ms", "GF/s", "o/p", "diff", "rule", "oneDNN impl");
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  // Sums over the shapes, [batch index][threads]: ours, omp, pool, the rule's choice.
  double sums[2][3][4] = {};
  for (const ConvShape& s : kShapes) {
    if (!only.empty() && std::string(s.model).find(only) == std::string::npos &&
        std::string(s.name).find(only) == std::string::npos)
      continue;
    Tensor W(DType::Float, {s.M, s.C / s.group, s.k, s.k}), B(DType::Float, {s.M});
    const float ws = 1.f / std::sqrt((float)(s.C / s.group * s.k * s.k));
    for (int64_t i = 0; i < W.numel(); ++i) W.data<float>()[i] = ws * u(rng);
    for (int64_t i = 0; i < B.numel(); ++i) B.data<float>()[i] = 0.1f * u(rng);
    OurConv ours(s, W, B);
    const WindowGeometry g = geometryOf(s);
    std::unique_ptr<DnnlConv> pool = DnnlConv::create(W, &B, s.group, activationsOf(s));
    const bool rule = DnnlConv::available() && DnnlConv::preferred(s.C, s.M, s.group, g);
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      const int64_t n = batches[bi];
      Tensor X(DType::Float, {n, s.C, s.H, s.W});
      for (int64_t i = 0; i < X.numel(); ++i) X.data<float>()[i] = u(rng);
      std::vector<float> yp((size_t)(n * s.M * g.outSize()));
      for (int64_t threads : threadCounts) {
        std::vector<double> tOurs, tOmp, tPool;
        double diff = 0;
        std::string impl = "-";
#ifdef QS_HAVE_DNNL
        OmpDnnlConv omp(s, n, W, B, (int)threads);
        impl = omp.impl() + (omp.reordersSrc() ? "" : " (nchw src)");
        std::vector<float> yd(yp.size());
#endif
        for (int r = 0; r < rounds; ++r) {
          timeRuns([&] { ours.run(X, (int)threads); }, targetMs, tOurs);
#ifdef QS_HAVE_DNNL
          timeRuns([&] { omp.run(X.data<float>(), yd.data(), (int)threads); }, targetMs, tOmp);
#endif
          if (pool)
            timeRuns([&] {
              if (!pool->run(X.data<float>(), n, s.C, g, yp.data(), (int)threads)) std::exit(1);
            }, targetMs, tPool);
        }
        if (pool) {
          const Tensor& y = ours.run(X, (int)threads);
          double maxRef = 0, maxDiff = 0;
          for (int64_t i = 0; i < y.numel(); ++i) {
            maxRef = std::max(maxRef, (double)std::fabs(y.data<float>()[i]));
            maxDiff = std::max(maxDiff, (double)std::fabs(y.data<float>()[i] - yp[(size_t)i]));
          }
          diff = maxRef > 0 ? maxDiff / maxRef : maxDiff;
        }
        const double mo = median(tOurs), mm = median(tOmp), mp = median(tPool), f = flops(s, n);
        if (bi < 2 && threads >= 1 && threads <= 2) {
          double* row = sums[bi][threads];
          row[0] += mo;
          row[1] += mm;
          row[2] += mp;
          row[3] += rule ? mp : mo;
        }
        auto gf = [&](double ms) { return ms > 0 ? f / ms * 1e-6 : 0.0; };
        if (markdown)
          std::printf("| %s | %s | %lld | %lld | %.3f | %.1f | %.3f | %.3f | %.1f | %.2f | %s |\n", s.model, s.name,
                      (long long)n, (long long)threads, mo, gf(mo), mm, mp, gf(mp), mp > 0 ? mo / mp : 0,
                      rule ? "oneDNN" : "ours");
        else
          std::printf("%-15s %-22s %2lld %3lld | %8.3f %6.1f | %8.3f %6.1f | %8.3f %6.1f | %5.2f %7.1e %5s  %s\n",
                      s.model, s.name, (long long)n, (long long)threads, mo, gf(mo), mm, gf(mm), mp, gf(mp),
                      mp > 0 ? mo / mp : 0, diff, rule ? "dnnl" : "ours", impl.c_str());
        std::fflush(stdout);
      }
    }
  }
  for (size_t bi = 0; bi < std::min<size_t>(2, batches.size()); ++bi)
    for (int t = 1; t <= 2; ++t)
      if (sums[bi][t][0] > 0)
        std::printf("sum of medians, N=%lld, %d thr: ours %.2f ms, oneDNN omp %.2f ms, oneDNN pool %.2f ms, by the rule %.2f ms\n",
                    (long long)batches[bi], t, sums[bi][t][0], sums[bi][t][1], sums[bi][t][2], sums[bi][t][3]);
  return 0;
}
