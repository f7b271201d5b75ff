#include "core/onnx/loader.h"

#include "core/onnx/shape_inference_guard.h"

#include <google/protobuf/io/coded_stream.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_set>

namespace qs {

namespace fs = std::filesystem;

uint64_t physicalMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long pageSize = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || pageSize <= 0) return 8ull << 30;
  return (uint64_t)pages * (uint64_t)pageSize;
}

namespace {

std::string humanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) {
    b /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, units[u]);
  return buf;
}

class Converter {
 public:
  Converter(std::string where, std::string baseDir, const LoadOptions& opt)
      : m_where(std::move(where)), m_baseDir(std::move(baseDir)), m_opt(opt) {
    m_maxBytes = opt.maxTensorBytes ? opt.maxTensorBytes : physicalMemoryBytes();
  }

  Result<std::shared_ptr<Model>> convert(onnx::ModelProto& proto);
  Result<Tensor> convertTensor(const onnx::TensorProto& tp, const std::string& context);

 private:
  Status fail(const std::string& msg) const { return invalidModel(m_where + ": " + msg); }
  Status readExternal(const onnx::TensorProto& tp, DType dt, const Shape& shape, uint64_t need, Tensor& out,
                      const std::string& context);
  Status convertAttribute(const onnx::AttributeProto& ap, Attribute& out, const std::string& context, Model& model);
  // The graph of the model (sub = false) or of a control-flow node's attribute (sub = true).
  Status convertGraph(const onnx::GraphProto& gp, Graph& g, Model& model, bool sub);
  void applyValueInfo(Graph& g, const onnx::ValueInfoProto& vi);
  Status checkElemType(const onnx::ValueInfoProto& vi, const char* what) const;

  std::string m_where;
  std::string m_baseDir;
  LoadOptions m_opt;
  uint64_t m_maxBytes = 0;
  int m_depth = 0;  // subgraph nesting while converting
};

