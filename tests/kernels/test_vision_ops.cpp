// Tests of the 'vision' kernel group (core/kernels/vision.cpp, misc_ops.cpp) beyond the ONNX node
// tests: single-op models built in code, run by the executor and by ONNX Runtime
// (tests/support/ort_run.mjs) on seeded inputs, indices compared exactly and floats to a relative
// error of 1e-5; and hostile inputs, each asserting its one-line error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/exec/executor.h"
#include "core/io/npy.h"
#include "tests/support/ort_runner.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
using qs::test::OnnxBuilder;
namespace fs = std::filesystem;

namespace {

constexpr int kFloat = onnx::TensorProto::FLOAT;
constexpr int kInt64 = onnx::TensorProto::INT64;

int onnxType(DType t) { return (int)t; }  // DType is numbered as TensorProto.DataType

// A model of one node whose inputs are all graph inputs shaped as `feeds`; outputs declared
// with unknown dims of rank `outRanks[i]`.
OnnxBuilder singleOp(int64_t opset, const std::string& op, const std::vector<Tensor>& feeds,
                     const std::vector<std::pair<int, int>>& outTypesRanks) {
  OnnxBuilder b(opset);
  std::vector<std::string> ins, outs;
  for (size_t i = 0; i < feeds.size(); ++i) {
    ins.push_back("in" + std::to_string(i));
    b.input(ins.back(), feeds[i].shape(), onnxType(feeds[i].dtype()));
  }
  for (size_t i = 0; i < outTypesRanks.size(); ++i) {
    outs.push_back("out" + std::to_string(i));
    b.output(outs.back(), std::vector<int64_t>((size_t)outTypesRanks[i].second, -1), outTypesRanks[i].first);
  }
  b.node(op, ins, outs, "op");
  return b;
}

onnx::NodeProto& theNode(OnnxBuilder& b) { return *b.graph().mutable_node(0); }

void attrString(onnx::NodeProto& n, const std::string& key, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

// Runs the model in our executor (rewrites off and on: both must agree exactly).
Result<std::vector<Tensor>> runOurs(const OnnxBuilder& b, const std::vector<Tensor>& feeds) {
  auto model = qs::test::builtModel(b);
  if (!model) return invalidModel("model did not load");
  std::vector<NamedTensor> named;
  for (size_t i = 0; i < feeds.size(); ++i) named.push_back({"in" + std::to_string(i), feeds[i]});
  std::vector<Tensor> first;
  for (bool rewrites : {false, true}) {
    ExecutorOptions eo;
    eo.threads = 2;
    eo.rewrites = rewrites;
    auto ex = Executor::create(model, eo);
    if (!ex) return ex.status();
    auto out = (*ex)->run(named);
    if (!out) return out.status();
    if (!rewrites) {
      first = *out;
      continue;
    }
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_EQ(first[i].shape(), (*out)[i].shape()) << "output " << i << " with rewrites";
      EXPECT_EQ(0, std::memcmp(first[i].raw(), (*out)[i].raw(), first[i].byteSize())) << "output " << i;
    }
  }
  return first;
}

std::vector<Tensor> runOrt(const OnnxBuilder& b, const std::vector<Tensor>& feeds, size_t nOut) {
  std::vector<Tensor> outs = qs::test::runOrt(b, feeds);
  EXPECT_EQ(outs.size(), nOut);
  outs.resize(nOut);
  return outs;
}

// Ours against ORT: integer outputs exactly, float outputs to relative error 1e-5. Returns our
// outputs for further checks (empty on failure).
std::vector<Tensor> expectParity(const OnnxBuilder& b, const std::vector<Tensor>& feeds, size_t nOut,
                                 const std::string& what) {
  SCOPED_TRACE(what);
  auto ours = runOurs(b, feeds);
  EXPECT_TRUE(ours) << ours.status().message();
  if (!ours || ours->size() != nOut) {
    ADD_FAILURE() << "no outputs";
    return {};
  }
  std::vector<Tensor> ref = runOrt(b, feeds, nOut);
  if (ref.size() != nOut) {
    ADD_FAILURE() << "ORT gave " << ref.size() << " outputs";
    return {};
  }
  for (size_t i = 0; i < nOut; ++i) {
    const Tensor& o = (*ours)[i];
    EXPECT_FALSE(ref[i].empty());
    EXPECT_EQ(o.shape(), ref[i].shape()) << "output " << i;
    EXPECT_EQ(o.dtype(), ref[i].dtype()) << "output " << i;
    if (ref[i].empty() || o.shape() != ref[i].shape() || o.dtype() != ref[i].dtype()) continue;
    if (o.dtype() == DType::Float) {
      EXPECT_LE(qs::test::relativeError(o, ref[i]), 1e-5) << "output " << i;
    } else {
      int64_t mismatches = 0;
      for (int64_t k = 0; k < o.numel(); ++k)
        if (o.valueAsDouble(k) != ref[i].valueAsDouble(k) && ++mismatches <= 3)
          ADD_FAILURE() << "output " << i << " element " << k << ": " << o.valueAsDouble(k)
                        << " != ORT's " << ref[i].valueAsDouble(k);
      EXPECT_EQ(mismatches, 0) << "output " << i;
    }
  }
  return *ours;
}

// The executor's error for a model and feeds (create or run), which must be a one-line failure.
std::string errorOf(const OnnxBuilder& b, const std::vector<Tensor>& feeds) {
  auto out = runOurs(b, feeds);
  EXPECT_FALSE(out.isOk());
  if (out) return "";
  EXPECT_EQ(out.status().message().find('\n'), std::string::npos);
  return out.status().message();
}

Tensor scalarI64(int64_t v) { return Tensor::fromVector<int64_t>({v}, {1}); }
Tensor scalarF(float v) { return Tensor::fromVector<float>({v}, {1}); }

// ---------------------------------------------------------------- NonMaxSuppression
// Boxes in both encodings with many overlaps and tied scores (scores quantised to tenths), over
// several batches and classes.
Tensor nmsBoxes(int64_t B, int64_t N, bool center, std::mt19937& rng) {
  std::uniform_real_distribution<float> pos(0.f, 4.f), size(1.5f, 4.f);  // crowded: much overlap
  std::bernoulli_distribution flip(0.3);
  Tensor t(DType::Float, {B, N, 4});
  float* p = t.data<float>();
  for (int64_t i = 0; i < B * N; ++i) {
    const float a = pos(rng), c = pos(rng), h = size(rng), w = size(rng);
    if (center) {
      p[4 * i] = a, p[4 * i + 1] = c, p[4 * i + 2] = w, p[4 * i + 3] = h;
    } else if (flip(rng)) {  // corners given in either order
      p[4 * i] = a + h, p[4 * i + 1] = c + w, p[4 * i + 2] = a, p[4 * i + 3] = c;
    } else {
      p[4 * i] = a, p[4 * i + 1] = c, p[4 * i + 2] = a + h, p[4 * i + 3] = c + w;
    }
  }
  return t;
}

Tensor nmsScores(int64_t B, int64_t C, int64_t N, std::mt19937& rng) {
  std::uniform_int_distribution<int> tenth(0, 10);
  Tensor t(DType::Float, {B, C, N});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = (float)tenth(rng) / 10.f;
  return t;
}

TEST(VisionOrtParity, NonMaxSuppressionCenterBoxesClassesBatchesTies) {
  std::mt19937 rng(19);
  for (int center : {1, 0}) {
    for (float scoreThreshold : {0.25f, -1.f}) {
      const int64_t B = 3, C = 4, N = 48;
      std::vector<Tensor> feeds = {nmsBoxes(B, N, center == 1, rng), nmsScores(B, C, N, rng), scalarI64(12),
                                   scalarF(0.3f)};
      if (scoreThreshold >= 0) feeds.push_back(scalarF(scoreThreshold));
      OnnxBuilder b = singleOp(11, "NonMaxSuppression", feeds, {{kInt64, 2}});
      OnnxBuilder::attrInt(theNode(b), "center_point_box", center);
      auto sel = expectParity(b, feeds, 1,
                              "center_point_box " + std::to_string(center) + ", score_threshold " +
                                  std::to_string(scoreThreshold));
      // Both limits at work: something selected everywhere, yet fewer than 12 per (batch, class) somewhere.
      ASSERT_EQ(sel.size(), 1u);
      EXPECT_GT(sel[0].dim(0), B * C);
      EXPECT_LT(sel[0].dim(0), B * C * 12);
    }
  }
}

TEST(VisionOrtParity, NonMaxSuppressionAllTiedScoresKeepIndexOrder) {
  // Identical scores everywhere: the selection order is the box index order.
  std::mt19937 rng(5);
  std::vector<Tensor> feeds = {nmsBoxes(2, 30, false, rng), Tensor(DType::Float, {2, 2, 30}), scalarI64(100),
                               scalarF(0.5f)};
  for (int64_t i = 0; i < feeds[1].numel(); ++i) feeds[1].data<float>()[i] = 0.5f;
  OnnxBuilder b = singleOp(11, "NonMaxSuppression", feeds, {{kInt64, 2}});
  auto ours = expectParity(b, feeds, 1, "all tied");
  ASSERT_EQ(ours.size(), 1u);
  const Tensor& sel = ours[0];
  ASSERT_GT(sel.dim(0), 2);
  // Within one (batch, class) the box indices rise.
  for (int64_t r = 1; r < sel.dim(0); ++r) {
    const int64_t* p = sel.data<int64_t>() + 3 * r;
    if (p[0] == p[-3] && p[1] == p[-2]) {
      EXPECT_GT(p[2], p[-1]) << "row " << r;
    }
  }
}

// Spread-out boxes (a 40x40 field, sides 1.5..4) so that dozens are kept per class: the kept set
// is tested against eight boxes per step (KeptBoxes in vision.cpp) and its tail one by one; with
// zero-area boxes, and a high and a low iou_threshold. The selection must be ORT's exactly.
TEST(VisionOrtParity, NonMaxSuppressionManyKeptBoxes) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> pos(0.f, 40.f), size(1.5f, 4.f);
  const int64_t B = 2, C = 3, N = 300;
  Tensor boxes(DType::Float, {B, N, 4});
  float* p = boxes.data<float>();
  for (int64_t i = 0; i < B * N; ++i) {
    const float a = pos(rng), c = pos(rng), h = i % 37 == 0 ? 0.f : size(rng), w = size(rng);
    p[4 * i] = a, p[4 * i + 1] = c, p[4 * i + 2] = a + h, p[4 * i + 3] = c + w;
  }
  for (float iou : {0.1f, 0.6f}) {
    std::vector<Tensor> feeds = {boxes, nmsScores(B, C, N, rng), scalarI64(250), scalarF(iou)};
    OnnxBuilder b = singleOp(11, "NonMaxSuppression", feeds, {{kInt64, 2}});
    auto sel = expectParity(b, feeds, 1, "iou_threshold " + std::to_string(iou));
    ASSERT_EQ(sel.size(), 1u);
    EXPECT_GT(sel[0].dim(0), B * C * 40);  // dozens kept per (batch, class)
  }
}

