// A qwen35moe GGUF's tensors as orchid's Weights (issue 34), undoing what llama.cpp's converter
// did to them (docs/gguf.md): the value-head reorder of the Gated DeltaNet tensors, A stored as
// −exp(A_log). Norms need nothing: the file keeps 1 + w, orchid's effective scale, and the
// DeltaNet's plain ssm_norm as it is.
//
// Matrices: F32 / F16 / BF16 tensors are views of the file's bytes (copied only where heads are
// put back in order); Q4_0, Q4_1, Q4_K (4-bit codes) and Q5_K, Q6_K, Q8_0 (8-bit codes) rows are
// re-laid into the affine format (model/gguf_affine: fp32 scale and bias per 32 elements, 16 for
// Q6_K) without re-quantization; other types with a dequantizer (Q5_0, Q5_1) become fp32. The
// expert stacks {n_embd, n_ff, E} are sliced into per-expert views of one converted stack.
#pragma once

#include <cstdint>
#include <deque>
#include <string_view>
#include <vector>

#include "orchid/model/config.h"
#include "orchid/model/gguf.h"
#include "orchid/model/weights.h"
#include "orchid/util/status.h"

namespace orchid {

// Every tensor config `c` needs (c from gguf_config of the same file), its type and dims
// checked; errors name the tensor and `file`. Views point into f's tensor bytes (the caller keeps
// the file mapped); converted copies go to `arena`.
Expected<Weights> gguf_weights(const GgufFile& f, const ModelConfig& c, std::string_view file,
                               std::deque<std::vector<uint8_t>>& arena);

}  // namespace orchid
