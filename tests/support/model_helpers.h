// Helpers of the executor and rewrite tests: load a model built in code, seeded random values,
// the error measure those tests compare outputs with, a grouped Conv and a Relu6 to build models with, a node
// looked up by name, and a profiled run with the kernels it ran. Header-only: the test binaries link the core, qs_test_support does not.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/exec/executor.h"
#include "core/onnx/loader.h"
#include "tests/support/onnx_builder.h"

namespace qs::test {

/// The model `b` describes, loaded as from a file called `name` (a failure is a test failure).
inline std::shared_ptr<Model> builtModel(const OnnxBuilder& b, const std::string& name = "m.onnx") {
  std::string bytes = b.bytes();
  auto m = loadModelFromBytes(bytes.data(), bytes.size(), name, "");
  EXPECT_TRUE(m) << m.status().message();
  return m ? *m : nullptr;
}

/// An executor of `m` with the graph rewrites on or off and `threads` threads (a failure is a test
/// failure and nullptr).
inline std::unique_ptr<Executor> makeExecutor(std::shared_ptr<Model> m, bool rewrites, int threads) {
  ExecutorOptions eo;
  eo.rewrites = rewrites;
  eo.threads = threads;
  auto ex = Executor::create(m, eo);
  EXPECT_TRUE(ex) << ex.status().message();
  return ex ? std::move(ex).value() : nullptr;
}

/// n values uniform in [lo, hi).
inline std::vector<float> randomValues(size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

inline Tensor randomTensor(const Shape& s, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  return Tensor::fromVector<float>(randomValues((size_t)numelOf(s), rng, lo, hi), s);
}

/// Largest |a - b| relative to the largest |b| of the tensor (float tensors of one shape).
inline double relativeError(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double maxDiff = 0, maxRef = 1e-6;
  for (int64_t i = 0; i < a.numel() && i < b.numel(); ++i) {
    maxDiff = std::max(maxDiff, (double)std::fabs(a.data<float>()[i] - b.data<float>()[i]));
    maxRef = std::max(maxRef, (double)std::fabs(b.data<float>()[i]));
  }
  return maxDiff / maxRef;
}

/// A Conv of `in` into `out` with `group` groups, W [cout, cin/group, k, k] and B [cout] seeded from `rng` (out_w,
/// out_b), pads k/2, node "conv_<out>".
inline void groupedConv(OnnxBuilder& b, const std::string& in, const std::string& out, int64_t cin, int64_t cout,
                        int64_t k, int64_t group, std::mt19937& rng, int64_t stride = 1) {
  const float scale = 1.5f / std::sqrt(float(cin / group * k * k));
  b.initializer(out + "_w", {cout, cin / group, k, k},
                randomValues((size_t)(cout * cin / group * k * k), rng, -scale, scale));
  b.initializer(out + "_b", {cout}, randomValues((size_t)cout, rng, -0.1f, 0.1f));
  auto& n = b.node("Conv", {in, out + "_w", out + "_b"}, {out}, "conv_" + out);
  OnnxBuilder::attrInts(n, "kernel_shape", {k, k});
  OnnxBuilder::attrInts(n, "pads", {k / 2, k / 2, k / 2, k / 2});
  OnnxBuilder::attrInts(n, "strides", {stride, stride});
  OnnxBuilder::attrInt(n, "group", group);
}

/// Clip(in, 0, 6) into `out` (MobileNetV2's Relu6 as torch.onnx writes it).
inline void relu6(OnnxBuilder& b, const std::string& in, const std::string& out) {
  b.initializer(out + "_lo", {}, {0.f});
  b.initializer(out + "_hi", {}, {6.f});
  b.node("Clip", {in, out + "_lo", out + "_hi"}, {out});
}

/// The id of the node called `name` in `g`; -1 when there is none.
inline NodeId nodeNamed(const Graph& g, std::string_view name) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].name == name) return (NodeId)i;
  return -1;
}

inline NodeId nodeNamed(const Model& m, std::string_view name) { return nodeNamed(m.graph, name); }

/// One run with a profile: what the rewrite tests check the fused kernels by.
struct ProfiledRun {
  bool ok = false;              // false: the run failed (a test failure) and `outputs` is empty
  std::vector<Tensor> outputs;  // the graph outputs in declaration order
  RunProfile profile;
  /// What ran, once per profiled node: the kernel's profile name ("FusedConv(Conv,Relu)",
  /// "BlockedConv(...)"), else the original node's op type.
  std::multiset<std::string> kernels;

  /// How many of `kernels` start with `prefix` ("BlockedConv" counts every "BlockedConv(...)").
  int countStartingWith(std::string_view prefix) const {
    int c = 0;
    for (const std::string& k : kernels) c += k.rfind(prefix, 0) == 0 ? 1 : 0;
    return c;
  }
};

/// Runs `ex` on `feeds` with a profile (a failure is a test failure and `ok` false).
inline ProfiledRun profiledRun(const Executor& ex, const std::vector<NamedTensor>& feeds) {
  ProfiledRun r;
  RunOptions ro;
  ro.profile = &r.profile;
  auto got = ex.run(feeds, ro);
  EXPECT_TRUE(got) << got.status().message();
  if (!got) return r;
  r.ok = true;
  r.outputs = std::move(got).value();
  const Graph& g = ex.model().graph;
  for (const NodeProfile& np : r.profile.nodes) {
    const bool known = np.node >= 0 && np.node < (NodeId)g.nodes.size();
    r.kernels.insert(!np.kernel.empty() || !known ? np.kernel : g.nodes[(size_t)np.node].opType);
  }
  return r;
}

}  // namespace qs::test
