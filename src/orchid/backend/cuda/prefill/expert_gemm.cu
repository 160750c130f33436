// The MoE experts over a chunk on the tensor cores (prefill/gemm_tile.cuh), exact or in fp16:
// gate/up with the SiLU-gated product as epilogue (exact: written as an hi + lo pair), down with
// the routing weight and one fp32 row per (token, slot), and the deterministic combine. Work comes
// in the routing's tiles (≤ tile_rows sorted pairs of one expert) × column tiles, column tiles
// first (tile_grid, TileWork: a tile's gathered rows come from DRAM about once, the expert's
// weights stay in L2 for its next tiles); tiles past *n_tiles are skipped. The warp-specialised
// tiles walk the work persistently (prefill/gemm_ws.cuh), the others take a block each.
#include <type_traits>

#include "orchid/backend/cuda/prefill/gemm_ws.cuh"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {

using namespace tile;

namespace {

// The routing's tile map, as the kernels read it.
struct Tiles {
  const int* n_tiles;
  const int* expert;
  const int* begin;
  const int* end;
  const int* pair_token;
  const int* pair_slot;
  const float* pair_w;
};

// x_lo, act_lo (exact path): the A_lo offsets (elements from a row of x / act to its remainder).
struct GateUpArgs {
  DevMatrix gate, up;  // [(n_expert + 1) · n_ff, k]
  int n_ff, k, sb_shift;
  const uint16_t* x;  // [T, k] fp16
  int64_t x_lo;
  Tiles t;
  uint16_t* act;     // [pairs, n_ff] fp16
  uint16_t* act_lo;  // [pairs, n_ff] fp16 remainder, or null
  int shared;        // the stacked shared expert (every token, in order), or -1
  ATmaMaps tma;      // x, x_lo and x_sums, for the shared expert's tiles
  // Scaled codes: x's group sums [T, 2 · sums_lo] (launch_group_sums).
  const uint16_t* x_sums;
  int sums_lo;
};

struct DownArgs {
  DevMatrix down;  // [(n_expert + 1) · n_embd, n_ff]
  int n_embd, n_ff, sb_shift, n_slot;
  const uint16_t* act;  // [pairs, n_ff]
  int64_t act_lo;
  Tiles t;
  float* slot_out;  // [T, n_slot, n_embd]
  ATmaMaps tma;     // act, act_lo and act_sums a 128-row tile a copy, or none
  // Scaled codes: act's group sums [pairs, 2 · sums_lo] (launch_group_sums).
  const uint16_t* act_sums;
  int sums_lo;
};

// B row r of a block whose matrix rows start at `row0` (valid while r < n): unit pointer and
// (scale, bias) row.
template <class Cfg>
__device__ __forceinline__ void set_b(TileSrc<Cfg>& src, int q, const DevMatrix& w, int64_t row,
                                      bool valid, int sb_stride) {
  src.b[q] = valid ? static_cast<const uint4*>(w.w) + row * w.units : nullptr;
  src.sb[q] = Cfg::kHasSb && valid ? w.sb + row * sb_stride : nullptr;
}

// Runs a tile launch's blocks: the warp-specialised tiles persistent over the work items (TileWork
// of the *n_tiles live row tiles and col_tiles column tiles), the others one tile a block
// (tile_grid over the routing's max_tiles row tiles: those past *n_tiles return at once).
// tile_src(tile, col, src) fills thread tid's TileSrc; store(tile, col, acc) writes a tile's
// results; t's begin and end give a tile's rows.
template <class Cfg, class SrcFn, class Store>
__device__ __forceinline__ void run_tiles(char* smem, int col_tiles, const Tiles& t, int k,
                                          int bias_steps, SrcFn&& tile_src, Store&& store) {
  const int live = *t.n_tiles;
  if constexpr (Cfg::kWs) {
    // Column tiles first: the items of live tiles come first, so the walk stops there.
    const TileWork work{col_tiles};
    const int n_work = live * col_tiles;
    const auto rows = [&](int w) {
      const int tile = work.row(w);
      return tile < live ? min(t.end[tile] - t.begin[tile], Cfg::BM) : 0;
    };
    ws_persistent<Cfg>(
        smem, n_work, k, bias_steps, rows,
        [&](int w, TileSrc<Cfg>& src) { tile_src(work.row(w), work.col(w), src); },
        [&](int w, const auto& acc) { store(work.row(w), work.col(w), acc); });
  } else {
    const int tile = blockIdx.y, col = blockIdx.x;  // tile_grid's order
    if (tile >= live) return;
    TileSrc<Cfg> src;
    tile_src(tile, col, src);
    float acc[Cfg::MI][Cfg::NJ][4];
    tile_mainloop<Cfg>(src, smem, acc);
    store(tile, col, acc);
  }
}

// Tile `tile`, gate/up columns [64 · col, +64); B rows [0, 64) of the tile are gate rows, [64, 128)
// the up rows of the same columns.
// GateUpArgs; a block per (routing tile, column tile) (tile_grid), or the warp-specialised
// tiles persistent over them (run_tiles).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    kernel_expert_gate_up(const __grid_constant__ GateUpArgs p) {
  extern __shared__ __align__(1024) char smem[];
  const int tid = threadIdx.x;
  const auto tile_src = [&](int tile, int col, TileSrc<Cfg>& src) {
    const int e = p.t.expert[tile], j0 = p.t.begin[tile];
    const int rows = min(p.t.end[tile] - j0, Cfg::BM), n0 = col * (Cfg::BN / 2);
    src.k = p.k, src.sb_shift = p.sb_shift, src.lo = p.x_lo;
#pragma unroll
    for (int q = 0; q < Cfg::kAPerThread; ++q) {
      const int r = Cfg::a_src_row(tid, q);
      src.a[q] = r < rows ? p.x + int64_t(p.t.pair_token[j0 + r]) * p.k : nullptr;
    }
    const int sb_stride = (p.k / Cfg::E) >> p.sb_shift;
#pragma unroll
    for (int q = 0; q < Cfg::kUnitsPerThread; ++q) {
      const int r = Cfg::b_src_row(tid, q), n = n0 + r % (Cfg::BN / 2);
      const int64_t row = int64_t(e) * p.n_ff + n;
      const DevMatrix& w = r < Cfg::BN / 2 ? p.gate : p.up;
      set_b(src, q, w, row, n < p.n_ff, sb_stride);
      if constexpr (Cfg::kScaled) src.b_scale[q] = ldexpf(1.f, w.code_exp);
    }
    if constexpr (Cfg::kScaled) {
      const int r = Cfg::a_src_row(tid, 0);
      src.s = r < rows ? p.x_sums + int64_t(p.t.pair_token[j0 + r]) * 2 * p.sums_lo : nullptr;
      src.sums_lo = p.sums_lo;
    }
    // The shared expert's rows are consecutive tokens (the sort keeps token order): thread 0
    // copies its tiles whole. The routed experts' rows are gathered (cp.async a chunk).
    if (Cfg::kWs && p.tma.on && e == p.shared)
      src.a_map = p.tma.map, src.s_map = p.tma.map + 2,
      src.a_row = tid == 0 ? p.t.pair_token[j0] : -1;
  };
  // Fragment j (gate) pairs with j + NJ / 2 (up) at the same columns. A lane holds two columns
  // of a fragment; lanes 2m and 2m + 1 swap halves so that each stores four consecutive ones
  // (8 bytes; fragments j and j + 1 are 8 columns apart): the even lane fragment j's, the odd
  // one fragment j + 1's. Rows past the tile's end join the swaps but store nothing.
  // The scaled codes' products carry gate's and up's 2^code_exp.
  const float fg = Cfg::kScaled ? ldexpf(1.f, -p.gate.code_exp) : 1.f;
  const float fu = Cfg::kScaled ? ldexpf(1.f, -p.up.code_exp) : 1.f;
  const auto store = [&](int tile, int col, const auto& acc) {
    const int j0 = p.t.begin[tile];
    const int rows = min(p.t.end[tile] - j0, Cfg::BM), n0 = col * (Cfg::BN / 2);
    const bool odd = threadIdx.x & 1;
    Cfg::for_each_acc_row(tid, [&](int r, int i, int h, auto col0) {
      const int64_t out = int64_t(j0 + r) * p.n_ff;
#pragma unroll
      for (int j = 0; j < Cfg::NJ / 2; j += 2) {
        uint32_t hi[2], lo[2];
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const float* g = acc[i][j + q] + 2 * h;
          const float* u = acc[i][j + q + Cfg::NJ / 2] + 2 * h;
          f16x2_split(silu(fg * g[0]) * (fu * u[0]), silu(fg * g[1]) * (fu * u[1]), hi[q], lo[q]);
        }
        const uint32_t got_hi = __shfl_xor_sync(0xffffffffu, odd ? hi[0] : hi[1], 1);
        const uint32_t got_lo = __shfl_xor_sync(0xffffffffu, odd ? lo[0] : lo[1], 1);
        // n_ff a multiple of 8: a lane pair's four columns are all inside or all past the end.
        const int c = odd ? n0 + col0(j + 1) - 2 : n0 + col0(j);
        if (r >= rows || c >= p.n_ff) continue;
        *reinterpret_cast<uint2*>(p.act + out + c) =
            odd ? make_uint2(got_hi, hi[1]) : make_uint2(hi[0], got_hi);
        if (p.act_lo)
          *reinterpret_cast<uint2*>(p.act_lo + out + c) =
              odd ? make_uint2(got_lo, lo[1]) : make_uint2(lo[0], got_lo);
      }
    });
  };
  run_tiles<Cfg>(smem, (p.n_ff + Cfg::BN / 2 - 1) / (Cfg::BN / 2), p.t, p.k, p.sums_lo / kTileK,
                 tile_src, store);
}

