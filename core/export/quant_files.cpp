#include "core/export/quant_files.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/quant/calibrator.h"
#include "core/quant/placement.h"

namespace qs {

namespace {

using Json = nlohmann::ordered_json;

std::string readAll(const std::string& path, Status& st) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    st = ioError(path + ": cannot open: " + std::strerror(errno));
    return {};
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) st = ioError(path + ": read failed");
  return ss.str();
}

float qmaxOf(QuantMode mode) { return mode == QuantMode::Fp8 ? 448.f : 127.f; }

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

Json stringList(const std::vector<std::string>& v) {
  Json a = Json::array();
  for (const auto& s : v) a.push_back(s);
  return a;
}

}  // namespace

std::vector<ValueId> exportedActivationTensors(const Graph& g, const AnalysisResult& r) {
  std::vector<ValueId> out;
  std::set<ValueId> seen;
  for (const ActivationPoint& a : r.plan.activations) {
    if (!isNodeQuantized(r.plan, a.node) || seen.count(a.value)) continue;
    if (!r.activations.count(a.value)) continue;
    DType dt = g.value(a.value).dtype;
    if (dt != DType::Float && dt != DType::Undefined) continue;
    seen.insert(a.value);
    out.push_back(a.value);
  }
  return out;
}

namespace {

bool isFloatActivation(const Value& v) {
  return !v.constant && (v.dtype == DType::Float || v.dtype == DType::Undefined);
}

bool leftOut(const QuantPlan& plan, NodeId n) {
  const NodeQuantState& st = plan.nodes[(size_t)n];
  return st.quantizable && !st.quantized;
}

}  // namespace

bool keepsImplicitRange(const Graph& g, const QuantPlan& plan, ValueId id) {
  const Value& v = g.value(id);
  bool touchesLeftOut = v.producer >= 0 && leftOut(plan, v.producer);
  bool touchesQuantized = v.producer >= 0 && plan.nodes[(size_t)v.producer].quantized;
  for (NodeId c : v.consumers) {
    touchesLeftOut = touchesLeftOut || leftOut(plan, c);
    touchesQuantized = touchesQuantized || plan.nodes[(size_t)c].quantized;
  }
  return touchesQuantized || !touchesLeftOut;
}

std::vector<std::pair<ValueId, float>> implicitRangeTensors(const Graph& g, const AnalysisResult& r) {
  std::vector<std::pair<ValueId, float>> out;
  std::set<ValueId> exported;
  for (ValueId v : exportedActivationTensors(g, r)) exported.insert(v);
  for (const auto& [id, amax] : r.tensorRanges) {
    if (!isFloatActivation(g.value(id)) || exported.count(id)) continue;
    if (keepsImplicitRange(g, r.plan, id)) out.emplace_back(id, amax);
  }
  return out;
}

std::vector<Int8Gap> implicitInt8Gaps(const Graph& g, const AnalysisResult& r) {
  std::set<ValueId> ranged;
  for (ValueId v : exportedActivationTensors(g, r)) ranged.insert(v);
  for (const auto& [v, amax] : implicitRangeTensors(g, r)) ranged.insert(v);
  std::vector<Int8Gap> gaps;
  for (NodeId n : g.topoOrder) {
    const Node& node = g.nodes[(size_t)n];
    std::vector<ValueId> tensors(node.inputs.begin(), node.inputs.end());
    tensors.insert(tensors.end(), node.outputs.begin(), node.outputs.end());
    ValueId missing = kNoValue;
    bool any = false;
    for (ValueId v : tensors) {
      if (v == kNoValue || !isFloatActivation(g.value(v))) continue;
      any = true;
      if (!ranged.count(v) && missing == kNoValue) missing = v;
    }
    if (r.plan.nodes[(size_t)n].quantized && missing != kNoValue) gaps.push_back({n, missing, false});
    if (leftOut(r.plan, n) && any && missing == kNoValue) gaps.push_back({n, kNoValue, true});
  }
  return gaps;
}

