#include "core/export/exporter.h"

#include <google/protobuf/io/coded_stream.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/version_converter/convert.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/exec/executor.h"
#include "core/export/high_precision_export.h"
#include "core/numeric/fake_quant.h"
#include "core/quant/quant_config.h"
#include "core/export/external_data.h"
#include "core/export/quant_files.h"

namespace qs {

namespace {

// Opsets the export needs: 13 for the per-channel `axis` (int8), 19 for FLOAT8E4M3FN (fp8).
constexpr int64_t kInt8Opset = 13;
constexpr int64_t kFp8Opset = 19;
// The newest opset libonnx 1.12's version converter and checker know; fp8 goes past it by hand.
constexpr int64_t kConverterMaxOpset = 17;
// TensorProto.DataType FLOAT8E4M3FN: data_type is a plain int32 field, so libonnx 1.12's classes
// carry it although their enum predates it.
constexpr int kFloat8E4M3FN = 17;
// IR version 9 (ONNX 1.14) introduced the float 8 types.
constexpr int64_t kFp8IrVersion = 9;

bool isDefaultDomain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

onnx::OperatorSetIdProto* defaultOpsetImport(onnx::ModelProto& m) {
  for (auto& os : *m.mutable_opset_import())
    if (isDefaultDomain(os.domain())) return &os;
  return nullptr;
}

// Every name used in a graph and its subgraphs (values, nodes, initializers), so that inserted
// names never collide with an existing one.
void collectNames(const onnx::GraphProto& g, std::unordered_set<std::string>& names) {
  for (const auto& t : g.initializer()) names.insert(t.name());
  for (const auto& v : g.input()) names.insert(v.name());
  for (const auto& v : g.output()) names.insert(v.name());
  for (const auto& v : g.value_info()) names.insert(v.name());
  for (const auto& n : g.node()) {
    names.insert(n.name());
    for (const auto& s : n.input()) names.insert(s);
    for (const auto& s : n.output()) names.insert(s);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collectNames(a.g(), names);
      for (const auto& sg : a.graphs()) collectNames(sg, names);
    }
  }
}

// Names a subgraph reads from its enclosing scopes (or that any node reads), for the unused check.
void collectUses(const onnx::GraphProto& g, std::unordered_set<std::string>& used) {
  for (const auto& n : g.node()) {
    for (const auto& s : n.input()) used.insert(s);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collectUses(a.g(), used);
      for (const auto& sg : a.graphs()) collectUses(sg, used);
    }
  }
  for (const auto& v : g.output()) used.insert(v.name());
}

class NameAllocator {
 public:
  explicit NameAllocator(const onnx::GraphProto& g) { collectNames(g, m_used); }
  std::string take(const std::string& base) {
    std::string name = base;
    for (int i = 1; m_used.count(name); ++i) name = base + "_" + std::to_string(i);
    m_used.insert(name);
    return name;
  }

 private:
  std::unordered_set<std::string> m_used;
};

void setRaw(onnx::TensorProto* t, const void* data, size_t bytes) {
  t->set_raw_data(std::string(static_cast<const char*>(data), bytes));
}

onnx::TensorProto* addInitializer(onnx::GraphProto& g, const std::string& name, int dtype, const std::vector<int64_t>& dims,
                                  const void* data, size_t bytes) {
  auto* t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(dtype);
  for (int64_t d : dims) t->add_dims(d);
  setRaw(t, data, bytes);
  return t;
}

onnx::NodeProto makeNode(const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                         const std::string& output, int64_t axis = INT64_MIN) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (const auto& i : inputs) n.add_input(i);
  n.add_output(output);
  if (axis != INT64_MIN) {
    auto* a = n.add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(axis);
  }
  return n;
}

