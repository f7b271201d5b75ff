// What the Conv kernel tests share: one FusedConv node run through createConv on given tensors, and the window of a
// k x k filter padded to keep the size at stride 1.
// Header-only, like model_helpers.h.
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/exec/kernel.h"
#include "core/kernels/conv.h"

namespace qs::test {

/// A FusedConv node (activations `acts`) on x and w (and b): W (and B) constants of the graph when
/// `constant` (what the executor prepacks at load), else plain inputs (the GEMM path). Extra
/// attributes (strides, pads, ...) from `attrs`. An empty tensor (and a test failure) when it fails.
inline Tensor runFusedConv(const Tensor& x, const Tensor& w, const Tensor* b, const std::vector<FusedActivation>& acts,
                           bool constant, int threads,
                           const std::vector<std::pair<std::string, std::vector<int64_t>>>& attrs = {}) {
  Graph graph;
  Node node;
  node.name = "conv";
  node.opType = kFusedConvOp;
  node.domain = kFusedDomain;
  setFusedActivations(node, acts);
  for (const auto& [name, ints] : attrs) {
    Attribute a;
    a.type = Attribute::Type::Ints;
    a.ints = ints;
    node.attributes[name] = a;
  }
  node.inputs = {graph.valueId("x"), graph.valueId("w")};
  if (constant) graph.value(node.inputs[1]).constant = w;
  if (b) {
    node.inputs.push_back(graph.valueId("b"));
    if (constant) graph.value(node.inputs[2]).constant = *b;
  }
  node.outputs = {graph.valueId("y")};
  auto k = createConv(KernelInit{node, 1, graph, false});
  EXPECT_TRUE(k.isOk()) << k.status().message();
  if (!k.isOk()) return Tensor();
  const Tensor* in[3] = {&x, &w, b};
  Tensor out[1];
  KernelContext ctx;
  ctx.inputs = std::span<const Tensor* const>(in, b ? 3 : 2);
  ctx.outputs = out;
  ctx.threads = threads;
  Status st = k.value()->run(ctx);
  EXPECT_TRUE(st.isOk()) << st.message();
  return out[0];
}

/// The 2-D window of a k x k filter at stride s over an H x W map, padded k/2 on every side, dilation 1 (a test
/// failure when it does not resolve).
inline WindowGeometry paddedWindow(int64_t H, int64_t W, int64_t k, int64_t s) {
  WindowAttrs attrs;
  const int64_t p = k / 2;
  attrs.strides = {s, s};
  attrs.dilations = {1, 1};
  attrs.pads = {p, p, p, p};
  WindowGeometry g;
  EXPECT_TRUE(resolveWindow(attrs, {H, W}, {k, k}, false, g).isOk());
  return g;
}

}  // namespace qs::test
