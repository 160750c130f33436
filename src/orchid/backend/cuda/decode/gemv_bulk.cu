// The lm_head GEMV (248,320 q4 rows of 2,048 columns, 286 MB a step) as a bulk-copy stream on
// Hopper: one block an SM walks chunks of kRows rows (block b takes chunks b, b + G, …, so the
// grid reads one contiguous stretch at a time) through kStages shared-memory stages that the copy
// engine (TMA) fills: ~180 KB in flight an SM, where the register stream (decode/gemv_stream.cu) holds
// ~64 KB in registers. Each chunk is two bulk copies (its rows' 16-byte units, then their
// (scale, bias) words; both contiguous in the MLX layout). The first stages are requested before
// the dependency wait; a stage is refilled by the last warp to finish reading it, so no thread
// waits to produce. Products on dp4a (decode/dp4a_q4.cuh); epilogues as the register stream's: store, or
// argmax / sampling with the id handed to the next step.
//
// Measured on the H200 (session 11, launches back to back): 68.8-69.5 µs, 92 % of the read
// ceiling, against the register stream's 80 µs (79 %); the decode step at 4K gains 1.0 %.
// Devices without sm_90a code run the register stream.
#include <atomic>

#include "orchid/backend/cuda/decode/dp4a_q4.cuh"
#include "orchid/backend/cuda/common/mma_sync.cuh"
#include "orchid/backend/cuda/common/wgmma.cuh"

namespace orchid::cuda {
namespace {

std::atomic<bool> g_bulk{true};

constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr int kNi = 2;               // 16-byte units per lane: 32 lanes × 2 × 32 = 2,048 columns
constexpr int kUnits = 32 * kNi;     // units a row
constexpr int kGroups = kUnits / 2;  // (scale, bias) words a row: a group of 64 is two units
constexpr int kRowsPerWarp = 2;      // of each stage
constexpr int kRows = kWarps * kRowsPerWarp;  // a chunk: 32 rows, 36,864 bytes
constexpr int kStageUnits = kRows * kUnits * 16, kStageBytes = kStageUnits + kRows * kGroups * 4;
// Stages: 5 (~180 KB in flight); the batched form keeps 4 beside each slot's x̂ codes.
template <bool BATCHED>
constexpr int kStages = BATCHED ? 4 : 5;
template <bool BATCHED>
constexpr int kSlotsOf = BATCHED ? kMaxSlots : 1;

// Dynamic shared memory: the stages, x̂'s codes (one set a slot), then per stage its mbarrier and
// a counter of the warps done reading it.
template <bool BATCHED>
constexpr size_t kXOffset = size_t(kStages<BATCHED>) * kStageBytes;
template <bool BATCHED>
constexpr size_t kBarOffset = kXOffset<BATCHED> + kSlotsOf<BATCHED> * x_quant_smem_bytes(kUnits);
template <bool BATCHED>
constexpr size_t kSmemBytes = kBarOffset<BATCHED> + kStages<BATCHED> * (sizeof(uint64_t) + sizeof(int));

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
// Requests chunk `chunk` into the stage at shared address `stage`, completing on `bar`.
__device__ __forceinline__ void request_chunk(const DevMatrix& m, int chunk, uint32_t stage,
                                              uint32_t bar) {
  const int row0 = chunk * kRows, n = min(kRows, m.rows - row0);
  const uint32_t unit_bytes = uint32_t(n) * kUnits * 16, sb_bytes = uint32_t(n) * kGroups * 4;
  mbar_arrive_expect_tx(bar, unit_bytes + sb_bytes);
  bulk_copy_to_shared(stage, static_cast<const uint4*>(m.w) + int64_t(row0) * kUnits, unit_bytes,
                      bar);
  bulk_copy_to_shared(stage + kStageUnits, m.sb + int64_t(row0) * kGroups, sb_bytes, bar);
}
#endif

// GemvParams, one task: q4 in groups of 64, 2,048 columns. A block an SM (512 threads) walks
// chunks of kRows rows as above; dynamic shared memory kSmemBytes. sm_90a code only.
// BATCHED (argmax only): the weights are read once for p.batch.slots inputs (slot b's x, flags
// and token at b · stride); each stage's rows are multiplied with every live slot's x̂ in turn,
// each product the batch-1 kernel's, and every slot gets its own pick (finish_argmax_slots).
template <bool BATCHED>
__global__ void __launch_bounds__(kThreads, 1)
    bulk_gemv_kernel(const __grid_constant__ GemvParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int NS = kSlotsOf<BATCHED>, S = kStages<BATCHED>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float scratch[32];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBarOffset<BATCHED>);
  int* done = reinterpret_cast<int*>(full + S);
  const uint32_t stages = smem_addr(smem), bars = smem_addr(full);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const GemvTask& tk = p.task[0];
  const int rows = tk.m.rows, n_chunk = (rows + kRows - 1) / kRows;
  const int grid = int(gridDim.x), mine = (n_chunk - int(blockIdx.x) + grid - 1) / grid;
  const int slots = BATCHED ? p.batch.slots : 1;
  auto x_codes = [&](int b) {
    return reinterpret_cast<int4*>(smem + kXOffset<BATCHED> + b * x_quant_smem_bytes(kUnits));
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) mbar_init(bars + 8 * s, 1), done[s] = 0;
    fence_proxy_async();  // the copy engine sees the initialised barriers
    for (int j = 0; j < min(S, mine); ++j)
      request_chunk(tk.m, int(blockIdx.x) + j * grid, stages + j * kStageBytes, bars + 8 * j);
  }
  grid_dep_wait();
  grid_dep_release();
  unsigned live = 0;  // slots not halted by an earlier stop id
  for (int b = 0; b < slots; ++b)
    if (!(p.halt && p.halt[int64_t(b) * p.batch.stride])) live |= 1u << b;
  if (live == 0) {
    // The requested stages land in this block's shared memory: keep it until they have.
    if (threadIdx.x == 0)
      for (int j = 0; j < min(S, mine); ++j) mbar_wait(bars + 8 * j, 0);
    return;
  }
  for (int b = 0; b < slots; ++b)  // each ends with a barrier
    if (live >> b & 1)
      stage_x_quant(p.x + int64_t(b) * p.batch.stride, p.cols, p.norm, p.eps, x_codes(b),
                    reinterpret_cast<float2*>(x_codes(b) + 4 * kUnits), nullptr, scratch);
  XQuant<kNi> q;
  if constexpr (!BATCHED)
    load_x_quant<kNi>(x_codes(0), reinterpret_cast<float2*>(x_codes(0) + 4 * kUnits), kUnits,
                      lane, 32, q);

