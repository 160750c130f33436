// Gated DeltaNet over a chunk of T prompt tokens: the causal conv + SiLU, the ring update, q/k L2
// norms with β and the decay, the delta-rule scan, and the gated RMSNorm, as plain launches (the
// formulas of decode/delta_net_step.cu's one-token kernel). The scan here is the sequential form with the
// state in registers; the chunked form on the tensor cores is delta_net_chunked.cu.
#include <cuda_fp16.h>

#include "orchid/backend/cuda/decode/delta_net_core.cuh"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {
namespace {

// ---- (a) Conv + SiLU -------------------------------------------------------------------------

// One thread per (channel, run of kConvRun tokens): the taps and a window of the last K inputs
// stay in registers, so each raw input is read once per run (channels are the fast index: a
// warp reads 128 contiguous bytes of a qkv row).
constexpr int kConvThreads = 256;
constexpr int kConvRun = 16;

// Raw input of channel ch at absolute position pos: the chunk's row, the ring before the chunk
// (slot pos % K), zero before the sequence.
__device__ __forceinline__ float conv_input(const GdnPrefillParams& p, int C, int ch, int pos) {
  if (pos >= p.pos0) return p.qkv[size_t(pos - p.pos0) * C + ch];
  if (pos >= 0) return p.conv_ring[size_t(ch) * p.K + pos % p.K];
  return 0.f;
}

// GdnPrefillParams, C = conv_dim: conv_out [T, C] = silu(causal conv of qkv [T, C], the
// ring's taps before pos0). Grid (⌈C / kConvThreads⌉, ⌈T / kConvRun⌉).
__global__ void __launch_bounds__(kConvThreads)
    gdn_conv_kernel(const __grid_constant__ GdnPrefillParams p, int C) {
  const int ch = blockIdx.x * kConvThreads + threadIdx.x;
  const int t0 = blockIdx.y * kConvRun;
  if (ch >= C) return;
  // w[back] multiplies the input `back` positions before the current one (tap K-1-back);
  // x[back] holds that input. Taps past K stay zero and never touch x.
  float w[kMaxConvK], x[kMaxConvK];
#pragma unroll
  for (int back = 0; back < kMaxConvK; ++back) {
    const bool tap = back < p.K;
    w[back] = tap ? p.conv_w[size_t(ch) * p.K + p.K - 1 - back] : 0.f;
    x[back] = tap && back > 0 ? conv_input(p, C, ch, p.pos0 + t0 - back) : 0.f;
  }
  // The run's inputs are all loaded before the first store (the compiler must assume conv_out
  // may alias qkv), so kConvRun loads per thread are in flight at once.
  const int n = min(kConvRun, p.T - t0);
  float in[kConvRun];
#pragma unroll
  for (int i = 0; i < kConvRun; ++i) in[i] = i < n ? p.qkv[size_t(t0 + i) * C + ch] : 0.f;
#pragma unroll
  for (int i = 0; i < kConvRun; ++i) {
    x[0] = in[i];
    float sum = 0.f;
#pragma unroll
    for (int back = 0; back < kMaxConvK; ++back) sum = fmaf(w[back], x[back], sum);
    if (i < n) p.conv_out[size_t(t0 + i) * C + ch] = silu(sum);
#pragma unroll
    for (int back = kMaxConvK - 1; back > 0; --back) x[back] = x[back - 1];
  }
}

// ---- (b) Ring update -------------------------------------------------------------------------

// After the conv has read the old ring: the slots of the chunk's last min(T, K) positions take
// their raw inputs. One thread per channel.
// GdnPrefillParams, C = conv_dim: qkv [T, C] → conv_ring [C, K]. Grid ⌈C / kConvThreads⌉.
__global__ void __launch_bounds__(kConvThreads)
    gdn_ring_kernel(const __grid_constant__ GdnPrefillParams p, int C) {
  const int ch = blockIdx.x * kConvThreads + threadIdx.x;
  if (ch >= C) return;
  for (int t = max(0, p.T - p.K); t < p.T; ++t)
    p.conv_ring[size_t(ch) * p.K + (p.pos0 + t) % p.K] = p.qkv[size_t(t) * C + ch];
}

// ---- (c) q/k L2 norms, β and the decay -------------------------------------------------------

// One block per token: each warp normalises whole q or k heads (dk ≤ 128: four elements a lane)
// in place in conv_out; then one thread per value head writes β and the decay.
constexpr int kNormThreads = 256;

// GdnPrefillParams, C = conv_dim: conv_out [T, C]'s q and k heads normed in place; beta,
// decay [T, hv]. Grid T.
__global__ void __launch_bounds__(kNormThreads)
    gdn_norm_gate_kernel(const __grid_constant__ GdnPrefillParams p, int C) {
  const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int dk = p.dk;
  float* row = p.conv_out + size_t(t) * C;
  // Vectors 0 … hk-1 are the q heads, hk … 2hk-1 the k heads: q and k are adjacent in the row.
  for (int vec = warp; vec < 2 * p.hk; vec += kNormThreads / 32) {
    float* x = row + size_t(vec) * dk;
    float e[kMaxGdnHeadDim / 32];
    float ss = 0.f;
#pragma unroll
    for (int u = 0; u < kMaxGdnHeadDim / 32; ++u) {
      const int i = lane + 32 * u;
      e[u] = i < dk ? x[i] : 0.f;
      ss = fmaf(e[u], e[u], ss);
    }
    ss = warp_sum(ss);
    float scale = rsqrtf(ss + 1e-6f);
    if (vec < p.hk) scale *= rsqrtf(float(dk));
#pragma unroll
    for (int u = 0; u < kMaxGdnHeadDim / 32; ++u) {
      const int i = lane + 32 * u;
      if (i < dk) x[i] = e[u] * scale;
    }
  }
  for (int j = threadIdx.x; j < p.hv; j += kNormThreads) {
    const size_t at = size_t(t) * p.hv + j;
    p.beta[at] = sigmoid(p.b[at]);
    const float ax = p.a[at] + p.dt_bias[j];
    const float softplus = ax > 20.f ? ax : log1pf(expf(ax));
    p.decay[at] = expf(-expf(p.A_log[j]) * softplus);
  }
}

// ---- (d) The delta-rule scan -----------------------------------------------------------------

// Every state column S[j][:, c] evolves on its own given the tokens' q̂, k̂, β and decay, so a
// block takes one value head j and kScanCols of its columns and keeps that [dk, kScanCols] slice
// in registers for the whole chunk.
//
// A token is a dependent chain per column: m = Sᵀk̂ needs all dk rows, δ needs m, the update
// needs δ, the next m needs the update. The rows are spread over kScanLanes = 16 adjacent lanes
// (lane g holds rows 4g + 64r + e, r < 2, e < 4: one float4 of k̂ and one of q̂ per r), so a sum
// over rows is 4 shuffle rounds (~25 cycles each on the H200) and one more hands out δ. Each
// lane holds 4 columns (32 state floats): the chain carries 128 FP32 instructions a token per
// lane (decay, m, update, o), and each k̂, q̂ value loaded serves 4 columns (the shared-memory
// pipe takes 4 wavefronts per LDS.128, broadcast or not). The 4 columns' sums are reduced
// transposed: position p of a lane holds column F ^ p (F = g / 4), so each of the first two
// exchanges sends half of what is left with no selects, two butterflies finish, and lane g holds
// column F's sum; 3 shuffles hand it the other positions' δ. o of token t rides in the same
// rounds as m of token t + 1.
//
// Shapes (dk = dv = 128, hv = 32): 128 threads = 32 columns a block, 32 × 4 = 128 blocks, one
// per SM, one warp per scheduler, 124 registers, no spills. Measured on the H200 at T = 4,096:
// 1.03 ms, ~500 cycles a token for ~200 instructions: latency-bound (shuffle round trips, and
// the FP32 instructions of one warp issuing about every other cycle). Slower, measured: 8 or 16
// lanes a single column (1.38–1.46 ms), 2 columns a lane with 2 warps per scheduler (1.10 ms),
// two tokens a step against the pre-pair state (1.06 ms), the decay kept as a lazy scale
// (1.13 ms). Well under 1 ms needs the chunked form on the tensor cores (spec §6.7,
// prefill/delta_net_chunked.cu).
// q̂, k̂, v, β and the decay of kScanTile tokens are staged in shared memory by cp.async, double
// buffered: one barrier per tile, the next tile's copy overlapping this tile's tokens.
constexpr int kScanLanes = 16;  // lanes sharing a group of 4 columns
constexpr int kScanQuads = kMaxGdnHeadDim / (4 * kScanLanes);
constexpr int kScanThreads = 128;
constexpr int kScanCols = 4 * kScanThreads / kScanLanes;
constexpr int kScanTile = 32;
static_assert(kScanQuads == 2, "the sums over r below are written out for two float4s");

struct ScanStage {
  float4 q[kScanTile][kMaxGdnHeadDim / 4];  // q̂ of the key head; rows past dk stay zero
  float4 k[kScanTile][kMaxGdnHeadDim / 4];  // k̂
  float v[kScanTile][kScanCols];            // v of the block's columns; past dv stays zero
  float2 gate[kScanTile];                   // (β, decay)
};
constexpr size_t kScanSmem = 2 * sizeof(ScanStage);  // 74,240 bytes

__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;" ::: "memory");
}