Result<Tensor> Converter::convertTensor(const onnx::TensorProto& tp, const std::string& context) {
  DType dt = (DType)tp.data_type();
  if (!dtypeSupported(dt)) {
    return unsupported(m_where + ": " + context + ": tensor '" + tp.name() + "' has unsupported data type " +
                       dtypeName(dt));
  }
  if (tp.has_segment()) return fail(context + ": tensor '" + tp.name() + "' uses segments, which are not supported");
  Shape shape;
  for (int64_t d : tp.dims()) {
    if (d < 0) return fail(context + ": tensor '" + tp.name() + "' has a negative dimension " + std::to_string(d));
    shape.push_back(d);
  }
  size_t esize = dtypeSize(dt);
  int64_t numel = checkedNumel(shape);
  if (numel < 0) {
    return fail(context + ": tensor '" + tp.name() + "' dims " + shapeToString(shape) + " overflow the element count");
  }
  if ((uint64_t)numel > m_maxBytes / esize) {
    return Status(StatusCode::ResourceLimit,
                  m_where + ": " + context + ": tensor '" + tp.name() + "' declares " + shapeToString(shape) + " (" +
                      humanBytes((double)numel * (double)esize) + "), beyond the limit of " +
                      humanBytes((double)m_maxBytes));
  }
  size_t bytes = (size_t)numel * esize;
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
    Tensor t;
    QS_RETURN_IF_ERROR(readExternal(tp, dt, shape, bytes, t, context));
    return t;
  }
  auto mismatch = [&](size_t got, const char* unit) {
    return fail(context + ": tensor '" + tp.name() + "' dims " + shapeToString(shape) + " need " +
                std::to_string(numel) + " elements (" + std::to_string(bytes) + " bytes) but it holds " +
                std::to_string(got) + " " + unit);
  };
  if (tp.has_raw_data()) {
    if (tp.raw_data().size() != bytes) return mismatch(tp.raw_data().size(), "bytes");
    Tensor t(dt, shape);
    if (bytes) std::memcpy(t.raw(), tp.raw_data().data(), bytes);
    return t;
  }
  // The typed field's element count is checked before the tensor is allocated: a small file may
  // declare dims within the size limit that its data does not back.
  int64_t held = 0;
  switch (dt) {
    case DType::Float: held = tp.float_data_size(); break;
    case DType::Double: held = tp.double_data_size(); break;
    case DType::Int64: held = tp.int64_data_size(); break;
    case DType::UInt32: case DType::UInt64: held = tp.uint64_data_size(); break;
    default: held = tp.int32_data_size(); break;
  }
  if (held != numel) return mismatch((size_t)held, "elements");
  Tensor t(dt, shape);
  auto copyField = [&](const auto& field, auto convertOne) -> Status {
    if ((int64_t)field.size() != numel) return mismatch((size_t)field.size(), "elements");
    for (int64_t i = 0; i < numel; ++i) convertOne(i, field.Get((int)i));
    return Status::ok();
  };
  switch (dt) {
    case DType::Float:
      QS_RETURN_IF_ERROR(copyField(tp.float_data(), [&](int64_t i, float v) { t.data<float>()[i] = v; }));
      break;
    case DType::Double:
      QS_RETURN_IF_ERROR(copyField(tp.double_data(), [&](int64_t i, double v) { t.data<double>()[i] = v; }));
      break;
    case DType::Int64:
      QS_RETURN_IF_ERROR(copyField(tp.int64_data(), [&](int64_t i, int64_t v) { t.data<int64_t>()[i] = v; }));
      break;
    case DType::UInt32:
      QS_RETURN_IF_ERROR(copyField(tp.uint64_data(), [&](int64_t i, uint64_t v) { t.data<uint32_t>()[i] = (uint32_t)v; }));
      break;
    case DType::UInt64:
      QS_RETURN_IF_ERROR(copyField(tp.uint64_data(), [&](int64_t i, uint64_t v) { t.data<uint64_t>()[i] = v; }));
      break;
    case DType::Int32:
      QS_RETURN_IF_ERROR(copyField(tp.int32_data(), [&](int64_t i, int32_t v) { t.data<int32_t>()[i] = v; }));
      break;
    case DType::Int16:
      QS_RETURN_IF_ERROR(copyField(tp.int32_data(), [&](int64_t i, int32_t v) { t.data<int16_t>()[i] = (int16_t)v; }));
      break;
    case DType::UInt16: case DType::Float16: case DType::BFloat16:
      QS_RETURN_IF_ERROR(copyField(tp.int32_data(), [&](int64_t i, int32_t v) { t.data<uint16_t>()[i] = (uint16_t)v; }));
      break;
    case DType::Int8:
      QS_RETURN_IF_ERROR(copyField(tp.int32_data(), [&](int64_t i, int32_t v) { t.data<int8_t>()[i] = (int8_t)v; }));
      break;
    case DType::Bool:
      QS_RETURN_IF_ERROR(copyField(tp.int32_data(), [&](int64_t i, int32_t v) { t.data<bool>()[i] = v != 0; }));
      break;
    default:  // uint8 and the 8-bit floats are stored one element per int32
      QS_RETURN_IF_ERROR(copyField(tp.int32_data(), [&](int64_t i, int32_t v) { t.data<uint8_t>()[i] = (uint8_t)v; }));
      break;
  }
  return t;
}

