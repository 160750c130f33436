// The prefill GEMM tiles' shape and plumbing (prefill/gemm_tile.cuh has the design): the B
// formats, TileCfg (tile shape, warps, shared stages), the order of a launch's tiles, where each
// thread's copies come from, the integer-address PTX wrappers, and the host-side checks.
#pragma once

#include <cuda_fp16.h>

#include "orchid/backend/cuda/common/mma_sync.cuh"
#include "orchid/backend/cuda/common/tensor_map.h"
#include "orchid/backend/cuda/common/wgmma.cuh"

// Its own namespace: its cp_async16 and ldmatrix_x4 take shared addresses as integers (computed
// once per tile), beside common/mma_sync.cuh's pointer-taking ones of the same names.
namespace orchid::cuda::tile {

// What a B tile is read from: the three DevFormats, or plain fp16 rows (the ablation's buffer).
enum class TileB : uint8_t { q4, q8, bf16, f16 };

__host__ __device__ constexpr int tile_unit_elems(TileB b) {
  return b == TileB::q4 ? 32 : b == TileB::q8 ? 16 : 8;
}

constexpr int kTileK = 64;      // elements per k-step (one q4 group of 64)
constexpr int kTileRowB = 128;  // bytes per shared tile row: 64 fp16

// A block's tile shape: BM rows of A × 128 rows of B, WARPS_M × WARPS_N warps.
// Warpgroup layout (WARPS_N = 1, a warp per 16 rows): on sm_90a each 4 consecutive warps multiply
// their 64 rows by all 128 B rows with wgmma (m64n128k16, both operands read from the swizzled
// shared tiles); elsewhere (and for 16- or 32-row tiles) warps multiply their own
// (BM / WARPS_M) × (128 / WARPS_N) part with mma.sync m16n8k16, A and B fragments from ldmatrix.
// Both leave a warp's results in the mma C layout (acc[i][j]: m16 fragment i, n8 fragment j).
// GATED: B rows [0, 64) and [64, 128) are two matrices (gate, up) at the same output columns, and
// each warp's fragments j < NJ / 2 pair with j + NJ / 2 (gate with up).
// EXACT: the exact path (top of file); with q4 / q8 B the group fold (kFold) keeps a second set of
// accumulators, the current group's partial sums.
// WS: the warp-specialised form (prefill/gemm_ws.cuh; q4 in groups of 64, 128 × 128 tiles on
// sm_90a): a producer warpgroup (threads [0, 128)) before the warps above, which only multiply.
// SCALED (warp-specialised only; prefill/gemm_ws.cuh's "scaled codes"): B tiles hold s·(q − 8),
// exact in fp16, and the biases come in as extra k-steps against A's group sums, so that no group
// fold is left; exact (two A passes) or not (A_hi alone).
template <TileB B_, int BM_, int WARPS_M, int WARPS_N, bool GATED_, bool EXACT_, bool WS_ = false,
          bool SCALED_ = false>
struct TileCfg {
  static constexpr TileB B = B_;
  static constexpr bool kGated = GATED_, kDequant = B != TileB::f16, kExact = EXACT_;
  static constexpr bool kWs = WS_, kScaled = SCALED_;
  static constexpr bool kHasSb = B == TileB::q4 || B == TileB::q8;
  static constexpr bool kFold = kExact && kHasSb && !kScaled;
  static constexpr int kPasses = kExact ? 2 : 1;  // A passes per k-step (hi, then lo)
  // The scaled codes' tiles are 256 columns wide: one accumulator set (no fold) leaves the
  // registers for it, and A's tile then serves twice the products.
  static constexpr int BM = BM_, BN = kScaled ? 256 : 128;
  static constexpr int kWarpsM = WARPS_M, kWarpsN = WARPS_N;
  static constexpr int kProducerThreads = kWs ? 128 : 0;
  static constexpr int kMmaThreads = 32 * kWarpsM * kWarpsN;  // the warps that hold results
  static constexpr int kThreads = kProducerThreads + kMmaThreads;
  static constexpr bool kWgmma = kWarpsN == 1 && BM == 16 * kWarpsM && BM % 64 == 0;
  static constexpr int WM = BM / kWarpsM, WN = BN / kWarpsN;  // a warp's rows of A and of B
  static constexpr int MI = WM / 16, NJ = WN / 8;             // its m16 and n8 fragments
  static constexpr int E = tile_unit_elems(B);
  static constexpr int kUnitsPerRow = kTileK / E;  // B units of one row per k-step
  static constexpr int kUnits = BN * kUnitsPerRow;
  // Copies per thread (TileSrc): B units and 16-byte A chunks (per tile); warp-specialised, thread
  // t < BM names A's row t and B's row t (the producer copies from those).
  static constexpr int kUnitsPerThread = kWs ? BN / 128 : kUnits / kThreads;
  static constexpr int kAPerThread = kWs ? 1 : BM * 8 / kThreads;
  // Stage: A tile (exact: A_hi, then A_lo) | raw B units (fp16: the swizzled B tile) | (scale,
  // bias) words. Every part is a multiple of 1024 bytes, so the tiles stay aligned to the 128-byte
  // swizzle's 8-row atoms.
  static constexpr int kATileBytes = BM * kTileRowB, kABytes = (kExact ? 2 : 1) * kATileBytes;
  static constexpr int kRawBytes = kUnits * 16;
  static constexpr int kStageBytes = kABytes + kRawBytes + (kHasSb ? kUnits * 4 : 0);
  static constexpr int kBhBytes = kDequant ? 2 * BN * kTileRowB : 0;  // dequantised, 2 buffers
  __host__ __device__ static constexpr int smem_bytes(int stages) {
    return stages * kStageBytes + kBhBytes;
  }
  // Resident blocks aimed at: 8 or 12 warps per SM. An SM has 228 KB of shared memory, 1 KB of
  // it reserved per block; 4 stages where they fit, else 3 (the least the schedule needs). For
  // 64-row q4 tiles, three blocks of 3 stages beat two of 4 (H200, experts' gate/up at T = 8192:
  // 241 against 215 TFLOP/s). The exact path's 64- and 128-row tiles (64 accumulators a thread)
  // aim at 8 warps, 256 threads once or 128 twice: the fold's partial sums double the accumulators
  // (~250 of the SM's 65,536 registers a thread), and with bf16 the second A tile leaves shared
  // memory for one block anyway (sm_80 spills it at 128 registers).
  static constexpr bool kWide = kExact && MI * NJ * 4 >= 64;
  static constexpr int kMinBlocks = kWs     ? 1
                                    : kWide ? (kThreads >= 256 ? 1 : 2)
                                            : (kThreads >= 256 ? 2 : 3);
  static constexpr int kStages = smem_bytes(4) <= (228 - kMinBlocks) * 1024 / kMinBlocks ? 4 : 3;

