// The text ↔ token-id API: byte-level BPE loaded from a Hugging Face tokenizer.json and run
// exactly as the tokenizers library runs Qwen2/3/3.5 (NFC, Split regex, ByteLevel, BPE, added
// tokens matched as whole strings first), plus a UTF-8-safe streaming detokenizer.
//
// Supported tokenizer.json shapes (anything else is a load error naming the field):
//   model: BPE (dropout null/0, byte_fallback false, no subword prefix/suffix; unk_token,
//          fuse_unk and ignore_merges honoured; merges as [a, b] pairs or "a b" strings)
//   normalizer: null or NFC (also inside a Sequence)
//   pre_tokenizer: Sequence[Split(Regex|String, Isolated), ByteLevel(add_prefix_space false,
//          use_regex false)], or ByteLevel(add_prefix_space false) alone (GPT-2 regex)
//   decoder: ByteLevel
// Added-token ids are assigned as the tokenizers crate does (the vocabulary id when the content
// is in the vocabulary, else the next free id), which are the file's ids in a consistent file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "orchid/util/status.h"

namespace orchid {

class Tokenizer {
 public:
  // Reads tokenizer.json. Errors name the path and the field (missing model/vocab/merges, a bad
  // regex, a merge whose token is not in the vocabulary, an unsupported component, ...).
  static Expected<Tokenizer> load(const std::string& tokenizer_json_path);
  // The same from the file's text; `name` prefixes error messages.
  static Expected<Tokenizer> from_json(std::string_view json_text, const std::string& name);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Ids of `text` (any bytes: invalid UTF-8 becomes U+FFFD first, as
  // String::from_utf8_lossy would). Added/special-token strings in the text are recognised;
  // nothing is added (no BOS). Thread-safe.
  std::vector<int32_t> encode(std::string_view text) const;

  // Text of `ids`: the tokens' bytes joined, then invalid UTF-8 replaced by U+FFFD. With
  // skip_special, tokens whose added_tokens entry has "special": true are left out. An id
  // outside the vocabulary is an error naming it and its position.
  Expected<std::string> decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Id of a vocabulary string (byte-level alphabet, e.g. "Ġthe") or an added token's content.
  std::optional<int32_t> token_id(std::string_view token_text) const;
  // Raw bytes id decodes to (possibly part of a UTF-8 sequence); nullopt outside the vocabulary.
  std::optional<std::string_view> token_bytes(int32_t id) const;
  int64_t vocab_size() const;  // 1 + largest id
  bool is_special(int32_t id) const;

  // Which split engine runs: "qwen2", "qwen35" (hand-written), "regex" (PCRE2), "literal",
  // "none". For tests and benchmarks.
  const char* pretokenizer_engine() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// UTF-8-safe incremental decode: push ids one at a time and get the text that is complete so
// far. Bytes of a character split across tokens are held back until it completes; bytes that
// can no longer become valid UTF-8 come out as U+FFFD at once. The concatenated output equals
// decode() of all the ids.
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer& tok, bool skip_special);
  Expected<std::string> push(int32_t id);  // text complete so far (may be empty)
  std::string flush();                     // the rest (incomplete bytes → U+FFFD); resets

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence (at most 3)
};

}  // namespace orchid
