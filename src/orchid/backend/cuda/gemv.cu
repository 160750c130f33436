// Batch-1 GEMV over up to four matrices sharing one input, with the RMSNorm prologue and three
// epilogues: store (+ residual), MoE routing (softmax, top-k, renormalise, shared-expert gate)
// and lm_head argmax / Gumbel-max sampling with the chosen id handed to the next step.
#include <algorithm>

#include "orchid/backend/cuda/gemv_core.cuh"

namespace orchid::cuda {

int sm_count() {
  static const int n = [] {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 1;
    return sms;
  }();
  return n;
}

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kBlocksPerSm = 4;

// Better candidate: larger value, ties to the lower index.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// MoE routing in one block: softmax over n_expert logits, top_k (ties to the lower id) by a
// single warp, renormalised weights; slot top_k is the shared expert with its sigmoid gate.
__device__ void route(const GemvParams& p) {
  const float* logits = p.task[0].y;
  const int E = p.n_expert;
  __shared__ float prob[1024];
  __shared__ float scratch[32];
  float mx = -INFINITY;
  for (int e = threadIdx.x; e < E; e += blockDim.x) mx = fmaxf(mx, logits[e]);
  // block max via the sum helper's pattern
  {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    mx = warp_max(mx);
    __syncthreads();
    if (lane == 0) scratch[warp] = mx;
    __syncthreads();
    mx = warp_max(lane < kWarps ? scratch[lane] : -INFINITY);
  }
  float sum = 0.f;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const float v = expf(logits[e] - mx);
    prob[e] = v;
    sum += v;
  }
  sum = block_sum(sum, scratch);  // ends with all prob[] written (barrier inside)
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  const float inv = 1.f / sum;
  float top_sum = 0.f;
  float chosen_p[32];
  int chosen_e[32];
  for (int k = 0; k < p.top_k; ++k) {
    float bv = -1.f;
    int bi = 0x7fffffff;
    for (int e = lane; e < E; e += 32) {
      const float v = prob[e] * inv;
      if (better(v, e, bv, bi)) bv = v, bi = e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if (lane == 0) prob[bi] = -1.f;  // taken
    __syncwarp();
    if (k < 32) chosen_p[k] = bv, chosen_e[k] = bi;
    top_sum += bv;
  }
  if (lane == 0) {
    for (int k = 0; k < p.top_k && k < 32; ++k) {
      p.sel[k] = chosen_e[k];
      p.sel_w[k] = chosen_p[k] / top_sum;
    }
    p.sel[p.top_k] = E;
    p.sel_w[p.top_k] = sigmoid(logits[E]);
  }
}

template <DevFormat F, int NI>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const __grid_constant__ GemvParams p, int lpr) {
  if (p.halt && *p.halt) return;
  constexpr int E = unit_elems(F);
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  __shared__ float scratch[32];
  const int units = (p.cols + E - 1) / E;
  const int warp = threadIdx.x >> 5;
  const SubGroup sg(lpr);
  const int subs = sg.subs, sub = sg.sub, sl = sg.sl;
  const unsigned mask = sg.mask;
  XSlice<F, NI> x;
  stage_slice<F, NI>(p.x, p.cols, units, p.norm, p.eps, xs, scratch, sg, x);

  int end[kMaxGemvTasks];
  int total = 0;
#pragma unroll
  for (int t = 0; t < kMaxGemvTasks; ++t) {
    if (t < p.n_task) total += p.task[t].m.rows;
    end[t] = total;
  }
  const bool argmax = p.epilogue == GemvEpilogue::argmax;
  float best_v = -INFINITY;
  int best_i = 0x7fffffff;
  uint64_t key_base = 0;
  if (argmax && p.inv_temp > 0.f) key_base = p.seed * 0x9e3779b97f4a7c15ull + uint64_t(*p.pos);

  const int stride = gridDim.x * kWarps * subs;
  // R rows per iteration so that all their loads are in flight before the math.
  constexpr int R = NI <= 2 ? 4 : 2;
  for (int r0 = (blockIdx.x * kWarps + warp) * subs + sub; r0 < total; r0 += R * stride) {
    RowUnits<NI> wv[R];
    int task[R], row[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int rr = r0 + i * stride;
      int t = 0;
#pragma unroll
      for (int q = 0; q < kMaxGemvTasks - 1; ++q) t += rr >= end[q];
      task[i] = t;
      row[i] = rr - (t ? end[t - 1] : 0);
      if (rr < total) load_units<F, NI>(p.task[t].m, row[i], sl, lpr, wv[i]);
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int rr = r0 + i * stride;
      if (rr >= total) break;
      const GemvTask& tk = p.task[task[i]];
      float acc = partial_dot<F, NI>(wv[i], x);
      acc = subgroup_sum(acc, lpr, mask);
      if (sl != 0) continue;
      if (!argmax) {
        tk.y[row[i]] = tk.add ? tk.add[row[i]] + acc : acc;
      } else {
        if (tk.y) tk.y[row[i]] = acc;
        float key = acc;
        if (p.inv_temp > 0.f) {
          const float u = uniform01(key_base ^ (uint64_t(rr) * 0xd1b54a32d192ed03ull));
          key = acc * p.inv_temp - logf(-logf(u));
        }
        if (better(key, rr, best_v, best_i)) best_v = key, best_i = rr;
      }
    }
  }
  if (p.epilogue == GemvEpilogue::store) return;

  __shared__ float cand_v[kThreads];
  __shared__ int cand_i[kThreads];
  __shared__ bool last;
  if (argmax) {
    cand_v[threadIdx.x] = sl == 0 ? best_v : -INFINITY;
    cand_i[threadIdx.x] = sl == 0 ? best_i : 0x7fffffff;
    __syncthreads();
    if (threadIdx.x == 0) {
      float bv = -INFINITY;
      int bi = 0x7fffffff;
      for (int i = 0; i < kThreads; ++i)
        if (better(cand_v[i], cand_i[i], bv, bi)) bv = cand_v[i], bi = cand_i[i];
      p.partial[2 * blockIdx.x] = bv;
      p.partial[2 * blockIdx.x + 1] = __int_as_float(bi);
    }
  }
  // Publish this block's results, then let the last block to finish do the reduction.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(p.ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (p.epilogue == GemvEpilogue::route) {
    route(p);
  } else {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int b = threadIdx.x; b < int(gridDim.x); b += kThreads) {
      const float v = __ldcg(p.partial + 2 * b);
      const int i = __float_as_int(__ldcg(p.partial + 2 * b + 1));
      if (better(v, i, bv, bi)) bv = v, bi = i;
    }
    cand_v[threadIdx.x] = bv;
    cand_i[threadIdx.x] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int i = 0; i < kThreads; ++i)
        if (better(cand_v[i], cand_i[i], bv, bi)) bv = cand_v[i], bi = cand_i[i];
      *p.token = bi;
      for (int s = 0; s < p.n_stop; ++s)
        if (p.stop_ids[s] == bi && p.stopped) *p.stopped = 1;
      ++*p.pos;
    }
  }
  if (threadIdx.x == 0) *p.ticket = 0u;
}

