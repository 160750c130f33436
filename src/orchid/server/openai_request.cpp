// Parsing and validation of the OpenAI request bodies (rules in openai_request.h). JSON
// exceptions stay inside this file: every entry point returns a value or an ApiError.
#include "orchid/server/openai_request.h"

#include <cmath>
#include <limits>

#include "orchid/server/json_fields.h"
#include "orchid/util/json_depth.h"

namespace orchid::server {
namespace {

// Fields orchid does not implement: refused unless given with their neutral value.
Err refuse_unsupported(const OJson& body) {
  if (const OJson* v = field(body, "best_of")) {
    if (!(v->is_number() && v->get<double>() == 1.0))
      return bad_request("'best_of' must be 1: orchid generates one choice per request", "best_of");
  }
  return {};
}

// logit_bias: {"token id": bias in [-100, 100]} (ids checked against the vocabulary later).
Err parse_logit_bias(const OJson& body, SamplingOptions& s) {
  const OJson* v = field(body, "logit_bias");
  if (!v) return {};
  if (!v->is_object()) return wrong_type("logit_bias", "an object", *v);
  if (v->size() > 1024) return bad_request("'logit_bias' holds more than 1024 tokens", "logit_bias");
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string p = "logit_bias." + it.key();
    const std::string& k = it.key();
    if (k.empty() || k.size() > 10 || k.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(k) > std::numeric_limits<int32_t>::max())
      return bad_request("'logit_bias' keys must be token ids", p);
    if (!it->is_number() || !std::isfinite(it->get<double>()) || std::fabs(it->get<double>()) > 100)
      return bad_request("'" + p + "' must be a number in [-100, 100]", p);
    s.logit_bias.emplace_back(int32_t(std::stoll(k)), it->get<float>());
  }
  return {};
}

// Sampling, stopping, streaming and logprob fields shared by both generation endpoints.
// chat: logprobs is a boolean with top_logprobs 0..20; completions: logprobs is 0..5.
Err parse_sampling(const OJson& body, bool chat, SamplingOptions& s, bool& stream,
                   bool& include_usage) {
  API_TRY(refuse_unsupported(body));
  API_TRY(parse_logit_bias(body, s));
  std::optional<int64_t> i;
  API_TRY(get_int(body, "n", i, 1, 16));
  if (i) s.n = int(*i);
  i.reset();
  const int64_t int_max = std::numeric_limits<int32_t>::max();
  API_TRY(get_int(body, "max_tokens", i, 1, int_max));
  if (i) s.max_tokens = int(*i);
  i.reset();
  API_TRY(get_int(body, "max_completion_tokens", i, 1, int_max));
  if (i) s.max_tokens = int(*i);
  API_TRY(get_float(body, "temperature", s.temperature, 0.0, 2.0));
  API_TRY(get_float(body, "top_p", s.top_p, 0.0, 1.0, /*lo_open=*/true));
  API_TRY(get_float(body, "min_p", s.min_p, 0.0, 1.0));
  i.reset();
  API_TRY(get_int(body, "top_k", i, -1, int_max));
  if (i) s.top_k = int(*i);
  API_TRY(get_float(body, "presence_penalty", s.presence_penalty, -2.0, 2.0));
  API_TRY(get_float(body, "frequency_penalty", s.frequency_penalty, -2.0, 2.0));
  API_TRY(get_float(body, "repetition_penalty", s.repetition_penalty, 0.0, 100.0, true));
  i.reset();
  API_TRY(get_int(body, "seed", i, std::numeric_limits<int64_t>::min(),
                  std::numeric_limits<int64_t>::max()));
  if (i) s.seed = uint64_t(*i);

  if (const OJson* v = field(body, "stop")) {
    if (v->is_string()) {
      s.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > 16) return bad_request("'stop' holds at most 16 strings", "stop");
      for (const auto& e : *v) {
        if (!e.is_string()) return wrong_type("stop", "a string or a list of strings", *v);
        s.stop.push_back(e.get<std::string>());
      }
    } else {
      return wrong_type("stop", "a string or a list of strings", *v);
    }
    for (const auto& str : s.stop)
      if (str.empty()) return bad_request("'stop' strings must not be empty", "stop");
  }

  if (chat) {
    std::optional<bool> lp;
    API_TRY(get_bool(body, "logprobs", lp));
    i.reset();
    API_TRY(get_int(body, "top_logprobs", i, 0, 20));
    if (i && !lp.value_or(false))
      return bad_request("'top_logprobs' requires 'logprobs': true", "top_logprobs");
    if (lp.value_or(false)) s.top_logprobs = int(i.value_or(0));
  } else {
    i.reset();
    API_TRY(get_int(body, "logprobs", i, 0, 5));
    if (i) s.top_logprobs = int(*i);
  }

