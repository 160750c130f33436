// Tokenizer behaviour on a hand-made tokenizer.json (test_tokenizer_util.h): ranked merges and
// their tie-break on both merge paths, added-token flags (lstrip, rstrip, single_word,
// normalized, special), id assignment, decode with and without special tokens, invalid UTF-8,
// the generic PCRE2 split and literal splits, and concurrent encodes. Expected ids come from
// running the same file through Hugging Face tokenizers.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "test_tokenizer_util.h"

namespace orchid {
namespace {

using namespace std::string_literals;
using test::byte_ids;
using test::tiny_tokenizer;
using test::tiny_tokenizer_json;
using Ids = std::vector<int32_t>;

TEST(Tokenizer, MergesByRank) {
  Tokenizer t = tiny_tokenizer();
  EXPECT_STREQ(t.pretokenizer_engine(), "qwen2");
  EXPECT_EQ(t.encode("hello world"), (Ids{test::kHello, test::kSpaceWorld}));
  EXPECT_EQ(t.encode("abc"), (Ids{'a', test::kBc}));  // "bc" ranks before "ab"
  EXPECT_EQ(t.encode("ab"), (Ids{test::kAb}));
  EXPECT_EQ(t.encode("aaa"), (Ids{test::kAa, 'a'}));  // equal ranks: leftmost first
  EXPECT_EQ(t.encode(""), Ids{});
  EXPECT_EQ(t.encode("x"), (Ids{'x'}));
}

TEST(Tokenizer, ShortAndLongWordMergePathsAgree) {
  Tokenizer t = tiny_tokenizer();
  // 20 symbols take the rescanning path, 50 the heap path.
  EXPECT_EQ(t.encode(std::string(20, 'a')), Ids(5, test::kAaaa));
  Ids fifty(12, test::kAaaa);
  fifty.push_back(test::kAa);
  EXPECT_EQ(t.encode(std::string(50, 'a')), fifty);
  // The same word twice: the second comes from the cache.
  EXPECT_EQ(t.encode(std::string(50, 'a')), fifty);
  std::string mixed;
  Ids want;
  for (int i = 0; i < 10; ++i) {
    mixed += "hello";
    want.push_back(test::kHello);
  }
  EXPECT_EQ(t.encode(mixed), want);
}

TEST(Tokenizer, UnknownBytesBecomeUnkTokens) {
  // A vocabulary without the alphabet characters of bytes 0x80..0xFF, and "<unk>" as id 128.
  auto j = tiny_tokenizer_json();
  for (int b = 128; b < 256; ++b) j["model"]["vocab"].erase(byte_level::byte_to_text(uint8_t(b)));
  j["model"]["vocab"]["<unk>"] = 128;
  j["model"]["unk_token"] = "<unk>";
  j["added_tokens"] = nlohmann::json::array();
  Tokenizer each = tiny_tokenizer(j);
  EXPECT_EQ(each.encode("a\u00E9\u4E2D"
                        "b"),
            (Ids{'a', 128, 128, 128, 128, 128, 'b'}));
  EXPECT_EQ(each.encode("h\u00E9llo"), (Ids{'h', 128, 128, test::kLl, 'o'}));
  j["model"]["fuse_unk"] = true;
  Tokenizer fused = tiny_tokenizer(j);
  EXPECT_EQ(fused.encode("a\u00E9\u4E2D"
                         "b"),
            (Ids{'a', 128, 'b'}));
  EXPECT_EQ(fused.encode("\u4E2D"), (Ids{128}));
}

TEST(Tokenizer, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  auto j = tiny_tokenizer_json();
  j["model"]["vocab"]["hel"] = 400;  // no merge builds it
  j["model"]["vocab"]["Ġhel"] = 401;
  j["added_tokens"] = nlohmann::json::array();
  EXPECT_EQ(tiny_tokenizer(j).encode("hel"), (Ids{test::kHe, 'l'}));
  j["model"]["ignore_merges"] = true;
  Tokenizer t = tiny_tokenizer(j);
  EXPECT_EQ(t.encode("hel"), (Ids{400}));
  EXPECT_EQ(t.encode(" hel"), (Ids{401}));
  EXPECT_EQ(t.encode("helx"), (Ids{test::kHe, 'l', 'x'}));
}

TEST(Tokenizer, AddedTokensAndFlags) {
  Tokenizer t = tiny_tokenizer();
  EXPECT_EQ(t.encode("<|special|>hello"), (Ids{test::kSpecial, test::kHello}));
  EXPECT_EQ(t.encode("hi<plain>"), (Ids{'h', 'i', test::kPlainAdded}));
  // lstrip takes the whitespace before (any White_Space), rstrip the whitespace after.
  EXPECT_EQ(t.encode("x  <L>y"), (Ids{'x', test::kLstrip, 'y'}));
  EXPECT_EQ(t.encode("x\u3000<L>y"), (Ids{'x', test::kLstrip, 'y'}));
  EXPECT_EQ(t.encode("<R>  \ty"), (Ids{test::kRstrip, 'y'}));
  EXPECT_EQ(t.encode("<R>\n\nz"), (Ids{test::kRstrip, 'z'}));
  // single_word: only between non-word characters.
  EXPECT_EQ(t.encode("a <W> b"), (Ids{'a', ' ', test::kSingleWord, ' ', 'b'}));
  EXPECT_EQ(t.encode("a<W>b"), (Ids{'a', '<', 'W', '>', 'b'}));
  EXPECT_EQ(t.encode("_<W>"), (Ids{'_', '<', 'W', '>'}));
  // normalized: matched after NFC, so the decomposed form matches too.
  EXPECT_EQ(t.encode("A\u030Ax"), (Ids{test::kNormalized}));
  EXPECT_EQ(t.encode("\u00C5x"), (Ids{test::kNormalized}));
  // Not quite a special token: plain BPE.
  EXPECT_EQ(t.encode("<|special|"), byte_ids("<|special|"));
}

TEST(Tokenizer, AddedTokenIdsAreAssignedAsTheTokenizersCrateDoes) {
  auto j = tiny_tokenizer_json();
  for (auto& a : j["added_tokens"]) a["id"] = a["id"].get<int>() + 1000;  // inconsistent ids
  j["added_tokens"].push_back({{"id", 5}, {"content", "hello"}, {"special", false}});
  Tokenizer t = tiny_tokenizer(j);
  EXPECT_EQ(t.token_id("<|special|>"), test::kSpecial);  // next id after the vocabulary
  EXPECT_EQ(t.token_id("<plain>"), test::kPlainAdded);
  EXPECT_EQ(t.token_id("hello"), test::kHello);  // already in the vocabulary
  EXPECT_EQ(t.vocab_size(), test::kPlainAdded + 1);
}

TEST(Tokenizer, DecodeAndSpecialTokens) {
  Tokenizer t = tiny_tokenizer();
  Ids ids = {test::kSpecial, test::kHello, test::kPlainAdded, test::kSpaceWorld};
  EXPECT_EQ(*t.decode(ids), "<|special|>hello<plain> world");
  EXPECT_EQ(*t.decode(ids, /*skip_special=*/true), "hello<plain> world");
  EXPECT_TRUE(t.is_special(test::kSpecial));
  EXPECT_FALSE(t.is_special(test::kPlainAdded));
  EXPECT_FALSE(t.is_special('a'));
  EXPECT_FALSE(t.is_special(-1));
  EXPECT_EQ(t.token_id("Ġworld"), test::kSpaceWorld);
  EXPECT_EQ(t.token_id("<|special|>"), test::kSpecial);
  EXPECT_EQ(t.token_id("nope"), std::nullopt);
  EXPECT_EQ(t.vocab_size(), test::kPlainAdded + 1);
  EXPECT_EQ(*t.token_bytes(test::kSpaceWorld), " world");
  // A byte token alone is not valid UTF-8: U+FFFD, as Python's errors='replace'.
  EXPECT_EQ(*t.decode(Ids{0xE4, 'a'}), "\uFFFDa");
  EXPECT_EQ(*t.decode(Ids{0xE4, 0xB8, 0xAD}), "中");
  // Added tokens go through the ByteLevel decoder too: "Åx" is the alphabet for bytes C5 78.
  EXPECT_EQ(*t.decode(Ids{test::kNormalized}), "\uFFFDx");
}

TEST(Tokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  Tokenizer t = tiny_tokenizer();
  auto r = t.decode(Ids{'a', 99999});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("99999"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("position 1"), std::string::npos) << r.message();
  EXPECT_FALSE(t.decode(Ids{-1}).ok());
  EXPECT_FALSE(t.decode(Ids{int32_t(t.vocab_size())}).ok());
  EXPECT_TRUE(t.decode(Ids{int32_t(t.vocab_size()) - 1}).ok());
  EXPECT_EQ(t.token_bytes(123456), std::nullopt);
}

TEST(Tokenizer, InvalidUtf8BecomesReplacementCharacter) {
  Tokenizer t = tiny_tokenizer();
  EXPECT_EQ(t.encode("a\xFF"
                     "b"),
            t.encode("a\uFFFDb"));
  EXPECT_EQ(t.encode("\xE2\x82"), t.encode("\uFFFD"));
  EXPECT_EQ(t.encode("x\xED\xA0\x80y"), t.encode("x\uFFFD\uFFFD\uFFFDy"));
  EXPECT_EQ(t.encode("<|special|>\xC3"), t.encode("<|special|>\uFFFD"));
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += char(b);
  auto ids = t.encode(all_bytes);  // never fatal
  EXPECT_FALSE(ids.empty());
  EXPECT_TRUE(t.decode(ids).ok());
}

TEST(Tokenizer, DecodeOfEncodeIsNfc) {
  Tokenizer t = tiny_tokenizer();
  const std::pair<std::string, std::string> cases[] = {
      {"hello world", "hello world"},
      {"Cafe\u0301 \u212B\n\n  x\t", "Caf\u00E9 \u00C5\n\n  x\t"},
      {"中文 😀 ١٢٣", "中文 😀 ١٢٣"},
      {"<|special|>hello<plain>", "<|special|>hello<plain>"},
      {"tabs\t\tand\r\nnewlines  \n", "tabs\t\tand\r\nnewlines  \n"},
  };
  for (const auto& [in, want] : cases) {
    auto text = t.decode(t.encode(in));
    ASSERT_TRUE(text.ok()) << text.message();
    EXPECT_EQ(*text, want);
  }
}

TEST(Tokenizer, GenericRegexAndLiteralSplits) {
  // The Qwen pattern wrapped in a group runs on PCRE2 and gives the same ids.
  std::string wrapped = std::string("(?:") + test::kQwen2Regex + ")";
  Tokenizer fast = tiny_tokenizer();
  Tokenizer generic = tiny_tokenizer(tiny_tokenizer_json(wrapped));
  EXPECT_STREQ(generic.pretokenizer_engine(), "regex");
  for (std::string s : {"hello world  it's IT'S\n\n\tx 123 中文 e\u0301 \u3000\u3000y"s,
                        std::string(300, ' ') + "x"s, "a\u0301\u0301 \u1C89\u1C89 \u0897"s})
    EXPECT_EQ(generic.encode(s), fast.encode(s)) << s;

  // A literal split: every match and every gap is a word.
  auto j = tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", "l"}};
  Tokenizer literal = tiny_tokenizer(j);
  EXPECT_STREQ(literal.pretokenizer_engine(), "literal");
  EXPECT_EQ(literal.encode("hello"), (Ids{test::kHe, 'l', 'l', 'o'}));

  // ByteLevel with use_regex: GPT-2's pattern.
  auto g = tiny_tokenizer_json();
  g["pre_tokenizer"] = {{"type", "ByteLevel"},
                        {"add_prefix_space", false},
                        {"trim_offsets", false},
                        {"use_regex", true}};
  Tokenizer gpt2 = tiny_tokenizer(g);
  EXPECT_STREQ(gpt2.pretokenizer_engine(), "regex");
  EXPECT_EQ(gpt2.encode("hello world"), (Ids{test::kHello, test::kSpaceWorld}));
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  Tokenizer t = tiny_tokenizer();
  std::string text;
  for (int i = 0; i < 200; ++i) text += "hello world aaa" + std::to_string(i) + " abc\n";
  const Ids want = t.encode(text);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      bool same = true;
      for (int i = 0; i < 50; ++i) same = same && t.encode(text) == want;
      ok[size_t(k)] = same;
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_TRUE(ok[size_t(k)]) << k;
}

TEST(Tokenizer, IsMovable) {
  Tokenizer a = tiny_tokenizer();
  Tokenizer b = std::move(a);
  EXPECT_EQ(b.encode("hello"), (Ids{test::kHello}));
  a = std::move(b);
  EXPECT_EQ(a.encode("hello"), (Ids{test::kHello}));
}

}  // namespace
}  // namespace orchid
