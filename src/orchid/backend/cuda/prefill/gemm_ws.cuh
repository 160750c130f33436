// The warp-specialised Hopper main loop of the exact q4 tiles (TileCfg's WS form; sm_90a devices:
// ws_tiles_supported): the same products, fold and epilogues as prefill/gemm_tile.cuh's wgmma
// loop, but with the copies and the dequantising moved off the warps that multiply, so that the
// tensor cores no longer wait through block barriers, code conversion and folds.
//
// A block of 384 threads computes 128 × 128 tiles, one block an SM (218 KB of shared memory) that
// walks the launch's tiles (ws_persistent):
// - Warpgroup 0, the producer (40 registers a thread), runs up to kWsStages k-steps (64 elements,
//   one q4 group) ahead. Per step, once the consumers have released the stage (its "empty"
//   mbarrier), thread t copies A_hi and A_lo chunks (rows t / 8 + 16p, chunk t % 8) and B row t's
//   (scale, bias) word with cp.async, which arrive on the stage's "full" mbarrier when they land
//   — or, where A's tile is a block of consecutive rows (dense, expert down) and the driver
//   encodes tensor maps, thread 0 has the copy engine bring A_hi's and A_lo's whole 128 × 64
//   tiles, swizzled, two copies whose bytes the barrier also awaits (16 cp.async a thread fewer:
//   session 12 measured the dense GEMMs and down 12-14 % faster; a copy per gathered row for
//   gate/up was 2× slower);
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
//   C += s·P + b·R (fp32, the order of prefill/gemm_tile.cuh) then runs on the CUDA cores while the
//   tensor cores work. A warp releases the stage after its fold (the fold reads the stage's scale
//   words). Registers: C 64 + two sets of 68.
//
// Scaled codes (Cfg::kScaled; launches that bring A's group sums): W = s·q + b is rewritten per
// group as s·(q − 8) + b' with b' = b + 8s. |q − 8| ≤ 8 has at most 3 significant bits and s
// (bf16) 8, so s·(q − 8) is exact in fp16 (times the matrix's 2^code_exp, which keeps every s
// that matters inside fp16's range; prefill/scaled_codes.cu): B tiles hold those values (a
// subtraction and a product more per pair than the codes), and with nothing left to fold per
// group the consumers need one accumulator set, whose registers let a tile be 128 × 256: two
// consumers of m64n256k16, A's tile serving twice the columns, three stages of 64 KB. The
// tensor cores' fp32 sums then run over the whole K (two passes, then the bias steps); the GEMM
// tests hold them to the fold's bound (2^-20 of Σ|x|·(|s·q| + |b|)) for K up to 4,096. The biases
// are one more k-step per 32 groups at a tile's end: A is the tile rows' group sums R_g =
// Σ_{k∈g} A / 64 (launch_group_sums: [R_hi | R_hi] and, exact, [R_lo | 0]) and B row n is
// [64·b'_hi | 64·b'_lo]·2^code_exp of its groups, which the producer derives from the (scale,
// bias) words, so Σ R·B adds Σ_g b'·Σ_{k∈g} A. Without A_lo (the fp16 path) every step takes
// A_hi alone. docs/perf-notes.md has the measurements (session 13).
// The consumers convert the scaled codes: a per-instruction profile (session 15) of the producer
// converting them found the consumers waiting on full stages about half their time while the
// producer, one warp a scheduler issuing ~600-850 instructions a k-step (the conversion ~400 of
// them), barely waited. So the producer only copies (a step's raw units and words travel with its
// A onto the full barrier, beside each row's 2^code_exp), and each of the 256 consumer threads
// converts one B row of the step (ws_consumer_convert) while the tensor cores still run the step
// before; named barrier 2 joins the two warpgroups before either multiplies. The bias steps stay
// the producer's. It gained less than the waits promised (perf-notes, session 15): the
// consumers' ~330 instructions a step now set the pace.
// Steps g count a block's k-steps over all its tiles (stages, raw slots and barrier phases).
// Deadlock-free for any k-step count nk ≥ 1: the consumers wait for full(g) in order and hold at
// most two stages (g folding or in flight, g + 1 in flight); the producer waits for empty(g) only
// from g = kWsStages on, released once the consumers finished step g - kWsStages, which needs only
// earlier full stages. A barrier never runs a phase ahead of its waiter (the other side's wait
// stands between), so parities (g / kWsStages) & 1 are unambiguous; raw copies past a tile's nk
// are not issued but their cp.async groups are still committed, so the wait counts stay uniform.
#pragma once

