// `orchid bench prefill` on the CUDA backend: tok/s per prompt length from an empty state, the
// per-kernel time of the chunked path at the ablation and profile lengths (GEMM kernels against
// the MMA peak),
// each prefill switch's matched ablation there (and the DeltaNet launch's time in each scan form),
// and the device memory in use after the longest prompt (weights + KV + state + one chunk's
// buffers).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include "orchid/backend/cuda/cuda_backend.h"
#include "orchid/backend/cuda/cuda_backend_impl.h"

namespace orchid {
namespace {

using cuda::CudaBackend;
using cuda::CudaState;

// The dense bf16/fp16 tensor-core peak measured on the H200 with torch (docs/bench.md): the
// yardstick of the GEMM kernels' utilisation.
constexpr double kMmaPeakTflops = 790.0;

std::vector<int32_t> prompt_tokens(int64_t n, int64_t vocab) {
  std::mt19937_64 rng(uint64_t(n) * 7919 + 3);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int32_t(rng() % uint64_t(vocab));
  return ids;
}

// tok/s of one prefill of n tokens from an empty state (the best of `reps`).
Expected<double> prefill_speed(CudaBackend& be, int64_t n, int reps) {
  const auto tokens = prompt_tokens(n, be.n_vocab());
  double best = 0;
  for (int i = 0; i < reps; ++i) {
    auto st = be.new_state(n + 8);
    if (!st) return st.error();
    std::vector<float> logits;
    const auto t0 = std::chrono::steady_clock::now();
    ORCHID_TRY(be.forward(**st, tokens, LogitsMode::last, logits, 0));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(n) / sec);
  }
  return best;
}

// Per-kernel times (summed over layers and chunks) of one profiled prefill of n tokens; `print`:
// the table on stdout too.
Expected<nlohmann::json> prefill_profile(CudaBackend& be, int64_t n, bool print = true) {
  auto st = be.new_state(n + 8);
  if (!st) return st.error();
  auto t = be.profile_prefill(static_cast<CudaState&>(**st), prompt_tokens(n, be.n_vocab()));
  if (!t) return t.error();
  std::map<std::string, double> ms;
  std::map<std::string, int64_t> flops, count;
  std::vector<std::string> order;
  double total = 0;
  for (const auto& k : *t) {
    if (!ms.count(k.name)) order.push_back(k.name);
    ms[k.name] += k.ms, flops[k.name] += k.bytes, count[k.name] += 1;
    total += k.ms;
  }
  nlohmann::json out = {{"total_ms", total}, {"kernels", nlohmann::json::array()}};
  if (print)
    std::printf("\nprefill of %lld tokens, kernel by kernel: %.2f ms\n", static_cast<long long>(n),
                total);
  for (const auto& name : order) {
    const double tflops = double(flops[name]) / (ms[name] * 1e-3) / 1e12;
    out["kernels"].push_back({{"kernel", name},
                              {"launches", count[name]},
                              {"ms", ms[name]},
                              {"flops", flops[name]},
                              {"TFLOP_per_s", tflops},
                              {"pct_of_mma_peak", 100.0 * tflops / kMmaPeakTflops}});
    if (print)
      std::printf("  %-18s x%-4lld %9.3f ms %7.1f TFLOP/s %5.1f%%\n", name.c_str(),
                  static_cast<long long>(count[name]), ms[name], tflops,
                  100.0 * tflops / kMmaPeakTflops);
  }
  return out;
}

// The DeltaNet launch's time (ms, summed over its layers) of a prefill of n tokens in each scan
// form: {"gdn scan": …, "gdn chunked": …}. What kGdnChunkedMinTokens is chosen from.
Expected<nlohmann::json> gdn_form_ms(CudaBackend& be, int64_t n) {
  const cuda::Switches base = be.switches();
  nlohmann::json ms = nlohmann::json::object();
  for (int form : {0, 1}) {
    be.switches().gdn_chunked = form;
    auto pf = prefill_profile(be, n, false);
    be.switches() = base;
    if (!pf) return pf.error();
    for (const auto& k : (*pf)["kernels"])
      if (k["kernel"] == "gdn scan" || k["kernel"] == "gdn chunked")
        ms[k["kernel"].get<std::string>()] = k["ms"];
  }
  return ms;
}

}  // namespace

