// Block-wise FP8 checkpoints (Qwen's FP8 release layout; issue 34 item 1): the e4m3 byte values
// against their definition (bits assembled here, not util/fp8.cpp's formula), rounding to the
// nearest even code, the quantization_config, the synthetic FP8 layout's tensor table, every
// loaded matrix being code × scale_inv read straight from the file's bytes, the model's logits
// being exactly those of its dequantized weights, --quantize q4 from FP8, slices across scale
// blocks, the CPU weight copy, and each malformed FP8 input named in one error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../test_util.h"
#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/backend/cpu/weight_copy.h"
#include "orchid/model/config.h"
#include "orchid/model/model.h"
#include "orchid/model/quant.h"
#include "orchid/model/safetensors.h"
#include "orchid/model/synth.h"
#include "orchid/util/bf16.h"
#include "orchid/util/fp8.h"

namespace orchid {
namespace {

using json = nlohmann::json;
using test::contains;
using test::ScratchDir;

const std::string kHf = "model.language_model.";

// e4m3fn by its bits: a normal code is the float with the same sign, exponent e − 7 and the
// three mantissa bits on top of float's 23; a subnormal one is m · 2⁻⁹ (m < 8, exact).
float e4m3_by_bits(uint8_t c) {
  const uint32_t sign = uint32_t(c >> 7) << 31, e = (c >> 3) & 15, m = c & 7;
  if ((c & 0x7f) == 0x7f) return NAN;
  float f;
  if (e == 0) {
    f = float(m) / 512.f;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u |= sign;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const uint32_t u = sign | ((e - 7 + 127) << 23) | (m << 20);
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Fp8E4m3, EveryCodeIsItsDefinition) {
  for (int c = 0; c < 256; ++c) {
    const float want = e4m3_by_bits(uint8_t(c)), got = fp8_e4m3_to_f32(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      continue;
    }
    uint32_t a, b;
    std::memcpy(&a, &want, 4);
    std::memcpy(&b, &got, 4);
    EXPECT_EQ(a, b) << "code " << c << ": " << got << " vs " << want;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 1.f / 512);
  EXPECT_EQ(fp8_e4m3_to_f32(0xc0), -2.f);
}

TEST(Fp8E4m3, RoundsToTheNearestEvenCodeAndSaturates) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f32_to_fp8_e4m3(e4m3_by_bits(uint8_t(c))), c) << "exact value of code " << c;
  }
  for (int c = 0; c + 1 < 0x7f; ++c) {  // between consecutive non-negative codes
    const float lo = e4m3_by_bits(uint8_t(c)), hi = e4m3_by_bits(uint8_t(c + 1));
    const float mid = (lo + hi) / 2;  // exact: both have few significant bits
    EXPECT_EQ(f32_to_fp8_e4m3(mid), c % 2 == 0 ? c : c + 1) << "tie between " << c << ", " << c + 1;
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 0.f)), c) << c;
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 1e9f)), c + 1) << c;
    EXPECT_EQ(f32_to_fp8_e4m3(-std::nextafter(mid, 0.f)), 0x80 | c) << c;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(449.f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(INFINITY), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(NAN), 0x7f);
  EXPECT_EQ(f32_to_fp8_e4m3(1e-30f), 0x00);
}

// ---- quantization_config ----

json tiny_config() {
  return json::parse(test::read_text(test::golden("tiny/hf") + "/config.json"));
}

