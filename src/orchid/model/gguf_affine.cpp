// gguf_row_to_affine: ggml's block layouts (gguf_dequant.cpp has their definitions) unpacked into
// codes in element order, then packed low bits first.
#include "orchid/model/gguf_affine.h"

#include <cstring>

#include "orchid/model/gguf.h"
#include "orchid/model/gguf_dequant.h"
#include "orchid/util/bf16.h"

namespace orchid {
namespace {

// Codes of one block in element order (q), and each group of 32's scale and bias.
void q4_0(const uint8_t* b, uint8_t* q, float* s, float* o) {
  const float d = ggml_f16(b);
  for (int j = 0; j < 16; ++j) q[j] = b[2 + j] & 15, q[j + 16] = b[2 + j] >> 4;
  s[0] = d, o[0] = -8.f * d;
}
void q4_1(const uint8_t* b, uint8_t* q, float* s, float* o) {
  for (int j = 0; j < 16; ++j) q[j] = b[4 + j] & 15, q[j + 16] = b[4 + j] >> 4;
  s[0] = ggml_f16(b), o[0] = ggml_f16(b + 2);
}
void q8_0(const uint8_t* b, uint8_t* q, float* s, float* o) {
  const float d = ggml_f16(b);
  for (int j = 0; j < 32; ++j) q[j] = uint8_t(int(int8_t(b[2 + j])) + 128);
  s[0] = d, o[0] = -128.f * d;
}
void q4_k(const uint8_t* b, uint8_t* q, float* s, float* o) {
  const float d = ggml_f16(b), dmin = ggml_f16(b + 2);
  const uint8_t* qs = b + 16;
  for (int c = 0; c < 4; ++c, qs += 32) {
    for (int l = 0; l < 32; ++l) q[64 * c + l] = qs[l] & 15, q[64 * c + 32 + l] = qs[l] >> 4;
    for (int h = 0; h < 2; ++h) {
      int sc, m;
      ggml_scale_min_k4(2 * c + h, b + 4, sc, m);
      s[2 * c + h] = d * float(sc), o[2 * c + h] = -(dmin * float(m));
    }
  }
}

void q5_k(const uint8_t* b, uint8_t* q, float* s, float* o) {
  const float d = ggml_f16(b), dmin = ggml_f16(b + 2);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int c = 0; c < 4; ++c, qs += 32) {
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = uint8_t((qs[l] & 15) + ((qh[l] >> (2 * c)) & 1) * 16);
      q[64 * c + 32 + l] = uint8_t((qs[l] >> 4) + ((qh[l] >> (2 * c + 1)) & 1) * 16);
    }
    for (int h = 0; h < 2; ++h) {
      int sc, m;
      ggml_scale_min_k4(2 * c + h, b + 4, sc, m);
      s[2 * c + h] = d * float(sc), o[2 * c + h] = -(dmin * float(m));
    }
  }
}
// Groups of 16: element 128 n + 32 r + l (run r of half n) has scale index 8 n + 2 r + l / 16.
void q6_k(const uint8_t* b, uint8_t* q, float* s, float* o) {
  const float d = ggml_f16(b + 208);
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int n = 0; n < 2; ++n) {
    const uint8_t* ql = b + 64 * n;
    const uint8_t* qh = b + 128 + 32 * n;
    for (int l = 0; l < 32; ++l) {
      q[128 * n + l] = uint8_t((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4);
      q[128 * n + 32 + l] = uint8_t((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4);
      q[128 * n + 64 + l] = uint8_t((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
      q[128 * n + 96 + l] = uint8_t((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
    }
  }
  for (int g = 0; g < 16; ++g) {
    const float scale = d * float(sc[g]);
    s[g] = scale, o[g] = -32.f * scale;
  }
}

// A type's affine form: code bits, elements a group, and its block's unpacking.
struct Form {
  int bits = 0, group = 0;
  void (*block)(const uint8_t*, uint8_t*, float*, float*) = nullptr;
};

Form form_of(uint32_t type) {
  switch (GgmlType(type)) {
    case GgmlType::Q4_0:
      return {4, 32, q4_0};
    case GgmlType::Q4_1:
      return {4, 32, q4_1};
    case GgmlType::Q4_K:
      return {4, 32, q4_k};
    case GgmlType::Q5_K:
      return {8, 32, q5_k};
    case GgmlType::Q8_0:
      return {8, 32, q8_0};
    case GgmlType::Q6_K:
      return {8, 16, q6_k};
    default:
      return {};
  }
}

}  // namespace

int gguf_affine_bits(uint32_t type) {
  return form_of(type).bits;
}

int gguf_affine_group(uint32_t type) {
  return form_of(type).group;
}

Status gguf_row_to_affine(uint32_t type, std::span<const uint8_t> src, int64_t cols,
                          uint32_t* codes, float* scales, float* biases) {
  const Form form = form_of(type);
  GgmlBlock blk;
  if (form.bits == 0 || !ggml_block(type, blk))
    return err("affine form: ", ggml_type_name(type), " has none without re-quantization");
  if (cols <= 0 || cols % blk.elems != 0 || uint64_t(cols / blk.elems) * uint64_t(blk.bytes) != src.size())
    return err("affine form: a row of ", cols, " ", ggml_type_name(type), " elements, ",
               src.size(), " bytes");
  uint8_t q[256];
  const int bits = form.bits, per_word = 32 / bits, groups = blk.elems / form.group;
  for (int64_t k = 0; k < cols / blk.elems; ++k) {
    form.block(src.data() + k * blk.bytes, q, scales + k * groups, biases + k * groups);
    uint32_t* w = codes + k * blk.elems / per_word;
    for (int i = 0; i < blk.elems / per_word; ++i) {
      uint32_t word = 0;
      for (int e = 0; e < per_word; ++e) word |= uint32_t(q[i * per_word + e]) << (e * bits);
      w[i] = word;
    }
  }
  return {};
}

}  // namespace orchid