  std::optional<bool> b;
  API_TRY(get_bool(body, "stream", b));
  stream = b.value_or(false);
  if (const OJson* v = field(body, "stream_options")) {
    if (!v->is_object()) return wrong_type("stream_options", "an object", *v);
    b.reset();
    if (auto e = get_bool(*v, "include_usage", b)) {
      e->param = "stream_options.include_usage";
      return e;
    }
    include_usage = b.value_or(false);
  }
  if (const OJson* v = field(body, "model"); v && !v->is_string())
    return wrong_type("model", "a string", *v);
  return {};
}

// A message content: a string, or a list of text parts ({"type": "text", "text": ...}).
Err check_content(const OJson& content, const std::string& param) {
  if (content.is_string()) return {};
  if (!content.is_array()) return wrong_type(param, "a string or a list of text parts", content);
  for (size_t k = 0; k < content.size(); ++k) {
    const OJson& part = content[k];
    const std::string p = param + "[" + std::to_string(k) + "]";
    if (!part.is_object()) return wrong_type(p, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string())
      return bad_request("'" + p + ".type' must be a string", p + ".type");
    if (*type != "text")
      return bad_request(
          "content parts of type " + type->dump() + " are not supported: orchid serves text only",
          p + ".type");
    auto text = part.find("text");
    if (text == part.end() || !text->is_string())
      return bad_request("'" + p + ".text' must be a string", p + ".text");
  }
  return {};
}

Err check_tool_calls(const OJson& calls, const std::string& param) {
  if (!calls.is_array()) return wrong_type(param, "an array", calls);
  for (size_t k = 0; k < calls.size(); ++k) {
    const OJson& c = calls[k];
    const std::string p = param + "[" + std::to_string(k) + "]";
    if (!c.is_object()) return wrong_type(p, "an object", c);
    if (const OJson* id = field(c, "id"); id && !id->is_string())
      return wrong_type(p + ".id", "a string", *id);
    const OJson* fn = field(c, "function");
    if (!fn || !fn->is_object())
      return bad_request("'" + p + ".function' must be an object", p + ".function");
    const OJson* name = field(*fn, "name");
    if (!name || !name->is_string() || name->get<std::string>().empty())
      return bad_request("'" + p + ".function.name' must be a non-empty string",
                         p + ".function.name");
    const OJson* args = field(*fn, "arguments");
    if (args && args->is_string()) {
      if (json_too_deep(args->get_ref<const std::string&>()))
        return too_deep(p + ".function.arguments");
      OJson parsed = OJson::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (!parsed.is_object())
        return bad_request("'" + p + ".function.arguments' must hold a JSON object",
                           p + ".function.arguments");
    } else if (args && !args->is_object()) {
      return wrong_type(p + ".function.arguments", "a JSON string or an object", *args);
    }
  }
  return {};
}

// Validates messages in place: every message an object with a known role and a usable content.
Err check_messages(OJson& messages) {
  if (messages.is_null()) return bad_request("'messages' is required", "messages");
  if (!messages.is_array()) return wrong_type("messages", "an array", messages);
  if (messages.empty()) return bad_request("'messages' must not be empty", "messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    OJson& m = messages[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return wrong_type(p, "an object", m);
    const OJson* role = field(m, "role");
    if (!role || !role->is_string())
      return bad_request("'" + p + ".role' must be a string", p + ".role");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      return bad_request(
          "'" + p + ".role' must be one of system, developer, user, assistant, tool; not '" + r +
              "'",
          p + ".role");
    const OJson* content = field(m, "content");
    if (content) {
      API_TRY(check_content(*content, p + ".content"));
    } else if (r != "assistant") {
      return bad_request("'" + p + ".content' is required for role " + r, p + ".content");
    }
    if (const OJson* name = field(m, "name"); name && !name->is_string())
      return wrong_type(p + ".name", "a string", *name);
    if (const OJson* id = field(m, "tool_call_id"); id && !id->is_string())
      return wrong_type(p + ".tool_call_id", "a string", *id);
    if (r == "assistant") {
      if (const OJson* calls = field(m, "tool_calls"))
        API_TRY(check_tool_calls(*calls, p + ".tool_calls"));
      const OJson* rc = field(m, "reasoning_content");
      if (rc && !rc->is_string()) return wrong_type(p + ".reasoning_content", "a string", *rc);
      // Clients that echo the reply back as received send "reasoning" (orchid sends both).
      const OJson* reasoning = field(m, "reasoning");
      if (!rc && reasoning && reasoning->is_string()) m["reasoning_content"] = *reasoning;
    }
  }
  return {};
}

