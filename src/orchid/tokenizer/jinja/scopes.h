// Jinja2's compile-time scoping (jinja2/idtracking.py), which decides what a variable holds
// before its frame assigns it. Every frame (the template, a for body, a for-else, a macro, a
// block set) gives each name it assigns a local slot; the slot starts as the enclosing
// frame's variable if one exists, as the context value if the frame reads the name before it
// assigns it (or assigns it only in some branches), and otherwise as Undefined. The last case
// is visible: in `{% for m in x %}{{ t }}{% endfor %}{% set t = 1 %}` the loop prints '' even
// when the context has a `t`. The interpreter looks names up dynamically, which matches every
// other case, so only the names that start Undefined are recorded here.
#pragma once

#include <string>
#include <vector>

#include "orchid/tokenizer/jinja/ast.h"

namespace orchid::jinja {

// Fills Stmt::fresh of every frame-opening statement in `body` and returns the names that
// start Undefined in the template's own frame.
std::vector<std::string> resolve_scopes(Body& body);

}  // namespace orchid::jinja
