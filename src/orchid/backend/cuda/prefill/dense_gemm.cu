// The dense prefill projection C[M, N] = A[M, K] · Wᵀ (+ add) on the tensor cores, W's q4 / q8 /
// bf16 tiles dequantised in shared memory (prefill/gemm_tile.cuh), exact (A as hi + lo, integer
// codes folded per group) or in fp16; and the fp16 path's ablation: the whole W dequantised to an
// fp16 buffer first, then the same tiles read straight from it. Measured on the H200 (q4, M = 8192,
// N 2048 … 8192, K 2048 … 4096): fused 314–370 TFLOP/s; the ablation 412–489 with its
// dequantisation pass included, since the fused path dequantises every weight tile once per 128-row
// tile (at M = 256 the fused path wins for N = 8192: 206 against 157).
#include <atomic>
#include <mutex>

#include "orchid/backend/cuda/prefill/gemm_ws.cuh"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {

using namespace tile;

namespace {

std::atomic<bool> g_fused_dequant{true};
struct Scratch {
  std::mutex mu;
  uint16_t* buf = nullptr;
  int64_t elems = 0;
} g_scratch;

// Products of one A (the same a, a_lo, a_sums, lda, m) with up to kMaxGemmGroup matrices W_j: one
// launch whose column tiles run through the products in turn (the warp-specialised tiles; the
// others take a group of one).
struct GemmGroup {
  GemmParams p[kMaxGemmGroup];
  int n = 0;
  int tiles0[kMaxGemmGroup + 1] = {};  // product j's column tiles: [tiles0[j], tiles0[j + 1])
  __device__ __forceinline__ int which(int col) const {
    int j = 0;
    while (j + 1 < n && col >= tiles0[j + 1]) ++j;
    return j;
  }
};

// The block of row tile i and column tile j (tile_grid; the warp-specialised tiles: work item w
// of TileWork, its column tile one of product g.which(j)'s) computes rows [BM · i, +BM) × columns
// [BN · j, +BN). Each W: [n, k] (fp16 rows of k / 8 units for TileB::f16). Scaled codes: A's
// group sums in rows of 2 · sums_lo elements (g.p[0].a_sums).
// GemmGroup of GemmParams; k = K (W's columns); sb_shift = log2(units per (scale, bias)
// group); lo: A_lo's offset from A in elements (exact path); tma: A's maps, or off (cp.async).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    kernel_gemm(const __grid_constant__ GemmGroup g, int k, int sb_shift, int64_t lo, int sums_lo,
                const __grid_constant__ ATmaMaps tma) {
  extern __shared__ __align__(1024) char smem[];
  const int tid = threadIdx.x;
  const auto src_for = [&](const GemmParams& p, int m0, int n0, TileSrc<Cfg>& src) {
    const int n = p.w.rows;
    src.k = k, src.sb_shift = sb_shift, src.lo = lo;
#pragma unroll
    for (int q = 0; q < Cfg::kAPerThread; ++q) {
      const int r = m0 + Cfg::a_src_row(tid, q);
      src.a[q] = r < p.m ? p.a + int64_t(r) * p.lda : nullptr;
    }
    const int sb_stride = (k / Cfg::E) >> sb_shift;  // (scale, bias) words per row
#pragma unroll
    for (int q = 0; q < Cfg::kUnitsPerThread; ++q) {
      const int r = n0 + Cfg::b_src_row(tid, q);
      src.b[q] = r < n ? static_cast<const uint4*>(p.w.w) + int64_t(r) * p.w.units : nullptr;
      src.sb[q] = Cfg::kHasSb && r < n ? p.w.sb + int64_t(r) * sb_stride : nullptr;
      if constexpr (Cfg::kScaled) src.b_scale[q] = ldexpf(1.f, p.w.code_exp);
    }
    if constexpr (Cfg::kScaled) {
      const int r = m0 + Cfg::a_src_row(tid, 0);
      src.s = r < p.m ? p.a_sums + int64_t(r) * 2 * sums_lo : nullptr;
      src.sums_lo = sums_lo;
    }
  };
  // The scaled codes' products carry W's 2^code_exp.
  const auto store = [&](const GemmParams& p, int m0, int n0, const auto& acc) {
    const int n = p.w.rows;
    const float f = Cfg::kScaled ? ldexpf(1.f, -p.w.code_exp) : 1.f;
    // A lane's two adjacent columns (even first) as one 8-byte access where c and add allow it.
    const bool pairs = p.ldc % 2 == 0 && reinterpret_cast<uintptr_t>(p.c) % 8 == 0 &&
                       reinterpret_cast<uintptr_t>(p.add) % 8 == 0;
    Cfg::for_each_acc_row(tid, [&](int r, int i, int h, auto col0) {
      const int row = m0 + r;
      if (row >= p.m) return;
      float* c = p.c + int64_t(row) * p.ldc;
      if (p.pair_sum) {  // a lane's two columns are a pair (even first, n even)
#pragma unroll
        for (int j = 0; j < Cfg::NJ; ++j) {
          const int col = n0 + col0(j);
          if (col < n) c[col / 2] = f * (acc[i][j][2 * h] + acc[i][j][2 * h + 1]);
        }
        return;
      }
      const float* add = p.add ? p.add + int64_t(row) * p.ldc : nullptr;
#pragma unroll
      for (int j = 0; j < Cfg::NJ; ++j) {
        const int col = n0 + col0(j);
        float2 v = make_float2(f * acc[i][j][2 * h], f * acc[i][j][2 * h + 1]);
        if (pairs && col + 1 < n) {
          if (add) {
            const float2 a = *reinterpret_cast<const float2*>(add + col);
            v.x += a.x, v.y += a.y;
          }
          *reinterpret_cast<float2*>(c + col) = v;
        } else {
          if (col < n) c[col] = v.x + (add ? add[col] : 0.f);
          if (col + 1 < n) c[col + 1] = v.y + (add ? add[col + 1] : 0.f);
        }
      }
    });
  };
  if constexpr (Cfg::kWs) {
    const TileWork work{g.tiles0[g.n]};
    const int row_tiles = (g.p[0].m + Cfg::BM - 1) / Cfg::BM;
    ws_persistent<Cfg>(
        smem, row_tiles * work.col_tiles, k, sums_lo / kTileK,
        [&](int w) { return min(g.p[0].m - work.row(w) * Cfg::BM, Cfg::BM); },
        [&](int w, TileSrc<Cfg>& src) {
          const int col = work.col(w), j = g.which(col);
          src_for(g.p[j], work.row(w) * Cfg::BM, (col - g.tiles0[j]) * Cfg::BN, src);
          if (tma.on)  // thread 0 copies the whole row tile
            src.a_map = tma.map, src.s_map = tma.map + 2,
            src.a_row = tid == 0 ? work.row(w) * Cfg::BM : -1;
        },
        [&](int w, const auto& acc) {
          const int col = work.col(w), j = g.which(col);
          store(g.p[j], work.row(w) * Cfg::BM, (col - g.tiles0[j]) * Cfg::BN, acc);
        });
  } else {
    const int m0 = blockIdx.y * Cfg::BM, n0 = blockIdx.x * Cfg::BN;  // tile_grid's order
    TileSrc<Cfg> src;
    src_for(g.p[0], m0, n0, src);
    float acc[Cfg::MI][Cfg::NJ][4];
    tile_mainloop<Cfg>(src, smem, acc);
    store(g.p[0], m0, n0, acc);
  }
}

