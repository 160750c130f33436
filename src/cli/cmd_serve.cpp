// `orchid serve -m DIR`: the OpenAI-compatible HTTP server (src/orchid/server, docs/api.md).
// Prints "orchid: listening on http://HOST:PORT" to stderr once the socket listens; the model
// then loads in the background (GET /health 503 → 200). SIGINT/SIGTERM cut the requests in
// flight (a prefill at its next chunk or layer, a decode at its next token): each gets an
// error that says so (a stream: an error event and [DONE]; otherwise a 503), then exit 0; a
// failed load exits 1.
#include <malloc.h>
#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include "cli/commands.h"
#include "orchid/server/server.h"

namespace orchid::cli {
namespace {

// Whether a --host value only takes connections from this machine.
bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

}  // namespace

void add_serve(CLI::App& app, int& exit_code) {
  struct Args {
    server::ServerOptions opts;
    std::string quantize;
    size_t max_body_bytes = 8 << 20;
    int64_t state_cache_mb = -1;  // the backend's default
    int64_t state_cache_host_mb = 8192;
  };
  auto args = std::make_shared<Args>();
  auto& o = args->opts;
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (docs/api.md)");
  cmd->add_option("-m,--model", o.model_dir,
                  "model directory (config.json, safetensors, tokenizer.json; default: the "
                  "built-in demo model)");
  cmd->add_option("--host", o.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o.port, "port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", o.api_key,
                  "require 'Authorization: Bearer KEY' on every endpoint but /health");
  cmd->add_option("--ctx", o.ctx,
                  "context length in tokens (prompt + reply); default: the model's limit (at "
                  "most 262144) as far as memory holds it")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 22));
  cmd->add_option("--parallel", o.parallel,
                  "requests that run at once, each in its own live state (KV and recurrent "
                  "state), taking turns on the model; also the conversations kept live")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--max-queue", o.max_queue, "requests that may wait for the model (then 503)")
      ->check(CLI::Range(size_t(1), size_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", args->max_body_bytes, "largest request body (then 413)")
      ->check(CLI::Range(size_t(1024), size_t(1) << 31))
      ->capture_default_str();
  cmd->add_option("--state-cache-mb", args->state_cache_mb,
                  "memory for multi-turn state snapshots, MiB (default: 1024 on the CPU; on a GPU "
                  "5 % of its memory, at least 1024)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("--state-cache-host-mb", args->state_cache_host_mb,
                  "host memory for state snapshots the GPU's budget evicts, MiB (0: drop them)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30))
      ->capture_default_str();
  cmd->add_option(
         "--backend", o.backend,
         "compute backend: auto (cuda when a GPU is usable), cpu, cuda, or scripted (tests)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda", "scripted"}))
      ->capture_default_str();
  cmd->add_flag(
      "--exact", o.exact,
      "cpu backend: the exact fp32 path instead of the fast one (also ORCHID_CPU_EXACT=1)");
  cmd->add_option("--script", o.script, "scripted backend: JSON file {\"replies\": [\"...\"]}");
  cmd->add_option("--quantize", args->quantize, "quantize a bf16 checkpoint at load: q4")
      ->check(CLI::IsMember({"q4"}));
  cmd->add_option("--cors", o.cors_origins,
                  "allow browser clients from these origins (CORS), e.g. http://localhost:3000, "
                  "or * for any")
      ->delimiter(',');
  cmd->add_option("--name", o.model_name, "model id served by /v1/models (default: DIR's name)");
  cmd->add_option("--stream-end-delay-ms", o.stream_end_delay_ms,
                  "keep a stream open this long after [DONE] (nodejs/undici#4089 workaround)")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  cmd->callback([args, &exit_code] {
    args->opts.max_body_bytes = args->max_body_bytes;
    args->opts.state_cache_bytes = args->state_cache_mb < 0 ? -1 : args->state_cache_mb << 20;
    args->opts.state_cache_host_bytes = args->state_cache_host_mb << 20;
    args->opts.quantize_q4 = args->quantize == "q4";
    auto dir = model_dir_or_demo(args->opts.model_dir);
    if (!dir) return void(exit_code = fail(dir.message()));
    args->opts.model_dir = *dir;

    // Connection threads come and go with the clients, and glibc gives each a malloc arena of
    // its own whose freed memory it keeps: the resident size would creep up with every thread
    // that ever served a request. Two arenas keep it flat (MALLOC_ARENA_MAX still wins).
    if (!std::getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 2);
    // A fixed mmap threshold: glibc's sliding one rises to the largest block ever freed, after
    // which a large request's buffers come from the heap and stay resident when freed.
    if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 256 << 10);

    // SIGINT/SIGTERM are taken by a thread of ours (sigwait), so they are blocked in every
    // thread the server starts: block them before any exists.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    auto created = server::Server::create(args->opts);
    if (!created) return void(exit_code = fail(created.message()));
    std::unique_ptr<server::Server> srv = std::move(*created);
    auto port = srv->start();
    if (!port) return void(exit_code = fail(port.message()));
    const std::string& host = args->opts.host;
    const std::string shown =
        host.find(':') != std::string::npos ? "[" + host + "]" : host;  // IPv6
    std::fprintf(stderr, "orchid: listening on http://%s:%d\n", shown.c_str(), *port);
    if (args->opts.api_key.empty() && !is_loopback(host))
      std::fprintf(stderr,
                   "orchid: warning: listening on %s without --api-key: anyone who can reach this "
                   "port can use the model\n",
                   shown.c_str());
    std::fflush(stderr);

    std::atomic<bool> finished{false};
    std::thread signals([&] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      if (!finished) {
        std::fprintf(stderr, "orchid: %s received, stopping\n",
                     sig == SIGINT ? "SIGINT" : "SIGTERM");
        srv->request_stop();
      }
    });
    Status status = srv->wait_for_stop();
    // Stopping waits for the running generation's next chunk, layer or token and for the
    // connections to take their last answers; should that ever hang, exit after 4 s anyway.
    auto stopped = std::async(std::launch::async, [&] { srv->shutdown(); });
    if (stopped.wait_for(std::chrono::seconds(4)) == std::future_status::timeout) {
      std::fprintf(stderr, "orchid: stopping took too long; exiting\n");
      std::fflush(stderr);
      std::_Exit(status.ok() ? 0 : 1);
    }
    finished = true;
    pthread_kill(signals.native_handle(), SIGTERM);  // wakes sigwait if no signal came
    signals.join();
    if (!status.ok()) exit_code = fail(status.message());
  });
}

}  // namespace orchid::cli
