// UTF-8 handling, Unicode character classes and NFC exactly as the Hugging Face tokenizers
// pipeline sees them: Oniguruma's (Unicode 16) general categories for the pre-tokenizer regex
// and the older tables of the unicode-normalization crate behind its NFC normalizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace orchid::unicode {

// ---- UTF-8 ----------------------------------------------------------------------------------

// Decodes the code point at s[0] of VALID UTF-8; `len` receives its byte length (1..4).
inline uint32_t decode_utf8(const char* s, int& len) {
  const auto* u = reinterpret_cast<const unsigned char*>(s);
  if (u[0] < 0x80) return len = 1, u[0];
  if (u[0] < 0xE0) return len = 2, ((u[0] & 0x1Fu) << 6) | (u[1] & 0x3Fu);
  if (u[0] < 0xF0) return len = 3, ((u[0] & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu);
  return len = 4,
         ((u[0] & 0x07u) << 18) | ((u[1] & 0x3Fu) << 12) | ((u[2] & 0x3Fu) << 6) | (u[3] & 0x3Fu);
}

// Appends the UTF-8 encoding of cp (cp <= 0x10FFFF).
void append_utf8(uint32_t cp, std::string& out);

// Length of the well-formed UTF-8 sequence starting at s[0] (1..4), or 0 if the bytes there
// are not one. With n < 4 a sequence cut short by the end counts as malformed.
int valid_sequence_length(const unsigned char* s, size_t n);

// True when `s` is well-formed UTF-8.
bool is_valid_utf8(std::string_view s);
// Length of the longest well-formed prefix of `s` (ends at the first ill-formed sequence).
size_t valid_utf8_prefix(std::string_view s);

// Appends `s` with every maximal ill-formed subsequence replaced by U+FFFD — the Unicode
// "substitution of maximal subparts" that Rust's String::from_utf8_lossy, WHATWG's TextDecoder
// and Python's errors='replace' all apply.
void append_utf8_lossy(std::string_view s, std::string& out);

// Number of bytes at the end of `s` that start a sequence which is well-formed so far but
// incomplete (0..3): what a streaming decoder must hold back until more bytes arrive.
size_t incomplete_utf8_tail(std::string_view s);

// ---- Character classes ----------------------------------------------------------------------

enum CharFlag : uint8_t {
  kLetter = 1,      // \p{L}
  kNumber = 2,      // \p{N}
  kMark = 4,        // \p{M}
  kSpace = 8,       // \s = Unicode White_Space (also Rust's char::is_whitespace)
  kNfcActive = 16,  // NFC may change text around this character (see nfc_quick_check)
};

// Per-code-point CharFlag bits in a two-level table (256-entry blocks, duplicates shared).
// Built once per process on first use (a few milliseconds).
class CharTable {
 public:
  static const CharTable& get();
  uint8_t flags(uint32_t cp) const {
    return cp < 0x110000 ? blocks_[(size_t(index_[cp >> 8]) << 8) | (cp & 0xFF)] : 0;
  }
  // flags(cp) & kNfcActive, from an 8 KB bitmap for the BMP (the NFC scan's hot lookup).
  bool nfc_active(uint32_t cp) const {
    return cp < 0x10000 ? (bmp_nfc_active_[cp >> 6] >> (cp & 63)) & 1 : flags(cp) & kNfcActive;
  }

 private:
  CharTable();
  uint16_t index_[0x110000 >> 8];
  uint64_t bmp_nfc_active_[0x10000 / 64] = {};
  std::basic_string<uint8_t> blocks_;
};

// "Word" characters for an added token's single_word flag: the Unicode \w of Rust's regex
// crate (letters, marks, decimal digits, letter numbers, connector punctuation, ZWJ/ZWNJ).
bool is_word_char(uint32_t cp);

// A PCRE2 class body ("\x{1C89}-\x{1C8A}...") of the code points Unicode 15.0-16.0 gave
// `flag` (kLetter, kNumber, kMark) — missing from PCRE2 10.42's Unicode 14 tables — or, for
// kSpace, of all of White_Space (PCRE2's \s also has U+180E, Oniguruma's does not).
std::string recent_ranges_pcre2(CharFlag flag);

// ---- NFC ------------------------------------------------------------------------------------

// True when NFC(s) == s is certain without normalising: no character of `s` is kNfcActive.
bool nfc_quick_check(std::string_view s);

// Appends NFC(s) for valid UTF-8 `s`, as the tokenizers crate computes it. Only windows around
// kNfcActive characters are normalised, so mostly-ASCII or CJK text costs one scan.
void append_nfc(std::string_view s, std::string& out);

}  // namespace orchid::unicode
