// The warp-specialised Hopper main loop of the exact q4 tiles (TileCfg's WS form, ORCHID_GEMM_WS):
// the same products, fold and epilogues as gemm_tile.cuh's wgmma loop, but with the copies and the
// dequantising moved off the warps that multiply, so that the tensor cores no longer wait through
// block barriers, code conversion and folds.
//
// A block of 384 threads computes 128 × 128 tiles, one block an SM (218 KB of shared memory) that
// walks the launch's tiles (ws_persistent; or a block a tile, the ablation):
// - Warpgroup 0, the producer (40 registers a thread), runs up to kWsStages k-steps (64 elements,
//   one q4 group) ahead. Per step, once the consumers have released the stage (its "empty"
//   mbarrier), thread t copies A_hi and A_lo chunks (rows t / 8 + 16p, chunk t % 8) and B row t's
//   (scale, bias) word with cp.async, which arrive on the stage's "full" mbarrier when they land
//   — or, where A's tile is a block of consecutive rows (dense, expert down; ORCHID_TMA_A), thread
//   0 has the copy engine bring A_hi's and A_lo's whole 128 × 64 tiles, swizzled, two copies
//   whose bytes the barrier also awaits (16 cp.async a thread fewer: session 12 measured the
//   dense GEMMs and down 12-14 % faster; a copy per gathered row for gate/up was 2× slower);
//   then it converts B row t's codes of the step (copied kWsStages - 1 steps earlier into a ring
//   of raw units: its own copies, so no barrier) to fp16 in the stage's swizzled B tile and
//   arrives a second time. The codes need no scale (the fold applies it), so a row is 8 byte
//   permutes per 8 elements and 8 conflict-free 16-byte stores.
// - Warpgroups 1 and 2, the consumers (232 registers), own 64 rows each. Per step one batch of 8
//   wgmma m64n136k16 (4 k16 steps × A_hi, A_lo) writes the group's partial sums into a fresh
//   accumulator set: columns 0 … 127 are P = Σ A·q, columns 128 … 135 multiply 8 B rows of ones
//   (written once at the start), so each is R = Σ A, the row sums the fold needs, at no extra
//   instruction (6 % more tensor work, as the mma.sync row sums cost before). Two sets alternate:
//   step ks + 1's batch is issued before waiting for step ks's (wgmma.wait_group 1), whose fold
//   C += s·P + b·R (fp32, the order of gemm_tile.cuh) then runs on the CUDA cores while the
//   tensor cores work. A warp releases the stage after its fold (the fold reads the stage's scale
//   words). Registers: C 64 + two sets of 68.
// Steps g count a block's k-steps over all its tiles (stages, raw slots and barrier phases).
// Deadlock-free for any k-step count nk ≥ 1: the consumers wait for full(g) in order and hold at
// most two stages (g folding, g + 1 in flight); the producer waits for empty(g) only from
// g = kWsStages on, released once the consumers finished step g - kWsStages, which needs only
// earlier full stages. A barrier never runs a phase ahead of its waiter (the other side's wait
// stands between), so parities (g / kWsStages) & 1 are unambiguous; raw copies past a tile's nk
// are not issued but their cp.async groups are still committed, so the wait counts stay uniform.
#pragma once

#include "orchid/backend/cuda/gemm_tile.cuh"