Status Converter::readExternal(const onnx::TensorProto& tp, DType dt, const Shape& shape, uint64_t need, Tensor& out,
                               const std::string& context) {
  std::string location;
  uint64_t offset = 0;
  int64_t length = -1;
  auto bad = [&](const std::string& why) {
    return fail(context + ": tensor '" + tp.name() + "' external data " + why);
  };
  for (const auto& kv : tp.external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      else if (kv.key() == "offset") offset = std::stoull(kv.value());
      else if (kv.key() == "length") length = (int64_t)std::stoull(kv.value());
    } catch (const std::exception&) {
      return bad("has a non-numeric " + kv.key() + " '" + kv.value() + "'");
    }
  }
  if (location.empty()) return bad("has no location");
  if (m_baseDir.empty()) return bad("'" + location + "' cannot be resolved: the model was not read from a file");
  fs::path rel(location);
  if (rel.is_absolute()) return bad("location '" + location + "' is an absolute path; it must be inside the model's folder");
  for (const auto& part : rel) {
    if (part == "..") return bad("location '" + location + "' escapes the model's folder ('..')");
  }
  std::error_code ec;
  fs::path base = fs::canonical(m_baseDir.empty() ? fs::path(".") : fs::path(m_baseDir), ec);
  if (ec) return bad("base folder '" + m_baseDir + "' cannot be resolved: " + ec.message());
  fs::path full = fs::canonical(base / rel, ec);
  if (ec) return bad("file '" + (base / rel).string() + "' cannot be opened: " + ec.message());
  auto baseStr = base.string() + "/";
  if (full.string().compare(0, baseStr.size(), baseStr) != 0) {
    return bad("location '" + location + "' resolves to '" + full.string() + "', outside the model's folder");
  }
  if (!fs::is_regular_file(full, ec)) return bad("location '" + location + "' is not a regular file");
  uint64_t fileSize = fs::file_size(full, ec);
  if (ec) return bad("file '" + full.string() + "' cannot be read: " + ec.message());
  if (length >= 0 && (uint64_t)length != need) {
    return bad("length " + std::to_string(length) + " differs from the " + std::to_string(need) + " bytes its dims " +
               shapeToString(shape) + " need");
  }
  if (offset > fileSize || need > fileSize - offset) {
    return bad("range [" + std::to_string(offset) + ", +" + std::to_string(need) + ") is beyond the end of '" +
               location + "' (" + std::to_string(fileSize) + " bytes)");
  }
  out = Tensor(dt, shape);  // allocated only once the file is known to hold the data
  std::ifstream in(full, std::ios::binary);
  in.seekg((std::streamoff)offset);
  in.read(static_cast<char*>(out.raw()), (std::streamsize)need);
  if (!in) return bad("read of '" + location + "' failed");
  return Status::ok();
}

