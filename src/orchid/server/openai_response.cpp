// ResponseWriter: OpenAI objects built with nlohmann::ordered_json (field order as OpenAI
// sends it) and dumped compactly; invalid UTF-8 in token text becomes U+FFFD.
#include "orchid/server/openai_response.h"

#include <random>

namespace orchid::server {
namespace {

using OJson = nlohmann::ordered_json;

std::string dump(const OJson& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

OJson bytes_of(std::string_view s) {
  OJson a = OJson::array();
  for (unsigned char c : s) a.push_back(int(c));
  return a;
}

OJson usage_object(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

OJson tool_call_object(const ToolCall& c, int index, bool with_index) {
  OJson j = OJson::object();
  if (with_index) j["index"] = index;
  j["id"] = c.id;
  j["type"] = "function";
  j["function"] = {{"name", c.name}, {"arguments", c.arguments}};
  return j;
}

// The choice's "logprobs": chat {"content": [...]}; completions the legacy shape.
OJson logprobs_object(Endpoint endpoint, const std::vector<TokenLogprob>& lps, size_t text_offset) {
  OJson j;
  if (endpoint == Endpoint::chat) {
    OJson content = OJson::array();
    for (const auto& t : lps) {
      OJson top = OJson::array();
      for (const auto& [tok, lp] : t.top)
        top.push_back({{"token", tok}, {"logprob", lp}, {"bytes", bytes_of(tok)}});
      content.push_back({{"token", t.token},
                         {"logprob", t.logprob},
                         {"bytes", bytes_of(t.token)},
                         {"top_logprobs", std::move(top)}});
    }
    j = {{"content", std::move(content)}};
  } else {
    // Legacy completions shape; text_offset counts bytes of the generated text.
    OJson tokens = OJson::array(), token_lps = OJson::array(), tops = OJson::array(),
          offsets = OJson::array();
    for (const auto& t : lps) {
      tokens.push_back(t.token);
      token_lps.push_back(t.logprob);
      OJson top = OJson::object();
      for (const auto& [tok, lp] : t.top) top[tok] = lp;
      tops.push_back(std::move(top));
      offsets.push_back(text_offset);
      text_offset += t.token.size();
    }
    j = {{"tokens", std::move(tokens)},
         {"token_logprobs", std::move(token_lps)},
         {"top_logprobs", std::move(tops)},
         {"text_offset", std::move(offsets)}};
  }
  return j;
}

}  // namespace

std::string sse_frame(std::string_view json) {
  std::string s = "data: ";
  s.append(json).append("\n\n");
  return s;
}

std::string usage_json(const Usage& u) {
  return dump(usage_object(u));
}

std::string make_response_id(std::string_view prefix) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<int> pick(0, int(sizeof(kAlnum)) - 2);
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlnum[pick(rng)];
  return id;
}

ResponseWriter::ResponseWriter(ResponseOptions opts) : opts_(std::move(opts)), choices_(1) {}

std::string ResponseWriter::chunk(OJson delta_or_text, std::string_view finish_reason,
                                  const std::vector<TokenLogprob>& logprobs) {
  const bool chat = opts_.endpoint == Endpoint::chat;
  OJson choice = {{"index", choices_.size() - 1}};
  choice[chat ? "delta" : "text"] = std::move(delta_or_text);
  if (opts_.logprobs && !logprobs.empty()) {
    choice["logprobs"] = logprobs_object(opts_.endpoint, logprobs, cur().text_bytes);
  } else {
    choice["logprobs"] = nullptr;
  }
  choice["finish_reason"] = finish_reason.empty() ? OJson() : OJson(finish_reason);
  OJson j = {{"id", opts_.id},
             {"object", chat ? "chat.completion.chunk" : "text_completion"},
             {"created", opts_.created},
             {"model", opts_.model},
             {"choices", OJson::array({std::move(choice)})}};
  if (opts_.include_usage) j["usage"] = nullptr;
  return sse_frame(dump(j));
}

std::string ResponseWriter::start() {
  if (!opts_.stream || opts_.endpoint != Endpoint::chat) return "";
  return chunk({{"role", "assistant"}, {"content", ""}}, "", {});
}

std::string ResponseWriter::add(const ParserDelta& d, std::vector<TokenLogprob> logprobs) {
  const bool chat = opts_.endpoint == Endpoint::chat;
  Choice& c = cur();
  if (!opts_.stream) {
    c.content += d.content;
    c.reasoning += d.reasoning;
    c.tool_calls.insert(c.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
    for (auto& t : logprobs) c.logprobs.push_back(std::move(t));
    return "";
  }
  if (d.empty() && (logprobs.empty() || !opts_.logprobs)) return "";
  std::string frame;
  if (chat) {
    OJson delta = OJson::object();
    if (!d.reasoning.empty()) {
      delta["reasoning_content"] = d.reasoning;
      delta["reasoning"] = d.reasoning;
    }
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.tool_calls.empty()) {
      OJson calls = OJson::array();
      for (const auto& call : d.tool_calls) {
        calls.push_back(tool_call_object(call, int(c.tool_calls.size()), true));
        c.tool_calls.push_back(call);
      }
      delta["tool_calls"] = std::move(calls);
    }
    frame = chunk(std::move(delta), "", logprobs);
  } else {
    frame = chunk(OJson(d.content), "", logprobs);
    for (const auto& t : logprobs) c.text_bytes += t.token.size();
  }
  return frame;
}

std::string ResponseWriter::finish(std::string_view finish_reason, const Usage& usage) {
  const bool chat = opts_.endpoint == Endpoint::chat;
  if (choices_.size() == 1) {
    usage_ = usage;
  } else {
    usage_.completion_tokens += usage.completion_tokens;
  }
  cur().finish_reason = finish_reason;
  const bool last = int(choices_.size()) >= opts_.n;
  if (opts_.stream) {
    std::string out = chunk(chat ? OJson::object() : OJson(""), finish_reason, {});
    if (!last) {
      choices_.emplace_back();
      return out + start();
    }
    if (opts_.include_usage) {
      OJson j = {{"id", opts_.id},
                 {"object", chat ? "chat.completion.chunk" : "text_completion"},
                 {"created", opts_.created},
                 {"model", opts_.model},
                 {"choices", OJson::array()},
                 {"usage", usage_object(usage_)}};
      out += sse_frame(dump(j));
    }
    out += kSseDone;
    return out;
  }
  if (!last) {
    choices_.emplace_back();
    return "";
  }
  OJson all = OJson::array();
  for (size_t i = 0; i < choices_.size(); ++i) all.push_back(choice_object(i));
  OJson j = {{"id", opts_.id},
             {"object", chat ? "chat.completion" : "text_completion"},
             {"created", opts_.created},
             {"model", opts_.model},
             {"choices", std::move(all)},
             {"usage", usage_object(usage_)}};
  return dump(j);
}

OJson ResponseWriter::choice_object(size_t index) const {
  const bool chat = opts_.endpoint == Endpoint::chat;
  const Choice& c = choices_[index];
  OJson choice = {{"index", index}};
  if (chat) {
    OJson message = {{"role", "assistant"}};
    message["content"] = c.content.empty() && !c.tool_calls.empty() ? OJson() : OJson(c.content);
    if (!c.reasoning.empty()) {
      message["reasoning_content"] = c.reasoning;
      message["reasoning"] = c.reasoning;
    }
    if (!c.tool_calls.empty()) {
      OJson calls = OJson::array();
      for (size_t i = 0; i < c.tool_calls.size(); ++i)
        calls.push_back(tool_call_object(c.tool_calls[i], int(i), false));
      message["tool_calls"] = std::move(calls);
    }
    choice["message"] = std::move(message);
  } else {
    choice["text"] = c.content;
  }
  choice["logprobs"] = opts_.logprobs ? logprobs_object(opts_.endpoint, c.logprobs, 0) : OJson();
  choice["finish_reason"] = c.finish_reason;
  return choice;
}

std::string ResponseWriter::stream_error(const ApiError& e) {
  return sse_frame(error_body(e)) + std::string(kSseDone);
}

}  // namespace orchid::server
