// Gated DeltaNet's delta-rule scan in chunks of 64 tokens on the tensor cores: the WY form of spec
// §6.7, the second form of launch_gdn_prefill's scan (delta_net_prefill.cu holds the sequential
// one). kernel_gdn_chunk_prep does, per (value head, chunk) and all in parallel, everything that
// does not depend on the incoming state; kernel_gdn_chunk_scan walks the chunks in order per
// (value head, 32 state columns) with the state in registers: one dependent step per 64 tokens.
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
// Precision: every tensor-core product is bf16x3 (mma_bf16.cuh): each fp32 operand is split into
// bf16 hi + lo (2⁻¹⁸ relative) and a·b ≈ hi·hi + hi·lo + lo·hi, accumulated in fp32: a product
// within ~1e-5 relative (a few 1e-6 typically) against fp32's 6e-8, for three times the MMAs; o
// and S end ~1e-5 rel. L2 from a double reference, an order inside the tests' 1e-4 (emulated on
// the host; not yet measured on a GPU). bf16 halves rather than fp16 ones because the operands
// span fp32's range (q̂ ~ 1e-2, decayed terms down to 1e-30): an fp16 lo is subnormal below ~2⁻³
// and loses its bits without per-tile scaling. Rather than tf32x3 (22 bits) because tf32's
// m16n8k8 runs at half the bf16 rate and the scan kernel is the serial part. The triangular solve
// for U and W runs in fp32 on the CUDA cores.
#include <algorithm>

#include "orchid/backend/cuda/mma_bf16.cuh"
#include "orchid/backend/cuda/prefill_kernels.h"