float exportedAmax(const ActivationQuant& q, QuantMode mode) {
  if (scaleFromAmax(q.amax, mode) == q.scale) return q.amax;
  return amaxForScale(q.scale, mode);
}

float amaxForScale(float scale, QuantMode mode) {
  const float qmax = qmaxOf(mode);
  float a = scale * qmax;
  if (scaleFromAmax(a, mode) == scale) return a;
  // amax / qmax is monotonic in amax: walk a few ulps either way for the exact preimage.
  float up = a, down = a;
  for (int i = 0; i < 64; ++i) {
    up = std::nextafter(up, INFINITY);
    if (scaleFromAmax(up, mode) == scale) return up;
    down = std::nextafter(down, 0.f);
    if (scaleFromAmax(down, mode) == scale) return down;
  }
  return a;
}

Result<std::string> fileFingerprint(const std::string& path) {
  Status st;
  std::string bytes = readAll(path, st);
  if (!st) return st;
  uint64_t h = 14695981039346656037ull;  // FNV-1a 64 offset basis (0xcbf29ce484222325)
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return std::string(buf);
}

// ---- calibration.cache -----------------------------------------------------------------------

Status parseTrtVersion(const std::string& text, TrtVersion& out, const std::string& flag) {
  auto bad = [&](const std::string& why) { return invalidArgument(flag + " '" + text + "': " + why); };
  const std::string expected = "expected 8.5, 8.6, 8.6.1, 10, 10.x or 10.x.y";
  int part[3] = {-1, -1, -1};
  int n = 0;
  size_t i = 0;
  while (i < text.size() && n < 3) {
    size_t j = i;
    while (j < text.size() && j - i < 3 && text[j] >= '0' && text[j] <= '9') ++j;
    if (j == i) return bad(expected);
    part[n++] = std::stoi(text.substr(i, j - i));
    if (j == text.size()) {
      i = j;
      break;
    }
    if (text[j] != '.') return bad(expected);
    i = j + 1;
    if (i == text.size()) return bad(expected);  // "10."
  }
  if (n == 0 || i != text.size()) return bad(expected);
  TrtVersion v;
  v.major = part[0];
  if (v.major >= 11) {
    return bad("TensorRT " + std::to_string(v.major) +
               " has no calibrators (no implicit INT8) and reads no calibration cache: it builds the explicit Q/DQ of "
               "quantized.onnx (trtexec --onnx=quantized.onnx --stronglyTyped)");
  }
  if (v.major == 8) {
    // Both releases people deploy with; 8.6.1 is the GA release of 8.6, 8.5.1 that of 8.5.
    if (n < 2 || (part[1] != 5 && part[1] != 6)) return bad(expected);
    v.minor = part[1];
    v.patch = n == 3 ? part[2] : 1;
  } else if (v.major == 10) {
    v.minor = n >= 2 ? part[1] : 0;
    v.patch = n == 3 ? part[2] : 0;
  } else {
    return bad(expected + " (the TensorRT releases that read calibration caches)");
  }
  if (v.minor > 99 || v.patch > 99) return bad(expected);
  out = v;
  return Status::ok();
}

std::string trtVersionName(const TrtVersion& v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.patch);
}

int trtVersionNumber(const TrtVersion& v) {
  // TensorRT 10 widened the minor and patch fields: NV_TENSORRT_VERSION_INT(major, minor, patch)
  // = major * 10000 + minor * 100 + patch; TensorRT 8 had major * 1000 + minor * 100 + patch.
  if (v.major >= 10) return v.major * 10000 + v.minor * 100 + v.patch;
  return v.major * 1000 + v.minor * 100 + v.patch;
}

bool isTrtCalibrationAlgorithm(const std::string& name) {
  return name == "EntropyCalibration2" || name == "EntropyCalibration" || name == "MinMaxCalibration" ||
         name == "LegacyCalibration";
}

