// MLX affine quantize / dequantize (see quant.h for the format).
#include "orchid/model/quant.h"

#include <algorithm>
#include <cmath>

#include "orchid/util/bf16.h"

namespace orchid {

AffineQuantized quantize_affine(std::span<const float> w, int64_t rows, int64_t cols, int bits,
                                int group) {
  AffineQuantized q;
  q.bits = bits;
  q.group = group;
  const int64_t words_per_row = cols * bits / 32;
  const int64_t groups_per_row = cols / group;
  const float n_bins = float((1 << bits) - 1);
  q.codes.assign(size_t(rows * words_per_row), 0u);
  q.scales.resize(size_t(rows * groups_per_row));
  q.biases.resize(size_t(rows * groups_per_row));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups_per_row; ++g) {
      const float* x = w.data() + r * cols + g * group;
      auto [lo_it, hi_it] = std::minmax_element(x, x + group);
      float lo = *lo_it, hi = *hi_it;
      // The edge of larger magnitude is the bias; the scale's sign points inward.
      bool low_edge = std::fabs(lo) > std::fabs(hi);
      float edge = low_edge ? lo : hi;
      float scale = std::max((hi - lo) / n_bins, 1e-8f);
      scale = low_edge ? scale : -scale;
      // Snap the scale so the opposite edge lands on a whole code where possible.
      float q0 = std::round(edge / scale);
      if (q0 != 0.f) scale = edge / q0;
      uint16_t scale_bf = f32_to_bf16(scale);
      uint16_t bias_bf = f32_to_bf16(edge);
      float s = bf16_to_f32(scale_bf), b = bf16_to_f32(bias_bf);
      if (s == 0.f) {
        s = low_edge ? 1e-8f : -1e-8f;
        scale_bf = f32_to_bf16(s);
        s = bf16_to_f32(scale_bf);
      }
      q.scales[size_t(r * groups_per_row + g)] = scale_bf;
      q.biases[size_t(r * groups_per_row + g)] = bias_bf;
      for (int i = 0; i < group; ++i) {
        float code = std::clamp(std::round((x[i] - b) / s), 0.f, n_bins);
        int64_t e = g * group + i;  // element index within the row
        int64_t bit = e * bits;
        q.codes[size_t(r * words_per_row + bit / 32)] |= uint32_t(code) << (bit % 32);
      }
    }
  }
  return q;
}

void dequant_affine_row(const uint32_t* codes, const float* scales, const float* biases,
                        int64_t cols, int bits, int group, float* out) {
  const uint32_t mask = (1u << bits) - 1u;
  const int per_word = 32 / bits;
  for (int64_t g = 0; g < cols / group; ++g) {
    const float s = scales[g], b = biases[g];
    const uint32_t* wg = codes + g * group / per_word;
    float* o = out + g * group;
    for (int i = 0; i < group; ++i) {
      uint32_t word = wg[i / per_word];
      o[i] = s * float((word >> ((i % per_word) * bits)) & mask) + b;
    }
  }
}

}  // namespace orchid