// Tokens [t0, t0 + n) into `st` as one cp.async group. 4-byte copies: rows of odd dk, dv or
// conv_dim need not be 16-byte aligned, and 290 floats a token over 128 threads is ~2 copies a
// token per thread, small beside the token's ~200 instructions.
__device__ __forceinline__ void scan_stage_load(const GdnPrefillParams& p, int C, int j, int kh,
                                                int c0, int t0, int n, ScanStage& st) {
  const int tid = threadIdx.x, dk = p.dk, key_dim = p.hk * dk;
  for (int e = tid; e < 2 * kMaxGdnHeadDim; e += kScanThreads) {
    const int which = e / kMaxGdnHeadDim, i = e % kMaxGdnHeadDim;  // which: 0 q, 1 k
    if (i >= dk) continue;
    const float* src = p.conv_out + size_t(t0) * C + which * key_dim + kh * dk + i;
    float* dst = reinterpret_cast<float*>(which ? st.k : st.q) + i;
    for (int tt = 0; tt < n; ++tt) cp_async4(dst + tt * kMaxGdnHeadDim, src + size_t(tt) * C);
  }
  const int n_col = min(kScanCols, p.dv - c0);
  const float* v = p.conv_out + size_t(t0) * C + 2 * key_dim + size_t(j) * p.dv + c0;
  for (int e = tid; e < kScanTile * kScanCols; e += kScanThreads) {
    const int tt = e / kScanCols, c = e % kScanCols;
    if (tt < n && c < n_col) cp_async4(&st.v[tt][c], v + size_t(tt) * C + c);
  }
  if (tid < n) {
    const size_t at = size_t(t0 + tid) * p.hv + j;
    cp_async4(&st.gate[tid].x, p.beta + at);
    cp_async4(&st.gate[tid].y, p.decay + at);
  }
  cp_async_commit();
}

