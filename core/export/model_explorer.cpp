#include "core/export/model_explorer.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/util/atomic_file.h"

namespace qs {

namespace {

using Json = nlohmann::ordered_json;

// What Model Explorer shows for an SNR that no finite number reaches (no error at all).
constexpr double kInfiniteDb = 999.0;

std::string siblingPath(const std::string& path, const std::string& suffix) {
  const std::string ext = ".json";
  const bool json = path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  return (json ? path.substr(0, path.size() - ext.size()) : path) + suffix + ".json";
}

std::string overlay(const Model& model, const AnalysisResult& r, const std::function<double(const NodeResult&)>& figure) {
  const Graph& g = model.graph;
  Json results = Json::object();
  for (NodeId id : g.topoOrder) {
    const Node& n = g.nodes[(size_t)id];
    if (n.outputs.empty() || n.outputs[0] == kNoValue) continue;
    double v = figure(r.nodes[(size_t)id]);
    if (std::isnan(v)) continue;
    if (std::isinf(v)) v = v > 0 ? kInfiniteDb : -kInfiniteDb;
    results[g.value(n.outputs[0]).name] = Json{{"value", v}};
  }
  // Low SNR red, high green: stop 0 is the lowest value of the file, 1 the highest.
  Json gradient = Json::array({Json{{"stop", 0}, {"bgColor", "#d7301f"}}, Json{{"stop", 0.5}, {"bgColor", "#fdcc8a"}},
                               Json{{"stop", 1}, {"bgColor", "#1a9850"}}});
  Json j = Json::object();
  j[g.name.empty() ? std::string("main_graph") : g.name] = Json{{"results", results}, {"gradient", gradient}};
  return j.dump(2) + "\n";
}

}  // namespace

std::vector<std::pair<std::string, std::string>> modelExplorerOverlays(const Model& model, const AnalysisResult& r,
                                                                       const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back(path, overlay(model, r, [](const NodeResult& n) { return n.hasGraphwise ? n.graphwise.snrDb : NAN; }));
  out.emplace_back(siblingPath(path, "-layerwise"),
                   overlay(model, r, [](const NodeResult& n) { return n.hasLayerwise ? n.layerwise.snrDb : NAN; }));
  out.emplace_back(siblingPath(path, "-sensitivity"),
                   overlay(model, r, [](const NodeResult& n) { return n.sensitivitySnrDb; }));
  return out;
}

Status writeModelExplorerOverlays(const Model& model, const AnalysisResult& r, const std::string& path) {
  const auto files = modelExplorerOverlays(model, r, path);
  std::vector<std::string> tmps;
  auto cleanup = [&]() {
    for (const std::string& t : tmps) std::remove(t.c_str());
  };
  for (const auto& [file, contents] : files) {
    std::string tmp;
    Status st = writeTemporaryFile(file, contents, tmp);
    if (!tmp.empty()) tmps.push_back(tmp);
    if (!st) {
      cleanup();
      return st;
    }
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (std::rename(tmps[i].c_str(), files[i].first.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      cleanup();
      return Status(StatusCode::IoError, files[i].first + ": cannot write the Model Explorer overlay: " + why);
    }
  }
  return Status::ok();
}

}  // namespace qs
