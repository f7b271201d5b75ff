// BlockedExpandDepthwise (ai.quantscope, opset 1): a 1x1 Conv then a depthwise Conv on nChw16c by bands of
// rows; see expand_depthwise_blocked.h.
#include "core/kernels/expand_depthwise_blocked.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/exec/parallel.h"
#include "core/kernels/conv1x1_blocked.h"
#include "core/kernels/conv_dnnl.h"
#include "core/kernels/depthwise_blocked.h"

namespace qs {

namespace {

constexpr int64_t kB = 16;
// A band's expansion at most this many bytes (with the input rows and the output band, well within 2 MB of L2).
constexpr int64_t kBandBytes = 384 * 1024;

}  // namespace

std::unique_ptr<ExpandDepthwiseBlocked> ExpandDepthwiseBlocked::create(const Tensor& W1, const Tensor* B1,
                                                                       const std::vector<FusedActivation>& a1,
                                                                       const Tensor& Wd, const Tensor* Bd,
                                                                       const std::vector<FusedActivation>& ad) {
  if (W1.rank() != 4 || Wd.rank() != 4 || W1.dim(2) != 1 || W1.dim(3) != 1 || Wd.dim(0) != W1.dim(0)) return nullptr;
  std::unique_ptr<ExpandDepthwiseBlocked> k(new ExpandDepthwiseBlocked());
  k->m_expand = Conv1x1Blocked::create(W1, B1, a1, false, false);
  k->m_dw = DepthwiseBlocked::create(Wd, Bd, ad);
  if (!k->m_expand || !k->m_dw) return nullptr;
  return k;
}

ExpandDepthwiseBlocked::~ExpandDepthwiseBlocked() = default;

int64_t ExpandDepthwiseBlocked::inChannels() const { return m_expand->inChannels(); }
int64_t ExpandDepthwiseBlocked::channels() const { return m_dw->channels(); }
bool ExpandDepthwiseBlocked::takes(const WindowGeometry& g) const { return m_dw->takes(g); }

int64_t ExpandDepthwiseBlocked::minBandedBytes() {
  static const int64_t bytes = [] {
    const char* v = std::getenv("QS_EXPAND_DW_MIN_KB");
    return v != nullptr ? std::atoll(v) * 1024 : (int64_t)1 << 20;
  }();
  return bytes;
}

int64_t ExpandDepthwiseBlocked::bandRowsFor(const WindowGeometry& g) const {
  const int64_t rowBytes = m_dw->blocks() * kB * g.in[2] * (int64_t)sizeof(float);
  const int64_t inRows = std::max<int64_t>(1, kBandBytes / std::max<int64_t>(rowBytes, 1));
  // (R - 1) * s + kH input rows for R output rows.
  return std::max<int64_t>(1, (inRows - g.k[1]) / g.s[1] + 1);
}

namespace {

// Rows a band's buffer holds: those of `bandRows` output rows.
int64_t bandCapacity(const WindowGeometry& g, int64_t bandRows) {
  return std::min(g.in[1], (std::max<int64_t>(1, bandRows) - 1) * g.s[1] + g.k[1]);
}

}  // namespace

int64_t ExpandDepthwiseBlocked::bandFloats(const WindowGeometry& g, int64_t bandRows) const {
  return m_dw->blocks() * bandCapacity(g, bandRows) * g.in[2] * kB;
}

void ExpandDepthwiseBlocked::runBands(const float* x, const WindowGeometry& g, float* y, int64_t oh0, int64_t oh1,
                                      int64_t bandRows, float* buf) const {
  const int64_t H = g.in[1], W = g.in[2], s = g.s[1], pt = g.padB[1], kH = g.k[1], Mb = m_dw->blocks();
  oh1 = std::min(oh1, g.out[1]);
  if (oh0 >= oh1) return;
  bandRows = std::max<int64_t>(1, bandRows);
  const int64_t cap = bandCapacity(g, bandRows);
  int64_t have0 = 0, have1 = 0;  // the image's rows in buf, from its row 0
  for (int64_t b0 = oh0; b0 < oh1; b0 += bandRows) {
    const int64_t b1 = std::min(oh1, b0 + bandRows);
    const int64_t n0 = std::clamp<int64_t>(b0 * s - pt, 0, H), n1 = std::clamp<int64_t>((b1 - 1) * s - pt + kH, 0, H);
    int64_t from = n0;
    if (n0 >= have0 && n0 < have1) {  // the rows this band shares with the last one: moved to the front
      if (n0 > have0)
        for (int64_t mb = 0; mb < Mb; ++mb)
          std::memmove(buf + mb * cap * W * kB, buf + (mb * cap + n0 - have0) * W * kB,
                       sizeof(float) * (size_t)((have1 - n0) * W * kB));
      from = have1;
    }
    have0 = n0;
    if (n1 > from) m_expand->runInto(x, H * W, buf, cap * W, n0 * W, from * W, n1 * W);
    have1 = std::max(n1, from);
    m_dw->runBand(buf, n0, cap, g, y, 0, Mb, b0, b1);
  }
}

bool ExpandDepthwiseBlocked::banded(int64_t N, const WindowGeometry& g) const {
  return N >= hardwareThreads() || m_dw->blocks() * kB * g.in[1] * g.in[2] * (int64_t)sizeof(float) >= minBandedBytes();
}

int64_t ExpandDepthwiseBlocked::scratchFloats(int64_t N, const WindowGeometry& g, int threads, int64_t bandRows) const {
  if (!banded(N, g)) return N * m_dw->blocks() * kB * g.in[1] * g.in[2];  // the whole expansion
  return std::max(1, threads) * bandFloats(g, bandRows > 0 ? bandRows : bandRowsFor(g));  // a band's per thread
}

void ExpandDepthwiseBlocked::runBatch(const float* x, int64_t N, const WindowGeometry& g, float* y, int threads,
                                      float* scratch, int64_t bandRows) const {
  const int64_t H = g.in[1], W = g.in[2], Mb = m_dw->blocks();
  const int64_t inPer = m_expand->inBlocks() * kB * H * W, outPer = Mb * kB * g.outSize();
  const int hw = hardwareThreads();
  const int64_t parts = Conv1x1Blocked::partsPerImage(N, hw);
  if (banded(N, g)) {
    const int64_t rows = bandRows > 0 ? bandRows : bandRowsFor(g), OH = g.out[1], per = bandFloats(g, rows);
    // Each chunk at work takes a free band buffer of the scratch: at most `threads` chunks run at once.
    std::vector<std::atomic<bool>> taken((size_t)std::max(1, threads));
    parallelFor(threads, N * parts, 1, [&](int64_t b, int64_t e) {
      size_t slot = 0;
      while (taken[slot].exchange(true, std::memory_order_acquire)) slot = (slot + 1) % taken.size();
      for (int64_t task = b; task < e; ++task) {
        const int64_t n = task / parts, part = task % parts;
        runBands(x + n * inPer, g, y + n * outPer, part * OH / parts, (part + 1) * OH / parts, rows,
                 scratch + (int64_t)slot * per);
      }
      taken[slot].store(false, std::memory_order_release);
    });
    return;
  }
  // Apart, as DnnlConv runs the two BlockedConvs at batch 1 (executeOwn1x1, executeOwnDepthwise), the expansion in
  // the scratch.
  float* mid = scratch;
  WindowGeometry g1;
  g1.nd = 2;
  g1.in[1] = g1.out[1] = H;
  g1.in[2] = g1.out[2] = W;
  m_expand->runBatchWindow(x, N, g1, mid, nullptr,
                           DnnlConv::forkThreads(2.0 * m_expand->macs(H * W) * (double)N, false, parts, threads));
  const double dwFlops = 2.0 * (double)(N * Mb * kB * g.outSize() * g.k[1] * g.k[2]);
  m_dw->runBatch(mid, N, g, y, DnnlConv::depthwiseByRows(channels(), g),
                 N >= hw ? DnnlConv::forkThreads(dwFlops, true, 1, threads) : threads);
}

namespace {

class BlockedExpandDepthwiseKernel : public Kernel {
 public:
  BlockedExpandDepthwiseKernel(WindowAttrs attrs, std::unique_ptr<ExpandDepthwiseBlocked> op, int64_t kH, int64_t kW)
      : m_attrs(std::move(attrs)), m_op(std::move(op)), m_kH(kH), m_kW(kW) {}

