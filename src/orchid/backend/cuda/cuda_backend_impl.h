// Internal to the CUDA backend (shared with its benchmark): the state, the backend class and
// the per-step launch sequence.
#pragma once

#include <cuda_runtime_api.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "orchid/backend/backend.h"
#include "orchid/backend/cuda/device_model.h"
#include "orchid/backend/cuda/prefill_kernels.h"

namespace orchid::cuda {

struct MoeRouting;  // prefill_kernels.h

// Returns a Status naming the failing runtime call.
#define ORCHID_CUDA(expr)                                        \
  do {                                                           \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess)              \
      return ::orchid::err(#expr, ": ", cudaGetErrorString(e_)); \
  } while (0)

// Run-time switches (environment), each enabling one optimisation so its effect can be measured
// alone: ORCHID_CUDA_GRAPH=0 launches kernel by kernel; ORCHID_SPLIT_KV=0 keeps one KV range per
// head; ORCHID_SPLIT_KV_KEYS=N sets the keys per range (default 128) and ORCHID_SPLIT_KV_MAX=N the
// most ranges per head (default 128; both chosen by measurement, docs/bench.md); ORCHID_PDL=0
// launches without programmatic dependent launch (each kernel waits for the previous one to end);
// ORCHID_FUSED_NORM=0 runs each RMSNorm as its own kernel instead of in the GEMV prologues;
// ORCHID_STREAM_LM_HEAD=0 runs the lm_head on the tensor-core GEMV instead of the streaming dp4a
// one; ORCHID_MMA=0 then runs it on the CUDA cores instead (with the stream on it has no effect);
// ORCHID_BULK_LM_HEAD=0 streams the lm_head through registers instead of through shared-memory
// stages that the copy engine fills (gemv_bulk.cu; sm_90a only, elsewhere no effect);
// ORCHID_MMA_ATTENTION=0 runs decode attention on the CUDA cores instead of the tensor cores;
// ORCHID_WIDE_ATTENTION=0 keeps the tensor-core attention at 4 warps a block where its grid
// would take 8 (one block an SM, every stage of a range requested before the dependency wait);
// ORCHID_FUSED_ROUTING=0 routes in a kernel of its own instead of the expert gate/up prologue;
// ORCHID_DP4A=0 runs the q4 projections, the q8 router and the experts on the earlier fp32
// kernels instead of the dp4a ones (int8 x̂ codes, every row requested before the dependency
// wait, the expert down rows before the gate/up launch ends: one design, measured as one);
// ORCHID_PLACEMENT=0 lets the router's few blocks share SMs instead of reserving one each and
// gives the out-projections one row a warp instead of two (grids shaped for where their blocks
// land, kernels.h);
// ORCHID_FUSED_EXPERT=0 forms SiLU(gate)·up and the weighted residual sum in kernels of their own
// instead of the expert kernels' epilogues; ORCHID_FUSED_QK=0 runs the q/k RMSNorm, RoPE and KV
// write as three kernels instead of one.
// Prefill (cuda_prefill.cpp): ORCHID_PREFILL=0 runs a prompt as one decode step per token instead
// of chunks on the tensor cores; ORCHID_PREFILL_CHUNK=N sets the chunk (default: 16384 tokens on
// GPUs of 64 GiB or more, else 8192 — 8192 measured 1.5-4.7 % faster than 4096 from 8K to 128K
// for 1.25 GiB more buffers (session 7, bench/results/cuda-prefill-2026-11-30-s7-chunks.json);
// with session 9's persistent GEMM tiles 16384 beats 8192 by 4.8 / 2.9 / 2.6 % at 16K / 32K /
// 128K for ~2.5 GiB more (cuda-prefill-2026-12-01-s9-chunk.json); prompts up to 8K are one
// chunk either way);
// ORCHID_EXACT_PREFILL=0 runs the projections on plain fp16 operands (weights dequantised to
// fp16, activations rounded to it: ~1e-3 relative per projection, enough to flip near-tied router
// choices) instead of the exact path (activations as fp16 hi + lo pairs, integer weight codes,
// scale and bias applied per group in fp32; about twice the tensor-core work);
// ORCHID_FUSED_DEQUANT=0 (with ORCHID_EXACT_PREFILL=0) dequantises each dense weight to an fp16
// buffer before a plain GEMM instead of tile by tile inside it; ORCHID_FLASH_PREFILL=0
// materialises the attention scores; ORCHID_WGMMA_ATTENTION=0 runs the flash attention on the
// mma.sync kernel instead of the Hopper one (wgmma, a producer warpgroup; used where
// attention_prefill_wgmma_supported: an sm_90a device, head_dim 64, 128 or 256);
// ORCHID_ATTN_PINGPONG=0 lets the Hopper kernel's two consumer warpgroups run independently
// (session 7's schedule) instead of in pingpong (named barriers alternate their products, each
// softmax under the other's products; the same bits);
// ORCHID_GEMM_WS=0 runs the exact path's q4 GEMMs (groups of 64: dense, and the experts'
// 128-row tiles) on the single-role wgmma tiles instead of the warp-specialised Hopper tiles
// (gemm_ws.cuh: a producer warpgroup copies and converts the codes behind mbarriers, two consumer
// warpgroups multiply and fold; sm_90a only, elsewhere no effect; +9.6 % at 8K, session 8);
// ORCHID_TILE_N_FIRST=0 orders the tile GEMMs' blocks (dense and experts) row tiles first, as
// before session 9, instead of column tiles first (gemm_tile.cuh's TileOrder: A's rows then come
// from DRAM about once instead of once per column tile); ORCHID_GEMM_PERSISTENT=0 launches the
// warp-specialised tiles a block a tile instead of one persistent block an SM walking them (its
// producer filling the next tile's stages while the consumers store the last one);
// ORCHID_TMA_A=0 has the warp-specialised tiles' producers copy A_hi and A_lo with cp.async (16
// a thread and k-step) instead of the copy engine (TMA: a 128-row tile a copy; the dense
// projections and expert down; −12-14 % of their time at 8K, session 12); ORCHID_SPLIT_ROUTER=0
// runs the exact path's q8 router GEMM on the single-role tiles instead of as its two q4 halves
// (launch_split_q8) on the warp-specialised ones, each output column pair summed;
// ORCHID_GEMM_GROUP=0 launches the projections of one normed input (DeltaNet q/k/v, z, b, a;
// attention q, k, v) one by one instead of as one grouped launch of the warp-specialised tiles;
// ORCHID_SCALED_CODES=0 gives the warp-specialised tiles the integer codes and the per-group fold
// instead of the scaled codes (s·(q − 8) exact in fp16, the biases as k-steps against the
// operands' group sums, which each operand's producer launch is followed by: gemm_ws.cuh);
// ORCHID_HALF_TILES=0 has both consumer warpgroups of a warp-specialised tile multiply even where
// the tile's rows (an expert's last, mostly) all lie in the first one's 64, instead of the second
// passing its stages on while the first has the tensor cores alone; ORCHID_WG_STAGGER=0 starts
// the scaled codes' two consumer warpgroups together instead of the second a step behind (their
// epilogues then coincide, the tensor cores idle through them);
// ORCHID_PREFILL_TILE=16|32|64|128 fixes the expert GEMMs' rows per tile (default: by the load);
// ORCHID_GDN_CHUNKED=auto|0|1 picks the DeltaNet scan's form: auto (default) the chunked form on
// the tensor cores from kGdnChunkedMinTokens tokens a chunk up and the sequential scan below, 0
// always the sequential scan, 1 always the chunked form; ORCHID_TC_ROUTER=0 computes the prefill
// router logits on the CUDA cores in fp32 instead of as an exact-path GEMM on the tensor cores (the
// fp16 path always takes the fp32 kernel); ORCHID_DEVICE_ROUTING=0 copies each layer's routing
// tables (pairs and tile map) to the host and back before the expert GEMMs, the host
// synchronisation a host-side sort would need.
//
// From this many tokens a chunk, ORCHID_GDN_CHUNKED=auto takes the chunked DeltaNet form: below,
// its two extra launches and 64-token padding outweigh the sequential scan's ~0.33 µs a token.
// Measured on the H200 (bench/results/cuda-prefill-2026-11-30-s7.json, the DeltaNet launch over
// 30 layers, scan / chunked ms): 64 tokens 1.31 / 1.66, 128 1.83 / 1.86, 256 2.93 / 2.37, 512
// 5.13 / 3.40; the crossover lies between 128 and 256.
constexpr int kGdnChunkedMinTokens = 192;

struct Switches {
  bool graph = true;
  bool dp4a = true;
  bool placement = true;
  bool fused_expert = true;
  bool fused_qk = true;
  bool stream_lm_head = true;
  bool bulk_lm_head = true;
  bool mma = true;
  bool mma_attention = true;
  bool wide_attention = true;
  bool fused_routing = true;
  bool split_kv = true;
  bool pdl = true;
  bool fused_norm = true;
  int keys_per_split = 128;
  int max_split = 128;
  bool prefill = true;
  bool exact_prefill = true;
  bool fused_dequant = true;
  bool gemm_ws = true;
  bool tile_n_first = true;
  bool gemm_persistent = true;
  bool tma_a = true;
  bool split_router = true;
  bool gemm_group = true;
  bool scaled_codes = true;
  bool half_tiles = true;
  bool consumer_dequant = true;
  bool gemm_rs = false;
  int gemm_rs_min_features = kRsMinFeatures;  // ORCHID_GEMM_RS_MIN_FEATURES (0: every launch)
  bool flash_prefill = true;
  bool wgmma_attention = true;
  bool attn_pingpong = true;
  int prefill_tile = 0;   // 0: chosen from the rows per expert
  int prefill_chunk = 0;  // 0: CudaBackend::chunk_tokens() picks it by the GPU's memory
  int gdn_chunked = -1;   // -1: auto (by the chunk's tokens), 0: sequential scan, 1: chunked form
  bool tc_router = true;
  bool device_routing = true;
  static Switches from_env();
  // Sets the kernels' process-wide flags (kernels.h) from these switches.
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

struct CudaSnapshot final : StateSnapshot {
  int64_t n_past_ = 0;
  size_t rewinds_seen = 0;
  DeviceArena mem;
  float* rec = nullptr;
  int64_t rec_bytes = 0;
  int64_t n_past() const override { return n_past_; }
  int64_t bytes() const override { return rec_bytes; }
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
  // 2 · group_sums_half(width)); made only with them on, and used where sums_on.
  bool scaled = false, sums_on = false;
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
  Status forward(BackendState& state, std::span<const int32_t> tokens, LogitsMode mode,
                 std::vector<float>& logits, int64_t chunk,
                 const CancelCheck& cancel = {}) override;
  std::unique_ptr<StateSnapshot> snapshot(const BackendState& state) override;
  Status restore(BackendState& state, const StateSnapshot& snap) override;
  bool can_decode_on_device() const override { return true; }
  Expected<std::vector<int32_t>> decode_on_device(
      BackendState& state, int32_t token, int max_new, const DeviceDecodeOptions& opts,
      const std::function<bool(int32_t)>& on_token) override;
  Status fill_synthetic_context(BackendState& state, int64_t n, uint64_t seed) override;