Status Converter::convertAttribute(const onnx::AttributeProto& ap, Attribute& out, const std::string& context,
                                   Model& model) {
  using A = onnx::AttributeProto;
  int type = ap.type();
  if (type == A::UNDEFINED) {  // very old exporters: infer from the field that is set
    if (ap.has_f()) type = A::FLOAT;
    else if (ap.has_i()) type = A::INT;
    else if (ap.has_s()) type = A::STRING;
    else if (ap.has_t()) type = A::TENSOR;
    else if (ap.has_g()) type = A::GRAPH;
    else if (ap.floats_size()) type = A::FLOATS;
    else if (ap.ints_size()) type = A::INTS;
    else if (ap.strings_size()) type = A::STRINGS;
    else if (ap.tensors_size()) type = A::TENSORS;
    else if (ap.graphs_size()) type = A::GRAPHS;
  }
  auto attrCtx = context + ": attribute '" + ap.name() + "'";
  switch (type) {
    case A::FLOAT: out.type = Attribute::Type::Float; out.f = ap.f(); break;
    case A::INT: out.type = Attribute::Type::Int; out.i = ap.i(); break;
    case A::STRING: out.type = Attribute::Type::String; out.s = ap.s(); break;
    case A::FLOATS: out.type = Attribute::Type::Floats; out.floats.assign(ap.floats().begin(), ap.floats().end()); break;
    case A::INTS: out.type = Attribute::Type::Ints; out.ints.assign(ap.ints().begin(), ap.ints().end()); break;
    case A::STRINGS: out.type = Attribute::Type::Strings; out.strings.assign(ap.strings().begin(), ap.strings().end()); break;
    case A::TENSOR: {
      out.type = Attribute::Type::Tensor;
      auto t = convertTensor(ap.t(), attrCtx);
      if (!t) return t.status();
      out.t = std::move(t).value();
      break;
    }
    case A::TENSORS:
      out.type = Attribute::Type::Tensors;
      for (const auto& tp : ap.tensors()) {
        auto t = convertTensor(tp, attrCtx);
        if (!t) return t.status();
        out.tensors.push_back(std::move(t).value());
      }
      break;
    case A::GRAPH:
    case A::GRAPHS: {
      // Subgraphs (If, Loop, Scan bodies) are converted and validated like the main graph.
      out.type = type == A::GRAPH ? Attribute::Type::Graph : Attribute::Type::Graphs;
      if (m_depth >= kMaxSubgraphDepth) {
        return unsupported(m_where + ": " + attrCtx + ": subgraphs are nested deeper than " +
                           std::to_string(kMaxSubgraphDepth) + " levels");
      }
      std::vector<const onnx::GraphProto*> protos;
      if (type == A::GRAPH) protos.push_back(&ap.g());
      for (const auto& gp : ap.graphs()) protos.push_back(&gp);
      for (const onnx::GraphProto* gp : protos) {
        auto sg = std::make_shared<Graph>();
        ++m_depth;
        Status st = convertGraph(*gp, *sg, model, true);
        --m_depth;
        if (!st.isOk()) return st;
        if (type == A::GRAPH) out.g = sg;
        else out.graphs.push_back(sg);
      }
      break;
    }
    case A::SPARSE_TENSOR: case A::SPARSE_TENSORS: case A::TYPE_PROTO: case A::TYPE_PROTOS:
      out.type = Attribute::Type::Undefined;  // kept for display only; kernels that need them refuse at load
      break;
    default:
      return fail(attrCtx + " has an invalid type " + std::to_string(type));
  }
  return Status::ok();
}

// As ONNX Runtime: a graph input or output must declare a tensor element type, and one that exists.
Status Converter::checkElemType(const onnx::ValueInfoProto& vi, const char* what) const {
  const int32_t t = vi.type().tensor_type().elem_type();
  if (t == 0) {
    return invalidModel(m_where + ": " + what + " '" + vi.name() +
                        "' has element type UNDEFINED (0): the model does not say what it holds");
  }
  if (t < 0 || t > (int32_t)DType::Float8E5M2FNUZ) {
    return unsupported(m_where + ": " + what + " '" + vi.name() + "' has element type " + std::to_string(t) +
                       ", which is not a tensor type this build knows (1 to 20)");
  }
  return Status::ok();
}

void Converter::applyValueInfo(Graph& g, const onnx::ValueInfoProto& vi) {
  if (vi.name().empty()) return;
  Value& v = g.value(g.valueId(vi.name()));
  if (!vi.has_type() || !vi.type().has_tensor_type()) return;
  const auto& tt = vi.type().tensor_type();
  if (tt.elem_type() != 0) v.dtype = (DType)tt.elem_type();
  if (tt.has_shape()) {
    std::vector<Dim> dims;
    for (const auto& d : tt.shape().dim()) {
      Dim dim;
      if (d.has_dim_value()) dim.value = d.dim_value();
      else if (d.has_dim_param()) dim.symbol = d.dim_param();
      dims.push_back(dim);
    }
    v.shape = std::move(dims);
  }
}

