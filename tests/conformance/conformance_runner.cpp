// Runs ONNX's node conformance suite (model.onnx + test_data_set_*/input_*.pb, output_*.pb,
// generated from Debian's python3-onnx) through the loader and executor.
// A test is in scope when every op of its model is in --ops. Listed expected failures
// (with their reason, documented in docs/conformance.md) do not fail the run.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/exec/executor.h"
#include "core/onnx/loader.h"

namespace fs = std::filesystem;
using namespace qs;

namespace {

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::set<std::string> readOps(const std::string& path) {
  std::set<std::string> ops;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    std::istringstream ls(line);
    std::string op;
    while (ls >> op) ops.insert(op);
  }
  return ops;
}

std::map<std::string, std::string> readExpected(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string name;
    ls >> name;
    std::string reason;
    std::getline(ls, reason);
    out[name] = reason;
  }
  return out;
}

bool isFloat(DType t) {
  return t == DType::Float || t == DType::Double || t == DType::Float16 || t == DType::BFloat16;
}

// Returns an empty string when equal within tolerance, else a description.
std::string compare(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (got.shape() != want.shape()) {
    return "shape " + shapeToString(got.shape()) + " != expected " + shapeToString(want.shape());
  }
  if (got.dtype() != want.dtype()) return "dtype " + dtypeName(got.dtype()) + " != expected " + dtypeName(want.dtype());
  for (int64_t i = 0; i < want.numel(); ++i) {
    double a = got.valueAsDouble(i), b = want.valueAsDouble(i);
    if (isFloat(want.dtype())) {
      if (std::isnan(a) && std::isnan(b)) continue;
      if (std::isinf(b) && a == b) continue;
      if (!(std::fabs(a - b) <= atol + rtol * std::fabs(b))) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "element %lld: %.7g != expected %.7g", (long long)i, a, b);
        return buf;
      }
    } else if (a != b) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "element %lld: %.17g != expected %.17g", (long long)i, a, b);
      return buf;
    }
  }
  return {};
}

// onnx 1.12's generator stores bfloat16 tensors as uint16 bits: read them as the model declares.
void retagBf16(Tensor& t, const Graph& g, ValueId id) {
  if (id == kNoValue || t.dtype() != DType::UInt16 || g.value(id).dtype != DType::BFloat16) return;
  Tensor b(DType::BFloat16, t.shape());
  if (t.numel()) std::memcpy(b.raw(), t.raw(), t.byteSize());
  t = b;
}

