// The fast matmul on AVX-512 VNNI: a block of 64 codes widens to two vectors of 32 int16 (the
// even and the odd columns), vpdpwssd multiplies each with the int16 activations of the same
// columns, summing into 16 int32 lanes (lane l: columns 4l .. 4l + 3); each lane is scaled once
// per block (weight scale x activation scale) into an fp32 accumulator. Decode (one activation
// row) streams the codes once; prefill widens a row's codes and lane scales once and runs four
// activation rows against them at a time. Compiled with -mavx512{f,bw,vl,dq,vnni}
// (CMakeLists.txt); only called when the CPU has them (isa.h).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "orchid/backend/cpu/qmm_kernels.h"

namespace orchid::cpu {
namespace {

// The group (relative to the block's first) of each int32 lane's columns 4l .. 4l + 3; groups
// of 16 or 32 never split a lane.
__m512i lane_groups(int group) {
  alignas(64) int32_t idx[16];
  for (int l = 0; l < 16; ++l) idx[l] = group < 64 ? 4 * l / group : 0;
  return _mm512_load_si512(idx);
}

struct Block {
  __m512i even, odd;  // 32 int16 codes each
};

// Block k's codes, widened.
inline Block block_codes(const uint8_t* row, int bits, int64_t k) {
  if (bits == 8) {
    const __m512i w = _mm512_loadu_si512(row + 64 * k);  // 32 words: even | odd << 8
    return {_mm512_and_si512(w, _mm512_set1_epi16(0xFF)), _mm512_srli_epi16(w, 8)};
  }
  const __m512i w = _mm512_cvtepu8_epi16(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * k)));  // even | odd << 4
  const __m512i m = _mm512_set1_epi16(0x0F);
  return {_mm512_and_si512(w, m), _mm512_and_si512(_mm512_srli_epi16(w, 4), m)};
}

// Block k's lane scales times the activation scale dk. s is padded by 16.
inline __m512 block_scales(const float* s, int group, __m512i idx, int64_t k, float dk) {
  if (group >= 64) return _mm512_set1_ps(s[64 * k / group] * dk);
  return _mm512_mul_ps(_mm512_permutexvar_ps(idx, _mm512_loadu_ps(s + 64 * k / group)),
                       _mm512_set1_ps(dk));
}

inline __m512 dot_block(const Block& c, const int16_t* q) {
  const __m512i acc = _mm512_madd_epi16(c.even, _mm512_loadu_si512(q));
  return _mm512_cvtepi32_ps(_mm512_dpwssd_epi32(acc, c.odd, _mm512_loadu_si512(q + 32)));
}

// Row r's scales and biases as fp32 (qmm_row_params, 16 at a time: a row of 2,048 columns has
// 32 groups of 64, and converting them one by one cost as much as the row's dot product).
void row_params(const QmmWeights& W, int64_t r, float* s, float* b) {
  const int64_t ng = W.cols / W.group;
  if (W.scale_type == ScaleType::f32) {
    for (int64_t g = 0; g < ng; ++g)
      s[g] = static_cast<const float*>(W.scales)[r * ng + g],
      b[g] = static_cast<const float*>(W.biases)[r * ng + g];
    return;
  }
  const bool bf16 = W.scale_type == ScaleType::bf16;
  for (int i = 0; i < 2; ++i) {
    const uint16_t* src = static_cast<const uint16_t*>(i == 0 ? W.scales : W.biases) + r * ng;
    float* dst = i == 0 ? s : b;
    for (int64_t g = 0; g < ng; g += 16) {
      const __mmask16 m = ng - g >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (ng - g)) - 1);
      const __m256i h = _mm256_maskz_loadu_epi16(m, src + g);
      const __m512 f = bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                            : _mm512_cvtph_ps(h);
      _mm512_mask_storeu_ps(dst + g, m, f);
    }
  }
}

