// Per-shape throughput of the decode GEMV and expert kernels (the issue's "% of read bandwidth
// on each real shape"): each real launch shape of the model, launched back to back across the
// layers' own weights (so no launch reads bytes the one before left in L2; the lm_head alone is
// 4.7× L2), with programmatic dependent launch as in the step. Time per launch includes its
// share of launch overhead, as in a step.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>

#include "orchid/backend/cuda/cuda_backend_impl.h"

namespace orchid::cuda {
namespace {

// Device scratch for the launches (inputs random, outputs discarded).
struct Scratch {
  DeviceArena arena;
  float *x = nullptr, *y = nullptr, *h = nullptr, *act = nullptr, *sel_w = nullptr;
  int* sel = nullptr;
};

Status make_scratch(const ModelConfig& c, int act_stride, Scratch& s) {
  auto take = [&](size_t bytes) -> Expected<void*> { return s.arena.alloc(bytes); };
  const int slots = c.n_expert_used + 1;
  auto x = take(size_t(16384) * 4), y = take(size_t(c.n_vocab) * 4), h = take(size_t(c.n_embd) * 4);
  auto act = take(size_t(slots) * act_stride * 4), sw = take(size_t(slots) * 4),
       sel = take(size_t(slots) * 4);
  for (auto* e : {&x, &y, &h, &act, &sw, &sel})
    if (!*e) return e->error();
  s.x = static_cast<float*>(*x), s.y = static_cast<float*>(*y), s.h = static_cast<float*>(*h);
  s.act = static_cast<float*>(*act), s.sel_w = static_cast<float*>(*sw);
  s.sel = static_cast<int*>(*sel);
  ORCHID_TRY(launch_fill_uniform_f32(s.x, 16384, -1.f, 1.f, 5, nullptr));
  ORCHID_TRY(launch_fill_uniform_f32(s.act, int64_t(slots) * act_stride, -1.f, 1.f, 6, nullptr));
  ORCHID_TRY(launch_fill_uniform_f32(s.sel_w, slots, 0.f, 0.3f, 7, nullptr));
  // Slots spread over the experts (distinct), the shared expert last.
  std::vector<int> ids(static_cast<size_t>(slots));
  for (int i = 0; i < c.n_expert_used; ++i) ids[size_t(i)] = (i * 37 + 11) % c.n_expert;
  ids.back() = c.n_expert;
  if (cudaMemcpy(s.sel, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess)  // the fills ran on the legacy stream
    return err("gemv bench: preparing inputs");
  return {};
}

struct Shape {
  std::string name;
  int64_t bytes = 0;  // per launch
  int variants = 0;   // distinct weight sets (layers) it cycles through
  std::function<Status(int variant, cudaStream_t)> launch;
};

}  // namespace

Expected<nlohmann::json> gemv_shape_report(const DeviceModel& m, cudaStream_t stream,
                                           double read_bw) {
  const ModelConfig& c = m.config;
  const int act_stride = (std::max(c.n_ff_exp, c.n_ff_shexp) + 31) / 32 * 32;
  Scratch s;
  ORCHID_TRY(make_scratch(c, act_stride, s));
  std::vector<int> gdn, attn;
  for (int l = 0; l < c.n_layer; ++l)
    (c.layer_types[size_t(l)] == LayerKind::full_attention ? attn : gdn).push_back(l);
  auto layer = [&](const std::vector<int>& ls, int v) -> const DevLayer& {
    return m.layers[size_t(ls[size_t(v) % ls.size()])];
  };
  auto gemv = [&](std::vector<GemvTask> tasks, int cols, const float* norm) {
    GemvParams p;
    for (size_t i = 0; i < tasks.size(); ++i) p.task[i] = tasks[i];
    p.n_task = int(tasks.size()), p.x = s.x, p.cols = cols, p.norm = norm;
    return p;
  };
  std::vector<Shape> shapes;
  const int H = c.n_embd;
  if (!gdn.empty()) {
    const DevLayer& L = layer(gdn, 0);
    shapes.push_back(
        {"gdn in (qkv+z+b+a)",
         matrix_bytes(L.qkv) + matrix_bytes(L.z) + matrix_bytes(L.b) + matrix_bytes(L.a),
         int(gdn.size()), [&](int v, cudaStream_t st) {
           const DevLayer& l = layer(gdn, v);
           float* y = s.y;
           return launch_gemv(gemv({{l.qkv, y, nullptr},
                                    {l.z, y + l.qkv.rows, nullptr},
                                    {l.b, y + l.qkv.rows + l.z.rows, nullptr},
                                    {l.a, y + l.qkv.rows + l.z.rows + l.b.rows, nullptr}},
                                   H, l.attn_norm),
                              st);
         }});
    shapes.push_back(
        {"gdn out (+residual)", matrix_bytes(L.out), int(gdn.size()), [&](int v, cudaStream_t st) {
           const DevLayer& l = layer(gdn, v);
           return launch_gemv(gemv({{l.out, s.h, s.h}}, l.out.cols, nullptr), st);
         }});
  }
  if (!attn.empty()) {
    const DevLayer& L = layer(attn, 0);
    shapes.push_back({"attn q+k+v", matrix_bytes(L.q) + matrix_bytes(L.k) + matrix_bytes(L.v),
                      int(attn.size()), [&](int v, cudaStream_t st) {
                        const DevLayer& l = layer(attn, v);
                        return launch_gemv(gemv({{l.q, s.y, nullptr},
                                                 {l.k, s.y + l.q.rows, nullptr},
                                                 {l.v, s.y + l.q.rows + l.k.rows, nullptr}},
                                                H, l.attn_norm),
                                           st);
                      }});
    shapes.push_back(
        {"attn o (+residual)", matrix_bytes(L.o), int(attn.size()), [&](int v, cudaStream_t st) {
           const DevLayer& l = layer(attn, v);
           return launch_gemv(gemv({{l.o, s.h, s.h}}, l.o.cols, nullptr), st);
         }});
  }
  std::vector<int> all(static_cast<size_t>(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) all[size_t(l)] = l;
  const DevLayer& L0 = m.layers[0];
  shapes.push_back({"router + shared gate", matrix_bytes(L0.router) + matrix_bytes(L0.shared_gate),
                    c.n_layer, [&](int v, cudaStream_t st) {
                      const DevLayer& l = layer(all, v);
                      return launch_gemv(gemv({{l.router, s.y, nullptr},
                                               {l.shared_gate, s.y + c.n_expert, nullptr}},
                                              H, l.post_norm),
                                         st);
                    }});
  const int slots = c.n_expert_used + 1;
  const int64_t stacked = c.n_expert + (L0.shared_apart ? 0 : 1);
  auto moe = [&](const DevLayer& l) {
    MoeParams e;
    e.gate = l.gate, e.up = l.up, e.down = l.down, e.n_ff = c.n_ff_exp, e.n_embd = H;
    e.n_slot = slots, e.x = s.x, e.norm = l.post_norm, e.eps = c.rms_norm_eps;
    e.sel = s.sel, e.sel_w = s.sel_w, e.act = s.act, e.h = s.h;
    return e;
  };
  if (!L0.shared_apart) {  // one launch covers the routed and the shared expert
    shapes.push_back(
        {"expert gate/up (9 slots)",
         (matrix_bytes(L0.gate) + matrix_bytes(L0.up)) / stacked * slots, c.n_layer,
         [&](int v, cudaStream_t st) { return launch_moe_gate_up(moe(layer(all, v)), st); }});
    shapes.push_back(
        {"expert down (9 slots, +residual)", matrix_bytes(L0.down) / stacked * slots, c.n_layer,
         [&](int v, cudaStream_t st) { return launch_moe_down(moe(layer(all, v)), st); }});
  }
  shapes.push_back({"lm_head", matrix_bytes(m.lm_head), 1, [&](int, cudaStream_t st) {
                      return launch_gemv(gemv({{m.lm_head, s.y, nullptr}}, H, m.out_norm), st);
                    }});

  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  nlohmann::json out = nlohmann::json::array();
  std::printf("\nper-shape GEMV / expert launches (back to back over the layers' weights)\n");
  for (const Shape& sh : shapes) {
    const int n = std::max(3 * sh.variants, 8);
    for (int i = 0; i < sh.variants; ++i) ORCHID_TRY(sh.launch(i, stream));  // warm-up
    cudaEventRecord(a, stream);
    for (int i = 0; i < n; ++i) ORCHID_TRY(sh.launch(i, stream));
    cudaEventRecord(b, stream);
    if (cudaEventSynchronize(b) != cudaSuccess) return err("gemv bench: ", sh.name, " failed");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    const double us = 1e3 * ms / n, gbps = double(sh.bytes) / (us * 1e-6) / 1e9;
    const double pct = 100.0 * gbps * 1e9 / read_bw;
    std::printf("  %-34s %9.2f MB %8.2f us %7.1f GB/s %5.1f%%\n", sh.name.c_str(),
                double(sh.bytes) / 1e6, us, gbps, pct);
    out.push_back({{"shape", sh.name},
                   {"bytes", sh.bytes},
                   {"us_per_launch", us},
                   {"GB_per_s", gbps},
                   {"pct_of_read_bw", pct}});
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return out;
}

}  // namespace orchid::cuda
