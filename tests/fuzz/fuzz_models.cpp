#include "tests/fuzz/fuzz_models.h"

#include "tests/support/control_flow_models.h"
#include "tests/support/onnx_builder.h"

namespace qs::fuzz {

using test::OnnxBuilder;

namespace {

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (float)((int)(i % 7) - 3);
  return v;
}

}  // namespace

std::string convReluConvModel() {
  OnnxBuilder b(13);
  b.input("x", {1, 3, 8, 8}).output("y", {1, 2, 6, 6});
  std::vector<float> w0(4 * 27);
  for (int c = 0; c < 4; ++c)
    for (int k = 0; k < 27; ++k) w0[(size_t)(c * 27 + k)] = 0.25f * (float)(c + 1) * ((k % 2) ? 1.f : -0.5f);
  b.initializer("w0", {4, 3, 3, 3}, w0);
  b.initializer("b0", {4}, {0.1f, -0.2f, 0.3f, 0.f});
  b.initializer("w1", {2, 4, 1, 1}, ramp(8, 0.125f));
  auto& c0 = b.node("Conv", {"x", "w0", "b0"}, {"c0"}, "conv0");
  OnnxBuilder::attrInts(c0, "kernel_shape", {3, 3});
  b.node("Relu", {"c0"}, {"r0"}, "relu0");
  b.node("Conv", {"r0", "w1"}, {"y"}, "conv1");
  return b.bytes();
}

