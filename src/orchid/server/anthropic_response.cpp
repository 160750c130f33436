// MessagesWriter: Anthropic message objects built with nlohmann::ordered_json (field order as
// Anthropic sends it) and dumped compactly; invalid UTF-8 becomes U+FFFD.
#include "orchid/server/anthropic_response.h"

namespace orchid::server {
namespace {

using OJson = nlohmann::ordered_json;

std::string dump(const OJson& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Anthropic's error type for an HTTP status.
const char* error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

const char* stop_reason(std::string_view finish_reason, bool stop_sequence) {
  if (finish_reason == "length") return "max_tokens";
  if (finish_reason == "tool_calls") return "tool_use";
  if (finish_reason == "stop" && stop_sequence) return "stop_sequence";
  return "end_turn";
}

OJson usage_object(int64_t input, int64_t output, int64_t cached) {
  // Anthropic counts cache reads apart from input_tokens.
  return {{"input_tokens", input - cached},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached},
          {"output_tokens", output}};
}

OJson tool_use_block(const ToolCall& c, bool with_input) {
  OJson input = OJson::object();
  if (with_input) {
    input = OJson::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
    if (!input.is_object()) input = OJson::object();
  }
  return {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", std::move(input)}};
}

// Tool-use ids in Anthropic's form: the parser's "call_X" → "toolu_X".
ToolCall anthropic_ids(ToolCall c) {
  if (c.id.starts_with("call_")) c.id = "toolu_" + c.id.substr(5);
  return c;
}

}  // namespace

std::string sse_event(std::string_view name, std::string_view json) {
  std::string s = "event: ";
  s.append(name).append("\ndata: ").append(json).append("\n\n");
  return s;
}

std::string anthropic_error_body(const ApiError& e) {
  return dump({{"type", "error"}, {"error", {{"type", error_type(e.status)}, {"message", e.message}}}});
}

std::string anthropic_stream_error(const ApiError& e) {
  return sse_event("error", anthropic_error_body(e));
}

MessagesWriter::MessagesWriter(MessagesOptions opts) : opts_(std::move(opts)) {}

std::string MessagesWriter::start() {
  if (!opts_.stream) return "";
  OJson message = {{"id", opts_.id},
                   {"type", "message"},
                   {"role", "assistant"},
                   {"model", opts_.model},
                   {"content", OJson::array()},
                   {"stop_reason", nullptr},
                   {"stop_sequence", nullptr},
                   {"usage", usage_object(opts_.input_tokens, 0, 0)}};
  return sse_event("message_start", dump({{"type", "message_start"}, {"message", message}})) +
         sse_event("ping", R"({"type":"ping"})");
}

std::string MessagesWriter::close_block() {
  if (open_ == Block::none) return "";
  open_ = Block::none;
  return sse_event("content_block_stop",
                   dump({{"type", "content_block_stop"}, {"index", index_++}}));
}

std::string MessagesWriter::append(Block kind, const std::string& text) {
  const bool thinking = kind == Block::thinking;
  if (!opts_.stream) {
    const char* type = thinking ? "thinking" : "text";
    if (content_.empty() || content_.back()["type"] != type) {
      content_.push_back(thinking ? OJson{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                  : OJson{{"type", "text"}, {"text", ""}});
    }
    auto& field = content_.back()[thinking ? "thinking" : "text"];
    field = field.get<std::string>() + text;
    return "";
  }
  std::string out;
  if (open_ != kind) {
    out += close_block();
    open_ = kind;
    OJson block = thinking ? OJson{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                           : OJson{{"type", "text"}, {"text", ""}};
    out += sse_event("content_block_start", dump({{"type", "content_block_start"},
                                                  {"index", index_},
                                                  {"content_block", std::move(block)}}));
  }
  OJson delta = thinking ? OJson{{"type", "thinking_delta"}, {"thinking", text}}
                         : OJson{{"type", "text_delta"}, {"text", text}};
  out += sse_event("content_block_delta",
                   dump({{"type", "content_block_delta"}, {"index", index_}, {"delta", delta}}));
  return out;
}

std::string MessagesWriter::add(const ParserDelta& d, std::vector<TokenLogprob>) {
  std::string out;
  if (!d.reasoning.empty()) out += append(Block::thinking, d.reasoning);
  if (!d.content.empty()) out += append(Block::text, d.content);
  for (const ToolCall& raw : d.tool_calls) {
    const ToolCall c = anthropic_ids(raw);
    ++tool_calls_;
    if (!opts_.stream) {
      content_.push_back(tool_use_block(c, true));
      continue;
    }
    out += close_block();
    out += sse_event("content_block_start", dump({{"type", "content_block_start"},
                                                  {"index", index_},
                                                  {"content_block", tool_use_block(c, false)}}));
    OJson delta = {{"type", "input_json_delta"}, {"partial_json", c.arguments}};
    out += sse_event("content_block_delta", dump({{"type", "content_block_delta"},
                                                  {"index", index_},
                                                  {"delta", std::move(delta)}}));
    out += sse_event("content_block_stop",
                     dump({{"type", "content_block_stop"}, {"index", index_++}}));
  }
  return out;
}

std::string MessagesWriter::finish(std::string_view finish_reason, const Usage& usage) {
  const bool by_stop = !stop_sequence_.empty() && finish_reason == "stop";
  const char* reason = stop_reason(finish_reason, by_stop);
  const OJson stop = by_stop ? OJson(stop_sequence_) : OJson();
  if (opts_.stream) {
    std::string out = close_block();
    // The whole usage: message_start went out before the state cache was consulted.
    OJson u = usage_object(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens);
    out += sse_event("message_delta",
                     dump({{"type", "message_delta"},
                           {"delta", {{"stop_reason", reason}, {"stop_sequence", stop}}},
                           {"usage", std::move(u)}}));
    out += sse_event("message_stop", R"({"type":"message_stop"})");
    return out;
  }
  OJson j = {{"id", opts_.id},
             {"type", "message"},
             {"role", "assistant"},
             {"model", opts_.model},
             {"content", std::move(content_)},
             {"stop_reason", reason},
             {"stop_sequence", stop},
             {"usage", usage_object(usage.prompt_tokens, usage.completion_tokens,
                                    usage.cached_tokens)}};
  return dump(j);
}

}  // namespace orchid::server
