#include "core/export/high_precision_export.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/ir/half.h"
#include "core/quant/high_precision_rules.h"

namespace qs {

namespace {

uint16_t toBits(float x, HighPrecision p) { return p == HighPrecision::Fp16 ? floatToHalf(x) : floatToBf16(x); }

// A float32 TensorProto (inline: external data was read in by the exporter) as `p`, in raw_data.
Status convertTensor(onnx::TensorProto& t, HighPrecision p, int target, const std::string& where) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    return unsupported(where + ": tensor '" + t.name() + "' is external data; cannot convert it to " +
                       highPrecisionName(p));
  }
  std::vector<float> values;
  if (t.has_raw_data()) {
    const std::string& raw = t.raw_data();
    values.resize(raw.size() / 4);
    std::memcpy(values.data(), raw.data(), values.size() * 4);
  } else {
    values.assign(t.float_data().begin(), t.float_data().end());
  }
  std::string out(values.size() * 2, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t b = toBits(values[i], p);
    out[2 * i] = (char)(b & 0xff);  // little-endian, as ONNX's raw_data
    out[2 * i + 1] = (char)(b >> 8);
  }
  t.clear_float_data();
  t.set_raw_data(out);
  t.set_data_type(target);
  return Status::ok();
}

onnx::NodeProto castNode(const std::string& name, const std::string& in, const std::string& out, int to) {
  onnx::NodeProto n;
  n.set_op_type("Cast");
  n.set_name(name);
  n.add_input(in);
  n.add_output(out);
  auto* a = n.add_attribute();
  a->set_name("to");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(to);
  return n;
}

bool isFloatTensorType(const onnx::ValueInfoProto& v) {
  return v.type().has_tensor_type() && v.type().tensor_type().elem_type() == onnx::TensorProto::FLOAT;
}

}  // namespace

