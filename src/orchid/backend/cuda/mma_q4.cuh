// MLX 4-bit (group 64) rows · x̂ on the tensor cores, for the batch-1 GEMV. Dequantizing on
// CUDA cores costs ~3.5 instructions per weight (the lm_head GEMV was issue-bound); here a code
// pair becomes an fp16 pair with one logic op and one mma.m16n8k16 (fp16 in, fp32 accumulate)
// multiplies 16 rows by 16 inputs.
//
// Per group of 64 inputs and 16 rows, lane (g = lane / 4, t = lane % 4) holds words 2t and 2t+1
// of rows g and g + 8 (8-byte loads straight from the MLX layout). Nibble pair j of a word
// (nibbles j and j + 4) becomes fp16 (1024 + q) (j even) or (1024 + 16 q) (j odd) by OR-ing it
// under the fp16 exponent of 1024; the mma's k order is permuted to match (tile j takes pair j
// of words 2t and 2t+1), and x̂ is staged in that order, divided by 16 where j is odd. So each
// product is q·x̂ plus 1024 × the staged value, whose group total K is staged too: Σ q·x̂ = C − K.
// B's column 0 carries x̂'s high fp16 part and column 1 its low part (below), so lanes t = 0 end
// with their rows' sums.
//
// Precision: x̂ (scaled by a power of two so that it fits fp16) is staged as two fp16 parts,
// hi = fp16(x̂) and lo = fp16(x̂ − hi), each multiplied: ~22 bits, as accurate as the fp32 CUDA-core
// path in practice (one fp16 part alone flipped near-tie MoE routes of the golden fixtures).
// Products are exact and sums fp32; the bias term uses the fp32 sum of x̂.
#pragma once

#include <cuda_fp16.h>

#include "orchid/backend/cuda/gemv_core.cuh"

namespace orchid::cuda {

constexpr int kMmaGroup = 64;   // inputs per (scale, bias) the tensor-core path handles
constexpr int kSegGroups = 8;   // groups per unit of work (512 inputs)
constexpr int kMmaXWords = 64;  // staged words per group: [t][hi, lo][j][b0, b1]

// x̂ staged for the tensor-core path: per group, kMmaXWords words of fp16 pairs, the fp32 sum of
// x̂ and the offset total K; and the power of two x̂ was divided by.
struct MmaX {
  uint32_t* h;  // [groups * kMmaXWords]
  float* sum;   // [groups]
  float* k;     // [groups]
  float scale;  // x̂ = staged values · scale
};

__host__ __device__ constexpr int mma_x_bytes(int groups) {
  return groups * (kMmaXWords * 4 + 2 * 4);
}

// The power-of-two divisor that keeps |x̂| ≤ max_abs within 2^15.
__device__ __forceinline__ int mma_x_shift(float max_abs) {
  int ex = 0;
  frexpf(max_abs, &ex);  // max_abs < 2^ex
  return ex > 15 ? ex - 15 : 0;
}

// Staging slot (G, t) (i = G · 4 + t): 4 tiles × (b0, b1) for hi, then for lo; `at(e)` gives
// x̂ element e (0 … groups · 64). Returns the slot's 16 values' fp32 sum and their staged sum
// (hi + lo), for the group totals.
template <class At>
__device__ __forceinline__ float2 stage_mma_slot(At at, int i, float inv, uint32_t* h) {
  const int G = i >> 2, t = i & 3, base = G * kMmaGroup + 16 * t;
  uint32_t* out = h + i * 16;
  float sum = 0.f, staged = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float f = (j & 1) ? inv * (1.f / 16.f) : inv;
#pragma unroll
    for (int b = 0; b < 2; ++b) {  // b0: word 2t, b1: word 2t + 1
      const float x0 = at(base + 8 * b + j), x1 = at(base + 8 * b + j + 4);
      const float v0 = x0 * f, v1 = x1 * f;
      const __half2 hi = __floats2half2_rn(v0, v1);
      const float2 hf = __half22float2(hi);
      const __half2 lo = __floats2half2_rn(v0 - hf.x, v1 - hf.y);
      const float2 lf = __half22float2(lo);
      out[2 * j + b] = *reinterpret_cast<const uint32_t*>(&hi);
      out[8 + 2 * j + b] = *reinterpret_cast<const uint32_t*>(&lo);
      sum += x0 + x1;
      staged += (hf.x + lf.x) + (hf.y + lf.y);
    }
  }
  return make_float2(sum, staged);
}

// Group totals from the slots' partial sums: the 4 slots of a group sit on 4 consecutive lanes
// (i = G · 4 + t), so two shuffles reduce them; lane t = 0 writes the fp32 sum of x̂ and
// K = 1024 × the staged total. Every lane of the warp calls it (valid = it staged a slot).
__device__ __forceinline__ void store_group_sums(float2 part, int i, bool valid, MmaX& m) {
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    part.x += __shfl_xor_sync(0xffffffffu, part.x, o);
    part.y += __shfl_xor_sync(0xffffffffu, part.y, o);
  }
  if (valid && (i & 3) == 0) m.sum[i >> 2] = part.x, m.k[i >> 2] = 1024.f * part.y;
}

