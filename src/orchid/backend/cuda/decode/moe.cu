// MoE experts for one token. gate_up: for every slot (top-k experts + the shared expert) and
// intermediate row i, silu(gate_i · x̂) · (up_i · x̂), with the post-attention RMSNorm
// recomputed in each block's prologue. down: for each output row, every slot's down row ·
// its activation, weighted (routing weight or shared sigmoid gate) and added to the residual
// in a fixed slot order (deterministic, no atomics).
#include <algorithm>

#include "orchid/backend/cuda/decode/moe_core.cuh"

namespace orchid::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

// MoeParams; F gate / up's format, NI 16-byte units a lane, lpr lanes a row; act rows
// act_stride apart. Sub-groups stride over the launch's n_slot · n_ff (slot, row) pairs;
// dynamic shared memory: x̂.
template <DevFormat F, int NI>
__global__ void __launch_bounds__(kThreads)
    gate_up_kernel(const __grid_constant__ MoeParams p, int lpr, int act_stride) {
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  __shared__ float scratch[32];
  __shared__ int sel[32];  // stacked expert index of each slot of this launch
  __shared__ float sel_w[32];
  const int warp = threadIdx.x >> 5;
  const SubGroup sg(lpr);
  const int subs = sg.subs, sub = sg.sub, sl = sg.sl;
  const unsigned mask = sg.mask;
  // x̂ is staged before waiting for the previous kernel (the router, or the routed launch for
  // the shared expert), which does not write the residual (see MoeParams::x).
  XSlice<F, NI> x;
  stage_slice<F, NI>(p.x, p.n_embd, p.gate.units, p.norm, p.eps, xs, scratch, sg, x);
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  slot_experts(p, sel, sel_w);
  const int total = p.n_slot * p.n_ff;
  const int stride = gridDim.x * kWarps * subs;
  // The next row pair's loads are issued before this one's math (two round trips in flight).
  auto fetch = [&](int r, RowUnits<NI>& g, RowUnits<NI>& u) {
    const int64_t row = int64_t(sel[r / p.n_ff]) * p.n_ff + r % p.n_ff;
    load_units<F, NI>(p.gate, row, sl, lpr, g);
    load_units<F, NI>(p.up, row, sl, lpr, u);
  };
  const int first = (blockIdx.x * kWarps + warp) * subs + sub;
  RowUnits<NI> wg, wu;
  if (first < total) fetch(first, wg, wu);
  for (int r = first; r < total; r += stride) {
    RowUnits<NI> ng, nu;
    if (r + stride < total) fetch(r + stride, ng, nu);
    float g = partial_dot<F, NI>(wg, x);
    float u = partial_dot<F, NI>(wu, x);
    g = subgroup_sum(g, lpr, mask);
    u = subgroup_sum(u, lpr, mask);
    if (sl == 0) store_gate_up(p, r / p.n_ff, r % p.n_ff, act_stride, g, u);
    wg = ng, wu = nu;
  }
}

constexpr int kDownRows = 8;  // output rows per block

// Block: one warp per slot of the launch. Each warp's sub-groups walk the block's rows for that
// slot.
// MoeParams; F down's format, NI, lpr as gate_up_kernel; act rows act_stride apart. Grid: a
// block per kDownRows rows of h [n_embd].
template <DevFormat F, int NI>
__global__ void down_kernel(const __grid_constant__ MoeParams p, int lpr, int act_stride) {
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  __shared__ float part[32][kDownRows];
  const int w = threadIdx.x >> 5, slot = p.slot_begin + w;
  const SubGroup sg(lpr);
  const int subs = sg.subs, sub = sg.sub, sl = sg.sl;
  const unsigned mask = sg.mask;
  const int units = p.down.units;
  XSlice<F, NI> x;
  x.load(p.act + w * act_stride, units, sl, lpr, unit_elems(F));
  const int r0 = blockIdx.x * kDownRows;
  const int64_t base = int64_t(p.sel[slot] - p.expert_base) * p.n_embd;
  // All of this sub-group's rows are loaded before any is reduced: one memory round trip.
  RowUnits<NI> wv[kDownRows];
#pragma unroll
  for (int k = 0; k < kDownRows; ++k) {
    const int kk = sub + k * subs;
    if (kk < kDownRows && r0 + kk < p.n_embd)
      load_units<F, NI>(p.down, base + r0 + kk, sl, lpr, wv[k]);
  }
#pragma unroll
  for (int k = 0; k < kDownRows; ++k) {
    const int kk = sub + k * subs;
    if (kk >= kDownRows) break;
    float acc = r0 + kk < p.n_embd ? partial_dot<F, NI>(wv[k], x) : 0.f;
    acc = subgroup_sum(acc, lpr, mask);
    if (sl == 0) part[w][kk] = acc;
  }
  __syncthreads();
  store_down<kDownRows>(p, r0, part);
}