TEST(Fp8Config, QwenQuantizationConfigParses) {
  json j = tiny_config();
  // Qwen3.5's FP8 configs have no "fmt"; Qwen3.6's say e4m3.
  j["quantization_config"] = {{"quant_method", "fp8"},
                              {"activation_scheme", "dynamic"},
                              {"weight_block_size", {128, 64}},
                              {"modules_to_not_convert", {"lm_head", "model.layers.0.mlp.gate"}}};
  auto c = parse_config(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.message();
  ASSERT_TRUE(c->fp8.has_value());
  EXPECT_EQ(c->fp8->block_rows, 128);
  EXPECT_EQ(c->fp8->block_cols, 64);
  EXPECT_EQ(c->fp8->not_converted.size(), 2u);
  EXPECT_FALSE(c->quant.has_value());
  // Round trip through config_to_json.
  auto back = parse_config(config_to_json(*c), "config.json");
  ASSERT_TRUE(back.ok()) << back.message();
  ASSERT_TRUE(back->fp8.has_value());
  EXPECT_EQ(back->fp8->block_cols, 64);
  EXPECT_EQ(back->fp8->not_converted, c->fp8->not_converted);
}

TEST(Fp8Config, UnsupportedFp8ConfigsAreNamed) {
  auto expect_error = [](const json& q, std::initializer_list<std::string> pieces) {
    json j = tiny_config();
    j["quantization_config"] = q;
    auto c = parse_config(j.dump(), "cfg.json");
    ASSERT_FALSE(c.ok()) << q.dump();
    EXPECT_TRUE(contains(c.message(), "cfg.json"));
    for (const auto& p : pieces) EXPECT_TRUE(contains(c.message(), p)) << c.message();
  };
  const json base = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  json q = base;
  q["fmt"] = "e5m2";
  expect_error(q, {"fmt", "e5m2"});
  q = base;
  q["activation_scheme"] = "static";
  expect_error(q, {"activation_scheme", "static"});
  q = base;
  q.erase("weight_block_size");
  expect_error(q, {"weight_block_size"});
  for (json bad : {json{128}, json{0, 128}, json{"128", 128}, json(128), json{128, -1}}) {
    q = base;
    q["weight_block_size"] = bad;
    expect_error(q, {"weight_block_size"});
  }
  q = base;
  q["modules_to_not_convert"] = "lm_head";
  expect_error(q, {"modules_to_not_convert"});
}

// ---- The synthetic FP8 checkpoint and its loading ----

std::string synth(const ScratchDir& d, SynthLayout layout, const char* leaf) {
  const std::string dir = d / leaf;
  const Status s = synth_checkpoint(*builtin_config("tiny"), layout, dir, /*seed=*/11);
  EXPECT_TRUE(s.ok()) << s.message();
  return dir;
}

// The FP8 matrices of Qwen's release (every other matrix stays BF16): spec names, written here.
bool fp8_in_qwen_release(const std::string& name) {
  for (const char* k : {"self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj.",
                        "self_attn.o_proj.", "linear_attn.in_proj_qkv.", "linear_attn.in_proj_z.",
                        "linear_attn.out_proj.", "shared_expert.gate_proj.", "shared_expert.up_proj.",
                        "shared_expert.down_proj."})
    if (name.find(k) != std::string::npos) return true;
  return name.find(".mlp.experts.") != std::string::npos;
}

TEST(Fp8Synth, QwenTensorTable) {
  ScratchDir d;
  const std::string dir = synth(d, SynthLayout::fp8, "fp8");
  auto ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok()) << ck.message();
  const ModelConfig c = *builtin_config("tiny");
  int fp8 = 0;
  for (const TensorInfo* t : ck->all()) {
    if (t->name.ends_with("_scale_inv")) continue;
    const bool want = fp8_in_qwen_release(t->name);
    EXPECT_EQ(t->dtype == DType::F8_E4M3, want) << t->name;
    if (!want) continue;
    ++fp8;
    const TensorInfo* s = ck->find(t->name + "_scale_inv");
    ASSERT_NE(s, nullptr) << t->name;
    EXPECT_EQ(s->dtype, DType::BF16);
    ASSERT_EQ(t->shape.size(), 2u) << t->name;
    EXPECT_EQ(s->shape, (std::vector<int64_t>{(t->shape[0] + 127) / 128, (t->shape[1] + 127) / 128}))
        << t->name;
  }
  // Experts one by one: E × 3 a layer, no fused tensor.
  EXPECT_NE(ck->find(kHf + "layers.0.mlp.experts.7.down_proj.weight"), nullptr);
  EXPECT_EQ(ck->find(kHf + "layers.0.mlp.experts.gate_up_proj"), nullptr);
  EXPECT_GE(fp8, c.n_layer * c.n_expert * 3);
  const json cfg = json::parse(test::read_text(dir + "/config.json"));
  EXPECT_EQ(cfg["quantization_config"]["quant_method"], "fp8");
  EXPECT_EQ(cfg["quantization_config"]["weight_block_size"], json({128, 128}));
}

