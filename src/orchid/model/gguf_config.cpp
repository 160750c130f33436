// gguf_config: qwen35moe metadata → ModelConfig, every value range-checked.
#include "orchid/model/gguf_config.h"

#include <limits>
#include <optional>
#include <string>

namespace orchid {
namespace {

constexpr std::string_view kArch = "qwen35moe";

// Reads `qwen35moe.<key>` values; the first problem is kept and reported.
class MetaReader {
 public:
  MetaReader(const GgufFile& f, std::string_view file) : f_(f), file_(file) {}

  const GgufValue* find(std::string_view key) const {
    return f_.get(std::string(kArch) + "." + std::string(key));
  }
  // A positive integer that fits int32 (`fallback` when absent, if given).
  int64_t positive(std::string_view key, std::optional<int64_t> fallback = std::nullopt) {
    const GgufValue* v = find(key);
    if (!v) return missing(key, fallback);
    if (!v->is_integer() || v->i <= 0 || v->i > std::numeric_limits<int32_t>::max())
      return fail(key, "a positive integer"), 0;
    return v->i;
  }
  int64_t non_negative(std::string_view key, int64_t fallback) {
    const GgufValue* v = find(key);
    if (!v) return fallback;
    if (!v->is_integer() || v->i < 0 || v->i > std::numeric_limits<int32_t>::max())
      return fail(key, "a non-negative integer"), 0;
    return v->i;
  }
  double number(std::string_view key, double fallback) {
    const GgufValue* v = find(key);
    if (!v) return fallback;
    if (v->type == GgufValueType::F32 || v->type == GgufValueType::F64) return v->f;
    if (v->is_integer()) return double(v->i);
    return fail(key, "a number"), 0.0;
  }
  void fail(std::string_view key, std::string_view expected) {
    if (!error_) error_ = err(file_, ": metadata '", kArch, ".", key, "' must be ", expected);
  }
  void set_error(Error e) {
    if (!error_) error_ = std::move(e);
  }
  bool ok() const { return !error_.has_value(); }
  const Error& error() const { return *error_; }

