// GGUF tensor blocks to float, as ggml's format defines each type: the reference the loader
// and the kernels' tests check against (not a fast path). Values follow the definitions'
// operation order in fp32 (a scale times a code, then minus a minimum), each operation rounded
// on its own: the file is built with -ffp-contract=off (CMakeLists.txt), so results do not
// depend on the compiler (ggml's own builds may fuse a · b − c: one rounding less, ≤ 1 ulp).
//
// Types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (blocks of 32), Q4_K, Q5_K, Q6_K (super-
// blocks of 256 with 6- or 8-bit sub-block scales).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "orchid/util/bf16.h"

#include "orchid/util/status.h"

namespace orchid {

// `n` elements (whole blocks of the type) from `src` (exactly their bytes) into dst[0..n).
Status dequantize_gguf(uint32_t type, std::span<const uint8_t> src, int64_t n, float* dst);

// The fp16 value at p (the blocks' scales; unaligned).
inline float ggml_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The Q4_K / Q5_K 6-bit scale and minimum of sub-block j (of 8) from their 12 packed bytes q.
void ggml_scale_min_k4(int j, const uint8_t* q, int& sc, int& m);

}  // namespace orchid
