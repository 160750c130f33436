// The module boundary: Failure (and anything else thrown inside the interpreter) becomes an
// Error value here.
#include "orchid/tokenizer/jinja/template.h"

#include <exception>
#include <new>

#include "orchid/tokenizer/jinja/interpreter.h"
#include "orchid/tokenizer/jinja/parser.h"
#include "orchid/tokenizer/jinja/scopes.h"

namespace orchid::jinja {

struct Template::Program {
  std::string name;
  Body body;
  std::vector<std::string> fresh;  // names that start Undefined in the template's frame
};

namespace {

const char* kind_label(ErrorKind k) {
  switch (k) {
    case ErrorKind::syntax:
      return "syntax error: ";
    case ErrorKind::raised:
      return "";
    case ErrorKind::undefined:
      return "UndefinedError: ";
    case ErrorKind::type:
      return "TypeError: ";
    case ErrorKind::unsupported:
      return "unsupported: ";
    case ErrorKind::limit:
      return "limit exceeded: ";
  }
  return "";
}

Error report(const std::string& name, ErrorKind kind, int line, std::string message,
             RenderError* detail) {
  std::string text = name + ":" + std::to_string(line) + ": " + kind_label(kind) + message;
  if (detail) *detail = RenderError{kind, line, std::move(message)};
  return Error{std::move(text)};
}

// Python would not even read a file that is not UTF-8; rejecting it here keeps invalid bytes
// out of everything downstream.
bool valid_utf8(std::string_view s, size_t& bad) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xE  ? 3
                     : (c >> 3) == 0x1E ? 4
                                        : 0;
    if (n == 0 || i + n > s.size() || (n == 2 && c < 0xC2)) return bad = i, false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return bad = i, false;
    i += n;
  }
  return true;
}

}  // namespace

Expected<Template> Template::parse(std::string_view source, std::string name, RenderError* detail) {
  size_t bad = 0;
  if (!valid_utf8(source, bad)) {
    int line = 1;
    for (size_t i = 0; i < bad; ++i) line += source[i] == '\n';
    return report(name, ErrorKind::syntax, line, "invalid UTF-8 at byte " + std::to_string(bad),
                  detail);
  }
  try {
    auto program = std::make_shared<Program>();
    program->body = jinja::parse(tokenize(source, LexOptions{}));
    program->fresh = resolve_scopes(program->body);
    program->name = std::move(name);
    Template t;
    t.program_ = std::move(program);
    return t;
  } catch (const Failure& f) {
    return report(name, f.kind, f.line, f.message, detail);
  } catch (const std::bad_alloc&) {
    return report(name, ErrorKind::limit, 0, "out of memory", detail);
  } catch (const std::exception& e) {
    return report(name, ErrorKind::type, 0, e.what(), detail);
  }
}

Expected<std::string> Template::render(const Json& vars, RenderError* detail) const {
  if (!vars.is_object())
    return report(name(), ErrorKind::type, 0, "template variables must be a JSON object", detail);
  std::string out;
  int line = 0;
  try {
    execute(program_->body, program_->fresh, vars, out, line);
    return out;
  } catch (const Failure& f) {
    return report(name(), f.kind, f.line ? f.line : line, f.message, detail);
  } catch (const std::bad_alloc&) {
    return report(name(), ErrorKind::limit, line, "out of memory", detail);
  } catch (const std::exception& e) {  // nlohmann::json errors, if any slipped through
    return report(name(), ErrorKind::type, line, e.what(), detail);
  }
}

const std::string& Template::name() const {
  return program_->name;
}

}  // namespace orchid::jinja
