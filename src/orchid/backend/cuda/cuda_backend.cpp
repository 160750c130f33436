// The CUDA backend: one decode step is ~7 launches per layer (fused GEMVs, the DeltaNet step
// or the attention pair, router, expert gate/up, expert down), captured once into a CUDA
// graph; tokens picked by the lm_head kernel feed the next step on the device.
#include "orchid/backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "orchid/backend/cuda/cuda_backend_impl.h"

namespace orchid::cuda {

#define ORCHID_CUDA(expr)                                        \
  do {                                                           \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess)              \
      return ::orchid::err(#expr, ": ", cudaGetErrorString(e_)); \
  } while (0)

namespace {

template <class T>
Expected<T*> alloc_n(DeviceArena& a, int64_t n) {
  auto p = a.alloc(size_t(std::max<int64_t>(n, 1)) * sizeof(T));
  if (!p) return p.error();
  return static_cast<T*>(*p);
}

bool env_off(const char* name) {
  const char* v = std::getenv(name);
  return v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0);
}

}  // namespace

Switches Switches::from_env() {
  Switches s;
  s.graph = !env_off("ORCHID_CUDA_GRAPH");
  s.split_kv = !env_off("ORCHID_SPLIT_KV");
  s.pdl = !env_off("ORCHID_PDL");
  s.fused_norm = !env_off("ORCHID_FUSED_NORM");
  if (const char* v = std::getenv("ORCHID_SPLIT_KV_KEYS"))
    s.keys_per_split = std::max(32, std::atoi(v));
  if (const char* v = std::getenv("ORCHID_SPLIT_KV_MAX")) s.max_split = std::max(1, std::atoi(v));
  return s;
}

CudaState::~CudaState() {
  for (Graph& g : graphs)
    if (g.exec) cudaGraphExecDestroy(g.exec);
}

// Events after each launch of a step, for per-kernel times (created up front, so that
// recording one costs little next to a launch).
struct CudaBackend::Profiler {
  cudaStream_t s;
  std::vector<std::pair<std::string, cudaEvent_t>> marks;
  std::vector<int64_t> bytes;
  std::vector<cudaEvent_t> pool;
  explicit Profiler(cudaStream_t stream) : s(stream) {
    pool.resize(1024);
    for (cudaEvent_t& e : pool) cudaEventCreate(&e);
  }
  void mark(const char* name, int64_t b) {
    if (marks.size() == pool.size()) return;
    cudaEvent_t e = pool[marks.size()];
    cudaEventRecord(e, s);
    marks.emplace_back(name, e);
    bytes.push_back(b);
  }
  ~Profiler() {
    for (cudaEvent_t e : pool) cudaEventDestroy(e);
  }
};

CudaBackend::CudaBackend(std::unique_ptr<DeviceModel> dm)
    : dm_(std::move(dm)), c_(dm_->config), sw_(Switches::from_env()) {}

CudaBackend::~CudaBackend() {
  for (cudaEvent_t e : slot_ev_)
    if (e) cudaEventDestroy(e);
  if (pinned_) cudaFreeHost(pinned_);
  if (stream_) cudaStreamDestroy(stream_);
}

