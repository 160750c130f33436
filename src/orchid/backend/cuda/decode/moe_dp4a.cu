// MoE experts on dp4a dot products (decode/dp4a_q4.cuh), for q4 group-64 experts of 2,048-wide input
// and 512-wide intermediate rows (the model's shapes; others run decode/moe.cu's fp32 kernels, as all
// do with ORCHID_DP4A=0).
//
// gate/up: x̂ (post-attention RMSNorm of the residual) is quantised before the dependency wait —
// the router kernel before it does not write the residual — then each block routes (or reads
// the routing), and each warp requests the gate and up rows of all its (slot, row) pairs at once
// before any is multiplied: one weight round trip per launch. A batch (2+ slots: more pairs
// than registers hold) streams each warp's pairs through shared memory instead, a few groups in
// flight (gate_up_staged_kernel).
// down: the expert rows are requested before the dependency wait (the gate/up launch publishes
// the routing before it lets this launch start); one warp per slot quantises its slot's
// activations (512 values) in registers; the block then sums the slots with their routing
// weights into the residual in a fixed order (deterministic).
#include <atomic>

#include "orchid/backend/cuda/common/mma_sync.cuh"
#include "orchid/backend/cuda/decode/dp4a_q4.cuh"
#include "orchid/backend/cuda/decode/moe_core.cuh"

namespace orchid::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kGateUpUnits = 64;  // 2,048 columns: NI = 2 units per lane
constexpr int kDownUnits = 16;    // 512 columns: a row per half warp, one unit per lane
constexpr int kDownRows = 8;      // output rows per down block

// The gate/up launches' prologue: x̂ quantised into xq / xd and this lane's units into q
// (before the dependency wait: the router launch before does not write the residual), then the
// slot's routing into sel / sel_w. False: the slot is halted (the block returns).
template <int NI>
__device__ __forceinline__ bool gate_up_prologue(const MoeParams& p, int64_t so, int4* xq,
                                                 float2* xd, float* scratch, int* sel,
                                                 float* sel_w, int sl, XQuant<NI>& q) {
  stage_x_quant(p.x + so, p.n_embd, p.norm, p.eps, xq, xd, nullptr, scratch);
  load_x_quant<NI>(xq, xd, kGateUpUnits, sl, 32, q);
  grid_dep_wait();
  // The down launch reads sel before its dependency wait (down_dp4a_kernel): block 0 lets it
  // launch only once sel is published (its writers fence before slot_experts' final barrier).
  if (blockIdx.x != 0) grid_dep_release();
  if (p.halt && p.halt[so]) return false;
  slot_experts(p, sel, sel_w, so);
  if (blockIdx.x == 0) grid_dep_release();
  return true;
}

