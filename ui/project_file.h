// The project file (.qsproj, JSON): the model, the calibration settings, whether the project was
// calibrated, and the user's node states by name, so that a session can be saved and reopened.
// Paths are stored relative to the project file when they lie below its folder.
#pragma once

#include <QDateTime>
#include <QString>
#include <QStringList>

#include "core/export/pipeline.h"
#include "ui/int4_run.h"

namespace qs::ui {

struct Project {
  QString modelPath;                 // absolute once read
  AnalysisRequest calibration;      // the data and calibration settings (the model is modelPath)
  bool calibrated = false;           // run the calibration when the project opens
  Int4Settings int4;                 // on: the mode is int4 weight-only (calibration.int4 in the file)
  QStringList excludedNodes;         // node names switched off by the user
  QStringList quantizedNodes;        // node names switched back on by the user
  QString colouring;                 // graph colouring ("graphwise", "layerwise", "sensitivity", "op")
  double thresholdDb = 20;
  // Set in autosaves only (written as "autosave": {...} when `autosavedAt` is valid): the project
  // file the session came from ("" for none), so that a restored session saves back there.
  QString autosaveOf;
  QDateTime autosavedAt;
};

/// Serialises `p` for a file at `projectPath` (used to relativise paths).
QByteArray projectToJson(const Project& p, const QString& projectPath);
/// Parses a project; on failure returns false and sets `error` to one line naming the file.
bool projectFromJson(const QByteArray& json, const QString& projectPath, Project& p, QString& error);
bool saveProject(const Project& p, const QString& path, QString& error);
bool loadProject(const QString& path, Project& p, QString& error);
/// `p` as bytes without what does not change its meaning (the order of the node lists): equal keys
/// are equal sessions (what the autosave and the unsaved-changes check compare).
QByteArray projectKey(Project p);

}  // namespace qs::ui
