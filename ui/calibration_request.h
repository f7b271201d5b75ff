// What a calibration run needs, as the calibration dialog and the project file hold it. QtCore-free
// so that the project file reader builds into the fuzzers without the widgets.
#pragma once

#include "core/io/calibration_data.h"
#include "core/quant/calibrator.h"

namespace qs::ui {

/// Everything a calibration run needs, as the dialog and the project file hold it.
struct CalibrationRequest {
  CalibrationDataOptions data;      // path ("" = random), maxSamples, image preprocessing
  CalibrationSettings calibration;  // method, percentile, mode
};

}  // namespace qs::ui
