// GGUF block layouts (ggml's definitions): every quantised block starts with fp16 scale(s);
// nibble codes hold element j in the low and element j + 16 (or + 32 in the K types' halves) in
// the high four bits.
#include "orchid/model/gguf_dequant.h"

#include <cstring>

#include "orchid/model/gguf.h"
#include "orchid/util/bf16.h"

namespace orchid {
namespace {

// Q4_0: d (fp16), 16 bytes: element j = (low nibble − 8) · d, j + 16 = (high nibble − 8) · d.
void q4_0(const uint8_t* b, float* y) {
  const float d = ggml_f16(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = float(int(b[2 + j] & 15) - 8) * d;
    y[j + 16] = float(int(b[2 + j] >> 4) - 8) * d;
  }
}

// Q4_1: d, m (fp16), 16 bytes: nibble · d + m.
void q4_1(const uint8_t* b, float* y) {
  const float d = ggml_f16(b), m = ggml_f16(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = float(b[4 + j] & 15) * d + m;
    y[j + 16] = float(b[4 + j] >> 4) * d + m;
  }
}

// Q5_0: d, 4 bytes of fifth bits (bit j for element j), 16 bytes of nibbles; codes − 16.
void q5_0(const uint8_t* b, float* y) {
  const float d = ggml_f16(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b[6 + j] & 15) | int((qh >> j) & 1) << 4;
    const int hi = (b[6 + j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
    y[j] = float(lo - 16) * d;
    y[j + 16] = float(hi - 16) * d;
  }
}

// Q5_1: d, m, fifth bits, nibbles; code · d + m.
void q5_1(const uint8_t* b, float* y) {
  const float d = ggml_f16(b), m = ggml_f16(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b[8 + j] & 15) | int((qh >> j) & 1) << 4;
    const int hi = (b[8 + j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
    y[j] = float(lo) * d + m;
    y[j + 16] = float(hi) * d + m;
  }
}

// Q8_0: d, 32 signed bytes.
void q8_0(const uint8_t* b, float* y) {
  const float d = ggml_f16(b);
  for (int j = 0; j < 32; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}

void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  ggml_scale_min_k4(j, q, sc, m);
}

// Q4_K: d, dmin (fp16), 12 bytes of scales, 128 bytes of nibbles; each 64 elements are two
// sub-blocks of 32 (low nibbles, then high): d·sc · code − dmin·m.
void q4_k(const uint8_t* b, float* y) {
  const float d = ggml_f16(b), dmin = ggml_f16(b + 2);
  const uint8_t* sc = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0; j < 256; j += 64, q += 32) {
    int s0, m0, s1, m1;
    scale_min_k4(j / 32, sc, s0, m0);
    scale_min_k4(j / 32 + 1, sc, s1, m1);
    const float d0 = d * float(s0), o0 = dmin * float(m0);
    const float d1 = d * float(s1), o1 = dmin * float(m1);
    for (int l = 0; l < 32; ++l) {
      y[j + l] = d0 * float(q[l] & 15) - o0;
      y[j + 32 + l] = d1 * float(q[l] >> 4) - o1;
    }
  }
}

// Q5_K: as Q4_K with 32 bytes of fifth bits (bits 2i, 2i + 1 of byte l for the pair of
// sub-blocks i) before the nibbles.
void q5_k(const uint8_t* b, float* y) {
  const float d = ggml_f16(b), dmin = ggml_f16(b + 2);
  const uint8_t* sc = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + 48;
  for (int j = 0, i = 0; j < 256; j += 64, q += 32, ++i) {
    int s0, m0, s1, m1;
    scale_min_k4(j / 32, sc, s0, m0);
    scale_min_k4(j / 32 + 1, sc, s1, m1);
    const float d0 = d * float(s0), o0 = dmin * float(m0);
    const float d1 = d * float(s1), o1 = dmin * float(m1);
    for (int l = 0; l < 32; ++l) {
      const int lo = (q[l] & 15) + ((qh[l] >> (2 * i)) & 1) * 16;
      const int hi = (q[l] >> 4) + ((qh[l] >> (2 * i + 1)) & 1) * 16;
      y[j + l] = d0 * float(lo) - o0;
      y[j + 32 + l] = d1 * float(hi) - o1;
    }
  }
}

// Q6_K: 128 bytes of low nibbles, 64 of high bit pairs, 16 signed 8-bit scales, d (fp16);
// each 128 elements: four runs of 32 (codes − 32), scale per 16 elements.
void q6_k(const uint8_t* b, float* y) {
  const float d = ggml_f16(b + 208);
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
      const int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
      const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
      const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
      y[n + l] = d * float(sc[is]) * float(q1);
      y[n + l + 32] = d * float(sc[is + 2]) * float(q2);
      y[n + l + 64] = d * float(sc[is + 4]) * float(q3);
      y[n + l + 96] = d * float(sc[is + 6]) * float(q4);
    }
  }
}

}  // namespace

void ggml_scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63, m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

Status dequantize_gguf(uint32_t type, std::span<const uint8_t> src, int64_t n, float* dst) {
  GgmlBlock blk;
  if (!ggml_block(type, blk)) return err("dequantize: type ", ggml_type_name(type), " unknown");
  if (n < 0 || n % blk.elems != 0)
    return err("dequantize: ", n, " elements are not whole ", ggml_type_name(type), " blocks");
  const int64_t blocks = n / blk.elems;
  if (uint64_t(blocks) * uint64_t(blk.bytes) != src.size())
    return err("dequantize: ", n, " ", ggml_type_name(type), " elements take ",
               blocks * blk.bytes, " bytes, got ", src.size());
  const uint8_t* p = src.data();
  void (*block)(const uint8_t*, float*) = nullptr;
  switch (GgmlType(type)) {
    case GgmlType::F32:
      if (n) std::memcpy(dst, p, size_t(n) * 4);
      return {};
    case GgmlType::F16:
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = GgmlType(type) == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return {};
    case GgmlType::Q4_0:
      block = q4_0;
      break;
    case GgmlType::Q4_1:
      block = q4_1;
      break;
    case GgmlType::Q5_0:
      block = q5_0;
      break;
    case GgmlType::Q5_1:
      block = q5_1;
      break;
    case GgmlType::Q8_0:
      block = q8_0;
      break;
    case GgmlType::Q4_K:
      block = q4_k;
      break;
    case GgmlType::Q5_K:
      block = q5_k;
      break;
    case GgmlType::Q6_K:
      block = q6_k;
      break;
    default:
      return err("dequantize: ", ggml_type_name(type), " is not read yet");
  }
  for (int64_t k = 0; k < blocks; ++k) block(p + k * blk.bytes, dst + k * blk.elems);
  return {};
}

}  // namespace orchid
