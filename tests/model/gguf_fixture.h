// Test-side GGUF writing: the qwen35moe metadata llama.cpp's converter writes for a config, a
// model's Weights as the converter's fp32 tensors (its transforms applied: value heads in its
// order, A as −exp(A_log); norms as orchid holds them, 1 + w), and a GgufFile as file bytes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "orchid/model/config.h"
#include "orchid/model/gguf.h"
#include "orchid/model/weights.h"

namespace orchid::gguf_fixture {

inline GgufValue integer(int64_t v, GgufValueType t = GgufValueType::U32) {
  GgufValue x;
  x.type = t, x.i = v, x.u = uint64_t(v);
  return x;
}
inline GgufValue real(double v) {
  GgufValue x;
  x.type = GgufValueType::F32, x.f = v;
  return x;
}
inline GgufValue text(std::string s) {
  GgufValue x;
  x.type = GgufValueType::STRING, x.s = std::move(s);
  return x;
}

// The converter's `qwen35moe.*` metadata for c (mtp MTP layers; mrope sections padded to 4).
inline void add_metadata(GgufFile& f, const ModelConfig& c, int mtp) {
  auto set = [&](const std::string& k, GgufValue v) { f.metadata["qwen35moe." + k] = std::move(v); };
  f.metadata["general.architecture"] = text("qwen35moe");
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
  for (const auto& [key, v] : integers) set(key, integer(v));
  set("attention.layer_norm_rms_epsilon", real(c.rms_norm_eps));
  set("rope.freq_base", real(c.rope_theta));
  GgufValue sections;
  sections.type = GgufValueType::ARRAY, sections.elem = GgufValueType::I32;
  for (int s : c.mrope_section) sections.array.push_back(integer(s, GgufValueType::I32));
  while (sections.array.size() < 4) sections.array.push_back(integer(0, GgufValueType::I32));
  set("rope.dimension_sections", sections);
}

// Adds fp32 tensor `name` (dims innermost first) holding v; its bytes live in store.
inline void add_f32(GgufFile& f, std::deque<std::vector<uint8_t>>& store, const std::string& name,
                    std::vector<int64_t> dims, const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  store.push_back(std::move(b));
  GgufTensor t;
  t.name = name, t.type = uint32_t(GgmlType::F32), t.dims = std::move(dims);
  t.data = store.back(), t.nbytes = store.back().size();
  f.tensors.push_back(std::move(t));
}

// v quantized as ggml does (ggml-quants.c's reference quantizers, written from their definition):
// Q8_0 d = amax / 127, q = round(x / d); Q4_0 d = (the value of largest magnitude) / −8,
// q = min(15, trunc(x / d + 8.5)). Blocks of 32 along the innermost dim.
inline void add_quantized(GgufFile& f, std::deque<std::vector<uint8_t>>& store, const std::string& name,
                          std::vector<int64_t> dims, const std::vector<float>& v, GgmlType type) {
  auto f16 = [](float x) {  // round to nearest fp16 (normal range: the scales here)
    uint32_t u;
    std::memcpy(&u, &x, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const int e = int((u >> 23) & 0xff) - 127 + 15;
    if (e <= 0) return uint16_t(sign);  // flush the tiny ones
    uint32_t m = u & 0x7fffffu, h = (uint32_t(e) << 10) | (m >> 13);
    const uint32_t rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return uint16_t(sign | h);
  };
  const bool q8 = type == GgmlType::Q8_0;
  const size_t block_bytes = q8 ? 34 : 18, blocks = v.size() / 32;
  std::vector<uint8_t> b(blocks * block_bytes);
  for (size_t i = 0; i < blocks; ++i) {
    const float* x = v.data() + i * 32;
    uint8_t* o = b.data() + i * block_bytes;
    float amax = 0.f, max = 0.f;
    for (int k = 0; k < 32; ++k)
      if (std::fabs(x[k]) > amax) amax = std::fabs(x[k]), max = x[k];
    const float d = q8 ? amax / 127.f : max / -8.f, id = d != 0.f ? 1.f / d : 0.f;
    const uint16_t dh = f16(d);
    std::memcpy(o, &dh, 2);
    for (int k = 0; k < 32; ++k) {
      if (q8) {
        o[2 + k] = uint8_t(int8_t(std::lround(x[k] * id)));
      } else if (k < 16) {
        const auto q = [&](int j) { return uint8_t(std::min(15, int(x[j] * id + 8.5f))); };
        o[2 + k] = uint8_t(q(k) | (q(k + 16) << 4));
      }
    }
  }
  store.push_back(std::move(b));
  GgufTensor t;
  t.name = name, t.type = uint32_t(type), t.dims = std::move(dims);
  t.data = store.back(), t.nbytes = store.back().size();
  f.tensors.push_back(std::move(t));
}

// m's values, [rows, cols] row-major.
inline std::vector<float> values(const QuantMatrix& m) {
  std::vector<float> v(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) m.dequant_row(r, v.data() + r * m.cols);
  return v;
}

// The converter's value-head order: its head s = r·K + k is Hugging Face head k·R + r. Blocks of
// `per` consecutive values (from `from`) are heads; a head's blocks are `stride` apart.
inline int64_t hf_head(const ModelConfig& c, int64_t s) {
  const int64_t K = c.lin_n_head_k, R = c.lin_n_head_v / c.lin_n_head_k;
  return (s % K) * R + s / K;
}
inline std::vector<float> to_stored_rows(const ModelConfig& c, const std::vector<float>& v,
                                         int64_t row_len, int64_t from, int64_t per) {
  std::vector<float> out = v;
  for (int64_t s = 0; s < c.lin_n_head_v; ++s)
    std::memcpy(out.data() + (from + s * per) * row_len, v.data() + (from + hf_head(c, s) * per) * row_len,
                size_t(per * row_len) * 4);
  return out;
}
inline std::vector<float> to_stored_cols(const ModelConfig& c, const std::vector<float>& v,
                                         int64_t rows, int64_t cols, int64_t per) {
  std::vector<float> out = v;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t s = 0; s < c.lin_n_head_v; ++s)
      std::memcpy(out.data() + r * cols + s * per, v.data() + r * cols + hf_head(c, s) * per,
                  size_t(per) * 4);
  return out;
}

// w as the converter's fp32 tensors (the tied case: no output.weight).
inline void add_weights(GgufFile& f, std::deque<std::vector<uint8_t>>& store, const ModelConfig& c,
                        const Weights& w, GgmlType matrices = GgmlType::F32) {
  const int64_t H = c.n_embd, dv = c.lin_head_dim_v, key_dim = c.lin_key_dim();
  const int64_t V = c.lin_n_head_v, value_dim = c.lin_value_dim(), conv_dim = c.lin_conv_dim();
  // Matrices and expert stacks in `matrices` (rows of a multiple of 32), the rest fp32.
  auto put = [&](const std::string& n, std::vector<int64_t> dims, const std::vector<float>& v) {
    if (matrices != GgmlType::F32 && dims[0] % 32 == 0)
      add_quantized(f, store, n, std::move(dims), v, matrices);
    else
      add_f32(f, store, n, std::move(dims), v);
  };
  auto mat = [&](const std::string& n, const QuantMatrix& m) { put(n, {m.cols, m.rows}, values(m)); };
  auto stack = [&](const std::string& n, const std::vector<QuantMatrix>& ms) {
    std::vector<float> all;
    for (const QuantMatrix& m : ms) {
      const std::vector<float> v = values(m);
      all.insert(all.end(), v.begin(), v.end());
    }
    put(n, {ms[0].cols, ms[0].rows, int64_t(ms.size())}, all);
  };
  mat("token_embd.weight", w.tok_embd);
  add_f32(f, store, "output_norm.weight", {H}, w.output_norm);
  if (!c.tie_word_embeddings) mat("output.weight", w.output);
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    add_f32(f, store, p + "attn_norm.weight", {H}, L.attn_norm);
    add_f32(f, store, p + "post_attention_norm.weight", {H}, L.post_attn_norm);
    if (c.layer_types[size_t(l)] == LayerKind::full_attention) {
      mat(p + "attn_q.weight", L.attn.q_proj);
      mat(p + "attn_k.weight", L.attn.k_proj);
      mat(p + "attn_v.weight", L.attn.v_proj);
      mat(p + "attn_output.weight", L.attn.o_proj);
      add_f32(f, store, p + "attn_q_norm.weight", {c.head_dim}, L.attn.q_norm);
      add_f32(f, store, p + "attn_k_norm.weight", {c.head_dim}, L.attn.k_norm);
    } else {
      const DeltaNetWeights& g = L.gdn;
      put(p + "attn_qkv.weight", {H, conv_dim},
              to_stored_rows(c, values(g.in_proj_qkv), H, 2 * key_dim, dv));
      put(p + "attn_gate.weight", {H, value_dim},
              to_stored_rows(c, values(g.in_proj_z), H, 0, dv));
      add_f32(f, store, p + "ssm_beta.weight", {H, V}, to_stored_rows(c, values(g.in_proj_b), H, 0, 1));
      add_f32(f, store, p + "ssm_alpha.weight", {H, V}, to_stored_rows(c, values(g.in_proj_a), H, 0, 1));
      put(p + "ssm_out.weight", {value_dim, H},
              to_stored_cols(c, values(g.out_proj), H, value_dim, dv));
      add_f32(f, store, p + "ssm_conv1d.weight", {c.lin_conv_kernel, conv_dim},
              to_stored_rows(c, g.conv, c.lin_conv_kernel, 2 * key_dim, dv));
      std::vector<float> a(g.A_log.size());
      for (size_t i = 0; i < a.size(); ++i) a[i] = -std::exp(g.A_log[i]);
      add_f32(f, store, p + "ssm_a", {V}, to_stored_rows(c, a, 1, 0, 1));
      add_f32(f, store, p + "ssm_dt.bias", {V}, to_stored_rows(c, g.dt_bias, 1, 0, 1));
      add_f32(f, store, p + "ssm_norm.weight", {dv}, g.norm);
    }
    const MoeWeights& m = L.moe;
    add_f32(f, store, p + "ffn_gate_inp.weight", {H, c.n_expert}, values(m.router));  // F32 in real files
    stack(p + "ffn_gate_exps.weight", m.gate);
    stack(p + "ffn_up_exps.weight", m.up);
    stack(p + "ffn_down_exps.weight", m.down);
    mat(p + "ffn_gate_shexp.weight", m.shared_gate);
    mat(p + "ffn_up_shexp.weight", m.shared_up);
    mat(p + "ffn_down_shexp.weight", m.shared_down);
    add_f32(f, store, p + "ffn_gate_inp_shexp.weight", {H}, values(m.shared_expert_gate));
  }
}

