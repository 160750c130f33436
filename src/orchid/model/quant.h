// MLX affine quantization: w ≈ scale · q + bias per group of `group` elements along a row,
// q unsigned in [0, 2^bits). Used by `--quantize q4` at load and by `orchid synth --layout mlx4`.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace orchid {

// One quantized matrix [rows, cols] as MLX stores it.
struct AffineQuantized {
  int bits = 4;
  int group = 64;
  std::vector<uint32_t> codes;   // [rows, cols * bits / 32], little-endian bit stream per row
  std::vector<uint16_t> scales;  // [rows, cols / group] bf16
  std::vector<uint16_t> biases;  // [rows, cols / group] bf16
};

// Quantizes w [rows, cols] (fp32). PRECONDITION: cols % group == 0, bits ∈ {4, 8}.
// Per group, scale and bias come from the group's min/max so that the edge of larger
// magnitude is exact; both are rounded to bf16 before the codes are chosen.
AffineQuantized quantize_affine(std::span<const float> w, int64_t rows, int64_t cols, int bits,
                                int group);

// Dequantizes one row from MLX packed codes; scales/biases given as fp32 for that row.
void dequant_affine_row(const uint32_t* codes, const float* scales, const float* biases,
                        int64_t cols, int bits, int group, float* out);

}  // namespace orchid
