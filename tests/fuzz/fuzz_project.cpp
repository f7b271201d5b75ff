// libFuzzer target: the workbench's project file reader (.qsproj JSON, ui/project_file.cpp), which
// opens files users pass around with their models. Built against QtCore only.
#include <QByteArray>
#include <QString>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "ui/project_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qs::ui::Project p;
  QString error;
  const QByteArray json(reinterpret_cast<const char*>(data), (qsizetype)size);
  if (qs::ui::projectFromJson(json, QStringLiteral("/fuzz/p.qsproj"), p, error)) {
    // What the reader accepts is what the workbench may use without checking again.
    if (p.modelPath.isEmpty() || !std::isfinite(p.thresholdDb) || p.calibration.data.maxSamples < -1) __builtin_trap();
    for (float s : p.calibration.data.image.std) {
      if (!(s != 0) || !std::isfinite(s)) __builtin_trap();
    }
    // A reread of what it writes gives the same project.
    qs::ui::Project again;
    QString error2;
    if (!qs::ui::projectFromJson(qs::ui::projectToJson(p, QStringLiteral("/fuzz/p.qsproj")), QStringLiteral("/fuzz/p.qsproj"),
                                 again, error2)) {
      __builtin_trap();
    }
    if (again.excludedNodes != p.excludedNodes || again.modelPath != p.modelPath) __builtin_trap();
  } else if (error.isEmpty() || error.contains(QLatin1Char('\n'))) {
    __builtin_trap();  // every refusal is one line
  }
  return 0;
}
