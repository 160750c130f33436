// The fast matmul on AVX2: each half of a block of 64 codes widens to 16 even and 16 odd int16
// codes, vpmaddwd multiplies them with the int16 activations of the same columns in pairs,
// summing into 8 int32 lanes (lane l of half h: columns 32h + 4l .. + 3); each lane is scaled
// once per block into an fp32 accumulator.
#include <immintrin.h>

#include "orchid/backend/cpu/qmm_kernels.h"

namespace orchid::cpu {
namespace {

// The group (relative to the block's first) of each int32 lane of half h.
__m256i lane_groups(int group, int half) {
  alignas(32) int32_t idx[8];
  for (int l = 0; l < 8; ++l) idx[l] = group < 64 ? (half * 32 + 4 * l) / group : 0;
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(idx));
}

inline __m256 lane_scales(const float* s, int group, __m256i idx, int64_t k, float dk) {
  if (group >= 64) return _mm256_set1_ps(s[64 * k / group] * dk);
  return _mm256_mul_ps(_mm256_permutevar8x32_ps(_mm256_loadu_ps(s + 64 * k / group), idx),
                       _mm256_set1_ps(dk));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float bias_dot(const float* b, const float* xs, int64_t ng) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= ng; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(b + i), _mm256_loadu_ps(xs + i), acc);
  float sum = hsum(acc);
  for (; i < ng; ++i) sum += b[i] * xs[i];
  return sum;
}

// Half h of block k (columns 32h .. 32h + 31): its 16 even and 16 odd codes as int16.
inline void half_codes(const uint8_t* row, int bits, int64_t k, int h, __m256i& even,
                       __m256i& odd) {
  if (bits == 8) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 64 * k + 32 * h));
    even = _mm256_and_si256(w, _mm256_set1_epi16(0xFF));
    odd = _mm256_srli_epi16(w, 8);
    return;
  }
  const __m256i w = _mm256_cvtepu8_epi16(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 32 * k + 16 * h)));
  const __m256i m = _mm256_set1_epi16(0x0F);
  even = _mm256_and_si256(w, m);
  odd = _mm256_and_si256(_mm256_srli_epi16(w, 4), m);
}

inline __m256i load16(const int16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

float row_dot(const QmmWeights& W, const uint8_t* row, const float* s, const float* b,
              const int16_t* q, const float* d, const float* xsum, const __m256i idx[2]) {
  const int64_t nk = W.cols / 64;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t k = 0; k < nk; ++k) {
    const int16_t* qk = q + 64 * k;  // even columns 0..62 at qk, odd ones at qk + 32
    for (int h = 0; h < 2; ++h) {
      __m256i even, odd;
      half_codes(row, W.bits, k, h, even, odd);
      const __m256i i32 = _mm256_add_epi32(_mm256_madd_epi16(even, load16(qk + 16 * h)),
                                           _mm256_madd_epi16(odd, load16(qk + 32 + 16 * h)));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), lane_scales(s, W.group, idx[h], k, d[k]), acc);
    }
  }
  return hsum(acc) + bias_dot(b, xsum, W.cols / W.group);
}

}  // namespace

void qmm_avx2(const QmmWeights& W, const QmmActs& X, int64_t r0, int64_t r1, float* Y,
              int64_t ldy) {
  const int64_t cols = W.cols, nk = cols / 64, ng = cols / W.group;
  const __m256i idx[2] = {lane_groups(W.group, 0), lane_groups(W.group, 1)};
  float s[kQmmMaxGroups + 8], b[kQmmMaxGroups + 8];
  for (int i = 0; i < 8; ++i) s[ng + i] = 0.f;  // lane_scales reads 8 from a block's first
  for (int64_t r = r0; r < r1; ++r) {
    qmm_row_params(W, r, s, b);
    const uint8_t* row = W.codes + r * cols * W.bits / 8;
    for (int64_t t = 0; t < X.n; ++t)
      Y[t * ldy + r] = row_dot(W, row, s, b, X.q + t * cols, X.d + t * nk, X.xsum + t * ng, idx);
  }
}

}  // namespace orchid::cpu
