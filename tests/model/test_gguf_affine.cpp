// GGUF rows in orchid's affine layout (model/gguf_affine.h): random blocks of each type with an
// affine form (random codes and sub-scales, fp16 scales of random magnitude and sign)
// dequantize through the affine layout (quant.h: dequant_affine_row) to exactly the values the
// format's definition gives (compared as numbers: a code at Q4_0's offset gives +0 where the
// definition's (q − 8) · d gives −0 for a negative d; Q6_K within its stated rounding) (gguf_dequant.h); other types and bad sizes are errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "orchid/model/gguf.h"
#include "orchid/model/gguf_affine.h"
#include "orchid/model/gguf_dequant.h"
#include "orchid/model/quant.h"

namespace orchid {
namespace {

// A finite fp16 value with a random sign, exponent in [-14, 3] and mantissa.
uint16_t random_half(std::mt19937& rng) {
  const uint16_t sign = uint16_t(rng() & 1) << 15;
  const uint16_t exp = uint16_t(1 + rng() % 18);  // biased 1..18
  return uint16_t(sign | exp << 10 | (rng() & 0x3ff));
}

// Random bytes for `blocks` blocks of `type`, with its fp16 fields set to finite values.
std::vector<uint8_t> random_blocks(GgmlType type, int blocks, std::mt19937& rng) {
  GgmlBlock blk;
  EXPECT_TRUE(ggml_block(uint32_t(type), blk));
  std::vector<uint8_t> b(size_t(blocks) * size_t(blk.bytes));
  for (auto& x : b) x = uint8_t(rng());
  // Where the fp16 fields sit: Q6_K's d at its end, the others' d (and m / dmin) first.
  const int halves = type == GgmlType::Q4_1 || type == GgmlType::Q4_K || type == GgmlType::Q5_K ? 2 : 1;
  const size_t first = type == GgmlType::Q6_K ? 208 : 0;
  for (int k = 0; k < blocks; ++k)
    for (int h = 0; h < halves; ++h) {
      const uint16_t v = random_half(rng);
      std::memcpy(b.data() + size_t(k) * size_t(blk.bytes) + first + 2 * h, &v, 2);
    }
  return b;
}

TEST(GgufAffine, RowsDequantizeAsTheFormatDefinesThem) {
  std::mt19937 rng(std::random_device{}());
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K}) {
    GgmlBlock blk;
    ASSERT_TRUE(ggml_block(uint32_t(t), blk));
    const int bits = gguf_affine_bits(uint32_t(t)), group = gguf_affine_group(uint32_t(t));
    ASSERT_GT(bits, 0) << ggml_type_name(uint32_t(t));
    for (int rep = 0; rep < 20; ++rep) {
      const int blocks = 1 + int(rng() % 8);
      const int64_t cols = int64_t(blocks) * blk.elems;
      const std::vector<uint8_t> src = random_blocks(t, blocks, rng);
      std::vector<float> want(static_cast<size_t>(cols)), got(static_cast<size_t>(cols));
      ASSERT_TRUE(dequantize_gguf(uint32_t(t), src, cols, want.data()).ok());
      std::vector<uint32_t> codes(static_cast<size_t>(cols * bits / 32));
      std::vector<float> scales(static_cast<size_t>(cols / group)), biases(static_cast<size_t>(cols / group));
      ASSERT_TRUE(gguf_row_to_affine(uint32_t(t), src, cols, codes.data(), scales.data(), biases.data()).ok());
      dequant_affine_row(codes.data(), scales.data(), biases.data(), cols, bits, group, got.data());
      int bad = 0;
      for (int64_t i = 0; i < cols; ++i)
        // Q6_K: scale · code may round (8-bit sub-scales): within an ulp of 64 · |scale|.
        if (!(t == GgmlType::Q6_K
                  ? std::fabs(got[size_t(i)] - want[size_t(i)]) <=
                        std::ldexp(std::fabs(scales[size_t(i / group)]), -17)
                  : want[size_t(i)] == got[size_t(i)]) &&
            bad++ < 3)
          ADD_FAILURE() << ggml_type_name(uint32_t(t)) << " element " << i << ": "
                        << got[size_t(i)] << " affine, " << want[size_t(i)] << " defined";
    }
  }
}

TEST(GgufAffine, OtherTypesAndBadSizesAreErrors) {
  std::vector<uint8_t> src(210);
  std::vector<uint32_t> codes(64);
  std::vector<float> s(8), b(8);
  for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::F16, GgmlType::Q5_0}) {
    EXPECT_EQ(gguf_affine_bits(uint32_t(t)), 0) << ggml_type_name(uint32_t(t));
    EXPECT_FALSE(gguf_row_to_affine(uint32_t(t), src, 256, codes.data(), s.data(), b.data()).ok());
  }
  std::vector<uint8_t> q40(18 * 2);
  EXPECT_TRUE(gguf_row_to_affine(uint32_t(GgmlType::Q4_0), q40, 64, codes.data(), s.data(), b.data()).ok());
  EXPECT_FALSE(gguf_row_to_affine(uint32_t(GgmlType::Q4_0), q40, 96, codes.data(), s.data(), b.data()).ok());
  EXPECT_FALSE(gguf_row_to_affine(uint32_t(GgmlType::Q4_0), q40, 48, codes.data(), s.data(), b.data()).ok());
  EXPECT_FALSE(gguf_row_to_affine(uint32_t(GgmlType::Q4_0), q40, 0, codes.data(), s.data(), b.data()).ok());
}

}  // namespace
}  // namespace orchid
