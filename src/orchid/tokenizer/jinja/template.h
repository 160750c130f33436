// A Jinja2 template, parsed once and rendered many times: the subset of Jinja2 that chat
// templates use, with the output of Python Jinja2 3.1 as Hugging Face transformers sets it
// up (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, a tojson
// filter that is json.dumps(x, ensure_ascii=False), raise_exception and strftime_now).
// Errors come back as values; nothing here throws.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "orchid/tokenizer/jinja/error.h"
#include "orchid/tokenizer/jinja/value.h"
#include "orchid/util/status.h"

namespace orchid::jinja {

// What went wrong, for callers that treat kinds differently (e.g. a template's own
// raise_exception versus a construct orchid does not implement).
struct RenderError {
  ErrorKind kind = ErrorKind::type;
  int line = 0;
  std::string message;  // without the "name:line: " prefix
};

class Template {
 public:
  // Parses `source`; `name` prefixes error messages ("chat_template.jinja:12: ...").
  static Expected<Template> parse(std::string_view source, std::string name = "template",
                                  RenderError* detail = nullptr);

  // Renders with the members of the JSON object `vars` as template variables.
  Expected<std::string> render(const Json& vars, RenderError* detail = nullptr) const;

  const std::string& name() const;

 private:
  struct Program;
  std::shared_ptr<const Program> program_;
};

}  // namespace orchid::jinja
