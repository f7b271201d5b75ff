// A generated model for the layout tests and the GUI benchmark: a chain of `n` nodes with a skip
// connection (Add) every 4th node reaching 7 values back, plus a Conv weight every so often (the
// shape of a ResNet-like backbone), built in code without a file.
#pragma once

#include <memory>
#include <string>

#include "core/ir/graph.h"

namespace qs::test {

inline std::shared_ptr<Model> chainModel(int n) {
  auto model = std::make_shared<Model>();
  model->path = "generated-chain";
  model->opsets[""] = 17;
  Graph& g = model->graph;
  const ValueId x = g.valueId("x");
  g.value(x).isGraphInput = true;
  g.value(x).dtype = DType::Float;
  g.value(x).shape = std::vector<Dim>{{1, ""}, {16, ""}, {-1, "h"}, {-1, "w"}};
  g.inputs.push_back(x);
  std::vector<ValueId> produced = {x};
  static const char* const ops[] = {"Conv", "BatchNormalization", "Relu", "Add", "Mul", "Reshape", "MaxPool"};
  for (int i = 0; i < n; ++i) {
    Node node;
    node.name = "node_" + std::to_string(i);
    node.inputs.push_back(produced.back());
    if (i % 4 == 3 && produced.size() > 7) {
      node.opType = "Add";
      node.inputs.push_back(produced[produced.size() - 7]);
    } else {
      node.opType = ops[i % 7 == 3 ? 2 : i % 7];
      if (node.opType == "Conv") {
        const ValueId w = g.valueId("w_" + std::to_string(i));
        g.value(w).constant = Tensor::zeros(DType::Float, {16, 16, 3, 3});
        g.value(w).dtype = DType::Float;
        node.inputs.push_back(w);
      }
    }
    const ValueId out = g.valueId("t_" + std::to_string(i));
    node.outputs.push_back(out);
    g.nodes.push_back(std::move(node));
    produced.push_back(out);
  }
  g.value(produced.back()).isGraphOutput = true;
  g.outputs.push_back(produced.back());
  Status st = g.finalize("generated-chain");
  if (!st.isOk()) return nullptr;
  return model;
}

}  // namespace qs::test