std::string trtCalibrationAlgorithm(CalibMethod method) {
  switch (method) {
    case CalibMethod::Max: return "MinMaxCalibration";
    // Percentile and mse have no TensorRT calibrator. LegacyCalibration (percentile-style, with its
    // own quantile and regression cutoff) is not what computed them either; EntropyCalibration2 is
    // the calibrator trtexec --calib reads a cache with (its RndInt8Calibrator), so the cache is used.
    default: return "EntropyCalibration2";
  }
}

std::string headerAlgorithm(const std::string& header) {
  size_t dash = header.find('-', 4);
  return header.rfind("TRT-", 0) == 0 && dash != std::string::npos ? header.substr(dash + 1) : std::string();
}

std::string calibrationCacheHeader(CalibMethod method, const TrtVersion& version, const std::string& algorithm) {
  return "TRT-" + std::to_string(trtVersionNumber(version)) + "-" +
         (algorithm.empty() ? trtCalibrationAlgorithm(method) : algorithm);
}

std::string calibrationCacheText(const Model& model, const AnalysisResult& r, const std::string& header) {
  const Graph& g = model.graph;
  std::string out = (header.empty() ? calibrationCacheHeader(r.calibration.method) : header) + "\n";
  auto line = [&](ValueId v, float scale) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", floatBits(scale));
    out += g.value(v).name + ": " + hex + "\n";
  };
  for (ValueId v : exportedActivationTensors(g, r)) line(v, r.activations.at(v).scale);
  for (const auto& [v, amax] : implicitRangeTensors(g, r)) line(v, scaleFromAmax(amax, QuantMode::Int8));
  return out;
}

Result<CalibrationCache> parseCalibrationCache(const std::string& text, const std::string& where) {
  CalibrationCache cache;
  std::istringstream in(text);
  std::string line;
  int lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lineNo == 1) {
      if (line.rfind("TRT-", 0) != 0 || std::count(line.begin(), line.end(), '-') < 2) {
        return invalidArgument(where + ":1: expected a TensorRT header like 'TRT-8601-EntropyCalibration2', got '" +
                               line.substr(0, 80) + "'");
      }
      cache.header = line;
      continue;
    }
    if (line.empty()) continue;
    auto bad = [&](const std::string& why) {
      return invalidArgument(where + ":" + std::to_string(lineNo) + ": " + why + " in '" + line.substr(0, 120) + "'");
    };
    // Tensor names may contain ": " themselves; the value is after the last one.
    size_t sep = line.rfind(": ");
    if (sep == std::string::npos || sep == 0) return bad("expected '<tensor>: <8 hex digits>'");
    std::string name = line.substr(0, sep), hex = line.substr(sep + 2);
    if (hex.size() != 8 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
      return bad("expected 8 hex digits after ': '");
    }
    float scale = bitsFloat((uint32_t)std::stoul(hex, nullptr, 16));
    if (!(scale > 0) || !std::isfinite(scale)) {
      char v[32];
      std::snprintf(v, sizeof v, "%g", scale);
      return bad(std::string("scale ") + v + " is not a positive finite number");
    }
    if (!cache.scales.emplace(name, scale).second) return bad("tensor '" + name + "' is given twice");
  }
  if (lineNo == 0) return invalidArgument(where + ": the calibration cache is empty");
  return cache;
}

Result<CalibrationCache> readCalibrationCache(const std::string& path) {
  Status st;
  std::string text = readAll(path, st);
  if (!st) return st;
  return parseCalibrationCache(text, path);
}

// ---- quant_cfg.json --------------------------------------------------------------------------

