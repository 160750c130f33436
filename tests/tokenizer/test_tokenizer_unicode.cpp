// The tokenizer's building blocks: GPT-2 byte-level alphabet, UTF-8 validation and lossy repair
// (maximal subparts), the held-back tail for streaming, code-point classes (including the
// Unicode 16 additions Oniguruma knows) and NFC as the tokenizers crate computes it.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "orchid/tokenizer/byte_level.h"
#include "orchid/tokenizer/unicode.h"

namespace orchid {
namespace {

using namespace std::string_literals;

std::string lossy(const std::string& s) {
  std::string out;
  unicode::append_utf8_lossy(s, out);
  return out;
}

std::string nfc(const std::string& s) {
  std::string out;
  unicode::append_nfc(s, out);
  return out;
}

TEST(TokenizerByteLevel, PrintableBytesMapToThemselvesOthersFromU0100) {
  EXPECT_EQ(byte_level::byte_to_char('!'), uint32_t('!'));
  EXPECT_EQ(byte_level::byte_to_char('~'), uint32_t('~'));
  EXPECT_EQ(byte_level::byte_to_char(0xA1), 0xA1u);
  EXPECT_EQ(byte_level::byte_to_char(0xFF), 0xFFu);
  EXPECT_EQ(byte_level::byte_to_char(0x00), 0x100u);
  EXPECT_EQ(byte_level::byte_to_char(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_level::byte_to_char('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_level::byte_to_char(0x7F), 0x121u);
  EXPECT_EQ(byte_level::byte_to_char(0xAD), 0x143u);  // the last one
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    uint32_t cp = byte_level::byte_to_char(uint8_t(b));
    EXPECT_TRUE(seen.insert(cp).second) << b;
    EXPECT_EQ(byte_level::char_to_byte(cp), b);
  }
  EXPECT_EQ(byte_level::char_to_byte(0x144), -1);
  EXPECT_EQ(byte_level::char_to_byte(' '), -1);  // space is 'Ġ' in the alphabet
}

TEST(TokenizerByteLevel, TextToBytes) {
  std::string out;
  EXPECT_TRUE(byte_level::text_to_bytes("ĠhelloĊ", out));
  EXPECT_EQ(out, " hello\n");
  out.clear();
  EXPECT_TRUE(byte_level::text_to_bytes("ä¸Ń", out));  // the bytes of 中
  EXPECT_EQ(out, "中");
  out = "keep";
  EXPECT_FALSE(byte_level::text_to_bytes("a b", out));  // ' ' is outside the alphabet
  EXPECT_EQ(out, "keep");
  EXPECT_FALSE(byte_level::text_to_bytes("中", out));
}

TEST(TokenizerUtf8, Validation) {
  EXPECT_TRUE(unicode::is_valid_utf8(""));
  EXPECT_TRUE(unicode::is_valid_utf8("plain ascii text longer than eight bytes"));
  EXPECT_TRUE(unicode::is_valid_utf8("é中😀\xF4\x8F\xBF\xBF"));
  for (std::string bad :
       {"\x80"s, "\xC0\xAF"s, "\xC3"s, "\xE0\x80\x80"s, "\xED\xA0\x80"s, "\xF0\x8F\xBF\xBF"s,
        "\xF4\x90\x80\x80"s, "\xF5\x80\x80\x80"s, "\xFF"s, "abcdefgh\xE2\x82"s})
    EXPECT_FALSE(unicode::is_valid_utf8(bad)) << bad;
}

TEST(TokenizerUtf8, LossyReplacesMaximalSubparts) {
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(lossy("ok é"), "ok é");
  EXPECT_EQ(lossy("a\x80z"), "a" + R + "z");
  EXPECT_EQ(lossy("\xE2\x82"
                  "A"),
            R + "A");                           // truncated 3-byte: one replacement
  EXPECT_EQ(lossy("\xF0\x9F\x98"), R);          // truncated at the end
  EXPECT_EQ(lossy("\xED\xA0\x80"), R + R + R);  // surrogate: ED is a subpart of nothing longer
  EXPECT_EQ(lossy("\xC0\xAF"), R + R);          // overlong lead
  EXPECT_EQ(lossy("\xE0\x80\x80"), R + R + R);
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), R + R + R + R);  // above U+10FFFF
  EXPECT_EQ(lossy("\xF8\x88\x80\x80\x80"), R + R + R + R + R);
  EXPECT_EQ(lossy("\xE2\x28\xA1"), R + "(" + R);
}

TEST(TokenizerUtf8, IncompleteTail) {
  EXPECT_EQ(unicode::incomplete_utf8_tail(""), 0u);
  EXPECT_EQ(unicode::incomplete_utf8_tail("abc"), 0u);
  EXPECT_EQ(unicode::incomplete_utf8_tail("abc\xC3"), 1u);
  EXPECT_EQ(unicode::incomplete_utf8_tail("abc\xE2\x82"), 2u);
  EXPECT_EQ(unicode::incomplete_utf8_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(unicode::incomplete_utf8_tail("\xE2\x82\xAC"), 0u);  // complete
  EXPECT_EQ(unicode::incomplete_utf8_tail("\x80"), 0u);          // can never complete
  EXPECT_EQ(unicode::incomplete_utf8_tail("\xE2\x41"), 0u);
  EXPECT_EQ(unicode::incomplete_utf8_tail("\xED\xA0"), 0u);  // would be a surrogate
  EXPECT_EQ(unicode::incomplete_utf8_tail("\xF0\x9F\x98\x80\x80"), 0u);
}

TEST(TokenizerUnicode, CharacterClasses) {
  const auto& t = unicode::CharTable::get();
  EXPECT_EQ(t.flags('a'), unicode::kLetter);
  EXPECT_EQ(t.flags('7'), unicode::kNumber);
  EXPECT_EQ(t.flags('_'), 0);
  EXPECT_EQ(t.flags(' '), unicode::kSpace);
  EXPECT_TRUE(t.flags(0x4E2D) & unicode::kLetter);  // 中
  EXPECT_TRUE(t.flags(0x0663) & unicode::kNumber);  // ٣
  EXPECT_TRUE(t.flags(0x2167) & unicode::kNumber);  // Ⅷ (Nl)
  EXPECT_TRUE(t.flags(0x00B2) & unicode::kNumber);  // ² (No)
  EXPECT_TRUE(t.flags(0x0301) & unicode::kMark);
  EXPECT_TRUE(t.flags(0x0E31) & unicode::kMark);  // Thai vowel sign
  EXPECT_TRUE(t.flags(0xFE0F) & unicode::kMark);  // variation selector
  EXPECT_TRUE(t.flags(0x3000) & unicode::kSpace);
  EXPECT_TRUE(t.flags(0x0085) & unicode::kSpace);
  EXPECT_FALSE(t.flags(0x180E) & unicode::kSpace);   // not White_Space since Unicode 6.3
  EXPECT_FALSE(t.flags(0x200B) & unicode::kSpace);   // zero width space is Cf
  EXPECT_TRUE(t.flags(0x1C89) & unicode::kLetter);   // Unicode 16, as Oniguruma has it
  EXPECT_TRUE(t.flags(0x10D40) & unicode::kNumber);  // Unicode 16 digit
  EXPECT_TRUE(t.flags(0x0897) & unicode::kMark);     // Unicode 16 mark
  EXPECT_TRUE(t.flags(0x31350) & unicode::kLetter);  // CJK Extension H (15.0)
  EXPECT_EQ(t.flags(0x10FFFF), 0);
  EXPECT_EQ(t.flags(0x110000), 0);
}

TEST(TokenizerUnicode, NfcComposesReordersAndMatchesTokenizersTables) {
  EXPECT_EQ(nfc("cafe\u0301"), "café");
  EXPECT_EQ(nfc("\u212B"), "\u00C5");                // Angstrom sign → Å
  EXPECT_EQ(nfc("\u2126"), "\u03A9");                // Ohm sign → Ω
  EXPECT_EQ(nfc("\uF900"), "\u8C48");                // CJK compatibility ideograph
  EXPECT_EQ(nfc("\u1100\u1161\u11A8"), "\uAC01");    // conjoining jamo → 각
  EXPECT_EQ(nfc("\uAC00\u11A8"), "\uAC01");          // LV + T
  EXPECT_EQ(nfc("a\u0301\u0323"), "\u1EA1\u0301");   // reorder, then compose ạ
  EXPECT_EQ(nfc("q\u0307\u0323"), "q\u0323\u0307");  // reorder only
  EXPECT_EQ(nfc(">\u0338"), "\u226F");               // ≯
  EXPECT_EQ(nfc("\u0301 lone"), "\u0301 lone");
  EXPECT_EQ(nfc("no change 中文 ✓"), "no change 中文 ✓");
  // Newer than the crate's Unicode 9 tables: U+1DF6 counts as a starter there, so 'a' and
  // U+0301 stay apart; U+11935 U+11930 (composing since 13.0) stay two characters.
  EXPECT_EQ(nfc("a\u1DF6\u0301"), "a\u1DF6\u0301");
  EXPECT_EQ(nfc("\U00011935\U00011930"), "\U00011935\U00011930");
  EXPECT_TRUE(unicode::nfc_quick_check("plain ascii, 中文, ąę"));
  EXPECT_FALSE(unicode::nfc_quick_check("e\u0301"));
  EXPECT_FALSE(unicode::nfc_quick_check("\u212B"));
}

TEST(TokenizerUnicode, WordCharactersForSingleWord) {
  for (uint32_t cp :
       {uint32_t('a'), uint32_t('_'), uint32_t('5'), 0x2167u, 0x0301u, 0x200Du, 0x203Fu})
    EXPECT_TRUE(unicode::is_word_char(cp)) << cp;
  for (uint32_t cp : {uint32_t(' '), uint32_t('.'), 0x00B2u, 0x3000u})
    EXPECT_FALSE(unicode::is_word_char(cp)) << cp;
}

}  // namespace
}  // namespace orchid
