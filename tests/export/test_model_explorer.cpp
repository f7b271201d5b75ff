// Model Explorer overlays (core/export/model_explorer.h) and the peak RSS in report.json, on a
// built MatMul chain analysed with the fast sensitivity.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/analysis/quant_session.h"
#include "core/export/model_explorer.h"
#include "core/export/report.h"
#include "tests/support/sensitivity_model.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<const AnalysisResult> analysed(const std::shared_ptr<Model>& model) {
  auto data = test::randomData(*model, 2);
  AnalysisOptions ao;
  ao.threads = 2;
  ao.calibration.method = CalibMethod::Max;
  ao.sensitivityMethod = SensitivityMethod::Fast;
  auto s = QuantSession::create(model, {}, ao);
  EXPECT_TRUE(s) << s.status().message();
  EXPECT_TRUE((*s)->calibrate(*data));
  auto r = (*s)->analyze(data);
  EXPECT_TRUE(r) << r.status().message();
  return r ? *r : nullptr;
}

nlohmann::json readJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);  // throws (fails the test) on anything that is not JSON
}

}  // namespace

TEST(ModelExplorer, OverlaysParseAndNameEveryNode) {
  auto model = test::badNodeChainModel();
  ASSERT_TRUE(model);
  auto r = analysed(model);
  ASSERT_TRUE(r);
  const std::string dir = test::makeTempDir("model-explorer");
  const std::string path = dir + "/overlay.json";
  ASSERT_TRUE(writeModelExplorerOverlays(*model, *r, path));
  const Graph& g = model->graph;
  const std::string graphId = g.name.empty() ? "main_graph" : g.name;
  struct Expect {
    std::string file;
    bool quantizableOnly;
  };
  for (const Expect& e : {Expect{path, false}, Expect{dir + "/overlay-layerwise.json", true},
                          Expect{dir + "/overlay-sensitivity.json", true}}) {
    ASSERT_TRUE(fs::exists(e.file)) << e.file;
    const nlohmann::json j = readJson(e.file);
    ASSERT_TRUE(j.contains(graphId)) << e.file;
    const nlohmann::json& results = j[graphId]["results"];
    ASSERT_EQ(j[graphId]["gradient"].size(), 3u);
    size_t named = 0;
    for (const Node& n : g.nodes) {
      const bool wanted = !e.quantizableOnly || r->plan.nodes[(size_t)(&n - g.nodes.data())].quantizable;
      const std::string key = g.value(n.outputs[0]).name;
      EXPECT_EQ(results.contains(key), wanted) << e.file << " " << n.name;
      if (!wanted) continue;
      ++named;
      EXPECT_TRUE(results[key]["value"].is_number()) << e.file << " " << n.name;
    }
    EXPECT_EQ(results.size(), named) << e.file;
  }
  // The bad node is the lowest of the sensitivity overlay.
  const nlohmann::json s = readJson(dir + "/overlay-sensitivity.json")[graphId]["results"];
  EXPECT_LT(s["h2"]["value"].get<double>(), s["h1"]["value"].get<double>());
  EXPECT_LT(s["h2"]["value"].get<double>(), s["y"]["value"].get<double>());
  // Nothing left behind but the three files.
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.is_regular_file();
  EXPECT_EQ(files, 3u);
  fs::remove_all(dir);
}

TEST(ModelExplorer, UnwritableFolderFailsInOneLineAndWritesNothing) {
  auto model = test::badNodeChainModel();
  ASSERT_TRUE(model);
  auto r = analysed(model);
  ASSERT_TRUE(r);
  const std::string dir = test::makeTempDir("model-explorer-bad");
  const std::string path = dir + "/missing/overlay.json";
  Status st = writeModelExplorerOverlays(*model, *r, path);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("missing/overlay.json"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST(ModelExplorer, ReportCarriesPeakRssAndHowSensitivityWasComputed) {
  auto model = test::badNodeChainModel();
  ASSERT_TRUE(model);
  auto r = analysed(model);
  ASSERT_TRUE(r);
  ReportContext ctx;
  ctx.peakRss = true;
  const nlohmann::json j = nlohmann::json::parse(reportJson(*model, *r, ctx));
  EXPECT_FALSE(nlohmann::json::parse(reportJson(*model, *r, ReportContext{})).contains("peak_rss_bytes"));
  ASSERT_TRUE(j.contains("peak_rss_bytes"));
  EXPECT_GT(j["peak_rss_bytes"].get<uint64_t>(), 1u << 20);  // a process holding the executor: over 1 MiB
  for (const auto& l : j["layers"]) {
    ASSERT_TRUE(l.contains("sensitivity_exact"));
    EXPECT_FALSE(l["sensitivity_exact"].get<bool>());
  }
}