Status CudaBackend::init() {
  ORCHID_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  ORCHID_CUDA(
      cudaHostAlloc(reinterpret_cast<void**>(&pinned_), 4 * sizeof(int), cudaHostAllocDefault));
  for (cudaEvent_t& e : slot_ev_) ORCHID_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  DeviceArena& A = scratch_;
  const int H = c_.n_embd, hd = c_.head_dim, slots = c_.n_expert_used + 1;
  const int ff = std::max(c_.n_ff_exp, c_.n_ff_shexp);
  act_stride_ = (ff + 31) / 32 * 32;
  const int group = c_.n_head / std::max(c_.n_head_kv, 1);
#define ORCHID_ALLOC(dst, T, n)   \
  do {                            \
    auto r_ = alloc_n<T>(A, (n)); \
    if (!r_) return r_.error();   \
    dst = *r_;                    \
  } while (0)
  ORCHID_ALLOC(h_, float, H);
  ORCHID_ALLOC(xnorm_, float, H);
  ORCHID_ALLOC(qg_, float, int64_t(c_.n_head) * 2 * hd);
  ORCHID_ALLOC(kbuf_, float, int64_t(c_.n_head_kv) * hd);
  ORCHID_ALLOC(vbuf_, float, int64_t(c_.n_head_kv) * hd);
  ORCHID_ALLOC(attn_, float, int64_t(c_.n_head) * hd);
  ORCHID_ALLOC(qkv_, float, c_.lin_conv_dim());
  ORCHID_ALLOC(z_, float, c_.lin_value_dim());
  ORCHID_ALLOC(bb_, float, c_.lin_n_head_v);
  ORCHID_ALLOC(aa_, float, c_.lin_n_head_v);
  ORCHID_ALLOC(gdn_, float, c_.lin_value_dim());
  ORCHID_ALLOC(moe_logits_, float, c_.n_expert + 1);
  ORCHID_ALLOC(sel_, int, slots);
  ORCHID_ALLOC(sel_w_, float, slots);
  ORCHID_ALLOC(act_, float, int64_t(slots) * act_stride_);
  ORCHID_ALLOC(logits_, float, c_.n_vocab);
  ORCHID_ALLOC(partial_, float, 2 * 4096);
  ORCHID_ALLOC(part_acc_, float, int64_t(c_.n_head_kv) * kMaxSplit * group * hd);
  ORCHID_ALLOC(part_ml_, float, int64_t(c_.n_head_kv) * kMaxSplit * group * 2);
  ORCHID_ALLOC(token_, int, 1);
  ORCHID_ALLOC(prompt_, int, kPromptChunk);
  ORCHID_ALLOC(stop_ids_, int, kMaxStop);
  ORCHID_ALLOC(tickets_, unsigned, 2);
#undef ORCHID_ALLOC
  return {};
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
  auto rec = alloc_n<float>(st->mem, rec_floats);
  if (!rec) return rec.error();
  st->rec_block = *rec;
  st->rec_bytes = rec_floats * 4;
  float* p = *rec;
  const int64_t kv = max_tokens * c_.n_head_kv * c_.head_dim;
  for (size_t l = 0; l < L; ++l) {
    if (c_.layer_types[l] == LayerKind::full_attention) {
      auto k = alloc_n<uint16_t>(st->mem, kv);
      if (!k) return k.error();
      auto v = alloc_n<uint16_t>(st->mem, kv);
      if (!v) return v.error();
      st->kc[l] = *k, st->vc[l] = *v;
    } else {
      st->ring[l] = p;
      p += int64_t(c_.lin_conv_dim()) * c_.lin_conv_kernel;
      st->S[l] = p;
      p += int64_t(c_.lin_n_head_v) * c_.lin_head_dim_k * c_.lin_head_dim_v;
    }
  }
  auto pos = alloc_n<int>(st->mem, 2);
  if (!pos) return pos.error();
  st->d_pos = *pos, st->d_halt = *pos + 1;
  return std::unique_ptr<BackendState>(std::move(st));
}

int CudaBackend::split_for(int64_t n_keys) const {
  if (!sw_.split_kv) return 1;
  int s = 1;
  while (s < std::min(kMaxSplit, sw_.max_split) && int64_t(s) * sw_.keys_per_split < n_keys) s *= 2;
  return s;
}

Status CudaBackend::normed_input(const float* norm, const int* halt, Profiler* prof,
                                 const float*& x, const float*& x_norm) {
  if (sw_.fused_norm) {
    x = h_, x_norm = norm;
    return {};
  }
  ORCHID_TRY(launch_rms_norm(h_, norm, c_.rms_norm_eps, c_.n_embd, xnorm_, halt, stream_));
  if (prof) prof->mark("rms norm", 0);
  x = xnorm_, x_norm = nullptr;
  return {};
}

