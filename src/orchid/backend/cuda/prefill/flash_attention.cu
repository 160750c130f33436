// Gated attention over a prefill chunk of T tokens. kernel_qk_norm_rope_kv_prefill: the decode
// kernel's q/k RMSNorm, partial RoPE and K/V cache write for every token of the chunk, with the
// same arithmetic, so a prefilled cache holds the bits a token-by-token decode would have written.
// kernel_flash_attention_prefill: causal FlashAttention-2 on bf16 mma.sync tensor cores, one K/V
// tile serving every query head of a GQA group. The naive kernels (scores in global memory, a row
// softmax, P·V) are the ablation.
#include <cuda_fp16.h>

#include <cmath>

#include "orchid/backend/cuda/prefill/flash_attention_check.h"
#include "orchid/backend/cuda/prefill/online_softmax.cuh"
#include "orchid/backend/cuda/common/mma_sync.cuh"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {
namespace {

// ---- q/k norm, RoPE, K/V write ------------------------------------------------------------------

// Block per (head, token): blockIdx.x < n_head a query head, else a KV head; blockIdx.y the
// token. blockDim = hd rounded up to 32 and thread d owns dim d, as in the decode kernel
// (decode/attention.cu), so block_sum adds in the same order and every rounding is the same.
// AttnPrefillParams: qg's q normed and roped in place, K and V of token t written to row
// pos0 + t of kc / vc.
__global__ void kernel_qk_norm_rope_kv_prefill(const __grid_constant__ AttnPrefillParams p) {
  __shared__ float buf[kMaxHeadDim];
  __shared__ float scratch[32];
  const int d = threadIdx.x, hd = p.hd, t = blockIdx.y, pos = p.pos0 + t;
  const bool is_q = int(blockIdx.x) < p.n_head;
  const int h = is_q ? blockIdx.x : blockIdx.x - p.n_head;
  float* q = p.qg + (size_t(t) * p.n_head + h) * 2 * hd;
  const float* src = is_q ? q : p.k + (size_t(t) * p.n_head_kv + h) * hd;
  const float* w = is_q ? p.q_norm : p.k_norm;
  const float x = d < hd ? src[d] : 0.f;
  const float inv = rsqrtf(block_sum(x * x, scratch) / float(hd) + p.eps);
  if (d < hd) buf[d] = x * inv * w[d];
  __syncthreads();
  if (d >= hd) return;
  // Rotate-half RoPE on dims [0, n_rot): angle inv_freq[i] · pos in fp32.
  float y = buf[d];
  if (d < p.n_rot) {
    const int half = p.n_rot / 2, i = d < half ? d : d - half;
    float s, c;
    sincosf(p.inv_freq[i] * float(pos), &s, &c);
    y = d < half ? buf[d] * c - buf[d + half] * s : buf[d] * c + buf[d - half] * s;
  }
  if (is_q) {
    q[d] = y;
    return;
  }
  const size_t off = (size_t(pos) * p.n_head_kv + h) * hd + d;
  p.kc[off] = float_to_bf16_bits(y);
  p.vc[off] = float_to_bf16_bits(p.v[(size_t(t) * p.n_head_kv + h) * hd + d]);
}

// ---- Flash attention on tensor cores ------------------------------------------------------------

// A CTA takes kFlashRows query rows of one KV head g: row r of the head's T · G rows is token
// r / G, query head g · G + r % G, so the group's heads share every K/V tile (one tile load
// serves G query heads; G = 8 puts 8 tokens in a CTA). Warp w owns rows [16w, 16w + 16), the M
// of its mma tiles; its O accumulator is 16 × HD fp32 (HD / 2 registers a lane: 128 at HD 256,
// which is why the K/V tile is 32 keys there and Q is read from shared memory at every tile).
// Measured on an H200 at the real shape (16 / 2 heads, hd 256), one chunk of 4,096 tokens:
// 0.75 ms a layer, 184 TFLOP/s counting causal pairs only (the card's dense bf16 GEMM rate
// measured 790); 8 warps (128 rows) a CTA ran 6 % slower.
constexpr int kFlashWarps = 4;
constexpr int kFlashRows = 16 * kFlashWarps;
template <int HD>
__host__ __device__ constexpr int flash_keys() {  // keys per K/V tile
  return HD == 256 ? 32 : 64;
}
// bf16 per shared row: HD plus 16 bytes, so the 8 rows of an ldmatrix (16 bytes each) start 4
// banks apart and hit all 32 banks once.
template <int HD>
__host__ __device__ constexpr int flash_row() {
  return HD + 8;
}
// Q [kFlashRows], then K [2][BN] and V [2][BN] (double-buffered), rows of flash_row bf16:
// 101,376 bytes at HD 256 (two CTAs an SM), 87,040 at 128, 46,080 at 64.
template <int HD>
constexpr size_t flash_smem() {
  return size_t(kFlashRows + 4 * flash_keys<HD>()) * flash_row<HD>() * sizeof(uint16_t);
}

// Precision: K and V are the cache's bf16; q is rounded to bf16 for Q·Kᵀ (relative error ≤ 2⁻⁸
// per element) and P = exp2(s · scale · log2e − m) to bf16 for P·V, while the row sum l adds the
// fp32 P; every product accumulates in fp32 and the output is rounded to fp16.
// AttnPrefillParams; HD = hd, G = n_head / n_head_kv. Grid (n_head_kv, ⌈T · G / kFlashRows⌉): a
// block per kFlashRows GQA-packed query rows of one KV head (above); dynamic shared memory
// flash_smem<HD>().
template <int HD>
__global__ void __launch_bounds__(kFlashWarps * 32, 2)
    kernel_flash_attention_prefill(const __grid_constant__ AttnPrefillParams p) {
  constexpr int BN = flash_keys<HD>(), RS = flash_row<HD>(), kThreads = kFlashWarps * 32;
  constexpr int kChunks = HD / 8;  // 16-byte chunks of a K/V row
  static_assert(BN * kChunks % kThreads == 0 && BN % 16 == 0);
  extern __shared__ uint4 smem_flash[];
  uint16_t* sq = reinterpret_cast<uint16_t*>(smem_flash);  // [kFlashRows][RS]
  uint16_t* sk = sq + kFlashRows * RS;                     // [2][BN][RS]
  uint16_t* sv = sk + 2 * BN * RS;                         // [2][BN][RS]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int T = p.T, pos0 = p.pos0, G = p.n_head / p.n_head_kv, g = blockIdx.x;
  // The last row blocks (the latest tokens: the most keys) of every KV head are started first,
  // so that the grid's tail is short blocks.
  const int m0 = (gridDim.y - 1 - blockIdx.y) * kFlashRows;
  // Query row r (of this CTA) attends keys [0, pos0 + token]; rows past the chunk's end
  // (zero queries, never stored) borrow the last token's range.
  auto limit = [&](int r) { return pos0 + min(T - 1, (m0 + r) / G); };
  const int kv_end = limit(kFlashRows - 1) + 1;
  const int n_tiles = (kv_end + BN - 1) / BN;
  const size_t kv_stride = size_t(p.n_head_kv) * HD;
  const uint16_t* kcache = p.kc + size_t(g) * HD;
  const uint16_t* vcache = p.vc + size_t(g) * HD;

  // Keys [j · BN, j · BN + BN) of K and V into buffer j & 1, as one cp.async group; a warp copies
  // whole rows (512 bytes at HD 256) per instruction.
  auto load_tile = [&](int j) {
    uint16_t* dk = sk + (j & 1) * BN * RS;
    uint16_t* dv = sv + (j & 1) * BN * RS;
#pragma unroll
    for (int i = 0; i < BN * kChunks / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c / kChunks, ch = c % kChunks, key = j * BN + r;
      const size_t off = size_t(min(key, kv_end - 1)) * kv_stride + ch * 8;
      const int bytes = key < kv_end ? 16 : 0;
      cp_async16(dk + r * RS + ch * 8, kcache + off, bytes);
      cp_async16(dv + r * RS + ch * 8, vcache + off, bytes);
    }
    cp_async_commit();
  };
  load_tile(0);

  // Q rows to bf16 while the first tile is in flight.
  for (int c = tid; c < kFlashRows * HD / 4; c += kThreads) {
    const int r = c / (HD / 4), d = c % (HD / 4) * 4, mr = m0 + r, t = mr / G;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (t < T)
      x = *reinterpret_cast<const float4*>(p.qg + (size_t(t) * p.n_head + g * G + mr % G) * 2 * HD +
                                           d);
    *reinterpret_cast<uint2*>(sq + r * RS + d) =
        make_uint2(pack_bf16(x.x, x.y), pack_bf16(x.z, x.w));
  }

  // This lane's rows of the mma layouts: gq = lane / 4 and gq + 8 of the warp's 16, holding
  // columns 2 (lane % 4) and + 1 of every 8-column tile.
  const int gq = lane >> 2, qc = 2 * (lane & 3), wr = warp * 16;
  const int lim[2] = {limit(wr + gq), limit(wr + gq + 8)};
  const int warp_lo = limit(wr), warp_hi = limit(wr + 15);
  const float scale_log2 = 1.4426950408889634f / sqrtf(float(HD));  // softmax in base 2

  float o[HD / 8][4] = {};  // O: [8-dim tile][rows gq (0, 1), gq + 8 (2, 3) × dims qc, qc + 1]
  // Running max (raw q·k units) and this lane's part of the row sum. Every row's first tile holds
  // key 0, which it attends, so m is finite after tile 0 and no exp2 sees −inf − (−inf).
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for (int j = 0; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) {
      load_tile(j + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile j (and, the first time, Q) is visible to every warp
    const int k0 = j * BN;
    if (k0 <= warp_hi) {  // else the whole tile is past this warp's keys
      const uint16_t* tk = sk + (j & 1) * BN * RS;
      const uint16_t* tv = sv + (j & 1) * BN * RS;
      // S = Q · Kᵀ: 16 rows × BN keys. B (k = dims, n = keys) is K's rows as stored.
      float s[BN / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4(a, sq + (wr + (lane & 15)) * RS + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < BN / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, tk + (np * 16 + (lane & 7) + (lane >> 4) * 8) * RS + kk * 16 +
                             ((lane >> 3) & 1) * 8);
          mma_bf16(s[2 * np], a, b[0], b[1]);
          mma_bf16(s[2 * np + 1], a, b[2], b[3]);
        }
      }
      // Causal mask, only on tiles that reach past the warp's first row's last key.
      if (k0 + BN - 1 > warp_lo) {
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (k0 + nt * 8 + qc + (e & 1) > lim[e >> 1]) s[nt][e] = -INFINITY;
      }
      // Online softmax per row; the quad (lanes 4 gq … 4 gq + 3) shares a row.
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
      }
      float corr[2], neg_m[2];
      online_softmax_step(mx, m, l, scale_log2, corr, neg_m);
      // P as the A fragments of P·V: 16-key step kk holds 8-key tiles 2 kk (a0, a1: rows gq,
      // gq + 8) and 2 kk + 1 (a2, a3).
      uint32_t pa[BN / 16][4];
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        const float p0 = exp2f(fmaf(s[nt][0], scale_log2, neg_m[0]));
        const float p1 = exp2f(fmaf(s[nt][1], scale_log2, neg_m[0]));
        const float p2 = exp2f(fmaf(s[nt][2], scale_log2, neg_m[1]));
        const float p3 = exp2f(fmaf(s[nt][3], scale_log2, neg_m[1]));
        l[0] += p0 + p1;
        l[1] += p2 + p3;
        pa[nt / 2][(nt & 1) * 2] = pack_bf16(p0, p1);
        pa[nt / 2][(nt & 1) * 2 + 1] = pack_bf16(p2, p3);
      }
      // Once the running maxima settle most tiles leave them unchanged: skip the HD / 2
      // multiplies a lane would spend rescaling O by 1.
      if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
        for (int i = 0; i < HD / 8; ++i) {
          o[i][0] *= corr[0], o[i][1] *= corr[0];
          o[i][2] *= corr[1], o[i][3] *= corr[1];
        }
      }
      // O += P · V: B (k = keys, n = dims) is V's rows transposed by ldmatrix.
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
        for (int dp = 0; dp < HD / 16; ++dp) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, tv + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * RS + dp * 16 +
                                   (lane >> 4) * 8);
          mma_bf16(o[2 * dp], pa[kk], b[0], b[1]);
          mma_bf16(o[2 * dp + 1], pa[kk], b[2], b[3]);
        }
    }
    __syncthreads();  // buffer j & 1 is read; the next iteration refills it
  }

  // out = O / l ⊙ sigmoid(gate), fp16 (and its remainder when asked for).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int mr = m0 + wr + gq + 8 * r, t = mr / G;
    if (t >= T) continue;
    const size_t row = size_t(t) * p.n_head + g * G + mr % G;
    const float inv_l = 1.f / l[r];
    const float* gate = p.qg + row * 2 * HD + HD;
