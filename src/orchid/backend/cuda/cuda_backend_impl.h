// Internal to the CUDA backend (shared with its benchmark): the state, the backend class and
// the per-step launch sequence.
#pragma once

#include <cuda_runtime_api.h>

#include <nlohmann/json.hpp>
#include <functional>
#include <string>
#include <memory>
#include <mutex>
#include <vector>

#include "orchid/backend/backend.h"
#include "orchid/backend/cuda/model/device_model.h"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {

struct MoeRouting;  // prefill/prefill_kernels.h

// Returns a Status naming the failing runtime call.
#define ORCHID_CUDA(expr)                                        \
  do {                                                           \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess)              \
      return ::orchid::err(#expr, ": ", cudaGetErrorString(e_)); \
  } while (0)

// Run-time switches (environment). Each turns one named optimisation off so that its effect can
// be measured alone (the bench's matched ablations; docs/bench.md lists them with their effect),
// or is a setting. Decode (decode/step.cpp):
//   ORCHID_CUDA_GRAPH=0     launch kernel by kernel instead of one captured graph per step;
//   ORCHID_PDL=0            no programmatic dependent launch (each kernel waits for the last to end);
//   ORCHID_DP4A=0           the q4 projections, q8 router, experts and lm_head on the fp32 kernels
//                           instead of the bandwidth GEMVs (int8 x̂ codes on dp4a, every row
//                           requested before the dependency wait, the lm_head as a stream);
//   ORCHID_FUSED_NORM=0     each RMSNorm as a kernel of its own instead of in the GEMV prologues;
//   ORCHID_FUSED_ROUTING=0  routing in a kernel of its own instead of the expert gate/up prologue;
//   ORCHID_FUSED_EXPERT=0   SiLU(gate)·up and the weighted residual sum as kernels of their own;
//   ORCHID_FUSED_QK=0       the q/k RMSNorm, RoPE and KV write as three kernels instead of one;
//   ORCHID_MMA_ATTENTION=0  attention on the CUDA cores instead of the tensor cores with the GQA
//                           group's query heads packed as the rows of one tile;
//   ORCHID_SPLIT_KV=0       one KV range per head instead of ranges of kKeysPerSplit keys;
//   ORCHID_BATCH_DECODE=0   states decoding at once run one after the other instead of as the
//                           lanes of one batched step (decode/batch.cpp).
// Prefill (prefill/chunk.cpp):
//   ORCHID_PREFILL_CHUNK=N  tokens a chunk (default: 16384 on GPUs of 64 GiB or more, else 8192;
//                           prompts up to 8K are one chunk either way); N = 1 runs the prompt as one
//                           decode step a token (the chunked prefill's ablation);
//   ORCHID_EXACT_PREFILL=0  the projections on plain fp16 operands instead of the exact path
//                           (activations as fp16 hi + lo pairs, integer codes, scale and bias per
//                           group in fp32: about twice the tensor-core work);
//   ORCHID_FUSED_DEQUANT=0  (with the exact path off) each weight dequantised to an fp16 buffer
//                           before a plain GEMM instead of tile by tile inside it;
//   ORCHID_DEVICE_ROUTING=0 each layer's routing tables through the host and back (the
//                           synchronisation a host-side sort would need);
//   ORCHID_PREFILL_TILE=16|32|64|128  the expert GEMMs' rows per tile (default: by the load);
//   ORCHID_GDN_CHUNKED=auto|0|1  the DeltaNet scan: chunked on the tensor cores from
//                           kGdnChunkedMinTokens tokens a chunk (auto), always sequential (0) or
//                           always chunked (1);
//   ORCHID_FLASH_PREFILL=0  attention with the scores materialised instead of flash attention.
// The on-device decode loop's own switch, ORCHID_DEVICE_DECODE, is the engine's (runtime/engine.cpp).
//
// From this many tokens a chunk, ORCHID_GDN_CHUNKED=auto takes the chunked DeltaNet form: below,
// its two extra launches and 64-token padding outweigh the sequential scan's ~0.33 µs a token.
// Measured on the H200 (bench/results/cuda-prefill-2026-11-30-s7.json, the DeltaNet launch over
// 30 layers, scan / chunked ms): 64 tokens 1.31 / 1.66, 128 1.83 / 1.86, 256 2.93 / 2.37, 512
// 5.13 / 3.40; the crossover lies between 128 and 256.
constexpr int kGdnChunkedMinTokens = 192;