Status Converter::convertGraph(const onnx::GraphProto& gp, Graph& g, Model& model, bool sub) {
  g.name = gp.name();
  std::unordered_set<std::string> initNames;
  for (const auto& tp : gp.initializer()) {
    if (tp.name().empty()) return fail("an initializer has no name");
    if (!initNames.insert(tp.name()).second) return fail("initializer '" + tp.name() + "' is defined twice");
    auto t = convertTensor(tp, "initializer");
    if (!t) return t.status();
    Value& v = g.value(g.valueId(tp.name()));
    v.dtype = t->dtype();
    std::vector<Dim> dims;
    for (int64_t d : t->shape()) dims.push_back(Dim{d, {}});
    v.shape = dims;
    v.constant = std::move(t).value();
  }
  if (gp.sparse_initializer_size() > 0) return unsupported(m_where + ": sparse initializers are not supported");
  std::unordered_set<std::string> inputNames;
  for (const auto& vi : gp.input()) {
    if (vi.name().empty()) return fail("a graph input has no name");
    if (!inputNames.insert(vi.name()).second) return fail("graph input '" + vi.name() + "' is declared twice");
    ValueId id = g.valueId(vi.name());
    Value& v = g.value(id);
    if (v.constant) {
      v.isOverridable = true;  // IR < 4 lists initializers as inputs too; they keep their data
      continue;
    }
    applyValueInfo(g, vi);
    // Subgraph inputs may leave their type out (Loop bodies often do); a declared non-tensor type
    // is refused everywhere.
    if (vi.type().value_case() != onnx::TypeProto::VALUE_NOT_SET ? !vi.type().has_tensor_type() : !sub) {
      return unsupported(m_where + ": " + (sub ? "subgraph '" + gp.name() + "' input '" : std::string("graph input '")) +
                         vi.name() + "' is not a tensor (sequences/maps are not supported)");
    }
    v.isGraphInput = true;
    g.inputs.push_back(id);
  }
  for (const auto& vi : gp.value_info()) {
    ValueId id = g.findValue(vi.name());
    if (id != kNoValue && g.value(id).constant) continue;
    applyValueInfo(g, vi);
  }
  for (int n = 0; n < gp.node_size(); ++n) {
    const auto& np = gp.node(n);
    Node node;
    node.opType = np.op_type();
    node.domain = np.domain() == "ai.onnx" ? "" : np.domain();
    node.name = np.name().empty() ? node.opType + "_" + std::to_string(n) : np.name();
    if (node.opType.empty()) return fail("node #" + std::to_string(n) + " '" + np.name() + "' has no op_type");
    for (const auto& in : np.input()) node.inputs.push_back(in.empty() ? kNoValue : g.valueId(in));
    for (const auto& out : np.output()) node.outputs.push_back(out.empty() ? kNoValue : g.valueId(out));
    for (const auto& ap : np.attribute()) {
      if (ap.name().empty()) return fail(node.label() + ": an attribute has no name");
      Attribute a;
      QS_RETURN_IF_ERROR(convertAttribute(ap, a, node.label(), model));
      if (!node.attributes.emplace(ap.name(), std::move(a)).second) {
        return fail(node.label() + ": attribute '" + ap.name() + "' is given twice");
      }
    }
    // What the node's subgraphs read from outside themselves becomes its implicit inputs.
    std::unordered_set<std::string> implicitNames;
    for (const auto& [key, a] : node.attributes) {
      std::vector<const Graph*> subs;
      if (a.type == Attribute::Type::Graph && a.g) subs.push_back(a.g.get());
      for (const auto& sg : a.graphs) subs.push_back(sg.get());
      for (const Graph* sg : subs)
        for (ValueId r : sg->outerRefs)
          if (implicitNames.insert(sg->value(r).name).second) {
            node.inputs.push_back(g.valueId(sg->value(r).name));
            ++node.implicitInputs;
          }
    }
    if (!node.domain.empty() && model.opsets.find(node.domain) == model.opsets.end()) {
      model.opsets[node.domain] = 1;  // custom domains without an opset_import entry (common in TensorRT plugins)
    }
    g.nodes.push_back(std::move(node));
  }
  for (const auto& vi : gp.output()) {
    if (vi.name().empty()) return fail("a graph output has no name");
    ValueId id = g.valueId(vi.name());
    applyValueInfo(g, vi);
    g.value(id).isGraphOutput = true;
    g.outputs.push_back(id);
  }
  if (m_opt.foldConstantNodes) {
    std::vector<Node> kept;
    kept.reserve(g.nodes.size());
    for (auto& node : g.nodes) {
      if (node.opType == "Constant" && node.domain.empty() && node.outputs.size() == 1 && node.outputs[0] != kNoValue &&
          !g.value(node.outputs[0]).isGraphOutput) {
        const Attribute* a = nullptr;
        Tensor t;
        if ((a = node.attr("value")) && a->type == Attribute::Type::Tensor) t = a->t;
        else if ((a = node.attr("value_float")) && a->type == Attribute::Type::Float) t = Tensor::scalar<float>(a->f);
        else if ((a = node.attr("value_int")) && a->type == Attribute::Type::Int) t = Tensor::scalar<int64_t>(a->i);
        else if ((a = node.attr("value_floats")) && a->type == Attribute::Type::Floats)
          t = Tensor::fromVector<float>(a->floats, {(int64_t)a->floats.size()});
        else if ((a = node.attr("value_ints")) && a->type == Attribute::Type::Ints)
          t = Tensor::fromVector<int64_t>(a->ints, {(int64_t)a->ints.size()});
        if (!t.empty()) {
          Value& v = g.value(node.outputs[0]);
          if (v.constant) return fail(node.label() + ": output '" + v.name + "' is also an initializer");
          v.dtype = t.dtype();
          std::vector<Dim> dims;
          for (int64_t d : t.shape()) dims.push_back(Dim{d, {}});
          v.shape = dims;
          v.constant = std::move(t);
          v.fromConstantNode = true;
          continue;
        }
      }
      kept.push_back(std::move(node));
    }
    g.nodes = std::move(kept);
  }
  if (sub) {
    // Names that nothing in this graph defines are read from an enclosing scope; the enclosing
    // graph's finalize() reports any that no scope defines.
    std::unordered_set<ValueId> produced;
    for (const Node& n : g.nodes)
      for (ValueId o : n.outputs)
        if (o != kNoValue) produced.insert(o);
    auto markOuter = [&](ValueId id) {
      Value& v = g.value(id);
      if (v.isOuterRef || v.isGraphInput || v.constant || produced.count(id)) return;
      v.isOuterRef = true;
      g.outerRefs.push_back(id);
    };
    for (const Node& n : g.nodes)
      for (ValueId in : n.inputs)
        if (in != kNoValue) markOuter(in);
    for (ValueId out : g.outputs) markOuter(out);
  }
  return g.finalize(sub ? m_where + ": subgraph '" + gp.name() + "'" : m_where);
}

