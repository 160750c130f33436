// Jinja2 lexer: template source → tokens, with Jinja2's whitespace handling as transformers
// configures it (trim_blocks and lstrip_blocks on, `-`/`+` modifiers, one trailing newline
// dropped, \r\n and \r read as \n). Comments are dropped here; {% raw %} becomes data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace orchid::jinja {

enum class TokenType {
  data,         // literal template text
  var_begin,    // {{
  var_end,      // }}
  block_begin,  // {%
  block_end,    // %}
  name,
  string,   // text: the decoded value
  integer,  // int_value
  number,   // float literal: float_value
  op,       // text: the operator ("+", "//", "==", "(", ...)
  eof,
};

struct Token {
  TokenType type = TokenType::eof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws Failure{ErrorKind::syntax} (caught by Template::parse) on malformed input.
std::vector<Token> tokenize(std::string_view source, const LexOptions& opts);

}  // namespace orchid::jinja
