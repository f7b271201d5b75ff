#include "ui/export_dialog.h"

#include <QCheckBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>

#include "core/analysis/result_projection.h"
#include "core/export/int4_export.h"
#include "core/quant/quant_config.h"
#include "ui/analysis_controller.h"

namespace qs::ui {

AnalysisRun runForExport(const AnalysisRun& run, const std::map<NodeId, bool>& requested, bool dqOnly, const Graph* shown) {
  AnalysisRun out = run;
  out.request.dqOnly = dqOnly;
  const auto result = run.result();
  if (!run.model || !result) return out;
  const Graph& g = run.model->graph;
  // The requests are by the shown model's ids; the run's differ where it inserted nodes (by name).
  const std::vector<NodeId> runOf = shown ? nodesByName(*shown, g) : std::vector<NodeId>{};
  std::map<std::string, int> nameCount;
  for (const Node& n : g.nodes) ++nameCount[n.name];
  std::vector<std::string>& exclude = out.exportedConfig.nodesToExclude;
  for (auto [shownId, on] : requested) {
    const NodeId id = !shown ? shownId : (size_t)shownId < runOf.size() ? runOf[(size_t)shownId] : -1;
    if (on || id < 0 || (size_t)id >= g.nodes.size() || result->plan.nodes[(size_t)id].quantized) continue;
    // An empty or repeated name cannot single the node out: its state is in the node list alone.
    const std::string& name = g.nodes[(size_t)id].name;
    if (name.empty() || nameCount[name] != 1) continue;
    const std::string pattern = exactNamePattern(name);
    if (std::find(exclude.begin(), exclude.end(), pattern) == exclude.end()) exclude.push_back(pattern);
  }
  return out;
}

ExportDialog::ExportDialog(const AnalysisController* controller, QWidget* parent) : QDialog(parent), m_controller(controller) {
  setWindowTitle(QStringLiteral("Export quantized model"));
  auto* top = new QVBoxLayout(this);
  auto* intro = new QLabel(QStringLiteral("Writes <b>quantized.onnx</b> with QuantizeLinear/DequantizeLinear at the points and with "
                                          "the scales of the current analysis, plus <b>quant_cfg.json</b>, "
                                          "<b>calibration.cache</b> (TensorRT, int8 only) and <b>report.json</b>."),
                           this);
  intro->setWordWrap(true);
  top->addWidget(intro);
  auto* form = new QFormLayout;
  auto* row = new QHBoxLayout;
  m_folder = new QLineEdit(this);
  m_folder->setObjectName(QStringLiteral("exportFolder"));
  const auto run = m_controller->run();
  const QString base = QFileInfo(QString::fromStdString(run ? run->request.modelPath : std::string())).absolutePath();
  m_folder->setText(QSettings().value(QStringLiteral("export/folder"), base + QStringLiteral("/quantized")).toString());
  auto* browse = new QPushButton(QStringLiteral("Browse…"), this);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, QStringLiteral("Export folder"), m_folder->text());
    if (!d.isEmpty()) m_folder->setText(d);
  });
  row->addWidget(m_folder, 1);
  row->addWidget(browse);
  form->addRow(QStringLiteral("Folder"), row);
  // The command line's defaults: int8 initializers for int8; for fp8 the float weights with a Q/DQ
  // pair, as ModelOpt writes them (checked: FLOAT8E4M3FN initializers).
  const bool fp8 = run && run->request.calibration.mode == QuantMode::Fp8;
  const bool int4 = (bool)m_controller->int4Result();
  m_dqOnly = new QCheckBox(fp8 ? QStringLiteral("Weights as fp8 initializers with DequantizeLinear (unchecked: float weights "
                                                "with QuantizeLinear/DequantizeLinear, as ModelOpt writes fp8)")
                               : QStringLiteral("Weights as int8 initializers with DequantizeLinear (what TensorRT prefers)"),
                           this);
  m_dqOnly->setObjectName(QStringLiteral("dqOnly"));
  m_dqOnly->setChecked(!fp8);
  m_dqOnly->setVisible(!int4);  // int4: packed INT4 weights with a blocked DequantizeLinear, always
  form->addRow(QString(), m_dqOnly);
  top->addLayout(form);
  m_status = new QLabel(this);
  m_status->setWordWrap(true);
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  top->addWidget(m_status);
  auto* buttons = new QDialogButtonBox(this);
  m_export = buttons->addButton(QStringLiteral("Export"), QDialogButtonBox::ActionRole);
  m_export->setObjectName(QStringLiteral("exportButton"));
  auto* close = buttons->addButton(QDialogButtonBox::Close);
  connect(m_export, &QPushButton::clicked, this, &ExportDialog::start);
  connect(close, &QPushButton::clicked, this, &QDialog::close);
  top->addWidget(buttons);
  resize(560, sizeHint().height());
}

