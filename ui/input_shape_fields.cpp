#include "ui/input_shape_fields.h"

#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSpinBox>
#include <algorithm>

namespace qs::ui {

namespace {

constexpr int kMaxDim = 1 << 20;  // what a project file accepts (ui/project_file.cpp)
constexpr int kDefaultSide = 224;
constexpr int kDefaultLength = 128;

bool hasField(const std::vector<QSpinBox*>& fields) {
  return std::any_of(fields.begin(), fields.end(), [](QSpinBox* f) { return f != nullptr; });
}

QString declaredText(const std::vector<Dim>& dims) {
  QStringList parts;
  for (const Dim& d : dims)
    parts << (d.isFixed() ? QString::number(d.value) : d.symbol.empty() ? QStringLiteral("?") : QString::fromStdString(d.symbol));
  return QStringLiteral("[%1]").arg(parts.join(QStringLiteral(", ")));
}

}  // namespace

InputShapeFields::InputShapeFields(QWidget* parent) : QWidget(parent) {
  m_form = new QFormLayout(this);
  m_form->setContentsMargins(0, 0, 0, 0);
}

void InputShapeFields::clear() {
  while (m_form->rowCount() > 0) m_form->removeRow(0);
  m_rows.clear();
}

void InputShapeFields::setModel(const Model* model) {
  clear();
  if (!model) return;
  const Graph& g = model->graph;
  for (ValueId id : g.inputs) {
    const Value& v = g.value(id);
    const QString name = QString::fromStdString(v.name);
    auto* label = new QLabel(name, this);
    if (!v.shape) {
      m_form->addRow(label, new QLabel(QStringLiteral("unknown shape: random inputs cannot be made, give calibration data"), this));
      continue;
    }
    Row row{v.name, *v.shape, {}, -1, -1};
    const int rank = (int)row.declared.size();
    if (rank == 4) {
      // NHWC when the last dim is a fixed channel count and the second is not; NCHW otherwise.
      const Dim& c = row.declared[3];
      const bool nhwc = c.isFixed() && (c.value == 1 || c.value == 3) && row.declared[1].value != 3;
      row.heightDim = nhwc ? 1 : 2;
      row.widthDim = nhwc ? 2 : 3;
    }
    label->setToolTip(QStringLiteral("Declared %1").arg(declaredText(row.declared)));
    auto* box = new QWidget(this);
    auto* h = new QHBoxLayout(box);
    h->setContentsMargins(0, 0, 0, 0);
    for (int k = 0; k < rank; ++k) {
      if (k > 0) h->addWidget(new QLabel(QStringLiteral("×"), box));
      const Dim& d = row.declared[(size_t)k];
      if (d.isFixed()) {
        h->addWidget(new QLabel(QString::number(d.value), box));
        row.fields.push_back(nullptr);
        continue;
      }
      auto* f = new QSpinBox(box);
      f->setRange(1, kMaxDim);
      f->setObjectName(QStringLiteral("shape:%1:%2").arg(name).arg(k));
      const QString symbol = d.symbol.empty() ? QStringLiteral("unnamed") : QStringLiteral("'%1'").arg(QString::fromStdString(d.symbol));
      QString role = rank == 4 ? QStringLiteral("the channels") : QStringLiteral("a length");
      if (k == 0) role = QStringLiteral("the batch");
      else if (k == row.heightDim) role = QStringLiteral("the image height");
      else if (k == row.widthDim) role = QStringLiteral("the image width");
      f->setToolTip(QStringLiteral("Dim %1 (%2, symbolic %3 in the model)").arg(k).arg(role, symbol));
      f->setValue(k == 0 ? 1 : k == row.heightDim || k == row.widthDim ? kDefaultSide : rank == 4 ? 3 : kDefaultLength);
      h->addWidget(f);
      row.fields.push_back(f);
    }
    h->addStretch();
    m_form->addRow(label, box);
    m_rows.push_back(std::move(row));
  }
  setImageSize(m_width, m_height);
}

void InputShapeFields::setImageSize(int width, int height) {
  m_width = width;
  m_height = height;
  for (Row& r : m_rows) {
    if (r.heightDim < 0) continue;
    if (QSpinBox* f = r.fields[(size_t)r.heightDim]) f->setValue(height > 0 ? height : kDefaultSide);
    if (QSpinBox* f = r.fields[(size_t)r.widthDim]) f->setValue(width > 0 ? width : kDefaultSide);
  }
}

void InputShapeFields::setShapes(const std::map<std::string, Shape>& shapes) {
  for (Row& r : m_rows) {
    auto it = shapes.find(r.input);
    if (it == shapes.end() || it->second.size() != r.declared.size()) continue;
    const Shape& s = it->second;
    bool fits = true;
    for (size_t k = 0; k < s.size(); ++k)
      fits &= s[k] >= 1 && s[k] <= kMaxDim && (!r.declared[k].isFixed() || r.declared[k].value == s[k]);
    if (!fits) continue;
    for (size_t k = 0; k < s.size(); ++k)
      if (r.fields[k]) r.fields[k]->setValue((int)s[k]);
  }
}

std::map<std::string, Shape> InputShapeFields::shapes() const {
  std::map<std::string, Shape> out;
  for (const Row& r : m_rows) {
    if (!hasField(r.fields)) continue;
    Shape s;
    for (size_t k = 0; k < r.declared.size(); ++k) s.push_back(r.fields[k] ? r.fields[k]->value() : r.declared[k].value);
    out[r.input] = s;
  }
  return out;
}

bool InputShapeFields::hasFields() const {
  for (const Row& r : m_rows)
    if (hasField(r.fields)) return true;
  return false;
}

QSpinBox* InputShapeFields::field(const QString& input, int dim) const {
  for (const Row& r : m_rows)
    if (r.input == input.toStdString() && dim >= 0 && dim < (int)r.fields.size()) return r.fields[(size_t)dim];
  return nullptr;
}

}  // namespace qs::ui
