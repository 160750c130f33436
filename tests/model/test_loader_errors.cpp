// Tests for load_model: every golden fixture loads with the right layout, storage and norm
// convention (HF raw norms + 1, MLX stored as is); --quantize q4 makes MLX-style 4-bit experts
// and 8-bit router; and each bad input (missing files, wrong model_type, missing tensor, wrong
// shape or dtype, mis-packed quantized tensor, truncated shard, malformed index, ...) is one
// error that names the file or tensor and what was expected. Bad inputs are built in a scratch
// directory from a synth_checkpoint output or a fixture copy, then broken.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../test_util.h"
#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/model/config.h"
#include "orchid/model/model.h"
#include "orchid/model/safetensors.h"
#include "orchid/model/synth.h"
#include "orchid/util/bf16.h"

namespace orchid {
namespace {

using json = nlohmann::json;
using test::contains;
using test::golden;
using test::ScratchDir;

const std::string kHf = "model.language_model.";   // HF tensor prefix
const std::string kMlx = "language_model.model.";  // MLX tensor prefix

// ---- Helpers ----

Expected<std::unique_ptr<Model>> load(const std::string& dir, bool q4 = false) {
  LoadOptions o;
  o.quantize_q4 = q4;
  return load_model(dir, o);
}

// Loads `dir`, expecting an error that contains every piece.
void expect_load_error(const std::string& dir, std::initializer_list<std::string> pieces) {
  auto m = load(dir);
  ASSERT_FALSE(m.ok()) << "expected an error loading " << dir;
  for (const auto& p : pieces) EXPECT_TRUE(contains(m.message(), p));
}

// Every tensor of a checkpoint, copied out of the mapped files so they can be rewritten.
struct OwnedTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

struct Tensors {
  std::vector<OwnedTensor> list;
  int n_shards = 1;