inline float bias_dot(const float* b, const float* xs, int64_t ng) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= ng; i += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(b + i), _mm512_loadu_ps(xs + i), acc);
  if (i < ng) {
    const __mmask16 m = __mmask16((1u << (ng - i)) - 1);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, b + i), _mm512_maskz_loadu_ps(m, xs + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// Row r (groups of 64 columns or more) against one activation row: sd[k] = weight scale x
// activation scale of block k is formed 16 blocks at a time and each block's FMA takes it as a
// broadcast operand. (Rows of groups of 64 up to 1,024 columns go four at a time, short_rows4;
// 4-bit rows past that, plane_row. Four rows interleaved here measured 13-15 GB/s on 2,048
// columns against 28-30 one at a time.)
void wide_groups_row(const QmmWeights& W, const QmmActs& X, int64_t r, float* Y) {
  constexpr int R = 1;
  const int64_t cols = W.cols, nk = cols / 64, ng = cols / W.group;
  alignas(64) float s[R][kQmmMaxGroups], b[R][kQmmMaxGroups], sd[R][kQmmMaxCols / 64];
  const uint8_t* row[R];
  __m512 acc[R];
  for (int i = 0; i < R; ++i) {
    row_params(W, r + i, s[i], b[i]);
    row[i] = W.codes + (r + i) * cols * W.bits / 8;
    acc[i] = _mm512_setzero_ps();
    if (W.group == 64) {
      for (int64_t k = 0; k < nk; k += 16) {
        const __mmask16 m = nk - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (nk - k)) - 1);
        _mm512_mask_storeu_ps(
            sd[i] + k, m,
            _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s[i] + k), _mm512_maskz_loadu_ps(m, X.d + k)));
      }
    } else {
      for (int64_t k = 0; k < nk; ++k) sd[i][k] = s[i][64 * k / W.group] * X.d[k];
    }
  }
  for (int64_t k = 0; k < nk; ++k)
    for (int i = 0; i < R; ++i)
      acc[i] = _mm512_fmadd_ps(dot_block(block_codes(row[i], W.bits, k), X.q + 64 * k),
                               _mm512_set1_ps(sd[i][k]), acc[i]);
  for (int i = 0; i < R; ++i) Y[r + i] = _mm512_reduce_add_ps(acc[i]) + bias_dot(b[i], X.xsum, ng);
}

// n <= 16 scales (or biases) from element i of `p`, as fp32; lanes past n zero.
inline __m512 scale_vector(const void* p, ScaleType t, int64_t i, int64_t n) {
  const __mmask16 m = __mmask16((1u << n) - 1);
  if (t == ScaleType::f32) return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
  const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i);
  return t == ScaleType::bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                              : _mm512_cvtph_ps(h);
}

// Lanes [0, n) of row r's scales (or biases) at `p` as fp32, n <= 16.
inline __m512 row_vector(const void* p, ScaleType t, int64_t r, int64_t n) {
  return scale_vector(p, t, r * n, n);
}

// Four rows of at most 16 groups of 64 (the experts' down: 512 columns) against one activation
// row, the fixed costs cut to registers: each row's scales x activation scales one vector, its
// biases x the group sums folded into the accumulator's first lanes, one reduction. The staged
// form (wide_groups_row) ran the experts' down at ~11.5 GB/s in the model.
void short_rows4(const QmmWeights& W, const QmmActs& X, int64_t r, float* Y) {
  const int64_t nk = W.cols / 64;
  const __mmask16 m = __mmask16((1u << nk) - 1);
  const __m512 d = _mm512_maskz_loadu_ps(m, X.d), xs = _mm512_maskz_loadu_ps(m, X.xsum);
  alignas(64) float sd[4][16];
  __m512 acc[4];
  const uint8_t* row[4];
  for (int i = 0; i < 4; ++i) {
    _mm512_store_ps(sd[i], _mm512_mul_ps(row_vector(W.scales, W.scale_type, r + i, nk), d));
    acc[i] = _mm512_mul_ps(row_vector(W.biases, W.scale_type, r + i, nk), xs);
    row[i] = W.codes + (r + i) * W.cols * W.bits / 8;
  }
  for (int64_t k = 0; k < nk; ++k)
    for (int i = 0; i < 4; ++i)
      acc[i] = _mm512_fmadd_ps(dot_block(block_codes(row[i], W.bits, k), X.q + 64 * k),
                               _mm512_set1_ps(sd[i][k]), acc[i]);
  for (int i = 0; i < 4; ++i) Y[r + i] = _mm512_reduce_add_ps(acc[i]);
}

