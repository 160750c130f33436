// Added-token matching: tokenizer.json's added_tokens are found as whole strings before BPE,
// leftmost-longest and non-overlapping (the tokenizers crate's Aho-Corasick), then their
// single_word / lstrip / rstrip flags are applied as AddedVocabulary::find_matches does.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace orchid {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;
  bool lstrip = false;     // the match also takes the whitespace before it
  bool rstrip = false;     // ... and after it
  bool normalized = true;  // matched in normalised text (else in the raw input)
  bool special = false;    // skipped by decode(skip_special)
};

class AddedTokenSplitter {
 public:
  // `pattern` is the text to find (the content, normalised for a normalized token).
  void add(std::string pattern, const AddedToken& token);
  void finish();
  bool empty() const { return patterns_.empty(); }

  struct Segment {
    size_t begin, end;  // byte range of the text (a token's range includes stripped space)
    int32_t id;         // -1: plain text
  };
  // Appends the segments of valid UTF-8 `text` to out, in order.
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Pattern {
    std::string text;
    int32_t id;
    bool single_word, lstrip, rstrip;
  };
  // The longest pattern matching at text[pos], or -1.
  int match_at(std::string_view text, size_t pos) const;

  std::vector<Pattern> patterns_;
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // pattern indices, longest first
  int single_first_byte_ = -1;  // when all patterns share one first byte: memchr for it
};

}  // namespace orchid
