// A qwen35moe GGUF's tensors as Weights (model/gguf_weights.h). The test plays llama.cpp's
// converter for the tiny config: random tensors of several types (F32, F16, BF16, Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0: the tiny shapes' rows are too short for the 256-element K types, whose rows
// test_gguf_affine covers), the Gated DeltaNet's value heads stored in the converter's order (head
// r·K + k holds HF head k·R + r) and A as −exp(A_log). Every field of the loaded Weights must give
// exactly the values ggml's definition gives the stored blocks, in Hugging Face order (the index
// mapping written here from the converter's definition, not with undo_v_head_reorder).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "orchid/model/config.h"
#include "orchid/model/gguf_dequant.h"
#include "orchid/model/gguf_weights.h"

namespace orchid {
namespace {

constexpr uint32_t T(GgmlType t) {
  return uint32_t(t);
}

// A fp16 of magnitude in [2^-6, 2^-3) with a random sign and mantissa: finite, never tiny.
uint16_t random_f16(std::mt19937& rng) {
  return uint16_t((rng() & 0x8000u) | ((9u + rng() % 3u) << 10) | (rng() & 0x3ffu));
}

// The GGUF under construction; tensor bytes live in `bytes`, their values (ggml's definition,
// stored order) in `values`.
struct Builder {
  std::mt19937 rng{std::random_device{}()};
  GgufFile f;
  std::deque<std::vector<uint8_t>> bytes;
  std::map<std::string, std::vector<float>> values;

