// NonMaxSuppression, RoiAlign, GridSample. Each follows ONNX Runtime's CPU kernel where the ONNX
// spec leaves room (tie order, sample placement, float expression order), so that detection
// post-processing selects the same boxes as the runtime the exported model will meet.
#include "core/kernels/vision.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/kernels/dtype_dispatch.h"

namespace qs {

namespace {

using tensorops::dispatchReal;

// Outputs whose size the inputs do not bound (RoiAlign's bins times ROIs, GridSample's grid
// times channels) are refused beyond 2^32 elements rather than attempted.
constexpr int64_t kMaxOutputElements = int64_t(1) << 32;

// ---------------------------------------------------------------- NonMaxSuppression
// A candidate box as ORT keeps it: corners normalised to (y_min, x_min, y_max, x_max) once, and
// its area computed from the input form (for centre boxes, width * height as given).
struct NmsBox {
  float score;
  int64_t index;
  float y0, x0, y1, x1;
  float area;
};

bool nmsSuppress(const NmsBox& a, const NmsBox& b, float iouThreshold) {
  const float ix0 = std::max(a.x0, b.x0), ix1 = std::min(a.x1, b.x1);
  if (ix1 <= ix0) return false;
  const float iy0 = std::max(a.y0, b.y0), iy1 = std::min(a.y1, b.y1);
  if (iy1 <= iy0) return false;
  const float inter = (ix1 - ix0) * (iy1 - iy0);
  if (inter <= 0.f) return false;
  const float uni = a.area + b.area - inter;
  return inter / uni > iouThreshold;
}

// The boxes kept so far for one class, as columns, so that a candidate is tested against eight of
// them per step. Each lane makes the same float operations and comparisons as nmsSuppress (the
// same max/min operand order, NaN included), so the kept set is the same bit for bit.
class KeptBoxes {
 public:
  void clear() {
    for (auto* v : {&m_y0, &m_x0, &m_y1, &m_x1, &m_area}) v->clear();
    m_boxes.clear();
  }
  size_t size() const { return m_boxes.size(); }
  void push(const NmsBox& b) {
    m_y0.push_back(b.y0);
    m_x0.push_back(b.x0);
    m_y1.push_back(b.y1);
    m_x1.push_back(b.x1);
    m_area.push_back(b.area);
    m_boxes.push_back(b);
  }
  // Whether any kept box suppresses `a` (nmsSuppress(a, kept, iouThreshold) for some kept box).
  bool suppresses(const NmsBox& a, float iouThreshold) const {
    const size_t n = m_boxes.size();
    size_t i = 0;
    const __m256 ax0 = _mm256_set1_ps(a.x0), ax1 = _mm256_set1_ps(a.x1), ay0 = _mm256_set1_ps(a.y0),
                 ay1 = _mm256_set1_ps(a.y1), aArea = _mm256_set1_ps(a.area), thr = _mm256_set1_ps(iouThreshold);
    for (; i + 8 <= n; i += 8) {
      // std::max(a, b) is (a < b) ? b : a, which is _mm256_max_ps(b, a); std::min(a, b) is
      // (b < a) ? b : a, which is _mm256_min_ps(b, a).
      const __m256 ix0 = _mm256_max_ps(_mm256_loadu_ps(&m_x0[i]), ax0);
      const __m256 ix1 = _mm256_min_ps(_mm256_loadu_ps(&m_x1[i]), ax1);
      const __m256 iy0 = _mm256_max_ps(_mm256_loadu_ps(&m_y0[i]), ay0);
      const __m256 iy1 = _mm256_min_ps(_mm256_loadu_ps(&m_y1[i]), ay1);
      const __m256 inter = _mm256_mul_ps(_mm256_sub_ps(ix1, ix0), _mm256_sub_ps(iy1, iy0));
      const __m256 uni = _mm256_sub_ps(_mm256_add_ps(aArea, _mm256_loadu_ps(&m_area[i])), inter);
      // nmsSuppress goes on past "ix1 <= ix0" etc. when the comparison is false (NaN included).
      __m256 hit = _mm256_and_ps(_mm256_cmp_ps(ix1, ix0, _CMP_NLE_UQ), _mm256_cmp_ps(iy1, iy0, _CMP_NLE_UQ));
      hit = _mm256_and_ps(hit, _mm256_cmp_ps(inter, _mm256_setzero_ps(), _CMP_NLE_UQ));
      hit = _mm256_and_ps(hit, _mm256_cmp_ps(_mm256_div_ps(inter, uni), thr, _CMP_GT_OQ));
      if (_mm256_movemask_ps(hit) != 0) return true;
    }
    for (; i < n; ++i)
      if (nmsSuppress(a, m_boxes[i], iouThreshold)) return true;
    return false;
  }