float float_at(const TensorInfo& t, int64_t i) {
  if (t.dtype == DType::F32) {
    float f;
    std::memcpy(&f, t.data.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, t.data.data() + 2 * i, 2);
  return bf16_to_f32(h);
}

// Each element of `m` is code × scale_inv of its block, from the tensors' bytes.
void expect_code_times_scale(const QuantMatrix& m, const TensorInfo& w, const TensorInfo& s,
                             const std::string& what) {
  ASSERT_TRUE(m.fp8()) << what;
  ASSERT_EQ(m.rows, w.shape[0]) << what;
  ASSERT_EQ(m.cols, w.shape[1]) << what;
  const int64_t sc = s.shape[1];
  std::vector<float> row(static_cast<size_t>(m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    m.dequant_row(r, row.data());
    for (int64_t c = 0; c < m.cols; ++c) {
      const float want = e4m3_by_bits(w.data[size_t(r * m.cols + c)]) * float_at(s, r / 128 * sc + c / 128);
      ASSERT_EQ(row[size_t(c)], want) << what << " [" << r << ", " << c << "]";
    }
  }
}

TEST(Fp8Loader, EveryWeightIsCodeTimesScale) {
  ScratchDir d;
  const std::string dir = synth(d, SynthLayout::fp8, "fp8");
  auto lm = load_model(dir);
  ASSERT_TRUE(lm.ok()) << lm.message();
  const Model& m = **lm;
  auto ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok()) << ck.message();
  auto check = [&](const QuantMatrix& q, const std::string& name) {
    const TensorInfo* w = ck->find(name);
    const TensorInfo* s = ck->find(name + "_scale_inv");
    ASSERT_TRUE(w && s) << name;
    expect_code_times_scale(q, *w, *s, name);
  };
  int checked = 0;
  for (size_t l = 0; l < m.weights.layers.size(); ++l) {
    const LayerWeights& L = m.weights.layers[l];
    const std::string p = kHf + "layers." + std::to_string(l) + ".";
    if (L.attn.q_proj.data) {
      check(L.attn.q_proj, p + "self_attn.q_proj.weight");
      check(L.attn.o_proj, p + "self_attn.o_proj.weight");
    } else {
      check(L.gdn.in_proj_qkv, p + "linear_attn.in_proj_qkv.weight");
      check(L.gdn.out_proj, p + "linear_attn.out_proj.weight");
      EXPECT_FALSE(L.gdn.in_proj_a.fp8());
    }
    for (size_t e = 0; e < L.moe.gate.size(); ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      check(L.moe.gate[e], x + "gate_proj.weight");
      check(L.moe.up[e], x + "up_proj.weight");
      check(L.moe.down[e], x + "down_proj.weight");
      checked += 3;
    }
    check(L.moe.shared_down, p + "mlp.shared_expert.down_proj.weight");
    EXPECT_FALSE(L.moe.router.fp8());
    EXPECT_FALSE(L.moe.shared_expert_gate.fp8());
  }
  EXPECT_EQ(checked, 4 * 8 * 3);
  EXPECT_FALSE(m.weights.tok_embd.fp8());
  EXPECT_FALSE(m.weights.output.fp8());
}

// The FP8 checkpoint of a seed is the block quantization of the hf one's values: each weight
// within half an e4m3 step of its bf16 value (relative 2⁻⁴; 2⁻¹⁰ · scale in the subnormals), or
// at the saturated end of a block whose bf16-rounded scale fell below amax / 448.
TEST(Fp8Synth, IsTheBlockQuantizationOfTheHfCheckpoint) {
  ScratchDir d;
  auto a = load_model(synth(d, SynthLayout::hf, "hf")), b = load_model(synth(d, SynthLayout::fp8, "fp8"));
  ASSERT_TRUE(a.ok()) << a.message();
  ASSERT_TRUE(b.ok()) << b.message();
  const LayerWeights &La = (*a)->weights.layers[0], &Lb = (*b)->weights.layers[0];
  for (auto [qa, qb] : {std::pair{&La.gdn.in_proj_qkv, &Lb.gdn.in_proj_qkv},
                        std::pair{&La.moe.gate[5], &Lb.moe.gate[5]},
                        std::pair{&La.moe.up[5], &Lb.moe.up[5]},
                        std::pair{&La.moe.down[2], &Lb.moe.down[2]}}) {
    ASSERT_TRUE(qb->fp8());
    std::vector<float> ra(static_cast<size_t>(qa->cols)), rb(ra.size());
    float amax = 0;  // the matrix's: at least any block's
    for (int64_t r = 0; r < qa->rows; ++r) {
      qa->dequant_row(r, ra.data());
      for (float v : ra) amax = std::max(amax, std::fabs(v));
    }
    for (int64_t r = 0; r < qa->rows; ++r) {
      qa->dequant_row(r, ra.data());
      qb->dequant_row(r, rb.data());
      for (size_t c = 0; c < ra.size(); ++c)
        ASSERT_LE(std::fabs(ra[c] - rb[c]), std::fabs(ra[c]) / 16 + amax / 448 / 512 * 1.01f + amax / 256)
            << "row " << r << " col " << c << ": " << rb[c] << " vs " << ra[c];
    }
  }
}

// The model computes with code × scale and nothing else: its CPU (exact path) logits equal,
// bit for bit, those of the same model with every FP8 matrix replaced by dense f32 rows of
// dequant_row.
TEST(Fp8Loader, LogitsAreThoseOfItsDequantizedWeights) {
  ScratchDir d;
  const std::string dir = synth(d, SynthLayout::fp8, "fp8");
  auto a = load_model(dir), b = load_model(dir);
  ASSERT_TRUE(a.ok()) << a.message();
  ASSERT_TRUE(b.ok()) << b.message();
  Model& dense = **b;
  int replaced = 0;
  for_each_matrix(dense.weights, [&](QuantMatrix& q) {
    if (!q.fp8()) return;
    auto& buf = dense.arena.emplace_back(size_t(q.rows * q.cols) * 4);
    for (int64_t r = 0; r < q.rows; ++r)
      q.dequant_row(r, reinterpret_cast<float*>(buf.data()) + r * q.cols);
    QuantMatrix f;
    f.rows = q.rows, f.cols = q.cols, f.format = WeightFormat::dense, f.dtype = DType::F32;
    f.bits = 32, f.data = buf.data();
    q = f;
    ++replaced;
  });
  EXPECT_GT(replaced, 100);
  const std::vector<int32_t> ids = test::prompt_ids(24, 512, 5);
  auto logits = [&](const Model& m) {
    auto be = make_cpu_backend(m);
    auto st = be->new_state(64);
    EXPECT_TRUE(st.ok()) << st.message();
    std::vector<float> out;
    if (st.ok()) {
      const Status s = be->forward(**st, ids, LogitsMode::all, out);
      EXPECT_TRUE(s.ok()) << s.message();
    }
    return out;
  };
  const std::vector<float> la = logits(**a), lb = logits(dense);
  ASSERT_EQ(la.size(), size_t(24 * 512));
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0);
}

