// Comparing node outputs with the float reference while they are in cache: the observer of the
// quantized passes (CompareOutputs), the hook through which a taken-over node compares its own
// output (NodeCompare), and the elementwise chains run over the quantized table and compared in
// the same pass.
#pragma once

#include <vector>

#include "core/analysis/agreement.h"
#include "core/analysis/node_paths.h"
#include "core/exec/executor.h"
#include "core/numeric/metrics.h"

namespace qs {

/// Where a take-over (FakeQuantTransform::runNode) may compare a node's output with its float reference
/// itself, while the output is in cache: reference() is the float output to compare with, or
/// null when the node is not to be compared in this pass; compared() records the sums.
class NodeCompare {
 public:
  virtual ~NodeCompare() = default;
  virtual const Tensor* reference(NodeId node) = 0;
  virtual void compared(NodeId node, const ErrorAccumulator& sums) = 0;
};

/// Compares node outputs with the float table as they are produced (while they are in cache: a
/// separate pass over whole tables is bound by memory bandwidth), for the nodes of `nodes` or all.
/// A node that applies a constant a x + b to one activation (affine[node].input >= 0) whose
/// producer was compared in this pass gets its sums from the producer's (ErrorAccumulator::affine)
/// without reading the outputs: the same rule in every pass (analysis, toggles), so the figures
/// agree between them.
class CompareOutputs : public ExecutionObserver, public NodeCompare {
 public:
  CompareOutputs(const Graph& g, const std::vector<Tensor>& ref, const std::vector<NodeId>* nodes,
                 std::vector<ErrorAccumulator>& acc, int threads, const std::vector<AffineOp>& affine);
  void onNodeOutput(NodeId node, size_t output, ValueId id, const Tensor& t) override;
  /// The sums of an a x + b op from its producer's, when that was compared in this pass and the
  /// output has `elements` values as its input does; false otherwise (nothing changed).
  /// `source`: the producer, where the caller knows its output has `elements` values (a chain's
  /// float outputs that runChainPair does not store).
  bool derive(NodeId node, int64_t elements, NodeId source = -1);
  /// The node whose sums an a x + b op's derive from (its input's producer, whose first output
  /// that input is, with `elements` values as the op's output has), or -1.
  NodeId affineProducer(NodeId node, int64_t elements) const;
  /// The producer of an a x + b op's input whose first output that input is, or -1, whatever its
  /// float entry holds (runChainPair: a chain's float outputs are made in the same pass).
  NodeId affineSource(NodeId node) const;
  const Tensor* reference(NodeId node) override;
  void compared(NodeId node, const ErrorAccumulator& sums) override;
  bool done(NodeId node) const { return m_done[(size_t)node] != 0; }
  /// Wanted nodes that did not run, in the order of `nodes`.
  std::vector<NodeId> remaining(const std::vector<NodeId>& nodes) const;

 private:
  const Graph& m_g;
  const std::vector<Tensor>& m_ref;
  std::vector<char> m_wanted, m_done;
  std::vector<ErrorAccumulator>& m_acc;
  int m_threads;
  const std::vector<AffineOp>& m_affine;
};

/// Each graph output of `got` compared with `ref`'s into acc[output] (where both have values);
/// with `agreement`, also its agreement (agreement.h) as kinds[output] (Auto: the rule) into
/// (*agreement)[output].
void accumulateOutputs(const Graph& g, const std::vector<Tensor>& ref, const std::vector<Tensor>& got,
                       std::vector<ErrorAccumulator>& acc, const std::vector<OutputKind>* kinds = nullptr,
                       std::vector<AgreementAccumulator>* agreement = nullptr);
/// One graph output's agreement: `ref` against `got` as `requested` (Auto: the rule) into `acc`.
void accumulateAgreement(const Graph& g, size_t output, const Tensor& ref, const Tensor& got,
                         const std::vector<OutputKind>* kinds, AgreementAccumulator& acc);

/// The ops of `ch` over the quantized table in one pass (runElementwiseChain: the same output
/// bits as op by op). Outputs are stored as op by op would: those read outside the chain, or
/// all with `storeAll` (a batch kept for toggles). The comparisons give the same sums as
/// `compare` would: an op a x + b whose producer is compared gets its sums derived, the others
/// are compared in the pass. False (nothing stored, nothing compared) where the input is not
/// float or a reference is not of the input's shape: the caller then runs the ops one by one.
bool runChain(const Graph& g, const ElementwiseChain& ch, std::vector<Tensor>& quantTable,
              const std::vector<Tensor>& floatTable, CompareOutputs& compare, bool storeAll);

/// out = a op b (ChainOp::Kind `kind`; float a and b broadcast as numpy does, each to the output
/// shape as the same shape or one block of its dims, such as [N, C, 1, 1] against [N, C, H, W]),
/// the op's kernel's bits, compared with `ref` in pieces while they are in cache: the sums of
/// ErrorAccumulator::add(ref, out, threads) into `sums`. False (nothing written) where an input
/// is not float, the shapes do not broadcast so, or `ref` has another element count.
bool runComparedBinary(int kind, const Tensor& a, const Tensor& b, const Tensor& ref, Tensor& out,
                       ErrorAccumulator& sums, int threads);

/// The ops of `ch` over the float table in one pass (runElementwiseChain), every output stored:
/// the same bits as running them one by one, without reading each op's input back from memory.
/// False (nothing stored) where the input is not float or a constant operand has more dims than
/// the input (its broadcast would change the output's shape): the caller then runs the ops one by one.
bool runFloatChain(const Graph& g, const ElementwiseChain& ch, std::vector<Tensor>& floatTable);

/// runFloatChain and runChain in one pass (runElementwiseChainPair): each piece over the float
/// table, then over the quantized table, each op's comparison made with the float piece just
/// computed (the float output never read back). Float outputs are stored where storeFloat[i]
/// (per op: the float table's entry is read later), quantized ones as runChain stores them. The
/// same bits and sums as runFloatChain then runChain; false (nothing stored, nothing compared)
/// where either of them would refuse, or the two inputs differ in shape.
bool runChainPair(const Graph& g, const ElementwiseChain& ch, std::vector<Tensor>& floatTable,
                  std::vector<Tensor>& quantTable, CompareOutputs& compare, bool storeAll,
                  const std::vector<char>& storeFloat);

}  // namespace qs