// PAIRS: most (slot, row) pairs per warp, their gate and up rows in registers beside x̂.
// MoeParams, q4 gate / up in groups of 64, 2,048 columns; act rows act_stride apart. The grid's
// warp w takes (slot, row) pairs [w · ppw, +ppw) of the launch's n_slot · n_ff. (A batch:
// gate_up_staged_kernel.)
template <int PAIRS>
__global__ void __launch_bounds__(kThreads, 2)
    gate_up_dp4a_kernel(const __grid_constant__ MoeParams p, int ppw, int act_stride) {
  constexpr int64_t so = 0;
  constexpr DevFormat F = DevFormat::q4;
  constexpr int NI = kGateUpUnits / 32;
  __shared__ int4 xq[4 * kGateUpUnits];
  __shared__ float2 xd[kGateUpUnits];
  __shared__ float scratch[32];
  __shared__ int sel[32];
  __shared__ float sel_w[32];
  const SubGroup sg(32);
  XQuant<NI> q;
  if (!gate_up_prologue<NI>(p, so, xq, xd, scratch, sel, sel_w, sg.sl, q)) return;
  const int total = p.n_slot * p.n_ff;
  // The warp's group of ppw pairs from r0.
  auto pairs = [&](int r0) {
  RowUnits<NI> g[PAIRS] = {}, u[PAIRS] = {};  // pairs past ppw or the end stay zero
#pragma unroll
  for (int i = 0; i < PAIRS; ++i) {
    const int r = r0 + i;
    if (i >= ppw || r >= total) break;
    const int64_t row = int64_t(sel[r / p.n_ff]) * p.n_ff + r % p.n_ff;
    load_units<F, NI>(p.gate, row, sg.sl, 32, g[i]);
    load_units<F, NI>(p.up, row, sg.sl, 32, u[i]);
  }
  // Gate and up partials of every pair (value 2i, 2i + 1; zero-padded to kSums), then one
  // transposed reduction: pair i's gate sum lands in lanes 64i / kSums…, its up sum 32 / kSums
  // lanes further.
  constexpr int kSums = 2 * PAIRS <= 4 ? 4 : 8;
  static_assert(2 * PAIRS <= 8);
  float v[kSums];
#pragma unroll
  for (int i = 0; i < kSums / 2; ++i) {
    v[2 * i] = i < PAIRS && i < ppw ? partial_dot_dp4a<NI>(g[min(i, PAIRS - 1)], q) : 0.f;
    v[2 * i + 1] = i < PAIRS && i < ppw ? partial_dot_dp4a<NI>(u[min(i, PAIRS - 1)], q) : 0.f;
  }
  const int idx = reduce_rows<kSums>(v, sg.sl);
  const float up = __shfl_down_sync(0xffffffffu, v[0], 32 / kSums);
  const int i = idx / 2, r = r0 + i;
  if (sg.sl % (64 / kSums) == 0 && i < ppw && r < total)
    store_gate_up(p, r / p.n_ff, r % p.n_ff, act_stride, v[0], up, so);
  };
  pairs((blockIdx.x * kWarps + int(threadIdx.x >> 5)) * ppw);
}

// A batch's gate/up (grid y = slot): each slot's blocks walk its (slot, row) pairs kStagePairs a
// warp at a time, the rows of the next kStages − 1 groups copied into the warp's shared memory
// (cp.async) while it multiplies the current one, so a warp keeps ~9 KB in flight instead of
// waiting a round trip per group. Each pair's sums are gate_up_dp4a_kernel's (partial_dot_dp4a
// per lane, reduce_rows' tree for any count), so a slot's bits are its batch-1 bits.
// Measured (4 / 8 slots, gate/up ms a step): 2 pairs × 3 stages 0.83 / 1.28 (one block an SM);
// 1 × 3 0.84 / 1.33; 2 × 2 0.85 / 1.28; 1 × 4 0.85 / 1.36; the register walk before 0.93 / 1.48.
constexpr int kStagePairs = 2, kStages = 3;
constexpr int kGateUpSb = kGateUpUnits / 2;  // (scale, bias) words a row: groups of 64
// A stage: [kStagePairs][gate, up][units] weights, then [kStagePairs][gate, up][groups] sb.
constexpr int kStageBytesGU = kStagePairs * 2 * (kGateUpUnits * 16 + kGateUpSb * 4);
constexpr size_t kGateUpStagedSmem = size_t(kWarps) * kStages * kStageBytesGU;

