// oneDNN backend of the Conv kernel (ai.onnx Conv 1..21 and ai.quantscope FusedConv, 2-D, FP32).
#include "core/kernels/conv_dnnl.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/exec/parallel.h"
#include "core/kernels/conv1x1_blocked.h"
#include "core/kernels/depthwise_blocked.h"
#include "core/kernels/weight_buffer.h"

#ifdef QS_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>

#include "core/kernels/dnnl_common.h"

// libgomp, the OpenMP runtime libdnnl.so.2 is built on (declared here: clang has no omp.h of its own).
extern "C" void omp_set_num_threads(int);
#endif

namespace qs {

bool DnnlConv::blockedShapeSupported(int64_t C, int64_t M, int64_t group, int block) {
  if (block != 8 && block != 16) return false;
  if (group < 1 || C % 8 != 0 || M % 8 != 0 || C % group != 0 || M % group != 0) return false;
  // Group 1 and depthwise take a channel tail padded to the block (mobilenet_v2's 24 channels in
  // nChw16c: oneDNN's padded dims, the pad lanes of its weights and bias zero; jit_1x1, jit and
  // jit_dw avx512_core kernels alike).
  if (group == 1) return true;
  if (group == C && M == C) return true;
  // Other groups: oneDNN's blocked direct kernel needs whole blocks per group (regnet's 8
  // channels per group: nChw8c only; in nChw16c libdnnl 2.6 offers only its reference kernel,
  // ref:any, ~10^4 times slower); anything else would fall to a reference kernel.
  return C % block == 0 && M % block == 0 && (C / group) % block == 0 && (M / group) % block == 0;
}

bool DnnlConv::plainInputSupported(int64_t C, int64_t M, int64_t group, int block) {
  return (block == 8 || block == 16) && group == 1 && C >= 1 && C < 8 && M % block == 0;
}

bool DnnlConv::preferred(int64_t C, int64_t M, int64_t group, const WindowGeometry& g) {
  if (g.nd != 2) return false;
  const int64_t outPixels = g.out[1] * g.out[2];
  // Small convolutions lose to oneDNN's per-call cost (reorders in and out, primitive dispatch):
  // on an idle machine cls (convs of 0.01-1.5 M multiply-adds per image) ran 0.98 ms ours, 3.6 ms
  // with oneDNN on every conv, 1.7 ms with this floor; resnet50 kept its gain (123 -> 83 ms).
  constexpr double kMinMacsPerImage = 2e6;
  const bool depthwise = group == C && M == C;
  // Grouped (not depthwise) convs run our im2col + GEMM per group, with a few output channels per
  // group (regnet: 8): oneDNN's direct kernel took 2-4x less below the floor too (regnet_y_400mf's
  // 440 channels in 55 groups at 7x7, 1.6 M multiply-adds: 0.47 -> 0.11 ms, one thread).
  if (group > 1 && !depthwise && g.kSize() > 1) return true;
  const double macs = (double)M * (double)(C / group) * (double)g.kSize() * (double)outPixels;
  if (macs < kMinMacsPerImage) return false;
  if (depthwise) return outPixels <= 56 * 56;
  if (group > 1) return true;
  // 1x1: oneDNN below 14x14 outputs (mobilenet_v2's at 7x7: 15-30% ahead) and for the large ones
  // at 14x14 (resnet50's 1024 <-> 256: ~6%); ours for the mobilenet-sized ones at 14x14 (96 <-> 576,
  // 11 M multiply-adds: ~10% ahead) and at 28x28 (level to 1.35x ahead), single-shape A/B runs of
  // both backends in one process (docs/performance.md, "Small CNNs").
  if (g.kSize() == 1) return outPixels < 14 * 14 || (outPixels <= 14 * 14 && macs >= 20e6);
  return true;
}

std::vector<std::pair<int64_t, int64_t>> DnnlConv::outputSlices(int64_t N, int64_t C, int64_t M, int64_t group,
                                                                 int block, int hardwareThreads) {
  const int64_t want = std::min<int64_t>((hardwareThreads + N - 1) / std::max<int64_t>(N, 1), 8);
  std::vector<std::pair<int64_t, int64_t>> r;
  if (block == 0) {
    // Plain: equal slices of whole groups and whole 8-channel blocks.
    int64_t s = want;
    for (; s > 1; --s)
      if ((group > 1 ? group % s == 0 : M % s == 0) && (M / s) % 8 == 0) break;
    s = std::max<int64_t>(s, 1);
    for (int64_t i = 0; i < s; ++i) r.emplace_back(i * M / s, (i + 1) * M / s);
    return r;
  }
  // Blocked: uneven slices where equal ones do not exist. Equal slices of whole blocks left every
  // conv of mobilenet_v2's 24- and 144-channel stages and nearly all of regnet_y_400mf's (48, 104,
  // 208, 440 channels) on one thread at batch 1 in nChw16c, the other thread idle; now 24 -> 16 and
  // a padded 8 (the same work in oneDNN's kernels), 144 -> 64 and 80, regnet's 112 in paired
  // groups -> 48 and 64 (docs/performance.md, "The batch-1 split of blocked convs").
  // A slice boundary follows a step of channels, one block for group 1 and depthwise
  // (depthwise slices read the blocks they write), for other groups the fewest whole groups whose
  // channels in and out are whole blocks; the steps are shared out as evenly as they go.
  int64_t step = block;
  if (group > 1 && !(group == C && M == C)) {
    const int64_t Mg = M / group, Cg = C / group;
    int64_t k = 1;
    while (k <= group && ((k * Mg) % block != 0 || (k * Cg) % block != 0 || group % k != 0)) ++k;
    if (k > group) return {{0, M}};
    step = k * Mg;
  }
  const int64_t steps = (M + step - 1) / step, S = std::max<int64_t>(std::min(want, steps), 1);
  for (int64_t i = 0; i < S; ++i)
    r.emplace_back(std::min(M, i * steps / S * step), std::min(M, (i + 1) * steps / S * step));
  return r;
}

std::vector<std::pair<int64_t, int64_t>> DnnlConv::rowBands(int64_t N, int64_t C, int64_t M, int64_t group,
                                                             const WindowGeometry& g, int block, int hardwareThreads) {
  // det's 96 -> 24 3x3s at 160x160, 80x80 and 40x40 ran as one slice (24 is not two slices of whole
  // 8-channel blocks), on one thread at batch 1: 96 -> 24 @160, 2 threads, 12.0 -> 5.1 ms in two bands
  // (docs/performance.md, "det at batch 1 (wt-det)"). Rows of at least 8 a band, 2 M multiply-adds an image.
  const int64_t OH = g.out[1];
  const double macs = (double)M * (double)(C / std::max<int64_t>(group, 1)) * (double)g.kSize() * (double)(OH * g.out[2]);
  if (g.nd != 2 || block != 0 || group != 1 || C < 8 || N >= hardwareThreads || macs < 2e6 ||
      outputSlices(N, C, M, group, 0, hardwareThreads).size() != 1)
    return {{0, OH}};
  const int64_t B = std::min<int64_t>(hardwareThreads / std::max<int64_t>(N, 1), OH / 8);
  if (B < 2) return {{0, OH}};
  std::vector<std::pair<int64_t, int64_t>> r;
  for (int64_t i = 0; i < B; ++i) r.emplace_back(i * OH / B, (i + 1) * OH / B);
  return r;
}

int DnnlConv::forkThreads(double flops, bool depthwise, int64_t slices, int threads) {
  if (depthwise && slices > 1) return threads;
  return flops < 4e6 ? 1 : threads;
}


#ifndef QS_HAVE_DNNL

struct DnnlConv::Impl {};
bool DnnlConv::available() { return false; }
std::unique_ptr<DnnlConv> DnnlConv::create(const Tensor&, const Tensor*, int64_t, std::vector<FusedActivation>) {
  return nullptr;
}
DnnlConv::DnnlConv(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
DnnlConv::~DnnlConv() = default;
std::unique_ptr<DnnlConv> DnnlConv::createBlocked(const Tensor&, const Tensor*, int64_t, std::vector<FusedActivation>,
                                                  bool, bool, int, bool) {
  return nullptr;
}
int DnnlConv::preferredBlock() { return 8; }
Status DnnlConv::run(const float*, int64_t, int64_t, const WindowGeometry&, float*, int) const {
  return unsupported("built without oneDNN");
}
Status DnnlConv::runBlocked(const float*, int64_t, int64_t, const WindowGeometry&, float*, const float*, int) const {
  return unsupported("built without oneDNN");
}
bool DnnlConv::blocked() const { return false; }
std::string DnnlConv::kernelName(int64_t, int64_t, const WindowGeometry&) const { return {}; }
bool DnnlConv::residualReadInPlace(int64_t, int64_t, const WindowGeometry&) const { return false; }
size_t DnnlConv::weightBytesOnHugePages(int64_t, int64_t, const WindowGeometry&) const { return 0; }

#else

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DT = memory::data_type;

// One slice of the output channels (and, in a grouped conv, of the groups with their input
// channels): its single-threaded primitive for a task of `images` images, the reorders between
// plain NCHW and the layout oneDNN chose, and the slice's weights in that layout.
struct Slice {
  int64_t m0 = 0, ms = 0;  // first output channel, output channels (a tail: the last slice's pad lanes not counted)
  int64_t c0 = 0;          // first input channel (grouped convs; 0 otherwise: every slice reads every channel)
  // A band of output rows (plain layout, rowBands): the offsets of its first input and output row in a
  // channel plane, and the values it writes per plane; a whole plane otherwise.
  int64_t inOffset = 0, outOffset = 0, outLen = 0;
  std::string kernel;      // oneDNN's name of the primitive's implementation (jit_wino_4x3:...: Winograd)
  bool residualArg = false;  // the residual is read by a binary-add post-op (else copied into dst for a sum post-op)
  dnnl::convolution_forward prim;
  memory::desc userSrc, userDst, src, dst;
  std::optional<dnnl::reorder> toSrc, fromDst;
  WeightBuffer weightStore;  // what `weights` points into
  memory weights, bias;
  size_t srcBytes = 0, dstBytes = 0, scratchBytes = 0;
};

// One input shape: its slices, each run by one task per group of images.
struct Plan {
  int64_t images = 1, H = 0, W = 0;
  std::vector<Slice> slices;
};

}  // namespace

struct DnnlConv::Impl {
  Tensor W;
  std::vector<float> bias;  // empty: none
  int64_t group = 1;
  bool blocked = false;   // src and dst nChw8c or nChw16c (createBlocked)
  bool plainSrc = false;  // blocked, but src plain nchw (createBlocked with plainInput: a stem)
  int block = 8;          // the blocked layout's channel block
  bool residual = false;  // a residual input added after the bias (residualPostOps), then Relu when residualRelu
  bool residualRelu = false;
  dnnl::post_ops postOps;  // without a residual; with one, residualPostOps gives the slice's
  std::vector<FusedActivation> after;  // activations oneDNN has no post-op for, applied per task
  // Our nChw16c kernel, where ownKernelFor takes the conv: packed on first use, so that a conv the rule keeps
  // on oneDNN holds no second copy of its weights (resnet50's downsamples, when they stayed on jit_1x1: packed
  // at load, peak RSS 422 -> 441 MB with a first rule).
  bool ownCandidate = false;
  std::vector<FusedActivation> ownActivations;
  std::once_flag ownOnce;
  std::unique_ptr<Conv1x1Blocked> own;
  // Our nChw16c depthwise kernel (ownDepthwiseFor): packed at first use.
  bool ownDwCandidate = false;
  std::once_flag ownDwOnce;
  std::unique_ptr<DepthwiseBlocked> ownDw;
  std::mutex mutex;
  std::vector<std::shared_ptr<const Plan>> plans;  // newest last, at most kMaxPlans
  static constexpr size_t kMaxPlans = 8;

