// The chart drawing as pixels: lines as capsules of their width (a pixel is painted when its
// centre lies within width / 2 of the segment), dots as discs, text in the 5 × 7 font scaled by
// an integer factor. No anti-aliasing: the PNG is a preview; the SVG is the exact chart.
#include <algorithm>
#include <cmath>

#include "orchid/util/chart.h"
#include "orchid/util/font5x7.h"

namespace orchid {
namespace {

struct Canvas {
  RgbImage& img;
  void set(int x, int y, uint32_t rgb) {
    if (x < 0 || y < 0 || x >= img.width || y >= img.height) return;
    uint8_t* p = img.rgb.data() + (size_t(y) * img.width + x) * 3;
    p[0] = uint8_t(rgb >> 16), p[1] = uint8_t(rgb >> 8), p[2] = uint8_t(rgb);
  }
  void capsule(double x0, double y0, double x1, double y1, double r, uint32_t rgb) {
    const int xa = int(std::floor(std::min(x0, x1) - r)), xb = int(std::ceil(std::max(x0, x1) + r));
    const int ya = int(std::floor(std::min(y0, y1) - r)), yb = int(std::ceil(std::max(y0, y1) + r));
    const double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
    for (int y = ya; y <= yb; ++y)
      for (int x = xa; x <= xb; ++x) {
        const double px = x + 0.5, py = y + 0.5;
        const double t =
            len2 > 0 ? std::clamp(((px - x0) * dx + (py - y0) * dy) / len2, 0.0, 1.0) : 0;
        const double ex = px - (x0 + t * dx), ey = py - (y0 + t * dy);
        if (ex * ex + ey * ey <= r * r) set(x, y, rgb);
      }
  }
  void text(const DrawText& t) {
    const int scale = t.size >= 12 ? 2 : 1, advance = (kGlyphWidth + 1) * scale;
    const int w = int(t.text.size()) * advance - scale;
    int x = int(std::lround(t.anchor < 0 ? t.x : t.anchor > 0 ? t.x - w : t.x - w / 2.0));
    const int top = int(std::lround(t.y)) - kGlyphHeight * scale;
    for (char c : t.text) {
      const auto& g = glyph5x7(c);
      for (int r = 0; r < kGlyphHeight; ++r)
        for (int col = 0; col < kGlyphWidth; ++col)
          if (g[size_t(r)] & (0x10 >> col))
            for (int sy = 0; sy < scale; ++sy)
              for (int sx = 0; sx < scale; ++sx)
                set(x + col * scale + sx, top + r * scale + sy, t.rgb);
      x += advance;
    }
  }
};

}  // namespace

RgbImage draw_raster(const Drawing& d) {
  RgbImage img;
  img.width = std::max(d.width, 1), img.height = std::max(d.height, 1);
  img.rgb.assign(size_t(img.width) * img.height * 3, 0xff);
  Canvas c{img};
  for (const DrawLine& l : d.lines) c.capsule(l.x0, l.y0, l.x1, l.y1, l.width / 2, l.rgb);
  for (const DrawDot& p : d.dots) c.capsule(p.x, p.y, p.x, p.y, p.radius, p.rgb);
  for (const DrawText& t : d.texts) c.text(t);
  return img;
}

}  // namespace orchid