namespace orchid::cuda {
namespace {

constexpr int kChunk = 64;           // tokens per chunk (C of spec §6.7)
constexpr int kHd = kMaxGdnHeadDim;  // 128: every tile is zero-padded to it
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

// 4 warps: warp (m, h) = (w & 1, w >> 1) holds Sᵀ for block columns 16 m … 16 m + 15 (the M of
// its tiles) and dk rows 64 h … 64 h + 63 (8 n-tiles: 32 fp32 registers). Per chunk:
//   (1) Sᵀ Wᵀ and Sᵀ Q̂ᵀ over its dk half ([16, 64 tokens] each), Sᵀ as A fragments straight from
//       its accumulators; the two dk halves' Sᵀ Wᵀ are swapped through shared memory, so both
//       warps of a column tile hold V′ᵀ = Uᵀ − Sᵀ Wᵀ;
//   (2) Oᵀ = (Sᵀ Q̂ᵀ) diag(e^γ) + V′ᵀ Pᵀ: the P term (V′ᵀ as A fragments) for its half of the
//       tokens, the other half's Sᵀ Q̂ᵀ partial handed to the warp that owns it;
//   (3) Sᵀ ← e^{γ₆₃} Sᵀ + (V′ᵀ diag(e^{γ₆₃−γ})) K̂ over its dk half.
// ~320 mma.sync a warp a chunk (three per bf16x3 product). The tiles (W and q̂ 68 KiB, P + U +
// decays 28 KiB, k̂ 34 KiB; 154 KiB of shared memory with the exchange buffers) are
// single-buffered: each is refilled for the next chunk by cp.async as soon as this chunk's last
// read of it is behind a barrier, so its copy overlaps the phases that follow. 32 columns a block:
// 128 blocks at the real shape (hv 32, dv 128), one an SM; the 4 blocks of a head read the same
// tiles (from L2).
constexpr int kChunkCols = 32;
constexpr int kChunkWarps = 4;
constexpr int kChunkThreads = 32 * kChunkWarps;

struct ChunkScanSmem {
  uint16_t w[2][kChunk][kRowH];   // W [plane][token][dim]
  uint16_t q[2][kChunk][kRowH];   // q̂
  uint16_t k[2][kChunk][kRowH];   // k̂
  uint16_t pm[2][kChunk][kRowP];  // P [plane][r][s]
  // U of the block's columns (+4: the fragment reads hit 32 banks).
  float u[kChunk][kChunkCols + 4];
  // (e^γ_r, e^{γ₆₃−γ_r}) by chunk parity: (3) reads chunk c's while the copy for c + 1 lands.
  float2 gate[2][kChunk];
  float red_v[kChunkWarps][32][32];  // (1)'s Sᵀ Wᵀ partials [warp][register][lane]
  float red_o[kChunkWarps][16][32];  // (2)'s partials for the other token half
};

// A [2][64][128] bf16 tile into shared rows of kRowH: 2,048 16-byte copies.
__device__ __forceinline__ void copy_tile128(uint16_t (&dst)[2][kChunk][kRowH],
                                             const uint16_t* src) {
  for (int e = threadIdx.x; e < 2 * kChunk * kHd / 8; e += kChunkThreads) {
    const int plane = e / (kChunk * kHd / 8), r = e / (kHd / 8) % kChunk, ch = e % (kHd / 8);
    cp_async16(&dst[plane][r][8 * ch], src + size_t(e) * 8);
  }
}
// Chunk tiles vt (value head) and kt (key head): W and q̂ (group 1), P, U and the decays (group
// 2), k̂ (group 3).
__device__ __forceinline__ void load_w_q(ChunkScanSmem& sm, const ChunkTiles& tl, size_t vt,
                                         size_t kt) {
  copy_tile128(sm.w, tl.w + vt * kWTile);
  copy_tile128(sm.q, tl.qk + kt * kQkTile);
}
__device__ __forceinline__ void load_p_u_gate(ChunkScanSmem& sm, const ChunkTiles& tl, size_t vt,
                                              int c0, int parity) {
  const uint16_t* pm = tl.pm + vt * kPTile;
  for (int e = threadIdx.x; e < 2 * kChunk * kChunk / 8; e += kChunkThreads) {
    const int plane = e / (kChunk * kChunk / 8), r = e / (kChunk / 8) % kChunk;
    cp_async16(&sm.pm[plane][r][8 * (e % (kChunk / 8))], pm + size_t(e) * 8);
  }
  const float* u = tl.u + vt * kUTile + c0;
  for (int e = threadIdx.x; e < kChunk * kChunkCols / 4; e += kChunkThreads) {
    const int r = e / (kChunkCols / 4), ch = e % (kChunkCols / 4);
    cp_async16(&sm.u[r][4 * ch], u + size_t(r) * kHd + 4 * ch);
  }
  if (threadIdx.x < kChunk / 2)
    cp_async16(&sm.gate[parity][2 * threadIdx.x], tl.gate + vt * kGateTile + 2 * threadIdx.x);
}
__device__ __forceinline__ void load_k(ChunkScanSmem& sm, const ChunkTiles& tl, size_t kt) {
  copy_tile128(sm.k, tl.qk + kt * kQkTile + 2 * kChunk * kHd);
}

// acc = Sᵀ · rowsᵀ over dk half h: [16 columns, 64 tokens], rows a [plane][token][dim] tile.
__device__ __forceinline__ void s_times_rows(const float (&st)[8][4],
                                             const uint16_t (&rows)[2][kChunk][kRowH], int h,
                                             int lane, float (&acc)[8][4]) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t ah[4], al[4];
    split_frag(st[2 * kk], st[2 * kk + 1], ah, al);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      const int br = 16 * np + (lane & 7) + (lane >> 4) * 8;
      const int bc = 64 * h + 16 * kk + ((lane >> 3) & 1) * 8;
      uint32_t bh[4], bl[4];
      ldmatrix_x4(bh, &rows[0][br][bc]);
      ldmatrix_x4(bl, &rows[1][br][bc]);
      mma_bf16x3(acc[2 * np], ah, al, bh[0], bh[1], bl[0], bl[1]);
      mma_bf16x3(acc[2 * np + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
    }
  }
}

__global__ void __launch_bounds__(kChunkThreads, 1)
    kernel_gdn_chunk_scan(const __grid_constant__ GdnPrefillParams p,
                          const __grid_constant__ ChunkTiles tl) {
  extern __shared__ uint4 chunk_smem[];
  ChunkScanSmem& sm = *reinterpret_cast<ChunkScanSmem*>(chunk_smem);
  const int j = blockIdx.y, c0 = blockIdx.x * kChunkCols, kh = j / (p.hv / p.hk);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, m = warp & 1, h = warp >> 1;
  const int gq = lane >> 2, qc = 2 * (lane & 3), partner = warp ^ 2;  // partner: the other h
  const int dk = p.dk, dv = p.dv, n = tl.n_chunks, out_dim = p.hv * dv;
  const size_t vt0 = size_t(j) * n, kt0 = size_t(kh) * n;

  // Commit groups in flight at the top of chunk c: 1 (W, q̂) and 2 (P, U, decays) of c, then 3
  // (k̂) of c; each phase's wait leaves exactly the groups issued after its tiles pending.
  load_w_q(sm, tl, vt0, kt0);
  cp_async_commit();
  load_p_u_gate(sm, tl, vt0, c0, 0);
  cp_async_commit();
  load_k(sm, tl, kt0);
  cp_async_commit();

  // Sᵀ fragments: st[nt][e] is column 16 m + gq + 8 (e >> 1), dk row 64 h + 8 nt + qc + (e & 1).
  float st[8][4];
  float* S = p.S + size_t(j) * dk * dv + c0;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 64 * h + 8 * nt + qc + (e & 1), col = 16 * m + gq + 8 * (e >> 1);
      st[nt][e] = i < dk && c0 + col < dv ? S[size_t(i) * dv + col] : 0.f;
    }

