// How deeply JSON text nests arrays and objects, measured on the text before it is parsed.
// nlohmann's parser is iterative, but copying, comparing and dumping a parsed value recurse
// once per level, and so does the chat template's tojson: client JSON (request bodies, tool
// call arguments given as strings) and model output are measured here first, and text nested
// deeper than kMaxJsonDepth is refused (or, for model output, kept as text).
#pragma once

#include <string_view>

namespace orchid {

// Far beyond any real request (a tool's JSON Schema nests a few tens of levels inside a body's
// four or five), far below what recursion on a worker thread's stack survives (~30,000).
inline constexpr int kMaxJsonDepth = 128;

// The deepest nesting of '[' / '{' outside strings; an unbalanced or invalid text still gets
// a number (the parser reports what is wrong with it). Linear, no allocation.
int json_depth(std::string_view text);

inline bool json_too_deep(std::string_view text) { return json_depth(text) > kMaxJsonDepth; }

}  // namespace orchid