// ---------------------------------------------------------------- RoiAlign
TEST(VisionOrtParity, RoiAlignOpset16CoordinateModesAndMaxMode) {
  std::mt19937 rng(16);
  const int64_t N = 2, C = 3, H = 10, W = 12, R = 7;
  Tensor x = qs::test::randomTensor({N, C, H, W}, rng, -2.f, 2.f);
  // ROIs in input pixels (spatial_scale 0.5 maps them onto X), some partly outside, one inverted.
  Tensor rois(DType::Float, {R, 4});
  std::uniform_real_distribution<float> u(-4.f, 26.f);
  for (int64_t r = 0; r < R; ++r) {
    float x0 = u(rng), y0 = u(rng), x1 = u(rng), y1 = u(rng);
    if (r != R - 1) {
      if (x1 < x0) std::swap(x0, x1);
      if (y1 < y0) std::swap(y0, y1);
    }
    float* q = rois.data<float>() + 4 * r;
    q[0] = x0, q[1] = y0, q[2] = x1, q[3] = y1;
  }
  Tensor batch = Tensor::fromVector<int64_t>({0, 1, 1, 0, 1, 0, 1}, {R});
  for (const char* ctm : {"half_pixel", "output_half_pixel"})
    for (const char* mode : {"avg", "max"})
      for (int64_t sr : {0, 2}) {
        // ORT mis-sizes its buffers for an inverted half-pixel ROI at adaptive sampling (a negative
        // sample count): that case is compared with the ROI dropped.
        const bool dropInverted = std::string(ctm) == "half_pixel" && sr == 0;
        std::vector<Tensor> feeds = {x, rois, batch};
        if (dropInverted) {
          feeds[1] = Tensor(DType::Float, {R - 1, 4});
          std::memcpy(feeds[1].raw(), rois.raw(), feeds[1].byteSize());
          feeds[2] = Tensor::fromVector<int64_t>({0, 1, 1, 0, 1, 0}, {R - 1});
        }
        OnnxBuilder b = singleOp(16, "RoiAlign", feeds, {{kFloat, 4}});
        attrString(theNode(b), "coordinate_transformation_mode", ctm);
        attrString(theNode(b), "mode", mode);
        OnnxBuilder::attrInt(theNode(b), "output_height", 3);
        OnnxBuilder::attrInt(theNode(b), "output_width", 4);
        OnnxBuilder::attrInt(theNode(b), "sampling_ratio", sr);
        OnnxBuilder::attrFloat(theNode(b), "spatial_scale", 0.5f);
        expectParity(b, feeds, 1, std::string(ctm) + " " + mode + " sampling_ratio " + std::to_string(sr));
      }
}

