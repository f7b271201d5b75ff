// What the workbench tests that export share: a file's bytes, and an export through the Export
// dialog as a click on Export does. Header-only, like window_parts.h.
#pragma once

#include <QByteArray>
#include <QElapsedTimer>
#include <QFile>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QString>
#include <QStringList>
#include <QTest>

#include "tests/ui/window_parts.h"
#include "ui/analysis_actions.h"
#include "ui/export_dialog.h"
#include "ui/main_window.h"

namespace qs::test {

/// A file's bytes (empty when it cannot be read).
inline QByteArray readAll(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

/// Exports `w`'s analysis into `folder` through the Export dialog; `written` (when given) gets the
/// files it reports. False, with a warning naming the reason, when it fails or takes over 2 minutes.
inline bool exportThroughDialog(ui::MainWindow& w, const QString& folder, QStringList* written = nullptr) {
  w.analysisActions()->exportAction()->trigger();
  auto* dialog = part<ui::ExportDialog>(w, "exportDialog");
  part<QLineEdit>(*dialog, "exportFolder")->setText(folder);
  QSignalSpy done(dialog, &ui::ExportDialog::exported);
  QSignalSpy failed(dialog, &ui::ExportDialog::exportFailed);
  QTest::mouseClick(part<QPushButton>(*dialog, "exportButton"), Qt::LeftButton);
  QElapsedTimer t;
  t.start();
  while (done.isEmpty() && failed.isEmpty() && t.elapsed() < 120000) QTest::qWait(20);
  if (done.isEmpty()) {
    qWarning("export failed: %s", failed.isEmpty() ? "timeout" : qPrintable(failed.first().at(0).toString()));
    return false;
  }
  if (written) *written = done.first().at(0).toStringList();
  dialog->close();  // deletes it
  return true;
}

}  // namespace qs::test
