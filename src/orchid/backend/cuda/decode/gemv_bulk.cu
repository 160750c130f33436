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
constexpr int kStages = 5;

// Dynamic shared memory: the stages, x̂'s codes, then per stage its mbarrier and a counter of
// the warps done reading it.
constexpr size_t kXOffset = size_t(kStages) * kStageBytes;
constexpr size_t kBarOffset = kXOffset + x_quant_smem_bytes(kUnits);
constexpr size_t kSmemBytes = kBarOffset + kStages * (sizeof(uint64_t) + sizeof(int));

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
__global__ void __launch_bounds__(kThreads, 1)
    bulk_gemv_kernel(const __grid_constant__ GemvParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float scratch[32];
  int4* xq = reinterpret_cast<int4*>(smem + kXOffset);
  float2* xd = reinterpret_cast<float2*>(xq + 4 * kUnits);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBarOffset);
  int* done = reinterpret_cast<int*>(full + kStages);
  const uint32_t stages = smem_addr(smem), bars = smem_addr(full);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const GemvTask& tk = p.task[0];
  const int rows = tk.m.rows, n_chunk = (rows + kRows - 1) / kRows;
  const int grid = int(gridDim.x), mine = (n_chunk - int(blockIdx.x) + grid - 1) / grid;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(bars + 8 * s, 1), done[s] = 0;
    fence_proxy_async();  // the copy engine sees the initialised barriers
    for (int j = 0; j < min(kStages, mine); ++j)
      request_chunk(tk.m, int(blockIdx.x) + j * grid, stages + j * kStageBytes, bars + 8 * j);
  }
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) {
    // The requested stages land in this block's shared memory: keep it until they have.
    if (threadIdx.x == 0)
      for (int j = 0; j < min(kStages, mine); ++j) mbar_wait(bars + 8 * j, 0);
    return;
  }
  stage_x_quant(p.x, p.cols, p.norm, p.eps, xq, xd, nullptr, scratch);  // ends with a barrier
  XQuant<kNi> q;
  load_x_quant<kNi>(xq, xd, kUnits, lane, 32, q);

  const bool argmax = p.epilogue == GemvEpilogue::argmax;
  const uint64_t key_base = argmax ? pick_key_base(p) : 0;
  float best_v = -INFINITY;
  int best_i = 0x7fffffff;
  for (int j = 0; j < mine; ++j) {
    const int s = j % kStages, chunk = int(blockIdx.x) + j * grid;
    mbar_wait(bars + 8 * s, uint32_t(j / kStages) & 1u);
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
    // The last warp to finish reading the stage refills it with the chunk kStages rounds on.
    __syncwarp();
    if (lane == 0) {
      __threadfence_block();
      if (atomicAdd(done + s, 1) == kWarps - 1) {
        done[s] = 0;
        __threadfence_block();
        if (j + kStages < mine) {
          fence_proxy_async();  // the stage's generic reads before the copy engine's writes
          request_chunk(tk.m, chunk + kStages * grid, stages + s * kStageBytes, bars + 8 * s);
        }
      }
    }
    float v[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) v[i] = partial_dot_dp4a<kNi>(w[i], q);
    const int i = reduce_rows<kRowsPerWarp>(v, lane);  // lane's row of the warp's; v[0] its sum
    const int row = chunk * kRows + warp * kRowsPerWarp + i;
    if ((lane & (32 / kRowsPerWarp - 1)) == 0 && row < rows)
      stream_row_out(p, argmax, key_base, row, v[0], best_v, best_i);
  }
  if (argmax) finish_argmax<kThreads>(p, best_v, best_i);
#elif __CUDA_ARCH__ >= 900
  __trap();  // Hopper code built without sm_90a features: fail loudly, never skip the rows
#endif
}

}  // namespace

bool bulk_enabled() {
  return g_bulk.load(std::memory_order_relaxed);
}
void set_bulk_enabled(bool on) {
  g_bulk.store(on, std::memory_order_relaxed);
}

bool bulk_gemv_supported() {
  static const bool runs = [] {
    const auto kernel = bulk_gemv_kernel;
    const bool ok = sm90a_kernel_runs(reinterpret_cast<const void*>(kernel), kSmemBytes) &&
                    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(kSmemBytes)) == cudaSuccess;
    cudaGetLastError();  // the probes' errors, if any, are answered by `ok`
    return ok;
  }();
  return runs;
}

Expected<bool> launch_bulk_gemv(const GemvParams& p, cudaStream_t s) {
  const DevMatrix& m = p.task[0].m;
  static_assert(kUnits == 64, "the streaming GEMV's rows: 2,048 columns of q4");
  if (!bulk_enabled() || reinterpret_cast<uintptr_t>(m.w) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(m.sb) % 16 != 0 || !bulk_gemv_supported())
    return false;
  const int chunks = (m.rows + kRows - 1) / kRows;
  const int blocks = std::max(1, std::min(sm_count(), chunks));
  if (Status st =
          launch("bulk gemv", bulk_gemv_kernel, dim3(blocks), dim3(kThreads), kSmemBytes, s, p);
      !st.ok())
    return st.error();
  return true;
}

}  // namespace orchid::cuda
