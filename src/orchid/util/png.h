// PNG encoding of an 8-bit RGB image (zlib deflate), for the benchmark charts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orchid/util/status.h"

namespace orchid {

// A width × height image, rows top to bottom, 3 bytes (R, G, B) per pixel.
struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

// The PNG file bytes of img (colour type 2, bit depth 8, no filtering, no interlace).
Expected<std::string> encode_png(const RgbImage& img);

}  // namespace orchid
