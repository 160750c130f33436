// `orchid bench decode` on the CUDA backend: tok/s per context (synthetic KV + state), the
// device's read-bandwidth ceiling, a per-kernel profile of one step (time, bytes, % of the
// ceiling), the graph step against the sum of its kernels (the bubbles), each switch's matched
// ablation, and each GEMV / expert launch shape's % of the ceiling.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "orchid/backend/cuda/cuda_backend.h"
#include "orchid/backend/cuda/cuda_backend_impl.h"

namespace orchid {
namespace {

using Clock = std::chrono::steady_clock;
using cuda::CudaBackend;
using cuda::CudaState;

// Median of `reps` timed reads of a 4 GiB buffer, in bytes/s.
Expected<double> read_bandwidth(cudaStream_t s) {
  const int64_t bytes = int64_t(4) << 30;
  void* buf = nullptr;
  unsigned* sink = nullptr;
  if (cudaMalloc(&buf, size_t(bytes)) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&sink), 4) != cudaSuccess)
    return err("bandwidth probe: cannot allocate 4 GiB");
  ORCHID_TRY(cuda::launch_fill_random(buf, bytes / 4, 7, s));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms;
  for (int i = 0; i < 8; ++i) {
    cudaEventRecord(a, s);
    ORCHID_TRY(cuda::launch_read_bandwidth(buf, bytes, sink, s));
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    if (i >= 2) ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(buf);
  cudaFree(sink);
  std::sort(ms.begin(), ms.end());
  return double(bytes) / (double(ms[ms.size() / 2]) * 1e-3);
}

// tok/s of `tokens` greedy steps after a synthetic context of n tokens.
Expected<double> decode_speed(CudaBackend& be, int64_t n, int tokens) {
  auto st = be.new_state(n + tokens + 16);
  if (!st) return st.error();
  ORCHID_TRY(be.fill_synthetic_context(**st, n, uint64_t(n) * 31 + 1));
  DeviceDecodeOptions opts;
  auto warm = be.decode_on_device(**st, 1, 4, opts, [](int32_t) { return true; });  // capture
  if (!warm) return warm.error();
  ORCHID_TRY(be.fill_synthetic_context(**st, n, uint64_t(n) * 31 + 1));
  int seen = 0;
  const auto t0 = Clock::now();
  auto r = be.decode_on_device(**st, 1, tokens, opts, [&](int32_t) { return ++seen < tokens; });
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!r) return r.error();
  return double(seen) / sec;
}

// The same steps with the host in the loop, as the engine runs them with ORCHID_DEVICE_DECODE=0
// (the on-device loop's ablation): each token's logits copied to the host, the argmax taken there
// and the id sent back as the next forward()'s input.
Expected<double> host_loop_speed(CudaBackend& be, int64_t n, int tokens) {
  auto st = be.new_state(n + tokens + 16);
  if (!st) return st.error();
  std::vector<float> logits;
  int32_t next = 1;
  auto step = [&]() -> Status {
    ORCHID_TRY(be.forward(**st, std::span(&next, 1), LogitsMode::last, logits, 0));
    next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    return {};
  };
  ORCHID_TRY(be.fill_synthetic_context(**st, n, uint64_t(n) * 31 + 1));
  for (int i = 0; i < 4; ++i) ORCHID_TRY(step());  // capture
  ORCHID_TRY(be.fill_synthetic_context(**st, n, uint64_t(n) * 31 + 1));
  const auto t0 = Clock::now();
  for (int i = 0; i < tokens; ++i) ORCHID_TRY(step());
  return tokens / std::chrono::duration<double>(Clock::now() - t0).count();
}

