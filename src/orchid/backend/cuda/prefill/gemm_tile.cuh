// Tile machinery of the prefill GEMMs (prefill/dense_gemm.cu, prefill/expert_gemm.cu): one block
// computes C[BM, 128] = A[BM, K] · Bᵀ, A fp16 rows (any row addresses: gathered tokens work too)
// and B 128 rows of a q4 / q8 / bf16 DevMatrix (or of an fp16 matrix: the dequantisation ablation),
// fp16 products with fp32 accumulation on the tensor cores: wgmma on sm_90a for tiles of 64 or 128
// rows, mma.sync m16n8k16 otherwise (smaller tiles, and sm_80 code).
//
// Two precisions. The fp16 path (ORCHID_EXACT_PREFILL=0) reads A as fp16 and B dequantised to
// fp16 (s·q + b rounded): ~2^-12 per operand, ~1e-3 relative per projection. The exact path reads
// A as two fp16 operands hi + lo (the producers split their fp32 values: x within 2^-22 |x| +
// 2^-25), multiplied in two passes into the same fp32 sums, and q4 / q8 B tiles as the integer
// codes q (exact in fp16). Each quantisation group's partial sums P = Σ_{k∈g} A·q (fp16 products
// are exact in fp32) and A's row sums R = Σ_{k∈g} A (an mma against ones) are folded per group as
// C += s·P + b·R in fp32, the decode path's order (decode/dp4a_q4.cuh): the result is within fp32
// roundings of Σ x·(s·q + b). bf16 B takes the two A passes only (bf16 → fp16 is exact in range).
//
// Per k-step of 64 elements, cp.async copies A's [BM, 64] fp16 tile (exact: hi and lo tiles) and
// B's raw 16-byte units (q4/q8: and one (scale, bias) word per unit) into one of `kStages` shared
// stages. Each thread dequantises the units it copied itself into an fp16 [128, 64] tile
// (double-buffered) that the tensor cores then read like A; the full fp16 weight never exists in
// device memory. Iteration k: wait for stage k + 1, one barrier, then multiply stage k, issue stage
// k + kStages - 1 and dequantise stage k + 1 (wgmma multiplies asynchronously, behind the copies
// and the dequantising). fp16 B has nothing to dequantise: its stages are the tiles, waited for
// one step later.
//
// Shared tiles are [rows, 64] fp16, 8 chunks of 16 bytes per row; chunk c of row r sits at chunk
// c ^ (r & 7): wgmma's 128-byte swizzle (tiles start on 1024 bytes). ldmatrix's 8 row addresses
// per matrix, the cp.async writes and the dequantising stores (a quarter-warp covers 8 distinct
// chunk columns) are all free of bank conflicts.
//
// The tile shape, copy sources and host checks are in prefill/gemm_tile_cfg.cuh, the dequantising
// and the group fold in prefill/gemm_tile_dequant.cuh; this file holds the main loop.
#pragma once

#include "orchid/backend/cuda/prefill/gemm_tile_dequant.cuh"

namespace orchid::cuda::tile {

// ---- The main loop ---------------------------------------------------------------------------

// One block's pass over k: the copies, the dequantising, the fragment addresses, and the three
// schedules (mma.sync; wgmma; wgmma with the group fold). Whole block.
template <class Cfg>
struct TileLoop {
  static constexpr int S = Cfg::kStages, E = Cfg::E, UPR = Cfg::kUnitsPerRow;
  static constexpr int MI = Cfg::MI, NJ = Cfg::NJ;
  static constexpr uint32_t kLo = Cfg::kATileBytes;  // a stage's A_lo tile, after A_hi's

  const TileSrc<Cfg>& src;
  char* smem;
  uint32_t base;
  int tid, lane, warp, wm, wn, nk, k_units;
  // mma.sync: ldmatrix lane addresses. A x4 (rows 0-7 | 8-15) × (k 0-7 | 8-15): lane l gives row
  // l & 15 of chunk l >> 4. B x4 (two n8 fragments) × (k 0-7 | 8-15): row (l >> 4) · 8 + (l & 7)
  // of chunk (l >> 3) & 1. Fragment rows start at multiples of 8, so the swizzle key is l & 7.
  int a_hi, b_hi, key;
  uint32_t a_row[MI], b_row[NJ / 2];