#pragma unroll
    for (int i = 0; i < HD / 8; ++i) {
      const int d = i * 8 + qc;
      const float2 gt = *reinterpret_cast<const float2*>(gate + d);
      store_f16x2_split(o[i][2 * r] * inv_l * sigmoid(gt.x),
                        o[i][2 * r + 1] * inv_l * sigmoid(gt.y), p.out, p.out_lo,
                        int64_t(row * HD + d));
    }
  }
}

// ---- The naive ablation: scores in global memory
// -------------------------------------------------

// Offset of row (token t, head h) in `scores` ([n_head, T, pos0 + T] fp32); only keys
// [0, pos0 + t] of a row are written.
__device__ __forceinline__ size_t score_row(const AttnPrefillParams& p, int t, int h) {
  return (size_t(h) * p.T + t) * (p.pos0 + p.T);
}

// Block per (token, head): warp w scores keys w, w + 8, …; lane ℓ takes dims ℓ, ℓ + 32, …. The
// query stays fp32 (the flash kernel's bf16 rounding of q is not copied).
// AttnPrefillParams; scores [n_head, T, pos0 + T] fp32 (score_row). Grid (T, n_head).
__global__ void kernel_attn_scores_naive(const __grid_constant__ AttnPrefillParams p,
                                         float* scores) {
  __shared__ float sq[kMaxHeadDim];
  const int t = blockIdx.x, h = blockIdx.y, hd = p.hd, g = h / (p.n_head / p.n_head_kv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
  for (int d = threadIdx.x; d < hd; d += blockDim.x)
    sq[d] = p.qg[(size_t(t) * p.n_head + h) * 2 * hd + d];
  __syncthreads();
  const float scale = 1.f / sqrtf(float(hd));
  float* row = scores + score_row(p, t, h);
  for (int j = warp; j <= p.pos0 + t; j += n_warp) {
    const uint16_t* kr = p.kc + (size_t(j) * p.n_head_kv + g) * hd;
    float s = 0.f;
    for (int d = lane; d < hd; d += 32) s = fmaf(sq[d], bf16_bits_to_float(kr[d]), s);
    s = warp_sum(s);
    if (lane == 0) row[j] = s * scale;
  }
}

// Block per (token, head): the row's scores become its softmax P, in place.
// AttnPrefillParams; scores as kernel_attn_scores_naive's. Grid (T, n_head).
__global__ void kernel_attn_softmax_naive(const __grid_constant__ AttnPrefillParams p,
                                          float* scores) {
  __shared__ float scratch[32];
  const int t = blockIdx.x, n_keys = p.pos0 + t + 1;
  float* row = scores + score_row(p, t, blockIdx.y);
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < n_keys; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = warp_max(mx);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) mx = fmaxf(mx, scratch[w]);
  float sum = 0.f;
  for (int j = threadIdx.x; j < n_keys; j += blockDim.x) sum += row[j] = expf(row[j] - mx);
  const float inv = 1.f / block_sum(sum, scratch);  // its first barrier orders scratch's reuse
  for (int j = threadIdx.x; j < n_keys; j += blockDim.x) row[j] *= inv;
}