  // The warp-specialised layout (prefill/gemm_ws.cuh), one block an SM: kWsStages stages of A_hi |
  // A_lo | B [BN + 8, 64] fp16 (the fold: the codes, 8 rows of ones for A's row sums, then one
  // (scale, bias) word per B row, padded to 1024 bytes: 50 KB, four stages; scaled: s·(q − 8) in
  // 256 rows, 64 KB, or 48 without A_lo, three stages); a ring of kWsStages steps of raw B units (4
  // KB each, scaled 8 KB + the step's (scale, bias) word and its matrix's 2^code_exp per row); A's
  // row pointers (scaled: and its group sums' rows), two tables each; a full and an empty
  // mbarrier per stage. 217 KB (scaled exact: 226 KB).
  static constexpr int kWsStages = kScaled ? 3 : 4;
  static constexpr int kWsBRows = kScaled ? BN : BN + 8;
  static constexpr int kWsB = kABytes, kWsSb = kWsB + kWsBRows * kTileRowB;
  static constexpr int kWsStageBytes = (kWsSb + (kScaled ? 0 : BN * 4) + 1023) / 1024 * 1024;
  static constexpr int kWsRawSlot = kRawBytes + (kScaled ? BN * 8 : 0);
  static constexpr int kWsRaw = kWsStages * kWsStageBytes,
                       kWsRows = kWsRaw + kWsStages * kWsRawSlot;
  static constexpr int kWsRowTables = kScaled ? 4 : 2;
  static constexpr int kWsBars = kWsRows + kWsRowTables * BM * 8,
                       kWsSmem = kWsBars + 2 * kWsStages * 8;

