// Reading tokenizer.json: one SAX pass over the file (~11 MB for Qwen) that stores the BPE
// vocabulary and merges straight into arenas and keeps every other section (added_tokens,
// normalizer, pre_tokenizer, decoder, the model's scalar fields) as a small JSON tree.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "orchid/tokenizer/bpe.h"
#include "orchid/util/status.h"

namespace orchid {

struct TokenizerJson {
  BpeSpec bpe;              // vocab + merges (unk_token etc. are filled by the caller)
  bool has_model = false;   // "model" present and an object
  bool has_vocab = false;   // "model.vocab"
  bool has_merges = false;  // "model.merges"
  nlohmann::json model;     // the model's other fields ("type", "dropout", ...)
  nlohmann::json sections;  // the top-level fields other than "model"
};

// Parses tokenizer.json text. Errors name the field (or byte offset) and what was expected.
Expected<TokenizerJson> parse_tokenizer_json(std::string_view text);

}  // namespace orchid
