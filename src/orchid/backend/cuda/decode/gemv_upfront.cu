// Batch-1 GEMV for q4 (group 64) rows of 2,048 or 4,096 columns (the layers' projections) and
// q8 rows of 2,048 (the router), store epilogue: each warp owns a few consecutive rows and requests
// all of them before the kernel waits for the previous one, so a launch is one memory round trip
// instead of one per row batch; grids are sized so every warp of one wave has ≤ ROWS rows. x̂
// (RMSNorm prologue) is quantised once per block straight from registers for dp4a dot products
// (decode/dp4a_q4.cuh). ORCHID_DP4A=0 runs decode/gemv.cu's kernel instead (fp32 products, row batches in
// flight).
//
// Lab numbers (bench/cuda/gemv_lab.cu, H200, 30 launches back to back, session 4): 12,352 ×
// 2,048 rows 12.3 µs with decode/gemv.cu's kernel → 8.3 (this layout, fp32 products) → 6.7 (dp4a,
// x̂ quantised from registers); the loads alone 4.1, the prologue alone 2.1.
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "orchid/backend/cuda/decode/dp4a_q4.cuh"

namespace orchid::cuda {
namespace {

std::atomic<bool> g_dp4a{true};

constexpr int kThreads = 256, kWarps = kThreads / 32;

// A unit of x̂ as a lane of a q4 or a q8 row reads it.
template <DevFormat F>
using XUnit = std::conditional_t<F == DevFormat::q4, XQuantUnit, XQuant8Unit>;

// GemvParams (store epilogue); F q4 or q8, NI 16-byte units a lane, ROWS the most rows a
// warp: the grid's warp w takes rows [w · rpw, +rpw) of the tasks' rows, concatenated; dynamic
// shared memory: x̂'s codes.
// BATCHED: a grid of one wave whose warps take rpw ≤ ROWS rows each (more rows: they walk groups
// w, w + W, … for W warps); each warp's rows are multiplied with every live slot's x̂ in turn (x,
// y, add and halt at b · the batch's stride; the slots' codes staged once a block), so the weights
// are read once for all slots. Each row's partials are the batch-1 kernel's, and reduce_rows sums
// a row in the same order whatever the number of rows is.
template <DevFormat F, int NI, int ROWS, bool BATCHED>
__global__ void __launch_bounds__(kThreads, 2)
    upfront_gemv_kernel(const __grid_constant__ GemvParams p, int rpw) {
  extern __shared__ float4 smem4[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(smem4);
  const int units = p.cols / 32;  // 32-element units of x̂
  __shared__ float scratch[BATCHED ? 32 * kMaxSlots : 32];
  const SubGroup sg(32);

  int end[kMaxGemvTasks];  // rows of tasks 0..t, concatenated
  const int total = task_rows(p, end);
  // Rows [r, r + rpw) into w (zero past rpw or the end: their sums are dropped).
  auto load_rows = [&](int r, RowUnits<NI> (&w)[ROWS]) {
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
      const int rr = r + i;
      if (i >= rpw || rr >= total) break;
      const int t = task_of(end, rr);
      load_units<F, NI>(p.task[t].m, rr - task_begin(end, t), sg.sl, 32, w[i]);
    }
  };
  int r0 = (blockIdx.x * kWarps + int(threadIdx.x >> 5)) * rpw;
  RowUnits<NI> w[ROWS] = {};
  load_rows(r0, w);
  grid_dep_wait();
  grid_dep_release();
  // The warp's rows times slot b's codes into y (at offset so). Every row's partial first
  // (independent chains), a unit of x̂ at a time (so that one unit's codes, not all NI, sit in
  // registers beside the rows: partial_dot_dp4a's steps in its order), then one transposed
  // reduction for all rows.
  // Rows a reduction takes: ROWS rounded up to a power of two (reduce_rows sums each row in the
  // same order whatever that is).
  constexpr int D = ROWS <= 1 ? 1 : ROWS <= 2 ? 2 : ROWS <= 4 ? 4 : 8;
  auto rows_out = [&](int b, int64_t so) {
    const SlotCodes sc = BATCHED && p.x_codes
                             ? SlotCodes(reinterpret_cast<unsigned char*>(p.x_codes + so), units)
                             : SlotCodes(smem, units, b);
    float acc[D];
#pragma unroll
    for (int i = 0; i < D; ++i) acc[i] = 0.f;
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      XUnit<F> q;
      if constexpr (F == DevFormat::q4)
        load_x_quant_unit(sc.xq, sc.xd, units, sg.sl + 32 * j, q);
      else
        load_x_quant8_unit(sc.xq, sc.xd, sc.xw, units, sg.sl + 32 * j, q);
#pragma unroll
      for (int i = 0; i < ROWS; ++i) {
        if (i >= rpw) continue;
        if constexpr (F == DevFormat::q4)
          acc[i] = dot_unit_dp4a(w[i].w[j], w[i].sb[j], q, acc[i]);
        else
          acc[i] = dot_unit_dp4a8(w[i].w[j], w[i].sb[j], q, acc[i]);
      }
    }
    const int i = reduce_rows<D>(acc, sg.sl);
    const int rr = r0 + i;
    if ((sg.sl & (32 / D - 1)) == 0 && i < rpw && rr < total) {
      const int t = task_of(end, rr), row = rr - task_begin(end, t);
      const GemvTask& tk = p.task[t];
      tk.y[so + row] = tk.add ? tk.add[so + row] + acc[0] : acc[0];
    }
  };
  if constexpr (BATCHED) {
    const int64_t stride = p.batch.stride;
    unsigned live = 0;
    for (int b = 0; b < p.batch.slots; ++b)
      if (!(p.halt && p.halt[b * stride])) live |= 1u << b;
    if (live == 0) return;
    if (!p.x_codes)
      stage_x_quant_slots(p.x, stride, live, p.cols, p.norm, p.eps, F == DevFormat::q8, smem,
                          scratch);
    // One round where the grid holds every row (the shapes of this model), else more.
    const int step = int(gridDim.x) * kWarps * rpw;
    for (bool first = true; r0 < total; r0 += step, first = false) {
      if (!first) {
        RowUnits<NI> none[ROWS] = {};
#pragma unroll
        for (int i = 0; i < ROWS; ++i) w[i] = none[i];
        load_rows(r0, w);
      }
#pragma unroll 1
      for (int b = 0; b < p.batch.slots; ++b)
        if (live >> b & 1) rows_out(b, b * stride);
    }
  } else {
    // Grid y: the slot (a batch whose rows are few: its blocks run the batch-1 kernel once a
    // slot, the weights read again from L2).
    const int64_t so = int64_t(blockIdx.y) * p.batch.stride;
    if (p.halt && p.halt[so]) return;
    const SlotCodes sc(smem, units, 0);
    stage_x_quant(p.x + so, p.cols, p.norm, p.eps, sc.xq, sc.xd,
                  F == DevFormat::q8 ? sc.xw : nullptr, scratch);
    rows_out(0, so);
  }
}

// Block b: slot b's x̂ quantised into GemvParams::x_codes, each code as the batch-1 kernel's
// stage_x_quant makes it (it is that function).
__global__ void __launch_bounds__(kThreads) quantize_slots_kernel(const __grid_constant__ GemvParams p,
                                                                  bool word_sums) {
  __shared__ float scratch[32];
  grid_dep_wait();
  grid_dep_release();
  const int64_t so = int64_t(blockIdx.x) * p.batch.stride;
  if (p.halt && p.halt[so]) return;
  const SlotCodes sc(reinterpret_cast<unsigned char*>(p.x_codes + so), p.cols / 32);
  stage_x_quant(p.x + so, p.cols, p.norm, p.eps, sc.xq, sc.xd, word_sums ? sc.xw : nullptr,
                scratch);
}

// A batch: one wave (as many blocks as fit), each warp the fewest rows (≤ ROWS) that cover all.
// q4 with x_codes: each slot's x̂ quantised first by a launch of its own (4 slots: gdn in
// 14.4 → 11.8 µs, out 13.7 → 10.7; bench/cuda/gemv_lab.cu). Not the q8 router: its 33 blocks
// stage 8 slots in 8.6 µs, but read from L2 each slot's codes cost more (7.7 → 8.2 µs).
template <DevFormat F, int NI, int ROWS>
Expected<bool> launch_slots(GemvParams p, int total, cudaStream_t s) {
  const auto kernel = upfront_gemv_kernel<F, NI, ROWS, true>;
  if (F != DevFormat::q4) p.x_codes = nullptr;
  if (p.x_codes) {
    if (Status st = launch_quantize_slots(p, F == DevFormat::q8, s); !st.ok()) return st.error();
    if (Expected<bool> done = launch_slots_mma_gemv(p, total, s); !done || *done) return done;
  }
  const size_t smem = p.x_codes ? 0 : x_quant_smem_bytes(p.cols / 32) * size_t(p.batch.slots);
  if (smem > 48 * 1024)
    if (cudaError_t e =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        e != cudaSuccess)
      return err("upfront gemv: ", cudaGetErrorString(e));
  const int fit = sm_count() * resident_blocks(reinterpret_cast<const void*>(kernel), kThreads, smem);
  const int rpw = std::clamp((total + fit * kWarps - 1) / (fit * kWarps), 1, ROWS);
  const int blocks = std::max(1, std::min(fit, (total + kWarps * rpw - 1) / (kWarps * rpw)));
  if (Status st = launch("upfront gemv (slots)", kernel, dim3(blocks), dim3(kThreads), smem, s, p,
                         rpw);
      !st.ok())
    return st.error();
  return true;
}

// Launches with rows per warp (≤ ROWS) for a one-wave grid; false when there are too many rows.
template <DevFormat F, int NI, int ROWS>
Expected<bool> launch_rows(const GemvParams& p, int total, cudaStream_t s) {
  // A batch: up to 6 rows a warp (2 of 4,096 columns): the registers beside a unit of codes.
  // The q8 router's few rows (257): the batch-1 kernel once a slot (grid y), whose blocks each
  // stage one slot's x̂ (a block staging all 8 took 8.6 of the launch's 13.7 µs).
  const bool per_slot = F == DevFormat::q8 && p.batch.slots > 1;
  if (p.batch.slots > 1 && !per_slot) return launch_slots<F, NI, NI == 2 ? 6 : 2>(p, total, s);
  const int slots = per_slot ? p.batch.slots : 1;
  const auto kernel = upfront_gemv_kernel<F, NI, ROWS, false>;
  const size_t smem = x_quant_smem_bytes(p.cols / 32);
  int rpw =
      rows_per_warp_one_wave(reinterpret_cast<const void*>(kernel), kThreads, smem, total, ROWS);
  if (rpw == 0) return false;
  // The 4,096-wide out-projections follow the DeltaNet step (32 blocks of 60K registers) or the
  // attention combine: at the fewest rows a warp (1) their 256 blocks do not all fit beside those,
  // and the ones placed late request their rows after the wait. At 2 rows a warp the 128 blocks
  // all fit at once.
  if (F == DevFormat::q4 && NI == 4) rpw = ROWS;
  const int blocks = (total + kWarps * rpw - 1) / (kWarps * rpw);
  size_t dyn = smem;
  // The router's 33 blocks reserve over half an SM's shared memory each, so they land one an SM.
  if (F == DevFormat::q8 && blocks * slots <= sm_count())
    dyn = std::max(smem, one_block_per_sm_smem());
  if (dyn > 48 * 1024)
    if (cudaError_t e =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dyn));
        e != cudaSuccess)
      return err("upfront gemv: ", cudaGetErrorString(e));
  if (Status st =
          launch("upfront gemv", kernel, dim3(blocks, slots), dim3(kThreads), dyn, s, p, rpw);
      !st.ok())
    return st.error();
  return true;
}

}  // namespace

