// Failures of the Jinja interpreter. Inside the module they are thrown (like Python's
// exceptions, they unwind a deeply recursive evaluator); Template::parse and Template::render
// catch every one of them and return an Error value, so nothing escapes the module.
#pragma once

#include <string>

namespace orchid::jinja {

enum class ErrorKind {
  syntax,       // TemplateSyntaxError / TemplateAssertionError: the template does not parse
  raised,       // raise_exception(msg) called by the template itself
  undefined,    // UndefinedError: an undefined value used in an operation
  type,         // TypeError / ValueError / ZeroDivisionError and friends
  unsupported,  // valid Jinja2 that this interpreter does not implement
  limit,        // recursion depth, output size or sandbox range limit exceeded
};

struct Failure {
  ErrorKind kind;
  std::string message;
  int line = 0;  // 0: not known where it was thrown; the renderer fills in its current line
};

[[noreturn]] inline void fail(ErrorKind kind, std::string message, int line = 0) {
  throw Failure{kind, std::move(message), line};
}
[[noreturn]] inline void type_error(std::string message) {
  fail(ErrorKind::type, std::move(message));
}

}  // namespace orchid::jinja
