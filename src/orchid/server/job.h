// One generation request as it passes from its HTTP connection to the scheduler's thread and
// back: what to run, and the answer (SSE frames or a whole response) handed over under a lock.
// Internal to src/orchid/server.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "orchid/runtime/engine.h"
#include "orchid/server/anthropic_response.h"
#include "orchid/server/http_server.h"
#include "orchid/server/openai_response.h"
#include "orchid/server/responses_response.h"
#include "orchid/tokenizer/output_parser.h"

namespace orchid::server {

// An ApiError as an HTTP answer (503: Retry-After; 401: WWW-Authenticate).
HttpResponse error_response(const ApiError& e);
// The same in Anthropic's shape (the /v1/messages endpoints).
HttpResponse anthropic_error_response(const ApiError& e);

// The API a request came in through: its answer's and its errors' shape.
enum class Api { openai, anthropic, responses };

struct Job {
  // Set by the handler before the job is queued; read-only afterwards.
  GenerateRequest request;
  std::vector<std::string> stop;
  bool chat = true;
  OutputParserOptions parser;  // chat only
  // Choices to generate (OpenAI n); each runs with its own seed (seed + index).
  int n = 1;
  // Constrained sampling: a fresh constraint for each choice (it is stateful); empty: none.
  std::function<std::shared_ptr<TokenConstraint>()> make_constraint;
  bool parallel_tool_calls = true;  // false: the answer ends after its first tool call
  Api api = Api::openai;
  ResponseOptions response;    // the OpenAI answer; its `stream` says for every API
  MessagesOptions messages;    // the Anthropic answer
  ResponsesOptions responses;  // the Responses API answer
  std::chrono::steady_clock::time_point arrived;

  // Set from the connection (client gone) or by shutdown; the engine stops at the next token.
  std::atomic<bool> cancelled{false};

  // The hand-over, guarded by mu.
  std::mutex mu;
  std::condition_variable cv;
  std::string frames;   // streaming: SSE frames not yet written
  HttpResponse answer;  // not streaming: the whole answer, once done
  bool done = false;
};

}  // namespace orchid::server