// ---------------------------------------------------------------- GridSample
Tensor randomGrid(const Shape& s, std::mt19937& rng) { return qs::test::randomTensor(s, rng, -1.3f, 1.3f); }

TEST(VisionOrtParity, GridSampleEveryModePaddingAndAlignment) {
  std::mt19937 rng(20);
  Tensor x = qs::test::randomTensor({2, 3, 5, 7}, rng, -1.f, 1.f);
  Tensor grid = randomGrid({2, 4, 6, 2}, rng);
  for (const char* mode : {"bilinear", "nearest", "bicubic"})
    for (const char* pad : {"zeros", "border", "reflection"})
      for (int align : {0, 1}) {
        std::vector<Tensor> feeds = {x, grid};
        OnnxBuilder b = singleOp(16, "GridSample", feeds, {{kFloat, 4}});
        attrString(theNode(b), "mode", mode);
        attrString(theNode(b), "padding_mode", pad);
        OnnxBuilder::attrInt(theNode(b), "align_corners", align);
        expectParity(b, feeds, 1, std::string(mode) + " " + pad + " align_corners " + std::to_string(align));
      }
}

TEST(VisionOrtParity, GridSampleOpset20VolumesAndNewModeNames) {
  std::mt19937 rng(21);
  Tensor x5 = qs::test::randomTensor({1, 2, 3, 4, 5}, rng, -1.f, 1.f);
  Tensor grid5 = randomGrid({1, 2, 3, 4, 3}, rng);
  Tensor x4 = qs::test::randomTensor({1, 2, 4, 5}, rng, -1.f, 1.f);
  Tensor grid4 = randomGrid({1, 3, 3, 2}, rng);
  for (const char* pad : {"zeros", "border", "reflection"})
    for (int align : {0, 1}) {
      for (const char* mode : {"linear", "nearest"}) {
        std::vector<Tensor> feeds = {x5, grid5};
        OnnxBuilder b = singleOp(20, "GridSample", feeds, {{kFloat, 5}});
        attrString(theNode(b), "mode", mode);
        attrString(theNode(b), "padding_mode", pad);
        OnnxBuilder::attrInt(theNode(b), "align_corners", align);
        expectParity(b, feeds, 1, std::string("5-D ") + mode + " " + pad + " align_corners " + std::to_string(align));
      }
      std::vector<Tensor> feeds = {x4, grid4};
      OnnxBuilder b = singleOp(20, "GridSample", feeds, {{kFloat, 4}});
      attrString(theNode(b), "mode", "cubic");
      attrString(theNode(b), "padding_mode", pad);
      OnnxBuilder::attrInt(theNode(b), "align_corners", align);
      expectParity(b, feeds, 1, std::string("cubic ") + pad + " align_corners " + std::to_string(align));
    }
}