  OwnedTensor& at(const std::string& name) {
    for (auto& t : list)
      if (t.name == name) return t;
    ADD_FAILURE() << "no tensor " << name;
    static OwnedTensor none;
    return none;
  }
  void erase(const std::string& name) {
    size_t before = list.size();
    std::erase_if(list, [&](const OwnedTensor& t) { return t.name == name; });
    EXPECT_EQ(list.size() + 1, before) << "no tensor " << name;
  }
};

Tensors read_tensors(const std::string& dir) {
  Tensors out;
  auto ck = Checkpoint::open(dir);
  EXPECT_TRUE(ck.ok()) << ck.message();
  if (!ck) return out;
  out.n_shards = int(ck->shard_count());
  for (const TensorInfo* t : ck->all())
    out.list.push_back({t->name, t->dtype, t->shape, {t->data.begin(), t->data.end()}});
  return out;
}

void write_tensors(const std::string& dir, const Tensors& ts) {
  std::vector<TensorToWrite> w;
  for (const auto& t : ts.list) w.push_back({t.name, t.dtype, t.shape, t.bytes});
  Status s = write_sharded_checkpoint(dir, w, ts.n_shards);
  ASSERT_TRUE(s.ok()) << s.message();
}

// Reads the checkpoint in `dir`, applies `edit`, writes it back with the same shard count.
void edit_tensors(const std::string& dir, const std::function<void(Tensors&)>& edit) {
  Tensors ts = read_tensors(dir);
  edit(ts);
  write_tensors(dir, ts);
}

void edit_config(const std::string& dir, const std::function<void(json&)>& edit) {
  json j = json::parse(test::read_text(dir + "/config.json"));
  edit(j);
  test::write_text(dir + "/config.json", j.dump(2));
}

// A tiny synthetic model (builtin "tiny": hidden 64, 4 layers, 8 experts) in `dir`.
std::string synth_tiny(const ScratchDir& scratch, SynthLayout layout, const char* leaf = "m") {
  std::string dir = scratch / leaf;
  Status s = synth_checkpoint(*builtin_config("tiny"), layout, dir, /*seed=*/7);
  EXPECT_TRUE(s.ok()) << s.message();
  return dir;
}

std::vector<float> row(const QuantMatrix& m, int64_t r) {
  std::vector<float> v(size_t(m.cols));
  m.dequant_row(r, v.data());
  return v;
}

float bf16_at(const TensorInfo& t, int64_t i) {
  uint16_t h;
  std::memcpy(&h, t.data.data() + 2 * i, 2);
  return bf16_to_f32(h);
}

// Reads a float tensor's element i (F32 or BF16).
float float_at(const TensorInfo& t, int64_t i) {
  if (t.dtype == DType::F32) {
    float f;
    std::memcpy(&f, t.data.data() + 4 * i, 4);
    return f;
  }
  return bf16_at(t, i);
}

void expect_dense(const QuantMatrix& m, int64_t rows, int64_t cols) {
  EXPECT_FALSE(m.quantized());
  EXPECT_EQ(m.dtype, DType::BF16);
  EXPECT_EQ(m.bits, 16);
  EXPECT_EQ(m.rows, rows);
  EXPECT_EQ(m.cols, cols);
  EXPECT_NE(m.data, nullptr);
}

void expect_affine(const QuantMatrix& m, int bits, int64_t rows, int64_t cols) {
  EXPECT_TRUE(m.quantized());
  EXPECT_EQ(m.bits, bits);
  EXPECT_EQ(m.group, 64);
  EXPECT_EQ(m.rows, rows);
  EXPECT_EQ(m.cols, cols);
  EXPECT_NE(m.data, nullptr);
  EXPECT_NE(m.scales, nullptr);
  EXPECT_NE(m.biases, nullptr);
}

// ---- The fixtures load ----

TEST(Loader, TinyHfFixture) {
  auto lm = load(golden("tiny/hf"));
  ASSERT_TRUE(lm.ok()) << lm.message();
  const Model& m = **lm;
  const ModelConfig& c = m.config;
  EXPECT_EQ(m.layout, Layout::hf);
  EXPECT_EQ(m.layout_name(), "hf");
  EXPECT_EQ(m.checkpoint->shard_count(), 2u);
  const Weights& w = m.weights;
  expect_dense(w.tok_embd, 512, 64);
  expect_dense(w.output, 512, 64);
  ASSERT_EQ(w.layers.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const LayerWeights& L = w.layers[size_t(i)];
    if (c.layer_types[size_t(i)] == LayerKind::full_attention) {
      expect_dense(L.attn.q_proj, 8 * 32 * 2, 64);
      expect_dense(L.attn.k_proj, 32, 64);
      expect_dense(L.attn.o_proj, 64, 8 * 32);
      EXPECT_EQ(L.attn.q_norm.size(), 32u);
      EXPECT_EQ(L.gdn.in_proj_qkv.data, nullptr);
    } else {
      expect_dense(L.gdn.in_proj_qkv, 256, 64);
      expect_dense(L.gdn.in_proj_a, 4, 64);
      expect_dense(L.gdn.out_proj, 64, 128);
      EXPECT_EQ(L.gdn.conv.size(), size_t(256 * 4));
      EXPECT_EQ(L.attn.q_proj.data, nullptr);
    }
    expect_dense(L.moe.router, 8, 64);
    ASSERT_EQ(L.moe.gate.size(), 8u);
    ASSERT_EQ(L.moe.up.size(), 8u);
    ASSERT_EQ(L.moe.down.size(), 8u);
    for (int e = 0; e < 8; ++e) {
      expect_dense(L.moe.gate[size_t(e)], 64, 64);
      expect_dense(L.moe.down[size_t(e)], 64, 64);
    }
    expect_dense(L.moe.shared_expert_gate, 1, 64);
  }
}

TEST(Loader, HfNormsAreOnePlusRawAndFusedExpertsSplit) {
  auto lm = load(golden("tiny/hf"));
  ASSERT_TRUE(lm.ok()) << lm.message();
  const Model& m = **lm;
  const Checkpoint& ck = *m.checkpoint;
  const LayerWeights& L0 = m.weights.layers[0];
  const LayerWeights& L3 = m.weights.layers[3];

  auto check_shifted = [&](const std::string& name, const std::vector<float>& eff, bool shift) {
    const TensorInfo* t = ck.find(name);
    ASSERT_NE(t, nullptr) << name;
    ASSERT_EQ(int64_t(eff.size()), t->numel()) << name;
    for (size_t i = 0; i < eff.size(); ++i)
      ASSERT_EQ(eff[i], float_at(*t, int64_t(i)) + (shift ? 1.f : 0.f)) << name << "[" << i << "]";
  };
  const std::string p0 = kHf + "layers.0.", p3 = kHf + "layers.3.";
  check_shifted(p0 + "input_layernorm.weight", L0.attn_norm, true);
  check_shifted(p0 + "post_attention_layernorm.weight", L0.post_attn_norm, true);
  check_shifted(kHf + "norm.weight", m.weights.output_norm, true);
  check_shifted(p3 + "self_attn.q_norm.weight", L3.attn.q_norm, true);
  check_shifted(p3 + "self_attn.k_norm.weight", L3.attn.k_norm, true);
  // Plain (not zero-centred) vectors stay as stored.
  check_shifted(p0 + "linear_attn.norm.weight", L0.gdn.norm, false);
  check_shifted(p0 + "linear_attn.A_log", L0.gdn.A_log, false);
  check_shifted(p0 + "linear_attn.dt_bias", L0.gdn.dt_bias, false);
  // HF conv [C, 1, K] is read as [C, K] in the same element order.
  check_shifted(p0 + "linear_attn.conv1d.weight", L0.gdn.conv, false);

  // gate_up_proj [E, 2I, H]: gate = first I rows of each expert, up = the next I.
  const TensorInfo* gu = ck.find(p0 + "mlp.experts.gate_up_proj");
  ASSERT_NE(gu, nullptr);
  const int64_t I = 64, H = 64;
  for (int64_t e : {0, 5}) {
    for (int64_t r : {0, 63}) {
      auto g = row(L0.moe.gate[size_t(e)], r), u = row(L0.moe.up[size_t(e)], r);
      for (int64_t k = 0; k < H; ++k) {
        ASSERT_EQ(g[size_t(k)], bf16_at(*gu, (e * 2 * I + r) * H + k));
        ASSERT_EQ(u[size_t(k)], bf16_at(*gu, (e * 2 * I + I + r) * H + k));
      }
    }
  }
}

TEST(Loader, TinyMlx4Fixture) {
  auto lm = load(golden("tiny/mlx4"));
  ASSERT_TRUE(lm.ok()) << lm.message();
  const Model& m = **lm;
  EXPECT_EQ(m.layout, Layout::mlx);
  EXPECT_EQ(m.layout_name(), "mlx");
  expect_affine(m.weights.tok_embd, 4, 512, 64);
  expect_affine(m.weights.output, 4, 512, 64);
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const LayerWeights& L = m.weights.layers[i];
    expect_affine(L.moe.router, 8, 8, 64);
    expect_affine(L.moe.shared_expert_gate, 8, 1, 64);
    expect_affine(L.moe.shared_gate, 4, 64, 64);
    ASSERT_EQ(L.moe.gate.size(), 8u);
    for (size_t e = 0; e < 8; ++e) {
      expect_affine(L.moe.gate[e], 4, 64, 64);
      expect_affine(L.moe.up[e], 4, 64, 64);
      expect_affine(L.moe.down[e], 4, 64, 64);
    }
    if (i == 3) {
      expect_affine(L.attn.q_proj, 4, 512, 64);
    } else {
      expect_affine(L.gdn.in_proj_b, 4, 4, 64);
      expect_affine(L.gdn.out_proj, 4, 64, 128);
    }
  }
  // MLX norms are stored already shifted: used as stored.
  const Checkpoint& ck = *m.checkpoint;
  const TensorInfo* n0 = ck.find(kMlx + "layers.0.input_layernorm.weight");
  const TensorInfo* nf = ck.find(kMlx + "norm.weight");
  const TensorInfo* qn = ck.find(kMlx + "layers.3.self_attn.q_norm.weight");
  const TensorInfo* conv = ck.find(kMlx + "layers.0.linear_attn.conv1d.weight");
  ASSERT_TRUE(n0 && nf && qn && conv);
  EXPECT_EQ(conv->shape, (std::vector<int64_t>{256, 4, 1}));
  for (int64_t i = 0; i < 64; ++i) {
    EXPECT_EQ(m.weights.layers[0].attn_norm[size_t(i)], bf16_at(*n0, i));
    EXPECT_EQ(m.weights.output_norm[size_t(i)], bf16_at(*nf, i));
  }
  for (int64_t i = 0; i < 32; ++i)
    EXPECT_EQ(m.weights.layers[3].attn.q_norm[size_t(i)], bf16_at(*qn, i));
  for (int64_t i = 0; i < 256 * 4; ++i)
    ASSERT_EQ(m.weights.layers[0].gdn.conv[size_t(i)], bf16_at(*conv, i));
}

TEST(Loader, OddHfFixturePerExpert) {
  auto lm = load(golden("odd/hf"));
  ASSERT_TRUE(lm.ok()) << lm.message();
  const Model& m = **lm;
  EXPECT_EQ(m.layout, Layout::hf);
  EXPECT_FALSE(m.config.nested);
  ASSERT_NE(m.checkpoint->find(kHf + "layers.0.mlp.experts.4.down_proj.weight"), nullptr);
  expect_dense(m.weights.tok_embd, 1003, 128);
  ASSERT_EQ(m.weights.layers.size(), 5u);
  for (const LayerWeights& L : m.weights.layers) {
    ASSERT_EQ(L.moe.gate.size(), 5u);
    for (size_t e = 0; e < 5; ++e) {
      expect_dense(L.moe.gate[e], 96, 128);
      expect_dense(L.moe.up[e], 96, 128);
      expect_dense(L.moe.down[e], 128, 96);
    }
    expect_dense(L.moe.router, 5, 128);
    expect_dense(L.moe.shared_down, 128, 64);
  }
  expect_dense(m.weights.layers[1].attn.q_proj, 6 * 48 * 2, 128);
  expect_dense(m.weights.layers[1].attn.k_proj, 2 * 48, 128);
  EXPECT_EQ(m.weights.layers[1].attn.q_norm.size(), 48u);
  expect_dense(m.weights.layers[0].gdn.in_proj_qkv, 2 * 3 * 32 + 6 * 48, 128);
}

TEST(Loader, OddMlx4Fixture) {
  auto lm = load(golden("odd/mlx4"));
  ASSERT_TRUE(lm.ok()) << lm.message();
  const Model& m = **lm;
  EXPECT_EQ(m.layout, Layout::mlx);
  expect_affine(m.weights.tok_embd, 4, 1003, 128);
  for (const LayerWeights& L : m.weights.layers) {
    expect_affine(L.moe.router, 8, 5, 128);
    expect_affine(L.moe.shared_expert_gate, 8, 1, 128);
    ASSERT_EQ(L.moe.gate.size(), 5u);
    for (size_t e = 0; e < 5; ++e) {
      expect_affine(L.moe.gate[e], 4, 96, 128);
      // Input dim 96 is not a multiple of 64: MLX leaves the matrix bf16.
      expect_dense(L.moe.down[e], 128, 96);
    }
  }
}

TEST(Loader, HfAndMlx4OfOneSeedAreTheSameModel) {
  ScratchDir d;
  std::string hf = synth_tiny(d, SynthLayout::hf, "hf"),
              mlx = synth_tiny(d, SynthLayout::mlx4, "mlx");
  auto a = load(hf), b = load(mlx);
  ASSERT_TRUE(a.ok()) << a.message();
  ASSERT_TRUE(b.ok()) << b.message();
  const Weights& wa = (*a)->weights;
  const Weights& wb = (*b)->weights;
  // HF: 1 + w in fp32; MLX stores bf16(1 + w).
  for (size_t i = 0; i < wa.output_norm.size(); ++i)
    EXPECT_EQ(round_bf16(wa.output_norm[i]), wb.output_norm[i]);
  for (size_t l = 0; l < 4; ++l) {
    for (size_t i = 0; i < 64; ++i) {
      EXPECT_EQ(round_bf16(wa.layers[l].attn_norm[i]), wb.layers[l].attn_norm[i]);
      EXPECT_EQ(round_bf16(wa.layers[l].post_attn_norm[i]), wb.layers[l].post_attn_norm[i]);
    }
    EXPECT_EQ(wa.layers[l].gdn.conv, wb.layers[l].gdn.conv);
    EXPECT_EQ(wa.layers[l].gdn.A_log, wb.layers[l].gdn.A_log);
    EXPECT_EQ(wa.layers[l].gdn.norm, wb.layers[l].gdn.norm);
  }
  for (size_t i = 0; i < 32; ++i)
    EXPECT_EQ(round_bf16(wa.layers[3].attn.k_norm[i]), wb.layers[3].attn.k_norm[i]);
}

TEST(Loader, QuantizeQ4OnTinyHf) {
  auto lm = load(golden("tiny/hf"), /*q4=*/true);
  ASSERT_TRUE(lm.ok()) << lm.message();
  auto dense = load(golden("tiny/hf"));
  ASSERT_TRUE(dense.ok()) << dense.message();
  const Weights& w = (*lm)->weights;
  EXPECT_EQ((*lm)->layout, Layout::hf);
  expect_affine(w.tok_embd, 4, 512, 64);
  expect_affine(w.output, 4, 512, 64);
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const LayerWeights& L = w.layers[i];
    expect_affine(L.moe.router, 8, 8, 64);
    expect_affine(L.moe.shared_expert_gate, 8, 1, 64);
    expect_affine(L.moe.shared_up, 4, 64, 64);
    for (size_t e = 0; e < 8; ++e) {
      expect_affine(L.moe.gate[e], 4, 64, 64);
      expect_affine(L.moe.up[e], 4, 64, 64);
      expect_affine(L.moe.down[e], 4, 64, 64);
    }
  }
  // Quantized rows stay close to the bf16 originals (4-bit: within a group's step size).
  const QuantMatrix& q = w.layers[0].moe.up[3];
  const QuantMatrix& d = (*dense)->weights.layers[0].moe.up[3];
  for (int64_t r = 0; r < 64; r += 9) {
    auto a = row(q, r), b = row(d, r);
    float lo = *std::min_element(b.begin(), b.end()), hi = *std::max_element(b.begin(), b.end());
    for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], b[k], (hi - lo) / 15 * 0.51 + 1e-2);
  }
  auto r8 = row(w.layers[1].moe.router, 2), d8 = row((*dense)->weights.layers[1].moe.router, 2);
  for (size_t k = 0; k < r8.size(); ++k) EXPECT_NEAR(r8[k], d8[k], 0.05);
}

