#include "app/cli.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>

namespace qs::cli {

bool isSubcommand(int argc, char** argv) {
  if (argc < 2) return false;
  for (const char* s : {"info", "run", "--help", "-h", "--version"})
    if (std::strcmp(argv[1], s) == 0) return true;
  return false;
}

int reportError(const Status& status) {
  std::fprintf(stderr, "quantscope: error: %s\n", status.message().c_str());
  switch (status.code()) {
    case StatusCode::Ok: return kExitOk;
    case StatusCode::RuntimeError: case StatusCode::Cancelled: return kExitRuntime;
    default: return kExitBadInput;
  }
}

int runCli(int argc, char** argv) {
  CLI::App app{"Quantscope: INT8 quantization error analysis for ONNX models"};
  app.set_version_flag("--version", "quantscope 0.1.0");
  app.require_subcommand(1);

  InfoArgs info;
  auto* infoCmd = app.add_subcommand("info", "Describe a model: opsets, inputs, outputs, ops, parameters, unsupported ops");
  infoCmd->add_option("model", info.model, "ONNX model")->required();
  infoCmd->add_flag("--json", info.json, "Print JSON instead of text");

  RunArgs run;
  auto* runCmd = app.add_subcommand("run", "Run a model in FP32 on the CPU");
  runCmd->add_option("model", run.model, "ONNX model")->required();
  runCmd->add_option("--input,-i", run.input, ".npz keyed by the model's input names (or .npy for one input)");
  runCmd->add_option("--output,-o", run.output, ".npz to write, keyed by the model's output names");
  runCmd->add_flag("--random-input", run.randomInput, "Feed seeded uniform [0,1) inputs instead of --input");
  runCmd->add_option("--seed", run.seed, "Seed of --random-input");
  runCmd->add_option("--shape", run.shapes, "NAME=1x3x640x640: shape of an input with symbolic dims (--random-input)");
  runCmd->add_option("--threads", run.threads, "Intra-op threads (default: all cores)")->check(CLI::Range(0, 1024));
  runCmd->add_option("--repeat", run.repeat, "Run R more times and print {\"ms_median\", \"ms_min\"} as JSON")
      ->check(CLI::Range(0, 1000000));
  runCmd->add_option("--profile", run.profile, "Write per-node time, FLOPs, bytes and peak memory as JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitBadInput;
  }
  if (*infoCmd) return runInfo(info);
  if (*runCmd) {
    if (run.input.empty() && !run.randomInput) {
      return reportError(invalidArgument("run: give --input IN.npz or --random-input"));
    }
    return runRun(run);
  }
  return kExitBadInput;
}

}  // namespace qs::cli
