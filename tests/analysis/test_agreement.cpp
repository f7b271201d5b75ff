// Agreement beyond SNR (core/analysis/agreement.h): greedy CTC decoding and edit distance on
// literal cases, the accumulator's top-1/top-5 and sequence figures, the rule that decides each
// output's kind (and the override), and the session: agreement in the results, equal after a
// toggle and back, and the fallback to an agreement target.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/analysis/agreement.h"
#include "core/analysis/quant_session.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/text_images.h"

using namespace qs;
using qs::test::OnnxBuilder;
namespace fs = std::filesystem;

namespace {

// Rows of one-hot-ish scores: row r peaks at classes[r] (0.9), the rest 0.1 / C.
Tensor scores(const Shape& shape, const std::vector<int>& classes) {
  const int64_t C = shape.back();
  std::vector<float> v((size_t)numelOf(shape), 0.1f / (float)C);
  for (size_t r = 0; r < classes.size(); ++r) v[r * (size_t)C + (size_t)classes[r]] = 0.9f;
  return Tensor::fromVector<float>(v, shape);
}

}  // namespace

TEST(Agreement, CtcGreedyDecodeCollapsesRepeatsAndDropsBlank) {
  // Steps: a a _ a b b _ _ c  -> a a b c (the blank separates the two a's).
  const std::vector<int> steps = {1, 1, 0, 1, 2, 2, 0, 0, 3};
  const Tensor t = scores({(int64_t)steps.size(), 4}, steps);
  EXPECT_EQ(ctcGreedyDecode(t.data<float>(), (int64_t)steps.size(), 4), (std::vector<int32_t>{1, 1, 2, 3}));
  EXPECT_TRUE(ctcGreedyDecode(t.data<float>(), 0, 4).empty());
}

TEST(Agreement, EditDistanceLiteralCases) {
  EXPECT_EQ(editDistance({}, {}), 0);
  EXPECT_EQ(editDistance({1, 2, 3}, {}), 3);
  EXPECT_EQ(editDistance({1, 2, 3}, {1, 3}), 1);
  EXPECT_EQ(editDistance({1, 2, 3}, {3, 2, 1}), 2);
  EXPECT_EQ(editDistance({5, 6, 7, 8}, {5, 9, 7, 8, 4}), 2);
}