// ORCHID_FUSED_EXPERT=0: act = silu(gate) · up from the raw rows, a thread per element.
// MoeParams: gate_up_raw [n_slot, 2, act_stride] → act [n_slot, act_stride].
__global__ void silu_mul_kernel(const __grid_constant__ MoeParams p, int act_stride) {
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  const int i = blockIdx.x * blockDim.x + threadIdx.x, s = i / p.n_ff, r = i % p.n_ff;
  if (s >= p.n_slot) return;
  const float g = p.gate_up_raw[(2 * s) * act_stride + r],
              u = p.gate_up_raw[(2 * s + 1) * act_stride + r];
  p.act[s * act_stride + r] = silu(g) * u;
}

// ORCHID_FUSED_EXPERT=0: h += Σ_s w_s · slot_out[s] over this launch's slots, in slot order (the
// fused down epilogue's sum), a thread per row.
// MoeParams: slot_out [slot_begin + n_slot, n_embd], sel_w → h [n_embd].
__global__ void weighted_residual_kernel(const __grid_constant__ MoeParams p) {
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= p.n_embd) return;
  float sum = 0.f;
  for (int s = p.slot_begin; s < p.slot_begin + p.n_slot; ++s)
    sum = fmaf(p.sel_w[s], p.slot_out[size_t(s) * p.n_embd + r], sum);
  p.h[r] += sum;
}

// Routing on its own (the ablation of routing in the gate/up prologue): one block publishes
// sel / sel_w for a gate/up launch without logits.
// MoeParams: logits [n_expert + 1] → sel, sel_w [top_k + 1].
__global__ void __launch_bounds__(kThreads) route_kernel(const __grid_constant__ MoeParams p) {
  __shared__ int sel[32];
  __shared__ float sel_w[32];
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  route_block(p, sel, sel_w);
  if (int(threadIdx.x) <= p.top_k)
    p.sel[threadIdx.x] = sel[threadIdx.x], p.sel_w[threadIdx.x] = sel_w[threadIdx.x];
}

template <template <DevFormat, int> class Launch, DevFormat F>
Status dispatch_ni(int ni, const MoeParams& p, int lpr, cudaStream_t s) {
  if (ni <= 1) return Launch<F, 1>::run(p, lpr, s);
  if (ni <= 2) return Launch<F, 2>::run(p, lpr, s);
  if (ni <= 4) return Launch<F, 4>::run(p, lpr, s);
  if constexpr (F != DevFormat::q4) {
    if (ni <= 8) return Launch<F, 8>::run(p, lpr, s);
  }
  return err("moe: rows too long for the expert kernels");
}

template <template <DevFormat, int> class Launch>
Status dispatch(const DevMatrix& m, const MoeParams& p, cudaStream_t s) {
  const int lpr = lanes_per_row(m.units);
  const int ni = (m.units + lpr - 1) / lpr;
  switch (m.fmt) {
    case DevFormat::q4:
      return dispatch_ni<Launch, DevFormat::q4>(ni, p, lpr, s);
    case DevFormat::q8:
      return dispatch_ni<Launch, DevFormat::q8>(ni, p, lpr, s);
    case DevFormat::bf16:
      return dispatch_ni<Launch, DevFormat::bf16>(ni, p, lpr, s);
  }
  return err("moe: unknown format");
}