TEST(Loader, QuantizeQ4LeavesNonMultipleOf64AndMlxAlone) {
  auto odd = load(golden("odd/hf"), /*q4=*/true);
  ASSERT_TRUE(odd.ok()) << odd.message();
  const LayerWeights& L = (*odd)->weights.layers[0];
  expect_affine(L.moe.gate[0], 4, 96, 128);
  expect_dense(L.moe.down[0], 128, 96);  // 96 columns do not split into 64-wide groups
  expect_affine(L.moe.router, 8, 5, 128);

  auto mlx = load(golden("tiny/mlx4"), /*q4=*/true);
  ASSERT_TRUE(mlx.ok()) << mlx.message();
  expect_affine((*mlx)->weights.layers[0].moe.router, 8, 8, 64);
  expect_affine((*mlx)->weights.layers[0].moe.gate[0], 4, 64, 64);
}

TEST(Loader, TiedEmbeddingsWithoutLmHead) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::hf);
  edit_tensors(dir, [](Tensors& ts) { ts.erase("lm_head.weight"); });
  expect_load_error(dir, {"lm_head.weight", "tie_word_embeddings"});
  edit_config(dir, [](json& j) { j["tie_word_embeddings"] = true; });
  auto m = load(dir);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ((*m)->weights.output.data, (*m)->weights.tok_embd.data);
}

