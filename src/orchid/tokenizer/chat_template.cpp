// Chat template loading, message normalisation and rendering (see chat_template.h).
#include "orchid/tokenizer/chat_template.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>

#include "orchid/util/json_depth.h"

namespace orchid {
namespace {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

// Qwen/Qwen3.6-35B-A3B chat_template.jinja, byte for byte (7,764 bytes, no final newline).
constexpr std::string_view kBuiltinSource =
#include "orchid/tokenizer/builtin/qwen3.6-35b-a3b.jinja.inc"
    ;
constexpr const char* kBuiltinOrigin = "built-in Qwen3.6 template";

void warn(const std::string& message) {
  std::fprintf(stderr, "orchid: warning: %s\n", message.c_str());
}

bool read_text(const fs::path& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return !f.bad();
}

// bos_token / eos_token in tokenizer_config.json: a string or an AddedToken {"content": ...}.
std::string token_text(const OJson& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return "";
}

struct Found {
  std::string source, origin;
  std::string problem;  // non-empty: no usable template text, and why
  std::string bos_token, eos_token;
};

// The template text of the model in `dir`, in transformers' order of precedence.
Found find_template(const fs::path& dir) {
  Found f;
  const fs::path config_path = dir / "tokenizer_config.json";
  OJson config;
  std::string text;
  if (read_text(config_path, text)) {
    config = OJson::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_object()) {
      f.bos_token = token_text(config, "bos_token");
      f.eos_token = token_text(config, "eos_token");
    }
  }
  std::error_code ec;
  if (fs::exists(dir / "chat_template.jinja", ec)) {
    f.origin = (dir / "chat_template.jinja").string();
    if (!read_text(dir / "chat_template.jinja", f.source)) f.problem = "cannot read " + f.origin;
    return f;
  }
  if (fs::exists(dir / "chat_template.json", ec)) {
    f.origin = (dir / "chat_template.json").string();
    std::string json_text;
    OJson j;
    if (read_text(dir / "chat_template.json", json_text))
      j = OJson::parse(json_text, nullptr, false);
    if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string()) {
      f.source = j["chat_template"].get<std::string>();
    } else {
      f.problem = f.origin + " has no \"chat_template\" string";
    }
    return f;
  }
  f.origin = config_path.string();
  if (!fs::exists(config_path, ec)) {
    f.problem = "no chat template in " + dir.string() +
                " (no chat_template.jinja, chat_template.json or tokenizer_config.json)";
    return f;
  }
  if (!config.is_object()) {
    f.problem = f.origin + " is not a JSON object";
    return f;
  }
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    f.problem = "no chat template in " + dir.string() +
                " (no chat_template.jinja and no \"chat_template\" in tokenizer_config.json)";
  } else if (it->is_string()) {
    f.source = it->get<std::string>();
  } else if (it->is_array()) {
    // Named templates [{"name": ..., "template": ...}]: apply_chat_template uses "default".
    for (const OJson& t : *it) {
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
          t["template"].is_string()) {
        f.source = t["template"].get<std::string>();
        f.origin += " (\"default\")";
        return f;
      }
    }
    f.problem = f.origin + " has named chat templates but none called \"default\"";
  } else {
    f.problem = f.origin + ": \"chat_template\" is neither a string nor a list";
  }
  return f;
}

// OpenAI-form messages → what the template expects.
Expected<OJson> normalise(const OJson& messages) {
  if (!messages.is_array()) return err("chat template: messages must be a JSON array");
  OJson out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    OJson& m = out[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return err("chat template: ", where, " is not a JSON object");
    // OpenAI's "developer" is its newer name for "system". The official Qwen templates raise
    // "Unexpected message role." on it and the Unsloth one treats both alike, so renaming it
    // makes it work everywhere without changing what any of them renders otherwise.
    if (m.contains("role") && m["role"] == "developer") m["role"] = "system";
    if (!m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    OJson& calls = m["tool_calls"];
    for (size_t k = 0; k < calls.size(); ++k) {
      OJson& call = calls[k];
      if (!call.is_object()) continue;
      OJson* args = nullptr;
      if (call.contains("function") && call["function"].is_object() &&
          call["function"].contains("arguments")) {
        args = &call["function"]["arguments"];
      } else if (call.contains("arguments")) {
        args = &call["arguments"];
      }
      if (!args || !args->is_string()) continue;
      // OpenAI clients send arguments as a JSON string; the templates iterate
      // `arguments|items`, which needs the object (transformers would raise here; OpenAI
      // servers such as vLLM parse the string first, and so do we). "" means no arguments.
      const std::string& text = args->get_ref<const std::string&>();
      if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
        *args = OJson::object();
        continue;
      }
      if (json_too_deep(text))
        return err("chat template: ", where, ".tool_calls[", std::to_string(k),
                   "] arguments nest more than ", std::to_string(kMaxJsonDepth), " levels deep");
      OJson parsed = OJson::parse(text, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded())
        return err("chat template: ", where, ".tool_calls[", std::to_string(k),
                   "] arguments are not valid JSON: ", text.substr(0, 200));
      *args = std::move(parsed);
    }
  }
  return out;
}

}  // namespace