Result<std::shared_ptr<Model>> Converter::convert(onnx::ModelProto& proto) {
  auto model = std::make_shared<Model>();
  model->path = m_where;
  model->irVersion = proto.ir_version();
  model->producerName = proto.producer_name();
  model->producerVersion = proto.producer_version();
  model->domain = proto.domain();
  model->docString = proto.doc_string();
  for (const auto& kv : proto.metadata_props()) model->metadata.emplace_back(kv.key(), kv.value());
  for (const auto& os : proto.opset_import()) {
    std::string d = os.domain() == "ai.onnx" ? "" : os.domain();
    model->opsets[d] = os.version();
  }
  if (!proto.has_graph()) return fail("the file holds no graph (not an ONNX model?)");
  int64_t opset = model->defaultOpset();
  if (model->opsets.find("") == model->opsets.end()) {
    if (proto.opset_import_size() == 0) return fail("no opset_import: the default-domain opset is unknown");
  } else if (opset < kMinOpset || opset > kMaxOpset) {
    return unsupported(m_where + ": default-domain opset " + std::to_string(opset) + " is not supported (" +
                       std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + ")");
  }
  // Declared element types, checked as the file gives them (shape inference would fill an
  // UNDEFINED output type in).
  for (const auto& vi : proto.graph().input())
    if (vi.type().has_tensor_type()) QS_RETURN_IF_ERROR(checkElemType(vi, "graph input"));
  for (const auto& vi : proto.graph().output())
    if (vi.type().has_tensor_type()) QS_RETURN_IF_ERROR(checkElemType(vi, "graph output"));
  // Shapes missing after this come from execution; inference is a convenience for display.
  if (!m_opt.inferShapes) {
    model->shapeInference = "not run (turned off)";
  } else if (opset > 17) {
    model->shapeInference = "not run (libonnx 1.12 knows opsets up to 17)";
  } else {
    std::string why;
    model->shapeInference = inferShapesIsolated(proto, kShapeInferenceTimeoutMs, &why) ? "done" : why;
  }
  QS_RETURN_IF_ERROR(convertGraph(proto.graph(), model->graph, *model, false));
  return model;
}