  std::vector<std::pair<int64_t, int64_t>> slicesFor(int64_t N, int64_t C) const {
    return outputSlices(N, C, W.dim(0), group, blocked ? block : 0, hardwareThreads());
  }

  // Images per task: with more images than hardware threads, one primitive runs several images,
  // so that oneDNN reuses each weight it loads across them instead of streaming the whole filter
  // once per image (batch 8: 512 -> 512 3x3 at 7x7, one thread, weights cold: 6.3 -> 5.1 ms for
  // four images; docs/performance.md, "resnet50 and densenet121 (wt-resnet)"). Whole tasks per
  // hardware thread, at most 4 images, and a divisor of N; 1 when the output channels are sliced
  // (a slice of several images is not one dense block). Like the slices, a function of the shape
  // and the machine alone.
  static int64_t imagesFor(int64_t N, int64_t S, bool winograd) {
    // (Winograd: oneDNN's kernel schedules its work by the batch it is given, and with another
    // schedule the sums of an image can change: 512 -> 512 at 7x7, four images, every image
    // differed from itself alone. One image per primitive keeps each image's bits.)
    if (S > 1 || winograd) return 1;
    for (int64_t G = std::min<int64_t>(N / hardwareThreads(), 4); G > 1; --G)
      if (N % G == 0) return G;
    return 1;
  }

