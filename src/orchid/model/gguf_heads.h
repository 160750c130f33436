// llama.cpp's converter stores the Gated DeltaNet's value heads in another order when there are
// more value heads than key heads (docs/gguf.md): viewing the head axis as [K, R] (K key heads, R =
// V / K value heads each), it writes [R, K] — stored head r·K + k is Hugging Face head k·R + r.
// Applied to the V rows of attn_qkv, the rows of attn_gate, ssm_alpha, ssm_beta, ssm_a,
// ssm_dt.bias, the V channels of ssm_conv1d and the input columns of ssm_out. Undoing it is a
// permutation of equal blocks of bytes (a head's rows, whole quantization blocks each; or a
// head's columns of a dequantized row), so one function serves every tensor and type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "orchid/util/status.h"

namespace orchid {

// out = in with its K·R blocks of head_bytes bytes put back in Hugging Face order: out block
// k·R + r = in block r·K + k. in and out must not overlap and must both hold K·R·head_bytes
// bytes (an error otherwise).
Status undo_v_head_reorder(std::span<const uint8_t> in, std::span<uint8_t> out, int k_heads,
                           int v_per_k, size_t head_bytes);

}  // namespace orchid