  static constexpr int kSmem = kWs ? kWsSmem : smem_bytes(kStages);

  static_assert(kWs || (BM % (16 * kWarpsM) == 0 && kAPerThread >= 1 && BM * 8 % kThreads == 0));
  static_assert(kWs || (kUnits % kThreads == 0 && kUnitsPerThread >= 1));
  static_assert(kStageBytes % 1024 == 0 && kBhBytes % 1024 == 0);
  static_assert(!kWs || (B == TileB::q4 && (kExact || kScaled) && BM == 128 && kWarpsM == 8 &&
                         kWarpsN == 1),
                "the warp-specialised tiles are q4 128 × 128 ones (exact, or scaled)");
  static_assert(!kScaled || kWs, "scaled codes are a form of the warp-specialised tiles");
  static_assert(kSmem <= 227 * 1024, "more shared memory than a block may have");
  static_assert(!kGated || NJ % 4 == 0, "gate and up need whole ldmatrix.x4 pairs each");
  static_assert(!kExact || kDequant, "the exact path reads the raw weights, not an fp16 copy");

  // B tile row of a warp's fragment j (warp column wn).
  __device__ static constexpr int b_row(int wn, int j) {
    if constexpr (kGated)
      return j < NJ / 2 ? wn * (WN / 2) + 8 * j : BN / 2 + wn * (WN / 2) + 8 * (j - NJ / 2);
    return wn * WN + 8 * j;
  }
  // The rows thread tid's copy p describes in TileSrc (A's and B's).
  __device__ static constexpr int a_src_row(int tid, int p) {
    return kWs ? tid : (tid + p * kThreads) >> 3;
  }
  __device__ static constexpr int b_src_row(int tid, int p) {
    return kWs ? tid + 128 * p : (tid + p * kThreads) / kUnitsPerRow;
  }
  // The accumulators a thread holds after the main loop: calls row_fn(r, i, h, c) for each of its
  // tile rows r (acc[i][j][2h], acc[i][j][2h + 1] for every fragment j), with c(j) the tile column
  // of fragment j's first element (the second is c(j) + 1). The producer warpgroup holds none.
  template <class F>
  __device__ static void for_each_acc_row(int block_tid, F&& row_fn) {
    const int tid = block_tid - kProducerThreads;
    if (tid < 0) return;
    const int lane = tid & 31, warp = tid >> 5, wm = warp / kWarpsN, wn = warp % kWarpsN;
    const auto col = [=](int j) { return b_row(wn, j) + 2 * (lane & 3); };
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) row_fn(wm * WM + 16 * i + (lane >> 2) + 8 * h, i, h, col);
  }
};

// The order of a tile launch's work: column tiles fastest, so that the blocks in flight share A's
// row tile, read from DRAM about once (the exact path's A is T · K · 4 bytes: 64 MB at 8K tokens;
// or an expert launch's gathered rows), while W (a dense matrix's 1-13 MB, an expert's 0.5-1 MB)
// stays in L2. Row tiles fastest re-read A from DRAM for every column tile once A outgrows L2.
// The single-role tiles: block (x, y) computes column tile x of row tile y.
inline dim3 tile_grid(int row_tiles, int col_tiles) {
  return dim3(col_tiles, row_tiles);
}
// The warp-specialised tiles: item w of (row tiles) × col_tiles tiles in the same order, walked by
// persistent blocks (prefill/gemm_ws.cuh's ws_persistent).
struct TileWork {
  int col_tiles = 0;
  __device__ __forceinline__ int row(int w) const { return w / col_tiles; }
  __device__ __forceinline__ int col(int w) const { return w % col_tiles; }
};

