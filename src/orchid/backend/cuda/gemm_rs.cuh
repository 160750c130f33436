// The swapped warp-specialised q4 tiles (ORCHID_GEMM_RS; docs/perf-notes.md, session 15): the
// scaled codes' products (gemm_ws.cuh: B = s·(q − 8)·2^code_exp exact in fp16, the biases as extra
// k-steps against A's group sums) computed as Cᵀ = W · Xᵀ, so that the weights are wgmma's
// register operand instead of an fp16 tile in shared memory.
//
// Why: on the scaled tiles (gemm_ws.cuh) the converted B tile costs 32 KB a stage, a pass of
// stores by some warp, a proxy fence and a barrier before the tensor cores may read it, and the
// per-instruction profile put the steps at ~4,000 cycles against ~2,200 of tensor work. Here a
// stage holds X (hi, and lo when exact: 256 tokens × 64, swizzled by TMA in two boxes of 128
// rows) and the step's raw codes and (scale, bias) words, and each consumer thread converts the
// codes of its own A fragments straight into registers: a k16 slice's fragment serves both passes,
// its conversion overlaps the slice before it in the tensor cores, and with 256 tokens a tile a
// thread converts 32 codes a step (the scaled tiles' consumers: 64).
//
// A block of 384 threads, one an SM, walks the launch's items (256 tokens × 128 features):
// warpgroup 0 the producer (TMA for X or its group sums, cp.async for B row t's raw units and
// word), warpgroups 1 and 2 the consumers. Consumer warpgroup c owns features [64c, 64c + 64)
// (wgmma's m64) and every token (n256): a thread's 128 accumulators hold Cᵀ rows (features)
// 64c + wgmma_frag_row and columns (tokens) in the wgmma layout. Per k-step the consumers wait for
// the stage's copies; per k16 slice kk a thread makes the A fragment of its two feature rows from
// byte (lane % 4) of each row's words 2kk and 2kk + 1 (rs_code_pair, exact), or in a bias step
// from the rows' (scale, bias) words (bias_col), then issues each pass's product: one wgmma group
// a slice, two fragment sets (a slice converts while the one before multiplies). A stage goes back
// once the groups of its four slices have retired.
#pragma once

#include "orchid/backend/cuda/gemm_ws.cuh"

namespace orchid::cuda::tile {

template <bool EXACT>
struct RsCfg {
  static constexpr bool kExact = EXACT;
  static constexpr int kPasses = EXACT ? 2 : 1;
  static constexpr int BM = 256;  // tokens: X rows, C rows (wgmma's N)
  static constexpr int BN = 128;  // features: W rows, C columns (two warpgroups' m64)
  static constexpr int kProducerThreads = 128, kMmaThreads = 256;
  static constexpr int kThreads = kProducerThreads + kMmaThreads;
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;  // 40 · 128 + 232 · 256 ≤ 65,536
  static constexpr int kXTileBytes = BM * kTileRowB;             // 32 KB: X_hi, then X_lo
  static constexpr int kUnitBytes = BN * 16;                     // unit u of every row
  static constexpr int kRaw = kPasses * kXTileBytes;  // unit u of row r: + u · 2 KB + 16 r
  static constexpr int kSb = kRaw + 2 * kUnitBytes;   // row r's word: + 4 r
  static constexpr int kStageBytes = (kSb + 4 * BN + 1023) / 1024 * 1024;
  static constexpr int kStages = EXACT ? 3 : 6;  // 69 KB or 37 KB stages
  static constexpr int kBars = kStages * kStageBytes;
  static constexpr int kSmem = kBars + 2 * kStages * 8;
  static_assert(kSmem <= 227 * 1024, "more shared memory than a block may have");
  static_assert(BM == 2 * kTmaATileRows, "an X tile is two of a tensor map's boxes");
  static_assert(BN == kProducerThreads, "a B row per producer thread");
};

// What the producer copies for one item: its B row's raw units and word (thread t: row t; null:
// past the matrix, zero-filled), and X (or its sums) by the copy engine from row x_row on (thread
// 0 alone: x_row ≥ 0).
struct RsSrc {
  const uint4* b = nullptr;
  const uint32_t* sb = nullptr;
  const CUtensorMap* x_map = nullptr;  // X_hi, X_lo, then the sums' map
  int x_row = -1;
  int sums_lo = 0;  // elements from the sums' hi block to their lo block
};

// What a consumer thread needs of an item: 2^code_exp of its tile's matrix, and for bias steps
// the (scale, bias) rows of its two features (null: past the matrix).
struct RsRows {
  float f = 1.f;
  const uint32_t* sb[2] = {};  // [upper]
};

template <class Cfg>
struct RsSmem {
  char* p;
  uint32_t base;
  __device__ __forceinline__ static int stage(int g) {
    return (g % Cfg::kStages) * Cfg::kStageBytes;
  }
  __device__ __forceinline__ uint32_t full(int g) const {
    return base + Cfg::kBars + 8 * (g % Cfg::kStages);
  }
  __device__ __forceinline__ uint32_t empty(int g) const {
    return base + Cfg::kBars + 8 * (Cfg::kStages + g % Cfg::kStages);
  }
};

// Producer thread t over an item's nk + nb steps (the block's steps [g0, …)).
template <class Cfg>
__device__ __forceinline__ void rs_produce(const RsSrc& src, const RsSmem<Cfg>& sm, int t, int nk,
                                           int nb, int g0) {
  constexpr int S = Cfg::kStages, P = Cfg::kPasses, kBox = Cfg::kXTileBytes / 2;
  for (int ks = 0; ks < nk + nb; ++ks) {
    const int g = g0 + ks, j = ks - nk;  // j ≥ 0: bias step j
    if (g >= S) mbar_wait(sm.empty(g), (g / S - 1) & 1);
    const uint32_t st = sm.base + sm.stage(g);
    if (src.x_row >= 0) {
      mbar_expect_tx(sm.full(g), P * Cfg::kXTileBytes);
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int row = src.x_row + kTmaATileRows * q;
        if (j < 0) {
          tma_load_2d(st + kBox * q, src.x_map, ks * kTileK, row, sm.full(g));
          if constexpr (P == 2)
            tma_load_2d(st + Cfg::kXTileBytes + kBox * q, src.x_map + 1, ks * kTileK, row,
                        sm.full(g));
        } else {
          tma_load_2d(st + kBox * q, src.x_map + 2, j * kTileK, row, sm.full(g));
          if constexpr (P == 2)
            tma_load_2d(st + Cfg::kXTileBytes + kBox * q, src.x_map + 2, src.sums_lo + j * kTileK,
                        row, sm.full(g));
        }
      }
    }
    if (j < 0) {
      const uint4* const b = src.b;
      cp_async16(st + Cfg::kRaw + 16 * t, b ? b + 2 * ks : b, b != nullptr);
      cp_async16(st + Cfg::kRaw + Cfg::kUnitBytes + 16 * t, b ? b + 2 * ks + 1 : b, b != nullptr);
      cp_async4(st + Cfg::kSb + 4 * t, src.sb ? src.sb + ks : src.sb, src.sb != nullptr);
    }
    cp_async_mbar_arrive(sm.full(g));
    mbar_arrive(sm.full(g));
  }
  cp_async_wait_all();
}