 private:
  int64_t missing(std::string_view key, std::optional<int64_t> fallback) {
    if (fallback) return *fallback;
    if (!error_) error_ = err(file_, ": missing metadata '", kArch, ".", key, "'");
    return 0;
  }
  const GgufFile& f_;
  std::string file_;
  std::optional<Error> error_;
};

// Linear attention or not per layer: attention.recurrent_layers (booleans or 0/1 per block) when
// present, else the interval rule.
Status layer_kinds(MetaReader& r, int64_t blocks, std::string_view file, ModelConfig& c) {
  if (const GgufValue* v = r.find("attention.recurrent_layers")) {
    if (v->type != GgufValueType::ARRAY || int64_t(v->array.size()) < c.n_layer)
      return err(file, ": metadata '", kArch, ".attention.recurrent_layers' must be an array of ",
                 blocks, " flags");
    for (int i = 0; i < c.n_layer; ++i) {
      const GgufValue& e = v->array[size_t(i)];
      bool linear;
      if (e.type == GgufValueType::BOOL) {
        linear = e.b;
      } else if (e.is_integer() && (e.i == 0 || e.i == 1)) {
        linear = e.i == 1;
      } else {
        return err(file, ": metadata '", kArch, ".attention.recurrent_layers' entry ", i,
                   " is not a flag");
      }
      c.layer_types.push_back(linear ? LayerKind::linear_attention : LayerKind::full_attention);
    }
    return {};
  }
  const int64_t interval = r.positive("full_attention_interval", 4);
  if (!r.ok()) return r.error();
  for (int i = 0; i < c.n_layer; ++i)
    c.layer_types.push_back((i + 1) % interval == 0 ? LayerKind::full_attention
                                                    : LayerKind::linear_attention);
  return {};
}

// rope.dimension_sections: mrope sections padded with zeros to 4; the sections (trailing zeros
// dropped) must add up to the rotated pairs.
Status mrope_sections(MetaReader& r, std::string_view file, ModelConfig& c) {
  const GgufValue* v = r.find("rope.dimension_sections");
  if (!v) return {};
  if (v->type != GgufValueType::ARRAY || v->array.size() > 8)
    return err(file, ": metadata '", kArch, ".rope.dimension_sections' must be an array of integers");
  int64_t sum = 0;
  for (const GgufValue& e : v->array) {
    if (!e.is_integer() || e.i < 0 || e.i > 1 << 16)
      return err(file, ": metadata '", kArch,
                 ".rope.dimension_sections' must hold non-negative integers");
    c.mrope_section.push_back(int(e.i));
    sum += e.i;
  }
  while (!c.mrope_section.empty() && c.mrope_section.back() == 0) c.mrope_section.pop_back();
  if (sum != c.n_rot / 2)
    return err(file, ": metadata '", kArch, ".rope.dimension_sections' adds up to ", sum,
               " but rope.dimension_count / 2 = ", c.n_rot / 2);
  return {};
}

}  // namespace

Expected<ModelConfig> gguf_config(const GgufFile& f, std::string_view file) {
  const GgufValue* arch = f.get("general.architecture");
  if (!arch || arch->type != GgufValueType::STRING)
    return err(file, ": missing metadata 'general.architecture'");
  if (arch->s != kArch)
    return err(file, ": architecture '", arch->s, "' is not supported (expected \"", kArch, "\")");

  ModelConfig c;
  c.model_type = "qwen3_5_moe_text";
  MetaReader r(f, file);
  const int64_t blocks = r.positive("block_count");
  const int64_t mtp = r.non_negative("nextn_predict_layers", 0);
  c.n_embd = int(r.positive("embedding_length"));
  c.max_position_embeddings = r.positive("context_length", 262144);
  c.n_head = int(r.positive("attention.head_count"));
  c.n_head_kv = int(r.positive("attention.head_count_kv"));
  c.head_dim = int(r.positive("attention.key_length"));
  const int64_t value_length = r.positive("attention.value_length", c.head_dim);
  c.n_rot = int(r.positive("rope.dimension_count", c.head_dim));
  c.rope_theta = r.number("rope.freq_base", 10000.0);
  c.rms_norm_eps = float(r.number("attention.layer_norm_rms_epsilon", 1e-6));
  c.n_expert = int(r.positive("expert_count"));
  c.n_expert_used = int(r.positive("expert_used_count"));
  c.n_ff_exp = int(r.positive("expert_feed_forward_length"));
  c.n_ff_shexp = int(r.positive("expert_shared_feed_forward_length"));
  c.lin_conv_kernel = int(r.positive("ssm.conv_kernel"));
  c.lin_head_dim_k = int(r.positive("ssm.state_size"));
  c.lin_n_head_k = int(r.positive("ssm.group_count"));
  c.lin_n_head_v = int(r.positive("ssm.time_step_rank"));
  const int64_t inner = r.positive("ssm.inner_size");
  if (!r.ok()) return r.error();

  if (mtp >= blocks)
    return err(file, ": nextn_predict_layers (", mtp, ") leaves no layers of block_count (", blocks, ")");
  c.n_layer = int(blocks - mtp);
  if (value_length != c.head_dim)
    return err(file, ": attention.value_length (", value_length,
               ") differs from attention.key_length (", c.head_dim, ")");
  if (c.n_rot % 2 != 0 || c.n_rot > c.head_dim)
    return err(file, ": rope.dimension_count ", c.n_rot, " must be even and at most key_length ",
               c.head_dim);
  if (inner % c.lin_n_head_v != 0)
    return err(file, ": ssm.inner_size (", inner, ") is not a multiple of ssm.time_step_rank (",
               c.lin_n_head_v, ")");
  c.lin_head_dim_v = int(inner / c.lin_n_head_v);
  if (!(c.rope_theta > 0)) return err(file, ": rope.freq_base must be positive");
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1))
    return err(file, ": attention.layer_norm_rms_epsilon must be in (0, 1)");

  // Vocabulary rows: token_embd is {n_embd, n_vocab} (innermost first).
  if (const GgufTensor* t = f.find("token_embd.weight")) {
    if (t->dims.size() != 2 || t->dims[0] != c.n_embd)
      return err(file, ": tensor 'token_embd.weight' must be {", c.n_embd, ", n_vocab}");
    c.n_vocab = t->dims[1];
  } else if (const GgufValue* tok = f.get("tokenizer.ggml.tokens");
             tok && tok->type == GgufValueType::ARRAY && !tok->array.empty()) {
    c.n_vocab = int64_t(tok->array.size());
  } else {
    return err(file, ": no 'token_embd.weight' tensor and no tokenizer.ggml.tokens to size the vocabulary");
  }
  c.tie_word_embeddings = f.find("output.weight") == nullptr;
  ORCHID_TRY(layer_kinds(r, blocks, file, c));
  ORCHID_TRY(mrope_sections(r, file, c));
  ORCHID_TRY(validate_config(c, file));
  return c;
}

}  // namespace orchid