// Where one thread's copies come from. A: the rows of its kAPerThread chunks (null: a masked
// row, zero-filled); B: the rows of its units (16-byte units, null: masked) and their (scale,
// bias) rows. Chunk p of A is row a_src_row(tid, p) = (tid + p · kThreads) / 8, column chunk
// tid % 8; unit p of B is row b_src_row(tid, p) = (tid + p · kThreads) / kUnitsPerRow, unit
// (tid + p · kThreads) % kUnitsPerRow of the step (warp-specialised: row tid of each).
template <class Cfg>
struct TileSrc {
  const uint16_t* a[Cfg::kAPerThread];
  const uint4* b[Cfg::kUnitsPerThread];
  const uint32_t* sb[Cfg::kUnitsPerThread];
  int k = 0;         // reduction length (elements): A columns and B columns
  int sb_shift = 0;  // q4/q8: log2(units per (scale, bias) group)
  // Exact path: A_lo's row at a[p] + lo (elements; A_lo has A's layout in a buffer of its own).
  int64_t lo = 0;
  // Warp-specialised tiles with A by the copy engine (a block of consecutive rows, where the
  // driver encodes tensor maps): the maps of A_hi and A_lo (a_map[0], a_map[1]; null: A by
  // cp.async from a[]), whose boxes are the whole BM-row tile; one thread copies it from row
  // a_row on, the others have a_row < 0.
  const CUtensorMap* a_map = nullptr;
  int a_row = -1;
  // Scaled warp-specialised tiles (prefill/gemm_ws.cuh): thread t's row of A's group sums
  // (launch_group_sums; null: masked), whose lo block starts sums_lo elements on (sums_lo / 64
  // bias k-steps follow A's); with the copy engine, the sums' map (its boxes the whole tile too).
  const uint16_t* s = nullptr;
  int sums_lo = 0;
  const CUtensorMap* s_map = nullptr;
  float b_scale[Cfg::kUnitsPerThread] = {};  // 2^code_exp of B row b_src_row(t, p)'s matrix
};

// ---- PTX wrappers ------------------------------------------------------------------------------

// smem_addr, cp_async_commit and cp_async_wait<N> come from mma_sync.cuh.
// 16 bytes global → shared, bypassing L1; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Byte offset of chunk c (8 elements) of row r in a swizzled [rows, 64] fp16 tile (the 128-byte
// swizzle of common/wgmma_layout.h).
__device__ __forceinline__ uint32_t tile_off(int r, int c) {
  return sw128_offset(r, c);
}

// ---- Host side -------------------------------------------------------------------------------

// Checks w as a tile GEMM's B (reduction length K = w.cols) and returns log2(units per (scale,
// bias) group) (0 for bf16). Rows are whole units with no padding (K a multiple of the unit, so
// A's rows are whole 16-byte chunks too); groups are powers of two of whole units dividing K.
inline Expected<int> tile_matrix_shift(const DevMatrix& w, const char* what) {
  const int e = unit_elems(w.fmt);
  if (!w.w || w.rows <= 0 || w.cols <= 0) return err(what, ": empty weight matrix");
  if (reinterpret_cast<uintptr_t>(w.w) % 16 != 0) return err(what, ": weights not 16-byte aligned");
  if (w.cols % e != 0 || w.units != w.cols / e)
    return err(what, ": ", w.cols, " columns are not whole ", e, "-element units (", w.units,
               " units)");
  if (w.fmt == DevFormat::bf16) return 0;
  const int upg = w.group / e;
  if (!w.sb || w.group <= 0 || w.group % e != 0 || (upg & (upg - 1)) != 0 || w.cols % w.group != 0)
    return err(what, ": group ", w.group, " unsupported for ", w.cols, " columns");
  int shift = 0;
  while ((1 << shift) < upg) ++shift;
  return shift;
}

// The exact path folds whole groups of 32 elements or more (two folds per k-step at most).
inline Status tile_exact_group(const DevMatrix& w, const char* what) {
  if (w.fmt != DevFormat::bf16 && w.group < 32)
    return err(what, ": the exact path needs quantisation groups of 32 or more (", w.group, ")");
  return {};
}

// Allows Cfg's dynamic shared memory for `kernel` (set on every launch, cheap, so it holds for
// whichever device is current).
template <class Kernel>
Status allow_smem(Kernel kernel, int bytes, const char* what) {
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      e != cudaSuccess)
    return err(what, ": ", cudaGetErrorString(e));
  return {};
}

}  // namespace orchid::cuda::tile
