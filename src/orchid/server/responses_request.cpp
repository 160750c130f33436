// Parsing and validation of Responses API bodies (rules in responses_request.h). JSON
// exceptions stay inside this file: every entry point returns a value or an ApiError.
#include "orchid/server/responses_request.h"

#include <limits>

#include "orchid/server/json_fields.h"

namespace orchid::server {
namespace {

// A message's content: a string, or input_text / output_text parts joined.
ApiExpected<std::string> content_text(const OJson& content, const std::string& p) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return wrong_type(p, "a string or a list of content parts", content);
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const OJson& part = content[k];
    const std::string q = at(p, k);
    if (!part.is_object()) return wrong_type(q, "an object", part);
    const OJson* type = field(part, "type");
    if (!type || !type->is_string()) return need_string(q + ".type");
    if (*type != "input_text" && *type != "output_text" && *type != "text" &&
        *type != "summary_text" && *type != "reasoning_text")
      return bad_request("content parts of type " + type->dump() +
                             " are not supported: orchid serves text only",
                         q + ".type");
    const OJson* t = field(part, "text");
    if (!t || !t->is_string()) return need_string(q + ".text");
    text += t->get<std::string>();
  }
  return text;
}

// The assistant turn items are being added to (the last message, if it is one and has no
// tool result after it), or a new one.
OJson& assistant_turn(OJson& out) {
  if (out.empty() || out.back()["role"] != "assistant") {
    out.push_back({{"role", "assistant"}, {"content", ""}});
  }
  return out.back();
}

