// Server: start-up checks, background loading, routing, authentication, and the endpoints
// that need no generation (health, models, metrics, tokenize, detokenize, apply-template).
#include "orchid/server/server.h"

#include <strings.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>

#include "orchid/backend/scripted/scripted_backend.h"
#include "orchid/backend/select_backend.h"
#include "orchid/model/gguf.h"
#include "orchid/runtime/chat_assets.h"
#include "orchid/server/job.h"

namespace orchid::server {
namespace {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

HttpResponse json_response(int status, const OJson& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

// The error type OpenAI uses for a status.
ApiError status_error(int status, std::string message) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  switch (status) {
    case 401:
      e.type = "authentication_error", e.code = "invalid_api_key";
      break;
    case 404:
      e.type = "invalid_request_error", e.code = "not_found";
      break;
    case 405:
      e.type = "invalid_request_error", e.code = "method_not_allowed";
      break;
    case 413:
      e.type = "invalid_request_error", e.code = "request_too_large";
      break;
    case 503:
      e.type = "server_error", e.code = "overloaded";
      break;
    default:
      e.type = status >= 500 ? "server_error" : "invalid_request_error";
  }
  return e;
}

// Compares without an early exit, so the time taken does not reveal the key's prefix.
bool same_secret(std::string_view a, std::string_view b) {
  unsigned diff = unsigned(a.size() != b.size());
  for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(a[i]) ^ unsigned(i < b.size() ? b[i] : 0);
  return diff == 0;
}

std::string dir_name(const std::string& dir) {
  fs::path p(dir);
  if (!p.has_filename()) p = p.parent_path();  // "models/tiny/" → "tiny"
  std::string name = is_gguf_path(dir) ? p.stem().string() : p.filename().string();
  return name.empty() ? "orchid" : name;
}

}  // namespace

HttpResponse error_response(const ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = error_body(e);
  if (e.status == 503) r.headers.emplace_back("Retry-After", "1");
  if (e.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

HttpResponse anthropic_error_response(const ApiError& e) {
  HttpResponse r = error_response(e);
  r.body = anthropic_error_body(e);
  return r;
}

HttpServerOptions Server::http_options() {
  HttpServerOptions h;
  h.host = opts_.host;
  h.port = opts_.port;
  h.max_body_bytes = opts_.max_body_bytes;
  // Generation requests hold a worker while they wait or stream; the rest return at once.
  h.threads = std::clamp<size_t>(opts_.max_queue + 32, 32, 256);
  h.cors_origins = opts_.cors_origins;
  h.gate = [this](const HttpRequest& r) { return gate(r); };
  h.error_body = [](int status, const std::string& msg) {
    return error_body(status_error(status, msg));
  };
  h.on_answer = [this](std::string_view route, int status) {
    metrics_.count_request(route.empty() ? "other" : route, status);
  };
  return h;
}

Server::Server(ServerOptions opts)
    : opts_(std::move(opts)), http_(http_options()), scheduler_(opts_.max_queue, opts_.parallel) {
  model_name_ = opts_.model_name.empty() ? dir_name(opts_.model_dir) : opts_.model_name;
  created_ = int64_t(std::time(nullptr));
}

Expected<std::unique_ptr<Server>> Server::create(ServerOptions opts) {
  std::error_code ec;
  // A GGUF file holds the config, tokenizer and template itself (read at load).
  const bool gguf = is_gguf_path(opts.model_dir);
  if (gguf && !fs::is_regular_file(opts.model_dir, ec))
    return err("model file ", opts.model_dir, " does not exist or is not a file");
  if (!gguf && !fs::is_directory(opts.model_dir, ec))
    return err("model directory ", opts.model_dir, " does not exist or is not a directory");
  if (!gguf && !fs::exists(fs::path(opts.model_dir) / "tokenizer.json", ec))
    return err(opts.model_dir, " has no tokenizer.json (the server needs the model's tokenizer)");
  if (opts.backend == "scripted") {
    if (opts.script.empty()) return err("--backend scripted needs --script FILE");
    auto replies = load_script_replies(opts.script);
    if (!replies) return replies.error();
  } else if (opts.backend == "cpu" || opts.backend == "cuda" || opts.backend == "auto") {
    if (!gguf && !fs::exists(fs::path(opts.model_dir) / "config.json", ec))
      return err(opts.model_dir, " has no config.json");
  } else {
    return err("unknown backend '", opts.backend, "' (auto, cpu, cuda or scripted)");
  }
  if (opts.ctx != 0 && opts.ctx < 2) return err("--ctx must be at least 2");
  return std::unique_ptr<Server>(new Server(std::move(opts)));
}

Server::~Server() {
  shutdown();
}

Expected<int> Server::start() {
  register_routes();
  auto port = http_.bind();
  if (!port) return port.error();
  http_.start();
  load_thread_ = std::thread([this] {
    const auto t0 = Clock::now();
    Status s = load();
    {
      std::lock_guard lock(mu_);
      load_finished_ = true;
      if (!s.ok()) load_error_ = s.message();
    }
    state_ = s.ok() ? LoadState::ready : LoadState::failed;
    cv_.notify_all();
    if (s.ok())
      std::fprintf(stderr, "orchid: model %s loaded (%s backend%s, %.1f s)\n", model_name_.c_str(),
                   backend_->name().c_str(), backend_path_.c_str(),
                   std::chrono::duration<double>(Clock::now() - t0).count());
  });
  return port;
}

Status Server::load() {
  const std::string& dir = opts_.model_dir;
  auto assets = load_chat_assets(dir);
  if (!assets) return assets.error();
  stop_ids_ = assets->stop_ids;
  if (opts_.backend == "scripted") {
    if (stop_ids_.empty())
      return err(dir, ": no end-of-sequence id (generation_config.json eos_token_id)");
    auto b = load_scripted_backend(opts_.script, assets->tokenizer, stop_ids_.front());
    if (!b) return b.error();
    backend_ = std::move(*b);
  } else {
    LoadOptions lo;
    lo.quantize_q4 = opts_.quantize_q4;
    auto m = load_model(dir, lo);
    if (!m) return m.error();
    model_ = std::move(*m);
    std::string note;
    auto b = make_backend(opts_.backend, *model_, &note, opts_.exact);
    if (!b) return b.error();
    if (!note.empty()) std::fprintf(stderr, "orchid: %s\n", note.c_str());
    backend_ = std::move(*b);
    if (backend_->name() == "cpu")
      if (auto o = cpu_options(opts_.exact)) backend_path_ = ", " + cpu_path_summary(*o);
  }
  if (backend_->n_vocab() < assets->tokenizer.vocab_size())
    return err(dir, ": the model's vocabulary (", backend_->n_vocab(),
               " ids) is smaller than the tokenizer's (", assets->tokenizer.vocab_size(), ")");
  if (opts_.ctx <= 0) {
    // The model's own limit (a scripted backend has none: the family's), as far as memory goes.
    constexpr int64_t kFamilyLimit = 262144;
    int64_t limit = kFamilyLimit;
    if (model_ && model_->config.max_position_embeddings > 0)
      limit = std::min(limit, model_->config.max_position_embeddings);
    opts_.ctx = backend_->max_context(limit, opts_.parallel);
    std::fprintf(stderr, "orchid: context %lld tokens (%s)\n", (long long)opts_.ctx,
                 opts_.ctx == limit ? "the model's limit" : "as much as memory holds; --ctx sets it");
  }
  tok_ = std::move(assets->tokenizer);
  vocab_ = std::make_unique<grammar::TokenVocab>(*tok_, backend_->n_vocab());
  template_ = std::move(assets->chat_template);
  gen_ = std::move(assets->generation);
  engine_ =
      std::make_unique<Engine>(*backend_, opts_.ctx,
                               opts_.state_cache_bytes < 0 ? backend_->default_state_cache_bytes()
                                                           : opts_.state_cache_bytes,
                               opts_.parallel,
                               opts_.state_cache_host_bytes);
  return {};
}

Status Server::wait_loaded() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return load_finished_; });
  if (!load_error_.empty()) return err(load_error_);
  return {};
}

