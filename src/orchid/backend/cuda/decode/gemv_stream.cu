// The dp4a GEMV for long single-matrix launches (the lm_head: 248,320 q4 rows of 2,048 columns,
// 286 MB per step): a pure stream, so what matters is bytes in flight and how few memory
// instructions carry them. Each warp owns rows w, w + W, w + 2W, … (W warps in the grid, so at
// any moment the grid reads one contiguous stretch of rows) and keeps kDepth of them in flight in
// registers: a batch of kDepth rows is multiplied, its slots are refilled with the rows kDepth · W
// further on, and one transposed shuffle reduction sums the whole batch. A lane reads two 16-byte
// units of each row (the warp one 512-byte piece per instruction) and x̂ is quantised once per block
// for dp4a products (decode/dp4a_q4.cuh). Epilogues: store, or argmax / sampling with the id handed to the
// next step (finish_argmax).
//
// The lm_head's earlier tensor-core GEMV reached 46 % of the read ceiling (this kernel: ~70 %, 92 µs
// for 286 MB) and was deleted. On Hopper the bulk-copy stream (decode/gemv_bulk.cu) takes these
// launches; this one runs on devices without sm_90a code.
#include <atomic>

#include "orchid/backend/cuda/decode/dp4a_q4.cuh"

namespace orchid::cuda {
namespace {

std::atomic<int> g_stream_min_rows{32768};

constexpr int kThreads = kPickThreads, kWarps = kThreads / 32;
constexpr int kNi = 2;  // 16-byte units per lane: 32 lanes × 2 × 32 = 2,048 columns
// Rows in flight per warp: 4 (10 registers each beside x̂'s 36; two blocks per SM). Measured on
// the lm_head (H200, 4K step traces): 4 rows with two blocks per SM 92 µs; 8 rows with one
// block 108 µs; 8 rows with two blocks or 4 with three spill registers (130 µs); before the
// batched reduction, 6 rows 96 µs.
constexpr int kDepth = 4;

// GemvParams, one task: q4 in groups of 64, 2,048 columns. Warp w of W takes rows w, w + W,
// …, kDepth in flight; dynamic shared memory: x̂'s codes (x_quant_smem_bytes).
__global__ void __launch_bounds__(kThreads, 2)
    stream_gemv_kernel(const __grid_constant__ GemvParams p) {
  extern __shared__ float4 smem4[];
  __shared__ float scratch[32];
  const int units = p.cols / 32;  // 32-element units of x̂
  int4* xq = reinterpret_cast<int4*>(smem4);
  float2* xd = reinterpret_cast<float2*>(xq + 4 * units);
  const int lane = threadIdx.x & 31;
  const int warps = int(gridDim.x) * kWarps;
  const int first = int(blockIdx.x) * kWarps + int(threadIdx.x >> 5);
  const GemvTask& tk = p.task[0];
  const int rows = tk.m.rows;

  RowUnits<kNi> w[kDepth] = {};  // slots past the last row keep stale values (never stored)
#pragma unroll
  for (int i = 0; i < kDepth; ++i)
    if (first + i * warps < rows)
      load_units<DevFormat::q4, kNi>(tk.m, first + i * warps, lane, 32, w[i]);
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  stage_x_quant(p.x, p.cols, p.norm, p.eps, xq, xd, nullptr, scratch);
  XQuant<kNi> q;
  load_x_quant<kNi>(xq, xd, units, lane, 32, q);

  const bool argmax = p.epilogue == GemvEpilogue::argmax;
  const uint64_t key_base = argmax ? pick_key_base(p) : 0;
  float best_v = -INFINITY;
  int best_i = 0x7fffffff;
  for (int base = first; base < rows; base += kDepth * warps) {
    // The batch's dot products first (independent chains the compiler interleaves), then the
    // refills, then one transposed reduction for the whole batch.
    float v[kDepth];
#pragma unroll
    for (int i = 0; i < kDepth; ++i) v[i] = partial_dot_dp4a<kNi>(w[i], q);
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      const int next = base + (kDepth + i) * warps;
      if (next < rows) load_units<DevFormat::q4, kNi>(tk.m, next, lane, 32, w[i]);
    }
    const int i = reduce_rows<kDepth>(v, lane);  // lane's row in the batch; v[0] its sum
    const int row = base + i * warps;
    if ((lane & (32 / kDepth - 1)) == 0 && row < rows)
      stream_row_out(p, argmax, key_base, row, v[0], best_v, best_i);
  }
  if (argmax) finish_argmax(p, best_v, best_i);
}

}  // namespace

int stream_min_rows() {
  return g_stream_min_rows.load(std::memory_order_relaxed);
}
void set_stream_min_rows(int rows) {
  g_stream_min_rows.store(rows, std::memory_order_relaxed);
}

Expected<bool> launch_stream_gemv(const GemvParams& p, cudaStream_t s) {
  const DevMatrix& m = p.task[0].m;
  if (!dp4a_enabled() || p.n_task != 1 || m.fmt != DevFormat::q4 ||
      m.group != 64 || m.units != 32 * kNi || m.rows < stream_min_rows())
    return false;
  if (p.batch.slots > 1)
    if (Expected<bool> done = launch_lm_head_slots(p, s); !done || *done) return done;
  if (Expected<bool> done = launch_bulk_gemv(p, s); !done || *done) return done;
  if (p.batch.slots > 1) return err("stream gemv: a batch needs the bulk-copy stream");
  const auto kernel = stream_gemv_kernel;
  const size_t smem = x_quant_smem_bytes(m.units);
  const int fit =
      sm_count() * resident_blocks(reinterpret_cast<const void*>(kernel), kThreads, smem);
  const int blocks = std::max(1, std::min(fit, gemv_blocks(p)));
  if (Status st = launch("stream gemv", kernel, dim3(blocks), dim3(kThreads), smem, s, p); !st.ok())
    return st.error();
  return true;
}

}  // namespace orchid::cuda
