// Added-token matching by first-byte buckets (patterns longest first), with a memchr scan when
// all patterns begin with the same byte (Qwen's all begin with '<').
#include "orchid/tokenizer/added_tokens.h"

#include <algorithm>
#include <cstring>

#include "orchid/tokenizer/unicode.h"

namespace orchid {
namespace {

// Code point ending at text[end) (end > 0, valid UTF-8).
uint32_t char_before(std::string_view text, size_t end, size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  int len;
  return unicode::decode_utf8(text.data() + start, len);
}

uint32_t char_at(std::string_view text, size_t pos, int& len) {
  return unicode::decode_utf8(text.data() + pos, len);
}

bool is_space(uint32_t cp) {
  return unicode::CharTable::get().flags(cp) & unicode::kSpace;
}

}  // namespace

void AddedTokenSplitter::add(std::string pattern, const AddedToken& token) {
  if (pattern.empty()) return;  // the tokenizers crate ignores empty added tokens
  patterns_.push_back(
      {std::move(pattern), token.id, token.single_word, token.lstrip, token.rstrip});
}

void AddedTokenSplitter::finish() {
  for (auto& bucket : by_first_byte_) bucket.clear();
  for (uint32_t i = 0; i < patterns_.size(); ++i)
    by_first_byte_[static_cast<unsigned char>(patterns_[i].text[0])].push_back(i);
  int distinct = 0;
  for (int b = 0; b < 256; ++b) {
    auto& bucket = by_first_byte_[size_t(b)];
    if (bucket.empty()) continue;
    ++distinct;
    single_first_byte_ = b;
    // Longest first; among equal strings the last added wins, as in the crate's vocabulary map.
    std::stable_sort(bucket.begin(), bucket.end(), [&](uint32_t x, uint32_t y) {
      return patterns_[x].text.size() > patterns_[y].text.size() ||
             (patterns_[x].text.size() == patterns_[y].text.size() && x > y);
    });
  }
  if (distinct != 1) single_first_byte_ = -1;
}

int AddedTokenSplitter::match_at(std::string_view text, size_t pos) const {
  for (uint32_t i : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const std::string& p = patterns_[i].text;
    if (p.size() <= text.size() - pos && std::memcmp(text.data() + pos, p.data(), p.size()) == 0)
      return int(i);
  }
  return -1;
}

void AddedTokenSplitter::split(std::string_view text, std::vector<Segment>& out) const {
  const size_t n = text.size();
  size_t start_offset = 0;  // end of the last token segment
  size_t pos = 0;           // where the next search starts
  while (pos < n) {
    // Leftmost position where some pattern matches, then its longest pattern.
    int hit = -1;
    if (single_first_byte_ >= 0) {
      while (pos < n) {
        const void* at = std::memchr(text.data() + pos, single_first_byte_, n - pos);
        if (!at) {
          pos = n;
          break;
        }
        pos = size_t(static_cast<const char*>(at) - text.data());
        if ((hit = match_at(text, pos)) >= 0) break;
        ++pos;
      }
    } else {
      for (; pos < n; ++pos)
        if (!by_first_byte_[static_cast<unsigned char>(text[pos])].empty() &&
            (hit = match_at(text, pos)) >= 0)
          break;
    }
    if (hit < 0) break;
    const Pattern& p = patterns_[size_t(hit)];
    size_t start = pos, stop = pos + p.text.size();
    pos = stop;
    if (p.single_word) {
      size_t s;
      int len;
      bool word_before = start > 0 && unicode::is_word_char(char_before(text, start, s));
      bool word_after = stop < n && unicode::is_word_char(char_at(text, stop, len));
      if (word_before || word_after) continue;
    }
    if (p.lstrip) {
      while (start > 0) {
        size_t s;
        if (!is_space(char_before(text, start, s))) break;
        start = s;
      }
    }
    if (p.rstrip) {
      while (stop < n) {
        int len;
        if (!is_space(char_at(text, stop, len))) break;
        stop += size_t(len);
      }
    }
    if (start > start_offset) out.push_back({start_offset, start, -1});
    out.push_back({std::max(start, start_offset), std::max(stop, start_offset), p.id});
    start_offset = std::max(stop, start_offset);
  }
  if (start_offset < n) out.push_back({start_offset, n, -1});
}

}  // namespace orchid
