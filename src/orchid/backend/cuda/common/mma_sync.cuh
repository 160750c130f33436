// mma.sync tensor-core and async-copy primitives shared by the attention kernels (decode and
// prefill), the chunked DeltaNet scan and the prefill GEMM tiles: cp.async 16-byte copies into
// shared memory, ldmatrix fragment loads, the m16n8k16 bf16 mma and its three-pass split form for
// products near fp32, and the m16n8k16 fp16 mma.
#pragma once

#include "orchid/backend/cuda/common/device_common.cuh"

namespace orchid::cuda {

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return uint32_t(float_to_bf16_bits(lo)) | (uint32_t(float_to_bf16_bits(hi)) << 16);
}
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global → shared.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src)
               : "memory");
}
// The first `bytes` of 16 from src, the rest zeros (bytes = 0 fills a row past the data with
// zeros, so that a masked P = 0 never meets an uninitialised NaN).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// Four 8×8 b16 matrices; lanes 8i … 8i + 7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}
// d += a · b, m16n8k16, bf16 inputs (a: 4 registers of the A fragment), fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  mma_bf16(d, a[0], a[1], a[2], a[3], b0, b1);
}

// Two floats as bf16 pairs hi + lo (x0 in the low halves): hi = bf16(x), lo = bf16(x − hi). x − hi
// is exact in fp32, so x = hi + lo to 2⁻¹⁸ relative (17 significant bits against fp32's 24) with
// fp32's exponent range. cvt.rn.bf16x2 (sm_80) rounds both to nearest even in one instruction.
__device__ __forceinline__ void split_bf16x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(x1), "f"(x0));
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"(x1 - bf16_hi(hi)), "f"(x0 - bf16_lo(hi)));
}

// d += a · b to near fp32 from split operands (a = a_hi + a_lo, b = b_hi + b_lo): the small
// products first, then hi · hi; lo · lo (≤ 2⁻¹⁸ relative) is dropped. Three times the MMAs.
__device__ __forceinline__ void mma_bf16x3(float (&d)[4], const uint32_t (&a_hi)[4],
                                           const uint32_t (&a_lo)[4], uint32_t b_hi0,
                                           uint32_t b_hi1, uint32_t b_lo0, uint32_t b_lo1) {
  mma_bf16(d, a_lo, b_hi0, b_hi1);
  mma_bf16(d, a_hi, b_lo0, b_lo1);
  mma_bf16(d, a_hi, b_hi0, b_hi1);
}

// d += a · b, m16n8k16, fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace orchid::cuda
