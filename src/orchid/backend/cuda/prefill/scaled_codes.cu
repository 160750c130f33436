// The scaled-code GEMMs' power of two per q4 matrix (prefill/gemm_ws.cuh): their B tiles hold
// s·(q − 8)·2^E and their bias columns 64·(b + 8s)·2^E in fp16, then the products are scaled back
// by 2^-E. E is the largest that keeps every bias value under fp16's 65,504, which also puts the
// smallest scales that matter far inside fp16's range, where s·(q − 8) stays exact.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "orchid/backend/cuda/common/device_common.cuh"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {
namespace {

// *out = max over the words of max(8|s|, |b + 8s|) as float bits (non-negative floats order as
// their bits do).
// sb [n] (scale, bias) bf16 pairs, scale low; out: one word, zeroed before (atomicMax per
// warp). Grid-stride.
__global__ void kernel_code_magnitude(const uint32_t* sb, int64_t n, unsigned* out) {
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float s = bf16_lo(sb[i]), b = bf16_hi(sb[i]);
    m = fmaxf(m, fmaxf(8.f * fabsf(s), fabsf(b + 8.f * s)));
  }
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) atomicMax(out, __float_as_uint(m));
}

}  // namespace

int scaled_code_exp(float magnitude) {
  if (!(magnitude > 0.f) || !std::isfinite(magnitude)) return 0;
  // 64 · magnitude · 2^E ≤ 65,504 (the bias columns' hi parts; R carries the 1/64).
  int e = std::clamp(int(std::floor(std::log2(65504.f / 64.f / magnitude))), -30, 30);
  while (e > -30 && double(magnitude) * 64.0 * std::ldexp(1.0, e) > 65504.0) --e;  // log2 rounding
  return e;
}

Status set_scaled_code_exp(DevMatrix& m, cudaStream_t s) {
  m.code_exp = 0;
  if (m.fmt != DevFormat::q4 || !m.sb || m.group <= 0 || m.rows <= 0) return {};
  const int64_t n = int64_t(m.rows) * (m.cols / m.group);
  unsigned* d = nullptr;
  if (cudaError_t e = cudaMalloc(&d, sizeof(unsigned)); e != cudaSuccess)
    return err("scaled codes: ", cudaGetErrorString(e));
  unsigned bits = 0;
  cudaError_t e = cudaMemsetAsync(d, 0, sizeof(unsigned), s);
  if (e == cudaSuccess) {
    const int blocks = int(std::min<int64_t>(1024, (n + 255) / 256));
    kernel_code_magnitude<<<std::max(blocks, 1), 256, 0, s>>>(m.sb, n, d);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpyAsync(&bits, d, sizeof bits, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  const cudaError_t freed = cudaFree(d);
  if (e == cudaSuccess) e = freed;
  if (e != cudaSuccess) return err("scaled codes: ", cudaGetErrorString(e));
  float mag;
  std::memcpy(&mag, &bits, sizeof mag);
  m.code_exp = scaled_code_exp(mag);
  return {};
}

}  // namespace orchid::cuda
