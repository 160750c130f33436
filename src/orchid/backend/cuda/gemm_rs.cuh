// The swapped warp-specialised q4 tiles (ORCHID_GEMM_RS; docs/perf-notes.md, session 15): the
// scaled codes' products (gemm_ws.cuh: B = s·(q − 8)·2^code_exp exact in fp16, the biases as extra
// k-steps against A's group sums) computed as Cᵀ = W · Xᵀ, so that the weights are wgmma's
// register operand instead of an fp16 tile in shared memory.
//
// Why: on the scaled tiles (gemm_ws.cuh) the converted B tile costs 32 KB a stage (three stages
// fit), a pass of stores by some warp, a proxy fence and a barrier before the tensor cores may
// read it; the per-instruction profile put the steps at ~4,000 cycles against ~2,200 of tensor
// work. Here a stage holds only X (hi, and lo when exact: 128 tokens × 64, swizzled by TMA as the
// A tiles there) and the step's raw codes and (scale, bias) words (42 KB: five stages), and each
// consumer thread converts the codes of its A fragments straight into registers: a k16 slice's
// fragment serves both passes, and its conversion overlaps the slices before it in the tensor
// cores.
//
// A block of 384 threads, one an SM, walks the launch's items (128 tokens × 256 features, the
// scaled tiles' items): warpgroup 0 the producer (TMA for X or the sums, cp.async for the raw
// units and words of B rows t and t + 128), warpgroups 1 and 2 the consumers. Consumer warpgroup
// c owns features [128c, 128c + 128) as two m64 blocks, every token as wgmma's n128: a thread's
// accumulators acc[b] (m64n128, 64 fp32) hold Cᵀ rows (features) 128c + 64b + wgmma_frag_row and
// columns (tokens) in the wgmma layout. Per k-step the stage's full barrier waits for the copies;
// per k16 slice kk a thread makes A fragments of its four feature rows from bytes (lane % 4) of
// the row's words 2kk and 2kk + 1 (q4_biased_pair, then (x − 1032)·s, exact), or in a bias step
// from the rows' words (bias_col), then issues both m-blocks' products for each pass: one wgmma
// group a slice, two fragment sets (a slice converts while the one before multiplies). A stage
// is released once the groups of its four slices have retired.
#pragma once

#include "orchid/backend/cuda/gemm_ws.cuh"

namespace orchid::cuda::tile {

template <bool EXACT>
struct RsCfg {
  static constexpr bool kExact = EXACT;
  static constexpr int kPasses = EXACT ? 2 : 1;
  static constexpr int BM = 128;  // tokens: X rows, C rows (wgmma's N)
  static constexpr int BN = 256;  // features: W rows, C columns (2 warpgroups × 2 m64 blocks)
  static constexpr int kProducerThreads = 128, kMmaThreads = 256;
  static constexpr int kThreads = kProducerThreads + kMmaThreads;
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;  // 40 · 128 + 232 · 256 ≤ 65,536
  static constexpr int kXTileBytes = BM * kTileRowB;             // 16 KB: X_hi, then X_lo
  static constexpr int kUnitBytes = BN * 16;                     // unit u of all rows
  static constexpr int kRaw = kPasses * kXTileBytes;  // unit u of row r: + u · 4 KB + 16 r
  static constexpr int kSb = kRaw + 2 * kUnitBytes;   // row r's word: + 4 r
  static constexpr int kStageBytes = (kSb + 4 * BN + 1023) / 1024 * 1024;
  static constexpr int kStages = EXACT ? 5 : 8;
  static constexpr int kBars = kStages * kStageBytes;
  static constexpr int kSmem = kBars + 2 * kStages * 8;
  static_assert(kSmem <= 227 * 1024, "more shared memory than a block may have");
  static_assert(BM == kTmaATileRows, "a tensor map's box is the whole X tile");
};

// d[64, 128] += A[64, 16] · B[128, 16]ᵀ, fp16: A from registers (wgmma_a_row / wgmma_a_col), B
// K-major in shared memory; d ignored where !accumulate.
__device__ __forceinline__ void wgmma_rs_m64n128k16(float (&d)[64], const uint32_t (&a)[4],
                                                    uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)));
