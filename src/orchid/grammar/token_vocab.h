// The vocabulary as the byte strings a grammar sees, sorted so that a walk over all of them
// shares the work of common prefixes (a trie walked without building one), and the mask of
// the tokens a grammar state allows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orchid/grammar/matcher.h"

namespace orchid {
class Tokenizer;
}

namespace orchid::grammar {

class TokenVocab {
 public:
  // Every token of the tokenizer with non-empty bytes, except special ones (their text is not
  // what they mean) and ids at or past n_vocab (the model's logits row).
  TokenVocab(const Tokenizer& tok, int64_t n_vocab);
  int64_t n_vocab() const { return n_vocab_; }
  size_t words() const { return size_t((n_vocab_ + 31) / 32); }

  // Sets the bits of the tokens whose bytes the matcher takes from `state` without dying and
  // that leave a match at most max_distance bytes from complete (bits is resized to words()
  // and cleared first). Returns the largest such distance among the tokens set.
  uint32_t allowed(Matcher& m, int32_t state, std::vector<uint32_t>& bits,
                   uint32_t max_distance = Matcher::kFar) const;

 private:
  struct Entry {
    std::string bytes;
    int32_t id;
    uint32_t shared;  // bytes in common with the previous entry
  };
  std::vector<Entry> entries_;
  size_t longest_ = 0;
  int64_t n_vocab_;
};

}  // namespace orchid::grammar
