// OpenAI Responses API answers: the response object, or its stream of typed events
// (response.created, response.in_progress, then per output item response.output_item.added,
// its parts' and deltas' events and response.output_item.done, then response.completed or
// response.incomplete), each with a sequence_number.
//
// Output items follow the reply: a reasoning item (the reasoning as its summary text), a message
// item (output_text), one function_call item per call (its arguments as one delta: the parser
// delivers a call whole). The finished conversation (the request's messages plus the reply as
// an assistant turn) goes to the ResponseStore when `store` is on, for previous_response_id.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "orchid/server/reply_writer.h"

namespace orchid::server {

// Stored responses: id → the conversation as chat messages, the oldest dropped past `capacity`.
class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity = 1024) : capacity_(capacity) {}
  void put(const std::string& id, nlohmann::ordered_json messages);
  std::optional<nlohmann::ordered_json> get(const std::string& id) const;

 private:
  mutable std::mutex mu_;
  size_t capacity_;
  std::list<std::string> order_;  // oldest first
  std::unordered_map<std::string, nlohmann::ordered_json> items_;
};

struct ResponsesOptions {
  std::string id;  // "resp_..."
  int64_t created = 0;
  std::string model;
  bool stream = false;
  nlohmann::ordered_json echo;       // request fields the response repeats
  std::string previous_response_id;  // "" for none
  ResponseStore* store = nullptr;    // null: not stored
  nlohmann::ordered_json messages;   // the conversation the reply continues (for the store)
};

// A stream cut by an error: the error event.
std::string responses_stream_error(const ApiError& e);

class ResponsesWriter final : public ReplyWriter {
 public:
  explicit ResponsesWriter(ResponsesOptions opts);
  std::string start() override;
  std::string add(const ParserDelta& delta, std::vector<TokenLogprob> logprobs = {}) override;
  std::string finish(std::string_view finish_reason, const Usage& usage) override;
  int tool_call_count() const override { return tool_calls_; }

 private:
  enum class Open { none, reasoning, message };
  std::string event(const char* type, nlohmann::ordered_json body);
  nlohmann::ordered_json response_object(const char* status) const;
  std::string close_item();
  std::string append(Open kind, const std::string& text);

  ResponsesOptions opts_;
  int64_t sequence_ = 0;
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();  // finished items
  Open open_ = Open::none;
  nlohmann::ordered_json item_;  // the open item
  std::string text_;             // its text so far
  int tool_calls_ = 0;
  nlohmann::ordered_json usage_;  // set by finish
  // The reply as an assistant turn, for the store.
  std::string reasoning_, content_;
  nlohmann::ordered_json calls_ = nlohmann::ordered_json::array();
};

}  // namespace orchid::server
