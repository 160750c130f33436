// Gated DeltaNet's delta-rule scan in chunks of 64 tokens on the tensor cores: the WY form of spec
// §6.7, the second form of launch_gdn_prefill's scan (prefill/delta_net_scan.cu holds the sequential
// one). kernel_gdn_chunk_prep does, per (value head, chunk) and all in parallel, everything that
// does not depend on the incoming state; kernel_gdn_chunk_scan walks the chunks in order per
// (value head, 32 state columns) with the state in registers: one dependent step per 64 tokens.
//
// The scan's speed is 64 × one chunk step at 4,096 tokens (real shape: 32 heads × 4 blocks = 128
// blocks, one an SM). Session 7's step (4 warps a block; Nsight Compute at 1.8 GHz): 9,500 cycles,
// 338 µs — one warp a scheduler issuing ~2,900 instructions a chunk, one every 3.3 cycles (IPC
// 1.23 an SM). Its floors a chunk: L2 → shared memory 120 KB a block (W, q̂, k̂ 96 KB that the
// head's 4 blocks each read, P 16, U 8; L2 at 45 % of peak, so ~4,200 cycles at 100 %); shared
// memory ~430 KB (L1 at 33 % ↔ 128 B a cycle: ~3,400 cycles); 1,320 mma.sync an SM (~2,100 cycles
// at ~6.5 cycles an mma a scheduler). Now 8 warps a block: the same bytes from L2 (less the 6 KB
// of P never read) and the same mma an SM, but a warp issues half the mma and under half the
// other instructions (each Sᵀ split once by its owner instead of twice by every warp, no partial
// sums: a warp finishes its tokens' V′ over all dk), two warps a scheduler hide each other's
// latency, two barriers a chunk instead of three; shared memory ~490 KB a chunk (the Sᵀ slots
// add 64 KB of reads: ~3,800 cycles). Expected ~4,500-5,500 cycles a chunk, L2- and shared-
// memory-bound together: 160-200 µs. 16 columns a block (256 blocks) would double the L2 reads
// (each block reads whole tiles: ~8,400 cycles); reading each tile once a head (its 4 blocks as a
// cluster with multicast bulk copies) is the next step past this one (not yet measured).
//
// A chunk's rows r < 64 are tokens t0 + r; rows past the end of the launch have β = 0, decay 1 and
// q̂ = k̂ = v = 0, so they change nothing. With S₀ [dk, dv] the state before the chunk:
//   Γ[r][s] = Π_{s<u≤r} decay_u (s ≤ r),   e^γ_r = Π_{u≤r} decay_u,   e^{γ₆₃−γ_r} = Γ[63][r]
//   A[r][s] = β_r (k̂_r·k̂_s) Γ[r][s] (s < r),   (I + A) [U | W] = [diag(β) V | diag(β e^γ) K̂]
//   P[r][s] = (q̂_r·k̂_s) Γ[r][s] (s ≤ r)
//   V′ = U − W S₀,   O = diag(e^γ) Q̂ S₀ + P V′,   S = e^{γ₆₃} S₀ + K̂ᵀ diag(e^{γ₆₃−γ}) V′
// (row r of V′ is token r's δ = β (v − m) of the sequential scan). The decays enter as running
// products, as in the sequential scan, not as exp of a cumulative log: decays reach e^-49 a token,
// so γ reaches −3,000 within a chunk, where fp32 cancellation in γ_r − γ_s would cost 1e-4
// relative; a product of 63 decays costs ≤ 63 roundings.
//
// Precision: every tensor-core product is bf16x3 (common/mma_sync.cuh): each fp32 operand is split into
// bf16 hi + lo (2⁻¹⁸ relative) and a·b ≈ hi·hi + hi·lo + lo·hi, accumulated in fp32: a product
// within ~1e-5 relative (a few 1e-6 typically) against fp32's 6e-8, for three times the MMAs; o
// and S end ~1e-5 rel. L2 from a double reference, an order inside the tests' 1e-4 (the scan block
// emulated on the CPU, tests/backend/test_delta_net_chunk_tile.cpp: ~4e-6 from its tiles). bf16
// halves rather than fp16 ones because the operands span fp32's range (q̂ ~ 1e-2, decayed terms down
// to 1e-30): an fp16 lo is subnormal below ~2⁻³ and loses its bits without per-tile scaling. Rather
// than tf32x3 (22 bits) because tf32's m16n8k8 runs at half the bf16 rate and the scan kernel is
// the serial part. The triangular solve for U and W runs in fp32 on the CUDA cores.
#include <algorithm>

