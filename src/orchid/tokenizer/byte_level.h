// GPT-2's byte-level alphabet: every byte gets a printable code point so byte strings can be
// BPE vocabulary entries. Printable Latin-1 bytes (!..~, ¡..¬, ®..ÿ) map to themselves; the
// other 68 bytes map to U+0100.. in byte order (space → U+0120 'Ġ', newline → U+010A 'Ċ').
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace orchid::byte_level {

// Code point standing for byte b.
uint32_t byte_to_char(uint8_t b);

// Byte a code point stands for, or -1 if it is not in the alphabet.
int char_to_byte(uint32_t cp);

// The UTF-8 text of byte b's code point (what vocabulary strings are made of).
std::string byte_to_text(uint8_t b);

// Decodes a vocabulary string back to raw bytes, as the ByteLevel decoder does: false (and
// `out` untouched) if some character is outside the alphabet — the decoder then keeps the
// token's own UTF-8 bytes.
bool text_to_bytes(std::string_view token, std::string& out);

}  // namespace orchid::byte_level
