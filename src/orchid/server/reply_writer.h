// What every API's answer writer does with one generation (openai_response.h: chat and
// completions; anthropic_response.h: messages): turn the parsed output into the frames to stream
// or the whole body, and say errors in its API's shape.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "orchid/server/api_error.h"
#include "orchid/tokenizer/output_parser.h"

namespace orchid::server {

// One generated token for logprobs: its raw bytes (possibly part of a UTF-8 character; JSON
// strings show invalid bytes as U+FFFD, "bytes" keeps them exact).
struct TokenLogprob {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // alternatives, most likely first
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens restored from the state cache
};

class ReplyWriter {
 public:
  virtual ~ReplyWriter() = default;
  // Streaming: the first frames. Not streaming: "".
  virtual std::string start() = 0;
  // Output of one step: the parser's delta and the logprobs of the tokens it consumed.
  // Streaming: the frames to send now; otherwise gathered, "".
  virtual std::string add(const ParserDelta& delta, std::vector<TokenLogprob> logprobs) = 0;
  // The stop string that ended the reply, before finish("stop", ...) (APIs that report it).
  virtual void stopped_by(std::string_view stop_string) {}
  // Streaming: the closing frames. Otherwise the whole JSON body. `finish_reason` in OpenAI's
  // words ("stop", "length", "tool_calls", ...); each writer names it its API's way.
  virtual std::string finish(std::string_view finish_reason, const Usage& usage) = 0;
  // Tool calls written so far.
  virtual int tool_call_count() const = 0;
};

}  // namespace orchid::server
