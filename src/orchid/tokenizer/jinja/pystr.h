// Python str semantics over UTF-8 std::string: code-point length/indexing/slicing, the str
// methods chat templates call (strip, split, replace, ...), repr() of str and float, and
// json.dumps string escaping. Python counts and slices code points, so everything here does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace orchid::jinja::py {

// Decodes the code point at s[pos] and advances pos; an invalid byte decodes as itself
// (U+0080..U+00FF range) so that no input is ever rejected or read past its end.
char32_t next_code_point(std::string_view s, size_t& pos);
void append_utf8(std::string& out, char32_t cp);
std::vector<char32_t> code_points(std::string_view s);
std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end);
size_t length(std::string_view s);  // in code points, like len(str)

// str.isspace() of one code point (Unicode whitespace, as Python's \s and str.strip()).
bool is_space(char32_t cp);
// Byte length of the whitespace code point at s[pos], 0 when s[pos] is not whitespace.
size_t space_at(std::string_view s, size_t pos);

// str.strip / lstrip / rstrip: chars = nullopt strips whitespace, otherwise any of chars.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);
// str.split / str.rsplit (sep = nullopt: runs of whitespace); maxsplit < 0: no limit.
// Precondition: sep, when given, is not empty (Python raises ValueError; callers check).
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit);
// str.replace(old, new, count); count < 0: all.
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// str.lower / upper / capitalize for ASCII, Latin-1, Greek and Cyrillic letters (Python maps
// all of Unicode; other scripts pass through unchanged).
std::string lower(std::string_view s);
std::string upper(std::string_view s);
std::string capitalize(std::string_view s);

// The indices a Python slice [start:stop:step] selects from a sequence of n items.
// Precondition: step != 0.
std::vector<size_t> slice_indices(size_t n, std::optional<int64_t> start,
                                  std::optional<int64_t> stop, std::optional<int64_t> step);

// repr(float): shortest round-trip digits, 'inf', 'nan', fixed notation for exponents in
// [-4, 16) with at least one decimal ('1.0'), otherwise '1e+16' style.
std::string float_repr(double v);
// repr(str): quotes and escapes as CPython does.
void append_str_repr(std::string& out, std::string_view s);
// A JSON string literal as json.dumps writes it (ensure_ascii escapes non-ASCII as \uXXXX).
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);

}  // namespace orchid::jinja::py
