// The fallback curve in the reports (core/export/fallback_report.h): report.json's fallback.curve
// validates against docs/report.schema.json and counts up from 0, and the HTML page has the chart
// with one point per curve point, the chosen one marked, and the target line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/analysis/fallback_curve.h"
#include "core/analysis/quant_session.h"
#include "core/export/report.h"
#include "tests/support/sensitivity_model.h"

using namespace qs;

namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST(FallbackReport, CurveInJsonValidatesAndHtmlChartHasEveryPoint) {
  auto model = test::badNodeChainModel();
  ASSERT_TRUE(model);
  auto data = test::randomData(*model, 2);
  AnalysisOptions ao;
  ao.calibration.method = CalibMethod::Max;
  auto s = QuantSession::create(model, {}, ao);
  ASSERT_TRUE(s) << s.status().message();
  ASSERT_TRUE((*s)->calibrate(*data));
  ASSERT_TRUE((*s)->analyze(data));
  FallbackOptions fo;
  fo.targetSnrDb = (*s)->result()->worstOutputSnrDb() + 3;
  auto curve = fallbackCurve(**s, fo);
  ASSERT_TRUE(curve) << curve.status().message();
  ASSERT_GE(curve->steps.size(), 2u);

  ReportContext ctx;
  ctx.targetSnrDb = fo.targetSnrDb;
  ctx.fallback = curve->chosenSteps();
  ctx.fallbackCurve = *curve;
  const std::string dir = test::makeTempDir("fallback-report");
  const std::string path = dir + "/report.json";
  std::ofstream(path) << reportJson(*model, *(*s)->result(), ctx);
  const std::string cmd = "/usr/bin/python3 " + std::string(QS_SOURCE_DIR) + "/tests/support/validate_json.py " +
                          std::string(QS_SOURCE_DIR) + "/docs/report.schema.json " + path + " 2>" + dir + "/v.txt";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << std::ifstream(dir + "/v.txt").rdbuf();

  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& fb = j.at("fallback");
  EXPECT_EQ(fb.at("chosen_point").get<int>(), curve->chosen);
  EXPECT_EQ(fb.at("quantizable_nodes").get<int>(), 4);
  EXPECT_EQ(fb.at("candidates").get<int>(), 6);
  ASSERT_EQ(fb.at("curve").size(), curve->steps.size() + 1);
  for (size_t i = 0; i < fb.at("curve").size(); ++i) {
    EXPECT_EQ(fb.at("curve")[i].at("excluded").get<size_t>(), i);
    if (i > 0) {
      EXPECT_EQ(fb.at("curve")[i].at("node").get<std::string>(),
                model->graph.nodes[(size_t)curve->steps[i - 1].excluded].name);
    }
  }
  EXPECT_EQ(fb.at("steps").size(), (size_t)curve->chosen);

  const std::string html = reportHtml(*model, *(*s)->result(), ctx);
  ASSERT_NE(html.find("<svg class=\"chart\" id=\"fallback-curve\""), std::string::npos);
  EXPECT_EQ(count(html, "<circle class=\"point\""), curve->steps.size() + 1);
  EXPECT_EQ(count(html, "r=\"5\" fill=\"#c33\""), 1u);  // the chosen point
  EXPECT_EQ(count(html, "<line class=\"target\""), 1u);
  // The chart needs no script: none between its heading and the next section.
  const size_t from = html.find("<h2>Fallback curve</h2>");
  ASSERT_NE(from, std::string::npos);
  const std::string section = html.substr(from, html.find("<h2>", from + 4) - from);
  EXPECT_EQ(section.find("<script"), std::string::npos);
}