TEST(Fp8Loader, QuantizeQ4FromFp8) {
  ScratchDir d;
  const std::string dir = synth(d, SynthLayout::fp8, "fp8");
  LoadOptions o;
  o.quantize_q4 = true;
  auto q = load_model(dir, o), f = load_model(dir);
  ASSERT_TRUE(q.ok()) << q.message();
  ASSERT_TRUE(f.ok()) << f.message();
  const QuantMatrix &a = (*q)->weights.layers[1].moe.down[3], &b = (*f)->weights.layers[1].moe.down[3];
  EXPECT_TRUE(a.quantized());
  EXPECT_EQ(a.bits, 4);
  EXPECT_EQ(a.group, 64);
  // Exactly quantize_affine of the FP8 matrix's values (code × scale).
  std::vector<float> v(size_t(b.rows * b.cols));
  for (int64_t r = 0; r < b.rows; ++r) b.dequant_row(r, v.data() + r * b.cols);
  const AffineQuantized want = quantize_affine(v, b.rows, b.cols, 4, 64);
  EXPECT_EQ(0, std::memcmp(a.data, want.codes.data(), want.codes.size() * sizeof(want.codes[0])));
  EXPECT_EQ(0, std::memcmp(a.scales, want.scales.data(), want.scales.size() * sizeof(want.scales[0])));
  EXPECT_EQ(0, std::memcmp(a.biases, want.biases.data(), want.biases.size() * sizeof(want.biases[0])));
}

