// quantscope analyze: one run of the pipeline (core/export/pipeline.h), then the report files.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "app/cli.h"
#include "core/export/remedy_report.h"
#include "core/export/model_explorer.h"
#include "core/util/atomic_file.h"
#include "core/util/memory_budget.h"

namespace qs::cli {

std::string fallbackTargetText(const AnalysisRequest& rq) {
  char buf[96];
  std::string s;
  if (!std::isnan(rq.targetSnrDb)) {
    std::snprintf(buf, sizeof buf, "%.1f dB", rq.targetSnrDb);
    s = buf;
  }
  if (!std::isnan(rq.targetAgreement)) {
    std::snprintf(buf, sizeof buf, "agreement %.3g", rq.targetAgreement);
    s += (s.empty() ? "" : " and ") + std::string(buf);
  }
  return s;
}

void printRealisationProbe(const AnalysisResult& r) {
  const RealisationProbe& p = r.realisationProbe;
  if (!p.ran) return;
  std::string where = p.where == "table check" ? "method auto's table check" : "the analysis";
  std::string tables;
  for (const auto& [id, c] : r.clipChoices) {
    if (c.selectionRealisations > 1) {
      char t[256];
      std::snprintf(t, sizeof t, "; tables scored on the mean of %d: %s (%.2f dB; on realisation 0 alone: %s, %.2f dB)",
                    c.selectionRealisations, c.selection.c_str(), c.selectionOutputSnrDb, c.selectionOnFirst.c_str(),
                    c.selectionOnFirstSnrDb);
      tables = t;
    }
    break;
  }
  std::fprintf(stderr,
               "realisations auto: probe of %zu at %s (%lld samples): worst output sd %.2f dB (threshold %.2f): "
               "%d realisation(s)%s\n",
               p.worstSnrDb.size(), where.c_str(), (long long)p.samples, p.sdDb, p.thresholdDb, p.chosen, tables.c_str());
}

std::string predictedSnrText(const OutputResult& o) {
  char t[160];
  if (o.realisationSnrDb.size() > 1)
    std::snprintf(t, sizeof t, "predicted SNR %8.2f dB (mean of %zu realisations %.2f dB, sd %.2f: compare a runtime with the mean)",
                  o.metrics.snrDb, o.realisationSnrDb.size(), o.realisationMeanDb(), o.realisationSdDb());
  else
    std::snprintf(t, sizeof t, "predicted SNR %8.2f dB", o.metrics.snrDb);
  return t;
}

void printRealisations(const OutputResult& o) {
  if (o.realisationSnrDb.size() < 2) return;
  const auto [lo, hi] = std::minmax_element(o.realisationSnrDb.begin(), o.realisationSnrDb.end());
  std::printf("       %-32s %zu realisations: mean %.2f dB, sd %.2f dB, %.2f .. %.2f dB (the analysis %.2f dB)\n",
              "", o.realisationSnrDb.size(), o.realisationMeanDb(), o.realisationSdDb(), *lo, *hi, o.realisationSnrDb[0]);
}

namespace {

void printFallback(const AnalysisRun& run) {
  const Graph& g = run.model->graph;
  std::fprintf(stderr, "auto fallback to %s: %zu node(s) excluded\n", fallbackTargetText(run.request).c_str(),
               run.fallback.size());
  for (const FallbackStep& s : run.fallback) {
    std::fprintf(stderr, "  exclude %-40s worst output SNR %.2f dB", g.nodes[(size_t)s.excluded].name.c_str(),
                 s.worstOutputSnrDb());
    if (!std::isnan(s.worstAgreement())) std::fprintf(stderr, ", agreement %.3f", s.worstAgreement());
    std::fprintf(stderr, "\n");
  }
  // The rest of the curve: what more exclusions would give (the report and the GUI plot it).
  if (const auto& c = run.fallbackCurve; c && (int)c->steps.size() > c->chosen) {
    std::fprintf(stderr, "  past the target (not applied; of %d quantizable node(s)):\n", c->quantizable);
    for (size_t i = (size_t)c->chosen; i < c->steps.size(); ++i)
      std::fprintf(stderr, "  %2zu excluded: + %-34s worst output SNR %.2f dB\n", i + 1,
                   g.nodes[(size_t)c->steps[i].excluded].name.c_str(), c->steps[i].worstOutputSnrDb());
  }
}

}  // namespace

int runAnalyze(const AnalyzeArgs& args) {
  RunCallbacks cb = terminalCallbacks(args.progress);
  auto run = prepareRun(args.request, cb);
  if (!run) return reportError(run.status());
  if (Status st = executeRun(*run, cb); !st) return reportError(st);
  if (!run->remedies.choice.empty()) std::fputs(remedyChoiceText(run->remedies.choice).c_str(), stderr);
  if (!std::isnan(args.request.targetSnrDb) || !std::isnan(args.request.targetAgreement)) printFallback(*run);
  const AnalysisResult& r = *run->result();
  if (args.request.whatIf != WhatIf::None) {
    std::printf("what-if %s: these figures are a bound no engine runs (%s), not an INT8 model's\n",
                whatIfName(args.request.whatIf),
                args.request.whatIf == WhatIf::WeightsFloat ? "every weight left in float"
                : args.request.whatIf == WhatIf::ActivationsPerChannel
                    ? "each Conv/MatMul/Gemm input channel its own activation scale"
                    : "weights in float and activations per channel");
    if (activationsPerChannel(args.request.whatIf) && args.request.whatIfChannelAmax == ChannelAmax::Searched) {
      const QuantSession::ChannelClipSearch& c = run->session->channelClipSearch();
      std::printf("what-if channel clips searched (per-channel MSE, %lld points): %lld of %lld channels clipped below "
                  "capped; their squared error summed %.6g -> %.6g, per channel %.2f dB less on average\n",
                  (long long)c.points, (long long)c.belowCapped, (long long)c.channels, c.errorCapped, c.errorSearched,
                  c.meanRatioDb);
    }
  }
  for (const auto& o : r.outputs) {
    std::printf("output %-32s SNR %8.2f dB  cosine %.6f  MSE %.4g\n", o.name.c_str(), o.metrics.snrDb, o.metrics.cosine,
                o.metrics.mse);
    if (const std::string a = describeAgreement(o.agreement); !a.empty())
      std::printf("       %-32s agreement (%s): %s\n", "", outputKindName(o.agreement.kind), a.c_str());
    printRealisations(o);
  }
  printRealisationProbe(r);
  if (r.peakRssBytes > 0) {
    std::printf("memory: peak RSS %s", formatByteSize(r.peakRssBytes).c_str());
    if (r.memoryBudgetBytes > 0)
      std::printf(", budget %s%s", formatByteSize(r.memoryBudgetBytes).c_str(),
                  r.streamed ? " (streamed: no whole activation table kept)" : "");
    std::printf("\n");
  }
  ReportContext ctx = reportContext(*run);
  ctx.peakRss = true;
  const Model& m = *run->model;
  if (!args.report.empty()) {
    if (Status w = writeFileAtomic(args.report, reportJson(m, r, ctx)); !w) return reportError(w);
  }
  if (!args.html.empty()) {
    if (Status w = writeFileAtomic(args.html, reportHtml(m, r, ctx)); !w) return reportError(w);
  }
  if (!args.csv.empty()) {
    if (Status w = writeFileAtomic(args.csv, layersCsv(m, r)); !w) return reportError(w);
  }
  if (!args.modelExplorer.empty()) {
    if (Status w = writeModelExplorerOverlays(m, r, args.modelExplorer); !w) return reportError(w);
  }
  return kExitOk;
}

}  // namespace qs::cli
