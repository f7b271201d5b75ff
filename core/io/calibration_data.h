// Calibration data: the batches of graph inputs that calibration and the analyses feed to the
// executor, from an .npz, an .npy, a folder of images or, failing those, seeded random numbers.
//
// Everything that can be checked is checked in open(), before anything runs: names, ranks, fixed
// dims, dtypes, NaN/Inf, sample counts and image headers. Each error is one line naming the
// input (or file), what was expected and what came.
//
// Layout, as ModelOpt takes it: the first dimension of every array enumerates samples; the other
// dims must match the model's fixed dims (symbolic dims accept anything). A batch is a slice of
// `batchSize` samples along dim 0, fed in place of the model's batch dim.
//
// Memory: .npy/.npz arrays are read once at open() and kept (float64 data converted to float32
// once); a batch then copies only its own slice (none when one batch covers the whole array).
// Image folders and random data keep nothing per sample: batch(i) decodes or generates that batch
// only, so memory does not grow with the number of samples. batch() is const and re-entrant:
// batches may be requested in any order and from several threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/tensor.h"
#include "core/util/status.h"

namespace qs {

/// How the images of a folder become an input tensor: resize to width x height (bilinear, see
/// resizeBilinear), then x = (pixel * scale - mean[c]) / std[c] per channel c of the output
/// order (R,G,B, or B,G,R when `bgr`), laid out NCHW, or NHWC when `nhwc`.
struct ImagePreprocess {
  int width = 0;   // 0: the model's input width (which must then be fixed)
  int height = 0;  // 0: the model's input height
  float scale = 1.0f / 255.0f;
  std::array<float, 3> mean{0, 0, 0};  // in the output channel order
  std::array<float, 3> std{1, 1, 1};   // must be finite and non-zero
  bool bgr = false;
  bool nhwc = false;
};

struct CalibrationDataOptions {
  /// An .npz keyed by input names, an .npy (single-input models), a folder of .png/.jpg/.jpeg/.bmp
  /// files (single image input; sorted by name, not recursive), or empty for random inputs.
  std::string path;
  /// Use at most this many samples (--calibration-size); -1 = all. In random mode, the number of
  /// samples to generate (-1: one batch).
  int64_t maxSamples = -1;
  /// Samples per batch (--calibration-batch-size); 0 = the model's static batch dim, or 1 when
  /// it is dynamic. A value that contradicts a static batch dim is an error.
  int64_t batchSize = 0;
  ImagePreprocess image;
  /// Seed of the random inputs.
  uint64_t seed = 0;
  /// Random inputs only: the shapes of inputs whose declared dims are symbolic (--shape
  /// NAME=1x3x640x640; the first dim is the batch). Declared rank and fixed dims must match.
  std::map<std::string, Shape> shapes;
};

/// Parses "NAME=1x3x640x640" (--shape). InvalidArgument naming the spec for anything else.
Status parseShapeSpec(const std::string& spec, std::string& name, Shape& shape);

/// Text of the warning given when no calibration data is supplied.
inline constexpr const char* kRandomCalibrationWarning =
    "no calibration data: random inputs make the scales meaningless";

class CalibrationData {
 public:
  virtual ~CalibrationData() = default;

  /// Opens and validates the data for `model`'s graph inputs. What is needed of the model (input
  /// names, dtypes, shapes) is copied: the model need not outlive the returned object. Fails with InvalidArgument (data does not fit the model,
  /// bad options, zero samples), IoError (unreadable path or image), Unsupported (a dtype the
  /// data cannot be given in), ResourceLimit (a file beyond the size limits).
  static Result<std::unique_ptr<CalibrationData>> open(const Model& model, const CalibrationDataOptions& options);

  /// Samples that will be fed (after maxSamples and any dropped remainder).
  virtual int64_t sampleCount() const = 0;
  /// Samples per batch; the last batch is smaller when the batch dim is dynamic and the count is
  /// not a multiple.
  virtual int64_t batchSize() const = 0;
  /// Number of batches: ceil(sampleCount / batchSize).
  int64_t batchCount() const { return (sampleCount() + batchSize() - 1) / batchSize(); }
  /// Feeds for batch `index` (0 <= index < batchCount()), one per graph input in the model's
  /// input order, keyed by input name: ready for Executor::run. Fails for an index out of range
  /// or, for image folders, an image that cannot be decoded (naming the file).
  virtual Result<std::vector<NamedTensor>> batch(int64_t index) const = 0;
  /// True when the data is random (no path given): the scales derived from it mean nothing.
  virtual bool isRandom() const { return false; }
  /// Non-fatal findings of open(), one line each (conversions, dropped samples, random data).
  const std::vector<std::string>& warnings() const { return m_warnings; }
  /// Where the data came from, for messages and reports ("random", the path).
  virtual std::string description() const = 0;

 protected:
  CalibrationData() = default;
  std::vector<std::string> m_warnings;
};

/// A view of batches [first, first + count) of `data` (which it keeps alive), the same feeds under
/// new indices 0..count-1: the samples a choice is made on and those held out of it
/// (core/export/remedy_choice.h). Null for a range outside 0..data->batchCount().
std::shared_ptr<const CalibrationData> selectBatches(std::shared_ptr<const CalibrationData> data, int64_t first,
                                                     int64_t count);

}  // namespace qs
