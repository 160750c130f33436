// Tests for synthetic checkpoints: config round trip, every tensor name/shape/dtype of both
// layouts (expected lists written here from spec §10/§11, not taken from synth.cpp), the
// mlx4 checkpoint being exactly the MLX conversion of the hf one, determinism, weight
// statistics, sharding under a byte budget, and matrices MLX would leave unquantized.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "orchid/model/config.h"
#include "orchid/model/quant.h"
#include "orchid/model/safetensors.h"
#include "orchid/model/synth.h"
#include "orchid/util/bf16.h"

namespace orchid {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& leaf) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path p = fs::path(::testing::TempDir()) /
               ("orchid_synth_" + std::to_string(::getpid()) + "_" + info->name()) / leaf;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

ModelConfig tiny() {
  return *builtin_config("tiny");
}

struct Expect {
  DType dtype;
  std::vector<int64_t> shape;
};
using TensorMap = std::map<std::string, Expect>;

// Spec §10: the HF release's names and shapes.
TensorMap hf_tensors(const ModelConfig& c) {
  const int64_t H = c.n_embd, E = c.n_expert, I = c.n_ff_exp, S = c.n_ff_shexp;
  const int64_t C = 2 * c.lin_n_head_k * c.lin_head_dim_k + c.lin_n_head_v * c.lin_head_dim_v;
  const int64_t Vd = c.lin_n_head_v * c.lin_head_dim_v, Hv = c.lin_n_head_v, D = c.head_dim;
  const DType B = DType::BF16;
  TensorMap t;
  const std::string p = "model.language_model.";
  t[p + "embed_tokens.weight"] = {B, {c.n_vocab, H}};
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = p + "layers." + std::to_string(l) + ".";
    t[h + "input_layernorm.weight"] = {B, {H}};
    t[h + "post_attention_layernorm.weight"] = {B, {H}};
    if (c.layer_types[size_t(l)] == LayerKind::full_attention) {
      t[h + "self_attn.q_proj.weight"] = {B, {c.n_head * D * 2, H}};
      t[h + "self_attn.k_proj.weight"] = {B, {c.n_head_kv * D, H}};
      t[h + "self_attn.v_proj.weight"] = {B, {c.n_head_kv * D, H}};
      t[h + "self_attn.o_proj.weight"] = {B, {H, c.n_head * D}};
      t[h + "self_attn.q_norm.weight"] = {B, {D}};
      t[h + "self_attn.k_norm.weight"] = {B, {D}};
    } else {
      t[h + "linear_attn.in_proj_qkv.weight"] = {B, {C, H}};
      t[h + "linear_attn.in_proj_z.weight"] = {B, {Vd, H}};
      t[h + "linear_attn.in_proj_b.weight"] = {B, {Hv, H}};
      t[h + "linear_attn.in_proj_a.weight"] = {B, {Hv, H}};
      t[h + "linear_attn.conv1d.weight"] = {B, {C, 1, c.lin_conv_kernel}};
      t[h + "linear_attn.A_log"] = {DType::F32, {Hv}};
      t[h + "linear_attn.dt_bias"] = {B, {Hv}};
      t[h + "linear_attn.norm.weight"] = {B, {c.lin_head_dim_v}};
      t[h + "linear_attn.out_proj.weight"] = {B, {H, Vd}};
    }
    t[h + "mlp.gate.weight"] = {B, {E, H}};
    t[h + "mlp.experts.gate_up_proj"] = {B, {E, 2 * I, H}};
    t[h + "mlp.experts.down_proj"] = {B, {E, H, I}};
    t[h + "mlp.shared_expert.gate_proj.weight"] = {B, {S, H}};
    t[h + "mlp.shared_expert.up_proj.weight"] = {B, {S, H}};
    t[h + "mlp.shared_expert.down_proj.weight"] = {B, {H, S}};
    t[h + "mlp.shared_expert_gate.weight"] = {B, {1, H}};
  }
  t[p + "norm.weight"] = {B, {H}};
  if (!c.tie_word_embeddings) t["lm_head.weight"] = {B, {c.n_vocab, H}};
  return t;
}

