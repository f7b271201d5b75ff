// Kernel table of the 'nn' group: one row per (op, opset range).
#include "core/exec/kernel_registry.h"
#include "core/kernels/blocked_layout.h"
#include "core/kernels/channel_shuffle.h"
#include "core/kernels/conv.h"
#include "core/kernels/conv_transpose.h"
#include "core/kernels/einsum.h"
#include "core/kernels/fused_matmul.h"
#include "core/kernels/gemm_op.h"
#include "core/kernels/normalization.h"
#include "core/kernels/pool.h"
#include "core/kernels/residual_add.h"
#include "core/kernels/upsample_concat.h"

namespace qs {

std::vector<KernelEntry> nnKernels() {
  std::vector<KernelEntry> rows = {
      {"Conv", "", 1, 21, createConv},
      // Made by the executor's graph rewrites (Conv + folded BatchNormalization + activations).
      {kFusedConvOp, kFusedDomain, 1, 1, createConv},
      {"ConvTranspose", "", 1, 21, createConvTranspose},
      // Made by the graph rewrites (ConvTranspose + folded bias Add / BatchNormalization + activations).
      {kFusedConvTransposeOp, kFusedDomain, 1, 1, createConvTranspose},
      {"Gemm", "", 1, 21, createGemm},
      {"MatMul", "", 1, 21, createMatMul},
      // Made by the graph rewrites: MatMul with folded Transposes, scale, bias and Gelu.
      {kFusedMatMulOp, kFusedDomain, 1, 1, createFusedMatMul},
      {"Einsum", "", 12, 21, createEinsum},
      {"BatchNormalization", "", 1, 21, createBatchNormalization},
      {"InstanceNormalization", "", 1, 21, createInstanceNormalization},
      {"LayerNormalization", "", 17, 21, createLayerNormalization},
      // Made by the graph rewrites from the ReduceMean/Sub/Pow/Sqrt/Div form of older exporters.
      {"LayerNormalization", kFusedDomain, 1, 1, createLayerNormalization},
      // Made by the graph rewrites: a residual Add and the LayerNormalization reading it.
      {kSkipLayerNormOp, kFusedDomain, 1, 1, createSkipLayerNormalization},
      {"LpNormalization", "", 1, 21, createLpNormalization},
      {"MaxPool", "", 1, 21, createMaxPool},
      {"AveragePool", "", 1, 21, createAveragePool},
      {"GlobalAveragePool", "", 1, 21, createGlobalAveragePool},
      {"GlobalMaxPool", "", 1, 21, createGlobalMaxPool},
      // Made by the graph rewrites: squeeze-excitation residual and upsampled FPN Adds (det's neck).
      {kResidualAddOp, kFusedDomain, 1, 1, createResidualAdd},
      // Made by the graph rewrites: a Concat of nearest-upsampled maps (det's neck).
      {kUpsampleConcatOp, kFusedDomain, 1, 1, createUpsampleConcat},
  };
  // Made by the blocked-region rewrite (core/exec/blocked_rewrite.h).
  for (KernelEntry& e : blockedLayoutKernels()) rows.push_back(std::move(e));
  // Made by the graph rewrites from ShuffleNet's Concat-Reshape-Transpose-Reshape(-Slice) chains.
  for (KernelEntry& e : channelShuffleKernels()) rows.push_back(std::move(e));
  return rows;
}

}  // namespace qs
