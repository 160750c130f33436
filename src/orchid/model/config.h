// Model hyper-parameters read from a checkpoint's config.json (nested `qwen3_5_moe` with
// `text_config`, or the flat `qwen3_5_moe_text` form). Names follow the HF keys in spirit:
// n_embd = hidden_size, n_head = num_attention_heads, n_expert = num_experts, ...
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "orchid/util/status.h"

namespace orchid {

enum class LayerKind { linear_attention, full_attention };

// MLX affine quantization of one module: w = scale * q + bias, q in [0, 2^bits).
struct QuantSpec {
  int bits = 4;
  int group_size = 64;
};

// Block-wise FP8 (Qwen's and DeepSeek's "quant_method": "fp8" quantization_config): each
// quantized weight is float8 e4m3 with a `<name>_scale_inv` of one scale per block_rows ×
// block_cols block ([ceil(out / block_rows), ceil(in / block_cols)]); the weight is code × scale.
struct Fp8Spec {
  int block_rows = 128;  // weight_block_size[0]: output rows a scale covers
  int block_cols = 128;  // weight_block_size[1]: input columns a scale covers
  std::vector<std::string> not_converted;  // modules_to_not_convert (informational)
};

struct ModelConfig {
  std::string model_type;  // "qwen3_5_moe" (nested) or "qwen3_5_moe_text" (flat)
  bool nested = false;     // config.json had a text_config

  int64_t n_vocab = 0;  // vocab_size: rows of embed_tokens and lm_head
  int n_embd = 0;       // hidden_size
  int n_layer = 0;      // num_hidden_layers
  std::vector<LayerKind> layer_types;  // [n_layer]

  // Gated attention (full-attention layers).
  int n_head = 0;     // num_attention_heads (query heads)
  int n_head_kv = 0;  // num_key_value_heads
  int head_dim = 0;
  int n_rot = 0;  // rotated dims per head = head_dim * partial_rotary_factor (even)
  double rope_theta = 10000.0;
  std::vector<int> mrope_section;  // informational: text positions make it plain 1-D RoPE
  int64_t max_position_embeddings = 0;

  // Gated DeltaNet (linear-attention layers).
  int lin_n_head_k = 0;    // linear_num_key_heads
  int lin_n_head_v = 0;    // linear_num_value_heads (multiple of lin_n_head_k)
  int lin_head_dim_k = 0;  // linear_key_head_dim
  int lin_head_dim_v = 0;  // linear_value_head_dim
  int lin_conv_kernel = 0;  // linear_conv_kernel_dim

  // Sparse MoE (every layer).
  int n_expert = 0;       // num_experts
  int n_expert_used = 0;  // num_experts_per_tok
  int n_ff_exp = 0;       // moe_intermediate_size
  int n_ff_shexp = 0;     // shared_expert_intermediate_size

  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;

  // MLX "quantization": default spec plus per-module-path overrides (path without ".weight").
  std::optional<QuantSpec> quant;
  std::map<std::string, QuantSpec, std::less<>> quant_overrides;
  // Or block-wise FP8 weights (quantization_config quant_method "fp8").
  std::optional<Fp8Spec> fp8;

  int lin_key_dim() const { return lin_n_head_k * lin_head_dim_k; }
  int lin_value_dim() const { return lin_n_head_v * lin_head_dim_v; }
  int lin_conv_dim() const { return 2 * lin_key_dim() + lin_value_dim(); }
  int n_full_layers() const;
  // Quantization of the module at `path` (e.g. "language_model.model.layers.0.mlp.gate"),
  // or nullopt when the config has no quantization section.
  std::optional<QuantSpec> quant_for(std::string_view path) const;
};

// Parses config.json text; `file_name` is used in error messages.
Expected<ModelConfig> parse_config(std::string_view json_text, std::string_view file_name);
// The relations between the fields every source of a config must satisfy (heads divide, top-k
// within the experts, a supported conv kernel); errors name `file`.
Status validate_config(const ModelConfig& c, std::string_view file);
// Reads DIR/config.json.
Expected<ModelConfig> load_config(const std::string& dir);

// Named small configs for `orchid synth` and tests ("tiny", "qwen3.6-35b-a3b").
std::optional<ModelConfig> builtin_config(std::string_view name);
// config.json text (nested form) for a config; with quantization fields if cfg.quant or cfg.fp8
// is set.
std::string config_to_json(const ModelConfig& cfg);

}  // namespace orchid
