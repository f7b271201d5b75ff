// The explicit kernel table: (op type, domain, opset range) -> factory.
// Built-in kernels come from one table per kernel group (no static self-registration);
// applications add handlers for custom ops (e.g. EfficientNMS_TRT) through add().
#pragma once

#include <string>
#include <vector>

#include "core/exec/kernel.h"

namespace qs {

// Kernel groups, each defined in core/kernels/<group>_table.cpp.
std::vector<KernelEntry> nnKernels();          // Conv, ConvTranspose, Gemm, MatMul, pools, normalisations
std::vector<KernelEntry> elementwiseKernels(); // unary, binary, activations, logic, Cast, Softmax, Q/DQ
std::vector<KernelEntry> tensorKernels();      // shape and data movement ops
std::vector<KernelEntry> reduceKernels();      // Reduce*, ArgMax/ArgMin, Resize/Upsample
std::vector<KernelEntry> recurrentKernels();   // LSTM, GRU, RNN
std::vector<KernelEntry> visionKernels();      // detection and vision: NonMaxSuppression, RoiAlign, GridSample, ...
std::vector<KernelEntry> controlFlowKernels(); // If, Loop, Scan (core/kernels/control_flow.cpp)
std::vector<KernelEntry> signalKernels();      // DFT, STFT, window functions, MelWeightMatrix and other inference ops
std::vector<KernelEntry> contribKernels();     // com.microsoft ops of LLM graphs (core/kernels/contrib_llm.cpp)

class KernelRegistry {
 public:
  /// The registry holding every built-in kernel.
  static KernelRegistry builtin();

  /// Adds (or, for the same op/domain/range, overrides) an entry. Custom ops use this.
  void add(KernelEntry entry);
  /// The entry serving `opType` in `domain` at `opset`, or nullptr.
  const KernelEntry* find(const std::string& opType, const std::string& domain, int64_t opset) const;
  /// True when some entry serves the op at any opset.
  bool knowsOp(const std::string& opType, const std::string& domain) const;
  const std::vector<KernelEntry>& entries() const { return m_entries; }

 private:
  std::vector<KernelEntry> m_entries;
};

}  // namespace qs
