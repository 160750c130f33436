// The batch-1 matrix-vector building blocks shared by the GEMV and MoE kernels: dequantizing
// dot products of one 16-byte weight unit, the RMSNorm prologue that stages x̂ in shared
// memory, and a lane's slice of x̂ held in registers across all the rows it visits.
//
// Lane layout: a row is read by a sub-group of `lpr` lanes (32, or fewer for short rows);
// lane `sl` of the sub-group reads units sl, sl + lpr, ..., so a warp's loads of one row are
// contiguous 16-byte pieces. Each lane keeps the x̂ values of its units in registers (NI units
// × unit_elems), so shared memory is read once per warp, not once per row.
#pragma once

#include <cuda_fp16.h>

#include "orchid/backend/cuda/common/device_common.cuh"

namespace orchid::cuda {

// 8 4-bit codes (element k in bits [4k, 4k+4)) · x[0..8). Each code pair becomes an fp16
// 1024 + q (or 1024 + 16q) by OR-ing it into the mantissa, so the conversion is exact and
// takes one logic op per two codes; products and sums stay fp32.
__device__ __forceinline__ float dot_word_q4(uint32_t w, const float* x) {
  const uint32_t kMagic = 0x64006400u;  // fp16 1024.0 in both halves
  const uint32_t w2 = w >> 8;
  uint32_t a = (w & 0x000f000fu) | kMagic;   // elements 0, 4
  uint32_t b = (w & 0x00f000f0u) | kMagic;   // elements 1, 5 (times 16)
  uint32_t c = (w2 & 0x000f000fu) | kMagic;  // elements 2, 6
  uint32_t d = (w2 & 0x00f000f0u) | kMagic;  // elements 3, 7 (times 16)
  const __half2 k1024 = __float2half2_rn(1024.f), k16th = __float2half2_rn(1.f / 16.f),
                km64 = __float2half2_rn(-64.f);
  const float2 fa = __half22float2(__hsub2(*reinterpret_cast<__half2*>(&a), k1024));
  const float2 fb = __half22float2(__hfma2(*reinterpret_cast<__half2*>(&b), k16th, km64));
  const float2 fc = __half22float2(__hsub2(*reinterpret_cast<__half2*>(&c), k1024));
  const float2 fd = __half22float2(__hfma2(*reinterpret_cast<__half2*>(&d), k16th, km64));
  float s0 = fa.x * x[0], s1 = fa.y * x[4];
  s0 = fmaf(fb.x, x[1], s0);
  s1 = fmaf(fb.y, x[5], s1);
  s0 = fmaf(fc.x, x[2], s0);
  s1 = fmaf(fc.y, x[6], s1);
  s0 = fmaf(fd.x, x[3], s0);
  s1 = fmaf(fd.y, x[7], s1);
  return s0 + s1;
}

// 4 8-bit codes (element k in byte k) · x[0..4), the same fp16 trick with byte permutes.
__device__ __forceinline__ float dot_word_q8(uint32_t w, const float* x) {
  uint32_t a = __byte_perm(w, 0x64646464u, 0x4240);  // elements 0, 2
  uint32_t b = __byte_perm(w, 0x64646464u, 0x4341);  // elements 1, 3
  const __half2 k1024 = __float2half2_rn(1024.f);
  const float2 fa = __half22float2(__hsub2(*reinterpret_cast<__half2*>(&a), k1024));
  const float2 fb = __half22float2(__hsub2(*reinterpret_cast<__half2*>(&b), k1024));
  return fmaf(fa.x, x[0], fmaf(fb.x, x[1], fmaf(fa.y, x[2], fb.y * x[3])));
}

__device__ __forceinline__ float dot_word_bf16(uint32_t w, const float* x) {
  return fmaf(bf16_lo(w), x[0], bf16_hi(w) * x[1]);
}

// Σ codes·x over one 16-byte unit (for q4/q8 before scale and bias).
template <DevFormat F>
__device__ __forceinline__ float dot_unit(uint4 u, const float* x) {
  constexpr int kw = unit_elems(F) / 4;  // elements per 32-bit word
  float s;
  if constexpr (F == DevFormat::q4) {
    s = dot_word_q4(u.x, x) + dot_word_q4(u.y, x + kw);
    s += dot_word_q4(u.z, x + 2 * kw) + dot_word_q4(u.w, x + 3 * kw);
  } else if constexpr (F == DevFormat::q8) {
    s = dot_word_q8(u.x, x) + dot_word_q8(u.y, x + kw);
    s += dot_word_q8(u.z, x + 2 * kw) + dot_word_q8(u.w, x + 3 * kw);
  } else {
    s = dot_word_bf16(u.x, x) + dot_word_bf16(u.y, x + kw);
    s += dot_word_bf16(u.z, x + 2 * kw) + dot_word_bf16(u.w, x + 3 * kw);
  }
  return s;
}

// A lane's slice of x̂: NI units of unit_elems values and their sums (for the bias term).
template <DevFormat F, int NI>
struct XSlice {
  float v[NI][unit_elems(F)];
  float sum[NI];

