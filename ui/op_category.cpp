#include "ui/op_category.h"

#include <string_view>
#include <unordered_map>

namespace qs::ui {

OpCategory opCategory(const std::string& opType) {
  using C = OpCategory;
  static const std::unordered_map<std::string_view, OpCategory> table = {
      {"Conv", C::ConvMatMul}, {"ConvTranspose", C::ConvMatMul}, {"ConvInteger", C::ConvMatMul},
      {"QLinearConv", C::ConvMatMul}, {"MatMul", C::ConvMatMul}, {"MatMulInteger", C::ConvMatMul},
      {"QLinearMatMul", C::ConvMatMul}, {"Gemm", C::ConvMatMul}, {"Einsum", C::ConvMatMul},
      {"DeformConv", C::ConvMatMul},

      {"Relu", C::Activation}, {"LeakyRelu", C::Activation}, {"PRelu", C::Activation},
      {"Sigmoid", C::Activation}, {"HardSigmoid", C::Activation}, {"HardSwish", C::Activation},
      {"Tanh", C::Activation}, {"Elu", C::Activation}, {"Selu", C::Activation}, {"Celu", C::Activation},
      {"Gelu", C::Activation}, {"Mish", C::Activation}, {"Softplus", C::Activation},
      {"Softsign", C::Activation}, {"Softmax", C::Activation}, {"LogSoftmax", C::Activation},
      {"Clip", C::Activation}, {"ThresholdedRelu", C::Activation}, {"Hardmax", C::Activation},

      {"Add", C::Elementwise}, {"Sub", C::Elementwise}, {"Mul", C::Elementwise}, {"Div", C::Elementwise},
      {"Pow", C::Elementwise}, {"Sqrt", C::Elementwise}, {"Exp", C::Elementwise}, {"Log", C::Elementwise},
      {"Abs", C::Elementwise}, {"Neg", C::Elementwise}, {"Reciprocal", C::Elementwise},
      {"Floor", C::Elementwise}, {"Ceil", C::Elementwise}, {"Round", C::Elementwise}, {"Sign", C::Elementwise},
      {"Erf", C::Elementwise}, {"Sin", C::Elementwise}, {"Cos", C::Elementwise}, {"Max", C::Elementwise},
      {"Min", C::Elementwise}, {"Mean", C::Elementwise}, {"Sum", C::Elementwise}, {"Mod", C::Elementwise},
      {"Equal", C::Elementwise}, {"Greater", C::Elementwise}, {"Less", C::Elementwise},
      {"GreaterOrEqual", C::Elementwise}, {"LessOrEqual", C::Elementwise}, {"And", C::Elementwise},
      {"Or", C::Elementwise}, {"Xor", C::Elementwise}, {"Not", C::Elementwise}, {"Where", C::Elementwise},

      {"Reshape", C::ShapeCopy}, {"Transpose", C::ShapeCopy}, {"Concat", C::ShapeCopy},
      {"Split", C::ShapeCopy}, {"Slice", C::ShapeCopy}, {"Gather", C::ShapeCopy},
      {"GatherElements", C::ShapeCopy}, {"GatherND", C::ShapeCopy}, {"Scatter", C::ShapeCopy},
      {"ScatterElements", C::ShapeCopy}, {"ScatterND", C::ShapeCopy}, {"Squeeze", C::ShapeCopy},
      {"Unsqueeze", C::ShapeCopy}, {"Flatten", C::ShapeCopy}, {"Shape", C::ShapeCopy}, {"Size", C::ShapeCopy},
      {"Expand", C::ShapeCopy}, {"Tile", C::ShapeCopy}, {"Pad", C::ShapeCopy}, {"Cast", C::ShapeCopy},
      {"CastLike", C::ShapeCopy}, {"Identity", C::ShapeCopy}, {"ConstantOfShape", C::ShapeCopy},
      {"Constant", C::ShapeCopy}, {"Range", C::ShapeCopy}, {"DepthToSpace", C::ShapeCopy},
      {"SpaceToDepth", C::ShapeCopy}, {"Dropout", C::ShapeCopy},

      {"MaxPool", C::PoolResize}, {"AveragePool", C::PoolResize}, {"GlobalAveragePool", C::PoolResize},
      {"GlobalMaxPool", C::PoolResize}, {"LpPool", C::PoolResize}, {"GlobalLpPool", C::PoolResize},
      {"MaxRoiPool", C::PoolResize}, {"RoiAlign", C::PoolResize}, {"Resize", C::PoolResize},
      {"Upsample", C::PoolResize}, {"MaxUnpool", C::PoolResize},

      {"BatchNormalization", C::Normalization}, {"InstanceNormalization", C::Normalization},
      {"LayerNormalization", C::Normalization}, {"GroupNormalization", C::Normalization},
      {"LpNormalization", C::Normalization}, {"LRN", C::Normalization},
      {"MeanVarianceNormalization", C::Normalization}, {"SimplifiedLayerNormalization", C::Normalization},
  };
  auto it = table.find(opType);
  return it == table.end() ? C::Other : it->second;
}

QColor opCategoryColor(OpCategory c) {
  // Muted, distinct hues that keep white text readable (after Netron's palette).
  switch (c) {
    case OpCategory::ConvMatMul: return QColor(0x33, 0x5f, 0x9a);
    case OpCategory::Activation: return QColor(0xa2, 0x45, 0x36);
    case OpCategory::Elementwise: return QColor(0x6a, 0x55, 0x9c);
    case OpCategory::ShapeCopy: return QColor(0x7a, 0x62, 0x4f);
    case OpCategory::PoolResize: return QColor(0x3d, 0x7a, 0x45);
    case OpCategory::Normalization: return QColor(0x2b, 0x7f, 0x86);
    case OpCategory::Other: return QColor(0x5e, 0x64, 0x6c);
  }
  return QColor(0x5e, 0x64, 0x6c);
}

QString opCategoryName(OpCategory c) {
  switch (c) {
    case OpCategory::ConvMatMul: return QStringLiteral("Conv / MatMul");
    case OpCategory::Activation: return QStringLiteral("Activation");
    case OpCategory::Elementwise: return QStringLiteral("Elementwise");
    case OpCategory::ShapeCopy: return QStringLiteral("Shape / copy");
    case OpCategory::PoolResize: return QStringLiteral("Pooling / resize");
    case OpCategory::Normalization: return QStringLiteral("Normalization");
    case OpCategory::Other: return QStringLiteral("Other");
  }
  return {};
}

}  // namespace qs::ui
