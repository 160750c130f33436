// The q/k path of gated attention for one token: per-head RMSNorm of q and k, rotate-half RoPE
// on the first n_rot dims, K and V appended to the bf16 cache; one block per head (q heads, then
// KV heads), one thread per dim.
#include <cmath>

#include "orchid/backend/cuda/common/device_common.cuh"

namespace orchid::cuda {
namespace {

// The three steps of the q/k path, each by one thread per dim of one head; the fused kernel runs
// them in one launch, ORCHID_FUSED_QK=0 as three (same arithmetic, so the same bits).
//   1. RMSNorm of the head (q in place, k into `normed`), by the whole block.
__device__ __forceinline__ float head_norm(const AttnParams& p, const float* src, const float* w,
                                           float* scratch) {
  const int d = threadIdx.x, hd = p.hd;
  const float v = d < hd ? src[d] : 0.f;
  const float inv = rsqrtf(block_sum(v * v, scratch) / float(hd) + p.eps);
  return d < hd ? v * inv * w[d] : 0.f;
}
//   2. Rotate-half RoPE on the first n_rot dims of a normed head (buf: the whole head).
__device__ __forceinline__ float head_rope(const AttnParams& p, const float* buf, int pos) {
  const int d = threadIdx.x, half = p.n_rot / 2;
  float y = buf[d];
  if (d < p.n_rot) {
    const int i = d < half ? d : d - half;
    float s, c;
    sincosf(p.inv_freq[i] * float(pos), &s, &c);
    y = d < half ? buf[d] * c - buf[d + half] * s : buf[d] * c + buf[d - half] * s;
  }
  return y;
}
//   3. K (normed, rotated) and V of the token into the bf16 caches.
//      v: this token's V; kc, vc: the caches it goes to.
__device__ __forceinline__ void kv_write(const AttnParams& p, int h, int pos, float k,
                                         const float* v, uint16_t* kc, uint16_t* vc) {
  const int d = threadIdx.x, hd = p.hd;
  const size_t off = (size_t(pos) * p.n_head_kv + h) * hd + d;
  kc[off] = float_to_bf16_bits(k);
  vc[off] = float_to_bf16_bits(v[size_t(h) * hd + d]);
}

// Block per head (q heads first, then KV heads), blockDim = hd rounded up to 32.
// AttnParams: qg's q normed and roped in place, K and V written to row *pos of kc / vc.
// BATCHED: grid y = slot (qg, k, v, pos and halt move by the batch's stride; the caches are the
// slot's own).
template <bool BATCHED>
__global__ void qk_norm_rope_kv_kernel(const __grid_constant__ AttnParams p) {
  grid_dep_wait();
  grid_dep_release();
  const int64_t so = BATCHED ? int64_t(blockIdx.y) * p.batch.stride : 0;
  if (p.halt && p.halt[so]) return;
  __shared__ float buf[kMaxHeadDim];
  __shared__ float scratch[32];
  const int d = threadIdx.x, hd = p.hd;
  const bool is_q = int(blockIdx.x) < p.n_head;
  const int h = is_q ? blockIdx.x : blockIdx.x - p.n_head;
  const int pos = p.pos[so];
  float* q = p.qg + so + size_t(h) * 2 * hd;
  const float n =
      head_norm(p, is_q ? q : p.k + so + size_t(h) * hd, is_q ? p.q_norm : p.k_norm, scratch);
  if (d < hd) buf[d] = n;
  __syncthreads();
  if (d >= hd) return;
  const float y = head_rope(p, buf, pos);
  if (is_q)
    q[d] = y;
  else if constexpr (BATCHED)
    kv_write(p, h, pos, y, p.v + so, slot_state<uint16_t>(p.batch, blockIdx.y, 0),
             slot_state<uint16_t>(p.batch, blockIdx.y, 1));
  else
    kv_write(p, h, pos, y, p.v, p.kc, p.vc);
}

// ORCHID_FUSED_QK=0, step 1: q normed in place, k normed into p.k_work.
// AttnParams; a block per head (q heads, then KV heads), as the fused kernel.
__global__ void qk_norm_kernel(const __grid_constant__ AttnParams p) {
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  __shared__ float scratch[32];
  const int d = threadIdx.x, hd = p.hd;
  const bool is_q = int(blockIdx.x) < p.n_head;
  const int h = is_q ? blockIdx.x : blockIdx.x - p.n_head;
  float* dst = is_q ? p.qg + size_t(h) * 2 * hd : p.k_work + size_t(h) * hd;
  const float n =
      head_norm(p, is_q ? dst : p.k + size_t(h) * hd, is_q ? p.q_norm : p.k_norm, scratch);
  __syncthreads();  // every thread has read its source (q is rewritten in place)
  if (d < hd) dst[d] = n;
}

// Step 2: RoPE in place on the normed q and k.
// AttnParams; a block per head (q heads, then KV heads), as the fused kernel.
__global__ void qk_rope_kernel(const __grid_constant__ AttnParams p) {
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  __shared__ float buf[kMaxHeadDim];
  const int d = threadIdx.x, hd = p.hd;
  const bool is_q = int(blockIdx.x) < p.n_head;
  const int h = is_q ? blockIdx.x : blockIdx.x - p.n_head;
  float* x = is_q ? p.qg + size_t(h) * 2 * hd : p.k_work + size_t(h) * hd;
  if (d < hd) buf[d] = x[d];
  __syncthreads();
  if (d < hd) x[d] = head_rope(p, buf, *p.pos);
}

// Step 3: block per KV head, K from p.k_work and V into the caches.
// AttnParams: row *pos of kc / vc; n_head_kv blocks.
__global__ void kv_write_kernel(const __grid_constant__ AttnParams p) {
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  const int h = blockIdx.x;
  if (int(threadIdx.x) < p.hd)
    kv_write(p, h, *p.pos, p.k_work[size_t(h) * p.hd + threadIdx.x], p.v, p.kc, p.vc);
}

}  // namespace

Status launch_qk_norm_rope_kv(const AttnParams& p, cudaStream_t s) {
  if (p.hd > kMaxHeadDim || p.hd % 8 != 0) return err("attention: head_dim ", p.hd);
  const int threads = (p.hd + 31) / 32 * 32;
  const dim3 heads(p.n_head + p.n_head_kv);
  if (p.batch.slots > 1) {
    if (p.k_work) return err("qk norm + rope + kv write: a batch takes the fused kernel only");
    return launch("qk norm + rope + kv write", qk_norm_rope_kv_kernel<true>,
                  dim3(heads.x, p.batch.slots), dim3(threads), 0, s, p);
  }
  if (!p.k_work)
    return launch("qk norm + rope + kv write", qk_norm_rope_kv_kernel<false>, heads, dim3(threads),
                  0, s, p);
  ORCHID_TRY(launch("qk norm", qk_norm_kernel, heads, dim3(threads), 0, s, p));
  ORCHID_TRY(launch("qk rope", qk_rope_kernel, heads, dim3(threads), 0, s, p));
  return launch("kv write", kv_write_kernel, dim3(p.n_head_kv), dim3(threads), 0, s, p);
}

}  // namespace orchid::cuda