  // Runs one decode step kernel by kernel with events between launches.
  Expected<std::vector<KernelTiming>> profile_step(CudaState& st);
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
  Status enqueue_step(CudaState& st, bool head, const PickConfig& pick, int n_split,
                      Profiler* prof);
  // The GEMV input for a normed residual: (h, norm) fused, or (normed copy, none) unfused.
  Status normed_input(const float* norm, const int* halt, Profiler* prof, const float*& x,
                      const float*& x_norm);
  Status enqueue_gemv_group(GemvTask* tasks, int n, const float* x, int cols, const float* norm,
                            const int* halt, Profiler* prof, const char* label);
  Status run_step(CudaState& st, bool head, const PickConfig& pick);
  Status sync(const char* what);
  // Prefill in chunks on the tensor cores (cuda_prefill.cpp).
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
  DeviceArena scratch_;
  // Scratch (one request at a time): activations and small buffers of one step.
  float *h_ = nullptr, *qg_ = nullptr, *kbuf_ = nullptr, *vbuf_ = nullptr, *attn_ = nullptr;
  float *qkv_ = nullptr, *z_ = nullptr, *bb_ = nullptr, *aa_ = nullptr, *gdn_ = nullptr;
  float *moe_logits_ = nullptr, *sel_w_ = nullptr, *act_ = nullptr, *logits_ = nullptr;
  // The unfused variants' scratch (ORCHID_FUSED_EXPERT=0, ORCHID_FUSED_QK=0).
  float *gate_up_raw_ = nullptr, *slot_out_ = nullptr, *k_work_ = nullptr;
  float *partial_ = nullptr, *part_acc_ = nullptr, *part_ml_ = nullptr;
  float* xnorm_ = nullptr;  // [n_embd] normed residual when RMSNorm runs unfused
  int act_stride_ = 0;      // floats per slot row of act_
  int *sel_ = nullptr, *token_ = nullptr, *prompt_ = nullptr, *stop_ids_ = nullptr;
  unsigned* ticket_ = nullptr;  // lm_head: blocks finished (its last block picks the token)
  int* pinned_ = nullptr;       // host, mapped: two token slots + the position read-back
  int* pinned_dev_ = nullptr;   // pinned_ as the device sees it
  cudaEvent_t slot_ev_[2] = {nullptr, nullptr};
  std::unique_ptr<PrefillScratch> pf_;
  static constexpr int kMaxSplit = 256, kMaxStop = 64, kPromptChunk = 4096;
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
  ~Profiler() {
    for (cudaEvent_t e : pool) cudaEventDestroy(e);
  }
};

// Time per launch, GB/s and % of `read_bw` (bytes/s) of each real GEMV / expert launch shape of
// m, launched back to back across the layers' weights (cuda_gemv_bench.cpp).
Expected<nlohmann::json> gemv_shape_report(const DeviceModel& m, cudaStream_t stream,
                                           double read_bw);

}  // namespace orchid::cuda