// Aggregate tok/s of B states decoding at once (CudaBackend::decode_batch), each `tokens` greedy
// picks after a synthetic context of n tokens (the first call captures the graph).
Expected<double> batch_speed(CudaBackend& be, int B, int64_t n, int tokens) {
  std::vector<std::unique_ptr<BackendState>> states;
  for (int b = 0; b < B; ++b) {
    auto st = be.new_state(n + tokens + 16);
    if (!st) return st.error();
    states.push_back(std::move(*st));
  }
  double sec = 0;
  int seen = 0;
  for (int rep = 0; rep < 2; ++rep) {
    std::vector<DecodeLane> lanes(static_cast<size_t>(B));
    for (int b = 0; b < B; ++b) {
      ORCHID_TRY(be.fill_synthetic_context(*states[size_t(b)], n, uint64_t(n) * 31 + 1 + b));
      lanes[size_t(b)].state = states[size_t(b)].get();
      lanes[size_t(b)].token = 1 + b;
      lanes[size_t(b)].max_new = rep == 0 ? 4 : tokens;
      lanes[size_t(b)].on_token = [&seen](int32_t) { return ++seen, true; };
    }
    seen = 0;
    const auto t0 = Clock::now();
    ORCHID_TRY(be.decode_batch(lanes));
    sec = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return double(seen) / sec;
}

// Per-kernel ms of one batched step of B states at context n (median of 5 after a warm-up).
Expected<nlohmann::json> batch_profile(CudaBackend& be, int B, int64_t n) {
  std::vector<std::unique_ptr<BackendState>> states;
  std::vector<DecodeLane> lanes(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) {
    auto st = be.new_state(n + 16);
    if (!st) return st.error();
    states.push_back(std::move(*st));
    lanes[size_t(b)].state = states.back().get();
    lanes[size_t(b)].token = 1 + b;
  }
  std::map<std::string, std::vector<double>> ms;
  std::vector<std::string> order;
  for (int rep = 0; rep < 6; ++rep) {
    for (int b = 0; b < B; ++b)
      ORCHID_TRY(be.fill_synthetic_context(*states[size_t(b)], n, 99 + b));
    auto t = be.profile_batch_step(lanes);
    if (!t) return t.error();
    std::map<std::string, double> sum;
    for (const auto& k : *t) {
      if (!sum.count(k.name) && rep == 0) order.push_back(k.name);
      sum[k.name] += k.ms;
    }
    if (rep > 0)
      for (auto& [name, v] : sum) ms[name].push_back(v);
  }
  nlohmann::json out = nlohmann::json::object();
  double total = 0;
  for (const auto& name : order) {
    auto v = ms[name];
    std::sort(v.begin(), v.end());
    out[name] = v[v.size() / 2];
    total += v[v.size() / 2];
  }
  out["sum_of_kernels"] = total;
  return out;
}

struct Profile {
  double step_ms = 0, kernels_ms = 0;
  nlohmann::json kernels = nlohmann::json::array();
};

// Per-kernel time of one step at context n (median of 5 profiled steps, summed by kernel).
Expected<Profile> profile(CudaBackend& be, int64_t n, double read_bw) {
  auto st = be.new_state(n + 32);
  if (!st) return st.error();
  auto& cs = static_cast<CudaState&>(**st);
  std::map<std::string, std::vector<double>> ms;
  std::map<std::string, int64_t> bytes, count;
  std::vector<std::string> order;
  for (int rep = 0; rep < 6; ++rep) {
    ORCHID_TRY(be.fill_synthetic_context(cs, n, 99));
    auto t = be.profile_step(cs);
    if (!t) return t.error();
    std::map<std::string, double> sum;
    std::map<std::string, int64_t> b, c;
    for (const auto& k : *t) {
      if (!sum.count(k.name) && rep == 0) order.push_back(k.name);
      sum[k.name] += k.ms, b[k.name] += k.bytes, c[k.name] += 1;
    }
    if (rep == 0) continue;  // warm-up
    for (auto& [name, v] : sum) ms[name].push_back(v);
    bytes = b, count = c;
  }
  Profile p;
  for (const auto& name : order) {
    auto v = ms[name];
    std::sort(v.begin(), v.end());
    const double t = v[v.size() / 2];
    p.kernels_ms += t;
    const double gbps = double(bytes[name]) / (t * 1e-3) / 1e9;
    p.kernels.push_back({{"kernel", name},
                         {"launches", count[name]},
                         {"ms", t},
                         {"bytes", bytes[name]},
                         {"GB_per_s", gbps},
                         {"pct_of_read_bw", 100.0 * gbps * 1e9 / read_bw}});
  }
  auto speed = decode_speed(be, n, 64);
  if (!speed) return speed.error();
  p.step_ms = 1e3 / *speed;
  return p;
}

}  // namespace