// Sum over a column group's 16 lanes of x[p] (position p holds column F ^ p, F = g / 4), each
// lane getting its own column F's. The last two rounds are butterflies, so the 4 lanes of a
// column get the same bits (addition commutes) and agree on its δ.
__device__ __forceinline__ float group_sum(const float (&x)[4]) {
  const float a0 = x[0] + __shfl_xor_sync(~0u, x[2], 8);
  const float a1 = x[1] + __shfl_xor_sync(~0u, x[3], 8);
  float b = a0 + __shfl_xor_sync(~0u, a1, 4);
  b += __shfl_xor_sync(~0u, b, 2);
  return b + __shfl_xor_sync(~0u, b, 1);
}

// GdnPrefillParams, C = conv_dim: S [hv, dk, dv] advanced, o [T, hv · dv] written. Grid (hv,
// ⌈dv / kScanCols⌉): a block per (value head, 32 state columns); dynamic shared memory
// kScanSmem.
__global__ void __launch_bounds__(kScanThreads, 1)
    gdn_scan_kernel(const __grid_constant__ GdnPrefillParams p, int C) {
  extern __shared__ float4 scan_smem[];
  ScanStage* stage = reinterpret_cast<ScanStage*>(scan_smem);
  const int j = blockIdx.x, kh = j / (p.hv / p.hk), c0 = blockIdx.y * kScanCols;
  const int g = threadIdx.x % kScanLanes, F = g / 4;
  const int base = 4 * (threadIdx.x / kScanLanes);  // the group's first column in the block
  const int dk = p.dk, dv = p.dv, out_dim = p.hv * dv;

  // Zero both stages once: rows past dk and columns past dv are never copied, so they stay zero
  // (a zero k̂ row leaves its state row zero; a zero v column is never stored).
  for (int e = threadIdx.x; e < int(kScanSmem / sizeof(float4)); e += kScanThreads)
    scan_smem[e] = make_float4(0.f, 0.f, 0.f, 0.f);
  float* S = p.S + size_t(j) * dk * dv + c0 + base;
  float s[4][kScanQuads][4];  // [position][r][e]: column F ^ position, row 4 (16 r + g) + e
#pragma unroll
  for (int pos = 0; pos < 4; ++pos)
#pragma unroll
    for (int r = 0; r < kScanQuads; ++r)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 4 * (kScanLanes * r + g) + e, c = F ^ pos;
        s[pos][r][e] = c0 + base + c < dv && i < dk ? S[size_t(i) * dv + c] : 0.f;
      }
  __syncthreads();

  // o of token t is reduced with m of token t + 1; lanes g % 4 == 0 store their column F of it.
  float o_part[4] = {0.f, 0.f, 0.f, 0.f};  // the previous token's o, this lane's partial sums
  const bool store_lane = g % 4 == 0 && c0 + base + F < dv;
  float* o_row = p.o + size_t(j) * dv + c0 + base + F;  // the row of the next o to store
  const int n_tiles = (p.T + kScanTile - 1) / kScanTile;
  scan_stage_load(p, C, j, kh, c0, 0, min(kScanTile, p.T), stage[0]);
  for (int tile = 0; tile < n_tiles; ++tile) {
    // The tile's copies have landed for every thread, and every thread is done with the stage
    // the next copy overwrites (the previous tile's).
    cp_async_wait_all();
    __syncthreads();
    const int t0 = tile * kScanTile, n = min(kScanTile, p.T - t0);
    if (tile + 1 < n_tiles)
      scan_stage_load(p, C, j, kh, c0, t0 + kScanTile, min(kScanTile, p.T - t0 - kScanTile),
                      stage[(tile + 1) & 1]);
    const ScanStage& st = stage[tile & 1];
    for (int tt = 0; tt < n; ++tt) {
      float k[kScanQuads][4], q[kScanQuads][4];
#pragma unroll
      for (int r = 0; r < kScanQuads; ++r) {
        const float4 k4 = st.k[tt][kScanLanes * r + g], q4 = st.q[tt][kScanLanes * r + g];
        k[r][0] = k4.x, k[r][1] = k4.y, k[r][2] = k4.z, k[r][3] = k4.w;
        q[r][0] = q4.x, q[r][1] = q4.y, q[r][2] = q4.z, q[r][3] = q4.w;
      }
      const float2 gate = st.gate[tt];  // (β, decay)
      // S ← decay·S; m = Sᵀk̂ (one partial sum per position and r: short dependent chains).
      float m_part[4];
#pragma unroll
      for (int pos = 0; pos < 4; ++pos) {
        float part[kScanQuads];
#pragma unroll
        for (int r = 0; r < kScanQuads; ++r) {
          s[pos][r][0] *= gate.y;
          part[r] = s[pos][r][0] * k[r][0];
#pragma unroll
          for (int e = 1; e < 4; ++e) {
            s[pos][r][e] *= gate.y;
            part[r] = fmaf(s[pos][r][e], k[r][e], part[r]);
          }
        }
        m_part[pos] = part[0] + part[1];
      }
      const float m = group_sum(m_part);
      const float o_prev = group_sum(o_part);
      if (t0 + tt > 0) {
        if (store_lane) *o_row = o_prev;
        o_row += out_dim;
      }
      // δ of column F, then the other positions' from the lanes that hold them.
      const float d = gate.x * (st.v[tt][base + F] - m);
      const float delta[4] = {d, __shfl_xor_sync(~0u, d, 4), __shfl_xor_sync(~0u, d, 8),
                              __shfl_xor_sync(~0u, d, 12)};
      // S += k̂ δᵀ; this token's o = Sᵀq̂ with the updated state.
#pragma unroll
      for (int pos = 0; pos < 4; ++pos) {
        float part[kScanQuads];
#pragma unroll
        for (int r = 0; r < kScanQuads; ++r) {
          s[pos][r][0] = fmaf(k[r][0], delta[pos], s[pos][r][0]);
          part[r] = s[pos][r][0] * q[r][0];
#pragma unroll
          for (int e = 1; e < 4; ++e) {
            s[pos][r][e] = fmaf(k[r][e], delta[pos], s[pos][r][e]);
            part[r] = fmaf(s[pos][r][e], q[r][e], part[r]);
          }
        }
        o_part[pos] = part[0] + part[1];
      }
    }
  }
  const float o_last = group_sum(o_part);
  if (store_lane) *o_row = o_last;