// Block per (token, head), thread per dim: out = Σ_j P_j · V_j ⊙ sigmoid(gate), fp16.
// AttnPrefillParams; scores holds P. Grid (T, n_head), hd threads; writes out / out_lo.
__global__ void kernel_attn_pv_naive(const __grid_constant__ AttnPrefillParams p,
                                     const float* scores) {
  const int t = blockIdx.x, h = blockIdx.y, d = threadIdx.x, hd = p.hd;
  const int g = h / (p.n_head / p.n_head_kv);
  const float* row = scores + score_row(p, t, h);
  const uint16_t* vcol = p.vc + size_t(g) * hd + d;
  const size_t v_stride = size_t(p.n_head_kv) * hd;
  float a = 0.f;
  for (int j = 0; j <= p.pos0 + t; ++j) a = fmaf(row[j], bf16_bits_to_float(vcol[j * v_stride]), a);
  const size_t q_row = size_t(t) * p.n_head + h;
  const float gate = p.qg[q_row * 2 * hd + hd + d];
  store_f16_split(a * sigmoid(gate), p.out, p.out_lo, int64_t(q_row * hd + d));
}

// ---- Launchers ----------------------------------------------------------------------------------

template <int HD>
Status launch_flash(const AttnPrefillParams& p, cudaStream_t s) {
  constexpr size_t smem = flash_smem<HD>();
  // More than 48 KB of dynamic shared memory must be allowed explicitly; set on every launch
  // (cheap), so it holds for whichever device is current.
  if (cudaError_t e = cudaFuncSetAttribute(kernel_flash_attention_prefill<HD>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      e != cudaSuccess)
    return err("attention prefill: ", cudaGetErrorString(e));
  const int rows = p.T * (p.n_head / p.n_head_kv);
  const dim3 grid(p.n_head_kv, (rows + kFlashRows - 1) / kFlashRows);
  kernel_flash_attention_prefill<HD><<<grid, kFlashWarps * 32, smem, s>>>(p);
  return last_launch("attention prefill");
}

}  // namespace

