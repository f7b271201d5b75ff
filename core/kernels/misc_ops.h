// Tensor and normalisation ops of the 'vision' group (issue #19):
//   Trilu 14..21 (any dtype), EyeLike 9..21, Compress 9..21 (any dtype), ReverseSequence 10..21
//   (any dtype), Unique 11..21 (numeric and bool), MaxUnpool 9..21 (any float type, int64 indices),
//   LRN 1..21 (float/double), MeanVarianceNormalization 9..21 (float/double).
#pragma once

#include <memory>

#include "core/exec/kernel.h"

namespace qs {

Result<std::unique_ptr<Kernel>> createTrilu(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createEyeLike(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createCompress(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createReverseSequence(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createUnique(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createMaxUnpool(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createLrn(const KernelInit& init);
Result<std::unique_ptr<Kernel>> createMeanVarianceNormalization(const KernelInit& init);

}  // namespace qs
