// Line charts of a rate against a length (tokens/s against prompt or context tokens, the
// benchmark's plots): laid out once into a list of drawing primitives, which draw_svg and
// draw_raster render (so the SVG and the PNG show the same thing).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "orchid/util/png.h"

namespace orchid {

struct ChartSeries {
  std::string label;
  uint32_t rgb = 0;                               // 0xRRGGBB
  std::vector<std::pair<double, double>> points;  // (length > 0, rate ≥ 0), any order
};

// One panel: x on a log2 axis over the series' lengths, y linear from 0.
struct Chart {
  std::string title, x_label;
  std::vector<ChartSeries> series;
};

// Drawing primitives in pixels (origin top left, y down).
struct DrawLine {
  double x0, y0, x1, y1, width;
  uint32_t rgb;
};
struct DrawText {
  double x, y;  // baseline point
  std::string text;
  int size;    // pixel height of a capital
  int anchor;  // -1 start, 0 middle, 1 end
  uint32_t rgb;
};
struct DrawDot {
  double x, y, radius;
  uint32_t rgb;
};
struct Drawing {
  int width = 0, height = 0;
  std::vector<DrawLine> lines;
  std::vector<DrawText> texts;
  std::vector<DrawDot> dots;
};

// The panels side by side. Panels without points are skipped.
Drawing lay_out_charts(const std::vector<Chart>& panels);

std::string draw_svg(const Drawing& d);
RgbImage draw_raster(const Drawing& d);

// Tick labels: lengths in binary units ("256", "1K", "128K"), rates in decimal ones ("2500",
// "12.5K").
std::string length_label(double v);
std::string rate_label(double v);

}  // namespace orchid