#include "orchid/backend/cuda/prefill/delta_net_chunk_tile.h"
#include "orchid/backend/cuda/common/mma_sync.cuh"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {
namespace {

using gdn_chunk::kChunk;  // 64 tokens a chunk
using gdn_chunk::kHd;     // 128: every tile is zero-padded to it
static_assert(kHd == kMaxGdnHeadDim);
// bf16 per shared row: the width plus 16 bytes, so the 8 rows of an ldmatrix hit 8 distinct
// 16-byte bank groups.
constexpr int kRowH = kHd + 8;
constexpr int kRowP = kChunk + 8;

// The scratch's per-chunk tiles (element counts; every tile a multiple of 512 bytes, so each starts
// 16-byte aligned for cp.async). Planes are [hi, lo] bf16.
constexpr size_t kQkTile = 2 * 2 * kChunk * kHd;  // bf16 [q̂, k̂][plane][64][128], per key head
constexpr size_t kWTile = 2 * kChunk * kHd;       // bf16 [plane][64][128] W, per value head
constexpr size_t kPTile = 2 * kChunk * kChunk;    // bf16 [plane][64][64] P
constexpr size_t kUTile = kChunk * kHd;           // fp32 [64][128] U
constexpr size_t kGateTile = kChunk;              // float2 [64] (e^γ_r, e^{γ₆₃−γ_r})

struct ChunkTiles {
  uint16_t* qk = nullptr;  // [hk][n_chunks] tiles
  uint16_t* w = nullptr;   // [hv][n_chunks] tiles, as are the three below
  uint16_t* pm = nullptr;
  float* u = nullptr;
  float2* gate = nullptr;
  int n_chunks = 0;
};

ChunkTiles carve_tiles(void* base, int n_chunks, int hk, int hv) {
  ChunkTiles t;
  const size_t kt = size_t(hk) * n_chunks, vt = size_t(hv) * n_chunks;
  t.qk = static_cast<uint16_t*>(base);
  t.w = t.qk + kt * kQkTile;
  t.pm = t.w + vt * kWTile;
  t.u = reinterpret_cast<float*>(t.pm + vt * kPTile);
  t.gate = reinterpret_cast<float2*>(t.u + vt * kUTile);
  t.n_chunks = n_chunks;
  return t;
}

// The A fragment (16 rows × 16 k) of two m16n8 accumulator tiles side by side, as bf16 hi and lo:
// an accumulator tile's layout is half an A fragment's, so no shuffles (as for P in flash
// attention).
__device__ __forceinline__ void split_frag(const float (&t0)[4], const float (&t1)[4],
                                           uint32_t (&hi)[4], uint32_t (&lo)[4]) {
  split_bf16x2(t0[0], t0[1], hi[0], lo[0]);
  split_bf16x2(t0[2], t0[3], hi[1], lo[1]);
  split_bf16x2(t1[0], t1[1], hi[2], lo[2]);
  split_bf16x2(t1[2], t1[3], hi[3], lo[3]);
}

// ---- Per (value head, chunk): U, W, P and the decays ------------------------------------------

// 8 warps. After the decays, warps 0-3 form k̂ k̂ᵀ → A and warps 4-7 q̂ k̂ᵀ → P, 16 rows each (only
// the tiles left of and on the diagonal: 20 of 32); then each thread solves (I + A) x = b for one
// right-hand column by forward substitution: threads 0-127 the columns of β v (→ U), 128-255
// those of β e^γ k̂ (→ W). Two blocks an SM (102 KiB of shared memory each).
constexpr int kPrepThreads = 256;

struct PrepSmem {
  uint16_t qk[2][2][kChunk][kRowH];  // [q̂, k̂][plane][row][dim]
  // Aᵀ: at[s][r] = A[r][s] for r > s (+4: the epilogue's column stores hit 32 banks).
  float at[kChunk][kChunk + 4];
  float gam[kChunk][kChunk + 1];                  // Γ[r][s] for s ≤ r
  float beta[kChunk], decay[kChunk], eg[kChunk];  // β_r, decay_r, e^γ_r
};

// GdnPrefillParams (reads conv_out, beta, decay) → tl's tiles of chunk c, value head j (w, pm,
// u, gate [hv][n_chunks]; j % (hv / hk) == 0 also its key head's qk [hk][n_chunks]). Grid
// (n_chunks, hv): a block per (chunk, value head); dynamic shared memory PrepSmem.
__global__ void __launch_bounds__(kPrepThreads, 2)
    kernel_gdn_chunk_prep(const __grid_constant__ GdnPrefillParams p,
                          const __grid_constant__ ChunkTiles tl) {
  extern __shared__ uint4 prep_smem[];
  PrepSmem& sm = *reinterpret_cast<PrepSmem*>(prep_smem);
  const int c = blockIdx.x, j = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int dk = p.dk, dv = p.dv, kd = p.hk * dk, C = 2 * kd + p.hv * dv;
  const int ratio = p.hv / p.hk, kh = j / ratio;
  const int t0 = c * kChunk, L = min(kChunk, p.T - t0);
  const size_t tile = size_t(j) * tl.n_chunks + c;
  const float* rows = p.conv_out + size_t(t0) * C;

  if (tid < kChunk) {
    const size_t at = size_t(t0 + tid) * p.hv + j;
    sm.beta[tid] = tid < L ? p.beta[at] : 0.f;
    sm.decay[tid] = tid < L ? p.decay[at] : 1.f;
  }
  // q̂ and k̂ into hi/lo planes, two dims a thread a step, eight steps' loads in flight; the first
  // value head of each key head also writes them out for the scan kernel.
  {
    constexpr int kPairs = 2 * kChunk * kHd / 2, kBatch = 8;
    static_assert(kPairs % (kBatch * kPrepThreads) == 0);
    uint16_t* qk_out = j % ratio == 0 ? tl.qk + (size_t(kh) * tl.n_chunks + c) * kQkTile : nullptr;
    for (int e0 = tid; e0 < kPairs; e0 += kBatch * kPrepThreads) {
      float2 x[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int e = e0 + b * kPrepThreads, which = e / (kChunk * kHd / 2);
        const int r = e / (kHd / 2) % kChunk, i = 2 * (e % (kHd / 2));
        const float* src = rows + size_t(r) * C + which * kd + size_t(kh) * dk + i;
        x[b].x = r < L && i < dk ? src[0] : 0.f;
        x[b].y = r < L && i + 1 < dk ? src[1] : 0.f;
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int e = e0 + b * kPrepThreads, which = e / (kChunk * kHd / 2);
        const int r = e / (kHd / 2) % kChunk, i = 2 * (e % (kHd / 2));
        uint32_t hi, lo;
        split_bf16x2(x[b].x, x[b].y, hi, lo);
        *reinterpret_cast<uint32_t*>(&sm.qk[which][0][r][i]) = hi;
        *reinterpret_cast<uint32_t*>(&sm.qk[which][1][r][i]) = lo;
        if (qk_out) {
          uint16_t* dst = qk_out + (size_t(2 * which) * kChunk + r) * kHd + i;
          *reinterpret_cast<uint32_t*>(dst) = hi;
          *reinterpret_cast<uint32_t*>(dst + kChunk * kHd) = lo;
        }
      }
    }
  }
  __syncthreads();
  // Row r of Γ walking left from the diagonal; the loads are independent of the running product,
  // so the chain is 63 multiplies.
  if (tid < kChunk) {
    const int r = tid;
    float g = 1.f;
    sm.gam[r][r] = 1.f;
    for (int s = r - 1; s >= 0; --s) {
      g *= sm.decay[s + 1];
      sm.gam[r][s] = g;
    }
    sm.eg[r] = g * sm.decay[0];
  }
  __syncthreads();
  if (tid < kChunk)
    tl.gate[tile * kGateTile + tid] = make_float2(sm.eg[tid], sm.gam[kChunk - 1][tid]);

  // k̂ k̂ᵀ (warps 0-3) or q̂ k̂ᵀ (4-7), rows 16 mt … 16 mt + 15, over the dims dk has.
  {
    const int mat = warp >> 2, mt = warp & 3, gq = lane >> 2, qc = 2 * (lane & 3);
    const auto& a_src = sm.qk[mat == 0 ? 1 : 0];
    const auto& b_src = sm.qk[1];
    float acc[8][4] = {};
#pragma unroll
    for (int kk = 0; kk < kHd / 16; ++kk) {
      if (16 * kk >= dk) break;  // uniform: the padding dims are zero
      uint32_t ah[4], al[4];
      const int ar = 16 * mt + (lane & 15), ac = 16 * kk + (lane >> 4) * 8;
      ldmatrix_x4(ah, &a_src[0][ar][ac]);
      ldmatrix_x4(al, &a_src[1][ar][ac]);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        if (np > mt) continue;  // right of the diagonal block: never read
        // B (k = dims, n = the key rows s) is k̂'s rows as stored.
        const int br = 16 * np + (lane & 7) + (lane >> 4) * 8;
        const int bc = 16 * kk + ((lane >> 3) & 1) * 8;
        uint32_t bh[4], bl[4];
        ldmatrix_x4(bh, &b_src[0][br][bc]);
        ldmatrix_x4(bl, &b_src[1][br][bc]);
        mma_bf16x3(acc[2 * np], ah, al, bh[0], bh[1], bl[0], bl[1]);
        mma_bf16x3(acc[2 * np + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
      }
    }
    uint16_t* pm = tl.pm + tile * kPTile;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      if (nt / 2 > mt) continue;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = 16 * mt + gq + 8 * hf, s = 8 * nt + qc;
        const float x0 = acc[nt][2 * hf], x1 = acc[nt][2 * hf + 1];
        if (mat == 0) {
          sm.at[s][r] = s < r ? sm.beta[r] * sm.gam[r][s] * x0 : 0.f;
          sm.at[s + 1][r] = s + 1 < r ? sm.beta[r] * sm.gam[r][s + 1] * x1 : 0.f;
        } else {
          uint32_t hi, lo;
          split_bf16x2(s <= r ? sm.gam[r][s] * x0 : 0.f, s + 1 <= r ? sm.gam[r][s + 1] * x1 : 0.f,
                       hi, lo);
          *reinterpret_cast<uint32_t*>(pm + r * kChunk + s) = hi;
          *reinterpret_cast<uint32_t*>(pm + kChunk * kChunk + r * kChunk + s) = lo;
        }
      }
    }
  }
  __syncthreads();