// Byte c of code word w (elements 2c, 2c + 1) as the fp16 pair s·(q − 8), exact (gemm_ws.cuh):
// sel = c · 0x101 puts the byte in bytes 0 and 2, the mask keeps its low nibble in the low half
// (1024 + q) and its high one in bits 4-7 of the high half (1024 + 16 q); one fma by (1, 1/16)
// and (−1032, −72) gives q − 8 in both, exact. Four instructions a pair.
__device__ __forceinline__ uint32_t rs_code_pair(uint32_t w, uint32_t sel, __half2 s) {
  const uint32_t x = (__byte_perm(w, 0, sel) & 0x00f0000fu) | 0x64006400u;
  const __half2 q = __hfma2(bits_h2(x), __halves2half2(__float2half(1.f), __float2half(0.0625f)),
                            __halves2half2(__float2half(-1032.f), __float2half(-72.f)));
  return h2_bits(__hmul2(q, s));
}

// One consumer thread (ct of the 256) over an item's nk code steps and nb bias steps: the products
// into acc (features 64 (ct / 128) + wgmma_frag_row, tokens in the wgmma layout).
template <class Cfg>
struct RsConsumer {
  const RsSmem<Cfg>& sm;
  const RsRows& rows;
  int nk, nb, g0, ct;
  float acc[128];

