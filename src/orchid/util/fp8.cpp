#include "orchid/util/fp8.h"

#include <array>
#include <cmath>

namespace orchid {
namespace {

constexpr int kMaxFinite = 0x7e;  // 448

// Every byte's value, from the definition.
const std::array<float, 256>& table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int c = 0; c < 256; ++c) {
      const int e = (c >> 3) & 15, m = c & 7;
      float a;
      if ((c & 0x7f) == 0x7f)
        a = NAN;
      else if (e == 0)
        a = std::ldexp(float(m), -9);  // m / 8 · 2⁻⁶
      else
        a = std::ldexp(float(8 + m), e - 7 - 3);
      v[size_t(c)] = c & 0x80 ? -a : a;
    }
    return v;
  }();
  return t;
}

}  // namespace

float fp8_e4m3_to_f32(uint8_t code) {
  return table()[code];
}

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  const auto& t = table();
  // Codes 0 … 0x7e are the non-negative values in increasing order: the largest code at or
  // below a, then the nearer of it and the next (ties to the even code).
  if (a >= t[kMaxFinite]) return uint8_t(sign | kMaxFinite);
  int lo = 0, hi = kMaxFinite;  // t[lo] ≤ a < t[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (t[size_t(mid)] <= a ? lo : hi) = mid;
  }
  const float below = a - t[size_t(lo)], above = t[size_t(hi)] - a;
  const int c = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return uint8_t(sign | c);
}

}  // namespace orchid