// ---------------------------------------------------------------- Trilu
TEST(VisionOrtParity, TriluNegativeKOnBatchedInt64) {
  Tensor x(DType::Int64, {3, 4, 5});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int64_t>()[i] = i * 7 - 50;
  for (int upper : {0, 1})
    for (int64_t k : {-1, -2, -6}) {
      std::vector<Tensor> feeds = {x, Tensor::fromVector<int64_t>({k}, {})};
      OnnxBuilder b = singleOp(14, "Trilu", feeds, {{kInt64, 3}});
      OnnxBuilder::attrInt(theNode(b), "upper", upper);
      expectParity(b, feeds, 1, "upper " + std::to_string(upper) + " k " + std::to_string(k));
    }
  // One literal check against the definition: lower with k = -1 keeps j <= i - 1.
  std::vector<Tensor> feeds = {x, Tensor::fromVector<int64_t>({-1}, {})};
  OnnxBuilder b = singleOp(14, "Trilu", feeds, {{kInt64, 3}});
  OnnxBuilder::attrInt(theNode(b), "upper", 0);
  auto out = runOurs(b, feeds);
  ASSERT_TRUE(out) << out.status().message();
  for (int64_t m = 0; m < 3; ++m)
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        const int64_t idx = (m * 4 + i) * 5 + j;
        EXPECT_EQ((*out)[0].data<int64_t>()[idx], j <= i - 1 ? x.data<int64_t>()[idx] : 0) << m << "," << i << "," << j;
      }
}