  __device__ __forceinline__ TileLoop(const TileSrc<Cfg>& s, char* sm)
      : src(s),
        smem(sm),
        base(smem_addr(sm)),
        tid(threadIdx.x),
        lane(threadIdx.x & 31),
        warp(threadIdx.x >> 5),
        wm(warp / Cfg::kWarpsN),
        wn(warp % Cfg::kWarpsN),
        nk((s.k + kTileK - 1) / kTileK),
        k_units(s.k / E),
        a_hi(lane >> 4),
        b_hi((lane >> 3) & 1),
        key(lane & 7) {
#pragma unroll
    for (int i = 0; i < MI; ++i) a_row[i] = (wm * Cfg::WM + 16 * i + (lane & 15)) * kTileRowB;
#pragma unroll
    for (int j = 0; j < NJ / 2; ++j)
      b_row[j] = (Cfg::b_row(wn, 2 * j) + (lane >> 4) * 8 + key) * kTileRowB;
  }

  __device__ __forceinline__ uint32_t a_tile(int ks) const {
    return base + (ks % S) * Cfg::kStageBytes;
  }
  __device__ __forceinline__ char* bh(int ks) const {  // dequantised B, 2 × [128, 64] fp16
    return smem + S * Cfg::kStageBytes + (ks & 1) * Cfg::BN * kTileRowB;
  }
  __device__ __forceinline__ uint32_t b_tile(int ks) const {
    return Cfg::kDequant ? smem_addr(bh(ks)) : a_tile(ks) + Cfg::kABytes;
  }
  // Step ks's (scale, bias) words: unit u (of the step) of tile row r at [r · UPR + u].
  __device__ __forceinline__ const uint32_t* sb_words(int ks) const {
    return reinterpret_cast<const uint32_t*>(smem + (ks % S) * Cfg::kStageBytes + Cfg::kABytes +
                                             Cfg::kRawBytes);
  }

  // Copies of k-step ks into stage ks % S; a group is committed even past the end so that the
  // wait counts stay uniform.
  __device__ __forceinline__ void issue(int ks) const {
    if (ks < nk) {
      const uint32_t st = a_tile(ks);
      const int k0 = ks * kTileK, ch = tid & 7;
      const bool a_in = k0 + 8 * ch < src.k;
#pragma unroll
      for (int p = 0; p < Cfg::kAPerThread; ++p) {
        const int r = (tid + p * Cfg::kThreads) >> 3;
        const uint16_t* a = src.a[p];
        cp_async16(st + tile_off(r, ch), a ? a + k0 + 8 * ch : a, a && a_in);
        if constexpr (Cfg::kExact)
          cp_async16(st + kLo + tile_off(r, ch), a ? a + src.lo + k0 + 8 * ch : a, a && a_in);
      }
#pragma unroll
      for (int p = 0; p < Cfg::kUnitsPerThread; ++p) {
        const int u = tid + p * Cfg::kThreads, r = u / UPR, cu = ks * UPR + u % UPR;
        const bool in = src.b[p] && cu < k_units;
        if constexpr (Cfg::B == TileB::f16) {
          cp_async16(st + Cfg::kABytes + tile_off(r, u % UPR), src.b[p] + cu, in);
        } else {
          cp_async16(st + Cfg::kABytes + u * 16, src.b[p] + cu, in);
          if constexpr (Cfg::kHasSb)
            cp_async4(st + Cfg::kABytes + Cfg::kRawBytes + u * 4, src.sb[p] + (cu >> src.sb_shift),
                      in);
        }
      }
    }
    cp_async_commit();
  }

  // Dequantises this thread's units of k-step ks (its own copies: no barrier needed before); the
  // exact path keeps q4 / q8 codes unscaled.
  __device__ __forceinline__ void dequant(int ks) const {
    const char* st = smem + (ks % S) * Cfg::kStageBytes;
    char* out = bh(ks);
#pragma unroll
    for (int p = 0; p < Cfg::kUnitsPerThread; ++p) {
      const int u = tid + p * Cfg::kThreads, r = u / UPR, c0 = (u % UPR) * (E / 8);
      const uint4 raw = *reinterpret_cast<const uint4*>(st + Cfg::kABytes + u * 16);
      uint32_t sb = 0;
      if constexpr (Cfg::kHasSb)
        sb = *reinterpret_cast<const uint32_t*>(st + Cfg::kABytes + Cfg::kRawBytes + u * 4);
      uint4 ch[E / 8];
      dequant_unit<Cfg::B, !Cfg::kExact>(raw, sb, ch);
#pragma unroll
      for (int c = 0; c < E / 8; ++c) *reinterpret_cast<uint4*>(out + tile_off(r, c0 + c)) = ch[c];
    }
  }