Expected<ChatTemplate> ChatTemplate::from_source(std::string source) {
  auto tpl = jinja::Template::parse(source, "chat template");
  if (!tpl) return tpl.error();
  return ChatTemplate(std::move(*tpl), std::move(source), "chat template");
}

ChatTemplate ChatTemplate::builtin() {
  auto tpl = jinja::Template::parse(kBuiltinSource, kBuiltinOrigin);
  // The embedded text is fixed and covered by tests; it cannot fail to parse.
  return ChatTemplate(std::move(*tpl), std::string(kBuiltinSource), kBuiltinOrigin);
}

Expected<ChatTemplate> ChatTemplate::load(const std::string& model_dir) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec))
    return err("model directory ", model_dir, " does not exist or is not a directory");
  Found f = find_template(model_dir);
  if (f.problem.empty()) {
    // Render errors reach clients: they name the model's file, never where the server keeps
    // it (the log lines below, for the operator, give the whole path).
    auto tpl = jinja::Template::parse(f.source, fs::path(f.origin).filename().string());
    if (tpl) {
      ChatTemplate t(std::move(*tpl), std::move(f.source), f.origin);
      t.bos_token_ = f.bos_token;
      t.eos_token_ = f.eos_token;
      const std::string unsupported = t.probe();
      if (unsupported.empty()) return t;
      f.problem = "the chat template in " + f.origin + " cannot be rendered by orchid (" +
                  unsupported + ")";
    } else {
      f.problem = "the chat template in " + f.origin + " is not supported (" + tpl.message() + ")";
    }
  }
  warn(f.problem + "; using the built-in Qwen3.6 template");
  ChatTemplate t = builtin();
  t.fallback_ = true;
  t.bos_token_ = f.bos_token;
  t.eos_token_ = f.eos_token;
  return t;
}

std::string ChatTemplate::probe() const {
  // A plain chat, and one with every message kind and tools: a template that needs a construct
  // orchid lacks fails here rather than on some later request. Any other failure (its own
  // raise_exception, a TypeError) is the template's behaviour, the same under transformers.
  static const OJson kPlain = OJson::parse(R"([{"role": "user", "content": "Hello"}])");
  static const OJson kFull = OJson::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
      {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
      {"role": "assistant", "content": "It is sunny."},
      {"role": "user", "content": "Thanks"}])");
  static const OJson kTools = OJson::parse(R"([{"type": "function", "function": {
      "name": "get_weather", "description": "Weather of a city.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  for (const OJson* messages : {&kPlain, &kFull}) {
    jinja::RenderError why;
    auto text = render_with(*messages, messages == &kFull ? kTools : OJson(), {}, &why);
    if (!text && why.kind == jinja::ErrorKind::unsupported) return text.message();
  }
  return "";
}

Expected<std::string> ChatTemplate::render(const OJson& messages, const OJson& tools,
                                           const ChatTemplateOptions& opts) const {
  return render_with(messages, tools, opts, nullptr);
}

Expected<std::string> ChatTemplate::render_with(const OJson& messages, const OJson& tools,
                                                const ChatTemplateOptions& opts,
                                                jinja::RenderError* why) const {
  auto msgs = normalise(messages);
  if (!msgs) return msgs.error();
  if (!tools.is_null() && !tools.is_array())
    return err("chat template: tools must be a JSON array");
  if (!opts.extra_kwargs.is_object())
    return err("chat template: extra template arguments must be a JSON object");
  // The variables transformers passes: messages, tools (None when there are none),
  // documents=None, add_generation_prompt, the tokenizer's special tokens, and **kwargs.
  OJson vars = opts.extra_kwargs;
  if (!bos_token_.empty() && !vars.contains("bos_token")) vars["bos_token"] = bos_token_;
  if (!eos_token_.empty() && !vars.contains("eos_token")) vars["eos_token"] = eos_token_;
  vars["messages"] = std::move(*msgs);
  vars["tools"] = tools.is_array() && !tools.empty() ? tools : OJson();
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = opts.add_generation_prompt;
  if (opts.enable_thinking) vars["enable_thinking"] = *opts.enable_thinking;
  if (opts.preserve_thinking) vars["preserve_thinking"] = *opts.preserve_thinking;
  auto text = tpl_.render(vars, why);
  if (!text) return err("chat template: ", text.message());
  return text;
}

}  // namespace orchid
