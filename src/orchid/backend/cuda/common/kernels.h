// The CUDA backend's kernels as seen from the host: the weight descriptor they read, one
// parameter block per kernel family, and the launchers. Shared by the backend, the benchmark
// and the kernel tests; plain C++ (no CUDA syntax) so that g++ can include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "orchid/backend/cuda/common/host_device.h"
#include "orchid/util/status.h"

namespace orchid::cuda {

// How a device matrix stores its elements. Every row is a whole number of 16-byte units.
enum class DevFormat : uint8_t {
  q4,    // MLX affine 4-bit: 32 elements per unit, element 8w+k in bits [4k,4k+4) of word w
  q8,    // MLX affine 8-bit: 16 elements per unit
  bf16,  // dense bf16: 8 elements per unit; rows zero-padded to whole units
};

// Elements one 16-byte unit holds.
ORCHID_HOST_DEVICE constexpr int unit_elems(DevFormat f) {
  return f == DevFormat::q4 ? 32 : f == DevFormat::q8 ? 16 : 8;
}

// A weight matrix W [rows, cols] in device memory; y = x · Wᵀ.
struct DevMatrix {
  const void* w = nullptr;       // [rows, units] 16-byte units
  const uint32_t* sb = nullptr;  // q4/q8: [rows, cols / group] (scale, bias) as bf16 pairs
  int rows = 0, cols = 0;
  int units = 0;  // 16-byte units per row: ceil(cols / unit_elems)
  int group = 0;  // q4/q8: elements per (scale, bias); a multiple of unit_elems
  DevFormat fmt = DevFormat::bf16;
  // q4: the scaled-code GEMMs' power of two (set_scaled_code_exp; prefill/prefill_kernels.h), 0 unset.
  int code_exp = 0;
};

// ---- Batched decode --------------------------------------------------------------------------

// A batched step runs each decode launch for `slots` sequences at once, a grid dimension for the
// slot (y, or z where y is taken). Slot b's activations, flags (position, halt, token) and
// routing are slot 0's pointers moved by b · stride 4-byte elements (one arena,
// CudaBackend::init); its state (KV cache, conv ring, recurrent state) comes from `states`, a
// device table [slot][n_layer][2] of (K cache, V cache) or (conv ring, S) pointers. Each slot's
// arithmetic is the batch-1 kernel's, so its results are bit for bit the ones it gets alone.
// slots == 1: the batch-1 launch, its code unchanged.
constexpr int kMaxSlots = 8;
struct SlotBatch {
  int slots = 1;
  int64_t stride = 0;
  void* const* states = nullptr;
  int layer = 0, n_layer = 0;
};

// Split-KV decode attention: ranges of kKeysPerSplit keys, at most kMaxSplitsPerHead a head
// (measured against 32-96 keys and other caps: bench/results/cuda-splitkv-sweep-2026-11-30*.json,
// cuda-splitkv-keys-2026-12-01-s9.json). The ranges a context of n_keys takes: the least power of
// two s with s · kKeysPerSplit ≥ n_keys, at most `cap`.
constexpr int kKeysPerSplit = 128, kMaxSplitsPerHead = 128;
ORCHID_HOST_DEVICE inline int splits_for_keys(int64_t n_keys, int cap) {
  int s = 1;
  while (s < cap && int64_t(s) * kKeysPerSplit < n_keys) s *= 2;
  return s;
}

// ---- GEMV: y = W · x̂ for up to kMaxGemvTasks matrices that share the input x --------------

constexpr int kMaxGemvTasks = 4;
struct GemvTask {
  DevMatrix m;
  float* y = nullptr;          // [m.rows]
  const float* add = nullptr;  // optional [m.rows] added to the product (the residual)
};

// Bytes of one slot's quantised x̂ for the dp4a GEMVs (decode/dp4a_q4.cuh: codes of `units`
// 32-element units, then (d, sum) per unit, then the sum of each 8-element word).
ORCHID_HOST_DEVICE constexpr int64_t x_codes_bytes(int units) {
  return int64_t(units) * (4 * 16 + 8 + 4 * 4);
}

// What happens after the dot products.
enum class GemvEpilogue : uint8_t {
  store,   // y = W·x̂ (+ add)
  argmax,  // lm_head: y = logits (optional); the last block writes the chosen id
};

struct GemvParams {
  GemvTask task[kMaxGemvTasks];
  int n_task = 0;
  const float* x = nullptr;  // [cols] fp32
  int cols = 0;
  const float* norm = nullptr;  // optional RMSNorm weight: x̂ = x · rsqrt(mean(x²) + eps) · norm
  float eps = 1e-6f;
  const int* halt = nullptr;  // optional device flag: nonzero → the kernel does nothing

