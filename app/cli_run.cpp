#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "app/cli.h"
#include "core/io/calibration_data.h"
#include "core/exec/executor.h"
#include "core/io/npy.h"
#include "core/onnx/loader.h"
#include "core/exec/model_info.h"
#include "core/util/atomic_file.h"
#include "core/util/memory.h"

namespace qs::cli {

namespace {

Result<std::vector<NamedTensor>> readFeeds(const RunArgs& args, const Model& model) {
  const Graph& g = model.graph;
  if (!args.randomInput) {
    std::string ext = args.input.size() >= 4 ? args.input.substr(args.input.size() - 4) : "";
    if (ext == ".npy") {
      if (g.inputs.size() != 1) {
        return invalidArgument(args.input + ": a .npy file feeds a single-input model; this model has " +
                               std::to_string(g.inputs.size()) + " inputs: use .npz keyed by input names");
      }
      auto t = readNpy(args.input);
      if (!t) return t.status();
      return std::vector<NamedTensor>{{g.value(g.inputs[0]).name, std::move(t).value()}};
    }
    auto entries = readNpz(args.input);
    if (!entries) return entries.status();
    for (const auto& e : *entries) {
      ValueId id = g.findValue(e.name);
      if (id == kNoValue || (!g.value(id).isGraphInput && !g.value(id).isOverridable)) {
        std::string names;
        for (ValueId in : g.inputs) names += (names.empty() ? "'" : ", '") + g.value(in).name + "'";
        return invalidArgument(args.input + ": key '" + e.name + "' is not an input of " + model.path +
                               " (inputs: " + names + ")");
      }
    }
    return std::move(entries).value();
  }
  std::map<std::string, Shape> given;
  for (const std::string& s : args.shapes) {
    std::string name;
    Shape shape;
    QS_RETURN_IF_ERROR(parseShapeSpec(s, name, shape));
    given[name] = shape;
  }
  std::mt19937_64 rng(args.seed);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  std::vector<NamedTensor> feeds;
  for (ValueId id : g.inputs) {
    const Value& v = g.value(id);
    Shape shape;
    if (auto it = given.find(v.name); it != given.end()) {
      shape = it->second;
    } else {
      if (!v.shape) return invalidArgument(model.path + ": input '" + v.name + "' has no declared shape: give --shape");
      for (const Dim& d : *v.shape) {
        if (!d.isFixed()) {
          return invalidArgument(model.path + ": input '" + v.name + "' has symbolic dims " + dimsToString(v.shape) +
                                 ": give --shape " + v.name + "=...");
        }
        shape.push_back(d.value);
      }
    }
    if (v.dtype != DType::Float && v.dtype != DType::Undefined && v.dtype != DType::Int64 && v.dtype != DType::Int32) {
      return invalidArgument(model.path + ": --random-input fills float and integer inputs only; '" + v.name + "' is " +
                             dtypeName(v.dtype));
    }
    if (checkedNumel(shape, int64_t(1) << 34) < 0) {
      return invalidArgument("input '" + v.name + "' shape " + shapeToString(shape) + " is too large");
    }
    Tensor t(v.dtype == DType::Undefined ? DType::Float : v.dtype, shape);
    if (t.dtype() == DType::Float) {
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = uni(rng);
    } else {
      // Token ids: uniform over the embedding table they index; any other integer input (an
      // attention mask) all ones.
      const int64_t rows = lookupTableRows(g, id);
      for (int64_t i = 0; i < t.numel(); ++i) {
        const int64_t x = rows > 0 ? int64_t(uni(rng) * float(rows)) % rows : 1;
        if (t.dtype() == DType::Int64) t.data<int64_t>()[i] = x;
        else t.data<int32_t>()[i] = int32_t(x);
      }
    }
    feeds.push_back({v.name, std::move(t)});
  }
  return feeds;
}

}  // namespace

int runRun(const RunArgs& args) {
  auto model = loadModel(args.model);
  if (!model) return reportError(model.status());
  ExecutorOptions eo;
  eo.threads = args.threads;
  eo.rewrites = true;  // unobserved inference: fold and fuse (docs/performance.md)
  // and oneDNN's convolutions where they measured faster (QS_DNNL=0: ours only, for A/B runs)
  const char* dnnl = std::getenv("QS_DNNL");
  eo.libraryKernels = !(dnnl && std::string(dnnl) == "0");
  // and chains of them in oneDNN's blocked layout (QS_BLOCKED=0: a reorder around every Conv, for A/B runs)
  const char* blocked = std::getenv("QS_BLOCKED");
  eo.blockedRegions = !(blocked && std::string(blocked) == "0");
  auto ex = Executor::create(*model, eo);
  if (!ex) return reportError(ex.status());
  auto feeds = readFeeds(args, **model);
  if (!feeds) return reportError(feeds.status());

  RunProfile profile;
  RunOptions ro;
  // With --repeat the profile is taken on a warm run after the timed ones (the first run pays
  // for first-touch page faults and scratch growth); otherwise on the only run.
  if (!args.profile.empty() && args.repeat == 0) ro.profile = &profile;
  auto outputs = (*ex)->run(*feeds, ro);
  if (!outputs) return reportError(outputs.status());

  if (args.repeat > 0) {
    std::vector<double> ms;
    for (int r = 0; r < args.repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      auto again = (*ex)->run(*feeds);
      if (!again) return reportError(again.status());
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    double median = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
    std::printf("{\"ms_median\": %.4f, \"ms_min\": %.4f, \"repeat\": %d, \"threads\": %d}\n", median, ms.front(),
                args.repeat, (*ex)->threads());
    if (!args.profile.empty()) {
      RunOptions po;
      po.profile = &profile;
      auto again = (*ex)->run(*feeds, po);
      if (!again) return reportError(again.status());
    }
  }

  if (!args.output.empty()) {
    std::vector<NamedTensor> named;
    const Graph& g = (*model)->graph;
    for (size_t i = 0; i < g.outputs.size(); ++i) named.push_back({g.value(g.outputs[i]).name, (*outputs)[i]});
    Status st = writeNpz(args.output, named, false);
    if (!st) return reportError(st);
  }

  if (!args.profile.empty()) {
    const Graph& g = (*model)->graph;
    nlohmann::ordered_json j;
    j["model"] = (*model)->path;
    j["threads"] = (*ex)->threads();
    j["total_ms"] = profile.totalMs;
    j["peak_live_tensor_bytes"] = profile.peakLiveBytes;
    j["peak_rss_bytes"] = peakRssBytes();
    j["rewrites"] = (*ex)->rewriteSummary();
    struct OpAgg {
      double ms = 0, flops = 0;
      int count = 0;
    };
    std::map<std::string, OpAgg> byOp;
    nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
    for (const auto& np : profile.nodes) {
      const Node& n = g.nodes[(size_t)np.node];
      const std::string& op = np.kernel.empty() ? n.opType : np.kernel;
      nodes.push_back({{"name", n.name}, {"op_type", op}, {"ms", np.ms}, {"flops", np.flops},
                       {"gflops_per_s", np.ms > 0 ? np.flops / np.ms / 1e6 : 0.0}, {"output_bytes", np.outputBytes}});
      auto& a = byOp[op];
      a.ms += np.ms;
      a.flops += np.flops;
      ++a.count;
    }
    std::vector<std::pair<std::string, OpAgg>> ops(byOp.begin(), byOp.end());
    std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second.ms > b.second.ms; });
    nlohmann::ordered_json opsJson = nlohmann::ordered_json::array();
    for (auto& [op, a] : ops) {
      opsJson.push_back({{"op_type", op}, {"count", a.count}, {"ms", a.ms}, {"flops", a.flops},
                         {"gflops_per_s", a.ms > 0 ? a.flops / a.ms / 1e6 : 0.0},
                         {"share", profile.totalMs > 0 ? a.ms / profile.totalMs : 0.0}});
    }
    j["ops"] = opsJson;
    j["nodes"] = nodes;
    Status st = writeFileAtomic(args.profile, j.dump(2) + "\n");
    if (!st) return reportError(st);
  }
  return kExitOk;
}

}  // namespace qs::cli