  // The post-ops of a conv with a residual input R (a ResNet block's Add, and Relu): R read in place by
  // a binary-add post-op of dst's shape (`binary`), or oneDNN's sum post-op, for which the task first
  // copies R into dst. The copy was a pass over every residual output: resnet50 reads and writes 22
  // MB of them per image. One thread, 1x1 with bias + R + Relu in nChw16c, 64 MB evicted before each
  // run, median of 60: 64 -> 256 @56 0.83 -> 0.69 ms, 128 -> 512 @28 0.65 -> 0.59, 256 -> 1024 @14
  // 0.62 -> 0.59, 512 -> 2048 @7 0.66 -> 0.65; four images of 64 -> 256 @56 3.66 -> 2.85
  // (docs/performance.md, "resnet50 outside its 1x1 and 3x3 bodies (wt-r50rest)"). The same bits but
  // where jit_1x1 splits the input channels into chunks (512 -> 2048 @7: the sum post-op added R to
  // the first chunk's partial sums, the binary one adds it to the whole; ~1e-7 relative). oneDNN's
  // Winograd kernel takes no binary post-op: it keeps the sum.
  dnnl::post_ops residualPostOps(const dnnl::memory::desc& dst, bool binary) const {
    dnnl::post_ops ops;
    if (binary) ops.append_binary(dnnl::algorithm::binary_add, dst);
    else ops.append_sum(1.f);
    if (residualRelu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    return ops;
  }

  // Whether a conv of C input and M output channels runs oneDNN's Winograd F(4x4, 3x3) kernel
  // (AVX-512 only): a group-1 3x3 of stride 1, no dilation and pads of at most 1, in nChw16c (the
  // kernel's layout), C and M whole blocks, M >= 32, outputs of at least 28x28, or 14x14 with M >=
  // 128. A function of the conv alone, not of the batch or of the slices, so that an image gets the
  // same kernel, and bits, at any batch (F(4x4, 3x3) gives a slice of the output channels the bits
  // of the whole; F(2x2, 3x3) does not). One thread, per task: 64 -> 32 @56 0.71 -> 0.33 ms, 128 ->
  // 64 @28 0.69 -> 0.27; in the network resnet50's layer1 and layer2 3x3s took 0.7x their time
  // (docs/performance.md, "Winograd for the 3x3 convolutions (wt-wino)"). At 14x14 the weights (4x
  // the direct kernel's, from memory) and each slice's transform of the whole input weigh more:
  // densenet121's 128 -> 32 took twice its time at batch 1, while resnet50's five 256 -> 256 of
  // layer3 were level at batch 1 (1 thread 7.6-8.0 -> 7.6-8.1 ms, 2 threads 4.0-5.0 -> 4.0-4.1) and
  // took 0.62x at batch 8 (1 thread, 54.7 / 57.9 -> 34.6 / 35.3 ms); at 7x7 (layer4) 1.6-4x slower
  // at batch 8 (docs/performance.md, "resnet50 outside its 1x1 and 3x3 bodies (wt-r50rest)").
  // QS_WINOGRAD=0: off.
  bool winogradFor(int64_t C, int64_t M, const WindowGeometry& g) const {
    static const bool enabled = [] {
      const char* env = std::getenv("QS_WINOGRAD");
      return !(env && std::string(env) == "0");
    }();
    if (!enabled || !blocked || plainSrc || block != 16 || group != 1) return false;
    if (W.dim(2) != 3 || W.dim(3) != 3 || C % 16 != 0 || M % 16 != 0 || M < 32) return false;
    for (int i = 1; i < 3; ++i)
      if (g.s[i] != 1 || g.d[i] != 1 || g.padB[i] > 1 || g.padE[i] > 1 || g.out[i] < (M >= 128 ? 14 : 28)) return false;
    return true;
  }

  std::shared_ptr<const Plan> plan(int64_t N, int64_t C, const WindowGeometry& g) {
    const auto bounds = slicesFor(N, C);
    const bool winograd = winogradFor(C, W.dim(0), g);
    const auto bands = rowBands(N, C, W.dim(0), group, g, blocked ? block : 0, hardwareThreads());
    const int64_t S = (int64_t)(bounds.size() * bands.size()), G = imagesFor(N, S, winograd);
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& p : plans)
      if ((int64_t)p->slices.size() == S && p->images == G && p->H == g.in[1] && p->W == g.in[2]) return p;
    auto p = std::make_shared<Plan>();
    p->images = G;
    p->H = g.in[1];
    p->W = g.in[2];
    omp_set_num_threads(1);  // a primitive made for one thread runs without an OpenMP team
    const int64_t M = W.dim(0), KH = W.dim(2), KW = W.dim(3), Cg = W.dim(1), Mg = M / group;
    const Tag user = !blocked ? Tag::nchw : block == 16 ? Tag::nChw16c : Tag::nChw8c;
    auto attrWith = [&](const dnnl::post_ops& ops) {
      dnnl::primitive_attr attr;
      attr.set_post_ops(ops);
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      return attr;
    };
    dnnl::stream stream(dnnlCpuEngine());
    std::vector<std::array<int64_t, 4>> parts;  // output channels [m0, m1) x output rows [r0, r1)
    for (const auto& [m0, m1] : bounds)
      for (const auto& [r0, r1] : bands) parts.push_back({m0, m1, r0, r1});
    for (const auto& [m0, m1, r0, r1] : parts) {
      Slice sl;
      sl.m0 = m0;
      sl.ms = m1 - m0;
      const int64_t Ms = sl.ms, Gs = group > 1 ? Ms / Mg : 1;  // groups in the slice (group > 1)
      const int64_t Cs = group > 1 ? Gs * Cg : C;
      sl.c0 = group > 1 ? m0 / Mg * Cg : 0;
      // The band's input rows [i0, i1): what its windows read, the conv's own padding where they pass
      // the image's top or bottom.
      // (A whole plane keeps every input row: a strided conv need not read the last ones, but the dense
      // layout's strides are the plane's.)
      const bool band = bands.size() > 1;
      const int64_t top = r0 * g.s[1] - g.padB[1], bottom = (r1 - 1) * g.s[1] - g.padB[1] + (KH - 1) * g.d[1] + 1;
      const int64_t i0 = band ? std::max<int64_t>(0, top) : 0, i1 = band ? std::min(g.in[1], bottom) : g.in[1];
      const memory::dim padTop = i0 - top, padBottom = bottom - i1;
      sl.inOffset = i0 * g.in[2];
      sl.outOffset = r0 * g.out[2];
      sl.outLen = (r1 - r0) * g.out[2];  // outSize for a whole plane
      const memory::dims src{G, Cs, i1 - i0, g.in[2]}, dst{G, Ms, r1 - r0, g.out[2]};
      const memory::dims wts = group > 1 ? memory::dims{Gs, Mg, Cg, KH, KW} : memory::dims{Ms, C, KH, KW};
      sl.userSrc = band ? memory::desc(src, DT::f32, memory::dims{C * g.in[1] * g.in[2], g.in[1] * g.in[2], g.in[2], 1})
                        : memory::desc(src, DT::f32, plainSrc ? Tag::nchw : user);
      sl.userDst = band ? memory::desc(dst, DT::f32, memory::dims{M * g.out[1] * g.out[2], g.out[1] * g.out[2], g.out[2], 1})
                        : memory::desc(dst, DT::f32, user);
      const memory::desc biasMd({Ms}, DT::f32, Tag::x);
      // An input of a few channels (a stem: RGB) is read as it lies (oneDNN's jit kernel for nchw in,
      // nChw16c out): left free, oneDNN picked nhwc (brgconv), and every slice's task reordered the
      // whole input first. resnet50's 7x7 stem, 2 threads, alternating: 1.06 -> 0.88 ms at batch 1,
      // 10.0 -> 6.6 ms at batch 8 (docs/performance.md, "resnet50 and densenet121 (wt-resnet)").
      const bool smallSrc = !blocked && Cs < 8;
      auto desc = [&](dnnl::algorithm algorithm) {
        return dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, algorithm,
            blocked || smallSrc ? sl.userSrc : memory::desc(src, DT::f32, Tag::any), memory::desc(wts, DT::f32, Tag::any),
            bias.empty() ? memory::desc() : biasMd, blocked ? sl.userDst : memory::desc(dst, DT::f32, Tag::any),
            {g.s[1], g.s[2]}, {g.d[1] - 1, g.d[2] - 1}, {band ? padTop : g.padB[1], g.padB[2]},
            {band ? padBottom : g.padE[1], g.padE[2]});
      };
      dnnl::convolution_forward::primitive_desc pd;
      if (winograd) {
        // F(4x4, 3x3) by name: libdnnl 2.6 offers F(2x2, 3x3) first for one image, which took
        // 1.2-1.8x the time of F(4x4, 3x3) on these shapes and takes one image only. Where oneDNN
        // has not got it (no AVX-512, a post-op it does not take), the direct kernel.
        try {
          // (next_impl() reads the op desc the iterator was made from: it must outlive the loop.)
          const dnnl::convolution_forward::desc wino = desc(dnnl::algorithm::convolution_winograd);
          pd = dnnl::convolution_forward::primitive_desc(
              wino, attrWith(residual ? residualPostOps(sl.userDst, false) : postOps), dnnlCpuEngine());
          while (std::string(pd.impl_info_str()).find("wino_4x3") == std::string::npos)
            if (!pd.next_impl()) {
              pd = dnnl::convolution_forward::primitive_desc();
              break;
            }
        } catch (const std::exception&) {
          pd = dnnl::convolution_forward::primitive_desc();
        }
        // (Else the direct kernel, still one image per task: a rare case.)
      }
      if (!pd) {
        sl.residualArg = residual;
        pd = dnnl::convolution_forward::primitive_desc(desc(dnnl::algorithm::convolution_direct),
                                                       attrWith(residual ? residualPostOps(sl.userDst, true) : postOps),
                                                       dnnlCpuEngine());
      }
      sl.prim = dnnl::convolution_forward(pd);
      sl.kernel = pd.impl_info_str();
      sl.src = pd.src_desc();
      sl.dst = pd.dst_desc();
      sl.srcBytes = (sl.src.get_size() + 63) / 64 * 64;
      sl.dstBytes = (sl.dst.get_size() + 63) / 64 * 64;
      sl.scratchBytes = pd.scratchpad_desc().get_size();
      if (sl.src != sl.userSrc)
        sl.toSrc = dnnl::reorder(memory(sl.userSrc, dnnlCpuEngine(), nullptr), memory(sl.src, dnnlCpuEngine(), nullptr));
      if (sl.dst != sl.userDst)
        sl.fromDst = dnnl::reorder(memory(sl.dst, dnnlCpuEngine(), nullptr), memory(sl.userDst, dnnlCpuEngine(), nullptr));
      const memory::desc userW(wts, DT::f32, group > 1 ? Tag::goihw : Tag::oihw);
      memory from(userW, dnnlCpuEngine(), const_cast<float*>(W.data<float>()) + m0 * (W.numel() / M));
      // On huge pages where large (weight_buffer.h): every pass streams them from memory at batch 1.
      sl.weightStore = WeightBuffer(pd.weights_desc().get_size());
      sl.weights = memory(pd.weights_desc(), dnnlCpuEngine(), sl.weightStore.data());
      dnnl::reorder(from, sl.weights).execute(stream, from, sl.weights);
      if (!bias.empty()) {
        sl.bias = memory(biasMd, dnnlCpuEngine());
        std::memcpy(sl.bias.get_data_handle(), bias.data() + m0, sizeof(float) * (size_t)Ms);
      }
      p->slices.push_back(std::move(sl));
    }
    stream.wait();
    if (plans.size() >= kMaxPlans) plans.erase(plans.begin());
    plans.push_back(p);
    return p;
  }
};