Err convert_item(const OJson& item, const std::string& p, OJson& out, std::string& reasoning) {
  if (!item.is_object()) return wrong_type(p, "an object", item);
  std::string type = "message";
  if (const OJson* t = field(item, "type")) {
    if (!t->is_string()) return need_string(p + ".type");
    type = t->get<std::string>();
  }
  if (type == "message") {
    const OJson* role = field(item, "role");
    if (!role || !role->is_string()) return need_string(p + ".role");
    std::string r = role->get<std::string>();
    if (r != "user" && r != "assistant" && r != "system" && r != "developer")
      return bad_request("'" + p + ".role' must be user, assistant, system or developer, not \"" + r + "\"",
                         p + ".role");
    const OJson* content = field(item, "content");
    if (!content) return bad_request("'" + p + ".content' is required", p + ".content");
    auto text = content_text(*content, p + ".content");
    if (!text) return text.error();
    if (r == "developer") r = "system";  // placed by the server (place_system_messages)
    if (r == "assistant") {
      OJson& a = assistant_turn(out);
      a["content"] = a["content"].get<std::string>() + *text;
      if (!reasoning.empty()) a["reasoning_content"] = std::exchange(reasoning, {});
    } else {
      out.push_back({{"role", r}, {"content", *text}});
    }
    return {};
  }
  if (type == "function_call") {
    const OJson* name = field(item, "name");
    if (!name || !name->is_string() || name->get<std::string>().empty())
      return bad_request("'" + p + ".name' must be a non-empty string", p + ".name");
    const OJson* id = field(item, "call_id");
    if (!id || !id->is_string()) return need_string(p + ".call_id");
    const OJson* args = field(item, "arguments");
    if (!args || !args->is_string()) return need_string(p + ".arguments");
    OJson parsed = OJson::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object())
      return bad_request("'" + p + ".arguments' must hold a JSON object", p + ".arguments");
    OJson& a = assistant_turn(out);
    if (!reasoning.empty()) a["reasoning_content"] = std::exchange(reasoning, {});
    if (!a.contains("tool_calls")) a["tool_calls"] = OJson::array();
    a["tool_calls"].push_back(
        {{"id", *id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", parsed}}}});
    return {};
  }
  if (type == "function_call_output") {
    const OJson* id = field(item, "call_id");
    if (!id || !id->is_string()) return need_string(p + ".call_id");
    const OJson* output = field(item, "output");
    if (!output) return bad_request("'" + p + ".output' is required", p + ".output");
    auto text = content_text(*output, p + ".output");
    if (!text) return text.error();
    out.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", *text}});
    return {};
  }
  if (type == "reasoning") {
    // Its summary (or content) is this model's own reasoning, said again in the next turn.
    for (const char* key : {"summary", "content"}) {
      if (const OJson* parts = field(item, key)) {
        auto text = content_text(*parts, p + "." + key);
        if (!text) return text.error();
        reasoning += *text;
        if (!text->empty()) break;
      }
    }
    return {};
  }
  return bad_request("input items of type \"" + type + "\" are not supported", p + ".type");
}

Err convert_tools(const OJson& tools, OJson& out) {
  if (!tools.is_array()) return wrong_type("tools", "an array", tools);
  for (size_t k = 0; k < tools.size(); ++k) {
    const OJson& t = tools[k];
    const std::string p = at("tools", k);
    if (!t.is_object()) return wrong_type(p, "an object", t);
    const OJson* type = field(t, "type");
    if (!type || !type->is_string()) return need_string(p + ".type");
    // Built-in tools (web_search, file_search, ...) and namespaces run elsewhere or nowhere here:
    // clients such as Codex send them with every request, so they are left out of the prompt.
    if (*type != "function") continue;
    auto fn = function_tool(t, p, "parameters", /*schema_required=*/false);
    if (!fn) return fn.error();
    out.push_back(std::move(*fn));
  }
  return {};
}

}  // namespace

ApiExpected<ResponsesRequest> parse_responses_request(std::string_view body) {
  auto j = parse_json_object(body);
  if (!j) return j.error();
  ResponsesRequest r;
  ChatRequest& c = r.chat;
  if (const OJson* m = field(*j, "model")) {
    if (!m->is_string()) return wrong_type("model", "a string", *m);
    c.model = m->get<std::string>();
  }
  if (const OJson* v = field(*j, "instructions")) {
    if (!v->is_string()) return wrong_type("instructions", "a string", *v);
    r.instructions = v->get<std::string>();
  }
  if (const OJson* v = field(*j, "previous_response_id")) {
    if (!v->is_string()) return wrong_type("previous_response_id", "a string", *v);
    r.previous_response_id = v->get<std::string>();
  }
  std::optional<bool> b;
  API_TRY(get_bool(*j, "store", b));
  r.store = b.value_or(true);

  c.messages = OJson::array();
  const OJson* input = field(*j, "input");
  if (!input) return bad_request("'input' is required", "input");
  if (input->is_string()) {
    c.messages.push_back({{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    std::string reasoning;
    for (size_t k = 0; k < input->size(); ++k)
      API_TRY(convert_item((*input)[k], at("input", k), c.messages, reasoning));
  } else {
    return wrong_type("input", "a string or a list of items", *input);
  }

  OJson tools = OJson::array();
  if (const OJson* t = field(*j, "tools")) API_TRY(convert_tools(*t, tools));
  std::string choice = "auto";
  if (const OJson* t = field(*j, "tool_choice")) {
    OutputConstraint forced;
    API_TRY(parse_tool_choice(*t, /*responses_shape=*/true, choice, forced));
    API_TRY(check_forced_call(forced, tools));
    if (forced.kind != OutputConstraint::Kind::none) c.output = std::move(forced);
  }
  std::optional<bool> parallel;
  API_TRY(get_bool(*j, "parallel_tool_calls", parallel));
  c.parallel_tool_calls = parallel.value_or(true);
  c.parse_tool_calls = !tools.empty() && choice != "none";
  c.tools = choice == "none" ? OJson::array() : std::move(tools);

  c.template_options.preserve_thinking = true;
  if (const OJson* re = field(*j, "reasoning")) {
    if (!re->is_object()) return wrong_type("reasoning", "an object", *re);
    if (const OJson* e = field(*re, "effort")) {
      if (!e->is_string()) return wrong_type("reasoning.effort", "a string", *e);
      if (*e == "none") c.template_options.enable_thinking = false;
    }
  }
  if (const OJson* t = field(*j, "text")) {
    if (!t->is_object()) return wrong_type("text", "an object", *t);
    if (const OJson* f = field(*t, "format")) {
      auto fmt = parse_text_format(*f);
      if (!fmt) return fmt.error();
      // A forced tool call wins: its grammar leaves no room for a formatted text answer.
      if (c.output.kind == OutputConstraint::Kind::none) c.output = std::move(*fmt);
    }
  }

  std::optional<int64_t> i;
  API_TRY(get_int(*j, "max_output_tokens", i, 1, std::numeric_limits<int32_t>::max()));
  if (i) c.sampling.max_tokens = int(*i);
  API_TRY(get_float(*j, "temperature", c.sampling.temperature, 0.0, 2.0));
  API_TRY(get_float(*j, "top_p", c.sampling.top_p, 0.0, 1.0, /*lo_open=*/true));
  b.reset();
  API_TRY(get_bool(*j, "stream", b));
  c.stream = b.value_or(false);

  for (const char* key : {"instructions", "tools", "tool_choice", "temperature", "top_p",
                          "max_output_tokens", "reasoning", "metadata", "parallel_tool_calls"})
    if (const OJson* v = field(*j, key)) r.echo[key] = *v;
  return r;
}

}  // namespace orchid::server
