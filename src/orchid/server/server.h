// `orchid serve`: the OpenAI-compatible HTTP server around one model. The socket opens first,
// the model loads on a background thread (GET /health: 503, then 200), and generation
// requests run in arrival order through the Scheduler, up to --parallel at once, each in its
// own engine slot, taking turns on the model (a full queue is a 503).
// Each request's text path: chat template (twice: the cut where the generation prompt begins
// is the engine's snapshot point) → tokenizer → Engine → streaming detokenizer → stop strings
// → output parser (reasoning / tool calls) → OpenAI JSON or SSE chunks. Endpoints and
// deviations from OpenAI: docs/api.md.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "orchid/backend/backend.h"
#include "orchid/grammar/token_vocab.h"
#include "orchid/model/model.h"
#include "orchid/runtime/engine.h"
#include "orchid/runtime/generation_config.h"
#include "orchid/runtime/scheduler.h"
#include "orchid/server/http_server.h"
#include "orchid/server/metrics.h"
#include "orchid/server/openai_request.h"
#include "orchid/server/responses_response.h"
#include "orchid/tokenizer/chat_template.h"
#include "orchid/tokenizer/tokenizer.h"

namespace orchid::server {

struct ServerOptions {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (start() returns it)
  std::string api_key;  // non-empty: every endpoint but /health needs "Authorization: Bearer KEY"
  // Most tokens (prompt + reply) a request may hold; 0: the largest the backend's memory holds,
  // up to the model's max_position_embeddings (at most 262,144), chosen at load.
  int64_t ctx = 0;
  size_t max_queue = 16;  // requests waiting behind the running one
  // Live states (slots): requests that run at once (taking turns on the model, token by token)
  // and conversations whose states the server keeps, so interleaved conversations each resume
  // from their own.
  int parallel = 4;
  size_t max_body_bytes = 8 << 20;  // larger bodies: 413
  int64_t state_cache_bytes = -1;   // −1: Backend::default_state_cache_bytes
  // The state cache's host tier: device snapshots evicted from state_cache_bytes move to host
  // memory while they fit this (GPU backends; 0: none).
  int64_t state_cache_host_bytes = int64_t(8192) << 20;
  std::string backend = "auto";           // auto | cpu | cuda | scripted
  std::string script;                     // scripted: {"replies": [...]}
  bool quantize_q4 = false;               // quantize a bf16 checkpoint at load
  bool exact = false;                     // cpu backend: the exact path (make_backend)
  std::string model_name;                 // the id GET /v1/models lists; "": the directory's name
  std::vector<std::string> cors_origins;  // browser origins allowed by CORS ("*": any)
  // Keeps a stream's body open this long after its last frame ([DONE]). A workaround for Node's
  // fetch (undici 6, under the openai npm client): a reader that goes on reading after
  // abort() once the whole body has arrived never settles (nodejs/undici#4089); with the body
  // still open, the abort lands first and ends the read. Costs clients that read to the end of
  // the body this much per stream, so it is off by default.
  int stream_end_delay_ms = 0;
};

struct Job;

class Server {
 public:
  // Checks what can be checked at once (the model directory and its tokenizer, the script),
  // so a bad command line fails before the socket opens.
  static Expected<std::unique_ptr<Server>> create(ServerOptions opts);
  ~Server();  // shutdown()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and serves, then loads the model in the background. Returns the bound port.
  Expected<int> start();
  // Blocks until the model is loaded; its load error if it failed.
  Status wait_loaded();
  // Blocks until request_stop() or a failed load (whose error it returns).
  Status wait_for_stop();
  void request_stop();
  // Refuses new work, ends running generations at the next token (streams get their final
  // chunk and [DONE]), answers queued ones, then stops the HTTP server. Idempotent.
  void shutdown();

  const std::string& model_name() const { return model_name_; }

 private:
  explicit Server(ServerOptions opts);
  HttpServerOptions http_options();  // of opts_, for http_
  enum class LoadState { loading, ready, failed };

