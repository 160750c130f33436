// q4 / q8 dot products on the integer units (dp4a): x̂ is quantised once per block to int8 codes
// in two parts, so that a 32-element q4 weight unit costs 8 logic ops and 16 dp4a instead of
// ~100 fp32 instructions (a 16-element q8 unit: 4 byte permutes and 8 dp4a).
//
// Codes: per group of 64 elements (the weights' quantisation group) a scale d = max|x̂| / 127,
// hi = rint(x̂ / d) and lo = rint((x̂ / d − hi) · 254), so x̂ ≈ d (hi + lo / 254) with
// |error| ≤ max|x̂| / 64,516 per element (2⁻¹⁶ of the group's largest value; bf16 activations
// keep 2⁻⁹ of each value). A weight word holds elements 0..7 as nibbles: w & 0x0f0f0f0f has the
// even elements in its bytes, w & 0xf0f0f0f0 sixteen times the odd ones, so x̂ codes are packed
// per word as (hi even, hi odd, lo even, lo odd) bytes. Sums stay exact in int32.
#pragma once

#include "orchid/backend/cuda/decode/gemv_core.cuh"

namespace orchid::cuda {

// A lane's units of x̂ (unit sl + j·lpr for j < NI) as dp4a operands, with each unit's group
// scale d and exact fp32 sum (for the bias term).
template <int NI>
struct XQuant {
  int he[NI][4], ho[NI][4], le[NI][4], lo[NI][4];
  float d[NI], sum[NI];
};

// Shared-memory bytes of the quantised x̂ of `units` 32-element units: codes, then (d, sum) per
// unit, then the sum of each 8-element word (for q8 rows, whose units are half as long).
__host__ __device__ constexpr size_t x_quant_smem_bytes(int units) {
  return size_t(units) * (4 * sizeof(int4) + sizeof(float2) + 4 * sizeof(float));
}

__device__ __forceinline__ int pack_bytes(int a, int b, int c, int d) {
  return (a & 0xff) | ((b & 0xff) << 8) | ((c & 0xff) << 16) | (d << 24);
}

// Σ a_k · b_k + c over 4 bytes, a unsigned, b signed.
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Quantises word c (elements 8c..8c+7 of x̂, in v) into xq ([4][units] int4: word t of unit u at
// xq[t · units + u], so lanes one unit apart read distinct banks), xd ([units] (d, Σ x̂)) and,
// when given, xw ([words] Σ x̂ of each word). Called by all 32 lanes of a warp at once with
// consecutive c (a group's 8 words sit in 8 consecutive lanes, a unit's 4 in 4); lanes with
// c ≥ words only join the shuffles.
__device__ __forceinline__ void quantize_word(const float (&v)[8], int c, int words, int4* xq,
                                              float2* xd, float* xw) {
  const int units = words / 4, u = c >> 2, t = c & 3;
  float mx = 0.f, word_sum = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e) mx = fmaxf(mx, fabsf(v[e])), word_sum += v[e];
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = word_sum + __shfl_xor_sync(0xffffffffu, word_sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (c >= words) return;
  if (xw) xw[c] = word_sum;
  const float d = mx > 0.f ? mx / 127.f : 1.f, rd = 1.f / d;
  int h[8], l[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float a = v[e] * rd, hr = rintf(a);
    h[e] = int(hr);
    l[e] = int(rintf((a - hr) * 254.f));
  }
  xq[t * units + u] =
      make_int4(pack_bytes(h[0], h[2], h[4], h[6]), pack_bytes(h[1], h[3], h[5], h[7]),
                pack_bytes(l[0], l[2], l[4], l[6]), pack_bytes(l[1], l[3], l[5], l[7]));
  if (t == 0) xd[u] = make_float2(d, sum);
}

// Loads the 8 floats of word c of x (zero when c ≥ words). PRECONDITION: x 16-byte aligned.
__device__ __forceinline__ void load_word(const float* x, int c, int words, float (&v)[8]) {
  const float4* xp = reinterpret_cast<const float4*>(x) + 2 * c;
  const float4 a = c < words ? xp[0] : make_float4(0.f, 0.f, 0.f, 0.f);
  const float4 b = c < words ? xp[1] : make_float4(0.f, 0.f, 0.f, 0.f);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

constexpr int kMaxWords = 2;  // words per thread in stage_x_quant: 4,096 columns, 256 threads

// x̂ = x (· rsqrt(mean(x²) + eps) · norm when norm is given), quantised straight from registers
// by quantize_word. Thread i takes the 8-element words i, i + blockDim, ...: one coalesced load
// of x and of the norm per word, one block reduction, no staging of fp32 x̂. Ends with a barrier.
// PRECONDITION: cols a multiple of 64 and ≤ 8 · kMaxWords · blockDim.x; blockDim.x a multiple of
// 32; x and norm 16-byte aligned.
__device__ __forceinline__ void stage_x_quant(const float* x, int cols, const float* norm,
                                              float eps, int4* xq, float2* xd, float* xw,
                                              float* scratch) {
  const int words = cols / 8;
  float v[kMaxWords][8];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxWords; ++k) {
    const int c = k * int(blockDim.x) + int(threadIdx.x);
    load_word(x, c, words, v[k]);
#pragma unroll
    for (int e = 0; e < 8; ++e) ss = fmaf(v[k][e], v[k][e], ss);
    if (norm && c < words) {
      float n[8];
      load_word(norm, c, words, n);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[k][e] *= n[e];
    }
  }
  const float inv = norm ? rsqrtf(block_sum(ss, scratch) / float(cols) + eps) : 1.f;
#pragma unroll
  for (int k = 0; k < kMaxWords; ++k) {
    if (k * int(blockDim.x) >= words) break;  // uniform: whole rounds of the block
#pragma unroll
    for (int e = 0; e < 8; ++e) v[k][e] *= inv;
    quantize_word(v[k], k * int(blockDim.x) + int(threadIdx.x), words, xq, xd, xw);
  }
  __syncthreads();
}

// This lane's units of the quantised x̂ (zero past `units`).
template <int NI>
__device__ __forceinline__ void load_x_quant(const int4* xq, const float2* xd, int units, int sl,
                                             int lpr, XQuant<NI>& q) {
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const int u = sl + j * lpr;
    const bool ok = u < units;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int4 c = ok ? xq[t * units + u] : make_int4(0, 0, 0, 0);
      q.he[j][t] = c.x, q.ho[j][t] = c.y, q.le[j][t] = c.z, q.lo[j][t] = c.w;
    }
    const float2 f = ok ? xd[u] : make_float2(0.f, 0.f);
    q.d[j] = f.x, q.sum[j] = f.y;
  }
}

