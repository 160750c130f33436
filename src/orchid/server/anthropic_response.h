// Anthropic Messages answers: the message object, or its stream of named SSE events
// (message_start, ping, content_block_start / _delta / _stop per block, message_delta with the
// stop reason and the whole usage — message_start's is sent before the state cache is consulted,
// so it counts every prompt token as input — message_stop), and errors as {"type": "error", "error": {...}}.
//
// Blocks follow the reply: thinking (reasoning), text, and one tool_use block per call, each
// opened when its first piece arrives and closed when another kind follows. A tool call arrives
// whole from the output parser, so its input streams as one input_json_delta. Stop reasons:
// end_turn, max_tokens, stop_sequence (with the string), tool_use.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "orchid/server/reply_writer.h"

namespace orchid::server {

struct MessagesOptions {
  std::string id;  // "msg_..."
  std::string model;
  bool stream = false;
  int64_t input_tokens = 0;  // for message_start, sent before generation
};

// "event: " + name + "\ndata: " + json + "\n\n".
std::string sse_event(std::string_view name, std::string_view json);
// {"type":"error","error":{"type":...,"message":...}} with Anthropic's error types.
std::string anthropic_error_body(const ApiError& e);
// A stream cut by an error: the error event.
std::string anthropic_stream_error(const ApiError& e);

class MessagesWriter final : public ReplyWriter {
 public:
  explicit MessagesWriter(MessagesOptions opts);
  std::string start() override;
  std::string add(const ParserDelta& delta, std::vector<TokenLogprob> logprobs = {}) override;
  void stopped_by(std::string_view stop_string) override { stop_sequence_ = stop_string; }
  std::string finish(std::string_view finish_reason, const Usage& usage) override;
  int tool_call_count() const override { return tool_calls_; }

 private:
  enum class Block { none, thinking, text };
  // Streaming: closes the open block, if any.
  std::string close_block();
  // Appends text to the block of `kind`, opening it (and closing another) as needed.
  std::string append(Block kind, const std::string& text);

  MessagesOptions opts_;
  nlohmann::ordered_json content_ = nlohmann::ordered_json::array();  // not streaming
  Block open_ = Block::none;
  int index_ = 0;  // streaming: the next block's index
  int tool_calls_ = 0;
  std::string stop_sequence_;
};

}  // namespace orchid::server