Expected<nlohmann::json> cuda_prefill_bench(Backend& backend, const PrefillBenchOptions& opts) {
  auto* be = dynamic_cast<CudaBackend*>(&backend);
  if (!be) return err("the prefill benchmark needs the cuda backend");
  nlohmann::json out;
  const cuda::Switches base = be->switches();
  out["mma_peak_TFLOP_per_s"] = kMmaPeakTflops;
  out["prefill_switches"] = {{"prefill", base.prefill},
                             {"exact_prefill", base.exact_prefill},
                             {"fused_dequant", base.fused_dequant},
                             {"device_routing", base.device_routing},
                             {"flash_prefill", base.flash_prefill},
                             {"prefill_tile", base.prefill_tile},
                             {"prefill_chunk", be->chunk_tokens()},
                             {"gdn_chunked", base.gdn_chunked},
                             {"gdn_chunked_min_tokens", cuda::kGdnChunkedMinTokens}};
  // Warm-up: the first prefill makes the chunk buffers.
  if (auto w = prefill_speed(*be, 256, 1); !w) return w.error();
  nlohmann::json speed = nlohmann::json::object();
  std::printf("%10s %14s\n", "prompt", "prefill tok/s");
  int64_t longest = 0;
  size_t used_after_longest = 0;
  for (int64_t n : opts.lengths) {
    auto s = prefill_speed(*be, n, n <= 8192 ? 3 : 1);
    if (!s) return s.error();
    speed[std::to_string(n)] = *s;
    std::printf("%10lld %14.1f\n", static_cast<long long>(n), *s);
    std::fflush(stdout);
    if (n >= longest) {
      // Memory in use while a state of this length is alive (weights + KV + state + buffers).
      auto st = be->new_state(n + 8);
      if (!st) return st.error();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      longest = n, used_after_longest = total_b - free_b;
    }
  }
  out["prefill_tok_s"] = speed;
  out["memory_GiB"] = {{"prompt_tokens", longest},
                       {"device_in_use", double(used_after_longest) / (1 << 30)},
                       {"weights", double(be->device_model().weight_bytes()) / (1 << 30)},
                       {"state_for_prompt", double(be->state_bytes(longest + 8)) / (1 << 30)},
                       {"prefill_buffers", double(be->prefill_scratch_bytes()) / (1 << 30)}};
  nlohmann::json prof = nlohmann::json::object(), abl = nlohmann::json::object();
  for (int64_t n : opts.ablation_lengths) {
    auto p = prefill_profile(*be, n);
    if (!p) return p.error();
    prof[std::to_string(n)] = *p;
    auto on = prefill_speed(*be, n, 3);
    if (!on) return on.error();
    nlohmann::json a = {{"all_on", *on}};
    struct Variant {
      const char* name;
      void (*set)(cuda::Switches&);
    };
    static constexpr Variant kVariants[] = {
        {"chunked_prefill_off", [](cuda::Switches& s) { s.prefill = false; }},
        {"exact_prefill_off", [](cuda::Switches& s) { s.exact_prefill = false; }},
        // The dequantisation ablation exists on the fp16 path only: compare with exact_prefill_off.
        {"fused_dequant_off",
         [](cuda::Switches& s) { s.exact_prefill = false, s.fused_dequant = false; }},
        {"flash_prefill_off", [](cuda::Switches& s) { s.flash_prefill = false; }},
        {"device_routing_off", [](cuda::Switches& s) { s.device_routing = false; }},
        {"tile_16", [](cuda::Switches& s) { s.prefill_tile = 16; }},
        {"tile_32", [](cuda::Switches& s) { s.prefill_tile = 32; }},
        {"tile_64", [](cuda::Switches& s) { s.prefill_tile = 64; }},
        {"tile_128", [](cuda::Switches& s) { s.prefill_tile = 128; }},
        // The DeltaNet scan's two forms at this length (all_on is whichever auto picks).
        {"gdn_sequential", [](cuda::Switches& s) { s.gdn_chunked = 0; }},
        {"gdn_chunked", [](cuda::Switches& s) { s.gdn_chunked = 1; }}};
    for (const Variant& v : kVariants) {
      if (!opts.variants.empty() &&
          std::find(opts.variants.begin(), opts.variants.end(), v.name) == opts.variants.end())
        continue;
      cuda::Switches s = base;
      v.set(s);
      be->switches() = s;
      auto r = prefill_speed(*be, n, 1);
      be->switches() = base;
      if (!r) return r.error();
      a[v.name] = *r;
      std::printf("  %-20s %9.1f tok/s (all on %.1f)\n", v.name, *r, *on);
    }
    auto gdn_ms = gdn_form_ms(*be, n);
    if (!gdn_ms) return gdn_ms.error();
    a["gdn_ms"] = *gdn_ms;
    abl[std::to_string(n)] = a;
  }
  for (int64_t n : opts.profile_lengths) {
    if (prof.contains(std::to_string(n))) continue;
    auto p = prefill_profile(*be, n);
    if (!p) return p.error();
    prof[std::to_string(n)] = *p;
  }
  out["prefill_profile"] = prof;
  out["prefill_ablations_tok_s"] = abl;
  // Short prompts, where the two DeltaNet forms cross over.
  nlohmann::json sweep = nlohmann::json::object();
  std::printf("\nDeltaNet launch, ms over its layers: %8s %12s %12s\n", "tokens", "scan",
              "chunked");
  for (int64_t n : {16, 32, 64, 128, 256, 512}) {
    auto g = gdn_form_ms(*be, n);
    if (!g) return g.error();
    sweep[std::to_string(n)] = *g;
    std::printf("%44lld %12.3f %12.3f\n", static_cast<long long>(n), g->value("gdn scan", -1.0),
                g->value("gdn chunked", -1.0));
  }
  out["gdn_form_ms_by_tokens"] = sweep;
  return out;
}

}  // namespace orchid
