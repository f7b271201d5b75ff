// The headless front end: `quantscope info|run|...`. Exit codes: 0 success, 2 bad input or
// model, 1 runtime failure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cmath>
#include <map>

#include "core/export/bundle.h"
#include "core/export/pipeline.h"
#include "core/analysis/int4_analysis.h"
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

/// analyze and export: one AnalysisRequest (core/export/pipeline.h) plus where the files go.
struct AnalyzeArgs {
  AnalysisRequest request;
  std::string report, html, csv;  // analyze
  std::string modelExplorer;      // --model-explorer: node-data overlays (core/export/model_explorer.h)
  bool progress = false;          // --progress: progress lines on stderr even when it is not a terminal
};
int runAnalyze(const AnalyzeArgs& args);

struct ExportArgs {
  AnalysisRequest request;
  ExportTarget target;            // --output-dir (all files) or --output_path (the model alone)
  bool progress = false;
  /// --scale-dither-files N: besides the bundle, quantized.dither<k>.onnx for k = 1..N (realisation k's
  /// activation scales) and dither_realisations.json (our output SNR in realisations 0..N at the exported
  /// point), for scripts/ort_realisations.py. 0: none.
  int scaleDitherFiles = 0;
};
int runExport(const ExportArgs& args);

/// --quantize-mode int4 (app/cli_int4.cpp): the INT4 options taken from the flags.
struct Int4Args {
  bool on = false;
  Int4Options options;
};
/// Checks the int4 method, block size and the flags that do not apply to int4.
Status finishInt4Options(const AnalysisRequest& a, const std::string& method, int64_t blockSize, Int4Args& out);
int runAnalyzeInt4(const AnalyzeArgs& args, const Int4Options& options);
int runExportInt4(const ExportArgs& args, const Int4Options& options);

/// Progress with an ETA on stderr, redrawn in place, when stderr is a terminal; elsewhere nothing,
/// or with `force` (--progress) one line per stage and per tenth of a stage.
ProgressFn progressPrinter(bool force);
/// Prints each warning of a run ("quantscope: warning: ...", "quantscope: WARNING: ..." when
/// loud), shows progress as progressPrinter(forceProgress), and lets Ctrl-C and SIGTERM cancel it.
RunCallbacks terminalCallbacks(bool forceProgress);
/// "30.0 dB", "agreement 0.95" or "30.0 dB and agreement 0.95": the fallback's target(s).
std::string fallbackTargetText(const AnalysisRequest& request);
/// --realisations: one line under an output, its SNR's mean, sd and range over the realisations
/// (nothing with one realisation).
void printRealisations(const OutputResult& o);

}  // namespace qs::cli

namespace CLI {
class App;
}

namespace qs::cli {

/// The options shared by analyze and export, parsed into `request`.
void addAnalysisOptions(CLI::App& cmd, AnalysisRequest& request);
/// Converts what CLI11 cannot (WxH, triples, method and mode names) after parsing.
Status finishAnalysisOptions(CLI::App& cmd, AnalysisRequest& request);
/// --realisations auto|N into request.realisationsAuto / request.realisations (junk: an error).
Status parseRealisations(const std::string& text, AnalysisRequest& request);
/// --realisations auto: one line saying what the probe found and chose (nothing without a probe).
void printRealisationProbe(const AnalysisResult& r);
/// The predicted SNR of an output as the summary shows it: the analysis's figure, and with
/// realisations their mean and sd beside it (the figure another runtime compares with).
std::string predictedSnrText(const OutputResult& o);

}  // namespace qs::cli