Status launch_qk_norm_rope_kv_prefill(const AttnPrefillParams& p, cudaStream_t s) {
  constexpr const char* what = "qk norm + rope + kv write (prefill)";
  ORCHID_TRY(check_attn_common(p, what));
  if (p.n_rot < 0 || p.n_rot > p.hd || p.n_rot % 2 != 0)
    return err(what, ": n_rot ", p.n_rot, " (expected even, at most head_dim ", p.hd, ")");
  if (!p.k || !p.v || !p.q_norm || !p.k_norm || (p.n_rot > 0 && !p.inv_freq))
    return err(what, ": k, v, q_norm, k_norm and inv_freq must be set");
  const dim3 grid(p.n_head + p.n_head_kv, p.T);
  kernel_qk_norm_rope_kv_prefill<<<grid, (p.hd + 31) / 32 * 32, 0, s>>>(p);
  return last_launch(what);
}

Status launch_attention_prefill(const AttnPrefillParams& p, cudaStream_t s) {
  ORCHID_TRY(check_attn_output(p, "attention prefill"));
  switch (p.hd) {
    case 32:  // the golden fixtures' head sizes
      return launch_flash<32>(p, s);
    case 48:
      return launch_flash<48>(p, s);
    case 64:
      return launch_flash<64>(p, s);
    case 128:
      return launch_flash<128>(p, s);
    case 256:
      return launch_flash<256>(p, s);
    default:
      return err("attention prefill: head_dim ", p.hd, " (expected 32, 48, 64, 128 or 256)");
  }
}

Status launch_attention_prefill_naive(const AttnPrefillParams& p, float* scores, cudaStream_t s) {
  ORCHID_TRY(check_attn_output(p, "attention prefill (naive)"));
  if (!scores) return err("attention prefill (naive): scores buffer missing");
  const dim3 rows(p.T, p.n_head);
  kernel_attn_scores_naive<<<rows, 256, 0, s>>>(p, scores);
  ORCHID_TRY(last_launch("attention prefill (naive): scores"));
  kernel_attn_softmax_naive<<<rows, 256, 0, s>>>(p, scores);
  ORCHID_TRY(last_launch("attention prefill (naive): softmax"));
  kernel_attn_pv_naive<<<rows, p.hd, 0, s>>>(p, scores);
  return last_launch("attention prefill (naive): P·V");
}

}  // namespace orchid::cuda