#include "orchid/backend/cuda/prefill/gemm_tile.cuh"

namespace orchid::cuda::tile {

// A stage's wgmma descriptors for one consumer warpgroup: its rows of A_hi and A_lo, and B.
struct WsStageDescs {
  uint64_t hi, lo, b;
};

// Byte offsets of one block's warp-specialised layout (TileCfg::kWs*) for k-step ks.
template <class Cfg>
struct WsSmem {
  static constexpr int S = Cfg::kWsStages;
  // 40 · 128 + 232 · 256 = 168 · 384; scaled: 56 · 128 + 224 · 256 (two B rows a producer).
  static constexpr int kProducerRegs = Cfg::kScaled ? 56 : 40;
  static constexpr int kConsumerRegs = Cfg::kScaled ? 224 : 232;
  static_assert(Cfg::BM == 128 && Cfg::BN == (Cfg::kScaled ? 256 : 128) && Cfg::kUnitsPerRow == 2 &&
                Cfg::kThreads == 384);
  static_assert(Cfg::BM == kTmaATileRows);  // a tensor map's box is the whole A tile
  char* p;
  uint32_t base;
  __device__ __forceinline__ static int stage(int ks) { return (ks % S) * Cfg::kWsStageBytes; }
  __device__ __forceinline__ static int raw(int ks) {
    return Cfg::kWsRaw + (ks % S) * Cfg::kWsRawSlot;
  }
  // Scaled: step ks's (scale, bias) word of B row t, copied with its raw units.
  __device__ __forceinline__ static int raw_sb(int ks, int t) {
    return raw(ks) + Cfg::kRawBytes + 4 * t;
  }
  // Scaled: 2^code_exp (fp32) of B row t's matrix, stored by the producer.
  __device__ __forceinline__ static int raw_f(int ks, int t) {
    return raw(ks) + Cfg::kRawBytes + 4 * Cfg::BN + 4 * t;
  }
  __device__ __forceinline__ uint32_t full(int ks) const {
    return base + Cfg::kWsBars + 8 * (ks % S);
  }
  __device__ __forceinline__ uint32_t empty(int ks) const {
    return base + Cfg::kWsBars + 8 * (S + ks % S);
  }
  // Waits for step g's stage (full), then gives its descriptors for the warpgroup whose A rows
  // start `rows` bytes into a tile.
  __device__ __forceinline__ WsStageDescs await_stage(int g, uint32_t rows) const {
    mbar_wait(full(g), (g / S) & 1);
    fence_proxy_async();  // the copies and stores the barrier made visible, before wgmma reads
    const uint32_t st = base + stage(g);
    return {wgmma_desc_k(st + rows), wgmma_desc_k(st + Cfg::kATileBytes + rows),
            wgmma_desc_k(st + Cfg::kWsB)};
  }
  // A's row pointers of work item `buf` (two tables: the producers fill the next item's while
  // others still read the current one's).
  __device__ __forceinline__ const uint16_t** rows(int buf) const {
    return reinterpret_cast<const uint16_t**>(p + Cfg::kWsRows) + buf * Cfg::BM;
  }
  // Scaled: the rows of A's group sums (two tables after A's).
  __device__ __forceinline__ const uint16_t** sum_rows(int buf) const {
    return reinterpret_cast<const uint16_t**>(p + Cfg::kWsRows) + (2 + buf) * Cfg::BM;
  }
};

// Unit raw's 32 codes (word i: elements 8i … 8i + 7) as the fp16 values s·(q − 8): 1024 + q
// (q4_biased_pair), minus 1,032 (exact), times s (exact: the product fits fp16's 11 bits).
__device__ __forceinline__ void q4_unit_scaled(uint4 raw, __half2 s, uint4 (&out)[4]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  const __half2 off = __float2half2_rn(1032.f);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t hi = w[i] >> 4;
    uint32_t o[4];
#pragma unroll
    for (int p = 0; p < 4; ++p)
      o[p] = h2_bits(__hmul2(__hsub2(bits_h2(q4_biased_pair(w[i], hi, p)), off), s));
    out[i] = make_uint4(o[0], o[1], o[2], o[3]);
  }
}