  // (I + A) x = b for this thread's column, in fp32: b = β v (U) or β e^γ k̂ (W), zero past dv / dk
  // and past the chunk's rows.
  const int col = tid % kHd, which = tid / kHd;  // uniform per warp
  const bool live = col < (which ? dk : dv);
  const float* src = rows + (which ? kd + size_t(kh) * dk : 2 * size_t(kd) + size_t(j) * dv) + col;
  float x[kChunk];
  // One running address (64 precomputed ones would cost 128 registers).
#pragma unroll
  for (int r = 0; r < kChunk; ++r, src += C) {
    x[r] = live && r < L ? *src : 0.f;
  }
#pragma unroll
  for (int r = 0; r < kChunk; ++r) {
    x[r] *= which ? sm.beta[r] * sm.eg[r] : sm.beta[r];
  }
  // Column s of A at a time: x_s is final once columns 0 … s − 1 are subtracted; its 63 − s
  // updates are independent (ILP), and a float4 of Aᵀ's row s is a broadcast load.
#pragma unroll
  for (int s = 0; s < kChunk - 1; ++s) {
#pragma unroll
    for (int r4 = (s + 1) / 4; r4 < kChunk / 4; ++r4) {
      const float4 a = *reinterpret_cast<const float4*>(&sm.at[s][4 * r4]);
      if (4 * r4 + 0 > s) x[4 * r4 + 0] = fmaf(-a.x, x[s], x[4 * r4 + 0]);
      if (4 * r4 + 1 > s) x[4 * r4 + 1] = fmaf(-a.y, x[s], x[4 * r4 + 1]);
      if (4 * r4 + 2 > s) x[4 * r4 + 2] = fmaf(-a.z, x[s], x[4 * r4 + 2]);
      x[4 * r4 + 3] = fmaf(-a.w, x[s], x[4 * r4 + 3]);  // 4 r4 + 3 > s always
    }
  }
  if (which == 0) {
    float* u = tl.u + tile * kUTile + col;
#pragma unroll
    for (int r = 0; r < kChunk; ++r) u[r * kHd] = x[r];
  } else {
    uint16_t* w = tl.w + tile * kWTile + col;
#pragma unroll
    for (int r = 0; r < kChunk; ++r) {
      const uint16_t hi = float_to_bf16_bits(x[r]);
      w[r * kHd] = hi;
      w[(kChunk + r) * kHd] = float_to_bf16_bits(x[r] - bf16_bits_to_float(hi));
    }
  }
}

