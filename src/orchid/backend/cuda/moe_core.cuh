// Shared by the expert kernels (moe.cu, moe_dp4a.cu): routing on the device, the activation
// layout, and the dp4a launchers.
#pragma once

#include "orchid/backend/cuda/gemv_core.cuh"

namespace orchid::cuda {

// MoE routing by one block (blockDim ≥ 32): softmax over n_expert logits; the top_k by rank
// (how many beat an expert: higher probability, or equal with a lower id — the CPU's order),
// computed by all threads at once in two levels: each expert's rank within its chunk of 32, then
// the chunk winners' ranks among all chunk winners (every global top-k expert wins in its chunk,
// and those it loses to are winners too), 32 + chunks·k comparisons per thread instead of
// n_expert. Renormalised weights; slot top_k is the shared expert (id n_expert) with its
// sigmoid gate. Results in shared memory (sel, w). Ends with a barrier.
// PRECONDITION: n_expert ≤ 1024, top_k ≤ 31.
__device__ __forceinline__ void route_block(const MoeParams& p, int* sel, float* w) {
  const float* logits = p.logits;
  const int E = p.n_expert, k = p.top_k;
  __shared__ float prob[1024];
  __shared__ float cand_v[1024];  // chunk winners: [chunk][local rank < k]
  __shared__ int cand_e[1024];
  __shared__ float scratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = (blockDim.x + 31) >> 5;
  const int n_chunk = (E + 31) / 32, n_cand = n_chunk * k;
  float mx = -INFINITY;
  for (int e = threadIdx.x; e < E; e += blockDim.x) mx = fmaxf(mx, logits[e]);
  mx = warp_max(mx);
  if (lane == 0) scratch[warp] = mx;
  __syncthreads();
  mx = warp_max(lane < n_warp ? scratch[lane] : -INFINITY);
  float sum = 0.f;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const float v = expf(logits[e] - mx);
    prob[e] = v;
    sum += v;
  }
  for (int i = threadIdx.x; i < n_cand; i += blockDim.x) cand_v[i] = -1.f, cand_e[i] = 0x7fffffff;
  sum = block_sum(sum, scratch);  // barrier inside: prob[] and the empty winners complete
  for (int e = threadIdx.x; e < E; e += blockDim.x) prob[e] /= sum;
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const float v = prob[e];
    const int c0 = e & ~31, c1 = min(E, c0 + 32);
    int rank = 0;
    for (int o = c0; o < c1; ++o) {
      const float u = prob[o];
      rank += (u > v) || (u == v && o < e);
    }
    if (rank < k) cand_v[(c0 >> 5) * k + rank] = v, cand_e[(c0 >> 5) * k + rank] = e;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n_cand; i += blockDim.x) {
    const float v = cand_v[i];
    const int e = cand_e[i];
    if (v < 0.f) continue;  // a chunk with fewer than k experts
    int rank = 0;
#pragma unroll 8
    for (int j = 0; j < n_cand; ++j) {
      const float u = cand_v[j];
      rank += (u > v) || (u == v && cand_e[j] < e);
    }
    if (rank < k) w[rank] = v, sel[rank] = e;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float top_sum = 0.f;
    for (int i = 0; i < k; ++i) top_sum += w[i];
    for (int i = 0; i < k; ++i) w[i] /= top_sum;
    sel[k] = E;
    w[k] = sigmoid(logits[E]);
  }
  __syncthreads();
}

// The stacked expert of each slot of this launch in sel[] (shared memory, relative to
// expert_base): routed here from p.logits (block 0 also publishes p.sel / p.sel_w for the down
// launch), or read from p.sel. Called after the dependency wait; ends with a barrier.
__device__ __forceinline__ void slot_experts(const MoeParams& p, int* sel, float* sel_w) {
  if (p.logits) {
    route_block(p, sel, sel_w);
    if (blockIdx.x == 0 && int(threadIdx.x) <= p.top_k)
      p.sel[threadIdx.x] = sel[threadIdx.x], p.sel_w[threadIdx.x] = sel_w[threadIdx.x];
    if (int(threadIdx.x) < p.n_slot) sel[threadIdx.x] -= p.expert_base;  // slot_begin is 0
  } else if (int(threadIdx.x) < p.n_slot) {
    sel[threadIdx.x] = p.sel[p.slot_begin + threadIdx.x] - p.expert_base;
  }
  __syncthreads();
}

// Activation row stride: n_ff rounded up to the widest unit, so every slot's row is aligned.
inline int act_stride_of(const MoeParams& p) {
  return (p.n_ff + 31) / 32 * 32;
}

// The dp4a expert kernels (moe_dp4a.cu) for p, validated by the moe.cu launchers. Return false
// when p is not a launch they take (the callers fall back to the fp32 kernels).
Expected<bool> launch_moe_gate_up_dp4a(const MoeParams& p, cudaStream_t s);
Expected<bool> launch_moe_down_dp4a(const MoeParams& p, cudaStream_t s);

}  // namespace orchid::cuda