TEST(Agreement, ClassesTop1AndTop5) {
  // Three rows of 6 classes; row 1's quantized argmax moves, the float class stays second.
  const Tensor f = scores({3, 6}, {2, 4, 0});
  Tensor q = scores({3, 6}, {2, 5, 0});
  q.data<float>()[1 * 6 + 4] = 0.5f;
  AgreementAccumulator a;
  a.add(f, q, OutputKind::Classes);
  AgreementMetrics m = a.metrics();
  EXPECT_EQ(m.kind, OutputKind::Classes);
  EXPECT_EQ(m.positions, 3);
  EXPECT_DOUBLE_EQ(m.top1, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.top5, 1.0);
  EXPECT_DOUBLE_EQ(m.primary(), 2.0 / 3.0);
  EXPECT_TRUE(std::isnan(m.sequenceAgreement));
  // Float class last of 6 in the quantized row: outside the top 5.
  Tensor far = scores({1, 6}, {0});
  for (int c = 0; c < 6; ++c) far.data<float>()[c] = (float)(6 - c);
  AgreementAccumulator b;
  b.add(scores({1, 6}, {5}), far, OutputKind::Classes);
  EXPECT_DOUBLE_EQ(b.metrics().top5, 0.0);
  // Merged in order: sums, not means of means.
  a.merge(b);
  EXPECT_EQ(a.metrics().positions, 4);
  EXPECT_DOUBLE_EQ(a.metrics().top1, 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(a.metrics().top5, 3.0 / 4.0);
  // Dense, another shape or dtype: nothing added.
  AgreementAccumulator none;
  none.add(f, q, OutputKind::Dense);
  none.add(f, scores({2, 6}, {0, 0}), OutputKind::Classes);
  EXPECT_EQ(none.metrics().positions, 0);
  EXPECT_EQ(none.metrics().kind, OutputKind::Dense);
  EXPECT_TRUE(std::isnan(none.metrics().primary()));
}

TEST(Agreement, SequencesDecodedAndCharacterErrorRate) {
  // Two sequences of 5 steps over 4 classes: the first decodes alike through a different path
  // (repeat vs blank), the second loses one character.
  const Tensor f = scores({2, 5, 4}, {1, 1, 0, 2, 3, /**/ 1, 0, 2, 0, 3});
  const Tensor q = scores({2, 5, 4}, {1, 0, 0, 2, 3, /**/ 1, 0, 2, 2, 2});
  AgreementAccumulator a;
  a.add(f, q, OutputKind::Sequence);
  const AgreementMetrics m = a.metrics();
  EXPECT_EQ(m.kind, OutputKind::Sequence);
  EXPECT_EQ(m.sequences, 2);
  EXPECT_DOUBLE_EQ(m.sequenceAgreement, 0.5);
  EXPECT_DOUBLE_EQ(m.charErrorRate, 1.0 / 6.0);  // float: "1 2 3" and "1 2 3"; quantized drops one 3
  EXPECT_EQ(m.positions, 10);
  EXPECT_DOUBLE_EQ(m.top1, 7.0 / 10.0);
  EXPECT_DOUBLE_EQ(m.primary(), 0.5);
  EXPECT_NE(describeAgreement(m).find("1/2 sequences decoded alike"), std::string::npos) << describeAgreement(m);
}

TEST(Agreement, OutputKindRule) {
  OnnxBuilder b;
  b.input("x", {-1, 8});
  b.initializer("w", {8, 5}, std::vector<float>(40, 0.1f));
  b.initializer("bias", {5}, std::vector<float>(5, 0.0f));
  b.node("MatMul", {"x", "w"}, {"mm"});
  b.node("Add", {"mm", "bias"}, {"logits"});     // a linear head with a bias
  b.node("Softmax", {"logits"}, {"probs"});      // classes
  b.node("Tanh", {"logits"}, {"pooled"});        // not scores: dense
  b.node("Sigmoid", {"mm"}, {"mask"});           // dense
  for (const char* o : {"logits", "probs", "pooled", "mask"}) b.output(o, {-1, 5});
  auto m = qs::test::builtModel(b);
  ASSERT_TRUE(m);
  const Graph& g = m->graph;
  const Tensor two = scores({2, 5}, {0, 1});
  EXPECT_EQ(outputKind(g, g.findValue("logits"), two), OutputKind::Classes);
  EXPECT_EQ(outputKind(g, g.findValue("probs"), two), OutputKind::Classes);
  EXPECT_EQ(outputKind(g, g.findValue("pooled"), two), OutputKind::Dense);
  EXPECT_EQ(outputKind(g, g.findValue("mask"), two), OutputKind::Dense);
  // Rank 3 under a Softmax is a sequence; under a linear head, classes per position.
  const Tensor three = scores({2, 3, 5}, {0, 1, 2, 3, 4, 0});
  EXPECT_EQ(outputKind(g, g.findValue("probs"), three), OutputKind::Sequence);
  EXPECT_EQ(outputKind(g, g.findValue("logits"), three), OutputKind::Classes);
  // A single class column is not a class axis; the override wins where the shape allows it.
  EXPECT_EQ(outputKind(g, g.findValue("probs"), scores({4, 1}, {})), OutputKind::Dense);
  EXPECT_EQ(outputKind(g, g.findValue("mask"), two, OutputKind::Classes), OutputKind::Classes);
  EXPECT_EQ(outputKind(g, g.findValue("probs"), two, OutputKind::Dense), OutputKind::Dense);
  EXPECT_EQ(outputKind(g, g.findValue("mask"), two, OutputKind::Sequence), OutputKind::Dense);
  OutputKind k;
  EXPECT_TRUE(parseOutputKind("sequence", k) && k == OutputKind::Sequence);
  EXPECT_FALSE(parseOutputKind("Sequence", k));
}

// The session on PaddleOCR cls (softmax [N, 2]): classes agreement over every sample, the same
// after a toggle and back, and a fallback to full agreement.
TEST(Agreement, SessionReportsAndFallsBackToAgreement) {
  const std::string path = std::string(QS_MODELS_DIR) + "/ch_ppocr_mobile_v2.0_cls_infer.onnx";
  if (!fs::exists(path)) GTEST_SKIP() << "models missing";
  auto model = loadModel(path);
  ASSERT_TRUE(model) << model.status().message();
  const std::string dir = qs::test::makeTempDir("agreement");
  qs::test::writeTextImages(dir, 8, 192, 48, 7, true);
  CalibrationDataOptions co;
  co.path = dir;
  co.image.mean = {0.5f, 0.5f, 0.5f};
  co.image.std = {0.5f, 0.5f, 0.5f};
  co.image.width = 192;
  co.image.height = 48;
  auto data = CalibrationData::open(**model, co);
  ASSERT_TRUE(data) << data.status().message();
  std::shared_ptr<const CalibrationData> d(std::move(data).value());
  AnalysisOptions ao;
  ao.calibration.method = CalibMethod::Max;
  ao.layerwise = false;
  ao.threads = 2;
  auto s = QuantSession::create(*model, {}, ao);
  ASSERT_TRUE(s) << s.status().message();
  ASSERT_TRUE((*s)->calibrate(*d));
  auto r = (*s)->analyze(d);
  ASSERT_TRUE(r) << r.status().message();
  const AgreementMetrics a = (*r)->outputs[0].agreement;
  EXPECT_EQ(a.kind, OutputKind::Classes);
  EXPECT_EQ(a.positions, 8);
  EXPECT_GE(a.top1, 0.0);
  EXPECT_EQ(a.top5, 1.0);  // two classes: the float one is always in the top 2
  EXPECT_EQ((*r)->worstAgreement(), a.top1);

  // Toggling a node off and on again gives the same figures as the first analysis.
  NodeId first = -1;
  for (size_t i = 0; i < (*r)->plan.nodes.size() && first < 0; ++i)
    if ((*r)->plan.nodes[i].quantized) first = (NodeId)i;
  ASSERT_GE(first, 0);
  ASSERT_TRUE((*s)->setQuantized({{first, false}}));
  auto back = (*s)->setQuantized({{first, true}});
  ASSERT_TRUE(back);
  EXPECT_EQ((*back)->outputs[0].agreement.top1, a.top1);
  EXPECT_EQ((*back)->outputs[0].agreement.positions, a.positions);

  auto steps = (*s)->autoFallback(NAN, 1.0);
  ASSERT_TRUE(steps) << steps.status().message();
  EXPECT_GE((*s)->result()->worstAgreement(), 1.0);
  for (const FallbackStep& st : *steps) ASSERT_EQ(st.outputAgreement.size(), 1u);
  if (a.top1 < 1.0) {
    ASSERT_FALSE(steps->empty());
    EXPECT_EQ(steps->back().worstAgreement(), 1.0);
  }
  fs::remove_all(dir);
}

// An agreement target on a model without a class axis fails in one line naming its outputs; an
// --output-kind naming no output fails at create().
TEST(Agreement, TargetWithoutClassAxisAndUnknownOutputKindFail) {
  OnnxBuilder b;
  b.input("x", {1, 4});
  b.node("Sigmoid", {"x"}, {"y"});
  b.output("y", {1, 4});
  auto m = qs::test::builtModel(b);
  ASSERT_TRUE(m);
  AnalysisOptions ao;
  ao.outputKinds["nope"] = OutputKind::Classes;
  auto bad = QuantSession::create(m, {}, ao);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("'nope', not a graph output (outputs: y)"), std::string::npos)
      << bad.status().message();
  ao.outputKinds.clear();
  auto s = QuantSession::create(m, {}, ao);
  ASSERT_TRUE(s) << s.status().message();
  CalibrationDataOptions co;
  co.maxSamples = 2;
  auto data = CalibrationData::open(*m, co);
  ASSERT_TRUE(data) << data.status().message();
  std::shared_ptr<const CalibrationData> d(std::move(data).value());
  ASSERT_TRUE((*s)->calibrate(*d));
  ASSERT_TRUE((*s)->analyze(d));
  EXPECT_EQ((*s)->result()->outputs[0].agreement.kind, OutputKind::Dense);
  EXPECT_TRUE(std::isnan((*s)->result()->worstAgreement()));
  auto steps = (*s)->autoFallback(NAN, 0.9);
  ASSERT_FALSE(steps);
  EXPECT_NE(steps.status().message().find("no graph output has a class axis (y are dense"), std::string::npos)
      << steps.status().message();
}
