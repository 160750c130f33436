// StreamingDetokenizer: output is always whole UTF-8 characters, whatever byte positions the
// tokens cut the text at; ill-formed bytes come out as U+FFFD as soon as they cannot complete;
// the concatenated output equals decode().
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "orchid/tokenizer/unicode.h"
#include "test_tokenizer_util.h"

namespace orchid {
namespace {

using test::byte_ids;
using test::tiny_tokenizer;
using Ids = std::vector<int32_t>;

// Streams ids; checks every piece is valid UTF-8; returns the concatenation.
std::string stream(const Tokenizer& t, const Ids& ids, bool skip_special = false) {
  StreamingDetokenizer d(t, skip_special);
  std::string all;
  for (int32_t id : ids) {
    auto piece = d.push(id);
    EXPECT_TRUE(piece.ok()) << piece.message();
    if (!piece.ok()) return all;
    EXPECT_TRUE(unicode::is_valid_utf8(*piece)) << "partial UTF-8 emitted after id " << id;
    all += *piece;
  }
  std::string rest = d.flush();
  EXPECT_TRUE(unicode::is_valid_utf8(rest));
  return all + rest;
}

TEST(StreamingDetokenizer, HoldsBackSplitCharacters) {
  Tokenizer t = tiny_tokenizer();
  StreamingDetokenizer d(t, false);
  EXPECT_EQ(*d.push('a'), "a");
  EXPECT_EQ(*d.push(0xE4), "");  // first byte of 中
  EXPECT_EQ(*d.push(0xB8), "");
  EXPECT_EQ(*d.push(0xAD), "中");
  EXPECT_EQ(*d.push(0xF0), "");  // 😀 = F0 9F 98 80
  EXPECT_EQ(*d.push(0x9F), "");
  EXPECT_EQ(*d.push(0x98), "");
  EXPECT_EQ(*d.push(0x80), "😀");
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamingDetokenizer, EveryCutPositionOfMultiByteText) {
  Tokenizer t = tiny_tokenizer();
  const std::string text = "aé中😀 ok\u0301 ١٢ 👩\u200d💻!";
  // Byte tokens cut at every position; also mixed with multi-byte tokens from encode().
  EXPECT_EQ(stream(t, byte_ids(text)), text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    Ids ids = t.encode(text.substr(0, cut));
    Ids tail = byte_ids(text.substr(cut));
    ids.insert(ids.end(), tail.begin(), tail.end());
    EXPECT_EQ(stream(t, ids), *t.decode(ids)) << "cut at " << cut;
  }
}

TEST(StreamingDetokenizer, IllFormedBytesBecomeReplacementCharacters) {
  Tokenizer t = tiny_tokenizer();
  StreamingDetokenizer d(t, false);
  EXPECT_EQ(*d.push(0xE4), "");
  EXPECT_EQ(*d.push('A'), "\uFFFDA");  // E4 can no longer complete
  EXPECT_EQ(*d.push(0x80), "\uFFFD");  // a lone continuation byte
  EXPECT_EQ(*d.push(0xF0), "");
  EXPECT_EQ(*d.push(0x9F), "");
  EXPECT_EQ(d.flush(), "\uFFFD");  // incomplete at the end: one U+FFFD, as decode gives
  EXPECT_EQ(*d.push('z'), "z");    // flush resets

  for (Ids ids :
       {Ids{0xED, 0xA0, 0x80}, Ids{0xC0, 0xAF, 'x'}, Ids{0xE2, 0x82}, Ids{0xFF, 0xE4, 0xB8}})
    EXPECT_EQ(stream(t, ids), *t.decode(ids));
}

TEST(StreamingDetokenizer, SkipsSpecialTokensAndRejectsUnknownIds) {
  Tokenizer t = tiny_tokenizer();
  Ids ids = {test::kHello, test::kSpecial, test::kPlainAdded, test::kSpaceWorld};
  EXPECT_EQ(stream(t, ids, true), "hello<plain> world");
  EXPECT_EQ(stream(t, ids, false), "hello<|special|><plain> world");
  StreamingDetokenizer d(t, false);
  auto r = d.push(1 << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find(std::to_string(1 << 20)), std::string::npos) << r.message();
}

}  // namespace
}  // namespace orchid