bool DnnlConv::available() { return true; }

DnnlConv::DnnlConv(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
DnnlConv::~DnnlConv() = default;

std::unique_ptr<DnnlConv> DnnlConv::create(const Tensor& W, const Tensor* B, int64_t group,
                                           std::vector<FusedActivation> activations) {
  if (W.dtype() != DType::Float || W.rank() != 4 || group < 1 || W.dim(0) % group != 0) return nullptr;
  if (B && (B->dtype() != DType::Float || B->numel() != W.dim(0))) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->W = W;
  impl->group = group;
  if (B) impl->bias.assign(B->data<float>(), B->data<float>() + B->numel());
  // The first activation becomes a oneDNN eltwise post-op when it has one (HardSigmoid and
  // HardSwish other than x * relu6(x + 3) / 6 have none); the rest apply after the output is back
  // in NCHW, ours, in order. One post-op only: with libdnnl 2.6, LeakyRelu, Mul, Add chained as
  // three post-ops gave wrong values (test_conv_dnnl.cpp has the case), each alone right values.
  using K = FusedActivation::Kind;
  size_t i = 0;
  for (; i < std::min<size_t>(activations.size(), 1); ++i) {
    const FusedActivation& f = activations[i];
    if (f.kind == K::Relu) impl->postOps.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    else if (f.kind == K::LeakyRelu) impl->postOps.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, f.a, 0.f);
    else if (f.kind == K::Clip) impl->postOps.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, f.a, f.b);
    else if (f.kind == K::Sigmoid) impl->postOps.append_eltwise(1.f, dnnl::algorithm::eltwise_logistic, 0.f, 0.f);
    else if (f.kind == K::Mul) impl->postOps.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, f.a, 0.f);
    else if (f.kind == K::Add) impl->postOps.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, 1.f, f.a);
    else if (f.kind == K::HardSwish && f.a == 1.f / 6.f && f.b == 0.5f)
      impl->postOps.append_eltwise(1.f, dnnl::algorithm::eltwise_hardswish, 0.f, 0.f);
    else break;
  }
  impl->after.assign(activations.begin() + (std::ptrdiff_t)i, activations.end());
  return std::unique_ptr<DnnlConv>(new DnnlConv(std::move(impl)));
}

