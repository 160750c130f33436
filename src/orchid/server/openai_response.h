// OpenAI response bodies: chat.completion / text_completion objects, their streamed chunks
// and the SSE framing ("data: {...}\n\n" ... "data: [DONE]\n\n"). One ResponseWriter per
// request turns generation output into the frames to send (streaming) or the final body.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "orchid/server/api_error.h"
#include "orchid/server/reply_writer.h"

namespace orchid::server {

enum class Endpoint { chat, completion };

struct ResponseOptions {
  Endpoint endpoint = Endpoint::chat;
  std::string id;  // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // streaming: a last chunk with usage and no choices
  bool logprobs = false;
  int n = 1;  // choices, written one after the other (each finish() ends one)
};

// "data: " + json + "\n\n".
std::string sse_frame(std::string_view json);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
std::string usage_json(const Usage& u);
// A fresh response id: prefix + 24 random alphanumerics.
std::string make_response_id(std::string_view prefix);

class ResponseWriter final : public ReplyWriter {
 public:
  explicit ResponseWriter(ResponseOptions opts);

  // Streaming: the first frame (chat: the assistant role). Not streaming: "".
  std::string start() override;
  // Output of one step: the parser's delta (completions: delta.content only) and the logprobs
  // of the tokens it consumed. Streaming: the frames to send now; otherwise gathered, "".
  std::string add(const ParserDelta& delta, std::vector<TokenLogprob> logprobs = {}) override;
  // Ends the current choice. The last one: streaming, its final chunk with finish_reason, the
  // usage chunk if asked, and [DONE]; otherwise the whole JSON body with every choice and the
  // usage summed over them (the prompt counted once). An earlier one: streaming, its final
  // chunk and the next choice's first; otherwise "".
  std::string finish(std::string_view finish_reason, const Usage& usage) override;
  // Streaming after a failure mid-way: an error frame and [DONE].
  static std::string stream_error(const ApiError& e);

  int tool_call_count() const override { return int(cur().tool_calls.size()); }

 private:
  struct Choice {
    // Gathered when not streaming (tool calls always: their count and indices).
    std::string content, reasoning;
    std::vector<ToolCall> tool_calls;
    std::vector<TokenLogprob> logprobs;
    size_t text_bytes = 0;  // completions logprobs: text_offset of the next token
    std::string finish_reason;
  };
  Choice& cur() { return choices_.back(); }
  const Choice& cur() const { return choices_.back(); }
  // One streamed chunk of the current choice: chat takes the delta object, completions the
  // text string.
  std::string chunk(nlohmann::ordered_json delta_or_text, std::string_view finish_reason,
                    const std::vector<TokenLogprob>& logprobs);
  nlohmann::ordered_json choice_object(size_t index) const;  // not streaming

  ResponseOptions opts_;
  std::vector<Choice> choices_;  // written so far; the last is the current one
  Usage usage_;                  // summed over the finished choices
};

}  // namespace orchid::server
