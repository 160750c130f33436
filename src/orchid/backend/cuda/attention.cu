// Gated attention for one token. qk_norm_rope_kv: per-head RMSNorm of q and k, rotate-half
// RoPE on the first n_rot dims, K and V appended to the bf16 cache. attention_decode: one block
// per (KV head, KV range); each K/V row is loaded once for all query heads of its GQA group
// (lane ℓ holds dims [8ℓ, 8ℓ+8)); tiles of 32 keys per warp with an online softmax. With more
// than one range per head a combine kernel merges the ranges and applies the sigmoid gate.
#include <cmath>

#include "orchid/backend/cuda/device_common.cuh"

namespace orchid::cuda {
namespace {

// Block per head (q heads first, then KV heads), blockDim = hd rounded up to 32.
__global__ void qk_norm_rope_kv_kernel(const __grid_constant__ AttnParams p) {
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  __shared__ float buf[kMaxHeadDim];
  __shared__ float scratch[32];
  const int d = threadIdx.x, hd = p.hd;
  const bool is_q = int(blockIdx.x) < p.n_head;
  const int h = is_q ? blockIdx.x : blockIdx.x - p.n_head;
  const int pos = *p.pos;
  float* q = p.qg + size_t(h) * 2 * hd;
  const float* src = is_q ? q : p.k + size_t(h) * hd;
  const float v = d < hd ? src[d] : 0.f;
  const float inv = rsqrtf(block_sum(v * v, scratch) / float(hd) + p.eps);
  const float* w = is_q ? p.q_norm : p.k_norm;
  if (d < hd) buf[d] = v * inv * w[d];
  __syncthreads();
  if (d >= hd) return;
  float y = buf[d];
  const int half = p.n_rot / 2;
  if (d < p.n_rot) {
    const int i = d < half ? d : d - half;
    float s, c;
    sincosf(p.inv_freq[i] * float(pos), &s, &c);
    y = d < half ? buf[d] * c - buf[d + half] * s : buf[d] * c + buf[d - half] * s;
  }
  if (is_q) {
    q[d] = y;
  } else {
    const size_t off = (size_t(pos) * p.n_head_kv + h) * hd + d;
    p.kc[off] = float_to_bf16_bits(y);
    p.vc[off] = float_to_bf16_bits(p.v[size_t(h) * hd + d]);
  }
}

constexpr int kAttnWarps = 4, kTile = 32;

constexpr int kBatch = 8;  // K or V rows in flight per lane

// One lane's 16 bytes (8 bf16) of a cache row; zero for lanes past the head's dims.
__device__ __forceinline__ uint4 load_row(const uint16_t* src, bool ok) {
  return ok ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0u, 0u, 0u, 0u);
}

__device__ __forceinline__ void unpack8(uint4 u, float (&out)[8]) {
  out[0] = bf16_lo(u.x), out[1] = bf16_hi(u.x), out[2] = bf16_lo(u.y), out[3] = bf16_hi(u.y);
  out[4] = bf16_lo(u.z), out[5] = bf16_hi(u.z), out[6] = bf16_lo(u.w), out[7] = bf16_hi(u.w);
}

template <int G>
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_kernel(const __grid_constant__ AttnParams p) {
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  const int g = blockIdx.x, split = blockIdx.y, n_split = gridDim.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hd = p.hd, nkv = p.n_head_kv;
  const int n_keys = *p.pos + 1;
  const float scale = rsqrtf(float(hd));
  const bool dim_ok = lane * 8 < hd;
  // Key range of this block, in whole tiles.
  const int n_tiles = (n_keys + kTile - 1) / kTile;
  const int tiles_per = (n_tiles + n_split - 1) / n_split;
  const int t_begin = split * tiles_per, t_end = min(n_tiles, t_begin + tiles_per);

  float q[G][8], acc[G][8], m[G], l[G];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    const float* qh = p.qg + size_t(g * G + h) * 2 * hd + lane * 8;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      q[h][e] = dim_ok ? qh[e] * scale : 0.f;
      acc[h][e] = 0.f;
    }
    m[h] = -INFINITY;
    l[h] = 0.f;
  }
  const size_t row_stride = size_t(nkv) * hd;
  const uint16_t* kbase = p.kc + size_t(g) * hd + lane * 8;
  const uint16_t* vbase = p.vc + size_t(g) * hd + lane * 8;

  for (int t = t_begin + warp; t < t_end; t += kAttnWarps) {
    const int j0 = t * kTile;
    // Scores: lane kk ends up holding key j0+kk's score for every head. Rows are loaded kBatch
    // at a time before any is used (addresses clamped to the last key, results masked), so a
    // tile costs kTile / kBatch memory round trips, not kTile.
    float mine[G];
#pragma unroll
    for (int h = 0; h < G; ++h) mine[h] = -INFINITY;
    for (int kb = 0; kb < kTile; kb += kBatch) {
      uint4 kr[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        kr[b] = load_row(kbase + size_t(min(j0 + kb + b, n_keys - 1)) * row_stride, dim_ok);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        float k8[8];
        unpack8(kr[b], k8);
#pragma unroll
        for (int h = 0; h < G; ++h) {
          float s = 0.f;
#pragma unroll
          for (int e = 0; e < 8; ++e) s = fmaf(q[h][e], k8[e], s);
          s = warp_sum(s);
          if (lane == kb + b && j0 + kb + b < n_keys) mine[h] = s;
        }
      }
    }
    // Online softmax over the tile.
    float pr[G];
#pragma unroll
    for (int h = 0; h < G; ++h) {
      const float m_new = fmaxf(m[h], warp_max(mine[h]));
      const float corr = expf(m[h] - m_new);
      pr[h] = expf(mine[h] - m_new);  // 0 for lanes past the last key
      l[h] = l[h] * corr + warp_sum(pr[h]);
      m[h] = m_new;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[h][e] *= corr;
    }
    for (int kb = 0; kb < kTile; kb += kBatch) {
      uint4 vr[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        vr[b] = load_row(vbase + size_t(min(j0 + kb + b, n_keys - 1)) * row_stride, dim_ok);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        float v8[8];
        unpack8(vr[b], v8);
#pragma unroll
        for (int h = 0; h < G; ++h) {
          const float ph = __shfl_sync(0xffffffffu, pr[h], kb + b);  // 0 past the last key
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[h][e] = fmaf(ph, v8[e], acc[h][e]);
        }
      }
    }
  }

  // Merge the warps: (m, l, acc) per head through shared memory.
  __shared__ float s_ml[kAttnWarps][G][2];
  __shared__ float s_acc[kAttnWarps][G][kMaxHeadDim];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    if (lane == 0) s_ml[warp][h][0] = m[h], s_ml[warp][h][1] = l[h];
    if (dim_ok)