Status CudaBackend::enqueue_gemv_group(GemvTask* tasks, int n, const float* x, int cols,
                                       const float* norm, const int* halt, Profiler* prof,
                                       const char* label) {
  // One launch per run of tasks that share format and width.
  int done = 0;
  while (done < n) {
    GemvParams p;
    p.x = x, p.cols = cols, p.norm = norm, p.eps = c_.rms_norm_eps, p.halt = halt;
    p.task[0] = tasks[done];
    p.n_task = 1;
    int64_t bytes = matrix_bytes(tasks[done].m);
    for (int i = done + 1; i < n && p.n_task < kMaxGemvTasks; ++i) {
      if (tasks[i].m.fmt != p.task[0].m.fmt || tasks[i].m.units != p.task[0].m.units) break;
      p.task[p.n_task++] = tasks[i];
      bytes += matrix_bytes(tasks[i].m);
    }
    done += p.n_task;
    ORCHID_TRY(launch_gemv(p, stream_));
    if (prof) prof->mark(label, bytes);
  }
  return {};
}

Status CudaBackend::enqueue_step(CudaState& st, bool head, const PickConfig& pick, int n_split,
                                 Profiler* prof) {
  const DeviceModel& m = *dm_;
  const int H = c_.n_embd;
  const int* halt = st.d_halt;
  ORCHID_TRY(launch_embed(m.embd, token_, h_, H, halt, stream_));
  if (prof) prof->mark("embed", int64_t(H) * 2);
  for (int l = 0; l < c_.n_layer; ++l) {
    const DevLayer& L = m.layers[size_t(l)];
    if (c_.layer_types[size_t(l)] == LayerKind::full_attention) {
      GemvTask t[3] = {{L.q, qg_, nullptr}, {L.k, kbuf_, nullptr}, {L.v, vbuf_, nullptr}};
      const float *x = nullptr, *xn = nullptr;
      ORCHID_TRY(normed_input(L.attn_norm, halt, prof, x, xn));
      ORCHID_TRY(enqueue_gemv_group(t, 3, x, H, xn, halt, prof, "attn qkv gemv"));
      AttnParams a;
      a.qg = qg_, a.k = kbuf_, a.v = vbuf_, a.q_norm = L.q_norm, a.k_norm = L.k_norm;
      a.inv_freq = m.inv_freq, a.eps = c_.rms_norm_eps;
      a.n_head = c_.n_head, a.n_head_kv = c_.n_head_kv, a.hd = c_.head_dim, a.n_rot = c_.n_rot;
      a.kc = st.kc[size_t(l)], a.vc = st.vc[size_t(l)], a.pos = st.d_pos, a.out = attn_;
      a.n_split = n_split, a.part_acc = part_acc_, a.part_ml = part_ml_;
      a.halt = halt;
      ORCHID_TRY(launch_qk_norm_rope_kv(a, stream_));
      if (prof) prof->mark("qk norm+rope+kv", 0);
      ORCHID_TRY(launch_attention_decode(a, stream_));
      if (prof) prof->mark("attention", 0);  // bytes added by the caller (depends on context)
      GemvTask o = {L.o, h_, h_};
      ORCHID_TRY(enqueue_gemv_group(&o, 1, attn_, c_.n_head * c_.head_dim, nullptr, halt, prof,
                                    "attn o gemv"));
    } else {
      GemvTask t[4] = {
          {L.qkv, qkv_, nullptr}, {L.z, z_, nullptr}, {L.b, bb_, nullptr}, {L.a, aa_, nullptr}};
      const float *x = nullptr, *xn = nullptr;
      ORCHID_TRY(normed_input(L.attn_norm, halt, prof, x, xn));
      ORCHID_TRY(enqueue_gemv_group(t, 4, x, H, xn, halt, prof, "gdn in gemv"));
      GdnParams g;
      g.qkv = qkv_, g.z = z_, g.b = bb_, g.a = aa_, g.conv_w = L.conv_w;
      g.conv_ring = st.ring[size_t(l)], g.S = st.S[size_t(l)];
      g.A_log = L.A_log, g.dt_bias = L.dt_bias, g.norm = L.gnorm, g.pos = st.d_pos;
      g.hk = c_.lin_n_head_k, g.hv = c_.lin_n_head_v, g.dk = c_.lin_head_dim_k;
      g.dv = c_.lin_head_dim_v, g.K = c_.lin_conv_kernel, g.eps = c_.rms_norm_eps;
      g.out = gdn_, g.halt = halt;
      ORCHID_TRY(launch_gdn_step(g, stream_));
      if (prof)
        prof->mark("gdn step",
                   2 * int64_t(c_.lin_n_head_v) * c_.lin_head_dim_k * c_.lin_head_dim_v * 4);
      GemvTask o = {L.out, h_, h_};
      ORCHID_TRY(
          enqueue_gemv_group(&o, 1, gdn_, c_.lin_value_dim(), nullptr, halt, prof, "gdn out gemv"));
    }
    GemvParams r;  // router and shared-expert gate logits; gate/up routes from them
    r.task[0] = {L.router, moe_logits_, nullptr};
    r.task[1] = {L.shared_gate, moe_logits_ + c_.n_expert, nullptr};
    const float *post_x = nullptr, *post_n = nullptr;
    ORCHID_TRY(normed_input(L.post_norm, halt, prof, post_x, post_n));
    r.n_task = 2, r.x = post_x, r.cols = H, r.norm = post_n, r.eps = c_.rms_norm_eps;
    r.halt = halt;
    ORCHID_TRY(launch_gemv(r, stream_));
    if (prof) prof->mark("router", matrix_bytes(L.router) + matrix_bytes(L.shared_gate));
    MoeParams e;
    e.gate = L.gate, e.up = L.up, e.down = L.down;
    e.n_ff = c_.n_ff_exp, e.n_embd = H, e.n_slot = c_.n_expert_used + (L.shared_apart ? 0 : 1);
    e.x = post_x, e.norm = post_n, e.eps = c_.rms_norm_eps, e.sel = sel_, e.sel_w = sel_w_;
    e.logits = moe_logits_, e.n_expert = c_.n_expert, e.top_k = c_.n_expert_used;
    e.act = act_, e.h = h_, e.halt = halt;
    const int64_t stacked = c_.n_expert + (L.shared_apart ? 0 : 1);
    // Both gate/up launches read the same normed h, so they run before either down launch.
    MoeParams sh = e;
    if (L.shared_apart) {
      sh.gate = L.sh_gate, sh.up = L.sh_up, sh.down = L.sh_down, sh.n_ff = c_.n_ff_shexp;
      sh.n_slot = 1, sh.slot_begin = c_.n_expert_used, sh.expert_base = c_.n_expert;
      sh.act = act_ + int64_t(c_.n_expert_used) * act_stride_;
      sh.logits = nullptr;  // routed by the first launch
    }
    ORCHID_TRY(launch_moe_gate_up(e, stream_));
    if (prof)
      prof->mark("moe gate/up", (matrix_bytes(L.gate) + matrix_bytes(L.up)) / stacked * e.n_slot);
    if (L.shared_apart) {
      ORCHID_TRY(launch_moe_gate_up(sh, stream_));
      if (prof) prof->mark("shared gate/up", matrix_bytes(L.sh_gate) + matrix_bytes(L.sh_up));
    }
    ORCHID_TRY(launch_moe_down(e, stream_));
    if (prof) prof->mark("moe down", matrix_bytes(L.down) / stacked * e.n_slot);
    if (L.shared_apart) {
      ORCHID_TRY(launch_moe_down(sh, stream_));
      if (prof) prof->mark("shared down", matrix_bytes(L.sh_down));
    }
  }
  if (!head) {
    ORCHID_TRY(launch_advance(st.d_pos, halt, stream_));
    if (prof) prof->mark("advance", 0);
    return {};
  }
  GemvParams p;
  p.task[0] = {m.lm_head, pick.want_logits ? logits_ : nullptr, nullptr};
  const float *out_x = nullptr, *out_n = nullptr;
  ORCHID_TRY(normed_input(m.out_norm, halt, prof, out_x, out_n));
  p.n_task = 1, p.x = out_x, p.cols = H, p.norm = out_n, p.eps = c_.rms_norm_eps;
  p.halt = halt, p.epilogue = GemvEpilogue::argmax, p.ticket = tickets_ + 1, p.partial = partial_;
  p.token = token_, p.pos = st.d_pos, p.stop_ids = stop_ids_, p.n_stop = pick.n_stop;
  p.stopped = st.d_halt, p.inv_temp = pick.inv_temp, p.seed = pick.seed;
  if (gemv_blocks(p) > 4096) return err("lm_head: too many blocks");
  ORCHID_TRY(launch_gemv(p, stream_));
  if (prof) prof->mark("lm_head+pick", matrix_bytes(m.lm_head));
  return {};
}