// From x̂ in the padded fp32 staging layout (unit_elems 32), by all threads of the block; ends
// with a barrier. `red` holds 32 floats of scratch.
__device__ __forceinline__ void stage_mma_x(const float* xs, int groups, MmaX& m, float* red) {
  constexpr int S = smem_unit_stride(32);
  auto at = [&](int e) { return xs[(e >> 5) * S + (e & 31)]; };
  float mx = 0.f;
  for (int e = threadIdx.x; e < groups * kMmaGroup; e += blockDim.x) mx = fmaxf(mx, fabsf(at(e)));
  mx = warp_max(mx);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  mx = warp_max(lane < n_warp ? red[lane] : 0.f);
  const int shift = mma_x_shift(mx);
  m.scale = ldexpf(1.f, shift);
  const float inv = ldexpf(1.f, -shift);
  // Whole warps iterate together (blockDim a multiple of 32) so the shuffles see every lane.
  for (int base = threadIdx.x & ~31; base < groups * 4; base += blockDim.x) {
    const int i = base + lane;
    const bool valid = i < groups * 4;
    store_group_sums(valid ? stage_mma_slot(at, i, inv, m.h) : make_float2(0.f, 0.f), i, valid, m);
  }
  __syncthreads();
}

// D += A · B on m16n8k16, fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Nibble pair j (nibbles j, j + 4) of w as fp16 (1024 + q) or, j odd, (1024 + 16 q).
template <int J>
__device__ __forceinline__ uint32_t nibble_pair(uint32_t w) {
  constexpr uint32_t kMask = (J & 1) ? 0x00f000f0u : 0x000f000fu;
  const uint32_t v = (J >= 2) ? (w >> 8) : w;
  return (v & kMask) | 0x64006400u;
}

// c += (nibble pair J of rows g, g + 8: words wa / wb) · (b0, b1), one m16n8k16.
template <int J>
__device__ __forceinline__ void mma_nibble_pair(float (&c)[4], uint2 wa, uint2 wb, uint32_t b0,
                                                uint32_t b1) {
  const uint32_t a[4] = {nibble_pair<J>(wa.x), nibble_pair<J>(wb.x), nibble_pair<J>(wa.y),
                         nibble_pair<J>(wb.y)};
  mma_16816(c, a, b0, b1);
}

// One warp's registers for a unit (16 rows × up to kSegGroups groups): words 2t, 2t+1 of each
// group of rows g and g + 8, and those rows' (scale, bias) words.
struct MmaUnit {
  uint2 wa[kSegGroups], wb[kSegGroups];
  uint32_t pa[kSegGroups], pb[kSegGroups];
};

// Loads groups [g0, min(g0 + kSegGroups, groups)) of rows ra (this lane's g) and rb (g + 8) of m.
__device__ __forceinline__ void load_mma_unit(const DevMatrix& m, int64_t ra, int64_t rb, int g0,
                                              int groups, MmaUnit& u) {
  const int t = threadIdx.x & 3;
  const char* wa = static_cast<const char*>(m.w) + ra * m.units * 16 + t * 8;
  const char* wb = static_cast<const char*>(m.w) + rb * m.units * 16 + t * 8;
  const uint32_t* sa = m.sb + ra * groups;
  const uint32_t* sb = m.sb + rb * groups;
#pragma unroll
  for (int j = 0; j < kSegGroups; ++j) {
    const int G = g0 + j;
    if (G >= groups) break;
    u.wa[j] = __ldg(reinterpret_cast<const uint2*>(wa + G * 32));
    u.wb[j] = __ldg(reinterpret_cast<const uint2*>(wb + G * 32));
    u.pa[j] = __ldg(sa + G);
    u.pb[j] = __ldg(sb + G);
  }
}

// Adds the unit's rows · x̂ (groups g0 …) to acc[0] (row g) and acc[1] (row g + 8); the sums are
// complete in lanes t = 0 only. Whole warp. B column n comes from lane group g = n: even columns
// carry hi, odd ones lo, so one mma per nibble pair multiplies both parts (columns 0 + 1).
__device__ __forceinline__ void mma_unit(const MmaUnit& u, int g0, int groups, const MmaX& x,
                                         float (&acc)[2]) {
  const int t = threadIdx.x & 3, part = (threadIdx.x >> 2) & 1;
#pragma unroll
  for (int j = 0; j < kSegGroups; ++j) {
    const int G = g0 + j;
    if (G >= groups) break;
    const uint4* xp = reinterpret_cast<const uint4*>(x.h + (G * 4 + t) * 16 + part * 8);
    const uint4 b01 = xp[0], b23 = xp[1];
    float c[4][4] = {};  // one accumulator per nibble pair: independent mma
    const uint2 wa = u.wa[j], wb = u.wb[j];
    mma_nibble_pair<0>(c[0], wa, wb, b01.x, b01.y);
    mma_nibble_pair<1>(c[1], wa, wb, b01.z, b01.w);
    mma_nibble_pair<2>(c[2], wa, wb, b23.x, b23.y);
    mma_nibble_pair<3>(c[3], wa, wb, b23.z, b23.w);
    const float k = x.k[G], s = x.sum[G];
    // Row g: columns 0 (hi) + 1 (lo) = c[.][0] + c[.][1]; row g + 8: c[.][2] + c[.][3].
    const float ca = ((c[0][0] + c[0][1]) + (c[1][0] + c[1][1])) +
                     ((c[2][0] + c[2][1]) + (c[3][0] + c[3][1])) - k;
    const float cb = ((c[0][2] + c[0][3]) + (c[1][2] + c[1][3])) +
                     ((c[2][2] + c[2][3]) + (c[3][2] + c[3][3])) - k;
    acc[0] = fmaf(bf16_lo(u.pa[j]) * x.scale, ca, fmaf(bf16_hi(u.pa[j]), s, acc[0]));
    acc[1] = fmaf(bf16_lo(u.pb[j]) * x.scale, cb, fmaf(bf16_hi(u.pb[j]), s, acc[1]));
  }
}

}  // namespace orchid::cuda