  // From x̂ in memory (shared or global; unit u at xs + u * stride), zero beyond `units`.
  __device__ __forceinline__ void load(const float* xs, int units, int sl, int lpr, int stride) {
    constexpr int E = unit_elems(F);
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const int u = sl + j * lpr;
      sum[j] = 0.f;
#pragma unroll
      for (int e = 0; e < E; e += 4) {
        float4 f = u < units ? *reinterpret_cast<const float4*>(xs + u * stride + e)
                             : make_float4(0.f, 0.f, 0.f, 0.f);
        v[j][e] = f.x, v[j][e + 1] = f.y, v[j][e + 2] = f.z, v[j][e + 3] = f.w;
        sum[j] += (f.x + f.y) + (f.z + f.w);
      }
    }
  }
};

// What one lane reads of one row: NI 16-byte weight units and, for q4/q8, the (scale, bias)
// pair of each. Both are loaded together so that one memory round trip serves the row.
template <int NI>
struct RowUnits {
  uint4 w[NI];
  uint32_t sb[NI];
};

// Loads this lane's units of `row` (zero past the row's end).
template <DevFormat F, int NI>
__device__ __forceinline__ void load_units(const DevMatrix& m, int64_t row, int sl, int lpr,
                                           RowUnits<NI>& r) {
  const uint4* base = static_cast<const uint4*>(m.w) + row * m.units;
  const uint32_t* sb = nullptr;
  if constexpr (F != DevFormat::bf16) sb = m.sb + row * (m.cols / m.group);
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const int u = sl + j * lpr;
    const bool ok = u < m.units;
    r.w[j] = ok ? __ldg(base + u) : make_uint4(0u, 0u, 0u, 0u);
    if constexpr (F != DevFormat::bf16)
      r.sb[j] = ok ? __ldg(sb + (u * unit_elems(F)) / m.group) : 0u;
  }
}

// This lane's part of W[row] · x̂ (sum over the sub-group gives the dot product).
template <DevFormat F, int NI>
__device__ __forceinline__ float partial_dot(const RowUnits<NI>& r, const XSlice<F, NI>& x) {
  float acc = 0.f;
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    if constexpr (F == DevFormat::bf16) {
      acc += dot_unit<F>(r.w[j], x.v[j]);
    } else {
      // Lanes past the row's end hold zero units and a zero (scale, bias): no contribution.
      acc = fmaf(bf16_lo(r.sb[j]), dot_unit<F>(r.w[j], x.v[j]),
                 fmaf(bf16_hi(r.sb[j]), x.sum[j], acc));
    }
  }
  return acc;
}

// Sum over a sub-group of lpr lanes (lpr a power of two ≤ 32; `mask` = the sub-group's lanes).
__device__ __forceinline__ float subgroup_sum(float v, int lpr, unsigned mask) {
  for (int o = lpr >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o);
  return v;
}

