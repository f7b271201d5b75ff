// Calibration data sources: arrays from .npy/.npz, a folder of images, seeded random numbers.
#include "core/io/calibration_data.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>

#include "core/io/image.h"
#include "core/io/npy.h"
#include "core/ir/half.h"

namespace qs {

namespace {

namespace fs = std::filesystem;

/// What open() keeps of a graph input.
struct InputSpec {
  std::string name;
  DType dtype = DType::Undefined;
  std::optional<std::vector<Dim>> shape;

  int rank() const { return shape ? (int)shape->size() : -1; }
  const Dim& dim(int i) const { return (*shape)[(size_t)i]; }
};

std::string inQuotes(const std::string& s) { return "'" + s + "'"; }

std::string dimToString(const Dim& d) {
  if (d.isFixed()) return std::to_string(d.value);
  return d.symbol.empty() ? "?" : d.symbol;
}

/// "[N,3,224,224]", or "(unknown shape)".
std::string declaredShape(const InputSpec& in) {
  if (!in.shape) return "(unknown shape)";
  std::string s = "[";
  for (size_t i = 0; i < in.shape->size(); ++i) {
    if (i) s += ',';
    s += dimToString((*in.shape)[i]);
  }
  return s + "]";
}

/// A shape to suggest for --shape: the fixed dims as declared, a symbolic batch as 1, other
/// symbolic dims as 224 (images, rank 4) or 128 (sequences).
std::string suggestedShape(const InputSpec& in) {
  std::string s;
  for (int i = 0; i < in.rank(); ++i) {
    const Dim& d = in.dim(i);
    s += (i ? "x" : "") + std::to_string(d.isFixed() ? d.value : i == 0 ? 1 : in.rank() == 4 ? 224 : 128);
  }
  return s;
}

std::string inputList(const std::vector<InputSpec>& inputs) {
  std::string s;
  for (const auto& in : inputs) {
    if (!s.empty()) s += ", ";
    s += inQuotes(in.name);
  }
  return s;
}

std::string typeName(DType t) { return t == DType::Undefined ? "an undeclared type" : dtypeName(t); }

bool isFloating(DType t) { return t == DType::Float || t == DType::Double || t == DType::Float16; }

std::string lowerExtension(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  for (char& c : ext) c = (char)std::tolower((unsigned char)c);
  return ext;
}

/// Batch size and whether it is the model's fixed batch dim.
struct BatchPlan {
  int64_t size = 1;
  bool fixed = false;
  std::string fixedBy;  // the input whose dim 0 fixes it
};

Result<BatchPlan> planBatch(const std::vector<InputSpec>& inputs, int64_t requested) {
  if (requested < 0) return invalidArgument("calibration batch size must be positive (0 = the model's), got " + std::to_string(requested));
  BatchPlan plan;
  for (const auto& in : inputs) {
    if (in.rank() < 1 || !in.dim(0).isFixed()) continue;
    const int64_t b = in.dim(0).value;
    if (!plan.fixed) {
      plan = BatchPlan{b, true, in.name};
    } else if (b != plan.size) {
      return invalidArgument("inputs " + inQuotes(plan.fixedBy) + " and " + inQuotes(in.name) + " have different fixed batch dims (" +
                             std::to_string(plan.size) + " and " + std::to_string(b) + "): their samples cannot be batched together");
    }
  }
  if (plan.fixed) {
    if (plan.size < 1) return invalidArgument("input " + inQuotes(plan.fixedBy) + " has a fixed batch dim of 0: no sample can be fed");
    if (requested > 0 && requested != plan.size) {
      return invalidArgument("input " + inQuotes(plan.fixedBy) + " has a fixed batch dim of " + std::to_string(plan.size) +
                             "; calibration batch size " + std::to_string(requested) + " cannot be fed (leave it at 0 or use " +
                             std::to_string(plan.size) + ")");
    }
    return plan;
  }
  plan.size = requested > 0 ? requested : 1;
  return plan;
}

/// Applies maxSamples and, with a fixed batch dim, drops the remainder. `where` names the source.
Result<int64_t> usableSamples(int64_t available, int64_t maxSamples, const BatchPlan& plan, const std::string& where,
                              std::vector<std::string>* warnings) {
  if (maxSamples == 0 || maxSamples < -1) {
    return invalidArgument("calibration size must be positive (or -1 for all samples), got " + std::to_string(maxSamples));
  }
  int64_t n = available;
  if (maxSamples > 0 && maxSamples < n) n = maxSamples;
  if (n == 0) return invalidArgument(where + ": zero samples");
  if (plan.fixed) {
    if (n < plan.size) {
      return invalidArgument(where + ": " + std::to_string(n) + " samples are fewer than the fixed batch dim " +
                             std::to_string(plan.size) + " of input " + inQuotes(plan.fixedBy));
    }
    if (n % plan.size != 0) {
      const int64_t kept = n - n % plan.size;
      warnings->push_back(where + ": " + std::to_string(n) + " samples are not a multiple of the fixed batch dim " +
                          std::to_string(plan.size) + " of input " + inQuotes(plan.fixedBy) + "; the last " +
                          std::to_string(n - kept) + " are dropped");
      n = kept;
    }
  }
  return n;
}

Status checkBatchIndex(int64_t index, int64_t count) {
  if (index < 0 || index >= count) {
    return invalidArgument("calibration batch " + std::to_string(index) + " out of range (" + std::to_string(count) + " batches)");
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------
// .npy / .npz

/// Index of the first non-finite element, or -1.
int64_t firstNonFinite(const Tensor& t, int64_t limit) {
  switch (t.dtype()) {
    case DType::Float: {
      const float* p = t.data<float>();
      for (int64_t i = 0; i < limit; ++i)
        if (!std::isfinite(p[i])) return i;
      return -1;
    }
    case DType::Double: {
      const double* p = t.data<double>();
      for (int64_t i = 0; i < limit; ++i)
        if (!std::isfinite(p[i])) return i;
      return -1;
    }
    case DType::Float16: {
      const uint16_t* p = t.data<uint16_t>();
      for (int64_t i = 0; i < limit; ++i)
        if ((p[i] & 0x7c00) == 0x7c00) return i;  // exponent all ones: Inf or NaN
      return -1;
    }
    default:
      return -1;
  }
}

/// Checks one array against its input and converts float64 to float32 when the input is float.
Status validateArray(const InputSpec& in, Tensor* data, int64_t maxSamples, const std::string& where,
                     std::vector<std::string>* warnings) {
  const std::string who = where + ": input " + inQuotes(in.name);
  const std::string model = " (model input " + declaredShape(in) + ")";
  Tensor& t = *data;
  if (in.rank() == 0) {
    return invalidArgument(who + " is a scalar: it has no first dim to enumerate samples along");
  }
  if (t.rank() == 0) {
    return invalidArgument(who + ": expected an array whose first dim enumerates samples, got a scalar" + model);
  }
  if (in.shape) {
    if (t.rank() != in.rank()) {
      return invalidArgument(who + ": expected rank " + std::to_string(in.rank()) +
                             " (samples first, then the model's dims after the batch dim), got rank " +
                             std::to_string(t.rank()) + " shape " + shapeToString(t.shape()) + model);
    }
    for (int k = 1; k < t.rank(); ++k) {
      if (in.dim(k).isFixed() && in.dim(k).value != t.dim(k)) {
        return invalidArgument(who + ": dim " + std::to_string(k) + " expected " + std::to_string(in.dim(k).value) + ", got " +
                               std::to_string(t.dim(k)) + " (data shape " + shapeToString(t.shape()) + ", model input " +
                               declaredShape(in) + ")");
      }
    }
  }
  if (t.dim(0) == 0) return invalidArgument(who + ": zero samples (data shape " + shapeToString(t.shape()) + ")");
  if (in.dtype != DType::Undefined && t.dtype() != in.dtype) {
    if (!(in.dtype == DType::Float && t.dtype() == DType::Double)) {
      return invalidArgument(who + ": expected " + dtypeName(in.dtype) + " data, got " + dtypeName(t.dtype()));
    }
  }
  // Only the samples that will be used need to be finite.
  const int64_t perSample = t.numel() / t.dim(0);
  const int64_t used = maxSamples > 0 ? std::min(maxSamples, t.dim(0)) : t.dim(0);
  const int64_t bad = firstNonFinite(t, used * perSample);
  if (bad >= 0) {
    const double v = t.valueAsDouble(bad);
    return invalidArgument(who + ": " + (std::isnan(v) ? "NaN" : "Inf") + " in sample " + std::to_string(bad / perSample) +
                           " (element " + std::to_string(bad % perSample) + " of the sample)");
  }
  if (in.dtype == DType::Float && t.dtype() == DType::Double) {
    Tensor f(DType::Float, t.shape());
    const double* src = t.data<double>();
    float* dst = f.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = (float)src[i];
    // Doubles beyond float's range become Inf: as fatal as an Inf in the file.
    const int64_t overflow = firstNonFinite(f, used * perSample);
    if (overflow >= 0) {
      char value[32];
      std::snprintf(value, sizeof value, "%g", src[overflow]);
      return invalidArgument(who + ": value " + value + " in sample " +
                             std::to_string(overflow / perSample) + " is out of float32 range");
    }
    warnings->push_back(who + ": float64 data converted to float32, the model's input type");
    t = std::move(f);
  }
  return Status::ok();
}

class ArrayData final : public CalibrationData {
 public:
  ArrayData(std::string where, std::vector<NamedTensor> arrays, int64_t samples, int64_t batch, std::vector<std::string> warnings)
      : m_where(std::move(where)), m_arrays(std::move(arrays)), m_samples(samples), m_batch(batch) {
    m_warnings = std::move(warnings);
  }
  int64_t sampleCount() const override { return m_samples; }
  int64_t batchSize() const override { return m_batch; }
  std::string description() const override { return m_where; }

  Result<std::vector<NamedTensor>> batch(int64_t index) const override {
    QS_RETURN_IF_ERROR(checkBatchIndex(index, batchCount()));
    const int64_t first = index * m_batch;
    const int64_t count = std::min(m_batch, m_samples - first);
    std::vector<NamedTensor> feeds;
    feeds.reserve(m_arrays.size());
    for (const auto& a : m_arrays) {
      const Tensor& t = a.tensor;
      if (first == 0 && count == t.dim(0)) {  // the whole array: share it
        feeds.push_back(a);
        continue;
      }
      Shape shape = t.shape();
      shape[0] = count;
      Tensor slice(t.dtype(), std::move(shape));
      const size_t sampleBytes = t.byteSize() / (size_t)t.dim(0);
      std::memcpy(slice.raw(), static_cast<const char*>(t.raw()) + (size_t)first * sampleBytes, (size_t)count * sampleBytes);
      feeds.push_back({a.name, std::move(slice)});
    }
    return feeds;
  }

 private:
  std::string m_where;
  std::vector<NamedTensor> m_arrays;  // model input order
  int64_t m_samples;
  int64_t m_batch;
};

Result<std::unique_ptr<CalibrationData>> openArrays(const std::vector<InputSpec>& inputs, const CalibrationDataOptions& options,
                                                     bool npz) {
  const std::string& path = options.path;
  std::vector<NamedTensor> arrays(inputs.size());
  if (npz) {
    auto read = readNpz(path);
    if (!read) return read.status();
    std::vector<bool> found(inputs.size(), false);
    for (auto& member : read.value()) {
      auto it = std::find_if(inputs.begin(), inputs.end(), [&](const InputSpec& in) { return in.name == member.name; });
      if (it == inputs.end()) {
        return invalidArgument(path + ": key " + inQuotes(member.name) + " is not an input of the model (inputs: " +
                               inputList(inputs) + ")");
      }
      const size_t i = (size_t)(it - inputs.begin());
      found[i] = true;
      arrays[i] = std::move(member);
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (found[i]) continue;
      std::string keys;
      for (size_t j = 0; j < inputs.size(); ++j) {
        if (!found[j]) continue;
        if (!keys.empty()) keys += ", ";
        keys += inQuotes(inputs[j].name);
      }
      return invalidArgument(path + ": no array for model input " + inQuotes(inputs[i].name) + " (keys present: " +
                             (keys.empty() ? std::string("none") : keys) + ")");
    }
  } else {
    if (inputs.size() != 1) {
      return invalidArgument(path + ": an .npy file feeds a single-input model; this model has " + std::to_string(inputs.size()) +
                             " inputs (" + inputList(inputs) + "): use an .npz keyed by input name");
    }
    auto read = readNpy(path);
    if (!read) return read.status();
    arrays[0] = NamedTensor{inputs[0].name, std::move(read).value()};
  }

  std::vector<std::string> warnings;
  for (size_t i = 0; i < inputs.size(); ++i) {
    QS_RETURN_IF_ERROR(validateArray(inputs[i], &arrays[i].tensor, options.maxSamples, path, &warnings));
  }
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (arrays[i].tensor.dim(0) != arrays[0].tensor.dim(0)) {
      return invalidArgument(path + ": inputs " + inQuotes(inputs[0].name) + " and " + inQuotes(inputs[i].name) +
                             " have different sample counts (" + std::to_string(arrays[0].tensor.dim(0)) + " and " +
                             std::to_string(arrays[i].tensor.dim(0)) + "; the first dim of each array enumerates samples)");
    }
  }
  auto plan = planBatch(inputs, options.batchSize);
  if (!plan) return plan.status().withContext(path);
  auto n = usableSamples(arrays[0].tensor.dim(0), options.maxSamples, plan.value(), path, &warnings);
  if (!n) return n.status();
  return std::unique_ptr<CalibrationData>(
      std::make_unique<ArrayData>(path, std::move(arrays), n.value(), plan->size, std::move(warnings)));
}

// ---------------------------------------------------------------------------------------------
// Folder of images

class ImageFolderData final : public CalibrationData {
 public:
  ImageFolderData(std::string folder, std::string input, std::vector<std::string> files, int64_t samples, int64_t batch,
                  int width, int height, ImagePreprocess pre)
      : m_folder(std::move(folder)),
        m_input(std::move(input)),
        m_files(std::move(files)),
        m_samples(samples),
        m_batch(batch),
        m_width(width),
        m_height(height),
        m_pre(pre) {}
  int64_t sampleCount() const override { return m_samples; }
  int64_t batchSize() const override { return m_batch; }
  std::string description() const override { return m_folder; }
  std::vector<std::string>& warningsToFill() { return m_warnings; }

  Result<std::vector<NamedTensor>> batch(int64_t index) const override {
    QS_RETURN_IF_ERROR(checkBatchIndex(index, batchCount()));
    const int64_t first = index * m_batch;
    const int64_t count = std::min(m_batch, m_samples - first);
    const int64_t h = m_height, w = m_width, plane = h * w;
    Tensor t(DType::Float, m_pre.nhwc ? Shape{count, h, w, 3} : Shape{count, 3, h, w});
    float* out = t.data<float>();
    // Output channel c reads source channel src[c]; folding scale, mean and std into one
    // multiply-add per element: (p*scale - mean)/std = p*(scale/std) - mean/std.
    const int src[3] = {m_pre.bgr ? 2 : 0, 1, m_pre.bgr ? 0 : 2};
    float mul[3], add[3];
    for (int c = 0; c < 3; ++c) {
      mul[c] = m_pre.scale / m_pre.std[(size_t)c];
      add[c] = -m_pre.mean[(size_t)c] / m_pre.std[(size_t)c];
    }
    for (int64_t s = 0; s < count; ++s) {
      auto img = readImage(m_files[(size_t)(first + s)]);
      if (!img) return img.status();
      const Image sized = resizeBilinear(img.value(), m_width, m_height);
      float* dst = out + s * 3 * plane;
      for (int64_t p = 0; p < plane; ++p) {
        const uint8_t* px = sized.pixels.data() + p * 3;
        for (int c = 0; c < 3; ++c) {
          const float v = (float)px[src[c]] * mul[c] + add[c];
          if (m_pre.nhwc) dst[p * 3 + c] = v;
          else dst[c * plane + p] = v;
        }
      }
    }
    return std::vector<NamedTensor>{{m_input, std::move(t)}};
  }

 private:
  std::string m_folder;
  std::string m_input;
  std::vector<std::string> m_files;  // sorted by name; only the first m_samples are used
  int64_t m_samples;
  int64_t m_batch;
  int m_width, m_height;
  ImagePreprocess m_pre;
};

/// The image size for `in`: the option when given (and compatible), else the model's fixed dim.
Result<int> imageExtent(const InputSpec& in, int dimIndex, int requested, const char* what, const std::string& who) {
  if (requested < 0) return invalidArgument(who + ": image " + what + " must be positive, got " + std::to_string(requested));
  const bool known = in.shape && in.dim(dimIndex).isFixed();
  if (requested > 0) {
    if (known && in.dim(dimIndex).value != requested) {
      return invalidArgument(who + ": image " + what + " " + std::to_string(requested) + " given, but dim " +
                             std::to_string(dimIndex) + " of model input " + declaredShape(in) + " is fixed at " +
                             std::to_string(in.dim(dimIndex).value));
    }
    return requested;
  }
  if (!known) {
    const std::string dim = in.shape ? "is symbolic (" + dimToString(in.dim(dimIndex)) + ")" : "is unknown";
    return invalidArgument(who + ": dim " + std::to_string(dimIndex) + " (" + what + ") of model input " + declaredShape(in) +
                           " " + dim + ": give the image " + what);
  }
  if (in.dim(dimIndex).value < 1 || in.dim(dimIndex).value > (1 << 16)) {
    return invalidArgument(who + ": model input " + declaredShape(in) + " has an unusable image " + what + " " +
                           std::to_string(in.dim(dimIndex).value));
  }
  return (int)in.dim(dimIndex).value;
}

Result<std::unique_ptr<CalibrationData>> openImageFolder(const std::vector<InputSpec>& inputs, const CalibrationDataOptions& options) {
  const std::string& folder = options.path;
  const ImagePreprocess& pre = options.image;
  if (inputs.size() != 1) {
    return invalidArgument(folder + ": a folder of images feeds a single-input model; this model has " +
                           std::to_string(inputs.size()) + " inputs (" + inputList(inputs) + "): use an .npz keyed by input name");
  }
  const InputSpec& in = inputs[0];
  const std::string who = folder + ": input " + inQuotes(in.name);
  if (in.dtype != DType::Float && in.dtype != DType::Undefined) {
    return invalidArgument(who + ": images feed float inputs, the model input is " + dtypeName(in.dtype));
  }
  const char* layout = pre.nhwc ? "NHWC [N,H,W,3]" : "NCHW [N,3,H,W]";
  const int channelDim = pre.nhwc ? 3 : 1, heightDim = pre.nhwc ? 1 : 2, widthDim = pre.nhwc ? 2 : 3;
  if (in.shape) {
    if (in.rank() != 4) {
      return invalidArgument(who + ": expected an image input " + layout + ", the model input is " + declaredShape(in));
    }
    if (in.dim(channelDim).isFixed() && in.dim(channelDim).value != 3) {
      std::string hint;
      const int other = pre.nhwc ? 1 : 3;
      if (in.dim(other).isFixed() && in.dim(other).value == 3) hint = pre.nhwc ? " (NCHW layout?)" : " (NHWC layout? set nhwc)";
      return invalidArgument(who + ": expected 3 channels at dim " + std::to_string(channelDim) + " for " + layout +
                             ", the model input is " + declaredShape(in) + hint);
    }
  }
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(pre.mean[(size_t)c]) || !std::isfinite(pre.std[(size_t)c]) || pre.std[(size_t)c] == 0.0f) {
      char got[96];
      std::snprintf(got, sizeof got, "mean %g and std %g", (double)pre.mean[(size_t)c], (double)pre.std[(size_t)c]);
      return invalidArgument(folder + ": image mean and std must be finite and std non-zero, got " + got + " for channel " +
                             std::to_string(c));
    }
  }
  if (!std::isfinite(pre.scale)) return invalidArgument(folder + ": image scale must be finite");
  auto height = imageExtent(in, heightDim, pre.height, "height", who);
  if (!height) return height.status();
  auto width = imageExtent(in, widthDim, pre.width, "width", who);
  if (!width) return width.status();

  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code typeEc;
    if (it->is_regular_file(typeEc) && isImageFileName(it->path().filename().string())) files.push_back(it->path().string());
  }
  if (ec) return ioError(folder + ": cannot list the folder: " + ec.message());
  std::sort(files.begin(), files.end());
  if (files.empty()) return invalidArgument(folder + ": zero samples: no images (.png, .jpg, .jpeg, .bmp) in the folder");

