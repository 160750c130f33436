// Batch-1 GEMV over up to four matrices sharing one input, with the RMSNorm prologue and two
// epilogues: store (+ residual) and lm_head argmax / Gumbel-max sampling with the chosen id
// handed to the next step.
#include <algorithm>

#include "orchid/backend/cuda/decode/gemv_core.cuh"

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

constexpr int kThreads = kPickThreads, kWarps = kThreads / 32;
constexpr int kBlocksPerSm = 4;

// GemvParams; F the tasks' format, NI 16-byte units a lane, lpr lanes a row (sub-groups of
// a warp). Sub-groups stride over the tasks' rows, concatenated; dynamic shared memory: x̂.
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
  const uint64_t key_base = argmax ? pick_key_base(p) : 0;

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
        const float key = pick_key(p, key_base, acc, rr);
        if (better(key, rr, best_v, best_i)) best_v = key, best_i = rr;
      }
    }
    cur = next;
  }
  if (p.epilogue == GemvEpilogue::store) return;

  finish_argmax(p, sl == 0 ? best_v : -INFINITY, sl == 0 ? best_i : 0x7fffffff);
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
  if (Expected<bool> done = launch_stream_gemv(p, s); !done)
    return done.error();
  else if (*done)
    return {};
  Expected<bool> done = launch_upfront_gemv(p, s);
  if (!done) return done.error();
  if (*done) return {};
  if (p.batch.slots > 1)
    return err("gemv: no batched kernel for ", total_rows(p), " rows of ", p.cols, " columns");
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