// Tile `tile`, output columns [128 · col, +128); A = the tile's act rows.
// DownArgs; a block per (routing tile, column tile) (tile_grid), or the warp-specialised
// tiles persistent over them (run_tiles).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    kernel_expert_down(const __grid_constant__ DownArgs p) {
  extern __shared__ __align__(1024) char smem[];
  const int tid = threadIdx.x;
  const auto tile_src = [&](int tile, int col, TileSrc<Cfg>& src) {
    const int e = p.t.expert[tile], j0 = p.t.begin[tile];
    const int rows = min(p.t.end[tile] - j0, Cfg::BM), n0 = col * Cfg::BN;
    src.k = p.n_ff, src.sb_shift = p.sb_shift, src.lo = p.act_lo;
#pragma unroll
    for (int q = 0; q < Cfg::kAPerThread; ++q) {
      const int r = Cfg::a_src_row(tid, q);
      src.a[q] = r < rows ? p.act + int64_t(j0 + r) * p.n_ff : nullptr;
    }
    const int sb_stride = (p.n_ff / Cfg::E) >> p.sb_shift;
#pragma unroll
    for (int q = 0; q < Cfg::kUnitsPerThread; ++q) {
      const int n = n0 + Cfg::b_src_row(tid, q);
      set_b(src, q, p.down, int64_t(e) * p.n_embd + n, n < p.n_embd, sb_stride);
      if constexpr (Cfg::kScaled) src.b_scale[q] = ldexpf(1.f, p.down.code_exp);
    }
    if constexpr (Cfg::kScaled) {
      const int r = Cfg::a_src_row(tid, 0);
      src.s = r < rows ? p.act_sums + int64_t(j0 + r) * 2 * p.sums_lo : nullptr;
      src.sums_lo = p.sums_lo;
    }
    // Thread 0 copies the tile's 128 act rows; those past its end are never stored.
    if (Cfg::kWs && p.tma.on)
      src.a_map = p.tma.map, src.s_map = p.tma.map + 2, src.a_row = tid == 0 ? j0 : -1;
  };
  const auto store = [&](int tile, int col, const auto& acc) {
    const int j0 = p.t.begin[tile];
    const int rows = min(p.t.end[tile] - j0, Cfg::BM), n0 = col * Cfg::BN;
    Cfg::for_each_acc_row(tid, [&](int r, int i, int h, auto col0) {
      if (r >= rows) return;
      const int j = j0 + r;
      // The scaled codes' products carry down's 2^code_exp.
      const float w = p.t.pair_w[j] * (Cfg::kScaled ? ldexpf(1.f, -p.down.code_exp) : 1.f);
      float* out =
          p.slot_out + (int64_t(p.t.pair_token[j]) * p.n_slot + p.t.pair_slot[j]) * p.n_embd;
      // Column pairs as one 8-byte store (n_embd even, rows 8-byte aligned: launch_expert_down).
#pragma unroll
      for (int f = 0; f < Cfg::NJ; ++f) {
        const int cc = n0 + col0(f);
        if (cc < p.n_embd)
          *reinterpret_cast<float2*>(out + cc) =
              make_float2(w * acc[i][f][2 * h], w * acc[i][f][2 * h + 1]);
      }
    });
  };
  run_tiles<Cfg>(smem, (p.n_embd + Cfg::BN - 1) / Cfg::BN, p.t, p.n_ff, p.sums_lo / kTileK,
                 tile_src, store);
}

