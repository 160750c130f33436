// Each tensor is a row generator over orchid's Weights: rows dequantized (QuantMatrix::dequant_row)
// and, where the converter reorders value heads, taken from the Hugging Face head they hold.
#include "orchid/model/gguf_export.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

namespace orchid {
namespace {

// The converter's value-head order: its head s = r·K + k is Hugging Face head k·R + r.
int64_t hf_head(const ModelConfig& c, int64_t s) {
  const int64_t K = c.lin_n_head_k, R = c.lin_n_head_v / c.lin_n_head_k;
  return (s % K) * R + s / K;
}

// Stored row i of a matrix whose rows [from, from + n_head_v · per) are value heads of `per`
// rows: the source row it holds.
int64_t head_row(const ModelConfig& c, int64_t i, int64_t from, int64_t per) {
  if (i < from || i >= from + c.lin_n_head_v * per) return i;
  const int64_t s = (i - from) / per;
  return from + hf_head(c, s) * per + (i - from) % per;
}

}  // namespace

std::map<std::string, GgufValue> qwen35moe_metadata(const ModelConfig& c, int mtp) {
  std::map<std::string, GgufValue> md;
  auto set = [&](const std::string& k, GgufValue v) { md["qwen35moe." + k] = std::move(v); };
  md["general.architecture"] = gguf_text("qwen35moe");
  const std::pair<const char*, int64_t> integers[] = {
      {"block_count", c.n_layer + mtp},
      {"nextn_predict_layers", mtp},
      {"context_length", c.max_position_embeddings},
      {"embedding_length", c.n_embd},
      {"attention.head_count", c.n_head},
      {"attention.head_count_kv", c.n_head_kv},
      {"attention.key_length", c.head_dim},
      {"attention.value_length", c.head_dim},
      {"rope.dimension_count", c.n_rot},
      {"expert_count", c.n_expert},
      {"expert_used_count", c.n_expert_used},
      {"expert_feed_forward_length", c.n_ff_exp},
      {"expert_shared_feed_forward_length", c.n_ff_shexp},
      {"ssm.conv_kernel", c.lin_conv_kernel},
      {"ssm.state_size", c.lin_head_dim_k},
      {"ssm.group_count", c.lin_n_head_k},
      {"ssm.time_step_rank", c.lin_n_head_v},
      {"ssm.inner_size", int64_t(c.lin_n_head_v) * c.lin_head_dim_v},
      {"full_attention_interval", 4},
  };
  for (const auto& [key, v] : integers) set(key, gguf_int(v));
  set("attention.layer_norm_rms_epsilon", gguf_real(c.rms_norm_eps));
  set("rope.freq_base", gguf_real(c.rope_theta));
  std::vector<GgufValue> sections;
  for (int s : c.mrope_section) sections.push_back(gguf_int(s, GgufValueType::I32));
  while (sections.size() < 4) sections.push_back(gguf_int(0, GgufValueType::I32));
  set("rope.dimension_sections", gguf_list(GgufValueType::I32, std::move(sections)));
  return md;
}

Status add_tokenizer_metadata(std::map<std::string, GgufValue>& md, const std::string& json_text,
                              const std::string& pre, int64_t n_vocab) {
  const auto j = nlohmann::json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.contains("model") || !j["model"].contains("vocab") ||
      !j["model"]["vocab"].is_object())
    return err("tokenizer.json: no model.vocab object");
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  auto put = [&](int64_t id, const std::string& s, int64_t type) -> Status {
    if (id < 0 || id >= (int64_t(1) << 24)) return err("tokenizer.json: token id ", id);
    if (int64_t(tokens.size()) <= id)
      tokens.resize(size_t(id + 1)), types.resize(size_t(id + 1), 0);
    tokens[size_t(id)] = s, types[size_t(id)] = type;
    return {};
  };
  for (const auto& [s, id] : j["model"]["vocab"].items()) {
    if (!id.is_number_integer()) return err("tokenizer.json: vocab entry '", s, "' has no id");
    ORCHID_TRY(put(id.get<int64_t>(), s, 1));
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& a : j["added_tokens"]) {
      if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        return err("tokenizer.json: an added token without id or content");
      ORCHID_TRY(put(a["id"].get<int64_t>(), a["content"].get<std::string>(),
                     a.value("special", false) ? 3 : 4));
    }
  if (int64_t(tokens.size()) > n_vocab)
    return err("tokenizer.json has ", tokens.size(), " tokens, the model ", n_vocab);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (types[i] == 0) tokens[i] = "[PAD" + std::to_string(i) + "]", types[i] = 5;
  while (int64_t(tokens.size()) < n_vocab)
    tokens.push_back("[PAD" + std::to_string(tokens.size()) + "]"), types.push_back(5);
  std::vector<GgufValue> tv, ty, mv;
  for (size_t i = 0; i < tokens.size(); ++i) {
    tv.push_back(gguf_text(tokens[i]));
    ty.push_back(gguf_int(types[i], GgufValueType::I32));
    if (tokens[i] == "<|im_end|>") md["tokenizer.ggml.eos_token_id"] = gguf_int(int64_t(i));
  }
  if (j["model"].contains("merges") && j["model"]["merges"].is_array())
    for (const auto& m : j["model"]["merges"]) {
      if (m.is_string())
        mv.push_back(gguf_text(m.get<std::string>()));
      else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        mv.push_back(gguf_text(m[0].get<std::string>() + " " + m[1].get<std::string>()));
      else
        return err("tokenizer.json: a merge that is neither \"a b\" nor [a, b]");
    }
  md["tokenizer.ggml.model"] = gguf_text("gpt2");
  md["tokenizer.ggml.pre"] = gguf_text(pre);
  md["tokenizer.ggml.tokens"] = gguf_list(GgufValueType::STRING, std::move(tv));
  md["tokenizer.ggml.token_type"] = gguf_list(GgufValueType::I32, std::move(ty));
  md["tokenizer.ggml.merges"] = gguf_list(GgufValueType::STRING, std::move(mv));
  return {};
}