  std::vector<std::string> warnings;
  auto plan = planBatch(inputs, options.batchSize);
  if (!plan) return plan.status().withContext(folder);
  auto n = usableSamples((int64_t)files.size(), options.maxSamples, plan.value(), folder, &warnings);
  if (!n) return n.status();
  files.resize((size_t)n.value());
  // Headers only: a file that is not an image fails now, before calibration starts.
  for (const auto& f : files) QS_RETURN_IF_ERROR(probeImage(f, nullptr, nullptr));
  auto data = std::make_unique<ImageFolderData>(folder, in.name, std::move(files), n.value(), plan->size, width.value(),
                                                height.value(), pre);
  data->warningsToFill() = std::move(warnings);
  return std::unique_ptr<CalibrationData>(std::move(data));
}

// ---------------------------------------------------------------------------------------------
// Random

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class RandomData final : public CalibrationData {
 public:
  RandomData(std::vector<InputSpec> inputs, std::vector<Shape> sampleShapes, int64_t samples, int64_t batch, uint64_t seed,
             std::vector<std::string> warnings)
      : m_inputs(std::move(inputs)), m_sampleShapes(std::move(sampleShapes)), m_samples(samples), m_batch(batch), m_seed(seed) {
    m_warnings = std::move(warnings);
  }
  int64_t sampleCount() const override { return m_samples; }
  int64_t batchSize() const override { return m_batch; }
  bool isRandom() const override { return true; }
  std::string description() const override { return "random (seed " + std::to_string(m_seed) + ")"; }

  Result<std::vector<NamedTensor>> batch(int64_t index) const override {
    QS_RETURN_IF_ERROR(checkBatchIndex(index, batchCount()));
    const int64_t first = index * m_batch;
    const int64_t count = std::min(m_batch, m_samples - first);
    std::vector<NamedTensor> feeds;
    for (size_t k = 0; k < m_inputs.size(); ++k) {
      const InputSpec& in = m_inputs[k];
      const Shape& sample = m_sampleShapes[k];
      // A scalar input has no batch dim: it gets one value per batch.
      Shape shape;
      if (in.rank() > 0) shape.push_back(count);
      shape.insert(shape.end(), sample.begin(), sample.end());
      const DType dt = in.dtype == DType::Undefined ? DType::Float : in.dtype;
      Tensor t = Tensor::zeros(dt, shape);
      if (isFloating(dt)) {
        const int64_t perSample = numelOf(sample);
        const int64_t samplesHere = in.rank() > 0 ? count : 1;
        for (int64_t s = 0; s < samplesHere; ++s) {
          // Seeded per (seed, input, sample): the values do not depend on the batch size.
          uint64_t state = m_seed * 0xd1b54a32d192ed03ull + (uint64_t)(first + s + 1) * 0x8cb92ba72f3d8dd7ull +
                           (uint64_t)(k + 1) * 0xabc98388fb8fac03ull;
          for (int64_t i = 0; i < perSample; ++i) {
            const float u = (float)(splitmix64(state) >> 40) * (1.0f / 16777216.0f);  // [0,1), 24 bits
            const int64_t at = s * perSample + i;
            if (dt == DType::Float) t.data<float>()[at] = u;
            else if (dt == DType::Double) t.data<double>()[at] = u;
            else t.data<uint16_t>()[at] = floatToHalf(u);
          }
        }
      }
      feeds.push_back({in.name, std::move(t)});
    }
    return feeds;
  }

 private:
  std::vector<InputSpec> m_inputs;
  std::vector<Shape> m_sampleShapes;  // dims after the batch dim
  int64_t m_samples;
  int64_t m_batch;
  uint64_t m_seed;
};