__global__ void __launch_bounds__(kThreads, 2)
    gate_up_staged_kernel(const __grid_constant__ MoeParams p, int act_stride) {
  const int64_t so = int64_t(blockIdx.y) * p.batch.stride;
  constexpr DevFormat F = DevFormat::q4;
  constexpr int NI = kGateUpUnits / 32;
  extern __shared__ int4 stage_smem[];
  __shared__ int4 xq[4 * kGateUpUnits];
  __shared__ float2 xd[kGateUpUnits];
  __shared__ float scratch[32];
  __shared__ int sel[32];
  __shared__ float sel_w[32];
  const SubGroup sg(32);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  unsigned char* my = reinterpret_cast<unsigned char*>(stage_smem) + warp * kStages * kStageBytesGU;
  XQuant<NI> q;
  if (!gate_up_prologue<NI>(p, so, xq, xd, scratch, sel, sel_w, sg.sl, q)) return;
  const int total = p.n_slot * p.n_ff;
  const int base = (blockIdx.x * kWarps + warp) * kStagePairs;
  const int step = int(gridDim.x) * kWarps * kStagePairs;
  const int groups = base < total ? (total - base + step - 1) / step : 0;
  auto weights = [&](int st, int i, int m) {  // pair i's gate (m 0) or up (1) row in stage st
    return reinterpret_cast<uint4*>(my + st * kStageBytesGU) + (i * 2 + m) * kGateUpUnits;
  };
  auto scales = [&](int st, int i, int m) {
    return reinterpret_cast<uint32_t*>(my + st * kStageBytesGU +
                                       kStagePairs * 2 * kGateUpUnits * 16) +
           (i * 2 + m) * kGateUpSb;
  };
  // Group k's rows into stage k % kStages (one commit group a call, empty past the end).
  auto issue = [&](int k) {
    if (k < groups) {
      const int st = k % kStages;
#pragma unroll
      for (int i = 0; i < kStagePairs; ++i) {
        const int r = base + k * step + i;
        if (r >= total) break;
        const int64_t row = int64_t(sel[r / p.n_ff]) * p.n_ff + r % p.n_ff;
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          const DevMatrix& mat = m ? p.up : p.gate;
          const uint4* src = static_cast<const uint4*>(mat.w) + row * kGateUpUnits;
#pragma unroll
          for (int j = 0; j < NI; ++j) cp_async16(weights(st, i, m) + lane + 32 * j, src + lane + 32 * j);
          if (lane < kGateUpSb / 4)
            cp_async16(scales(st, i, m) + 4 * lane, mat.sb + row * kGateUpSb + 4 * lane);
        }
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) issue(k);
  constexpr int kSums = 2 * kStagePairs <= 4 ? 4 : 8;
  for (int k = 0; k < groups; ++k) {
    issue(k + kStages - 1);
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const int st = k % kStages, r0 = base + k * step;
    float v[kSums];
#pragma unroll
    for (int i = 0; i < kSums / 2; ++i) {
      v[2 * i] = v[2 * i + 1] = 0.f;
      if (i >= kStagePairs || r0 + i >= total) continue;
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        RowUnits<NI> rw;
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          const int u = sg.sl + 32 * j;
          rw.w[j] = weights(st, i, m)[u];
          rw.sb[j] = scales(st, i, m)[(u * unit_elems(F)) / 64];
        }
        v[2 * i + m] = partial_dot_dp4a<NI>(rw, q);
      }
    }
    __syncwarp();  // the stage is free for group k + kStages
    const int idx = reduce_rows<kSums>(v, sg.sl);
    const float up = __shfl_down_sync(0xffffffffu, v[0], 32 / kSums);
    const int i = idx / 2, r = r0 + i;
    if (sg.sl % (64 / kSums) == 0 && i < kStagePairs && r < total)
      store_gate_up(p, r / p.n_ff, r % p.n_ff, act_stride, v[0], up, so);
  }
  cp_async_wait<0>();  // nothing in flight when the block's shared memory goes
}

// The down kernels' activations: one warp quantises its slot's 512 values (act) into xq / xd and
// takes its half warp lane sl's unit.
__device__ __forceinline__ void quantize_act(const float* act, int4* xq, float2* xd, int sl,
                                             XQuant<1>& q) {
  constexpr int kWords = kDownUnits * 4;  // 8-element words of one activation row
  const int lane = threadIdx.x & 31;
  float v[kWords / 32][8];
#pragma unroll
  for (int k = 0; k < kWords / 32; ++k) load_word(act, lane + 32 * k, kWords, v[k]);
#pragma unroll
  for (int k = 0; k < kWords / 32; ++k) quantize_word(v[k], lane + 32 * k, kWords, xq, xd, nullptr);
  __syncwarp();
  load_x_quant<1>(xq, xd, kDownUnits, sl, 16, q);
}