Result<std::shared_ptr<Model>> parseAndConvert(const void* data, size_t size, const std::string& where,
                                               const std::string& baseDir, const LoadOptions& options) {
  if (size == 0) return invalidModel(where + ": the file is empty");
  if (size > (size_t)INT_MAX) {
    return unsupported(where + ": the protobuf part is " + std::to_string(size) +
                       " bytes; ONNX files over 2 GB must keep their weights as external data");
  }
  onnx::ModelProto proto;
  google::protobuf::io::CodedInputStream stream(static_cast<const uint8_t*>(data), (int)size);
  stream.SetTotalBytesLimit(INT_MAX);
  stream.SetRecursionLimit(64);
  if (!proto.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage()) {
    return invalidModel(where + ": not a valid ONNX model (protobuf parsing failed: truncated, not ONNX, or messages nested over 64 deep)");
  }
  Converter conv(where, baseDir, options);
  return conv.convert(proto);
}

}  // namespace

Result<NamedTensor> parseTensorProto(const void* data, size_t size, const std::string& where,
                                     const LoadOptions& options) {
  onnx::TensorProto tp;
  google::protobuf::io::CodedInputStream stream(static_cast<const uint8_t*>(data), (int)std::min<size_t>(size, INT_MAX));
  stream.SetTotalBytesLimit(INT_MAX);
  if (size > (size_t)INT_MAX || !tp.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage()) {
    return invalidArgument(where + ": not a valid serialized TensorProto");
  }
  Converter conv(where, "", options);
  auto t = conv.convertTensor(tp, "tensor");
  if (!t) return t.status();
  return NamedTensor{tp.name(), std::move(t).value()};
}

Result<std::shared_ptr<Model>> loadModelFromBytes(const void* data, size_t size, const std::string& name,
                                                  const std::string& baseDir, const LoadOptions& options) {
  return parseAndConvert(data, size, name, baseDir, options);
}

Result<std::shared_ptr<Model>> loadModel(const std::string& path, const LoadOptions& options) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return ioError(path + ": no such file");
  if (fs::is_directory(path, ec)) return ioError(path + ": is a directory, not an ONNX file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return ioError(path + ": cannot open: " + std::strerror(errno));
  std::streamsize size = in.tellg();
  if (size < 0) return ioError(path + ": cannot read its size");
  if ((uint64_t)size > (uint64_t)INT_MAX) {
    return unsupported(path + ": the file is " + std::to_string(size) +
                       " bytes; ONNX files over 2 GB must keep their weights as external data");
  }
  std::string bytes((size_t)size, '\0');
  in.seekg(0);
  in.read(bytes.data(), size);
  if (!in) return ioError(path + ": read failed");
  fs::path parent = fs::path(path).parent_path();
  return parseAndConvert(bytes.data(), bytes.size(), path, parent.empty() ? "." : parent.string(), options);
}

}  // namespace qs
