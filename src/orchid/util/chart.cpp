// Chart layout: per panel a frame, log2 x ticks at the powers of two the data spans, y ticks at a
// 1-2-5 step over [0, max] with room above the data for the legend in the top left corner, the
// series as polylines with dots.
#include "orchid/util/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace orchid {
namespace {

constexpr int kPanelW = 560, kPanelH = 380;
constexpr int kLeft = 64, kRight = 24, kTop = 44, kBottom = 56;  // plot area margins
constexpr uint32_t kAxis = 0x343a40, kGrid = 0xdee2e6, kText = 0x212529;

// The smallest 1-2-5 × 10^k step that covers [0, max] in at most `ticks` steps.
double nice_step(double max, int ticks) {
  const double raw = std::max(max, 1e-9) / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

void lay_out_panel(const Chart& c, double ox, Drawing& d) {
  double x_lo = INFINITY, x_hi = -INFINITY, y_hi = 0;
  for (const ChartSeries& s : c.series)
    for (auto [x, y] : s.points)
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x), y_hi = std::max(y_hi, y);
  const double lx0 = std::floor(std::log2(x_lo)),
               lx1 = std::max(std::ceil(std::log2(x_hi)), lx0 + 1);
  const double px0 = ox + kLeft, px1 = ox + kPanelW - kRight, py0 = kPanelH - kBottom, py1 = kTop;
  // Headroom: 8 %, and the legend's rows (20 px each from the top) clear of the highest point.
  const int rows = int(std::count_if(c.series.begin(), c.series.end(),
                                     [](const ChartSeries& s) { return !s.points.empty(); }));
  const double legend = std::min(0.6, (20.0 * rows + 12) / (py0 - py1));
  const double want = std::max(y_hi * 1.08, y_hi / (1 - legend));
  const double step = nice_step(want, 6), y_top = step * std::ceil(want / step);
  auto X = [&](double x) { return px0 + (std::log2(x) - lx0) / (lx1 - lx0) * (px1 - px0); };
  auto Y = [&](double y) { return py0 - y / y_top * (py0 - py1); };

  d.texts.push_back({ox + kPanelW / 2.0, 26, c.title, 14, 0, kText});
  for (double v = 0; v <= y_top + step / 2; v += step) {
    d.lines.push_back({px0, Y(v), px1, Y(v), 1, kGrid});
    d.texts.push_back({px0 - 8, Y(v) + 5, rate_label(v), 10, 1, kText});
  }
  for (double l = lx0; l <= lx1 + 0.5; l += 1) {
    const double x = std::exp2(l);
    d.lines.push_back({X(x), py0, X(x), py1, 1, kGrid});
    d.texts.push_back({X(x), py0 + 20, length_label(x), 10, 0, kText});
  }
  d.texts.push_back({(px0 + px1) / 2, py0 + 44, c.x_label, 12, 0, kText});
  d.lines.push_back({px0, py0, px1, py0, 1.5, kAxis});
  d.lines.push_back({px0, py0, px0, py1, 1.5, kAxis});

  int row = 0;
  for (const ChartSeries& s : c.series) {
    if (s.points.empty()) continue;
    auto pts = s.points;
    std::sort(pts.begin(), pts.end());
    for (size_t i = 0; i + 1 < pts.size(); ++i)
      d.lines.push_back({X(pts[i].first), Y(pts[i].second), X(pts[i + 1].first),
                         Y(pts[i + 1].second), 2.5, s.rgb});
    for (auto [x, y] : pts) d.dots.push_back({X(x), Y(y), 3.5, s.rgb});
    const double ly = py1 + 16 + 20.0 * row++;
    d.lines.push_back({px0 + 12, ly - 5, px0 + 36, ly - 5, 3, s.rgb});
    d.texts.push_back({px0 + 44, ly, s.label, 12, -1, kText});
  }
}

}  // namespace

std::string length_label(double v) {
  char buf[32];
  if (v >= 1048576 && std::fmod(v, 1048576) == 0)
    std::snprintf(buf, sizeof buf, "%.0fM", v / 1048576);
  else if (v >= 1024 && std::fmod(v, 1024) == 0)
    std::snprintf(buf, sizeof buf, "%.0fK", v / 1024);
  else
    std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string rate_label(double v) {
  char buf[32];
  if (v >= 10000)
    std::snprintf(buf, sizeof buf, std::fmod(v, 1000) == 0 ? "%.0fK" : "%.1fK", v / 1000);
  else
    std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

Drawing lay_out_charts(const std::vector<Chart>& panels) {
  Drawing d;
  d.height = kPanelH;
  for (const Chart& c : panels) {
    bool any = false;
    for (const ChartSeries& s : c.series) any |= !s.points.empty();
    if (!any) continue;
    lay_out_panel(c, d.width, d);
    d.width += kPanelW;
  }
  return d;
}

}  // namespace orchid
