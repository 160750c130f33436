// Jinja2 parser: tokens → statement tree, with the grammar and operator precedence of
// jinja2/parser.py 3.1 (condexpr < or < and < not < compare < + - < ~ < * / // % < ** <
// unary < postfix < filters/tests). Unknown tags, filters and tests are syntax errors.
#pragma once

#include <vector>

#include "orchid/tokenizer/jinja/ast.h"
#include "orchid/tokenizer/jinja/lexer.h"

namespace orchid::jinja {

// Throws Failure{ErrorKind::syntax} (caught by Template::parse) on invalid input.
Body parse(const std::vector<Token>& tokens);

}  // namespace orchid::jinja
