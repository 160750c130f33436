// A model as llama.cpp's converter writes a Qwen3.5/3.6 MoE GGUF (architecture qwen35moe): its
// tensor names and conventions (value heads in its order, A as −exp(A_log), norms as effective
// scales 1 + w except the DeltaNet output norm, experts fused per layer), its metadata, and the
// tokenizer as tokenizer.ggml.* — for `orchid convert`, the CPU peer benchmark and tests.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "orchid/model/config.h"
#include "orchid/model/gguf.h"
#include "orchid/model/gguf_writer.h"
#include "orchid/model/weights.h"

namespace orchid {

struct GgufExportTypes {
  // Matrices whose rows fill blocks of 32 (the rest, and every vector, are F32).
  uint32_t matrices = uint32_t(GgmlType::F32);
  // The router (ffn_gate_inp): F32 as llama.cpp's quantizer leaves it, or Q8_0.
  uint32_t router = uint32_t(GgmlType::F32);
  // llama.cpp's Q4_K_M mix over the quantized matrices (then `matrices` is ignored): Q4_K, with
  // Q6_K for output.weight and for attn_v / ffn_down tensors at llama.cpp's "more bits" places
  // (the first and last eighth of them, every third between), Q5_K for attn_qkv; a matrix whose
  // rows do not fill 256-value blocks takes Q8_0 (llama.cpp falls back likewise).
  bool q4_k_m = false;
};

// The converter's `general.*` and `qwen35moe.*` keys for c (mtp MTP layers counted in
// block_count; mrope sections padded to 4).
std::map<std::string, GgufValue> qwen35moe_metadata(const ModelConfig& c, int mtp = 0);

// tokenizer.json text as the converter's tokenizer.ggml.* keys: tokens in id order with their
// types (1 normal, 3 control = special added token, 4 user-defined = other added token, 5 unused
// = "[PAD{id}]" filling ids up to n_vocab), merges as "a b", `pre` the pre-tokenizer name, and
// eos = <|im_end|> where the vocabulary has it.
Status add_tokenizer_metadata(std::map<std::string, GgufValue>& md, const std::string& json_text,
                              const std::string& pre, int64_t n_vocab);

// w's tensors, each row produced on demand from w (which must outlive the result).
std::vector<GgufTensorSource> qwen35moe_tensors(const ModelConfig& c, const Weights& w,
                                                const GgufExportTypes& types = {});

// Sets the Q4_K_M mix (GgufExportTypes::q4_k_m) on a file's tensors, in file order; vectors and
// F32 matrices (rows not of 32s) stay as they are, the router takes `router`.
void apply_q4_k_m(std::vector<GgufTensorSource>& tensors, uint32_t router);

struct GgufExportOptions {
  GgufExportTypes types;
  std::string tokenizer_json;  // tokenizer.json text ("": no tokenizer in the file)
  std::string chat_template;   // "": none
  std::function<void(uint64_t done, uint64_t total)> progress;  // write_gguf's
};

// m as one GGUF file at `path` (`orchid convert`, `orchid synth --layout gguf-*`): the metadata
// above, general.name = the file's stem, the tokenizer padded to the model's vocabulary.
Status export_gguf(const ModelConfig& c, const Weights& w, const std::string& path,
                   const GgufExportOptions& o);

}  // namespace orchid