  GemvEpilogue epilogue = GemvEpilogue::store;
  unsigned* ticket = nullptr;  // argmax: zeroed counter, reset by the last block
  float* partial = nullptr;    // argmax scratch: [2 * blocks] (value, index as float bits)
  // argmax (greedy, or Gumbel-max sampling at temperature 1 / inv_temp when inv_temp > 0)
  int* token = nullptr;  // receives the chosen id (the next step's input)
  int* pos = nullptr;    // incremented by the last block: the step is complete
  const int* stop_ids = nullptr;
  int n_stop = 0;
  int* stopped = nullptr;     // set when the chosen id is a stop id (halts later steps)
  int* host_token = nullptr;  // optional mapped host [2]: the id also goes to slot (position & 1)
  float inv_temp = 0.f;
  uint64_t seed = 0;
  // Optional bitset over the rows (bit r of word r / 32): rows not set never win the pick
  // (constrained decoding). The caller guarantees at least one row is set.
  const uint32_t* allowed = nullptr;
  SlotBatch batch;
  // Batched argmax: per slot its temperature's inverse and seed ([slots]), its stop ids at
  // stop_ids + b · kMaxStopIds (n_stop each, padded with -1), its host token pair at
  // host_token + 2b; token, pos and stopped move with the batch's stride.
  const float* slot_inv_temp = nullptr;
  const uint64_t* slot_seed = nullptr;
  // Batched, optional: room for every slot's x̂ codes (x_codes_bytes(cols / 32) bytes at each
  // slot's b · stride floats). Given, a kernel of its own quantises each slot's x̂ once a step
  // into it, instead of every block of the GEMV quantising every slot's (measured: 8.7 µs of a
  // 24.8 µs 8-slot launch).
  float* x_codes = nullptr;
};
constexpr int kMaxStopIds = 64;
// At most this many blocks per launch (size `partial` as 2 × this).
int gemv_blocks(const GemvParams& p);
Status launch_gemv(const GemvParams& p, cudaStream_t s);

// ---- MoE experts ----------------------------------------------------------------------------

// One launch covers slots [slot_begin, slot_begin + n_slot) of the routing (top-k experts,
// then the shared expert at slot top_k). Slot s uses stacked expert sel[s] - expert_base. When
// the shared expert matches the routed ones it is stacked as expert n_expert and one launch
// covers every slot; otherwise the shared expert is its own one-slot launch (expert_base E).
struct MoeParams {
  DevMatrix gate, up;  // [experts * n_ff, n_embd]
  DevMatrix down;      // [experts * n_embd, n_ff]
  int n_ff = 0, n_embd = 0, n_slot = 0;
  int slot_begin = 0, expert_base = 0;
  // Residual h [n_embd]. The gate/up launch reads it before waiting for the kernel launched
  // just before it (programmatic dependent launch), so that kernel must not write it.
  const float* x = nullptr;
  const float* norm = nullptr;  // post-attention RMSNorm weight
  float eps = 1e-6f;
  // Routing. With `logits` ([n_expert] router logits, then the shared-expert gate's) the
  // gate/up launch routes in every block's prologue — softmax, top_k (ties to the lower id),
  // renormalised weights, slot top_k = shared expert (id n_expert) with its sigmoid gate — and
  // block 0 publishes sel / sel_w for the down launch. Without, sel / sel_w are inputs.
  const float* logits = nullptr;
  int n_expert = 0, top_k = 0;
  // The dp4a down launch (only after a dp4a gate/up launch) reads sel before waiting for it: the
  // gate/up launch publishes sel (block 0, fenced) before it lets dependents launch.
  int* sel = nullptr;      // [top_k + 1]
  float* sel_w = nullptr;  // [top_k + 1]
  float* act = nullptr;    // [n_slot, n_ff] silu(gate) ⊙ up of this launch's slots
  // ORCHID_FUSED_EXPERT=0 (both null: the fused epilogues): gate/up stores its raw rows in
  // gate_up_raw ([n_slot, 2, act stride]: gate, then up) and launch_moe_silu_mul forms act; down
  // stores each slot's rows unweighted in slot_out ([slot_begin + n_slot, n_embd]) and
  // launch_moe_weighted_residual adds Σ_s w_s · slot_out[s] to h.
  float* gate_up_raw = nullptr;
  float* slot_out = nullptr;
  float* h = nullptr;  // residual, += Σ_s w_s · down_s(act_s)
  const int* halt = nullptr;
  SlotBatch batch;
};
Status launch_moe_gate_up(const MoeParams& p, cudaStream_t s);
Status launch_moe_down(const MoeParams& p, cudaStream_t s);
// The unfused epilogues (ORCHID_FUSED_EXPERT=0): act from gate_up_raw; h from slot_out.
Status launch_moe_silu_mul(const MoeParams& p, cudaStream_t s);
Status launch_moe_weighted_residual(const MoeParams& p, cudaStream_t s);
// The routing alone, by one block, into sel / sel_w (for a gate/up launch without logits): the
// ablation of routing in the gate/up prologue.
Status launch_moe_route(const MoeParams& p, cudaStream_t s);

// ---- Gated attention (decode) -----------------------------------------------------------------

struct AttnParams {
  float* qg = nullptr;              // [n_head, 2 * hd]: query | gate per head; q normed in place
  const float* k = nullptr;         // [n_head_kv * hd] this token's K (before norm and RoPE)
  const float* v = nullptr;         // [n_head_kv * hd]
  const float* q_norm = nullptr;    // [hd]
  const float* k_norm = nullptr;    // [hd]
  const float* inv_freq = nullptr;  // [n_rot / 2]
  float eps = 1e-6f;
  int n_head = 0, n_head_kv = 0, hd = 0, n_rot = 0;
  // ORCHID_FUSED_QK=0: [n_head_kv * hd] scratch for k between the three unfused kernels (the
  // q/k norm, RoPE and KV write then run as three launches); null: one fused launch.
  float* k_work = nullptr;
  uint16_t* kc = nullptr;     // [capacity, n_head_kv, hd] bf16, post-RoPE
  uint16_t* vc = nullptr;     // [capacity, n_head_kv, hd] bf16
  const int* pos = nullptr;   // this token's position (device)
  float* out = nullptr;       // [n_head * hd] attention ⊙ sigmoid(gate)
  int n_split = 1;            // KV ranges per KV head; > 1 needs the two buffers below
  float* part_acc = nullptr;  // [n_head_kv, n_split, group, hd]
  float* part_ml = nullptr;   // [n_head_kv, n_split, group, 2] (max, sum)
  const int* halt = nullptr;
  // Batched: n_split is the grid's ranges (the batch's most), n_split_min the fewest a slot
  // takes; each slot takes the ranges its own context does alone (splits_for_keys), the rest of
  // its blocks do nothing.
  int n_split_min = 1;
  SlotBatch batch;
};
// Largest GQA group and head size the attention kernel handles.
constexpr int kMaxGqaGroup = 8, kMaxHeadDim = 256;
Status launch_qk_norm_rope_kv(const AttnParams& p, cudaStream_t s);
// The attention kernel, then (n_split > 1) the kernel merging the ranges.
Status launch_attention_decode(const AttnParams& p, cudaStream_t s);
// Whether decode attention multiplies on the tensor cores, the GQA group's query heads as the rows
// of one tile (default; head sizes 64, 128, 256), or on the CUDA cores. Process-wide; the backend
// sets it from its switch.
bool attention_mma_enabled();
void set_attention_mma_enabled(bool on);
// The tensor-core kernel runs 8 warps a block (one 16-key stage each of a 128-key range, all
// requested before the dependency wait) where its grid fits one block an SM, else 4. Tests turn
// the 8-warp form off to run the 4-warp one at short contexts; the backend never does.
bool attention_wide_enabled();
void set_attention_wide_enabled(bool on);

// ---- Gated DeltaNet (one token) -------------------------------------------------------------

struct GdnParams {
  const float* qkv = nullptr;      // [conv_dim] raw in_proj_qkv output
  const float* z = nullptr;        // [hv * dv]
  const float* b = nullptr;        // [hv]
  const float* a = nullptr;        // [hv]
  const float* conv_w = nullptr;   // [conv_dim, K]: tap K-1 multiplies the current token
  float* conv_ring = nullptr;      // [conv_dim, K]: raw inputs, slot p % K holds position p
  float* S = nullptr;              // [hv, dk, dv] recurrent state
  const float* A_log = nullptr;    // [hv]
  const float* dt_bias = nullptr;  // [hv]
  const float* norm = nullptr;     // [dv] gated RMSNorm weight
  const int* pos = nullptr;
  int hk = 0, hv = 0, dk = 0, dv = 0, K = 0;
  float eps = 1e-6f;
  float* out = nullptr;  // [hv * dv]
  const int* halt = nullptr;
  SlotBatch batch;
};
constexpr int kMaxGdnHeadDim = 128;
Status launch_gdn_step(const GdnParams& p, cudaStream_t s);

// Whether decode kernels launch with programmatic dependent launch (default on; the backend
// sets it from its switch). Process-wide.
bool pdl_enabled();
void set_pdl_enabled(bool on);
// Whether this device runs kernel code with the dependency instructions (Hopper code on a
// compute capability 9.x device); otherwise launches never overlap. Cached.
bool pdl_supported();
// Whether `kernel` (an sm_90a kernel: wgmma, setmaxnreg) runs here as such — a compute capability
// 9.0 device running its sm_90a code, not sm_80 code through PTX JIT — with `smem` bytes of
// dynamic shared memory allowed a block. Not cached: its callers cache it.
bool sm90a_kernel_runs(const void* kernel, size_t smem);
// Whether the q4 projections, the q8 router and the expert kernels run the dp4a kernels
// (default: x̂ quantised to int8 hi + lo codes, every row requested up front; decode/dp4a_q4.cuh) or
// the earlier fp32 kernels (the ablation). Process-wide; the backend sets it from its switch.
bool dp4a_enabled();
void set_dp4a_enabled(bool on);
// The batched decode's q4 GEMVs on the int8 tensor cores (decode/gemv_slots_mma.cu, and the
// lm_head's decode/lm_head_slots.cu) instead of dp4a; off: ORCHID_SLOT_MMA=0.
bool slot_mma_enabled();
void set_slot_mma_enabled(bool on);
// The batched decode's expert down streamed through shared memory (decode/moe_dp4a.cu:
// down_staged_kernel) instead of rows held in registers a round at a time; off:
// ORCHID_STAGED_DOWN=0.
bool staged_down_enabled();
void set_staged_down_enabled(bool on);
// Single q4 GEMVs of 2,048 columns and at least stream_min_rows() rows (default 32768: the
// lm_head) run as a stream with dp4a on: a bulk-copy stream (decode/gemv_bulk.cu: TMA fills
// shared-memory stages, ~180 KB in flight an SM) on an sm_90a device, else the register stream
// (decode/gemv_stream.cu, the sm_80 code's). Tests lower the row bound to run them on small
// matrices, and turn the bulk form off to run the register stream on Hopper; the backend does
// neither.
int stream_min_rows();
void set_stream_min_rows(int rows);
bool bulk_enabled();
void set_bulk_enabled(bool on);
// Whether this device runs the bulk-copy stream (an sm_90a device running its sm_90a code, with
// the ~190 KB of shared memory a block it takes). Cached.
bool bulk_gemv_supported();
// Whether this device runs the batched bulk-copy stream (the batched lm_head; the batched decode
// step needs it). Cached.
bool bulk_batched_supported();
// Whether this device runs the batched lm_head on the tensor cores (decode/lm_head_slots.cu: sm_90a
// code, ~200 KB of shared memory a block). Cached.
bool lm_head_slots_supported();

// ---- small kernels ----------------------------------------------------------------------------

// h = dequantized row `*token` of the embedding.
Status launch_embed(const DevMatrix& embd, const int* token, float* h, int n_embd, const int* halt,
                    cudaStream_t s, const SlotBatch& batch = {});
// out[n] = x · rsqrt(mean(x²) + eps) · w in one block: the unfused RMSNorm (ablation).
Status launch_rms_norm(const float* x, const float* w, float eps, int n, float* out,
                       const int* halt, cudaStream_t s);
// ++*pos unless halted (the step's end when no lm_head runs).
Status launch_advance(int* pos, const int* halt, cudaStream_t s);
// Fills n 16-byte units (or n words) with seeded pseudo-random bits.
Status launch_fill_random(void* dst, int64_t n_words, uint64_t seed, cudaStream_t s);
// Fills n floats uniformly in [lo, hi); n bf16 values likewise.
Status launch_fill_uniform_f32(float* dst, int64_t n, float lo, float hi, uint64_t seed,
                               cudaStream_t s);
Status launch_fill_uniform_bf16(uint16_t* dst, int64_t n, float lo, float hi, uint64_t seed,
                                cudaStream_t s);
// (scale, bias) pairs for synthetic q4/q8 weights: values in roughly ±amp.
Status launch_fill_scale_bias(uint32_t* dst, int64_t n, float amp, int bits, uint64_t seed,
                              cudaStream_t s);
// Reads n bytes (a multiple of 16) and writes one word, for the read-bandwidth ceiling.
Status launch_read_bandwidth(const void* src, int64_t bytes, unsigned* sink, cudaStream_t s);

}  // namespace orchid::cuda