struct Switches {
  bool graph = true;
  bool pdl = true;
  bool dp4a = true;
  bool fused_norm = true;
  bool fused_routing = true;
  bool fused_expert = true;
  bool fused_qk = true;
  bool mma_attention = true;
  bool split_kv = true;
  bool batch_decode = true;
  bool slot_mma = true;  // the batched q4 GEMVs on the int8 tensor cores
  bool staged_down = true;  // the batched expert down streamed through shared memory
  bool prefill = true;    // ORCHID_PREFILL_CHUNK=1 turns it off
  int prefill_chunk = 0;  // 0: CudaBackend::chunk_tokens() picks it by the GPU's memory
  bool exact_prefill = true;
  bool fused_dequant = true;
  bool device_routing = true;
  int prefill_tile = 0;  // 0: chosen from the rows per expert
  int gdn_chunked = -1;  // -1: auto (by the chunk's tokens), 0: sequential scan, 1: chunked form
  bool flash_prefill = true;
  static Switches from_env();
  // Sets the kernels' process-wide flags (common/kernels.h) from these switches.
  void apply() const;
  // The switches a captured step depends on (split-KV's enter through the range count).
  std::string graph_key() const;
};

struct CudaState final : BackendState {
  int64_t n_past_ = 0, capacity_ = 0;
  DeviceArena mem;
  std::vector<uint16_t*> kc, vc;  // per layer: [capacity, n_head_kv, head_dim] bf16 (full)
  std::vector<float*> ring, S;    // per layer: conv ring [conv_dim, K], state [hv, dk, dv]
  float* rec_block = nullptr;     // all rings and states, contiguous (snapshots copy it)
  int64_t rec_bytes = 0;
  int* d_pos = nullptr;   // tokens consumed (the next token's position)
  int* d_halt = nullptr;  // set by a chosen stop id: later steps do nothing
  std::vector<int64_t> rewinds;

  // A captured step; rebuilt when its key changes.
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    std::string key;
  };
  Graph graphs[2];  // [0]: step without lm_head, [1]: with lm_head + argmax

  ~CudaState() override;
  int64_t n_past() const override { return n_past_; }
  int64_t capacity() const override { return capacity_; }
};

// The recurrent states (the KV rows stay in the state), in device memory (rec) or, once the
// state cache moved it to its host tier, in host memory.
// Pinned host blocks for the state snapshots moved off the device, kept for reuse: pinning a
// block takes tens of milliseconds (133 MB: the full-size model's recurrent state) and freeing
// pinned memory waits for the device. Only copies on the backend's stream touch a block, so a
// block handed back is reusable at once (the next copy into it is ordered after the last one
// out of it). (Pinning spares ahead on a background thread was measured: its cudaMallocHost
// calls stalled the serving thread's CUDA calls as long.)
class PinnedPool {
 public:
  PinnedPool() = default;
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  ~PinnedPool();
  void* get(size_t bytes);  // null when the host cannot pin more
  void put(void* p, size_t bytes);

 private:
  std::mutex mu_;
  std::vector<std::pair<size_t, void*>> free_;
};

// A snapshot's recurrent state: in device memory (stream-ordered: allocated, copied and freed on
// the backend's stream, so that neither making nor moving one waits for the decode steps queued
// there), or, moved, in a pinned host block.
struct CudaSnapshot final : StateSnapshot {
  int64_t n_past_ = 0;
  size_t rewinds_seen = 0;
  cudaStream_t stream = nullptr;
  float* rec = nullptr;   // device; null once moved
  float* host = nullptr;  // pinned, from pool; set once moved
  std::shared_ptr<PinnedPool> pool;
  int64_t rec_bytes = 0;
  CudaSnapshot() = default;
  CudaSnapshot(const CudaSnapshot&) = delete;
  CudaSnapshot& operator=(const CudaSnapshot&) = delete;
  ~CudaSnapshot() override {
    if (rec) cudaFreeAsync(rec, stream);
    if (host) pool->put(host, size_t(rec_bytes));
  }
  int64_t n_past() const override { return n_past_; }
  int64_t bytes() const override { return rec_bytes; }
  bool on_device() const override { return rec != nullptr; }
};

