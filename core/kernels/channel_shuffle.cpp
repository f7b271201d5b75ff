// ChannelShuffle and ConcatShape: see channel_shuffle.h.
#include "core/kernels/channel_shuffle.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/kernels/conv.h"

namespace qs {

namespace {

Status bad(std::string message) { return kernelError(StatusCode::InvalidArgument, std::move(message)); }

// The shape of the Concat of inputs 0..k-1 over `axis`.
Status concatShape(const KernelContext& ctx, size_t k, int64_t axis, Shape& out) {
  if (ctx.inputCount() < k) return bad("expects " + std::to_string(k) + " inputs to concatenate");
  for (size_t i = 0; i < k; ++i)
    if (!ctx.hasInput(i)) return bad("input " + std::to_string(i) + " to concatenate is missing");
  const Tensor& x0 = ctx.input(0);
  int64_t ax = axis;
  if (!normalizeAxis(ax, x0.rank()))
    return bad("axis " + std::to_string(axis) + " out of range for input " + shapeToString(x0.shape()));
  out = x0.shape();
  for (size_t i = 1; i < k; ++i) {
    const Tensor& x = ctx.input(i);
    bool ok = x.rank() == x0.rank() && x.dtype() == x0.dtype();
    for (int d = 0; ok && d < x.rank(); ++d)
      if (d != ax && x.dim(d) != x0.dim(d)) ok = false;
    if (!ok)
      return bad("cannot concatenate " + dtypeName(x0.dtype()) + " " + shapeToString(x0.shape()) + " and " +
                 dtypeName(x.dtype()) + " " + shapeToString(x.shape()) + " over axis " + std::to_string(axis));
    out[(size_t)ax] += x.dim((int)ax);
  }
  return Status::ok();
}

Status readInts(const Tensor& t, const char* what, std::vector<int64_t>& out) {
  if ((t.dtype() != DType::Int64 && t.dtype() != DType::Int32) || t.rank() > 1)
    return bad(std::string(what) + " must be a 1-D int64 or int32 tensor, got " + dtypeName(t.dtype()) + " " +
               shapeToString(t.shape()));
  out.clear();
  if (t.numel() > 0) out = t.toInt64Vector();
  return Status::ok();
}

// Reshape (allowzero 0) of a tensor of shape `in` to the target `req`: 0 copies the input's dim, -1 is inferred.
Status resolveReshape(const Shape& in, const std::vector<int64_t>& req, const char* what, Shape& out) {
  const int64_t numel = checkedNumel(in);
  out.assign(req.size(), 1);
  int inferAt = -1;
  int64_t known = 1;
  for (size_t i = 0; i < req.size(); ++i) {
    int64_t d = req[i];
    if (d == -1 && inferAt < 0) {
      inferAt = (int)i;
      continue;
    }
    if (d == 0 && i < in.size()) d = in[i];
    if (d <= 0 || known > ((int64_t)1 << 62) / d)
      return bad(std::string(what) + " " + shapeToString(req) + " does not fit input " + shapeToString(in));
    out[i] = d;
    known *= d;
  }
  if (inferAt >= 0) {
    if (numel % known != 0)
      return bad(std::string("cannot infer -1 in ") + what + " " + shapeToString(req) + " for input " +
                 shapeToString(in));
    out[(size_t)inferAt] = numel / known;
  } else if (known != numel) {
    return bad(std::string("cannot reshape ") + shapeToString(in) + " to " + what + " " + shapeToString(out));
  }
  return Status::ok();
}

// One output of the fused node: the rows [begin, end) of axis `axis` of S (all of S when whole).
struct Piece {
  int64_t begin = 0, end = 0;
  char* data = nullptr;
};

class ChannelShuffleKernel : public Kernel {
 public:
  ChannelShuffleKernel(int64_t inputs, int64_t slices, bool sameShape)
      : m_inputs((size_t)inputs), m_slices((size_t)slices), m_sameShape(sameShape) {}