Status Server::wait_for_stop() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return stop_requested_ || !load_error_.empty(); });
  if (!load_error_.empty()) return err(load_error_);
  return {};
}

void Server::request_stop() {
  {
    std::lock_guard lock(mu_);
    stop_requested_ = true;
  }
  cv_.notify_all();
}

void Server::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  draining_ = true;
  std::set<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard lock(mu_);
    jobs = active_;
  }
  for (const auto& j : jobs) j->cancelled = true;
  // Runs the queued jobs as cancelled (their answers are written) after the running one ends.
  scheduler_.shutdown();
  {
    // Let the connections write what the jobs produced (final chunks, [DONE]).
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(3), [this] { return active_.empty(); });
  }
  http_.stop();
  if (load_thread_.joinable()) load_thread_.join();
}

// ---------------------------------------------------------------------------------------------
// Routing and the simple endpoints.

void Server::register_routes() {
  // The reactor answers these itself: they never wait for a worker, so /health stays
  // responsive while every worker streams.
  const auto quick = HttpServer::Runs::quick;
  http_.route("GET", "/health", [this](const HttpRequest&) { return handle_health(); }, quick);
  http_.route("GET", "/v1/models", [this](const HttpRequest&) { return handle_models(); }, quick);
  http_.route("GET", "/v1/models/*", [this](const HttpRequest& r) { return handle_model(r); }, quick);
  http_.route("GET", "/metrics", [this](const HttpRequest&) { return handle_metrics(); }, quick);
  http_.route("POST", "/v1/chat/completions",
              [this](const HttpRequest& r) { return handle_chat(r); });
  http_.route("POST", "/v1/completions",
              [this](const HttpRequest& r) { return handle_completion(r); });
  http_.route("POST", "/tokenize", [this](const HttpRequest& r) { return handle_tokenize(r); });
  http_.route("POST", "/detokenize", [this](const HttpRequest& r) { return handle_detokenize(r); });
  http_.route("POST", "/apply-template",
              [this](const HttpRequest& r) { return handle_apply_template(r); });
  http_.route("POST", "/v1/messages", [this](const HttpRequest& r) { return handle_messages(r); });
  http_.route("POST", "/v1/responses", [this](const HttpRequest& r) { return handle_responses(r); });
  http_.route("POST", "/v1/messages/count_tokens",
              [this](const HttpRequest& r) { return handle_count_tokens(r); });
}

