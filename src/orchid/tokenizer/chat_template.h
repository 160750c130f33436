// The model's chat template: OpenAI-style messages (+ tools) → the prompt text, exactly as
// transformers' apply_chat_template renders it with Python Jinja2 (proved byte-identical by
// tests/tokenizer/template_compare on the Qwen3.5 / Qwen3.6 / Unsloth templates).
//
// Loading (model_dir): chat_template.jinja, else chat_template.json {"chat_template": ...},
// else tokenizer_config.json "chat_template" (a string, or a list of {name, template} of which
// "default" is used). A template that is missing, does not parse, or needs a construct orchid
// does not implement on either of two probe conversations is reported once on stderr
// ("orchid: warning: ...") and replaced by the built-in Qwen3.6 template.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "orchid/tokenizer/jinja/template.h"
#include "orchid/util/status.h"

namespace orchid {

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;    // unset: the template's default (thinking on)
  std::optional<bool> preserve_thinking;  // Qwen3.6: keep <think> in every past turn
  // Further template variables (like apply_chat_template's **kwargs); the fields above win.
  nlohmann::ordered_json extra_kwargs = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // Parses `source`; a syntax error (or a construct outside orchid's Jinja subset) is an error.
  static Expected<ChatTemplate> from_source(std::string source);
  // The template of the model in `model_dir` (see the file comment). Errors only when
  // model_dir is not a directory; anything wrong with the template itself falls back.
  static Expected<ChatTemplate> load(const std::string& model_dir);
  // The embedded Qwen3.6-35B-A3B template.
  static ChatTemplate builtin();

  // messages: [{role, content, reasoning_content?, tool_calls?, ...}, ...] in OpenAI form;
  // tools: [] / null for none, else the OpenAI tool list. Before rendering: role "developer"
  // becomes "system", and tool-call arguments given as a JSON string are parsed into an object.
  Expected<std::string> render(const nlohmann::ordered_json& messages,
                               const nlohmann::ordered_json& tools,
                               const ChatTemplateOptions& opts) const;

  bool is_builtin_fallback() const { return fallback_; }
  const std::string& source() const { return source_; }
  // Where the template came from: a file path or "built-in Qwen3.6 template".
  const std::string& origin() const { return origin_; }

 private:
  // The message of a "not supported" failure on two probe conversations, "" when none.
  std::string probe() const;
  Expected<std::string> render_with(const nlohmann::ordered_json& messages,
                                    const nlohmann::ordered_json& tools,
                                    const ChatTemplateOptions& opts, jinja::RenderError* why) const;

  ChatTemplate(jinja::Template tpl, std::string source, std::string origin)
      : tpl_(std::move(tpl)), source_(std::move(source)), origin_(std::move(origin)) {}

  jinja::Template tpl_;
  std::string source_;
  std::string origin_;
  bool fallback_ = false;
  std::string bos_token_, eos_token_;  // from tokenizer_config.json, when known
};

}  // namespace orchid
