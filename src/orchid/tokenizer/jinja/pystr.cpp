// Python str semantics over UTF-8 (see pystr.h).
#include "orchid/tokenizer/jinja/pystr.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "orchid/tokenizer/unicode.h"

namespace orchid::jinja::py {

char32_t next_code_point(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  size_t n = b0 < 0x80           ? 1
             : (b0 >> 5) == 0x6  ? 2
             : (b0 >> 4) == 0xE  ? 3
             : (b0 >> 3) == 0x1E ? 4
                                 : 0;
  if (n == 0 || pos + n > s.size()) {
    ++pos;
    return b0;
  }
  char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if ((b & 0xC0) != 0x80) {
      ++pos;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  pos += n;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  unicode::append_utf8(uint32_t(cp), out);
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) cps.push_back(next_code_point(s, pos));
  return cps;
}

std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) append_utf8(out, cps[i]);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

size_t space_at(std::string_view s, size_t pos) {
  size_t p = pos;
  return is_space(next_code_point(s, p)) ? p - pos : 0;
}

namespace {

bool in_set(char32_t c, const std::optional<std::string>& chars, const std::vector<char32_t>& set) {
  return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_space(c);
}

// Python's str.find/rfind on UTF-8 bytes is a valid code-point search because UTF-8 is
// self-synchronising; only empty needles need care, and callers exclude them.
}  // namespace

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  const std::vector<char32_t> set = chars ? code_points(*chars) : std::vector<char32_t>{};
  const std::vector<char32_t> cps = code_points(s);
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && in_set(cps[b], chars, set)) ++b;
  if (right)
    while (e > b && in_set(cps[e - 1], chars, set)) --e;
  return from_code_points(cps, b, e);
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || int64_t(parts.size()) < maxsplit) {
      const size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    parts.emplace_back(s.substr(pos));
    return parts;
  }
  const std::vector<char32_t> cps = code_points(s);
  size_t i = 0;
  const size_t n = cps.size();
  while (true) {
    while (i < n && is_space(cps[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
      parts.push_back(from_code_points(cps, i, n));
      break;
    }
    size_t j = i;
    while (j < n && !is_space(cps[j])) ++j;
    parts.push_back(from_code_points(cps, i, j));
    i = j;
  }
  return parts;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    size_t end = s.size();
    while (maxsplit < 0 || int64_t(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  const std::vector<char32_t> cps = code_points(s);
  size_t j = cps.size();
  while (true) {
    while (j > 0 && is_space(cps[j - 1])) --j;
    if (j == 0) break;
    if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
      parts.push_back(from_code_points(cps, 0, j));
      break;
    }
    size_t i = j;
    while (i > 0 && !is_space(cps[i - 1])) --i;
    parts.push_back(from_code_points(cps, i, j));
    j = i;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl,
                    int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {  // Python inserts repl before every code point and at the end
    size_t pos = 0;
    while (pos < s.size()) {
      if (count < 0 || done < count) out += repl, ++done;
      const size_t start = pos;
      next_code_point(s, pos);
      out += s.substr(start, pos - start);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out += s.substr(pos, hit - pos);
    out += repl;
    pos = hit + old.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

namespace {

char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3AB && c != 0x3A2) ||
      (c >= 0x410 && c <= 0x42F))
    return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7) || (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) ||
      (c >= 0x430 && c <= 0x44F))
    return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

}  // namespace

std::string lower(std::string_view s) {
  std::string out;
  for (size_t pos = 0; pos < s.size();) append_utf8(out, to_lower(next_code_point(s, pos)));
  return out;
}

std::string upper(std::string_view s) {
  std::string out;
  for (size_t pos = 0; pos < s.size();) append_utf8(out, to_upper(next_code_point(s, pos)));
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  for (size_t pos = 0; pos < s.size();) {
    const bool first = pos == 0;
    const char32_t c = next_code_point(s, pos);
    append_utf8(out, first ? to_upper(c) : to_lower(c));
  }
  return out;
}

std::vector<size_t> slice_indices(size_t n, std::optional<int64_t> start,
                                  std::optional<int64_t> stop, std::optional<int64_t> step) {
  // PySlice_AdjustIndices.
  const int64_t len = int64_t(n), st = step.value_or(1);
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= len) {
      x = st < 0 ? len - 1 : len;
    }
    return x;
  };
  const int64_t b = adjust(start, st < 0 ? len - 1 : 0);
  const int64_t e = adjust(stop, st < 0 ? -1 : len);
  std::vector<size_t> idx;
  if (st > 0)
    for (int64_t i = b; i < e; i += st) idx.push_back(size_t(i));
  else
    for (int64_t i = b; i > e; i += st) idx.push_back(size_t(i));
  return idx;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view sci(buf, size_t(r.ptr - buf));  // "-d.ddde+XX", shortest round-trip
  std::string out;
  if (sci.front() == '-') out += '-', sci.remove_prefix(1);
  const size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos))
    if (c != '.') digits += c;
  const int exp = std::atoi(std::string(sci.substr(epos + 1)).c_str());
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else {
      const size_t int_len = size_t(exp) + 1;
      if (digits.size() <= int_len) {
        out += digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char e[16];
  std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + e;
}

namespace {

// str.isprintable() for one code point, approximated by the non-printable ranges that occur in
// practice (controls, separators, format characters, private use); unassigned code points are
// treated as printable.
bool is_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c < 0x600) return true;
  if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E ||
      c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000 ||
      (c >= 0xD800 && c <= 0xF8FF) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || c == 0x110BD ||
      (c >= 0x1D173 && c <= 0x1D17A) || c == 0xE0001 || (c >= 0xE0020 && c <= 0xE007F) ||
      c >= 0xF0000)
    return false;
  return true;
}

void append_hex(std::string& out, const char* prefix, unsigned v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*x", prefix, width, v);
  out += buf;
}

}  // namespace

void append_str_repr(std::string& out, std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out += quote;
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    const char32_t c = next_code_point(s, pos);
    if (c == char32_t(quote) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (!is_printable(c)) {
      if (c < 0x100)
        append_hex(out, "\\x", unsigned(c), 2);
      else if (c < 0x10000)
        append_hex(out, "\\u", unsigned(c), 4);
      else
        append_hex(out, "\\U", unsigned(c), 8);
    } else {
      out += s.substr(start, pos - start);
    }
  }
  out += quote;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    const char32_t c = next_code_point(s, pos);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      append_hex(out, "\\u", unsigned(c), 4);
    } else if (ensure_ascii && c >= 0x80) {
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        append_hex(out, "\\u", unsigned(0xD800 | (v >> 10)), 4);
        append_hex(out, "\\u", unsigned(0xDC00 | (v & 0x3FF)), 4);
      } else {
        append_hex(out, "\\u", unsigned(c), 4);
      }
    } else {
      out += s.substr(start, pos - start);
    }
  }
  out += '"';
}

}  // namespace orchid::jinja::py