  Status run(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    const int64_t Cb = (m_op->inChannels() + kB - 1) / kB, Mb = (m_op->channels() + kB - 1) / kB;
    if (X.dtype() != DType::Float || X.rank() != 5 || X.dim(4) != kB || X.dim(1) != Cb)
      return invalidArgument("BlockedExpandDepthwise X has shape " + shapeToString(X.shape()) + ", expected [N, " +
                             std::to_string(Cb) + ", H, W, 16] (float, nChw16c)");
    WindowGeometry g;
    QS_RETURN_IF_ERROR(resolveWindow(m_attrs, {X.dim(2), X.dim(3)}, {m_kH, m_kW}, false, g));
    if (!m_op->takes(g))
      return unsupported("BlockedExpandDepthwise: the depthwise window of " + shapeToString(X.shape()) +
                         " needs dilation 1");
    const int64_t N = X.dim(0);
    Tensor Y(DType::Float, {N, Mb, g.out[1], g.out[2], kB});
    if (N > 0 && g.outSize() > 0) {
      // From the tensor pool for this run only (no buffer held per thread for the life of the process).
      Tensor scratch(DType::Float, {m_op->scratchFloats(N, g, ctx.threads)});
      m_op->runBatch(X.data<float>(), N, g, Y.data<float>(), ctx.threads, scratch.data<float>());
    }
    ctx.outputs[0] = std::move(Y);
    return Status::ok();
  }