// A row of 4-bit codes against one activation row in nibble-plane order (QmmActs::planes): a
// pair of blocks' 64 code bytes load as 32 words, each word's four nibbles (columns 4j .. 4j + 3)
// are split by shift and mask into four planes of 32 int16, and four vpdpwssd sum them with the
// activation planes into 16 int32 lanes (lanes 0-7: the first block, columns 8m .. 8m + 7; lanes
// 8-15: the second). Each lane's scale (weight scale x activation scale) is one fp32 FMA a pair.
// The row's scales and biases are read as stored, 16 groups a vector: no staging pass.
// Measured on Zen 5 (full-width 512-bit units), a 131,072 x 2,048 matrix on two threads: the
// 256-bit form of the same planes (chosen on Zen 4, whose halved 512-bit units made it issue
// fewer operations: 15.6-16.0 GB/s a thread there) ran 27.3 GB/s here, this one 36-41. Two rows
// sharing the activation loads measured no faster (one thread, 512 x 2,048 in L2: 25.5-27 GB/s
// against 26.5-29), nor did one accumulator against two.
template <bool kSmallGroups>
void plane_row(const QmmWeights& W, const QmmActs& X, int64_t r, float* Y) {
  const int64_t cols = W.cols, nk = cols / 64, ng = cols / W.group, np = nk / 2;
  const uint8_t* row = W.codes + r * cols / 2;
  const __m512i m4 = _mm512_set1_epi16(0x0F);
  // Lane l of a pair: block l / 8, its columns 8 (l % 8) ...
  alignas(64) int32_t pair_arr[16], group_arr[16];
  for (int l = 0; l < 16; ++l)
    pair_arr[l] = l / 8, group_arr[l] = kSmallGroups ? (64 * (l / 8) + 8 * (l % 8)) / W.group : 0;
  const __m512i pair_idx = _mm512_load_si512(pair_arr), group_idx = _mm512_load_si512(group_arr);
  // Per block k: scale x activation scale (groups of 64 or more); the bias dot on the way.
  alignas(64) float sd[kQmmMaxCols / 64 + 16], s[kQmmMaxGroups + 16];
  __m512 bacc = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; g += 16) {
    const int64_t n = std::min<int64_t>(16, ng - g);
    const __mmask16 m = __mmask16((1u << n) - 1);
    const __m512 sv = scale_vector(W.scales, W.scale_type, r * ng + g, n);
    bacc = _mm512_fmadd_ps(scale_vector(W.biases, W.scale_type, r * ng + g, n),
                           _mm512_maskz_loadu_ps(m, X.xsum + g), bacc);
    if (kSmallGroups)
      _mm512_storeu_ps(s + g, sv);
    else if (W.group == 64)
      _mm512_storeu_ps(sd + g, _mm512_mul_ps(sv, _mm512_maskz_loadu_ps(m, X.d + g)));
    else
      _mm512_storeu_ps(s + g, sv);
  }
  if (!kSmallGroups && W.group > 64)
    for (int64_t k = 0; k < nk; ++k) sd[k] = s[64 * k / W.group] * X.d[k];
  if (kSmallGroups)
    for (int i = 0; i < 16; ++i) s[ng + i] = 0.f;  // a pair's scale vector reads 16
  // Pair p's products, scaled.
  auto pair = [&](int64_t p) {
    const __m512i v = _mm512_loadu_si512(row + 64 * p);
    const int16_t* x = X.planes + 128 * p;
    __m512i t = _mm512_madd_epi16(_mm512_and_si512(v, m4), _mm512_loadu_si512(x));
    t = _mm512_dpwssd_epi32(t, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                            _mm512_loadu_si512(x + 32));
    t = _mm512_dpwssd_epi32(t, _mm512_and_si512(_mm512_srli_epi16(v, 8), m4),
                            _mm512_loadu_si512(x + 64));
    t = _mm512_dpwssd_epi32(t, _mm512_srli_epi16(v, 12), _mm512_loadu_si512(x + 96));
    __m512 sc;
    if (kSmallGroups)
      sc = _mm512_mul_ps(_mm512_permutexvar_ps(group_idx, _mm512_loadu_ps(s + 128 * p / W.group)),
                         _mm512_permutexvar_ps(pair_idx, _mm512_maskz_loadu_ps(3, X.d + 2 * p)));
    else
      sc = _mm512_permutexvar_ps(pair_idx, _mm512_maskz_loadu_ps(3, sd + 2 * p));
    return std::pair{_mm512_cvtepi32_ps(t), sc};
  };
  // Two accumulators (two FMA chains); one measured the same (see above).
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + 2 <= np; p += 2) {
    const auto [t0, s0] = pair(p);
    const auto [t1, s1] = pair(p + 1);
    acc0 = _mm512_fmadd_ps(t0, s0, acc0);
    acc1 = _mm512_fmadd_ps(t1, s1, acc1);
  }
  if (p < np) {
    const auto [t0, s0] = pair(p);
    acc0 = _mm512_fmadd_ps(t0, s0, acc0);
  }
  float y = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), bacc));
  if (nk % 2) {  // the unpaired last block: planes of 16 at 16k, four 256-bit products
    const int64_t k = nk - 1;
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * k));
    const __m256i* xp = reinterpret_cast<const __m256i*>(X.planes + 64 * k);
    const __m256i m = _mm256_set1_epi16(0x0F);
    __m256i t = _mm256_madd_epi16(_mm256_and_si256(v, m), _mm256_loadu_si256(xp));
    t = _mm256_dpwssd_epi32(t, _mm256_and_si256(_mm256_srli_epi16(v, 4), m),
                            _mm256_loadu_si256(xp + 1));
    t = _mm256_dpwssd_epi32(t, _mm256_and_si256(_mm256_srli_epi16(v, 8), m),
                            _mm256_loadu_si256(xp + 2));
    t = _mm256_dpwssd_epi32(t, _mm256_srli_epi16(v, 12), _mm256_loadu_si256(xp + 3));
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), t);
    for (int l = 0; l < 8; ++l)
      y += float(lanes[l]) * (kSmallGroups ? s[(64 * k + 8 * l) / W.group] * X.d[k] : sd[k]);
  }
  Y[r] = y;
}

