// Tests for MLX affine quantization (quant.h): the packing order of 4- and 8-bit codes (hand
// built words and quantize_affine's own output), the round-trip error bound on fresh random
// data, constant groups, the sign convention of scales, and group sizes 32/64/128.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "orchid/model/quant.h"
#include "orchid/util/bf16.h"

namespace orchid {
namespace {

// Dequantizes every row of q back to fp32.
std::vector<float> dequant_all(const AffineQuantized& q, int64_t rows, int64_t cols) {
  const int64_t words = cols * q.bits / 32, groups = cols / q.group;
  std::vector<float> out(static_cast<size_t>(rows * cols));
  std::vector<float> s(static_cast<size_t>(groups)), b(static_cast<size_t>(groups));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      s[size_t(g)] = bf16_to_f32(q.scales[size_t(r * groups + g)]);
      b[size_t(g)] = bf16_to_f32(q.biases[size_t(r * groups + g)]);
    }
    dequant_affine_row(q.codes.data() + r * words, s.data(), b.data(), cols, q.bits, q.group,
                       out.data() + r * cols);
  }
  return out;
}

TEST(QuantTest, Dequant4BitElementEightWPlusKIsNibbleK) {
  // Word w holds elements 8w..8w+7, element 8w+k in bits [4k, 4k+4).
  std::vector<uint32_t> codes = {0x76543210u, 0xfedcba98u, 0x0000000fu, 0xf0000000u,
                                 0x11111111u, 0x22222222u, 0x00c0ffeeu, 0x12345678u};
  const float scale = 0.5f, bias = -2.0f;
  std::vector<float> out(64);
  dequant_affine_row(codes.data(), &scale, &bias, 64, 4, 64, out.data());
  for (int e = 0; e < 64; ++e) {
    uint32_t nibble = (codes[size_t(e / 8)] >> (4 * (e % 8))) & 0xf;
    EXPECT_EQ(out[size_t(e)], 0.5f * float(nibble) - 2.0f) << "element " << e;
  }
  for (int e = 0; e < 16; ++e) EXPECT_EQ(out[size_t(e)], 0.5f * float(e) - 2.0f);
  EXPECT_EQ(out[16], 0.5f * 15 - 2.0f);  // 0x0000000f: only element 16 set
  EXPECT_EQ(out[17], -2.0f);
  EXPECT_EQ(out[31], 0.5f * 15 - 2.0f);  // 0xf0000000: only element 31 set
  EXPECT_EQ(out[30], -2.0f);
}

TEST(QuantTest, Dequant8BitElementFourWPlusKIsByteK) {
  // 32 elements per group -> 8 words; element 4w+k in bits [8k, 8k+8).
  std::vector<uint32_t> codes(8);
  for (int e = 0; e < 32; ++e) codes[size_t(e / 4)] |= uint32_t(7 * e + 3) << (8 * (e % 4));
  EXPECT_EQ(codes[0], 0x18110a03u);
  const float scale = -1.0f, bias = 10.0f;
  std::vector<float> out(32);
  dequant_affine_row(codes.data(), &scale, &bias, 32, 8, 32, out.data());
  for (int e = 0; e < 32; ++e) EXPECT_EQ(out[size_t(e)], 10.0f - float(7 * e + 3)) << e;
}

TEST(QuantTest, Dequant4BitUsesEachGroupsOwnScaleAndBias) {
  std::vector<uint32_t> codes(8, 0x33333333u);  // 64 elements, code 3, groups of 32
  const float scales[2] = {1.0f, -2.0f}, biases[2] = {0.0f, 5.0f};
  std::vector<float> out(64);
  dequant_affine_row(codes.data(), scales, biases, 64, 4, 32, out.data());
  for (int e = 0; e < 32; ++e) EXPECT_EQ(out[size_t(e)], 3.0f);
  for (int e = 32; e < 64; ++e) EXPECT_EQ(out[size_t(e)], -1.0f);
}

TEST(QuantTest, Quantize4BitPacksKnownPattern) {
  // x = e % 16 in a group of 64: |max| > |min|, so bias = max = 15 and scale = -1 exactly;
  // code = 15 - x. Elements 0..7 (codes 15..8) fill word 0 lowest nibble first.
  std::vector<float> w(64);
  for (int e = 0; e < 64; ++e) w[size_t(e)] = float(e % 16);
  AffineQuantized q = quantize_affine(w, 1, 64, 4, 64);
  ASSERT_EQ(q.codes.size(), 8u);
  ASSERT_EQ(q.scales.size(), 1u);
  EXPECT_EQ(bf16_to_f32(q.scales[0]), -1.0f);
  EXPECT_EQ(bf16_to_f32(q.biases[0]), 15.0f);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(q.codes[size_t(i)], i % 2 == 0 ? 0x89abcdefu : 0x01234567u) << "word " << i;
  EXPECT_EQ(dequant_all(q, 1, 64), w);
}