  const bool argmax = p.epilogue == GemvEpilogue::argmax;
  uint64_t key_base[NS];
  float best_v[NS];
  int best_i[NS];
#pragma unroll
  for (int b = 0; b < NS; ++b) {
    best_v[b] = -INFINITY, best_i[b] = 0x7fffffff, key_base[b] = 0;
    if constexpr (BATCHED) {
      const float it = p.slot_inv_temp[b < slots ? b : 0];
      if (b < slots && it > 0.f)
        key_base[b] = p.slot_seed[b] * 0x9e3779b97f4a7c15ull +
                      uint64_t(p.pos[int64_t(b) * p.batch.stride]);
    } else {
      key_base[b] = argmax ? pick_key_base(p) : 0;
    }
  }
  for (int j = 0; j < mine; ++j) {
    const int s = j % S, chunk = int(blockIdx.x) + j * grid;
    mbar_wait(bars + 8 * s, uint32_t(j / S) & 1u);
    // This warp's rows of the stage into registers; past the matrix's end they hold stale bytes
    // whose sums are never stored.
    const uint4* su = reinterpret_cast<const uint4*>(smem + size_t(s) * kStageBytes);
    const uint32_t* ssb =
        reinterpret_cast<const uint32_t*>(smem + size_t(s) * kStageBytes + kStageUnits);
    RowUnits<kNi> w[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i;
#pragma unroll
      for (int k = 0; k < kNi; ++k) {
        w[i].w[k] = su[r * kUnits + lane + 32 * k];
        w[i].sb[k] = ssb[r * kGroups + (lane + 32 * k) / 2];
      }
    }
    // The last warp to finish reading the stage refills it with the chunk S rounds on.
    __syncwarp();
    if (lane == 0) {
      __threadfence_block();
      if (atomicAdd(done + s, 1) == kWarps - 1) {
        done[s] = 0;
        __threadfence_block();
        if (j + S < mine) {
          fence_proxy_async();  // the stage's generic reads before the copy engine's writes
          request_chunk(tk.m, chunk + S * grid, stages + s * kStageBytes, bars + 8 * s);
        }
      }
    }
#pragma unroll
    for (int b = 0; b < NS; ++b) {
      if (!(live >> b & 1)) continue;  // uniform; always false past `slots`
      if constexpr (BATCHED)
        load_x_quant<kNi>(x_codes(b), reinterpret_cast<float2*>(x_codes(b) + 4 * kUnits), kUnits,
                          lane, 32, q);
      float v[kRowsPerWarp];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) v[i] = partial_dot_dp4a<kNi>(w[i], q);
      const int i = reduce_rows<kRowsPerWarp>(v, lane);  // lane's row of the warp's; v[0] its sum
      const int row = chunk * kRows + warp * kRowsPerWarp + i;
      if ((lane & (32 / kRowsPerWarp - 1)) == 0 && row < rows) {
        if constexpr (BATCHED) {
          const float key = pick_key_with(p.slot_inv_temp[b], nullptr, key_base[b], v[0], row);
          if (better(key, row, best_v[b], best_i[b])) best_v[b] = key, best_i[b] = row;
        } else {
          stream_row_out(p, argmax, key_base[0], row, v[0], best_v[0], best_i[0]);
        }
      }
    }
  }
  if constexpr (BATCHED)
    finish_argmax_slots<kThreads>(p, best_v, best_i, live);
  else if (argmax)
    finish_argmax<kThreads>(p, best_v[0], best_i[0]);
