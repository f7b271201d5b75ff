#include "core/export/fallback_report.h"

#include <algorithm>
#include <sstream>

#include "core/export/report_format.h"
#include "core/export/report_json.h"

namespace qs {
namespace {

using Json = nlohmann::ordered_json;

const std::vector<double>& snrAt(const FallbackCurve& c, int i) {
  return i == 0 ? c.startSnrDb : c.steps[(size_t)i - 1].outputSnrDb;
}
const std::vector<double>& agreementAt(const FallbackCurve& c, int i) {
  return i == 0 ? c.startAgreement : c.steps[(size_t)i - 1].outputAgreement;
}

}  // namespace

nlohmann::ordered_json fallbackCurveJson(const Graph& g, const FallbackCurve& curve) {
  bool anyAgreement = false;
  for (double a : curve.startAgreement) anyAgreement |= !std::isnan(a);
  Json points = Json::array();
  for (int i = 0; i <= (int)curve.steps.size(); ++i) {
    Json snr = Json::array();
    for (double v : snrAt(curve, i)) snr.push_back(jsonNumber(v));
    Json p{{"excluded", i},
           {"node", i == 0 ? Json(nullptr) : Json(g.nodes[(size_t)curve.steps[(size_t)i - 1].excluded].name)},
           {"worst_output_snr_db", jsonNumber(curve.worstSnrDb(i))},
           {"outputs_snr_db", snr}};
    if (anyAgreement) {
      Json agree = Json::array();
      for (double v : agreementAt(curve, i)) agree.push_back(jsonNumber(v));
      p["worst_agreement"] = jsonNumber(curve.worstAgreement(i));
      p["outputs_agreement"] = agree;
    }
    points.push_back(p);
  }
  return points;
}

std::string fallbackCurveHtml(const Graph& g, const FallbackCurve& curve, double targetSnrDb, double targetAgreement) {
  const int n = (int)curve.steps.size();
  std::ostringstream h;
  h << "<h2>Fallback curve</h2><p>Worst output SNR against the number of excluded nodes (of " << curve.quantizable
    << " quantizable; " << curve.candidates << " candidate(s) re-measured per step). The exported model is at point "
    << curve.chosen << (curve.reached ? " (the first that reaches the target)" : " (the target was not reached)")
    << ".";
  if (!curve.reincluded.empty()) {
    h << " The greedy pass reached the target at " << curve.forwardChosen << " exclusions; the backward pass then kept "
      << curve.reincluded.size() << " of them quantized (";
    for (size_t i = 0; i < curve.reincluded.size(); ++i)
      h << (i ? ", " : "") << htmlEscape(g.nodes[(size_t)curve.reincluded[i]].name);
    h << "), which the curve's points " << curve.forwardChosen - (int)curve.reincluded.size() + 1 << " to "
      << curve.forwardChosen << " add back.";
  }
  h << "</p>";
  // Chart: finite values set the scale; infinities (no error at all) sit at the top.
  double lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i <= n; ++i)
    if (double v = curve.worstSnrDb(i); std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (std::isfinite(targetSnrDb)) lo = std::min(lo, targetSnrDb), hi = std::max(hi, targetSnrDb);
  if (!std::isfinite(lo)) lo = 0, hi = 10;
  lo = std::floor(lo / 5) * 5;
  hi = std::max(lo + 5, std::ceil(hi / 5) * 5);
  const int W = 640, H = 260, padL = 48, padR = 16, padT = 12, padB = 36;
  auto x = [&](int i) { return padL + (n == 0 ? 0.0 : (W - padL - padR) * (double)i / n); };
  auto y = [&](double v) {
    if (!std::isfinite(v)) v = v > 0 ? hi : lo;
    return padT + (H - padT - padB) * (1.0 - (v - lo) / (hi - lo));
  };
  h << "<svg class=\"chart\" id=\"fallback-curve\" width=\"" << W << "\" height=\"" << H
    << "\" xmlns=\"http://www.w3.org/2000/svg\" font-size=\"10\">";
  for (double t = lo; t <= hi + 1e-9; t += 5) {
    h << "<line x1=\"" << padL << "\" x2=\"" << W - padR << "\" y1=\"" << y(t) << "\" y2=\"" << y(t)
      << "\" stroke=\"#eee\"/><text x=\"" << padL - 4 << "\" y=\"" << y(t) + 3 << "\" text-anchor=\"end\">" << t
      << "</text>";
  }
  const int tick = std::max(1, n / 10);
  for (int i = 0; i <= n; i += tick)
    h << "<text x=\"" << x(i) << "\" y=\"" << H - padB + 14 << "\" text-anchor=\"middle\">" << i << "</text>";
  h << "<text x=\"" << (W + padL) / 2 << "\" y=\"" << H - 4 << "\" text-anchor=\"middle\">excluded nodes</text>"
    << "<text x=\"10\" y=\"" << H / 2 << "\" transform=\"rotate(-90 10 " << H / 2
    << ")\" text-anchor=\"middle\">worst output SNR dB</text>";
  if (std::isfinite(targetSnrDb))
    h << "<line class=\"target\" x1=\"" << padL << "\" x2=\"" << W - padR << "\" y1=\"" << y(targetSnrDb) << "\" y2=\""
      << y(targetSnrDb) << "\" stroke=\"#c33\" stroke-dasharray=\"4 3\"/>";
  h << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
  for (int i = 0; i <= n; ++i) h << (i ? " " : "") << x(i) << "," << y(curve.worstSnrDb(i));
  h << "\"/>";
  for (int i = 0; i <= n; ++i) {
    const std::string name = i == 0 ? std::string("none") : g.nodes[(size_t)curve.steps[(size_t)i - 1].excluded].name;
    h << "<circle class=\"point\" cx=\"" << x(i) << "\" cy=\"" << y(curve.worstSnrDb(i)) << "\" r=\""
      << (i == curve.chosen ? 5 : 3) << "\" fill=\"" << (i == curve.chosen ? "#c33" : "#1f77b4") << "\"><title>"
      << i << " excluded (" << htmlEscape(name) << "): " << reportNumber(curve.worstSnrDb(i)) << " dB</title></circle>";
  }
  h << "</svg>";
  // The points in a table, so that the figures can be read and copied.
  const bool agreement = !std::isnan(targetAgreement) || !std::isnan(curve.worstAgreement(0));
  h << "<table><tr><th>excluded</th><th>last excluded node</th><th>worst output SNR dB</th>"
    << (agreement ? "<th>worst agreement</th>" : "") << "</tr>";
  for (int i = 0; i <= n; ++i) {
    const std::string name = i == 0 ? std::string() : g.nodes[(size_t)curve.steps[(size_t)i - 1].excluded].name;
    h << "<tr" << (i == curve.chosen ? " class=\"good\"" : "") << "><td>" << i << "</td><td class=l>"
      << htmlEscape(name) << "</td><td>" << reportNumber(curve.worstSnrDb(i)) << "</td>"
      << (agreement ? "<td>" + reportNumber(curve.worstAgreement(i), 3) + "</td>" : "") << "</tr>";
  }
  h << "</table>";
  return h.str();
}

}  // namespace qs
