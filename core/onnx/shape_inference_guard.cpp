#include "core/onnx/shape_inference_guard.h"

#include <onnx/defs/shape_inference.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace qs {

namespace {

// The input whose dims beyond the first two give the kernel, for the ops whose 1.12 inference
// (convPoolShapeInference, convTransposeShapeInference) takes kernel_shape from it when the
// attribute is absent: the kernel then has rank(W) - 2 entries while dilations, strides and the
// input's dims are indexed by it with rank(X) - 2 entries (a SEGV found by fuzz_model).
int kernelInput(const std::string& op) {
  if (op == "Conv" || op == "ConvInteger" || op == "ConvTranspose") return 1;
  if (op == "QLinearConv") return 3;
  return -1;
}

int rankOf(onnx::InferenceContext& ctx, size_t input) {
  if (input >= ctx.getNumInputs()) return -1;
  const onnx::TypeProto* t = ctx.getInputType(input);
  if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return -1;
  return t->tensor_type().shape().dim_size();
}

onnx::InferenceFunction guarded(const std::string& op, onnx::InferenceFunction inner) {
  const int w = kernelInput(op);
  return [op, w, inner = std::move(inner)](onnx::InferenceContext& ctx) {
    const int xRank = rankOf(ctx, 0);
    const int wRank = rankOf(ctx, (size_t)w);
    if (xRank >= 0 && wRank >= 0 && xRank != wRank) {
      fail_shape_inference(op, ": the input has rank ", xRank, " but the weight has rank ", wRank);
    }
    inner(ctx);
  };
}

class GuardedRegistry final : public onnx::ISchemaRegistry {
 public:
  const onnx::OpSchema* GetSchema(const std::string& key, const int maxInclusiveVersion,
                                  const std::string& domain) const override {
    const onnx::OpSchema* s = onnx::OpSchemaRegistry::Instance()->GetSchema(key, maxInclusiveVersion, domain);
    if (!s || !s->has_type_and_shape_inference_function() || kernelInput(key) < 0) return s;
    std::lock_guard<std::mutex> lock(m_mutex);
    auto& copy = m_copies[s];
    if (!copy) {
      copy = std::make_unique<onnx::OpSchema>(*s);
      copy->TypeAndShapeInferenceFunction(guarded(key, s->GetTypeAndShapeInferenceFunction()));
    }
    return copy.get();
  }

 private:
  mutable std::mutex m_mutex;
  mutable std::map<const onnx::OpSchema*, std::unique_ptr<onnx::OpSchema>> m_copies;
};

}  // namespace

const onnx::ISchemaRegistry* guardedSchemaRegistry() {
  static const GuardedRegistry registry;
  return &registry;
}

}  // namespace qs
