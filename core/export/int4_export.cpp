#include "core/export/int4_export.h"

#include <google/protobuf/io/coded_stream.h>
#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/export/report_json.h"
#include "qs_version.h"

namespace qs {

namespace {

constexpr int kInt4 =
    22; // TensorProto.INT4 (ONNX 1.16), unknown to libonnx 1.12
constexpr int64_t kInt4Opset = 21;

bool isDefaultDomain(const std::string &d) {
  return d.empty() || d == "ai.onnx";
}

void collectNames(const onnx::GraphProto &g,
                  std::unordered_set<std::string> &names) {
  for (const auto &t : g.initializer())
    names.insert(t.name());
  for (const auto &v : g.input())
    names.insert(v.name());
  for (const auto &v : g.output())
    names.insert(v.name());
  for (const auto &n : g.node()) {
    names.insert(n.name());
    for (const auto &s : n.output())
      names.insert(s);
    for (const auto &a : n.attribute()) {
      if (a.has_g())
        collectNames(a.g(), names);
      for (const auto &sg : a.graphs())
        collectNames(sg, names);
    }
  }
}

struct Names {
  std::unordered_set<std::string> used;
  std::string make(const std::string &base) {
    std::string n = base;
    for (int i = 1; used.count(n); ++i)
      n = base + "_" + std::to_string(i);
    used.insert(n);
    return n;
  }
};

bool usedIn(const onnx::GraphProto &g, const std::string &name) {
  for (const auto &n : g.node()) {
    for (const auto &s : n.input())
      if (s == name)
        return true;
    for (const auto &a : n.attribute()) {
      if (a.has_g() && usedIn(a.g(), name))
        return true;
      for (const auto &sg : a.graphs())
        if (usedIn(sg, name))
          return true;
    }
  }
  for (const auto &o : g.output())
    if (o.name() == name)
      return true;
  return false;
}

void addInitializer(onnx::GraphProto &g, const std::string &name, int dtype,
                    const std::vector<int64_t> &dims, const void *data,
                    size_t bytes) {
  auto *t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(dtype);
  for (int64_t d : dims)
    t->add_dims(d);
  t->set_raw_data(std::string(static_cast<const char *>(data), bytes));
}

void setInt(onnx::NodeProto &n, const std::string &key, int64_t v) {
  auto *a = n.add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

// Opset `from` -> 21 for the ops of `g` and its subgraphs whose signature
// changes in between.
Status upgradeGraph(onnx::GraphProto &g, int64_t from, Names &names,
                    const std::string &where) {
  static const std::set<std::string> kReduce = {
      "ReduceL1",   "ReduceL2",  "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
      "ReduceMean", "ReduceMin", "ReduceProd",   "ReduceSumSquare"};
  for (auto &n : *g.mutable_node()) {
    for (auto &a : *n.mutable_attribute()) {
      if (a.has_g())
        QS_RETURN_IF_ERROR(upgradeGraph(*a.mutable_g(), from, names, where));
      for (auto &sg : *a.mutable_graphs())
        QS_RETURN_IF_ERROR(upgradeGraph(sg, from, names, where));
    }
    if (!isDefaultDomain(n.domain()))
      continue;
    const std::string label = "node '" + n.name() + "' (" + n.op_type() + ")";
    auto refuse = [&](int64_t at) {
      return unsupported(where + ": " + label + " changes signature at opset " +
                         std::to_string(at) + ": cannot raise the opset from " +
                         std::to_string(from) +
                         " to 21 for INT4 DequantizeLinear");
    };
    if (kReduce.count(n.op_type()) && from < 18) {
      for (int i = 0; i < n.attribute_size(); ++i) {
        if (n.attribute(i).name() != "axes")
          continue;
        std::vector<int64_t> axes(n.attribute(i).ints().begin(),
                                  n.attribute(i).ints().end());
        n.mutable_attribute()->DeleteSubrange(i, 1);
        const std::string name =
            names.make((n.name().empty() ? n.output(0) : n.name()) + "_axes");
        addInitializer(g, name, onnx::TensorProto::INT64,
                       {(int64_t)axes.size()}, axes.data(), axes.size() * 8);
        while (n.input_size() < 1)
          n.add_input("");
        n.add_input(name);
        break;
      }
    } else if (n.op_type() == "GridSample" && from < 20) {
      for (auto &a : *n.mutable_attribute()) {
        if (a.name() != "mode")
          continue;
        if (a.s() == "bilinear")
          a.set_s("linear");
        if (a.s() == "bicubic")
          a.set_s("cubic");
      }
    } else if (n.op_type() == "DFT" && from < 20) {
      return refuse(20);
    } else if (n.op_type() == "GroupNormalization" && from < 21) {
      return refuse(21);
    }
  }
  return Status::ok();
}

using Json = nlohmann::ordered_json;

} // namespace

Result<Int4ExportedModel> buildInt4Model(const Model &model,
                                         const Int4Result &result,
                                         const Int4ExportOptions &options) {
  const std::string &where = model.path;
  const Graph &g = model.graph;
  std::ifstream in(model.path, std::ios::binary);
  if (!in)
    return ioError(where + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  if (bytes.size() > (size_t)INT_MAX)
    return unsupported(where + ": the file is over 2 GB");
  onnx::ModelProto proto;
  google::protobuf::io::CodedInputStream stream(
      reinterpret_cast<const uint8_t *>(bytes.data()), (int)bytes.size());
  stream.SetTotalBytesLimit(INT_MAX);
  stream.SetRecursionLimit(64);
  if (!proto.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage()) {
    return invalidModel(where +
                        ": not a valid ONNX model (protobuf parsing failed)");
  }
  bytes.clear();
  if (!proto.has_graph())
    return invalidModel(where + ": the file holds no graph");
  onnx::GraphProto &gp = *proto.mutable_graph();
  for (auto &t : *gp.mutable_initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL)
      continue;
    const ValueId id = g.findValue(t.name());
    if (id == kNoValue || !g.value(id).constant)
      return invalidModel(where + ": initializer '" + t.name() +
                          "' was not loaded");
    const Tensor &c = *g.value(id).constant;
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_raw_data(
        std::string(static_cast<const char *>(c.raw()), c.byteSize()));
  }

  Int4ExportedModel out;
  onnx::OperatorSetIdProto *os = nullptr;
  for (auto &o : *proto.mutable_opset_import())
    if (isDefaultDomain(o.domain()))
      os = &o;
  if (!os) {
    os = proto.add_opset_import();
    os->set_domain("");
    os->set_version(model.defaultOpset());
  }
  out.opsetBefore = os->version();
  Names names;
  collectNames(gp, names.used);
  if (out.opsetBefore < kInt4Opset) {
    QS_RETURN_IF_ERROR(upgradeGraph(gp, out.opsetBefore, names, where));
    os->set_version(kInt4Opset);
  }
  out.opsetAfter = os->version();
  if (proto.ir_version() < 10)
    proto.set_ir_version(10); // opset 21 needs IR 10

  // The proto node of each quantized IR node, through an output name.
  std::unordered_map<std::string, int> protoByOutput;
  for (int i = 0; i < gp.node_size(); ++i)
    for (const auto &o : gp.node(i).output())
      if (!o.empty())
        protoByOutput.emplace(o, i);

  std::vector<onnx::NodeProto>
      front; // DequantizeLinear nodes (initializers only)
  std::unordered_map<std::string, std::string>
      scaledName; // activation -> Mul output
  std::unordered_map<std::string, onnx::NodeProto>
      mulAfter; // activation -> its Mul
  std::vector<std::string> replaced;
  for (const Int4Layer &l : result.layers) {
    const Node &n = g.nodes[(size_t)l.node];
    int pi = -1;
    for (ValueId o : n.outputs) {
      if (o == kNoValue)
        continue;
      auto it = protoByOutput.find(g.value(o).name);
      if (it != protoByOutput.end())
        pi = it->second;
      break;
    }
    if (pi < 0 || gp.node(pi).op_type() != n.opType ||
        gp.node(pi).input_size() < 2 || gp.node(pi).input(1) != l.weightName) {
      return invalidModel(where + ": node '" + n.name + "' (" + n.opType +
                          ") was not found in the file");
    }
    const Int4Weight &w = l.weight;
    const int64_t nb = w.blocks();
    std::vector<int8_t> q = w.q;
    std::vector<float> s = w.scale;
    std::vector<int64_t> qDims{w.k, w.n}, sDims{nb, w.n};
    int64_t axis = 0;
    if (l.transposed) {
      for (int64_t i = 0; i < w.k; ++i)
        for (int64_t j = 0; j < w.n; ++j)
          q[(size_t)(j * w.k + i)] = w.q[(size_t)(i * w.n + j)];
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t j = 0; j < w.n; ++j)
          s[(size_t)(j * nb + b)] = w.scale[(size_t)(b * w.n + j)];
      qDims = {w.n, w.k};
      sDims = {w.n, nb};
      axis = 1;
    }
    const std::vector<uint8_t> packed = packInt4(q);
    const std::string qName = names.make(l.weightName + "_int4");
    const std::string sName = names.make(l.weightName + "_scale");
    const std::string dqOut =
        names.make(l.weightName + "_DequantizeLinear_Output");
    addInitializer(gp, qName, kInt4, qDims, packed.data(), packed.size());
    addInitializer(gp, sName, onnx::TensorProto::FLOAT, sDims, s.data(),
                   s.size() * 4);
    onnx::NodeProto dq;
    dq.set_op_type("DequantizeLinear");
    dq.set_name(names.make(l.weightName + "_DequantizeLinear"));
    dq.add_input(qName);
    dq.add_input(sName);
    dq.add_output(dqOut);
    setInt(dq, "axis", axis);
    setInt(dq, "block_size", w.block);
    front.push_back(std::move(dq));
    gp.mutable_node(pi)->set_input(1, dqOut);
    replaced.push_back(l.weightName);

    if (!l.activationScale.empty()) {
      auto it = scaledName.find(l.activationName);
      if (it == scaledName.end()) {
        const std::string base = l.activationName + "_awq";
        const std::string scale = names.make(base + "_scale");
        const std::string mulOut = names.make(base + "_scaled");
        addInitializer(gp, scale, onnx::TensorProto::FLOAT,
                       {(int64_t)l.activationScale.size()},
                       l.activationScale.data(), l.activationScale.size() * 4);
        onnx::NodeProto mul;
        mul.set_op_type("Mul");
        mul.set_name(names.make(base + "_Mul"));
        mul.add_input(l.activationName);
        mul.add_input(scale);
        mul.add_output(mulOut);
        mulAfter.emplace(l.activationName, std::move(mul));
        it = scaledName.emplace(l.activationName, mulOut).first;
      }
      gp.mutable_node(pi)->set_input(0, it->second);
    }
  }

