// Autosave of the workbench session, and the files crashed sessions left. While a model file is
// open and the session has changes that are not in a project file (a toggle, a calibration, the
// colouring), ProjectController writes it through update() as a project to
// `autosave-<pid>-<n>.qsproj` in the autosave folder: right after each applied toggle or
// calibration, and on each due() (every intervalMs()) otherwise. A lock file beside it marks it as
// owned by a live session. A clean close and an explicit save remove it; a crash leaves it, with a
// stale lock, for the next start to offer back (ProjectController::offerAutosaveRestore).
#pragma once

#include <QByteArray>
#include <QLockFile>
#include <QObject>
#include <QString>
#include <QTimer>
#include <memory>

#include "ui/project_file.h"

namespace qs::ui {

class Autosave : public QObject {
  Q_OBJECT
 public:
  /// Autosaves to defaultDirectory(), every 30 s.
  explicit Autosave(QObject* parent = nullptr);
  /// Leaves the file: a session that ends without release() (a crash, as far as the autosave can
  /// tell) is offered back at the next start. The lock goes, as it would with the process.
  ~Autosave() override;

  /// QS_AUTOSAVE_DIR, else "autosave" in the application's data folder.
  static QString defaultDirectory();
  /// Where this session autosaves and looks for autosaves left by crashed sessions; empty turns
  /// autosave off. Releases the current file.
  void setDirectory(const QString& dir);
  QString directory() const { return m_dir; }
  /// Milliseconds between periodic autosaves (due()), 30 s by default.
  void setIntervalMs(int ms) { m_timer.setInterval(ms); }
  int intervalMs() const { return m_timer.interval(); }
  /// The file this session autosaves to (empty until it has written or adopted one).
  QString file() const { return m_file; }
  /// While stopped nothing is written: after a clean close, and after a folder that cannot be
  /// written to (one warning, not one per toggle) until the next model opens.
  void setStopped(bool stopped) { m_stopped = stopped; }

  /// Brings the file up to date with `session`, autosaved with `origin` (the project file it came
  /// from, "" for none): removes it when the session is back to its saved state (projectKey()
  /// equal to `savedKey`), writes it when it holds something else. True when a file was written.
  bool update(const Project& session, const QString& origin, const QByteArray& savedKey);
  /// Removes the file and its lock (the session is saved, closed or replaced).
  void release();

  /// The newest autosave in the folder whose session is gone (its lock is stale), or "".
  QString findOrphan() const;
  /// An orphaned autosave, locked for its taker.
  struct Orphan {
    QString file;
    std::unique_ptr<QLockFile> lock;
  };
  /// findOrphan()'s file with its lock (file empty when there is none).
  Orphan takeOrphan() const;
  /// Makes `orphan` this session's autosave (a restore), holding the session `key` stands for.
  void adopt(Orphan orphan);
  /// The session the file holds now (projectKey()), after a restore.
  void setHeldKey(const QByteArray& key) { m_heldKey = key; }

 signals:
  /// Time for a periodic update().
  void due();
  /// One line for the log.
  void warning(const QString& line);

 private:
  bool claimFile();

  QString m_dir;
  QString m_file;
  std::unique_ptr<QLockFile> m_lock;
  QTimer m_timer;
  QByteArray m_heldKey;  // projectKey() of what the file holds
  bool m_stopped = false;
};

}  // namespace qs::ui