Status CudaBackend::run_step(CudaState& st, bool head, const PickConfig& pick) {
  set_pdl_enabled(sw_.pdl);
  const int n_split = split_for(st.n_past_ + 1);
  if (!sw_.graph) return enqueue_step(st, head, pick, n_split, nullptr);
  CudaState::Graph& g = st.graphs[head ? 1 : 0];
  const std::string key = std::to_string(n_split) + "/" + std::to_string(sw_.pdl) + "/" +
                          std::to_string(sw_.fused_norm) + "/" + std::to_string(pick.want_logits) +
                          "/" + std::to_string(pick.n_stop) + "/" + std::to_string(pick.inv_temp) +
                          "/" + std::to_string(pick.seed);
  if (!g.exec || g.key != key) {
    if (g.exec) {
      ORCHID_TRY(sync("graph rebuild"));  // the old graph may still be running
      cudaGraphExecDestroy(g.exec);
      g.exec = nullptr;
    }
    ORCHID_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    Status s = enqueue_step(st, head, pick, n_split, nullptr);
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    if (!s.ok()) {
      if (graph) cudaGraphDestroy(graph);
      return s;
    }
    if (e != cudaSuccess) return err("capturing the decode step: ", cudaGetErrorString(e));
    const cudaError_t ie = cudaGraphInstantiate(&g.exec, graph, 0);
    cudaGraphDestroy(graph);
    if (ie != cudaSuccess) return err("instantiating the decode graph: ", cudaGetErrorString(ie));
    g.key = key;
  }
  ORCHID_CUDA(cudaGraphLaunch(g.exec, stream_));
  return {};
}

