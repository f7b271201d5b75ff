#include "ui/project_file.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSaveFile>

namespace qs::ui {

namespace {

constexpr int kVersion = 1;

QString relativeTo(const QString& path, const QString& projectPath) {
  if (path.isEmpty()) return path;
  const QDir dir = QFileInfo(projectPath).absoluteDir();
  const QString rel = dir.relativeFilePath(QFileInfo(path).absoluteFilePath());
  return rel.startsWith(QStringLiteral("..")) ? QFileInfo(path).absoluteFilePath() : rel;
}

QString resolve(const QString& path, const QString& projectPath) {
  if (path.isEmpty() || QDir::isAbsolutePath(path)) return path;
  return QDir::cleanPath(QFileInfo(projectPath).absoluteDir().filePath(path));
}

QJsonArray floats(const std::array<float, 3>& v) { return {v[0], v[1], v[2]}; }

}  // namespace

QByteArray projectToJson(const Project& p, const QString& projectPath) {
  const CalibrationDataOptions& d = p.calibration.data;
  const CalibrationSettings& c = p.calibration.calibration;
  QJsonObject calib{
      {QStringLiteral("data"), relativeTo(QString::fromStdString(d.path), projectPath)},
      {QStringLiteral("samples"), (double)d.maxSamples},
      {QStringLiteral("width"), d.image.width},
      {QStringLiteral("height"), d.image.height},
      {QStringLiteral("scale"), d.image.scale},
      {QStringLiteral("mean"), floats(d.image.mean)},
      {QStringLiteral("std"), floats(d.image.std)},
      {QStringLiteral("bgr"), d.image.bgr},
      {QStringLiteral("nhwc"), d.image.nhwc},
      {QStringLiteral("method"), QString::fromStdString(calibMethodName(c.method))},
      {QStringLiteral("percentile"), c.percentile},
      {QStringLiteral("mode"), QString::fromStdString(quantModeName(c.mode))},
  };
  QJsonObject root{
      {QStringLiteral("quantscope_project"), kVersion},
      {QStringLiteral("model"), relativeTo(p.modelPath, projectPath)},
      {QStringLiteral("calibration"), calib},
      {QStringLiteral("calibrated"), p.calibrated},
      {QStringLiteral("excluded_nodes"), QJsonArray::fromStringList(p.excludedNodes)},
      {QStringLiteral("quantized_nodes"), QJsonArray::fromStringList(p.quantizedNodes)},
      {QStringLiteral("view"), QJsonObject{{QStringLiteral("colouring"), p.colouring}, {QStringLiteral("threshold_db"), p.thresholdDb}}},
  };
  return QJsonDocument(root).toJson(QJsonDocument::Indented);
}

bool projectFromJson(const QByteArray& json, const QString& projectPath, Project& p, QString& error) {
  QJsonParseError pe;
  const QJsonDocument doc = QJsonDocument::fromJson(json, &pe);
  if (doc.isNull() || !doc.isObject()) {
    error = QStringLiteral("%1: not a project file (%2)").arg(projectPath, doc.isNull() ? pe.errorString() : QStringLiteral("not a JSON object"));
    return false;
  }
  const QJsonObject root = doc.object();
  if (root.value(QStringLiteral("quantscope_project")).toInt() != kVersion) {
    error = QStringLiteral("%1: not a Quantscope project (no \"quantscope_project\": %2)").arg(projectPath).arg(kVersion);
    return false;
  }
  p = Project{};
  p.modelPath = resolve(root.value(QStringLiteral("model")).toString(), projectPath);
  if (p.modelPath.isEmpty()) {
    error = projectPath + QStringLiteral(": names no model");
    return false;
  }
  const QJsonObject c = root.value(QStringLiteral("calibration")).toObject();
  CalibrationDataOptions& d = p.calibration.data;
  d.path = resolve(c.value(QStringLiteral("data")).toString(), projectPath).toStdString();
  d.maxSamples = (int64_t)c.value(QStringLiteral("samples")).toDouble(-1);
  d.image.width = c.value(QStringLiteral("width")).toInt();
  d.image.height = c.value(QStringLiteral("height")).toInt();
  d.image.scale = (float)c.value(QStringLiteral("scale")).toDouble(1.0 / 255.0);
  const QJsonArray mean = c.value(QStringLiteral("mean")).toArray(), stdv = c.value(QStringLiteral("std")).toArray();
  for (int k = 0; k < 3; ++k) {
    d.image.mean[(size_t)k] = (float)mean.at(k).toDouble(0);
    d.image.std[(size_t)k] = (float)stdv.at(k).toDouble(1);
  }
  d.image.bgr = c.value(QStringLiteral("bgr")).toBool();
  d.image.nhwc = c.value(QStringLiteral("nhwc")).toBool();
  CalibrationSettings& s = p.calibration.calibration;
  const QString method = c.value(QStringLiteral("method")).toString(QStringLiteral("max"));
  const QString mode = c.value(QStringLiteral("mode")).toString(QStringLiteral("int8"));
  if (!parseCalibMethod(method.toStdString(), s.method)) {
    error = QStringLiteral("%1: unknown calibration method '%2'").arg(projectPath, method);
    return false;
  }
  if (!parseQuantMode(mode.toStdString(), s.mode)) {
    error = QStringLiteral("%1: unknown mode '%2'").arg(projectPath, mode);
    return false;
  }
  s.percentile = c.value(QStringLiteral("percentile")).toDouble(99.99);
  p.calibrated = root.value(QStringLiteral("calibrated")).toBool();
  for (const QJsonValue& v : root.value(QStringLiteral("excluded_nodes")).toArray()) p.excludedNodes << v.toString();
  for (const QJsonValue& v : root.value(QStringLiteral("quantized_nodes")).toArray()) p.quantizedNodes << v.toString();
  const QJsonObject view = root.value(QStringLiteral("view")).toObject();
  p.colouring = view.value(QStringLiteral("colouring")).toString();
  p.thresholdDb = view.value(QStringLiteral("threshold_db")).toDouble(20);
  return true;
}

bool saveProject(const Project& p, const QString& path, QString& error) {
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly)) {
    error = QStringLiteral("%1: cannot write (%2)").arg(path, f.errorString());
    return false;
  }
  f.write(projectToJson(p, path));
  if (!f.commit()) {
    error = QStringLiteral("%1: cannot write (%2)").arg(path, f.errorString());
    return false;
  }
  return true;
}

bool loadProject(const QString& path, Project& p, QString& error) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    error = QStringLiteral("%1: cannot read (%2)").arg(path, f.errorString());
    return false;
  }
  return projectFromJson(f.readAll(), path, p, error);
}

}  // namespace qs::ui