// The key as OpenAI clients send it ("Authorization: Bearer KEY") or Anthropic's ("x-api-key:
// KEY"), on any endpoint; errors in the shape of the endpoint's API.
std::optional<HttpResponse> Server::gate(const HttpRequest& req) const {
  if (opts_.api_key.empty() || req.path == "/health") return std::nullopt;
  const bool anthropic = req.path.starts_with("/v1/messages");
  auto refuse = [&](std::string msg) {
    const ApiError e = status_error(401, std::move(msg));
    return anthropic ? anthropic_error_response(e) : error_response(e);
  };
  const std::string auth = req.header("Authorization"), x_key = req.header("x-api-key");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.empty() && x_key.empty())
    return refuse(anthropic ? "Missing API key: send the header 'x-api-key: YOUR_KEY'"
                            : "Missing API key: send the header 'Authorization: Bearer YOUR_KEY'");
  if (!x_key.empty()) {
    if (!same_secret(x_key, opts_.api_key)) return refuse("Incorrect API key provided");
    return std::nullopt;
  }
  // The scheme is case-insensitive (RFC 9110), the key is not.
  if (auth.size() < kBearer.size() ||
      strncasecmp(auth.data(), kBearer.data(), kBearer.size()) != 0 ||
      !same_secret(std::string_view(auth).substr(kBearer.size()), opts_.api_key))
    return refuse("Incorrect API key provided");
  return std::nullopt;
}

std::optional<ApiError> Server::not_ready_error() const {
  switch (state_.load()) {
    case LoadState::ready:
      break;
    case LoadState::loading:
      return status_error(503, "the model is still loading");
    case LoadState::failed:
      return status_error(503, "the model failed to load");
  }
  if (draining_) return status_error(503, "the server is shutting down");
  return std::nullopt;
}

std::optional<HttpResponse> Server::not_ready() const {
  if (auto e = not_ready_error()) return error_response(*e);
  return std::nullopt;
}

Expected<std::string> Server::render(const OJson& messages, const OJson& tools,
                                     const ChatTemplateOptions& opts) const {
  std::lock_guard lock(template_mu_);
  return template_->render(messages, tools, opts);
}

HttpResponse Server::handle_health() const {
  switch (state_.load()) {
    case LoadState::loading:
      return json_response(503, {{"status", "loading"}});
    case LoadState::failed:
      return json_response(503, {{"status", "error"}});
    case LoadState::ready:
      break;
  }
  if (draining_) return json_response(503, {{"status", "stopping"}});
  return json_response(200, {{"status", "ok"}});
}

