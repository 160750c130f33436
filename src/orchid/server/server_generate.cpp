// Server: the generation endpoints. A handler validates and tokenizes on its connection's
// thread, queues a Job, then either pumps the job's SSE frames to the client or waits for its
// whole answer, checking that the client is still connected; the job runs on the scheduler's
// thread: engine tokens → detokenizer → stop strings → output parser → ResponseWriter.
#include <algorithm>
#include <ctime>
#include <memory>
#include <thread>

#include "orchid/grammar/grammar_constraint.h"
#include "orchid/server/job.h"
#include "orchid/server/server.h"
#include "orchid/server/stop_strings.h"

namespace orchid::server {
namespace {

using OJson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// An error in the job's API: the frames that end its stream, or its whole answer.
std::string stream_error(const Job& job, const ApiError& e) {
  switch (job.api) {
    case Api::anthropic:
      return anthropic_stream_error(e);
    case Api::responses:
      return responses_stream_error(e);
    case Api::openai:
      break;
  }
  return ResponseWriter::stream_error(e);
}
HttpResponse error_answer(const Job& job, const ApiError& e) {
  return job.api == Api::anthropic ? anthropic_error_response(e) : error_response(e);
}

// Ends a job that threw: an error frame for a stream, an error answer otherwise.
void fail_job(Job& job, const ApiError& e) {
  std::lock_guard lock(job.mu);
  if (job.done) return;
  if (job.response.stream) job.frames += stream_error(job, e);
  job.answer = error_answer(job, e);
  job.done = true;
  job.cv.notify_all();
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The rendered prompt opens a reasoning block the reply continues (Qwen: the generation
// prompt ends with "<think>\n" when thinking is on, and with "</think>\n\n" when it is off).
bool prompt_opens_thinking(std::string_view prompt) {
  while (!prompt.empty() &&
         std::string_view(" \t\r\n").find(prompt.back()) != std::string_view::npos)
    prompt.remove_suffix(1);
  return prompt.ends_with("<think>");
}

// The answer to a request the server's shutdown cut: a 503, or an error event in a stream.
ApiError shutdown_error(int64_t tokens_sent) {
  std::string msg = "the server is shutting down";
  if (tokens_sent > 0)
    msg += "; the answer was cut after " + std::to_string(tokens_sent) + " tokens";
  return ApiError{503, "server_error", msg + "; retry on another server or later", "",
                  "server_shutting_down"};
}

ApiError context_error(int64_t prompt_tokens, int64_t ctx, const char* param) {
  return bad_request("This model's maximum context length is " + std::to_string(ctx) +
                         " tokens; the prompt has " + std::to_string(prompt_tokens) +
                         " tokens, which leaves no room for a reply",
                     param, "context_length_exceeded");
}

}  // namespace

Err Server::check_logit_bias(const SamplingOptions& s) const {
  for (const auto& [id, bias] : s.logit_bias)
    if (id >= backend_->n_vocab())
      return bad_request("logit_bias token id " + std::to_string(id) + " is outside the vocabulary",
                         "logit_bias");
  return {};
}

ApiExpected<std::shared_ptr<Job>> Server::chat_job(const ChatRequest& c,
                                                   Clock::time_point arrived) {
  // The prompt, and where its generation prompt begins: the engine keeps a snapshot there,
  // which the next turn reuses even though it re-renders this turn's reply its own way.
  ChatTemplateOptions topts = c.template_options;
  topts.add_generation_prompt = false;
  auto head = render(c.messages, c.tools, topts);
  if (!head) return bad_request(head.message(), "messages");
  topts.add_generation_prompt = true;
  auto full = render(c.messages, c.tools, topts);
  if (!full) return bad_request(full.message(), "messages");
  std::vector<int32_t> prompt = tok_->encode(*full);
  const std::vector<int32_t> head_ids = tok_->encode(*head);
  // A tokenisation boundary that differs between the two renderings: the common prefix.
  const auto [mismatch, unused] =
      std::mismatch(head_ids.begin(), head_ids.end(), prompt.begin(), prompt.end());
  const int64_t snapshot_at = int64_t(mismatch - head_ids.begin());
  if (int64_t(prompt.size()) + 1 > opts_.ctx)
    return context_error(int64_t(prompt.size()), opts_.ctx, "messages");

  auto job = std::make_shared<Job>();
  job->arrived = arrived;
  job->chat = true;
  job->request = make_generate_request(std::move(prompt), c.sampling);
  job->request.snapshot_at = snapshot_at;
  job->stop = c.sampling.stop;
  job->parser.thinking = prompt_opens_thinking(*full);
  job->parser.tools = nlohmann::json(c.tools);
  job->parser.parse_tool_calls = c.parse_tool_calls;
  job->response.stream = c.stream;
  job->n = c.sampling.n;
  job->parallel_tool_calls = c.parallel_tool_calls;
  API_TRY(check_logit_bias(c.sampling));
  if (c.output.kind != OutputConstraint::Kind::none) {
    auto g = output_grammar(c.output, c.tools, c.parallel_tool_calls);
    if (!g) return bad_request(g.message(), c.output.param);
    // After the reasoning block when the prompt opens one: the grammar is the answer's.
    job->make_constraint = [this, grammar = std::make_shared<const grammar::Grammar>(std::move(*g)),
                            stops = job->request.stop_ids,
                            marker = std::string(job->parser.thinking ? "</think>" : "")] {
      return std::make_shared<grammar::GrammarConstraint>(*tok_, *vocab_, grammar, stops, marker);
    };
  }
  return job;
}

HttpResponse Server::handle_chat(const HttpRequest& http) {
  const auto arrived = Clock::now();
  if (auto r = not_ready()) return *r;
  auto parsed = parse_chat_request(http.body);
  if (!parsed) return error_response(parsed.error());
  const ChatRequest& c = *parsed;
  auto made = chat_job(c, arrived);
  if (!made) return error_response(made.error());
  std::shared_ptr<Job> job = std::move(*made);
  job->response = ResponseOptions{Endpoint::chat,
                                  make_response_id("chatcmpl-"),
                                  int64_t(std::time(nullptr)),
                                  model_name_,
                                  c.stream,
                                  c.include_usage,
                                  c.sampling.top_logprobs >= 0,
                                  c.sampling.n};
  return submit(std::move(job), http);
}

HttpResponse Server::handle_completion(const HttpRequest& http) {
  const auto arrived = Clock::now();
  if (auto r = not_ready()) return *r;
  auto parsed = parse_completion_request(http.body);
  if (!parsed) return error_response(parsed.error());
  CompletionRequest& c = *parsed;
  std::vector<int32_t> prompt;
  if (c.prompt_ids) {
    prompt = std::move(*c.prompt_ids);
    for (int32_t id : prompt)
      if (id >= tok_->vocab_size() || id >= backend_->n_vocab())
        return error_response(bad_request(
            "prompt token id " + std::to_string(id) + " is outside the vocabulary", "prompt"));
  } else {
    prompt = tok_->encode(c.prompt);
  }
  if (prompt.empty()) return error_response(bad_request("the prompt is empty", "prompt"));
  if (int64_t(prompt.size()) + 1 > opts_.ctx)
    return error_response(context_error(int64_t(prompt.size()), opts_.ctx, "prompt"));

  auto job = std::make_shared<Job>();
  job->arrived = arrived;
  job->chat = false;
  if (auto e = check_logit_bias(c.sampling)) return error_response(*e);
  job->request = make_generate_request(std::move(prompt), c.sampling);
  job->stop = c.sampling.stop;
  job->n = c.sampling.n;
  job->response = ResponseOptions{Endpoint::completion,
                                  make_response_id("cmpl-"),
                                  int64_t(std::time(nullptr)),
                                  model_name_,
                                  c.stream,
                                  c.include_usage,
                                  c.sampling.top_logprobs >= 0,
                                  c.sampling.n};
  return submit(std::move(job), http);
}

// ---------------------------------------------------------------------------------------------
// The hand-over between the connection's thread and the scheduler's.

void Server::release(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard lock(mu_);
    active_.erase(job);
  }
  cv_.notify_all();
}

HttpResponse Server::submit(std::shared_ptr<Job> job, const HttpRequest& http) {
  // The engine asks between prefill chunks (and layers) and tokens; the job outlives its run.
  job->request.cancelled = [j = job.get()] { return j->cancelled.load(std::memory_order_relaxed); };
  {
    std::lock_guard lock(mu_);
    if (draining_)
      return error_answer(
          *job, ApiError{503, "server_error", "the server is shutting down", "", "overloaded"});
    active_.insert(job);
  }
  auto run = [this, job](bool cancelled) {
    try {
      run_job(job, cancelled);
    } catch (const std::exception& e) {  // never let it reach the scheduler's thread
      fail_job(*job,
               ApiError{500, "server_error", std::string("internal error: ") + e.what(), "", ""});
    } catch (...) {
      fail_job(*job, ApiError{500, "server_error", "internal error", "", ""});
    }
  };
  if (!scheduler_.submit(std::move(run))) {
    release(job);
    return error_answer(*job, ApiError{503, "server_error",
                                   "the server is busy: " + std::to_string(opts_.max_queue) +
                                       " requests are already waiting; retry later",
                                   "", "overloaded"});
  }
  if (job->response.stream) {
    HttpResponse r;
    r.content_type = "text/event-stream";
    r.headers.emplace_back("Cache-Control", "no-cache");
    r.stream = [this, job, connected = http.connected](const ChunkWriter& write) {
      pump(*job, write, connected);
    };
    r.on_close = [this, job] {
      job->cancelled = true;  // a no-op once it is done
      release(job);
    };
    return r;
  }
  // Not streaming: wait, but stop the job as soon as the client goes away.
  std::unique_lock lock(job->mu);
  while (!job->done) {
    job->cv.wait_for(lock, std::chrono::milliseconds(20));
    if (job->done) break;
    lock.unlock();
    const bool gone = !http.connected();
    lock.lock();
    if (gone) {
      job->cancelled = true;
      lock.unlock();
      release(job);
      return error_response(bad_request("the client closed the connection"));  // nobody reads it
    }
  }
  HttpResponse answer = std::move(job->answer);
  lock.unlock();
  release(job);
  return answer;
}

void Server::pump(Job& job, const ChunkWriter& write, const std::function<bool()>& connected) {
  for (;;) {
    std::string frames;
    bool done;
    {
      std::unique_lock lock(job.mu);
      job.cv.wait_for(lock, std::chrono::milliseconds(20),
                      [&] { return !job.frames.empty() || job.done; });
      frames.swap(job.frames);
      done = job.done;
    }
    if (!frames.empty() && !write(frames)) {
      job.cancelled = true;
      return;
    }
    if (done) {
      // Optionally hold the end of the body (ServerOptions::stream_end_delay_ms says why).
      const auto until = Clock::now() + std::chrono::milliseconds(opts_.stream_end_delay_ms);
      while (Clock::now() < until && connected())
        std::this_thread::sleep_for(
            std::min<Clock::duration>(std::chrono::milliseconds(10), until - Clock::now()));
      return;
    }
    if (!connected()) {
      job.cancelled = true;
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The job itself, on the scheduler's thread.

ApiExpected<Server::ChoiceEnd> Server::run_choice(Job& job, ReplyWriter& out,
                                                  const std::function<void(std::string)>& emit) {
  StreamingDetokenizer detok(*tok_, /*skip_special=*/true);
  StopMatcher stops(job.stop);
  std::optional<OutputParser> parser;
  if (job.chat) parser.emplace(job.parser);
  std::vector<TokenLogprob> logprobs;  // of the tokens since the last emitted piece
  Status failure;
  Clock::time_point last;
  bool first = true;
  const int calls_before = out.tool_call_count();

  // Text after the detokenizer → stop strings → parser → writer; true once a stop string hit.
  auto feed = [&](std::string_view text) {
    StopMatcher::Result r = stops.push(text);
    ParserDelta d;
    if (parser)
      d = parser->push(r.text);
    else
      d.content = std::move(r.text);
    if (!d.empty() || !logprobs.empty()) emit(out.add(d, std::exchange(logprobs, {})));
    if (r.stopped) out.stopped_by(stops.matched());
    return r.stopped;
  };
  auto on_token = [&](const TokenEvent& ev) {
    if (job.cancelled.load(std::memory_order_relaxed)) return false;
    const auto now = Clock::now();
    if (first)
      metrics_.time_to_first_token.observe(seconds(now - job.arrived));
    else
      metrics_.inter_token_latency.observe(seconds(now - last));
    first = false;
    last = now;
    if (job.request.top_logprobs >= 0) {
      TokenLogprob lp;
      lp.token = std::string(tok_->token_bytes(ev.id).value_or(""));
      lp.logprob = ev.logprob;
      for (const auto& [id, l] : ev.top) lp.top.emplace_back(tok_->token_bytes(id).value_or(""), l);
      logprobs.push_back(std::move(lp));
    }
    auto text = detok.push(ev.id);
    if (!text) {
      failure = text.error();
      return false;
    }
    if (feed(*text)) return false;
    // parallel_tool_calls false: the answer ends with its first call.
    return job.parallel_tool_calls || out.tool_call_count() == calls_before;
  };

  auto res = engine_->generate(job.request, on_token);
  const CacheStats cache = engine_->cache_stats();
  metrics_.cache_hits = cache.hits;
  metrics_.cache_misses = cache.misses;
  metrics_.cache_bytes = cache.bytes;
  metrics_.cache_entries = cache.entries;
  metrics_.cache_host_hits = cache.host_hits;
  metrics_.cache_host_bytes = cache.host_bytes;
  metrics_.cache_host_entries = cache.host_entries;
  metrics_.set_slots(engine_->slot_tokens());
  const BatchStats batch = engine_->batch_stats();
  metrics_.decode_bursts = batch.bursts;
  metrics_.decode_burst_lanes = batch.lanes;
  metrics_.decode_max_lanes = batch.max_lanes;
  if (!res) return ApiError{500, "server_error", res.message(), "", ""};
  if (!failure.ok()) return ApiError{500, "server_error", failure.message(), "", ""};
  // Cut by a shutdown (in prefill, or between tokens): said as such, never as a finish. A job
  // cancelled because its client left ends like a finished one; nobody reads it.
  if (draining_ && (res->finish_reason == "cancelled" || job.cancelled))
    return shutdown_error(res->completion_tokens);

  // The end: text still held by the detokenizer and the stop matcher, then the parser's.
  bool stopped = stops.stopped();
  if (!stopped) stopped = feed(detok.flush());
  ParserDelta tail;
  if (!stopped) {
    std::string rest = stops.flush();
    if (parser)
      tail = parser->push(rest);
    else
      tail.content = std::move(rest);
  }
  if (parser) {
    ParserDelta f = parser->finish();
    tail.reasoning += f.reasoning;
    tail.content += f.content;
    tail.tool_calls.insert(tail.tool_calls.end(), f.tool_calls.begin(), f.tool_calls.end());
  }
  if (!job.parallel_tool_calls && out.tool_call_count() > calls_before) tail.tool_calls.clear();
  emit(out.add(tail, std::exchange(logprobs, {})));

  ChoiceEnd end;
  end.reason = stopped ? "stop" : res->finish_reason;
  if (job.chat && out.tool_call_count() > 0 && end.reason == "stop") end.reason = "tool_calls";
  end.usage = Usage{res->prompt_tokens, res->completion_tokens, res->cached_tokens};
  metrics_.prompt_tokens += uint64_t(res->prompt_tokens);
  metrics_.cached_prompt_tokens += uint64_t(res->cached_tokens);
  metrics_.generation_tokens += uint64_t(res->completion_tokens);
  return end;
}

void Server::run_job(const std::shared_ptr<Job>& job, bool cancelled) {
  std::unique_ptr<ReplyWriter> writer;
  if (job->api == Api::anthropic)
    writer = std::make_unique<MessagesWriter>(job->messages);
  else if (job->api == Api::responses)
    writer = std::make_unique<ResponsesWriter>(job->responses);
  else
    writer = std::make_unique<ResponseWriter>(job->response);
  ReplyWriter& out = *writer;
  const bool stream = job->response.stream;
  auto emit = [&](std::string frames) {
    if (frames.empty()) return;
    std::lock_guard lock(job->mu);
    job->frames += frames;
    job->cv.notify_all();
  };
  auto finish = [&](HttpResponse answer) {
    std::lock_guard lock(job->mu);
    job->answer = std::move(answer);
    job->done = true;
    job->cv.notify_all();
  };
  auto fail = [&](const ApiError& e) {
    if (stream) emit(stream_error(*job, e));
    finish(error_answer(*job, e));
  };
  if (cancelled || job->cancelled || draining_) {
    // Never started: a stream (its 200 is sent) gets an error event, a waiting client a 503;
    // neither may look like a finished answer.
    if (stream) emit(out.start());
    fail(shutdown_error(0));
    return;
  }

  emit(out.start());
  const uint64_t seed = job->request.sampler.seed;
  std::string body;
  for (int choice = 0; choice < job->n; ++choice) {
    job->request.sampler.seed = seed + uint64_t(choice);
    job->request.constraint = job->make_constraint ? job->make_constraint() : nullptr;
    auto reply = run_choice(*job, out, emit);
    if (!reply) return fail(reply.error());
    body = out.finish(reply->reason, reply->usage);
    if (choice + 1 < job->n && stream) emit(std::exchange(body, {}));
  }
  metrics_.request_duration.observe(seconds(Clock::now() - job->arrived));
  if (stream) {
    emit(std::move(body));
    finish({});
  } else {
    HttpResponse answer;
    answer.body = std::move(body);
    finish(std::move(answer));
  }
}

}  // namespace orchid::server