std::unique_ptr<DnnlConv> DnnlConv::createBlocked(const Tensor& W, const Tensor* B, int64_t group,
                                                  std::vector<FusedActivation> activations, bool residual,
                                                  bool reluAfterResidual, int block, bool plainInput) {
  if (block != 8 && block != 16) return nullptr;
  if (W.dtype() != DType::Float || W.rank() != 4 || group < 1) return nullptr;
  if (plainInput ? !plainInputSupported(W.dim(1) * group, W.dim(0), group, block)
                 : !blockedShapeSupported(W.dim(1) * group, W.dim(0), group, block))
    return nullptr;
  if (residual && !activations.empty()) return nullptr;
  const bool ownCandidate = block == 16 && group == 1 && !plainInput &&
                            ((W.dim(2) == 1 && W.dim(3) == 1) || W.dim(1) % 16 == 0) &&
                            Conv1x1Blocked::available() && Conv1x1Blocked::supported(activations, residual);
  std::vector<FusedActivation> ownActivations = activations;
  std::unique_ptr<DnnlConv> conv = create(W, B, group, std::move(activations));
  if (!conv) return nullptr;
  conv->m_impl->ownCandidate = ownCandidate;
  conv->m_impl->ownDwCandidate = block == 16 && !plainInput && group == W.dim(0) && W.dim(1) == 1 && !residual &&
                                 DepthwiseBlocked::available() && DepthwiseBlocked::supported(ownActivations);
  conv->m_impl->ownActivations = std::move(ownActivations);
  conv->m_impl->blocked = true;
  conv->m_impl->plainSrc = plainInput;
  conv->m_impl->block = block;
  if (residual) {
    conv->m_impl->residual = true;
    conv->m_impl->residualRelu = reluAfterResidual;
    conv->m_impl->postOps = dnnl::post_ops();
  }
  return conv;
}