// The inputs with the shapes given for them (--shape): each must keep the declared rank and fixed dims.
Result<std::vector<InputSpec>> withGivenShapes(std::vector<InputSpec> inputs, const std::map<std::string, Shape>& given) {
  for (const auto& entry : given) {
    const std::string& name = entry.first;  // not a structured binding: clang 14 cannot capture those
    const Shape& shape = entry.second;
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](const InputSpec& in) { return in.name == name; });
    if (it == inputs.end()) return invalidArgument("--shape " + inQuotes(name) + ": the model has no input of that name");
    if (it->shape && it->rank() != (int)shape.size()) {
      return invalidArgument("--shape " + inQuotes(name) + "=" + shapeToString(shape) + ": the input is declared " +
                             declaredShape(*it) + ", of rank " + std::to_string(it->rank()));
    }
    std::vector<Dim> dims;
    for (size_t k = 0; k < shape.size(); ++k) {
      if (shape[k] <= 0) return invalidArgument("--shape " + inQuotes(name) + ": dims must be positive");
      if (it->shape && it->dim((int)k).isFixed() && it->dim((int)k).value != shape[k]) {
        return invalidArgument("--shape " + inQuotes(name) + "=" + shapeToString(shape) + ": dim " + std::to_string(k) +
                               " is fixed at " + std::to_string(it->dim((int)k).value) + " in " + declaredShape(*it));
      }
      dims.push_back(Dim{shape[k], {}});
    }
    // The batch of random inputs is allocated whole: refuse what could not be (2^34 elements, 64 GiB).
    if (checkedNumel(shape, int64_t(1) << 34) < 0) {
      return Status(StatusCode::ResourceLimit, "--shape " + inQuotes(name) + "=" + shapeToString(shape) +
                                                   ": more than 2^34 elements per batch");
    }
    it->shape = std::move(dims);
  }
  return inputs;
}