 private:
  WindowAttrs m_attrs;
  std::unique_ptr<ExpandDepthwiseBlocked> m_op;
  int64_t m_kH, m_kW;
};

}  // namespace

Result<std::unique_ptr<Kernel>> createBlockedExpandDepthwise(const KernelInit& init) {
  AttrReader a(init);
  WindowAttrs attrs = readWindowAttrs(a, true);
  const std::vector<std::string> names = a.strings("activations"), expandNames = a.strings("expand_activations");
  const std::vector<float> params = a.floats("activation_params"), expandParams = a.floats("expand_activation_params");
  const int64_t block = a.i("block", 16);
  if (!a.ok()) return a.status();
  if (block != kB) return kernelError(StatusCode::Unsupported, "BlockedExpandDepthwise runs nChw16c only, block is " +
                                                                   std::to_string(block));
  std::vector<FusedActivation> acts, expandActs;
  if (Status st = parseFusedActivations(names, params, acts); !st) return st;
  if (Status st = parseFusedActivations(expandNames, expandParams, expandActs); !st) return st;
  const Tensor* W1 = init.constantInput(1);
  const Tensor* B1 = init.constantInput(2);
  const Tensor* Wd = init.constantInput(3);
  const Tensor* Bd = init.constantInput(4);
  const auto& in = init.node.inputs;
  if (!W1 || !Wd || W1->dtype() != DType::Float || Wd->dtype() != DType::Float || W1->rank() != 4 || Wd->rank() != 4)
    return kernelError(StatusCode::InvalidModel, "BlockedExpandDepthwise needs constant float W1 [M, C, 1, 1] and "
                                                 "Wd [M, 1, kH, kW]");
  if ((in.size() > 2 && in[2] != kNoValue && !B1) || (in.size() > 4 && in[4] != kNoValue && !Bd))
    return kernelError(StatusCode::InvalidModel, "BlockedExpandDepthwise needs constant biases");
  if (attrs.group != Wd->dim(0))
    return kernelError(StatusCode::InvalidModel, "BlockedExpandDepthwise: group " + std::to_string(attrs.group) +
                                                     " is not the depthwise conv's " + std::to_string(Wd->dim(0)) +
                                                     " channels");
  auto op = ExpandDepthwiseBlocked::create(*W1, B1, expandActs, *Wd, Bd, acts);
  if (!op)
    return kernelError(StatusCode::Unsupported, "BlockedExpandDepthwise: W1 " + shapeToString(W1->shape()) + ", Wd " +
                                                    shapeToString(Wd->shape()) +
                                                    " with these activations need an AVX-512 CPU and the 1x1 and "
                                                    "depthwise forms of the nChw16c kernels");
  return std::unique_ptr<Kernel>(
      std::make_unique<BlockedExpandDepthwiseKernel>(attrs, std::move(op), Wd->dim(2), Wd->dim(3)));
}

}  // namespace qs