std::string quantConfigJson(const Model& model, const AnalysisResult& r, const QuantConfigContext& ctx) {
  const Graph& g = model.graph;
  const QuantMode mode = r.plan.mode;
  Json act = Json::object();
  Json qdqPoints = Json::array();
  for (ValueId v : exportedActivationTensors(g, r)) {
    act[g.value(v).name] = (double)exportedAmax(r.activations.at(v), mode);
    qdqPoints.push_back(g.value(v).name);
  }
  for (const auto& [v, amax] : implicitRangeTensors(g, r)) act[g.value(v).name] = (double)amax;

  Json weights = Json::array();
  for (const WeightQuant& w : r.weights) {
    if (!isNodeQuantized(r.plan, w.node)) continue;
    Json amax = Json::array();
    for (float a : w.amax) amax.push_back((double)a);
    weights.push_back(Json{{"node", g.nodes[(size_t)w.node].name},
                           {"input", w.inputIndex},
                           {"tensor", g.value(w.value).name},
                           {"axis", w.axis},
                           {"amax", amax}});
  }
  Json nodes = Json::array();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeQuantState& st = r.plan.nodes[i];
    Json n{{"name", g.nodes[i].name}, {"op_type", g.nodes[i].opType}, {"quantizable", st.quantizable},
           {"quantized", st.quantized}};
    if (!st.quantized) n["reason"] = st.reason;
    nodes.push_back(std::move(n));
  }
  std::string file = ctx.modelPath;
  if (auto slash = file.find_last_of('/'); slash != std::string::npos) file = file.substr(slash + 1);
  Json qs{{"tool", "quantscope"},
          {"version", ctx.toolVersion},
          {"model", Json{{"file", file}, {"fnv1a64", ctx.modelFingerprint}}},
          {"mode", quantModeName(mode)},
          {"calibration", Json{{"method", calibMethodName(r.calibration.method)},
                               {"percentile", r.calibration.percentile},
                               {"bins", r.calibration.bins},
                               {"start_bin", r.calibration.startBin},
                               {"entropy_replace_bin0", r.calibration.entropyReplaceBin0},
                               {"samples", r.samples},
                               {"data", ctx.calibrationData}}},
          {"config", Json{{"nodes_to_exclude", stringList(ctx.config.nodesToExclude)},
                          {"nodes_to_quantize", stringList(ctx.config.nodesToQuantize)},
                          {"op_types_to_exclude", stringList(ctx.config.opTypesToExclude)},
                          {"op_types_to_quantize", stringList(ctx.config.opTypesToQuantize)}}},
          {"export", Json{{"dq_only", ctx.dqOnly},
                          {"use_external_data_format", ctx.externalData},
                          {"trt_version", trtVersionName(ctx.trtVersion)},
                          {"trt_calibrator", ctx.trtAlgorithm.empty() ? trtCalibrationAlgorithm(r.calibration.method)
                                                                      : ctx.trtAlgorithm}}},
          {"qdq_points", qdqPoints},
          {"weights", weights},
          {"nodes", nodes}};
  if (!ctx.depthwiseEqualize.empty()) {
    Json eq = Json::array();
    for (const DepthwiseSmoothingScale& d : ctx.depthwiseEqualize) eq.push_back(Json{{"node", d.consumer}, {"scale", d.scale}});
    qs["depthwise_equalize"] = std::move(eq);
  }
  if (!ctx.depthwiseSmooth.empty()) {
    Json sm = Json::array();
    for (const DepthwiseSmoothingScale& d : ctx.depthwiseSmooth) sm.push_back(Json{{"node", d.consumer}, {"scale", d.scale}});
    qs["depthwise_smooth"] = std::move(sm);
  }
  if (!ctx.pointwiseSmooth.empty()) {
    Json sm = Json::array();
    for (const DepthwiseSmoothingScale& d : ctx.pointwiseSmooth) sm.push_back(Json{{"node", d.consumer}, {"scale", d.scale}});
    qs["pointwise_smooth"] = std::move(sm);
  }
  if (!ctx.headWeightScale.empty()) {
    Json hw = Json::array();
    for (const WeightScaleRatios& w : ctx.headWeightScale) {
      Json ratio = Json::array();
      for (float x : w.ratio) ratio.push_back((double)x);
      hw.push_back(Json{{"node", w.node}, {"tensor", w.tensor}, {"ratio", ratio}});
    }
    qs["head_weight_scale"] = std::move(hw);
  }
  if (!ctx.headBiasCorrection.empty()) {
    Json hb = Json::array();
    for (const HeadBiasSaved& b : ctx.headBiasCorrection) {
      Json shift = Json::array();
      for (float x : b.shift) shift.push_back((double)x);
      hb.push_back(Json{{"node", b.node}, {"tensor", b.tensor}, {"shift", shift}});
    }
    qs["head_bias_correction"] = std::move(hb);
  }
  if (!ctx.remedyMode.empty()) qs["remedy_choice"] = Json{{"mode", ctx.remedyMode}, {"kept", ctx.remediesKept}};
  Json root{{"act_quant_info", act}, {"quantscope", qs}};
  return root.dump(4) + "\n";
}