// h[t, i] += Σ_s slot_out[t, s, i] in slot order; one thread per 4 columns of a row.
// slot_out [T, n_slot, n4], h [T, n4] float4s (n4 = n_embd / 4).
__global__ void kernel_moe_combine(const float4* slot_out, int T, int n_slot, int n4, float4* h) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(T) * n4) return;
  const int64_t t = i / n4, c = i - t * n4;
  float4 acc = h[i];
  for (int s = 0; s < n_slot; ++s) {
    const float4 v = slot_out[(t * n_slot + s) * n4 + c];
    acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
  }
  h[i] = acc;
}

Status check_routing(const MoeRouting* r, const char* what) {
  if (!r || !r->n_tiles || !r->tile_expert || !r->tile_begin || !r->tile_end || !r->pair_token ||
      !r->pair_slot || !r->pair_w)
    return err(what, ": routing tile map missing");
  if (r->tile_rows != 16 && r->tile_rows != 32 && r->tile_rows != 64 && r->tile_rows != 128)
    return err(what, ": tile_rows ", r->tile_rows, " (16, 32, 64 or 128)");
  if (r->max_tiles < 0 || r->n_expert <= 0 || r->top_k <= 0)
    return err(what, ": bad routing sizes");
  return {};
}

// The template variant for the routing's tile rows. 128- and 64-row tiles: a warpgroup per 64
// rows (wgmma on sm_90a). The dequantised B tile is written and read once per block, so its
// shared-memory traffic per product halves from 64 to 128 rows: measured on the H200 at T = 8192
// (E = 256, top-8 + shared, 2048 / 512, q4), gate/up ran at 241 TFLOP/s with 64-row tiles and
// 296 with 128-row tiles (real pairs only, despite the emptier last tile per expert); down at 184
// with either. 32- and 16-row tiles (few rows per expert): 4 warps of mma.sync, 32 (16) × 32.
// q4 128-row tiles in groups of 64 take the warp-specialised form on an sm_90a device
// (ws_tiles_supported): the scaled codes where A's group sums are given (a.sums_lo > 0), else the
// fold for the exact path.
template <template <class> class Kernel, TileB B, bool GATED, bool EXACT, class Args>
Status launch_rows(int tile_rows, dim3 grid, const Args& a, cudaStream_t s, const char* what) {
  auto go = [&](auto cfg) -> Status {
    using Cfg = decltype(cfg);
    ORCHID_TRY(allow_smem(Kernel<Cfg>::fn, Cfg::kSmem, what));
    // The warp-specialised tiles: a 1-D walk over the grid's tiles.
    const dim3 g = Cfg::kWs ? dim3(ws_grid(int64_t(grid.x) * grid.y)) : grid;
    Kernel<Cfg>::fn<<<g, Cfg::kThreads, Cfg::kSmem, s>>>(a);
    return last_launch(what);
  };
  if constexpr (B == TileB::q4) {
    const bool ws = tile_rows == 128 && a.sb_shift == 1 && ws_tiles_supported();
    if (ws && a.sums_lo > 0) return go(TileCfg<B, 128, 8, 1, GATED, EXACT, true, true>{});
    if constexpr (EXACT)
      if (ws) return go(TileCfg<B, 128, 8, 1, GATED, EXACT, true>{});
  }
  if (tile_rows == 128) return go(TileCfg<B, 128, 8, 1, GATED, EXACT>{});
  if (tile_rows == 64) return go(TileCfg<B, 64, 4, 1, GATED, EXACT>{});
  if (tile_rows == 32) return go(TileCfg<B, 32, 1, 4, GATED, EXACT>{});
  return go(TileCfg<B, 16, 1, 4, GATED, EXACT>{});
}