Result<std::unique_ptr<CalibrationData>> openRandom(const std::vector<InputSpec>& declared, const CalibrationDataOptions& options) {
  auto given = withGivenShapes(declared, options.shapes);
  if (!given) return given.status();
  const std::vector<InputSpec>& inputs = *given;
  std::vector<std::string> warnings{kRandomCalibrationWarning};
  std::vector<Shape> sampleShapes;
  for (const auto& in : inputs) {
    if (!in.shape) {
      return invalidArgument("input " + inQuotes(in.name) +
                             " has an unknown shape: random calibration inputs need a fixed shape; give calibration data");
    }
    Shape sample;
    for (int k = 1; k < in.rank(); ++k) {
      if (!in.dim(k).isFixed()) {
        return invalidArgument("input " + inQuotes(in.name) + ": dim " + std::to_string(k) + " of " + declaredShape(in) +
                               " is symbolic: random calibration inputs need a fixed shape; give calibration data or --shape " +
                               in.name + "=" + suggestedShape(in));
      }
      sample.push_back(in.dim(k).value);
    }
    if (in.dtype != DType::Undefined && !isFloating(in.dtype)) {
      if (dtypeSize(in.dtype) == 0 || !dtypeSupported(in.dtype)) {
        return invalidArgument("input " + inQuotes(in.name) + " of type " + typeName(in.dtype) + " cannot be given random values");
      }
      warnings.push_back("input " + inQuotes(in.name) + " (" + dtypeName(in.dtype) + "): random mode feeds zeros");
    }
    sampleShapes.push_back(std::move(sample));
  }
  auto plan = planBatch(inputs, options.batchSize);
  if (!plan) return plan.status();
  const int64_t wanted = options.maxSamples > 0 ? options.maxSamples : plan->size;
  auto n = usableSamples(wanted, options.maxSamples, plan.value(), "random calibration data", &warnings);
  if (!n) return n.status();
  return std::unique_ptr<CalibrationData>(
      std::make_unique<RandomData>(inputs, std::move(sampleShapes), n.value(), plan->size, options.seed, std::move(warnings)));
}

}  // namespace