// The converter's tokenizer metadata for tokenizer.json text `json_text`: tokens in id order with
// their types (1 normal, 3 control = special added, 4 user-defined, one padding token of type 5
// at the end), merges as "a b".
inline void add_tokenizer(GgufFile& f, const std::string& json_text, const std::string& pre) {
  const auto j = nlohmann::json::parse(json_text);
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  auto put = [&](int64_t id, const std::string& s, int64_t type) {
    if (int64_t(tokens.size()) <= id) tokens.resize(size_t(id + 1)), types.resize(size_t(id + 1), 0);
    tokens[size_t(id)] = s, types[size_t(id)] = type;
  };
  for (const auto& [s, id] : j["model"]["vocab"].items()) put(id.get<int64_t>(), s, 1);
  for (const auto& a : j["added_tokens"]) put(a["id"].get<int64_t>(), a["content"], a["special"] ? 3 : 4);
  put(int64_t(tokens.size()), "[PAD" + std::to_string(tokens.size()) + "]", 5);
  auto list = [](GgufValueType elem) {
    GgufValue v;
    v.type = GgufValueType::ARRAY, v.elem = elem;
    return v;
  };
  f.metadata["tokenizer.ggml.model"] = text("gpt2");
  f.metadata["tokenizer.ggml.pre"] = text(pre);
  GgufValue tv = list(GgufValueType::STRING), ty = list(GgufValueType::I32), mv = list(GgufValueType::STRING);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tv.array.push_back(text(tokens[i]));
    ty.array.push_back(integer(types[i], GgufValueType::I32));
  }
  for (const auto& m : j["model"]["merges"])
    mv.array.push_back(text(m.is_string() ? m.get<std::string>()
                                          : m[0].get<std::string>() + " " + m[1].get<std::string>()));
  f.metadata["tokenizer.ggml.tokens"] = tv;
  f.metadata["tokenizer.ggml.token_type"] = ty;
  f.metadata["tokenizer.ggml.merges"] = mv;
}