// One activation row: codes streamed once.
void rows_one_token(const QmmWeights& W, const QmmActs& X, int64_t r0, int64_t r1, float* Y) {
  if (W.bits == 4 && X.planes && !(W.group == 64 && W.cols <= 1024)) {
    if (W.group < 64)
      for (int64_t r = r0; r < r1; ++r) plane_row<true>(W, X, r, Y);
    else
      for (int64_t r = r0; r < r1; ++r) plane_row<false>(W, X, r, Y);
    return;
  }
  if (W.group >= 64) {
    int64_t r = r0;
    if (W.group == 64 && W.cols <= 1024)
      for (; r + 4 <= r1; r += 4) short_rows4(W, X, r, Y);
    for (; r < r1; ++r) wide_groups_row(W, X, r, Y);
    return;
  }
  const int64_t cols = W.cols, nk = cols / 64, ng = cols / W.group;
  const __m512i idx = lane_groups(W.group);
  alignas(64) float s[kQmmMaxGroups + 16], b[kQmmMaxGroups + 16];
  for (int i = 0; i < 16; ++i) s[ng + i] = 0.f;  // block_scales reads 16 from a block's first
  for (int64_t r = r0; r < r1; ++r) {
    row_params(W, r, s, b);
    const uint8_t* row = W.codes + r * cols * W.bits / 8;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < nk; ++k)
      acc = _mm512_fmadd_ps(dot_block(block_codes(row, W.bits, k), X.q + 64 * k),
                            block_scales(s, W.group, idx, k, X.d[k]), acc);
    Y[r] = _mm512_reduce_add_ps(acc) + bias_dot(b, X.xsum, ng);
  }
}

// RB weight rows x TB activation rows from (r, t0), against the rows' codes and lane scales
// widened once (codes[i], lanes[i]); each activation block is loaded once for the RB rows. One
// activation scale a row (QmmActs::row_scale, which quantize() gives several rows), applied to
// the row's sum. Measured at 512 prompt tokens on the 8-layer model: 4 x 4 tiles against 1 x 4.
template <int RB, int TB>
void tile(const QmmWeights& W, const QmmActs& X, const Block* const* codes,
          const float* const* lanes, const float* const* b, int64_t r, int64_t t0, float* Y,
          int64_t ldy, const uint8_t* prefetch) {
  // lanes[i]: 16 lane scales a block (groups under 64), else one a block, broadcast.
  const bool per_lane = W.group < 64;
  const int64_t pf_bytes = 8 * RB * W.bits;  // RB rows' codes / blocks
  const int64_t cols = W.cols, nk = cols / 64, ng = cols / W.group;
  __m512 acc[RB][TB];
  for (int i = 0; i < RB; ++i)
    for (int j = 0; j < TB; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < nk; ++k) {
    __m512 sc[RB];
    for (int i = 0; i < RB; ++i)
      sc[i] = per_lane ? _mm512_load_ps(lanes[i] + 16 * k) : _mm512_set1_ps(lanes[i][k]);
    if (prefetch)
      for (int64_t o = 0; o < pf_bytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + k * pf_bytes + o), _MM_HINT_T0);
    for (int j = 0; j < TB; ++j) {
      const int16_t* x = X.q + (t0 + j) * cols + 64 * k;
      const __m512i xa = _mm512_loadu_si512(x), xb = _mm512_loadu_si512(x + 32);
      for (int i = 0; i < RB; ++i) {
        const __m512i t =
            _mm512_dpwssd_epi32(_mm512_madd_epi16(codes[i][k].even, xa), codes[i][k].odd, xb);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), sc[i], acc[i][j]);
      }
    }
  }
  for (int i = 0; i < RB; ++i)
    for (int j = 0; j < TB; ++j)
      Y[(t0 + j) * ldy + r + i] = X.d[(t0 + j) * nk] * _mm512_reduce_add_ps(acc[i][j]) +
                                  bias_dot(b[i], X.xsum + (t0 + j) * ng, ng);
}

