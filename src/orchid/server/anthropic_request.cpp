// Parsing and validation of Anthropic Messages bodies (rules in anthropic_request.h). JSON
// exceptions stay inside this file: every entry point returns a value or an ApiError.
#include "orchid/server/anthropic_request.h"

#include <limits>

#include "orchid/server/json_fields.h"

namespace orchid::server {
namespace {

// A block's "type", checked to be a string.
ApiExpected<std::string> block_type(const OJson& block, const std::string& p) {
  if (!block.is_object()) return wrong_type(p, "an object", block);
  const OJson* t = field(block, "type");
  if (!t || !t->is_string()) return need_string(p + ".type");
  return t->get<std::string>();
}

ApiError text_only(const std::string& type, const std::string& param) {
  return bad_request("content blocks of type \"" + type +
                         "\" are not supported: orchid serves text and client tools",
                     param);
}

// A text block's text.
ApiExpected<std::string> block_text(const OJson& block, const std::string& p) {
  const OJson* t = field(block, "text");
  if (!t || !t->is_string()) return need_string(p + ".text");
  return t->get<std::string>();
}

// `system`: a string or a list of text blocks (cache_control and citations have no effect here).
ApiExpected<std::string> system_text(const OJson& system) {
  if (system.is_string()) return system.get<std::string>();
  if (!system.is_array()) return wrong_type("system", "a string or a list of text blocks", system);
  std::string text;
  for (size_t k = 0; k < system.size(); ++k) {
    auto type = block_type(system[k], at("system", k));
    if (!type) return type.error();
    if (*type != "text") return text_only(*type, at("system", k) + ".type");
    auto t = block_text(system[k], at("system", k));
    if (!t) return t.error();
    text += (text.empty() ? "" : "\n\n") + *t;
  }
  return text;
}

// A tool_result's content: a string or text blocks, joined.
ApiExpected<std::string> tool_result_text(const OJson& block, const std::string& p) {
  const OJson* c = field(block, "content");
  if (!c) return std::string();
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) return wrong_type(p + ".content", "a string or a list of text blocks", *c);
  std::string text;
  for (size_t k = 0; k < c->size(); ++k) {
    const std::string q = at(p + ".content", k);
    auto type = block_type((*c)[k], q);
    if (!type) return type.error();
    if (*type != "text") return text_only(*type, q + ".type");
    auto t = block_text((*c)[k], q);
    if (!t) return t.error();
    text += (text.empty() ? "" : "\n") + *t;
  }
  return text;
}

// One Anthropic message → one or more chat messages appended to `out`.
Err convert_message(const OJson& m, const std::string& p, OJson& out) {
  if (!m.is_object()) return wrong_type(p, "an object", m);
  const OJson* role = field(m, "role");
  if (!role || !role->is_string()) return need_string(p + ".role");
  const std::string r = role->get<std::string>();
  if (r != "user" && r != "assistant" && r != "system")
    return bad_request("'" + p + ".role' must be \"user\", \"assistant\" or \"system\", not \"" +
                           r + "\"",
                       p + ".role");
  if (r == "system") {
    // Agents (Claude Code) put system notes between turns; the template takes a system message
    // only first, so one before any turn joins the system prompt and a later one is said as a
    // user turn, where the conversation reaches it.
    const OJson* content = field(m, "content");
    if (!content) return bad_request("'" + p + ".content' is required", p + ".content");
    auto text = system_text(*content);
    if (!text) {
      ApiError e = text.error();
      e.param = p + ".content";
      return e;
    }
    const bool first = out.empty() || (out.size() == 1 && out[0]["role"] == "system");
    if (first && !out.empty())
      out[0]["content"] = out[0]["content"].get<std::string>() + "\n\n" + *text;
    else if (first)
      out.push_back({{"role", "system"}, {"content", std::move(*text)}});
    else
      out.push_back({{"role", "user"}, {"content", std::move(*text)}});
    return {};
  }
  const OJson* content = field(m, "content");
  if (!content) return bad_request("'" + p + ".content' is required", p + ".content");
  if (content->is_string()) {
    out.push_back({{"role", r}, {"content", *content}});
    return {};
  }
  if (!content->is_array())
    return wrong_type(p + ".content", "a string or a list of content blocks", *content);
  OJson calls = OJson::array();
  std::string text, reasoning;
  bool has_text = false;
  for (size_t k = 0; k < content->size(); ++k) {
    const OJson& b = (*content)[k];
    const std::string q = at(p + ".content", k);
    auto type = block_type(b, q);
    if (!type) return type.error();
    if (*type == "text") {
      auto t = block_text(b, q);
      if (!t) return t.error();
      // Blocks of a user turn are paragraphs; an assistant's are pieces of one reply.
      text += (has_text && r == "user" ? "\n\n" : "") + *t;
      has_text = true;
    } else if (*type == "tool_result" && r == "user") {
      const OJson* id = field(b, "tool_use_id");
      if (!id || !id->is_string()) return need_string(q + ".tool_use_id");
      auto t = tool_result_text(b, q);
      if (!t) return t.error();
      out.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", *t}});
    } else if (*type == "tool_use" && r == "assistant") {
      const OJson* id = field(b, "id");
      const OJson* name = field(b, "name");
      if (id && !id->is_string()) return need_string(q + ".id");
      if (!name || !name->is_string() || name->get<std::string>().empty())
        return bad_request("'" + q + ".name' must be a non-empty string", q + ".name");
      const OJson* input = field(b, "input");
      if (input && !input->is_object()) return wrong_type(q + ".input", "an object", *input);
      calls.push_back({{"id", id ? *id : OJson("")},
                       {"type", "function"},
                       {"function", {{"name", *name}, {"arguments", input ? *input : OJson::object()}}}});
    } else if (*type == "thinking" && r == "assistant") {
      const OJson* t = field(b, "thinking");
      if (!t || !t->is_string()) return need_string(q + ".thinking");
      reasoning += t->get<std::string>();
    } else if (*type == "redacted_thinking" && r == "assistant") {
      // Encrypted reasoning from another model: nothing this one can read.
    } else if (*type == "tool_result" || *type == "tool_use" || *type == "thinking" ||
               *type == "redacted_thinking") {
      return bad_request("'" + q + "': a " + *type + " block cannot be in a " + r + " message",
                         q + ".type");
    } else {
      return text_only(*type, q + ".type");
    }
  }
  if (r == "user") {
    if (has_text) out.push_back({{"role", "user"}, {"content", std::move(text)}});
    return {};
  }
  OJson a = {{"role", "assistant"}};
  a["content"] = std::move(text);
  if (!reasoning.empty()) a["reasoning_content"] = reasoning;
  if (!calls.empty()) a["tool_calls"] = std::move(calls);
  out.push_back(std::move(a));
  return {};
}

// tools → OpenAI function tools.
Err convert_tools(const OJson& tools, OJson& out) {
  if (!tools.is_array()) return wrong_type("tools", "an array", tools);
  for (size_t k = 0; k < tools.size(); ++k) {
    const OJson& t = tools[k];
    const std::string p = at("tools", k);
    if (!t.is_object()) return wrong_type(p, "an object", t);
    if (const OJson* type = field(t, "type"); type && *type != "custom")
      return bad_request("'" + p + ".type' " + type->dump() +
                             ": server tools are not supported; give client tools (name, "
                             "description, input_schema)",
                         p + ".type");
    auto fn = function_tool(t, p, "input_schema", /*schema_required=*/true);
    if (!fn) return fn.error();
    out.push_back(std::move(*fn));
  }
  return {};
}

Err parse_sampling(const OJson& body, bool count_tokens, SamplingOptions& s, bool& stream) {
  std::optional<int64_t> i;
  const int64_t int_max = std::numeric_limits<int32_t>::max();
  if (!count_tokens) {
    if (!field(body, "max_tokens")) return bad_request("'max_tokens' is required", "max_tokens");
    API_TRY(get_int(body, "max_tokens", i, 1, int_max));
    s.max_tokens = int(*i);
  }
  API_TRY(get_float(body, "temperature", s.temperature, 0.0, 2.0));
  API_TRY(get_float(body, "top_p", s.top_p, 0.0, 1.0, /*lo_open=*/true));
  i.reset();
  API_TRY(get_int(body, "top_k", i, 0, int_max));
  if (i) s.top_k = int(*i);
  if (const OJson* v = field(body, "stop_sequences")) {
    if (!v->is_array()) return wrong_type("stop_sequences", "a list of strings", *v);
    if (v->size() > 16)
      return bad_request("'stop_sequences' holds at most 16 strings", "stop_sequences");
    for (const auto& e : *v) {
      if (!e.is_string() || e.get<std::string>().empty())
        return bad_request("'stop_sequences' must hold non-empty strings", "stop_sequences");
      s.stop.push_back(e.get<std::string>());
    }
  }
  std::optional<bool> b;
  API_TRY(get_bool(body, "stream", b));
  stream = b.value_or(false);
  return {};
}

}  // namespace