namespace {

// llama.cpp's use_more_bits(i, n): the first and last eighth, and every third in between.
bool more_bits(int i, int n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

}  // namespace

void apply_q4_k_m(std::vector<GgufTensorSource>& ts, uint32_t router) {
  const auto has = [](const std::string& n, const char* k) { return n.find(k) != std::string::npos; };
  int n_v = 0, n_down = 0, i_v = 0, i_down = 0;
  for (const GgufTensorSource& t : ts) n_v += has(t.name, "attn_v.weight"), n_down += has(t.name, "ffn_down");
  for (GgufTensorSource& t : ts) {
    if (t.dims.size() < 2 || t.type == uint32_t(GgmlType::F32) || has(t.name, "ffn_gate_inp")) {
      if (has(t.name, "ffn_gate_inp") && t.dims.size() >= 2) t.type = router;
      continue;
    }
    GgmlType k = GgmlType::Q4_K;
    if (t.name == "output.weight") k = GgmlType::Q6_K;
    if (has(t.name, "attn_v.weight") && more_bits(i_v++, n_v)) k = GgmlType::Q6_K;
    if (has(t.name, "ffn_down") && more_bits(i_down++, n_down)) k = GgmlType::Q6_K;
    if (has(t.name, "attn_qkv.weight")) k = GgmlType::Q5_K;
    t.type = uint32_t(t.dims[0] % 256 == 0 ? k : GgmlType::Q8_0);
  }
}

Status export_gguf(const ModelConfig& c, const Weights& w, const std::string& path,
                   const GgufExportOptions& o) {
  auto md = qwen35moe_metadata(c);
  md["general.name"] = gguf_text(std::filesystem::path(path).stem().string());
  if (!o.tokenizer_json.empty())
    ORCHID_TRY(add_tokenizer_metadata(md, o.tokenizer_json, "qwen35", c.n_vocab));
  if (!o.chat_template.empty()) md["tokenizer.chat_template"] = gguf_text(o.chat_template);
  return write_gguf(path, md, qwen35moe_tensors(c, w, o.types), o.progress);
}

std::vector<GgufTensorSource> qwen35moe_tensors(const ModelConfig& c, const Weights& w,
                                                const GgufExportTypes& types) {
  const int64_t H = c.n_embd, dv = c.lin_head_dim_v, key_dim = c.lin_key_dim();
  const int64_t V = c.lin_n_head_v, value_dim = c.lin_value_dim(), conv_dim = c.lin_conv_dim();
  const uint32_t f32 = uint32_t(GgmlType::F32);
  std::vector<GgufTensorSource> out;
  // Rows that do not fill the type's blocks: Q8_0 (K-quants' 256) or F32 (32).
  GgmlBlock blk;
  const int64_t block = ggml_block(types.matrices, blk) ? blk.elems : 1;
  auto matrix_type = [&, block](int64_t cols) {
    return cols % block == 0 ? types.matrices : cols % 32 == 0 ? uint32_t(GgmlType::Q8_0) : f32;
  };
  // A matrix [rows, cols] whose stored row i is source row map(i), columns through cmap.
  auto mat = [&](const std::string& n, const QuantMatrix* m, uint32_t type,
                 std::function<int64_t(int64_t)> map = {}, bool head_cols = false) {
    GgufTensorSource t;
    t.name = n, t.dims = {m->cols, m->rows}, t.type = type;
    t.row = [&c, m, map, head_cols, dv](int64_t i, float* o) {
      m->dequant_row(map ? map(i) : i, o);
      if (!head_cols) return;
      std::vector<float> src(o, o + m->cols);
      for (int64_t s = 0; s < c.lin_n_head_v; ++s)
        std::memcpy(o + s * dv, src.data() + hf_head(c, s) * dv, size_t(dv) * 4);
    };
    out.push_back(std::move(t));
  };
  auto vec = [&](const std::string& n, std::vector<int64_t> dims, std::vector<float> v) {
    GgufTensorSource t;
    t.name = n, t.dims = std::move(dims), t.type = f32;
    auto data = std::make_shared<std::vector<float>>(std::move(v));
    const int64_t cols = t.dims[0];
    t.row = [data, cols](int64_t i, float* o) {
      std::memcpy(o, data->data() + i * cols, size_t(cols) * 4);
    };
    out.push_back(std::move(t));
  };
  auto stack = [&](const std::string& n, const std::vector<QuantMatrix>* ms) {
    GgufTensorSource t;
    const QuantMatrix& m0 = (*ms)[0];
    t.name = n, t.dims = {m0.cols, m0.rows, int64_t(ms->size())}, t.type = matrix_type(m0.cols);
    t.row = [ms](int64_t i, float* o) {
      const int64_t per = (*ms)[0].rows;
      (*ms)[size_t(i / per)].dequant_row(i % per, o);
    };
    out.push_back(std::move(t));
  };
  auto plain = [&](const std::string& n, const QuantMatrix& m) { mat(n, &m, matrix_type(m.cols)); };
  auto heads = [&](const std::vector<float>& v, int64_t row_len) {  // [n_head_v · row_len]
    std::vector<float> o(v.size());
    for (int64_t s = 0; s < V; ++s)
      std::memcpy(o.data() + s * row_len, v.data() + hf_head(c, s) * row_len, size_t(row_len) * 4);
    return o;
  };

  plain("token_embd.weight", w.tok_embd);
  vec("output_norm.weight", {H}, w.output_norm);
  if (!c.tie_word_embeddings) plain("output.weight", w.output);
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", {H}, L.attn_norm);
    vec(p + "post_attention_norm.weight", {H}, L.post_attn_norm);
    if (c.layer_types[size_t(l)] == LayerKind::full_attention) {
      plain(p + "attn_q.weight", L.attn.q_proj);
      plain(p + "attn_k.weight", L.attn.k_proj);
      plain(p + "attn_v.weight", L.attn.v_proj);
      plain(p + "attn_output.weight", L.attn.o_proj);
      vec(p + "attn_q_norm.weight", {c.head_dim}, L.attn.q_norm);
      vec(p + "attn_k_norm.weight", {c.head_dim}, L.attn.k_norm);
    } else {
      const DeltaNetWeights& g = L.gdn;
      mat(p + "attn_qkv.weight", &g.in_proj_qkv, matrix_type(H),
          [&c, key_dim, dv](int64_t i) { return head_row(c, i, 2 * key_dim, dv); });
      mat(p + "attn_gate.weight", &g.in_proj_z, matrix_type(H),
          [&c, dv](int64_t i) { return head_row(c, i, 0, dv); });
      mat(p + "ssm_beta.weight", &g.in_proj_b, f32,
          [&c](int64_t i) { return head_row(c, i, 0, 1); });
      mat(p + "ssm_alpha.weight", &g.in_proj_a, f32,
          [&c](int64_t i) { return head_row(c, i, 0, 1); });
      mat(p + "ssm_out.weight", &g.out_proj, matrix_type(value_dim), {}, true);
      std::vector<float> conv(g.conv.size());
      const int64_t K = c.lin_conv_kernel;
      for (int64_t i = 0; i < conv_dim; ++i)
        std::memcpy(conv.data() + i * K, g.conv.data() + head_row(c, i, 2 * key_dim, dv) * K,
                    size_t(K) * 4);
      vec(p + "ssm_conv1d.weight", {K, conv_dim}, std::move(conv));
      std::vector<float> a(g.A_log.size());
      for (size_t i = 0; i < a.size(); ++i) a[i] = -std::exp(g.A_log[i]);
      vec(p + "ssm_a", {V}, heads(a, 1));
      vec(p + "ssm_dt.bias", {V}, heads(g.dt_bias, 1));
      vec(p + "ssm_norm.weight", {dv}, g.norm);
    }
    const MoeWeights& m = L.moe;
    mat(p + "ffn_gate_inp.weight", &m.router, H % 32 == 0 ? types.router : f32);
    stack(p + "ffn_gate_exps.weight", &m.gate);
    stack(p + "ffn_up_exps.weight", &m.up);
    stack(p + "ffn_down_exps.weight", &m.down);
    plain(p + "ffn_gate_shexp.weight", m.shared_gate);
    plain(p + "ffn_up_shexp.weight", m.shared_up);
    plain(p + "ffn_down_shexp.weight", m.shared_down);
    std::vector<float> sg(static_cast<size_t>(H));
    m.shared_expert_gate.dequant_row(0, sg.data());
    vec(p + "ffn_gate_inp_shexp.weight", {H}, std::move(sg));
  }
  if (types.q4_k_m) apply_q4_k_m(out, types.router);
  return out;
}

}  // namespace orchid