  void add(const std::string& name, uint32_t type, std::vector<int64_t> dims) {
    GgufTensor t;
    t.name = name, t.type = type, t.dims = dims;
    GgmlBlock blk;
    EXPECT_TRUE(ggml_block(type, blk)) << name;
    const int64_t n = t.numel();
    std::vector<uint8_t> b(size_t(n / blk.elems * blk.bytes));
    for (auto& x : b) x = uint8_t(rng());
    auto put16 = [&](size_t at, uint16_t v) { std::memcpy(&b[at], &v, 2); };
    const size_t blocks = b.size() / size_t(blk.bytes);
    for (size_t i = 0; i < blocks; ++i) {
      const size_t o = i * size_t(blk.bytes);
      switch (GgmlType(type)) {
        case GgmlType::F32: {
          const float v = std::ldexp(float(int(rng() % 2001) - 1000), -10);
          std::memcpy(&b[o], &v, 4);
          break;
        }
        case GgmlType::F16:
          put16(o, random_f16(rng));
          break;
        case GgmlType::BF16: {
          const float v = std::ldexp(float(int(rng() % 255) - 127), -7);
          uint32_t u;
          std::memcpy(&u, &v, 4);
          put16(o, uint16_t(u >> 16));
          break;
        }
        case GgmlType::Q4_1:
        case GgmlType::Q5_1:
          put16(o, random_f16(rng)), put16(o + 2, random_f16(rng));
          break;
        default:  // Q4_0, Q5_0, Q8_0: d first
          put16(o, random_f16(rng));
      }
    }
    std::vector<float> v(static_cast<size_t>(n));
    EXPECT_TRUE(dequantize_gguf(type, b, n, v.data()).ok()) << name;
    bytes.push_back(std::move(b));
    t.data = bytes.back();
    t.nbytes = bytes.back().size();
    f.tensors.push_back(t);
    values[name] = std::move(v);
  }
  // An F32 tensor of given values.
  void add_f32(const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
    GgufTensor t;
    t.name = name, t.type = T(GgmlType::F32), t.dims = dims;
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    bytes.push_back(std::move(b));
    t.data = bytes.back();
    t.nbytes = bytes.back().size();
    f.tensors.push_back(t);
    values[name] = std::move(v);
  }
};

struct Layout {
  bool fused_gate_up = false;
  bool tied = false;
};

// What the converter writes for config c (types chosen to cover every conversion path).
Builder convert(const ModelConfig& c, Layout o) {
  Builder b;
  const int64_t H = c.n_embd, V = c.lin_n_head_v, dv = c.lin_head_dim_v, hd = c.head_dim;
  const int64_t key_dim = c.lin_key_dim(), value_dim = c.lin_value_dim();
  const int64_t E = c.n_expert, ff = c.n_ff_exp, sh = c.n_ff_shexp;
  b.add("token_embd.weight", T(GgmlType::Q8_0), {H, c.n_vocab});
  b.add("output_norm.weight", T(GgmlType::F32), {H});
  if (!o.tied) b.add("output.weight", T(GgmlType::Q4_1), {H, c.n_vocab});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    b.add(p + "attn_norm.weight", T(GgmlType::F32), {H});
    b.add(p + "post_attention_norm.weight", T(GgmlType::F32), {H});
    if (c.layer_types[size_t(l)] == LayerKind::full_attention) {
      b.add(p + "attn_q.weight", T(GgmlType::BF16), {H, c.n_head * hd * 2});
      b.add(p + "attn_k.weight", T(GgmlType::Q8_0), {H, c.n_head_kv * hd});
      b.add(p + "attn_v.weight", T(GgmlType::Q8_0), {H, c.n_head_kv * hd});
      b.add(p + "attn_output.weight", T(GgmlType::Q5_0), {c.n_head * hd, H});
      b.add(p + "attn_q_norm.weight", T(GgmlType::F32), {hd});
      b.add(p + "attn_k_norm.weight", T(GgmlType::F32), {hd});
    } else {
      b.add(p + "attn_qkv.weight", T(GgmlType::Q8_0), {H, 2 * key_dim + value_dim});
      b.add(p + "attn_gate.weight", T(GgmlType::Q4_0), {H, value_dim});
      b.add(p + "ssm_beta.weight", T(GgmlType::F32), {H, V});
      b.add(p + "ssm_alpha.weight", T(GgmlType::F16), {H, V});
      b.add(p + "ssm_out.weight", T(GgmlType::Q4_1), {value_dim, H});
      b.add(p + "ssm_conv1d.weight", T(GgmlType::F32), {c.lin_conv_kernel, 2 * key_dim + value_dim});
      std::vector<float> a(static_cast<size_t>(V));
      for (auto& x : a) x = -std::exp(std::ldexp(float(int(b.rng() % 200) - 100), -6));
      b.add_f32(p + "ssm_a", {V}, a);
      b.add(p + "ssm_dt.bias", T(GgmlType::F32), {V});
      b.add(p + "ssm_norm.weight", T(GgmlType::F32), {dv});
    }
    b.add(p + "ffn_gate_inp.weight", T(GgmlType::F32), {H, E});
    if (o.fused_gate_up) {
      b.add(p + "ffn_gate_up_exps.weight", T(GgmlType::Q4_0), {H, 2 * ff, E});
    } else {
      b.add(p + "ffn_gate_exps.weight", T(GgmlType::Q4_0), {H, ff, E});
      b.add(p + "ffn_up_exps.weight", T(GgmlType::Q8_0), {H, ff, E});
    }
    b.add(p + "ffn_down_exps.weight", T(GgmlType::Q4_1), {ff, H, E});
    b.add(p + "ffn_gate_shexp.weight", T(GgmlType::F16), {H, sh});
    b.add(p + "ffn_up_shexp.weight", T(GgmlType::Q8_0), {H, sh});
    b.add(p + "ffn_down_shexp.weight", T(GgmlType::Q5_1), {sh, H});
    b.add(p + "ffn_gate_inp_shexp.weight", T(GgmlType::F32), {H, 1});
  }
  return b;
}

// The stored head of Hugging Face value head h: HF head k·R + r is stored as r·K + k.
int64_t stored_head(const ModelConfig& c, int64_t h) {
  const int64_t K = c.lin_n_head_k, R = c.lin_n_head_v / c.lin_n_head_k;
  return (h % R) * K + h / R;
}

// Every element of m against want(r, c); counts mismatches (exact: the values are ggml's).
void expect_matrix(const QuantMatrix& m, int64_t rows, int64_t cols,
                   const std::function<float(int64_t, int64_t)>& want, const std::string& what) {
  ASSERT_EQ(m.rows, rows) << what;
  ASSERT_EQ(m.cols, cols) << what;
  std::vector<float> row(static_cast<size_t>(cols));
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    m.dequant_row(r, row.data());
    for (int64_t c = 0; c < cols; ++c)
      if (!(row[size_t(c)] == want(r, c)) && bad++ < 3)
        ADD_FAILURE() << what << " [" << r << ", " << c << "]: " << row[size_t(c)] << " vs "
                      << want(r, c);
  }
  EXPECT_EQ(bad, 0) << what;
}

void expect_vector(const std::vector<float>& got, const std::function<float(int64_t)>& want,
                   int64_t n, const std::string& what) {
  ASSERT_EQ(int64_t(got.size()), n) << what;
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)], want(i)) << what << " [" << i << "]";
}

