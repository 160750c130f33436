// The batched q4 GEMV's tensor-core core (issue 32), shared by decode/gemv_slots_mma.cu (the
// projections) and decode/lm_head_slots.cu (the lm_head with each slot's pick): each slot gets
// the bits its batch-1 dp4a GEMV gives it.
//
// The batch-1 kernels sum a row as: lane l (of 32) chains the terms of units l, l + 32, …
// (unit_term: one fp32 step per 32-element unit from its exact integer sums), then the lanes'
// partials are added in a butterfly over lane bits 16, 8, 4, 2, 1 (reduce_rows is the same
// tree). Integer sums do not depend on how they are formed, so mma.m16n8k32 (u8 weight codes ×
// s8 x̂ codes) makes each unit's sums for 16 rows × 4 slots (hi and lo codes: the 8 columns) at
// once, and each thread replays the fp32 part exactly: a leaf's chain over its units, then the
// leaves added as the butterfly adds them (a carry stack over the leaves in bit-reversed order
// gives the same tree). A 16-row tile is split between P warps by leaves: part p takes the
// leaves of bit-reversed index [p · L, (p+1) · L), L = 32 / P, a subtree; the parts are added as
// the butterfly's top levels add them (sum_parts).
//
// Fragments (PTX ISA, m16n8k32 8-bit): thread (g, q) = (lane / 4, lane % 4) holds A rows g and
// g + 8 at k 4q…4q+3 (a0, a1) and 16+4q… (a2, a3); B column g at the same k (b0, b1); C rows g,
// g + 8, columns 2q, 2q + 1. Logical k 4q + e is the unit's element 8q + 2e and 16 + 4q + e is
// element 8q + 2e + 1 — the even and odd nibbles of word q, the order dp4a_q4.cuh packs x̂'s
// codes in (he, ho, le, lo per word). Column 2s is slot s's hi codes, 2s + 1 its lo codes, so
// thread (g, q) gets H and L of slot q for rows g and g + 8: the two terms it replays.
#pragma once

#include "orchid/backend/cuda/common/mma_sync.cuh"
#include "orchid/backend/cuda/decode/dp4a_q4.cuh"