// The bias value of one (scale, bias) word: 64·(b + 8s)·2^E (f = 2^E) saturated, split into fp16
// hi and lo.
__device__ __forceinline__ void bias_split(uint32_t w, float f, __half& hi, __half& lo) {
  const float v = f16_saturate(64.f * f * (bf16_hi(w) + 8.f * bf16_lo(w)));
  hi = __float2half_rn(v);
  lo = __float2half_rn(v - __half2float(hi));
}
// Eight consecutive groups' words (w0: the first four) as one 16-byte chunk of bias columns: their
// hi parts, or (lo) their lo parts.
__device__ __forceinline__ uint4 bias_chunk(uint4 w0, uint4 w1, float f, bool lo) {
  const uint32_t w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
  uint32_t o[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    __half h0, l0, h1, l1;
    bias_split(w[2 * q], f, h0, l0);
    bias_split(w[2 * q + 1], f, h1, l1);
    o[q] = lo ? uint32_t(__half_as_ushort(l0)) | uint32_t(__half_as_ushort(l1)) << 16
              : uint32_t(__half_as_ushort(h0)) | uint32_t(__half_as_ushort(h1)) << 16;
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// Column e of a bias step's B row (scaled codes) for a row of n_groups groups whose (scale,
// bias) words start at sb (null: a masked row): e < n_groups the hi part of 64·(b + 8s) of group
// e, then the lo parts, then zeros; fp16 bits. b + 8s is exact in fp32 (two bf16 values) unless
// their exponents lie over 16 apart (then within 2^-24); 64·b'
// saturates at fp16's ±65,504 (weights past ~1,000 are outside the form).
__device__ __forceinline__ uint32_t bias_col(const uint32_t* sb, int e, int n_groups, float f) {
  if (!sb || e >= 2 * n_groups) return 0;
  const bool lo = e >= n_groups;
  __half h, l;
  bias_split(sb[lo ? e - n_groups : e], f, h, l);
  return __half_as_ushort(lo ? l : h);
}

// B row r of step g's stage as the fp16 values s·(q − 8)·f (f = 2^code_exp of the row's matrix)
// from the row's raw units and (scale, bias) word in the ring: 8 conflict-free 16-byte stores.
template <class Cfg>
__device__ __forceinline__ void ws_convert_row(const WsSmem<Cfg>& sm, int g, int r, float f) {
  constexpr int kUnitBytes = Cfg::BN * 16;
  char* const bt = sm.p + WsSmem<Cfg>::stage(g) + Cfg::kWsB;
  const __half2 s2 =
      __float2half2_rn(f * bf16_lo(*reinterpret_cast<const uint32_t*>(sm.p + sm.raw_sb(g, r))));
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const uint4 raw = *reinterpret_cast<const uint4*>(sm.p + sm.raw(g) + u * kUnitBytes + 16 * r);
    uint4 c[4];
    q4_unit_scaled(raw, s2, c);
#pragma unroll
    for (int i = 0; i < 4; ++i) *reinterpret_cast<uint4*>(bt + tile_off(r, 4 * u + i)) = c[i];
  }
}

// Consumer thread ct (of the two consumer warpgroups' 256) converts B row ct of step g once the
// stage is full; the tile is whole once both warpgroups passed barrier 2.
template <class Cfg>
__device__ __forceinline__ void ws_consumer_convert(const WsSmem<Cfg>& sm, int g, int ct) {
  static_assert(Cfg::BN == Cfg::kMmaThreads, "a B row per consumer thread");
  ws_convert_row(sm, g, ct, *reinterpret_cast<const float*>(sm.p + sm.raw_f(g, ct)));
  fence_proxy_async();  // the generic-proxy stores, before the tensor cores read them
  named_barrier_sync(2, Cfg::kMmaThreads);
}

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

// The scaled-codes producer (ws_produce's schedule): k-steps [0, nk) multiply A (A_hi, and A_lo
// when exact) by s·(q − 8); then nb (= src.sums_lo / 64) bias steps multiply A's group sums (their
// hi block, and exact their lo block) by the bias columns (bias_col). A code step's raw units and
// (scale, bias) words travel with its A onto its full barrier, beside each row's 2^code_exp, for
// the consumers to convert (ws_consumer_convert). A bias step's words are read from the row
// itself (the steps before just brought them into L1) and converted here.
template <class Cfg>
__device__ __forceinline__ void ws_produce_scaled(const TileSrc<Cfg>& src, const WsSmem<Cfg>& sm,
                                                  int t, int nk, int nb, int g0, int buf) {
  constexpr int S = Cfg::kWsStages, P = Cfg::kPasses;
  constexpr int R = Cfg::kUnitsPerThread;  // B rows t + 128 p, p < R
  constexpr int kUnitBytes = Cfg::BN * 16;
  const int ch = t & 7;
  const auto copy_raw = [&](int ks) {
#pragma unroll
    for (int p = 0; p < R; ++p) {
      const uint4* const b = src.b[p];
      const uint32_t* const sb = src.sb[p];
      const int r = t + 128 * p;
      const uint32_t dst = sm.base + sm.raw(g0 + ks) + 16 * r;
      cp_async16(dst, b ? b + 2 * ks : b, b != nullptr);
      cp_async16(dst + kUnitBytes, b ? b + 2 * ks + 1 : b, b != nullptr);
      cp_async4(sm.base + sm.raw_sb(g0 + ks, r), sb ? sb + ks : sb, sb != nullptr);
    }
  };
  for (int ks = 0; ks < nk + nb; ++ks) {
    const int g = g0 + ks, j = ks - nk;  // j ≥ 0: bias step j
    if (g >= S) mbar_wait(sm.empty(g), (g / S - 1) & 1);
    const uint32_t st = sm.base + sm.stage(g);
    if (src.a_map) {
      if (src.a_row >= 0) {
        mbar_expect_tx(sm.full(g), P * Cfg::kATileBytes);
        if (j < 0) {
          tma_load_2d(st, src.a_map, ks * kTileK, src.a_row, sm.full(g));
          if constexpr (P == 2)
            tma_load_2d(st + Cfg::kATileBytes, src.a_map + 1, ks * kTileK, src.a_row, sm.full(g));
        } else {
          tma_load_2d(st, src.s_map, j * kTileK, src.a_row, sm.full(g));
          if constexpr (P == 2)
            tma_load_2d(st + Cfg::kATileBytes, src.s_map, src.sums_lo + j * kTileK, src.a_row,
                        sm.full(g));
        }
      }
    } else {
#pragma unroll
      for (int p = 0; p < Cfg::BM / 16; ++p) {
        const int r = (t >> 3) + 16 * p;
        const uint16_t* a = j < 0 ? sm.rows(buf)[r] : sm.sum_rows(buf)[r];
        const int64_t c0 = (j < 0 ? ks : j) * kTileK + 8 * ch;
        const int64_t lo = j < 0 ? src.lo : src.sums_lo;
        cp_async16(st + tile_off(r, ch), a ? a + c0 : a, a != nullptr);
        if constexpr (P == 2)
          cp_async16(st + Cfg::kATileBytes + tile_off(r, ch), a ? a + lo + c0 : a, a != nullptr);
      }
    }
    if (j < 0) {
      copy_raw(ks);
#pragma unroll
      for (int p = 0; p < R; ++p)
        *reinterpret_cast<float*>(sm.p + sm.raw_f(g, t + 128 * p)) = src.b_scale[p];
    }
    cp_async_mbar_arrive(sm.full(g));
    if (j >= 0) {  // a bias step's B tile (a code step's is the consumers' to convert)
      char* const bt = sm.p + sm.stage(g) + Cfg::kWsB;
#pragma unroll
      for (int p = 0; p < R; ++p) {
        const int r = t + 128 * p;
        const uint32_t* const sb = src.sb[p];
        const float f = src.b_scale[p];
        if (nk % 8 == 0) {
          // Whole groups of 8 a chunk (the model's K: 512, 2048, 4096): each chunk's 8 words are
          // two 16-byte loads, two chunks in flight at a time.
#pragma unroll 2
          for (int c = 0; c < 8; ++c) {
            const int e = j * kTileK + 8 * c;
            uint4 out = make_uint4(0, 0, 0, 0);
            if (sb && e < 2 * nk) {
              const bool lo = e >= nk;
              const uint4* w4 = reinterpret_cast<const uint4*>(sb + (lo ? e - nk : e));
              out = bias_chunk(w4[0], w4[1], f, lo);
            }
            *reinterpret_cast<uint4*>(bt + tile_off(r, c)) = out;
          }
        } else {
#pragma unroll 1
          for (int c = 0; c < 8; ++c) {
            uint32_t o[4];
            const int e = j * kTileK + 8 * c;
#pragma unroll
            for (int q = 0; q < 4; ++q)
              o[q] = bias_col(sb, e + 2 * q, nk, f) | bias_col(sb, e + 2 * q + 1, nk, f) << 16;
            *reinterpret_cast<uint4*>(bt + tile_off(r, c)) = make_uint4(o[0], o[1], o[2], o[3]);
          }
        }
      }
    }
    mbar_arrive(sm.full(g));
  }
  cp_async_wait_all();
}

// The scaled codes' consumer warpgroup w: rows [64w, 64w + 64) of the tile, all BN = 256
// columns, one accumulator set that every k-step's products add to (m64n256k16, the tensor cores'
// fp32 sums): no fold, so nothing waits between steps but the stage release — step ks + 1's
// products are issued, then step ks's stage freed once its products are in. Each of the first
// nk_codes steps' B tile is converted by the consumers first (ws_consumer_convert, a row a
// thread), while step ks - 1's products are still in the tensor cores.
template <class Cfg>
struct WsChainConsumer {
  const WsSmem<Cfg>& sm;
  int nk, nk_codes, lane;  // nk: the item's k-steps, its bias steps included; nk_codes: without
  int ct;                  // the thread among both consumer warpgroups' 256
  uint32_t rows;           // the warpgroup's first A row in a tile (bytes)
  int g0;                  // the block's step of this item's k-step 0
  float acc[Cfg::NJ * 4];  // C, in the wgmma (= mma C) layout of m64n256

  __device__ __forceinline__ void issue(int ks) {
    const WsStageDescs d = sm.await_stage(g0 + ks, rows);
    if (ks < nk_codes) ws_consumer_convert(sm, g0 + ks, ct);
    const uint64_t dh = d.hi, dl = d.lo, db = d.b;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
      wgmma_m64n256k16(acc, dh + 2 * kk, db + 2 * kk, ks > 0 || kk > 0);
      if constexpr (Cfg::kPasses == 2) wgmma_m64n256k16(acc, dl + 2 * kk, db + 2 * kk, true);
    }
    wgmma_commit();
  }
  __device__ __forceinline__ void release(int ks) const {
    __syncwarp();
    if (lane == 0) mbar_arrive(sm.empty(g0 + ks));
  }
  __device__ __forceinline__ void run() {
    zero(acc);  // defined operands for the first wgmma (which ignores them)
    fence_operands(acc);
    issue(0);
    for (int ks = 1; ks < nk; ++ks) {
      issue(ks);
      wgmma_wait<1>();  // step ks - 1's products are in
      release(ks - 1);
    }
    wgmma_wait<0>();
    fence_operands(acc);
    release(nk - 1);
  }
};