GemmGroup group_of(const GemmParams& p) {
  GemmGroup g;
  g.p[0] = p, g.n = 1, g.tiles0[1] = (p.w.rows + 127) / 128;
  return g;
}

// lo: the exact path's A_lo offset (elements from a row of A to its row of A_lo).
template <TileB B, int BM, bool EXACT>
Status launch_tiles(const GemmParams& p, int sb_shift, int64_t lo, cudaStream_t s) {
  using Cfg = TileCfg<B, BM, BM / 16, 1, false, EXACT>;  // warpgroups: wgmma on sm_90a
  ORCHID_TRY(allow_smem(kernel_gemm<Cfg>, Cfg::kSmem, "gemm"));
  const dim3 grid = tile_grid((p.m + BM - 1) / BM, (p.w.rows + Cfg::BN - 1) / Cfg::BN);
  kernel_gemm<Cfg>
      <<<grid, Cfg::kThreads, Cfg::kSmem, s>>>(group_of(p), p.w.cols, sb_shift, lo, 0, ATmaMaps{});
  return last_launch("gemm");
}

// q4 in groups of 64 on the warp-specialised tiles (prefill/gemm_ws.cuh): the exact path's fold,
// and the scaled codes exact or not.
using WsCfg = TileCfg<TileB::q4, 128, 8, 1, false, true, true>;
template <bool EXACT>
using WsScaledCfg = TileCfg<TileB::q4, 128, 8, 1, false, EXACT, true, true>;
static_assert(WsScaledCfg<true>::BN == kScaledTileCols &&
              WsScaledCfg<false>::BN == kScaledTileCols);