// ---- Missing or malformed files ----

TEST(LoaderErrors, MissingConfigJson) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  test::fs::remove(dir + "/config.json");
  expect_load_error(dir, {dir + "/config.json", "cannot open"});
}

TEST(LoaderErrors, NonexistentDirectory) {
  expect_load_error("/nonexistent/orchid/model", {"/nonexistent/orchid/model/config.json"});
}

TEST(LoaderErrors, MissingSafetensors) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  test::fs::remove(dir + "/model.safetensors");
  expect_load_error(dir, {"model.safetensors", dir});
}

TEST(LoaderErrors, MissingShardNamedByIndex) {
  ScratchDir d;
  std::string dir = test::copy_dir(golden("tiny/hf"), d / "m");
  test::fs::remove(dir + "/model-00002-of-00002.safetensors");
  expect_load_error(dir, {"model.safetensors.index.json", "model-00002-of-00002.safetensors"});
}

TEST(LoaderErrors, MalformedConfigJson) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  test::write_text(dir + "/config.json", "{\"model_type\": \"qwen3_5_moe\", \"text_config\": {");
  expect_load_error(dir, {dir + "/config.json", "not valid JSON"});
}

TEST(LoaderErrors, WrongModelType) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::hf);
  edit_config(dir, [](json& j) { j["model_type"] = "qwen3_next"; });
  expect_load_error(dir, {"config.json", "model_type", "qwen3_next"});
}

