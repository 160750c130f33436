// Prefill routing on the device: top-k per token (the decode router's block routine), then the
// (token, slot) pairs sorted by expert — counts, an exclusive scan, a stable per-expert
// compaction in token order — and the map of fixed-size row tiles the grouped expert GEMMs walk.
// Integer counts and a token-ordered compaction: the same sorted order on every run.
#include "orchid/backend/cuda/decode/moe_core.cuh"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {
namespace {

constexpr int kTopKThreads = 128;

// One block per token: route_block over the token's logits row; sel / sel_w [T, top_k + 1].
// MoeRouting: logits [T, n_expert + 1] → sel, sel_w.
__global__ void __launch_bounds__(kTopKThreads) kernel_topk(const __grid_constant__ MoeRouting r) {
  __shared__ int sel[32];
  __shared__ float w[32];
  MoeParams p;
  p.logits = r.logits + size_t(blockIdx.x) * (r.n_expert + 1);
  p.n_expert = r.n_expert, p.top_k = r.top_k;
  route_block(p, sel, w);
  const int slots = r.top_k + 1;
  if (int(threadIdx.x) < slots) {
    r.sel[size_t(blockIdx.x) * slots + threadIdx.x] = sel[threadIdx.x];
    r.sel_w[size_t(blockIdx.x) * slots + threadIdx.x] = w[threadIdx.x];
  }
}

// counts[e] = pairs routed to stacked expert e (counts zeroed before; the shared expert's only when
// it is stacked).
// MoeRouting: sel [T, top_k + 1] → counts [n_expert + 1]; a thread per (token, slot) pair.
__global__ void kernel_count(const __grid_constant__ MoeRouting r) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, pairs = r.T * (r.top_k + 1);
  if (i < pairs && (r.shared_stacked || r.sel[i] != r.n_expert)) atomicAdd(r.counts + r.sel[i], 1);
}

constexpr int kScanThreads = 1024;

// One block, a thread per stacked expert (n_expert + 1 ≤ 1024): exclusive scans of the counts
// (→ offsets) and of the tiles per expert, then each thread writes its expert's tiles.
// MoeRouting: counts → offsets [n_expert + 1], n_tiles, tile_expert / begin / end.
__global__ void __launch_bounds__(kScanThreads)
    kernel_offsets_tiles(const __grid_constant__ MoeRouting r) {
  __shared__ int warp_tot[2][32];
  const int e = threadIdx.x, n_e = r.n_expert + (r.shared_stacked ? 1 : 0);
  const int lane = e & 31, warp = e >> 5;
  const int count = e < n_e ? r.counts[e] : 0;
  const int tiles = (count + r.tile_rows - 1) / r.tile_rows;
  // Inclusive warp scans of (count, tiles), then the warps' totals.
  int c = count, t = tiles;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int c2 = __shfl_up_sync(0xffffffffu, c, o), t2 = __shfl_up_sync(0xffffffffu, t, o);
    if (lane >= o) c += c2, t += t2;
  }
  if (lane == 31) warp_tot[0][warp] = c, warp_tot[1][warp] = t;
  __syncthreads();
  int c_base = 0, t_base = 0;
  for (int w = 0; w < warp; ++w) c_base += warp_tot[0][w], t_base += warp_tot[1][w];
  const int off = c_base + c - count, tile0 = t_base + t - tiles;
  if (e < n_e) r.offsets[e] = off;
  if (e == n_e - 1) *r.n_tiles = tile0 + tiles;
  for (int j = 0; j < tiles; ++j) {
    const int begin = off + j * r.tile_rows;
    r.tile_expert[tile0 + j] = e;
    r.tile_begin[tile0 + j] = begin;
    r.tile_end[tile0 + j] = min(begin + r.tile_rows, off + count);
  }
}

constexpr int kSortThreads = 256;

// One block per stacked expert: the tokens routed to it, in token order, at offsets[e] onward.
// A token holds an expert in at most one slot (top-k ids are distinct; the shared expert is
// n_expert).
// MoeRouting: sel, sel_w [T, top_k + 1] → pair_token / pair_slot / pair_w [pairs].
__global__ void __launch_bounds__(kSortThreads)
    kernel_compact(const __grid_constant__ MoeRouting r) {
  __shared__ int warp_n[kSortThreads / 32];
  const int e = blockIdx.x, slots = r.top_k + 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int base = r.offsets[e];
  for (int t0 = 0; t0 < r.T; t0 += kSortThreads) {
    const int t = t0 + int(threadIdx.x);
    int slot = -1;
    if (t < r.T)
      for (int s = 0; s < slots; ++s)
        if (r.sel[size_t(t) * slots + s] == e) slot = s;
    const unsigned hit = __ballot_sync(0xffffffffu, slot >= 0);
    if (lane == 0) warp_n[warp] = __popc(hit);
    __syncthreads();
    int before = __popc(hit & ((1u << lane) - 1u)), total = 0;
    for (int w = 0; w < kSortThreads / 32; ++w) {
      if (w < warp) before += warp_n[w];
      total += warp_n[w];
    }
    if (slot >= 0) {
      const int j = base + before;
      r.pair_token[j] = t;
      r.pair_slot[j] = slot;
      r.pair_w[j] = r.sel_w[size_t(t) * slots + slot];
    }
    base += total;
    __syncthreads();  // warp_n is rewritten next round
  }
}

}  // namespace

Status launch_moe_route_sort(const MoeRouting& r, cudaStream_t s) {
  if (r.T < 1 || r.n_expert < 1 || r.n_expert + 1 > kScanThreads || r.top_k < 1 ||
      r.top_k > r.n_expert || r.top_k + 1 > 32 || r.tile_rows < 1)
    return err("moe routing: ", r.T, " tokens, ", r.n_expert, " experts, top ", r.top_k,
               " is not supported");
  if (!r.logits || !r.pair_token || !r.pair_slot || !r.pair_w || !r.sel || !r.sel_w || !r.counts ||
      !r.offsets || !r.n_tiles || !r.tile_expert || !r.tile_begin || !r.tile_end)
    return err("moe routing: a buffer is missing");
  const int64_t pairs = int64_t(r.T) * (r.top_k + 1);
  if (r.max_tiles < pairs / r.tile_rows + r.n_expert + 1)
    return err("moe routing: ", r.max_tiles, " tiles cannot hold ", pairs, " pairs");
  kernel_topk<<<r.T, kTopKThreads, 0, s>>>(r);
  ORCHID_TRY(last_launch("moe top-k"));
  if (cudaError_t e = cudaMemsetAsync(r.counts, 0, sizeof(int) * (r.n_expert + 1), s);
      e != cudaSuccess)
    return err("moe routing: ", cudaGetErrorString(e));
  kernel_count<<<int((pairs + 255) / 256), 256, 0, s>>>(r);
  ORCHID_TRY(last_launch("moe expert counts"));
  kernel_offsets_tiles<<<1, kScanThreads, 0, s>>>(r);
  ORCHID_TRY(last_launch("moe offsets and tiles"));
  kernel_compact<<<r.n_expert + (r.shared_stacked ? 1 : 0), kSortThreads, 0, s>>>(r);
  return last_launch("moe pair sort");
}

}  // namespace orchid::cuda
