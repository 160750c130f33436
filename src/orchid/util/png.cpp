// PNG: the 8-byte signature, then chunks of (length, type, data, CRC-32 of type + data):
// IHDR (size, bit depth, colour type), one IDAT holding the zlib stream of the rows, each row
// prefixed by its filter type (0: none), and an empty IEND.
#include "orchid/util/png.h"

#include <zlib.h>

namespace orchid {
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(char((v >> s) & 0xff));
}

void put_chunk(std::string& out, const char (&type)[5], const std::string& data) {
  put_u32(out, uint32_t(data.size()));
  const size_t start = out.size();
  out.append(type, 4);
  out += data;
  const auto* p = reinterpret_cast<const Bytef*>(out.data() + start);
  put_u32(out, uint32_t(crc32(crc32(0L, Z_NULL, 0), p, uInt(out.size() - start))));
}

}  // namespace

Expected<std::string> encode_png(const RgbImage& img) {
  if (img.width <= 0 || img.height <= 0 ||
      img.rgb.size() != size_t(img.width) * size_t(img.height) * 3)
    return err("png: image of ", img.width, " × ", img.height, " with ", img.rgb.size(), " bytes");
  const size_t row = size_t(img.width) * 3;
  std::string raw;
  raw.reserve((row + 1) * size_t(img.height));
  for (int y = 0; y < img.height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(img.rgb.data()) + size_t(y) * row, row);
  }
  uLongf packed_size = compressBound(uLong(raw.size()));
  std::string packed(packed_size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size,
                reinterpret_cast<const Bytef*>(raw.data()), uLong(raw.size()),
                Z_BEST_COMPRESSION) != Z_OK)
    return err("png: deflate failed");
  packed.resize(packed_size);

  std::string out("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  put_u32(ihdr, uint32_t(img.width));
  put_u32(ihdr, uint32_t(img.height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // depth 8, RGB, deflate, filter 0, no interlace
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", packed);
  put_chunk(out, "IEND", "");
  return out;
}

}  // namespace orchid