TEST(LoaderErrors, UnsupportedQuantizationInConfig) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  edit_config(dir, [](json& j) {
    j["quantization"]["bits"] = 2;
    j["quantization_config"]["bits"] = 2;
  });
  expect_load_error(dir, {"config.json", "bits 2"});
}

TEST(LoaderErrors, MalformedIndexJson) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::hf);
  test::write_text(dir + "/model.safetensors.index.json", "{\"weight_map\": {\"a\": ");
  expect_load_error(dir, {"model.safetensors.index.json", "JSON"});
  test::write_text(dir + "/model.safetensors.index.json", "{\"metadata\": {}}");
  expect_load_error(dir, {"model.safetensors.index.json", "weight_map"});
}

TEST(LoaderErrors, TruncatedShard) {
  ScratchDir d;
  std::string dir = test::copy_dir(golden("tiny/hf"), d / "m");
  const std::string shard = dir + "/model-00001-of-00002.safetensors";
  test::truncate_file(shard, test::fs::file_size(shard) / 2);
  expect_load_error(dir, {"model-00001-of-00002.safetensors"});
}

TEST(LoaderErrors, TruncatedSingleFile) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  const std::string file = dir + "/model.safetensors";
  const std::string whole = test::read_text(file);
  for (size_t keep : {size_t(0), size_t(5), size_t(200), whole.size() / 2, whole.size() - 1}) {
    SCOPED_TRACE(keep);
    test::write_text(file, whole.substr(0, keep));
    expect_load_error(dir, {file});
  }
  test::write_text(file, whole);
  EXPECT_TRUE(load(dir).ok());
}