Status CudaBackend::sync(const char* what) {
  if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess)
    return err(what, ": ", cudaGetErrorString(e));
  return {};
}

Status CudaBackend::forward(BackendState& state, std::span<const int32_t> tokens, LogitsMode mode,
                            std::vector<float>& logits, int64_t chunk) {
  auto& st = static_cast<CudaState&>(state);
  const int64_t n = int64_t(tokens.size());
  ORCHID_TRY(check_forward_input(tokens, c_.n_vocab, st.n_past_, st.capacity_));
  const int64_t V = c_.n_vocab;
  logits.assign(size_t(mode == LogitsMode::all ? n * V : V), 0.f);
  ORCHID_CUDA(cudaMemsetAsync(st.d_halt, 0, sizeof(int), stream_));
  PickConfig pick;
  pick.want_logits = true;
  for (int64_t c0 = 0; c0 < n; c0 += kPromptChunk) {
    const int64_t cn = std::min<int64_t>(kPromptChunk, n - c0);
    ORCHID_CUDA(cudaMemcpyAsync(prompt_, tokens.data() + c0, size_t(cn) * 4, cudaMemcpyHostToDevice,
                                stream_));
    for (int64_t i = 0; i < cn; ++i) {
      const int64_t t = c0 + i;
      const bool head = mode == LogitsMode::all || t == n - 1;
      ORCHID_CUDA(cudaMemcpyAsync(token_, prompt_ + i, 4, cudaMemcpyDeviceToDevice, stream_));
      ORCHID_TRY(run_step(st, head, pick));
      st.n_past_ += 1;
      if (head) {
        float* dst = logits.data() + (mode == LogitsMode::all ? t * V : 0);
        ORCHID_CUDA(cudaMemcpyAsync(dst, logits_, size_t(V) * 4, cudaMemcpyDeviceToHost, stream_));
      }
    }
    ORCHID_TRY(sync("forward"));  // the prompt chunk buffer is reused next round
  }
  return {};
}