// ExportOptions::insertedNodes: each node of `g` named there, written before its first reader
// (found by output name), its constant inputs as initializers, its readers' inputs rewired.
Status insertRemedyNodes(onnx::GraphProto& gp, const Graph& g, const std::vector<std::string>& names,
                         const std::string& where) {
  std::unordered_map<std::string, NodeId> byName;
  for (NodeId id = 0; id < (NodeId)g.nodes.size(); ++id) byName.emplace(g.nodes[(size_t)id].name, id);
  std::set<std::string> initializers;
  for (const auto& t : gp.initializer()) initializers.insert(t.name());
  for (const std::string& name : names) {
    auto it = byName.find(name);
    if (it == byName.end()) return invalidArgument(where + ": node '" + name + "' inserted by a remedy is not in the model");
    const Node& n = g.nodes[(size_t)it->second];
    if (n.outputs.size() != 1 || n.outputs[0] == kNoValue || !n.attributes.empty() || !n.domain.empty())
      return invalidArgument(where + ": node '" + name + "' inserted by a remedy is not a one-output node without attributes");
    const Value& out = g.value(n.outputs[0]);
    onnx::NodeProto np;
    np.set_op_type(n.opType);
    np.set_name(n.name);
    np.add_output(out.name);
    for (ValueId in : n.inputs) {
      const Value& v = g.value(in);
      np.add_input(v.name);
      if (!v.constant || initializers.count(v.name)) continue;
      if (v.constant->dtype() != DType::Float)
        return invalidArgument(where + ": node '" + name + "': constant '" + v.name + "' is not float32");
      std::vector<int64_t> dims(v.constant->shape().begin(), v.constant->shape().end());
      addInitializer(gp, v.name, onnx::TensorProto::FLOAT, dims, v.constant->raw(), v.constant->byteSize());
      initializers.insert(v.name);
    }
    // Its readers in the file, rewired from the input they read there to this node's output.
    int first = gp.node_size();
    for (NodeId c : out.consumers) {
      const Node& cn = g.nodes[(size_t)c];
      int found = -1;
      for (int i = 0; i < gp.node_size() && found < 0; ++i)
        for (const auto& o : gp.node(i).output())
          if (!cn.outputs.empty() && cn.outputs[0] != kNoValue && o == g.value(cn.outputs[0]).name) found = i;
      if (found < 0) return invalidModel(where + ": node '" + cn.name + "', a reader of '" + name + "', is not in the file");
      onnx::NodeProto& cp = *gp.mutable_node(found);
      for (size_t k = 0; k < cn.inputs.size() && (int)k < cp.input_size(); ++k)
        if (cn.inputs[k] == n.outputs[0]) cp.set_input((int)k, out.name);
      first = std::min(first, found);
    }
    auto* nodes = gp.mutable_node();
    *nodes->Add() = std::move(np);
    for (int i = nodes->size() - 1; i > first; --i) nodes->SwapElements(i, i - 1);
  }
  return Status::ok();
}

// What is inserted for one quantized tensor: its Q/DQ nodes, emitted before the first consumer.
struct Pair {
  std::vector<onnx::NodeProto> nodes;
  std::string output;  // the DequantizeLinear output the consumers read
  bool emitted = false;
};

// A rewiring of one consumer input.
struct InputRewrite {
  size_t inputIndex;
  std::string expected;  // the tensor the input must read (checks the node mapping)
  std::string key;       // into the pair table
};

bool knownRank(const onnx::GraphProto& g, const std::string& name) {
  auto has = [&](const auto& list) {
    for (const auto& v : list)
      if (v.name() == name && v.type().has_tensor_type() && v.type().tensor_type().has_shape()) return true;
    return false;
  };
  if (has(g.input()) || has(g.value_info()) || has(g.output())) return true;
  for (const auto& t : g.initializer())
    if (t.name() == name) return true;
  return false;
}

