// Colour families for ONNX op types in the graph view and its legend.
#pragma once

#include <QColor>
#include <QString>
#include <string>

namespace qs::ui {

enum class OpCategory { ConvMatMul, Activation, Elementwise, ShapeCopy, PoolResize, Normalization, Other };
constexpr int kOpCategoryCount = 7;

/// The family of an op type (default domain names; other domains fall back to Other).
OpCategory opCategory(const std::string& opType);
/// Fill colour of node boxes of this family.
QColor opCategoryColor(OpCategory c);
/// Legend label ("Conv / MatMul").
QString opCategoryName(OpCategory c);

}  // namespace qs::ui