// Sums each of D per-lane values over aligned groups of W lanes (D, W powers of two, D ≤ W ≤ 32;
// lane = the lane's index in its group) in D − 1 + log2(W / D) shuffles instead of D log2 W: at
// each halving step a lane keeps half of its values and adds its partner's copy of them.
// Afterwards lane ℓ holds in v[0] the sum for value ℓ / (W / D); returns that index.
template <int D, int W = 32>
__device__ __forceinline__ int reduce_rows(float (&v)[D], int lane) {
  static_assert(D <= W && W <= 32);
  int idx = 0;
#pragma unroll
  for (int n = D, o = W / 2; n > 1; n >>= 1, o >>= 1) {
    const bool upper = lane & o;
#pragma unroll
    for (int k = 0; k < n / 2; ++k) {
      const float send = upper ? v[k] : v[k + n / 2];
      const float keep = upper ? v[k + n / 2] : v[k];
      v[k] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
    idx = 2 * idx + (upper ? 1 : 0);
  }
#pragma unroll
  for (int o = W / 2 / D; o > 0; o >>= 1) v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
  return idx;
}

// The rows of a GEMV launch's tasks, concatenated: end[t] = rows of tasks 0..t; returns all
// of them. Row rr is row rr − task_begin(end, t) of task t = task_of(end, rr).
__device__ __forceinline__ int task_rows(const GemvParams& p, int (&end)[kMaxGemvTasks]) {
  int total = 0;
#pragma unroll
  for (int t = 0; t < kMaxGemvTasks; ++t) {
    if (t < p.n_task) total += p.task[t].m.rows;
    end[t] = total;
  }
  return total;
}
__device__ __forceinline__ int task_of(const int (&end)[kMaxGemvTasks], int rr) {
  int t = 0;
#pragma unroll
  for (int k = 0; k < kMaxGemvTasks - 1; ++k) t += rr >= end[k];
  return t;
}
__device__ __forceinline__ int task_begin(const int (&end)[kMaxGemvTasks], int t) {
  return t ? end[t - 1] : 0;
}

// Where this lane sits: sub-group `sub` of `subs` in its warp, lane `sl` of `lpr` in it.
struct SubGroup {
  int lpr, subs, sub, sl;
  unsigned mask;  // the sub-group's lanes, for shuffles
  __device__ __forceinline__ explicit SubGroup(int lanes_per_row) : lpr(lanes_per_row) {
    const int lane = threadIdx.x & 31;
    subs = 32 / lpr, sub = lane / lpr, sl = lane % lpr;
    mask = lpr == 32 ? 0xffffffffu : ((1u << lpr) - 1u) << (sub * lpr);
  }
};

// Lanes per row for a row of `units` 16-byte units: 32, or the next power of two ≥ units.
inline int lanes_per_row(int units) {
  int l = 1;
  while (l < units && l < 32) l <<= 1;
  return l;
}

// Floats per unit of x̂ in shared memory: 4 of padding per unit, so that the lanes of a warp
// (one unit apart) read 16-byte pieces from distinct banks.
__host__ __device__ constexpr int smem_unit_stride(int unit_elems) {
  return unit_elems + 4;
}

// Stages x̂ = x (· rsqrt(mean(x²) + eps) · norm when norm is given) in shared memory, unit u at
// xs + u · smem_unit_stride(E), zero past `cols`. Ends with a barrier. Each thread's loads of x
// and of the norm weight are issued together (16-byte vectors, unrolled) so the prologue costs
// two memory round trips, not one per element. PRECONDITION: x and norm 16-byte aligned.
__device__ __forceinline__ void stage_x_hat(const float* x, int cols, int units, int E,
                                            const float* norm, float eps, float* xs,
                                            float* scratch) {
  constexpr int kVec = 4;  // float4 per thread per pass: 4096 floats with 256 threads
  const int S = smem_unit_stride(E), padded = units * E;
  const int n4 = cols / 4;  // whole float4s; the (rare) tail is done element-wise
  float ss = 0.f;
  for (int base = 0; base < padded; base += kVec * 4 * int(blockDim.x)) {
    float4 v[kVec], w[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int i4 = base / 4 + k * int(blockDim.x) + int(threadIdx.x);
      v[k] = i4 < n4 ? reinterpret_cast<const float4*>(x)[i4] : make_float4(0.f, 0.f, 0.f, 0.f);
      w[k] = norm && i4 < n4 ? reinterpret_cast<const float4*>(norm)[i4]
                             : make_float4(1.f, 1.f, 1.f, 1.f);
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int i = base + (k * int(blockDim.x) + int(threadIdx.x)) * 4;
      const float a[4] = {v[k].x, v[k].y, v[k].z, v[k].w}, b[4] = {w[k].x, w[k].y, w[k].z, w[k].w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = i + e;
        if (c >= padded) break;
        // Tail elements (cols % 4) are read one by one; past cols is zero padding.
        const float val = c < n4 * 4 ? a[e] : (c < cols ? x[c] : 0.f);
        const float wt = c < n4 * 4 ? b[e] : (norm && c < cols ? norm[c] : 1.f);
        xs[(c / E) * S + c % E] = norm ? val * wt : val;  // scaled by rsqrt below
        ss += val * val;
      }
    }
  }
  if (norm) {
    // Second pass over shared memory only: multiply by the common rsqrt factor.
    const float inv = rsqrtf(block_sum(ss, scratch) / float(cols) + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) xs[(c / E) * S + c % E] *= inv;
  }
  __syncthreads();
}

// The prologue of every GEMV-style kernel: x̂ staged in shared memory (`xs`), then this lane's
// slice of it in registers.
template <DevFormat F, int NI>
__device__ __forceinline__ void stage_slice(const float* x, int cols, int units, const float* norm,
                                            float eps, float* xs, float* scratch,
                                            const SubGroup& sg, XSlice<F, NI>& out) {
  constexpr int E = unit_elems(F);
  stage_x_hat(x, cols, units, E, norm, eps, xs, scratch);
  out.load(xs, units, sg.sl, sg.lpr, smem_unit_stride(E));
}

// Dynamic shared memory for x̂ of `units` units of format F.
inline size_t x_hat_smem_bytes(DevFormat f, int units) {
  return size_t(units) * smem_unit_stride(unit_elems(f)) * sizeof(float);
}

// ---- lm_head pick (argmax or Gumbel-max sampling), shared by the GEMV kernels ----------------

// Better candidate: larger value, ties to the lower index.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// The step's random key base (sampling), from the seed and the token position.
__device__ __forceinline__ uint64_t pick_key_base(const GemvParams& p) {
  return p.inv_temp > 0.f ? p.seed * 0x9e3779b97f4a7c15ull + uint64_t(*p.pos) : 0;
}

// What row `row` with logit `logit` competes with: the logit (greedy), or logit / T plus
// Gumbel noise that depends only on (seed, position, row); -inf for a row the mask refuses.
__device__ __forceinline__ float pick_key_with(float inv_temp, const uint32_t* allowed,
                                               uint64_t key_base, float logit, int row) {
  if (allowed && !(allowed[row >> 5] >> (row & 31) & 1u)) return -INFINITY;
  if (inv_temp <= 0.f) return logit;
  const float u = uniform01(key_base ^ (uint64_t(row) * 0xd1b54a32d192ed03ull));
  return logit * inv_temp - logf(-logf(u));
}
__device__ __forceinline__ float pick_key(const GemvParams& p, uint64_t key_base, float logit,
                                          int row) {
  return pick_key_with(p.inv_temp, p.allowed, key_base, logit, row);
}

// The streaming kernels' per-row epilogue (row `row`, dot product v): y = v (+ add), or for the
// pick the logit stored (when y is given) and the row kept if it beats the thread's best.
__device__ __forceinline__ void stream_row_out(const GemvParams& p, bool argmax, uint64_t key_base,
                                               int row, float v, float& best_v, int& best_i) {
  const GemvTask& tk = p.task[0];
  if (!argmax) {
    tk.y[row] = tk.add ? tk.add[row] + v : v;
    return;
  }
  if (tk.y) tk.y[row] = v;
  const float key = pick_key(p, key_base, v, row);
  if (better(key, row, best_v, best_i)) best_v = key, best_i = row;
}

constexpr int kPickThreads = 256;  // block size of most kernels that call finish_argmax

// After each block has published its part: whether this block is the grid's last to finish (it
// then sees every block's writes). `last`: a shared flag. Called by every thread.
__device__ __forceinline__ bool last_block_to_finish(unsigned* ticket, bool& last) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return false;
  __threadfence();
  return true;
}

