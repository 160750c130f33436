// The fast CPU matmul's kernels, one per instruction set (qmm_scalar.cpp, qmm_avx2.cpp,
// qmm_avx512.cpp, each compiled for its own ISA). This header holds plain data and static
// helpers only: a translation unit built with AVX-512 flags must not emit an inline function
// another unit could link to on a CPU without it.
//
// The arithmetic (each kernel computes exactly this; only float summation order differs):
//   a weight row is affine: w[e] = s[g] * code[e] + b[g], g = e / group, code 4- or 8-bit;
//   an activation row is int16 per 64-column block k: x[e] ≈ d[k] * q[e], d[k] = max|x| / 32767
//   (int8 was tried first: on the demo model it lost 9 % of HF fp32's top-1 tokens, KL 0.020
//   nats — five times HF bf16's own; int16 rounds ~100x finer than bf16 does);
//   y = Σ_k d[k] Σ_{g ∩ k} s[g] Σ_{e ∈ g ∩ k} code[e] q[e]  +  Σ_g b[g] * xsum[g],
// where xsum[g] is the exact fp32 sum of x over group g (the bias needs no rounding of x).
#pragma once

#include <cstdint>
#include <cstring>

namespace orchid::cpu {

enum class ScaleType : int { f32, bf16, f16 };

struct QmmWeights {
  int64_t rows = 0, cols = 0;      // cols % 64 == 0
  int bits = 4;                    // 4 or 8
  int group = 64;                  // 16, 32 or a multiple of 64
  const uint8_t* codes = nullptr;  // row r at codes + r * cols * bits / 8; LSB-first elements
  const void* scales = nullptr;    // [rows, cols / group] of scale_type
  const void* biases = nullptr;
  ScaleType scale_type = ScaleType::bf16;
};

// Activations, n rows of `cols`. Within each 64-column block, `q` holds the 32 even columns
// then the 32 odd ones: the order codes split into with one mask and one shift (a 4-bit code
// pair's low nibble, an 8-bit pair's low byte, is the even column).
struct QmmActs {
  int64_t n = 0, cols = 0;
  const int16_t* q = nullptr;   // [n, cols], |q| <= 32767
  const float* d = nullptr;     // [n, cols / 64]
  bool row_scale = false;       // every block of a row has the same d (several rows: prefill)
  const float* xsum = nullptr;  // [n, cols / group] for the matrix's group
  // One row (decode) also in nibble-plane order, for 4-bit codes read as 16-bit words: within
  // each pair of 64-column blocks, plane k (k < 4) holds columns 4j + k of the first block then
  // of the second (j < 16: 32 values, one 512-bit vector); a last unpaired block holds its plane
  // k's 16 values at 16k (qmm_plane_position).
  const int16_t* planes = nullptr;  // [cols] when n == 1
};

// Position of column e (< cols) in the nibble-plane order.
static inline int64_t qmm_plane_position(int64_t e, int64_t cols) {
  const int64_t pair = e / 128, c = e % 128, h = c / 64, k = c % 64 % 4, j = c % 64 / 4;
  if (128 * pair + 128 > cols) return 128 * pair + 16 * k + j;  // the unpaired last block
  return 128 * pair + 32 * k + 16 * h + j;
}

// Y[t * ldy + r] = row r of W · activation row t, for r in [r0, r1), t < X.n.
using QmmKernel = void (*)(const QmmWeights& W, const QmmActs& X, int64_t r0, int64_t r1, float* Y,
                           int64_t ldy);

void qmm_scalar(const QmmWeights&, const QmmActs&, int64_t, int64_t, float*, int64_t);
void qmm_avx2(const QmmWeights&, const QmmActs&, int64_t, int64_t, float*, int64_t);
void qmm_avx512(const QmmWeights&, const QmmActs&, int64_t, int64_t, float*, int64_t);

// The most groups and columns a row may have on the fast path (its scales and widened codes are
// staged on the stack).
constexpr int64_t kQmmMaxGroups = 1024;
constexpr int64_t kQmmMaxCols = 16384;

// Position within a 64-column block of column e's activation code (see QmmActs).
static inline int qmm_act_position(int e) {
  return (e % 2) * 32 + e / 2;
}

static inline float qmm_scale_value(const void* p, ScaleType t, int64_t i) {
  if (t == ScaleType::f32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  if (t == ScaleType::bf16) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  // IEEE half → float, exact (subnormals included).
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  uint32_t u;
  if (exp == 0x1F) {
    u = sign | 0x7F800000u | (man << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {
    int e = 113;
    uint32_t m = man;
    while (!(m & 0x400)) m <<= 1, --e;
    u = sign | (uint32_t(e) << 23) | ((m & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Row r's scales and biases as fp32 into s and b (n_groups each).
static inline void qmm_row_params(const QmmWeights& W, int64_t r, float* s, float* b) {
  const int64_t ng = W.cols / W.group;
  for (int64_t g = 0; g < ng; ++g) {
    s[g] = qmm_scale_value(W.scales, W.scale_type, r * ng + g);
    b[g] = qmm_scale_value(W.biases, W.scale_type, r * ng + g);
  }
}

}  // namespace orchid::cpu
