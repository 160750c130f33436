// CPU ops: AVX2 dot product, blocked multi-threaded matmul over dequantized weight rows.
#include "orchid/backend/cpu/ops.h"

#include <algorithm>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "orchid/backend/cpu/fp8_matmul.h"
#include "orchid/backend/cpu/qmatmul.h"
#include "orchid/util/thread_pool.h"

namespace orchid::cpu {

float dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.f;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  __m256 acc = _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  sum = _mm_cvtss_f32(s4);
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void scale_add(float* y, float c, float a, const float* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 cv = _mm256_set1_ps(c), av = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i),
                                            _mm256_mul_ps(_mm256_loadu_ps(y + i), cv)));
#endif
  for (; i < n; ++i) y[i] = y[i] * c + a * x[i];
}

void matmul(const QuantMatrix& W, const float* X, int64_t n_rows_x, float* Y) {
  const int64_t rows = W.rows, cols = W.cols;
  // Rows of W per block: enough to amortise dequantization across the tokens of X while the
  // block (kBlock · cols floats) stays in L2.
  constexpr int64_t kBlock = 16;
  const int64_t n_blocks = (rows + kBlock - 1) / kBlock;
  // Below ~64K multiply-adds per block handed to a thread, waking threads costs more than it saves.
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / (kBlock * cols * n_rows_x));
  default_pool().parallel_for(n_blocks, grain, [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> wbuf;
    wbuf.resize(size_t(kBlock * cols));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * kBlock, r1 = std::min(rows, r0 + kBlock);
      for (int64_t r = r0; r < r1; ++r) W.dequant_row(r, wbuf.data() + (r - r0) * cols);
      for (int64_t t = 0; t < n_rows_x; ++t) {
        const float* x = X + t * cols;
        float* y = Y + t * rows;
        for (int64_t r = r0; r < r1; ++r) y[r] = dot(wbuf.data() + (r - r0) * cols, x, cols);
      }
    }
  });
}

void Matmul::operator()(const QuantMatrix& W, const float* X, int64_t n, float* Y) const {
  many({{&W, Y}}, X, n);
}

void Matmul::many(std::initializer_list<Out> outs, const float* X, int64_t n) const {
  thread_local QuantizedActs acts;
  bool quantized = false;
  for (const Out& o : outs) {
    if (fast && fp8_supported(*o.W, isa)) {
      fp8_matmul(*o.W, X, n, o.Y);
      continue;
    }
    if (!fast || !qmm_supported(*o.W)) {
      matmul(*o.W, X, n, o.Y);
      continue;
    }
    if (!quantized) acts.quantize(X, n, o.W->cols), quantized = true;
    qmm(*o.W, acts, o.Y, isa);
  }
}

void rms_norm(const float* x, const float* scale, float eps, int64_t n, float* y) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = 1.f / std::sqrt(float(ss / double(n)) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * scale[i];
}

}  // namespace orchid::cpu
