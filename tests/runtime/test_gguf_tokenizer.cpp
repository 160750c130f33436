// A GGUF's tokenizer.ggml.* metadata as a tokenizer (runtime/gguf_tokenizer.h): the demo model's
// tokenizer.json written as llama.cpp's converter writes it (tokens in id order with their
// types, merges as "a b", a padding token of type unused, pre "qwen2") encodes and decodes every
// test text as the tokenizer.json does; a GGUF file's chat assets come from it alone; an
// unsupported model or pre-tokenizer is an error naming the key.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../model/gguf_fixture.h"
#include "orchid/runtime/chat_assets.h"
#include "orchid/runtime/gguf_tokenizer.h"
#include "orchid/tokenizer/tokenizer.h"

namespace orchid {
namespace {

using gguf_fixture::integer;
using gguf_fixture::text;

const std::string kDemo = std::string(ORCHID_SOURCE_DIR) + "/models/orchid-demo/tokenizer.json";

GgufFile tokenizer_file(const std::string& json_text, const std::string& pre) {
  GgufFile f;
  gguf_fixture::add_tokenizer(f, json_text, pre);
  return f;
}

using gguf_fixture::read;

const char* const kTexts[] = {
    "Hello, world! What does orchid mean?",
    "  leading spaces\n\nand\tTabs\r\n",
    "numbers 1234567 and 3.14159, dates 2026-12-04",
    "unicode: naïve café, 東京, emoji 🌸🌸, Ελληνικά",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nhello",
    "don't won't I'll we've they're",
};

TEST(GgufTokenizer, EncodesAsTheTokenizerJsonItCameFrom) {
  const std::string json_text = read(kDemo);
  auto want = Tokenizer::from_json(json_text, "demo");
  ASSERT_TRUE(want.ok()) << want.message();
  auto json = gguf_tokenizer_json(tokenizer_file(json_text, "qwen2"), "demo.gguf");
  ASSERT_TRUE(json.ok()) << json.message();
  auto got = Tokenizer::from_json(*json, "demo.gguf");
  ASSERT_TRUE(got.ok()) << got.message();
  EXPECT_EQ(got->vocab_size(), want->vocab_size());
  for (const char* t : kTexts) {
    const std::vector<int32_t> ids = want->encode(t);
    EXPECT_EQ(got->encode(t), ids) << t;
    auto back = got->decode(ids);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, *want->decode(ids)) << t;
  }
  for (const char* s : {"<|im_end|>", "<|endoftext|>"}) {
    ASSERT_TRUE(want->token_id(s).has_value()) << s;
    EXPECT_EQ(got->token_id(s), want->token_id(s)) << s;
    EXPECT_EQ(got->is_special(*got->token_id(s)), want->is_special(*want->token_id(s))) << s;
  }
}

TEST(GgufTokenizer, AFilesChatAssetsComeFromItAlone) {
  GgufFile f = tokenizer_file(read(kDemo), "qwen2");
  auto demo = Tokenizer::from_json(read(kDemo), "demo");
  ASSERT_TRUE(demo.ok());
  const int32_t im_end = *demo->token_id("<|im_end|>");
  f.metadata["tokenizer.ggml.eos_token_id"] = integer(im_end);
  f.metadata["tokenizer.chat_template"] =
      text("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
           "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  const std::vector<uint8_t> bytes = gguf_fixture::file_bytes(f);
  const std::string path = ::testing::TempDir() + "tok.gguf";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              std::streamsize(bytes.size()));
  auto assets = load_chat_assets(path);
  ASSERT_TRUE(assets.ok()) << assets.message();
  EXPECT_EQ(assets->stop_ids, std::vector<int32_t>{im_end});
  const nlohmann::ordered_json msgs = nlohmann::ordered_json::parse(R"([{"role":"user","content":"hi"}])");
  auto prompt = assets->chat_template.render(msgs, nlohmann::ordered_json::array(), ChatTemplateOptions{});
  ASSERT_TRUE(prompt.ok()) << prompt.message();
  EXPECT_EQ(*prompt, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  std::remove(path.c_str());
}

TEST(GgufTokenizer, UnsupportedTokenizersAreErrorsNamingTheKey) {
  const std::string json_text = read(kDemo);
  auto pre = gguf_tokenizer_json(tokenizer_file(json_text, "llama-bpe"), "x.gguf");
  ASSERT_FALSE(pre.ok());
  EXPECT_NE(pre.message().find("tokenizer.ggml.pre"), std::string::npos) << pre.message();
  GgufFile f = tokenizer_file(json_text, "qwen35");
  f.metadata["tokenizer.ggml.model"] = text("llama");
  auto model = gguf_tokenizer_json(f, "x.gguf");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.message().find("tokenizer.ggml.model"), std::string::npos) << model.message();
  f = tokenizer_file(json_text, "qwen35");
  f.metadata.erase("tokenizer.ggml.merges");
  auto merges = gguf_tokenizer_json(f, "x.gguf");
  ASSERT_FALSE(merges.ok());
  EXPECT_NE(merges.message().find("tokenizer.ggml.merges"), std::string::npos) << merges.message();
}

}  // namespace
}  // namespace orchid
