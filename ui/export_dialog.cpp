#include "ui/export_dialog.h"

#include <QCheckBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QSettings>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "core/export/report.h"
#include "core/export/exporter.h"
#include "core/export/quant_files.h"

namespace qs::ui {

Result<std::vector<std::string>> writeExport(const ExportInput& in, const std::string& dirPath) {
  if (!in.model || !in.result) return invalidArgument("nothing to export: calibrate first");
  if (in.result->plan.mode == QuantMode::Fp8)
    return unsupported(in.modelPath + ": fp8 export needs FLOAT8E4M3FN and opset 19, which this build's ONNX library does not know");
  const QDir dir(QString::fromStdString(dirPath));
  if (!QDir().mkpath(dir.absolutePath())) return ioError(dirPath + ": cannot create the folder");
  const std::string modelOut = dir.filePath(QStringLiteral("quantized.onnx")).toStdString();
  if (QFileInfo(QString::fromStdString(modelOut)) == QFileInfo(QString::fromStdString(in.modelPath)))
    return invalidArgument(modelOut + ": is the input model; export never overwrites it");
  ExportOptions eo;
  eo.dqOnly = in.dqOnly;
  eo.externalDataName = "quantized.onnx.data";
  if (in.model->defaultOpset() < 13 && in.data && in.session) {
    auto feeds = in.data->batch(0);
    if (!feeds) return feeds.status();
    auto ranks = observeRanks(in.session->executor(), *feeds);
    if (!ranks) return ranks.status();
    eo.observedRanks = std::move(ranks).value();
  }
  auto exported = buildQuantizedModel(in.modelPath, *in.model, *in.result, eo);
  if (!exported) return exported.status();
  auto fingerprint = fileFingerprint(in.modelPath);
  if (!fingerprint) return fingerprint.status();
  QuantConfigContext qc;
  qc.modelPath = in.modelPath;
  qc.modelFingerprint = *fingerprint;
  qc.calibrationData = in.data ? in.data->description() : "";
  qc.config = in.config;
  qc.dqOnly = eo.dqOnly;
  ReportContext rc;
  rc.modelPath = in.modelPath;
  rc.settings["calibration-method"] = calibMethodName(in.result->calibration.method);
  rc.settings["quantize-mode"] = quantModeName(in.result->plan.mode);
  if (in.data) rc.settings["calibration-data"] = in.data->description();
  const std::vector<std::pair<std::string, std::string>> files = {
      {modelOut, exported->modelBytes},
      {exported->externalDataName.empty() ? std::string() : dir.filePath(QString::fromStdString(exported->externalDataName)).toStdString(),
       exported->externalDataBytes},
      {dir.filePath(QStringLiteral("quant_cfg.json")).toStdString(), quantConfigJson(*in.model, *in.result, qc)},
      {dir.filePath(QStringLiteral("calibration.cache")).toStdString(), calibrationCacheText(*in.model, *in.result)},
      {dir.filePath(QStringLiteral("report.json")).toStdString(), reportJson(*in.model, *in.result, rc)},
  };
  std::vector<std::string> written;
  for (const auto& [path, bytes] : files) {
    if (path.empty()) continue;
    QSaveFile f(QString::fromStdString(path));
    if (!f.open(QIODevice::WriteOnly) || f.write(bytes.data(), (qint64)bytes.size()) != (qint64)bytes.size() || !f.commit())
      return ioError(path + ": cannot write (" + f.errorString().toStdString() + ")");
    written.push_back(path);
  }
  return written;
}

ExportDialog::ExportDialog(ExportInput input, QWidget* parent) : QDialog(parent), m_input(std::move(input)) {
  setWindowTitle(QStringLiteral("Export quantized model"));
  auto* top = new QVBoxLayout(this);
  auto* intro = new QLabel(QStringLiteral("Writes <b>quantized.onnx</b> with QuantizeLinear/DequantizeLinear at the points and with "
                                          "the scales of the current analysis, plus <b>quant_cfg.json</b>, "
                                          "<b>calibration.cache</b> (TensorRT) and <b>report.json</b>."),
                           this);
  intro->setWordWrap(true);
  top->addWidget(intro);
  auto* form = new QFormLayout;
  auto* row = new QHBoxLayout;
  m_folder = new QLineEdit(this);
  const QString base = QFileInfo(QString::fromStdString(m_input.modelPath)).absolutePath();
  m_folder->setText(QSettings().value(QStringLiteral("export/folder"), base + QStringLiteral("/quantized")).toString());
  auto* browse = new QPushButton(QStringLiteral("Browse…"), this);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, QStringLiteral("Export folder"), m_folder->text());
    if (!d.isEmpty()) m_folder->setText(d);
  });
  row->addWidget(m_folder, 1);
  row->addWidget(browse);
  form->addRow(QStringLiteral("Folder"), row);
  m_dqOnly = new QCheckBox(QStringLiteral("Weights as int8 initializers with DequantizeLinear (what TensorRT prefers)"), this);
  m_dqOnly->setChecked(true);
  form->addRow(QString(), m_dqOnly);
  top->addLayout(form);
  m_status = new QLabel(this);
  m_status->setWordWrap(true);
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  top->addWidget(m_status);
  auto* buttons = new QDialogButtonBox(this);
  m_export = buttons->addButton(QStringLiteral("Export"), QDialogButtonBox::ActionRole);
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
  QSettings().setValue(QStringLiteral("export/folder"), folder);
  m_input.dqOnly = m_dqOnly->isChecked();
  m_export->setEnabled(false);
  m_status->setStyleSheet(QString());
  m_status->setText(QStringLiteral("Exporting…"));
  m_watcher = new QFutureWatcher<std::shared_ptr<Result<std::vector<std::string>>>>(this);
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
  m_watcher->setFuture(QtConcurrent::run([in = m_input, dir = folder.toStdString()] {
    return std::make_shared<Result<std::vector<std::string>>>(writeExport(in, dir));
  }));
}

}  // namespace qs::ui