// A view of rows [r0, r0 + n) of a block-scaled matrix reads the rows of the whole, whatever
// block the slice starts in (row_slice keeps the place in the first block).
TEST(Fp8Matrix, RowSlicesAcrossScaleBlocks) {
  const int64_t rows = 300, cols = 200, br = 128, bc = 64;
  const int64_t srows = (rows + br - 1) / br, scols = (cols + bc - 1) / bc;
  std::vector<uint8_t> codes(size_t(rows * cols));
  std::vector<uint16_t> scales(size_t(srows * scols));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t((i * 37 + 11) % 255 == 0x7f ? 3 : (i * 37 + 11) % 255);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = f32_to_bf16(0.25f + 0.125f * float(i));
  QuantMatrix m;
  m.rows = rows, m.cols = cols, m.format = WeightFormat::fp8, m.dtype = DType::BF16, m.bits = 8;
  m.group = int(bc), m.block_rows = int(br), m.data = codes.data(), m.scales = scales.data();
  std::vector<float> whole(size_t(rows * cols)), part(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) m.dequant_row(r, whole.data() + r * cols);
  EXPECT_EQ(whole[size_t(129 * cols + 70)], e4m3_by_bits(codes[size_t(129 * cols + 70)]) * bf16_to_f32(scales[size_t(1 * scols + 1)]));
  for (auto [r0, n] : {std::pair<int64_t, int64_t>{0, 300}, {100, 150}, {128, 172}, {255, 2}, {130, 10}}) {
    const QuantMatrix s = m.row_slice(r0, n);
    for (int64_t r = 0; r < n; ++r) {
      s.dequant_row(r, part.data());
      ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + (r0 + r) * cols, size_t(cols) * 4))
          << "slice " << r0 << "+" << n << " row " << r;
    }
    // Slices of slices too.
    const QuantMatrix t = s.row_slice(n / 2, n - n / 2);
    t.dequant_row(0, part.data());
    ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + (r0 + n / 2) * cols, size_t(cols) * 4));
  }
}

TEST(Fp8Loader, TheCpuWeightCopyReadsTheSame) {
  ScratchDir d;
  auto m = load_model(synth(d, SynthLayout::fp8, "fp8"));
  ASSERT_TRUE(m.ok()) << m.message();
  auto c = cpu::WeightCopy::make(**m, 0);
  ASSERT_NE(c, nullptr);
  const Weights &w = (**m).weights, &cw = c->weights();
  std::vector<const QuantMatrix*> mine, copied;
  for_each_matrix(w, [&](const QuantMatrix& q) { mine.push_back(&q); });
  for_each_matrix(cw, [&](const QuantMatrix& q) { copied.push_back(&q); });
  ASSERT_EQ(mine.size(), copied.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!mine[i]->fp8()) continue;
    EXPECT_NE(mine[i]->data, copied[i]->data);
    EXPECT_NE(mine[i]->scales, copied[i]->scales);
    std::vector<float> a(static_cast<size_t>(mine[i]->cols)), b(a.size());
    for (int64_t r = 0; r < mine[i]->rows; ++r) {
      mine[i]->dequant_row(r, a.data());
      copied[i]->dequant_row(r, b.data());
      ASSERT_EQ(a, b) << i << " row " << r;
    }
  }
}

