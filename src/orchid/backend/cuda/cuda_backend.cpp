// The CUDA backend: construction (scratch buffers), per-sequence states and their snapshots,
// and the factories. The decode step lives in decode/step.cpp, forward() and the on-device
// decode loop in cuda_forward.cpp.
#include "orchid/backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "orchid/backend/cuda/cuda_backend_impl.h"

namespace orchid::cuda {

namespace {

bool env_off(const char* name) {
  const char* v = std::getenv(name);
  return v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0);
}

}  // namespace

Switches Switches::from_env() {
  Switches s;
  s.graph = !env_off("ORCHID_CUDA_GRAPH");
  s.pdl = !env_off("ORCHID_PDL");
  s.dp4a = !env_off("ORCHID_DP4A");
  s.fused_norm = !env_off("ORCHID_FUSED_NORM");
  s.fused_routing = !env_off("ORCHID_FUSED_ROUTING");
  s.fused_expert = !env_off("ORCHID_FUSED_EXPERT");
  s.fused_qk = !env_off("ORCHID_FUSED_QK");
  s.mma_attention = !env_off("ORCHID_MMA_ATTENTION");
  s.split_kv = !env_off("ORCHID_SPLIT_KV");
  s.batch_decode = !env_off("ORCHID_BATCH_DECODE");
  s.slot_mma = !env_off("ORCHID_SLOT_MMA");
  s.staged_down = !env_off("ORCHID_STAGED_DOWN");
  if (const char* v = std::getenv("ORCHID_PREFILL_CHUNK")) {
    const int n = std::atoi(v);
    if (n == 1)
      s.prefill = false;
    else
      s.prefill_chunk = std::clamp(n, 16, 16384);
  }
  s.exact_prefill = !env_off("ORCHID_EXACT_PREFILL");
  s.fused_dequant = !env_off("ORCHID_FUSED_DEQUANT");
  s.device_routing = !env_off("ORCHID_DEVICE_ROUTING");
  if (const char* v = std::getenv("ORCHID_PREFILL_TILE")) s.prefill_tile = std::atoi(v);
  if (const char* v = std::getenv("ORCHID_GDN_CHUNKED"))
    s.gdn_chunked = env_off("ORCHID_GDN_CHUNKED")                           ? 0
                    : std::strcmp(v, "1") == 0 || std::strcmp(v, "on") == 0 ? 1
                                                                            : -1;
  s.flash_prefill = !env_off("ORCHID_FLASH_PREFILL");
  return s;
}

void Switches::apply() const {
  set_pdl_enabled(pdl);
  set_dp4a_enabled(dp4a);
  set_slot_mma_enabled(slot_mma);
  set_staged_down_enabled(staged_down);
  set_attention_mma_enabled(mma_attention);
}

std::string Switches::graph_key() const {
  return std::to_string(pdl) + "/" + std::to_string(fused_norm) + "/" +
         std::to_string(mma_attention) + "/" + std::to_string(fused_routing) + "/" +
         std::to_string(dp4a) + "/" + std::to_string(fused_expert) + "/" +
         std::to_string(fused_qk) + "/" + std::to_string(slot_mma) + "/" +
         std::to_string(staged_down);
}

CudaState::~CudaState() {
  for (Graph& g : graphs)
    if (g.exec) cudaGraphExecDestroy(g.exec);
}

CudaBackend::CudaBackend(std::unique_ptr<DeviceModel> dm)
    : dm_(std::move(dm)), c_(dm_->config), sw_(Switches::from_env()) {}

CudaBackend::~CudaBackend() {
  for (cudaEvent_t e : slot_ev_)
    if (e) cudaEventDestroy(e);
  if (pinned_) cudaFreeHost(pinned_);
  if (pinned_slots_) cudaFreeHost(pinned_slots_);
  if (batch_graph_.exec) cudaGraphExecDestroy(batch_graph_.exec);
  if (stream_) cudaStreamDestroy(stream_);
}

Status CudaBackend::init() {
  ORCHID_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // State snapshots come from the stream-ordered pool (CudaSnapshot); freed blocks stay in it for
  // the next snapshot instead of going back to the driver at each synchronisation.
  {
    int dev = 0;
    cudaMemPool_t pool = nullptr;
    uint64_t keep = UINT64_MAX;
    ORCHID_CUDA(cudaGetDevice(&dev));
    ORCHID_CUDA(cudaDeviceGetDefaultMemPool(&pool, dev));
    ORCHID_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  // Mapped: the lm_head's last block writes each chosen id straight into it (no copy between
  // steps).
  ORCHID_CUDA(
      cudaHostAlloc(reinterpret_cast<void**>(&pinned_), 4 * sizeof(int), cudaHostAllocMapped));
  ORCHID_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&pinned_dev_), pinned_, 0));
  for (cudaEvent_t& e : slot_ev_) ORCHID_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  DeviceArena& A = scratch_;
  const int H = c_.n_embd, hd = c_.head_dim, slots = c_.n_expert_used + 1;
  const int ff = std::max(c_.n_ff_exp, c_.n_ff_shexp);
  act_stride_ = (ff + 31) / 32 * 32;
  const int group = c_.n_head / std::max(c_.n_head_kv, 1);