TEST(QuantTest, Quantize8BitPacksKnownPattern) {
  // Integers in [0, 255] with both ends present: bias = 255, scale = -1, code = 255 - x.
  std::vector<float> w(64);
  for (int e = 0; e < 64; ++e) w[size_t(e)] = float((e * 37 + 11) % 256);
  w[0] = 0;
  w[1] = 255;
  AffineQuantized q = quantize_affine(w, 1, 64, 8, 64);
  ASSERT_EQ(q.codes.size(), 16u);
  EXPECT_EQ(bf16_to_f32(q.scales[0]), -1.0f);
  EXPECT_EQ(bf16_to_f32(q.biases[0]), 255.0f);
  for (int e = 0; e < 64; ++e) {
    uint32_t code = (q.codes[size_t(e / 4)] >> (8 * (e % 4))) & 0xff;
    EXPECT_EQ(code, uint32_t(255 - int(w[size_t(e)]))) << "element " << e;
  }
  EXPECT_EQ(q.codes[0] & 0xffffu, 0x00ffu);  // element 0 -> code 255, element 1 -> code 0
  EXPECT_EQ(dequant_all(q, 1, 64), w);
}

// Error bound, per element x of a group with stored (bf16) scale s and bias b, n = 2^bits - 1:
//  * t = (x - b) / s in [0, n]: the code is round(t), so |dequant - x| <= |s| / 2 (plus fp32
//    rounding of s * q + b).
//  * t outside [0, n] (clamped): MLX snaps the scale to edge / q0 with |q0| = round(r),
//    r = |edge| / |s_exact| >= n / 2, which stretches the far edge to at most
//    n (r + 1/2) / r <= n + 1 codes; the bf16 rounding of s (relative 2^-8, over <= n + 1
//    codes) and of b (|b| 2^-8) add to that. So |dequant - x| <= |s| (1 + (n + 1) 2^-7)
//    + |b| 2^-7 (the 2^-7 doubles the 2^-8 for slack). For 8-bit this allows ~3 codes at
//    the far edge of a group; the measured worst is ~2 (bf16 scale rounding over 255 codes).
// NOTE: "|s| / 2 + rounding" does not hold for all elements: the clamped far edge can be a
// full code away even before bf16 rounding (e.g. max 2.0, min -1.9 at 4 bits).
void expect_within_bound(const std::vector<float>& w, const AffineQuantized& q, int64_t rows,
                         int64_t cols) {
  const std::vector<float> d = dequant_all(q, rows, cols);
  const float n = float((1 << q.bits) - 1);
  const int64_t groups = cols / q.group;
  int64_t clamped = 0;
  double worst_codes = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t gi = size_t(r * groups + c / q.group), i = size_t(r * cols + c);
      const float s = bf16_to_f32(q.scales[gi]), b = bf16_to_f32(q.biases[gi]);
      const float t = (w[i] - b) / s, e = std::fabs(d[i] - w[i]);
      const float fp32_slack = 4e-7f * (std::fabs(b) + std::fabs(s) * n);
      float bound;
      if (t >= 0 && t <= n) {
        bound = std::fabs(s) / 2 + fp32_slack;
      } else {
        ++clamped;
        bound = std::fabs(s) * (1 + (n + 1) / 128) + std::fabs(b) / 128 + fp32_slack;
      }
      ASSERT_LE(e, bound) << "row " << r << " col " << c << " x " << w[i] << " s " << s << " b "
                          << b << " t " << t;
      worst_codes = std::max(worst_codes, double(e / std::fabs(s)));
    }
  }
  EXPECT_LT(clamped, rows * cols / 4) << "clamping should be confined to group edges";
  EXPECT_LT(worst_codes, q.bits == 4 ? 1.2 : 2.6);
}