// The variant for w's format and the path (exact when the operand's remainder is given).
template <template <class> class Kernel, bool GATED, class Args>
Status launch_format(DevFormat fmt, bool exact, int tile_rows, dim3 grid, const Args& a,
                     cudaStream_t s, const char* what) {
  auto go = [&](auto b) -> Status {
    constexpr TileB B = decltype(b)::value;
    return exact ? launch_rows<Kernel, B, GATED, true>(tile_rows, grid, a, s, what)
                 : launch_rows<Kernel, B, GATED, false>(tile_rows, grid, a, s, what);
  };
  switch (fmt) {
    case DevFormat::q4:
      return go(std::integral_constant<TileB, TileB::q4>{});
    case DevFormat::q8:
      return go(std::integral_constant<TileB, TileB::q8>{});
    case DevFormat::bf16:
      return go(std::integral_constant<TileB, TileB::bf16>{});
  }
  return err(what, ": unknown format");
}

// Elements from a row of `a` to its row of `lo` (the same layout in another buffer); 0 for none.
int64_t lo_offset(const uint16_t* a, const uint16_t* lo) {
  return lo ? (reinterpret_cast<intptr_t>(lo) - reinterpret_cast<intptr_t>(a)) / 2 : 0;
}
template <class Cfg>
struct GateUpKernel {
  static constexpr auto fn = kernel_expert_gate_up<Cfg>;
};
template <class Cfg>
struct DownKernel {
  static constexpr auto fn = kernel_expert_down<Cfg>;
};

