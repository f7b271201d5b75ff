#include "ui/model_loader.h"

#include <QFileInfo>
#include <QThreadPool>
#include <QtConcurrent/QtConcurrentRun>
#include <chrono>

#include "core/exec/kernel_registry.h"
#include "core/onnx/loader.h"
#include "ui/group_layout.h"

namespace qs::ui {

struct ModelLoader::Outcome {
  QString path;
  LoadedModelPtr result;
  Status status;
};

namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The checks that need no thread: reported in one line naming the path.
QString precheck(const QString& path) {
  QFileInfo fi(path);
  if (!fi.exists()) return QStringLiteral("no such file");
  if (fi.isDir()) return QStringLiteral("is a directory, not an ONNX file");
  if (!fi.isReadable()) return QStringLiteral("permission denied");
  if (fi.size() == 0) return QStringLiteral("the file is empty");
  return {};
}

}  // namespace

ModelLoader::ModelLoader(QObject* parent) : QObject(parent) {
  qRegisterMetaType<qs::ui::LoadedModelPtr>();
}

ModelLoader::~ModelLoader() {
  if (m_cancel) m_cancel->store(true);
  for (auto& f : m_futures) f.waitForFinished();
}

bool ModelLoader::open(const QString& path) {
  if (QString why = precheck(path); !why.isEmpty()) {
    emit failed(path, path + QStringLiteral(": ") + why);
    return false;
  }
  start(path, nullptr);
  return true;
}

void ModelLoader::openModel(std::shared_ptr<const Model> model, const QString& name) { start(name, std::move(model)); }

void ModelLoader::cancel() {
  if (m_cancel) m_cancel->store(true);
  ++m_generation;  // whatever arrives from the cancelled job is stale now
  m_currentActive = false;
}

namespace {

/// The threads that load and lay out models. igraph's Sugiyama layout recurses, and the stack it
/// needs grows with the graph (measured: 1-1.5 MiB at 50,000 nodes, 2-3 MiB at 100,000, over
/// 3 MiB at 200,000), so these threads get 512 MiB of stack: address space reserved, committed
/// only as far as it is touched. That covers graphs far beyond what the view can show.
QThreadPool* layoutPool() {
  static QThreadPool* pool = [] {
    auto* p = new QThreadPool;
    p->setStackSize(512u << 20);
    p->setMaxThreadCount(2);  // a superseded job may still be finishing beside the current one
    return p;
  }();
  return pool;
}

}  // namespace

void ModelLoader::start(const QString& name, std::shared_ptr<const Model> prebuilt) {
  if (m_cancel) m_cancel->store(true);
  auto cancelFlag = std::make_shared<std::atomic<bool>>(false);
  m_cancel = cancelFlag;
  const uint64_t generation = ++m_generation;
  m_currentActive = true;
  ++m_running;
  emit started(name);

  const LayoutOptions options = m_options;
  // Progress hops to the GUI thread; a report from a superseded job is dropped there.
  auto report = [this, generation](int percent, QString stage) {
    QMetaObject::invokeMethod(
        this,
        [this, generation, percent, stage] {
          if (generation == m_generation) emit progress(percent, stage);
        },
        Qt::QueuedConnection);
  };
  QFuture<std::shared_ptr<Outcome>> future = QtConcurrent::run(layoutPool(), [name, prebuilt, options, cancelFlag, report]() {
    auto outcome = std::make_shared<Outcome>();
    outcome->path = name;
    auto result = std::make_shared<LoadedModel>();
    result->path = name;
    auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<const Model> model = prebuilt;
    if (!model) {
      report(-1, QStringLiteral("Loading"));
      auto loadedModel = loadModel(name.toStdString());
      if (!loadedModel) {
        outcome->status = loadedModel.status();
        return outcome;
      }
      model = std::move(loadedModel.value());
    }
    result->loadSeconds = secondsSince(t0);
    if (cancelFlag->load()) {
      outcome->status = Status(StatusCode::Cancelled, "cancelled");
      return outcome;
    }
    result->info = std::make_shared<const ModelInfo>(describeModel(*model, KernelRegistry::builtin()));
    report(0, QStringLiteral("Layout"));
    auto t1 = std::chrono::steady_clock::now();
    auto layout = computeModelLayout(model, options, [&](int p) { report(p, QStringLiteral("Layout")); },
                                     cancelFlag.get());
    if (!layout) {
      outcome->status = layout.status().withContext(name.toStdString());
      return outcome;
    }
    result->layoutSeconds = secondsSince(t1);
    result->model = model;
    result->layout = std::move(layout.value());
    outcome->result = std::move(result);
    return outcome;
  });
  m_futures.insert(generation, future);
  auto* watcher = new QFutureWatcher<std::shared_ptr<Outcome>>(this);
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation] {
    auto outcome = watcher->result();
    m_futures.remove(generation);
    watcher->deleteLater();
    --m_running;
    finish(generation, outcome);
  });
  watcher->setFuture(future);
}

void ModelLoader::finish(uint64_t generation, const std::shared_ptr<Outcome>& outcome) {
  if (generation != m_generation) return;  // superseded or cancelled: drop it
  m_currentActive = false;
  if (outcome->result) {
    emit loaded(outcome->result);
    return;
  }
  if (outcome->status.code() == StatusCode::Cancelled) return;
  // Core messages are one line already; make sure of it for the log and the message box.
  QString message = QString::fromStdString(outcome->status.message()).simplified();
  if (!message.startsWith(outcome->path)) message = outcome->path + QStringLiteral(": ") + message;
  emit failed(outcome->path, message);
}

}  // namespace qs::ui