// The prefill path's device buffers, sized by the chunk (not the prompt); made on first use.
struct PrefillScratch {
  DeviceArena mem;
  int chunk = 0;            // tokens per chunk these buffers hold
  int* tokens = nullptr;    // [chunk]
  float* h = nullptr;       // [chunk, n_embd] residual stream
  uint16_t* xn = nullptr;   // [chunk, n_embd] fp16 normed rows (GEMM operand)
  uint16_t* mix = nullptr;  // [chunk, max(n_head·hd, hv·dv)] fp16 attention / DeltaNet out
  // The exact path's remainders (x − fp16(x)) of xn, mix, act and sh_act, same shapes; made only
  // for it (null otherwise).
  bool exact = false;
  uint16_t *xn_lo = nullptr, *mix_lo = nullptr, *act_lo = nullptr, *sh_act_lo = nullptr;
  // The scaled codes' group sums of xn, mix, act and sh_act (launch_group_sums: rows of
  // 2 · group_sums_half(width)); made only where the warp-specialised tiles run (sums_on =
  // ws_tiles_supported(), set by ensure_prefill_scratch), the only tiles that read them.
  bool sums_on = false;
  uint16_t *xn_sums = nullptr, *mix_sums = nullptr, *act_sums = nullptr, *sh_act_sums = nullptr;
  float *qg = nullptr, *k = nullptr, *v = nullptr;  // [chunk, n_head·2hd], [chunk, kv·hd] ×2
  float *qkv = nullptr, *z = nullptr, *b = nullptr, *a = nullptr;  // DeltaNet projections
  float *conv_out = nullptr, *o = nullptr, *beta = nullptr, *decay = nullptr;
  float* logits = nullptr;  // [chunk, n_expert + 1] router + shared gate
  int *sel = nullptr, *pair_token = nullptr, *pair_slot = nullptr;
  float *sel_w = nullptr, *pair_w = nullptr;
  int *counts = nullptr, *offsets = nullptr, *n_tiles = nullptr;
  int *tile_expert = nullptr, *tile_begin = nullptr, *tile_end = nullptr;
  int max_tiles = 0;
  uint16_t* act = nullptr;     // [chunk · (top_k + 1), n_ff] fp16
  float* slot_out = nullptr;   // [chunk, top_k + 1, n_embd]
  float* sh_gu = nullptr;      // shared expert kept apart: [2, chunk, n_ff_shexp] gate, up
  uint16_t* sh_act = nullptr;  // [chunk, n_ff_shexp] fp16
  float* head = nullptr;       // [kHeadRows, n_vocab] logits of a slice of positions
  static constexpr int kHeadRows = 64;
  DeviceArena extra;  // buffers grown on demand: the ablations' (dequantised weight, scores) and
                      // the chunked DeltaNet form's tiles (gdn_chunked_scratch_bytes)
  uint16_t* dequant = nullptr;
  int64_t dequant_elems = 0;
  float* scores = nullptr;
  int64_t scores_elems = 0;
  void* gdn_tiles = nullptr;
  size_t gdn_tiles_bytes = 0;
};

// How the lm_head step picks its token.
struct PickConfig {
  bool want_logits = false;  // also write fp32 logits to the device buffer
  int n_stop = 0;            // stop ids in the device buffer
  float inv_temp = 0.f;
  uint64_t seed = 0;
  bool masked = false;  // only ids set in the device's allowed-ids bitset may win
};

