// The GGUF writer's K-quant and BF16 encoders (model/gguf_writer.h) read back through the
// format's reference decoder (model/gguf_dequant.h) within each sub-block's own step, on fresh
// random rows of several shapes (normal, one outlier a block, all equal, zeros, all negative);
// and llama.cpp's Q4_K_M mix (gguf_export.h: apply_q4_k_m) placed on a 40-layer qwen35moe
// tensor table as llama.cpp's quantizer places it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "orchid/model/gguf_dequant.h"
#include "orchid/model/gguf_export.h"
#include "orchid/model/gguf_writer.h"
#include "orchid/util/bf16.h"

namespace orchid {
namespace {

std::vector<float> sample_row(int kind, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.f, 0.05f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = g(rng);
  switch (kind) {
    case 1:  // one outlier every 256
      for (size_t i = 17; i < v.size(); i += 256) v[i] = 3.f;
      break;
    case 2:
      std::fill(v.begin(), v.end(), 0.37f);
      break;
    case 3:
      std::fill(v.begin(), v.end(), 0.f);
      break;
    case 4:
      for (auto& x : v) x = -std::fabs(x) - 0.01f;
      break;
    default:
      break;
  }
  return v;
}

std::vector<float> round_trip(GgmlType t, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size());
  auto rb = ggml_row_bytes(uint32_t(t), n);
  EXPECT_TRUE(rb.ok()) << rb.message();
  std::vector<uint8_t> enc(rb.ok() ? size_t(*rb) : 0);
  encode_ggml_row(uint32_t(t), x.data(), n, enc.data());
  std::vector<float> y(x.size());
  const Status s = dequantize_gguf(uint32_t(t), enc, n, y.data());
  EXPECT_TRUE(s.ok()) << s.message();
  return y;
}

// Q4_K / Q5_K: each value within one step of its 32-value sub-block's range fit (range / levels:
// half a step of rounding, the rest for the 6-bit rounding of the step and the offset).
// Q6_K: within 1/32 of the sub-block's (16 values) largest magnitude (a full step: a value of the
// other sign as large as the largest meets the code range's short end, +31, as in ggml's Q4_0),
// plus 32 codes' share of the int8 scale's rounding.
TEST(GgufEncode, KQuantsReadBackWithinTheirStep) {
  std::mt19937 rng(std::random_device{}());
  for (int kind = 0; kind < 5; ++kind)
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
      const std::vector<float> x = sample_row(kind, 1024, rng), y = round_trip(t, x);
      const int sub = t == GgmlType::Q6_K ? 16 : 32;
      const float levels = t == GgmlType::Q4_K ? 15.f : 31.f;
      for (size_t j = 0; j < x.size(); j += size_t(sub)) {
        float lo = 0.f, hi = 0.f, big = 0.f;
        for (int l = 0; l < sub; ++l)
          lo = std::min(lo, x[j + size_t(l)]), hi = std::max(hi, x[j + size_t(l)]),
          big = std::max(big, std::fabs(x[j + size_t(l)]));
        // The super-block's largest range sets the 6-bit grid of steps: a small sub-block's step
        // is off by up to half a grid unit (max step / 126) times its codes (≤ levels).
        float widest = 0.f, biggest = 0.f;
        const size_t s0 = j / 256 * 256;
        for (size_t i = s0; i < s0 + 256; i += size_t(sub)) {
          float a = 0.f, b = 0.f, m = 0.f;
          for (int l = 0; l < sub; ++l)
            a = std::min(a, x[i + size_t(l)]), b = std::max(b, x[i + size_t(l)]),
            m = std::max(m, std::fabs(x[i + size_t(l)]));
          widest = std::max(widest, b - a), biggest = std::max(biggest, m);
        }
        const float bound = t == GgmlType::Q6_K
                                ? big / 32.f * 1.01f + biggest / 254.f + 1e-6f
                                : (hi - lo) / levels * 0.51f + widest / levels / 126.f * levels +
                                      (-lo) / 126.f * 1.01f + widest / 126.f + 1e-6f;
        for (int l = 0; l < sub; ++l)
          ASSERT_LE(std::fabs(y[j + size_t(l)] - x[j + size_t(l)]), bound)
              << ggml_type_name(uint32_t(t)) << " kind " << kind << " at " << j + size_t(l) << ": "
              << y[j + size_t(l)] << " vs " << x[j + size_t(l)];
      }
    }
}

TEST(GgufEncode, ConstantAndZeroBlocksAreExactEnough) {
  std::mt19937 rng(1);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const std::vector<float> z = sample_row(3, 512, rng), yz = round_trip(t, z);
    for (float v : yz) EXPECT_EQ(v, 0.f) << ggml_type_name(uint32_t(t));
    const std::vector<float> c = sample_row(2, 512, rng), yc = round_trip(t, c);
    for (float v : yc) EXPECT_NEAR(v, 0.37f, 0.37f / 60) << ggml_type_name(uint32_t(t));
  }
}