TEST(QuantTest, RoundTripWithinBoundOnRandomData) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> row_scale(0.01f, 10.0f);
  for (int bits : {4, 8}) {
    for (int group : {32, 64, 128}) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " group " + std::to_string(group));
      const int64_t rows = 7, cols = int64_t(group) * 3;
      std::vector<float> w(size_t(rows * cols));
      for (int64_t r = 0; r < rows; ++r) {
        const float rs = row_scale(rng), shift = r % 3 == 0 ? 0.0f : normal(rng) * rs;
        for (int64_t c = 0; c < cols; ++c) w[size_t(r * cols + c)] = normal(rng) * rs + shift;
      }
      AffineQuantized q = quantize_affine(w, rows, cols, bits, group);
      ASSERT_EQ(q.bits, bits);
      ASSERT_EQ(q.group, group);
      ASSERT_EQ(q.codes.size(), size_t(rows * cols * bits / 32));
      ASSERT_EQ(q.scales.size(), size_t(rows * cols / group));
      ASSERT_EQ(q.biases.size(), q.scales.size());
      expect_within_bound(w, q, rows, cols);
    }
  }
}

TEST(QuantTest, ConstantGroups) {
  // Groups: all 0; all 0.75 (bf16-exact); all -3 (bf16-exact); all 0.1 (not bf16-exact).
  const float values[4] = {0.0f, 0.75f, -3.0f, 0.1f};
  for (int bits : {4, 8}) {
    std::vector<float> w(4 * 64);
    for (int g = 0; g < 4; ++g)
      for (int i = 0; i < 64; ++i) w[size_t(g * 64 + i)] = values[g];
    AffineQuantized q = quantize_affine(w, 1, 256, bits, 64);
    std::vector<float> d = dequant_all(q, 1, 256);
    for (int g = 0; g < 4; ++g) {
      EXPECT_TRUE(std::isfinite(bf16_to_f32(q.scales[size_t(g)])));
      EXPECT_NE(bf16_to_f32(q.scales[size_t(g)]), 0.0f) << "a zero scale loses the sign";
      for (int i = 0; i < 64; ++i) {
        const float x = values[g], y = d[size_t(g * 64 + i)];
        if (x == round_bf16(x)) {
          EXPECT_EQ(y, x) << "group " << g;
        } else {  // bias is bf16(x); the tiny scale cannot move it by more than n * 1e-8
          EXPECT_NEAR(y, x, std::fabs(x) / 256 + 255 * 1e-8f) << "group " << g;
        }
      }
    }
  }
}

TEST(QuantTest, ScaleSignFollowsTheLargerMagnitudeEdge) {
  // Group 0 in [0.1, 1]: |max| wins -> bias = max, scale < 0. Group 1 in [-2, -0.5]: |min|
  // wins -> bias = min, scale > 0. The winning edge dequantizes exactly (bf16-exact here).
  std::vector<float> w(128);
  for (int i = 0; i < 64; ++i) w[size_t(i)] = 0.1f + 0.9f * float(i) / 63.0f;
  for (int i = 0; i < 64; ++i) w[size_t(64 + i)] = -2.0f + 1.5f * float(i) / 63.0f;
  w[63] = 1.0f;
  w[64] = -2.0f;
  for (int bits : {4, 8}) {
    AffineQuantized q = quantize_affine(w, 1, 128, bits, 64);
    EXPECT_LT(bf16_to_f32(q.scales[0]), 0.0f);
    EXPECT_EQ(bf16_to_f32(q.biases[0]), 1.0f);
    EXPECT_GT(bf16_to_f32(q.scales[1]), 0.0f);
    EXPECT_EQ(bf16_to_f32(q.biases[1]), -2.0f);
    std::vector<float> d = dequant_all(q, 1, 128);
    EXPECT_EQ(d[63], 1.0f);
    EXPECT_EQ(d[64], -2.0f);
    expect_within_bound(w, q, 1, 128);
  }
}

TEST(QuantTest, NegativeScaleGroupsRoundTripOnRandomData) {
  // Mostly-positive groups (negative scale) and mostly-negative groups (positive scale).
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> u(-0.2f, 1.0f);
  std::vector<float> w(4 * 128);
  for (size_t i = 0; i < w.size(); ++i) w[i] = (i / 128) % 2 == 0 ? u(rng) : -u(rng);
  for (int group : {32, 64, 128}) {
    AffineQuantized q = quantize_affine(w, 4, 128, 4, group);
    for (size_t g = 0; g < q.scales.size(); ++g) {
      const int64_t row = int64_t(g) / (128 / group);
      EXPECT_EQ(bf16_to_f32(q.scales[g]) < 0, row % 2 == 0) << "group " << g;
    }
    expect_within_bound(w, q, 4, 128);
  }
}

}  // namespace
}  // namespace orchid