Tiles tiles_of(const MoeRouting& r) {
  return {r.n_tiles, r.tile_expert, r.tile_begin, r.tile_end, r.pair_token, r.pair_slot, r.pair_w};
}

}  // namespace

Status launch_expert_gate_up(const ExpertGateUpParams& p, cudaStream_t s) {
  ORCHID_TRY(check_routing(p.r, "expert gate/up"));
  auto shift = tile_matrix_shift(p.gate, "expert gate");
  if (!shift) return shift.error();
  if (auto su = tile_matrix_shift(p.up, "expert up"); !su) return su.error();
  const DevMatrix &g = p.gate, &u = p.up;
  if (u.fmt != g.fmt || u.cols != g.cols || u.group != g.group)
    return err("expert gate/up: gate and up differ in format or columns");
  const int64_t rows = int64_t(p.r->n_expert + (p.r->shared_stacked ? 1 : 0)) * p.n_ff;
  if (p.n_ff <= 0 || p.n_ff % 8 != 0 || g.rows < rows || u.rows < rows)
    return err("expert gate/up: n_ff ", p.n_ff, " (a multiple of 8) needs ", rows,
               " stacked rows; gate has ", g.rows, ", up ", u.rows);
  if (!p.x || !p.act || reinterpret_cast<uintptr_t>(p.x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.act) % 16 != 0)
    return err("expert gate/up: x and act must be 16-byte aligned");
  const bool exact = p.x_lo != nullptr;
  if (exact != (p.act_lo != nullptr) || reinterpret_cast<uintptr_t>(p.x_lo) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.act_lo) % 16 != 0)
    return err("expert gate/up: x_lo and act_lo come together, 16-byte aligned");
  if (exact) ORCHID_TRY(tile_exact_group(g, "expert gate/up"));
  if (p.r->max_tiles == 0) return {};
  GateUpArgs a{g,
               u,
               p.n_ff,
               g.cols,
               *shift,
               p.x,
               lo_offset(p.x, p.x_lo),
               tiles_of(*p.r),
               p.act,
               p.act_lo,
               p.r->shared_stacked ? p.r->n_expert : -1};
  if (reinterpret_cast<uintptr_t>(p.x_sums) % 16 != 0)
    return err("expert gate/up: x's group sums must be 16-byte aligned");
  if (p.x_sums && g.cols % 64 == 0) a.x_sums = p.x_sums, a.sums_lo = group_sums_half(g.cols);
  ORCHID_TRY(encode_a_maps(a.tma, p.x, p.x_lo, p.r->T, g.cols, g.cols, a.x_sums, 2 * a.sums_lo));
  const dim3 grid = tile_grid(p.r->max_tiles, (p.n_ff + 63) / 64);
  return launch_format<GateUpKernel, true>(g.fmt, exact, p.r->tile_rows, grid, a, s,
                                           "expert gate/up");
}