 private:
  std::vector<float> m_y0, m_x0, m_y1, m_x1, m_area;
  std::vector<NmsBox> m_boxes;
};

// Reads an optional one-element input of dtype `dt`; false (and `st` set) when malformed.
template <class T>
bool optionalScalar(const KernelContext& ctx, size_t i, const char* what, DType dt, bool& present, T& value,
                    Status& st) {
  present = ctx.hasInput(i) && ctx.input(i).numel() > 0;
  if (!ctx.hasInput(i)) return true;
  const Tensor& t = ctx.input(i);
  if (t.dtype() != dt || t.numel() > 1) {
    st = kernelError(StatusCode::InvalidArgument, std::string(what) + " must be a one-element " + dtypeName(dt) +
                                                      " tensor, got " + dtypeName(t.dtype()) + " " +
                                                      shapeToString(t.shape()));
    return false;
  }
  if (present) value = t.data<T>()[0];
  return true;
}

class NmsKernel : public Kernel {
 public:
  explicit NmsKernel(bool centerPointBox) : m_center(centerPointBox) {}

  Status run(KernelContext& ctx) const override {
    if (!ctx.hasInput(0) || !ctx.hasInput(1))
      return kernelError(StatusCode::InvalidArgument, "inputs boxes and scores are required");
    const Tensor& boxes = ctx.input(0);
    const Tensor& scores = ctx.input(1);
    if (boxes.dtype() != DType::Float || scores.dtype() != DType::Float)
      return kernelError(StatusCode::Unsupported, "boxes and scores must be float, got " + dtypeName(boxes.dtype()) +
                                                      " and " + dtypeName(scores.dtype()));
    if (boxes.rank() != 3 || boxes.dim(2) != 4)
      return kernelError(StatusCode::InvalidArgument,
                         "boxes " + shapeToString(boxes.shape()) + " must be [num_batches, num_boxes, 4]");
    if (scores.rank() != 3 || scores.dim(0) != boxes.dim(0) || scores.dim(2) != boxes.dim(1))
      return kernelError(StatusCode::InvalidArgument, "scores " + shapeToString(scores.shape()) +
                                                          " must be [num_batches, num_classes, num_boxes] for boxes " +
                                                          shapeToString(boxes.shape()));
    Status st;
    bool haveMax = false, haveIou = false, haveScore = false;
    int64_t maxPerClass = 0;
    float iouThreshold = 0.f, scoreThreshold = 0.f;
    if (!optionalScalar(ctx, 2, "max_output_boxes_per_class", DType::Int64, haveMax, maxPerClass, st) ||
        !optionalScalar(ctx, 3, "iou_threshold", DType::Float, haveIou, iouThreshold, st) ||
        !optionalScalar(ctx, 4, "score_threshold", DType::Float, haveScore, scoreThreshold, st))
      return st;
    maxPerClass = haveMax ? std::max<int64_t>(maxPerClass, 0) : 0;
    // ORT refuses thresholds outside [0, 1]; a NaN fails this test too.
    if (!(iouThreshold >= 0.f && iouThreshold <= 1.f))
      return kernelError(StatusCode::InvalidArgument,
                         "iou_threshold " + std::to_string(iouThreshold) + " must be in [0, 1]");
    const int64_t B = boxes.dim(0), N = boxes.dim(1), C = scores.dim(1);
    std::vector<int64_t> selected;  // triples
    if (maxPerClass > 0) {
      const float* bp = boxes.data<float>();
      const float* sp = scores.data<float>();
      std::vector<NmsBox> cand;
      KeptBoxes kept;
      cand.reserve((size_t)N);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t c = 0; c < C; ++c) {
          cand.clear();
          const float* s = sp + (b * C + c) * N;
          for (int64_t i = 0; i < N; ++i) {
            if (haveScore && !(s[i] > scoreThreshold)) continue;
            cand.push_back(makeBox(s[i], i, bp + (b * N + i) * 4));
          }
          // Score descending, ties by index ascending: the order of ORT's priority queue. NaN
          // scores go last so that the comparison stays a strict weak order.
          std::sort(cand.begin(), cand.end(), [](const NmsBox& x, const NmsBox& y) {
            const bool xn = std::isnan(x.score), yn = std::isnan(y.score);
            if (xn != yn) return yn;
            if (!xn && x.score != y.score) return x.score > y.score;
            return x.index < y.index;
          });
          kept.clear();
          for (const NmsBox& box : cand) {
            if ((int64_t)kept.size() >= maxPerClass) break;
            if (kept.suppresses(box, iouThreshold)) continue;
            kept.push(box);
            selected.insert(selected.end(), {b, c, box.index});
          }
        }
      }
    }
    const int64_t count = (int64_t)selected.size() / 3;
    Tensor y(DType::Int64, {count, 3});
    if (count > 0) std::memcpy(y.raw(), selected.data(), selected.size() * sizeof(int64_t));
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  }