namespace orchid::cuda::tile {

// Byte offsets of one block's warp-specialised layout (TileCfg::kWs*) for k-step ks.
template <class Cfg>
struct WsSmem {
  static constexpr int S = Cfg::kWsStages;
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;  // 40 · 128 + 232 · 256 = 168 · 384
  static_assert(Cfg::BM == 128 && Cfg::BN == 128 && Cfg::kUnitsPerRow == 2 && Cfg::kThreads == 384);
  static_assert(Cfg::BM == kTmaATileRows);  // a tensor map's box is the whole A tile
  char* p;
  uint32_t base;
  __device__ __forceinline__ static int stage(int ks) { return (ks % S) * Cfg::kWsStageBytes; }
  __device__ __forceinline__ static int raw(int ks) {
    return Cfg::kWsRaw + (ks % S) * Cfg::kRawBytes;
  }
  __device__ __forceinline__ uint32_t full(int ks) const {
    return base + Cfg::kWsBars + 8 * (ks % S);
  }
  __device__ __forceinline__ uint32_t empty(int ks) const {
    return base + Cfg::kWsBars + 8 * (S + ks % S);
  }
  // A's row pointers of work item `buf` (two tables: the producers fill the next item's while
  // others still read the current one's).
  __device__ __forceinline__ const uint16_t** rows(int buf) const {
    return reinterpret_cast<const uint16_t**>(p + Cfg::kWsRows) + buf * Cfg::BM;
  }
};

// Producer thread t over one work item's k-steps [0, nk), the block's steps [g0, g0 + nk) (stages,
// raw slots and barrier phases count the block's steps over all its items); A's rows in table
// buf. Raw units: unit u (0, 1) of row t at raw(g) + u · 2048 + 16 t (a warp's copies and reads
// contiguous).
template <class Cfg>
__device__ __forceinline__ void ws_produce(const TileSrc<Cfg>& src, const WsSmem<Cfg>& sm, int t,
                                           int nk, int g0, int buf) {
  constexpr int S = Cfg::kWsStages, D = S - 1;  // raw units copied D steps ahead
  constexpr int kUnitBytes = Cfg::BN * 16;
  const uint4* const b = src.b[0];
  const uint32_t* const sb = src.sb[0];
  const int ch = t & 7;
  const auto copy_raw = [&](int ks) {
    const uint32_t dst = sm.base + sm.raw(g0 + ks) + 16 * t;
    cp_async16(dst, b ? b + 2 * ks : b, b != nullptr);
    cp_async16(dst + kUnitBytes, b ? b + 2 * ks + 1 : b, b != nullptr);
  };
  for (int ks = 0; ks < D; ++ks) {
    if (ks < nk) copy_raw(ks);
    cp_async_commit();
  }
  for (int ks = 0; ks < nk; ++ks) {
    const int g = g0 + ks;
    if (g >= S) mbar_wait(sm.empty(g), (g / S - 1) & 1);
    const uint32_t st = sm.base + sm.stage(g);
    if (src.a_map) {
      if (src.a_row >= 0) {
        mbar_expect_tx(sm.full(g), 2 * Cfg::kATileBytes);
        tma_load_2d(st, src.a_map, ks * kTileK, src.a_row, sm.full(g));
        tma_load_2d(st + Cfg::kATileBytes, src.a_map + 1, ks * kTileK, src.a_row, sm.full(g));
      }
    } else {
      const int k0 = ks * kTileK + 8 * ch;
#pragma unroll
      for (int p = 0; p < Cfg::BM / 16; ++p) {
        const int r = (t >> 3) + 16 * p;
        const uint16_t* a = sm.rows(buf)[r];
        cp_async16(st + tile_off(r, ch), a ? a + k0 : a, a != nullptr);
        cp_async16(st + Cfg::kATileBytes + tile_off(r, ch), a ? a + src.lo + k0 : a, a != nullptr);
      }
    }
    cp_async4(st + Cfg::kWsSb + 4 * t, sb ? sb + ks : sb, sb != nullptr);  // one group per step
    cp_async_mbar_arrive(sm.full(g));
    if (ks + D < nk) copy_raw(ks + D);
    cp_async_commit();
    cp_async_wait<D>();  // the group that holds step ks's raw units
    char* const bt = sm.p + sm.stage(g) + Cfg::kWsB;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const uint4 raw = *reinterpret_cast<const uint4*>(sm.p + sm.raw(g) + u * kUnitBytes + 16 * t);
      uint4 c[4];
      dequant_unit<TileB::q4, false>(raw, 0, c);
#pragma unroll
      for (int i = 0; i < 4; ++i) *reinterpret_cast<uint4*>(bt + tile_off(t, 4 * u + i)) = c[i];
    }
    mbar_arrive(sm.full(g));
  }
  cp_async_wait_all();
}

// Consumer warpgroup w (thread ct of it): rows [64w, 64w + 64) of the tile.
template <class Cfg>
struct WsConsumer {
  static constexpr int S = Cfg::kWsStages;
  const WsSmem<Cfg>& sm;
  int nk, lane;
  uint32_t rows;  // the warpgroup's first A row in a tile (bytes)
  int g0;         // the block's step of this item's k-step 0 (ws_produce)
  float acc[64];  // C, in the wgmma (= mma C) layout of m64n128