  for (int c = 0; c < n; ++c) {
    const float2* gate = sm.gate[c & 1];
    cp_async_wait<1>();  // groups 1 and 2 of chunk c
    __syncthreads();

    // (1) Sᵀ Wᵀ over this warp's dk half → red_v, then Sᵀ Q̂ᵀ → ob while the partner's lands (one
    // [16, 64] accumulator live at a time). B (k = dims, n = tokens) is W's and q̂'s rows as
    // stored.
    float vn[8][4], ob[8][4];
    s_times_rows(st, sm.w, h, lane, vn);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) sm.red_v[warp][4 * nt + e][lane] = vn[nt][e];
    s_times_rows(st, sm.q, h, lane, ob);
    __syncthreads();  // partials visible; W and q̂ of chunk c read by every warp
    if (c + 1 < n) load_w_q(sm, tl, vt0 + c + 1, kt0 + c + 1);
    cp_async_commit();
    // V′ᵀ: both warps of a column tile add the same two partials (a + b = b + a bit for bit), so
    // they hold the same V′.
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = 8 * nt + qc + (e & 1), col = 16 * m + gq + 8 * (e >> 1);
        vn[nt][e] =
            sm.u[r][col] - (sm.red_v[warp][4 * nt + e][lane] + sm.red_v[partner][4 * nt + e][lane]);
      }
    }

    // (2) Oᵀ: the decay of S₀ to each token, then V′ᵀ Pᵀ for tokens 32 h … 32 h + 31 (P's rows r,
    // B = P's rows as stored), only k-steps at or left of the diagonal.
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) ob[nt][e] *= gate[8 * nt + qc + (e & 1)].x;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      if (kk > 2 * h + 1) break;  // uniform
      uint32_t ah[4], al[4];
      split_frag(vn[2 * kk], vn[2 * kk + 1], ah, al);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        if (np / 2 != h || kk > np) continue;
        const int br = 16 * np + (lane & 7) + (lane >> 4) * 8;
        const int bc = 16 * kk + ((lane >> 3) & 1) * 8;
        uint32_t bh[4], bl[4];
        ldmatrix_x4(bh, &sm.pm[0][br][bc]);
        ldmatrix_x4(bl, &sm.pm[1][br][bc]);
        mma_bf16x3(ob[2 * np], ah, al, bh[0], bh[1], bl[0], bl[1]);
        mma_bf16x3(ob[2 * np + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
      if (nt / 4 != h)
#pragma unroll
        for (int e = 0; e < 4; ++e) sm.red_o[warp][4 * (nt % 4) + e][lane] = ob[nt][e];
    cp_async_wait<1>();  // group 3 (k̂) of chunk c
    __syncthreads();     // partials and k̂ visible; P, U and the decays of chunk c read
    if (c + 1 < n) load_p_u_gate(sm, tl, vt0 + c + 1, c0, (c + 1) & 1);
    cp_async_commit();
    const int t0 = c * kChunk;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
      if (nt / 4 == h)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = 8 * nt + qc + (e & 1), col = 16 * m + gq + 8 * (e >> 1);
          const float o = ob[nt][e] + sm.red_o[partner][4 * (nt % 4) + e][lane];
          if (t0 + r < p.T && c0 + col < dv)
            p.o[size_t(t0 + r) * out_dim + size_t(j) * dv + c0 + col] = o;
        }

    // (3) Sᵀ ← e^{γ₆₃} Sᵀ + (V′ᵀ diag(e^{γ₆₃−γ})) K̂; B (k = tokens, n = dims) is k̂'s rows
    // transposed by ldmatrix.
    const float e_last = gate[kChunk - 1].x;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[nt][e] *= e_last;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      float sc[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          sc[i][e] = vn[2 * kk + i][e] * gate[16 * kk + 8 * i + qc + (e & 1)].y;
      uint32_t ah[4], al[4];
      split_frag(sc[0], sc[1], ah, al);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        const int br = 16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int bc = 64 * h + 16 * np + (lane >> 4) * 8;
        uint32_t bh[4], bl[4];
        ldmatrix_x4_trans(bh, &sm.k[0][br][bc]);
        ldmatrix_x4_trans(bl, &sm.k[1][br][bc]);
        mma_bf16x3(st[2 * np], ah, al, bh[0], bh[1], bl[0], bl[1]);
        mma_bf16x3(st[2 * np + 1], ah, al, bh[2], bh[3], bl[2], bl[3]);
      }
    }
    __syncthreads();  // k̂ of chunk c read by every warp
    if (c + 1 < n) load_k(sm, tl, kt0 + c + 1);
    cp_async_commit();
  }