// ---- Malformed FP8 inputs ----

struct Owned {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

void edit(const std::string& dir, const std::function<void(std::vector<Owned>&)>& f) {
  std::vector<Owned> ts;
  size_t shards = 1;
  {
    auto ck = Checkpoint::open(dir);
    ASSERT_TRUE(ck.ok()) << ck.message();
    shards = ck->shard_count();
    for (const TensorInfo* t : ck->all())
      ts.push_back({t->name, t->dtype, t->shape, {t->data.begin(), t->data.end()}});
  }
  f(ts);
  std::vector<TensorToWrite> w;
  for (const auto& t : ts) w.push_back({t.name, t.dtype, t.shape, t.bytes});
  const Status s = write_sharded_checkpoint(dir, w, int(shards));
  ASSERT_TRUE(s.ok()) << s.message();
}

Owned& find(std::vector<Owned>& ts, const std::string& name) {
  for (auto& t : ts)
    if (t.name == name) return t;
  ADD_FAILURE() << "no " << name;
  static Owned none;
  return none;
}

void expect_error(const std::string& dir, std::initializer_list<std::string> pieces) {
  auto m = load_model(dir);
  ASSERT_FALSE(m.ok());
  for (const auto& p : pieces) EXPECT_TRUE(contains(m.message(), p)) << m.message();
}

TEST(Fp8LoaderErrors, EachBadInputIsNamed) {
  ScratchDir d;
  const std::string w = kHf + "layers.0.mlp.experts.3.down_proj.weight";
  {  // no scale_inv
    const std::string dir = synth(d, SynthLayout::fp8, "a");
    edit(dir, [&](std::vector<Owned>& ts) {
      std::erase_if(ts, [&](const Owned& t) { return t.name == w + "_scale_inv"; });
    });
    expect_error(dir, {w + "_scale_inv", "missing"});
  }
  {  // scale_inv of the wrong shape
    const std::string dir = synth(d, SynthLayout::fp8, "b");
    edit(dir, [&](std::vector<Owned>& ts) {
      Owned& s = find(ts, w + "_scale_inv");
      s.shape = {2, 1};
      s.bytes.resize(4);
    });
    expect_error(dir, {w + "_scale_inv", "[2,1]", "[1,1]"});
  }
  {  // scale_inv not a float
    const std::string dir = synth(d, SynthLayout::fp8, "c");
    edit(dir, [&](std::vector<Owned>& ts) { find(ts, w + "_scale_inv").dtype = DType::I16; });
    expect_error(dir, {w + "_scale_inv", "I16"});
  }
  {  // e5m2 weights
    const std::string dir = synth(d, SynthLayout::fp8, "e");
    edit(dir, [&](std::vector<Owned>& ts) { find(ts, w).dtype = DType::F8_E5M2; });
    expect_error(dir, {w, "F8_E5M2"});
  }
  {  // FP8 tensors without the config's quantization_config
    const std::string dir = synth(d, SynthLayout::fp8, "f");
    json j = json::parse(test::read_text(dir + "/config.json"));
    j.erase("quantization_config");
    test::write_text(dir + "/config.json", j.dump());
    expect_error(dir, {"F8_E4M3", "quant_method fp8"});
  }
  {  // FP8 weight of the wrong shape
    const std::string dir = synth(d, SynthLayout::fp8, "g");
    edit(dir, [&](std::vector<Owned>& ts) {
      Owned& t = find(ts, w);
      t.shape = {32, 128};
    });
    expect_error(dir, {w, "[32,128]", "[64,64]"});
  }
}

}  // namespace
}  // namespace orchid