Status launch_expert_down(const ExpertDownParams& p, cudaStream_t s) {
  ORCHID_TRY(check_routing(p.r, "expert down"));
  auto shift = tile_matrix_shift(p.down, "expert down");
  if (!shift) return shift.error();
  const DevMatrix& d = p.down;
  const int64_t rows = int64_t(p.r->n_expert + (p.r->shared_stacked ? 1 : 0)) * p.n_embd;
  if (p.n_embd <= 0 || p.n_embd % 2 != 0) return err("expert down: n_embd ", p.n_embd, " (even)");
  if (d.rows < rows || d.cols != p.n_ff || p.n_ff % 8 != 0)
    return err("expert down: [", d.rows, ", ", d.cols, "] is not stacked [", rows, ", n_ff ",
               p.n_ff, "]");
  if (!p.act || !p.slot_out || reinterpret_cast<uintptr_t>(p.act) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.act_lo) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.slot_out) % 8 != 0)
    return err("expert down: act (and act_lo: 16-byte aligned) and slot_out (8-byte) needed");
  const bool exact = p.act_lo != nullptr;
  if (exact) ORCHID_TRY(tile_exact_group(d, "expert down"));
  if (p.r->max_tiles == 0) return {};
  const int64_t lo = lo_offset(p.act, p.act_lo);
  DownArgs a{d, p.n_embd, p.n_ff, *shift, p.r->top_k + 1, p.act, lo, tiles_of(*p.r), p.slot_out};
  if (reinterpret_cast<uintptr_t>(p.act_sums) % 16 != 0)
    return err("expert down: act's group sums must be 16-byte aligned");
  if (p.act_sums && p.n_ff % 64 == 0) a.act_sums = p.act_sums, a.sums_lo = group_sums_half(p.n_ff);
  const int64_t pairs = int64_t(p.r->T) * (p.r->top_k + (p.r->shared_stacked ? 1 : 0));
  ORCHID_TRY(
      encode_a_maps(a.tma, p.act, p.act_lo, pairs, p.n_ff, p.n_ff, a.act_sums, 2 * a.sums_lo));
  const dim3 grid = tile_grid(p.r->max_tiles, (p.n_embd + 127) / 128);
  return launch_format<DownKernel, false>(d.fmt, exact, p.r->tile_rows, grid, a, s, "expert down");
}

Status launch_moe_combine(const float* slot_out, int T, int n_slot, int n_embd, float* h,
                          cudaStream_t s) {
  if (!slot_out || !h || T < 0 || n_slot <= 0 || n_embd <= 0 || n_embd % 4 != 0 ||
      reinterpret_cast<uintptr_t>(slot_out) % 16 != 0 || reinterpret_cast<uintptr_t>(h) % 16 != 0)
    return err("moe combine: needs 16-byte aligned buffers and n_embd a multiple of 4 (", n_embd,
               ")");
  if (T == 0) return {};
  const int n4 = n_embd / 4, threads = 256;
  const auto blocks = static_cast<unsigned>((int64_t(T) * n4 + threads - 1) / threads);
  kernel_moe_combine<<<blocks, threads, 0, s>>>(reinterpret_cast<const float4*>(slot_out), T,
                                                n_slot, n4, reinterpret_cast<float4*>(h));
  return last_launch("moe combine");
}

}  // namespace orchid::cuda
