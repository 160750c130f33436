// A 5 × 7 pixel bitmap font for printable ASCII (32-126), drawn from scratch for chart labels:
// rows top to bottom, bit 4 of each row byte the leftmost pixel, bit 0 the rightmost.
#pragma once

#include <array>
#include <cstdint>

namespace orchid {

constexpr int kGlyphWidth = 5, kGlyphHeight = 7;

// The glyph of c; characters outside 32-126 get the glyph of '?'.
const std::array<uint8_t, kGlyphHeight>& glyph5x7(char c);

}  // namespace orchid