// One kernel launch's place in a profiled step.
struct KernelTiming {
  std::string name;
  double ms = 0;
  int64_t bytes = 0;  // weight + cache + state bytes the launch must move
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::unique_ptr<DeviceModel> dm);
  ~CudaBackend() override;
  Status init();

  std::string name() const override { return "cuda"; }
  int64_t n_vocab() const override { return c_.n_vocab; }
  Expected<std::unique_ptr<BackendState>> new_state(int64_t max_tokens) override;
  int64_t max_context(int64_t limit, int states) const override;
  Status forward(BackendState& state, std::span<const int32_t> tokens, LogitsMode mode,
                 std::vector<float>& logits, int64_t chunk,
                 const CancelCheck& cancel = {}) override;
  std::unique_ptr<StateSnapshot> snapshot(const BackendState& state) override;
  Status move_to_host(StateSnapshot& snap) override;
  int64_t default_state_cache_bytes() const override;
  Status restore(BackendState& state, const StateSnapshot& snap) override;
  bool can_decode_on_device() const override { return true; }
  Expected<std::vector<int32_t>> decode_on_device(
      BackendState& state, int32_t token, int max_new, const DeviceDecodeOptions& opts,
      const std::function<bool(int32_t)>& on_token) override;
  Expected<int32_t> step_and_pick(BackendState& state, int32_t token,
                                  const std::vector<uint32_t>* allowed,
                                  const DeviceDecodeOptions& opts) override;
  // Up to kMaxSlots lanes a step (more: in groups), where the model's shapes and the switches
  // take the batched kernels (batch_step_runs); otherwise one lane after the other.
  Status decode_batch(std::span<DecodeLane> lanes,
                      const std::function<bool()>& pause = {}) override;
  // Whether a batched step of this model can be launched (tried once by capturing one).
  bool batch_step_runs();
  Status fill_synthetic_context(BackendState& state, int64_t n, uint64_t seed) override;

  // Runs one decode step kernel by kernel with events between launches.
  Expected<std::vector<KernelTiming>> profile_step(CudaState& st);
  // One batched step of the lanes' states (their tokens fed), kernel by kernel with events
  // between launches. It writes each state's next KV row and recurrent state but leaves its
  // position: refill a state before using it again.
  Expected<std::vector<KernelTiming>> profile_batch_step(std::span<const DecodeLane> lanes);
  // Prefills `tokens` (chunked path) with events between launches; bytes = FLOPs per launch.
  Expected<std::vector<KernelTiming>> profile_prefill(CudaState& st,
                                                      std::span<const int32_t> tokens);
  // Whether this model's shapes take the chunked prefill (otherwise prompts run step by step).
  bool prefill_supported() const;
  // Device bytes of the prefill buffers (0 before the first prefill).
  int64_t prefill_scratch_bytes() const;
  // Tokens per prefill chunk: the switch's, or 16384 on GPUs of at least 64 GiB and 8192 below.
  int chunk_tokens() const;
  const DeviceModel& device_model() const { return *dm_; }
  const Switches& switches() const { return sw_; }
  Switches& switches() { return sw_; }
  cudaStream_t stream() const { return stream_; }
  int64_t state_bytes(int64_t tokens) const;

 private:
  struct Profiler;
  int split_for(int64_t n_keys) const;
  // The step's launches: for one state (batch.slots == 1), or for the batch's slots (st null;
  // their states in slot_states_, flags in the arena); n_split_min: the fewest KV ranges a slot
  // of the batch takes.
  Status enqueue_step(CudaState* st, const SlotBatch& batch, bool head, const PickConfig& pick,
                      int n_split, int n_split_min, Profiler* prof);
  // One batched step of `slots` slots (the graph keyed by them, the ranges and the stop ids).
  Status run_batch_step(int slots, int n_split, int n_split_min, int n_stop);
  // Up to kMaxSlots lanes, batched.
  Status decode_slots(std::span<DecodeLane> lanes, const std::function<bool()>& pause);
  // The lanes' inputs to the device: state table, pick settings, positions, halt flags, tokens.
  Status upload_slots(std::span<const DecodeLane> lanes);
  // The GEMV input for a normed residual: (h, norm) fused, or (normed copy, none) unfused.
  Status normed_input(const float* norm, const int* halt, Profiler* prof, const float*& x,
                      const float*& x_norm);
  Status enqueue_gemv_group(GemvTask* tasks, int n, const float* x, int cols, const float* norm,
                            const int* halt, const SlotBatch& batch, Profiler* prof,
                            const char* label);
  Status run_step(CudaState& st, bool head, const PickConfig& pick);
  // Launches g, captured anew from `enqueue` when its key is not `key`.
  Status launch_graph(CudaState::Graph& g, const std::string& key,
                      const std::function<Status()>& enqueue);
  Status sync(const char* what);
  // Prefill in chunks on the tensor cores (prefill/chunk.cpp).
  Status ensure_prefill_scratch(int chunk);
  Status forward_chunked(CudaState& st, std::span<const int32_t> tokens, LogitsMode mode,
                         std::vector<float>& logits, int64_t chunk, Profiler* prof,
                         const CancelCheck& cancel);
  // A forward cancelled after `done` of `total` tokens: waits for the launched work, puts
  // n_past (host and device) back to n_past0 and returns the cancellation (Backend::forward).
  Status cancel_forward(CudaState& st, int64_t n_past0, int64_t done, int64_t total);
  Status prefill_chunk(CudaState& st, int T, Profiler* prof);
  // An fp16 GEMM operand of the prefill buffers: hi, its remainder (exact path, else null) and
  // its group sums (scaled codes, else null).
  struct Operand {
    const uint16_t* hi;
    const uint16_t* lo;
    const uint16_t* sums;
  };
  // xn: the layer's normed input (P.xn as an Operand).
  Status prefill_attention(CudaState& st, int l, int T, const Operand& xn, Profiler* prof);
  Status prefill_delta_net(CudaState& st, int l, int T, const Operand& xn, Profiler* prof);
  Status prefill_moe(const DevLayer& L, int T, Profiler* prof);
  // Whether the layer's router fits the exact-path GEMM (the shared-expert gate is a dot in the
  // norm kernel beside it).
  bool router_on_tensor_cores(const DevLayer& L) const;
  // The ORCHID_DEVICE_ROUTING=0 ablation: r's tables to the host and back, synchronously.
  Status round_trip_routing(const MoeRouting& r, int64_t pairs);
  // The group sums of [rows, k] operand (hi, lo) into out, when the scaled codes are on for this
  // prefill, some GEMM of the operand will take them (`wanted`) and k is a multiple of 64; else
  // nothing. The operand as the GEMMs take it.
  Expected<Operand> with_sums(const uint16_t* hi, const uint16_t* lo, int rows, int k,
                              uint16_t* out, bool wanted = true);
  // Rows per expert tile for a chunk of T tokens (ORCHID_PREFILL_TILE, else by the load).
  int expert_tile_rows(int T) const;
  Status prefill_gemm(const DevMatrix& w, const Operand& a, int lda, int T, float* c, int ldc,
                      const float* add);
  // Products of xn (hi + lo, or hi alone) with several matrices: (w, c, ldc) each, no residual;
  // one grouped launch on the exact path (launch_gemm_group), prefill_gemm each on the fp16 one.
  struct XnProduct {
    const DevMatrix* w;
    float* c;
    int ldc;
  };
  Status prefill_xn_gemms(std::initializer_list<XnProduct> products, const Operand& xn, int T);
  Status prefill_logits(int T, LogitsMode mode, float* host);

  std::unique_ptr<DeviceModel> dm_;
  const ModelConfig& c_;
  Switches sw_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<PinnedPool> pinned_pool_ = std::make_shared<PinnedPool>();
  DeviceArena scratch_;
  // Scratch (one request at a time): activations and small buffers of one step.
  float *h_ = nullptr, *qg_ = nullptr, *kbuf_ = nullptr, *vbuf_ = nullptr, *attn_ = nullptr;
  float *qkv_ = nullptr, *z_ = nullptr, *bb_ = nullptr, *aa_ = nullptr, *gdn_ = nullptr;
  float *moe_logits_ = nullptr, *sel_w_ = nullptr, *act_ = nullptr, *logits_ = nullptr;
  // The unfused variants' scratch (ORCHID_FUSED_EXPERT=0, ORCHID_FUSED_QK=0).
  float *gate_up_raw_ = nullptr, *slot_out_ = nullptr, *k_work_ = nullptr;
  float *partial_ = nullptr, *part_acc_ = nullptr, *part_ml_ = nullptr;
  float* xnorm_ = nullptr;  // [n_embd] normed residual when RMSNorm runs unfused
  float* x_codes_ = nullptr;  // a batched GEMV's x̂ codes (GemvParams::x_codes), one a slot
  int act_stride_ = 0;      // floats per slot row of act_
  int *sel_ = nullptr, *token_ = nullptr, *prompt_ = nullptr, *stop_ids_ = nullptr;
  uint32_t* allowed_ = nullptr;  // [ceil(n_vocab / 32)] the constrained pick's bitset
  unsigned* ticket_ = nullptr;  // lm_head: blocks finished (its last block picks the token)
  int* pinned_ = nullptr;       // host, mapped: two token slots + the position read-back
  int* pinned_dev_ = nullptr;   // pinned_ as the device sees it
  cudaEvent_t slot_ev_[2] = {nullptr, nullptr};
  // The batched step (kernels.h: SlotBatch): the arena's stride, slot 0's position and halt
  // flags, the state table, per-slot pick settings, mapped host ids ([slot][2], then positions).
  int64_t slot_stride_ = 0;
  int *slot_pos_ = nullptr, *slot_halt_ = nullptr;
  void** slot_states_ = nullptr;  // [kMaxSlots][n_layer][2]
  float* slot_inv_temp_ = nullptr;
  uint64_t* slot_seed_ = nullptr;
  int* slot_stop_ids_ = nullptr;  // [kMaxSlots][kMaxStopIds]
  int *pinned_slots_ = nullptr, *pinned_slots_dev_ = nullptr;
  CudaState::Graph batch_graph_;
  int batch_runs_ = -1;  // batch_step_runs: -1 not tried yet
  std::unique_ptr<PrefillScratch> pf_;
  static constexpr int kMaxStop = 64, kPromptChunk = 4096;
};