namespace orchid::cuda {

__device__ __forceinline__ void mma_u8s8(int (&c)[4], const uint32_t (&a)[4], int b0, int b1) {
  asm(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The 5-bit reversal of i: leaf i (in butterfly order) is lane rev5(i) of the batch-1 kernel.
__host__ __device__ constexpr int rev5(int i) {
  return ((i & 1) << 4) | ((i & 2) << 2) | (i & 4) | ((i & 8) >> 2) | ((i & 16) >> 4);
}

// A slot's x̂ codes in shared memory for the B fragments, from GemvParams::x_codes (SlotCodes
// layout): 4 rows (word q of every unit: int4 (he, ho, le, lo)) of kQWords words, then the
// units' (d, sum). kQWords ≡ 4 and kSlotWords ≡ 16 (mod 32): a half warp's B loads (2 slots × 4
// q × hi/lo, 8 bytes each) cover the 32 banks once.
template <int UNITS>
struct MmaCodes {
  static constexpr int kQWords = 4 * UNITS + 4, kSlotWords = 4 * kQWords + 2 * UNITS;
  static constexpr int kSlotBytes = 4 * kSlotWords;
  static constexpr int kChunks = 4 * UNITS + UNITS / 2;  // 16-byte pieces a slot in x_codes
  static_assert(kQWords % 32 == 4 && kSlotWords % 32 == 16);

  // Piece c of a slot's x_codes → its byte offset in the slot's shared-memory codes.
  __device__ __forceinline__ static int offset(int c) {
    return c < 4 * UNITS ? (c / UNITS) * kQWords * 4 + (c % UNITS) * 16
                         : 4 * kQWords * 4 + (c - 4 * UNITS) * 16;
  }
  // cp.async of slots [0, n) from x_codes (slot b at x_codes + b · stride floats) to
  // dst + b · kSlotBytes, strided over the block's threads; the caller commits and waits.
  __device__ __forceinline__ static void copy(unsigned char* dst, const float* x_codes,
                                              int64_t stride, int n) {
    for (int idx = threadIdx.x; idx < n * kChunks; idx += blockDim.x) {
      const int sl = idx / kChunks, c = idx % kChunks;
      cp_async16(dst + sl * kSlotBytes + offset(c),
                 reinterpret_cast<const uint4*>(x_codes + sl * stride) + c);
    }
  }
};

__host__ __device__ constexpr int log2_of(int n) {
  return n <= 1 ? 0 : 1 + log2_of(n / 2);
}

// One part's subtree (leaves [pt · L, (pt+1) · L) in butterfly order, NI units a leaf) of rows
// g and g + 8 of a 16-row tile, for slot q of the quad whose codes start at `quad`
// (MmaCodes<NI · 32> layout). Leaf rev5(pt · L + i) = rev5(i) + lo with lo = rev5(pt · L) (pt in
// the index's high bits, i in its low ones), so every unit's offset is a constant from one base
// a part: w(i, j, r) is word q of unit rev5(i) + 32 j past lo of row g (r = 0) or g + 8 (r = 1),
// sb(i, j, r) that row's (scale, bias) word of group (rev5(i) >> 1) + 16 j past lo / 2.
template <int NI, int L, typename W, typename SB>
__device__ __forceinline__ void part_sums(W w, SB sb, const unsigned char* quad, int g, int q,
                                          int lo, float (&out)[2]) {
  using C = MmaCodes<NI * 32>;
  constexpr int LOG = log2_of(L);
  // B: column g is slot g / 2 of the quad, its hi (even g) or lo codes.
  const int2* bq =
      reinterpret_cast<const int2*>(quad + (g >> 1) * C::kSlotBytes + q * C::kQWords * 4 + lo * 16) +
      (g & 1);
  const float2* xd_lo =
      reinterpret_cast<const float2*>(quad + q * C::kSlotBytes + 4 * C::kQWords * 4) + lo;
  float stack[LOG + 1][2] = {};
#pragma unroll
  for (int i = 0; i < L; ++i) {
    float acc[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const int u = rev5(i) + 32 * j;  // past lo
      // B: x̂ codes of word q of unit u (int4 at row q, unit u; its hi or lo half).
      const int2 b = bq[2 * u];
      const uint32_t w0 = w(i, j, 0), w1 = w(i, j, 1);
      uint32_t a[4];
      a[0] = w0 & 0x0f0f0f0fu;
      a[1] = w1 & 0x0f0f0f0fu;
      a[2] = (w0 >> 4) & 0x0f0f0f0fu;
      a[3] = (w1 >> 4) & 0x0f0f0f0fu;
      int c[4] = {0, 0, 0, 0};
      mma_u8s8(c, a, b.x, b.y);
      const float2 xd = xd_lo[u];
      acc[0] = unit_term(c[0] * 16, c[1] * 16, xd.x, xd.y, sb(i, j, 0), acc[0]);
      acc[1] = unit_term(c[2] * 16, c[3] * 16, xd.x, xd.y, sb(i, j, 1), acc[1]);
    }
    // Push the leaf: add it to the stacked subtrees its index closes (carry of i + 1).
    int k = 0;
#pragma unroll
    for (; k < LOG && ((i >> k) & 1); ++k) {
      acc[0] = stack[k][0] + acc[0];
      acc[1] = stack[k][1] + acc[1];
    }
#pragma unroll
    for (int kk = 0; kk <= LOG; ++kk)
      if (kk == k) stack[kk][0] = acc[0], stack[kk][1] = acc[1];
  }
  out[0] = stack[LOG][0];
  out[1] = stack[LOG][1];
}

// The P parts' subtrees of one (row, slot) added as the butterfly's top levels add them
// (part(k): part k's sum).
template <int P, typename Part>
__device__ __forceinline__ float sum_parts(Part part) {
  if constexpr (P == 1) {
    return part(0);
  } else if constexpr (P == 2) {
    return part(0) + part(1);
  } else if constexpr (P == 4) {
    return (part(0) + part(1)) + (part(2) + part(3));
  } else {
    static_assert(P == 8);
    return ((part(0) + part(1)) + (part(2) + part(3))) + ((part(4) + part(5)) + (part(6) + part(7)));
  }
}

}  // namespace orchid::cuda