Expected<nlohmann::json> cuda_decode_bench(Backend& backend, const DecodeBenchOptions& opts) {
  auto* be = dynamic_cast<CudaBackend*>(&backend);
  if (!be) return err("the decode benchmark's kernel report needs the cuda backend");
  auto bw = read_bandwidth(be->stream());
  if (!bw) return bw.error();
  nlohmann::json out;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  out["gpu"] = prop.name;
  out["read_bandwidth_GB_per_s"] = *bw / 1e9;
  out["weights_GiB"] = double(be->device_model().weight_bytes()) / (1 << 30);
  const cuda::Switches base = be->switches();
  out["switches"] = {{"cuda_graph", base.graph},
                     {"split_kv", base.split_kv},
                     {"batch_decode", base.batch_decode},
                     {"slot_mma", base.slot_mma},
                     {"staged_down", base.staged_down},
                     {"pdl", base.pdl},
                     {"fused_norm", base.fused_norm},
                     {"mma_attention", base.mma_attention},
                     {"fused_routing", base.fused_routing},
                     {"dp4a", base.dp4a},
                     {"fused_expert", base.fused_expert},
                     {"fused_qk", base.fused_qk}};
  nlohmann::json speed = nlohmann::json::object();
  std::printf("%10s %12s\n", "context", "decode tok/s");
  for (int64_t n : opts.contexts) {
    auto s = decode_speed(*be, n, opts.tokens);
    if (!s) return s.error();
    speed[std::to_string(n)] = *s;
    std::printf("%10lld %12.1f\n", static_cast<long long>(n), *s);
    std::fflush(stdout);
  }
  out["decode_tok_s"] = speed;
  out["decode_tokens_per_measurement"] = opts.tokens;
  if (!opts.batches.empty()) {
    nlohmann::json batched = nlohmann::json::object(), bprof = nlohmann::json::object();
    std::printf("%10s %8s %18s %12s\n", "context", "states", "aggregate tok/s", "x one state");
    for (int64_t n : opts.contexts) {
      nlohmann::json row = nlohmann::json::object();
      for (int B : opts.batches) {
        auto s = batch_speed(*be, B, n, opts.tokens);
        if (!s) return s.error();
        // The matched ablation: the same states one after the other (ORCHID_BATCH_DECODE=0).
        be->switches().batch_decode = false;
        auto off = batch_speed(*be, B, n, opts.tokens);
        be->switches() = base;
        if (!off) return off.error();
        // And the batched GEMVs on dp4a instead of the int8 tensor cores (ORCHID_SLOT_MMA=0).
        be->switches().slot_mma = false;
        auto no_mma = batch_speed(*be, B, n, opts.tokens);
        be->switches() = base;
        if (!no_mma) return no_mma.error();
        // And the batched expert down with its rows in registers (ORCHID_STAGED_DOWN=0).
        be->switches().staged_down = false;
        auto no_staged = batch_speed(*be, B, n, opts.tokens);
        be->switches() = base;
        if (!no_staged) return no_staged.error();
        row[std::to_string(B)] = *s;
        row[std::to_string(B) + "_batch_decode_off"] = *off;
        row[std::to_string(B) + "_slot_mma_off"] = *no_mma;
        row[std::to_string(B) + "_staged_down_off"] = *no_staged;
        std::printf(
            "%10lld %8d %18.1f %12.2f   (batch_decode off: %.1f, slot_mma off: %.1f, staged_down "
            "off: %.1f)\n",
            static_cast<long long>(n), B, *s, *s / speed[std::to_string(n)].get<double>(), *off,
            *no_mma, *no_staged);
        std::fflush(stdout);
      }
      batched[std::to_string(n)] = row;
    }
    for (int B : opts.batches) {
      auto p = batch_profile(*be, B, opts.contexts.front());
      if (!p) return p.error();
      bprof[std::to_string(B)] = *p;
      std::printf("batched step, %d states at %lld:", B, static_cast<long long>(opts.contexts.front()));
      for (auto& [k, v] : p->items()) std::printf(" %s %.3f;", k.c_str(), v.get<double>());
      std::printf("\n");
    }
    out["batched_decode_tok_s"] = batched;
    out["batched_step_kernel_ms"] = bprof;
  }
  nlohmann::json prof = nlohmann::json::object(), abl = nlohmann::json::object();
  for (int64_t n : opts.ablation_contexts) {
    auto p = profile(*be, n, *bw);
    if (!p) return p.error();
    prof[std::to_string(n)] = {{"graph_step_ms", p->step_ms},
                               {"sum_of_kernels_ms", p->kernels_ms},
                               {"bubbles_ms", p->step_ms - p->kernels_ms},
                               {"kernels", p->kernels}};
    std::printf("\nstep at %lld: %.3f ms (graph), kernels %.3f ms\n", static_cast<long long>(n),
                p->step_ms, p->kernels_ms);
    for (const auto& k : p->kernels)
      std::printf("  %-18s x%-3d %8.3f ms %7.1f GB/s %5.1f%%\n",
                  k["kernel"].get<std::string>().c_str(), k["launches"].get<int>(),
                  k["ms"].get<double>(), k["GB_per_s"].get<double>(),
                  k["pct_of_read_bw"].get<double>());
    // Matched ablations: one switch off at a time.
    nlohmann::json a = {{"all_on", 1e3 / p->step_ms}};
    static constexpr std::pair<const char*, bool cuda::Switches::*> kSwitches[] = {
        {"cuda_graph", &cuda::Switches::graph},
        {"split_kv", &cuda::Switches::split_kv},
        {"pdl", &cuda::Switches::pdl},
        {"fused_norm", &cuda::Switches::fused_norm},
        {"mma_attention", &cuda::Switches::mma_attention},
        {"fused_routing", &cuda::Switches::fused_routing},
        {"dp4a", &cuda::Switches::dp4a},
        {"fused_expert", &cuda::Switches::fused_expert},
        {"fused_qk", &cuda::Switches::fused_qk}};
    for (const auto& [sw, member] : kSwitches) {
      cuda::Switches s = base;
      s.*member = false;
      be->switches() = s;
      auto v = decode_speed(*be, n, opts.tokens);
      be->switches() = base;
      if (!v) return v.error();
      a[std::string(sw) + "_off"] = *v;
      std::printf("  ablation %-12s off: %8.1f tok/s (all on %.1f)\n", sw, *v, 1e3 / p->step_ms);
    }
    auto host = host_loop_speed(*be, n, opts.tokens);
    if (!host) return host.error();
    a["device_decode_off"] = *host;
    std::printf("  ablation %-12s off: %8.1f tok/s (all on %.1f)\n", "device_decode", *host,
                1e3 / p->step_ms);
    abl[std::to_string(n)] = a;
  }
  out["profile"] = prof;
  out["ablations_tok_s"] = abl;
  if (opts.ablation_contexts.empty()) return out;
  base.apply();
  auto shapes = cuda::gemv_shape_report(be->device_model(), be->stream(), *bw);
  if (!shapes) return shapes.error();
  out["gemv_per_shape"] = *shapes;
  return out;
}

}  // namespace orchid