// ---- Per (value head, 32 state columns): the chunks in order ----------------------------------

// 8 warps (prefill/delta_net_chunk_tile.h): warp (m, b) = (col_tile, blk) holds Sᵀ for block columns
// 16 m … 16 m + 15 and dk rows 32 b … 32 b + 31 (4 n-tiles: 16 fp32 registers). Per chunk:
//   (1) for tokens 16 b … 16 b + 15 over all dk: Sᵀ Wᵀ and Sᵀ Q̂ᵀ, Sᵀ's A fragments read from the
//       S slots its four owners wrote (split into bf16 hi / lo once, by the owner);
//   (2) V′ᵀ = Uᵀ − Sᵀ Wᵀ for these tokens, as A fragments plain and scaled by e^{γ₆₃−γ} to the V′
//       slots; Sᵀ Q̂ᵀ diag(e^γ), the start of Oᵀ;
//   (3) Oᵀ += V′ᵀ Pᵀ over the token k-steps at or left of its own (P is zero right of the
//       diagonal), O stored;
//   (4) Sᵀ ← e^{γ₆₃} Sᵀ + (V′ᵀ diag(e^{γ₆₃−γ})) K̂ over its 32 dk rows, split to the S slots.
// Two barriers a chunk, before (1) and before (3). The tiles are single-buffered in two copy
// groups: W, q̂, U and the decays (read in (1)-(2)) refill for the next chunk from the second
// barrier on, under (3)-(4); P and k̂ (read in (3)-(4)) from the first barrier on, under (1)-(2).
// 161.5 KiB of shared memory: one block an SM (sm_80's 163 KiB a block still takes it).
constexpr int kScanThreads = 32 * gdn_chunk::kScanWarps;