// Events after each launch of a step (or a prefill chunk), for per-kernel times (created up front,
// so that recording one costs little next to a launch).
struct CudaBackend::Profiler {
  cudaStream_t s;
  std::vector<std::pair<std::string, cudaEvent_t>> marks;
  std::vector<int64_t> bytes;
  std::vector<cudaEvent_t> pool;
  explicit Profiler(cudaStream_t stream) : s(stream) {
    pool.resize(1024);
    for (cudaEvent_t& e : pool) cudaEventCreate(&e);
  }
  // The pool grows past its first 1,024 events (a 128K-token prefill marks ~6,000 launches).
  void mark(const char* name, int64_t b) {
    if (marks.size() == pool.size()) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) return;
      pool.push_back(e);
    }
    cudaEvent_t e = pool[marks.size()];
    cudaEventRecord(e, s);
    marks.emplace_back(name, e);
    bytes.push_back(b);
  }
  // Each launch's time since the mark before it, with its bytes (after the work has finished).
  Expected<std::vector<KernelTiming>> timings() const {
    std::vector<KernelTiming> out;
    for (size_t i = 1; i < marks.size(); ++i) {
      float ms = 0;
      if (cudaError_t e = cudaEventElapsedTime(&ms, marks[i - 1].second, marks[i].second);
          e != cudaSuccess)
        return err("profiler: ", cudaGetErrorString(e));
      out.push_back({marks[i].first, double(ms), bytes[i]});
    }
    return out;
  }
  ~Profiler() {
    for (cudaEvent_t e : pool) cudaEventDestroy(e);
  }
};

// Time per launch, GB/s and % of `read_bw` (bytes/s) of each real GEMV / expert launch shape of
// m, launched back to back across the layers' weights (bench/cuda/gemv_bench.cpp).
Expected<nlohmann::json> gemv_shape_report(const DeviceModel& m, cudaStream_t stream,
                                           double read_bw);

}  // namespace orchid::cuda
