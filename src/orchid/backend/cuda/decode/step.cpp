// One decode step as a launch sequence (~7 kernels per layer: fused GEMVs, the DeltaNet step or
// the attention pair, router, expert gate/up with routing, expert down, then lm_head with the
// pick), captured once into a CUDA graph per configuration; and the profiled, kernel-by-kernel
// variant the benchmark uses.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "orchid/backend/cuda/cuda_backend_impl.h"

namespace orchid::cuda {

int CudaBackend::split_for(int64_t n_keys) const {
  return sw_.split_kv ? splits_for_keys(n_keys, kMaxSplitsPerHead) : 1;
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
                                       const float* norm, const int* halt,
                                       const SlotBatch& batch, Profiler* prof,
                                       const char* label) {
  // One launch per run of tasks that share format and width.
  int done = 0;
  while (done < n) {
    GemvParams p;
    p.x = x, p.cols = cols, p.norm = norm, p.eps = c_.rms_norm_eps, p.halt = halt;
    p.batch = batch;
    if (batch.slots > 1) p.x_codes = x_codes_;
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

Status CudaBackend::enqueue_step(CudaState* st, const SlotBatch& batch, bool head,
                                 const PickConfig& pick, int n_split, int n_split_min,
                                 Profiler* prof) {
  const DeviceModel& m = *dm_;
  const int H = c_.n_embd;
  int* const halt = st ? st->d_halt : slot_halt_;
  int* const pos = st ? st->d_pos : slot_pos_;
  // Each launch's batch: the step's, at layer l (its states' row of the table).
  auto at_layer = [&](int l) {
    SlotBatch b = batch;
    b.layer = l;
    return b;
  };
  ORCHID_TRY(launch_embed(m.embd, token_, h_, H, halt, stream_, batch));
  if (prof) prof->mark("embed", int64_t(H) * 2);
  for (int l = 0; l < c_.n_layer; ++l) {
    const DevLayer& L = m.layers[size_t(l)];
    if (c_.layer_types[size_t(l)] == LayerKind::full_attention) {
      GemvTask t[3] = {{L.q, qg_, nullptr}, {L.k, kbuf_, nullptr}, {L.v, vbuf_, nullptr}};
      const float *x = nullptr, *xn = nullptr;
      ORCHID_TRY(normed_input(L.attn_norm, halt, prof, x, xn));
      ORCHID_TRY(enqueue_gemv_group(t, 3, x, H, xn, halt, batch, prof, "attn qkv gemv"));
      AttnParams a;
      a.qg = qg_, a.k = kbuf_, a.v = vbuf_, a.q_norm = L.q_norm, a.k_norm = L.k_norm;
      a.inv_freq = m.inv_freq, a.eps = c_.rms_norm_eps;
      a.n_head = c_.n_head, a.n_head_kv = c_.n_head_kv, a.hd = c_.head_dim, a.n_rot = c_.n_rot;
      if (st) a.kc = st->kc[size_t(l)], a.vc = st->vc[size_t(l)];
      a.pos = pos, a.out = attn_;
      a.n_split = n_split, a.n_split_min = n_split_min, a.part_acc = part_acc_,
      a.part_ml = part_ml_;
      a.halt = halt, a.batch = at_layer(l);
      if (!sw_.fused_qk) a.k_work = k_work_;
      ORCHID_TRY(launch_qk_norm_rope_kv(a, stream_));
      if (prof) prof->mark("qk norm+rope+kv", 0);
      ORCHID_TRY(launch_attention_decode(a, stream_));
      if (prof) prof->mark("attention", 0);  // bytes added by the caller (depends on context)
      GemvTask o = {L.o, h_, h_};
      ORCHID_TRY(enqueue_gemv_group(&o, 1, attn_, c_.n_head * c_.head_dim, nullptr, halt, batch,
                                    prof, "attn o gemv"));
    } else {
      GemvTask t[4] = {
          {L.qkv, qkv_, nullptr}, {L.z, z_, nullptr}, {L.b, bb_, nullptr}, {L.a, aa_, nullptr}};
      const float *x = nullptr, *xn = nullptr;
      ORCHID_TRY(normed_input(L.attn_norm, halt, prof, x, xn));
      ORCHID_TRY(enqueue_gemv_group(t, 4, x, H, xn, halt, batch, prof, "gdn in gemv"));
      GdnParams g;
      g.qkv = qkv_, g.z = z_, g.b = bb_, g.a = aa_, g.conv_w = L.conv_w;
      if (st) g.conv_ring = st->ring[size_t(l)], g.S = st->S[size_t(l)];
      g.A_log = L.A_log, g.dt_bias = L.dt_bias, g.norm = L.gnorm, g.pos = pos;
      g.hk = c_.lin_n_head_k, g.hv = c_.lin_n_head_v, g.dk = c_.lin_head_dim_k;
      g.dv = c_.lin_head_dim_v, g.K = c_.lin_conv_kernel, g.eps = c_.rms_norm_eps;
      g.out = gdn_, g.halt = halt, g.batch = at_layer(l);
      ORCHID_TRY(launch_gdn_step(g, stream_));
      if (prof)
        prof->mark("gdn step",
                   2 * int64_t(c_.lin_n_head_v) * c_.lin_head_dim_k * c_.lin_head_dim_v * 4);
      GemvTask o = {L.out, h_, h_};
      ORCHID_TRY(enqueue_gemv_group(&o, 1, gdn_, c_.lin_value_dim(), nullptr, halt, batch, prof,
                                    "gdn out gemv"));
    }
    GemvParams r;  // router and shared-expert gate logits; gate/up routes from them
    r.task[0] = {L.router, moe_logits_, nullptr};
    r.task[1] = {L.shared_gate, moe_logits_ + c_.n_expert, nullptr};
    const float *post_x = nullptr, *post_n = nullptr;
    ORCHID_TRY(normed_input(L.post_norm, halt, prof, post_x, post_n));
    r.n_task = 2, r.x = post_x, r.cols = H, r.norm = post_n, r.eps = c_.rms_norm_eps;
    r.halt = halt, r.batch = batch;
    ORCHID_TRY(launch_gemv(r, stream_));
    if (prof) prof->mark("router", matrix_bytes(L.router) + matrix_bytes(L.shared_gate));
    MoeParams e;
    e.gate = L.gate, e.up = L.up, e.down = L.down;
    e.n_ff = c_.n_ff_exp, e.n_embd = H, e.n_slot = c_.n_expert_used + (L.shared_apart ? 0 : 1);
    e.x = post_x, e.norm = post_n, e.eps = c_.rms_norm_eps, e.sel = sel_, e.sel_w = sel_w_;
    e.logits = moe_logits_, e.n_expert = c_.n_expert, e.top_k = c_.n_expert_used;
    e.act = act_, e.h = h_, e.halt = halt, e.batch = batch;
    if (!sw_.fused_expert) e.gate_up_raw = gate_up_raw_, e.slot_out = slot_out_;
    const int64_t stacked = c_.n_expert + (L.shared_apart ? 0 : 1);
    // Both gate/up launches read the same normed h, so they run before either down launch.
    MoeParams sh = e;
    if (L.shared_apart) {
      sh.gate = L.sh_gate, sh.up = L.sh_up, sh.down = L.sh_down, sh.n_ff = c_.n_ff_shexp;
      sh.n_slot = 1, sh.slot_begin = c_.n_expert_used, sh.expert_base = c_.n_expert;
      sh.act = act_ + int64_t(c_.n_expert_used) * act_stride_;
      if (e.gate_up_raw)
        sh.gate_up_raw = gate_up_raw_ + int64_t(c_.n_expert_used) * 2 * act_stride_;
      sh.logits = nullptr;  // routed by the first launch
    }
    if (!sw_.fused_routing) {
      ORCHID_TRY(launch_moe_route(e, stream_));
      if (prof) prof->mark("moe routing", 0);
      e.logits = nullptr;  // gate/up and down read sel / sel_w
    }
    ORCHID_TRY(launch_moe_gate_up(e, stream_));
    if (prof)
      prof->mark("moe gate/up", (matrix_bytes(L.gate) + matrix_bytes(L.up)) / stacked * e.n_slot);
    if (L.shared_apart) {
      ORCHID_TRY(launch_moe_gate_up(sh, stream_));
      if (prof) prof->mark("shared gate/up", matrix_bytes(L.sh_gate) + matrix_bytes(L.sh_up));
    }
    if (!sw_.fused_expert) {
      ORCHID_TRY(launch_moe_silu_mul(e, stream_));
      if (L.shared_apart) ORCHID_TRY(launch_moe_silu_mul(sh, stream_));
      if (prof) prof->mark("moe silu*mul", 0);
    }
    ORCHID_TRY(launch_moe_down(e, stream_));
    if (prof) prof->mark("moe down", matrix_bytes(L.down) / stacked * e.n_slot);
    if (!sw_.fused_expert) {
      ORCHID_TRY(launch_moe_weighted_residual(e, stream_));
      if (prof) prof->mark("moe weighted residual", 0);
    }
    if (L.shared_apart) {
      ORCHID_TRY(launch_moe_down(sh, stream_));
      if (!sw_.fused_expert) ORCHID_TRY(launch_moe_weighted_residual(sh, stream_));
      if (prof) prof->mark("shared down", matrix_bytes(L.sh_down));
    }
  }
  if (!head) {
    if (!st) return err("a batched step ends with the lm_head");
    ORCHID_TRY(launch_advance(st->d_pos, halt, stream_));
    if (prof) prof->mark("advance", 0);
    return {};
  }
  GemvParams p;
  p.task[0] = {m.lm_head, pick.want_logits ? logits_ : nullptr, nullptr};
  const float *out_x = nullptr, *out_n = nullptr;
  ORCHID_TRY(normed_input(m.out_norm, halt, prof, out_x, out_n));
  p.n_task = 1, p.x = out_x, p.cols = H, p.norm = out_n, p.eps = c_.rms_norm_eps;
  p.halt = halt, p.epilogue = GemvEpilogue::argmax, p.ticket = ticket_, p.partial = partial_;
  p.token = token_, p.pos = pos, p.n_stop = pick.n_stop, p.stopped = halt;
  p.inv_temp = pick.inv_temp, p.seed = pick.seed;
  p.allowed = pick.masked ? allowed_ : nullptr;
  p.batch = batch;
  if (st) {
    p.stop_ids = stop_ids_, p.host_token = pinned_dev_;
  } else {
    p.stop_ids = slot_stop_ids_, p.host_token = pinned_slots_dev_;
    p.slot_inv_temp = slot_inv_temp_, p.slot_seed = slot_seed_;
    p.x_codes = x_codes_;
  }
  if (gemv_blocks(p) > 4096) return err("lm_head: too many blocks");
  ORCHID_TRY(launch_gemv(p, stream_));
  if (prof) prof->mark("lm_head+pick", matrix_bytes(m.lm_head));
  return {};
}

Status CudaBackend::launch_graph(CudaState::Graph& g, const std::string& key,
                                 const std::function<Status()>& enqueue) {
  if (!g.exec || g.key != key) {
    if (g.exec) {
      ORCHID_TRY(sync("graph rebuild"));  // the old graph may still be running
      cudaGraphExecDestroy(g.exec);
      g.exec = nullptr;
    }
    ORCHID_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    Status s = enqueue();
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

Status CudaBackend::run_step(CudaState& st, bool head, const PickConfig& pick) {
  sw_.apply();
  const int n_split = split_for(st.n_past_ + 1);
  auto enqueue = [&] { return enqueue_step(&st, {}, head, pick, n_split, n_split, nullptr); };
  if (!sw_.graph) return enqueue();
  const std::string key = std::to_string(n_split) + "/" + sw_.graph_key() + "/" +
                          std::to_string(pick.want_logits) + "/" + std::to_string(pick.n_stop) +
                          "/" + std::to_string(pick.inv_temp) + "/" + std::to_string(pick.seed) +
                          "/" + std::to_string(pick.masked);
  return launch_graph(st.graphs[head ? 1 : 0], key, enqueue);
}

Expected<std::vector<KernelTiming>> CudaBackend::profile_step(CudaState& st) {
  sw_.apply();
  Profiler prof(stream_);
  PickConfig pick;
  ORCHID_CUDA(cudaMemsetAsync(st.d_halt, 0, sizeof(int), stream_));
  prof.mark("start", 0);
  const int n_split = split_for(st.n_past_ + 1);
  ORCHID_TRY(enqueue_step(&st, {}, true, pick, n_split, n_split, &prof));
  ORCHID_TRY(sync("profiled step"));
  st.n_past_ += 1;
  auto out = prof.timings();
  if (!out) return out.error();
  const int64_t kv_row = int64_t(c_.n_head_kv) * c_.head_dim * 2 * 2;  // K + V bytes per token
  for (KernelTiming& k : *out)
    if (k.name == "attention") k.bytes = st.n_past_ * kv_row;
  return out;
}

}  // namespace orchid::cuda
