#include <cstdio>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "core/onnx/loader.h"
#include "core/exec/model_info.h"

namespace qs::cli {

namespace {
nlohmann::json dimsJson(const std::optional<std::vector<Dim>>& dims) {
  if (!dims) return nullptr;
  nlohmann::json arr = nlohmann::json::array();
  for (const Dim& d : *dims) {
    if (d.isFixed()) arr.push_back(d.value);
    else arr.push_back(d.symbol.empty() ? nlohmann::json("?") : nlohmann::json(d.symbol));
  }
  return arr;
}
}  // namespace

int runInfo(const InfoArgs& args) {
  LoadOptions lo;
  auto model = loadModel(args.model, lo);
  if (!model) return reportError(model.status());
  ModelInfo info = describeModel(**model, KernelRegistry::builtin());
  if (args.json) {
    nlohmann::ordered_json j;
    j["path"] = info.path;
    j["ir_version"] = info.irVersion;
    j["producer"] = info.producerName;
    j["producer_version"] = info.producerVersion;
    j["opset"] = (*model)->defaultOpset();
    nlohmann::ordered_json opsets = nlohmann::ordered_json::object();
    for (auto& [d, v] : info.opsets) opsets[d.empty() ? "ai.onnx" : d] = v;
    j["opsets"] = opsets;
    auto values = [](const std::vector<ValueDesc>& vs) {
      nlohmann::ordered_json arr = nlohmann::ordered_json::array();
      for (const auto& v : vs) arr.push_back({{"name", v.name}, {"dtype", dtypeName(v.dtype)}, {"shape", dimsJson(v.shape)}});
      return arr;
    };
    j["inputs"] = values(info.inputs);
    j["outputs"] = values(info.outputs);
    j["node_count"] = info.nodeCount;
    j["op_histogram"] = info.opHistogram;
    j["subgraph_node_count"] = info.subgraphNodeCount;
    j["subgraph_op_histogram"] = info.subgraphOpHistogram;
    j["parameter_count"] = info.parameterCount;
    j["parameter_bytes"] = info.parameterBytes;
    j["unsupported_ops"] = info.unsupported;
    j["shape_inference"] = info.shapeInference;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("model:       %s\n", info.path.c_str());
    std::printf("ir version:  %lld\n", (long long)info.irVersion);
    std::printf("producer:    %s %s\n", info.producerName.c_str(), info.producerVersion.c_str());
    std::printf("opsets:     ");
    for (auto& [d, v] : info.opsets) std::printf(" %s=%lld", d.empty() ? "ai.onnx" : d.c_str(), (long long)v);
    std::printf("\ninputs:\n");
    for (const auto& v : info.inputs)
      std::printf("  %s  %s %s\n", v.name.c_str(), dtypeName(v.dtype).c_str(), dimsToString(v.shape).c_str());
    std::printf("outputs:\n");
    for (const auto& v : info.outputs)
      std::printf("  %s  %s %s\n", v.name.c_str(), dtypeName(v.dtype).c_str(), dimsToString(v.shape).c_str());
    std::printf("nodes:       %lld\n", (long long)info.nodeCount);
    std::printf("parameters:  %lld (%.2f MB)\n", (long long)info.parameterCount, (double)info.parameterBytes / 1e6);
    std::printf("ops:\n");
    for (auto& [op, n] : info.opHistogram) std::printf("  %-24s %lld\n", op.c_str(), (long long)n);
    if (info.subgraphNodeCount > 0) {
      std::printf("inside subgraphs (If/Loop/Scan): %lld nodes\n", (long long)info.subgraphNodeCount);
      for (auto& [op, n] : info.subgraphOpHistogram) std::printf("  %-24s %lld\n", op.c_str(), (long long)n);
    }
    if (info.unsupported.empty()) {
      std::printf("unsupported: none\n");
    } else {
      std::printf("unsupported:\n");
      for (const auto& u : info.unsupported) std::printf("  %s\n", u.c_str());
    }
    std::printf("shape inference: %s\n", info.shapeInference.c_str());
  }
  return kExitOk;
}

}  // namespace qs::cli
