// Device-side helpers shared by the kernels: launch checking, bf16 bits ↔ float, the prefill
// GEMMs' fp16 operands (hi + lo), warp and block reductions, a counter-based random hash.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "orchid/backend/cuda/common/kernels.h"

namespace orchid::cuda {

// Programmatic dependent launch (Hopper). A kernel launched through launch() may start while
// the kernel before it in the stream is finishing. It must call grid_dep_wait() before reading
// anything earlier kernels wrote and before writing anything; before the wait it may only read
// weights. grid_dep_release() lets the next kernel start launching. Code for earlier GPUs has
// neither instruction, and launch() never asks for the overlap there (pdl_supported()).
__device__ __forceinline__ void grid_dep_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dep_release() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches `kernel` on `s`, with programmatic dependent launch when enabled.
template <class... KernelParams, class... Args>
Status launch(const char* what, void (*kernel)(KernelParams...), dim3 grid, dim3 block, size_t smem,
              cudaStream_t s, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = s;
  cudaLaunchAttribute attr[1];
  if (pdl_enabled() && pdl_supported()) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr, cfg.numAttrs = 1;
  }
  if (cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
      e != cudaSuccess)
    return err(what, ": ", cudaGetErrorString(e));
  return {};
}

// Batched decode (kernels.h: SlotBatch): slot `slot`'s state pointer `which` (0: K cache or conv
// ring, 1: V cache or S) of the batch's layer. Null outside a batch.
template <class T>
__device__ __forceinline__ T* slot_state(const SlotBatch& b, int slot, int which) {
  return static_cast<T*>(b.states[(int64_t(slot) * b.n_layer + b.layer) * 2 + which]);
}

// Blocks of `kernel` (with `threads` threads, `smem` dynamic shared bytes) one SM holds at once.
int resident_blocks(const void* kernel, int threads, size_t smem);

// Multiprocessors of the current device (cached).
int sm_count();

// The current device's opt-in shared memory a block (0 when it cannot be read).
int smem_optin();

// Dynamic shared memory that leaves room for only one block of a kernel on an SM (just over half
// of an SM's shared memory; 0 if the device does not say). A grid of at most sm_count() such
// blocks lands one block an SM, where the block scheduler would otherwise put two blocks of a
// small grid on one SM while others stay empty (cached).
size_t one_block_per_sm_smem();

// Status of the launch just made on this thread.
inline Status last_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return err(what, ": ", cudaGetErrorString(e));
  return {};
}

__device__ __forceinline__ float bf16_lo(uint32_t w) {
  return __uint_as_float(w << 16);
}
__device__ __forceinline__ float bf16_hi(uint32_t w) {
  return __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) {
  return __uint_as_float(uint32_t(h) << 16);
}
// Round to nearest even (finite inputs).
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// The prefill GEMMs' fp16 operands (prefill/prefill_kernels.h): hi[i] = fp16(x) and, when lo is set,
// lo[i] = fp16(x − hi) (exact in fp32 before that rounding). x is saturated to fp16's largest
// finite ±65,504 first: the values are normed or gated, far below it, and an outlier past it
// stays finite (hi ±65,504, lo 0) where inf would poison every sum it enters; NaN stays NaN.
__device__ __forceinline__ float f16_saturate(float x) {
  return x > 65504.f ? 65504.f : x < -65504.f ? -65504.f : x;
}
__device__ __forceinline__ void store_f16_split(float x, uint16_t* hi, uint16_t* lo, int64_t i) {
  x = f16_saturate(x);
  const __half h = __float2half_rn(x);
  hi[i] = __half_as_ushort(h);
  if (lo) lo[i] = __half_as_ushort(__float2half_rn(x - __half2float(h)));
}
// (x, y) as fp16 pairs hi and lo = (x, y) − hi, each packed in a word (x in the low half).
__device__ __forceinline__ void f16x2_split(float x, float y, uint32_t& hi, uint32_t& lo) {
  x = f16_saturate(x), y = f16_saturate(y);
  const __half2 h = __floats2half2_rn(x, y);
  const __half2 l = __floats2half2_rn(x - __low2float(h), y - __high2float(h));
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}
// Elements i, i + 1 (i even: 4-byte stores).
__device__ __forceinline__ void store_f16x2_split(float x, float y, uint16_t* hi, uint16_t* lo,
                                                  int64_t i) {
  uint32_t h, l;
  f16x2_split(x, y, h, l);
  *reinterpret_cast<uint32_t*>(hi + i) = h;
  if (lo) *reinterpret_cast<uint32_t*>(lo + i) = l;
}

// Element (row, c) of a device matrix, dequantised (embedding rows).
__device__ __forceinline__ float matrix_element(const DevMatrix& m, int64_t row, int c) {
  const int E = unit_elems(m.fmt), u = c / E, e = c % E;
  const uint32_t* unit =
      reinterpret_cast<const uint32_t*>(static_cast<const uint4*>(m.w) + row * m.units + u);
  if (m.fmt == DevFormat::bf16) {
    const uint32_t w = unit[e / 2];
    return e % 2 ? bf16_hi(w) : bf16_lo(w);
  }
  const int bits = m.fmt == DevFormat::q4 ? 4 : 8, per_word = 32 / bits;
  const uint32_t q = (unit[e / per_word] >> ((e % per_word) * bits)) & ((1u << bits) - 1u);
  const uint32_t sb = m.sb[row * (m.cols / m.group) + c / m.group];
  return bf16_lo(sb) * float(q) + bf16_hi(sb);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warp ? scratch[lane] : 0.f;
  return warp_sum(v);
}

// Two sums over the block at once (one pair of barriers); every thread gets both. `scratch`
// holds 64 floats.
__device__ __forceinline__ float2 block_sum2(float2 v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = (blockDim.x + 31) >> 5;
  v.x = warp_sum(v.x), v.y = warp_sum(v.y);
  __syncthreads();
  if (lane == 0) scratch[warp] = v.x, scratch[32 + warp] = v.y;
  __syncthreads();
  return make_float2(warp_sum(lane < n_warp ? scratch[lane] : 0.f),
                     warp_sum(lane < n_warp ? scratch[32 + lane] : 0.f));
}

__device__ __forceinline__ float silu(float x) {
  return x / (1.f + expf(-x));
}
__device__ __forceinline__ float sigmoid(float x) {
  return 1.f / (1.f + expf(-x));
}

// 64-bit mix (splitmix64 finaliser): a counter-based generator, so every element is
// independent of launch geometry.
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Uniform in (0, 1).
__device__ __forceinline__ float uniform01(uint64_t key) {
  return (float(uint32_t(mix64(key) >> 40)) + 0.5f) * (1.f / 16777216.f);
}

}  // namespace orchid::cuda
