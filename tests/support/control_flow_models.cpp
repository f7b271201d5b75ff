#include "tests/support/control_flow_models.h"

namespace qs::test {

namespace {

// A subgraph under construction (GraphProto has no builder of its own in the test support).
struct Sub {
  onnx::GraphProto g;
  explicit Sub(const std::string& name) { g.set_name(name); }
  Sub& input(const std::string& name, int elemType, const std::vector<int64_t>& dims) {
    OnnxBuilder::setType(g.add_input(), name, elemType, dims);
    return *this;
  }
  Sub& untypedInput(const std::string& name) {
    g.add_input()->set_name(name);
    return *this;
  }
  Sub& output(const std::string& name, int elemType, const std::vector<int64_t>& dims) {
    OnnxBuilder::setType(g.add_output(), name, elemType, dims);
    return *this;
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out) {
    auto* n = g.add_node();
    n->set_op_type(op);
    n->set_name(g.name() + "_" + op + "_" + std::to_string(g.node_size()));
    for (auto& i : in) n->add_input(i);
    for (auto& o : out) n->add_output(o);
    return *n;
  }
  void floatConst(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
    auto* t = g.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
  }
};

constexpr int F = onnx::TensorProto::FLOAT;
constexpr int I64 = onnx::TensorProto::INT64;
constexpr int B = onnx::TensorProto::BOOL;

}  // namespace

OnnxBuilder ifModel() {
  OnnxBuilder b(13);
  b.input("x", {2, 3}).input("c", {}, B).output("y", {2, 3});
  b.initializer("two", {}, {2.f});
  b.node("Mul", {"x", "two"}, {"w"});
  Sub thenB("then_branch");
  thenB.output("t_out", F, {2, 3});
  thenB.node("Add", {"w", "x"}, {"t_out"});
  Sub elseB("else_branch");
  elseB.output("e_out", F, {2, 3});
  elseB.floatConst("one", {}, {1.f});
  elseB.node("Sub", {"w", "one"}, {"e_out"});
  auto& n = b.node("If", {"c"}, {"y"}, "branch");
  OnnxBuilder::attrGraph(n, "then_branch", thenB.g);
  OnnxBuilder::attrGraph(n, "else_branch", elseB.g);
  return b;
}

OnnxBuilder loopModel() {
  OnnxBuilder b(13);
  b.input("x", {3}).input("M", {}, I64).output("acc_final", {3}).output("accs", {-1, 3});
  b.initializer("acc0", {3}, {0.5f, 0.f, -1.f});
  auto& t = *b.graph().add_initializer();
  t.set_name("keep_going");
  t.set_data_type(B);
  t.add_int32_data(1);
  Sub body("body");
  body.input("i", I64, {}).input("cond_in", B, {}).input("acc", F, {3});
  body.output("cond_out", B, {}).output("acc_next", F, {3}).output("acc_scan", F, {3});
  body.node("Cast", {"i"}, {"fi"}).add_attribute()->CopyFrom([] {
    onnx::AttributeProto a;
    a.set_name("to");
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(F);
    return a;
  }());
  auto* two = body.g.add_initializer();
  two->set_name("two_i");
  two->set_data_type(I64);
  two->add_int64_data(2);
  auto* zero = body.g.add_initializer();
  zero->set_name("zero_i");
  zero->set_data_type(I64);
  zero->add_int64_data(0);
  body.node("Mod", {"i", "two_i"}, {"parity"});
  body.node("Equal", {"parity", "zero_i"}, {"even"});
  Sub evenB("even_branch");
  evenB.output("ev", F, {3});
  evenB.node("Mul", {"x", "fi"}, {"ev"});
  Sub oddB("odd_branch");
  oddB.output("od", F, {3});
  oddB.node("Neg", {"x"}, {"od"});
  auto& nested = body.node("If", {"even"}, {"step"});
  OnnxBuilder::attrGraph(nested, "then_branch", evenB.g);
  OnnxBuilder::attrGraph(nested, "else_branch", oddB.g);
  body.node("Add", {"acc", "step"}, {"acc_next"});
  body.node("Identity", {"cond_in"}, {"cond_out"});
  body.node("Identity", {"acc_next"}, {"acc_scan"});
  auto& n = b.node("Loop", {"M", "keep_going", "acc0"}, {"acc_final", "accs"}, "loop");
  OnnxBuilder::attrGraph(n, "body", body.g);
  return b;
}

OnnxBuilder scanModel() {
  OnnxBuilder b(11);
  b.input("s0", {2}).input("X", {4, 2}).input("Y", {2, 4}).output("s_final", {2}).output("steps", {2, 4});
  Sub body("scan_body");
  body.input("s", F, {2}).input("xt", F, {2}).input("yt", F, {2});
  body.output("s_next", F, {2}).output("step", F, {2});
  body.node("Add", {"s", "xt"}, {"sx"});
  body.node("Add", {"sx", "yt"}, {"s_next"});
  body.node("Identity", {"s_next"}, {"step"});
  auto& n = b.node("Scan", {"s0", "X", "Y"}, {"s_final", "steps"}, "scan");
  OnnxBuilder::attrInt(n, "num_scan_inputs", 2);
  OnnxBuilder::attrInts(n, "scan_input_axes", {0, 1});
  OnnxBuilder::attrInts(n, "scan_input_directions", {0, 1});
  OnnxBuilder::attrInts(n, "scan_output_axes", {1});
  OnnxBuilder::attrGraph(n, "body", body.g);
  return b;
}

}  // namespace qs::test