ApiExpected<ChatRequest> parse_messages_request(std::string_view body, bool count_tokens) {
  auto j = parse_json_object(body);
  if (!j) return j.error();
  ChatRequest r;
  if (const OJson* m = field(*j, "model")) {
    if (!m->is_string()) return wrong_type("model", "a string", *m);
    r.model = m->get<std::string>();
  }
  r.messages = OJson::array();
  if (const OJson* s = field(*j, "system")) {
    auto text = system_text(*s);
    if (!text) return text.error();
    r.messages.push_back({{"role", "system"}, {"content", *text}});
  }
  const OJson* messages = field(*j, "messages");
  if (!messages) return bad_request("'messages' is required", "messages");
  if (!messages->is_array()) return wrong_type("messages", "an array", *messages);
  if (messages->empty()) return bad_request("'messages' must not be empty", "messages");
  for (size_t k = 0; k < messages->size(); ++k)
    API_TRY(convert_message((*messages)[k], at("messages", k), r.messages));

  OJson tools = OJson::array();
  if (const OJson* t = field(*j, "tools")) API_TRY(convert_tools(*t, tools));
  std::string choice = "auto";
  if (const OJson* c = field(*j, "tool_choice")) {
    if (!c->is_object()) return wrong_type("tool_choice", "an object", *c);
    const OJson* t = field(*c, "type");
    if (!t || !t->is_string()) return need_string("tool_choice.type");
    choice = t->get<std::string>();
    if (choice != "auto" && choice != "none" && choice != "any" && choice != "tool")
      return bad_request("'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"",
                         "tool_choice.type");
    if (choice == "any") r.output = OutputConstraint{OutputConstraint::Kind::tool_call, {}, "", "tool_choice"};
    if (choice == "tool") {
      const OJson* name = field(*c, "name");
      if (!name || !name->is_string() || name->get<std::string>().empty())
        return bad_request("'tool_choice.name' must be a non-empty string", "tool_choice.name");
      r.output = OutputConstraint{OutputConstraint::Kind::tool_call, {}, name->get<std::string>(),
                                  "tool_choice.name"};
    }
    API_TRY(check_forced_call(r.output, tools));
    std::optional<bool> single;
    API_TRY(get_bool(*c, "disable_parallel_tool_use", single));
    r.parallel_tool_calls = !single.value_or(false);
  }
  r.parse_tool_calls = !tools.empty() && choice != "none";
  r.tools = choice == "none" ? OJson::array() : std::move(tools);

  r.template_options.enable_thinking = false;
  // Past turns keep their reasoning (the template's empty block when thinking was off), so the
  // prompt of turn n + 1 extends turn n's prompt and reply byte for byte and the state cache
  // serves all of it: an agent's conversation costs one turn's new tokens.
  r.template_options.preserve_thinking = true;
  if (const OJson* th = field(*j, "thinking")) {
    if (!th->is_object()) return wrong_type("thinking", "an object", *th);
    const OJson* t = field(*th, "type");
    if (!t || !t->is_string()) return need_string("thinking.type");
    if (*t == "enabled" || *t == "adaptive") {
      r.template_options.enable_thinking = true;
    } else if (*t != "disabled") {
      return bad_request("'thinking.type' must be \"enabled\", \"adaptive\" or \"disabled\"",
                         "thinking.type");
    }
  }
  API_TRY(parse_sampling(*j, count_tokens, r.sampling, r.stream));
  if (count_tokens) r.stream = false;
  return r;
}

}  // namespace orchid::server