bool DnnlConv::blocked() const { return m_impl->blocked; }

std::string DnnlConv::kernelName(int64_t N, int64_t C, const WindowGeometry& g) const {
  if (g.nd != 2 || C != m_impl->W.dim(1) * m_impl->group) return {};
  if (ownKernelFor(C, g)) return kOwn1x1Name;
  if (ownDepthwiseFor(N, C, g)) return kOwnDepthwiseName;
  try {
    const auto p = m_impl->plan(N, C, g);
    return p->slices.empty() ? std::string() : p->slices.front().kernel;
  } catch (const std::exception&) {
    return {};
  }
}

bool DnnlConv::residualReadInPlace(int64_t N, int64_t C, const WindowGeometry& g) const {
  if (!m_impl->residual || g.nd != 2 || C != m_impl->W.dim(1) * m_impl->group) return false;
  try {
    const auto p = m_impl->plan(N, C, g);
    return std::all_of(p->slices.begin(), p->slices.end(), [](const Slice& sl) { return sl.residualArg; });
  } catch (const std::exception&) {
    return false;
  }
}

size_t DnnlConv::weightBytesOnHugePages(int64_t N, int64_t C, const WindowGeometry& g) const {
  if (g.nd != 2 || C != m_impl->W.dim(1) * m_impl->group) return 0;
  if (ownKernelFor(C, g)) return m_impl->own->weightBytesOnHugePages();
  if (ownDepthwiseFor(N, C, g)) return 0;
  try {
    const auto p = m_impl->plan(N, C, g);
    size_t bytes = 0;
    for (const Slice& sl : p->slices) bytes += sl.weightStore.advisedBytes();
    return bytes;
  } catch (const std::exception&) {
    return 0;
  }
}

int DnnlConv::preferredBlock() {
  static const int block = [] {
    if (const char* env = std::getenv("QS_BLOCK")) {
      if (std::string(env) == "8") return 8;
      if (std::string(env) == "16") return 16;
    }
    // Whether oneDNN runs a ResNet-body 3x3 convolution in nChw16c with an AVX-512 kernel (left free
    // to choose, it takes nhwc for brgconv; its nChw8c kernels are AVX2 ones).
    try {
      const memory::dims src{1, 64, 28, 28}, wts{64, 64, 3, 3}, dst{1, 64, 28, 28};
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                        memory::desc(src, DT::f32, Tag::nChw16c), memory::desc(wts, DT::f32, Tag::any),
                                        memory::desc(), memory::desc(dst, DT::f32, Tag::nChw16c), {1, 1}, {0, 0},
                                        {1, 1}, {1, 1});
      dnnl::convolution_forward::primitive_desc pd(d, dnnlCpuEngine());
      if (std::string(pd.impl_info_str()).find("avx512") != std::string::npos) return 16;
    } catch (const std::exception&) {
    }
    return 8;
  }();
  return block;
}

Status DnnlConv::run(const float* x, int64_t N, int64_t C, const WindowGeometry& g, float* y, int threads) const {
  if (m_impl->blocked) return invalidArgument("oneDNN backend: made for the blocked layout");
  return execute(x, N, C, g, y, nullptr, threads);
}