void check_layout(Layout o) {
  const ModelConfig c = *builtin_config("tiny");
  ASSERT_GT(c.lin_n_head_v / c.lin_n_head_k, 1) << "the tiny config must exercise the reorder";
  Builder b = convert(c, o);
  std::deque<std::vector<uint8_t>> arena;
  auto w = gguf_weights(b.f, c, "tiny.gguf", arena);
  ASSERT_TRUE(w.ok()) << w.message();
  const int64_t H = c.n_embd, V = c.lin_n_head_v, dv = c.lin_head_dim_v;
  const int64_t key_dim = c.lin_key_dim(), value_dim = c.lin_value_dim(), K = c.lin_conv_kernel;
  const int64_t E = c.n_expert, ff = c.n_ff_exp, sh = c.n_ff_shexp;
  auto plain = [&](const std::string& name, int64_t cols) {
    const std::vector<float>& v = b.values.at(name);
    return [&v, cols](int64_t r, int64_t col) { return v[size_t(r * cols + col)]; };
  };
  expect_matrix(w->tok_embd, c.n_vocab, H, plain("token_embd.weight", H), "token_embd");
  expect_matrix(w->output, c.n_vocab, H, plain(o.tied ? "token_embd.weight" : "output.weight", H),
                "output");
  expect_vector(w->output_norm, [&](int64_t i) { return b.values.at("output_norm.weight")[size_t(i)]; }, H,
                "output_norm");
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const LayerWeights& L = w->layers[size_t(l)];
    auto vec = [&](const std::string& n) {
      const std::vector<float>& v = b.values.at(p + n);
      return [&v](int64_t i) { return v[size_t(i)]; };
    };
    expect_vector(L.attn_norm, vec("attn_norm.weight"), H, p + "attn_norm");
    expect_vector(L.post_attn_norm, vec("post_attention_norm.weight"), H, p + "post_attention_norm");
    if (c.layer_types[size_t(l)] == LayerKind::full_attention) {
      const int64_t qd = c.n_head * c.head_dim, kd = c.n_head_kv * c.head_dim;
      expect_matrix(L.attn.q_proj, 2 * qd, H, plain(p + "attn_q.weight", H), p + "attn_q");
      expect_matrix(L.attn.k_proj, kd, H, plain(p + "attn_k.weight", H), p + "attn_k");
      expect_matrix(L.attn.v_proj, kd, H, plain(p + "attn_v.weight", H), p + "attn_v");
      expect_matrix(L.attn.o_proj, H, qd, plain(p + "attn_output.weight", qd), p + "attn_output");
      expect_vector(L.attn.q_norm, vec("attn_q_norm.weight"), c.head_dim, p + "q_norm");
      expect_vector(L.attn.k_norm, vec("attn_k_norm.weight"), c.head_dim, p + "k_norm");
    } else {
      const DeltaNetWeights& g = L.gdn;
      const int64_t conv_dim = 2 * key_dim + value_dim;
      // Rows (or channels) of value heads of `per` each, from `from`: stored where the
      // converter put them.
      auto row_of = [&](int64_t r, int64_t from, int64_t per) {
        if (r < from) return r;
        const int64_t h = (r - from) / per, j = (r - from) % per;
        return from + stored_head(c, h) * per + j;
      };
      const std::vector<float>& qkv = b.values.at(p + "attn_qkv.weight");
      expect_matrix(g.in_proj_qkv, conv_dim, H,
                    [&](int64_t r, int64_t col) { return qkv[size_t(row_of(r, 2 * key_dim, dv) * H + col)]; },
                    p + "attn_qkv");
      const std::vector<float>& z = b.values.at(p + "attn_gate.weight");
      expect_matrix(g.in_proj_z, value_dim, H,
                    [&](int64_t r, int64_t col) { return z[size_t(row_of(r, 0, dv) * H + col)]; }, p + "attn_gate");
      const std::vector<float>& be = b.values.at(p + "ssm_beta.weight");
      expect_matrix(g.in_proj_b, V, H,
                    [&](int64_t r, int64_t col) { return be[size_t(row_of(r, 0, 1) * H + col)]; }, p + "ssm_beta");
      const std::vector<float>& al = b.values.at(p + "ssm_alpha.weight");
      expect_matrix(g.in_proj_a, V, H,
                    [&](int64_t r, int64_t col) { return al[size_t(row_of(r, 0, 1) * H + col)]; }, p + "ssm_alpha");
      const std::vector<float>& out = b.values.at(p + "ssm_out.weight");
      expect_matrix(g.out_proj, H, value_dim,
                    [&](int64_t r, int64_t col) { return out[size_t(r * value_dim + row_of(col, 0, dv))]; },
                    p + "ssm_out");
      const std::vector<float>& conv = b.values.at(p + "ssm_conv1d.weight");
      expect_vector(g.conv, [&](int64_t i) { return conv[size_t(row_of(i / K, 2 * key_dim, dv) * K + i % K)]; },
                    conv_dim * K, p + "ssm_conv1d");
      const std::vector<float>& a = b.values.at(p + "ssm_a");
      expect_vector(g.A_log, [&](int64_t i) { return std::log(-a[size_t(row_of(i, 0, 1))]); }, V, p + "A_log");
      const std::vector<float>& dt = b.values.at(p + "ssm_dt.bias");
      expect_vector(g.dt_bias, [&](int64_t i) { return dt[size_t(row_of(i, 0, 1))]; }, V, p + "dt_bias");
      expect_vector(g.norm, vec("ssm_norm.weight"), dv, p + "ssm_norm");
    }
    const MoeWeights& m = L.moe;
    expect_matrix(m.router, E, H, plain(p + "ffn_gate_inp.weight", H), p + "router");
    ASSERT_EQ(int64_t(m.gate.size()), E);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + "expert " + std::to_string(e);
      if (o.fused_gate_up) {
        const std::vector<float>& gu = b.values.at(p + "ffn_gate_up_exps.weight");
        expect_matrix(m.gate[size_t(e)], ff, H,
                      [&](int64_t r, int64_t col) { return gu[size_t((2 * ff * e + r) * H + col)]; }, x + " gate");
        expect_matrix(m.up[size_t(e)], ff, H,
                      [&](int64_t r, int64_t col) { return gu[size_t((2 * ff * e + ff + r) * H + col)]; }, x + " up");
      } else {
        const std::vector<float>& gs = b.values.at(p + "ffn_gate_exps.weight");
        const std::vector<float>& us = b.values.at(p + "ffn_up_exps.weight");
        expect_matrix(m.gate[size_t(e)], ff, H,
                      [&](int64_t r, int64_t col) { return gs[size_t((ff * e + r) * H + col)]; }, x + " gate");
        expect_matrix(m.up[size_t(e)], ff, H,
                      [&](int64_t r, int64_t col) { return us[size_t((ff * e + r) * H + col)]; }, x + " up");
      }
      const std::vector<float>& ds = b.values.at(p + "ffn_down_exps.weight");
      expect_matrix(m.down[size_t(e)], H, ff,
                    [&](int64_t r, int64_t col) { return ds[size_t((H * e + r) * ff + col)]; }, x + " down");
    }
    expect_matrix(m.shared_gate, sh, H, plain(p + "ffn_gate_shexp.weight", H), p + "shared gate");
    expect_matrix(m.shared_up, sh, H, plain(p + "ffn_up_shexp.weight", H), p + "shared up");
    expect_matrix(m.shared_down, H, sh, plain(p + "ffn_down_shexp.weight", sh), p + "shared down");
    expect_matrix(m.shared_expert_gate, 1, H, plain(p + "ffn_gate_inp_shexp.weight", H),
                  p + "shared expert gate");
  }
}