#define ORCHID_ALLOC(dst, T, n) \
  do {                          \
    auto r_ = A.alloc_n<T>(n);  \
    if (!r_) return r_.error(); \
    dst = *r_;                  \
  } while (0)
  // The step's per-sequence buffers, one copy a slot of a batched step (kernels.h: SlotBatch):
  // carved from one region, slot b's at b · slot_stride_ 4-byte elements past slot 0's, which
  // are the batch-1 step's.
  {
    int64_t words = 0;
    std::vector<std::pair<void**, int64_t>> carve;
    auto take = [&](auto*& dst, int64_t n) {
      carve.push_back({reinterpret_cast<void**>(&dst), words});
      words += (std::max<int64_t>(n, 1) + 63) / 64 * 64;  // 256-byte aligned
    };
    take(h_, H);
    take(xnorm_, H);
    take(qg_, int64_t(c_.n_head) * 2 * hd);
    take(kbuf_, int64_t(c_.n_head_kv) * hd);
    take(vbuf_, int64_t(c_.n_head_kv) * hd);
    take(attn_, int64_t(c_.n_head) * hd);
    take(qkv_, c_.lin_conv_dim());
    take(z_, c_.lin_value_dim());
    take(bb_, c_.lin_n_head_v);
    take(aa_, c_.lin_n_head_v);
    take(gdn_, c_.lin_value_dim());
    take(moe_logits_, c_.n_expert + 1);
    take(sel_, slots);
    take(sel_w_, slots);
    take(act_, int64_t(slots) * act_stride_);
    take(gate_up_raw_, int64_t(slots) * 2 * act_stride_);
    take(slot_out_, int64_t(slots) * H);
    take(k_work_, int64_t(c_.n_head_kv) * hd);
    take(part_acc_, int64_t(c_.n_head_kv) * kMaxSplitsPerHead * group * hd);
    take(part_ml_, int64_t(c_.n_head_kv) * kMaxSplitsPerHead * group * 2);
    const int widest = std::max({H, c_.lin_value_dim(), c_.n_head * hd});
    take(x_codes_, x_codes_bytes(widest / 32) / 4);
    take(token_, 1);
    take(slot_pos_, 1);
    take(slot_halt_, 1);
    slot_stride_ = words;
    float* region = nullptr;
    ORCHID_ALLOC(region, float, words * kMaxSlots);
    for (auto [dst, off] : carve) *dst = region + off;
  }
  ORCHID_ALLOC(slot_states_, void*, int64_t(kMaxSlots) * c_.n_layer * 2);
  ORCHID_ALLOC(slot_inv_temp_, float, kMaxSlots);
  ORCHID_ALLOC(slot_seed_, uint64_t, kMaxSlots);
  ORCHID_ALLOC(slot_stop_ids_, int, kMaxSlots * kMaxStopIds);
  ORCHID_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&pinned_slots_), 3 * kMaxSlots * sizeof(int),
                            cudaHostAllocMapped));
  ORCHID_CUDA(
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&pinned_slots_dev_), pinned_slots_, 0));
  ORCHID_ALLOC(logits_, float, c_.n_vocab);
  ORCHID_ALLOC(partial_, float, 2 * 4096);
  ORCHID_ALLOC(prompt_, int, kPromptChunk);
  ORCHID_ALLOC(stop_ids_, int, kMaxStop);
  ORCHID_ALLOC(allowed_, uint32_t, (c_.n_vocab + 31) / 32);
  ORCHID_ALLOC(ticket_, unsigned, 1);
#undef ORCHID_ALLOC
  return {};
}

int64_t CudaBackend::max_context(int64_t limit, int states) const {
  // Room kept for the prefill buffers (allocated at the first prompt) and the state cache's
  // device snapshots: 10 % of the GPU, at least 6 GiB.
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return limit;
  const int64_t room = int64_t(free_b) - std::max<int64_t>(int64_t(6) << 30, int64_t(total_b) / 10);
  const int64_t n = std::max(states, 1);
  const int64_t fixed = state_bytes(0) * n, per_token = (state_bytes(1) - state_bytes(0)) * n;
  if (per_token <= 0) return limit;
  return std::clamp<int64_t>((room - fixed) / per_token, 1, limit);
}