ExportDialog::~ExportDialog() {
  if (m_watcher) m_watcher->waitForFinished();
}

QString ExportDialog::statusText() const { return m_status->text(); }

void ExportDialog::start() {
  if (m_watcher) return;
  const QString folder = m_folder->text().trimmed();
  if (folder.isEmpty()) {
    m_status->setText(QStringLiteral("Choose a folder."));
    return;
  }
  if (auto int4 = m_controller->int4Result(); int4 && !m_controller->isBusy()) {
    startInt4(folder, int4);
    return;
  }
  const auto current = m_controller->run();
  if (!current || m_controller->isBusy()) {
    m_status->setText(current ? QStringLiteral("An analysis is running; wait for it to finish.")
                              : QStringLiteral("Nothing to export: calibrate first."));
    return;
  }
  QSettings().setValue(QStringLiteral("export/folder"), folder);
  // A copy: the worker reads the session's current result, which no job changes while this
  // (window-modal) dialog exports.
  AnalysisRun run = runForExport(*current, m_controller->requestedStates(), m_dqOnly->isChecked(),
                                 m_controller->model() ? &m_controller->model()->graph : nullptr);
  m_export->setEnabled(false);
  m_status->setStyleSheet(QString());
  m_status->setText(QStringLiteral("Exporting…"));
  watch(QtConcurrent::run([run = std::move(run), dir = folder.toStdString()] {
    ExportTarget target;
    target.outputDir = dir;
    auto bundle = buildExportBundle(run, target);
    if (!bundle) return std::make_shared<Outcome>(bundle.status());
    if (Status st = writeBundle(*bundle); !st) return std::make_shared<Outcome>(st);
    std::vector<std::string> written;
    for (const BundleFile& f : bundle->files) written.push_back(f.path);
    return std::make_shared<Outcome>(std::move(written));
  }));
}

void ExportDialog::startInt4(const QString& folder, std::shared_ptr<const Int4Result> int4) {
  QSettings().setValue(QStringLiteral("export/folder"), folder);
  m_export->setEnabled(false);
  m_status->setStyleSheet(QString());
  m_status->setText(QStringLiteral("Exporting…"));
  // What `quantscope export --quantize-mode int4 --output-dir` writes: quantized.onnx (opset 21,
  // blocked DequantizeLinear) and report.json, all or none.
  std::vector<std::string> warnings = m_controller->warnings();
  const auto data = m_controller->request().data.path;
  watch(QtConcurrent::run([model = m_controller->model(), int4, data, warnings, dir = folder.toStdString()] {
    ExportTarget target;
    target.outputDir = dir;
    auto bundle = buildInt4Bundle(*model, *int4, target, data, warnings);
    if (!bundle) return std::make_shared<Outcome>(bundle.status());
    if (Status st = writeBundle(*bundle); !st) return std::make_shared<Outcome>(st);
    std::vector<std::string> written;
    for (const BundleFile& f : bundle->files) written.push_back(f.path);
    return std::make_shared<Outcome>(std::move(written));
  }));
}

void ExportDialog::watch(QFuture<std::shared_ptr<Outcome>> future) {
  m_watcher = new QFutureWatcher<std::shared_ptr<Outcome>>(this);
  connect(m_watcher, &QFutureWatcherBase::finished, this, [this] {
    auto r = *m_watcher->result();
    m_watcher->deleteLater();
    m_watcher = nullptr;
    m_export->setEnabled(true);
    if (!r) {
      const QString msg = QString::fromStdString(r.status().message()).simplified();
      m_status->setStyleSheet(QStringLiteral("QLabel { color: #b3261e; }"));
      m_status->setText(msg);
      emit exportFailed(msg);
      return;
    }
    QStringList files;
    for (const auto& f : *r) files << QString::fromStdString(f);
    m_status->setText(QStringLiteral("Wrote %1").arg(files.join(QStringLiteral(", "))));
    emit exported(files);
  });
  m_watcher->setFuture(std::move(future));
}

}  // namespace qs::ui
