// Shared by the expert kernels (decode/moe.cu, decode/moe_dp4a.cu): routing on the device, the activation
// layout, and the dp4a launchers.
#pragma once

#include "orchid/backend/cuda/decode/gemv_core.cuh"

namespace orchid::cuda {

// An expert's routing key: larger for a higher logit, then for a lower id (one 64-bit compare
// ranks two experts). The logit's bits are mapped to an order-preserving unsigned value.
__device__ __forceinline__ uint64_t route_key(float logit, int e) {
  uint32_t u = __float_as_uint(logit);
  if (u == 0x80000000u) u = 0;  // -0 ties with +0, as the float comparisons have it
  return uint64_t(u & 0x80000000u ? ~u : u | 0x80000000u) << 32 | uint32_t(~e);
}
__device__ __forceinline__ float route_key_logit(uint64_t key) {
  const uint32_t u = uint32_t(key >> 32);
  return __uint_as_float(u & 0x80000000u ? u & 0x7fffffffu : ~u);
}
__device__ __forceinline__ int route_key_expert(uint64_t key) {
  return int(~uint32_t(key));
}

// MoE routing by one block: the top_k experts by router logit (the softmax is monotonic; ties
// to the lower id — the CPU's order, which ranks the probabilities, differs only where two
// different logits round to one probability), in two levels: each expert's rank within its
// chunk of 32 by one warp's shuffles, then the chunk winners' ranks among all chunk winners
// (every global top-k expert wins in its chunk, and those it loses to are winners too), four
// threads per winner. Weights: the softmax renormalised over the top_k, exp(l_i − l_top) /
// Σ_j exp(l_j − l_top) (the full softmax's denominator cancels); slot top_k is the shared expert
// (id n_expert) with sigmoid(logits[n_expert]). Every logit is requested at once; three barriers.
// Results in shared memory (sel, w). Ends with a barrier.
// PRECONDITION: n_expert ≤ 1024, 1 ≤ top_k ≤ 31, blockDim.x a multiple of 32.
// so: the slot's offset in a batch (kernels.h: SlotBatch; 0 alone).
__device__ __forceinline__ void route_block(const MoeParams& p, int* sel, float* w,
                                            int64_t so = 0) {
  constexpr int kSplit = 4;        // threads ranking one chunk winner
  __shared__ uint64_t cand[1024];  // chunk winners' keys: [chunk][rank in chunk < k]; 0: none
  const float* logits = p.logits + so;
  const int E = p.n_expert, k = p.top_k;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
  const int n_chunk = (E + 31) / 32, n_cand = n_chunk * k;
  const float shared_logit = threadIdx.x == 0 ? logits[E] : 0.f;
  for (int c = warp; c < n_chunk; c += n_warp) {
    const int e = c * 32 + lane;
    const float v = e < E ? logits[e] : -INFINITY;  // past E: after every expert
    int rank = 0;
#pragma unroll
    for (int o = 0; o < 32; ++o) {
      const float u = __shfl_sync(0xffffffffu, v, o);
      rank += (u > v) || (u == v && o < lane);
    }
    if (rank < k) cand[c * k + rank] = e < E ? route_key(v, e) : 0;
  }
  __syncthreads();
  const int part = threadIdx.x % kSplit;
  for (int base = 0; base < n_cand; base += int(blockDim.x) / kSplit) {
    const int i = base + int(threadIdx.x) / kSplit;
    const uint64_t key = i < n_cand ? cand[i] : 0;
    int rank = 0;
#pragma unroll 4
    for (int j = part; j < n_cand; j += kSplit) rank += cand[j] > key;
    rank += __shfl_xor_sync(0xffffffffu, rank, 1);
    rank += __shfl_xor_sync(0xffffffffu, rank, 2);
    if (part == 0 && key != 0 && rank < k)
      w[rank] = route_key_logit(key), sel[rank] = route_key_expert(key);
  }
  __syncthreads();
  if (warp == 0) {
    const float top = w[0];
    const float ex = lane < k ? expf(w[lane] - top) : 0.f;
    const float sum = warp_sum(ex);
    __syncwarp();
    if (lane < k) w[lane] = ex / sum;
    if (lane == 0) sel[k] = E, w[k] = sigmoid(shared_logit);
  }
  __syncthreads();
}

// The stacked expert of each slot of this launch in sel[] (shared memory, relative to
// expert_base): routed here from p.logits (block 0 also publishes p.sel / p.sel_w for the down
// launch), or read from p.sel. Called after the dependency wait; ends with a barrier.
__device__ __forceinline__ void slot_experts(const MoeParams& p, int* sel, float* sel_w,
                                             int64_t so = 0) {
  if (p.logits) {
    route_block(p, sel, sel_w, so);
    if (blockIdx.x == 0 && int(threadIdx.x) <= p.top_k) {
      p.sel[so + threadIdx.x] = sel[threadIdx.x], p.sel_w[so + threadIdx.x] = sel_w[threadIdx.x];
      __threadfence();  // device-wide before the block's barrier (see gate_up_dp4a_kernel)
    }
    if (int(threadIdx.x) < p.n_slot) sel[threadIdx.x] -= p.expert_base;  // slot_begin is 0
  } else if (int(threadIdx.x) < p.n_slot) {
    sel[threadIdx.x] = p.sel[so + p.slot_begin + threadIdx.x] - p.expert_base;
  }
  __syncthreads();
}

// The down kernels' epilogue, once part[s][r] holds slot s's dot product for the block's row
// r0 + r: h[r0 + r] += Σ_s w_s · part[s][r], in slot order (deterministic, no atomics).
template <int ROWS>
__device__ __forceinline__ void add_weighted_slots(const MoeParams& p, int r0,
                                                   const float (&part)[32][ROWS], int64_t so = 0) {
  if (threadIdx.x < ROWS && r0 + int(threadIdx.x) < p.n_embd) {
    float sum = 0.f;
    for (int s = 0; s < p.n_slot; ++s)
      sum = fmaf(p.sel_w[so + p.slot_begin + s], part[s][threadIdx.x], sum);
    p.h[so + r0 + threadIdx.x] += sum;
  }
}

// Activation row stride: n_ff rounded up to the widest unit, so every slot's row is aligned.
__host__ __device__ inline int act_stride_of(const MoeParams& p) {
  return (p.n_ff + 31) / 32 * 32;
}

// The gate/up epilogue for (slot s of this launch, row i): act = silu(g) · u, or (unfused) the
// raw g and u.
__device__ __forceinline__ void store_gate_up(const MoeParams& p, int s, int i, int act_stride,
                                              float g, float u, int64_t so = 0) {
  if (p.gate_up_raw) {
    p.gate_up_raw[(2 * s) * act_stride + i] = g;
    p.gate_up_raw[(2 * s + 1) * act_stride + i] = u;
  } else {
    p.act[so + s * act_stride + i] = silu(g) * u;
  }
}

// The down epilogue of a block's rows [r0, r0 + rows) once part[s][r] holds slot s's dot products:
// h += Σ_s w_s · part[s][r] in slot order, or (unfused) each slot's rows into slot_out.
template <int ROWS>
__device__ __forceinline__ void store_down(const MoeParams& p, int r0,
                                           const float (&part)[32][ROWS], int64_t so = 0) {
  if (p.slot_out) {
    for (int i = threadIdx.x; i < p.n_slot * ROWS; i += blockDim.x) {
      const int s = i / ROWS, r = i % ROWS;
      if (r0 + r < p.n_embd) p.slot_out[size_t(p.slot_begin + s) * p.n_embd + r0 + r] = part[s][r];
    }
    return;
  }
  add_weighted_slots<ROWS>(p, r0, part, so);
}

// The dp4a expert kernels (decode/moe_dp4a.cu) for p, validated by the decode/moe.cu launchers. Return false
// when p is not a launch they take (the callers fall back to the fp32 kernels).
Expected<bool> launch_moe_gate_up_dp4a(const MoeParams& p, cudaStream_t s);
Expected<bool> launch_moe_down_dp4a(const MoeParams& p, cudaStream_t s);

}  // namespace orchid::cuda
