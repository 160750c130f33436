// Jinja2 lexer (see lexer.h). The rules mirror jinja2/lexer.py 3.1: the root state finds
// the earliest `{{`, `{%` or `{#`; inside a tag the end marker is tried first at every
// position (only while brackets are balanced), then whitespace, float, integer, name, string
// and operator tokens.
#include "orchid/tokenizer/jinja/lexer.h"

#include <charconv>

#include "orchid/tokenizer/jinja/error.h"
#include "orchid/tokenizer/jinja/pystr.h"

namespace orchid::jinja {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}
int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexOptions& opts) : opts_(opts) {
    // Newlines → \n, then one trailing newline dropped (keep_trailing_newline=False).
    s_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        s_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        s_ += source[i];
      }
    }
    if (!s_.empty() && s_.back() == '\n') s_.pop_back();
  }

  std::vector<Token> run() {
    const size_t n = s_.size();
    bool line_starting = true;  // did the previous match end with a newline?
    while (pos_ < n) {
      const size_t start = find_tag_start(pos_);
      if (start == std::string::npos) {
        emit_data(pos_, s_.substr(pos_));
        break;
      }
      const char kind = s_[start + 1];
      size_t after = start + 2;
      char sign = 0;
      if (after < n && (s_[after] == '-' || s_[after] == '+')) sign = s_[after++];
      size_t raw_end = kind == '%' ? match_raw_begin(after) : std::string::npos;
      emit_data(pos_,
                strip_before_tag(s_.substr(pos_, start - pos_), sign, kind != '{', line_starting));
      if (raw_end != std::string::npos) {
        line_starting = s_[raw_end - 1] == '\n';
        pos_ = raw_end;
        lex_raw_body(line_starting);
      } else if (kind == '#') {
        pos_ = after;
        skip_comment(line_starting);
      } else {
        push(kind == '{' ? TokenType::var_begin : TokenType::block_begin, start);
        pos_ = after;
        lex_tag(kind == '{', line_starting);
      }
    }
    push(TokenType::eof, n);
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(const std::string& msg, size_t at) {
    fail(ErrorKind::syntax, msg, line_at(at));
  }

  int line_at(size_t at) {
    for (; counted_ < at && counted_ < s_.size(); ++counted_) line_ += s_[counted_] == '\n';
    return line_;
  }

  void push(TokenType type, size_t at, std::string text = {}) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.line = line_at(at);
    tokens_.push_back(std::move(t));
  }

  void emit_data(size_t at, std::string text) {
    if (!text.empty()) push(TokenType::data, at, std::move(text));
  }

  size_t find_tag_start(size_t from) const {
    for (size_t p = s_.find('{', from); p != std::string::npos; p = s_.find('{', p + 1)) {
      if (p + 1 < s_.size() && (s_[p + 1] == '{' || s_[p + 1] == '%' || s_[p + 1] == '#')) return p;
    }
    return std::string::npos;
  }

  size_t skip_space(size_t p) const {
    while (p < s_.size()) {
      const size_t w = py::space_at(s_, p);
      if (w == 0) break;
      p += w;
    }
    return p;
  }

  // Text before a tag: `-` strips all whitespace; otherwise lstrip_blocks removes spaces
  // and tabs between the start of the line and a block or comment tag.
  std::string strip_before_tag(std::string text, char sign, bool lstrip_kind,
                               bool line_starting) const {
    if (sign == '-') return py::strip(text, std::nullopt, false, true);
    if (sign == '+' || !opts_.lstrip_blocks || !lstrip_kind) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
        skip_space_in(text, l_pos) == text.size())
      text.resize(l_pos);
    return text;
  }

  static size_t skip_space_in(const std::string& t, size_t p) {
    while (p < t.size()) {
      const size_t w = py::space_at(t, p);
      if (w == 0) break;
      p += w;
    }
    return p;
  }

  // `{%-? raw -?%}` starting after `{%` and its sign: the end of the match, or npos.
  size_t match_raw_begin(size_t p) const {
    p = skip_space(p);
    if (s_.compare(p, 3, "raw") != 0 || (p + 3 < s_.size() && is_name_char(s_[p + 3])))
      return std::string::npos;
    p = skip_space(p + 3);
    if (s_.compare(p, 3, "-%}") == 0) return skip_space(p + 3);
    if (s_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  void lex_raw_body(bool& line_starting) {
    for (size_t p = s_.find("{%", pos_); p != std::string::npos; p = s_.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = 0;
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) sign = s_[q++];
      q = skip_space(q);
      if (s_.compare(q, 6, "endraw") != 0) continue;
      q = skip_space(q + 6);
      size_t end;
      if (s_.compare(q, 3, "+%}") == 0) {
        end = q + 3;
      } else if (s_.compare(q, 3, "-%}") == 0) {
        end = skip_space(q + 3);
      } else if (s_.compare(q, 2, "%}") == 0) {
        end = q + 2;
        if (opts_.trim_blocks && end < s_.size() && s_[end] == '\n') ++end;
      } else {
        continue;
      }
      emit_data(pos_, strip_before_tag(s_.substr(pos_, p - pos_), sign, true, line_starting));
      line_starting = s_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    error("Missing end of raw directive", pos_);
  }

  void skip_comment(bool& line_starting) {
    size_t q = s_.find("#}", pos_);
    if (q == std::string::npos) error("Missing end of comment tag", pos_);
    size_t end;
    if (q > pos_ && s_[q - 1] == '-') {
      end = skip_space(q + 2);
    } else if (q > pos_ && s_[q - 1] == '+') {
      end = q + 2;
    } else {
      end = q + 2;
      if (opts_.trim_blocks && end < s_.size() && s_[end] == '\n') ++end;
    }
    line_starting = s_[end - 1] == '\n';
    pos_ = end;
  }

  // The end marker of the current tag at pos_, or npos.
  size_t match_tag_end(bool variable) const {
    if (variable) {
      if (s_.compare(pos_, 3, "-}}") == 0) return skip_space(pos_ + 3);
      if (s_.compare(pos_, 2, "}}") == 0) return pos_ + 2;
      return std::string::npos;
    }
    if (s_.compare(pos_, 3, "+%}") == 0) return pos_ + 3;
    if (s_.compare(pos_, 3, "-%}") == 0) return skip_space(pos_ + 3);
    if (s_.compare(pos_, 2, "%}") == 0) {
      size_t end = pos_ + 2;
      if (opts_.trim_blocks && end < s_.size() && s_[end] == '\n') ++end;
      return end;
    }
    return std::string::npos;
  }

  void lex_tag(bool variable, bool& line_starting) {
    std::string brackets;  // the closers expected, innermost last
    while (true) {
      if (pos_ >= s_.size())
        error(variable ? "unexpected end of template, expected 'end of print statement'"
                       : "unexpected end of template, expected 'end of statement block'",
              pos_);
      if (brackets.empty()) {
        const size_t end = match_tag_end(variable);
        if (end != std::string::npos) {
          push(variable ? TokenType::var_end : TokenType::block_end, pos_);
          line_starting = s_[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      if (py::space_at(s_, pos_) > 0) {
        pos_ = skip_space(pos_);
        continue;
      }
      if (lex_number() || lex_name() || lex_string()) continue;
      lex_operator(brackets);
    }
  }

  // `(\d+_)*\d+` at p: the end of the match or npos.
  size_t digits(size_t p) const {
    if (p >= s_.size() || !is_digit(s_[p])) return std::string::npos;
    while (p < s_.size() && is_digit(s_[p])) ++p;
    while (p + 1 < s_.size() && s_[p] == '_' && is_digit(s_[p + 1])) {
      ++p;
      while (p < s_.size() && is_digit(s_[p])) ++p;
    }
    return p;
  }

  bool lex_number() {
    const size_t n = s_.size();
    if (!is_digit(s_[pos_])) return false;
    // Float: digits, then (fraction? exponent) or fraction; not right after a '.'.
    if (pos_ == 0 || s_[pos_ - 1] != '.') {
      const size_t int_end = digits(pos_);
      size_t frac_end = std::string::npos;
      if (int_end < n && s_[int_end] == '.') frac_end = digits(int_end + 1);
      size_t end = std::string::npos;
      const size_t base = frac_end != std::string::npos ? frac_end : int_end;
      if (base < n && (s_[base] == 'e' || s_[base] == 'E')) {
        size_t r = base + 1;
        if (r < n && (s_[r] == '+' || s_[r] == '-')) ++r;
        end = digits(r);
      }
      if (end == std::string::npos) end = frac_end;
      if (end != std::string::npos) {
        std::string text;
        for (size_t i = pos_; i < end; ++i)
          if (s_[i] != '_') text += s_[i];
        Token t;
        t.type = TokenType::number;
        t.line = line_at(pos_);
        std::from_chars(text.data(), text.data() + text.size(), t.float_value);
        t.text = std::move(text);
        tokens_.push_back(std::move(t));
        pos_ = end;
        return true;
      }
    }
    int base = 10;
    size_t p = pos_, digits_start = pos_;
    if (s_[p] == '0' && p + 1 < n) {
      const char x = char(s_[p + 1] | 0x20);
      base = x == 'b' ? 2 : x == 'o' ? 8 : x == 'x' ? 16 : 10;
    }
    auto ok = [&](char c) { return base == 16 ? hex_value(c) >= 0 : c >= '0' && c < '0' + base; };
    if (base != 10) {
      size_t q = p + 2;
      while (q < n) {
        if (ok(s_[q])) {
          ++q;
        } else if (s_[q] == '_' && q + 1 < n && ok(s_[q + 1])) {
          q += 2;
        } else {
          break;
        }
      }
      if (q == p + 2) {
        base = 10;  // "0x" without digits: just the integer 0
      } else {
        digits_start = p + 2;
        p = q;
      }
    }
    if (base == 10) {
      const char first = s_[p];
      ++p;
      while (p < n) {  // [1-9](_?\d)*  or  0(_?0)*
        const bool any = first != '0';
        auto dig = [&](char c) { return any ? is_digit(c) : c == '0'; };
        if (dig(s_[p])) {
          ++p;
        } else if (s_[p] == '_' && p + 1 < n && dig(s_[p + 1])) {
          p += 2;
        } else {
          break;
        }
      }
    }
    std::string text;
    for (size_t i = digits_start; i < p; ++i)
      if (s_[i] != '_') text += s_[i];
    Token t;
    t.type = TokenType::integer;
    t.line = line_at(pos_);
    const auto r = std::from_chars(text.data(), text.data() + text.size(), t.int_value, base);
    if (r.ec != std::errc()) error("integer literal too large: " + s_.substr(pos_, p - pos_), pos_);
    t.text = s_.substr(pos_, p - pos_);
    tokens_.push_back(std::move(t));
    pos_ = p;
    return true;
  }

  bool lex_name() {
    if (!is_name_start(s_[pos_])) return false;
    size_t p = pos_;
    while (p < s_.size() && is_name_char(s_[p])) ++p;
    push(TokenType::name, pos_, s_.substr(pos_, p - pos_));
    pos_ = p;
    return true;
  }

  bool lex_string() {
    const char quote = s_[pos_];
    if (quote != '\'' && quote != '"') return false;
    size_t p = pos_ + 1;
    while (p < s_.size() && s_[p] != quote) p += s_[p] == '\\' ? 2 : 1;
    if (p >= s_.size()) error(std::string("unexpected char '") + quote + "'", pos_);
    push(TokenType::string, pos_, unescape(pos_ + 1, p));
    pos_ = p + 1;
    return true;
  }

  // Python's "unicode-escape" decoding, as Jinja2 applies it to string literals.
  std::string unescape(size_t b, size_t e) {
    std::string out;
    for (size_t p = b; p < e; ++p) {
      if (s_[p] != '\\') {
        out += s_[p];
        continue;
      }
      const char c = s_[++p];
      switch (c) {
        case '\n':
          continue;
        case '\\':
          out += '\\';
          continue;
        case '\'':
          out += '\'';
          continue;
        case '"':
          out += '"';
          continue;
        case 'a':
          out += '\a';
          continue;
        case 'b':
          out += '\b';
          continue;
        case 'f':
          out += '\f';
          continue;
        case 'n':
          out += '\n';
          continue;
        case 'r':
          out += '\r';
          continue;
        case 't':
          out += '\t';
          continue;
        case 'v':
          out += '\v';
          continue;
        default:
          break;
      }
      if (c >= '0' && c <= '7') {
        char32_t v = 0;
        int k = 0;
        for (; k < 3 && p < e && s_[p] >= '0' && s_[p] <= '7'; ++k, ++p) v = v * 8 + (s_[p] - '0');
        --p;
        py::append_utf8(out, v);
        continue;
      }
      if (c == 'x' || c == 'u' || c == 'U') {
        const int width = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        char32_t v = 0;
        for (int k = 1; k <= width; ++k) {
          const int h = p + k < e ? hex_value(s_[p + k]) : -1;
          if (h < 0) error(std::string("truncated \\") + c + " escape in string literal", b);
          v = v * 16 + char32_t(h);
        }
        if (v > 0x10FFFF) error("illegal Unicode character in string literal", b);
        if (v >= 0xD800 && v <= 0xDFFF) error("surrogate escapes are not supported", b);
        py::append_utf8(out, v);
        p += size_t(width);
        continue;
      }
      if (c == 'N') error("\\N{...} escapes are not supported", b);
      out += '\\';
      out += c;
    }
    return out;
  }

  void lex_operator(std::string& brackets) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (s_.compare(pos_, 2, op) == 0) {
        push(TokenType::op, pos_, op);
        pos_ += 2;
        return;
      }
    }
    const char c = s_[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
      error(std::string("unexpected char '") + c + "'", pos_);
    if (c == '(' || c == '[' || c == '{') brackets += c == '(' ? ')' : c == '[' ? ']' : '}';
    if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) error(std::string("unexpected '") + c + "'", pos_);
      if (brackets.back() != c)
        error(std::string("unexpected '") + c + "', expected '" + brackets.back() + "'", pos_);
      brackets.pop_back();
    }
    push(TokenType::op, pos_, std::string(1, c));
    ++pos_;
  }

  LexOptions opts_;
  std::string s_;
  size_t pos_ = 0;
  size_t counted_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexOptions& opts) {
  return Lexer(source, opts).run();
}

}  // namespace orchid::jinja