  // Node order: the DequantizeLinear nodes and the Muls of graph inputs first,
  // then each Mul right after the node producing its activation.
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (auto &n : front)
    *nodes.Add() = std::move(n);
  for (auto &[act, mul] : mulAfter)
    if (!protoByOutput.count(act))
      *nodes.Add() = mul;
  for (int i = 0; i < gp.node_size(); ++i) {
    *nodes.Add() = gp.node(i);
    for (const auto &o : gp.node(i).output()) {
      auto it = mulAfter.find(o);
      if (it != mulAfter.end())
        *nodes.Add() = it->second;
    }
  }
  gp.mutable_node()->Swap(&nodes);

  // The float weights nothing reads any more.
  std::unordered_set<std::string> drop;
  for (const std::string &w : replaced)
    if (!usedIn(gp, w))
      drop.insert(w);
  google::protobuf::RepeatedPtrField<onnx::TensorProto> inits;
  for (auto &t : *gp.mutable_initializer())
    if (!drop.count(t.name()))
      *inits.Add() = std::move(t);
  gp.mutable_initializer()->Swap(&inits);
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
  for (auto &v : *gp.mutable_input())
    if (!drop.count(v.name()))
      *inputs.Add() = std::move(v);
  gp.mutable_input()->Swap(&inputs);

