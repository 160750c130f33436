// Built with AVX-512 flags (CMakeLists.txt); fp8_supported() keeps other CPUs out. No inline
// function of a shared header is called here (std::min, bf16.h's conversions): the linker may keep
// this file's AVX-512 copy of one for the whole program.
#include "orchid/backend/cpu/fp8_matmul.h"

#include <immintrin.h>

#include <cstring>

#include "orchid/util/thread_pool.h"

namespace orchid::cpu {
namespace {

// 16 e4m3 codes as fp32. A normal code (exponent field e ≥ 1) is the float whose exponent field
// is e + 120 and whose mantissa starts with the code's 3 bits: (code & 0x7f) << 20 plus 120 << 23.
// A subnormal one (e = 0: m · 2⁻⁹) is built with exponent 2⁻⁶, 2⁻⁶ (1 + m / 8), minus 2⁻⁶. The
// sign moves to bit 31. (0x7f, e4m3's NaN, reads as 480: checkpoints hold none.)
inline __m512 e4m3_16(const uint8_t* p) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i mag = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x7f)), 20);
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24);
  const __mmask16 sub = _mm512_testn_epi32_mask(v, _mm512_set1_epi32(0x78));
  const __m512i bias = _mm512_mask_blend_epi32(sub, _mm512_set1_epi32(120 << 23),
                                               _mm512_set1_epi32(121 << 23));
  const __m512 f = _mm512_castsi512_ps(_mm512_add_epi32(mag, bias));
  const __m512 mag_f = _mm512_mask_sub_ps(f, sub, f, _mm512_set1_ps(1.f / 64));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(mag_f), sign));
}

int64_t lesser(int64_t a, int64_t b) {
  return a < b ? a : b;
}

float scale_at(const QuantMatrix& W, int64_t i) {
  if (W.dtype == DType::F32) return static_cast<const float*>(W.scales)[i];
  const uint16_t h = static_cast<const uint16_t*>(W.scales)[i];
  if (W.dtype == DType::F16) return _cvtsh_ss(h);
  const uint32_t u = uint32_t(h) << 16;  // bf16
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// 16 bf16 / f16 elements as fp32 (exact).
inline __m512 bf16_16(const uint8_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 f16_16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// A dense bf16 / f16 matrix as the same tiles: one "block" the width of the row, scale 1.
template <int RB, int TB, bool F16>
void dense_tile(const QuantMatrix& W, const float* X, int64_t r, int64_t t0, float* Y) {
  const int64_t cols = W.cols;
  __m512 acc[RB][TB];
  for (int i = 0; i < RB; ++i)
    for (int j = 0; j < TB; ++j) acc[i][j] = _mm512_setzero_ps();
  const uint8_t* row[RB];
  for (int i = 0; i < RB; ++i) row[i] = static_cast<const uint8_t*>(W.data) + (r + i) * cols * 2;
  for (int64_t c = 0; c < cols; c += 16) {
    __m512 w[RB];
    for (int i = 0; i < RB; ++i) w[i] = F16 ? f16_16(row[i] + 2 * c) : bf16_16(row[i] + 2 * c);
    for (int j = 0; j < TB; ++j) {
      const __m512 x = _mm512_loadu_ps(X + (t0 + j) * cols + c);
      for (int i = 0; i < RB; ++i) acc[i][j] = _mm512_fmadd_ps(w[i], x, acc[i][j]);
    }
  }
  for (int i = 0; i < RB; ++i)
    for (int j = 0; j < TB; ++j) Y[(t0 + j) * W.rows + r + i] = _mm512_reduce_add_ps(acc[i][j]);
}

// Rows [r, r + RB) × activation rows [t0, t0 + TB): 16 columns a step, each row's 16 weights made
// once (code × its block's scale) for the TB activation rows.
template <int RB, int TB>
void tile(const QuantMatrix& W, const float* X, int64_t r, int64_t t0, float* Y) {
  if (!W.fp8()) {
    return W.dtype == DType::F16 ? dense_tile<RB, TB, true>(W, X, r, t0, Y)
                                 : dense_tile<RB, TB, false>(W, X, r, t0, Y);
  }
  const int64_t cols = W.cols, blocks = (cols + W.group - 1) / W.group;
  __m512 acc[RB][TB];
  for (int i = 0; i < RB; ++i)
    for (int j = 0; j < TB; ++j) acc[i][j] = _mm512_setzero_ps();
  const uint8_t* row[RB];
  int64_t srow[RB];
  for (int i = 0; i < RB; ++i) {
    row[i] = static_cast<const uint8_t*>(W.data) + (r + i) * cols;
    srow[i] = (W.block_row0 + r + i) / W.block_rows * blocks;
  }
  for (int64_t g = 0; g < blocks; ++g) {
    __m512 s[RB];
    for (int i = 0; i < RB; ++i) s[i] = _mm512_set1_ps(scale_at(W, srow[i] + g));
    const int64_t c1 = lesser(cols, (g + 1) * W.group);
    for (int64_t c = g * W.group; c < c1; c += 16) {
      __m512 w[RB];
      for (int i = 0; i < RB; ++i) w[i] = _mm512_mul_ps(e4m3_16(row[i] + c), s[i]);
      for (int j = 0; j < TB; ++j) {
        const __m512 x = _mm512_loadu_ps(X + (t0 + j) * cols + c);
        for (int i = 0; i < RB; ++i) acc[i][j] = _mm512_fmadd_ps(w[i], x, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < RB; ++i)
    for (int j = 0; j < TB; ++j) Y[(t0 + j) * W.rows + r + i] = _mm512_reduce_add_ps(acc[i][j]);
}

// Rows [r0, r1) against all n activation rows.
void rows(const QuantMatrix& W, const float* X, int64_t n, int64_t r0, int64_t r1, float* Y) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) tile<4, 4>(W, X, r, t, Y);
    for (; t < n; ++t) tile<4, 1>(W, X, r, t, Y);
  }
  for (; r < r1; ++r) {
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) tile<1, 4>(W, X, r, t, Y);
    for (; t < n; ++t) tile<1, 1>(W, X, r, t, Y);
  }
}

}  // namespace

bool fp8_supported(const QuantMatrix& W, CpuIsa isa) {
  if (!(isa == CpuIsa::avx512_vnni || isa == CpuIsa::amx) || W.cols % 16 != 0 || !W.data) return false;
  if (W.format == WeightFormat::dense) return W.dtype == DType::BF16 || W.dtype == DType::F16;
  return W.fp8() && W.group % 16 == 0 && W.group > 0 && W.block_rows > 0;
}

void fp8_matmul(const QuantMatrix& W, const float* X, int64_t n, float* Y) {
  const int64_t tiles = (W.rows + 3) / 4;
  // Below ~64K multiply-adds a thread's share, waking threads costs more than it saves.
  const int64_t work = 4 * W.cols * n, grain = work >= (int64_t(1) << 16) ? 1 : (int64_t(1) << 16) / work;
  default_pool().parallel_for(tiles, grain, [&](int64_t a, int64_t b) {
    rows(W, X, n, 4 * a, lesser(W.rows, 4 * b), Y);
  });
}

}  // namespace orchid::cpu