// Raises the default-domain opset to `target` (at most kConverterMaxOpset) with libonnx's converter.
Status raiseOpset(onnx::ModelProto& proto, const Model& model, const ExportOptions& options, const std::string& where,
                  int64_t target, const char* why) {
  onnx::OperatorSetIdProto* os = defaultOpsetImport(proto);
  const int64_t from = os->version();
  // Softmax, LogSoftmax and Hardmax changed meaning at 13 (one axis instead of a 2-D coercion):
  // the adapter needs the input's rank, which files often leave undeclared. Give it the rank seen
  // at run time (dims unknown) for the conversion only.
  std::vector<std::string> temporary;
  if (from < 13) {
    for (const auto& n : proto.graph().node()) {
      if (!isDefaultDomain(n.domain()) || n.input_size() < 1) continue;
      if (n.op_type() != "Softmax" && n.op_type() != "LogSoftmax" && n.op_type() != "Hardmax") continue;
      const std::string& x = n.input(0);
      if (knownRank(proto.graph(), x) || std::find(temporary.begin(), temporary.end(), x) != temporary.end()) continue;
      int rank = -1;
      if (auto it = options.observedRanks.find(x); it != options.observedRanks.end()) rank = it->second;
      ValueId id = model.graph.findValue(x);
      if (rank < 0 && id != kNoValue && model.graph.value(id).shape) rank = (int)model.graph.value(id).shape->size();
      if (rank < 0) {
        return unsupported(where + ": node '" + n.name() + "' (" + n.op_type() + "): the rank of input '" + x +
                           "' is unknown, and converting opset " + std::to_string(from) +
                           " to 13 needs it (run the model once to observe it)");
      }
      auto* vi = proto.mutable_graph()->add_value_info();
      vi->set_name(x);
      auto* tt = vi->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(onnx::TensorProto::FLOAT);
      auto* shape = tt->mutable_shape();
      for (int i = 0; i < rank; ++i) shape->add_dim();
      temporary.push_back(x);
    }
  }
  try {
    proto = onnx::version_conversion::ConvertVersion(proto, (int)target);
  } catch (const std::exception& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    return unsupported(where + ": cannot convert opset " + std::to_string(from) + " to " + std::to_string(target) + " (" +
                       why + ") with ONNX's version converter: " + what);
  }
  if (!temporary.empty()) {
    auto* vis = proto.mutable_graph()->mutable_value_info();
    for (int i = vis->size() - 1; i >= 0; --i) {
      if (std::find(temporary.begin(), temporary.end(), vis->Get(i).name()) != temporary.end()) vis->DeleteSubrange(i, 1);
    }
  }
  return Status::ok();
}

// The Reduce ops whose `axes` attribute became an input at opset 18 (ReduceSum's moved at 13,
// which the converter handles).
bool axesBecameInputAt18(const std::string& op) {
  static const std::set<std::string> ops = {"ReduceL1",  "ReduceL2",  "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
                                            "ReduceMean", "ReduceMin", "ReduceProd",   "ReduceSumSquare"};
  return ops.count(op) > 0;
}

// Raises a graph (and its subgraphs) from opset `from` (17 or 18) to 19, which libonnx 1.12's
// converter does not know. Of the default-domain ops whose schema changed at 18 or 19, these need
// a rewrite:
//   - ReduceL1/L2/LogSum/LogSumExp/Max/Mean/Min/Prod/SumSquare (18): the `axes` attribute becomes
//     an int64 input (an initializer of the top graph, visible in subgraphs); no attribute stays
//     no input (all axes, as before: noop_with_empty_axes defaults to 0).
//   - Split (18): without a `split` input, `num_outputs` is required: the number of outputs (an
//     even split, as opset 13 meant).
// The others keep every opset-17 node valid with its meaning (new optional inputs or attributes
// whose defaults are the old behaviour, or more types): Pad (axes input 18, wrap mode 19), Resize
// (antialias, axes, keep_aspect_ratio_policy 18; half_pixel_symmetric 19), ScatterElements and
// ScatterND (reduction max/min 18), LpPool (ceil_mode 18), OptionalHasElement and
// OptionalGetElement (18), AveragePool (dilations 19), Cast and CastLike (saturate 19), Constant,
// DequantizeLinear, QuantizeLinear, Equal, Identity, If, Loop, Reshape, Scan, Shape, Size (types, 19).
Status upgradePast17(onnx::GraphProto& top, onnx::GraphProto& g, int64_t from, NameAllocator& names,
                     const std::string& where) {
  for (auto& n : *g.mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) QS_RETURN_IF_ERROR(upgradePast17(top, *a.mutable_g(), from, names, where));
      for (auto& sg : *a.mutable_graphs()) QS_RETURN_IF_ERROR(upgradePast17(top, sg, from, names, where));
    }
    if (!isDefaultDomain(n.domain()) || from >= 18) continue;
    if (axesBecameInputAt18(n.op_type())) {
      auto* attrs = n.mutable_attribute();
      for (int i = 0; i < attrs->size(); ++i) {
        if (attrs->Get(i).name() != "axes") continue;
        if (n.input_size() != 1) {
          return unsupported(where + ": node '" + n.name() + "' (" + n.op_type() + "): has " +
                             std::to_string(n.input_size()) + " inputs and an axes attribute; cannot move its axes to "
                             "an input for opset 19 (FLOAT8E4M3FN)");
        }
        std::vector<int64_t> axes(attrs->Get(i).ints().begin(), attrs->Get(i).ints().end());
        attrs->DeleteSubrange(i, 1);
        if (!axes.empty()) {
          std::string name = names.take((n.name().empty() ? n.output(0) : n.name()) + "_axes");
          addInitializer(top, name, onnx::TensorProto::INT64, {(int64_t)axes.size()}, axes.data(), axes.size() * 8);
          n.add_input(name);
        }
        break;
      }
    } else if (n.op_type() == "Split" && (n.input_size() < 2 || n.input(1).empty())) {
      bool has = false;
      for (const auto& a : n.attribute()) has |= a.name() == "num_outputs";
      if (!has) {
        auto* a = n.add_attribute();
        a->set_name("num_outputs");
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(n.output_size());
      }
    }
  }
  return Status::ok();
}

}  // namespace

