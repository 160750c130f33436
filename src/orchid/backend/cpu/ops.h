// CPU building blocks of the forward pass, all fp32 activations. Matrices may be dense
// bf16/f32 or MLX affine 4/8-bit; quantized rows are dequantized on the fly, a block at a time.
#pragma once

#include <cmath>
#include <cstdint>

#include "orchid/model/weights.h"

namespace orchid::cpu {

float dot(const float* a, const float* b, int64_t n);

// Y[t, r] = Σ_c X[t, c] · W[r, c] for t < n_rows_x.  X: [n_rows_x, W.cols], Y: [n_rows_x, W.rows].
// Multi-threaded over the rows of W; each weight row is dequantized once per call.
void matmul(const QuantMatrix& W, const float* X, int64_t n_rows_x, float* Y);

// y = x / sqrt(mean(x²) + eps) * scale over rows of n; in place allowed.
void rms_norm(const float* x, const float* scale, float eps, int64_t n, float* y);

inline float silu(float x) {
  return x / (1.f + std::exp(-x));
}
inline float sigmoid(float x) {
  return 1.f / (1.f + std::exp(-x));
}
// PyTorch's softplus (beta 1, threshold 20).
inline float softplus(float x) {
  return x > 20.f ? x : std::log1p(std::exp(x));
}

}  // namespace orchid::cpu
