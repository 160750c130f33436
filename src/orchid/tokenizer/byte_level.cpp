// The byte-level alphabet as two constant tables built at compile time.
#include "orchid/tokenizer/byte_level.h"

#include "orchid/tokenizer/unicode.h"

namespace orchid::byte_level {
namespace {

constexpr bool printable(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<uint16_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // indexed by code point; the alphabet ends at U+0143
};

constexpr Tables make_tables() {
  Tables t;
  for (auto& v : t.to_byte) v = -1;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    int cp = printable(b) ? b : next++;
    t.to_char[size_t(b)] = uint16_t(cp);
    t.to_byte[size_t(cp)] = int16_t(b);
  }
  return t;
}

constexpr Tables kTables = make_tables();
static_assert(kTables.to_char[' '] == 0x120 && kTables.to_char['\n'] == 0x10A);

}  // namespace

uint32_t byte_to_char(uint8_t b) {
  return kTables.to_char[b];
}

int char_to_byte(uint32_t cp) {
  return cp < kTables.to_byte.size() ? kTables.to_byte[cp] : -1;
}

std::string byte_to_text(uint8_t b) {
  std::string s;
  unicode::append_utf8(byte_to_char(b), s);
  return s;
}

bool text_to_bytes(std::string_view token, std::string& out) {
  size_t start = out.size();
  for (size_t i = 0; i < token.size();) {
    auto lead = static_cast<unsigned char>(token[i]);
    int len = 1;
    uint32_t cp = lead;
    if (lead >= 0x80) {
      if (unicode::valid_sequence_length(reinterpret_cast<const unsigned char*>(token.data() + i),
                                         token.size() - i) == 0)
        return out.resize(start), false;
      cp = unicode::decode_utf8(token.data() + i, len);
    }
    int b = char_to_byte(cp);
    if (b < 0) return out.resize(start), false;
    out += char(b);
    i += size_t(len);
  }
  return true;
}

}  // namespace orchid::byte_level
