// GGUF rows re-laid into orchid's affine layout (weights.h: WeightFormat::affine, codes packed
// low bits first into uint32 words, one (scale, bias) pair a group) without re-quantization:
// the types whose value is a code times a scale plus an offset per group of 32 keep their codes,
// and their scale and offset become the group's fp32 scale and bias. For these types every
// value comes out exactly as ggml's definition gives it (dequantize_gguf; only a zero's sign may
// differ): the product of a code and its scale is exact in fp32 (fp16 scales, 6-bit sub-scales,
// codes of ≤ 8 bits), so scale · code + bias rounds once, where the definition rounds once.
//
//   Q4_0  (q − 8) · d             → 4-bit codes q, scale d, bias −8d
//   Q4_1  q · d + m               → 4-bit codes q, scale d, bias m
//   Q4_K  d·sc · q − dmin·m       → 4-bit codes q, scale d·sc, bias −(dmin·m), per sub-block
//   Q8_0  q · d (q signed)        → 8-bit codes q + 128, scale d, bias −128d
#pragma once

#include <cstdint>
#include <span>

#include "orchid/util/status.h"

namespace orchid {

inline constexpr int kGgufAffineGroup = 32;

// Bits of the affine codes a GGUF type becomes (4 or 8), or 0 when it has no exact affine form
// here.
int gguf_affine_bits(uint32_t type);

// One row of `cols` elements (whole blocks; src exactly their bytes) → codes
// [cols · bits / 32], scales and biases [cols / 32].
Status gguf_row_to_affine(uint32_t type, std::span<const uint8_t> src, int64_t cols,
                          uint32_t* codes, float* scales, float* biases);

}  // namespace orchid