inline std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// f as the bytes of a GGUF v3 file (alignment 32; tensors in order, each aligned).
inline std::vector<uint8_t> file_bytes(const GgufFile& f) {
  std::vector<uint8_t> b;
  auto raw = [&](const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
  };
  auto u32 = [&](uint32_t v) { raw(&v, 4); };
  auto u64 = [&](uint64_t v) { raw(&v, 8); };
  auto str = [&](const std::string& s) { u64(s.size()), raw(s.data(), s.size()); };
  auto value = [&](auto& self, GgufValueType t, const GgufValue& v) -> void {
    switch (t) {
      case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::BOOL: {
        const uint8_t x = t == GgufValueType::BOOL ? uint8_t(v.b) : uint8_t(v.i);
        raw(&x, 1);
        break;
      }
      case GgufValueType::U16: case GgufValueType::I16: {
        const uint16_t x = uint16_t(v.i);
        raw(&x, 2);
        break;
      }
      case GgufValueType::U32: case GgufValueType::I32: u32(uint32_t(v.i)); break;
      case GgufValueType::U64: case GgufValueType::I64: u64(uint64_t(v.i)); break;
      case GgufValueType::F32: {
        const float x = float(v.f);
        raw(&x, 4);
        break;
      }
      case GgufValueType::F64: raw(&v.f, 8); break;
      case GgufValueType::STRING: str(v.s); break;
      case GgufValueType::ARRAY:
        u32(uint32_t(v.elem)), u64(v.array.size());
        for (const GgufValue& e : v.array) self(self, v.elem, e);
        break;
    }
  };
  u32(0x46554747u), u32(3), u64(f.tensors.size()), u64(f.metadata.size());
  for (const auto& [k, v] : f.metadata) str(k), u32(uint32_t(v.type)), value(value, v.type, v);
  uint64_t offset = 0;
  for (const GgufTensor& t : f.tensors) {
    str(t.name), u32(uint32_t(t.dims.size()));
    for (int64_t d : t.dims) u64(uint64_t(d));
    u32(t.type), u64(offset);
    offset = (offset + t.data.size() + 31) / 32 * 32;
  }
  b.resize((b.size() + 31) / 32 * 32);
  for (const GgufTensor& t : f.tensors) {
    raw(t.data.data(), t.data.size());
    b.resize((b.size() + 31) / 32 * 32);
  }
  return b;
}

}  // namespace orchid::gguf_fixture