  Status run(KernelContext& ctx) const override {
    const size_t k = m_inputs;
    Shape cat;
    QS_RETURN_IF_ERROR(concatShape(ctx, k, 1, cat));
    if (cat.size() < 2) return bad("the inputs must have a channel axis, got " + shapeToString(cat));
    if (ctx.inputCount() < k + 2 + 4 * m_slices || !ctx.hasInput(k) || !ctx.hasInput(k + 1))
      return bad("expects the two Reshape targets and 4 Slice inputs per slice after the inputs");
    std::vector<int64_t> req;
    Shape d;  // the 5-D reshape of the concatenation
    QS_RETURN_IF_ERROR(readInts(ctx.input(k), "the first Reshape's shape", req));
    QS_RETURN_IF_ERROR(resolveReshape(cat, req, "the first Reshape's shape", d));
    if (d.size() != 5) return bad("the first Reshape's shape " + shapeToString(d) + " is not 5-D");
    const Shape swapped = {d[0], d[2], d[1], d[3], d[4]};
    Shape s;  // S, the second Reshape's output
    QS_RETURN_IF_ERROR(readInts(ctx.input(k + 1), "the second Reshape's shape", req));
    QS_RETURN_IF_ERROR(resolveReshape(swapped, req, "the second Reshape's shape", s));
    if (m_sameShape && s != cat)
      return bad("the shuffled shape " + shapeToString(s) + " differs from the concatenation's " +
                 shapeToString(cat) + ", which its Shape readers were given");
    const size_t es = dtypeSize(ctx.input(0).dtype());
    const int64_t L = d[3] * d[4];  // elements moved together
    // Where S's elements go: whole (one piece, axis 0 from 0 to s[0]) or the slices of one axis.
    int axis = 0;
    std::vector<Piece> pieces;
    if (m_slices == 0) {
      ctx.outputs[0] = Tensor(ctx.input(0).dtype(), s);
      pieces.push_back({0, s.empty() ? 1 : s[0], static_cast<char*>(ctx.outputs[0].raw())});
    }
    for (size_t j = 0; j < m_slices; ++j) {
      const size_t at = k + 2 + 4 * j;
      std::vector<int64_t> starts, ends, axes = {0}, steps = {1};
      if (!ctx.hasInput(at) || !ctx.hasInput(at + 1)) return bad("slice " + std::to_string(j) + " lacks starts/ends");
      QS_RETURN_IF_ERROR(readInts(ctx.input(at), "starts", starts));
      QS_RETURN_IF_ERROR(readInts(ctx.input(at + 1), "ends", ends));
      if (ctx.hasInput(at + 2)) QS_RETURN_IF_ERROR(readInts(ctx.input(at + 2), "axes", axes));
      if (ctx.hasInput(at + 3)) QS_RETURN_IF_ERROR(readInts(ctx.input(at + 3), "steps", steps));
      int64_t ax = axes.size() == 1 ? axes[0] : 0;
      if (starts.size() != 1 || ends.size() != 1 || axes.size() != 1 || steps.size() != 1 || steps[0] != 1 ||
          !normalizeAxis(ax, (int64_t)s.size()) || (j > 0 && ax != axis))
        return bad("slice " + std::to_string(j) + " of the shuffled " + shapeToString(s) + " (starts " +
                   shapeToString(starts) + ", ends " + shapeToString(ends) + ", axes " + shapeToString(axes) +
                   ", steps " + shapeToString(steps) + ") is not one axis with step 1, the same for all");
      axis = (int)ax;
      const int64_t dim = s[(size_t)ax];
      auto clamp = [dim](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
      const int64_t b = clamp(starts[0]), e = std::max(b, clamp(ends[0]));
      Shape shape = s;
      shape[(size_t)ax] = e - b;
      ctx.outputs[j] = Tensor(ctx.input(0).dtype(), shape);
      pieces.push_back({b, e, static_cast<char*>(ctx.outputs[j].raw())});
    }
    int64_t inner = 1;  // elements per row of S along the pieces' axis
    for (size_t i = (size_t)axis + 1; i < s.size(); ++i) inner *= s[i];
    const int64_t rows = s.empty() ? 1 : s[(size_t)axis];
    const int64_t C = cat[1], plane = checkedNumel(cat) / std::max<int64_t>(1, cat[0] * C);
    std::vector<const char*> src(k);
    std::vector<int64_t> first(k + 1, 0);  // the concatenation's channel where input i starts
    for (size_t i = 0; i < k; ++i) {
      src[i] = static_cast<const char*>(ctx.input(i).raw());
      first[i + 1] = first[i] + ctx.input(i).dim(1);
    }
    const int64_t blocks = d[0] * d[2] * d[1];
    if (blocks == 0 || L == 0) return Status::ok();
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, L * (int64_t)es));
    // ShuffleNet's case: each block is one whole channel plane of an input and one whole row
    // (channel) of S or of a slice, so the copies need no splitting and the indices only count up
    // (the split per run below cost about as much as the copies at 7x7).
    if (L == plane && d[0] == cat[0] && d[1] * d[2] == C &&
        (m_slices == 0 || (axis == 1 && s[0] == cat[0] && inner == L))) {
      ctx.parallelFor(blocks, grain, [&](int64_t tb, int64_t te) {
        int64_t a = tb / C, r = tb % C, c = r / d[1], b = r % d[1];
        for (int64_t t = tb; t < te; ++t) {
          const int64_t ch = b * d[2] + c;
          size_t i = 0;
          while (ch >= first[i + 1]) ++i;
          const char* in = src[i] + (size_t)((a * (first[i + 1] - first[i]) + ch - first[i]) * L) * es;
          if (m_slices == 0) {
            std::memcpy(pieces[0].data + (size_t)(t * L) * es, in, (size_t)L * es);
          } else {
            for (const Piece& pc : pieces)
              if (r >= pc.begin && r < pc.end)
                std::memcpy(pc.data + (size_t)((a * (pc.end - pc.begin) + r - pc.begin) * L) * es, in, (size_t)L * es);
          }
          if (++r == C) r = 0;
          if (++b == d[1]) {
            b = 0;
            if (++c == d[2]) {
              c = 0;
              ++a;
            }
          }
        }
      });
      return Status::ok();
    }
    // Block t of S (S's flat offset t * L) is block (a, b, c) of the 5-D concatenation, dims 1 and 2
    // swapped; each run is split where it crosses a channel of the inputs or a row of S.
    ctx.parallelFor(blocks, grain, [&](int64_t tb, int64_t te) {
      for (int64_t t = tb; t < te; ++t) {
        const int64_t a = t / (d[2] * d[1]), c = (t / d[1]) % d[2], b = t % d[1];
        int64_t from = ((a * d[1] + b) * d[2] + c) * L, to = t * L, left = L;
        while (left > 0) {
          const int64_t n = from / (C * plane), ch = (from / plane) % C, p = from % plane;
          const size_t i = (size_t)(std::upper_bound(first.begin(), first.end(), ch) - first.begin()) - 1;
          const int64_t row = (to / inner) % rows, outer = to / (inner * rows), q = to % inner;
          const int64_t len = std::min({left, plane - p, inner - q});
          const int64_t Ci = first[i + 1] - first[i];
          const char* in = src[i] + (size_t)(((n * Ci + ch - first[i]) * plane + p)) * es;
          for (const Piece& pc : pieces)
            if (row >= pc.begin && row < pc.end)
              std::memcpy(pc.data + (size_t)(((outer * (pc.end - pc.begin) + row - pc.begin) * inner + q)) * es, in,
                          (size_t)len * es);
          from += len;
          to += len;
          left -= len;
        }
      }
    });
    return Status::ok();
  }