TEST(GgufWeights, TheConvertersTensorsComeBackInHuggingFaceOrder) {
  check_layout({});
}

TEST(GgufWeights, FusedGateUpExpertsAndTiedEmbeddings) {
  check_layout({.fused_gate_up = true, .tied = true});
}

// Errors name the tensor and the file: a missing tensor, wrong dims, an A that is not −exp of
// anything.
TEST(GgufWeights, BadTensorsAreErrorsThatNameThem) {
  const ModelConfig c = *builtin_config("tiny");
  auto fails = [&](Builder& b, const std::string& needle) {
    std::deque<std::vector<uint8_t>> arena;
    auto w = gguf_weights(b.f, c, "bad.gguf", arena);
    ASSERT_FALSE(w.ok()) << needle;
    EXPECT_NE(w.message().find(needle), std::string::npos) << w.message();
    EXPECT_NE(w.message().find("bad.gguf"), std::string::npos) << w.message();
  };
  {
    Builder b = convert(c, {});
    std::erase_if(b.f.tensors, [](const GgufTensor& t) { return t.name == "blk.1.ssm_out.weight"; });
    fails(b, "missing tensor 'blk.1.ssm_out.weight'");
  }
  {
    Builder b = convert(c, {});
    for (auto& t : b.f.tensors)
      if (t.name == "blk.0.ffn_down_exps.weight") std::swap(t.dims[1], t.dims[2]);
    fails(b, "'blk.0.ffn_down_exps.weight' has dims {64, 8, 64}, expected {64, 64, 8}");
  }
  {
    Builder b = convert(c, {});
    for (auto& t : b.f.tensors)
      if (t.name == "blk.0.ssm_a") std::memset(const_cast<uint8_t*>(t.data.data()), 0, 4);
    fails(b, "'blk.0.ssm_a' holds 0");
  }
}

}  // namespace
}  // namespace orchid