  Status load();
  void register_routes();
  std::optional<HttpResponse> gate(const HttpRequest& req) const;
  std::optional<ApiError> not_ready_error() const;  // 503 while loading / after a failed load
  std::optional<HttpResponse> not_ready() const;    // the same as an OpenAI answer
  Expected<std::string> render(const nlohmann::ordered_json& messages,
                               const nlohmann::ordered_json& tools,
                               const ChatTemplateOptions& opts) const;
  // logit_bias ids inside the model's vocabulary.
  std::optional<ApiError> check_logit_bias(const SamplingOptions& s) const;
  GenerateRequest make_generate_request(std::vector<int32_t> prompt,
                                        const SamplingOptions& s) const;

  HttpResponse handle_health() const;
  nlohmann::ordered_json model_object() const;  // the served model, as /v1/models lists it
  HttpResponse handle_models() const;
  HttpResponse handle_model(const HttpRequest& req) const;  // GET /v1/models/{id}
  HttpResponse handle_metrics() const;
  HttpResponse handle_chat(const HttpRequest& req);
  HttpResponse handle_messages(const HttpRequest& req);  // server_anthropic.cpp
  HttpResponse handle_count_tokens(const HttpRequest& req) const;
  HttpResponse handle_responses(const HttpRequest& req);  // server_responses.cpp
  HttpResponse handle_completion(const HttpRequest& req);
  HttpResponse handle_tokenize(const HttpRequest& req) const;
  HttpResponse handle_detokenize(const HttpRequest& req) const;
  HttpResponse handle_apply_template(const HttpRequest& req) const;

  // A chat request's job (prompt rendered twice for the snapshot point, tokenized, checked
  // against the context), the API's answer options left to the caller.
  ApiExpected<std::shared_ptr<Job>> chat_job(const ChatRequest& c,
                                             std::chrono::steady_clock::time_point arrived);
  // Generation (server_generate.cpp): queue the job, then stream or wait for its answer.
  HttpResponse submit(std::shared_ptr<Job> job, const HttpRequest& req);
  void run_job(const std::shared_ptr<Job>& job, bool cancelled);
  // One choice of a job (job.request holds its seed and constraint): generation → detokenizer
  // → stop strings → parser → `out`, frames through `emit`; how it ended, or the error.
  struct ChoiceEnd {
    std::string reason;  // OpenAI's words
    Usage usage;
  };
  ApiExpected<ChoiceEnd> run_choice(Job& job, ReplyWriter& out,
                                    const std::function<void(std::string)>& emit);
  void pump(Job& job, const ChunkWriter& write, const std::function<bool()>& connected);
  void release(const std::shared_ptr<Job>& job);

  ServerOptions opts_;
  std::string model_name_;
  int64_t created_ = 0;  // start time (unix seconds), for /v1/models

  // Set by the load thread before state_ turns ready; read-only afterwards.
  std::atomic<LoadState> state_{LoadState::loading};
  std::string load_error_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> backend_;
  std::string backend_path_;  // ", fast path on avx512_vnni" for the cpu backend's load line
  std::optional<Tokenizer> tok_;
  std::optional<ChatTemplate> template_;
  GenerationConfig gen_;
  std::vector<int32_t> stop_ids_;
  std::unique_ptr<grammar::TokenVocab> vocab_;  // for constrained sampling
  std::unique_ptr<Engine> engine_;              // used only on the scheduler's thread
  mutable std::mutex template_mu_;

  ServerMetrics metrics_;
  ResponseStore responses_;  // stored Responses API conversations (previous_response_id)
  HttpServer http_;
  Scheduler scheduler_;
  std::thread load_thread_;

  std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  std::set<std::shared_ptr<Job>> active_;  // jobs whose HTTP answer is not finished
  bool stop_requested_ = false;
  bool load_finished_ = false;
  std::atomic<bool> draining_{false};
  bool shut_down_ = false;
};

}  // namespace orchid::server