bool dp4a_enabled() {
  return g_dp4a.load(std::memory_order_relaxed);
}
void set_dp4a_enabled(bool on) {
  g_dp4a.store(on, std::memory_order_relaxed);
}

Status launch_quantize_slots(const GemvParams& p, bool word_sums, cudaStream_t s) {
  return launch("quantize x (slots)", quantize_slots_kernel, dim3(p.batch.slots), dim3(kThreads), 0,
                s, p, word_sums);
}

Expected<bool> launch_upfront_gemv(const GemvParams& p, cudaStream_t s) {
  const DevMatrix& m = p.task[0].m;
  if (!dp4a_enabled() || p.epilogue != GemvEpilogue::store || m.group != 64) return false;
  int total = 0;
  for (int t = 0; t < p.n_task; ++t) total += p.task[t].m.rows;
  // ROWS: registers for the rows' loads beside x̂ (≤ 128 per thread, two blocks per SM).
  if (m.fmt == DevFormat::q4 && m.units == 64) return launch_rows<DevFormat::q4, 2, 8>(p, total, s);
  if (m.fmt == DevFormat::q4 && m.units == 128)
    return launch_rows<DevFormat::q4, 4, 2>(p, total, s);
  if (m.fmt == DevFormat::q8 && m.units == 128)  // the router and shared-expert gate
    return launch_rows<DevFormat::q8, 4, 2>(p, total, s);
  return false;
}

}  // namespace orchid::cuda
