// Built-in configs for `orchid synth` and tests, and ModelConfig → config.json text.
#include <nlohmann/json.hpp>

#include "orchid/model/config.h"

namespace orchid {
namespace {

// Layer i is full attention when (i + 1) % interval == 0, the family's default pattern.
std::vector<LayerKind> interval_layers(int n_layer, int interval) {
  std::vector<LayerKind> kinds;
  for (int i = 0; i < n_layer; ++i)
    kinds.push_back((i + 1) % interval == 0 ? LayerKind::full_attention
                                            : LayerKind::linear_attention);
  return kinds;
}

}  // namespace

std::optional<ModelConfig> builtin_config(std::string_view name) {
  ModelConfig c;
  c.model_type = "qwen3_5_moe";
  c.nested = true;
  if (name == "tiny") {
    // Same ratios as the real model at toy size (GQA 8, Hv = 2 Hk, 1/4 rotary).
    c.n_vocab = 512;
    c.n_embd = 64;
    c.n_layer = 4;
    c.n_head = 8;
    c.n_head_kv = 1;
    c.head_dim = 32;
    c.n_rot = 8;
    c.rope_theta = 1e7;
    c.mrope_section = {2, 1, 1};
    c.max_position_embeddings = 4096;
    c.lin_n_head_k = 2;
    c.lin_n_head_v = 4;
    c.lin_head_dim_k = 32;
    c.lin_head_dim_v = 32;
    c.lin_conv_kernel = 4;
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.n_ff_exp = 64;
    c.n_ff_shexp = 64;
  } else if (name == "qwen3.6-35b-a3b") {
    c.n_vocab = 248320;
    c.n_embd = 2048;
    c.n_layer = 40;
    c.n_head = 16;
    c.n_head_kv = 2;
    c.head_dim = 256;
    c.n_rot = 64;
    c.rope_theta = 1e7;
    c.mrope_section = {11, 11, 10};
    c.max_position_embeddings = 262144;
    c.lin_n_head_k = 16;
    c.lin_n_head_v = 32;
    c.lin_head_dim_k = 128;
    c.lin_head_dim_v = 128;
    c.lin_conv_kernel = 4;
    c.n_expert = 256;
    c.n_expert_used = 8;
    c.n_ff_exp = 512;
    c.n_ff_shexp = 512;
  } else {
    return std::nullopt;
  }
  c.layer_types = interval_layers(c.n_layer, 4);
  return c;
}

std::string config_to_json(const ModelConfig& c) {
  using json = nlohmann::json;
  json layer_types = json::array();
  for (LayerKind k : c.layer_types)
    layer_types.push_back(k == LayerKind::full_attention ? "full_attention" : "linear_attention");
  json rope = {{"rope_type", "default"},
               {"rope_theta", c.rope_theta},
               {"partial_rotary_factor", double(c.n_rot) / c.head_dim}};
  if (!c.mrope_section.empty()) {
    rope["mrope_section"] = c.mrope_section;
    rope["mrope_interleaved"] = true;
  }
  json text = {{"model_type", "qwen3_5_moe_text"},
               {"vocab_size", c.n_vocab},
               {"hidden_size", c.n_embd},
               {"num_hidden_layers", c.n_layer},
               {"layer_types", layer_types},
               {"num_attention_heads", c.n_head},
               {"num_key_value_heads", c.n_head_kv},
               {"head_dim", c.head_dim},
               {"rope_parameters", rope},
               {"max_position_embeddings", c.max_position_embeddings},
               {"linear_num_key_heads", c.lin_n_head_k},
               {"linear_num_value_heads", c.lin_n_head_v},
               {"linear_key_head_dim", c.lin_head_dim_k},
               {"linear_value_head_dim", c.lin_head_dim_v},
               {"linear_conv_kernel_dim", c.lin_conv_kernel},
               {"num_experts", c.n_expert},
               {"num_experts_per_tok", c.n_expert_used},
               {"moe_intermediate_size", c.n_ff_exp},
               {"shared_expert_intermediate_size", c.n_ff_shexp},
               {"rms_norm_eps", c.rms_norm_eps},
               {"hidden_act", "silu"},
               {"attention_bias", false},
               {"tie_word_embeddings", c.tie_word_embeddings},
               {"dtype", "bfloat16"}};
  json root = {{"model_type", "qwen3_5_moe"},
               {"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
               {"tie_word_embeddings", c.tie_word_embeddings},
               {"text_config", text}};
  if (c.quant) {
    json q = {{"group_size", c.quant->group_size}, {"bits", c.quant->bits}, {"mode", "affine"}};
    for (const auto& [path, spec] : c.quant_overrides)
      q[path] = {{"group_size", spec.group_size}, {"bits", spec.bits}};
    root["quantization"] = q;
    root["quantization_config"] = q;
  } else if (c.fp8) {
    root["quantization_config"] = {{"quant_method", "fp8"},
                                   {"fmt", "e4m3"},
                                   {"activation_scheme", "dynamic"},
                                   {"weight_block_size", {c.fp8->block_rows, c.fp8->block_cols}},
                                   {"modules_to_not_convert", c.fp8->not_converted}};
  }
  return root.dump(2) + "\n";
}

}  // namespace orchid
