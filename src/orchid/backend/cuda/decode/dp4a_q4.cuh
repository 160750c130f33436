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

// One 32-element unit of x̂ as dp4a operands, with its group scale d and exact fp32 sum (for the
// bias term).
struct XQuantUnit {
  int he[4], ho[4], le[4], lo[4];
  float d, sum;
};
// A lane's units of x̂ (unit sl + j·lpr for j < NI).
template <int NI>
struct XQuant {
  XQuantUnit u[NI];
};

// Shared-memory bytes of the quantised x̂ of `units` 32-element units: codes, then (d, sum) per
// unit, then the sum of each 8-element word (for q8 rows, whose units are half as long).
__host__ __device__ constexpr size_t x_quant_smem_bytes(int units) {
  return size_t(units) * (4 * sizeof(int4) + sizeof(float2) + 4 * sizeof(float));
}
static_assert(x_quant_smem_bytes(3) == size_t(x_codes_bytes(3)));

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

// Where slot b's codes sit in a batched GEMV's shared memory (x_quant_smem_bytes(units) a slot):
// codes, then (d, sum) per unit, then the q8 word sums.
// The same layout in global memory, at `at` (GemvParams::x_codes).
struct SlotCodes {
  int4* xq;
  float2* xd;
  float* xw;
  __device__ __forceinline__ SlotCodes(unsigned char* smem, int units, int b)
      : SlotCodes(smem + size_t(b) * x_quant_smem_bytes(units), units) {}
  __device__ __forceinline__ SlotCodes(unsigned char* at, int units) {
    xq = reinterpret_cast<int4*>(at);
    xd = reinterpret_cast<float2*>(xq + 4 * units);
    xw = reinterpret_cast<float*>(xd + units);
  }
};

// stage_x_quant for the live slots of a batch (bit b of `live`: x + b · stride into
// SlotCodes(smem, cols / 32, b)), each slot's codes bit for bit the ones stage_x_quant makes:
// every slot's sum of squares first (their loads all in flight, one reduction for all: two
// barriers, not two a slot), then each slot's x̂ read again (from L1) and quantised. Ends with a
// barrier. `scratch` holds 32 · kMaxSlots floats. PRECONDITION: as stage_x_quant.
__device__ __forceinline__ void stage_x_quant_slots(const float* x, int64_t stride, unsigned live,
                                                    int cols, const float* norm, float eps,
                                                    bool word_sums, unsigned char* smem,
                                                    float* scratch) {
  const int words = cols / 8, units = cols / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = (blockDim.x + 31) >> 5;
  // block_sum for every slot at once (the same order of additions): each warp's sums into
  // scratch, one barrier pair, then each slot's total when it is quantised.
  // Four slots' loads in flight at once (a thread's words of them in registers: 32 floats a
  // round), then their sums.
  constexpr int kAtOnce = 4;
  __syncthreads();
  if (norm) {
#pragma unroll 1
    for (int b0 = 0; b0 < kMaxSlots; b0 += kAtOnce) {
      if (!(live >> b0 & ((1u << kAtOnce) - 1))) continue;  // uniform
      float ss[kAtOnce] = {};
#pragma unroll
      for (int k = 0; k < kMaxWords; ++k) {
        if (k * int(blockDim.x) >= words) break;  // uniform
        float v[kAtOnce][8];
#pragma unroll
        for (int b = 0; b < kAtOnce; ++b)
          load_word(x + (b0 + b) * stride, k * int(blockDim.x) + int(threadIdx.x),
                    live >> (b0 + b) & 1 ? words : 0, v[b]);
#pragma unroll
        for (int b = 0; b < kAtOnce; ++b)
#pragma unroll
          for (int e = 0; e < 8; ++e) ss[b] = fmaf(v[b][e], v[b][e], ss[b]);
      }
#pragma unroll
      for (int b = 0; b < kAtOnce; ++b) {
        const float t = warp_sum(ss[b]);
        if (lane == 0) scratch[(b0 + b) * 32 + warp] = t;
      }
    }
  }
  __syncthreads();
#pragma unroll 2
  for (int b = 0; b < kMaxSlots; ++b) {
    if (!(live >> b & 1)) continue;  // uniform
    const SlotCodes sc(smem, units, b);
    const float inv =
        norm ? rsqrtf(warp_sum(lane < n_warp ? scratch[b * 32 + lane] : 0.f) / float(cols) + eps)
             : 1.f;
#pragma unroll
    for (int k = 0; k < kMaxWords; ++k) {
      if (k * int(blockDim.x) >= words) break;  // uniform: whole rounds of the block
      const int c = k * int(blockDim.x) + int(threadIdx.x);
      float v[8];
      load_word(x + b * stride, c, words, v);
      if (norm && c < words) {
        float n[8];
        load_word(norm, c, words, n);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] *= n[e];
      }
      if (norm)
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] *= inv;
      quantize_word(v, c, words, sc.xq, sc.xd, word_sums ? sc.xw : nullptr);
    }
  }
  __syncthreads();
}

// Unit u of the quantised x̂ (zero when u ≥ units).
__device__ __forceinline__ void load_x_quant_unit(const int4* xq, const float2* xd, int units,
                                                  int u, XQuantUnit& q) {
  const bool ok = u < units;
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const int4 c = ok ? xq[t * units + u] : make_int4(0, 0, 0, 0);
    q.he[t] = c.x, q.ho[t] = c.y, q.le[t] = c.z, q.lo[t] = c.w;
  }
  const float2 f = ok ? xd[u] : make_float2(0.f, 0.f);
  q.d = f.x, q.sum = f.y;
}

