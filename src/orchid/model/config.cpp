// config.json → ModelConfig, with a clear error for every missing or unsupported value.
#include "orchid/model/config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace orchid {
namespace {

using json = nlohmann::json;

// Reads fields of one JSON object, remembering the first error.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string_view file) : obj_(obj), file_(file) {}

  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) {
    const json* v = find(key);
    if (!v) return missing(key, fallback);
    if (!v->is_number_integer()) return fail(key, "an integer", *v), 0;
    return v->get<int64_t>();
  }
  int64_t positive(const char* key, std::optional<int64_t> fallback = std::nullopt) {
    int64_t n = integer(key, fallback);
    if (ok() && (n <= 0 || n > std::numeric_limits<int32_t>::max()))
      error_ = err(file_, ": '", key, "' must be a positive integer, got ", n);
    return n;
  }
  double number(const char* key, std::optional<double> fallback = std::nullopt) {
    const json* v = find(key);
    if (!v) return fallback ? *fallback : (fail_missing(key), 0.0);
    if (!v->is_number()) return fail(key, "a number", *v), 0.0;
    return v->get<double>();
  }
  std::string string(const char* key, std::optional<std::string> fallback = std::nullopt) {
    const json* v = find(key);
    if (!v) return fallback ? *fallback : (fail_missing(key), std::string());
    if (!v->is_string()) return fail(key, "a string", *v), std::string();
    return v->get<std::string>();
  }
  bool boolean(const char* key, bool fallback) {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) return fail(key, "true or false", *v), false;
    return v->get<bool>();
  }
  const json* find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  void fail(const char* key, const char* expected, const json& got) {
    if (ok()) error_ = err(file_, ": '", key, "' must be ", expected, ", got ", got.dump());
  }
  void set_error(Error e) {
    if (ok()) error_ = std::move(e);
  }
  bool ok() const { return !error_.has_value(); }
  const Error& error() const { return *error_; }

 private:
  int64_t missing(const char* key, std::optional<int64_t> fallback) {
    if (fallback) return *fallback;
    fail_missing(key);
    return 0;
  }
  void fail_missing(const char* key) {
    if (ok()) error_ = err(file_, ": missing required field '", key, "'");
  }
  const json& obj_;
  std::string file_;
  std::optional<Error> error_;
};

Expected<QuantSpec> parse_quant_spec(const json& v, std::string_view file, std::string_view path) {
  if (!v.is_object()) return err(file, ": quantization '", path, "' must be an object");
  FieldReader r(v, file);
  QuantSpec q{int(r.integer("bits", 4)), int(r.integer("group_size", 64))};
  std::string mode = r.string("mode", "affine");
  if (!r.ok()) return r.error();
  if (mode != "affine")
    return err(file, ": quantization mode '", mode, "' at '", path,
               "' is not supported (only MLX affine)");
  if (q.bits != 4 && q.bits != 8)
    return err(file, ": quantization bits ", q.bits, " at '", path,
               "' is not supported (expected 4 or 8)");
  if (q.group_size != 32 && q.group_size != 64 && q.group_size != 128)
    return err(file, ": quantization group_size ", q.group_size, " at '", path,
               "' is not supported (expected 32, 64 or 128)");
  return q;
}

// quant_method "fp8": e4m3 weights (fmt absent, as in Qwen3.5's configs, or "e4m3"), block
// scales of weight_block_size, activations quantized by the engine at run time ("dynamic": orchid
// keeps its own activation precision; "static" would need per-tensor activation scales).
Status parse_fp8(const json& q, std::string_view file, ModelConfig& cfg) {
  FieldReader r(q, file);
  const std::string fmt = r.string("fmt", "e4m3");
  const std::string act = r.string("activation_scheme", "dynamic");
  if (!r.ok()) return r.error();
  if (fmt != "e4m3")
    return err(file, ": quantization_config fmt '", fmt, "' is not supported (expected e4m3)");
  if (act != "dynamic")
    return err(file, ": quantization_config activation_scheme '", act,
               "' is not supported (expected dynamic)");
  const json* b = r.find("weight_block_size");
  if (!b)
    return err(file, ": quantization_config of quant_method fp8 has no weight_block_size "
                     "(per-tensor FP8 scales are not supported)");
  if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() ||
      !(*b)[1].is_number_integer() || (*b)[0].get<int64_t>() <= 0 ||
      (*b)[1].get<int64_t>() <= 0 || (*b)[0].get<int64_t>() > 65536 ||
      (*b)[1].get<int64_t>() > 65536)
    return err(file, ": quantization_config weight_block_size must be two positive integers, got ",
               b->dump());
  Fp8Spec spec;
  spec.block_rows = (*b)[0].get<int>();
  spec.block_cols = (*b)[1].get<int>();
  if (const json* n = r.find("modules_to_not_convert")) {
    if (!n->is_array())
      return err(file, ": quantization_config modules_to_not_convert must be a list of names");
    for (const json& v : *n) {
      if (!v.is_string())
        return err(file, ": quantization_config modules_to_not_convert must be a list of names");
      spec.not_converted.push_back(v.get<std::string>());
    }
  }
  cfg.fp8 = std::move(spec);
  return {};
}

