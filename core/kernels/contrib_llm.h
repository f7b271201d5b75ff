// ONNX Runtime contrib ops (domain com.microsoft, opset 1) that LLM exports use, FP32:
//   SimplifiedLayerNormalization (RMSNorm; also served in the default domain, where ORT puts it),
//   SkipSimplifiedLayerNormalization, RotaryEmbedding, MultiHeadAttention, GroupQueryAttention and
//   MatMulNBits (4- and 8-bit block-quantized weights, dequantized once at load when constant).
// Attention runs prompt processing only: past_key/past_value must be absent or empty (no KV cache);
// present_key/present_value hold the new keys and values in BNSH, as ONNX Runtime returns them.
#pragma once

#include <memory>
#include <vector>

#include "core/exec/kernel.h"

namespace qs {

inline constexpr const char* kMicrosoftDomain = "com.microsoft";

/// SimplifiedLayerNormalization: X, scale -> Y, optional inv_std_var. Attributes axis (-1),
/// epsilon (1e-5), stash_type (1).
Result<std::unique_ptr<Kernel>> createSimplifiedLayerNorm(const KernelInit& init);
/// SkipSimplifiedLayerNormalization: input, skip, gamma, optional bias -> output, mean (zeros),
/// inv_std_var, input_skip_bias_sum. Attribute epsilon.
Result<std::unique_ptr<Kernel>> createSkipSimplifiedLayerNorm(const KernelInit& init);
/// RotaryEmbedding: input [B,S,H] or [B,N,S,h], position_ids [B,S] or [1] (offset), cos/sin caches
/// [max_pos, rotary_dim/2]. Attributes interleaved, num_heads, rotary_embedding_dim, scale.
Result<std::unique_ptr<Kernel>> createRotaryEmbedding(const KernelInit& init);
/// MultiHeadAttention: query/key/value [B,S|L,D], optional bias, key_padding_mask ([B] lengths or
/// [B,L] 0/1), attention_bias [B|1,N|1,S,L]. Attributes num_heads, scale, unidirectional,
/// mask_filter_value.
Result<std::unique_ptr<Kernel>> createMultiHeadAttention(const KernelInit& init);
/// GroupQueryAttention (prompt, no past): query (or packed QKV), key, value, seqlens_k,
/// total_sequence_length, optional cos/sin caches. Attributes num_heads, kv_num_heads, scale,
/// local_window_size, do_rotary, rotary_interleaved, softcap.
Result<std::unique_ptr<Kernel>> createGroupQueryAttention(const KernelInit& init);
/// MatMulNBits: A [..., K] float, B uint8 [N, k_blocks, blob_size], scales [N*k_blocks], optional
/// zero_points (packed uint8 or float), bias [N]. Attributes K, N, bits (4 or 8), block_size.
Result<std::unique_ptr<Kernel>> createMatMulNBits(const KernelInit& init);

/// The dequantized weight W [N, K] of MatMulNBits: W[n,k] = (q - zero point) * scale of k's block.
/// Checks every shape against K, N, bits and block_size; the error names the mismatch.
Result<std::vector<float>> dequantizeNBits(const Tensor& B, const Tensor& scales, const Tensor* zeroPoints, int64_t K,
                                           int64_t N, int64_t bits, int64_t blockSize);

}  // namespace qs