// The warp's best (value, index) in every lane, by shuffles: `better` is a total order on the
// pairs, so the tree gives the same winner as a serial scan.
__device__ __forceinline__ void warp_best(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (better(ov, oi, v, i)) v = ov, i = oi;
  }
}

// The block's best (value, index) in thread 0: each warp by shuffles, then warp 0 over the warps'
// bests (through cand_v / cand_i, T / 32 entries). Called by every thread; ends without a barrier
// after warp 0's reads.
template <int T>
__device__ __forceinline__ void block_best(float& v, int& i, float* cand_v, int* cand_i) {
  static_assert(T % 32 == 0 && T <= 1024);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_best(v, i);
  if (lane == 0) cand_v[warp] = v, cand_i[warp] = i;
  __syncthreads();
  if (warp == 0) {
    v = lane < T / 32 ? cand_v[lane] : -INFINITY;
    i = lane < T / 32 ? cand_i[lane] : 0x7fffffff;
    warp_best(v, i);
  }
}

// Every thread passes its best (key, row); the block's best goes to p.partial, and the last
// block to finish reduces all blocks' bests, writes the id to p.token, flags a stop id and
// advances p.pos. Both reductions are shuffle trees (a serial scan of 512 candidates by one
// thread took ~2.5 µs, twice on the step's critical path). PRECONDITION: blockDim.x == T;
// called by every thread.
template <int T = kPickThreads>
__device__ __forceinline__ void finish_argmax(const GemvParams& p, float best_v, int best_i) {
  __shared__ float cand_v[T / 32];
  __shared__ int cand_i[T / 32];
  __shared__ bool last;
  block_best<T>(best_v, best_i, cand_v, cand_i);
  if (threadIdx.x == 0) {
    p.partial[2 * blockIdx.x] = best_v;
    p.partial[2 * blockIdx.x + 1] = __int_as_float(best_i);
  }
  // Publish this block's result, then let the last block to finish do the reduction.
  if (!last_block_to_finish(p.ticket, last)) return;
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int b = threadIdx.x; b < int(gridDim.x); b += T) {
    const float v = __ldcg(p.partial + 2 * b);
    const int i = __float_as_int(__ldcg(p.partial + 2 * b + 1));
    if (better(v, i, bv, bi)) bv = v, bi = i;
  }
  block_best<T>(bv, bi, cand_v, cand_i);  // the barrier above ended warp 0's earlier reads
  if (threadIdx.x == 0) {
    *p.token = bi;
    // The host reads it after an event that follows the step (so no system fence is needed).
    if (p.host_token) p.host_token[*p.pos & 1] = bi;
    for (int s = 0; s < p.n_stop; ++s)
      if (p.stop_ids[s] == bi && p.stopped) *p.stopped = 1;
    ++*p.pos;
    *p.ticket = 0u;
  }
}