TEST(GgufEncode, Bf16IsTheNearestBf16) {
  std::mt19937 rng(std::random_device{}());
  const std::vector<float> x = sample_row(0, 96, rng), y = round_trip(GgmlType::BF16, x);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], round_bf16(x[i]));
}

TEST(GgufEncode, RowsMustFillBlocks) {
  EXPECT_EQ(*ggml_row_bytes(uint32_t(GgmlType::Q4_K), 512), 288u);
  EXPECT_EQ(*ggml_row_bytes(uint32_t(GgmlType::Q5_K), 256), 176u);
  EXPECT_EQ(*ggml_row_bytes(uint32_t(GgmlType::Q6_K), 256), 210u);
  EXPECT_EQ(*ggml_row_bytes(uint32_t(GgmlType::BF16), 10), 20u);
  EXPECT_FALSE(ggml_row_bytes(uint32_t(GgmlType::Q4_K), 128).ok());
  EXPECT_FALSE(ggml_row_bytes(uint32_t(GgmlType::Q3_K), 256).ok());
}

// llama.cpp's Q4_K_M on a qwen35moe table of 40 layers (every 4th full attention): names and the
// "more bits" places written out here.
TEST(GgufEncode, Q4KMMixIsLlamaCppsPlacement) {
  std::vector<GgufTensorSource> ts;
  auto add = [&](const std::string& n, std::vector<int64_t> dims, GgmlType t = GgmlType::Q4_K) {
    GgufTensorSource s;
    s.name = n, s.dims = std::move(dims), s.type = uint32_t(t);
    ts.push_back(std::move(s));
  };
  add("token_embd.weight", {2048, 248320});
  add("output_norm.weight", {2048}, GgmlType::F32);
  add("output.weight", {2048, 248320});
  for (int l = 0; l < 40; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {2048}, GgmlType::F32);
    if (l % 4 == 3) {
      add(p + "attn_q.weight", {2048, 8192});
      add(p + "attn_v.weight", {2048, 512});
      add(p + "attn_output.weight", {4096, 2048});
    } else {
      add(p + "attn_qkv.weight", {2048, 8192});
      add(p + "ssm_alpha.weight", {2048, 32}, GgmlType::F32);
      add(p + "ssm_out.weight", {4096, 2048});
    }
    add(p + "ffn_gate_inp.weight", {2048, 256}, GgmlType::F32);
    add(p + "ffn_gate_exps.weight", {2048, 512, 256});
    add(p + "ffn_down_exps.weight", {512, 2048, 256});
    add(p + "ffn_down_shexp.weight", {512, 2048});
    add(p + "ffn_up_shexp.weight", {2000, 512});  // rows not of 256s
  }
  apply_q4_k_m(ts, uint32_t(GgmlType::F32));
  auto type_of = [&](const std::string& n) {
    for (const auto& t : ts)
      if (t.name == n) return GgmlType(t.type);
    ADD_FAILURE() << n;
    return GgmlType::F32;
  };
  EXPECT_EQ(type_of("token_embd.weight"), GgmlType::Q4_K);
  EXPECT_EQ(type_of("output.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("output_norm.weight"), GgmlType::F32);
  // use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i − n/8) % 3 == 2.
  auto more = [](int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; };
  int v = 0, down = 0;
  for (int l = 0; l < 40; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    if (l % 4 == 3) {
      EXPECT_EQ(type_of(p + "attn_v.weight"), more(v++, 10) ? GgmlType::Q6_K : GgmlType::Q4_K) << l;
      EXPECT_EQ(type_of(p + "attn_q.weight"), GgmlType::Q4_K);
    } else {
      EXPECT_EQ(type_of(p + "attn_qkv.weight"), GgmlType::Q5_K) << l;
      EXPECT_EQ(type_of(p + "ssm_alpha.weight"), GgmlType::F32);
    }
    EXPECT_EQ(type_of(p + "ffn_gate_inp.weight"), GgmlType::F32);
    EXPECT_EQ(type_of(p + "ffn_gate_exps.weight"), GgmlType::Q4_K);
    EXPECT_EQ(type_of(p + "ffn_down_exps.weight"), more(down++, 80) ? GgmlType::Q6_K : GgmlType::Q4_K)
        << l;
    EXPECT_EQ(type_of(p + "ffn_down_shexp.weight"), more(down++, 80) ? GgmlType::Q6_K : GgmlType::Q4_K)
        << l;
    EXPECT_EQ(type_of(p + "ffn_up_shexp.weight"), GgmlType::Q8_0);
  }
  EXPECT_EQ(type_of("blk.0.ffn_down_exps.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("blk.5.ffn_down_exps.weight"), GgmlType::Q4_K);  // i = 10: (10 − 10) % 3 = 0
}

}  // namespace
}  // namespace orchid