int64_t CudaBackend::state_bytes(int64_t tokens) const {
  int64_t b = 0;
  for (int l = 0; l < c_.n_layer; ++l) {
    if (c_.layer_types[size_t(l)] == LayerKind::full_attention)
      b += 2 * tokens * c_.n_head_kv * c_.head_dim * 2;
    else
      b += (int64_t(c_.lin_conv_dim()) * c_.lin_conv_kernel +
            int64_t(c_.lin_n_head_v) * c_.lin_head_dim_k * c_.lin_head_dim_v) *
           4;
  }
  return b;
}

Expected<std::unique_ptr<BackendState>> CudaBackend::new_state(int64_t max_tokens) {
  if (max_tokens <= 0) return err("state size must be positive, got ", max_tokens);
  const int64_t need = state_bytes(max_tokens);
  size_t free_b = 0, total_b = 0;
  ORCHID_CUDA(cudaMemGetInfo(&free_b, &total_b));
  if (need + (int64_t(256) << 20) > int64_t(free_b))
    return err("a context of ", max_tokens, " tokens needs ", need >> 20, " MiB of GPU memory; ",
               free_b >> 20, " MiB are free");
  auto st = std::make_unique<CudaState>();
  st->capacity_ = max_tokens;
  const size_t L = size_t(c_.n_layer);
  st->kc.assign(L, nullptr), st->vc.assign(L, nullptr), st->ring.assign(L, nullptr),
      st->S.assign(L, nullptr);
  int64_t rec_floats = 0;
  for (size_t l = 0; l < L; ++l)
    if (c_.layer_types[l] == LayerKind::linear_attention)
      rec_floats += int64_t(c_.lin_conv_dim()) * c_.lin_conv_kernel +
                    int64_t(c_.lin_n_head_v) * c_.lin_head_dim_k * c_.lin_head_dim_v;
  auto rec = st->mem.alloc_n<float>(rec_floats);
  if (!rec) return rec.error();
  st->rec_block = *rec;
  st->rec_bytes = rec_floats * 4;
  float* p = *rec;
  const int64_t kv = max_tokens * c_.n_head_kv * c_.head_dim;
  for (size_t l = 0; l < L; ++l) {
    if (c_.layer_types[l] == LayerKind::full_attention) {
      auto k = st->mem.alloc_n<uint16_t>(kv);
      if (!k) return k.error();
      auto v = st->mem.alloc_n<uint16_t>(kv);
      if (!v) return v.error();
      st->kc[l] = *k, st->vc[l] = *v;
    } else {
      st->ring[l] = p;
      p += int64_t(c_.lin_conv_dim()) * c_.lin_conv_kernel;
      st->S[l] = p;
      p += int64_t(c_.lin_n_head_v) * c_.lin_head_dim_k * c_.lin_head_dim_v;
    }
  }
  auto pos = st->mem.alloc_n<int>(2);
  if (!pos) return pos.error();
  st->d_pos = *pos, st->d_halt = *pos + 1;
  return std::unique_ptr<BackendState>(std::move(st));
}

Status CudaBackend::sync(const char* what) {
  if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess)
    return err(what, ": ", cudaGetErrorString(e));
  return {};
}

PinnedPool::~PinnedPool() {
  for (auto& [bytes, p] : free_) cudaFreeHost(p);
}

void* PinnedPool::get(size_t bytes) {
  {
    std::lock_guard lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->first == bytes) {
        void* p = it->second;
        free_.erase(it);
        return p;
      }
  }
  void* p = nullptr;
  return cudaMallocHost(&p, bytes) == cudaSuccess ? p : nullptr;
}

void PinnedPool::put(void* p, size_t bytes) {
  std::lock_guard lock(mu_);
  free_.emplace_back(bytes, p);
}

int64_t CudaBackend::default_state_cache_bytes() const {
  // 5 % of the GPU, inside the room max_context keeps (10 %, at least 6 GiB): 7 GiB on an H200,
  // ~50 conversations of the full-size model, before the host tier's moves (~25 ms each on the
  // serving path: pinning a block) begin.
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return int64_t(1) << 30;
  return std::max<int64_t>(int64_t(1) << 30, int64_t(total_b) / 20);
}

std::unique_ptr<StateSnapshot> CudaBackend::snapshot(const BackendState& state) {
  const auto& st = static_cast<const CudaState&>(state);
  auto s = std::make_unique<CudaSnapshot>();
  s->n_past_ = st.n_past_;
  s->rewinds_seen = st.rewinds.size();
  s->rec_bytes = st.rec_bytes;
  s->stream = stream_;
  s->pool = pinned_pool_;
  void* p = nullptr;
  if (cudaMallocAsync(&p, size_t(st.rec_bytes), stream_) != cudaSuccess) return nullptr;
  s->rec = static_cast<float*>(p);
  if (cudaMemcpyAsync(s->rec, st.rec_block, size_t(st.rec_bytes), cudaMemcpyDeviceToDevice,
                      stream_) != cudaSuccess)
    return nullptr;
  return s;
}