std::vector<std::pair<std::string, std::string>> seedModels() {
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back("conv_relu_conv.onnx", convReluConvModel());
  {
    // Elementwise chain with broadcasting, a Constant node (folded), int64 data, Reshape.
    OnnxBuilder b(13);
    b.input("x", {-1, 4}).output("z", {-1, 2, 2});
    b.initializer("s", {4}, {1.f, 2.f, 3.f, 4.f});
    b.initializerInt64("shape", {3}, {-1, 2, 2});
    auto& k = b.node("Constant", {}, {"k"}, "const_k");
    OnnxBuilder::attrFloat(k, "value_float", 0.5f);
    b.node("Mul", {"x", "s"}, {"m"}, "mul");
    b.node("Add", {"m", "k"}, {"a"}, "add");
    b.node("Sigmoid", {"a"}, {"g"}, "sig");
    b.node("Reshape", {"g", "shape"}, {"z"}, "reshape");
    out.emplace_back("elementwise.onnx", b.bytes());
  }
  {
    // Pooling, normalisation, Gemm, Softmax: the attribute-heavy factories.
    OnnxBuilder b(11);
    b.input("x", {1, 2, 4, 4}).output("p", {1, 3});
    b.initializer("scale", {2}, {1.f, 1.f});
    b.initializer("bias", {2}, {0.f, 0.f});
    b.initializer("mean", {2}, {0.f, 0.f});
    b.initializer("var", {2}, {1.f, 1.f});
    b.initializer("gw", {8, 3}, ramp(24, 0.1f));
    b.initializer("gb", {3}, {0.f, 0.1f, 0.2f});
    auto& bn = b.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"bn"}, "bn");
    OnnxBuilder::attrFloat(bn, "epsilon", 1e-5f);
    auto& mp = b.node("MaxPool", {"bn"}, {"mp"}, "pool");
    OnnxBuilder::attrInts(mp, "kernel_shape", {2, 2});
    OnnxBuilder::attrInts(mp, "strides", {2, 2});
    OnnxBuilder::attrInts(mp, "pads", {0, 0, 0, 0});
    auto& fl = b.node("Flatten", {"mp"}, {"f"}, "flatten");
    OnnxBuilder::attrInt(fl, "axis", 1);
    auto& gm = b.node("Gemm", {"f", "gw", "gb"}, {"g"}, "gemm");
    OnnxBuilder::attrFloat(gm, "alpha", 1.f);
    OnnxBuilder::attrInt(gm, "transB", 0);
    auto& sm = b.node("Softmax", {"g"}, {"p"}, "softmax");
    OnnxBuilder::attrInt(sm, "axis", -1);
    out.emplace_back("pool_gemm_softmax.onnx", b.bytes());
  }
  {
    // Shape ops: Transpose, Concat, Slice, Gather, Resize, QDQ.
    OnnxBuilder b(13);
    b.input("x", {1, 2, 3, 3}).output("q", {1, 4, 6, 6});
    b.initializerInt64("starts", {1}, {0});
    b.initializerInt64("ends", {1}, {2});
    b.initializerInt64("axes", {1}, {1});
    b.initializerInt64("idx", {2}, {1, 0});
    b.initializer("roi", {0}, {});
    b.initializer("scales", {4}, {1.f, 1.f, 2.f, 2.f});
    b.initializer("qs", {}, {0.05f});
    auto& tp = b.node("Transpose", {"x"}, {"t"}, "transpose");
    OnnxBuilder::attrInts(tp, "perm", {0, 1, 3, 2});
    auto& cc = b.node("Concat", {"x", "t"}, {"c"}, "concat");
    OnnxBuilder::attrInt(cc, "axis", 1);
    b.node("Slice", {"c", "starts", "ends", "axes"}, {"s"}, "slice");
    auto& ga = b.node("Gather", {"c", "idx"}, {"gt"}, "gather");
    OnnxBuilder::attrInt(ga, "axis", 1);
    b.node("Add", {"s", "gt"}, {"sum"}, "add");
    OnnxBuilder::attrInt(b.node("Concat", {"sum", "s"}, {"c2"}, "concat2"), "axis", 1);
    auto& rs = b.node("Resize", {"c2", "roi", "scales"}, {"r"}, "resize");
    auto* mode = rs.add_attribute();
    mode->set_name("mode");
    mode->set_type(onnx::AttributeProto::STRING);
    mode->set_s("nearest");
    b.node("QuantizeLinear", {"r", "qs"}, {"rq"}, "quant");
    b.node("DequantizeLinear", {"rq", "qs"}, {"q"}, "dequant");
    out.emplace_back("shape_ops.onnx", b.bytes());
  }
  {
    // An IR 3 model: initializers listed as inputs too, opset 9, float_data storage.
    OnnxBuilder b(9);
    b.proto().set_ir_version(3);
    b.input("x", {1, 4}).input("w", {4, 2}).output("y", {1, 2});
    auto* w = b.graph().add_initializer();
    w->set_name("w");
    w->set_data_type(onnx::TensorProto::FLOAT);
    w->add_dims(4);
    w->add_dims(2);
    for (int i = 0; i < 8; ++i) w->add_float_data(0.5f * (float)i);
    b.node("MatMul", {"x", "w"}, {"m"}, "matmul");
    auto& cl = b.node("Clip", {"m"}, {"y"}, "clip");
    OnnxBuilder::attrFloat(cl, "min", 0.f);
    OnnxBuilder::attrFloat(cl, "max", 6.f);
    out.emplace_back("ir3_opset9.onnx", b.bytes());
  }
  {
    // A bidirectional LSTM with sequence_lens and initial states (the recurrent kernels' checks).
    OnnxBuilder b(14);
    b.input("x", {5, 2, 3}).input("lens", {2}, onnx::TensorProto::INT32).output("y", {5, 2, 2, 4});
    std::vector<float> w(2 * 16 * 3), r(2 * 16 * 4), bias(2 * 32);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * (float)(i % 7) - 0.15f;
    for (size_t i = 0; i < r.size(); ++i) r[i] = 0.04f * (float)(i % 5) - 0.1f;
    b.initializer("W", {2, 16, 3}, w);
    b.initializer("R", {2, 16, 4}, r);
    b.initializer("B", {2, 32}, bias);
    auto& n = b.node("LSTM", {"x", "W", "R", "B", "lens"}, {"y"}, "lstm");
    OnnxBuilder::attrInt(n, "hidden_size", 4);
    auto* dir = n.add_attribute();
    dir->set_name("direction");
    dir->set_type(onnx::AttributeProto::STRING);
    dir->set_s("bidirectional");
    out.emplace_back("lstm_bidirectional.onnx", b.bytes());
  }
  // Control flow: subgraphs reading outer scopes, an If nested in a Loop body, a Scan.
  out.emplace_back("if_outer_scope.onnx", test::ifModel().bytes());
  out.emplace_back("loop_nested_if.onnx", test::loopModel().bytes());
  out.emplace_back("scan_axes.onnx", test::scanModel().bytes());
  return out;
}

}  // namespace qs::fuzz