#pragma unroll
  for (int pos = 0; pos < 4; ++pos)
#pragma unroll
    for (int r = 0; r < kScanQuads; ++r)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 4 * (kScanLanes * r + g) + e, c = F ^ pos;
        if (c0 + base + c < dv && i < dk) S[size_t(i) * dv + c] = s[pos][r][e];
      }
}

// ---- (e) Gated RMSNorm -----------------------------------------------------------------------

// One warp per (token, value head): out = fp16(o · rsqrt(mean(o²) + eps) · norm · silu(z)) over
// the head's dv ≤ 128 outputs (four a lane), and its remainder into out_lo when set.
constexpr int kGatedThreads = 256;

// GdnPrefillParams: o, z [T, hv · dv] → out / out_lo [T, hv · dv] fp16; a block per 8 rows
// (token, value head).
__global__ void __launch_bounds__(kGatedThreads)
    gdn_gated_norm_kernel(const __grid_constant__ GdnPrefillParams p) {
  const int row = blockIdx.x * (kGatedThreads / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (row >= p.T * p.hv) return;  // whole warps leave together
  const int dv = p.dv;
  const size_t base = size_t(row) * dv;  // rows (t, j) are consecutive dv-runs of [T, hv·dv]
  float e[kMaxGdnHeadDim / 32];
  float ss = 0.f;
#pragma unroll
  for (int u = 0; u < kMaxGdnHeadDim / 32; ++u) {
    const int d = lane + 32 * u;
    e[u] = d < dv ? p.o[base + d] : 0.f;
    ss = fmaf(e[u], e[u], ss);
  }
  const float inv = rsqrtf(warp_sum(ss) / float(dv) + p.eps);
#pragma unroll
  for (int u = 0; u < kMaxGdnHeadDim / 32; ++u) {
    const int d = lane + 32 * u;
    if (d < dv)
      store_f16_split(e[u] * inv * p.norm[d] * silu(p.z[base + d]), p.out, p.out_lo,
                      int64_t(base + d));
  }
}

Status launch_gated_norm(const GdnPrefillParams& p, cudaStream_t s) {
  const int rows_per_block = kGatedThreads / 32;
  gdn_gated_norm_kernel<<<(p.T * p.hv + rows_per_block - 1) / rows_per_block, kGatedThreads, 0,
                          s>>>(p);
  return last_launch("delta net prefill gated norm");
}

}  // namespace