// A consumer warpgroup without rows in an item (a tile of at most 64 rows: an expert's last,
// mostly): it takes each of the item's nk steps after the producer filled it and releases it at
// once, so that the stages' barriers count its warps as ever, while the other warpgroup has the
// tensor cores alone (a tile of 64 rows then takes about half a tile's time, not a whole one's).
// On the scaled codes it still converts its B rows of the first nk_codes steps (the other
// warpgroup multiplies them).
template <class Cfg>
__device__ __forceinline__ void ws_pass_stages(const WsSmem<Cfg>& sm, int nk, int nk_codes, int g0,
                                               int lane, int ct) {
  for (int ks = 0; ks < nk; ++ks) {
    const int g = g0 + ks;
    mbar_wait(sm.full(g), (g / Cfg::kWsStages) & 1);
    if constexpr (Cfg::kScaled)
      if (ks < nk_codes) ws_consumer_convert(sm, g, ct);
    __syncwarp();
    if (lane == 0) mbar_arrive(sm.empty(g));
  }
}

// The fold's consumer: partial sets of m64n136 (R in columns 128 … 135).
template <class Cfg>
struct WsConsumer {
  using Part = float[68];
  const WsSmem<Cfg>& sm;
  int nk, lane;
  uint32_t rows;  // the warpgroup's first A row in a tile (bytes)
  int g0;         // the block's step of this item's k-step 0 (ws_produce)
  float acc[64];  // C, in the wgmma (= mma C) layout of m64n128