Status CudaBackend::move_to_host(StateSnapshot& snap) {
  auto* s = dynamic_cast<CudaSnapshot*>(&snap);
  if (!s) return err("move_to_host: snapshot was not made by the cuda backend");
  if (!s->rec) return {};
  void* h = pinned_pool_->get(size_t(s->rec_bytes));
  if (!h) return err("move_to_host: no pinned host memory for ", s->rec_bytes, " bytes");
  if (cudaError_t e = cudaMemcpyAsync(h, s->rec, size_t(s->rec_bytes), cudaMemcpyDeviceToHost,
                                      stream_);
      e != cudaSuccess) {
    pinned_pool_->put(h, size_t(s->rec_bytes));
    return err("move_to_host: ", cudaGetErrorString(e));
  }
  // Queued after the copy: no wait here for the decode steps ahead of it on the stream.
  cudaFreeAsync(s->rec, stream_);
  s->rec = nullptr;
  s->host = static_cast<float*>(h);
  return {};
}

Status CudaBackend::restore(BackendState& state, const StateSnapshot& snap) {
  auto& st = static_cast<CudaState&>(state);
  const auto* s = dynamic_cast<const CudaSnapshot*>(&snap);
  if (!s) return err("restore: snapshot was not made by the cuda backend");
  if (s->rewinds_seen > st.rewinds.size() || s->rec_bytes != st.rec_bytes)
    return err("restore: snapshot does not belong to this state");
  for (size_t i = s->rewinds_seen; i < st.rewinds.size(); ++i)
    if (st.rewinds[i] < s->n_past_)
      return err("restore: snapshot at ", s->n_past_, " tokens is stale (the state was rewound to ",
                 st.rewinds[i], " tokens since)");
  if (s->n_past_ < st.n_past_) st.rewinds.push_back(s->n_past_);
  if (s->rec)
    ORCHID_CUDA(cudaMemcpyAsync(st.rec_block, s->rec, size_t(s->rec_bytes),
                                cudaMemcpyDeviceToDevice, stream_));
  else
    ORCHID_CUDA(cudaMemcpyAsync(st.rec_block, s->host, size_t(s->rec_bytes),
                                cudaMemcpyHostToDevice, stream_));
  const int pos[2] = {int(s->n_past_), 0};
  ORCHID_CUDA(cudaMemcpyAsync(st.d_pos, pos, sizeof pos, cudaMemcpyHostToDevice, stream_));
  ORCHID_TRY(sync("restore"));
  st.n_past_ = s->n_past_;
  return {};
}

}  // namespace orchid::cuda

namespace orchid {

Status cuda_device_usable() {
  int n = 0;
  if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) {
    cudaGetLastError();
    if (e == cudaErrorNoDevice) return err("no CUDA device found");
    if (e == cudaErrorInsufficientDriver)
      return err("no usable NVIDIA driver (none installed, or one older than this build's CUDA ",
                 CUDART_VERSION / 1000, " runtime)");
    return err("no usable CUDA device (", cudaGetErrorString(e), ")");
  }
  if (n == 0) return err("no CUDA device found");
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return err("cannot query the CUDA device");
  if (p.major < 8)
    return err("the CUDA backend needs compute capability 8.0 or later (Ampere, Hopper); ", p.name,
               " has ", p.major, ".", p.minor);
  return {};
}

namespace {
Expected<std::unique_ptr<Backend>> finish(Expected<std::unique_ptr<cuda::DeviceModel>> dm) {
  if (!dm) return dm.error();
  auto b = std::make_unique<cuda::CudaBackend>(std::move(*dm));
  ORCHID_TRY(b->init());
  return std::unique_ptr<Backend>(std::move(b));
}
}  // namespace

Expected<std::unique_ptr<Backend>> make_cuda_backend(const Model& model) {
  ORCHID_TRY(cuda_device_usable());
  return finish(cuda::upload_model(model));
}

Expected<std::unique_ptr<Backend>> make_cuda_synthetic_backend(const ModelConfig& config,
                                                               uint64_t seed) {
  ORCHID_TRY(cuda_device_usable());
  return finish(cuda::synthetic_device_model(config, seed));
}

std::string cuda_backend_summary(const Backend& backend) {
  const auto* b = dynamic_cast<const cuda::CudaBackend*>(&backend);
  if (!b) return backend.name();
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, 0);
  char buf[160];
  std::snprintf(buf, sizeof buf, " (%d SMs, %.0f GiB); weights %.2f GiB on the device",
                p.multiProcessorCount, double(p.totalGlobalMem) / (1 << 30),
                double(b->device_model().weight_bytes()) / (1 << 30));
  return std::string("cuda: ") + p.name + buf;
}

}  // namespace orchid