Result<SavedQuantConfig> parseQuantConfig(const std::string& text, const std::string& where) {
  Json root = Json::parse(text, nullptr, false);
  if (root.is_discarded()) return invalidArgument(where + ": not valid JSON");
  if (!root.is_object() || !root.contains("act_quant_info") || !root["act_quant_info"].is_object()) {
    return invalidArgument(where + ": no \"act_quant_info\" object (not a quant_cfg.json)");
  }
  SavedQuantConfig s;
  for (const auto& [name, v] : root["act_quant_info"].items()) {
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
      return invalidArgument(where + ": act_quant_info['" + name + "'] is " + v.dump() + ", not a positive number");
    }
    s.actAmax[name] = (float)v.get<double>();
  }
  if (!root.contains("quantscope")) return s;  // PPQ's file: amax values only
  s.hasQuantscope = true;
  const Json& q = root["quantscope"];
  std::string key;
  try {
    auto str = [&](const Json& o, const char* k, std::string& out) {
      key = k;
      if (o.contains(k)) out = o.at(k).get<std::string>();
    };
    // nlohmann's get<int>() static_casts a float such as 1e30 (UB, found by fuzz_quant_files):
    // integers are taken only from integer JSON numbers within the target type's range.
    auto integer = [&]<class T>(const Json& v, T& out) {
      bool fits = false;
      if (v.is_number_unsigned()) fits = v.get<uint64_t>() <= (uint64_t)std::numeric_limits<T>::max();
      else if (v.is_number_integer())
        fits = v.get<int64_t>() >= (int64_t)std::numeric_limits<T>::min() &&
               (v.get<int64_t>() < 0 || (uint64_t)v.get<int64_t>() <= (uint64_t)std::numeric_limits<T>::max());
      if (!fits) throw std::out_of_range(key);
      out = v.is_number_unsigned() ? (T)v.get<uint64_t>() : (T)v.get<int64_t>();
    };
    auto strings = [&](const Json& o, const char* k, std::vector<std::string>& out) {
      key = k;
      if (o.contains(k)) out = o.at(k).get<std::vector<std::string>>();
    };
    str(q, "version", s.toolVersion);
    if (q.contains("model")) {
      str(q["model"], "file", s.modelFile);
      str(q["model"], "fnv1a64", s.modelFingerprint);
    }
    std::string mode = "int8";
    str(q, "mode", mode);
    if (!parseQuantMode(mode, s.calibration.mode)) return invalidArgument(where + ": mode '" + mode + "' is not int8 or fp8");
    if (q.contains("calibration")) {
      const Json& c = q["calibration"];
      std::string method = "max";
      str(c, "method", method);
      if (!parseCalibMethod(method, s.calibration.method)) {
        return invalidArgument(where + ": calibration method '" + method + "' is not max, entropy, percentile or mse");
      }
      key = "percentile";
      if (c.contains("percentile")) s.calibration.percentile = c.at("percentile").get<double>();
      key = "bins";
      if (c.contains("bins")) integer(c.at("bins"), s.calibration.bins);
      key = "start_bin";
      if (c.contains("start_bin")) integer(c.at("start_bin"), s.calibration.startBin);
      key = "entropy_replace_bin0";
      if (c.contains("entropy_replace_bin0")) s.calibration.entropyReplaceBin0 = c.at("entropy_replace_bin0").get<bool>();
      key = "samples";
      if (c.contains("samples")) integer(c.at("samples"), s.samples);
      str(c, "data", s.calibrationData);
    }
    if (q.contains("config")) {
      const Json& c = q["config"];
      strings(c, "nodes_to_exclude", s.config.nodesToExclude);
      strings(c, "nodes_to_quantize", s.config.nodesToQuantize);
      strings(c, "op_types_to_exclude", s.config.opTypesToExclude);
      strings(c, "op_types_to_quantize", s.config.opTypesToQuantize);
    }
    if (q.contains("export")) {
      key = "dq_only";
      if (q["export"].contains("dq_only")) s.dqOnly = q["export"].at("dq_only").get<bool>();
      key = "use_external_data_format";
      if (q["export"].contains("use_external_data_format"))
        s.externalData = q["export"].at("use_external_data_format").get<bool>();
      std::string trt;
      str(q["export"], "trt_version", trt);
      if (!trt.empty()) {
        TrtVersion v;
        QS_RETURN_IF_ERROR(parseTrtVersion(trt, v, where + ": quantscope.export.trt_version"));
        s.trtVersion = v;
      }
      str(q["export"], "trt_calibrator", s.trtAlgorithm);
      if (!s.trtAlgorithm.empty() && !isTrtCalibrationAlgorithm(s.trtAlgorithm)) {
        return invalidArgument(where + ": quantscope.export.trt_calibrator '" + s.trtAlgorithm +
                               "' is not EntropyCalibration2, EntropyCalibration, MinMaxCalibration or LegacyCalibration");
      }
    }
    key = "weights";
    if (q.contains("weights")) {
      for (const Json& w : q.at("weights")) {
        SavedQuantConfig::Weight sw;
        key = "weights.node";
        sw.node = w.at("node").get<std::string>();
        key = "weights.tensor";
        sw.tensor = w.at("tensor").get<std::string>();
        key = "weights.input";
        integer(w.at("input"), sw.input);
        key = "weights.axis";
        integer(w.at("axis"), sw.axis);
        key = "weights.amax";
        for (const Json& a : w.at("amax")) sw.amax.push_back((float)a.get<double>());
        s.weights.push_back(std::move(sw));
      }
    }
    key = "nodes";
    if (q.contains("nodes")) {
      for (const Json& n : q.at("nodes")) {
        SavedQuantConfig::NodeState ns;
        key = "nodes.name";
        ns.name = n.at("name").get<std::string>();
        key = "nodes.op_type";
        if (n.contains("op_type")) ns.opType = n.at("op_type").get<std::string>();
        key = "nodes.quantizable";
        ns.quantizable = n.at("quantizable").get<bool>();
        key = "nodes.quantized";
        ns.quantized = n.at("quantized").get<bool>();
        key = "nodes.reason";
        if (n.contains("reason")) ns.reason = n.at("reason").get<std::string>();
        s.nodes.push_back(std::move(ns));
      }
    }
    key = "depthwise_equalize";
    if (q.contains("depthwise_equalize")) {
      for (const Json& d : q.at("depthwise_equalize")) {
        DepthwiseSmoothingScale sc;
        key = "depthwise_equalize.node";
        sc.consumer = d.at("node").get<std::string>();
        key = "depthwise_equalize.scale";
        sc.scale = d.at("scale").get<std::vector<double>>();
        s.depthwiseEqualize.push_back(std::move(sc));
      }
    }
    key = "depthwise_smooth";
    if (q.contains("depthwise_smooth")) {
      for (const Json& d : q.at("depthwise_smooth")) {
        DepthwiseSmoothingScale sc;
        key = "depthwise_smooth.node";
        sc.consumer = d.at("node").get<std::string>();
        key = "depthwise_smooth.scale";
        sc.scale = d.at("scale").get<std::vector<double>>();
        s.depthwiseSmooth.push_back(std::move(sc));
      }
    }
    key = "pointwise_smooth";
    if (q.contains("pointwise_smooth")) {
      for (const Json& d : q.at("pointwise_smooth")) {
        DepthwiseSmoothingScale sc;
        key = "pointwise_smooth.node";
        sc.consumer = d.at("node").get<std::string>();
        key = "pointwise_smooth.scale";
        sc.scale = d.at("scale").get<std::vector<double>>();
        s.pointwiseSmooth.push_back(std::move(sc));
      }
    }
    key = "head_weight_scale";
    if (q.contains("head_weight_scale")) {
      for (const Json& d : q.at("head_weight_scale")) {
        WeightScaleRatios w;
        key = "head_weight_scale.node";
        w.node = d.at("node").get<std::string>();
        key = "head_weight_scale.tensor";
        w.tensor = d.at("tensor").get<std::string>();
        key = "head_weight_scale.ratio";
        for (const Json& x : d.at("ratio")) {
          const double v = x.get<double>();
          if (!(v > 0) || !std::isfinite(v)) return invalidArgument(where + ": quantscope." + key + ": expected positive numbers");
          w.ratio.push_back((float)v);
        }
        s.headWeightScale.push_back(std::move(w));
      }
    }
    key = "head_bias_correction";
    if (q.contains("head_bias_correction")) {
      for (const Json& d : q.at("head_bias_correction")) {
        HeadBiasSaved b;
        key = "head_bias_correction.node";
        b.node = d.at("node").get<std::string>();
        key = "head_bias_correction.tensor";
        b.tensor = d.at("tensor").get<std::string>();
        key = "head_bias_correction.shift";
        for (const Json& x : d.at("shift")) {
          const double v = x.get<double>();
          if (!std::isfinite(v)) return invalidArgument(where + ": quantscope." + key + ": expected finite numbers");
          b.shift.push_back((float)v);
        }
        s.headBiasCorrection.push_back(std::move(b));
      }
    }
    key = "remedy_choice";
    if (q.contains("remedy_choice")) {
      key = "remedy_choice.mode";
      s.remedyMode = q.at("remedy_choice").at("mode").get<std::string>();
      key = "remedy_choice.kept";
      s.remediesKept = q.at("remedy_choice").at("kept").get<std::vector<std::string>>();
    }
  } catch (const std::exception&) {
    return invalidArgument(where + ": quantscope." + key + " is missing or has the wrong type");
  }
  return s;
}

