// The shapes of a model's graph inputs for random calibration inputs (the CLI's --shape): one row
// per input, its fixed dims as text and a number field for each symbolic dim, so that random inputs
// can be made for a model whose declared shapes are not fixed (PP-OCR det: x [N, 3, H, W]).
#pragma once

#include <QWidget>
#include <map>
#include <string>
#include <vector>

#include "core/ir/graph.h"

class QFormLayout;
class QSpinBox;

namespace qs::ui {

class InputShapeFields : public QWidget {
  Q_OBJECT
 public:
  explicit InputShapeFields(QWidget* parent = nullptr);

  /// One row per graph input of `model` (none for null). The symbolic dims get defaults: the batch
  /// 1, the channels of an image 3, its sides the image size (setImageSize; 224 while unset), any
  /// other dim 128 (a sequence length).
  void setModel(const Model* model);
  /// The sides that the spatial dims of rank-4 (image) inputs take: the preprocessing's resize
  /// (0: no resize, 224). Replaces what those fields hold.
  void setImageSize(int width, int height);
  /// Fills the fields of the inputs named in `shapes`; a shape whose rank or fixed dims contradict
  /// the input's declaration is ignored (the defaults stay).
  void setShapes(const std::map<std::string, Shape>& shapes);
  /// The whole shape (the batch first, the fixed dims as declared) of each input with a symbolic dim.
  std::map<std::string, Shape> shapes() const;
  /// Whether any input has a symbolic dim (a field).
  bool hasFields() const;
  /// The field of dim `dim` of `input`, or null for a fixed dim or an unknown input. Object name
  /// "shape:INPUT:DIM".
  QSpinBox* field(const QString& input, int dim) const;

 private:
  struct Row {
    std::string input;
    std::vector<Dim> declared;
    std::vector<QSpinBox*> fields;  // null for fixed dims
    int heightDim = -1, widthDim = -1;  // the image sides of a rank-4 input
  };
  void clear();

  QFormLayout* m_form = nullptr;
  std::vector<Row> m_rows;
  int m_width = 0, m_height = 0;
};

}  // namespace qs::ui
