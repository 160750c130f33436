// Comparisons of whole-model logit rows, shared by the CUDA model tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace orchid::test {

// ‖a − b‖ / ‖b‖ over n logits.
inline double rel_l2(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i)
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

inline int argmax(const float* x, int64_t n) {
  return int(std::max_element(x, x + n) - x);
}

}  // namespace orchid::test