 private:
  NmsBox makeBox(float score, int64_t index, const float* p) const {
    NmsBox r{score, index, 0, 0, 0, 0, 0};
    if (!m_center) {
      // [y1, x1, y2, x2], either corner order.
      r.y0 = std::min(p[0], p[2]);
      r.y1 = std::max(p[0], p[2]);
      r.x0 = std::min(p[1], p[3]);
      r.x1 = std::max(p[1], p[3]);
      r.area = (r.y1 - r.y0) * (r.x1 - r.x0);
    } else {
      // [x_center, y_center, width, height]
      const float hw = p[2] / 2, hh = p[3] / 2;
      r.area = p[2] * p[3];
      r.x0 = p[0] - hw;
      r.x1 = p[0] + hw;
      r.y0 = p[1] - hh;
      r.y1 = p[1] + hh;
    }
    return r;
  }

  bool m_center;
};

// ---------------------------------------------------------------- RoiAlign
// Bilinear sample of one point, as ORT's pre-calculation: positions and weights of the four
// neighbours, all zero for a point outside [-1, H] x [-1, W].
template <class T>
struct RoiSample {
  int64_t pos[4];
  T w[4];
};

// Samples per bin side are capped: a hostile ROI (1e30 wide) must not ask for billions of
// samples. 65536 per bin covers a 1333-pixel ROI over 7 bins at adaptive sampling (about 36k).
constexpr int64_t kMaxRoiSamplesPerBin = 65536;

class RoiAlignKernel : public Kernel {
 public:
  RoiAlignKernel(bool maxMode, int64_t oh, int64_t ow, int64_t samplingRatio, float spatialScale, bool halfPixel)
      : m_max(maxMode), m_oh(oh), m_ow(ow), m_sr(samplingRatio), m_scale(spatialScale), m_halfPixel(halfPixel) {}

  Status run(KernelContext& ctx) const override {
    for (size_t i = 0; i < 3; ++i)
      if (!ctx.hasInput(i)) return kernelError(StatusCode::InvalidArgument, "inputs X, rois and batch_indices are required");
    const Tensor& x = ctx.input(0);
    const Tensor& rois = ctx.input(1);
    const Tensor& bi = ctx.input(2);
    if (x.rank() != 4)
      return kernelError(StatusCode::InvalidArgument, "X " + shapeToString(x.shape()) + " must be 4-D [N, C, H, W]");
    if (rois.dtype() != x.dtype())
      return kernelError(StatusCode::InvalidArgument,
                         "rois dtype " + dtypeName(rois.dtype()) + " differs from X's " + dtypeName(x.dtype()));
    if (rois.rank() != 2 || rois.dim(1) != 4)
      return kernelError(StatusCode::InvalidArgument, "rois " + shapeToString(rois.shape()) + " must be [num_rois, 4]");
    if (bi.rank() != 1 || bi.dim(0) != rois.dim(0) || (bi.dtype() != DType::Int64 && bi.dtype() != DType::Int32))
      return kernelError(StatusCode::InvalidArgument, "batch_indices " + dtypeName(bi.dtype()) + " " +
                                                          shapeToString(bi.shape()) + " must be int64 [" +
                                                          std::to_string(rois.dim(0)) + "]");
    const int64_t R = rois.dim(0), N = x.dim(0);
    std::vector<int64_t> batch((size_t)R);
    for (int64_t r = 0; r < R; ++r) {
      batch[(size_t)r] = bi.dtype() == DType::Int64 ? bi.data<int64_t>()[r] : bi.data<int32_t>()[r];
      if (batch[(size_t)r] < 0 || batch[(size_t)r] >= N)
        return kernelError(StatusCode::InvalidArgument, "batch_indices[" + std::to_string(r) + "] = " +
                                                            std::to_string(batch[(size_t)r]) + " is out of range for " +
                                                            std::to_string(N) + " images");
    }
    Status st;
    bool ok = dispatchReal(x.dtype(), [&]<class T>() { st = compute<T>(ctx, x, rois, batch); });
    if (!ok) return kernelError(StatusCode::Unsupported, "X dtype " + dtypeName(x.dtype()) + " (float or double)");
    return st;
  }