TEST(LoaderErrors, NoEmbeddingTensor) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::hf);
  edit_tensors(dir, [](Tensors& ts) { ts.erase(kHf + "embed_tokens.weight"); });
  expect_load_error(dir, {"embed_tokens.weight", dir});
}

// ---- Missing tensors, wrong shapes and dtypes ----

TEST(LoaderErrors, MissingTensor) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::hf);
  const std::string name = kHf + "layers.2.linear_attn.in_proj_z.weight";
  edit_tensors(dir, [&](Tensors& ts) { ts.erase(name); });
  expect_load_error(dir, {"missing tensor", name});
}

TEST(LoaderErrors, MissingNormAndExpertTensors) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::hf);
  const std::string norm = kHf + "layers.3.self_attn.k_norm.weight";
  edit_tensors(dir, [&](Tensors& ts) { ts.erase(norm); });
  expect_load_error(dir, {"missing tensor", norm});

  std::string dir2 = synth_tiny(d, SynthLayout::hf, "m2");
  const std::string down = kHf + "layers.1.mlp.experts.down_proj";
  edit_tensors(dir2, [&](Tensors& ts) { ts.erase(down); });
  expect_load_error(dir2, {"missing tensor", down});

  // Per-expert layout: one expert's tensor gone.
  std::string dir3 = test::copy_dir(golden("odd/hf"), d / "odd");
  const std::string up = kHf + "layers.4.mlp.experts.3.up_proj.weight";
  edit_tensors(dir3, [&](Tensors& ts) { ts.erase(up); });
  expect_load_error(dir3, {"missing tensor", up});

  // MLX stacked experts: up_proj gone while gate_proj is there.
  std::string dir4 = synth_tiny(d, SynthLayout::mlx4, "mlx");
  const std::string sw = kMlx + "layers.0.mlp.switch_mlp.up_proj.weight";
  edit_tensors(dir4, [&](Tensors& ts) { ts.erase(sw); });
  expect_load_error(dir4, {"missing tensor", sw});
}

TEST(LoaderErrors, WrongShapeMatrix) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::hf);
  const std::string name = kHf + "layers.3.self_attn.k_proj.weight";  // [32, 64]
  edit_tensors(dir, [&](Tensors& ts) {
    OwnedTensor& t = ts.at(name);
    t.shape = {64, 64};
    t.bytes.resize(64 * 64 * 2);
  });
  expect_load_error(dir, {name, "[64,64]", "expected [32,64]", ".safetensors"});
}