Result<SavedQuantConfig> readQuantConfig(const std::string& path) {
  Status st;
  std::string text = readAll(path, st);
  if (!st) return st;
  return parseQuantConfig(text, path);
}

Result<QuantConfig> configForSavedStates(const SavedQuantConfig& saved, const Model& model, const QuantConfig& extra,
                                         const std::string& where) {
  const Graph& g = model.graph;
  auto another = [&](const std::string& why) {
    return invalidArgument(where + ": " + why + ": the config was made for another model than " + model.path);
  };
  for (const auto& [name, amax] : saved.actAmax) {
    if (g.findValue(name) == kNoValue) return another("tensor '" + name + "' is not in the model");
  }
  std::map<std::string, NodeId> byName;
  for (size_t i = 0; i < g.nodes.size(); ++i) byName.emplace(g.nodes[i].name, (NodeId)i);
  if (!saved.nodes.empty() && saved.nodes.size() != g.nodes.size()) {
    return another("it lists " + std::to_string(saved.nodes.size()) + " nodes, the model has " +
                   std::to_string(g.nodes.size()));
  }
  for (const auto& n : saved.nodes) {
    auto it = byName.find(n.name);
    if (it == byName.end()) return another("node '" + n.name + "' is not in the model");
    if (!n.opType.empty() && g.nodes[(size_t)it->second].opType != n.opType) {
      return another("node '" + n.name + "' is a " + g.nodes[(size_t)it->second].opType + ", not a " + n.opType);
    }
  }
  for (const auto& w : saved.weights) {
    ValueId id = g.findValue(w.tensor);
    if (id == kNoValue || !g.value(id).constant) return another("weight '" + w.tensor + "' is not in the model");
    auto amax = perChannelAbsMax(*g.value(id).constant, w.axis);
    if (!amax) return another("weight '" + w.tensor + "': " + amax.status().message());
    // A head weight scale search's ratios: the saved amax is the model's times the ratio, in float
    // as quantizeWeights() computes it.
    for (const WeightScaleRatios& hw : saved.headWeightScale) {
      if (hw.tensor != w.tensor) continue;
      if (hw.ratio.size() != amax->size()) {
        return another("quantscope.head_weight_scale '" + w.tensor + "' has " + std::to_string(hw.ratio.size()) +
                       " ratios, the weight " + std::to_string(amax->size()) + " channels");
      }
      for (size_t c = 0; c < amax->size(); ++c) (*amax)[c] *= hw.ratio[c];
    }
    if (amax->size() != w.amax.size()) {
      return another("weight '" + w.tensor + "' has " + std::to_string(amax->size()) + " channels on axis " +
                     std::to_string(w.axis) + ", the config " + std::to_string(w.amax.size()));
    }
    for (size_t c = 0; c < amax->size(); ++c) {
      if ((*amax)[c] != w.amax[c]) {
        char buf[128];
        std::snprintf(buf, sizeof buf, "channel %zu amax is %.9g in the model, %.9g in the config", c, (double)(*amax)[c],
                      (double)w.amax[c]);
        return another("weight '" + w.tensor + "' " + buf);
      }
    }
  }
  QuantConfig cfg = saved.config;
  auto append = [](std::vector<std::string>& to, const std::vector<std::string>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  append(cfg.nodesToExclude, extra.nodesToExclude);
  append(cfg.nodesToQuantize, extra.nodesToQuantize);
  append(cfg.opTypesToExclude, extra.opTypesToExclude);
  append(cfg.opTypesToQuantize, extra.opTypesToQuantize);
  if (saved.nodes.empty()) return cfg;
  QuantPlan plan = planQuantization(g, saved.calibration.mode);
  std::vector<std::string> ignored;
  auto applied = applyConfig(plan, g, cfg, ignored);
  if (!applied) return Status(applied.status().code(), where + ": " + applied.status().message());
  for (const auto& n : saved.nodes) {
    NodeId id = byName.at(n.name);
    if (!n.quantized && plan.nodes[(size_t)id].quantized) cfg.nodesToExclude.push_back(exactNamePattern(n.name));
  }
  return cfg;
}

Status checkSavedStates(const SavedQuantConfig& saved, const Model& model, const QuantPlan& plan, bool extraGiven,
                        const std::string& where) {
  const Graph& g = model.graph;
  std::map<std::string, NodeId> byName;
  for (size_t i = 0; i < g.nodes.size(); ++i) byName.emplace(g.nodes[i].name, (NodeId)i);
  for (const auto& n : saved.nodes) {
    auto it = byName.find(n.name);
    if (it == byName.end()) continue;
    bool now = plan.nodes[(size_t)it->second].quantized;
    if (n.quantized && !now && !extraGiven) {
      return invalidArgument(where + ": node '" + n.name + "' was quantized when the config was saved but cannot be now (" +
                             plan.nodes[(size_t)it->second].reason + "): the config was made for another model than " +
                             model.path);
    }
  }
  return Status::ok();
}

}  // namespace qs