 private:
  template <class T>
  Status compute(KernelContext& ctx, const Tensor& x, const Tensor& rois, const std::vector<int64_t>& batch) const {
    const int64_t R = rois.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
    // Per-ROI geometry first, so that a bad ROI fails before any work.
    struct Geo {
      T startH, startW, binH, binW;
      int64_t gridH, gridW;
    };
    std::vector<Geo> geo((size_t)R);
    const T* rp = rois.data<T>();
    const T offset = m_halfPixel ? T(0.5) : T(0);
    for (int64_t r = 0; r < R; ++r) {
      const T* q = rp + r * 4;
      const T sw = q[0] * m_scale - offset, sh = q[1] * m_scale - offset;
      const T ew = q[2] * m_scale - offset, eh = q[3] * m_scale - offset;
      T rw = ew - sw, rh = eh - sh;
      if (!m_halfPixel) {  // output_half_pixel: malformed ROIs are forced to 1x1 (the opset-10 behaviour)
        rw = std::max(rw, T(1));
        rh = std::max(rh, T(1));
      }
      const T binH = rh / (T)m_oh, binW = rw / (T)m_ow;
      double gh = m_sr > 0 ? (double)m_sr : std::ceil((double)(rh / (T)m_oh));
      double gw = m_sr > 0 ? (double)m_sr : std::ceil((double)(rw / (T)m_ow));
      // An inverted half-pixel ROI at adaptive sampling gets no samples, so its bins are 0 (ORT
      // computes a negative sample count there and sizes a buffer with it).
      gh = std::max(gh, 0.0);
      gw = std::max(gw, 0.0);
      if (!(gh >= 0 && gw >= 0 && gh <= kMaxRoiSamplesPerBin && gw <= kMaxRoiSamplesPerBin &&
            gh * gw <= kMaxRoiSamplesPerBin))
        return kernelError(StatusCode::InvalidArgument,
                           "roi " + std::to_string(r) + " needs " + std::to_string(gh) + " x " + std::to_string(gw) +
                               " samples per bin, more than the limit of " + std::to_string(kMaxRoiSamplesPerBin));
      geo[(size_t)r] = {sh, sw, binH, binW, (int64_t)gh, (int64_t)gw};
    }
    if (checkedNumel({R, C, m_oh, m_ow}, kMaxOutputElements) < 0)
      return kernelError(StatusCode::InvalidArgument, "output [" + std::to_string(R) + "," + std::to_string(C) + "," +
                                                          std::to_string(m_oh) + "," + std::to_string(m_ow) +
                                                          "] has too many elements");
    Tensor y(x.dtype(), {R, C, m_oh, m_ow});
    if (H == 0 || W == 0) {  // nothing to sample: every bin is empty
      std::memset(y.raw(), 0, y.byteSize());
      ctx.outputs[0] = std::move(y);
      return Status::ok();
    }
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const int64_t bins = m_oh * m_ow;
    ctx.parallelFor(R * bins, std::max<int64_t>(1, 256 / std::max<int64_t>(C, 1)), [&](int64_t b0, int64_t b1) {
      std::vector<RoiSample<T>> samples;
      for (int64_t t = b0; t < b1; ++t) {
        const int64_t r = t / bins, ph = (t % bins) / m_ow, pw = t % m_ow;
        const Geo& g = geo[(size_t)r];
        samples.assign((size_t)(g.gridH * g.gridW), RoiSample<T>{});
        size_t k = 0;
        for (int64_t iy = 0; iy < g.gridH; ++iy) {
          // Same expression order as ORT's pre-calculation, for bitwise-close sample positions.
          const T yy = g.startH + ph * g.binH + static_cast<T>(iy + .5f) * g.binH / static_cast<T>(g.gridH);
          for (int64_t ix = 0; ix < g.gridW; ++ix, ++k) {
            const T xx = g.startW + pw * g.binW + static_cast<T>(ix + .5f) * g.binW / static_cast<T>(g.gridW);
            samples[k] = bilinearSample<T>(yy, xx, H, W);
          }
        }
        const int64_t count = g.gridH * g.gridW;
        for (int64_t c = 0; c < C; ++c) {
          const T* plane = xp + (batch[(size_t)r] * C + c) * H * W;
          T out = 0;
          if (!m_max) {
            for (const RoiSample<T>& s : samples)
              out += s.w[0] * plane[s.pos[0]] + s.w[1] * plane[s.pos[1]] + s.w[2] * plane[s.pos[2]] +
                     s.w[3] * plane[s.pos[3]];
            if (count > 0) out /= (T)count;
          } else {
            // ORT's max mode (the opset-10 reference): the largest weighted corner over the samples,
            // not the largest interpolated value.
            bool first = true;
            for (const RoiSample<T>& s : samples) {
              const T v = std::max(std::max(std::max(s.w[0] * plane[s.pos[0]], s.w[1] * plane[s.pos[1]]),
                                            s.w[2] * plane[s.pos[2]]),
                                   s.w[3] * plane[s.pos[3]]);
              out = first ? v : std::max(out, v);
              first = false;
            }
          }
          yp[((r * C + c) * m_oh + ph) * m_ow + pw] = out;
        }
      }
    });
    ctx.outputs[0] = std::move(y);
    return Status::ok();
  }