std::vector<fs::path> numbered(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> files;
  for (int i = 0;; ++i) {
    fs::path p = dir / (prefix + std::to_string(i) + ".pb");
    if (!fs::exists(p)) break;
    files.push_back(p);
  }
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data, opsFile, expectedFile, filter;
  bool verbose = false, rewrites = false;
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--data") data = next();
    else if (a == "--ops") opsFile = next();
    else if (a == "--expected-failures") expectedFile = next();
    else if (a == "--filter") filter = next();
    else if (a == "--verbose" || a == "-v") verbose = true;
    else if (a == "--rewrites") rewrites = true;  // run through the executor's rewritten graph
    else if (a == "--threads") threads = std::max(1, std::atoi(next().c_str()));
    else {
      std::fprintf(stderr,
                   "usage: qs_conformance --data DIR [--ops FILE] [--expected-failures FILE] [--filter REGEX] [--rewrites] "
                   "[--threads N] [-v]\n");
      return 2;
    }
  }
  if (data.empty() || !fs::is_directory(data)) {
    std::fprintf(stderr, "qs_conformance: data folder '%s' not found (run scripts/setup.sh)\n", data.c_str());
    return 2;
  }
  std::set<std::string> ops = opsFile.empty() ? std::set<std::string>{} : readOps(opsFile);
  auto expected = expectedFile.empty() ? std::map<std::string, std::string>{} : readExpected(expectedFile);
  std::regex re(filter.empty() ? ".*" : filter);

  std::vector<fs::path> tests;
  for (const auto& e : fs::directory_iterator(data))
    if (e.is_directory() && e.path().filename().string().rfind("test_", 0) == 0) tests.push_back(e.path());
  std::sort(tests.begin(), tests.end());

  int passed = 0, failed = 0, skipped = 0, xfailed = 0, xpassed = 0;
  std::map<std::string, int> skipReasons;
  ExecutorOptions eo;
  eo.threads = threads;
  eo.rewrites = rewrites;
  for (const auto& dir : tests) {
    std::string name = dir.filename().string();
    if (!std::regex_search(name, re)) continue;
    LoadOptions lo;
    lo.inferShapes = false;
    auto model = loadModel((dir / "model.onnx").string(), lo);
    std::string failure;
    bool inScope = true;
    if (!model) {
      if (model.status().code() == StatusCode::Unsupported) {
        ++skipped;
        ++skipReasons["model feature unsupported by the loader"];
        if (verbose) std::printf("SKIP %s: %s\n", name.c_str(), model.status().message().c_str());
        continue;
      }
      failure = "load: " + model.status().message();
    } else if (!ops.empty()) {
      // The ops of the main graph and of every subgraph (If branches, Loop and Scan bodies).
      std::vector<const Node*> all;
      for (const Node& n : (*model)->graph.nodes) all.push_back(&n);
      for (const NestedNode& nn : nestedNodes((*model)->graph)) all.push_back(nn.node);
      for (const Node* n : all) {
        if (!n->domain.empty() || !ops.count(n->opType)) {
          inScope = false;
          if (verbose) std::printf("SKIP %s: op %s not in the supported list\n", name.c_str(), n->opType.c_str());
          break;
        }
      }
    }
    if (!inScope) {
      ++skipped;
      ++skipReasons["uses an op outside the supported list"];
      continue;
    }
    if (failure.empty()) {
      auto ex = Executor::create(*model, eo);
      if (!ex) {
        failure = "create: " + ex.status().message();
      } else {
        const Graph& g = (*model)->graph;
        for (const auto& e : fs::directory_iterator(dir)) {
          if (!e.is_directory() || e.path().filename().string().rfind("test_data_set_", 0) != 0) continue;
          std::vector<NamedTensor> feeds;
          auto inFiles = numbered(e.path(), "input_");
          for (size_t i = 0; i < inFiles.size() && failure.empty(); ++i) {
            std::string bytes = readFile(inFiles[i]);
            auto t = parseTensorProto(bytes.data(), bytes.size(), inFiles[i].string());
            if (!t) {
              failure = "input: " + t.status().message();
              break;
            }
            if (t->name.empty() && i < g.inputs.size()) t->name = g.value(g.inputs[i]).name;
            retagBf16(t->tensor, g, g.findValue(t->name));
            feeds.push_back(std::move(t).value());
          }
          if (!failure.empty()) break;
          auto outs = (*ex)->run(feeds);
          if (!outs) {
            failure = "run: " + outs.status().message();
            break;
          }
          auto outFiles = numbered(e.path(), "output_");
          if (outFiles.size() != outs->size()) {
            failure = "expected " + std::to_string(outFiles.size()) + " outputs, got " + std::to_string(outs->size());
            break;
          }
          for (size_t i = 0; i < outFiles.size(); ++i) {
            std::string bytes = readFile(outFiles[i]);
            auto want = parseTensorProto(bytes.data(), bytes.size(), outFiles[i].string());
            if (!want) {
              failure = "expected output: " + want.status().message();
              break;
            }
            retagBf16(want->tensor, g, g.outputs[i]);
            std::string diff = compare((*outs)[i], want->tensor, 1e-3, 1e-5);
            if (!diff.empty()) {
              failure = "output " + std::to_string(i) + " ('" + g.value(g.outputs[i]).name + "'): " + diff;
              break;
            }
          }
          if (!failure.empty()) break;
        }
      }
    }
    bool isExpected = expected.count(name) > 0;
    if (failure.empty()) {
      ++passed;
      if (isExpected) {
        ++xpassed;
        std::printf("XPASS %s (listed as an expected failure)\n", name.c_str());
      } else if (verbose) {
        std::printf("PASS %s\n", name.c_str());
      }
    } else if (isExpected) {
      ++xfailed;
      if (verbose) std::printf("XFAIL %s: %s\n", name.c_str(), failure.c_str());
    } else {
      ++failed;
      std::printf("FAIL %s: %s\n", name.c_str(), failure.c_str());
    }
  }
  for (auto& [reason, n] : skipReasons) std::printf("skipped %d: %s\n", n, reason.c_str());
  std::printf("conformance: %d passed, %d failed, %d skipped, %d expected failures, %d unexpected passes\n", passed,
              failed, skipped, xfailed, xpassed);
  return failed == 0 ? 0 : 1;
}