#endif
}

// What the producer copies for one item: the B rows' raw units and words (thread t: rows t and
// t + 128; null: past the matrix, zero-filled), and X (or its sums) by the copy engine from row
// x_row (thread 0 alone: x_row ≥ 0).
struct RsSrc {
  const uint4* b[2] = {};
  const uint32_t* sb[2] = {};
  const CUtensorMap* x_map = nullptr;  // X_hi, X_lo, then the sums' map
  int x_row = -1;
  int sums_lo = 0;  // elements from the sums' hi block to their lo block
};

// What a consumer thread needs of an item: 2^code_exp of its tile's matrix, and for bias steps
// the (scale, bias) rows of its four features (null: past the matrix).
struct RsRows {
  float f = 1.f;
  const uint32_t* sb[2][2] = {};  // [m-block][upper]
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
  constexpr int S = Cfg::kStages, P = Cfg::kPasses;
  for (int ks = 0; ks < nk + nb; ++ks) {
    const int g = g0 + ks, j = ks - nk;  // j ≥ 0: bias step j
    if (g >= S) mbar_wait(sm.empty(g), (g / S - 1) & 1);
    const uint32_t st = sm.base + sm.stage(g);
    if (src.x_row >= 0) {
      mbar_expect_tx(sm.full(g), P * Cfg::kXTileBytes);
      if (j < 0) {
        tma_load_2d(st, src.x_map, ks * kTileK, src.x_row, sm.full(g));
        if constexpr (P == 2)
          tma_load_2d(st + Cfg::kXTileBytes, src.x_map + 1, ks * kTileK, src.x_row, sm.full(g));
      } else {
        tma_load_2d(st, src.x_map + 2, j * kTileK, src.x_row, sm.full(g));
        if constexpr (P == 2)
          tma_load_2d(st + Cfg::kXTileBytes, src.x_map + 2, src.sums_lo + j * kTileK, src.x_row,
                      sm.full(g));
      }
    }
    if (j < 0)
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int r = t + 128 * p;
        const uint4* const b = src.b[p];
        cp_async16(st + Cfg::kRaw + 16 * r, b ? b + 2 * ks : b, b != nullptr);
        cp_async16(st + Cfg::kRaw + Cfg::kUnitBytes + 16 * r, b ? b + 2 * ks + 1 : b, b != nullptr);
        cp_async4(st + Cfg::kSb + 4 * r, src.sb[p] ? src.sb[p] + ks : src.sb[p],
                  src.sb[p] != nullptr);
      }
    cp_async_mbar_arrive(sm.full(g));
    mbar_arrive(sm.full(g));
  }
  cp_async_wait_all();
}

// Byte c of code word w (elements 2c, 2c + 1) as the fp16 pair s·(q − 8) (exact: gemm_ws.cuh).
__device__ __forceinline__ uint32_t rs_code_pair(uint32_t w, int c, __half2 s) {
  const __half2 x = bits_h2(q4_biased_pair(w, w >> 4, c));
  return h2_bits(__hmul2(__hsub2(x, __float2half2_rn(1032.f)), s));
}

// One consumer thread (ct of the 256) over an item's nk code steps and nb bias steps: the products
// into acc[2][64] (m-block b: features 128 (ct / 128) + 64 b + wgmma_frag_row).
template <class Cfg>
struct RsConsumer {
  const RsSmem<Cfg>& sm;
  const RsRows& rows;
  int nk, nb, g0, ct;
  float acc[2][64];

