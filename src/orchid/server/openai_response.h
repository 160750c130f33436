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
  // Streaming: the final chunk with finish_reason, the usage chunk if asked, and [DONE].
  // Otherwise the whole JSON body.
  std::string finish(std::string_view finish_reason, const Usage& usage) override;
  // Streaming after a failure mid-way: an error frame and [DONE].
  static std::string stream_error(const ApiError& e);

  int tool_call_count() const override { return int(tool_calls_.size()); }

 private:
  // One streamed chunk: chat takes the delta object, completions the text string.
  std::string chunk(nlohmann::ordered_json delta_or_text, std::string_view finish_reason,
                    const std::vector<TokenLogprob>& logprobs);

  ResponseOptions opts_;
  // Gathered when not streaming.
  std::string content_, reasoning_;
  std::vector<ToolCall> tool_calls_;
  std::vector<TokenLogprob> logprobs_;
  size_t text_bytes_ = 0;  // completions logprobs: text_offset of the next token
};

}  // namespace orchid::server