 private:
  size_t m_inputs, m_slices;
  bool m_sameShape;
};

Result<std::unique_ptr<Kernel>> createChannelShuffle(const KernelInit& init) {
  AttrReader a(init);
  const int64_t inputs = a.i("inputs", 0), slices = a.i("slices", 0), same = a.i("same_shape", 0);
  if (!a.ok()) return a.status();
  if (inputs < 1 || slices < 0 || (int64_t)init.node.inputs.size() != inputs + 2 + 4 * slices ||
      (int64_t)init.node.outputs.size() != std::max<int64_t>(1, slices))
    return kernelError(StatusCode::InvalidModel,
                       "inputs " + std::to_string(inputs) + " and slices " + std::to_string(slices) +
                           " do not match its " + std::to_string(init.node.inputs.size()) + " inputs and " +
                           std::to_string(init.node.outputs.size()) + " outputs");
  return std::unique_ptr<Kernel>(std::make_unique<ChannelShuffleKernel>(inputs, slices, same != 0));
}

Result<std::unique_ptr<Kernel>> createConcatShape(const KernelInit& init) {
  AttrReader a(init);
  const int64_t axis = a.i("axis", 1);
  if (!a.ok()) return a.status();
  const size_t k = init.node.inputs.size();
  if (k == 0) return kernelError(StatusCode::InvalidModel, "has no inputs");
  return std::unique_ptr<Kernel>(makeKernel([k, axis](KernelContext& ctx) -> Status {
    Shape s;
    QS_RETURN_IF_ERROR(concatShape(ctx, k, axis, s));
    ctx.outputs[0] = Tensor::fromVector<int64_t>(std::vector<int64_t>(s.begin(), s.end()), {(int64_t)s.size()});
    return Status::ok();
  }));
}

}  // namespace

std::vector<KernelEntry> channelShuffleKernels() {
  return {
      {kChannelShuffleOp, kFusedDomain, 1, 1, createChannelShuffle},
      {kConcatShapeOp, kFusedDomain, 1, 1, createConcatShape},
  };
}

}  // namespace qs