// ---------------------------------------------------------------- Unique
TEST(VisionOrtParity, UniqueSortedAndUnsortedWithAndWithoutAxis) {
  Tensor flat = Tensor::fromVector<float>({3.f, 1.f, 2.f, 3.f, -1.f, 2.f, 2.f, 0.5f, 1.f}, {9});
  for (int sorted : {0, 1}) {
    std::vector<Tensor> feeds = {flat};
    OnnxBuilder b = singleOp(11, "Unique", feeds, {{kFloat, 1}, {kInt64, 1}, {kInt64, 1}, {kInt64, 1}});
    OnnxBuilder::attrInt(theNode(b), "sorted", sorted);
    expectParity(b, feeds, 4, "flat sorted " + std::to_string(sorted));
  }
  Tensor m = Tensor::fromVector<float>({1, 0, 1, 0, 2, 0, 1, 0, 1, 2, 2, 2, 0, 2, 0, 0, 2, 0}, {3, 6});
  for (int64_t axis : {1, -1, 0}) {
    std::vector<Tensor> feeds = {m};
    OnnxBuilder b = singleOp(11, "Unique", feeds, {{kFloat, 2}, {kInt64, 1}, {kInt64, 1}, {kInt64, 1}});
    OnnxBuilder::attrInt(theNode(b), "axis", axis);
    expectParity(b, feeds, 4, "axis " + std::to_string(axis));
  }
}

// ---------------------------------------------------------------- hostile inputs
TEST(VisionBadInput, NonMaxSuppressionBoxesWithThreeCoordinates) {
  std::vector<Tensor> feeds = {Tensor::zeros(DType::Float, {1, 5, 3}), Tensor::zeros(DType::Float, {1, 2, 5}),
                               scalarI64(3)};
  const std::string e = errorOf(singleOp(11, "NonMaxSuppression", feeds, {{kInt64, 2}}), feeds);
  EXPECT_NE(e.find("boxes [1,5,3] must be [num_batches, num_boxes, 4]"), std::string::npos) << e;
}

TEST(VisionBadInput, RoiAlignBatchIndexOutOfRange) {
  std::vector<Tensor> feeds = {Tensor::zeros(DType::Float, {2, 1, 4, 4}),
                               Tensor::fromVector<float>({0, 0, 2, 2, 1, 1, 3, 3}, {2, 4}),
                               Tensor::fromVector<int64_t>({1, 2}, {2})};
  const std::string e = errorOf(singleOp(16, "RoiAlign", feeds, {{kFloat, 4}}), feeds);
  EXPECT_NE(e.find("batch_indices[1] = 2 is out of range for 2 images"), std::string::npos) << e;
}

