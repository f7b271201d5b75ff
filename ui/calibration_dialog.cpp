#include "ui/calibration_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QVBoxLayout>

#include "core/export/pipeline.h"
#include "ui/input_shape_fields.h"
#include "ui/remedy_options.h"

namespace qs::ui {

namespace {

enum Preset { ImageNet, Half, Custom };
constexpr int kInt4Mode = 100;  // the mode selector's int4 item (QuantMode has int8 and fp8 only)
constexpr float kImageNetMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kImageNetStd[3] = {0.229f, 0.224f, 0.225f};

QDoubleSpinBox* numberBox(QWidget* parent, double value, double lo, double hi, int decimals) {
  auto* b = new QDoubleSpinBox(parent);
  b->setRange(lo, hi);
  b->setDecimals(decimals);
  b->setValue(value);
  b->setSingleStep(0.01);
  return b;
}

}  // namespace

CalibrationDialog::CalibrationDialog(AnalysisController* controller, QWidget* parent)
    : QDialog(parent), m_controller(controller) {
  setWindowTitle(QStringLiteral("Calibrate"));
  setModal(false);
  auto* top = new QVBoxLayout(this);

  // Data source.
  auto* dataBox = new QGroupBox(QStringLiteral("Calibration data"), this);
  auto* df = new QFormLayout(dataBox);
  m_source = new QComboBox(dataBox);
  m_source->addItem(QStringLiteral("Image folder (.png, .jpg, .bmp)"), ImageFolder);
  m_source->addItem(QStringLiteral("NumPy file (.npz keyed by input, or .npy)"), NumpyFile);
  m_source->addItem(QStringLiteral("Random inputs (no data)"), Random);
  df->addRow(QStringLiteral("Source"), m_source);
  auto* pathRow = new QHBoxLayout;
  m_path = new QLineEdit(dataBox);
  m_path->setClearButtonEnabled(true);
  m_browse = new QPushButton(QStringLiteral("Browse…"), dataBox);
  pathRow->addWidget(m_path, 1);
  pathRow->addWidget(m_browse);
  df->addRow(QStringLiteral("Path"), pathRow);
  m_samples = new QSpinBox(dataBox);
  m_samples->setRange(0, 1000000);
  m_samples->setValue(32);
  m_samples->setSpecialValueText(QStringLiteral("all"));
  m_samples->setToolTip(QStringLiteral("Samples used for calibration and analysis (0: all; random data: how many to generate)"));
  df->addRow(QStringLiteral("Samples"), m_samples);
  m_randomWarning = new QLabel(QStringLiteral("⚠ Random inputs make the scales meaningless: use them only to try the workbench."), dataBox);
  m_randomWarning->setStyleSheet(QStringLiteral("QLabel { color: #8a4b00; background: #fff4d6; border: 1px solid #f0c36d; "
                                                "border-radius: 3px; padding: 4px; }"));
  m_randomWarning->setWordWrap(true);
  df->addRow(m_randomWarning);
  top->addWidget(dataBox);

  // The shapes of symbolic input dims, for random inputs (prefilled from the resize below).
  m_shapeBox = new QGroupBox(QStringLiteral("Input shapes (random inputs)"), this);
  auto* sl = new QVBoxLayout(m_shapeBox);
  m_shapes = new InputShapeFields(m_shapeBox);
  m_shapes->setObjectName(QStringLiteral("inputShapes"));
  m_shapes->setToolTip(QStringLiteral("Random inputs need a size for each symbolic dim (the CLI's --shape NAME=1x3x640x640)"));
  sl->addWidget(m_shapes);
  top->addWidget(m_shapeBox);

  // Image preprocessing.
  m_imageBox = new QGroupBox(QStringLiteral("Image preprocessing"), this);
  auto* pf = new QFormLayout(m_imageBox);
  m_preset = new QComboBox(m_imageBox);
  m_preset->addItem(QStringLiteral("ImageNet mean/std (PP-OCR det, most CNNs)"), ImageNet);
  m_preset->addItem(QStringLiteral("mean 0.5, std 0.5 (PP-OCR cls, rec)"), Half);
  m_preset->addItem(QStringLiteral("Custom"), Custom);
  pf->addRow(QStringLiteral("Preset"), m_preset);
  auto* sizeRow = new QHBoxLayout;
  m_width = new QSpinBox(m_imageBox);
  m_height = new QSpinBox(m_imageBox);
  for (QSpinBox* b : {m_width, m_height}) {
    b->setRange(0, 8192);
    b->setSpecialValueText(QStringLiteral("model"));
  }
  sizeRow->addWidget(new QLabel(QStringLiteral("width"), m_imageBox));
  sizeRow->addWidget(m_width);
  sizeRow->addWidget(new QLabel(QStringLiteral("height"), m_imageBox));
  sizeRow->addWidget(m_height);
  sizeRow->addStretch();
  pf->addRow(QStringLiteral("Resize to"), sizeRow);
  m_scale = numberBox(m_imageBox, 0, 0, 1000, 8);
  setScale(ImagePreprocess{}.scale);
  pf->addRow(QStringLiteral("Scale"), m_scale);
  auto* meanRow = new QHBoxLayout;
  auto* stdRow = new QHBoxLayout;
  for (int c = 0; c < 3; ++c) {
    m_mean[c] = numberBox(m_imageBox, kImageNetMean[c], -1000, 1000, 4);
    m_std[c] = numberBox(m_imageBox, kImageNetStd[c], 0.0001, 1000, 4);
    meanRow->addWidget(m_mean[c]);
    stdRow->addWidget(m_std[c]);
  }
  pf->addRow(QStringLiteral("Mean (per channel)"), meanRow);
  pf->addRow(QStringLiteral("Std (per channel)"), stdRow);
  auto* flags = new QHBoxLayout;
  m_bgr = new QCheckBox(QStringLiteral("BGR channel order"), m_imageBox);
  m_nhwc = new QCheckBox(QStringLiteral("NHWC layout"), m_imageBox);
  flags->addWidget(m_bgr);
  flags->addWidget(m_nhwc);
  flags->addStretch();
  pf->addRow(flags);
  top->addWidget(m_imageBox);

  // Method.
  auto* methodBox = new QGroupBox(QStringLiteral("Quantization"), this);
  auto* mf = new QFormLayout(methodBox);
  m_method = new QComboBox(methodBox);
  m_method->addItem(QStringLiteral("auto (least consumer error)"), (int)CalibMethod::Auto);
  m_method->addItem(QStringLiteral("max"), (int)CalibMethod::Max);
  m_method->addItem(QStringLiteral("entropy (TensorRT)"), (int)CalibMethod::Entropy);
  m_method->addItem(QStringLiteral("percentile"), (int)CalibMethod::Percentile);
  m_method->addItem(QStringLiteral("mse"), (int)CalibMethod::Mse);
  mf->addRow(QStringLiteral("Calibration method"), m_method);
  m_percentile = numberBox(methodBox, 99.99, 50, 100, 4);
  mf->addRow(QStringLiteral("Percentile p"), m_percentile);
  m_mode = new QComboBox(methodBox);
  m_mode->addItem(QStringLiteral("int8"), (int)QuantMode::Int8);
  m_mode->addItem(QStringLiteral("fp8 (E4M3)"), (int)QuantMode::Fp8);
  m_mode->addItem(QStringLiteral("int4 (weight-only MatMul/Gemm)"), kInt4Mode);
  mf->addRow(QStringLiteral("Mode"), m_mode);
  m_blockSize = new QComboBox(methodBox);
  m_blockSize->setObjectName(QStringLiteral("int4BlockSize"));
  for (int b : {32, 64, 128}) m_blockSize->addItem(QString::number(b), b);
  m_blockSize->setCurrentIndex(m_blockSize->findData(128));
  m_blockSize->setToolTip(QStringLiteral("int4: values per scale along the reduction axis K (the CLI's --block-size)"));
  mf->addRow(QStringLiteral("Block size"), m_blockSize);
  m_int4Method = new QComboBox(methodBox);
  m_int4Method->setObjectName(QStringLiteral("int4Method"));
  m_int4Method->addItem(QStringLiteral("awq_lite (activation-aware scales)"), (int)Int4Method::AwqLite);
  m_int4Method->addItem(QStringLiteral("awq_clip (clip-ratio search per block)"), (int)Int4Method::AwqClip);
  m_int4Method->addItem(QStringLiteral("rtn_dq (round to nearest)"), (int)Int4Method::RtnDq);
  m_int4Method->setToolTip(QStringLiteral("int4: ModelOpt's calibration method (the CLI's --calibration-method)"));
  mf->addRow(QStringLiteral("INT4 method"), m_int4Method);
  top->addWidget(methodBox);
  m_remedies = new RemedyOptions(this);
  top->addWidget(m_remedies);

  // Progress and errors.
  m_stage = new QLabel(this);
  m_progress = new QProgressBar(this);
  m_progress->setRange(0, 100);
  m_progress->setValue(0);
  m_error = new QLabel(this);
  m_error->setStyleSheet(QStringLiteral("QLabel { color: #b3261e; }"));
  m_error->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_error->setWordWrap(true);
  top->addWidget(m_stage);
  top->addWidget(m_progress);
  top->addWidget(m_error);

  auto* buttons = new QDialogButtonBox(this);
  m_run = buttons->addButton(QStringLiteral("Calibrate"), QDialogButtonBox::AcceptRole);
  m_cancel = buttons->addButton(QStringLiteral("Cancel run"), QDialogButtonBox::RejectRole);
  m_close = buttons->addButton(QDialogButtonBox::Close);
  m_run->setDefault(true);
  // The box's accepted/rejected would close the dialog: the buttons are wired one by one.
  connect(m_run, &QPushButton::clicked, this, &CalibrationDialog::start);
  connect(m_cancel, &QPushButton::clicked, m_controller, &AnalysisController::cancel);
  connect(m_close, &QPushButton::clicked, this, &QDialog::close);
  top->addWidget(buttons);

  connect(m_source, &QComboBox::currentIndexChanged, this, &CalibrationDialog::updateEnabled);
  connect(m_method, &QComboBox::currentIndexChanged, this, &CalibrationDialog::updateEnabled);
  // Picking a mode picks its default method, as the command line does without --calibration-method
  // (auto for int8, max for fp8). `activated`: only the user's choice, not setRequest's.
  connect(m_mode, &QComboBox::currentIndexChanged, this, &CalibrationDialog::updateEnabled);
  connect(m_mode, &QComboBox::activated, this, [this] {
    if (m_mode->currentData().toInt() == kInt4Mode) return;
    const auto mode = (QuantMode)m_mode->currentData().toInt();
    m_method->setCurrentIndex(m_method->findData((int)defaultCalibrationMethod(mode)));
  });
  connect(m_preset, &QComboBox::activated, this, &CalibrationDialog::applyPreset);
  connect(m_browse, &QPushButton::clicked, this, &CalibrationDialog::browse);
  connect(m_path, &QLineEdit::textEdited, this, [this] { m_error->clear(); });
  for (QSpinBox* side : {m_width, m_height})
    connect(side, &QSpinBox::valueChanged, this, [this] { m_shapes->setImageSize(m_width->value(), m_height->value()); });

  connect(m_controller, &AnalysisController::jobStarted, this, &CalibrationDialog::onJobStarted);
  connect(m_controller, &AnalysisController::progress, this, &CalibrationDialog::onProgress);
  connect(m_controller, &AnalysisController::calibrated, this, [this] {
    m_stage->setText(QStringLiteral("Done in %1 s.").arg(m_controller->lastJobSeconds(), 0, 'f', 1));
    m_progress->setValue(100);
    onFinished();
    QSettings().setValue(QStringLiteral("calibration/path"), m_path->text());
    close();
  });
  connect(m_controller, &AnalysisController::failed, this, [this](AnalysisController::Job job, const QString& message) {
    if (job != AnalysisController::Job::Calibrate) return;
    showError(message);
    onFinished();
  });
  connect(m_controller, &AnalysisController::cancelled, this, [this](AnalysisController::Job job) {
    if (job != AnalysisController::Job::Calibrate) return;
    m_stage->setText(QStringLiteral("Cancelled. The previous results are kept."));
    onFinished();
  });
  m_path->setText(QSettings().value(QStringLiteral("calibration/path")).toString());
  if (m_path->text().isEmpty()) m_source->setCurrentIndex(m_source->findData(ImageFolder));
  updateEnabled();
  m_cancel->setEnabled(false);
  resize(560, sizeHint().height());
}

CalibrationDialog::Source CalibrationDialog::source() const { return (Source)m_source->currentData().toInt(); }

void CalibrationDialog::updateEnabled() {
  const Source source = this->source();
  m_path->setEnabled(source != Random);
  m_browse->setEnabled(source != Random);
  m_imageBox->setEnabled(source == ImageFolder);
  m_shapeBox->setEnabled(source == Random && !m_running);
  m_randomWarning->setVisible(source == Random);
  const bool int4 = m_mode->currentData().toInt() == kInt4Mode;
  m_percentile->setEnabled(!int4 && m_method->currentData().toInt() == (int)CalibMethod::Percentile);
  // int4 is weight-only: no activation calibration method; its own block size and method instead.
  auto* form = static_cast<QFormLayout*>(m_method->parentWidget()->layout());
  form->setRowVisible(m_method, !int4);
  form->setRowVisible(m_percentile, !int4);
  form->setRowVisible(m_blockSize, int4);
  form->setRowVisible(m_int4Method, int4);
  m_path->setPlaceholderText(source == ImageFolder ? QStringLiteral("folder of images") : QStringLiteral("file.npz or file.npy"));
  const bool idle = !m_running;
  for (QWidget* w : std::initializer_list<QWidget*>{m_source, m_samples, m_method, m_mode, m_blockSize, m_int4Method}) w->setEnabled(idle);
  m_remedies->setEnabled(idle && !int4);  // remedies and precision are int8/fp8 settings
  m_remedies->setInt8(m_mode->currentData().toInt() == (int)QuantMode::Int8);
  m_run->setEnabled(idle && m_controller->model());
}

void CalibrationDialog::setScale(float scale) {
  m_scale->setValue(scale);
  // The box rounds to its decimals, and 1/255 shown as 0.00392157 is another float than 1/255 (the
  // CLI's default): while the box shows what it was given, the request gets that float back.
  m_scaleShown = {m_scale->value(), scale};
}

void CalibrationDialog::applyPreset(int index) {
  const int preset = m_preset->itemData(index).toInt();
  if (preset == Custom) return;
  setScale(ImagePreprocess{}.scale);
  for (int c = 0; c < 3; ++c) {
    m_mean[c]->setValue(preset == ImageNet ? kImageNetMean[c] : 0.5);
    m_std[c]->setValue(preset == ImageNet ? kImageNetStd[c] : 0.5);
  }
}

void CalibrationDialog::browse() {
  QString path;
  if (source() == ImageFolder) {
    path = QFileDialog::getExistingDirectory(this, QStringLiteral("Folder of calibration images"), m_path->text());
  } else {
    path = QFileDialog::getOpenFileName(this, QStringLiteral("Calibration data"), m_path->text(),
                                        QStringLiteral("NumPy data (*.npz *.npy);;All files (*)"));
  }
  if (!path.isEmpty()) m_path->setText(path);
}

void CalibrationDialog::setModel(const Model* model) {
  m_shapes->setModel(model);
  m_shapes->setImageSize(m_width->value(), m_height->value());
  m_hasModel = model != nullptr;
  if (!model || model->graph.inputs.empty()) return;
  const Value& in = model->graph.value(model->graph.inputs.front());
  if (!in.shape || in.shape->size() != 4) return;
  // NCHW or NHWC: free spatial dims need a size; fixed ones are taken from the model.
  const auto& d = *in.shape;
  const bool nhwc = d[3].value == 1 || d[3].value == 3;
  const int64_t h = nhwc ? d[1].value : d[2].value, w = nhwc ? d[2].value : d[3].value;
  m_nhwc->setChecked(nhwc && d[1].value != 3);
  m_height->setValue(h > 0 ? 0 : std::max(m_height->value(), 640));
  m_width->setValue(w > 0 ? 0 : std::max(m_width->value(), 640));
}

void CalibrationDialog::setRequest(const AnalysisRequest& r) {
  m_base = r;
  const CalibrationDataOptions& d = r.data;
  const Source source = d.path.empty() ? Random : QFileInfo(QString::fromStdString(d.path)).isDir() ? ImageFolder : NumpyFile;
  m_source->setCurrentIndex(m_source->findData(source));
  if (!d.path.empty()) m_path->setText(QString::fromStdString(d.path));
  m_samples->setValue(d.maxSamples < 0 ? 0 : (int)d.maxSamples);
  m_width->setValue(d.image.width);
  m_height->setValue(d.image.height);
  m_shapes->setShapes(d.shapes);  // after the resize, which prefills the image sides
  setScale(d.image.scale);
  for (int c = 0; c < 3; ++c) {
    m_mean[c]->setValue(d.image.mean[(size_t)c]);
    m_std[c]->setValue(d.image.std[(size_t)c]);
  }
  m_preset->setCurrentIndex(m_preset->findData(Custom));
  for (int p : {ImageNet, Half}) {
    bool same = std::abs(d.image.scale - 1.0 / 255.0) < 1e-6;
    for (int c = 0; c < 3; ++c) {
      same &= std::abs(d.image.mean[(size_t)c] - (p == ImageNet ? kImageNetMean[c] : 0.5f)) < 1e-4f;
      same &= std::abs(d.image.std[(size_t)c] - (p == ImageNet ? kImageNetStd[c] : 0.5f)) < 1e-4f;
    }
    if (same) m_preset->setCurrentIndex(m_preset->findData(p));
  }
  m_bgr->setChecked(d.image.bgr);
  m_nhwc->setChecked(d.image.nhwc);
  m_method->setCurrentIndex(m_method->findData((int)r.calibration.method));
  m_percentile->setValue(r.calibration.percentile);
  m_mode->setCurrentIndex(m_mode->findData((int)r.calibration.mode));
  m_remedies->setRequest(r);
  updateEnabled();
}

AnalysisRequest CalibrationDialog::request() const {
  AnalysisRequest r = m_base;
  const Source source = this->source();
  r.data.path = source == Random ? std::string() : m_path->text().trimmed().toStdString();
  r.data.maxSamples = m_samples->value() == 0 ? -1 : m_samples->value();
  if (source == Random && r.data.maxSamples < 0) r.data.maxSamples = 8;
  // Shapes are for random inputs only; without a model the fields have no inputs, and the
  // request's shapes are kept.
  if (source != Random) r.data.shapes.clear();
  else if (m_hasModel) r.data.shapes = m_shapes->shapes();
  r.data.image.width = m_width->value();
  r.data.image.height = m_height->value();
  r.data.image.scale = m_scale->value() == m_scaleShown.first ? m_scaleShown.second : (float)m_scale->value();
  for (int c = 0; c < 3; ++c) {
    r.data.image.mean[(size_t)c] = (float)m_mean[c]->value();
    r.data.image.std[(size_t)c] = (float)m_std[c]->value();
  }
  r.data.image.bgr = m_bgr->isChecked();
  r.data.image.nhwc = m_nhwc->isChecked();
  r.calibration.method = (CalibMethod)m_method->currentData().toInt();
  r.calibration.percentile = m_percentile->value();
  r.calibration.mode = (QuantMode)m_mode->currentData().toInt();
  m_remedies->apply(r);
  return r;
}

bool CalibrationDialog::start() {
  m_error->clear();
  if (source() != Random && m_path->text().trimmed().isEmpty()) {
    showError(QStringLiteral("Choose a %1, or random inputs.")
                  .arg(source() == ImageFolder ? QStringLiteral("folder of images") : QStringLiteral("data file")));
    return false;
  }
  if (m_controller->isBusy()) {
    showError(QStringLiteral("An analysis is running; cancel it or wait."));
    return false;
  }
  const Int4Settings int4 = int4Settings();
  if (int4.on) return m_controller->calibrateInt4(request(), int4);
  return m_controller->calibrate(request());  // failures before the thread arrive through failed()
}

Int4Settings CalibrationDialog::int4Settings() const {
  Int4Settings s;
  s.on = m_mode->currentData().toInt() == kInt4Mode;
  s.method = (Int4Method)m_int4Method->currentData().toInt();
  s.blockSize = m_blockSize->currentData().toInt();
  return s;
}

void CalibrationDialog::setInt4Settings(const Int4Settings& s) {
  m_int4Method->setCurrentIndex(std::max(0, m_int4Method->findData((int)s.method)));
  int block = m_blockSize->findData((int)s.blockSize);
  if (block < 0) {  // a project or CLI value outside the three offered (a power of two >= 16)
    m_blockSize->addItem(QString::number(s.blockSize), (int)s.blockSize);
    block = m_blockSize->count() - 1;
  }
  m_blockSize->setCurrentIndex(block);
  if (s.on) m_mode->setCurrentIndex(m_mode->findData(kInt4Mode));
  updateEnabled();
}

QString CalibrationDialog::errorText() const { return m_error->text(); }

void CalibrationDialog::showError(const QString& message) {
  // One line: the core's messages name the file and the reason.
  const QString line = message.simplified();
  m_error->setText(line);
  m_error->setToolTip(line);
}

void CalibrationDialog::onJobStarted(AnalysisController::Job job) {
  if (job != AnalysisController::Job::Calibrate) return;
  m_running = true;
  m_error->clear();
  m_progress->setValue(0);
  m_stage->setText(QStringLiteral("Starting…"));
  m_cancel->setEnabled(true);
  updateEnabled();
}

void CalibrationDialog::onProgress(int percent, const QString& stage) {
  if (!m_running) return;
  m_progress->setValue(percent);
  QString s = stage;
  if (!s.isEmpty()) s[0] = s[0].toUpper();
  m_stage->setText(s);
}

void CalibrationDialog::onFinished() {
  m_running = false;
  m_cancel->setEnabled(false);
  updateEnabled();
}

}  // namespace qs::ui
