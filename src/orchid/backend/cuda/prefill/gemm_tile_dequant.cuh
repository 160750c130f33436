// The tile GEMMs' per-element arithmetic (prefill/gemm_tile.cuh has the design): one 16-byte
// weight unit dequantised to fp16 chunks (or to integer codes, or to scaled codes), the exact
// path's per-group fold of partial sums, and the wgmma k-steps with their optional A_lo pass.
#pragma once

#include "orchid/backend/cuda/prefill/gemm_tile_cfg.cuh"

namespace orchid::cuda::tile {

// ---- Dequantisation: one 16-byte unit → E / 8 chunks of fp16 -------------------------------

__device__ __forceinline__ uint32_t h2_bits(__half2 h) {
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ __half2 bits_h2(uint32_t u) {
  return *reinterpret_cast<const __half2*>(&u);
}

// Codes as fp16 pairs (1024 + q0, 1024 + q1) (bits 0x6400 | q), then q = h − 1024 (exact) and,
// SCALED (the fp16 path), s·q + b with one rounding (fma). s and b are bf16, exact in fp16 unless
// below fp16's normal range (|x| < 2^-14), where they keep 2^-24 absolute precision. Unscaled (the
// exact path) the pair is the codes themselves.
template <bool SCALED>
__device__ __forceinline__ uint32_t code_pair(uint32_t h, __half2 s, __half2 b) {
  const __half2 q = __hsub2(bits_h2(h), __float2half2_rn(1024.f));
  return h2_bits(SCALED ? __hfma2(q, s, b) : q);
}

// Elements 8i + 2p and 8i + 2p + 1 of a q4 unit (word w = its word i, hi = w >> 4) as the fp16
// pair (1024 + q0, 1024 + q1): byte p of w holds them in its two nibbles, byte p of hi has the
// second in its low nibble; a byte permute puts the two in the halves' low bytes and a mask + OR
// makes them 0x6400 | q.
__device__ __forceinline__ uint32_t q4_biased_pair(uint32_t w, uint32_t hi, int p) {
  const uint32_t sel =
      uint32_t(p) | uint32_t(p) << 4 | uint32_t(4 + p) << 8 | uint32_t(4 + p) << 12;
  return (__byte_perm(w, hi, sel) & 0x000f000fu) | 0x64006400u;
}

// One unit's elements as fp16: q4 / q8 dequantised (SCALED) or their codes; bf16 converted.
template <TileB B, bool SCALED>
__device__ __forceinline__ void dequant_unit(uint4 raw, uint32_t sb,
                                             uint4 (&out)[tile_unit_elems(B) / 8]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (B == TileB::q4) {
    // Word i holds elements 8i … 8i + 7 (nibble j = element 8i + j) = chunk i.
    const __half2 s = __float2half2_rn(bf16_lo(sb)), b = __float2half2_rn(bf16_hi(sb));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t hi = w[i] >> 4;
      uint32_t o[4];
#pragma unroll
      for (int p = 0; p < 4; ++p) o[p] = code_pair<SCALED>(q4_biased_pair(w[i], hi, p), s, b);
      out[i] = make_uint4(o[0], o[1], o[2], o[3]);
    }
  } else if constexpr (B == TileB::q8) {
    // Word i holds elements 4i … 4i + 3 (byte j); chunk c is words 2c and 2c + 1.
    const __half2 s = __float2half2_rn(bf16_lo(sb)), b = __float2half2_rn(bf16_hi(sb));
    uint32_t o[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o[2 * i] = code_pair<SCALED>(__byte_perm(w[i], 0x64646464u, 0x4140), s, b);
      o[2 * i + 1] = code_pair<SCALED>(__byte_perm(w[i], 0x64646464u, 0x4342), s, b);
    }
    out[0] = make_uint4(o[0], o[1], o[2], o[3]);
    out[1] = make_uint4(o[4], o[5], o[6], o[7]);
  } else {
    // bf16 pairs → fp16 pairs (round to nearest; the model's weights are far inside fp16's range).
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) o[i] = h2_bits(__floats2half2_rn(bf16_lo(w[i]), bf16_hi(w[i])));
    out[0] = make_uint4(o[0], o[1], o[2], o[3]);
  }
}

// ---- The exact path's group fold ---------------------------------------------------------------

// An fp16 pair (1, 1): as an mma's B operand, each output column is the A fragment's row sums.
constexpr uint32_t kOnesH2 = 0x3c003c00u;

// rs += Σ_k of a 16 × 16 A fragment's rows (mma C layout: rs[0] row g, rs[2] row g + 8; rs[1] and
// rs[3] are the same sums again). Products with 1 are exact, the sums fp32.
__device__ __forceinline__ void row_sums(float (&rs)[4], const uint32_t (&a)[4]) {
  mma_16816(rs, a, kOnesH2, kOnesH2);
}

template <class T>
__device__ __forceinline__ void zero(T& x) {
  float* f = reinterpret_cast<float*>(&x);
#pragma unroll
  for (int i = 0; i < int(sizeof(T) / sizeof(float)); ++i) f[i] = 0.f;
}

// acc += s · part + b · rs for one quantisation group, in fp32: part[i][j] is the warp's fragment
// (m16 i, n8 j) of Σ_{k∈g} A·q, rs[i] its rows' Σ_{k∈g} A (row_sums), and sb the stage's (scale,
// bias) words from the group's first unit on (tile row c's at sb[c · kUnitsPerRow]).
template <class Cfg>
__device__ __forceinline__ void fold_group(float (&acc)[Cfg::MI][Cfg::NJ][4],
                                           const float (&part)[Cfg::MI][Cfg::NJ][4],
                                           const float (&rs)[Cfg::MI][4], const uint32_t* sb,
                                           int wn, int lane) {
#pragma unroll
  for (int j = 0; j < Cfg::NJ; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const uint32_t w = sb[(Cfg::b_row(wn, j) + 2 * (lane & 3) + e) * Cfg::kUnitsPerRow];
      const float s = bf16_lo(w), b = bf16_hi(w);
#pragma unroll
      for (int i = 0; i < Cfg::MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float& c = acc[i][j][2 * h + e];
          c = fmaf(s, part[i][j][2 * h + e], fmaf(b, rs[i][2 * h], c));
        }
    }
}

// d (= or +=) A · Bᵀ over sub-steps [KK0, KK0 + N) (16 elements each) of a k-step: A from the tile
// of descriptor a and, LO, a second pass from al's (A_lo); !accumulate: d starts from zero.
template <int KK0, int N, bool LO>
__device__ __forceinline__ void wgmma_steps(float (&d)[64], uint64_t a, uint64_t al, uint64_t b,
                                            bool accumulate) {
#pragma unroll
  for (int kk = KK0; kk < KK0 + N; ++kk) {
    wgmma_m64n128k16(d, a + 2 * kk, b + 2 * kk, accumulate || kk > KK0);
    if constexpr (LO) wgmma_m64n128k16(d, al + 2 * kk, b + 2 * kk, true);
  }
}

}  // namespace orchid::cuda::tile