#pragma unroll
      for (int e = 0; e < 8; ++e) s_acc[warp][h][lane * 8 + e] = acc[h][e];
  }
  __syncthreads();
  const int gq = G * hd;
  const bool direct = n_split == 1;
  for (int i = threadIdx.x; i < gq; i += blockDim.x) {
    const int h = i / hd, d = i % hd;
    float mx = -INFINITY;
    for (int w = 0; w < kAttnWarps; ++w) mx = fmaxf(mx, s_ml[w][h][0]);
    float ls = 0.f, a = 0.f;
    for (int w = 0; w < kAttnWarps; ++w) {
      const float f = s_ml[w][h][0] == -INFINITY ? 0.f : expf(s_ml[w][h][0] - mx);
      ls += s_ml[w][h][1] * f;
      a += s_acc[w][h][d] * f;
    }
    const int head = g * G + h;
    if (direct) {
      const float gate = p.qg[size_t(head) * 2 * hd + hd + d];
      p.out[size_t(head) * hd + d] = a / ls * sigmoid(gate);
    } else {
      const size_t slot = (size_t(g) * n_split + split) * G + h;
      p.part_acc[slot * hd + d] = a;
      if (d == 0) p.part_ml[slot * 2] = mx, p.part_ml[slot * 2 + 1] = ls;
    }
  }
}