Status DnnlConv::runBlocked(const float* x, int64_t N, int64_t C, const WindowGeometry& g, float* y,
                            const float* residual, int threads) const {
  if (!m_impl->blocked) return invalidArgument("oneDNN backend: not made for the blocked layout");
  if ((residual != nullptr) != m_impl->residual)
    return invalidArgument(m_impl->residual ? "oneDNN backend: the residual input is missing"
                                            : "oneDNN backend: a residual input it was not made for");
  if (ownKernelFor(C, g)) return executeOwn1x1(x, N, g, y, residual, threads);
  if (ownDepthwiseFor(N, C, g)) return executeOwnDepthwise(x, N, g, y, threads);
  return execute(x, N, C, g, y, residual, threads);
}

Status DnnlConv::execute(const float* x, int64_t N, int64_t C, const WindowGeometry& g, float* y,
                         const float* residual, int threads) const {
  if (g.nd != 2) return unsupported("oneDNN backend: 2-D only");
  const int64_t M = m_impl->W.dim(0);
  if (C != m_impl->W.dim(1) * m_impl->group)
    return invalidArgument("oneDNN backend: " + std::to_string(C) + " input channels, weights for " +
                           std::to_string(m_impl->W.dim(1) * m_impl->group));
  std::shared_ptr<const Plan> plan;
  try {
    plan = m_impl->plan(N, C, g);
  } catch (const std::exception& e) {
    return unsupported(std::string("oneDNN refused the convolution: ") + e.what());
  }
  const Plan& p = *plan;
  const int64_t S = (int64_t)p.slices.size(), G = p.images;
  const int64_t inSize = g.inSize(), outSize = g.outSize();
  // Channels per image as laid out: in the blocked layout a channel tail is padded to a whole
  // block (in the last slice, which then writes the pad lanes too). A stem's src is plain nchw
  // (plainSrc): C channels per image, unpadded.
  const int64_t block = m_impl->blocked ? m_impl->block : 1, srcBlock = m_impl->plainSrc ? 1 : block;
  const int64_t Cp = (C + srcBlock - 1) / srcBlock * srcBlock, Mp = (M + block - 1) / block * block;
  const double flops = 2.0 * (double)(N * M * outSize) * (double)(m_impl->W.numel() / M);
  // No fork below ~4 MFLOP, as the GEMM, but for a sliced depthwise conv (forkThreads).
  const bool depthwise = m_impl->group == C && M == C;
  const int t = forkThreads(flops, depthwise, S, threads);
  size_t scratchBytes = 0;
  for (const Slice& sl : p.slices) scratchBytes = std::max(scratchBytes, sl.srcBytes + sl.dstBytes + sl.scratchBytes);
  return dnnlParallelFor(t, N / G * S, "oneDNN convolution", [&](dnnl::stream& stream, int64_t b, int64_t e) {
    char* scratch = dnnlTaskScratch(scratchBytes);
    for (int64_t task = b; task < e; ++task) {
      const int64_t n = task / S * G;  // the task's first image
      const Slice& sl = p.slices[(size_t)(task % S)];
      // The slice's channels as laid out (the last one's tail padded to the block).
      const int64_t Mt = std::min(Mp, (sl.ms + block - 1) / block * block);
      memory src(sl.src, dnnlCpuEngine(), sl.toSrc ? scratch : nullptr);
      memory dst(sl.dst, dnnlCpuEngine(), sl.fromDst ? scratch + sl.srcBytes : nullptr);
      memory pad(memory::desc({(memory::dim)std::max<size_t>(sl.scratchBytes, 1)}, DT::u8, Tag::x), dnnlCpuEngine(),
                 scratch + sl.srcBytes + sl.dstBytes);
      memory userSrc(sl.userSrc, dnnlCpuEngine(), const_cast<float*>(x) + (n * Cp + sl.c0) * inSize + sl.inOffset);
      float* out = y + (n * Mp + sl.m0) * outSize + sl.outOffset;
      memory userDst(sl.userDst, dnnlCpuEngine(), out);
      // G > 1 only with S == 1: the task's images are one dense block, as is the residual's part.
      const float* res = residual ? residual + (out - y) : nullptr;
      if (res && !sl.residualArg) std::memcpy(out, res, sizeof(float) * (size_t)(G * Mt * outSize));
      if (sl.toSrc) sl.toSrc->execute(stream, userSrc, src);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, sl.toSrc ? src : userSrc},
                                           {DNNL_ARG_WEIGHTS, sl.weights},
                                           {DNNL_ARG_DST, sl.fromDst ? dst : userDst},
                                           {DNNL_ARG_SCRATCHPAD, pad}};
      if (!m_impl->bias.empty()) args.emplace(DNNL_ARG_BIAS, sl.bias);
      if (res && sl.residualArg)
        args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                     memory(sl.userDst, dnnlCpuEngine(), const_cast<float*>(res)));
      sl.prim.execute(stream, args);
      if (sl.fromDst) sl.fromDst->execute(stream, dst, userDst);
      stream.wait();
      if (!m_impl->after.empty())
        for (int64_t m = 0; m < G * Mt; ++m) applyFusedActivations(out + m * outSize, sl.outLen, 0.f, m_impl->after);
    }
  });
}