Err check_tools(const OJson& tools) {
  if (!tools.is_array()) return wrong_type("tools", "an array", tools);
  for (size_t k = 0; k < tools.size(); ++k) {
    const OJson& t = tools[k];
    const std::string p = "tools[" + std::to_string(k) + "]";
    if (!t.is_object()) return wrong_type(p, "an object", t);
    const OJson* type = field(t, "type");
    if (!type || *type != "function")
      return bad_request("'" + p + ".type' must be \"function\"", p + ".type");
    const OJson* fn = field(t, "function");
    if (!fn || !fn->is_object())
      return bad_request("'" + p + ".function' must be an object", p + ".function");
    const OJson* name = field(*fn, "name");
    if (!name || !name->is_string() || name->get<std::string>().empty())
      return bad_request("'" + p + ".function.name' must be a non-empty string",
                         p + ".function.name");
    if (const OJson* d = field(*fn, "description"); d && !d->is_string())
      return wrong_type(p + ".function.description", "a string", *d);
    if (const OJson* params = field(*fn, "parameters"); params && !params->is_object())
      return wrong_type(p + ".function.parameters", "an object", *params);
  }
  return {};
}

// chat_template_kwargs and reasoning_effort → template options. Explicit kwargs win over
// reasoning_effort "none".
Err parse_template_switches(const OJson& body, ChatTemplateOptions& opts) {
  if (const OJson* e = field(body, "reasoning_effort")) {
    if (!e->is_string()) return wrong_type("reasoning_effort", "a string", *e);
    if (*e == "none") opts.enable_thinking = false;
  }
  if (const OJson* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) return wrong_type("chat_template_kwargs", "an object", *kw);
    for (auto it = kw->begin(); it != kw->end(); ++it) {
      const std::string p = "chat_template_kwargs." + it.key();
      if (it.key() == "enable_thinking" || it.key() == "preserve_thinking") {
        if (it->is_null()) continue;
        if (!it->is_boolean()) return wrong_type(p, "a boolean", *it);
        (it.key() == "enable_thinking" ? opts.enable_thinking : opts.preserve_thinking) =
            it->get<bool>();
      } else if (it.key() == "add_generation_prompt") {
        return bad_request("'" + p + "' is set by the server", p);
      } else {
        opts.extra_kwargs[it.key()] = *it;
      }
    }
  }
  return {};
}

// messages + tools + template switches, shared by chat, /tokenize and /apply-template.
Err parse_template_input(OJson& body, TemplateRequest& out) {
  auto m = body.find("messages");
  out.messages = m == body.end() ? OJson() : std::move(*m);
  API_TRY(check_messages(out.messages));
  out.tools = OJson::array();
  if (const OJson* t = field(body, "tools")) {
    API_TRY(check_tools(*t));
    out.tools = *t;
  }
  return parse_template_switches(body, out.options);
}

}  // namespace