  if (options.externalData ||
      proto.ByteSizeLong() > options.externalDataThresholdBytes)
    out.externalData = moveInitializersToExternal(
        proto, options.externalDataName, kExternalDataMinTensorBytes,
        &model.graph);
  if (proto.ByteSizeLong() > (size_t)INT_MAX)
    return unsupported(where + ": the INT4 model would exceed protobuf's 2 GB "
                               "even with its initializers as external data");
  if (!proto.SerializeToString(&out.bytes))
    return runtimeError(where + ": serializing the INT4 model failed");
  return out;
}

std::string int4ReportJson(const Model &model, const Int4Result &r,
                           const std::string &calibrationData,
                           const std::vector<std::string> &warnings) {
  Json j;
  j["tool"] = {{"name", "quantscope"}, {"version", kVersion}};
  j["model"] = model.path;
  j["settings"] = {{"quantize_mode", "int4"},
                   {"calibration_method", int4MethodName(r.method)},
                   {"block_size", r.blockSize},
                   {"samples", r.samples},
                   {"calibration_data",
                    calibrationData.empty() ? "random" : calibrationData}};
  Json outputs = Json::array();
  for (const Int4OutputResult &o : r.outputs) {
    Json e = metricsJson(o.metrics);
    e["name"] = o.name;
    e["top1_agreement"] = jsonNumber(o.top1Agreement);
    outputs.push_back(e);
  }
  j["outputs"] = outputs;
  Json layers = Json::array();
  for (const Int4Layer &l : r.layers) {
    layers.push_back({{"node", l.nodeName},
                      {"op_type", l.opType},
                      {"weight", l.weightName},
                      {"k", l.weight.k},
                      {"n", l.weight.n},
                      {"layerwise", metricsJson(l.layerwise)},
                      {"graphwise", metricsJson(l.graphwise)},
                      {"awq_alpha", jsonNumber(l.awqAlpha)},
                      {"mean_clip", jsonNumber(l.meanClip)},
                      {"activation_scaled", !l.activationScale.empty()},
                      {"weight_bytes_before", l.bytesBefore},
                      {"weight_bytes_after", l.bytesAfter}});
  }
  j["int4_layers"] = layers;
  j["weight_bytes"] = {
      {"before", r.bytesBefore},
      {"after", r.bytesAfter},
      {"ratio",
       r.bytesBefore ? (double)r.bytesAfter / (double)r.bytesBefore : 0.0}};
  j["skipped"] = r.skipped;
  j["warnings"] = warnings;
  return j.dump(2) + "\n";
}

Result<ExportBundle> buildInt4Bundle(const Model &model,
                                     const Int4Result &result,
                                     const ExportTarget &target,
                                     const std::string &calibrationData,
                                     const std::vector<std::string> &warnings,
                                     Int4ExportOptions options) {
  namespace fs = std::filesystem;
  const std::string modelOut =
      target.outputDir.empty()
          ? target.outputPath
          : (fs::path(target.outputDir) / "quantized.onnx").string();
  std::error_code ec;
  if (fs::exists(modelOut, ec) && fs::equivalent(modelOut, model.path, ec)) {
    return invalidArgument(modelOut + ": would overwrite the input model");
  }
  options.externalDataName = fs::path(modelOut).filename().string() + ".data";
  const std::string dataOut =
      (fs::path(modelOut).parent_path() / options.externalDataName).string();
  if (fs::exists(dataOut, ec) && fs::equivalent(dataOut, model.path, ec)) {
    return invalidArgument(dataOut + ": would overwrite the input model");
  }
  auto m = buildInt4Model(model, result, options);
  if (!m)
    return m.status();
  ExportBundle b;
  b.opsetBefore = m->opsetBefore;
  b.opsetAfter = m->opsetAfter;
  b.weightPoints = result.layers.size();
  b.files.push_back({modelOut, std::move(m->bytes)});
  if (!m->externalData.name.empty())
    b.files.push_back({dataOut, std::move(m->externalData.bytes)});
  if (!target.outputDir.empty()) {
    b.files.push_back(
        {(fs::path(target.outputDir) / "report.json").string(),
         int4ReportJson(model, result, calibrationData, warnings)});
  }
  return b;
}

} // namespace qs