struct ScanSmem {
  uint16_t w[2][kChunk][kRowH];   // W [plane][token][dim]
  uint16_t q[2][kChunk][kRowH];   // q̂
  uint16_t k[2][kChunk][kRowH];   // k̂
  uint16_t pm[2][kChunk][kRowP];  // P [plane][r][s]; the 16 × 16 blocks right of the diagonal
                                  // are never copied nor read
  // U of the block's columns (+4: the fragment reads hit 32 banks).
  float u[kChunk][gdn_chunk::kScanCols + 4];
  float2 gate[kChunk];                   // (e^γ_r, e^{γ₆₃−γ_r})
  uint4 s_frag[gdn_chunk::kSSlots][32];  // Sᵀ A fragments [s_slot][lane]
  uint4 v_frag[gdn_chunk::kVSlots][32];  // V′ᵀ A fragments [v_slot][lane]
};

// The copies: thread t moves one 16-byte column of a tile's rows t / n … every kScanThreads / n
// rows (n: 16-byte columns a row), so its addresses are one base per tile plus constants.
// A [2][64][128] bf16 tile into shared rows of kRowH: 8 copies a thread.
__device__ __forceinline__ void copy_tile128(uint16_t (&dst)[2][kChunk][kRowH],
                                             const uint16_t* src) {
  constexpr int kCh = kHd / 8, kStep = kScanThreads / kCh;
  const int r0 = threadIdx.x / kCh, ch = threadIdx.x % kCh;
#pragma unroll
  for (int plane = 0; plane < 2; ++plane)
#pragma unroll
    for (int i = 0; i < kChunk / kStep; ++i) {
      const int r = r0 + i * kStep;
      cp_async16(&dst[plane][r][8 * ch], src + (plane * kChunk + r) * kHd + 8 * ch);
    }
}
// Chunk tiles vt (value head) and kt (key head) that (1)-(2) read: W, q̂, the block's U columns
// from c0 and the decays.
__device__ __forceinline__ void load_w_q_u(ScanSmem& sm, const ChunkTiles& tl, size_t vt, size_t kt,
                                           int c0) {
  copy_tile128(sm.w, tl.w + vt * kWTile);
  copy_tile128(sm.q, tl.qk + kt * kQkTile);
  constexpr int kCh = gdn_chunk::kScanCols / 4, kStep = kScanThreads / kCh;
  const int r0 = threadIdx.x / kCh, ch = threadIdx.x % kCh;
  const float* u = tl.u + vt * kUTile + c0;
#pragma unroll
  for (int i = 0; i < kChunk / kStep; ++i) {
    const int r = r0 + i * kStep;
    cp_async16(&sm.u[r][4 * ch], u + r * kHd + 4 * ch);
  }
  if (threadIdx.x < kChunk / 2)
    cp_async16(&sm.gate[2 * threadIdx.x], tl.gate + vt * kGateTile + 2 * threadIdx.x);
}
// Those that (3)-(4) read: P (only 16-column blocks at or left of the diagonal: 10 of 16) and k̂.
__device__ __forceinline__ void load_p_k(ScanSmem& sm, const ChunkTiles& tl, size_t vt, size_t kt) {
  constexpr int kCh = kChunk / 8, kStep = kScanThreads / kCh;
  const int r0 = threadIdx.x / kCh, ch = threadIdx.x % kCh;
  const uint16_t* pm = tl.pm + vt * kPTile;
#pragma unroll
  for (int plane = 0; plane < 2; ++plane)
#pragma unroll
    for (int i = 0; i < kChunk / kStep; ++i) {
      const int r = r0 + i * kStep;
      if (ch / 2 <= r / 16)
        cp_async16(&sm.pm[plane][r][8 * ch], pm + (plane * kChunk + r) * kChunk + 8 * ch);
    }
  copy_tile128(sm.k, tl.qk + kt * kQkTile + 2 * kChunk * kHd);
}