std::unique_ptr<StateSnapshot> CudaBackend::snapshot(const BackendState& state) {
  const auto& st = static_cast<const CudaState&>(state);
  auto s = std::make_unique<CudaSnapshot>();
  s->n_past_ = st.n_past_;
  s->rewinds_seen = st.rewinds.size();
  s->rec_bytes = st.rec_bytes;
  auto p = alloc_n<float>(s->mem, st.rec_bytes / 4);
  if (!p) return nullptr;
  s->rec = *p;
  if (cudaMemcpyAsync(s->rec, st.rec_block, size_t(st.rec_bytes), cudaMemcpyDeviceToDevice,
                      stream_) != cudaSuccess ||
      cudaStreamSynchronize(stream_) != cudaSuccess)
    return nullptr;
  return s;
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
  ORCHID_CUDA(cudaMemcpyAsync(st.rec_block, s->rec, size_t(s->rec_bytes), cudaMemcpyDeviceToDevice,
                              stream_));
  const int pos[2] = {int(s->n_past_), 0};
  ORCHID_CUDA(cudaMemcpyAsync(st.d_pos, pos, sizeof pos, cudaMemcpyHostToDevice, stream_));
  ORCHID_TRY(sync("restore"));
  st.n_past_ = s->n_past_;
  return {};
}

Expected<std::vector<int32_t>> CudaBackend::decode_on_device(
    BackendState& state, int32_t token, int max_new, const DeviceDecodeOptions& opts,
    const std::function<bool(int32_t)>& on_token) {
  auto& st = static_cast<CudaState&>(state);
  if (token < 0 || token >= c_.n_vocab)
    return err("token id ", token, " is outside the vocabulary");
  if (int(opts.stop_ids.size()) > kMaxStop) return err("at most ", kMaxStop, " stop ids");
  max_new = int(std::min<int64_t>(max_new, st.capacity_ - st.n_past_));
  std::vector<int32_t> consumed = {token};
  if (max_new <= 0) return err("context overflow: the state is full");
  PickConfig pick;
  pick.n_stop = int(opts.stop_ids.size());
  pick.inv_temp = opts.temperature > 0.f ? 1.f / opts.temperature : 0.f;
  pick.seed = opts.seed;
  ORCHID_CUDA(cudaMemsetAsync(st.d_halt, 0, sizeof(int), stream_));
  if (!opts.stop_ids.empty())
    ORCHID_CUDA(cudaMemcpyAsync(stop_ids_, opts.stop_ids.data(), opts.stop_ids.size() * 4,
                                cudaMemcpyHostToDevice, stream_));
  ORCHID_CUDA(cudaMemcpyAsync(token_, &token, 4, cudaMemcpyHostToDevice, stream_));
  ORCHID_TRY(sync("decode start"));
  const int64_t start = st.n_past_;
  std::vector<int32_t> picks;
  int enqueued = 0, handled = 0;
  bool stop = false;
  auto enqueue = [&]() -> Status {
    ORCHID_TRY(run_step(st, true, pick));
    const int slot = enqueued % 2;
    ORCHID_CUDA(cudaMemcpyAsync(pinned_ + slot, token_, 4, cudaMemcpyDeviceToHost, stream_));
    ORCHID_CUDA(cudaEventRecord(slot_ev_[slot], stream_));
    ++enqueued;
    st.n_past_ += 1;  // provisional: corrected from the device below
    return {};
  };
  ORCHID_TRY(enqueue());
  while (handled < enqueued) {
    if (!stop && enqueued < max_new) ORCHID_TRY(enqueue());
    const int slot = handled % 2;
    ORCHID_CUDA(cudaEventSynchronize(slot_ev_[slot]));
    const int32_t id = pinned_[slot];
    picks.push_back(id);
    ++handled;
    if (stop) continue;
    if (std::find(opts.stop_ids.begin(), opts.stop_ids.end(), id) != opts.stop_ids.end() ||
        !on_token(id))
      stop = true;
  }
  ORCHID_CUDA(cudaMemcpyAsync(pinned_ + 2, st.d_pos, 4, cudaMemcpyDeviceToHost, stream_));
  ORCHID_TRY(sync("decode"));
  st.n_past_ = pinned_[2];
  for (int64_t i = 1; i < st.n_past_ - start && size_t(i - 1) < picks.size(); ++i)
    consumed.push_back(picks[size_t(i - 1)]);
  return consumed;
}