// This lane's units of the quantised x̂ (zero past `units`).
template <int NI>
__device__ __forceinline__ void load_x_quant(const int4* xq, const float2* xd, int units, int sl,
                                             int lpr, XQuant<NI>& q) {
#pragma unroll
  for (int j = 0; j < NI; ++j) load_x_quant_unit(xq, xd, units, sl + j * lpr, q.u[j]);
}

// One 16-element q8 unit of x̂ (words 2u, 2u + 1 of the 32-element units' codes), as dp4a
// operands.
struct XQuant8Unit {
  int he[2], ho[2], le[2], lo[2];
  float d, sum;
};
template <int NI>
struct XQuant8 {
  XQuant8Unit u[NI];
};

// q8 unit u8 of the quantised x̂ of `units` 32-element units (zero past them).
__device__ __forceinline__ void load_x_quant8_unit(const int4* xq, const float2* xd,
                                                   const float* xw, int units, int u8,
                                                   XQuant8Unit& q) {
  const int u = u8 >> 1, t0 = 2 * (u8 & 1);
  const bool ok = u < units;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int4 c = ok ? xq[(t0 + i) * units + u] : make_int4(0, 0, 0, 0);
    q.he[i] = c.x, q.ho[i] = c.y, q.le[i] = c.z, q.lo[i] = c.w;
  }
  q.d = ok ? xd[u].x : 0.f;
  q.sum = ok ? xw[2 * u8] + xw[2 * u8 + 1] : 0.f;
}

// This lane's q8 units (unit sl + j·lpr) of the quantised x̂ of `units` 32-element units.
template <int NI>
__device__ __forceinline__ void load_x_quant8(const int4* xq, const float2* xd, const float* xw,
                                              int units, int sl, int lpr, XQuant8<NI>& q) {
#pragma unroll
  for (int j = 0; j < NI; ++j) load_x_quant8_unit(xq, xd, xw, units, sl + j * lpr, q.u[j]);
}

// acc plus one q8 weight unit (w, its (scale, bias) sb) times x̂'s unit q: each pair of code words
// is split into its even and odd bytes (the order of the x̂ codes) by byte permutes; codes are
// unsigned bytes.
__device__ __forceinline__ float dot_unit_dp4a8(uint4 w, uint32_t sb, const XQuant8Unit& q,
                                                float acc) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  int h = 0, l = 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t even = __byte_perm(ws[2 * i], ws[2 * i + 1], 0x6420);
    const uint32_t odd = __byte_perm(ws[2 * i], ws[2 * i + 1], 0x7531);
    h = dp4a_us(odd, q.ho[i], dp4a_us(even, q.he[i], h));
    l = dp4a_us(odd, q.lo[i], dp4a_us(even, q.le[i], l));
  }
  const float qx = q.d * (float(h) + float(l) * (1.f / 254.f));
  return fmaf(bf16_lo(sb), qx, fmaf(bf16_hi(sb), q.sum, acc));
}

// float(i), exactly, for |i| < 2²²: i added to the bits of 1.5 · 2²³ (one unit in the last place
// there is 1), minus 1.5 · 2²³ — two full-rate instructions where the conversion unit runs at a
// quarter rate.
__device__ __forceinline__ float small_int_to_float(int i) {
  return __int_as_float(0x4B400000 + i) - 12582912.f;
}

// acc plus one q4 unit's term, from its integer sums h16 = 16 Σ q·hi and l16 = 16 Σ q·lo (q the
// weight codes, hi / lo x̂'s codes; |sums| < 2²⁰), x̂'s (d, Σ x̂) and the weights' (scale, bias)
// sb. Every path that wants the dp4a GEMV's bits calls this (the dp4a dot and the batched
// tensor-core GEMV).
__device__ __forceinline__ float unit_term(int h16, int l16, float d, float sum, uint32_t sb,
                                           float acc) {
  // Σ codes·x̂ = d (Σ q·hi + Σ q·lo / 254).
  const float qx =
      d * (1.f / 16.f) * (small_int_to_float(h16) + small_int_to_float(l16) * (1.f / 254.f));
  return fmaf(bf16_lo(sb), qx, fmaf(bf16_hi(sb), sum, acc));
}

// acc plus one q4 weight unit times x̂'s unit q (the dp4a counterpart of partial_dot's step).
__device__ __forceinline__ float dot_unit_dp4a(uint4 w, uint32_t sb, const XQuantUnit& q,
                                               float acc) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  int h = 0, h16 = 0, l = 0, l16 = 0;
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const uint32_t even = ws[t] & 0x0f0f0f0fu, odd16 = ws[t] & 0xf0f0f0f0u;
    h = dp4a_us(even, q.he[t], h);
    h16 = dp4a_us(odd16, q.ho[t], h16);
    l = dp4a_us(even, q.le[t], l);
    l16 = dp4a_us(odd16, q.lo[t], l16);
  }
  // The odd products carry a factor 16.
  return unit_term(h * 16 + h16, l * 16 + l16, q.d, q.sum, sb, acc);
}

// This lane's part of W[row] · x̂ for q8 rows.
template <int NI>
__device__ __forceinline__ float partial_dot_dp4a8(const RowUnits<NI>& r, const XQuant8<NI>& q) {
  float acc = 0.f;
#pragma unroll
  for (int j = 0; j < NI; ++j) acc = dot_unit_dp4a8(r.w[j], r.sb[j], q.u[j], acc);
  return acc;
}

// This lane's part of W[row] · x̂ (the dp4a counterpart of partial_dot for q4).
template <int NI>
__device__ __forceinline__ float partial_dot_dp4a(const RowUnits<NI>& r, const XQuant<NI>& q) {
  float acc = 0.f;
#pragma unroll
  for (int j = 0; j < NI; ++j) acc = dot_unit_dp4a(r.w[j], r.sb[j], q.u[j], acc);
  return acc;
}

}  // namespace orchid::cuda