#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 64 * h + 8 * nt + qc + (e & 1), col = 16 * m + gq + 8 * (e >> 1);
      if (i < dk && c0 + col < dv) S[size_t(i) * dv + col] = st[nt][e];
    }
}

}  // namespace

size_t gdn_chunked_scratch_bytes(int T, int hk, int hv) {
  const size_t n = size_t(T + kChunk - 1) / kChunk;
  return n * (size_t(hk) * kQkTile * 2 +
              size_t(hv) * ((kWTile + kPTile) * 2 + kUTile * 4 + kGateTile * 8));
}

namespace {

constexpr size_t kChunkedSmem = std::max(sizeof(PrepSmem), sizeof(ChunkScanSmem));

// The current device's opt-in shared memory a block (0 when it cannot be read).
int smem_optin() {
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return 0;
  return optin;
}

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
                               int(sizeof(ChunkScanSmem)));
      e != cudaSuccess)
    return err("delta net chunked scan: ", cudaGetErrorString(e));
  const dim3 grid((p.dv + kChunkCols - 1) / kChunkCols, p.hv);
  kernel_gdn_chunk_scan<<<grid, kChunkThreads, sizeof(ChunkScanSmem), s>>>(p, tl);
  return last_launch("delta net chunked scan");
}

}  // namespace orchid::cuda
