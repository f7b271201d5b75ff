// Opens a model and lays out its graph off the GUI thread.
// Bad paths are refused before any thread starts; progress arrives through signals; a newer request
// cancels the older one and its result, should it still arrive, is dropped.
#pragma once

#include <QFutureWatcher>
#include <QHash>
#include <QObject>
#include <QString>
#include <atomic>
#include <memory>

#include "core/ir/graph.h"
#include "core/exec/model_info.h"
#include "ui/graph_layout.h"

namespace qs::ui {

/// Everything the window shows about one opened model. Immutable once published.
struct LoadedModel {
  QString path;  // file path, or a display name for models built in code
  std::shared_ptr<const Model> model;
  std::shared_ptr<const GraphLayout> layout;
  std::shared_ptr<const ModelInfo> info;
  double loadSeconds = 0;    // parse, validate, shape inference
  double layoutSeconds = 0;  // computeGraphLayout
};
using LoadedModelPtr = std::shared_ptr<const LoadedModel>;

class ModelLoader : public QObject {
  Q_OBJECT
 public:
  explicit ModelLoader(QObject* parent = nullptr);
  ~ModelLoader() override;  // cancels and waits for running jobs

  void setLayoutOptions(const LayoutOptions& options) { m_options = options; }
  const LayoutOptions& layoutOptions() const { return m_options; }

  /// Starts opening `path`. A file that is missing, unreadable, a directory or empty is reported
  /// through failed() at once and false is returned; no thread starts and a running job goes on.
  bool open(const QString& path);
  /// Lays out a model built in code (generated graphs, tests); `name` stands for the path.
  void openModel(std::shared_ptr<const Model> model, const QString& name);
  /// Cancels the running request, if any; its result is dropped.
  void cancel();
  bool isBusy() const { return m_running > 0 && m_currentActive; }
  /// Jobs still running, superseded ones included (they finish in the background).
  int runningJobs() const { return m_running; }

 signals:
  void started(const QString& path);
  /// percent in [0, 100], or -1 while the stage cannot tell (parsing).
  void progress(int percent, const QString& stage);
  void loaded(qs::ui::LoadedModelPtr result);
  /// One line naming the file and the reason.
  void failed(const QString& path, const QString& message);

 private:
  struct Outcome;
  void start(const QString& name, std::shared_ptr<const Model> prebuilt);
  void finish(uint64_t generation, const std::shared_ptr<Outcome>& outcome);

  LayoutOptions m_options;
  uint64_t m_generation = 0;
  std::shared_ptr<std::atomic<bool>> m_cancel;
  bool m_currentActive = false;
  int m_running = 0;
  QHash<uint64_t, QFuture<std::shared_ptr<Outcome>>> m_futures;
};

}  // namespace qs::ui

Q_DECLARE_METATYPE(qs::ui::LoadedModelPtr)