// Block: one warp per slot of the launch, kDownRows output rows; each half warp takes every
// other row.
// MoeParams, q4 down in groups of 64, 512 columns; act rows act_stride apart. Grid: a block
// per kDownRows rows of h [n_embd]; dynamic shared memory: each slot's activation codes.
// BATCHED: grid y = slot (sel, halt, act, sel_w and h move by the batch's stride).
template <bool BATCHED>
__global__ void __launch_bounds__(BATCHED ? 32 * 16 : 32 * 32)
    down_dp4a_kernel(const __grid_constant__ MoeParams p, int act_stride) {
  const int64_t so = BATCHED ? int64_t(blockIdx.y) * p.batch.stride : 0;
  constexpr DevFormat F = DevFormat::q4;
  // Per warp (slot): its activations' codes and (d, sum) pairs.
  extern __shared__ int4 smem[];
  int4* xq = smem + (threadIdx.x >> 5) * 4 * kDownUnits;
  float2* xd =
      reinterpret_cast<float2*>(smem + p.n_slot * 4 * kDownUnits) + (threadIdx.x >> 5) * kDownUnits;
  __shared__ float part[32][kDownRows];
  const int w = threadIdx.x >> 5, slot = p.slot_begin + w;
  const SubGroup sg(16);
  int r0 = blockIdx.x * kDownRows;
  // Batched: the slot's blocks walk its row blocks (r0, r0 + G · kDownRows, …), the next block's
  // rows requested before the current one's products, the activations quantised once a block.
  const int r_step = BATCHED ? int(gridDim.x) * kDownRows : p.n_embd;
  // The slot's expert, and its rows, before the dependency wait: the gate/up launch publishes sel
  // before it lets this one launch (or an earlier, finished routing kernel did). Read past L1,
  // which may hold an earlier layer's sel; clamped, so that no value can send a load astray.
  const int expert =
      min(max(__ldcg(p.sel + so + slot) - p.expert_base, 0), p.down.rows / p.n_embd - 1);
  const int64_t base = int64_t(expert) * p.n_embd;
  auto load_rows = [&](int r, RowUnits<1> (&rows)[kDownRows / 2]) {
#pragma unroll
    for (int k = 0; k < kDownRows / 2; ++k) {
      const int rr = r + sg.sub + 2 * k;
      if (rr < p.n_embd) load_units<F, 1>(p.down, base + rr, sg.sl, 16, rows[k]);
    }
  };
  RowUnits<1> rows[kDownRows / 2] = {};
  load_rows(r0, rows);
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && p.halt[so]) return;
  XQuant<1> q;
  quantize_act(p.act + so + w * act_stride, xq, xd, sg.sl, q);
  for (; r0 < p.n_embd; r0 += r_step) {
    RowUnits<1> next[kDownRows / 2] = {};
    if (BATCHED && r0 + r_step < p.n_embd) load_rows(r0 + r_step, next);
    // The half warp's 4 rows' partials, then one transposed reduction over its 16 lanes
    // (5 shuffles instead of 16): row sub + 2k lands in lanes 4k… of the half warp.
    float acc[kDownRows / 2];
#pragma unroll
    for (int k = 0; k < kDownRows / 2; ++k)
      acc[k] = r0 + sg.sub + 2 * k < p.n_embd ? partial_dot_dp4a<1>(rows[k], q) : 0.f;
    const int k = reduce_rows<kDownRows / 2, 16>(acc, sg.sl);
    if (sg.sl % (16 / (kDownRows / 2)) == 0) part[w][sg.sub + 2 * k] = acc[0];
    __syncthreads();
    store_down<kDownRows>(p, r0, part, so);
    if constexpr (!BATCHED) break;
    __syncthreads();  // part is rewritten next round
#pragma unroll
    for (int i = 0; i < kDownRows / 2; ++i) rows[i] = next[i];
  }
}