// A lane's q8 units of x̂ (16 elements: unit u is words 2u, 2u + 1), as dp4a operands.
template <int NI>
struct XQuant8 {
  int he[NI][2], ho[NI][2], le[NI][2], lo[NI][2];
  float d[NI], sum[NI];
};

// This lane's q8 units (unit sl + j·lpr) of the quantised x̂ of `units` 32-element units.
template <int NI>
__device__ __forceinline__ void load_x_quant8(const int4* xq, const float2* xd, const float* xw,
                                              int units, int sl, int lpr, XQuant8<NI>& q) {
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const int u8 = sl + j * lpr, u = u8 >> 1, t0 = 2 * (u8 & 1);
    const bool ok = u < units;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int4 c = ok ? xq[(t0 + i) * units + u] : make_int4(0, 0, 0, 0);
      q.he[j][i] = c.x, q.ho[j][i] = c.y, q.le[j][i] = c.z, q.lo[j][i] = c.w;
    }
    q.d[j] = ok ? xd[u].x : 0.f;
    q.sum[j] = ok ? xw[2 * u8] + xw[2 * u8 + 1] : 0.f;
  }
}

// This lane's part of W[row] · x̂ for q8 rows: each pair of code words is split into its even and
// odd bytes (the order of the x̂ codes) by byte permutes; codes are unsigned bytes.
template <int NI>
__device__ __forceinline__ float partial_dot_dp4a8(const RowUnits<NI>& r, const XQuant8<NI>& q) {
  float acc = 0.f;
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const uint32_t ws[4] = {r.w[j].x, r.w[j].y, r.w[j].z, r.w[j].w};
    int h = 0, l = 0;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t even = __byte_perm(ws[2 * i], ws[2 * i + 1], 0x6420);
      const uint32_t odd = __byte_perm(ws[2 * i], ws[2 * i + 1], 0x7531);
      h = dp4a_us(odd, q.ho[j][i], dp4a_us(even, q.he[j][i], h));
      l = dp4a_us(odd, q.lo[j][i], dp4a_us(even, q.le[j][i], l));
    }
    const float qx = q.d[j] * (float(h) + float(l) * (1.f / 254.f));
    acc = fmaf(bf16_lo(r.sb[j]), qx, fmaf(bf16_hi(r.sb[j]), q.sum[j], acc));
  }
  return acc;
}

// This lane's part of W[row] · x̂ (the dp4a counterpart of partial_dot for q4).
template <int NI>
__device__ __forceinline__ float partial_dot_dp4a(const RowUnits<NI>& r, const XQuant<NI>& q) {
  float acc = 0.f;
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const uint32_t ws[4] = {r.w[j].x, r.w[j].y, r.w[j].z, r.w[j].w};
    int h = 0, h16 = 0, l = 0, l16 = 0;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const uint32_t even = ws[t] & 0x0f0f0f0fu, odd16 = ws[t] & 0xf0f0f0f0u;
      h = dp4a_us(even, q.he[j][t], h);
      h16 = dp4a_us(odd16, q.ho[j][t], h16);
      l = dp4a_us(even, q.le[j][t], l);
      l16 = dp4a_us(odd16, q.lo[j][t], l16);
    }
    // Σ codes·x̂ = d (Σ q·hi + Σ q·lo / 254); the odd products carry a factor 16.
    const float qx =
        q.d[j] * (1.f / 16.f) * (float(h * 16 + h16) + float(l * 16 + l16) * (1.f / 254.f));
    acc = fmaf(bf16_lo(r.sb[j]), qx, fmaf(bf16_hi(r.sb[j]), q.sum[j], acc));
  }
  return acc;
}

}  // namespace orchid::cuda