  // The copies of the first kStages - 1 steps; step 0 dequantised.
  __device__ __forceinline__ void prologue() const {
#pragma unroll
    for (int s = 0; s < S - 1; ++s) issue(s);
    if constexpr (Cfg::kDequant) {
      cp_async_wait<S - 2>();
      dequant(0);
    }
  }
  // Before step ks's barrier. Dequantising: stage ks + 1 must have landed (ks was waited for one
  // step earlier).
  __device__ __forceinline__ void wait_stage() const {
    cp_async_wait<Cfg::kDequant ? S - 3 : S - 2>();
  }

  // The warp's A fragments of sub-step kk (16 of the step's 64 columns) from tile ta, and B's.
  __device__ __forceinline__ void load_a(uint32_t ta, int kk, uint32_t (&af)[MI][4]) const {
#pragma unroll
    for (int i = 0; i < MI; ++i) ldmatrix_x4(af[i], ta + a_row[i] + (((2 * kk + a_hi) ^ key) << 4));
  }
  __device__ __forceinline__ void load_b(uint32_t tb, int kk, uint32_t (&bf)[NJ / 2][4]) const {
#pragma unroll
    for (int j = 0; j < NJ / 2; ++j)
      ldmatrix_x4(bf[j], tb + b_row[j] + (((2 * kk + b_hi) ^ key) << 4));
  }
  static __device__ __forceinline__ void mma_frags(float (&d)[MI][NJ][4],
                                                   const uint32_t (&af)[MI][4],
                                                   const uint32_t (&bf)[NJ / 2][4]) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NJ; ++j)
        mma_16816(d[i][j], af[i], bf[j / 2][2 * (j & 1)], bf[j / 2][2 * (j & 1) + 1]);
  }

  // mma.sync: per step, wait, barrier, copy ahead and dequantise the next step, then
  // multiply(ks).
  template <class Multiply>
  __device__ __forceinline__ void run_sync(Multiply&& multiply) const {
    for (int ks = 0; ks < nk; ++ks) {
      wait_stage();
      // Every thread's copies are visible, and every warp is done with step ks - 1: its stage
      // (refilled next) and its dequantised buffer (rewritten next).
      __syncthreads();
      issue(ks + S - 1);
      if constexpr (Cfg::kDequant)
        if (ks + 1 < nk) dequant(ks + 1);
      multiply(ks);
    }
  }
  __device__ __forceinline__ void run_mma(float (&acc)[MI][NJ][4]) const {
    run_sync([&](int ks) {
#pragma unroll
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        uint32_t af[MI][4], bf[NJ / 2][4];
        load_a(a_tile(ks), kk, af);
        load_b(b_tile(ks), kk, bf);
        mma_frags(acc, af, bf);
        if constexpr (Cfg::kExact) {
          load_a(a_tile(ks) + kLo, kk, af);
          mma_frags(acc, af, bf);
        }
      }
    });
  }
  // The fold on mma.sync: both A passes into part and rs; where a group ends (after 2, 4, 8, …
  // sub-steps), folded into acc and restarted from zero.
  __device__ __forceinline__ void run_mma_fold(float (&acc)[MI][NJ][4]) const {
    float part[MI][NJ][4], rs[MI][4];
    zero(part), zero(rs);
    const int group = E << src.sb_shift;
    run_sync([&](int ks) {
#pragma unroll
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        uint32_t af[MI][4], bf[NJ / 2][4];
        load_b(b_tile(ks), kk, bf);
#pragma unroll
        for (int pass = 0; pass < 2; ++pass) {
          load_a(a_tile(ks) + pass * kLo, kk, af);
          mma_frags(part, af, bf);
#pragma unroll
          for (int i = 0; i < MI; ++i) row_sums(rs[i], af[i]);
        }
        if (((4 * ks + kk + 1) & (group / 16 - 1)) == 0) {
          fold_group<Cfg>(acc, part, rs, sb_words(ks) + (16 * kk & -group) / E, wn, lane);
          zero(part), zero(rs);
        }
      }
    });
  }

  // wgmma: each 4 consecutive warps multiply their 64 rows by all 128 B rows; the warpgroup's
  // 64 × 128 results are its warps' fragments in the mma C layout (warp w of the group: rows
  // 16w …, n8 fragment j = registers 4j … 4j + 3).
  __device__ __forceinline__ uint32_t wgmma_rows() const {
    return (warp / 4) * 64 * kTileRowB;
  }
  __device__ __forceinline__ void run_wgmma(float (&acc)[MI][NJ][4]) const {
    static_assert(MI == 1 && NJ == 16);
    float(&d)[64] = reinterpret_cast<float(&)[64]>(acc);
    for (int ks = 0; ks < nk; ++ks) {
      wait_stage();
      fence_proxy_async();
      __syncthreads();
      // Step ks on the tensor cores while this thread copies ahead and dequantises ks + 1 (the
      // other buffer; its last reader, step ks - 1, finished before the barrier).
      wgmma_fence();
      const uint32_t ta = a_tile(ks) + wgmma_rows();
      wgmma_steps<0, 4, Cfg::kExact>(d, wgmma_desc_k(ta), wgmma_desc_k(ta + kLo),
                                     wgmma_desc_k(b_tile(ks)), true);
      wgmma_commit();
      issue(ks + S - 1);
      if constexpr (Cfg::kDequant)
        if (ks + 1 < nk) dequant(ks + 1);
      wgmma_wait_all(d);
    }
  }
  // The fold on wgmma. part (64 more registers) takes a group's products; the warp's row sums
  // come from mma.sync on the same A tiles while the wgmma runs, then the fold waits for it. A
  // group of 32 is two per step: the second half-step's wgmma follows the first fold, unhidden.
  __device__ __forceinline__ void run_wgmma_fold(float (&acc)[MI][NJ][4]) const {
    static_assert(MI == 1 && NJ == 16);
    float part[MI][NJ][4], rs[2][MI][4];
    float(&p)[64] = reinterpret_cast<float(&)[64]>(part);
    zero(part);  // each group's first wgmma ignores it, but its operands must be defined
    const int group = E << src.sb_shift, steps = group / kTileK;  // 0: two groups per step
    for (int ks = 0; ks < nk; ++ks) {
      wait_stage();
      fence_proxy_async();
      __syncthreads();
      const bool first = steps <= 1 || (ks & (steps - 1)) == 0;  // a group starts at this step
      const bool last = steps <= 1 || (ks & (steps - 1)) == steps - 1;
      const uint32_t ta = a_tile(ks) + wgmma_rows();
      const uint64_t dh = wgmma_desc_k(ta), dl = wgmma_desc_k(ta + kLo),
                     db = wgmma_desc_k(b_tile(ks));
      // Fence, wgmmas and commit in one basic block each (else ptxas adds warpgroup arrives).
      if (steps == 0) {
        wgmma_fence();
        wgmma_steps<0, 2, true>(p, dh, dl, db, false);
        wgmma_commit();
      } else {
        wgmma_fence();
        wgmma_steps<0, 4, true>(p, dh, dl, db, !first);
        wgmma_commit();
      }
      issue(ks + S - 1);
      if (ks + 1 < nk) dequant(ks + 1);
      if (first) zero(rs[0]);
      if (steps == 0) zero(rs[1]);
#pragma unroll
      for (int kk = 0; kk < kTileK / 16; ++kk)
#pragma unroll
        for (int pass = 0; pass < 2; ++pass) {
          uint32_t af[MI][4];
          load_a(a_tile(ks) + pass * kLo, kk, af);
          if (steps == 0 && kk >= 2)
            row_sums(rs[1][0], af[0]);
          else
            row_sums(rs[0][0], af[0]);
        }
      wgmma_wait_all(p);
      const uint32_t* sb = sb_words(ks);
      if (steps == 0) {
        fold_group<Cfg>(acc, part, rs[0], sb, wn, lane);
        wgmma_fence();
        wgmma_steps<2, 2, true>(p, dh, dl, db, false);
        wgmma_commit();
        wgmma_wait_all(p);
        fold_group<Cfg>(acc, part, rs[1], sb + 32 / E, wn, lane);
      } else if (last) {
        fold_group<Cfg>(acc, part, rs[0], sb, wn, lane);
      }
    }
  }
};

// acc[i][j] = the warp's fragment (m16 i, n8 j) of A · Bᵀ over all of src.k, in the mma C layout:
// lane (g = lane / 4, t = lane % 4) holds rows g, g + 8 × columns 2t, 2t + 1 of the fragment.
// `smem` holds Cfg::kSmem bytes, 1024-byte aligned. Whole block.
template <class Cfg>
__device__ __forceinline__ void tile_mainloop(const TileSrc<Cfg>& src, char* smem,
                                              float (&acc)[Cfg::MI][Cfg::NJ][4]) {
  const TileLoop<Cfg> t(src, smem);
  zero(acc);
  t.prologue();
  if constexpr (Cfg::kWgmma && kHaveWgmma) {
    if constexpr (Cfg::kFold)
      t.run_wgmma_fold(acc);
    else
      t.run_wgmma(acc);
  } else if constexpr (Cfg::kFold) {
    t.run_mma_fold(acc);
  } else {
    t.run_mma(acc);
  }
  cp_async_wait<0>();
}

}  // namespace orchid::cuda::tile
