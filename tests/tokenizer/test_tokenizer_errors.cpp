// Broken or unsupported tokenizer.json files fail to load with a message naming the file and
// the problem: not JSON, missing model/vocab/merges, wrongly typed sections, merges naming
// unknown tokens, a bad regex, unsupported components.
#include <gtest/gtest.h>

#include <string>

#include "../test_util.h"
#include "test_tokenizer_util.h"

namespace orchid {
namespace {

using json = nlohmann::json;
using test::contains;
using test::tiny_tokenizer_json;

// Loads `j` (or raw text) and returns the error message ("" if it loaded).
std::string load_text_error(const std::string& text) {
  auto t = Tokenizer::from_json(text, "dir/tokenizer.json");
  return t.ok() ? "" : t.message();
}
std::string load_error(const json& j) {
  return load_text_error(j.dump());
}

TEST(TokenizerLoad, FileErrorsNameThePath) {
  auto t = Tokenizer::load("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(contains(t.message(), "/nonexistent/dir/tokenizer.json"));

  test::ScratchDir dir;
  std::string path = dir / "tokenizer.json";
  test::write_text(path, tiny_tokenizer_json().dump());
  EXPECT_TRUE(Tokenizer::load(path).ok());
  uintmax_t size = std::filesystem::file_size(path);
  test::truncate_file(path, size / 2);
  auto cut = Tokenizer::load(path);
  ASSERT_FALSE(cut.ok());
  EXPECT_TRUE(contains(cut.message(), path));
  EXPECT_TRUE(contains(cut.message(), "invalid JSON at byte"));
  test::truncate_file(path, size + 100);  // zero padding
  auto padded = Tokenizer::load(path);
  ASSERT_FALSE(padded.ok());
  EXPECT_TRUE(contains(padded.message(), "NUL byte at offset"));
}

TEST(TokenizerLoad, NotJson) {
  EXPECT_TRUE(contains(load_text_error("{\"model\": "), "invalid JSON"));
  EXPECT_TRUE(contains(load_text_error("[1, 2]"), "expected a JSON object"));
  EXPECT_TRUE(contains(load_text_error(""), "invalid JSON"));
  EXPECT_TRUE(contains(load_text_error("{}"), "dir/tokenizer.json: missing \"model\""));
}

TEST(TokenizerLoad, MissingOrMalformedModel) {
  json j = tiny_tokenizer_json();
  j.erase("model");
  EXPECT_TRUE(contains(load_error(j), "missing \"model\""));

  j = tiny_tokenizer_json();
  j["model"] = "BPE";
  EXPECT_TRUE(contains(load_error(j), "model: expected an object"));

  j = tiny_tokenizer_json();
  j["model"].erase("vocab");
  EXPECT_TRUE(contains(load_error(j), "missing model.vocab"));

  j = tiny_tokenizer_json();
  j["model"].erase("merges");
  EXPECT_TRUE(contains(load_error(j), "missing model.merges"));

  j = tiny_tokenizer_json();
  j["model"]["vocab"] = json::array({"a"});
  EXPECT_TRUE(contains(load_error(j), "model.vocab: expected an object"));

  j = tiny_tokenizer_json();
  j["model"]["vocab"]["zzz"] = "seven";
  EXPECT_TRUE(contains(load_error(j), "model.vocab[\"zzz\"]: expected an integer id"));

  j = tiny_tokenizer_json();
  j["model"]["vocab"]["zzz"] = -4;
  EXPECT_TRUE(contains(load_error(j), "'zzz' has id -4"));

  j = tiny_tokenizer_json();
  j["model"]["merges"] = json::object();
  EXPECT_TRUE(contains(load_error(j), "model.merges: expected an array"));

  j = tiny_tokenizer_json();
  j["model"]["merges"].push_back(json::array({"a", "b", "c"}));
  EXPECT_TRUE(contains(load_error(j), "expected a pair of strings"));

  j = tiny_tokenizer_json();
  j["model"]["merges"].push_back("nospace");
  EXPECT_TRUE(contains(load_error(j), "expected \"a b\""));

  j = tiny_tokenizer_json();
  j["model"]["type"] = "WordPiece";
  EXPECT_TRUE(contains(load_error(j), "model.type \"WordPiece\" is not supported"));

  j = tiny_tokenizer_json();
  j["model"]["dropout"] = 0.1;
  EXPECT_TRUE(contains(load_error(j), "model.dropout"));

  j = tiny_tokenizer_json();
  j["model"]["unk_token"] = "<unk>";
  EXPECT_TRUE(contains(load_error(j), "model.unk_token '<unk>' is not in model.vocab"));
}

TEST(TokenizerLoad, MergesMustNameVocabularyTokens) {
  json j = tiny_tokenizer_json();
  size_t n = j["model"]["merges"].size();
  j["model"]["merges"].push_back({"he", "ZZ"});
  std::string e = load_error(j);
  EXPECT_TRUE(contains(e, "model.merges[" + std::to_string(n) + "]"));
  EXPECT_TRUE(contains(e, "'ZZ' is not in model.vocab"));

  j = tiny_tokenizer_json();
  j["model"]["merges"].push_back({"x", "y"});  // both exist, "xy" does not
  EXPECT_TRUE(contains(load_error(j), "the merged token 'xy' is not in model.vocab"));
}

TEST(TokenizerLoad, LegacyMergeStringsAreAccepted) {
  json j = tiny_tokenizer_json();
  json legacy = json::array();
  for (const auto& m : j["model"]["merges"])
    legacy.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  j["model"]["merges"] = legacy;
  auto t = Tokenizer::from_json(j.dump(), "legacy");
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->encode("hello world"), (std::vector<int32_t>{test::kHello, test::kSpaceWorld}));
}

TEST(TokenizerLoad, BadRegexAndUnsupportedComponents) {
  json j = tiny_tokenizer_json("([unclosed");
  std::string e = load_error(j);
  EXPECT_TRUE(contains(e, "pre_tokenizer: bad Split regex at offset")) << e;

  j = tiny_tokenizer_json();
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_TRUE(contains(load_error(j), "normalizer: type 'Lowercase' is not supported"));

  j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_TRUE(contains(load_error(j), "pre_tokenizer:"));

  j = tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  EXPECT_TRUE(contains(load_error(j), "Split behavior 'Removed' is not supported"));

  j = tiny_tokenizer_json();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_TRUE(contains(load_error(j), "decoder:"));

  j = tiny_tokenizer_json();
  j["added_tokens"].push_back({{"id", 400}});
  EXPECT_TRUE(contains(load_error(j), "added_tokens[6]: expected an object with a string"));

  j = tiny_tokenizer_json();
  j["normalizer"] = nullptr;  // no normalizer is fine
  EXPECT_EQ(load_error(j), "");
}

}  // namespace
}  // namespace orchid