// Merges the per-range partials of every (KV head, group head) and applies the output gate.
// Grid: n_head_kv * group blocks; block: kCombineParts × hd threads — part q of each output dim
// sums every kCombineParts-th range (branch-free, so loads stay in flight), then the parts are
// added in shared memory.
constexpr int kCombineParts = 4;

__global__ void attention_combine_kernel(const __grid_constant__ AttnParams p, int group) {
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  __shared__ float s_mx[32], s_ls[kCombineParts][kMaxHeadDim], s_a[kCombineParts][kMaxHeadDim];
  const int g = blockIdx.x / group, h = blockIdx.x % group, hd = p.hd, n_split = p.n_split;
  const int hd_r = blockDim.x / kCombineParts, d = threadIdx.x % hd_r, q = threadIdx.x / hd_r;
  const float* ml = p.part_ml + (size_t(g) * n_split * group + h) * 2;  // range s at s·group·2
  // Max over ranges, by the whole block.
  float mx = -INFINITY;
  for (int s = threadIdx.x; s < n_split; s += blockDim.x) mx = fmaxf(mx, ml[size_t(s) * group * 2]);
  mx = warp_max(mx);
  if ((threadIdx.x & 31) == 0) s_mx[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) mx = fmaxf(mx, s_mx[w]);
  float ls = 0.f, a = 0.f;
  if (d < hd) {
#pragma unroll 8
    for (int s = q; s < n_split; s += kCombineParts) {
      const size_t slot = (size_t(g) * n_split + s) * group + h;
      const float f = expf(ml[size_t(s) * group * 2] - mx);  // 0 for empty ranges (-inf)
      ls = fmaf(ml[size_t(s) * group * 2 + 1], f, ls);
      a = fmaf(p.part_acc[slot * hd + d], f, a);
    }
  }
  s_ls[q][d] = ls;
  s_a[q][d] = a;
  __syncthreads();
  if (q != 0 || d >= hd) return;
  for (int k = 1; k < kCombineParts; ++k) ls += s_ls[k][d], a += s_a[k][d];
  const int head = g * group + h;
  const float gate = p.qg[size_t(head) * 2 * hd + hd + d];
  p.out[size_t(head) * hd + d] = a / ls * sigmoid(gate);
}

template <int G>
Status launch_g(const AttnParams& p, cudaStream_t s) {
  ORCHID_TRY(launch("attention", attention_kernel<G>, dim3(p.n_head_kv, p.n_split),
                    dim3(kAttnWarps * 32), 0, s, p));
  if (p.n_split == 1) return {};
  return launch("attention combine", attention_combine_kernel, dim3(p.n_head_kv * G),
                dim3((p.hd + 31) / 32 * 32 * kCombineParts), 0, s, p, G);
}

}  // namespace

Status launch_qk_norm_rope_kv(const AttnParams& p, cudaStream_t s) {
  if (p.hd > kMaxHeadDim || p.hd % 8 != 0) return err("attention: head_dim ", p.hd);
  const int threads = (p.hd + 31) / 32 * 32;
  return launch("qk norm + rope + kv write", qk_norm_rope_kv_kernel, dim3(p.n_head + p.n_head_kv),
                dim3(threads), 0, s, p);
}

Status launch_attention_decode(const AttnParams& p, cudaStream_t s) {
  const int group = p.n_head / p.n_head_kv;
  if (p.n_split > 1 && (!p.part_acc || !p.part_ml))
    return err("attention: split-KV buffers missing");
  switch (group) {
    case 1:
      return launch_g<1>(p, s);
    case 2:
      return launch_g<2>(p, s);
    case 3:
      return launch_g<3>(p, s);
    case 4:
      return launch_g<4>(p, s);
    case 6:
      return launch_g<6>(p, s);
    case 8:
      return launch_g<8>(p, s);
    default:
      return err("attention: GQA group of ", group, " query heads is not supported");
  }
}

}  // namespace orchid::cuda