// Spec §11: the mlx-community names; a matrix [.., out, in] becomes .weight U32
// [.., in * bits / 32] + .scales/.biases BF16 [.., in / 64], or stays BF16 when in % 64 != 0.
TensorMap mlx_tensors(const ModelConfig& c) {
  TensorMap hf = hf_tensors(c), t;
  auto quant = [&](const std::string& base, std::vector<int64_t> shape, int bits) {
    const int64_t in = shape.back();
    if (in % 64 != 0) {
      t[base + ".weight"] = {DType::BF16, shape};
      return;
    }
    shape.back() = in * bits / 32;
    t[base + ".weight"] = {DType::U32, shape};
    shape.back() = in / 64;
    t[base + ".scales"] = {DType::BF16, shape};
    t[base + ".biases"] = {DType::BF16, shape};
  };
  for (auto [name, e] : hf) {
    std::string m = name;
    if (m.rfind("model.language_model.", 0) == 0) m = "language_model.model." + m.substr(21);
    if (m == "lm_head.weight") m = "language_model.lm_head.weight";
    const bool is_matrix =
        e.shape.size() >= 2 && m.find("conv1d") == std::string::npos;  // conv1d stays bf16
    if (m.ends_with("experts.gate_up_proj")) {
      const std::string base = m.substr(0, m.size() - strlen("experts.gate_up_proj"));
      std::vector<int64_t> half = {e.shape[0], e.shape[1] / 2, e.shape[2]};
      quant(base + "switch_mlp.gate_proj", half, 4);
      quant(base + "switch_mlp.up_proj", half, 4);
    } else if (m.ends_with("experts.down_proj")) {
      quant(m.substr(0, m.size() - strlen("experts.down_proj")) + "switch_mlp.down_proj", e.shape,
            4);
    } else if (is_matrix) {
      const std::string base = m.substr(0, m.size() - strlen(".weight"));
      const bool eight = base.ends_with("mlp.gate") || base.ends_with("shared_expert_gate");
      quant(base, e.shape, eight ? 8 : 4);
    } else if (m.ends_with("conv1d.weight")) {
      t[m] = {e.dtype, {e.shape[0], e.shape[2], 1}};
    } else {
      t[m] = e;
    }
  }
  return t;
}

void expect_tensors(const Checkpoint& ck, const TensorMap& want) {
  EXPECT_EQ(ck.size(), want.size());
  for (const auto& [name, e] : want) {
    const TensorInfo* t = ck.find(name);
    ASSERT_NE(t, nullptr) << "missing " << name;
    EXPECT_EQ(t->dtype, e.dtype) << name << " is " << dtype_name(t->dtype);
    EXPECT_EQ(t->shape, e.shape) << name;
  }
  for (const TensorInfo* t : ck.all()) EXPECT_TRUE(want.count(t->name)) << "unexpected " << t->name;
}

void expect_same_dims(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.n_vocab, b.n_vocab);
  EXPECT_EQ(a.n_embd, b.n_embd);
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.layer_types, b.layer_types);
  EXPECT_EQ(a.n_head, b.n_head);
  EXPECT_EQ(a.n_head_kv, b.n_head_kv);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.n_rot, b.n_rot);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.mrope_section, b.mrope_section);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.lin_n_head_k, b.lin_n_head_k);
  EXPECT_EQ(a.lin_n_head_v, b.lin_n_head_v);
  EXPECT_EQ(a.lin_head_dim_k, b.lin_head_dim_k);
  EXPECT_EQ(a.lin_head_dim_v, b.lin_head_dim_v);
  EXPECT_EQ(a.lin_conv_kernel, b.lin_conv_kernel);
  EXPECT_EQ(a.n_expert, b.n_expert);
  EXPECT_EQ(a.n_expert_used, b.n_expert_used);
  EXPECT_EQ(a.n_ff_exp, b.n_ff_exp);
  EXPECT_EQ(a.n_ff_shexp, b.n_ff_shexp);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
}

std::vector<float> as_f32(const TensorInfo& t) {
  std::vector<float> out(size_t(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::F32) {
      std::memcpy(&out[i], t.data.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, t.data.data() + 2 * i, 2);
      out[i] = bf16_to_f32(h);
    }
  }
  return out;
}

bool same_bytes(const TensorInfo* a, const TensorInfo* b) {
  return a && b && a->data.size() == b->data.size() &&
         std::memcmp(a->data.data(), b->data.data(), a->data.size()) == 0;
}