#elif __CUDA_ARCH__ >= 900
  __trap();  // Hopper code built without sm_90a features: fail loudly, never skip the rows
#endif
}

template <bool BATCHED>
bool bulk_runs() {
  static const bool runs = [] {
    const auto kernel = bulk_gemv_kernel<BATCHED>;
    const bool ok = sm90a_kernel_runs(reinterpret_cast<const void*>(kernel), kSmemBytes<BATCHED>) &&
                    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(kSmemBytes<BATCHED>)) == cudaSuccess;
    cudaGetLastError();  // the probes' errors, if any, are answered by `ok`
    return ok;
  }();
  return runs;
}

}  // namespace

bool bulk_enabled() {
  return g_bulk.load(std::memory_order_relaxed);
}
void set_bulk_enabled(bool on) {
  g_bulk.store(on, std::memory_order_relaxed);
}

bool bulk_gemv_supported() {
  return bulk_runs<false>();
}

bool bulk_batched_supported() {
  return bulk_runs<true>();
}

Expected<bool> launch_bulk_gemv(const GemvParams& p, cudaStream_t s) {
  const DevMatrix& m = p.task[0].m;
  static_assert(kUnits == 64, "the streaming GEMV's rows: 2,048 columns of q4");
  const bool batched = p.batch.slots > 1;
  if (batched && (p.epilogue != GemvEpilogue::argmax || p.task[0].y || p.allowed ||
                  p.batch.slots > kMaxSlots || !p.slot_inv_temp || !p.slot_seed))
    return err("bulk gemv: a batch takes the plain argmax only, at most ", kMaxSlots, " slots");
  if (!bulk_enabled() || reinterpret_cast<uintptr_t>(m.w) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(m.sb) % 16 != 0 ||
      !(batched ? bulk_batched_supported() : bulk_gemv_supported()))
    return false;
  const int chunks = (m.rows + kRows - 1) / kRows;
  const int blocks = std::max(1, std::min(sm_count(), chunks));
  const auto kernel = batched ? bulk_gemv_kernel<true> : bulk_gemv_kernel<false>;
  if (Status st = launch("bulk gemv", kernel, dim3(blocks), dim3(kThreads),
                         batched ? kSmemBytes<true> : kSmemBytes<false>, s, p);
      !st.ok())
    return st.error();
  return true;
}

}  // namespace orchid::cuda