Status parse_quantization(const json& root, std::string_view file, ModelConfig& cfg) {
  const json* q = nullptr;
  for (const char* key : {"quantization", "quantization_config"}) {
    auto it = root.find(key);
    if (it != root.end() && !it->is_null()) {
      q = &*it;
      break;
    }
  }
  if (!q) return {};
  if (!q->is_object()) return err(file, ": 'quantization' must be an object");
  // HF quantization_config (FP8, GPTQ, AWQ, bitsandbytes, ...) names a quant_method; MLX
  // affine never does. Reading one as MLX affine would misread every weight.
  if (auto m = q->find("quant_method"); m != q->end() && !m->is_null()) {
    if (*m == "fp8") return parse_fp8(*q, file, cfg);
    return err(file, ": quantization quant_method ", m->dump(),
               " is not supported (only block-wise \"fp8\", MLX affine quantization, or none)");
  }
  auto base = parse_quant_spec(*q, file, "quantization");
  if (!base) return base.error();
  cfg.quant = *base;
  for (auto it = q->begin(); it != q->end(); ++it) {
    if (!it->is_object()) continue;  // bits / group_size / mode of the default
    if (it->contains("bits") == false && it->contains("group_size") == false) continue;
    auto spec = parse_quant_spec(*it, file, it.key());
    if (!spec) return spec.error();
    cfg.quant_overrides.emplace(it.key(), *spec);
  }
  return {};
}

Status parse_layer_types(const json* v, FieldReader& r, std::string_view file, ModelConfig& cfg) {
  if (!v) {
    // HF default rule: full attention every `full_attention_interval` layers.
    int64_t interval = r.positive("full_attention_interval", 4);
    if (!r.ok()) return r.error();
    for (int i = 0; i < cfg.n_layer; ++i)
      cfg.layer_types.push_back((i + 1) % interval == 0 ? LayerKind::full_attention
                                                        : LayerKind::linear_attention);
    return {};
  }
  if (!v->is_array() || int64_t(v->size()) != cfg.n_layer)
    return err(file, ": 'layer_types' must be an array of num_hidden_layers (", cfg.n_layer,
               ") strings");
  for (const auto& t : *v) {
    if (t == "linear_attention") {
      cfg.layer_types.push_back(LayerKind::linear_attention);
    } else if (t == "full_attention") {
      cfg.layer_types.push_back(LayerKind::full_attention);
    } else {
      return err(file, ": layer_types entry ", t.dump(),
                 " is not supported (expected \"linear_attention\" or \"full_attention\")");
    }
  }
  return {};
}

Status parse_rope(const json& text, FieldReader& r, std::string_view file, ModelConfig& cfg) {
  // Current HF form: rope_parameters {rope_type, rope_theta, partial_rotary_factor,
  // mrope_section, mrope_interleaved}; older form: the same keys at the text-config level.
  const json* rp = r.find("rope_parameters");
  if (!rp) rp = r.find("rope_scaling");
  json merged = text;
  if (rp) {
    if (!rp->is_object()) return err(file, ": 'rope_parameters' must be an object");
    for (auto it = rp->begin(); it != rp->end(); ++it) merged[it.key()] = *it;
  }
  FieldReader m(merged, file);
  std::string type = m.string("rope_type", "default");
  if (type == "default" && merged.contains("type")) type = m.string("type");
  cfg.rope_theta = m.number("rope_theta", 10000.0);
  double partial = m.number("partial_rotary_factor", 1.0);
  if (!m.ok()) return m.error();
  if (type != "default" && type != "mrope")
    return err(file, ": rope_type '", type, "' is not supported (expected \"default\")");
  if (!(cfg.rope_theta > 0)) return err(file, ": rope_theta must be positive");
  if (!(partial > 0 && partial <= 1))
    return err(file, ": partial_rotary_factor must be in (0, 1], got ", partial);
  cfg.n_rot = int(cfg.head_dim * partial);
  if (cfg.n_rot % 2 != 0)
    return err(file, ": head_dim * partial_rotary_factor = ", cfg.n_rot, " must be even");
  if (const json* ms = merged.contains("mrope_section") ? &merged["mrope_section"] : nullptr;
      ms && !ms->is_null()) {
    if (!ms->is_array()) return err(file, ": 'mrope_section' must be an array of integers");
    int sum = 0;
    for (const auto& s : *ms) {
      if (!s.is_number_integer() || s.get<int64_t>() < 0)
        return err(file, ": 'mrope_section' must be an array of non-negative integers");
      cfg.mrope_section.push_back(s.get<int>());
      sum += s.get<int>();
    }
    if (sum != cfg.n_rot / 2)
      return err(file, ": mrope_section sums to ", sum, " but rotary dims / 2 = ", cfg.n_rot / 2);
  }
  return {};
}

}  // namespace