Status launch_gdn_prefill(const GdnPrefillParams& p, cudaStream_t s) {
  if (!p.qkv || !p.z || !p.b || !p.a || !p.conv_w || !p.conv_ring || !p.S || !p.A_log ||
      !p.dt_bias || !p.norm || !p.conv_out || !p.beta || !p.decay || !p.o || !p.out)
    return err("delta net prefill: a null input, state or scratch pointer");
  if (p.dk < 1 || p.dv < 1 || p.dk > kMaxGdnHeadDim || p.dv > kMaxGdnHeadDim)
    return err("delta net prefill: head dims ", p.dk, "/", p.dv, " outside 1…", kMaxGdnHeadDim);
  if (p.hk < 1 || p.hv < 1 || p.hv % p.hk != 0)
    return err("delta net prefill: ", p.hv, " value heads over ", p.hk, " key heads");
  if (p.K < 1 || p.K > kMaxConvK) return err("delta net prefill: conv kernel of ", p.K, " taps");
  if (p.T < 1 || p.T > kConvRun * 65535 || p.pos0 < 0)
    return err("delta net prefill: chunk of ", p.T, " tokens at position ", p.pos0);
  const bool chunked = p.form == GdnScanForm::chunked;
  if (chunked && (!p.chunk_scratch || reinterpret_cast<uintptr_t>(p.chunk_scratch) % 16 != 0))
    return err("delta net prefill: the chunked form needs 16-byte aligned scratch");
  const int C = 2 * p.hk * p.dk + p.hv * p.dv;  // conv_dim
  const dim3 conv_grid((C + kConvThreads - 1) / kConvThreads, (p.T + kConvRun - 1) / kConvRun);
  gdn_conv_kernel<<<conv_grid, kConvThreads, 0, s>>>(p, C);
  if (Status st = last_launch("delta net prefill conv"); !st.ok()) return st;
  gdn_ring_kernel<<<conv_grid.x, kConvThreads, 0, s>>>(p, C);
  if (Status st = last_launch("delta net prefill ring"); !st.ok()) return st;
  gdn_norm_gate_kernel<<<p.T, kNormThreads, 0, s>>>(p, C);
  if (Status st = last_launch("delta net prefill norms"); !st.ok()) return st;
  if (chunked) {
    if (Status st = launch_gdn_scan_chunked(p, s); !st.ok()) return st;
    return launch_gated_norm(p, s);
  }
  // More than the default 48 KB of dynamic shared memory must be allowed explicitly; set on every
  // launch (cheap), so it holds for whichever device is current.
  if (cudaError_t e = cudaFuncSetAttribute(
          gdn_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kScanSmem));
      e != cudaSuccess)
    return err("delta net prefill scan: ", cudaGetErrorString(e));
  const dim3 scan_grid(p.hv, (p.dv + kScanCols - 1) / kScanCols);
  gdn_scan_kernel<<<scan_grid, kScanThreads, kScanSmem, s>>>(p, C);
  if (Status st = last_launch("delta net prefill scan"); !st.ok()) return st;
  return launch_gated_norm(p, s);
}

}  // namespace orchid::cuda