template <DevFormat F, int NI>
struct GateUp {
  static Status run(const MoeParams& p, int lpr, cudaStream_t s) {
    const int units = p.gate.units, subs = 32 / lpr;
    const int want = (p.n_slot * p.n_ff + kWarps * subs - 1) / (kWarps * subs);
    const size_t smem = x_hat_smem_bytes(F, units);
    const int fit =
        sm_count() *
        resident_blocks(reinterpret_cast<const void*>(gate_up_kernel<F, NI>), kThreads, smem);
    const int blocks = std::max(1, std::min(want, fit));
    return launch("moe gate/up", gate_up_kernel<F, NI>, dim3(blocks), dim3(kThreads), smem, s, p,
                  lpr, act_stride_of(p));
  }
};

template <DevFormat F, int NI>
struct Down {
  static Status run(const MoeParams& p, int lpr, cudaStream_t s) {
    const int blocks = (p.n_embd + kDownRows - 1) / kDownRows;
    return launch("moe down", down_kernel<F, NI>, dim3(blocks), dim3(32 * p.n_slot), 0, s, p, lpr,
                  act_stride_of(p));
  }
};

}  // namespace

Status check_routing(const MoeParams& p) {
  if (p.logits && (p.n_expert > 1024 || p.top_k < 1 || p.top_k > p.n_expert || p.top_k + 1 > 32 ||
                   !p.sel || !p.sel_w || p.slot_begin))
    return err("moe: routing of ", p.n_expert, " experts, top ", p.top_k, " is not supported");
  return {};
}

Status launch_moe_silu_mul(const MoeParams& p, cudaStream_t s) {
  if (!p.gate_up_raw || !p.act) return err("moe: silu·mul needs gate_up_raw and act");
  const int n = p.n_slot * p.n_ff;
  return launch("moe silu*mul", silu_mul_kernel, dim3((n + kThreads - 1) / kThreads),
                dim3(kThreads), 0, s, p, act_stride_of(p));
}

Status launch_moe_weighted_residual(const MoeParams& p, cudaStream_t s) {
  if (!p.slot_out || !p.h) return err("moe: the weighted residual needs slot_out and h");
  return launch("moe weighted residual", weighted_residual_kernel,
                dim3((p.n_embd + kThreads - 1) / kThreads), dim3(kThreads), 0, s, p);
}

Status launch_moe_route(const MoeParams& p, cudaStream_t s) {
  if (!p.logits) return err("moe: routing needs logits");
  ORCHID_TRY(check_routing(p));
  return launch("moe routing", route_kernel, dim3(1), dim3(kThreads), 0, s, p);
}

Status launch_moe_gate_up(const MoeParams& p, cudaStream_t s) {
  ORCHID_TRY(check_routing(p));
  if (p.gate.fmt != p.up.fmt || p.gate.units != p.up.units || p.gate.cols != p.n_embd)
    return err("moe: gate and up must share format and shape");
  Expected<bool> done = launch_moe_gate_up_dp4a(p, s);
  if (!done) return done.error();
  if (*done) return {};
  if (p.batch.slots > 1) return err("moe gate/up: no batched kernel for these experts");
  return dispatch<GateUp>(p.gate, p, s);
}

Status launch_moe_down(const MoeParams& p, cudaStream_t s) {
  if (p.n_slot < 1 || p.n_slot > 32) return err("moe: ", p.n_slot, " slots (at most 32)");
  if (p.down.cols != p.n_ff) return err("moe: down has ", p.down.cols, " columns, not ", p.n_ff);
  Expected<bool> done = launch_moe_down_dp4a(p, s);
  if (!done) return done.error();
  if (*done) return {};
  if (p.batch.slots > 1) return err("moe down: no batched kernel for these experts");
  return dispatch<Down>(p.down, p, s);
}

}  // namespace orchid::cuda
