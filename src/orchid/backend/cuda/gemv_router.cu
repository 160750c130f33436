// The router (and shared-expert gate) GEMV: q8 rows of 2,048 columns, one row per warp, each
// warp building its own x̂ slice from global memory. A warp's 32 lanes cover every column of a
// row, so the RMSNorm's sum of squares is one warp reduction: no block reduction, no shared
// memory and no barrier stand between the dependency wait and the dot products. The launch moves
// only 0.56 MB, so that latency is its cost (the block-staged dp4a path took 3.2 µs per layer of
// a 4K step, timeline cuda-timeline-2026-11-30-s5.json). Products in fp32 (XSlice, partial_dot).
#include "orchid/backend/cuda/gemv_core.cuh"

namespace orchid::cuda {
namespace {

constexpr int kThreads = 64, kWarps = kThreads / 32;  // small blocks: rows spread over SMs
constexpr DevFormat kF = DevFormat::q8;
constexpr int kE = unit_elems(kF);  // 16 elements per 16-byte unit
constexpr int kNi = 4;              // units per lane: 32 lanes × 4 × 16 = 2,048 columns

__global__ void __launch_bounds__(kThreads)
    warp_norm_gemv_kernel(const __grid_constant__ GemvParams p) {
  const int lane = threadIdx.x & 31;
  const int rr = int(blockIdx.x) * kWarps + int(threadIdx.x >> 5);
  int t = 0, row = rr;  // task and row of rr in the concatenated tasks
  while (t < p.n_task - 1 && row >= p.task[t].m.rows) row -= p.task[t++].m.rows;
  const bool ok = row < p.task[t].m.rows;
  // Before the wait: the row and the norm weights of this lane's columns (unit u: 16u … 16u+15).
  RowUnits<kNi> w = {};
  if (ok) load_units<kF, kNi>(p.task[t].m, row, lane, 32, w);
  float nw[kNi][kE];
#pragma unroll
  for (int j = 0; j < kNi; ++j)
#pragma unroll
    for (int e = 0; e < kE; e += 4) {
      const float4 f = p.norm ? *reinterpret_cast<const float4*>(p.norm + kE * (lane + 32 * j) + e)
                              : make_float4(1.f, 1.f, 1.f, 1.f);
      nw[j][e] = f.x, nw[j][e + 1] = f.y, nw[j][e + 2] = f.z, nw[j][e + 3] = f.w;
    }
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  XSlice<kF, kNi> x;
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kNi; ++j)
#pragma unroll
    for (int e = 0; e < kE; e += 4) {
      const float4 f = *reinterpret_cast<const float4*>(p.x + kE * (lane + 32 * j) + e);
      x.v[j][e] = f.x, x.v[j][e + 1] = f.y, x.v[j][e + 2] = f.z, x.v[j][e + 3] = f.w;
      ss = fmaf(f.x, f.x, fmaf(f.y, f.y, fmaf(f.z, f.z, fmaf(f.w, f.w, ss))));
    }
  const float inv = p.norm ? rsqrtf(warp_sum(ss) / float(p.cols) + p.eps) : 1.f;
#pragma unroll
  for (int j = 0; j < kNi; ++j) {
    x.sum[j] = 0.f;
#pragma unroll
    for (int e = 0; e < kE; ++e) x.v[j][e] *= inv * nw[j][e], x.sum[j] += x.v[j][e];
  }
  const float acc = warp_sum(partial_dot<kF, kNi>(w, x));
  if (lane == 0 && ok) {
    const GemvTask& tk = p.task[t];
    tk.y[row] = tk.add ? tk.add[row] + acc : acc;
  }
}

}  // namespace

Expected<bool> launch_router_gemv(const GemvParams& p, cudaStream_t s) {
  const DevMatrix& m = p.task[0].m;
  if (!dp4a_enabled() || p.epilogue != GemvEpilogue::store || m.fmt != kF || m.units != 32 * kNi ||
      p.cols != 32 * kNi * kE)
    return false;
  int total = 0;
  for (int t = 0; t < p.n_task; ++t) total += p.task[t].m.rows;
  if (Status st = launch("router gemv", warp_norm_gemv_kernel, dim3((total + kWarps - 1) / kWarps),
                         dim3(kThreads), 0, s, p);
      !st.ok())
    return st.error();
  return true;
}

}  // namespace orchid::cuda
