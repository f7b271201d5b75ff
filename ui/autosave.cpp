#include "ui/autosave.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLockFile>
#include <QStandardPaths>

namespace qs::ui {

namespace {

constexpr int kIntervalMs = 30000;
const char* const kPattern = "autosave-*.qsproj";

// A lock that marks an autosave as owned by a live session. Only a dead owner makes it stale: the
// age rule is off, so that a session left open for days keeps its autosave.
std::unique_ptr<QLockFile> lockFor(const QString& autosaveFile) {
  auto lock = std::make_unique<QLockFile>(autosaveFile + QStringLiteral(".lock"));
  lock->setStaleLockTime(0);
  if (!lock->tryLock(0)) return nullptr;
  return lock;
}

}  // namespace

Autosave::Autosave(QObject* parent) : QObject(parent), m_dir(defaultDirectory()) {
  setObjectName(QStringLiteral("autosave"));
  m_timer.setInterval(kIntervalMs);
  connect(&m_timer, &QTimer::timeout, this, &Autosave::due);
  m_timer.start();
}

Autosave::~Autosave() { m_timer.stop(); }

QString Autosave::defaultDirectory() {
  if (qEnvironmentVariableIsSet("QS_AUTOSAVE_DIR")) return qEnvironmentVariable("QS_AUTOSAVE_DIR");
  const QString base = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
  return base.isEmpty() ? QString() : base + QStringLiteral("/autosave");
}

void Autosave::setDirectory(const QString& dir) {
  if (dir == m_dir) return;
  release();
  m_dir = dir;
}

bool Autosave::claimFile() {
  if (!m_file.isEmpty()) return true;
  if (m_dir.isEmpty() || !QDir().mkpath(m_dir)) return false;
  static int serial = 0;  // several windows in one process (tests) get one file each
  for (int attempt = 0; attempt < 100; ++attempt) {
    const QString file =
        QDir(m_dir).filePath(QStringLiteral("autosave-%1-%2.qsproj").arg(QCoreApplication::applicationPid()).arg(++serial));
    auto lock = lockFor(file);
    // An existing file with a free lock was left by a dead session with our pid: keep it for a restore.
    if (!lock || QFileInfo::exists(file)) continue;
    m_file = file;
    m_lock = std::move(lock);
    return true;
  }
  return false;
}

void Autosave::release() {
  if (!m_file.isEmpty()) QFile::remove(m_file);
  m_file.clear();
  m_lock.reset();  // unlocks: removes the lock file
  m_heldKey.clear();
}

bool Autosave::update(const Project& session, const QString& origin, const QByteArray& savedKey) {
  if (m_stopped || m_dir.isEmpty()) return false;
  const QByteArray key = projectKey(session);
  if (key == savedKey) {
    if (!m_file.isEmpty()) release();  // back to the saved state (undo)
    return false;
  }
  if (key == m_heldKey && !m_file.isEmpty()) return false;
  if (!claimFile()) {
    emit warning(QStringLiteral("Warning: cannot autosave in %1").arg(m_dir));
    m_stopped = true;  // one line, not one per toggle; the next model tries again
    return false;
  }
  // The project, plus where the session came from, so that a restore saves back there.
  Project autosave = session;
  autosave.autosaveOf = origin;
  autosave.autosavedAt = QDateTime::currentDateTime();
  QString error;
  if (!saveProject(autosave, m_file, error)) {
    emit warning(QStringLiteral("Warning: cannot autosave (%1)").arg(error));
    return false;
  }
  m_heldKey = key;
  return true;
}

Autosave::Orphan Autosave::takeOrphan() const {
  if (m_dir.isEmpty()) return {};
  const QFileInfoList files = QDir(m_dir).entryInfoList({QLatin1String(kPattern)}, QDir::Files, QDir::Time);
  for (const QFileInfo& fi : files) {
    const QString path = fi.absoluteFilePath();
    if (path == m_file) continue;
    if (auto lock = lockFor(path)) return {path, std::move(lock)};
  }
  return {};
}

QString Autosave::findOrphan() const { return takeOrphan().file; }

void Autosave::adopt(Orphan orphan) {
  release();
  m_file = orphan.file;
  m_lock = std::move(orphan.lock);
  m_stopped = false;
}

}  // namespace qs::ui
