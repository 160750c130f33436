// GGUF rows re-laid into orchid's affine layout (weights.h: WeightFormat::affine, codes packed
// low bits first into uint32 words, one (scale, bias) pair a group) without re-quantization:
// the K and legacy types whose value is a code times a scale plus an offset per group keep their
// codes (4-bit ones as 4-bit, 5- and 6-bit ones in 8-bit containers), and the group's scale and
// offset become its fp32 scale and bias.
//
//   Q4_0  (q − 8) · d             → 4-bit codes q, scale d, bias −8d            (groups of 32)
//   Q4_1  q · d + m               → 4-bit codes q, scale d, bias m
//   Q4_K  d·sc · q − dmin·m       → 4-bit codes q, scale d·sc, bias −(dmin·m)
//   Q5_K  as Q4_K, 5-bit q        → 8-bit codes q, scale d·sc, bias −(dmin·m)
//   Q8_0  q · d (q signed)        → 8-bit codes q + 128, scale d, bias −128d
//   Q6_K  d·sc · (q − 32)         → 8-bit codes q, scale d·sc, bias −32·d·sc    (groups of 16)
//
// All but Q6_K give exactly the values ggml's definition gives (dequantize_gguf; only a zero's
// sign may differ): a code times its scale is exact in fp32 (fp16 scales, 6-bit sub-scales, codes
// of ≤ 8 bits), so scale · code + bias rounds once where the definition rounds once. Q6_K's
// 8-bit sub-scales leave d·sc · code one rounding, so a value may differ by an ulp of 64·|d·sc|.
#pragma once

#include <cstdint>
#include <span>

#include "orchid/util/status.h"

namespace orchid {

// Bits of the affine codes a GGUF type becomes (4 or 8), and elements a (scale, bias) group
// (32, or 16 for Q6_K); 0 for a type with no affine form here.
int gguf_affine_bits(uint32_t type);
int gguf_affine_group(uint32_t type);

// One row of `cols` elements (whole blocks; src exactly their bytes) → codes
// [cols · bits / 32], scales and biases [cols / group].
Status gguf_row_to_affine(uint32_t type, std::span<const uint8_t> src, int64_t cols,
                          uint32_t* codes, float* scales, float* biases);

}  // namespace orchid
