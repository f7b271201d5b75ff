// The headless front end: `quantscope info|run|...`. Exit codes: 0 success, 2 bad input or
// model, 1 runtime failure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cmath>
#include <map>

#include "core/io/calibration_data.h"
#include "core/quant/quant_config.h"
#include "core/util/status.h"

namespace qs::cli {

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitBadInput = 2;

/// True when argv[1] names a subcommand (the GUI opens otherwise).
bool isSubcommand(int argc, char** argv);
/// Runs a subcommand and returns the process exit code.
int runCli(int argc, char** argv);

/// Prints "quantscope: error: <message>" on stderr and maps the status to an exit code.
int reportError(const Status& status);

struct InfoArgs {
  std::string model;
  bool json = false;
};
int runInfo(const InfoArgs& args);

struct RunArgs {
  std::string model;
  std::string input;    // .npz keyed by input names, or .npy for a single-input model
  std::string output;   // .npz keyed by output names
  bool randomInput = false;
  uint64_t seed = 0;
  std::vector<std::string> shapes;  // "name=1x3x640x640" for symbolic dims with --random-input
  int threads = 0;
  int repeat = 0;
  std::string profile;  // PROFILE.json
};
int runRun(const RunArgs& args);

struct AnalyzeArgs {
  std::string model;
  CalibrationDataOptions data;   // --calibration-data and the image preprocessing options
  std::string analysisData;      // --analysis-data: analyse on another set than the calibration one
  QuantConfig config;            // exclusions and restrictions
  std::string calibrationMethod; // empty: entropy for int8, max for fp8 (ModelOpt's defaults)
  double percentile = 99.99;
  std::string quantizeMode = "int8";
  double targetSnr = NAN;        // --target-snr: automatic fallback
  bool noLayerwise = false, noSensitivity = false;
  int threads = 0;
  std::string report, html, csv;
  std::map<std::string, std::string> settingsEcho;  // options as given, for the report
};
int runAnalyze(const AnalyzeArgs& args);

struct ExportArgs {
  AnalyzeArgs analysis;          // every analyze option
  std::string outputDir;         // --output-dir: quantized.onnx, quant_cfg.json, calibration.cache, report.json
  std::string outputPath;        // --output_path: the model alone (ModelOpt)
  std::string loadConfig;        // --load-config quant_cfg.json: scales and node states, no calibration
  std::string calibrationCache;  // --calibration-cache-path: scales from a TensorRT cache
  bool dqOnly = true;            // --dq-only / --no-dq-only
  bool dqOnlyGiven = false;
  bool externalData = false;     // --use-external-data-format
};
int runExport(const ExportArgs& args);

}  // namespace qs::cli

namespace CLI {
class App;
}

namespace qs::cli {

/// The options shared by analyze and export (data, configuration, calibration, outputs).
void addAnalysisOptions(CLI::App& cmd, AnalyzeArgs& args);
/// Validates and completes them after parsing.
Status finishAnalysisOptions(CLI::App& cmd, AnalyzeArgs& args);

}  // namespace qs::cli
