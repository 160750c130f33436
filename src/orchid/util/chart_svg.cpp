// The chart drawing as SVG: one element per primitive on a white background.
#include <cstdio>

#include "orchid/util/chart.h"

namespace orchid {
namespace {

std::string colour(uint32_t rgb) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%06x", rgb & 0xffffff);
  return buf;
}

std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

std::string draw_svg(const Drawing& d) {
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(d.width) +
                    "\" height=\"" + std::to_string(d.height) + "\" viewBox=\"0 0 " +
                    std::to_string(d.width) + " " + std::to_string(d.height) +
                    "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" "
                    "fill=\"#ffffff\"/>\n";
  for (const DrawLine& l : d.lines)
    out += "<line x1=\"" + num(l.x0) + "\" y1=\"" + num(l.y0) + "\" x2=\"" + num(l.x1) +
           "\" y2=\"" + num(l.y1) + "\" stroke=\"" + colour(l.rgb) + "\" stroke-width=\"" +
           num(l.width) + "\" stroke-linecap=\"round\"/>\n";
  for (const DrawDot& p : d.dots)
    out += "<circle cx=\"" + num(p.x) + "\" cy=\"" + num(p.y) + "\" r=\"" + num(p.radius) +
           "\" fill=\"" + colour(p.rgb) + "\"/>\n";
  for (const DrawText& t : d.texts) {
    const char* anchor = t.anchor < 0 ? "start" : t.anchor > 0 ? "end" : "middle";
    // A capital of `size` pixels is about 0.72 of the font size.
    out += "<text x=\"" + num(t.x) + "\" y=\"" + num(t.y) + "\" font-size=\"" + num(t.size / 0.72) +
           "\" text-anchor=\"" + anchor + "\" fill=\"" + colour(t.rgb) + "\">" + escaped(t.text) +
           "</text>\n";
  }
  return out + "</svg>\n";
}

}  // namespace orchid
