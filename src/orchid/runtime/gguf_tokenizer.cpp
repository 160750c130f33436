// gguf_tokenizer: tokenizer.ggml.* metadata → tokenizer.json text.
#include "orchid/runtime/gguf_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>

#include "orchid/tokenizer/pretokenizer.h"

namespace orchid {
namespace {

constexpr int64_t kControl = 3, kUserDefined = 4, kUnused = 5;

// The string list under key, or an error naming it.
Expected<const std::vector<GgufValue>*> strings(const GgufFile& f, std::string_view key,
                                                std::string_view file) {
  const GgufValue* v = f.get(key);
  if (!v) return err(file, ": missing metadata '", key, "'");
  if (v->type != GgufValueType::ARRAY || v->elem != GgufValueType::STRING)
    return err(file, ": metadata '", key, "' must be an array of strings");
  return &v->array;
}

}  // namespace

Expected<std::string> gguf_tokenizer_json(const GgufFile& f, std::string_view file) {
  const GgufValue* model = f.get("tokenizer.ggml.model");
  if (!model || model->type != GgufValueType::STRING || model->s != "gpt2")
    return err(file, ": metadata 'tokenizer.ggml.model' must be \"gpt2\" (byte-level BPE)");
  const GgufValue* pre = f.get("tokenizer.ggml.pre");
  const std::string pre_name = pre && pre->type == GgufValueType::STRING ? pre->s : "";
  const char* pattern = pre_name == "qwen35"  ? PreTokenizer::kQwen35Pattern
                        : pre_name == "qwen2" ? PreTokenizer::kQwen2Pattern
                                              : nullptr;
  if (!pattern)
    return err(file, ": metadata 'tokenizer.ggml.pre' is '", pre_name,
               "'; supported: qwen35, qwen2");
  auto tokens = strings(f, "tokenizer.ggml.tokens", file);
  if (!tokens) return tokens.error();
  auto merges = strings(f, "tokenizer.ggml.merges", file);
  if (!merges) return merges.error();
  const GgufValue* types = f.get("tokenizer.ggml.token_type");
  if (types && (types->type != GgufValueType::ARRAY || types->array.size() != (*tokens)->size() ||
                (!types->array.empty() && !types->array[0].is_integer())))
    return err(file, ": metadata 'tokenizer.ggml.token_type' must be integers, one a token");

  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (size_t id = 0; id < (*tokens)->size(); ++id) {
    const std::string& text = (**tokens)[id].s;
    const int64_t type = types ? types->array[id].i : 1;
    if (type == kUnused) continue;
    if (type == kControl || type == kUserDefined) {
      added.push_back({{"id", id},
                       {"content", text},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type == kControl}});
      continue;
    }
    vocab[text] = id;
  }
  nlohmann::ordered_json merge_list = nlohmann::ordered_json::array();
  for (const GgufValue& m : **merges) merge_list.push_back(m.s);
  const nlohmann::ordered_json byte_level = {{"type", "ByteLevel"},
                                             {"add_prefix_space", false},
                                             {"trim_offsets", false},
                                             {"use_regex", false}};
  nlohmann::ordered_json split = {{"type", "Split"},
                                   {"pattern", {{"Regex", pattern}}},
                                   {"behavior", "Isolated"},
                                   {"invert", false}};
  nlohmann::ordered_json pre_tok = {{"type", "Sequence"},
                                    {"pretokenizers", nlohmann::ordered_json::array({split, byte_level})}};
  nlohmann::ordered_json bpe = {{"type", "BPE"},
                                {"dropout", nullptr},
                                {"unk_token", nullptr},
                                {"continuing_subword_prefix", nullptr},
                                {"end_of_word_suffix", nullptr},
                                {"fuse_unk", false},
                                {"byte_fallback", false},
                                {"ignore_merges", false}};
  bpe["vocab"] = std::move(vocab);
  bpe["merges"] = std::move(merge_list);
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["version"] = "1.0";
  j["added_tokens"] = std::move(added);
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = std::move(pre_tok);
  j["decoder"] = byte_level;
  j["model"] = std::move(bpe);
  return j.dump();
}

std::string gguf_chat_template(const GgufFile& f) {
  const GgufValue* v = f.get("tokenizer.chat_template");
  return v && v->type == GgufValueType::STRING ? v->s : "";
}

std::vector<int32_t> gguf_stop_ids(const GgufFile& f) {
  std::vector<int32_t> ids;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (const GgufValue* v = f.get(key); v && v->is_integer() && v->i >= 0 && v->i < INT32_MAX)
      if (std::find(ids.begin(), ids.end(), int32_t(v->i)) == ids.end()) ids.push_back(int32_t(v->i));
  return ids;
}

}  // namespace orchid