Status convertFloatPart(onnx::ModelProto& proto, HighPrecision p, const std::string& where) {
  if (p == HighPrecision::Fp32) return Status::ok();
  const int target = p == HighPrecision::Fp16 ? (int)onnx::TensorProto::FLOAT16 : (int)onnx::TensorProto::BFLOAT16;
  const std::string suffix = std::string("_") + highPrecisionName(p);
  onnx::GraphProto& g = *proto.mutable_graph();

  std::unordered_set<std::string> used;
  for (const auto& n : g.node()) {
    for (const auto& a : n.attribute()) {
      if (a.has_g() || a.graphs_size() > 0) {
        return unsupported(where + ": node '" + n.name() + "' (" + n.op_type() + "): its subgraphs are not converted to " +
                           highPrecisionName(p) + "; use --high-precision-dtype fp32 for this model");
      }
    }
    used.insert(n.name());
    for (const auto& s : n.input()) used.insert(s);
    for (const auto& s : n.output()) used.insert(s);
  }
  for (const auto& t : g.initializer()) used.insert(t.name());
  for (const auto& v : g.input()) used.insert(v.name());
  for (const auto& v : g.output()) used.insert(v.name());
  auto take = [&](const std::string& base) {
    std::string name = base;
    for (int k = 1; used.count(name); ++k) name = base + "_" + std::to_string(k);
    used.insert(name);
    return name;
  };

  // Nodes kept in float32 (high_precision_rules.h), from the largest |x| of their float constants
  // (initializers and Constant nodes).
  std::unordered_map<std::string, float> constantAbsMax;
  auto absMax = [](const onnx::TensorProto& t) {
    float m = 0;
    if (t.has_raw_data()) {
      std::vector<float> v(t.raw_data().size() / 4);
      std::memcpy(v.data(), t.raw_data().data(), v.size() * 4);
      for (float x : v) m = std::max(m, std::fabs(x));
    } else {
      for (float x : t.float_data()) m = std::max(m, std::fabs(x));
    }
    return m;
  };
  for (const auto& t : g.initializer())
    if (t.data_type() == onnx::TensorProto::FLOAT) constantAbsMax[t.name()] = absMax(t);
  for (const auto& n : g.node())
    if (n.op_type() == "Constant" && n.output_size() == 1)
      for (const auto& a : n.attribute())
        if (a.name() == "value" && a.t().data_type() == onnx::TensorProto::FLOAT) constantAbsMax[n.output(0)] = absMax(a.t());
  std::unordered_set<const onnx::NodeProto*> kept;
  for (const auto& n : g.node()) {
    float m = 0;
    for (const auto& in : n.input())
      if (auto it = constantAbsMax.find(in); it != constantAbsMax.end()) m = std::max(m, it->second);
    if (keptInFloat32(n.op_type(), m, p)) kept.insert(&n);
  }
  auto float32Input = [&](const onnx::NodeProto& n, int i) {
    return keepsFloat32Input(n.op_type(), (size_t)i) || kept.count(&n) > 0;
  };

  // Initializers (and Constant nodes) read only where float32 is required stay float32.
  std::unordered_set<std::string> readAtKeep, readElsewhere;
  for (const auto& n : g.node())
    for (int i = 0; i < n.input_size(); ++i) (float32Input(n, i) ? readAtKeep : readElsewhere).insert(n.input(i));
  std::unordered_set<std::string> convertedInits, float32Inits;
  for (auto& t : *g.mutable_initializer()) {
    if (t.data_type() != onnx::TensorProto::FLOAT) continue;
    if (readAtKeep.count(t.name()) && !readElsewhere.count(t.name())) {
      float32Inits.insert(t.name());
      continue;
    }
    QS_RETURN_IF_ERROR(convertTensor(t, p, target, where));
    convertedInits.insert(t.name());
  }

  // Float32 graph inputs (not initializers): a Cast to the high precision, read by every node.
  std::unordered_map<std::string, std::string> renamed;  // input name -> what nodes read instead
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (auto& v : *g.mutable_input()) {
    if (!isFloatTensorType(v)) continue;
    if (convertedInits.count(v.name())) {  // an initializer listed as an input: its type follows
      v.mutable_type()->mutable_tensor_type()->set_elem_type(target);
      continue;
    }
    if (float32Inits.count(v.name())) continue;
    const std::string out = take(v.name() + suffix);
    *nodes.Add() = castNode(take(v.name() + "_Cast" + suffix), v.name(), out, target);
    renamed[v.name()] = out;
  }
  // Float32 graph outputs: their producers write `<name>_<dtype>`, cast back at the end.
  std::vector<onnx::NodeProto> tail;
  std::unordered_set<std::string> inputNames;
  for (const auto& v : g.input()) inputNames.insert(v.name());
  for (const auto& v : g.output()) {
    if (!isFloatTensorType(v) || inputNames.count(v.name()) || float32Inits.count(v.name())) continue;
    const std::string high = take(v.name() + suffix);
    renamed[v.name()] = high;
    tail.push_back(castNode(take(v.name() + "_Cast_float32"), high, v.name(), onnx::TensorProto::FLOAT));
  }

  for (auto& n : *g.mutable_node()) {
    for (int i = 0; i < n.output_size(); ++i)
      if (auto it = renamed.find(n.output(i)); it != renamed.end()) n.set_output(i, it->second);
    for (int i = 0; i < n.input_size(); ++i) {
      if (n.input(i).empty()) continue;
      if (auto it = renamed.find(n.input(i)); it != renamed.end()) n.set_input(i, it->second);
      if (float32Input(n, i) && !float32Inits.count(n.input(i))) {
        const std::string f32 = take(n.input(i) + "_float32");
        *nodes.Add() = castNode(take(n.input(i) + "_Cast_float32"), n.input(i), f32, onnx::TensorProto::FLOAT);
        n.set_input(i, f32);
      }
    }
    if (n.op_type() == "Cast" || n.op_type() == "EyeLike" || n.op_type().rfind("Random", 0) == 0) {
      for (auto& a : *n.mutable_attribute())
        if ((a.name() == "to" || a.name() == "dtype") && a.i() == onnx::TensorProto::FLOAT) a.set_i(target);
    } else if (n.op_type() == "Constant") {
      const bool keep = n.output_size() == 1 && readAtKeep.count(n.output(0)) && !readElsewhere.count(n.output(0));
      for (auto& a : *n.mutable_attribute()) {
        if (keep) break;
        if (a.name() == "value" && a.t().data_type() == onnx::TensorProto::FLOAT) {
          QS_RETURN_IF_ERROR(convertTensor(*a.mutable_t(), p, target, where));
        } else if (a.name() == "value_float" || a.name() == "value_floats") {
          onnx::TensorProto t;
          t.set_data_type(onnx::TensorProto::FLOAT);
          if (a.name() == "value_float") {
            t.add_float_data(a.f());
          } else {
            t.add_dims(a.floats_size());
            for (float f : a.floats()) t.add_float_data(f);
          }
          QS_RETURN_IF_ERROR(convertTensor(t, p, target, where));
          a.Clear();
          a.set_name("value");
          a.set_type(onnx::AttributeProto::TENSOR);
          *a.mutable_t() = std::move(t);
        }
      }
    } else if (n.op_type() == "ConstantOfShape") {
      bool has = false;
      for (auto& a : *n.mutable_attribute()) {
        if (a.name() != "value") continue;
        has = true;
        if (a.t().data_type() == onnx::TensorProto::FLOAT) QS_RETURN_IF_ERROR(convertTensor(*a.mutable_t(), p, target, where));
      }
      if (!has) {  // the default value is a float32 zero
        auto* a = n.add_attribute();
        a->set_name("value");
        a->set_type(onnx::AttributeProto::TENSOR);
        a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
        a->mutable_t()->add_dims(1);
        a->mutable_t()->add_float_data(0.f);
        QS_RETURN_IF_ERROR(convertTensor(*a->mutable_t(), p, target, where));
      }
    }
    std::vector<onnx::NodeProto> after;
    if (kept.count(&n)) {
      for (int i = 0; i < n.output_size(); ++i) {
        if (n.output(i).empty()) continue;
        const std::string f32 = take(n.output(i) + "_float32");
        after.push_back(castNode(take(n.output(i) + "_Cast" + suffix), f32, n.output(i), target));
        n.set_output(i, f32);
      }
    }
    *nodes.Add() = std::move(n);
    for (auto& c : after) *nodes.Add() = std::move(c);
  }
  for (auto& n : tail) *nodes.Add() = std::move(n);
  g.mutable_node()->Swap(&nodes);

  // bfloat16 inputs of Conv, Gemm, MatMul, Relu, ... entered the operator set at opset 22; from 19
  // only DFT (an input at 20) and GridSample (mode names at 20) changed meaning, the rest gained
  // types, so the file declares 22 (IR 10) unless it holds those.
  if (p == HighPrecision::Bf16) {
    for (const auto& n : g.node()) {
      if ((n.domain().empty() || n.domain() == "ai.onnx") && (n.op_type() == "DFT" || n.op_type() == "GridSample")) {
        return unsupported(where + ": node '" + n.name() + "' (" + n.op_type() + ") changed at opset 20; bfloat16 needs "
                           "opset 22: use --high-precision-dtype fp16 for this model");
      }
    }
    for (auto& os : *proto.mutable_opset_import())
      if ((os.domain().empty() || os.domain() == "ai.onnx") && os.version() < 22) os.set_version(22);
    if (proto.ir_version() < 10) proto.set_ir_version(10);
  }

  auto* vi = g.mutable_value_info();
  for (int i = vi->size() - 1; i >= 0; --i)
    if (isFloatTensorType(vi->Get(i))) vi->DeleteSubrange(i, 1);
  return Status::ok();
}

}  // namespace qs