OJson Server::model_object() const {
  return {{"id", model_name_},
          {"object", "model"},
          {"created", created_},
          {"owned_by", "orchid"},
          {"max_model_len", opts_.ctx}};
}

HttpResponse Server::handle_models() const {
  return json_response(200, {{"object", "list"}, {"data", OJson::array({model_object()})}});
}

HttpResponse Server::handle_model(const HttpRequest& req) const {
  // The id after "/v1/models/", percent-decoded (ids such as "Qwen/Qwen3.6-35B-A3B" hold '/').
  const std::string_view raw = std::string_view(req.path).substr(std::string_view("/v1/models/").size());
  std::string id;
  for (size_t i = 0; i < raw.size(); ++i) {
    const auto hex = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
      id += char(hex(raw[i + 1]) * 16 + hex(raw[i + 2]));
      i += 2;
    } else {
      id += raw[i];
    }
  }
  if (id != model_name_)
    return error_response(ApiError{404, "invalid_request_error",
                                   "The model '" + id + "' does not exist; this server serves '" +
                                       model_name_ + "'",
                                   "model", "model_not_found"});
  return json_response(200, model_object());
}

HttpResponse Server::handle_metrics() const {
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.render(scheduler_.queued(), scheduler_.running(), state_ == LoadState::ready);
  return r;
}

HttpResponse Server::handle_tokenize(const HttpRequest& req) const {
  if (state_ != LoadState::ready) return *not_ready();
  auto r = parse_tokenize_request(req.body);
  if (!r) return error_response(r.error());
  std::string text;
  if (r->text) {
    text = *r->text;
  } else {
    auto rendered = render(r->chat.messages, r->chat.tools, r->chat.options);
    if (!rendered) return error_response(bad_request(rendered.message(), "messages"));
    text = std::move(*rendered);
  }
  const std::vector<int32_t> ids = tok_->encode(text);
  return json_response(200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", opts_.ctx}});
}

HttpResponse Server::handle_detokenize(const HttpRequest& req) const {
  if (state_ != LoadState::ready) return *not_ready();
  auto ids = parse_detokenize_request(req.body);
  if (!ids) return error_response(ids.error());
  auto text = tok_->decode(*ids);
  if (!text) return error_response(bad_request(text.message(), "tokens"));
  return json_response(200, {{"prompt", *text}, {"text", *text}});
}

HttpResponse Server::handle_apply_template(const HttpRequest& req) const {
  if (state_ != LoadState::ready) return *not_ready();
  auto r = parse_template_request(req.body);
  if (!r) return error_response(r.error());
  auto rendered = render(r->messages, r->tools, r->options);
  if (!rendered) return error_response(bad_request(rendered.message(), "messages"));
  return json_response(200, {{"prompt", *rendered}});
}

GenerateRequest Server::make_generate_request(std::vector<int32_t> prompt,
                                              const SamplingOptions& s) const {
  GenerateRequest r;
  const int64_t room = opts_.ctx - int64_t(prompt.size());
  r.prompt = std::move(prompt);
  r.max_tokens = int(std::min<int64_t>(s.max_tokens.value_or(int(room)), room));
  SamplerParams sp = gen_.sampler;
  if (s.temperature) {
    sp.temperature = *s.temperature;
    sp.greedy = *s.temperature == 0.f;
  }
  if (s.top_p) sp.top_p = *s.top_p;
  if (s.top_k) sp.top_k = std::max(0, *s.top_k);
  if (s.min_p) sp.min_p = *s.min_p;
  if (s.seed) {
    sp.seed = *s.seed;
  } else {
    std::random_device rd;
    sp.seed = (uint64_t(rd()) << 32) ^ rd();
  }
  r.sampler = sp;
  r.repetition_penalty = s.repetition_penalty.value_or(gen_.repetition_penalty);
  r.presence_penalty = s.presence_penalty.value_or(gen_.presence_penalty);
  r.frequency_penalty = s.frequency_penalty.value_or(0.f);
  r.stop_ids = stop_ids_;
  r.top_logprobs = s.top_logprobs;
  r.logit_bias = s.logit_bias;
  return r;
}

}  // namespace orchid::server