// Rows r .. r + RB - 1 against every activation row.
template <int RB>
void rows_against_tokens(const QmmWeights& W, const QmmActs& X, int64_t r, float* Y, int64_t ldy) {
  const int64_t cols = W.cols, nk = cols / 64;
  const __m512i idx = lane_groups(W.group);
  alignas(64) float s[kQmmMaxGroups + 16], bias[RB][kQmmMaxGroups];
  alignas(64) float lane_buf[RB][kQmmMaxCols / 4];  // 16 per block of 64 columns
  Block code_buf[RB][kQmmMaxCols / 64];
  const Block* codes[RB];
  const float *lanes[RB], *b[RB];
  for (int i = 16; i > 0; --i) s[cols / W.group + i - 1] = 0.f;  // block_scales reads 16
  for (int i = 0; i < RB; ++i) {
    row_params(W, r + i, s, bias[i]);
    const uint8_t* row = W.codes + (r + i) * cols * W.bits / 8;
    for (int64_t k = 0; k < nk; ++k) code_buf[i][k] = block_codes(row, W.bits, k);
    if (W.group < 64)
      for (int64_t k = 0; k < nk; ++k)
        _mm512_store_ps(lane_buf[i] + 16 * k, block_scales(s, W.group, idx, k, 1.f));
    else if (W.group == 64)
      std::memcpy(lane_buf[i], s, size_t(nk) * sizeof(float));
    else
      for (int64_t k = 0; k < nk; ++k) lane_buf[i][k] = s[64 * k / W.group];
    codes[i] = code_buf[i], lanes[i] = lane_buf[i], b[i] = bias[i];
  }
  // The next rows' codes are fetched during the first tile: without it the widening above
  // waited on DRAM (18 % of this function's time in a 512-token prefill); issued all at once
  // here the prefetches themselves stalled (7.5 %), so the tile spreads them over its blocks.
  const uint8_t* next = r + 2 * RB <= W.rows ? W.codes + (r + RB) * cols * W.bits / 8 : nullptr;
  int64_t t = 0;
  for (; t + 4 <= X.n; t += 4, next = nullptr)
    tile<RB, 4>(W, X, codes, lanes, b, r, t, Y, ldy, next);
  for (; t < X.n; ++t, next = nullptr) tile<RB, 1>(W, X, codes, lanes, b, r, t, Y, ldy, next);
}

// PRECONDITION: X.row_scale.
void rows_many_tokens(const QmmWeights& W, const QmmActs& X, int64_t r0, int64_t r1, float* Y,
                      int64_t ldy) {
  // The rows' scales and biases, fetched ahead (row_params waited on them: 4 % of a prefill).
  const int64_t ng = W.cols / W.group, esz = W.scale_type == ScaleType::f32 ? 4 : 2;
  for (const void* base : {W.scales, W.biases}) {
    const char* p = static_cast<const char*>(base) + r0 * ng * esz;
    for (int64_t o = 0; o < (r1 - r0) * ng * esz; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
  }
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) rows_against_tokens<4>(W, X, r, Y, ldy);
  for (; r < r1; ++r) rows_against_tokens<1>(W, X, r, Y, ldy);
}

}  // namespace

void qmm_avx512(const QmmWeights& W, const QmmActs& X, int64_t r0, int64_t r1, float* Y,
                int64_t ldy) {
  if (X.n == 1) return rows_one_token(W, X, r0, r1, Y);
  rows_many_tokens(W, X, r0, r1, Y, ldy);
}

}  // namespace orchid::cpu
