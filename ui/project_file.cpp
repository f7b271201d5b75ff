#include "ui/project_file.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSaveFile>
#include <cmath>
#include <map>
#include <string>

#include "ui/remedy_settings.h"

namespace qs::ui {

namespace {

constexpr int kVersion = 1;

/// Qt reads a path that starts with ':' as a resource (absolute); a file of that name in the
/// project's folder is written and read as "./:name".
QString notAResource(const QString& path) {
  return path.startsWith(QLatin1Char(':')) ? QStringLiteral("./") + path : path;
}

QString relativeTo(const QString& path, const QString& projectPath) {
  if (path.isEmpty()) return path;
  const QDir dir = QFileInfo(projectPath).absoluteDir();
  const QString rel = dir.relativeFilePath(QFileInfo(path).absoluteFilePath());
  return rel.startsWith(QStringLiteral("..")) ? QFileInfo(path).absoluteFilePath() : notAResource(rel);
}

QString resolve(const QString& stored, const QString& projectPath) {
  if (stored.isEmpty()) return stored;
  const QString path = notAResource(stored);
  if (QDir::isAbsolutePath(path)) return QDir::cleanPath(path);
  return QDir::cleanPath(QFileInfo(projectPath).absoluteDir().filePath(path));
}

QJsonArray floats(const std::array<float, 3>& v) { return {v[0], v[1], v[2]}; }

/// `s` for a one-line message: control characters escaped, at most 60 characters.
QString printable(const QString& s) {
  QString out;
  for (const QChar c : s.left(60)) {
    if (c.unicode() < 0x20 || c.unicode() == 0x7f) out += QStringLiteral("\\x%1").arg(c.unicode(), 2, 16, QLatin1Char('0'));
    else out += c;
  }
  return s.size() > 60 ? out + QStringLiteral("...") : out;
}

/// A number field within [lo, hi] (finite), or `fallback` when absent. Fails naming the key. With
/// `asFloat`, the number is rounded to float first and the checks apply to that value, the one
/// stored and written back (9.9999e29 is within 1e30, its float 1.00000002e30 is not).
bool number(const QJsonObject& o, const char* key, double lo, double hi, double fallback, double& out,
            const QString& projectPath, QString& error, bool asFloat = false) {
  const QJsonValue v = o.value(QLatin1String(key));
  if (v.isUndefined() || v.isNull()) {
    out = fallback;
    return true;
  }
  double x = v.toDouble(std::nan(""));
  if (asFloat) x = (double)(float)x;
  if (!v.isDouble() || !std::isfinite(x) || x < lo || x > hi) {
    error = QStringLiteral("%1: \"%2\" must be a number in [%3, %4]").arg(projectPath, QLatin1String(key)).arg(lo).arg(hi);
    return false;
  }
  out = x;
  return true;
}

/// The same for an integer field.
bool integer(const QJsonObject& o, const char* key, double lo, double hi, double fallback, double& out,
             const QString& projectPath, QString& error) {
  if (!number(o, key, lo, hi, fallback, out, projectPath, error)) return false;
  if (out != std::floor(out)) {
    error = QStringLiteral("%1: \"%2\" must be an integer").arg(projectPath, QLatin1String(key));
    return false;
  }
  return true;
}

/// Three numbers (mean or std), each within [lo, hi]; `zeroOk` false refuses 0 (a divisor).
bool triple(const QJsonObject& o, const char* key, double lo, double hi, bool zeroOk, float fallback,
            std::array<float, 3>& out, const QString& projectPath, QString& error) {
  const QJsonValue v = o.value(QLatin1String(key));
  if (v.isUndefined() || v.isNull()) {
    out = {fallback, fallback, fallback};
    return true;
  }
  const QJsonArray a = v.toArray();
  bool ok = v.isArray() && a.size() == 3;
  for (int k = 0; ok && k < 3; ++k) {
    // Checked as the float stored and written back (a divisor must stay a usable float: 2e-94 is
    // not 0 as a double but is as a float; 9.9999e29 is within 1e30, its float is not).
    const double x = (double)(float)a.at(k).toDouble(std::nan(""));
    ok = a.at(k).isDouble() && std::isfinite(x) && x >= lo && x <= hi && (zeroOk || std::fabs(x) >= 1e-30);
    if (ok) out[(size_t)k] = (float)x;
  }
  if (!ok) {
    error = QStringLiteral("%1: \"%2\" must be 3 numbers in [%3, %4]%5")
                .arg(projectPath, QLatin1String(key))
                .arg(lo)
                .arg(hi)
                .arg(zeroOk ? QString() : QStringLiteral(", none 0 or within 1e-30 of it"));
  }
  return ok;
}

/// A list of node names.
bool names(const QJsonObject& o, const char* key, QStringList& out, const QString& projectPath, QString& error) {
  const QJsonValue v = o.value(QLatin1String(key));
  if (v.isUndefined() || v.isNull()) return true;
  if (!v.isArray()) {
    error = QStringLiteral("%1: \"%2\" must be a list of node names").arg(projectPath, QLatin1String(key));
    return false;
  }
  for (const QJsonValue& n : v.toArray()) {
    if (!n.isString()) {
      error = QStringLiteral("%1: \"%2\" must be a list of node names").arg(projectPath, QLatin1String(key));
      return false;
    }
    out << n.toString();
  }
  return true;
}

/// The shapes of inputs with symbolic dims (random inputs): {"x": [1, 3, 640, 640]}, each dim an
/// integer in [1, kMaxDim], at most kMaxRank of them.
bool inputShapes(const QJsonObject& o, std::map<std::string, Shape>& out, const QString& projectPath, QString& error) {
  constexpr int kMaxRank = 8;
  constexpr int kMaxDim = 1 << 20;
  const QJsonValue v = o.value(QLatin1String("shapes"));
  if (v.isUndefined() || v.isNull()) return true;
  if (!v.isObject()) {
    error = projectPath + QStringLiteral(": \"shapes\" must map input names to shapes, e.g. {\"x\": [1, 3, 640, 640]}");
    return false;
  }
  const QJsonObject all = v.toObject();
  for (auto it = all.begin(); it != all.end(); ++it) {
    const QJsonArray a = it.value().toArray();
    bool ok = it.value().isArray() && !a.isEmpty() && a.size() <= kMaxRank;
    Shape shape;
    for (const QJsonValue& d : a) {
      const double x = d.toDouble(std::nan(""));
      ok = ok && d.isDouble() && x >= 1 && x <= kMaxDim && x == std::floor(x);
      shape.push_back(ok ? (int64_t)x : 0);
    }
    if (!ok) {
      error = QStringLiteral("%1: \"shapes\": \"%2\" must be 1 to %3 integers in [1, %4]")
                  .arg(projectPath, printable(it.key()))
                  .arg(kMaxRank)
                  .arg(kMaxDim);
      return false;
    }
    out[it.key().toStdString()] = std::move(shape);
  }
  return true;
}

}  // namespace

QByteArray projectToJson(const Project& p, const QString& projectPath) {
  const CalibrationDataOptions& d = p.calibration.data;
  const CalibrationSettings& c = p.calibration.calibration;
  QJsonObject shapeJson;
  for (const auto& [name, shape] : d.shapes) {
    QJsonArray dims;
    for (int64_t n : shape) dims.append((double)n);
    shapeJson.insert(QString::fromStdString(name), dims);
  }
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
      {QStringLiteral("shapes"), shapeJson},
      {QStringLiteral("method"), QString::fromStdString(calibMethodName(c.method))},
      {QStringLiteral("percentile"), c.percentile},
      {QStringLiteral("mode"), QString::fromStdString(quantModeName(c.mode))},
  };
  // Written only when not the default, so fp32 projects stay as they were.
  // The int4 weight-only mode (the dialog's mode int4), written only when chosen.
  if (p.int4.on)
    calib.insert(QStringLiteral("int4"), QJsonObject{{QStringLiteral("method"), QString::fromStdString(int4MethodName(p.int4.method))},
                                                     {QStringLiteral("block_size"), (qint64)p.int4.blockSize}});
  if (c.highPrecision != HighPrecision::Fp32) calib.insert(QStringLiteral("high_precision_dtype"), QString::fromLatin1(highPrecisionName(c.highPrecision)));
  writeRemedySettings(p.calibration, calib);
  QJsonObject root{
      {QStringLiteral("quantscope_project"), kVersion},
      {QStringLiteral("model"), relativeTo(p.modelPath, projectPath)},
      {QStringLiteral("calibration"), calib},
      {QStringLiteral("calibrated"), p.calibrated},
      {QStringLiteral("excluded_nodes"), QJsonArray::fromStringList(p.excludedNodes)},
      {QStringLiteral("quantized_nodes"), QJsonArray::fromStringList(p.quantizedNodes)},
      {QStringLiteral("view"), QJsonObject{{QStringLiteral("colouring"), p.colouring}, {QStringLiteral("threshold_db"), p.thresholdDb}}},
  };
  if (p.autosavedAt.isValid()) {
    root.insert(QStringLiteral("autosave"), QJsonObject{{QStringLiteral("project"), p.autosaveOf},
                                                        {QStringLiteral("saved_at"), p.autosavedAt.toString(Qt::ISODate)}});
  }
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
  double samples = 0, width = 0, height = 0, scale = 0, percentile = 0, threshold = 0;
  constexpr double kMaxSide = 1 << 20;
  if (!integer(c, "samples", -1, 1e15, -1, samples, projectPath, error) ||
      !integer(c, "width", 0, kMaxSide, 0, width, projectPath, error) ||
      !integer(c, "height", 0, kMaxSide, 0, height, projectPath, error) ||
      !number(c, "scale", -1e30, 1e30, 1.0 / 255.0, scale, projectPath, error, true) ||
      !triple(c, "mean", -1e30, 1e30, true, 0.0f, d.image.mean, projectPath, error) ||
      !triple(c, "std", -1e30, 1e30, false, 1.0f, d.image.std, projectPath, error) ||
      !number(c, "percentile", 0, 100, 99.99, percentile, projectPath, error) || !inputShapes(c, d.shapes, projectPath, error)) {
    return false;
  }
  d.maxSamples = (int64_t)samples;
  d.image.width = (int)width;
  d.image.height = (int)height;
  d.image.scale = (float)scale;
  d.image.bgr = c.value(QStringLiteral("bgr")).toBool();
  d.image.nhwc = c.value(QStringLiteral("nhwc")).toBool();
  CalibrationSettings& s = p.calibration.calibration;
  const QString method = c.value(QStringLiteral("method")).toString(QStringLiteral("auto"));
  const QString mode = c.value(QStringLiteral("mode")).toString(QStringLiteral("int8"));
  const QString high = c.value(QStringLiteral("high_precision_dtype")).toString(QStringLiteral("fp32"));
  // The core's parsers and messages; a name that needs escaping is no valid name, and is echoed
  // escaped, so the message stays one line.
  for (Status st : {parseCalibrationMethod(printable(method).toStdString(), s.method),
                    parseQuantizeMode(printable(mode).toStdString(), s.mode),
                    parseHighPrecision(printable(high).toStdString(), s.highPrecision)}) {
    if (!st) {
      error = QStringLiteral("%1: %2").arg(projectPath, QString::fromStdString(st.message()));
      return false;
    }
  }
  s.percentile = percentile;
  if (!readRemedySettings(c, projectPath, p.calibration, error)) return false;
  p.int4 = Int4Settings{};
  if (c.contains(QStringLiteral("int4"))) {
    const QJsonObject q = c.value(QStringLiteral("int4")).toObject();
    p.int4.on = true;
    p.int4.blockSize = q.value(QStringLiteral("block_size")).toInteger(128);
    for (Status st : {parseInt4Method(printable(q.value(QStringLiteral("method")).toString(QStringLiteral("awq_lite"))).toStdString(), p.int4.method),
                      checkInt4BlockSize(p.int4.blockSize)}) {
      if (!st) {
        error = QStringLiteral("%1: calibration.int4: %2").arg(projectPath, QString::fromStdString(st.message()));
        return false;
      }
    }
  }
  p.calibrated = root.value(QStringLiteral("calibrated")).toBool();
  if (!names(root, "excluded_nodes", p.excludedNodes, projectPath, error) ||
      !names(root, "quantized_nodes", p.quantizedNodes, projectPath, error)) {
    return false;
  }
  const QJsonObject view = root.value(QStringLiteral("view")).toObject();
  p.colouring = view.value(QStringLiteral("colouring")).toString();
  if (!number(view, "threshold_db", -1000, 1000, 20, threshold, projectPath, error)) return false;
  p.thresholdDb = threshold;
  const QJsonObject autosave = root.value(QStringLiteral("autosave")).toObject();
  p.autosaveOf = autosave.value(QStringLiteral("project")).toString();
  p.autosavedAt = QDateTime::fromString(autosave.value(QStringLiteral("saved_at")).toString(), Qt::ISODate);
  return true;
}

QByteArray projectKey(Project p) {
  p.excludedNodes.sort();
  p.quantizedNodes.sort();
  return projectToJson(p, QStringLiteral("/key.qsproj"));
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
  // A project is a few KB; refuse anything that cannot be one before reading it into memory.
  constexpr qint64 kMaxProjectBytes = 64 << 20;
  if (f.size() > kMaxProjectBytes) {
    error = QStringLiteral("%1: %2 bytes is too large for a project file (at most 64 MiB)").arg(path).arg(f.size());
    return false;
  }
  return projectFromJson(f.readAll(), path, p, error);
}

}  // namespace qs::ui
