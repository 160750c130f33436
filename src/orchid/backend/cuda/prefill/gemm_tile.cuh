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
