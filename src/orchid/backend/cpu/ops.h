// CPU building blocks of the forward pass, all fp32 activations. Matrices may be dense
// bf16/f32 or MLX affine 4/8-bit; quantized rows are dequantized on the fly, a block at a time.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "orchid/backend/cpu/isa.h"
#include "orchid/model/weights.h"

namespace orchid::cpu {

float dot(const float* a, const float* b, int64_t n);

// y[i] = y[i] * c + a * x[i] (c = 1: y += a x), i < n. Vectorised: the compiler could not
// prove the attention accumulator and the value row apart, and left this loop scalar (0.66 ms
// of an attention layer's decode step at 530 keys, against 0.43 for its q/k/v projections).
void scale_add(float* y, float c, float a, const float* x, int64_t n);

// Y[t, r] = Σ_c X[t, c] · W[r, c] for t < n_rows_x.  X: [n_rows_x, W.cols], Y: [n_rows_x, W.rows].
// Multi-threaded over the rows of W; each weight row is dequantized once per call.
void matmul(const QuantMatrix& W, const float* X, int64_t n_rows_x, float* Y);

// How the backend's layers multiply: exact (the reference: weights dequantized to fp32, fp32
// dots) or fast (qmatmul.h: int8 activations times the stored codes, on `isa`; matrices the
// fast kernels do not take run exact).
struct Matmul {
  bool fast = false;
  CpuIsa isa = CpuIsa::scalar;

  // Y = X · Wᵀ, X [n, W.cols], Y [n, W.rows].
  void operator()(const QuantMatrix& W, const float* X, int64_t n, float* Y) const;
  // Several matrices of one input (quantized once on the fast path).
  struct Out {
    const QuantMatrix* W;
    float* Y;
  };
  void many(std::initializer_list<Out> outs, const float* X, int64_t n) const;
};

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