TEST(LoaderErrors, WrongShapeVectorsAndConv) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::hf);
  const std::string norm = kHf + "layers.1.post_attention_layernorm.weight";  // [64]
  edit_tensors(dir, [&](Tensors& ts) {
    OwnedTensor& t = ts.at(norm);
    t.shape = {32};
    t.bytes.resize(32 * 2);
  });
  expect_load_error(dir, {norm, "[32]", "expected [64]"});

  std::string dir2 = synth_tiny(d, SynthLayout::hf, "m2");
  const std::string conv = kHf + "layers.0.linear_attn.conv1d.weight";  // [256, 1, 4]
  edit_tensors(dir2, [&](Tensors& ts) { ts.at(conv).shape = {256, 4}; });
  expect_load_error(dir2, {conv, "[256,4]", "expected [256,1,4]"});

  std::string dir3 = synth_tiny(d, SynthLayout::hf, "m3");
  const std::string gu = kHf + "layers.2.mlp.experts.gate_up_proj";  // [8, 128, 64]
  edit_tensors(dir3, [&](Tensors& ts) { ts.at(gu).shape = {8, 64, 128}; });
  expect_load_error(dir3, {gu, "[8,64,128]", "expected [8,128,64]"});
}

TEST(LoaderErrors, ConfigDimsDisagreeWithTensors) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::hf);
  edit_config(dir, [](json& j) { j["text_config"]["vocab_size"] = 600; });
  expect_load_error(dir, {kHf + "embed_tokens.weight", "[512,64]", "expected [600,64]"});

  std::string dir2 = synth_tiny(d, SynthLayout::mlx4, "mlx");
  edit_config(dir2, [](json& j) { j["text_config"]["moe_intermediate_size"] = 32; });
  expect_load_error(dir2, {kMlx + "layers.0.mlp.switch_mlp.gate_proj.weight", "expected [8,32,8]"});
}

TEST(LoaderErrors, WrongDtypeMatrix) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::hf);
  const std::string name = kHf + "layers.0.mlp.shared_expert.up_proj.weight";  // BF16 [64, 64]
  edit_tensors(dir, [&](Tensors& ts) {
    OwnedTensor& t = ts.at(name);
    t.dtype = DType::I32;
    t.bytes.assign(64 * 64 * 4, 0);
  });
  expect_load_error(dir, {name, "I32", "BF16"});
}

TEST(LoaderErrors, WrongDtypeVectorAndConv) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::hf);
  const std::string name = kHf + "norm.weight";
  edit_tensors(dir, [&](Tensors& ts) {
    OwnedTensor& t = ts.at(name);
    t.dtype = DType::I16;  // same byte size as BF16
  });
  expect_load_error(dir, {name, "I16", "BF16"});

  std::string dir2 = synth_tiny(d, SynthLayout::hf, "m2");
  const std::string conv = kHf + "layers.1.linear_attn.conv1d.weight";
  edit_tensors(dir2, [&](Tensors& ts) { ts.at(conv).dtype = DType::U16; });
  expect_load_error(dir2, {conv, "BF16"});
}

// ---- MLX quantized tensors ----

TEST(LoaderErrors, QuantizedWeightWithFloatDtype) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  const std::string name = kMlx + "layers.1.linear_attn.out_proj.weight";  // U32 [64, 16]
  edit_tensors(dir, [&](Tensors& ts) {
    OwnedTensor& t = ts.at(name);
    t.dtype = DType::BF16;
    t.shape = {64, 32};
  });
  expect_load_error(dir, {name, "BF16", "expected U32"});
}

TEST(LoaderErrors, PackedWidthNotMatchingAnyBits) {
  // No quantization section: bits are inferred from the packed width, which fits neither.
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  edit_config(dir, [](json& j) {
    j.erase("quantization");
    j.erase("quantization_config");
  });
  ASSERT_TRUE(load(dir).ok()) << load(dir).message();  // widths alone still identify 4/8-bit
  const std::string name = kMlx + "layers.0.linear_attn.in_proj_z.weight";  // U32 [128, 8]
  edit_tensors(dir, [&](Tensors& ts) {
    OwnedTensor& t = ts.at(name);
    t.shape = {128, 3};
    t.bytes.resize(128 * 3 * 4);
  });
  expect_load_error(dir, {name, "64 columns", "3 words", "not 4- or 8-bit"});
}

TEST(LoaderErrors, ConfigSays8BitButTensorPacked4Bit) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  const std::string path = kMlx + "layers.0.linear_attn.in_proj_z";
  edit_config(dir, [&](json& j) {
    j["quantization"][path] = {{"group_size", 64}, {"bits", 8}};
    j["quantization_config"][path] = {{"group_size", 64}, {"bits", 8}};
  });
  expect_load_error(dir, {path + ".weight", "4-bit", "8-bit", "expected shape [128,16]"});
}

