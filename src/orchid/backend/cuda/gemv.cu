// Batch-1 GEMV over up to four matrices sharing one input, with the RMSNorm prologue and two
// epilogues: store (+ residual) and lm_head argmax / Gumbel-max sampling with the chosen id
// handed to the next step.
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

template <DevFormat F, int NI>
__global__ void __launch_bounds__(kThreads, NI <= 2 ? 2 : 1)
    gemv_kernel(const __grid_constant__ GemvParams p, int lpr) {
  constexpr int E = unit_elems(F);
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  __shared__ float scratch[32];
  const int units = (p.cols + E - 1) / E;
  const int warp = threadIdx.x >> 5;
  const SubGroup sg(lpr);
  const int subs = sg.subs, sub = sg.sub, sl = sg.sl;
  const unsigned mask = sg.mask;

  int end[kMaxGemvTasks];
  int total = 0;
#pragma unroll
  for (int t = 0; t < kMaxGemvTasks; ++t) {
    if (t < p.n_task) total += p.task[t].m.rows;
    end[t] = total;
  }
  const int stride = gridDim.x * kWarps * subs;
  // R rows per iteration, and the next iteration's rows loaded before this one's math, so that
  // two iterations of loads are in flight per sub-group.
  constexpr int R = NI <= 1 ? 4 : 2;
  struct Batch {
    RowUnits<NI> w[R];
    int task[R], row[R];
  };
  auto fetch = [&](int r0, Batch& b) {
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int rr = r0 + i * stride;
      int t = 0;
#pragma unroll
      for (int q = 0; q < kMaxGemvTasks - 1; ++q) t += rr >= end[q];
      b.task[i] = t;
      b.row[i] = rr - (t ? end[t - 1] : 0);
      if (rr < total) load_units<F, NI>(p.task[t].m, b.row[i], sl, lpr, b.w[i]);
    }
  };
  // The first rows' weights are requested before waiting for the previous kernel (they do not
  // depend on it), so that their latency overlaps its tail.
  const int first = (blockIdx.x * kWarps + warp) * subs + sub;
  Batch cur;
  if (first < total) fetch(first, cur);
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  XSlice<F, NI> x;
  stage_slice<F, NI>(p.x, p.cols, units, p.norm, p.eps, xs, scratch, sg, x);

  const bool argmax = p.epilogue == GemvEpilogue::argmax;
  float best_v = -INFINITY;
  int best_i = 0x7fffffff;
  uint64_t key_base = 0;
  if (argmax && p.inv_temp > 0.f) key_base = p.seed * 0x9e3779b97f4a7c15ull + uint64_t(*p.pos);

  for (int r0 = first; r0 < total; r0 += R * stride) {
    Batch next;
    if (r0 + R * stride < total) fetch(r0 + R * stride, next);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int rr = r0 + i * stride;
      if (rr >= total) break;
      const GemvTask& tk = p.task[cur.task[i]];
      const int row = cur.row[i];
      float acc = partial_dot<F, NI>(cur.w[i], x);
      acc = subgroup_sum(acc, lpr, mask);
      if (sl != 0) continue;
      if (!argmax) {
        tk.y[row] = tk.add ? tk.add[row] + acc : acc;
      } else {
        if (tk.y) tk.y[row] = acc;
        float key = acc;
        if (p.inv_temp > 0.f) {
          const float u = uniform01(key_base ^ (uint64_t(rr) * 0xd1b54a32d192ed03ull));
          key = acc * p.inv_temp - logf(-logf(u));
        }
        if (better(key, rr, best_v, best_i)) best_v = key, best_i = rr;
      }
    }
    cur = next;
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
  {
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
  const size_t smem = x_hat_smem_bytes(F, units);
  const int fit = sm_count() * resident_blocks(reinterpret_cast<const void*>(gemv_kernel<F, NI>),
                                               kThreads, smem);
  return launch("gemv", gemv_kernel<F, NI>, dim3(std::min(blocks, fit)), dim3(kThreads), smem, s, p,
                lpr);
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
