// Charts of the benchmark (orchid bench plot): layout, SVG, PNG (decoded back with zlib and
// checked pixel by pixel at the series' points).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>

#include "orchid/util/chart.h"
#include "orchid/util/png.h"

namespace orchid {
namespace {

uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 |
         uint32_t(uint8_t(s[at + 2])) << 8 | uint32_t(uint8_t(s[at + 3]));
}

// The pixels of a PNG written by encode_png (one IDAT, filter 0 rows), and checks of its framing.
RgbImage decode_png(const std::string& png) {
  RgbImage img;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  size_t at = 8;
  std::string idat;
  while (at + 12 <= png.size()) {
    const uint32_t len = be32(png, at);
    const std::string type = png.substr(at + 4, 4), data = png.substr(at + 8, len);
    const uint32_t crc = be32(png, at + 8 + len);
    EXPECT_EQ(crc, uint32_t(crc32(0, reinterpret_cast<const Bytef*>(png.data() + at + 4), len + 4)))
        << type;
    if (type == "IHDR") img.width = int(be32(data, 0)), img.height = int(be32(data, 4));
    if (type == "IDAT") idat += data;
    at += 12 + len;
  }
  EXPECT_EQ(at, png.size());
  std::string raw(size_t(img.width * 3 + 1) * img.height, '\0');
  uLongf n = raw.size();
  EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(raw.data()), &n,
                       reinterpret_cast<const Bytef*>(idat.data()), uLong(idat.size())),
            Z_OK);
  EXPECT_EQ(n, raw.size());
  for (int y = 0; y < img.height; ++y) {
    EXPECT_EQ(raw[size_t(y) * (img.width * 3 + 1)], '\0') << "row " << y << " filter";
    const char* row = raw.data() + size_t(y) * (img.width * 3 + 1) + 1;
    img.rgb.insert(img.rgb.end(), row, row + img.width * 3);
  }
  return img;
}

uint32_t pixel(const RgbImage& img, double x, double y) {
  const uint8_t* p =
      img.rgb.data() + (size_t(std::lround(y)) * img.width + size_t(std::lround(x))) * 3;
  return uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2];
}

TEST(Png, RoundTripsPixels) {
  RgbImage img{3, 2, {}};
  for (int i = 0; i < 18; ++i) img.rgb.push_back(uint8_t(i * 14));
  auto png = encode_png(img);
  ASSERT_TRUE(png.ok()) << png.message();
  const RgbImage back = decode_png(*png);
  EXPECT_EQ(back.width, 3);
  EXPECT_EQ(back.height, 2);
  EXPECT_EQ(back.rgb, img.rgb);
}

TEST(Png, RefusesAnImageWhoseBytesDoNotMatchItsSize) {
  EXPECT_FALSE(encode_png(RgbImage{4, 4, std::vector<uint8_t>(10)}).ok());
  EXPECT_FALSE(encode_png(RgbImage{0, 4, {}}).ok());
}

TEST(Chart, Labels) {
  EXPECT_EQ(length_label(256), "256");
  EXPECT_EQ(length_label(1024), "1K");
  EXPECT_EQ(length_label(131072), "128K");
  EXPECT_EQ(length_label(1000), "1000");
  EXPECT_EQ(rate_label(2500), "2500");
  EXPECT_EQ(rate_label(40000), "40K");
  EXPECT_EQ(rate_label(12500), "12.5K");
}

// Two panels; each series' points become dots of its colour, at the same places in the SVG and
// the PNG (the points are apart, so no dot covers another), in increasing x for increasing
// lengths and higher for larger rates.
TEST(Chart, SeriesPointsLandInTheirColourInSvgAndPng) {
  const uint32_t a = 0xc2255c, b = 0x495057;
  Chart c1{"prefill",
           "prompt tokens",
           {{"orchid", a, {{256, 3000}, {4096, 40000}, {1024, 20000}}},
            {"peer", b, {{256, 12000}, {1024, 7500}, {4096, 9600}}}}};
  Chart c2{
      "decode", "context tokens", {{"orchid", a, {{256, 620}, {131072, 404}}}, {"empty", b, {}}}};
  const Drawing d = lay_out_charts({c1, Chart{"nothing", "x", {}}, c2});
  ASSERT_EQ(d.dots.size(), 8u);  // the empty panel is skipped
  EXPECT_EQ(d.width, 2 * 560);
  // Panel 1: orchid's dots sorted by length go right; its 40K point is the highest.
  std::vector<DrawDot> orchid;
  for (const DrawDot& p : d.dots)
    if (p.rgb == a && p.x < 560) orchid.push_back(p);
  ASSERT_EQ(orchid.size(), 3u);
  EXPECT_LT(orchid[0].x, orchid[1].x);
  EXPECT_LT(orchid[1].x, orchid[2].x);
  EXPECT_LT(orchid[2].y, orchid[1].y);  // 40K above 20K (y grows down)
  // Every dot sits in the plot, and is painted in its colour in the raster.
  const RgbImage img = draw_raster(d);
  const std::string svg = draw_svg(d);
  for (const DrawDot& p : d.dots) {
    EXPECT_GT(p.x, 0);
    EXPECT_LT(p.x, d.width);
    EXPECT_GT(p.y, 0);
    EXPECT_LT(p.y, d.height);
    EXPECT_EQ(pixel(img, p.x - 0.5, p.y - 0.5), p.rgb) << p.x << "," << p.y;
    char cx[32];
    std::snprintf(cx, sizeof cx, "cx=\"%.1f\"", p.x);
    EXPECT_NE(svg.find(cx), std::string::npos) << cx;
  }
  // Labels reach both outputs: the legend text in the SVG, dark text pixels in the raster.
  EXPECT_NE(svg.find(">orchid</text>"), std::string::npos);
  EXPECT_NE(svg.find(">128K</text>"), std::string::npos);
  const auto png = encode_png(img);
  ASSERT_TRUE(png.ok());
  EXPECT_EQ(decode_png(*png).rgb, img.rgb);
}

TEST(Chart, SvgEscapesLabels) {
  Chart c{"a<b", "x & y", {{"\"q\"", 0x000000, {{256, 1}}}}};
  const std::string svg = draw_svg(lay_out_charts({c}));
  EXPECT_NE(svg.find("a&lt;b"), std::string::npos);
  EXPECT_NE(svg.find("x &amp; y"), std::string::npos);
  EXPECT_NE(svg.find("&quot;q&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
}

}  // namespace
}  // namespace orchid