// A batch's down, streamed (grid y = slot; a warp per expert of the slot, as
// down_dp4a_kernel<true>): each warp's kDownRows rows of a round are copied into its shared
// memory (cp.async) STAGES − 1 rounds ahead, the first rounds before the dependency wait, and
// every round's dot products stay in shared memory until one barrier at the end adds them into
// h. Why: the register form keeps one round (2 KB a warp) in flight and pays two barriers a
// round. A row's sum is down_dp4a_kernel's (the same units, partial_dot_dp4a, reduce_rows' tree,
// slots added in slot order), so a slot's bits are its batch-1 bits.
// PRECONDITION (launch_moe_down_dp4a): n_embd a multiple of kDownRows, 512 columns, q4 group 64.
// Measured (8 slots, 4K, aggregate tok/s): 3 stages 1,912, 4 stages 1,919 (the same within the
// runs' spread; 3 keeps a block's shared memory at 3 blocks an SM).
constexpr int kDownStages = 3;
constexpr int kDownSb = kDownUnits / 2;  // (scale, bias) words a row: groups of 64
// A warp's stage: [kDownRows][kDownUnits] weight units, then [kDownRows][kDownSb] (scale, bias).
constexpr int kDownStageBytes = kDownRows * (kDownUnits * 16 + kDownSb * 4);  // 2,304

// Dynamic shared memory of down_staged_kernel: stages, activation codes and (d, sum) pairs, then
// part[n_slot][rounds · kDownRows].
template <int STAGES>
size_t down_staged_smem(int n_slot, int rounds) {
  return size_t(n_slot) * (STAGES * kDownStageBytes + kDownUnits * (4 * sizeof(int4) + sizeof(float2)) +
                           size_t(rounds) * kDownRows * sizeof(float));
}

template <int STAGES>
__global__ void __launch_bounds__(32 * 16)
    down_staged_kernel(const __grid_constant__ MoeParams p, int act_stride) {
  const int64_t so = int64_t(blockIdx.y) * p.batch.stride;
  constexpr DevFormat F = DevFormat::q4;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, slot = p.slot_begin + w;
  // This block's row blocks r_first, r_first + r_step, … (mine of them; rounds at most a block).
  const int r_step = int(gridDim.x) * kDownRows, r_first = int(blockIdx.x) * kDownRows;
  const int rounds = (p.n_embd / kDownRows + int(gridDim.x) - 1) / int(gridDim.x);
  const int mine = (p.n_embd - r_first + r_step - 1) / r_step;
  extern __shared__ int4 smem[];
  unsigned char* stages = reinterpret_cast<unsigned char*>(smem);
  unsigned char* my = stages + w * STAGES * kDownStageBytes;
  int4* xq_all = reinterpret_cast<int4*>(stages + p.n_slot * STAGES * kDownStageBytes);
  float2* xd_all = reinterpret_cast<float2*>(xq_all + p.n_slot * 4 * kDownUnits);
  float* part = reinterpret_cast<float*>(xd_all + p.n_slot * kDownUnits);  // [slot][rounds · rows]
  int4* xq = xq_all + w * 4 * kDownUnits;
  float2* xd = xd_all + w * kDownUnits;
  const SubGroup sg(16);
  // The slot's expert before the dependency wait, as down_dp4a_kernel reads it.
  const int expert =
      min(max(__ldcg(p.sel + so + slot) - p.expert_base, 0), p.down.rows / p.n_embd - 1);
  const int64_t base = int64_t(expert) * p.n_embd;
  // Round k's rows into stage k % STAGES (one commit group a call, empty past the end): 128
  // weight units and 16 (scale, bias) units, contiguous in the expert.
  auto issue = [&](int k) {
    if (k < mine) {
      const int64_t row = base + r_first + int64_t(k) * r_step;
      uint4* dst = reinterpret_cast<uint4*>(my + (k % STAGES) * kDownStageBytes);
      const uint4* src = static_cast<const uint4*>(p.down.w) + row * kDownUnits;
#pragma unroll
      for (int j = 0; j < kDownRows * kDownUnits / 32; ++j)
        cp_async16(dst + lane + 32 * j, src + lane + 32 * j);
      if (lane < kDownRows * kDownSb / 4)
        cp_async16(dst + kDownRows * kDownUnits + lane, p.down.sb + row * kDownSb + 4 * lane);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int k = 0; k < STAGES - 1; ++k) issue(k);
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && p.halt[so]) {
    cp_async_wait<0>();
    return;
  }
  XQuant<1> q;
  quantize_act(p.act + so + w * act_stride, xq, xd, sg.sl, q);
  for (int k = 0; k < mine; ++k) {
    issue(k + STAGES - 1);
    cp_async_wait<STAGES - 1>();
    __syncwarp();
    const uint4* wts = reinterpret_cast<const uint4*>(my + (k % STAGES) * kDownStageBytes);
    const uint32_t* sbs = reinterpret_cast<const uint32_t*>(wts + kDownRows * kDownUnits);
    // The half warp's rows sub + 2i, then down_dp4a_kernel's transposed reduction.
    float acc[kDownRows / 2];
#pragma unroll
    for (int i = 0; i < kDownRows / 2; ++i) {
      const int r = sg.sub + 2 * i;
      RowUnits<1> rw;
      rw.w[0] = wts[r * kDownUnits + sg.sl];
      rw.sb[0] = sbs[r * kDownSb + (sg.sl * unit_elems(F)) / 64];
      acc[i] = partial_dot_dp4a<1>(rw, q);
    }
    __syncwarp();  // the stage is free for round k + STAGES
    const int i = reduce_rows<kDownRows / 2, 16>(acc, sg.sl);
    if (sg.sl % (16 / (kDownRows / 2)) == 0)
      part[(w * rounds + k) * kDownRows + sg.sub + 2 * i] = acc[0];
  }
  cp_async_wait<0>();
  __syncthreads();
  // Every round's rows: h += Σ_s w_s · part[s] in slot order (add_weighted_slots' sum), or each
  // slot's rows into slot_out (store_down's unfused form).
  for (int i = threadIdx.x; i < mine * kDownRows; i += blockDim.x) {
    const int r = r_first + (i / kDownRows) * r_step + i % kDownRows;
    if (p.slot_out) {
      for (int s = 0; s < p.n_slot; ++s)
        p.slot_out[size_t(p.slot_begin + s) * p.n_embd + r] = part[s * rounds * kDownRows + i];
      continue;
    }
    float sum = 0.f;
    for (int s = 0; s < p.n_slot; ++s)
      sum = fmaf(p.sel_w[so + p.slot_begin + s], part[s * rounds * kDownRows + i], sum);
    p.h[so + r] += sum;
  }
}

