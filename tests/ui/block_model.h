// A generated model of repeated blocks for the grouping tests and the GUI benchmark: `blocks` blocks
// of `perBlock` nodes each, the same op-type sequence in every block (a fixed pseudo-random pick,
// so that no shorter period exists), a skip edge every 8th node and a residual Add closing each
// block. Names are scoped ("/blocks.3/MatMul_5") when `scoped`, else flat ("n1234").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/ir/graph.h"

namespace qs::test {

inline std::shared_ptr<Model> blockModel(int blocks, int perBlock, bool scoped) {
  auto model = std::make_shared<Model>();
  model->path = "generated-blocks";
  model->opsets[""] = 17;
  Graph& g = model->graph;
  const ValueId x = g.valueId("x");
  g.value(x).isGraphInput = true;
  g.value(x).dtype = DType::Float;
  g.value(x).shape = std::vector<Dim>{{1, ""}, {64, ""}};
  g.inputs.push_back(x);
  static const char* const ops[] = {"MatMul", "Add", "Relu", "Mul", "Softmax", "Transpose", "LayerNormalization", "Sigmoid"};
  std::vector<ValueId> produced = {x};
  int id = 0;
  for (int b = 0; b < blocks; ++b) {
    const ValueId blockInput = produced.back();
    uint32_t lcg = 12345;
    for (int k = 0; k < perBlock; ++k, ++id) {
      lcg = lcg * 1664525u + 1013904223u;
      Node node;
      node.opType = k + 1 == perBlock ? "Add" : ops[(lcg >> 16) % 8];
      node.name = scoped ? "/blocks." + std::to_string(b) + "/" + node.opType + "_" + std::to_string(k)
                         : "n" + std::to_string(id);
      node.inputs.push_back(produced.back());
      if (k + 1 == perBlock) node.inputs.push_back(blockInput);
      else if (k % 8 == 7) node.inputs.push_back(produced[produced.size() - 5]);
      const ValueId out = g.valueId("t" + std::to_string(id));
      node.outputs.push_back(out);
      g.nodes.push_back(std::move(node));
      produced.push_back(out);
    }
  }
  g.value(produced.back()).isGraphOutput = true;
  g.outputs.push_back(produced.back());
  if (!g.finalize("generated-blocks").isOk()) return nullptr;
  return model;
}

}  // namespace qs::test