// g's products share A (g.p[0]'s a, a_lo, a_sums, lda, m) and K; their column tiles are counted
// again in Cfg's width.
template <class Cfg>
Status launch_ws(GemmGroup g, int64_t lo, cudaStream_t s) {
  ORCHID_TRY(allow_smem(kernel_gemm<Cfg>, Cfg::kSmem, "gemm"));
  for (int j = 0; j < g.n; ++j)
    g.tiles0[j + 1] = g.tiles0[j] + (g.p[j].w.rows + Cfg::BN - 1) / Cfg::BN;
  const GemmParams& p = g.p[0];
  const int64_t tiles = int64_t((p.m + Cfg::BM - 1) / Cfg::BM) * g.tiles0[g.n];
  const int sums_lo = Cfg::kScaled ? group_sums_half(p.w.cols) : 0;
  ATmaMaps tma;
  ORCHID_TRY(encode_a_maps(tma, p.a, p.a_lo, p.m, p.w.cols, p.lda,
                           Cfg::kScaled ? p.a_sums : nullptr, 2 * sums_lo));
  kernel_gemm<Cfg>
      <<<ws_grid(tiles), Cfg::kThreads, Cfg::kSmem, s>>>(g, p.w.cols, 1, lo, sums_lo, tma);
  return last_launch("gemm");
}

// Which warp-specialised form takes g (its products q4 in groups of 64, sharing A; an sm_90a
// device): the scaled codes where A's group sums come with it, else the fold for the exact path,
// else none.
enum class WsForm : uint8_t { none, fold, scaled };
WsForm ws_form(const GemmGroup& g) {
  if (!ws_tiles_supported()) return WsForm::none;
  for (int j = 0; j < g.n; ++j)
    if (g.p[j].w.fmt != DevFormat::q4 || g.p[j].w.group != 64) return WsForm::none;
  const GemmParams& p = g.p[0];
  if (p.a_sums) return WsForm::scaled;
  return p.a_lo ? WsForm::fold : WsForm::none;
}
Status launch_ws_form(const GemmGroup& g, WsForm form, int64_t lo, cudaStream_t s) {
  if (form == WsForm::scaled)
    return g.p[0].a_lo ? launch_ws<WsScaledCfg<true>>(g, lo, s)
                       : launch_ws<WsScaledCfg<false>>(g, 0, s);
  return launch_ws<WsCfg>(g, lo, s);
}
bool ws_takes(const GemmParams& p) {
  return ws_form(group_of(p)) != WsForm::none;
}

// BM = 128 halves the dequantisation per product, once there are enough tiles to fill the GPU
// twice over; smaller launches take 64-row tiles. The warp-specialised tiles (an sm_90a device)
// take every q4 launch in groups of 64 (sb_shift 1) that ws_takes, whatever its rows.
template <TileB B, bool EXACT>
Status launch_format(const GemmParams& p, int sb_shift, int64_t lo, cudaStream_t s) {
  if constexpr (B == TileB::q4)
    if (const WsForm f = ws_form(group_of(p)); sb_shift == 1 && f != WsForm::none)
      return launch_ws_form(group_of(p), f, lo, s);
  const int64_t tiles128 = int64_t((p.m + 127) / 128) * ((p.w.rows + 127) / 128);
  if (tiles128 >= 2 * sm_count()) return launch_tiles<B, 128, EXACT>(p, sb_shift, lo, s);
  return launch_tiles<B, 64, EXACT>(p, sb_shift, lo, s);
}