constexpr int kPairs = 3;  // (slot, row) pairs per warp at most

std::atomic<bool> g_staged_down{true};

bool q4_group64(const DevMatrix& m) {
  return m.fmt == DevFormat::q4 && m.group == 64;
}

// Pairs per warp when the dp4a gate/up kernel takes p (one wave), else 0.
int gate_up_pairs_per_warp(const MoeParams& p) {
  if (!dp4a_enabled() || !q4_group64(p.gate) || !q4_group64(p.up) || p.gate.units != kGateUpUnits ||
      p.n_ff <= 0)
    return 0;
  return rows_per_warp_one_wave(reinterpret_cast<const void*>(gate_up_dp4a_kernel<kPairs>),
                                kThreads, 0, p.n_slot * p.n_ff, kPairs);
}

// A batch: one wave in all, each slot's blocks walking its pairs through the staged copies.
Expected<bool> launch_staged(const MoeParams& p, int total, cudaStream_t s) {
  constexpr int C = kStagePairs;
  const auto kernel = gate_up_staged_kernel;
  constexpr size_t smem = kGateUpStagedSmem;
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      e != cudaSuccess)
    return err("moe gate/up (staged): ", cudaGetErrorString(e));
  const int fit =
      sm_count() * resident_blocks(reinterpret_cast<const void*>(kernel), kThreads, smem);
  const int per_slot =
      std::max(1, std::min(fit / p.batch.slots, (total + kWarps * C - 1) / (kWarps * C)));
  if (Status st = launch("moe gate/up (staged)", kernel, dim3(per_slot, p.batch.slots),
                         dim3(kThreads), smem, s, p, act_stride_of(p));
      !st.ok())
    return st.error();
  return true;
}