std::string error_body(const ApiError& e) {
  nlohmann::ordered_json j = {{"error",
                               {{"message", e.message},
                                {"type", e.type},
                                {"param", e.param.empty() ? OJson() : OJson(e.param)},
                                {"code", e.code.empty() ? OJson() : OJson(e.code)}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiExpected<OJson> parse_json_object(std::string_view body) {
  // Measured before parsing: every later walk over the value (copies, the template's tojson,
  // the answer's dump) recurses once per level.
  if (json_too_deep(body)) return too_deep("");
  OJson j;
  try {
    j = OJson::parse(body);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at ..." → "parse error at ...".
    if (auto close = what.find("] ");
        what.rfind("[json.exception", 0) == 0 && close != std::string::npos)
      what = what.substr(close + 2);
    return bad_request("the body is not valid JSON: " + what);
  }
  if (!j.is_object())
    return bad_request(std::string("the body must be a JSON object, not ") + type_name(j));
  return j;
}

ApiExpected<ChatRequest> parse_chat_request(std::string_view body) {
  auto j = parse_json_object(body);
  if (!j) return j.error();
  ChatRequest r;
  TemplateRequest t;
  API_TRY(parse_template_input(*j, t));
  r.messages = std::move(t.messages);
  r.template_options = std::move(t.options);
  API_TRY(parse_sampling(*j, /*chat=*/true, r.sampling, r.stream, r.include_usage));
  if (const OJson* m = field(*j, "model")) r.model = m->get<std::string>();

  if (const OJson* rf = field(*j, "response_format")) {
    auto f = parse_response_format(*rf);
    if (!f) return f.error();
    r.output = std::move(*f);
  }
  std::string choice = "auto";
  if (const OJson* c = field(*j, "tool_choice")) {
    OutputConstraint forced;
    API_TRY(parse_tool_choice(*c, /*responses_shape=*/false, choice, forced));
    API_TRY(check_forced_call(forced, t.tools));
    if (forced.kind != OutputConstraint::Kind::none) r.output = std::move(forced);
  }
  std::optional<bool> parallel;
  API_TRY(get_bool(*j, "parallel_tool_calls", parallel));
  r.parallel_tool_calls = parallel.value_or(true);
  // tool_choice "none": the tools are left out of the prompt and calls are not parsed.
  r.parse_tool_calls = !t.tools.empty() && choice != "none";
  r.tools = choice == "none" ? OJson::array() : std::move(t.tools);
  return r;
}

ApiExpected<CompletionRequest> parse_completion_request(std::string_view body) {
  auto j = parse_json_object(body);
  if (!j) return j.error();
  CompletionRequest r;
  API_TRY(parse_sampling(*j, /*chat=*/false, r.sampling, r.stream, r.include_usage));
  if (const OJson* rf = field(*j, "response_format"); rf && !(rf->is_object() && rf->value("type", "") == "text"))
    return bad_request("'response_format' is for /v1/chat/completions; completions take text only",
                       "response_format");
  if (const OJson* m = field(*j, "model")) r.model = m->get<std::string>();
  if (const OJson* e = field(*j, "echo"); e && !(e->is_boolean() && !e->get<bool>()))
    return bad_request("'echo' is not supported", "echo");
  if (const OJson* s = field(*j, "suffix"); s && !(s->is_string() && s->get<std::string>().empty()))
    return bad_request("'suffix' is not supported", "suffix");

  const OJson* p = field(*j, "prompt");
  if (!p) return bad_request("'prompt' is required", "prompt");
  auto ids_of = [&](const OJson& arr) -> ApiExpected<std::vector<int32_t>> {
    std::vector<int32_t> ids;
    for (const auto& e : arr) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 ||
          e.get<int64_t>() > std::numeric_limits<int32_t>::max())
        return bad_request("'prompt' token ids must be non-negative integers", "prompt");
      ids.push_back(e.get<int32_t>());
    }
    return ids;
  };
  const OJson* one = p;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array()))
    one = &(*p)[0];
  if (one->is_string()) {
    r.prompt = one->get<std::string>();
  } else if (one->is_array() && !one->empty() && (*one)[0].is_number()) {
    auto ids = ids_of(*one);
    if (!ids) return ids.error();
    r.prompt_ids = std::move(*ids);
  } else if (one->is_array()) {
    return bad_request(
        "'prompt' must be one string or one list of token ids: batches are not supported",
        "prompt");
  } else {
    return wrong_type("prompt", "a string", *one);
  }
  return r;
}

ApiExpected<TemplateRequest> parse_template_request(std::string_view body) {
  auto j = parse_json_object(body);
  if (!j) return j.error();
  TemplateRequest t;
  API_TRY(parse_template_input(*j, t));
  std::optional<bool> agp;
  API_TRY(get_bool(*j, "add_generation_prompt", agp));
  t.options.add_generation_prompt = agp.value_or(true);
  return t;
}

ApiExpected<TokenizeRequest> parse_tokenize_request(std::string_view body) {
  auto j = parse_json_object(body);
  if (!j) return j.error();
  TokenizeRequest r;
  const char* key = j->contains("prompt") ? "prompt" : j->contains("text") ? "text" : nullptr;
  if (key && j->contains("messages"))
    return bad_request("give either '" + std::string(key) + "' or 'messages', not both", key);
  if (key) {
    const OJson& v = (*j)[key];
    if (!v.is_string()) return wrong_type(key, "a string", v);
    r.text = v.get<std::string>();
    return r;
  }
  if (!j->contains("messages")) return bad_request("'prompt' or 'messages' is required", "prompt");
  API_TRY(parse_template_input(*j, r.chat));
  std::optional<bool> agp;
  API_TRY(get_bool(*j, "add_generation_prompt", agp));
  r.chat.options.add_generation_prompt = agp.value_or(true);
  return r;
}

ApiExpected<std::vector<int32_t>> parse_detokenize_request(std::string_view body) {
  auto j = parse_json_object(body);
  if (!j) return j.error();
  const OJson* t = field(*j, "tokens");
  if (!t) return bad_request("'tokens' is required", "tokens");
  if (!t->is_array()) return wrong_type("tokens", "an array of token ids", *t);
  std::vector<int32_t> ids;
  for (const auto& e : *t) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 ||
        e.get<int64_t>() > std::numeric_limits<int32_t>::max())
      return bad_request("'tokens' must hold non-negative integer token ids, not " + e.dump(),
                         "tokens");
    ids.push_back(e.get<int32_t>());
  }
  return ids;
}

}  // namespace orchid::server
