// ResponsesWriter and ResponseStore: Responses API objects built with nlohmann::ordered_json
// (field order as OpenAI sends it) and dumped compactly; invalid UTF-8 becomes U+FFFD.
#include "orchid/server/responses_response.h"

#include "orchid/server/anthropic_response.h"  // sse_event
#include "orchid/server/openai_response.h"     // make_response_id

namespace orchid::server {
namespace {

using OJson = nlohmann::ordered_json;

std::string dump(const OJson& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

OJson reasoning_item(const std::string& id, const std::string& text) {
  OJson summary = OJson::array();
  if (!text.empty()) summary.push_back({{"type", "summary_text"}, {"text", text}});
  return {{"type", "reasoning"}, {"id", id}, {"summary", std::move(summary)}};
}

OJson text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", OJson::array()}};
}

OJson message_item(const std::string& id, const char* status, OJson content) {
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

OJson call_item(const std::string& id, const ToolCall& c, const char* status, bool with_args) {
  return {{"type", "function_call"},
          {"id", id},
          {"call_id", c.id},
          {"name", c.name},
          {"arguments", with_args ? c.arguments : ""},
          {"status", status}};
}

}  // namespace

void ResponseStore::put(const std::string& id, OJson messages) {
  std::lock_guard lock(mu_);
  if (items_.emplace(id, std::move(messages)).second) order_.push_back(id);
  while (order_.size() > capacity_) {
    items_.erase(order_.front());
    order_.pop_front();
  }
}

std::optional<OJson> ResponseStore::get(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = items_.find(id);
  if (it == items_.end()) return std::nullopt;
  return it->second;
}

std::string responses_stream_error(const ApiError& e) {
  return sse_event("error", dump({{"type", "error"},
                                  {"code", e.code.empty() ? OJson() : OJson(e.code)},
                                  {"message", e.message},
                                  {"param", e.param.empty() ? OJson() : OJson(e.param)}}));
}

ResponsesWriter::ResponsesWriter(ResponsesOptions opts) : opts_(std::move(opts)) {}

std::string ResponsesWriter::event(const char* type, OJson body) {
  OJson j = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [k, v] : body.items()) j[k] = std::move(v);
  return sse_event(type, dump(j));
}

OJson ResponsesWriter::response_object(const char* status) const {
  auto echo = [&](const char* key, OJson fallback) {
    auto it = opts_.echo.find(key);
    return it == opts_.echo.end() ? fallback : *it;
  };
  OJson j = {{"id", opts_.id},
             {"object", "response"},
             {"created_at", opts_.created},
             {"status", status},
             {"error", nullptr},
             {"incomplete_details", nullptr},
             {"instructions", echo("instructions", nullptr)},
             {"max_output_tokens", echo("max_output_tokens", nullptr)},
             {"model", opts_.model},
             {"output", output_},
             {"parallel_tool_calls", echo("parallel_tool_calls", true)},
             {"previous_response_id",
              opts_.previous_response_id.empty() ? OJson() : OJson(opts_.previous_response_id)},
             {"reasoning", echo("reasoning", {{"effort", nullptr}, {"summary", nullptr}})},
             {"store", opts_.store != nullptr},
             {"temperature", echo("temperature", 1.0)},
             {"text", {{"format", {{"type", "text"}}}}},
             {"tool_choice", echo("tool_choice", "auto")},
             {"tools", echo("tools", OJson::array())},
             {"top_p", echo("top_p", 1.0)},
             {"truncation", "disabled"},
             {"usage", usage_.is_null() ? OJson() : usage_},
             {"metadata", echo("metadata", OJson::object())}};
  if (std::string_view(status) == "incomplete")
    j["incomplete_details"] = {{"reason", "max_output_tokens"}};
  return j;
}

std::string ResponsesWriter::start() {
  if (!opts_.stream) return "";
  std::string out = event("response.created", {{"response", response_object("in_progress")}});
  out += event("response.in_progress", {{"response", response_object("in_progress")}});
  return out;
}

std::string ResponsesWriter::close_item() {
  if (open_ == Open::none) return "";
  const int64_t index = int64_t(output_.size());
  const std::string id = item_["id"];
  std::string out;
  if (open_ == Open::reasoning) {
    item_ = reasoning_item(id, text_);
    if (opts_.stream) {
      const OJson part = {{"type", "summary_text"}, {"text", text_}};
      out += event("response.reasoning_summary_text.done",
                   {{"item_id", id}, {"output_index", index}, {"summary_index", 0}, {"text", text_}});
      out += event("response.reasoning_summary_part.done",
                   {{"item_id", id}, {"output_index", index}, {"summary_index", 0}, {"part", part}});
    }
  } else {
    item_ = message_item(id, "completed", OJson::array({text_part(text_)}));
    if (opts_.stream) {
      out += event("response.output_text.done", {{"item_id", id},
                                                 {"output_index", index},
                                                 {"content_index", 0},
                                                 {"text", text_},
                                                 {"logprobs", OJson::array()}});
      out += event("response.content_part.done", {{"item_id", id},
                                                  {"output_index", index},
                                                  {"content_index", 0},
                                                  {"part", text_part(text_)}});
    }
  }
  if (opts_.stream) out += event("response.output_item.done", {{"output_index", index}, {"item", item_}});
  output_.push_back(std::move(item_));
  item_ = OJson();
  text_.clear();
  open_ = Open::none;
  return out;
}

std::string ResponsesWriter::append(Open kind, const std::string& text) {
  std::string out;
  const int64_t index = int64_t(output_.size()) + (open_ == kind ? 0 : open_ == Open::none ? 0 : 1);
  if (open_ != kind) {
    out += close_item();
    open_ = kind;
    const bool reasoning = kind == Open::reasoning;
    const std::string id = make_response_id(reasoning ? "rs_" : "msg_");
    item_ = reasoning ? reasoning_item(id, "") : message_item(id, "in_progress", OJson::array());
    if (opts_.stream) {
      out += event("response.output_item.added", {{"output_index", index}, {"item", item_}});
      if (reasoning)
        out += event("response.reasoning_summary_part.added",
                     {{"item_id", id},
                      {"output_index", index},
                      {"summary_index", 0},
                      {"part", {{"type", "summary_text"}, {"text", ""}}}});
      else
        out += event("response.content_part.added", {{"item_id", id},
                                                     {"output_index", index},
                                                     {"content_index", 0},
                                                     {"part", text_part("")}});
    }
  }
  text_ += text;
  if (opts_.stream) {
    const std::string id = item_["id"];
    if (kind == Open::reasoning)
      out += event("response.reasoning_summary_text.delta",
                   {{"item_id", id}, {"output_index", index}, {"summary_index", 0}, {"delta", text}});
    else
      out += event("response.output_text.delta", {{"item_id", id},
                                                  {"output_index", index},
                                                  {"content_index", 0},
                                                  {"delta", text},
                                                  {"logprobs", OJson::array()}});
  }
  return out;
}

std::string ResponsesWriter::add(const ParserDelta& d, std::vector<TokenLogprob>) {
  std::string out;
  if (!d.reasoning.empty()) {
    reasoning_ += d.reasoning;
    out += append(Open::reasoning, d.reasoning);
  }
  if (!d.content.empty()) {
    content_ += d.content;
    out += append(Open::message, d.content);
  }
  for (const ToolCall& c : d.tool_calls) {
    out += close_item();
    ++tool_calls_;
    OJson args = OJson::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
    calls_.push_back({{"id", c.id},
                      {"type", "function"},
                      {"function", {{"name", c.name}, {"arguments", args.is_object() ? args : OJson::object()}}}});
    const int64_t index = int64_t(output_.size());
    const std::string id = make_response_id("fc_");
    if (opts_.stream) {
      out += event("response.output_item.added",
                   {{"output_index", index}, {"item", call_item(id, c, "in_progress", false)}});
      out += event("response.function_call_arguments.delta",
                   {{"item_id", id}, {"output_index", index}, {"delta", c.arguments}});
      out += event("response.function_call_arguments.done",
                   {{"item_id", id}, {"output_index", index}, {"arguments", c.arguments}});
      out += event("response.output_item.done",
                   {{"output_index", index}, {"item", call_item(id, c, "completed", true)}});
    }
    output_.push_back(call_item(id, c, "completed", true));
  }
  return out;  // "" when not streaming: every event is written only then
}

std::string ResponsesWriter::finish(std::string_view finish_reason, const Usage& usage) {
  std::string out = close_item();
  usage_ = {{"input_tokens", usage.prompt_tokens},
            {"input_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
            {"output_tokens", usage.completion_tokens},
            {"output_tokens_details", {{"reasoning_tokens", 0}}},
            {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  const bool incomplete = finish_reason == "length";
  if (opts_.store) {
    OJson messages = opts_.messages;
    OJson turn = {{"role", "assistant"}, {"content", content_}};
    if (!reasoning_.empty()) turn["reasoning_content"] = reasoning_;
    if (!calls_.empty()) turn["tool_calls"] = calls_;
    messages.push_back(std::move(turn));
    opts_.store->put(opts_.id, std::move(messages));
  }
  const OJson response = response_object(incomplete ? "incomplete" : "completed");
  if (!opts_.stream) return dump(response);
  return out + event(incomplete ? "response.incomplete" : "response.completed",
                     {{"response", response}});
}

}  // namespace orchid::server