  // The feature rows (within the tile) of m-block b, upper half h.
  __device__ __forceinline__ int row(int b, int h) const {
    return 128 * (ct / 128) + 64 * b + wgmma_frag_row(ct % 128, h);
  }
  // A fragments of k16 slice kk of code step g: a[b] = rows (b, 0) and (b, 1), columns
  // 16 kk + 2 (ct % 4) (+ 8).
  __device__ __forceinline__ void code_frags(int g, int kk, const __half2 (&s)[2][2],
                                             uint32_t (&a)[2][4]) const {
    const char* raw = sm.p + sm.stage(g) + Cfg::kRaw + (kk / 2) * Cfg::kUnitBytes + 8 * (kk % 2);
    const int c = ct % 4;
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint2 w = *reinterpret_cast<const uint2*>(raw + 16 * row(b, h));
        a[b][h] = rs_code_pair(w.x, c, s[b][h]);      // columns 2c, 2c + 1
        a[b][2 + h] = rs_code_pair(w.y, c, s[b][h]);  // columns 8 + 2c, + 1
      }
  }
  // A fragments of k16 slice kk of bias step j: the rows' bias columns (bias_col).
  __device__ __forceinline__ void bias_frags(int j, int kk, uint32_t (&a)[2][4]) const {
    const int e = j * kTileK + 16 * kk + 2 * (ct % 4);
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t* sb = rows.sb[b][h];
#pragma unroll
        for (int q = 0; q < 2; ++q)
          a[b][h + 2 * q] =
              bias_col(sb, e + 8 * q, nk, rows.f) | bias_col(sb, e + 8 * q + 1, nk, rows.f) << 16;
      }
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
    uint32_t a[2][2][4];  // [set][m-block][register]
    zero(acc[0]), zero(acc[1]);
    fence_operands(acc[0]), fence_operands(acc[1]);
    int released = 0;  // the item's steps whose stages went back
    for (int ks = 0; ks < steps; ++ks) {
      const int g = g0 + ks;
      mbar_wait(sm.full(g), (g / Cfg::kStages) & 1);
      __half2 s[2][2];
      if (ks < nk)
#pragma unroll
        for (int b = 0; b < 2; ++b)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            s[b][h] =
                __float2half2_rn(rows.f * bf16_lo(*reinterpret_cast<const uint32_t*>(
                                              sm.p + sm.stage(g) + Cfg::kSb + 4 * row(b, h))));
      const uint32_t x = sm.base + sm.stage(g);
      const uint64_t dh = wgmma_desc_k(x), dl = wgmma_desc_k(x + Cfg::kXTileBytes);
#pragma unroll
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        const int i = 4 * ks + kk;
        uint32_t(&f)[2][4] = a[kk % 2];
        if (i >= 2) {
          wgmma_wait<1>();
          fence_operands(acc[0]), fence_operands(acc[1]);
          for (; 4 * released + 3 <= i - 2; ++released) release(g0 + released);
        }
        if (ks < nk)
          code_frags(g, kk, s, f);
        else
          bias_frags(ks - nk, kk, f);
        wgmma_fence();
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          wgmma_rs_m64n128k16(acc[b], f[b], dh + 2 * kk, i > 0);
          if constexpr (P == 2) wgmma_rs_m64n128k16(acc[b], f[b], dl + 2 * kk, true);
        }
        wgmma_commit();
      }
    }
    wgmma_wait<0>();
    fence_operands(acc[0]), fence_operands(acc[1]);
    for (; released < steps; ++released) release(g0 + released);
  }
};

// The persistent block (one an SM): items w = blockIdx.x, + gridDim.x, … < n_work; take(w) > 0
// for an item with rows; src_for(w, src) fills producer thread t's RsSrc; rows_for(w, ct, rows)
// a consumer thread's RsRows; epilogue(w, acc) stores consumer thread ct's accumulators. Steps g
// count the block's k-steps over its items (stages and barrier phases), as in gemm_ws.cuh.
template <class Cfg, class Take, class SrcFn, class RowsFn, class Epilogue>
__device__ __forceinline__ void rs_persistent(char* smem, int n_work, int k, int bias_steps,
                                              Take&& take, SrcFn&& src_for, RowsFn&& rows_for,
                                              Epilogue&& epilogue) {
  if constexpr (!kHaveWgmma) {
    __trap();  // only the sm_90a build has this path: gemm_rs_takes() checks the device
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
