// The Split pre-tokenizer: cuts normalised text into the words BPE sees, with the pattern read
// from tokenizer.json and the Isolated behaviour (every match and every gap is a word). The two
// Qwen patterns run on a hand-written matcher; any other regex runs on PCRE2 (JIT), whose syntax
// matches Oniguruma's for such patterns; \p{L}, \p{N}, \p{M} and \s are rewritten to the same
// Unicode 16 sets as Oniguruma's. Known difference: PCRE2's case-insensitive matching also folds
// U+017F 'ſ' to 's' and U+212A (Kelvin) to 'k', Oniguruma's (?i) here does not.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "orchid/util/status.h"

namespace orchid {

class PreTokenizer {
 public:
  enum class Engine { qwen2, qwen35, regex, literal, none };

  // Qwen2/Qwen3 and Qwen3.5/3.6 split regexes, as they appear in tokenizer.json.
  static const char* const kQwen2Pattern;
  static const char* const kQwen35Pattern;

  // A Split on `pattern`: a regex (tokenizer.json {"Regex": ...}) or a literal string
  // ({"String": ...}). A regex that PCRE2 rejects is an error naming the offset and the reason.
  static Expected<PreTokenizer> split(const std::string& pattern, bool is_regex);
  // No splitting: the whole text is one word.
  static PreTokenizer whole();

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Appends the words of valid UTF-8 `text` from byte `pos` on (views into text, in order,
  // covering it) to out, stopping after about kBatch words; returns where the next call
  // continues (text.size() at the end). Resuming sees the whole text, so batching never
  // changes the words.
  static constexpr size_t kBatch = 512;
  size_t run(std::string_view text, size_t pos, std::vector<std::string_view>& out) const;

  Engine engine() const { return engine_; }

 private:
  struct Regex;
  PreTokenizer() = default;

  Engine engine_ = Engine::none;
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

// The hand-written matchers (pretokenizer_qwen.cpp): words of `text` from `pos` under the Qwen2
// pattern or, with qwen35, the Qwen3.5 one (\p{M} counted with letters and excluded from
// punctuation); at most max_words, returning where to continue.
size_t split_qwen(std::string_view text, size_t pos, bool qwen35, size_t max_words,
                  std::vector<std::string_view>& out);

}  // namespace orchid