// A batch's down, streamed: one wave in all, each slot's blocks walking its row blocks.
template <int STAGES>
Expected<bool> launch_down_staged(const MoeParams& p, cudaStream_t s) {
  if (p.n_slot > 16) return false;
  const auto kernel = down_staged_kernel<STAGES>;
  const int row_blocks = p.n_embd / kDownRows, threads = 32 * p.n_slot;
  // Shared memory grows with the rounds a block walks: the occupancy of an 8-round block (the
  // model's 2,048 rows in one wave at 2-3 blocks an SM) sets the grid.
  const int optin = smem_optin();
  const size_t guess = down_staged_smem<STAGES>(p.n_slot, 8);
  if (guess > size_t(optin)) return false;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
      e != cudaSuccess)
    return err("moe down (staged): ", cudaGetErrorString(e));
  const int fit = sm_count() * resident_blocks(reinterpret_cast<const void*>(kernel), threads, guess);
  const int blocks = std::max(1, std::min(row_blocks, fit / p.batch.slots));
  const int rounds = (row_blocks + blocks - 1) / blocks;
  if (down_staged_smem<STAGES>(p.n_slot, rounds) > size_t(optin)) return false;
  if (Status st = launch("moe down (staged)", kernel, dim3(blocks, p.batch.slots), dim3(threads),
                         down_staged_smem<STAGES>(p.n_slot, rounds), s, p, act_stride_of(p));
      !st.ok())
    return st.error();
  return true;
}

}  // namespace

bool staged_down_enabled() {
  return g_staged_down.load(std::memory_order_relaxed);
}
void set_staged_down_enabled(bool on) {
  g_staged_down.store(on, std::memory_order_relaxed);
}

Expected<bool> launch_moe_gate_up_dp4a(const MoeParams& p, cudaStream_t s) {
  int ppw = gate_up_pairs_per_warp(p);
  if (ppw == 0) return false;
  const int total = p.n_slot * p.n_ff;
  int blocks = (total + kWarps * ppw - 1) / (kWarps * ppw);
  if (p.batch.slots > 1) return launch_staged(p, total, s);
  if (Status st = launch("moe gate/up (dp4a)", gate_up_dp4a_kernel<kPairs>, dim3(blocks),
                         dim3(kThreads), 0, s, p, ppw, act_stride_of(p));
      !st.ok())
    return st.error();
  return true;
}

Expected<bool> launch_moe_down_dp4a(const MoeParams& p, cudaStream_t s) {
  // The down kernel reads sel before its dependency wait, which only the dp4a gate/up launch
  // allows (it publishes sel before letting dependents start): pair the two.
  if (gate_up_pairs_per_warp(p) == 0 || !q4_group64(p.down) || p.down.units != kDownUnits)
    return false;
  int blocks = (p.n_embd + kDownRows - 1) / kDownRows;
  const size_t smem = size_t(p.n_slot) * kDownUnits * (4 * sizeof(int4) + sizeof(float2));
  if (p.batch.slots > 1) {
    // A batch: one wave in all, each slot's blocks walking its row blocks (at most 16 experts a
    // token: the batched kernel's bound, for its registers).
    if (p.n_slot > 16) return false;
    const int fit = sm_count() * resident_blocks(reinterpret_cast<const void*>(
                                                     down_dp4a_kernel<true>),
                                                 32 * p.n_slot, smem);
    blocks = std::max(1, std::min(blocks, fit / p.batch.slots));
  }
  if (p.batch.slots > 1 && staged_down_enabled() && p.n_embd % kDownRows == 0) {
    Expected<bool> done = launch_down_staged<kDownStages>(p, s);
    if (!done || *done) return done;  // else the register form below
  }
  const auto kernel = p.batch.slots > 1 ? down_dp4a_kernel<true> : down_dp4a_kernel<false>;
  if (Status st = launch("moe down (dp4a)", kernel, dim3(blocks, p.batch.slots),
                         dim3(32 * p.n_slot), smem, s, p, act_stride_of(p));
      !st.ok())
    return st.error();
  return true;
}

}  // namespace orchid::cuda