// d[0], d[1] += a · b for the two n-tiles of an ldmatrix.x4 B fragment (registers 0, 1 and 2, 3):
// one pass of a bf16x3 product. The scan calls the passes lo·hi, hi·lo, hi·hi (mma_bf16x3's
// order) over two or more such pairs in turn, so that no mma waits on the one just issued.
__device__ __forceinline__ void mma_n16(float (&d)[2][4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[4]) {
  mma_bf16(d[0], a, b[0], b[1]);
  mma_bf16(d[1], a, b[2], b[3]);
}

__device__ __forceinline__ void unpack(const uint4& v, uint32_t (&r)[4]) {
  r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
}

// Sᵀ rows 32 b … 32 b + 31 of column tile m as the A fragments of dk k-steps 2 b and 2 b + 1.
__device__ __forceinline__ void put_s_frags(ScanSmem& sm, const float (&st)[2][2][4], int m, int b,
                                            int lane) {
#pragma unroll
  for (int np = 0; np < 2; ++np) {
    uint32_t hi[4], lo[4];
    split_frag(st[np][0], st[np][1], hi, lo);
    sm.s_frag[gdn_chunk::s_slot(m, 2 * b + np, 0)][lane] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    sm.s_frag[gdn_chunk::s_slot(m, 2 * b + np, 1)][lane] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  }
}

// GdnPrefillParams (S [hv, dk, dv] advanced, o [T, hv · dv] written) and the prep's tiles tl.
// Grid (⌈dv / kScanCols⌉, hv): a block per (32 state columns, value head), walking the chunks
// in order; dynamic shared memory ScanSmem.
__global__ void __launch_bounds__(kScanThreads, 1)
    kernel_gdn_chunk_scan(const __grid_constant__ GdnPrefillParams p,
                          const __grid_constant__ ChunkTiles tl) {
  using namespace gdn_chunk;
  extern __shared__ uint4 chunk_smem[];
  ScanSmem& sm = *reinterpret_cast<ScanSmem*>(chunk_smem);
  const int j = blockIdx.y, c0 = blockIdx.x * kScanCols, kh = j / (p.hv / p.hk);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, m = col_tile(warp), b = blk(warp);
  const int dk = p.dk, dv = p.dv, n = tl.n_chunks, out_dim = p.hv * dv;
  const size_t vt0 = size_t(j) * n, kt0 = size_t(kh) * n;

  load_w_q_u(sm, tl, vt0, kt0, c0);
  cp_async_commit();

  // Sᵀ: st[np][i][e] is column 16 m + acc_row(lane, e), dk row 32 b + 16 np + 8 i + acc_col.
  float st[2][2][4];
  float* S = p.S + size_t(j) * dk * dv + c0;
#pragma unroll
  for (int np = 0; np < 2; ++np)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = 32 * b + 16 * np + 8 * i + acc_col(lane, e),
                  col = 16 * m + acc_row(lane, e);
        st[np][i][e] = row < dk && c0 + col < dv ? S[size_t(row) * dv + col] : 0.f;
      }
  put_s_frags(sm, st, m, b, lane);

  for (int c = 0; c < n; ++c) {
    cp_async_wait<0>();  // W, q̂, U and the decays of chunk c
    __syncthreads();     // … visible, and the S slots; P and k̂ of chunk c − 1 read
    load_p_k(sm, tl, vt0 + c, kt0 + c);
    cp_async_commit();

    // (1) [16 columns, tokens 16 b …] over the dk k-steps; B (k = dims, n = tokens) is W's and
    // q̂'s rows as stored. The passes alternate between the two products, and even and odd
    // k-steps sum apart: eight independent accumulators, dependent chains of 12 mma, not 24.
    float vw2[2][2][4] = {}, oq2[2][2][4] = {};
#pragma unroll
    for (int kk = 0; kk < kHd / 16; ++kk) {
      if (16 * kk >= dk) break;  // uniform: the rows past dk are zero
      uint32_t ah[4], al[4], wh[4], wl[4], qh[4], ql[4];
      unpack(sm.s_frag[s_slot(m, kk, 0)][lane], ah);
      unpack(sm.s_frag[s_slot(m, kk, 1)][lane], al);
      const int br = 16 * b + ldm_b_row(lane), bc = 16 * kk + ldm_b_col(lane);
      ldmatrix_x4(wh, &sm.w[0][br][bc]);
      ldmatrix_x4(wl, &sm.w[1][br][bc]);
      ldmatrix_x4(qh, &sm.q[0][br][bc]);
      ldmatrix_x4(ql, &sm.q[1][br][bc]);
      auto& vw = vw2[kk & 1];
      auto& oq = oq2[kk & 1];
      mma_n16(vw, al, wh);
      mma_n16(oq, al, qh);
      mma_n16(vw, ah, wl);
      mma_n16(oq, ah, ql);
      mma_n16(vw, ah, wh);
      mma_n16(oq, ah, qh);
    }
    float vw[2][4], oq[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        vw[i][e] = vw2[0][i][e] + vw2[1][i][e];
        oq[i][e] = oq2[0][i][e] + oq2[1][i][e];
      }

    // (2) V′ᵀ (in vw) and V′ᵀ diag(e^{γ₆₃−γ}) of these tokens to the V′ slots; the decay of S₀ to
    // each token on Sᵀ Q̂ᵀ.
    {
      float sc[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = 16 * b + 8 * i + acc_col(lane, e);
          const float2 g = sm.gate[r];
          vw[i][e] = sm.u[r][16 * m + acc_row(lane, e)] - vw[i][e];
          sc[i][e] = vw[i][e] * g.y;
          oq[i][e] *= g.x;
        }
      uint32_t hi[4], lo[4];
      split_frag(vw[0], vw[1], hi, lo);
      sm.v_frag[v_slot(m, b, 0)][lane] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      sm.v_frag[v_slot(m, b, 1)][lane] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      split_frag(sc[0], sc[1], hi, lo);
      sm.v_frag[v_slot(m, b, 2)][lane] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      sm.v_frag[v_slot(m, b, 3)][lane] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
    const float e_last = sm.gate[kChunk - 1].x;
    cp_async_wait<0>();  // P and k̂ of chunk c
    __syncthreads();  // … visible, and the V′ slots; W, q̂, U and the decays of chunk c read
    if (c + 1 < n) load_w_q_u(sm, tl, vt0 + c + 1, kt0 + c + 1, c0);
    cp_async_commit();

    // (3) Oᵀ += V′ᵀ Pᵀ over token k-steps kb ≤ b; B (k = s, n = r) is P's rows as stored.
#pragma unroll
    for (int kb = 0; kb < kTokenBlocks; ++kb) {
      if (kb > b) break;  // uniform
      uint32_t ah[4], al[4], ph[4], pl[4];
      unpack(sm.v_frag[v_slot(m, kb, 0)][lane], ah);
      unpack(sm.v_frag[v_slot(m, kb, 1)][lane], al);
      const int br = 16 * b + ldm_b_row(lane), bc = 16 * kb + ldm_b_col(lane);
      ldmatrix_x4(ph, &sm.pm[0][br][bc]);
      ldmatrix_x4(pl, &sm.pm[1][br][bc]);
      mma_n16(oq, al, ph);
      mma_n16(oq, ah, pl);
      mma_n16(oq, ah, ph);
    }

    // (4) Sᵀ ← e^{γ₆₃} Sᵀ + (V′ᵀ diag(e^{γ₆₃−γ})) K̂ over dk rows 32 b …; B (k = tokens, n = dims)
    // is k̂'s rows transposed by ldmatrix.
#pragma unroll
    for (int np = 0; np < 2; ++np)
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) st[np][i][e] *= e_last;
#pragma unroll
    for (int kb = 0; kb < kTokenBlocks; ++kb) {
      uint32_t ah[4], al[4], bkh[2][4], bkl[2][4];
      unpack(sm.v_frag[v_slot(m, kb, 2)][lane], ah);
      unpack(sm.v_frag[v_slot(m, kb, 3)][lane], al);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        const int br = 16 * kb + ldm_bt_row(lane), bc = 32 * b + 16 * np + ldm_bt_col(lane);
        ldmatrix_x4_trans(bkh[np], &sm.k[0][br][bc]);
        ldmatrix_x4_trans(bkl[np], &sm.k[1][br][bc]);
      }
      mma_n16(st[0], al, bkh[0]);
      mma_n16(st[1], al, bkh[1]);
      mma_n16(st[0], ah, bkl[0]);
      mma_n16(st[1], ah, bkl[1]);
      mma_n16(st[0], ah, bkh[0]);
      mma_n16(st[1], ah, bkh[1]);
    }
    // O after (4): the warp issues (4) while the chain of (3) drains.
    const int t0 = c * kChunk;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = 16 * b + 8 * i + acc_col(lane, e), col = 16 * m + acc_row(lane, e);
        if (t0 + r < p.T && c0 + col < dv)
          p.o[size_t(t0 + r) * out_dim + size_t(j) * dv + c0 + col] = oq[i][e];
      }
    put_s_frags(sm, st, m, b, lane);
  }