Status validate_config(const ModelConfig& c, std::string_view file) {
  if (c.n_head % c.n_head_kv != 0)
    return err(file, ": num_attention_heads (", c.n_head,
               ") must be a multiple of num_key_value_heads (", c.n_head_kv, ")");
  if (c.lin_n_head_v % c.lin_n_head_k != 0)
    return err(file, ": linear_num_value_heads (", c.lin_n_head_v,
               ") must be a multiple of linear_num_key_heads (", c.lin_n_head_k, ")");
  if (c.n_expert_used > c.n_expert)
    return err(file, ": num_experts_per_tok (", c.n_expert_used, ") exceeds num_experts (",
               c.n_expert, ")");
  if (c.lin_conv_kernel < 1 || c.lin_conv_kernel > 16)
    return err(file, ": linear_conv_kernel_dim ", c.lin_conv_kernel, " is not supported (1..16)");
  return {};
}

int ModelConfig::n_full_layers() const {
  int n = 0;
  for (LayerKind k : layer_types) n += k == LayerKind::full_attention;
  return n;
}

std::optional<QuantSpec> ModelConfig::quant_for(std::string_view path) const {
  if (!quant) return std::nullopt;
  auto it = quant_overrides.find(path);
  return it != quant_overrides.end() ? it->second : *quant;
}

Expected<ModelConfig> parse_config(std::string_view json_text, std::string_view file) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return err(file, ": not valid JSON");
  if (!root.is_object()) return err(file, ": expected a JSON object at the top level");

  ModelConfig cfg;
  FieldReader top(root, file);
  cfg.model_type = top.string("model_type", "");
  if (!top.ok()) return top.error();
  const json* text = &root;
  if (cfg.model_type == "qwen3_5_moe") {
    text = top.find("text_config");
    if (!text || !text->is_object())
      return err(file, ": model_type qwen3_5_moe needs a 'text_config' object");
    cfg.nested = true;
  } else if (cfg.model_type != "qwen3_5_moe_text") {
    return err(file, ": model_type '", cfg.model_type,
               "' is not supported (expected \"qwen3_5_moe\" or \"qwen3_5_moe_text\")");
  }

  FieldReader r(*text, file);
  std::string act = r.string("hidden_act", "silu");
  cfg.n_vocab = r.positive("vocab_size");
  cfg.n_embd = int(r.positive("hidden_size"));
  cfg.n_layer = int(r.positive("num_hidden_layers"));
  cfg.n_head = int(r.positive("num_attention_heads"));
  cfg.n_head_kv = int(r.positive("num_key_value_heads"));
  cfg.head_dim = int(r.positive("head_dim", cfg.n_head ? cfg.n_embd / cfg.n_head : 0));
  cfg.max_position_embeddings = r.positive("max_position_embeddings", 262144);
  cfg.lin_n_head_k = int(r.positive("linear_num_key_heads"));
  cfg.lin_n_head_v = int(r.positive("linear_num_value_heads"));
  cfg.lin_head_dim_k = int(r.positive("linear_key_head_dim"));
  cfg.lin_head_dim_v = int(r.positive("linear_value_head_dim"));
  cfg.lin_conv_kernel = int(r.positive("linear_conv_kernel_dim", 4));
  cfg.n_expert = int(r.positive("num_experts"));
  cfg.n_expert_used = int(r.positive("num_experts_per_tok"));
  cfg.n_ff_exp = int(r.positive("moe_intermediate_size"));
  cfg.n_ff_shexp = int(r.positive("shared_expert_intermediate_size"));
  cfg.rms_norm_eps = float(r.number("rms_norm_eps", 1e-6));
  bool attention_bias = r.boolean("attention_bias", false);
  bool tie_text = r.boolean("tie_word_embeddings", false);
  if (!r.ok()) return r.error();
  cfg.tie_word_embeddings = top.boolean("tie_word_embeddings", tie_text);
  if (!top.ok()) return top.error();
  if (act != "silu") return err(file, ": hidden_act '", act, "' is not supported (expected silu)");
  if (attention_bias) return err(file, ": attention_bias true is not supported");
  if (!(cfg.rms_norm_eps > 0 && cfg.rms_norm_eps < 1))
    return err(file, ": rms_norm_eps must be in (0, 1)");

  ORCHID_TRY(parse_layer_types(r.find("layer_types"), r, file, cfg));
  ORCHID_TRY(parse_rope(*text, r, file, cfg));
  // The quantization section sits at the top of config.json; a nested config may carry it in
  // text_config instead.
  const bool top_quant = top.find("quantization") || top.find("quantization_config");
  ORCHID_TRY(parse_quantization(top_quant ? root : *text, file, cfg));
  ORCHID_TRY(validate_config(cfg, file));
  return cfg;
}

Expected<ModelConfig> load_config(const std::string& dir) {
  std::string path = dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return err(path, ": cannot open (is this a model directory?)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path);
}

}  // namespace orchid
