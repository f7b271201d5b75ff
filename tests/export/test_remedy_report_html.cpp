// The HTML report's "Remedies" section (core/export/remedy_report.h) on models built in code: per
// node the remedies that touched it, and one table per remedy with what it changed and, for the
// searched ones (SmoothQuant, weight clip search), the layer-wise error before and after.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

#include "core/export/remedy_report.h"
#include "core/io/npy.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/remedy_helpers.h"

using namespace qs;

namespace {

// The table row of `node` in the section's node table ("" when none).
std::string rowOf(const std::string& html, const std::string& node) {
  const size_t at = html.find("<tr><td class=l>" + node + "</td>");
  if (at == std::string::npos) return "";
  return html.substr(at, html.find("</tr>", at) - at);
}

std::string sig(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

// Conv -> Relu -> Conv with heavy weight channels, x random: equalization, weight clip search and
// bias correction each get their table, and each node's row names the remedies that touched it.
TEST(RemedyReportHtml, ConvPairShowsEachRemedy) {
  std::mt19937 rng(9);
  const std::string dir = test::makeTempDir("remedy_html_conv");
  test::OnnxBuilder b;
  b.input("x", {4, 3, 12, 12}).output("y", {4, 6, 12, 12});
  auto heavy = [&](int64_t o, int64_t block) {
    std::vector<float> w = test::randomValues((size_t)(o * block), rng, -0.2f, 0.2f);
    for (int64_t c = 0; c < o; ++c) w[(size_t)(c * block + (c * 7) % block)] = (c % 2 ? 1.5f : -1.5f);
    return w;
  };
  b.initializer("w1", {8, 3, 3, 3}, heavy(8, 27));
  b.initializer("b1", {8}, test::randomValues(8, rng, -0.2f, 0.2f));
  b.initializer("w2", {6, 8, 3, 3}, heavy(6, 72));
  b.initializer("b2", {6}, test::randomValues(6, rng, -0.2f, 0.2f));
  test::OnnxBuilder::attrInts(b.node("Conv", {"x", "w1", "b1"}, {"c1"}, "conv1"), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"}, "relu1");
  test::OnnxBuilder::attrInts(b.node("Conv", {"r1", "w2", "b2"}, {"y"}, "conv2"), "pads", {1, 1, 1, 1});
  b.save(dir + "/conv.onnx");
  ASSERT_TRUE(writeNpy(dir + "/x.npy", test::randomTensor({4, 3, 12, 12}, rng, -1.f, 1.f)));
  AnalysisRequest rq = test::remedyRequest(dir + "/conv.onnx", dir + "/x.npy");
  rq.equalize = rq.weightClipSearch = rq.biasCorrection = true;
  auto run = runAnalysis(rq);
  ASSERT_TRUE(run) << run.status().message();
  ASSERT_EQ(run->remedies.pairs.size(), 1u);
  ASSERT_FALSE(run->remedies.weightClips.empty());
  ASSERT_FALSE(run->remedies.biasShifts.empty());
  const std::string html = remediesHtml(run->model->graph, *run->result(), run->remedies);
  for (const char* heading : {"<h3>Cross-layer equalization</h3>", "<h3>Weight clip search</h3>", "<h3>Bias correction</h3>"})
    EXPECT_NE(html.find(heading), std::string::npos) << heading;
  EXPECT_EQ(html.find("<h3>SmoothQuant</h3>"), std::string::npos);
  EXPECT_NE(html.find("<th>remedies</th>"), std::string::npos);
  // The node table's rows come first: conv1's is the one with the SNR columns and its tags.
  const std::string conv1 = rowOf(html, "conv1");
  EXPECT_NE(conv1.find("CLE"), std::string::npos) << conv1;
  EXPECT_NE(conv1.find("bias"), std::string::npos) << conv1;
  // The weight clip table has each searched node's layer-wise error before and after.
  const size_t clipTable = html.find("<h3>Weight clip search</h3>");
  for (const WeightClipNode& w : run->remedies.weightClips) {
    const std::string name = run->model->graph.nodes[(size_t)w.node].name;
    const size_t row = html.find("<tr><td class=l>" + name + "</td><td>" + std::to_string(w.clipped) + "</td>", clipTable);
    ASSERT_NE(row, std::string::npos) << name;
    const std::string text = html.substr(row, html.find("</tr>", row) - row);
    EXPECT_NE(text.find("<td>" + sig(w.errorBefore) + "</td><td>" + sig(w.errorAfter) + "</td>"), std::string::npos) << text;
    EXPECT_LE(w.errorAfter, w.errorBefore);
  }
}

// LayerNormalization -> two MatMuls: the SmoothQuant table names the group's consumers, its alpha
// and its layer-wise error before and after; the LayerNormalization's and the consumers' rows say so.
TEST(RemedyReportHtml, SmoothQuantGroupRow) {
  std::mt19937 rng(4);
  const std::string dir = test::makeTempDir("remedy_html_ln");
  constexpr int64_t kC = 32, kN = 24;
  test::OnnxBuilder b(17);
  b.input("x", {4, 16, kC}).output("y", {4, 16, kN});
  std::vector<float> gamma = test::randomValues(kC, rng, 0.5f, 1.5f);
  gamma[3] = 40.f;
  b.initializer("gamma", {kC}, gamma);
  b.initializer("beta", {kC}, test::randomValues(kC, rng, -0.1f, 0.1f));
  b.initializer("wq", {kC, kN}, test::randomValues(kC * kN, rng, -0.3f, 0.3f));
  b.initializer("wk", {kC, kN}, test::randomValues(kC * kN, rng, -0.3f, 0.3f));
  test::OnnxBuilder::attrInt(b.node("LayerNormalization", {"x", "gamma", "beta"}, {"h"}, "ln"), "axis", -1);
  b.node("MatMul", {"h", "wq"}, {"q"}, "q_proj");
  b.node("MatMul", {"h", "wk"}, {"k"}, "k_proj");
  b.node("Add", {"q", "k"}, {"y"}, "add");
  b.save(dir + "/ln.onnx");
  ASSERT_TRUE(writeNpy(dir + "/x.npy", test::randomTensor({4, 16, kC}, rng, -1.f, 1.f)));
  AnalysisRequest rq = test::remedyRequest(dir + "/ln.onnx", dir + "/x.npy");
  rq.smoothQuant = true;
  rq.smoothQuantAlpha = 0.5;
  auto run = runAnalysis(rq);
  ASSERT_TRUE(run) << run.status().message();
  ASSERT_EQ(run->remedies.smoothed.size(), 1u);
  const SmoothedGroup& grp = run->remedies.smoothed[0];
  const std::string html = remediesHtml(run->model->graph, *run->result(), run->remedies);
  const size_t table = html.find("<h3>SmoothQuant</h3>");
  ASSERT_NE(table, std::string::npos);
  const size_t row = html.find("<tr><td class=l>ln</td><td class=l>q_proj, k_proj</td><td>32</td><td>0.50</td>", table);
  ASSERT_NE(row, std::string::npos) << html.substr(table, 600);
  const std::string text = html.substr(row, html.find("</tr>", row) - row);
  EXPECT_NE(text.find("<td>" + sig(grp.errorBefore) + "</td><td>" + sig(grp.errorAfter) + "</td><td>-"), std::string::npos) << text;
  EXPECT_NE(rowOf(html, "q_proj").find("SmoothQuant alpha 0.5"), std::string::npos);
  EXPECT_NE(rowOf(html, "k_proj").find("SmoothQuant alpha 0.5"), std::string::npos);
  EXPECT_EQ(html.find("<h3>Weight clip search</h3>"), std::string::npos);
}