  template <class T>
  static RoiSample<T> bilinearSample(T y, T x, int64_t H, int64_t W) {
    RoiSample<T> s{};
    // Also catches NaN coordinates: they sample nothing.
    if (!(y >= T(-1) && y <= (T)H && x >= T(-1) && x <= (T)W) || H == 0 || W == 0) return s;
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int64_t yl = (int64_t)y, xl = (int64_t)x, yh, xh;
    if (yl >= H - 1) {
      yh = yl = H - 1;
      y = (T)yl;
    } else {
      yh = yl + 1;
    }
    if (xl >= W - 1) {
      xh = xl = W - 1;
      x = (T)xl;
    } else {
      xh = xl + 1;
    }
    const T ly = y - (T)yl, lx = x - (T)xl, hy = T(1) - ly, hx = T(1) - lx;
    s.pos[0] = yl * W + xl;
    s.pos[1] = yl * W + xh;
    s.pos[2] = yh * W + xl;
    s.pos[3] = yh * W + xh;
    s.w[0] = hy * hx;
    s.w[1] = hy * lx;
    s.w[2] = ly * hx;
    s.w[3] = ly * lx;
    return s;
  }

  bool m_max;
  int64_t m_oh, m_ow, m_sr;
  float m_scale;
  bool m_halfPixel;
};

// ---------------------------------------------------------------- GridSample
enum class GsMode { Nearest, Linear, Cubic };
enum class GsPad { Zeros, Border, Reflection };

// Grid coordinates are clamped to +-2^40 before indexing: far outside any image, yet safe to
// convert to int64 (a NaN or 1e30 coordinate would make the conversion undefined).
constexpr double kGsCoordLimit = 1099511627776.0;

template <class T>
T gsSanitize(T v) {
  if (!(v >= (T)-kGsCoordLimit)) return (T)-kGsCoordLimit;  // NaN too
  if (v > (T)kGsCoordLimit) return (T)kGsCoordLimit;
  return v;
}

// Normalised [-1, 1] to pixel coordinates, with ORT's float expression order.
template <class T>
T gsDenormalize(T n, int64_t length, bool alignCorners) {
  if (alignCorners) return static_cast<T>((n + 1) / 2.f * (length - 1));
  return static_cast<T>(((n + 1) * length - 1) / 2.f);
}