TEST(VisionBadInput, GridSampleGridWithWrongLastDim) {
  std::vector<Tensor> feeds = {Tensor::zeros(DType::Float, {1, 1, 4, 4}), Tensor::zeros(DType::Float, {1, 3, 3, 3})};
  const std::string e = errorOf(singleOp(16, "GridSample", feeds, {{kFloat, 4}}), feeds);
  EXPECT_NE(e.find("grid [1,3,3,3] must be [1, out spatial dims..., 2]"), std::string::npos) << e;
}

TEST(VisionBadInput, UniqueAxisOutOfRange) {
  std::vector<Tensor> feeds = {Tensor::zeros(DType::Float, {2, 3})};
  OnnxBuilder b = singleOp(11, "Unique", feeds, {{kFloat, 2}});
  OnnxBuilder::attrInt(theNode(b), "axis", 2);
  const std::string e = errorOf(b, feeds);
  EXPECT_NE(e.find("axis 2 is out of range for input [2,3]"), std::string::npos) << e;
}

TEST(VisionBadInput, CompressConditionLongerThanAxis) {
  Tensor cond(DType::Bool, {4});
  for (int i = 0; i < 4; ++i) cond.data<uint8_t>()[i] = 1;
  std::vector<Tensor> feeds = {Tensor::zeros(DType::Float, {2, 3}), cond};
  OnnxBuilder b = singleOp(11, "Compress", feeds, {{kFloat, 2}});
  OnnxBuilder::attrInt(theNode(b), "axis", 1);
  const std::string e = errorOf(b, feeds);
  EXPECT_NE(e.find("condition has 4 entries, more than the 3 of axis 1 of input [2,3]"), std::string::npos) << e;
}

TEST(VisionBadInput, MaxUnpoolIndexOutsideTheOutput) {
  std::vector<Tensor> feeds = {Tensor::zeros(DType::Float, {1, 1, 2, 2}),
                               Tensor::fromVector<int64_t>({0, 3, 16, 5}, {1, 1, 2, 2})};
  OnnxBuilder b = singleOp(11, "MaxUnpool", feeds, {{kFloat, 4}});
  OnnxBuilder::attrInts(theNode(b), "kernel_shape", {2, 2});
  OnnxBuilder::attrInts(theNode(b), "strides", {2, 2});
  const std::string e = errorOf(b, feeds);
  EXPECT_NE(e.find("I[2] = 16 is out of range for the unpooled shape [1,1,4,4]"), std::string::npos) << e;
}

TEST(VisionBadInput, RoiAlignHugeRoiIsRefusedNotSampled) {
  std::vector<Tensor> feeds = {Tensor::zeros(DType::Float, {1, 1, 4, 4}),
                               Tensor::fromVector<float>({0, 0, 1e30f, 1e30f}, {1, 4}),
                               Tensor::fromVector<int64_t>({0}, {1})};
  const std::string e = errorOf(singleOp(16, "RoiAlign", feeds, {{kFloat, 4}}), feeds);
  EXPECT_NE(e.find("samples per bin, more than the limit"), std::string::npos) << e;
}

TEST(VisionBadInput, GridSampleOutputBeyondTheLimitIsRefused) {
  // Small inputs, 70000 channels x a 256 x 256 grid: 4.6e9 output elements.
  std::vector<Tensor> feeds = {Tensor::zeros(DType::Float, {1, 70000, 1, 1}), Tensor::zeros(DType::Float, {1, 256, 256, 2})};
  const std::string e = errorOf(singleOp(16, "GridSample", feeds, {{kFloat, 4}}), feeds);
  EXPECT_NE(e.find("output [1,70000,256,256] has too many elements"), std::string::npos) << e;
}

TEST(VisionBadInput, AttributesCheckedAtLoad) {
  std::vector<Tensor> feeds = {Tensor::zeros(DType::Float, {1, 1, 4, 4}), Tensor::zeros(DType::Float, {1, 2, 2, 2})};
  OnnxBuilder b = singleOp(16, "GridSample", feeds, {{kFloat, 4}});
  attrString(theNode(b), "mode", "linear");  // an opset-20 name
  const std::string e = errorOf(b, feeds);
  EXPECT_NE(e.find("mode 'linear' is not one of bilinear, nearest, bicubic at opset 16"), std::string::npos) << e;
  EXPECT_NE(e.find("node 'op' (GridSample)"), std::string::npos) << e;
}

}  // namespace