// Our nChw16c 1x1 kernel (core/kernels/conv1x1_blocked.h) in place of jit_1x1, where the rule
// takes the conv; kept in these two functions. The rule is every 1x1 the kernel can run: against jit_1x1 in the
// blocked regions (qs_bench_conv1x1_blocked, resnet50's, densenet121's and mobilenet_v2's 1x1 shapes, bias + Relu,
// batch 1) it took 0.75-1.04x the time on one thread, 0.46-1.08x on two, in the sum 0.98x and 0.95x; resnet50's
// downsamples of stride 2 0.92-1.03x on one thread (wt-r50). A property of the conv, not the batch, so an image
// gets the same bits at any batch. QS_CONV1X1=dnnl: never.
bool DnnlConv::ownKernelFor(int64_t C, const WindowGeometry& g) const {
  static const bool dnnlOnly = [] {
    const char* v = std::getenv("QS_CONV1X1");
    return v != nullptr && std::string(v) == "dnnl";
  }();
  // Filters larger than 1x1 (not those of the Winograd rule) only on request, QS_CONV_KXK=s2 (strided ones:
  // resnet50's stage transitions) or all: at batch 1 on 2 threads they measured level with oneDNN's direct kernel
  // within the noise of a loaded machine, 0.98-1.11x on their own with warm weights (docs/performance.md,
  // "resnet50 at batch 1: strided convs in our kernel (wt-r50)").
  static const int kxk = [] {
    const char* v = std::getenv("QS_CONV_KXK");
    return v == nullptr ? 0 : std::string(v) == "s2" ? 1 : std::string(v) == "all" ? 2 : 0;
  }();
  if (dnnlOnly || !m_impl->ownCandidate || g.nd != 2 || C != m_impl->W.dim(1)) return false;
  const bool pointwise = m_impl->W.dim(2) == 1 && m_impl->W.dim(3) == 1;
  // 1x1: any stride (resnet50's downsamples, stride 2: the kernel gathers every other pixel of each chunk first),
  // no pads.
  for (int i = 1; i < 3; ++i) {
    if (g.d[i] != 1) return false;
    if (pointwise && (g.padB[i] != 0 || g.padE[i] != 0)) return false;
  }
  if (!pointwise) {
    if (kxk == 0 || m_impl->winogradFor(C, m_impl->W.dim(0), g)) return false;
    if (kxk == 1 && g.s[1] == 1 && g.s[2] == 1) return false;
  }
  std::call_once(m_impl->ownOnce, [&] {
    Impl& im = *m_impl;
    Tensor B(DType::Float, {im.W.dim(0)});
    if (!im.bias.empty()) std::memcpy(B.data<float>(), im.bias.data(), sizeof(float) * im.bias.size());
    im.own = Conv1x1Blocked::create(im.W, im.bias.empty() ? nullptr : &B, im.ownActivations, im.residual,
                                    im.residualRelu);
  });
  return m_impl->own != nullptr;
}

Status DnnlConv::executeOwn1x1(const float* x, int64_t N, const WindowGeometry& g, float* y, const float* residual,
                               int threads) const {
  const Conv1x1Blocked& k = *m_impl->own;
  const int64_t P = g.out[1] * g.out[2];
  const int64_t parts = Conv1x1Blocked::partsPerImage(N, hardwareThreads());
  k.runBatchWindow(x, N, g, y, residual, forkThreads(2.0 * k.macs(P) * (double)N, false, parts, threads));
  return Status::ok();
}

// Our nChw16c depthwise kernel (core/kernels/depthwise_blocked.h) in place of jit_dw at batch 1 (below the
// hardware threads), where DnnlConv would cut the conv into channel slices; kept in these two functions. Its
// bits are jit_dw's (test_depthwise_blocked.cpp), so the choice may depend on the batch: from hardware-threads
// images on, each image is one jit_dw task as before. QS_DW=dnnl: never.
bool DnnlConv::ownDepthwiseFor(int64_t N, int64_t C, const WindowGeometry& g) const {
  static const bool dnnlOnly = [] {
    const char* v = std::getenv("QS_DW");
    return v != nullptr && std::string(v) == "dnnl";
  }();
  if (dnnlOnly || !m_impl->ownDwCandidate || N >= hardwareThreads() || g.nd != 2 || C != m_impl->W.dim(0)) return false;
  std::call_once(m_impl->ownDwOnce, [&] {
    Impl& im = *m_impl;
    Tensor B(DType::Float, {im.W.dim(0)});
    if (!im.bias.empty()) std::memcpy(B.data<float>(), im.bias.data(), sizeof(float) * im.bias.size());
    im.ownDw = DepthwiseBlocked::create(im.W, im.bias.empty() ? nullptr : &B, im.ownActivations);
  });
  return m_impl->ownDw != nullptr && m_impl->ownDw->takes(g);
}

Status DnnlConv::executeOwnDepthwise(const float* x, int64_t N, const WindowGeometry& g, float* y, int threads) const {
  const DepthwiseBlocked& k = *m_impl->ownDw;
  k.runBatch(x, N, g, y, depthwiseByRows(m_impl->W.dim(0), g), threads);
  return Status::ok();
}

#endif

bool DnnlConv::depthwiseByRows(int64_t C, const WindowGeometry& g) {
  static const int mode = [] {
    const char* v = std::getenv("QS_DW_SPLIT");
    return v == nullptr ? 0 : std::string(v) == "rows" ? 1 : std::string(v) == "blocks" ? 2 : 0;
  }();
  if (mode) return mode == 1;
  return g.in[1] * g.in[2] >= C;
}

}  // namespace qs
