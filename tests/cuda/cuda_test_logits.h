// Comparisons of whole-model logit rows, shared by the CUDA model tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "orchid/backend/backend.h"

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

// Every position's logits of ids run as one prompt on a fresh state of b.
inline std::vector<float> prompt_logits(Backend& b, const std::vector<int32_t>& ids) {
  auto st = b.new_state(256);
  std::vector<float> out;
  EXPECT_TRUE(st.ok());
  if (st.ok()) {
    EXPECT_TRUE(b.forward(**st, ids, LogitsMode::all, out).ok());
  }
  return out;
}

}  // namespace orchid::test