Status parseShapeSpec(const std::string& spec, std::string& name, Shape& shape) {
  const auto eq = spec.rfind('=');
  if (eq == std::string::npos || eq == 0) return invalidArgument("--shape '" + spec + "': expected NAME=1x3x640x640");
  name = spec.substr(0, eq);
  shape.clear();
  const std::string dims = spec.substr(eq + 1);
  size_t pos = 0;
  for (;;) {
    const size_t x = dims.find('x', pos);
    const std::string part = dims.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || errno == ERANGE || v <= 0) {
      return invalidArgument("--shape '" + spec + "': '" + part + "' is not a positive number");
    }
    shape.push_back(v);
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  return Status::ok();
}

Result<std::unique_ptr<CalibrationData>> CalibrationData::open(const Model& model, const CalibrationDataOptions& options) {
  std::vector<InputSpec> inputs;
  for (ValueId id : model.graph.inputs) {
    const Value& v = model.graph.value(id);
    inputs.push_back(InputSpec{v.name, v.dtype, v.shape});
  }
  if (inputs.empty()) return invalidArgument("the model has no graph inputs: there is nothing to feed calibration data to");
  if (options.path.empty()) return openRandom(inputs, options);

  const std::string& path = options.path;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return ioError(path + ": no such file or folder");
  if (fs::is_directory(st)) return openImageFolder(inputs, options);
  const std::string ext = lowerExtension(path);
  if (ext == ".npz") return openArrays(inputs, options, true);
  if (ext == ".npy") return openArrays(inputs, options, false);
  return invalidArgument(path + ": calibration data must be an .npz, an .npy or a folder of images (got '" + ext + "')");
}