TEST(LoaderErrors, ConfigSays4BitButRouterPacked8Bit) {
  // A config that lost the router's 8-bit override: the packed router no longer matches.
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  const std::string path = kMlx + "layers.2.mlp.gate";
  edit_config(dir, [&](json& j) {
    j["quantization"].erase(path);
    j["quantization_config"].erase(path);
  });
  expect_load_error(dir, {path + ".weight", "8-bit", "4-bit", "expected shape [8,8]"});
}

TEST(LoaderErrors, GroupSizeDisagreesWithConfig) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  edit_config(dir, [](json& j) {
    j["quantization"]["group_size"] = 32;
    j["quantization_config"]["group_size"] = 32;
  });
  expect_load_error(dir, {".scales", "group size 64", "32"});
}

TEST(LoaderErrors, ScalesWithoutBiases) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  const std::string base = kMlx + "layers.1.linear_attn.in_proj_qkv";
  edit_tensors(dir, [&](Tensors& ts) { ts.erase(base + ".biases"); });
  expect_load_error(dir, {"missing tensor", base + ".biases"});
}

TEST(LoaderErrors, PackedWeightWithoutScales) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  const std::string base = kMlx + "layers.0.mlp.shared_expert.down_proj";
  edit_tensors(dir, [&](Tensors& ts) {
    ts.erase(base + ".scales");
    ts.erase(base + ".biases");
  });
  expect_load_error(dir, {base + ".weight", "U32"});
}

TEST(LoaderErrors, ScalesAndBiasesDtypeMismatch) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  const std::string base = kMlx + "layers.0.mlp.gate";  // scales/biases BF16 [8, 1]
  edit_tensors(dir, [&](Tensors& ts) {
    OwnedTensor& b = ts.at(base + ".biases");
    b.dtype = DType::F32;
    b.bytes.assign(8 * 4, 0);
  });
  expect_load_error(dir, {base, "scales", "biases"});
}

TEST(LoaderErrors, ScalesWrongShape) {
  ScratchDir d;
  std::string dir = synth_tiny(d, SynthLayout::mlx4);
  const std::string base = kMlx + "layers.3.self_attn.o_proj";  // weight [64, 32] scales [64, 4]
  edit_tensors(dir, [&](Tensors& ts) {
    OwnedTensor& s = ts.at(base + ".biases");
    s.shape = {32, 4};
    s.bytes.resize(32 * 4 * 2);
  });
  expect_load_error(dir, {base + ".biases", "[32,4]", "expected [64,4]"});
}

// ---- Sweep ----

TEST(LoaderErrors, ConfigValueSweepNeverCrashes) {
  // Every integer field of text_config set to values that disagree with the tensors: each load
  // is a clean error, or (for fields the tensors do not pin down) a model that runs.
  ScratchDir d;
  for (SynthLayout layout : {SynthLayout::hf, SynthLayout::mlx4}) {
    std::string dir = synth_tiny(d, layout, layout == SynthLayout::hf ? "hf" : "mlx");
    const json original = json::parse(test::read_text(dir + "/config.json"));
    int loaded = 0, failed = 0;
    for (const auto& [key, value] : original["text_config"].items()) {
      if (!value.is_number_integer()) continue;
      for (int64_t v : {1, 2, 3, 7, 33, 65, 128, 1000}) {
        if (v == value.get<int64_t>()) continue;
        SCOPED_TRACE(key + " = " + std::to_string(v));
        json j = original;
        j["text_config"][key] = v;
        test::write_text(dir + "/config.json", j.dump());
        auto m = load(dir);
        if (!m) {
          ++failed;
          EXPECT_FALSE(m.message().empty());
          continue;
        }
        ++loaded;
        auto be = make_cpu_backend(**m);
        auto st = be->new_state(8);
        ASSERT_TRUE(st.ok()) << st.message();
        std::vector<float> logits;
        const int32_t ids[] = {1, 2, 3};
        Status s = be->forward(**st, ids, LogitsMode::last, logits);
        EXPECT_TRUE(s.ok()) << s.message();
      }
    }
    EXPECT_GT(failed, 50);
    EXPECT_GT(loaded, 0);  // e.g. num_experts_per_tok, max_position_embeddings
  }
}

}  // namespace
}  // namespace orchid