// W's own format, its tiles dequantised (or, exact, decoded) in shared memory.
template <bool EXACT>
Status launch_fused(const GemmParams& p, int sb_shift, int64_t lo, cudaStream_t s) {
  switch (p.w.fmt) {
    case DevFormat::q4:
      return launch_format<TileB::q4, EXACT>(p, sb_shift, lo, s);
    case DevFormat::q8:
      return launch_format<TileB::q8, EXACT>(p, sb_shift, lo, s);
    case DevFormat::bf16:
      return launch_format<TileB::bf16, EXACT>(p, sb_shift, lo, s);
  }
  return err("gemm: unknown format");
}

// One thread per 16-byte unit of w; out rows are cols fp16 (cols a multiple of 8).
// out [w.rows, w.cols] fp16 bits = w dequantised; sb_shift as kernel_gemm's.
template <TileB B>
__global__ void kernel_dequant_f16(const __grid_constant__ DevMatrix w, uint16_t* out,
                                   int sb_shift) {
  constexpr int E = tile_unit_elems(B);
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(w.rows) * w.units) return;
  const int64_t r = i / w.units;
  const int cu = int(i - r * w.units);
  const uint4 raw = __ldg(static_cast<const uint4*>(w.w) + i);
  uint32_t sb = 0;
  if constexpr (B != TileB::bf16) sb = __ldg(w.sb + r * (w.units >> sb_shift) + (cu >> sb_shift));
  uint4 ch[E / 8];
  dequant_unit<B, true>(raw, sb, ch);
  uint4* o = reinterpret_cast<uint4*>(out + r * w.cols + int64_t(cu) * E);
#pragma unroll
  for (int c = 0; c < E / 8; ++c) o[c] = ch[c];
}

}  // namespace

bool ws_tiles_supported() {
  static const bool device_ok =
      sm90a_kernel_runs(reinterpret_cast<const void*>(kernel_gemm<WsCfg>), WsCfg::kSmem);
  return device_ok;
}
int ws_grid(int64_t n_work) {
  return int(std::max<int64_t>(1, std::min<int64_t>(n_work, sm_count())));
}

bool gemm_fused_dequant_enabled() {
  return g_fused_dequant.load(std::memory_order_relaxed);
}
void set_gemm_fused_dequant_enabled(bool on) {
  g_fused_dequant.store(on, std::memory_order_relaxed);
}
void set_gemm_dequant_scratch(uint16_t* buf, int64_t elems) {
  std::lock_guard lock(g_scratch.mu);
  g_scratch.buf = buf, g_scratch.elems = buf ? elems : 0;
}

Status launch_dequant_f16(const DevMatrix& w, uint16_t* out, cudaStream_t s) {
  auto shift = tile_matrix_shift(w, "dequant f16");
  if (!shift) return shift.error();
  if (!out || reinterpret_cast<uintptr_t>(out) % 16 != 0)
    return err("dequant f16: output null or not 16-byte aligned");
  const int64_t units = int64_t(w.rows) * w.units;
  const int threads = 256;
  const auto blocks = static_cast<unsigned>((units + threads - 1) / threads);
  switch (w.fmt) {
    case DevFormat::q4:
      kernel_dequant_f16<TileB::q4><<<blocks, threads, 0, s>>>(w, out, *shift);
      break;
    case DevFormat::q8:
      kernel_dequant_f16<TileB::q8><<<blocks, threads, 0, s>>>(w, out, *shift);
      break;
    case DevFormat::bf16:
      kernel_dequant_f16<TileB::bf16><<<blocks, threads, 0, s>>>(w, out, *shift);
      break;
  }
  return last_launch("dequant f16");
}

