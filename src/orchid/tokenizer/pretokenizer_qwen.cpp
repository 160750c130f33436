// Hand-written matcher for the Qwen split regexes, equivalent to Oniguruma's leftmost-first,
// backtracking run of
//   A (?i:'s|'t|'re|'ve|'m|'ll|'d)      B [^\r\n\p{L}\p{N}]?\p{L}+       C \p{N}
//   D  ?[^\s\p{L}\p{N}]+[\r\n]*         E \s*[\r\n]+   F \s+(?!\S)   G \s+
// (Qwen3.5: B ends in [\p{L}\p{M}]+ and D's class also excludes \p{M}). Every character starts
// some alternative, so the matches tile the text. Oniguruma's (?i:...) here folds ASCII only:
// "'ſ" is not a contraction (checked against tokenizers).
#include <cstdint>

#include "orchid/tokenizer/pretokenizer.h"
#include "orchid/tokenizer/unicode.h"

namespace orchid {
namespace {

using unicode::CharTable;
constexpr uint8_t kNewline = 0x80;  // \r or \n (a pseudo class on top of CharFlag)

struct AsciiTable {
  uint8_t f[128];
  constexpr AsciiTable() : f() {
    for (int c = 0; c < 128; ++c) {
      uint8_t v = 0;
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) v |= unicode::kLetter;
      if (c >= '0' && c <= '9') v |= unicode::kNumber;
      if ((c >= 0x09 && c <= 0x0D) || c == ' ') v |= unicode::kSpace;
      if (c == '\r' || c == '\n') v |= kNewline;
      f[c] = v;
    }
  }
};
constexpr AsciiTable kAscii;

template <bool kQwen35>
class Matcher {
 public:
  static constexpr uint8_t kLetterLike = unicode::kLetter | (kQwen35 ? unicode::kMark : 0);
  static constexpr uint8_t kNotPunct =
      unicode::kSpace | unicode::kLetter | unicode::kNumber | (kQwen35 ? unicode::kMark : 0);

  Matcher(std::string_view text) : s_(text.data()), n_(text.size()), t_(CharTable::get()) {}

  // End of the match that starts at pos (< n).
  size_t match(size_t pos) const {
    const char* s = s_;
    // A: contractions, ASCII letters in either case.
    if (s[pos] == '\'' && pos + 1 < n_) {
      char c1 = char(s[pos + 1] | 0x20);
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return pos + 2;
      if (pos + 2 < n_) {
        char c2 = char(s[pos + 2] | 0x20);
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
          return pos + 3;
      }
    }
    int len;
    uint8_t f = cls(pos, len);
    size_t next = pos + size_t(len);
    // B: a letter run, optionally after one character that is not \r, \n, a letter or a digit.
    if (f & kLetterLike) return run(next, kLetterLike);
    if (!(f & (kNewline | unicode::kLetter | unicode::kNumber)) && next < n_) {
      int len2;
      if (cls(next, len2) & kLetterLike) return run(next + size_t(len2), kLetterLike);
    }
    // C: one digit.
    if (f & unicode::kNumber) return next;
    // D: punctuation run, optionally after one space, then any \r\n.
    if (s[pos] == ' ' && next < n_) {
      int len2;
      if (!(cls(next, len2) & kNotPunct)) return newlines(punct(next + size_t(len2)));
    }
    if (!(f & kNotPunct)) return newlines(punct(next));
    // E, F, G: f is whitespace.
    size_t e = pos, last_newline_end = 0, last_start = pos, count = 0;
    while (e < n_) {
      uint8_t g = cls(e, len);
      if (!(g & unicode::kSpace)) break;
      if (g & kNewline) last_newline_end = e + size_t(len);
      last_start = e;
      e += size_t(len);
      ++count;
    }
    if (last_newline_end) return last_newline_end;  // E: up to the last \r or \n
    if (e == n_) return e;                          // F at the end of the text
    if (count >= 2) return last_start;              // F: leave the last space to the word
    return e;                                       // G
  }

 private:
  uint8_t cls(size_t i, int& len) const {
    auto b = static_cast<unsigned char>(s_[i]);
    if (b < 0x80) return len = 1, kAscii.f[b];
    return t_.flags(unicode::decode_utf8(s_ + i, len));
  }
  size_t run(size_t i, uint8_t want) const {
    int len;
    while (i < n_ && (cls(i, len) & want)) i += size_t(len);
    return i;
  }
  size_t punct(size_t i) const {
    int len;
    while (i < n_ && !(cls(i, len) & kNotPunct)) i += size_t(len);
    return i;
  }
  size_t newlines(size_t i) const {
    while (i < n_ && (s_[i] == '\r' || s_[i] == '\n')) ++i;
    return i;
  }

  const char* s_;
  size_t n_;
  const CharTable& t_;
};

template <bool kQwen35>
size_t split_with(std::string_view text, size_t pos, size_t max_words,
                  std::vector<std::string_view>& out) {
  Matcher<kQwen35> m(text);
  for (size_t n = 0; pos < text.size() && n < max_words; ++n) {
    size_t end = m.match(pos);
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return pos;
}

}  // namespace

size_t split_qwen(std::string_view text, size_t pos, bool qwen35, size_t max_words,
                  std::vector<std::string_view>& out) {
  return qwen35 ? split_with<true>(text, pos, max_words, out)
                : split_with<false>(text, pos, max_words, out);
}

}  // namespace orchid
