// Builds ONNX models in code for tests (valid ones and deliberately broken ones).
// Test-only: links onnx_proto directly, which core/ confines to core/onnx/.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

namespace qs::test {

class OnnxBuilder {
 public:
  explicit OnnxBuilder(int64_t opset = 13) {
    m_model.set_ir_version(8);
    m_model.set_producer_name("quantscope-tests");
    auto* os = m_model.add_opset_import();
    os->set_domain("");
    os->set_version(opset);
    m_model.mutable_graph()->set_name("test");
  }
  onnx::ModelProto& proto() { return m_model; }
  onnx::GraphProto& graph() { return *m_model.mutable_graph(); }

  static void setType(onnx::ValueInfoProto* vi, const std::string& name, int elemType, const std::vector<int64_t>& dims) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elemType);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) {
      if (d >= 0) shape->add_dim()->set_dim_value(d);
      else shape->add_dim()->set_dim_param("N");
    }
  }
  OnnxBuilder& input(const std::string& name, const std::vector<int64_t>& dims, int elemType = onnx::TensorProto::FLOAT) {
    setType(graph().add_input(), name, elemType, dims);
    return *this;
  }
  OnnxBuilder& output(const std::string& name, const std::vector<int64_t>& dims, int elemType = onnx::TensorProto::FLOAT) {
    setType(graph().add_output(), name, elemType, dims);
    return *this;
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    auto* n = graph().add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(graph().node_size()) : name);
    for (auto& i : inputs) n->add_input(i);
    for (auto& o : outputs) n->add_output(o);
    return *n;
  }
  static void attrInt(onnx::NodeProto& n, const std::string& key, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attrInts(onnx::NodeProto& n, const std::string& key, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
  }
  static void attrGraph(onnx::NodeProto& n, const std::string& key, const onnx::GraphProto& g) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = g;
  }
  static void attrString(onnx::NodeProto& n, const std::string& key, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  static void attrFloat(onnx::NodeProto& n, const std::string& key, float v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  onnx::TensorProto& initializer(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& values) {
    auto* t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    return *t;
  }
  onnx::TensorProto& initializerInt64(const std::string& name, const std::vector<int64_t>& dims,
                                      const std::vector<int64_t>& values) {
    auto* t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (auto d : dims) t->add_dims(d);
    for (auto v : values) t->add_int64_data(v);
    return *t;
  }
  std::string bytes() const { return m_model.SerializeAsString(); }
  void save(const std::string& path) const;

 private:
  onnx::ModelProto m_model;
};

/// A fresh empty folder under the system temp dir, removed by the caller if wanted.
std::string makeTempDir(const std::string& tag);
void writeBytes(const std::string& path, const std::string& bytes);

}  // namespace qs::test