Status CudaBackend::fill_synthetic_context(BackendState& state, int64_t n, uint64_t seed) {
  auto& st = static_cast<CudaState&>(state);
  if (n < 0 || n >= st.capacity_) return err("synthetic context of ", n, " tokens does not fit");
  const int64_t kv = n * c_.n_head_kv * c_.head_dim;
  for (int l = 0; l < c_.n_layer; ++l) {
    if (!st.kc[size_t(l)]) continue;
    ORCHID_TRY(launch_fill_uniform_bf16(st.kc[size_t(l)], kv, -1.f, 1.f, seed + 2 * l, stream_));
    ORCHID_TRY(
        launch_fill_uniform_bf16(st.vc[size_t(l)], kv, -1.f, 1.f, seed + 2 * l + 1, stream_));
  }
  ORCHID_TRY(launch_fill_uniform_f32(st.rec_block, st.rec_bytes / 4, -0.05f, 0.05f, seed ^ 0x5eed,
                                     stream_));
  const int pos[2] = {int(n), 0};
  ORCHID_CUDA(cudaMemcpyAsync(st.d_pos, pos, sizeof pos, cudaMemcpyHostToDevice, stream_));
  ORCHID_TRY(sync("synthetic context"));
  st.n_past_ = n;
  return {};
}

Expected<std::vector<KernelTiming>> CudaBackend::profile_step(CudaState& st) {
  set_pdl_enabled(sw_.pdl);
  Profiler prof(stream_);
  PickConfig pick;
  ORCHID_CUDA(cudaMemsetAsync(st.d_halt, 0, sizeof(int), stream_));
  prof.mark("start", 0);
  ORCHID_TRY(enqueue_step(st, true, pick, split_for(st.n_past_ + 1), &prof));
  ORCHID_TRY(sync("profiled step"));
  st.n_past_ += 1;
  std::vector<KernelTiming> out;
  const int64_t kv_row = int64_t(c_.n_head_kv) * c_.head_dim * 2 * 2;  // K + V bytes per token
  for (size_t i = 1; i < prof.marks.size(); ++i) {
    float ms = 0;
    ORCHID_CUDA(cudaEventElapsedTime(&ms, prof.marks[i - 1].second, prof.marks[i].second));
    int64_t bytes = prof.bytes[i];
    if (prof.marks[i].first == "attention") bytes = st.n_past_ * kv_row;
    out.push_back({prof.marks[i].first, double(ms), bytes});
  }
  return out;
}

}  // namespace orchid::cuda

namespace orchid {

Status cuda_device_usable() {
  int n = 0;
  if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) {
    cudaGetLastError();
    return err("no usable CUDA device (", cudaGetErrorString(e), ")");
  }
  if (n == 0) return err("no CUDA device found");
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return err("cannot query the CUDA device");
  if (p.major < 9)
    return err("the CUDA backend is built for compute capability 9.0 (Hopper); ", p.name, " has ",
               p.major, ".", p.minor);
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
