// `orchid bench (prefill|decode|all) -m DIR`: tokens/s of prefill at each prompt length and
// of decode at each context length, written as JSON (bench/results/*.json); `bench plot` draws
// them (cmd_bench_plot.cpp).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "orchid/backend/select_backend.h"
#include "orchid/bench/cpu_roofline.h"
#include "orchid/bench/serve_bench.h"
#include "orchid/model/config.h"
#include "orchid/runtime/sampler.h"
#include "orchid/util/thread_pool.h"
#ifdef ORCHID_HAVE_CUDA
#include "orchid/backend/cuda/cuda_backend.h"
#endif

namespace orchid::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::string run_command(const char* cmd) {
  std::string out;
  if (FILE* p = popen(cmd, "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// The commit the binary was built from: the file `commit` beside its bin/ folder where
// scripts/device/pack.sh recorded it (the GPU machine's copy of the tree has no up-to-date git
// history), else the checkout's HEAD.
std::string source_commit() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::ifstream in(exe.parent_path().parent_path() / "commit");
    if (std::string c; in && std::getline(in, c) && !c.empty()) return c;
  }
  return run_command("git rev-parse HEAD 2>/dev/null");
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int32_t(rng() % uint64_t(vocab));
  return ids;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// `--synthetic NAME`: full-size random weights made on the GPU; prefill speed per prompt length
// and decode speed per context, each with its per-kernel report and its switches' ablations.
int bench_synthetic(const std::string& what, const std::string& name,
                    const std::vector<int32_t>& lengths,
                    const std::vector<int32_t>& decode_ablation,
                    const std::vector<int32_t>& prefill_ablation,
                    const std::vector<int32_t>& prefill_profile,
                    const std::vector<std::string>& prefill_variants,
                    const std::vector<int32_t>& batches, int tokens, const std::string& out) {
#ifdef ORCHID_HAVE_CUDA
  auto cfg = builtin_config(name);
  if (!cfg) return fail("--synthetic: unknown config '" + name + "' (tiny, qwen3.6-35b-a3b)");
  auto t0 = Clock::now();
  auto be = make_cuda_synthetic_backend(*cfg, 1234);
  if (!be) return fail(be.message());
  std::printf("%s (made in %.1f s)\n", cuda_backend_summary(**be).c_str(), seconds_since(t0));
  Expected<nlohmann::json> j = nlohmann::json::object();
  if (what != "prefill") {
    DecodeBenchOptions o;
    o.contexts.assign(lengths.begin(), lengths.end());
    o.ablation_contexts.assign(decode_ablation.begin(), decode_ablation.end());
    o.batches.assign(batches.begin(), batches.end());
    o.tokens = tokens;
    j = cuda_decode_bench(**be, o);
    if (!j) return fail(j.message());
  }
  if (what != "decode") {
    PrefillBenchOptions o;
    o.lengths.assign(lengths.begin(), lengths.end());
    o.ablation_lengths.assign(prefill_ablation.begin(), prefill_ablation.end());
    o.profile_lengths.assign(prefill_profile.begin(), prefill_profile.end());
    o.variants = prefill_variants;
    auto p = cuda_prefill_bench(**be, o);
    if (!p) return fail(p.message());
    j->update(*p);
  }
  (*j)["what"] = "orchid bench " + what + " --synthetic " + name;
  (*j)["commit"] = source_commit();
  (*j)["date"] = run_command("date -u +%Y-%m-%dT%H:%M:%SZ");
  (*j)["backend"] = "cuda";
  (*j)["model"] = "synthetic " + name + " (MLX affine 4-bit group 64, router 8-bit)";
  if (out.empty()) return 0;
  std::ofstream f(out);
  f << j->dump(2) << "\n";
  if (!f) return fail("cannot write " + out);
  return 0;
#else
  (void)what, (void)name, (void)lengths, (void)decode_ablation, (void)prefill_ablation,
      (void)prefill_profile, (void)prefill_variants, (void)batches, (void)tokens, (void)out;
  return fail("--synthetic needs the CUDA backend, which this build does not have");
#endif
}

// `bench serve`: streams at once against a running server (orchid/bench/serve_bench.h).
template <class Args>
int bench_serve(const Args& a) {
  ServeBenchOptions o;
  if (a.url.empty()) return fail("bench serve: --url http://HOST:PORT of a running orchid serve");
  if (Status s = parse_serve_url(a.url, o); !s.ok()) return fail(s.message());
  auto streams = parse_token_list(a.streams);
  if (!streams) return fail("--streams: " + streams.message());
  auto prompts = parse_token_list(a.prompt_tokens);
  if (!prompts) return fail("--prompt-tokens: " + prompts.message());
  o.streams.assign(streams->begin(), streams->end());
  o.prompt_tokens.assign(prompts->begin(), prompts->end());
  for (int n : o.streams)
    if (n < 1 || n > 256) return fail("--streams: 1 to 256 at once");
  for (int p : o.prompt_tokens)
    if (p < 1) return fail("--prompt-tokens: lengths must be positive");
  o.max_tokens = a.max_tokens;
  auto j = serve_bench(o);
  if (!j) return fail(j.message());
  (*j)["commit"] = source_commit();
  (*j)["date"] = run_command("date -u +%Y-%m-%dT%H:%M:%SZ");
  if (a.out.empty()) return 0;
  std::ofstream f(a.out);
  f << j->dump(2) << "\n";
  if (!f) return fail("cannot write " + a.out);
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, int& exit_code) {
  struct Args {
    ModelOptions model;
    std::string what = "all", lengths = "256,512,1024", out, synthetic;
    std::string ablation_lengths = "default", profile_lengths, batches;
    std::string url, streams = "1,2,4,8", prompt_tokens = "4096,32768";
    int max_tokens = 256;
    std::vector<std::string> series, ablations;
    int decode_tokens = 32;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench", "measure prefill and decode tokens/s");
  cmd->add_option("what", args->what, "prefill | decode | all | plot | serve")
      ->check(CLI::IsMember({"prefill", "decode", "all", "plot", "serve"}));
  add_model_options(cmd, args->model);
  cmd->add_option("--lengths", args->lengths, "prompt / context lengths, comma-separated");
  cmd->add_option("--decode-tokens", args->decode_tokens, "decode steps timed per context")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--out", args->out, "write the results as JSON here (plot: OUT.svg, OUT.png)");
  cmd->add_option("--series", args->series,
                  "plot: LABEL=FILE.json, a bench JSON (or the llama.cpp peer file) per line");
  cmd->get_option("-m")->required(false);
  cmd->add_option("--synthetic", args->synthetic,
                  "random full-size weights made on the GPU (e.g. qwen3.6-35b-a3b)");
  cmd->add_option("--ablation-lengths", args->ablation_lengths,
                  "--synthetic: lengths of the per-kernel reports and the switches' ablations "
                  "(comma-separated; 'none' skips them and the per-shape report; default: "
                  "4096,32768 for decode, 512,2048,8192 for prefill)");
  cmd->add_option("--ablations", args->ablations,
                  "--synthetic prefill: only these switch ablations by name (comma-separated, "
                  "e.g. flash_prefill_off,exact_prefill_off; default: every one)")
      ->delimiter(',');
  cmd->add_option("--batches", args->batches,
                  "--synthetic decode: also decode this many states at once (comma-separated, "
                  "2 to 8; e.g. 2,4,8) at each context: aggregate tok/s and a per-kernel report "
                  "of the batched step at the first context");
  cmd->add_option("--url", args->url,
                  "serve: the running `orchid serve` to measure (http://HOST:PORT)");
  cmd->add_option("--streams", args->streams,
                  "serve: concurrent streams per case (comma-separated; default 1,2,4,8)");
  cmd->add_option("--prompt-tokens", args->prompt_tokens,
                  "serve: prompt lengths, about (comma-separated; default 4096,32768)");
  cmd->add_option("--max-tokens", args->max_tokens, "serve: tokens each stream generates")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--profile-lengths", args->profile_lengths,
                  "--synthetic prefill: more prompt lengths for the per-kernel report alone "
                  "(comma-separated; e.g. 131072, where the ablations would take minutes)");
  cmd->callback([args, &exit_code] {
    if (args->what == "plot") return void(exit_code = bench_plot(args->series, args->out));
    if (args->what == "serve") return void(exit_code = bench_serve(*args));
    auto lengths = parse_token_list(args->lengths);
    if (!lengths) return void(exit_code = fail("--lengths: " + lengths.message()));
    if (!args->synthetic.empty()) {
      std::vector<int32_t> decode_abl = {4096, 32768}, prefill_abl = {512, 2048, 8192};
      if (args->ablation_lengths == "none") {
        decode_abl.clear(), prefill_abl.clear();
      } else if (args->ablation_lengths != "default") {
        auto a = parse_token_list(args->ablation_lengths);
        if (!a) return void(exit_code = fail("--ablation-lengths: " + a.message()));
        decode_abl = prefill_abl = *a;
      }
      std::vector<int32_t> batches;
      if (!args->batches.empty()) {
        auto b = parse_token_list(args->batches);
        if (!b) return void(exit_code = fail("--batches: " + b.message()));
        for (int32_t n : *b)
          if (n < 2 || n > 8) return void(exit_code = fail("--batches: 2 to 8 states at once"));
        batches = *b;
      }
      std::vector<int32_t> prefill_prof;
      if (!args->profile_lengths.empty()) {
        auto p = parse_token_list(args->profile_lengths);
        if (!p) return void(exit_code = fail("--profile-lengths: " + p.message()));
        prefill_prof = *p;
      }
      return void(exit_code = bench_synthetic(args->what, args->synthetic, *lengths, decode_abl,
                                              prefill_abl, prefill_prof, args->ablations, batches,
                                              args->decode_tokens, args->out));
    }
    if (args->model.dir.empty()) return void(exit_code = fail("bench: -m DIR or --synthetic NAME"));
    auto lm = open_model(args->model);
    if (!lm) return void(exit_code = fail(lm.message()));
    Backend& be = *lm->backend;
    const int64_t V = be.n_vocab();
    nlohmann::json prefill = nlohmann::json::object(), decode = nlohmann::json::object();
    std::printf("%8s %14s %14s\n", "length", "prefill tok/s", "decode tok/s");
    for (int32_t len : *lengths) {
      if (len <= 0) return void(exit_code = fail("--lengths: lengths must be positive"));
      auto prompt = random_tokens(len, V, uint64_t(len));
      auto st = be.new_state(len + args->decode_tokens + 1);
      if (!st) return void(exit_code = fail(st.message()));
      std::vector<float> logits;
      auto t0 = Clock::now();
      Status s = be.forward(**st, prompt, LogitsMode::last, logits);
      if (!s) return void(exit_code = fail(s.message()));
      const double prefill_tps = len / seconds_since(t0);
      double decode_tps = 0;
      if (args->what != "prefill") {
        int32_t id = argmax(logits);
        t0 = Clock::now();
        for (int i = 0; i < args->decode_tokens; ++i) {
          s = be.forward(**st, std::span<const int32_t>(&id, 1), LogitsMode::last, logits);
          if (!s) return void(exit_code = fail(s.message()));
          id = argmax(logits);
        }
        decode_tps = args->decode_tokens / seconds_since(t0);
        decode[std::to_string(len)] = decode_tps;
      }
      if (args->what != "decode") prefill[std::to_string(len)] = prefill_tps;
      std::printf("%8d %14.1f %14.1f\n", len, prefill_tps, decode_tps);
    }
    if (args->out.empty()) return;
    nlohmann::json roofline;
    if (be.name() == "cpu") {
      // Decode reads its weights once a token: GB/s against what this machine's threads read.
      const double bw = measure_read_bandwidth_gbs();
      const int64_t bytes = decode_weight_bytes(*lm->model);
      nlohmann::json gbs = nlohmann::json::object(), pct = nlohmann::json::object();
      for (const auto& [len, tps] : decode.items()) {
        gbs[len] = tps.get<double>() * double(bytes) / 1e9;
        pct[len] = 100.0 * gbs[len].get<double>() / bw;
      }
      roofline = {{"read_bandwidth_gb_s", bw},
                  {"decode_weight_bytes_per_token", bytes},
                  {"decode_gb_s_at_context", gbs},
                  {"decode_pct_of_read_bandwidth", pct}};
    }
    auto cpu_opts = cpu_options(args->model.exact);
    const std::string cpu_path = cpu_opts ? cpu_path_summary(*cpu_opts) : "";
    nlohmann::json j = {
        {"what", "orchid bench " + args->what},
        {"commit", source_commit()},
        {"date", run_command("date -u +%Y-%m-%dT%H:%M:%SZ")},
        {"machine",
         {{"cpu", cpu_model()},
          {"hardware_threads", std::thread::hardware_concurrency()},
          {"threads_used", default_pool().size()}}},
        {"backend", be.name()},
        {"backend_path", be.name() == "cpu" ? cpu_path : ""},
        {"model", args->model.dir},
        {"layout", lm->model->layout_name()},
        {"flags", {{"quantize", args->model.quantize}, {"exact", args->model.exact}}},
        {"decode_tokens_per_measurement", args->decode_tokens},
        {"prefill_tok_s", prefill},
        {"decode_tok_s_at_context", decode}};
    if (!roofline.is_null()) j["cpu_roofline"] = roofline;
    std::ofstream f(args->out);
    f << j.dump(2) << "\n";
    if (!f) return void(exit_code = fail("cannot write " + args->out));
  });
}

}  // namespace orchid::cli