// finish_argmax for a batch (kernels.h: SlotBatch): every thread passes its best (key, row) of each
// slot; per live slot (bit b of `live`) the block's best goes to p.partial[b][block], and the last
// block to finish picks each live slot's id as finish_argmax does for one (token, stop flag and
// position at b · stride, host pair at host_token + 2b, stop ids at stop_ids + b · kMaxStopIds).
// PRECONDITION: blockDim.x == T; called by every thread; p.partial holds 2 · slots · gridDim.x.
template <int T>
__device__ __forceinline__ void finish_argmax_slots(const GemvParams& p,
                                                    const float (&best_v)[kMaxSlots],
                                                    const int (&best_i)[kMaxSlots], unsigned live) {
  __shared__ float cand_v[T / 32];
  __shared__ int cand_i[T / 32];
  __shared__ bool last;
  const int grid = int(gridDim.x);
#pragma unroll
  for (int b = 0; b < kMaxSlots; ++b) {
    if (!(live >> b & 1)) continue;  // uniform
    float v = best_v[b];
    int i = best_i[b];
    block_best<T>(v, i, cand_v, cand_i);
    if (threadIdx.x == 0) {
      p.partial[2 * (b * grid + int(blockIdx.x))] = v;
      p.partial[2 * (b * grid + int(blockIdx.x)) + 1] = __int_as_float(i);
    }
    __syncthreads();  // warp 0's reads of cand_* before the next slot's writes
  }
  if (!last_block_to_finish(p.ticket, last)) return;
  for (int b = 0; b < kMaxSlots; ++b) {
    if (!(live >> b & 1)) continue;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int k = threadIdx.x; k < grid; k += T) {
      const float v = __ldcg(p.partial + 2 * (b * grid + k));
      const int i = __float_as_int(__ldcg(p.partial + 2 * (b * grid + k) + 1));
      if (better(v, i, bv, bi)) bv = v, bi = i;
    }
    block_best<T>(bv, bi, cand_v, cand_i);
    if (threadIdx.x == 0) {
      const int64_t so = int64_t(b) * p.batch.stride;
      int* pos = p.pos + so;
      p.token[so] = bi;
      p.host_token[2 * b + (*pos & 1)] = bi;
      for (int s = 0; s < p.n_stop; ++s)
        if (p.stop_ids[b * kMaxStopIds + s] == bi) p.stopped[so] = 1;
      ++*pos;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *p.ticket = 0u;
}

// The dp4a GEMV of decode/gemv_upfront.cu for p (store epilogue; q4 rows of 2,048 or 4,096 columns, q8
// of 2,048; rows for one wave), validated by launch_gemv. Returns false when p is not a launch it
// takes.
Expected<bool> launch_upfront_gemv(const GemvParams& p, cudaStream_t s);

// Each slot's x̂ of p (x + b · stride, normed when p.norm is given) quantised into p.x_codes
// (SlotCodes layout at b · stride), each code as the batch-1 kernels' stage_x_quant makes it;
// word_sums: also the q8 rows' word sums. One block a slot; halted slots are left as they were.
Status launch_quantize_slots(const GemvParams& p, bool word_sums, cudaStream_t s);

// The batched q4 GEMV on the int8 tensor cores (decode/gemv_slots_mma.cu) for p (2+ slots,
// x_codes already quantised, q4 rows of 2,048 or 4,096 columns; `total` rows of all tasks); false
// when switched off (ORCHID_SLOT_MMA=0) or p is not a launch it takes.
Expected<bool> launch_slots_mma_gemv(const GemvParams& p, int total, cudaStream_t s);

// The batched lm_head on the int8 tensor cores with each slot's pick (decode/lm_head_slots.cu)
// for p (2…8 slots, room for x_codes, which it quantises first; one q4 matrix of 2,048 columns,
// argmax without logits or mask); false when switched off (ORCHID_SLOT_MMA=0), the device does
// not run it, or p is not a launch it takes.
Expected<bool> launch_lm_head_slots(const GemvParams& p, cudaStream_t s);

// The streaming dp4a GEMV of decode/gemv_stream.cu for p (one q4 matrix of 2,048 columns and at least
// stream_min_rows() rows: the lm_head), validated by launch_gemv: the bulk-copy form where
// launch_bulk_gemv takes it, else the register form. Returns false when p is not a launch it
// takes.
Expected<bool> launch_stream_gemv(const GemvParams& p, cudaStream_t s);
// The bulk-copy form of decode/gemv_bulk.cu for a launch the streaming GEMV takes; false where it is
// switched off, the device does not run it (bulk_gemv_supported) or the rows are not 16-byte
// aligned.
Expected<bool> launch_bulk_gemv(const GemvParams& p, cudaStream_t s);

// Rows (or row pairs) per warp for `total` of them in one wave of `kernel`'s blocks of `threads`
// threads and `smem` dynamic shared bytes; 0 when that takes more than `max_per_warp`.
inline int rows_per_warp_one_wave(const void* kernel, int threads, size_t smem, int total,
                                  int max_per_warp) {
  const int warps = sm_count() * resident_blocks(kernel, threads, smem) * (threads / 32);
  const int per_warp = (total + warps - 1) / warps;
  return per_warp <= max_per_warp ? per_warp : 0;
}

}  // namespace orchid::cuda