// Reflects an integer coordinate by the borders until it lies within [lo, hi] (ORT's GsReflect,
// in double with a floor instead of an int cast so that far coordinates stay defined).
double gsReflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x, n = std::floor(dx / range), r = dx - n * range;
    return std::fmod(n, 2.0) == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi, n = std::floor(dx / range), r = dx - n * range;
    return std::fmod(n, 2.0) == 0 ? hi - r : lo + r;
  }
  return x;
}

template <class T>
void gsCubicCoeffs(T x, T c[4]) {
  constexpr T a = -0.75f;
  x = std::abs(x);
  c[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
  c[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
  c[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
  c[3] = ((a * (2 - x) - 5 * a) * (2 - x) + 8 * a) * (2 - x) - 4 * a;
}

class GridSampleKernel : public Kernel {
 public:
  GridSampleKernel(GsMode mode, GsPad pad, bool alignCorners, bool anyRank)
      : m_mode(mode), m_pad(pad), m_align(alignCorners), m_anyRank(anyRank) {}

  Status run(KernelContext& ctx) const override {
    if (!ctx.hasInput(0) || !ctx.hasInput(1))
      return kernelError(StatusCode::InvalidArgument, "inputs X and grid are required");
    const Tensor& x = ctx.input(0);
    const Tensor& grid = ctx.input(1);
    if (m_anyRank ? x.rank() < 3 : x.rank() != 4)
      return kernelError(StatusCode::InvalidArgument,
                         "X " + shapeToString(x.shape()) + (m_anyRank ? " must have rank >= 3" : " must be 4-D (N, C, H, W)"));
    const int64_t r = x.rank() - 2;
    if (grid.rank() != x.rank() || grid.dim(0) != x.dim(0) || grid.dim((int)r + 1) != r)
      return kernelError(StatusCode::InvalidArgument,
                         "grid " + shapeToString(grid.shape()) + " must be [" + std::to_string(x.dim(0)) +
                             ", out spatial dims..., " + std::to_string(r) + "] for X " + shapeToString(x.shape()));
    if (grid.dtype() != x.dtype())
      return kernelError(StatusCode::InvalidArgument,
                         "grid dtype " + dtypeName(grid.dtype()) + " differs from X's " + dtypeName(x.dtype()));
    if (m_mode == GsMode::Cubic && r != 2)
      return kernelError(StatusCode::Unsupported, "cubic mode needs 4-D X, got " + shapeToString(x.shape()));
    Shape yShape{x.dim(0), x.dim(1)};
    yShape.insert(yShape.end(), grid.shape().begin() + 1, grid.shape().end() - 1);
    if (checkedNumel(yShape, kMaxOutputElements) < 0)
      return kernelError(StatusCode::InvalidArgument, "output " + shapeToString(yShape) + " has too many elements");
    bool ok = dispatchReal(x.dtype(), [&]<class T>() { compute<T>(ctx, x, grid); });
    if (!ok) return kernelError(StatusCode::Unsupported, "X dtype " + dtypeName(x.dtype()) + " (float or double)");
    return Status::ok();
  }

 private:
  template <class T>
  void compute(KernelContext& ctx, const Tensor& x, const Tensor& grid) const {
    const int r = x.rank() - 2;
    const int64_t N = x.dim(0), C = x.dim(1);
    Shape inSp(x.shape().begin() + 2, x.shape().end());
    Shape outSp(grid.shape().begin() + 1, grid.shape().end() - 1);
    Shape yShape{N, C};
    yShape.insert(yShape.end(), outSp.begin(), outSp.end());
    Tensor y(x.dtype(), yShape);
    const int64_t inPlane = numelOf(inSp), outPlane = numelOf(outSp);
    // Border box per dimension (ORT's x_min/x_max), in X's dim order.
    std::vector<double> lo((size_t)r), hi((size_t)r);
    for (int d = 0; d < r; ++d) {
      lo[(size_t)d] = m_align ? 0.0 : -0.5;
      hi[(size_t)d] = m_align ? (double)inSp[(size_t)d] - 1.0 : (double)inSp[(size_t)d] - 0.5;
    }
    std::vector<int64_t> inStride((size_t)r, 1);
    for (int d = r - 2; d >= 0; --d) inStride[(size_t)d] = inStride[(size_t)d + 1] * inSp[(size_t)d + 1];
    const T* xp = x.data<T>();
    const T* gp = grid.data<T>();
    T* yp = y.data<T>();
    if (y.numel() == 0) {
      ctx.outputs[0] = std::move(y);
      return;
    }
    // The value of X's plane at integer coordinates `c` under the padding mode.
    auto pixel = [&](const T* plane, const int64_t* c) -> T {
      int64_t off = 0;
      for (int d = 0; d < r; ++d) {
        int64_t v = c[d];
        const int64_t size = inSp[(size_t)d];
        if (m_pad == GsPad::Zeros) {
          if (v < 0 || v >= size) return T(0);
        } else if (m_pad == GsPad::Border) {
          v = std::clamp<int64_t>(v, 0, size - 1);
        } else {
          v = std::clamp<int64_t>((int64_t)gsReflect((double)v, lo[(size_t)d], hi[(size_t)d]), 0, size - 1);
        }
        off += v * inStride[(size_t)d];
      }
      return plane[off];
    };
    const int64_t corners = int64_t(1) << r;
    ctx.parallelFor(N * outPlane, std::max<int64_t>(1, 1024 / std::max<int64_t>(C, 1)), [&](int64_t b0, int64_t b1) {
      std::vector<T> pos((size_t)r), w1((size_t)r), vals((size_t)corners);
      std::vector<int64_t> base((size_t)r), c((size_t)r);
      if (inPlane == 0) {
        for (int64_t t = b0; t < b1; ++t)
          for (int64_t ch = 0; ch < C; ++ch) yp[((t / outPlane) * C + ch) * outPlane + t % outPlane] = T(0);
        return;
      }
      for (int64_t t = b0; t < b1; ++t) {
        const int64_t n = t / outPlane, o = t % outPlane;
        const T* g = gp + t * r;
        // grid's last axis is (x, y[, z]): the reverse of X's spatial dim order.
        for (int d = 0; d < r; ++d)
          pos[(size_t)d] = gsSanitize(gsDenormalize<T>(g[r - 1 - d], inSp[(size_t)d], m_align));
        for (int64_t ch = 0; ch < C; ++ch) {
          const T* plane = xp + (n * C + ch) * inPlane;
          T out;
          if (m_mode == GsMode::Nearest) {
            for (int d = 0; d < r; ++d) c[(size_t)d] = (int64_t)std::nearbyint(pos[(size_t)d]);
            out = pixel(plane, c.data());
          } else if (m_mode == GsMode::Linear) {
            for (int d = 0; d < r; ++d) {
              base[(size_t)d] = (int64_t)std::floor(pos[(size_t)d]);
              w1[(size_t)d] = pos[(size_t)d] - (T)base[(size_t)d];
            }
            // Corner k has bit (r-1-d) set when dim d takes base+1; collapse the last dim first,
            // which is ORT's dy2 * (dx2 * p11 + dx1 * p12) + dy1 * (...) order.
            for (int64_t k = 0; k < corners; ++k) {
              for (int d = 0; d < r; ++d) c[(size_t)d] = base[(size_t)d] + ((k >> (r - 1 - d)) & 1);
              vals[(size_t)k] = pixel(plane, c.data());
            }
            for (int d = r - 1, len = (int)corners; d >= 0; --d, len /= 2) {
              const T hiW = w1[(size_t)d], loW = (T)(base[(size_t)d] + 1) - pos[(size_t)d];
              for (int k = 0; k < len / 2; ++k) vals[(size_t)k] = loW * vals[(size_t)2 * k] + hiW * vals[(size_t)2 * k + 1];
            }
            out = vals[0];
          } else {
            const int64_t y0 = (int64_t)std::floor(pos[0]) - 1, x0 = (int64_t)std::floor(pos[1]) - 1;
            T cx[4], cy[4], rows[4];
            gsCubicCoeffs<T>(pos[1] - (T)x0 - 1, cx);
            gsCubicCoeffs<T>(pos[0] - (T)y0 - 1, cy);
            for (int64_t i = 0; i < 4; ++i) {
              T p[4];
              for (int64_t j = 0; j < 4; ++j) {
                const int64_t cc[2] = {y0 + i, x0 + j};
                p[j] = pixel(plane, cc);
              }
              rows[i] = cx[0] * p[0] + cx[1] * p[1] + cx[2] * p[2] + cx[3] * p[3];
            }
            out = cy[0] * rows[0] + cy[1] * rows[1] + cy[2] * rows[2] + cy[3] * rows[3];
          }
          yp[(n * C + ch) * outPlane + o] = out;
        }
      }
    });
    ctx.outputs[0] = std::move(y);
  }

  GsMode m_mode;
  GsPad m_pad;
  bool m_align, m_anyRank;
};

}  // namespace

// ---------------------------------------------------------------- factories
Result<std::unique_ptr<Kernel>> createNonMaxSuppression(const KernelInit& init) {
  AttrReader a(init);
  const int64_t center = a.i("center_point_box", 0);
  if (!a.ok()) return a.status();
  if (center != 0 && center != 1)
    return kernelError(StatusCode::InvalidModel, "center_point_box is " + std::to_string(center) + ", must be 0 or 1");
  return std::unique_ptr<Kernel>(std::make_unique<NmsKernel>(center == 1));
}

Result<std::unique_ptr<Kernel>> createRoiAlign(const KernelInit& init) {
  AttrReader a(init);
  const std::string mode = a.s("mode", "avg");
  const int64_t oh = a.i("output_height", 1), ow = a.i("output_width", 1);
  const int64_t sr = a.i("sampling_ratio", 0);
  const float scale = a.f("spatial_scale", 1.f);
  // Opset 10 has no attribute and behaves as output_half_pixel; 16 defaults to half_pixel.
  const std::string ctm = init.opset >= 16 ? a.s("coordinate_transformation_mode", "half_pixel") : "output_half_pixel";
  if (!a.ok()) return a.status();
  if (mode != "avg" && mode != "max") return kernelError(StatusCode::InvalidModel, "mode '" + mode + "' must be avg or max");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    return kernelError(StatusCode::InvalidModel,
                       "coordinate_transformation_mode '" + ctm + "' must be half_pixel or output_half_pixel");
  // Output dims are attributes: bound them so that num_rois * C * oh * ow stays allocatable.
  if (oh < 1 || ow < 1 || oh > 65536 || ow > 65536 || oh * ow > (int64_t(1) << 24))
    return kernelError(StatusCode::InvalidModel, "output_height " + std::to_string(oh) + " x output_width " +
                                                     std::to_string(ow) + " must be in [1, 65536] and at most 2^24 bins");
  if (sr < 0 || sr > 256)
    return kernelError(StatusCode::InvalidModel, "sampling_ratio " + std::to_string(sr) + " must be in [0, 256]");
  if (!std::isfinite(scale)) return kernelError(StatusCode::InvalidModel, "spatial_scale is not finite");
  return std::unique_ptr<Kernel>(
      std::make_unique<RoiAlignKernel>(mode == "max", oh, ow, sr, scale, ctm == "half_pixel"));
}

Result<std::unique_ptr<Kernel>> createGridSample(const KernelInit& init) {
  AttrReader a(init);
  const bool v20 = init.opset >= 20;
  const int64_t align = a.i("align_corners", 0);
  const std::string mode = a.s("mode", v20 ? "linear" : "bilinear");
  const std::string pad = a.s("padding_mode", "zeros");
  if (!a.ok()) return a.status();
  GsMode m;
  if (mode == "nearest") {
    m = GsMode::Nearest;
  } else if (mode == (v20 ? "linear" : "bilinear")) {
    m = GsMode::Linear;
  } else if (mode == (v20 ? "cubic" : "bicubic")) {
    m = GsMode::Cubic;
  } else {
    return kernelError(StatusCode::InvalidModel, "mode '" + mode + "' is not one of " +
                                                     (v20 ? "linear, nearest, cubic" : "bilinear, nearest, bicubic") +
                                                     " at opset " + std::to_string(init.opset));
  }
  GsPad p;
  if (pad == "zeros") {
    p = GsPad::Zeros;
  } else if (pad == "border") {
    p = GsPad::Border;
  } else if (pad == "reflection") {
    p = GsPad::Reflection;
  } else {
    return kernelError(StatusCode::InvalidModel, "padding_mode '" + pad + "' must be zeros, border or reflection");
  }
  return std::unique_ptr<Kernel>(std::make_unique<GridSampleKernel>(m, p, align != 0, v20));
}

}  // namespace qs