  // Step ks's partial sums into part (fresh: the first wgmma ignores part's old values).
  __device__ __forceinline__ void issue(int ks, float (&part)[68]) const {
    const int g = g0 + ks;
    mbar_wait(sm.full(g), (g / S) & 1);
    fence_proxy_async();  // the copies and stores the barrier made visible, before wgmma reads
    const uint32_t st = sm.base + sm.stage(g);
    const uint64_t dh = wgmma_desc_k(st + rows), dl = wgmma_desc_k(st + Cfg::kATileBytes + rows),
                   db = wgmma_desc_k(st + Cfg::kWsB);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
      wgmma_m64n136k16(part, dh + 2 * kk, db + 2 * kk, kk > 0);
      wgmma_m64n136k16(part, dl + 2 * kk, db + 2 * kk, true);
    }
    wgmma_commit();
  }
  // C += s·P + b·R for step ks's group: register 4j + 2h + e of part is row h, column
  // 8j + 2 (lane % 4) + e; registers 64 + 2h (and + 1) hold row h's R.
  // A lane's two columns of fragment j have adjacent (scale, bias) words: one 8-byte load.
  __device__ __forceinline__ void fold(int ks, const float (&part)[68]) {
    const char* sbw = sm.p + sm.stage(g0 + ks) + Cfg::kWsSb + 8 * (lane & 3);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint2 w2 = *reinterpret_cast<const uint2*>(sbw + 32 * j);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const uint32_t w = e ? w2.y : w2.x;
        const float s = bf16_lo(w), b = bf16_hi(w);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float& c = acc[4 * j + 2 * h + e];
          c = fmaf(s, part[4 * j + 2 * h + e], fmaf(b, part[64 + 2 * h], c));
        }
      }
    }
  }
  // Step ks's products are in flight in cur. With nxt: issue step ks + 1's into it, then wait for
  // cur's alone; without: wait for all. Then fold cur and release the stage.
  __device__ __forceinline__ void finish(int ks, float (&cur)[68]) {
    fence_operands(cur);
    fold(ks, cur);
    __syncwarp();  // the warp's reads of the stage are done
    if (lane == 0) mbar_arrive(sm.empty(g0 + ks));
  }
  __device__ __forceinline__ void step(int ks, float (&cur)[68], float (&nxt)[68]) {
    issue(ks + 1, nxt);
    wgmma_wait<1>();
    finish(ks, cur);
  }
  __device__ __forceinline__ void last(int ks, float (&cur)[68]) {
    wgmma_wait<0>();
    finish(ks, cur);
  }
  // The loop body has no branches around the wgmma and its sets keep their roles, so the
  // compiler never copies a set in flight (which would make ptxas serialise the wgmma).
  __device__ __forceinline__ void run() {
    float p0[68], p1[68];
    zero(acc), zero(p0), zero(p1);           // p0, p1: defined operands for their first wgmma
    fence_operands(p0), fence_operands(p1);  // each in registers of its own before any wgmma
    issue(0, p0);
    int ks = 0;
    for (; ks + 2 < nk; ks += 2) {
      step(ks, p0, p1);
      step(ks + 1, p1, p0);
    }
    if (ks + 1 < nk) {  // two steps left, else one
      step(ks, p0, p1);
      last(ks + 1, p1);
    } else {
      last(ks, p0);
    }
  }
};

// The persistent warp-specialised block (one an SM, 384 threads): ones rows and barriers once,
// then work items w = blockIdx.x, + gridDim.x, … < n_work that take(w) accepts (every thread
// decides alike). Per item the producers fill their TileSrc (src_for(w, src): thread t's A row t,
// B row t) and run its k-steps as far ahead as the stages allow — into the next item while the
// consumers still fold and store the last one — and the consumers run the item's steps, then
// epilogue(w, acc) (acc[1][16][4]: the mma C layout of warp (tid - 128) / 32's 16 rows). A grid of
// one block per item is the one-tile-a-block form.
template <class Cfg, class Take, class SrcFn, class Epilogue>
__device__ __forceinline__ void ws_persistent(char* smem, int n_work, int k, Take&& take,
                                              SrcFn&& src_for, Epilogue&& epilogue) {
  if constexpr (!kHaveWgmma) {
    __trap();  // only the sm_90a build has this path: gemm_ws_enabled() checks the device
  } else {
    using Sm = WsSmem<Cfg>;
    const Sm sm{smem, smem_addr(smem)};
    const int tid = threadIdx.x, nk = k / kTileK;
    // Each stage's B rows BN … BN + 7: fp16 ones (every chunk, so the swizzle is moot).
    for (int i = tid; i < Sm::S * 64; i += Cfg::kThreads)
      *reinterpret_cast<uint4*>(smem + Sm::stage(i / 64) + Cfg::kWsB +
                                (Cfg::BN + i % 64 / 8) * kTileRowB + i % 8 * 16) =
          make_uint4(kOnesH2, kOnesH2, kOnesH2, kOnesH2);
    fence_proxy_async();  // the ones, before the tensor cores read them
    if (tid == 0)
      for (int s = 0; s < Sm::S; ++s) {
        mbar_init(sm.full(s), 2 * Cfg::kProducerThreads);  // cp.async + converted codes
        mbar_init(sm.empty(s), Cfg::kMmaThreads / 32);     // one per consumer warp
      }
    __syncthreads();
    int g = 0, item = 0;
    if (tid < Cfg::kProducerThreads) {
      setmaxnreg_dec<Sm::kProducerRegs>();
      for (int w = blockIdx.x; w < n_work; w += gridDim.x) {
        if (!take(w)) continue;
        TileSrc<Cfg> src;
        src_for(w, src);
        const int buf = item & 1;
        sm.rows(buf)[tid] = src.a[0];
        named_barrier_sync(1, Cfg::kProducerThreads);  // the item's row table is complete
        ws_produce<Cfg>(src, sm, tid, nk, g, buf);
        g += nk, ++item;
      }
    } else {
      setmaxnreg_inc<Sm::kConsumerRegs>();
      const int ct = tid - Cfg::kProducerThreads;
      for (int w = blockIdx.x; w < n_work; w += gridDim.x) {
        if (!take(w)) continue;
        WsConsumer<Cfg> c{sm, nk, ct & 31, uint32_t(ct / 128 * 64 * kTileRowB), g, {}};
        c.run();
        epilogue(w, reinterpret_cast<float(&)[1][16][4]>(c.acc));
        g += nk;
      }
    }
  }
}

}  // namespace orchid::cuda::tile
