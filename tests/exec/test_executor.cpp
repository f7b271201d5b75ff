// Executor behaviour: custom op handlers, observers, freeing of intermediates, input checks,
// cancellation.
#include <gtest/gtest.h>

#include <atomic>

#include "core/exec/executor.h"
#include "core/onnx/loader.h"
#include "tests/support/model_helpers.h"
#include "tests/support/onnx_builder.h"

using namespace qs;
using qs::test::OnnxBuilder;
using qs::test::builtModel;
using qs::test::randomTensor;
using qs::test::randomValues;
using qs::test::relativeError;

namespace {

// A model with a TensorRT plugin op, like the EfficientNMS_TRT that PPQ's seed registers.
OnnxBuilder nmsModel() {
  OnnxBuilder b(13);
  b.input("boxes", {1, 4, 4}).output("num", {1, 1}, onnx::TensorProto::INT32).output("scores", {1, 4});
  auto& n = b.node("EfficientNMS_TRT", {"boxes"}, {"num", "scores"}, "nms");
  n.set_domain("");
  return b;
}

}  // namespace

TEST(CoreExecutor, CustomOpHandlerRegisteredThroughTheApi) {
  auto model = builtModel(nmsModel());
  ASSERT_TRUE(model);
  EXPECT_EQ(Executor::create(model).status().code(), StatusCode::Unsupported);

  KernelRegistry registry = KernelRegistry::builtin();
  int created = 0;
  registry.add({"EfficientNMS_TRT", "", 1, 1000, [&created](const KernelInit& init) -> Result<std::unique_ptr<Kernel>> {
                  ++created;
                  EXPECT_EQ(init.node.name, "nms");
                  return makeKernel([](KernelContext& ctx) -> Status {
                    const Tensor& boxes = ctx.input(0);
                    ctx.outputs[0] = Tensor::zeros(DType::Int32, {1, 1});
                    ctx.outputs[0].data<int32_t>()[0] = (int32_t)boxes.dim(1);
                    ctx.outputs[1] = Tensor(DType::Float, {1, boxes.dim(1)});
                    for (int64_t i = 0; i < boxes.dim(1); ++i) ctx.outputs[1].data<float>()[i] = boxes.data<float>()[i * 4];
                    return Status::ok();
                  });
                }});
  ExecutorOptions eo;
  eo.registry = &registry;
  auto ex = Executor::create(model, eo);
  ASSERT_TRUE(ex) << ex.status().message();
  EXPECT_EQ(created, 1);
  Tensor boxes(DType::Float, {1, 4, 4});
  for (int i = 0; i < 16; ++i) boxes.data<float>()[i] = (float)i;
  auto out = (*ex)->run({{"boxes", boxes}});
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ((*out)[0].data<int32_t>()[0], 4);
  EXPECT_EQ((*out)[1].data<float>()[2], 8.f);
}

TEST(CoreExecutor, ObserverSeesEveryNodeOutputAndIntermediatesAreFreed) {
  OnnxBuilder b(13);
  b.input("x", {4}).output("y", {4});
  b.node("Neg", {"x"}, {"a"}, "n1");
  b.node("Abs", {"a"}, {"c"}, "n2");
  b.node("Neg", {"c"}, {"y"}, "n3");
  auto model = builtModel(b);
  auto ex = Executor::create(model);
  ASSERT_TRUE(ex) << ex.status().message();

  struct Keeper : ExecutionObserver {
    std::vector<std::string> seen;
    std::vector<Tensor> kept;
    const Graph* g = nullptr;
    void onGraphInput(ValueId id, const Tensor&) override { seen.push_back("in:" + g->value(id).name); }
    void onNodeOutput(NodeId, size_t, ValueId id, const Tensor& t) override {
      seen.push_back(g->value(id).name);
      kept.push_back(t);  // keeping a copy keeps the buffer alive after the executor frees it
    }
  } keeper;
  keeper.g = &model->graph;
  Tensor x(DType::Float, {4});
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = (float)i + 1;
  RunOptions ro;
  ro.observer = &keeper;
  RunProfile profile;
  ro.profile = &profile;
  auto out = (*ex)->run({{"x", x}}, ro);
  ASSERT_TRUE(out);
  EXPECT_EQ(keeper.seen, (std::vector<std::string>{"in:x", "a", "c", "y"}));
  EXPECT_EQ(keeper.kept[0].data<float>()[3], -4.f);
  EXPECT_EQ(keeper.kept[1].data<float>()[3], 4.f);
  EXPECT_EQ((*out)[0].data<float>()[3], -4.f);
  ASSERT_EQ(profile.nodes.size(), 3u);
  EXPECT_EQ(profile.nodes[0].outputBytes, 16u);
  // a and c are freed after their consumers: at most two 16-byte tensors are ever live.
  EXPECT_LE(profile.peakLiveBytes, 32u);
}