  // Step ks's partial sums into part (fresh: the first wgmma ignores part's old values).
  __device__ __forceinline__ void issue(int ks, Part& part) const {
    const WsStageDescs d = sm.await_stage(g0 + ks, rows);
    const uint64_t dh = d.hi, dl = d.lo, db = d.b;
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
  __device__ __forceinline__ void fold(int ks, const Part& part) {
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
  __device__ __forceinline__ void finish(int ks, Part& cur) {
    fence_operands(cur);
    fold(ks, cur);
    __syncwarp();  // the warp's reads of the stage are done
    if (lane == 0) mbar_arrive(sm.empty(g0 + ks));
  }
  __device__ __forceinline__ void step(int ks, Part& cur, Part& nxt) {
    issue(ks + 1, nxt);
    wgmma_wait<1>();
    finish(ks, cur);
  }
  __device__ __forceinline__ void last(int ks, Part& cur) {
    wgmma_wait<0>();
    finish(ks, cur);
  }
  // The loop body has no branches around the wgmma and its sets keep their roles, so the
  // compiler never copies a set in flight (which would make ptxas serialise the wgmma).
  __device__ __forceinline__ void run() {
    Part p0, p1;
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
// then work items w = blockIdx.x, + gridDim.x, … < n_work with rows: take(w) gives item w's A
// rows (at most BM; 0 skips it, every thread deciding alike). A consumer warpgroup whose 64 rows
// all lie past them passes the item's stages on (ws_pass_stages) and stores nothing. Per item the
// producers fill their TileSrc (src_for(w, src): thread t's A row t, B row t) and run its k-steps
// as far ahead as the stages allow — into the next item while the consumers still fold and store
// the last one — and the consumers run the item's steps, then epilogue(w, acc) (acc[1][NJ][4]:
// the mma C layout of warp (tid - 128) / 32's 16 rows). Scaled codes: the consumers convert the
// weight codes of each k-step (the producer only copies), and each item takes bias_steps more
// k-steps (its TileSrc's sums_lo / 64).
template <class Cfg, class Take, class SrcFn, class Epilogue>
__device__ __forceinline__ void ws_persistent(char* smem, int n_work, int k, int bias_steps,
                                              Take&& take, SrcFn&& src_for, Epilogue&& epilogue) {
  if constexpr (!kHaveWgmma) {
    __trap();  // only the sm_90a build has this path: ws_tiles_supported() checks the device
  } else {
    using Sm = WsSmem<Cfg>;
    const Sm sm{smem, smem_addr(smem)};
    const int tid = threadIdx.x, nk = k / kTileK, steps = nk + (Cfg::kScaled ? bias_steps : 0);
    if constexpr (!Cfg::kScaled) {
      // Each stage's B rows BN … BN + 7: fp16 ones (every chunk, so the swizzle is moot).
      for (int i = tid; i < Sm::S * 64; i += Cfg::kThreads)
        *reinterpret_cast<uint4*>(smem + Sm::stage(i / 64) + Cfg::kWsB +
                                  (Cfg::BN + i % 64 / 8) * kTileRowB + i % 8 * 16) =
            make_uint4(kOnesH2, kOnesH2, kOnesH2, kOnesH2);
      fence_proxy_async();  // the ones, before the tensor cores read them
    }
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
        if (take(w) <= 0) continue;
        TileSrc<Cfg> src;
        src_for(w, src);
        const int buf = item & 1;
        sm.rows(buf)[tid] = src.a[0];
        if constexpr (Cfg::kScaled) sm.sum_rows(buf)[tid] = src.s;
        named_barrier_sync(1, Cfg::kProducerThreads);  // the item's row tables are complete
        if constexpr (Cfg::kScaled)
          ws_produce_scaled<Cfg>(src, sm, tid, nk, bias_steps, g, buf);
        else
          ws_produce<Cfg>(src, sm, tid, nk, g, buf);
        g += steps, ++item;
      }
    } else {
      setmaxnreg_inc<Sm::kConsumerRegs>();
      const int ct = tid - Cfg::kProducerThreads, first_row = ct / 128 * 64;
      for (int w = blockIdx.x; w < n_work; w += gridDim.x) {
        const int rows = take(w);
        if (rows <= 0) continue;
        if (rows <= first_row) {
          ws_pass_stages(sm, steps, nk, g, ct & 31, ct);
        } else if constexpr (Cfg::kScaled) {
          WsChainConsumer<Cfg> c{sm, steps, nk, ct & 31, ct, uint32_t(first_row * kTileRowB),
                                 g,  {}};
          c.run();
          epilogue(w, reinterpret_cast<float(&)[1][Cfg::NJ][4]>(c.acc));
        } else {
          WsConsumer<Cfg> c{sm, steps, ct & 31, uint32_t(first_row * kTileRowB), g, {}};
          c.run();
          epilogue(w, reinterpret_cast<float(&)[1][16][4]>(c.acc));
        }
        g += steps;
      }
    }
  }
}

}  // namespace orchid::cuda::tile