#pragma unroll
  for (int np = 0; np < 2; ++np)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = 32 * b + 16 * np + 8 * i + acc_col(lane, e),
                  col = 16 * m + acc_row(lane, e);
        if (row < dk && c0 + col < dv) S[size_t(row) * dv + col] = st[np][i][e];
      }
}

}  // namespace

size_t gdn_chunked_scratch_bytes(int T, int hk, int hv) {
  const size_t n = size_t(T + kChunk - 1) / kChunk;
  return n * (size_t(hk) * kQkTile * 2 +
              size_t(hv) * ((kWTile + kPTile) * 2 + kUTile * 4 + kGateTile * 8));
}

namespace {

constexpr size_t kChunkedSmem = std::max(sizeof(PrepSmem), sizeof(ScanSmem));

}  // namespace

bool gdn_chunked_supported() {
  return smem_optin() >= int(kChunkedSmem);
}

Status launch_gdn_scan_chunked(const GdnPrefillParams& p, cudaStream_t s) {
  if (!p.chunk_scratch) return err("delta net chunked scan: no scratch");
  if (const int optin = smem_optin(); optin < int(kChunkedSmem))
    return err("delta net chunked scan: needs ", kChunkedSmem,
               " bytes of shared memory a block, the device allows ", optin);
  const int n_chunks = (p.T + kChunk - 1) / kChunk;
  const ChunkTiles tl = carve_tiles(p.chunk_scratch, n_chunks, p.hk, p.hv);
  // More than the default 48 KB of dynamic shared memory must be allowed explicitly; set on every
  // launch (cheap), so it holds for whichever device is current.
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel_gdn_chunk_prep, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(sizeof(PrepSmem)));
      e != cudaSuccess)
    return err("delta net chunk prep: ", cudaGetErrorString(e));
  kernel_gdn_chunk_prep<<<dim3(n_chunks, p.hv), kPrepThreads, sizeof(PrepSmem), s>>>(p, tl);
  if (Status st = last_launch("delta net chunk prep"); !st.ok()) return st;
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel_gdn_chunk_scan, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(sizeof(ScanSmem)));
      e != cudaSuccess)
    return err("delta net chunked scan: ", cudaGetErrorString(e));
  const dim3 grid((p.dv + gdn_chunk::kScanCols - 1) / gdn_chunk::kScanCols, p.hv);
  kernel_gdn_chunk_scan<<<grid, kScanThreads, sizeof(ScanSmem), s>>>(p, tl);
  return last_launch("delta net chunked scan");
}

}  // namespace orchid::cuda