TEST(CoreExecutor, InputTransformReplacesANodeInput) {
  OnnxBuilder b(13);
  b.input("x", {2}).output("y", {2});
  b.node("Neg", {"x"}, {"y"}, "neg");
  auto model = builtModel(b);
  auto ex = Executor::create(model);
  ASSERT_TRUE(ex);
  struct Doubler : InputTransform {
    const Tensor* transform(NodeId, size_t, const Tensor& v, Tensor& storage) override {
      storage = v.clone();
      for (int64_t i = 0; i < storage.numel(); ++i) storage.data<float>()[i] *= 2;
      return &storage;
    }
  } doubler;
  Tensor x = Tensor::fromVector<float>({1.f, 2.f}, {2});
  RunOptions ro;
  ro.inputTransform = &doubler;
  auto out = (*ex)->run({{"x", x}}, ro);
  ASSERT_TRUE(out);
  EXPECT_EQ((*out)[0].data<float>()[1], -4.f);
  EXPECT_EQ(x.data<float>()[1], 2.f);  // the caller's input is untouched
}

TEST(CoreExecutor, FeedErrorsNameTheInput) {
  OnnxBuilder b(13);
  b.input("x", {-1, 3}).output("y", {-1, 3});
  b.node("Relu", {"x"}, {"y"}, "relu");
  auto model = builtModel(b, "feeds.onnx");
  auto ex = Executor::create(model);
  ASSERT_TRUE(ex);
  EXPECT_TRUE((*ex)->run({{"x", Tensor::zeros(DType::Float, {5, 3})}}));  // symbolic batch accepted
  auto missing = (*ex)->run({});
  EXPECT_EQ(missing.status().message(), "feeds.onnx: input 'x' is missing");
  auto shape = (*ex)->run({{"x", Tensor::zeros(DType::Float, {5, 4})}});
  EXPECT_EQ(shape.status().message(), "feeds.onnx: input 'x' expects shape [N,3], got [5,4]");
  auto dtype = (*ex)->run({{"x", Tensor::zeros(DType::Int64, {5, 3})}});
  EXPECT_EQ(dtype.status().message(), "feeds.onnx: input 'x' expects float, got int64");
  auto unknown = (*ex)->run({{"x", Tensor::zeros(DType::Float, {1, 3})}, {"z", Tensor::zeros(DType::Float, {1})}});
  EXPECT_EQ(unknown.status().code(), StatusCode::InvalidArgument);
}

TEST(CoreExecutor, CancelStopsBetweenNodes) {
  OnnxBuilder b(13);
  b.input("x", {1}).output("y", {1});
  b.node("Relu", {"x"}, {"y"});
  auto model = builtModel(b);
  auto ex = Executor::create(model);
  ASSERT_TRUE(ex);
  std::atomic<bool> cancel{true};
  RunOptions ro;
  ro.cancel = &cancel;
  auto out = (*ex)->run({{"x", Tensor::zeros(DType::Float, {1})}}, ro);
  EXPECT_EQ(out.status().code(), StatusCode::Cancelled);
}

TEST(CoreExecutor, HundredThousandNodeChainRuns) {
  OnnxBuilder b(13);
  b.input("x", {1}).output("v100000", {1});
  for (int i = 0; i < 100000; ++i) b.node("Neg", {i == 0 ? "x" : "v" + std::to_string(i)}, {"v" + std::to_string(i + 1)});
  auto model = builtModel(b);
  ExecutorOptions eo;
  eo.threads = 1;
  auto ex = Executor::create(model, eo);
  ASSERT_TRUE(ex);
  auto out = (*ex)->run({{"x", Tensor::fromVector<float>({3.f}, {1})}});
  ASSERT_TRUE(out);
  EXPECT_EQ((*out)[0].data<float>()[0], 3.f);  // an even number of negations
}