namespace {

// The shape and operand checks of launch_gemm; W's (scale, bias) shift.
Expected<int> check_gemm(const GemmParams& p) {
  auto shift = tile_matrix_shift(p.w, "gemm");
  if (!shift) return shift.error();
  if (p.m < 0 || !p.a || !p.c) return err("gemm: null operand or negative row count");
  if (p.lda < p.w.cols || p.lda % 8 != 0 || reinterpret_cast<uintptr_t>(p.a) % 16 != 0)
    return err("gemm: A needs 16-byte aligned rows of at least ", p.w.cols, " elements (lda ",
               p.lda, ")");
  if (p.pair_sum && (p.w.rows % 2 != 0 || p.add))
    return err("gemm: pair sums need an even row count and no residual");
  const int out_cols = p.pair_sum ? p.w.rows / 2 : p.w.rows;
  if (p.ldc < out_cols) return err("gemm: ldc ", p.ldc, " < ", out_cols, " output columns");
  if ((p.w.rows + 127) / 128 > 65535) return err("gemm: ", p.w.rows, " rows are too many");
  if (p.a_lo) {
    ORCHID_TRY(tile_exact_group(p.w, "gemm"));
    if (reinterpret_cast<uintptr_t>(p.a_lo) % 16 != 0)
      return err("gemm: A_lo must be 16-byte aligned");
  }
  if (p.a_sums && (reinterpret_cast<uintptr_t>(p.a_sums) % 16 != 0 || p.w.cols % 64 != 0))
    return err("gemm: A's group sums must be 16-byte aligned, for K a multiple of 64 (K ", p.w.cols,
               ")");
  return *shift;
}

// Elements from a row of A to its row of A_lo (the same layout in another buffer).
int64_t lo_offset(const GemmParams& p) {
  return (reinterpret_cast<intptr_t>(p.a_lo) - reinterpret_cast<intptr_t>(p.a)) / 2;
}

}  // namespace

Status launch_gemm(const GemmParams& p, cudaStream_t s) {
  auto shift = check_gemm(p);
  if (!shift) return shift.error();
  if (p.m == 0) return {};
  if (p.a_lo) return launch_fused<true>(p, *shift, lo_offset(p), s);
  if (p.w.fmt == DevFormat::bf16 || gemm_fused_dequant_enabled() || ws_takes(p))
    return launch_fused<false>(p, *shift, 0, s);
  // The ablation: W → fp16 scratch, then the fp16 tiles.
  uint16_t* buf = nullptr;
  {
    std::lock_guard lock(g_scratch.mu);
    if (g_scratch.elems >= int64_t(p.w.rows) * p.w.cols) buf = g_scratch.buf;
  }
  if (!buf)
    return err("gemm: the unfused path needs a dequantisation scratch of ",
               int64_t(p.w.rows) * p.w.cols, " fp16 elements (set_gemm_dequant_scratch)");
  ORCHID_TRY(launch_dequant_f16(p.w, buf, s));
  GemmParams f = p;
  f.w = DevMatrix{buf, nullptr, p.w.rows, p.w.cols, p.w.cols / 8, 0, DevFormat::bf16};
  return launch_format<TileB::f16, false>(f, 0, 0, s);
}

Status launch_gemm_group(std::span<const GemmParams> ps, cudaStream_t s) {
  if (ps.empty() || ps.size() > size_t(kMaxGemmGroup))
    return err("gemm group: 1 to ", kMaxGemmGroup, " products, got ", ps.size());
  GemmGroup g;
  for (const GemmParams& p : ps) {
    auto shift = check_gemm(p);
    if (!shift) return shift.error();
    const GemmParams& p0 = ps[0];
    if (p.a != p0.a || p.a_lo != p0.a_lo || p.a_sums != p0.a_sums || p.lda != p0.lda ||
        p.m != p0.m || p.w.cols != p0.w.cols)
      return err("gemm group: the products must share A (a, a_lo, a_sums, lda, m and K)");
    g.p[g.n] = p, g.tiles0[g.n + 1] = g.tiles0[g.n] + (p.w.rows + 127) / 128, ++g.n;
  }
  if (ps[0].m == 0) return {};
  if (const WsForm f = ws_form(g); f != WsForm::none)
    return launch_ws_form(g, f, lo_offset(ps[0]), s);
  for (const GemmParams& p : ps) ORCHID_TRY(launch_gemm(p, s));
  return {};
}

bool gemm_scaled_fills(int64_t m, int64_t tiles256) {
  return (m + 127) / 128 * tiles256 >= sm_count();
}

}  // namespace orchid::cuda
