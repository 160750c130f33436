// GGUF dequantisation (model/gguf_dequant.h) against blocks packed here from chosen scales,
// minimums and codes as the format lays them out: every element must come back as
// d · scale · code − dmin · min (to a few ulp of its terms), on fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "orchid/model/gguf_dequant.h"
#include "orchid/util/bf16.h"

namespace orchid {
namespace {

// The fp16 nearest a small positive value (tests pick scales exactly representable).
uint16_t f16_bits(float f) {
  // Exponent and 10 mantissa bits of a normal value in [2^-14, 65504).
  int e;
  const float m = std::frexp(f, &e);  // f = m · 2^e, m in [0.5, 1)
  const int mant = int(std::lround((m * 2 - 1) * 1024));
  return uint16_t(((e - 1 + 15) << 10) | (mant & 1023));
}

struct Expect {
  std::vector<double> value, mag;  // the exact element, and the size of its terms
};

void check(uint32_t type, const std::vector<uint8_t>& bytes, const Expect& want) {
  std::vector<float> got(want.value.size());
  ASSERT_TRUE(dequantize_gguf(type, bytes, int64_t(got.size()), got.data()).ok());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 4 * 1.2e-7 * want.mag[i] + 1e-30;
    if (!(std::fabs(got[i] - want.value[i]) <= tol) && bad++ < 5)
      ADD_FAILURE() << "type " << type << " element " << i << ": " << got[i] << " want "
                    << want.value[i];
  }
}

class GgufDequant : public ::testing::Test {
 protected:
  std::mt19937_64 rng{std::random_device{}()};
  int code(int n) { return int(rng() % uint64_t(n)); }
  // A scale: an fp16 value in [2^-10, 2^-2), returned with its bits.
  float scale(uint16_t& bits) {
    bits = f16_bits(std::ldexp(1.f + float(code(1024)) / 1024.f, -10 + code(8)));
    return f16_to_f32(bits);
  }
  void put16(std::vector<uint8_t>& b, uint16_t v) {
    b.push_back(uint8_t(v)), b.push_back(uint8_t(v >> 8));
  }
};

TEST_F(GgufDequant, Q8_0AndQ4_0AndQ5_0) {
  for (int blocks : {1, 3}) {
    std::vector<uint8_t> q8, q4, q5;
    Expect e8, e4, e5;
    for (int k = 0; k < blocks; ++k) {
      uint16_t db;
      const float d = scale(db);
      put16(q8, db), put16(q4, db), put16(q5, db);
      int c8[32], c4[32], c5[32];
      for (int j = 0; j < 32; ++j) c8[j] = code(256) - 128, c4[j] = code(16), c5[j] = code(32);
      for (int j = 0; j < 32; ++j) q8.push_back(uint8_t(c8[j]));
      // Q4_0: byte j holds element j (low nibble) and j + 16 (high).
      for (int j = 0; j < 16; ++j) q4.push_back(uint8_t(c4[j] | c4[j + 16] << 4));
      // Q5_0: the fifth bits of elements 0..31 as a little-endian u32, then the nibbles.
      uint32_t qh = 0;
      for (int j = 0; j < 32; ++j) qh |= uint32_t(c5[j] >> 4) << j;
      for (int s = 0; s < 4; ++s) q5.push_back(uint8_t(qh >> (8 * s)));
      for (int j = 0; j < 16; ++j) q5.push_back(uint8_t((c5[j] & 15) | (c5[j + 16] & 15) << 4));
      for (int j = 0; j < 32; ++j) {
        e8.value.push_back(double(d) * c8[j]), e8.mag.push_back(std::fabs(double(d) * c8[j]));
        e4.value.push_back(double(d) * (c4[j] - 8)), e4.mag.push_back(std::fabs(d * 8.0));
        e5.value.push_back(double(d) * (c5[j] - 16)), e5.mag.push_back(std::fabs(d * 16.0));
      }
    }
    check(8, q8, e8);
    check(2, q4, e4);
    check(6, q5, e5);
  }
}

TEST_F(GgufDequant, Q4_1AndQ5_1AddTheirMinimum) {
  std::vector<uint8_t> q4, q5;
  Expect e4, e5;
  for (int k = 0; k < 2; ++k) {
    uint16_t dbits, mbits;
    const float d = scale(dbits);
    const float m = -scale(mbits);  // a negative minimum: its bits with the sign set
    mbits |= 0x8000;
    put16(q4, dbits), put16(q4, mbits), put16(q5, dbits), put16(q5, mbits);
    int c4[32], c5[32];
    for (int j = 0; j < 32; ++j) c4[j] = code(16), c5[j] = code(32);
    for (int j = 0; j < 16; ++j) q4.push_back(uint8_t(c4[j] | c4[j + 16] << 4));
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= uint32_t(c5[j] >> 4) << j;
    for (int s = 0; s < 4; ++s) q5.push_back(uint8_t(qh >> (8 * s)));
    for (int j = 0; j < 16; ++j) q5.push_back(uint8_t((c5[j] & 15) | (c5[j + 16] & 15) << 4));
    for (int j = 0; j < 32; ++j) {
      e4.value.push_back(double(d) * c4[j] + m), e4.mag.push_back(d * 15.0 - m);
      e5.value.push_back(double(d) * c5[j] + m), e5.mag.push_back(d * 31.0 - m);
    }
  }
  check(3, q4, e4);
  check(7, q5, e5);
}

// The K types' 12 bytes of 6-bit scales and minimums for sub-blocks 0..7: bytes 0-3 scales
// 0-3 (low 6 bits) + the top bits of scales 4-7; bytes 4-7 the minimums likewise; bytes 8-11
// the low nibbles of scales 4-7 (low) and minimums 4-7 (high).
void pack_scales_k(const int (&sc)[8], const int (&mn)[8], std::vector<uint8_t>& b) {
  uint8_t s[12];
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
    s[j + 4] = uint8_t((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
    s[j + 8] = uint8_t((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
  }
  b.insert(b.end(), s, s + 12);
}

TEST_F(GgufDequant, Q4_KAndQ5_K) {
  std::vector<uint8_t> q4, q5;
  Expect e4, e5;
  for (int k = 0; k < 2; ++k) {
    uint16_t db, mb;
    const float d = scale(db), dmin = scale(mb);
    int sc[8], mn[8], c4[256], c5[256];
    for (int j = 0; j < 8; ++j) sc[j] = code(64), mn[j] = code(64);
    for (int i = 0; i < 256; ++i) c4[i] = code(16), c5[i] = code(32);
    put16(q4, db), put16(q4, mb), put16(q5, db), put16(q5, mb);
    pack_scales_k(sc, mn, q4);
    pack_scales_k(sc, mn, q5);
    // Q5_K's fifth bits: element 64c + l (l < 32) in bit 2c of byte l, 64c + 32 + l in 2c + 1.
    uint8_t qh[32] = {};
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        qh[l] |= uint8_t((c5[64 * c + l] >> 4) << (2 * c));
        qh[l] |= uint8_t((c5[64 * c + 32 + l] >> 4) << (2 * c + 1));
      }
    q5.insert(q5.end(), qh, qh + 32);
    // Nibbles: each 64 elements take 32 bytes, the first 32 elements low, the next 32 high.
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        q4.push_back(uint8_t(c4[64 * c + l] | c4[64 * c + 32 + l] << 4));
        q5.push_back(uint8_t((c5[64 * c + l] & 15) | (c5[64 * c + 32 + l] & 15) << 4));
      }
    for (int i = 0; i < 256; ++i) {
      const int sb = i / 32;
      const double a = double(d) * sc[sb], o = double(dmin) * mn[sb];
      e4.value.push_back(a * c4[i] - o), e4.mag.push_back(a * c4[i] + o);
      e5.value.push_back(a * c5[i] - o), e5.mag.push_back(a * c5[i] + o);
    }
  }
  check(12, q4, e4);
  check(13, q5, e5);
}

TEST_F(GgufDequant, Q6_K) {
  std::vector<uint8_t> q;
  Expect e;
  for (int k = 0; k < 2; ++k) {
    uint16_t db;
    const float d = scale(db);
    int sc[16], c[256];
    for (int j = 0; j < 16; ++j) sc[j] = code(256) - 128;
    for (int i = 0; i < 256; ++i) c[i] = code(64);
    // Each half of 128 elements: four runs of 32 (run r at 32r + l); its 64 bytes of low nibbles
    // hold ql[l] = run 0 | run 2 << 4 and ql[32 + l] = run 1 | run 3 << 4, its 32 bytes of high
    // bit pairs qh[l] = run 0 | run 1 << 2 | run 2 << 4 | run 3 << 6.
    uint8_t ql[128], qh[64];
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const int* r = c + 128 * h;
        ql[64 * h + l] = uint8_t((r[l] & 15) | (r[64 + l] & 15) << 4);
        ql[64 * h + 32 + l] = uint8_t((r[32 + l] & 15) | (r[96 + l] & 15) << 4);
        qh[32 * h + l] = uint8_t((r[l] >> 4) | (r[32 + l] >> 4) << 2 | (r[64 + l] >> 4) << 4 |
                                 (r[96 + l] >> 4) << 6);
      }
    q.insert(q.end(), ql, ql + 128);
    q.insert(q.end(), qh, qh + 64);
    for (int j = 0; j < 16; ++j) q.push_back(uint8_t(sc[j]));
    put16(q, db);
    // Scale j covers elements 16j … 16j + 15.
    for (int i = 0; i < 256; ++i) {
      const double v = double(d) * sc[i / 16] * (c[i] - 32);
      e.value.push_back(v), e.mag.push_back(std::fabs(v) + 1e-30);
    }
  }
  check(14, q, e);
}

TEST_F(GgufDequant, FloatTypesAndBadSizes) {
  const float f[3] = {1.5f, -2.25f, 3e-5f};
  std::vector<uint8_t> b(reinterpret_cast<const uint8_t*>(f), reinterpret_cast<const uint8_t*>(f) + 12);
  std::vector<float> out(3);
  ASSERT_TRUE(dequantize_gguf(0, b, 3, out.data()).ok());
  EXPECT_EQ(out[1], -2.25f);
  std::vector<uint8_t> h = {0x00, 0x3c, 0x00, 0xc0};  // fp16 1.0, -2.0
  ASSERT_TRUE(dequantize_gguf(1, h, 2, out.data()).ok());
  EXPECT_EQ(out[0], 1.f);
  EXPECT_EQ(out[1], -2.f);
  std::vector<uint8_t> bf = {0x80, 0x3f};  // bf16 1.0
  ASSERT_TRUE(dequantize_gguf(30, bf, 1, out.data()).ok());
  EXPECT_EQ(out[0], 1.f);
  std::vector<uint8_t> q8(34);
  EXPECT_FALSE(dequantize_gguf(8, q8, 16, out.data()).ok());  // not whole blocks
  EXPECT_FALSE(dequantize_gguf(8, q8, 64, out.data()).ok());  // bytes for one block
  EXPECT_FALSE(dequantize_gguf(16, q8, 256, out.data()).ok());  // IQ2_XXS
}

}  // namespace
}  // namespace orchid