int total_rows(const GemvParams& p) {
  int n = 0;
  for (int t = 0; t < p.n_task; ++t) n += p.task[t].m.rows;
  return n;
}

template <DevFormat F, int NI>
Status launch_ni(const GemvParams& p, int lpr, int blocks, cudaStream_t s) {
  const int units = (p.cols + unit_elems(F) - 1) / unit_elems(F);
  const size_t smem = size_t(units) * unit_elems(F) * sizeof(float);
  gemv_kernel<F, NI><<<blocks, kThreads, smem, s>>>(p, lpr);
  return last_launch("gemv");
}

template <DevFormat F>
Status launch_fmt(const GemvParams& p, int lpr, int ni, int blocks, cudaStream_t s) {
  if (ni <= 1) return launch_ni<F, 1>(p, lpr, blocks, s);
  if (ni <= 2) return launch_ni<F, 2>(p, lpr, blocks, s);
  if (ni <= 4) return launch_ni<F, 4>(p, lpr, blocks, s);
  if constexpr (F != DevFormat::q4) {
    if (ni <= 8) return launch_ni<F, 8>(p, lpr, blocks, s);
  }
  if constexpr (F == DevFormat::bf16) {
    if (ni <= 16) return launch_ni<F, 16>(p, lpr, blocks, s);
  }
  return err("gemv: rows of ", p.cols, " columns are longer than the kernel handles");
}

}  // namespace

int gemv_blocks(const GemvParams& p) {
  if (p.n_task <= 0) return 0;
  const int units = p.task[0].m.units;
  const int subs = 32 / lanes_per_row(units);
  const int want = (total_rows(p) + kWarps * subs - 1) / (kWarps * subs);
  return std::max(1, std::min(want, sm_count() * kBlocksPerSm));
}

Status launch_gemv(const GemvParams& p, cudaStream_t s) {
  if (p.n_task <= 0 || p.n_task > kMaxGemvTasks) return err("gemv: ", p.n_task, " tasks");
  const DevMatrix& m0 = p.task[0].m;
  for (int t = 0; t < p.n_task; ++t) {
    const DevMatrix& m = p.task[t].m;
    if (m.fmt != m0.fmt || m.cols != p.cols || m.units != m0.units)
      return err("gemv: the tasks of one launch must share format and columns");
  }
  if (p.epilogue == GemvEpilogue::route && (p.n_task != 2 || p.n_expert > 1024 || p.top_k > 32 ||
                                            p.task[1].y != p.task[0].y + p.n_expert))
    return err("gemv: routing needs the router and shared-gate tasks with adjacent outputs");
  const int lpr = lanes_per_row(m0.units);
  const int ni = (m0.units + lpr - 1) / lpr;
  const int blocks = gemv_blocks(p);
  switch (m0.fmt) {
    case DevFormat::q4:
      return launch_fmt<DevFormat::q4>(p, lpr, ni, blocks, s);
    case DevFormat::q8:
      return launch_fmt<DevFormat::q8>(p, lpr, ni, blocks, s);
    case DevFormat::bf16:
      return launch_fmt<DevFormat::bf16>(p, lpr, ni, blocks, s);
  }
  return err("gemv: unknown format");
}

}  // namespace orchid::cuda