Result<ExportedModel> buildQuantizedModel(const std::string& sourcePath, const Model& model, const AnalysisResult& r,
                                          const ExportOptions& options) {
  const std::string& where = sourcePath;
  const Graph& g = model.graph;
  const bool fp8 = r.plan.mode == QuantMode::Fp8;
  // fp16/bf16 Q/DQ scales need opset 19, reached as fp8's is (high_precision_export.h).
  const HighPrecision high = r.calibration.highPrecision;
  const bool past17 = fp8 || high != HighPrecision::Fp32;
  const int zeroPointType = fp8 ? kFloat8E4M3FN : (int)onnx::TensorProto::INT8;
  if (r.plan.nodes.size() != g.nodes.size()) {
    return invalidArgument(where + ": the analysis has " + std::to_string(r.plan.nodes.size()) +
                           " nodes, the model " + std::to_string(g.nodes.size()) + ": it belongs to another model");
  }

  // Re-parse the original file: everything the IR does not keep (doc strings, metadata, value_info,
  // Constant nodes) is carried over as it was.
  std::ifstream in(sourcePath, std::ios::binary);
  if (!in) return ioError(where + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  if (bytes.size() > (size_t)INT_MAX) return unsupported(where + ": the file is over 2 GB");
  onnx::ModelProto proto;
  google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(bytes.data()), (int)bytes.size());
  stream.SetTotalBytesLimit(INT_MAX);
  stream.SetRecursionLimit(64);
  if (!proto.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage()) {
    return invalidModel(where + ": not a valid ONNX model (protobuf parsing failed)");
  }
  bytes.clear();
  bytes.shrink_to_fit();
  if (!proto.has_graph()) return invalidModel(where + ": the file holds no graph");

  // External data of the source is read into the proto (the loader resolved and checked it), so
  // that the output does not point into the source's folder.
  for (auto& t : *proto.mutable_graph()->mutable_initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) continue;
    ValueId id = g.findValue(t.name());
    if (id == kNoValue || !g.value(id).constant) return invalidModel(where + ": initializer '" + t.name() + "' was not loaded");
    const Tensor& c = *g.value(id).constant;
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    setRaw(&t, c.raw(), c.byteSize());
  }

  // Initializers a remedy changed (cross-layer equalization, SmoothQuant, ...): the values of
  // `model`, not of the file; bias correction's of the quantized nodes: options.constantValues.
  if (!options.replacedInitializers.empty() || !options.constantValues.empty()) {
    std::set<std::string> replaced(options.replacedInitializers.begin(), options.replacedInitializers.end());
    for (const auto& [name, t] : options.constantValues) replaced.insert(name);
    // The value written for `id` (a float constant of `model`), or null where it is not one.
    auto valueOf = [&](ValueId id, const std::string& name) -> const Tensor* {
      if (id == kNoValue || !g.value(id).constant || g.value(id).constant->dtype() != DType::Float) return nullptr;
      const Tensor& c = *g.value(id).constant;
      auto it = options.constantValues.find(name);
      if (it == options.constantValues.end()) return &c;
      return it->second.dtype() == DType::Float && it->second.shape() == c.shape() ? &it->second : nullptr;
    };
    size_t found = 0;
    for (auto& t : *proto.mutable_graph()->mutable_initializer()) {
      if (!replaced.count(t.name())) continue;
      const Tensor* v = valueOf(g.findValue(t.name()), t.name());
      if (!v || t.data_type() != onnx::TensorProto::FLOAT) {
        return invalidArgument(where + ": initializer '" + t.name() + "' was changed by a remedy but is not a float32 constant of its shape");
      }
      const Tensor& c = *v;
      t.clear_float_data();
      setRaw(&t, c.raw(), c.byteSize());
      ++found;
    }
    // Weights held in Constant nodes (the loader folds them; PaddleOCR's exports have all theirs there).
    for (auto& n : *proto.mutable_graph()->mutable_node()) {
      if (n.op_type() != "Constant" || n.output_size() != 1 || !replaced.count(n.output(0))) continue;
      const Tensor* v = valueOf(g.findValue(n.output(0)), n.output(0));
      for (auto& a : *n.mutable_attribute()) {
        if (a.name() != "value" || !a.has_t() || a.t().data_type() != onnx::TensorProto::FLOAT || !v) continue;
        const Tensor& c = *v;
        a.mutable_t()->clear_float_data();
        setRaw(a.mutable_t(), c.raw(), c.byteSize());
        ++found;
      }
    }
    // A LayerNormalization scale or bias that SmoothQuant gave a value of its own where the file
    // has an Identity of a shared initializer (core/analysis/smoothquant.h): the model's Identity
    // reads a constant of its own; the file's becomes a Constant node with that value.
    for (auto& n : *proto.mutable_graph()->mutable_node()) {
      if (n.op_type() != "Identity" || n.output_size() != 1 || !replaced.count(n.output(0))) continue;
      ValueId id = g.findValue(n.output(0));
      if (id == kNoValue || g.value(id).producer < 0) continue;
      const Node& mn = g.nodes[(size_t)g.value(id).producer];
      if (mn.opType != "Identity" || mn.inputs.size() != 1 || mn.inputs[0] == kNoValue) continue;
      const Value& src = g.value(mn.inputs[0]);
      if (!src.constant || src.constant->dtype() != DType::Float || src.name != n.output(0) + "_smoothquant") continue;
      const Tensor* v = &*src.constant;
      n.set_op_type("Constant");
      n.clear_input();
      n.clear_attribute();
      auto* a = n.add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      auto* t = a->mutable_t();
      t->set_data_type(onnx::TensorProto::FLOAT);
      for (int64_t d : v->shape()) t->add_dims(d);
      setRaw(t, v->raw(), v->byteSize());
      ++found;
    }
    if (found != replaced.size()) {
      return invalidArgument(where + ": " + std::to_string(replaced.size() - found) +
                             " initializer(s) changed by a remedy are neither initializers nor Constant nodes of the file");
    }
  }

  if (!options.insertedNodes.empty())
    QS_RETURN_IF_ERROR(insertRemedyNodes(*proto.mutable_graph(), g, options.insertedNodes, where));

  ExportedModel out;
  onnx::OperatorSetIdProto* os = defaultOpsetImport(proto);
  if (!os) {
    os = proto.add_opset_import();
    os->set_domain("");
    os->set_version(model.defaultOpset());
  }
  out.opsetBefore = os->version();
  // fp8: the converter raises to 17, the rest (17 -> 19) is done by hand after the checker ran.
  const int64_t convertTo = past17 ? kConverterMaxOpset : kInt8Opset;
  if (out.opsetBefore < convertTo) {
    QS_RETURN_IF_ERROR(raiseOpset(proto, model, options, where, convertTo,
                                  fp8 ? "on the way to opset 19, which FLOAT8E4M3FN needs"
                                  : past17 ? "on the way to opset 19, which float16/bfloat16 Q/DQ scales need"
                                           : "needed for per-channel DequantizeLinear"));
  }
  if (proto.ir_version() < 7) proto.set_ir_version(7);  // opset 13 needs IR 7

  onnx::GraphProto& gp = *proto.mutable_graph();
  // IR nodes (Constant nodes folded away) -> proto nodes, through their output names (unique in SSA).
  std::unordered_map<std::string, int> protoByOutput;
  for (int i = 0; i < gp.node_size(); ++i)
    for (const auto& o : gp.node(i).output())
      if (!o.empty()) protoByOutput.emplace(o, i);
  auto protoIndex = [&](NodeId id) -> Result<int> {
    const Node& n = g.nodes[(size_t)id];
    for (ValueId o : n.outputs) {
      if (o == kNoValue) continue;
      auto it = protoByOutput.find(g.value(o).name);
      if (it == protoByOutput.end() || gp.node(it->second).op_type() != n.opType) break;
      return it->second;
    }
    return invalidModel(where + ": node '" + n.name + "' (" + n.opType +
                        ") of the analysis is not in the file: was it changed since it was loaded?");
  };

  NameAllocator names(gp);
  std::map<std::string, Pair> pairs;
  std::map<int, std::vector<InputRewrite>> rewrites;  // proto node index -> inputs to rewire
  std::set<std::string> replacedWeights;

  // Activations: one per-tensor pair per exported tensor.
  std::set<ValueId> exported;
  for (ValueId v : exportedActivationTensors(g, r)) exported.insert(v);
  for (const ActivationPoint& a : r.plan.activations) {
    if (!isNodeQuantized(r.plan, a.node) || !exported.count(a.value)) continue;
    const std::string& t = g.value(a.value).name;
    std::string key = "a:" + t;
    if (!pairs.count(key)) {
      const ActivationQuant& q = r.activations.at(a.value);
      Pair p;
      std::string scale = names.take(t + "_scale"), zp = names.take(t + "_zero_point");
      float s = q.scale;
      uint8_t z = 0;  // int8 0, or FLOAT8E4M3FN +0
      addInitializer(gp, scale, onnx::TensorProto::FLOAT, {}, &s, 4);
      addInitializer(gp, zp, zeroPointType, {}, &z, 1);
      std::string qOut = names.take(t + "_QuantizeLinear_Output");
      p.output = names.take(t + "_DequantizeLinear_Output");
      p.nodes.push_back(makeNode("QuantizeLinear", names.take(t + "_QuantizeLinear"), {t, scale, zp}, qOut));
      p.nodes.push_back(makeNode("DequantizeLinear", names.take(t + "_DequantizeLinear"), {qOut, scale, zp}, p.output));
      pairs.emplace(key, std::move(p));
      ++out.activationPairs;
    }
    auto idx = protoIndex(a.node);
    if (!idx) return idx.status();
    rewrites[*idx].push_back(InputRewrite{a.inputIndex, t, key});
  }

  // Weights: per channel.
  for (const WeightQuant& w : r.weights) {
    if (!isNodeQuantized(r.plan, w.node)) continue;
    const Value& v = g.value(w.value);
    const Node& node = g.nodes[(size_t)w.node];
    if (!v.constant || v.constant->dtype() != DType::Float) {
      return unsupported(where + ": node '" + node.name + "' (" + node.opType + "): weight '" + v.name +
                         "' is not a float32 constant; only float32 weights are exported");
    }
    std::string key = "w:" + v.name + ":" + std::to_string(w.axis);
    if (!pairs.count(key)) {
      const Tensor& wt = *v.constant;
      const int64_t channels = wt.dim(w.axis);
      if ((int64_t)w.scale.size() != channels) {
        return invalidArgument(where + ": weight '" + v.name + "' has " + std::to_string(channels) +
                               " channels on axis " + std::to_string(w.axis) + " but the analysis " +
                               std::to_string(w.scale.size()) + " scales");
      }
      std::vector<int64_t> dims(wt.shape().begin(), wt.shape().end());
      Pair p;
      std::string scale = names.take(v.name + "_scale"), zp = names.take(v.name + "_zero_point");
      std::vector<int8_t> zeros((size_t)channels, 0);
      addInitializer(gp, scale, onnx::TensorProto::FLOAT, {channels}, w.scale.data(), w.scale.size() * 4);
      addInitializer(gp, zp, zeroPointType, {channels}, zeros.data(), zeros.size());
      p.output = names.take(v.name + "_DequantizeLinear_Output");
      std::string dqInput;
      if (options.dqOnly) {
        // The values the simulation used, per channel: int8 clamp(rne(w / scale), -127, 127), or
        // fp8 roundToFp8E4M3(w / scale) as FLOAT8E4M3FN bytes.
        std::vector<int8_t> q((size_t)wt.numel());
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < w.axis; ++i) outer *= wt.dim(i);
        for (int i = w.axis + 1; i < wt.rank(); ++i) inner *= wt.dim(i);
        const float* src = wt.data<float>();
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t c = 0; c < channels; ++c) {
            const float sc = w.scale[(size_t)c];
            const int64_t off = (o * channels + c) * inner;
            if (fp8) {
              for (int64_t i = 0; i < inner; ++i) q[(size_t)(off + i)] = (int8_t)fp8E4M3Bits(src[off + i] / sc);
              continue;
            }
            for (int64_t i = 0; i < inner; ++i) {
              float x = std::nearbyint(src[off + i] / sc);
              x = std::min(std::max(x, (float)kWeightQmin), (float)kWeightQmax);
              q[(size_t)(off + i)] = (int8_t)x;
            }
          }
        }
        dqInput = names.take(v.name + "_quantized");
        addInitializer(gp, dqInput, fp8 ? kFloat8E4M3FN : (int)onnx::TensorProto::INT8, dims, q.data(), q.size());
        replacedWeights.insert(v.name);
      } else {
        dqInput = names.take(v.name + "_QuantizeLinear_Output");
        p.nodes.push_back(makeNode("QuantizeLinear", names.take(v.name + "_QuantizeLinear"), {v.name, scale, zp}, dqInput,
                                   w.axis));
      }
      p.nodes.push_back(makeNode("DequantizeLinear", names.take(v.name + "_DequantizeLinear"), {dqInput, scale, zp},
                                 p.output, w.axis));
      pairs.emplace(key, std::move(p));
      ++out.weightPoints;
    }
    auto idx = protoIndex(w.node);
    if (!idx) return idx.status();
    rewrites[*idx].push_back(InputRewrite{w.inputIndex, v.name, key});
  }

  // Rebuild the node list: each pair right before its first consumer (the tensor it reads is
  // produced earlier, as the file is topologically sorted).
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  nodes.Reserve(gp.node_size() + (int)(2 * pairs.size()));
  for (int i = 0; i < gp.node_size(); ++i) {
    onnx::NodeProto& n = *gp.mutable_node(i);
    if (auto it = rewrites.find(i); it != rewrites.end()) {
      for (const InputRewrite& rw : it->second) {
        if ((int)rw.inputIndex >= n.input_size() || n.input((int)rw.inputIndex) != rw.expected) {
          return invalidModel(where + ": node '" + n.name() + "' (" + n.op_type() + "): input " +
                              std::to_string(rw.inputIndex) + " is not '" + rw.expected +
                              "' after the opset conversion; cannot place its quantization point");
        }
        Pair& p = pairs.at(rw.key);
        if (!p.emitted) {
          for (auto& qn : p.nodes) *nodes.Add() = qn;
          p.emitted = true;
        }
        n.set_input((int)rw.inputIndex, p.output);
      }
    }
    *nodes.Add() = std::move(n);
  }
  gp.mutable_node()->Swap(&nodes);

  // Float weights that nothing reads any more (every consumer now reads the int8 copy).
  std::unordered_set<std::string> used;
  collectUses(gp, used);
  for (const std::string& w : replacedWeights) {
    if (used.count(w)) continue;
    auto* inits = gp.mutable_initializer();
    for (int i = 0; i < inits->size(); ++i) {
      if (inits->Get(i).name() == w) {
        inits->DeleteSubrange(i, 1);
        ++out.removedFloatWeights;
        break;
      }
    }
    auto* inputs = gp.mutable_input();
    for (int i = 0; i < inputs->size(); ++i) {
      if (inputs->Get(i).name() == w) {
        inputs->DeleteSubrange(i, 1);
        break;
      }
    }
    auto* allNodes = gp.mutable_node();
    for (int i = 0; i < allNodes->size(); ++i) {
      const auto& n = allNodes->Get(i);
      if (n.op_type() == "Constant" && n.output_size() == 1 && n.output(0) == w) {
        allNodes->DeleteSubrange(i, 1);
        ++out.removedFloatWeights;
        break;
      }
    }
  }

  // libonnx 1.12's checker knows neither FLOAT8E4M3FN nor opset 19: an fp8 export is checked as
  // its int8 twin (the same graph at opset 17, each 1-byte FLOAT8E4M3FN initializer read as int8),
  // then raised to 19. ONNX Runtime 1.30 checks the real file in the tests.
  const int64_t checkedOpset = defaultOpsetImport(proto)->version();
  if (checkedOpset <= kConverterMaxOpset) {
    const onnx::ModelProto* checked = &proto;
    onnx::ModelProto twin;
    if (fp8) {
      twin = proto;
      for (auto& t : *twin.mutable_graph()->mutable_initializer())
        if (t.data_type() == kFloat8E4M3FN) t.set_data_type(onnx::TensorProto::INT8);
      checked = &twin;
    }
    try {
      onnx::checker::check_model(*checked);
    } catch (const std::exception& e) {
      std::string what = e.what();
      std::replace(what.begin(), what.end(), '\n', ' ');
      return runtimeError(where + ": the exported model fails the ONNX checker (a bug in the exporter): " + what);
    }
  }
  if (past17) {
    onnx::OperatorSetIdProto* dos = defaultOpsetImport(proto);
    if (dos->version() < kFp8Opset) {
      QS_RETURN_IF_ERROR(upgradePast17(gp, gp, dos->version(), names, where));
      dos->set_version(kFp8Opset);
    }
    if (proto.ir_version() < kFp8IrVersion) proto.set_ir_version(kFp8IrVersion);
  }
  // Checked above in float32; ONNX Runtime 1.30 checks the fp16 file in the tests.
  QS_RETURN_IF_ERROR(convertFloatPart(proto, high, where));
  out.opsetAfter = defaultOpsetImport(proto)->version();

  if (options.externalData || proto.ByteSizeLong() > options.externalDataThresholdBytes) {
    ExternalData ext = moveInitializersToExternal(proto, options.externalDataName,
                                                  options.externalDataMinTensorBytes, &model.graph);
    out.externalDataName = options.externalDataName;
    out.externalDataBytes = std::move(ext.bytes);
    if (proto.ByteSizeLong() > (size_t)INT_MAX) {
      return unsupported(where + ": the exported model is over 2 GB even with its initializers as external data");
    }
  }
  if (!proto.SerializeToString(&out.modelBytes)) return runtimeError(where + ": serialising the exported model failed");
  return out;
}

Result<std::map<std::string, int>> observeRanks(const Executor& executor, const std::vector<NamedTensor>& feeds) {
  const Graph& g = executor.model().graph;
  auto table = executor.makeValueTable(feeds);
  if (!table) return table.status();
  QS_RETURN_IF_ERROR(executor.runNodes(g.topoOrder, *table));
  std::map<std::string, int> ranks;
  for (size_t i = 0; i < table->size(); ++i) {
    const Tensor& t = (*table)[i];
    if (!t.empty()) ranks[g.values[i].name] = t.rank();
  }
  return ranks;
}

Status checkOnnxModelFile(const std::string& path) {
  try {
    onnx::checker::check_model(path);
  } catch (const std::exception& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    return invalidModel(path + ": ONNX checker: " + what);
  }
  return Status::ok();
}

}  // namespace qs