  // The feature row (within the tile) of upper half h.
  __device__ __forceinline__ int row(int h) const {
    return 64 * (ct / 128) + wgmma_frag_row(ct % 128, h);
  }
  // The A fragment of k16 slice kk of code step g: rows (0, 1) × columns 16 kk + 2 (ct % 4) (+ 8).
  __device__ __forceinline__ void code_frag(int g, int kk, const __half2 (&s)[2], uint32_t sel,
                                            uint32_t (&a)[4]) const {
    const char* raw = sm.p + sm.stage(g) + Cfg::kRaw + (kk / 2) * Cfg::kUnitBytes + 8 * (kk % 2);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint2 w = *reinterpret_cast<const uint2*>(raw + 16 * row(h));
      a[h] = rs_code_pair(w.x, sel, s[h]);      // columns 2c, 2c + 1
      a[2 + h] = rs_code_pair(w.y, sel, s[h]);  // columns 8 + 2c, + 1
    }
  }
  // The A fragment of k16 slice kk of bias step j: the rows' bias columns (bias_col).
  __device__ __forceinline__ void bias_frag(int j, int kk, uint32_t (&a)[4]) const {
    const int e = j * kTileK + 16 * kk + 2 * (ct % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int q = 0; q < 2; ++q)
        a[h + 2 * q] = bias_col(rows.sb[h], e + 8 * q, nk, rows.f) |
                       bias_col(rows.sb[h], e + 8 * q + 1, nk, rows.f) << 16;
  }
  __device__ __forceinline__ void release(int g) const {
    __syncwarp();
    if (ct % 32 == 0) mbar_arrive(sm.empty(g));
  }

  // Slice i = 4 ks + kk writes fragment set kk % 2, whose last reader, slice i - 2, has retired
  // once at most one group is in flight (wgmma_wait<1>); so have all slices before it, and a
  // step's stage goes back once its last slice (4 ks + 3) has.
  __device__ __forceinline__ void run() {
    constexpr int P = Cfg::kPasses;
    const int steps = nk + nb;
    const uint32_t sel = 0x101u * uint32_t(ct % 4);
    uint32_t a[2][4];  // [set][register]
    zero(acc);
    fence_operands(acc);
    int released = 0;  // the item's steps whose stages went back
    for (int ks = 0; ks < steps; ++ks) {
      const int g = g0 + ks;
      mbar_wait(sm.full(g), (g / Cfg::kStages) & 1);
      __half2 s[2];
      if (ks < nk)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          s[h] = __float2half2_rn(rows.f * bf16_lo(*reinterpret_cast<const uint32_t*>(
                                               sm.p + sm.stage(g) + Cfg::kSb + 4 * row(h))));
      const uint32_t x = sm.base + sm.stage(g);
      const uint64_t dh = wgmma_desc_k(x), dl = wgmma_desc_k(x + Cfg::kXTileBytes);
#pragma unroll
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        const int i = 4 * ks + kk;
        uint32_t(&f)[4] = a[kk % 2];
        if (i >= 2) {
          wgmma_wait<1>();
          fence_operands(acc);
          for (; 4 * released + 3 <= i - 2; ++released) release(g0 + released);
        }
        if (ks < nk)
          code_frag(g, kk, s, sel, f);
        else
          bias_frag(ks - nk, kk, f);
        wgmma_fence();
        wgmma_rs_m64n256k16(acc, f, dh + 2 * kk, i > 0);
        if constexpr (P == 2) wgmma_rs_m64n256k16(acc, f, dl + 2 * kk, true);
        wgmma_commit();
      }
    }
    wgmma_wait<0>();
    fence_operands(acc);
    for (; released < steps; ++released) release(g0 + released);
  }
};

// The persistent block (one an SM): items w = blockIdx.x, + gridDim.x, … < n_work; take(w) > 0
// for an item with rows; src_for(w, src) fills producer thread t's RsSrc; rows_for(w, ct, rows)
// a consumer thread's RsRows; epilogue(w, ct, acc) stores consumer thread ct's accumulators.
// Steps g count the block's k-steps over its items (stages and barrier phases), as in
// gemm_ws.cuh; deadlock-free likewise (the consumers hold at most two stages).
template <class Cfg, class Take, class SrcFn, class RowsFn, class Epilogue>
__device__ __forceinline__ void rs_persistent(char* smem, int n_work, int k, int bias_steps,
                                              Take&& take, SrcFn&& src_for, RowsFn&& rows_for,
                                              Epilogue&& epilogue) {
  if constexpr (!kHaveWgmma) {
    __trap();  // only the sm_90a build has this path: launch_rs checks the device
  } else {
    const RsSmem<Cfg> sm{smem, smem_addr(smem)};
    const int tid = threadIdx.x, nk = k / kTileK, steps = nk + bias_steps;
    if (tid == 0)
      for (int s = 0; s < Cfg::kStages; ++s) {
        mbar_init(sm.full(s), 2 * Cfg::kProducerThreads);  // cp.async, then the thread's arrival
        mbar_init(sm.empty(s), Cfg::kMmaThreads / 32);     // one per consumer warp
      }
    __syncthreads();
    int g = 0;
    if (tid < Cfg::kProducerThreads) {
      setmaxnreg_dec<Cfg::kProducerRegs>();
      for (int w = blockIdx.x; w < n_work; w += gridDim.x) {
        if (take(w) <= 0) continue;
        RsSrc src;
        src_for(w, src);
        rs_produce<Cfg>(src, sm, tid, nk, bias_steps, g);
        g += steps;
      }
    } else {
      setmaxnreg_inc<Cfg::kConsumerRegs>();
      const int ct = tid - Cfg::kProducerThreads;
      for (int w = blockIdx.x; w < n_work; w += gridDim.x) {
        if (take(w) <= 0) continue;
        RsRows rows;
        rows_for(w, ct, rows);
        RsConsumer<Cfg> c{sm, rows, nk, bias_steps, g, ct, {}};
        c.run();
        epilogue(w, ct, c.acc);
        g += steps;
      }
    }
  }
}

}  // namespace orchid::cuda::tile
