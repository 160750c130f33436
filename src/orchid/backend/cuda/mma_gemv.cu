// The q4 (group 64) batch-1 GEMV on the tensor cores for launches of at least mma_min_rows()
// rows (ORCHID_MMA=0: gemv.cu's CUDA-core kernel always). Work is cut into units of 16 rows × one
// segment of 8 groups (512 columns); a block's 8 warps take the segments of 8 / S tiles at once (S
// segments per row), so one round covers 16 · 8 / S rows and ends with a reduction of the segments'
// partial sums in shared memory. A warp's next unit is loaded into registers (8-byte loads of its
// mma fragments, straight from the MLX layout) before the current one is multiplied, and the first
// unit before the kernel waits for the previous one; x̂ is staged once per block (mma_q4.cuh).
#include <algorithm>
#include <atomic>

#include "orchid/backend/cuda/mma_q4.cuh"

namespace orchid::cuda {

namespace {
std::atomic<bool> g_mma{true};
// Where the tensor cores pay (measured, docs/perf-notes.md): the lm_head (248,320 rows) went from
// 0.204 to 0.153 ms, while the 12,352-row DeltaNet in-projection went from 0.552 to 0.600 ms —
// small launches are latency-bound and the fp16 staging of x̂ adds to their prologue.
std::atomic<int> g_mma_min_rows{32768};
}  // namespace
bool mma_enabled() {
  return g_mma.load(std::memory_order_relaxed);
}
void set_mma_enabled(bool on) {
  g_mma.store(on, std::memory_order_relaxed);
}
int mma_min_rows() {
  return g_mma_min_rows.load(std::memory_order_relaxed);
}
void set_mma_min_rows(int rows) {
  g_mma_min_rows.store(rows, std::memory_order_relaxed);
}

namespace {

constexpr int kThreads = kPickThreads, kWarps = kThreads / 32;
constexpr int kMaxCols = kWarps * kSegGroups * kMmaGroup;

__global__ void __launch_bounds__(kThreads, 2)
    mma_gemv_kernel(const __grid_constant__ GemvParams p, int segs, int rounds) {
  extern __shared__ float4 smem4[];
  __shared__ float scratch[32];
  __shared__ float red[kWarps][16];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int groups = p.cols / kMmaGroup;
  const int tiles_per_round = kWarps / segs;
  const int seg = warp % segs, tile_in_round = warp / segs;

  // Tiles of 16 rows, task after task.
  int tile_end[kMaxGemvTasks], row_end[kMaxGemvTasks];
  int n_tiles = 0, n_rows = 0;
#pragma unroll
  for (int k = 0; k < kMaxGemvTasks; ++k) {
    if (k < p.n_task) n_tiles += (p.task[k].m.rows + 15) / 16, n_rows += p.task[k].m.rows;
    tile_end[k] = n_tiles, row_end[k] = n_rows;
  }
  auto task_of_tile = [&](int tile) {
    int k = 0;
#pragma unroll
    for (int q = 0; q < kMaxGemvTasks - 1; ++q) k += tile >= tile_end[q];
    return k;
  };
  // Loads this warp's unit of round r (nothing past the last tile; rows past a task's end read
  // its last row, their results are dropped).
  auto load = [&](int r, MmaUnit& u) {
    const int tile = r * tiles_per_round + tile_in_round;
    if (tile >= n_tiles) return;
    const int k = task_of_tile(tile);
    const DevMatrix& m = p.task[k].m;
    const int row0 = (tile - (k ? tile_end[k - 1] : 0)) * 16;
    load_mma_unit(m, min(row0 + g, m.rows - 1), min(row0 + g + 8, m.rows - 1), seg * kSegGroups,
                  groups, u);
  };

  MmaUnit cur, nxt;
  int r = blockIdx.x;
  if (r < rounds) load(r, cur);
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;

  // x̂: fp32 staging (with the fused RMSNorm), then the tensor-core copy.
  float* xs = reinterpret_cast<float*>(smem4);
  const int xs_units = groups * 2;
  stage_x_hat(p.x, p.cols, xs_units, 32, p.norm, p.eps, xs, scratch);
  MmaX x;
  x.h = reinterpret_cast<uint32_t*>(xs + xs_units * smem_unit_stride(32));
  x.sum = reinterpret_cast<float*>(x.h + groups * kMmaXWords);
  x.k = x.sum + groups;
  stage_mma_x(xs, groups, x, scratch);

  const bool argmax = p.epilogue == GemvEpilogue::argmax;
  const uint64_t key_base = argmax ? pick_key_base(p) : 0;
  float best_v = -INFINITY;
  int best_i = 0x7fffffff;
  for (; r < rounds; r += gridDim.x) {
    if (r + int(gridDim.x) < rounds) load(r + gridDim.x, nxt);
    float acc[2] = {0.f, 0.f};
    const int tile = r * tiles_per_round + tile_in_round;
    if (tile < n_tiles) mma_unit(cur, seg * kSegGroups, groups, x, acc);
    __syncthreads();  // the previous round's sums have been read
    if (t == 0) red[warp][g] = acc[0], red[warp][g + 8] = acc[1];
    __syncthreads();
    if (int(threadIdx.x) < tiles_per_round * 16) {
      // Thread i: row i % 16 of the round's tile i / 16; its segments in order.
      const int ti = threadIdx.x >> 4, row_in = threadIdx.x & 15;
      const int tl = r * tiles_per_round + ti;
      if (tl < n_tiles) {
        float v = 0.f;
        for (int s = 0; s < segs; ++s) v += red[ti * segs + s][row_in];
        const int k = task_of_tile(tl);
        const int row = (tl - (k ? tile_end[k - 1] : 0)) * 16 + row_in;
        const GemvTask& tk = p.task[k];
        if (row < tk.m.rows) {
          if (!argmax) {
            tk.y[row] = tk.add ? tk.add[row] + v : v;
          } else {
            if (tk.y) tk.y[row] = v;
            const int rr = (k ? row_end[k - 1] : 0) + row;
            const float key = pick_key(p, key_base, v, rr);
            if (better(key, rr, best_v, best_i)) best_v = key, best_i = rr;
          }
        }
      }
    }
    cur = nxt;
  }
  if (argmax) finish_argmax(p, best_v, best_i);
}

}  // namespace

Expected<bool> launch_mma_gemv(const GemvParams& p, cudaStream_t s) {
  const DevMatrix& m0 = p.task[0].m;
  if (m0.fmt != DevFormat::q4 || m0.group != kMmaGroup || p.cols % kMmaGroup || p.cols > kMaxCols)
    return false;
  for (int k = 0; k < p.n_task; ++k)
    if (p.task[k].m.group != kMmaGroup) return false;
  const int groups = p.cols / kMmaGroup;
  int segs = 1;
  while (segs * kSegGroups < groups) segs *= 2;
  int tiles = 0, rows = 0;
  for (int k = 0; k < p.n_task; ++k)
    tiles += (p.task[k].m.rows + 15) / 16, rows += p.task[k].m.rows;
  if (rows < mma_min_rows()) return false;
  const int rounds = (tiles + kWarps / segs - 1) / (kWarps / segs);
  const size_t smem =
      size_t(groups * 2) * smem_unit_stride(32) * sizeof(float) + mma_x_bytes(groups);
  const int fit =
      sm_count() * resident_blocks(reinterpret_cast<const void*>(mma_gemv_kernel), kThreads, smem);
  const int blocks = std::max(1, std::min(rounds, fit));
  if (Status st = launch("mma gemv", mma_gemv_kernel, dim3(blocks), dim3(kThreads), smem, s, p,
                         segs, rounds);
      !st.ok())
    return st.error();
  return true;
}

}  // namespace orchid::cuda