TEST(SynthTest, TinyHfLayout) {
  const std::string dir = fresh_dir("hf");
  const ModelConfig cfg = tiny();
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(synth_checkpoint(cfg, SynthLayout::hf, dir, 1).ok());
  std::printf(
      "[ synth    ] tiny hf: %.1f ms\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());

  auto loaded = load_config(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  expect_same_dims(*loaded, cfg);
  EXPECT_FALSE(loaded->quant.has_value());

  auto ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok()) << ck.message();
  EXPECT_EQ(ck->shard_count(), 2u);
  EXPECT_TRUE(fs::exists(dir + "/model-00001-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(dir + "/model-00002-of-00002.safetensors"));
  expect_tensors(*ck, hf_tensors(cfg));

  auto gen = nlohmann::json::parse(read_text(dir + "/generation_config.json"), nullptr, false);
  ASSERT_TRUE(gen.is_object());
  EXPECT_EQ(gen["eos_token_id"], nlohmann::json::array({cfg.n_vocab - 1}));
  EXPECT_EQ(gen["do_sample"], false);
}

TEST(SynthTest, TinyMlx4Layout) {
  const std::string dir = fresh_dir("mlx4");
  const ModelConfig cfg = tiny();
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(synth_checkpoint(cfg, SynthLayout::mlx4, dir, 1).ok());
  std::printf(
      "[ synth    ] tiny mlx4: %.1f ms\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());

  auto loaded = load_config(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  expect_same_dims(*loaded, cfg);
  ASSERT_TRUE(loaded->quant.has_value());
  EXPECT_EQ(loaded->quant->bits, 4);
  EXPECT_EQ(loaded->quant->group_size, 64);
  EXPECT_EQ(loaded->quant_overrides.size(), size_t(2 * cfg.n_layer));
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "language_model.model.layers." + std::to_string(l) + ".mlp.";
    for (const std::string& path : {p + "gate", p + "shared_expert_gate"}) {
      auto q = loaded->quant_for(path);
      ASSERT_TRUE(q.has_value()) << path;
      EXPECT_EQ(q->bits, 8) << path;
      EXPECT_EQ(q->group_size, 64) << path;
    }
    EXPECT_EQ(loaded->quant_for(p + "switch_mlp.gate_proj")->bits, 4);
  }

  auto ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok()) << ck.message();
  EXPECT_EQ(ck->shard_count(), 1u);
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
  expect_tensors(*ck, mlx_tensors(cfg));
  // 8-bit router: [E, H/4] words.
  const TensorInfo* router = ck->find("language_model.model.layers.0.mlp.gate.weight");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->shape, (std::vector<int64_t>{cfg.n_expert, cfg.n_embd / 4}));
}

// The mlx4 checkpoint of a seed is the MLX conversion of the hf checkpoint of that seed.
TEST(SynthTest, Mlx4IsTheConversionOfHf) {
  const ModelConfig cfg = tiny();
  const std::string hf_dir = fresh_dir("hf"), mlx_dir = fresh_dir("mlx4");
  ASSERT_TRUE(synth_checkpoint(cfg, SynthLayout::hf, hf_dir, 5).ok());
  ASSERT_TRUE(synth_checkpoint(cfg, SynthLayout::mlx4, mlx_dir, 5).ok());
  auto hf = Checkpoint::open(hf_dir);
  auto mlx = Checkpoint::open(mlx_dir);
  ASSERT_TRUE(hf.ok() && mlx.ok());

  // Quantizing the hf values with quantize_affine must give the stored bytes exactly.
  auto expect_quantized = [&](const std::vector<float>& w, int64_t rows, int64_t cols, int bits,
                              const std::string& base) {
    AffineQuantized q = quantize_affine(w, rows, cols, bits, 64);
    const TensorInfo* code = mlx->find(base + ".weight");
    const TensorInfo* sc = mlx->find(base + ".scales");
    const TensorInfo* bi = mlx->find(base + ".biases");
    ASSERT_TRUE(code && sc && bi) << base;
    ASSERT_EQ(code->data.size(), q.codes.size() * 4) << base;
    EXPECT_EQ(std::memcmp(code->data.data(), q.codes.data(), code->data.size()), 0) << base;
    ASSERT_EQ(sc->data.size(), q.scales.size() * 2) << base;
    EXPECT_EQ(std::memcmp(sc->data.data(), q.scales.data(), sc->data.size()), 0) << base;
    EXPECT_EQ(std::memcmp(bi->data.data(), q.biases.data(), bi->data.size()), 0) << base;
  };
  const std::string h = "model.language_model.", m = "language_model.model.";
  const TensorInfo* embed = hf->find(h + "embed_tokens.weight");
  expect_quantized(as_f32(*embed), cfg.n_vocab, cfg.n_embd, 4, m + "embed_tokens");
  expect_quantized(as_f32(*hf->find("lm_head.weight")), cfg.n_vocab, cfg.n_embd, 4,
                   "language_model.lm_head");
  expect_quantized(as_f32(*hf->find(h + "layers.2.mlp.gate.weight")), cfg.n_expert, cfg.n_embd, 8,
                   m + "layers.2.mlp.gate");
  expect_quantized(as_f32(*hf->find(h + "layers.3.self_attn.o_proj.weight")), cfg.n_embd,
                   int64_t(cfg.n_head) * cfg.head_dim, 4, m + "layers.3.self_attn.o_proj");

  // Fused gate_up_proj [E, 2I, H]: gate = rows [0, I) of each expert, up = rows [I, 2I).
  const int64_t E = cfg.n_expert, I = cfg.n_ff_exp, H = cfg.n_embd;
  std::vector<float> gu = as_f32(*hf->find(h + "layers.1.mlp.experts.gate_up_proj"));
  std::vector<float> gate, up;
  for (int64_t e = 0; e < E; ++e) {
    const float* base = gu.data() + e * 2 * I * H;
    gate.insert(gate.end(), base, base + I * H);
    up.insert(up.end(), base + I * H, base + 2 * I * H);
  }
  expect_quantized(gate, E * I, H, 4, m + "layers.1.mlp.switch_mlp.gate_proj");
  expect_quantized(up, E * I, H, 4, m + "layers.1.mlp.switch_mlp.up_proj");
  expect_quantized(as_f32(*hf->find(h + "layers.1.mlp.experts.down_proj")), E * H, I, 4,
                   m + "layers.1.mlp.switch_mlp.down_proj");

  // Zero-centred norms are stored shifted, bf16(1 + w); the gated norm is unchanged.
  for (const std::string n : {"layers.0.input_layernorm.weight", "layers.3.self_attn.q_norm.weight",
                              "layers.3.self_attn.k_norm.weight", "norm.weight",
                              "layers.1.post_attention_layernorm.weight"}) {
    std::vector<float> w = as_f32(*hf->find(h + n)), s = as_f32(*mlx->find(m + n));
    ASSERT_EQ(w.size(), s.size()) << n;
    for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(s[i], round_bf16(1.0f + w[i])) << n << i;
  }
  // conv1d: [C, 1, K] vs [C, K, 1] hold the same bytes; A_log, dt_bias, gated norm unchanged.
  for (const std::string n : {"conv1d.weight", "A_log", "dt_bias", "norm.weight"})
    EXPECT_TRUE(same_bytes(hf->find(h + "layers.0.linear_attn." + n),
                           mlx->find(m + "layers.0.linear_attn." + n)))
        << n;
}

TEST(SynthTest, DeterministicInSeedAndThreadCount) {
  const ModelConfig cfg = tiny();
  const std::string a = fresh_dir("a"), b = fresh_dir("b"), c = fresh_dir("c");
  ASSERT_TRUE(synth_checkpoint(cfg, SynthLayout::mlx4, a, 42).ok());
  SynthOptions one_thread;
  one_thread.seed = 42;
  one_thread.n_threads = 1;
  ASSERT_TRUE(synth_checkpoint(cfg, SynthLayout::mlx4, b, one_thread).ok());
  ASSERT_TRUE(synth_checkpoint(cfg, SynthLayout::mlx4, c, 43).ok());
  for (const char* f : {"model.safetensors", "config.json", "generation_config.json"})
    EXPECT_EQ(read_text(a + "/" + f), read_text(b + "/" + f)) << f;
  EXPECT_NE(read_text(a + "/model.safetensors"), read_text(c + "/model.safetensors"));

  auto ca = Checkpoint::open(a);
  auto cc = Checkpoint::open(c);
  ASSERT_TRUE(ca.ok() && cc.ok());
  size_t differing = 0;
  for (const TensorInfo* t : ca->all()) differing += !same_bytes(t, cc->find(t->name));
  EXPECT_EQ(differing, ca->size()) << "every tensor should change with the seed";
}

TEST(SynthTest, WeightStatistics) {
  const ModelConfig cfg = tiny();
  const std::string dir = fresh_dir("hf");
  ASSERT_TRUE(synth_checkpoint(cfg, SynthLayout::hf, dir, 3).ok());
  auto ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok());
  auto stats = [&](const std::string& name, float* mean, float* sd, float* lo, float* hi) {
    const TensorInfo* t = ck->find(name);
    ASSERT_NE(t, nullptr) << name;
    std::vector<float> v = as_f32(*t);
    double s = 0, s2 = 0;
    *lo = INFINITY, *hi = -INFINITY;
    for (float x : v) s += x, s2 += double(x) * x, *lo = std::min(*lo, x), *hi = std::max(*hi, x);
    *mean = float(s / v.size());
    *sd = float(std::sqrt(s2 / v.size() - (s / v.size()) * (s / v.size())));
  };
  const std::string h = "model.language_model.";
  const float inv_h = 1.0f / std::sqrt(float(cfg.n_embd));
  struct Normal {
    std::string name;
    float sd;
  } normals[] = {
      {h + "embed_tokens.weight", 1.0f},
      {"lm_head.weight", 4.0f * inv_h},
      {h + "layers.0.mlp.gate.weight", 3.0f * inv_h},
      {h + "layers.0.linear_attn.in_proj_qkv.weight", inv_h},
      {h + "layers.0.mlp.experts.gate_up_proj", inv_h},
      {h + "layers.0.mlp.experts.down_proj", 1.0f / std::sqrt(float(cfg.n_ff_exp))},
      {h + "layers.0.linear_attn.conv1d.weight", 0.5f},
  };
  float mean, sd, lo, hi;
  for (const auto& n : normals) {
    stats(n.name, &mean, &sd, &lo, &hi);
    EXPECT_NEAR(sd, n.sd, 0.1f * n.sd) << n.name;
    EXPECT_NEAR(mean, 0.0f, 0.1f * n.sd) << n.name;
  }
  struct Uniform {
    std::string name;
    float lo, hi;
  } uniforms[] = {
      {h + "layers.0.input_layernorm.weight", -0.5f, 0.5f},
      {h + "norm.weight", -0.5f, 0.5f},
      {h + "layers.3.self_attn.q_norm.weight", -0.5f, 0.5f},
      {h + "layers.0.linear_attn.norm.weight", 0.5f, 1.5f},
      {h + "layers.0.linear_attn.dt_bias", -1.0f, 1.0f},
      {h + "layers.0.linear_attn.A_log", -1.0f, 1.0f},
  };
  for (const auto& u : uniforms) {
    stats(u.name, &mean, &sd, &lo, &hi);
    EXPECT_GE(lo, u.lo) << u.name;
    EXPECT_LE(hi, u.hi) << u.name;
    EXPECT_GT(sd, 0.15f * (u.hi - u.lo)) << u.name << " should be spread (U has sd 0.29 width)";
  }
  // A_log is stored F32 but holds bf16-exact values (what an HF bf16 run would see).
  for (float x : as_f32(*ck->find(h + "layers.0.linear_attn.A_log"))) EXPECT_EQ(x, round_bf16(x));
}

TEST(SynthTest, ShardsStayNearTheByteBudget) {
  const ModelConfig cfg = tiny();
  const std::string small = fresh_dir("small"), two = fresh_dir("two");
  SynthOptions o;
  o.seed = 9;
  o.shard_bytes = 64 * 1024;
  std::vector<int> reported;
  o.on_shard_written = [&](int k, int n) { reported.push_back(k * 1000 + n); };
  ASSERT_TRUE(synth_checkpoint(cfg, SynthLayout::hf, small, o).ok());
  ASSERT_TRUE(synth_checkpoint(cfg, SynthLayout::hf, two, 9).ok());
  auto a = Checkpoint::open(small);
  auto b = Checkpoint::open(two);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(a->shard_count(), 4u);
  ASSERT_EQ(reported.size(), a->shard_count());
  EXPECT_EQ(reported.back(), int(a->shard_count() - 1) * 1000 + int(a->shard_count()));
  uint64_t largest = 0;
  for (const TensorInfo* t : a->all()) largest = std::max<uint64_t>(largest, t->nbytes());
  for (const auto& e : fs::directory_iterator(small)) {
    if (e.path().extension() != ".safetensors") continue;
    EXPECT_LE(e.file_size(), 2 * o.shard_bytes + largest + 65536) << e.path();
  }
  // The values do not depend on how the checkpoint is cut.
  ASSERT_EQ(a->size(), b->size());
  for (const TensorInfo* t : a->all()) EXPECT_TRUE(same_bytes(t, b->find(t->name))) << t->name;
  auto index = nlohmann::json::parse(read_text(small + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), a->total_bytes());
}

TEST(SynthTest, MatricesWithInputNotMultipleOf64StayBf16) {
  ModelConfig cfg = tiny();
  cfg.n_ff_exp = 48;    // switch_mlp.down_proj input
  cfg.n_ff_shexp = 96;  // shared_expert.down_proj input
  cfg.tie_word_embeddings = true;
  const std::string dir = fresh_dir("mlx4");
  ASSERT_TRUE(synth_checkpoint(cfg, SynthLayout::mlx4, dir).ok());
  auto ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok()) << ck.message();
  expect_tensors(*ck, mlx_tensors(cfg));
  const std::string m = "language_model.model.layers.0.mlp.";
  EXPECT_EQ(ck->find(m + "switch_mlp.down_proj.weight")->dtype, DType::BF16);
  EXPECT_EQ(ck->find(m + "switch_mlp.down_proj.scales"), nullptr);
  EXPECT_EQ(ck->find(m + "shared_expert.down_proj.weight")->dtype, DType::BF16);
  EXPECT_EQ(ck->find(m + "switch_mlp.gate_proj.weight")->dtype, DType::U32);
  EXPECT_EQ(ck->find("language_model.lm_head.weight"), nullptr);  // tied
  auto loaded = load_config(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  expect_same_dims(*loaded, cfg);
}

TEST(SynthTest, RejectsInconsistentConfig) {
  ModelConfig cfg = tiny();
  cfg.layer_types.pop_back();
  Status s = synth_checkpoint(cfg, SynthLayout::hf, fresh_dir("x"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("layer_types"), std::string::npos) << s.message();
}

TEST(SynthTest, LayoutNames) {
  EXPECT_EQ(parse_synth_layout("hf"), SynthLayout::hf);
  EXPECT_EQ(parse_synth_layout("mlx4"), SynthLayout::mlx4);
  EXPECT_FALSE(parse_synth_layout("gguf").has_value());
  EXPECT_EQ(synth_layout_name(SynthLayout::mlx4), "mlx4");
}

// Speed/memory sanity at real dimensions, 4 layers (3 linear + 1 full), 16 experts: ~1.3 B
// parameters, most of them in embedding + lm_head. Run by hand:
//   orchid_tests --gtest_also_run_disabled_tests --gtest_filter='*SynthMedium*'
// ORCHID_SYNTH_DIR picks the output folder (default: the gtest temp dir); it is removed after.
TEST(SynthTest, DISABLED_SynthMedium) {
  ModelConfig cfg = *builtin_config("qwen3.6-35b-a3b");
  cfg.n_layer = 4;
  cfg.layer_types.resize(4);
  cfg.n_expert = 16;
  const char* env = std::getenv("ORCHID_SYNTH_DIR");
  const std::string root = env ? std::string(env) : fresh_dir("medium");
  for (SynthLayout layout : {SynthLayout::mlx4, SynthLayout::hf}) {
    const std::string dir = root + "/" + std::string(synth_layout_name(layout));
    SynthOptions o;
    o.shard_bytes = 1'000'000'000;
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(synth_checkpoint(cfg, layout, dir, o).ok());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto ck = Checkpoint::open(dir);
    ASSERT_TRUE(ck.ok()) << ck.message();
    expect_tensors(*ck, layout == SynthLayout::hf ? hf_tensors(cfg) : mlx_tensors(cfg));
    std::printf("[ synth    ] medium %s: %.2f s, %.2f GB in %zu shards, %.2f GB/s\n",
                std::string(synth_layout_name(layout)).c_str(), s, ck->total_bytes() / 1e9,
                ck->shard_count(), ck->total_bytes() / 1e9 / s);
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace orchid
