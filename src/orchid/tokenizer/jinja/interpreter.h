// Tree-walking evaluator for a parsed template, with Jinja2's scoping: `for` bodies and macros
// get their own scope (a `set` inside a loop is gone after the iteration, hence namespace()),
// `if` does not; macros see the scope they were defined in.
#pragma once

#include <string>

#include "orchid/tokenizer/jinja/ast.h"

namespace orchid::jinja {

// Renders `body` with the keys of the JSON object `vars` as variables (over the globals),
// appending to `out`; `fresh` are the names that start Undefined in the template's frame
// (resolve_scopes). Throws Failure; `line` holds the line being executed when it does.
void execute(const Body& body, const std::vector<std::string>& fresh, const Json& vars,
             std::string& out, int& line);

}  // namespace orchid::jinja