namespace {

class BatchRange final : public CalibrationData {
 public:
  BatchRange(std::shared_ptr<const CalibrationData> data, int64_t first, int64_t count)
      : m_data(std::move(data)), m_first(first), m_count(count) {}
  // Whole batches but possibly the data's last, smaller one, which is then this range's last too.
  int64_t sampleCount() const override {
    const int64_t bs = m_data->batchSize();
    return std::min(m_count * bs, m_data->sampleCount() - m_first * bs);
  }
  int64_t batchSize() const override { return m_data->batchSize(); }
  Result<std::vector<NamedTensor>> batch(int64_t index) const override {
    if (index < 0 || index >= m_count)
      return invalidArgument(description() + ": batch " + std::to_string(index) + " out of range");
    return m_data->batch(m_first + index);
  }
  bool isRandom() const override { return m_data->isRandom(); }
  std::string description() const override {
    return m_data->description() + " (batches " + std::to_string(m_first) + ".." + std::to_string(m_first + m_count - 1) +
           ")";
  }

 private:
  std::shared_ptr<const CalibrationData> m_data;
  int64_t m_first, m_count;
};

}  // namespace

std::shared_ptr<const CalibrationData> selectBatches(std::shared_ptr<const CalibrationData> data, int64_t first,
                                                     int64_t count) {
  if (!data || first < 0 || count <= 0 || first + count > data->batchCount()) return nullptr;
  return std::make_shared<BatchRange>(std::move(data), first, count);
}

}  // namespace qs
