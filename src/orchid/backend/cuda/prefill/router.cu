// Router logits of a prefill chunk in fp32 on the CUDA cores. Top-k is a discontinuity: where two
// experts' logits nearly tie, the rounding of fp16 tensor-core operands (2⁻¹¹ per operand) picks a
// different expert than the fp32 reference and the token's MoE output jumps (measured: isolated
// positions 0.1–0.4 off in rel. L2 on the golden fixtures and random full-size layers). Here x̂ is
// normed from the fp32 residual and every weight dequantised exactly in fp32, as the CPU reference
// and the decode path's 2⁻¹⁶-accurate codes do; the cost is ~1 GFLOP per 1K tokens per layer.
#include "orchid/backend/cuda/common/device_common.cuh"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {
namespace {

constexpr int kTok = 64, kOut = 64, kK = 64, kThreads = 256;

// Block: kTok tokens × kOut logits (rows of [router; shared_gate]); thread: 4 tokens × 4 rows.
// logits [T, router.rows + 1] fp32 = x̂ · [router; shared_gate row 0]ᵀ, x̂ = RMSNorm of h
// [T, n_embd] · norm [n_embd]; router, shared_gate [·, n_embd]. Grid (⌈T / kTok⌉,
// ⌈(router.rows + 1) / kOut⌉).
__global__ void __launch_bounds__(kThreads)
    kernel_router_f32(const float* h, const float* norm, float eps, int T, int n_embd,
                      const __grid_constant__ DevMatrix router,
                      const __grid_constant__ DevMatrix shared_gate, float* logits) {
  __shared__ float xs[kTok][kK + 1], ws[kOut][kK + 1], inv[kTok];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int t_base = blockIdx.x * kTok, o_base = blockIdx.y * kOut, n_out = router.rows + 1;
  // Each token's 1 / rms, a warp per 8 tokens.
  for (int i = warp; i < kTok; i += kThreads / 32) {
    const int t = t_base + i;
    float ss = 0.f;
    if (t < T)
      for (int c = lane; c < n_embd; c += 32)
        ss = fmaf(h[size_t(t) * n_embd + c], h[size_t(t) * n_embd + c], ss);
    ss = warp_sum(ss);
    if (lane == 0) inv[i] = rsqrtf(ss / float(n_embd) + eps);
  }
  const int tr = (tid / 16) * 4, orow = (tid % 16) * 4;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < n_embd; k0 += kK) {
    __syncthreads();  // inv ready; the previous tiles consumed
    for (int i = tid; i < kTok * kK; i += kThreads) {
      const int r = i / kK, c = i % kK, t = t_base + r, col = k0 + c;
      xs[r][c] = t < T && col < n_embd ? h[size_t(t) * n_embd + col] * inv[r] * norm[col] : 0.f;
    }
    for (int i = tid; i < kOut * kK; i += kThreads) {
      const int r = i / kK, c = i % kK, o = o_base + r, col = k0 + c;
      float w = 0.f;
      if (o < n_out && col < n_embd)
        w = o < router.rows ? matrix_element(router, o, col) : matrix_element(shared_gate, 0, col);
      ws[r][c] = w;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kK; ++kk) {
      float a[4], w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[tr + i][kk], w[i] = ws[orow + i][kk];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], w[j], acc[i][j]);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int t = t_base + tr + i, o = o_base + orow + j;
      if (t < T && o < n_out) logits[size_t(t) * n_out + o] = acc[i][j];
    }
}

}  // namespace

Status launch_router_logits_f32(const float* h, const float* norm, float eps, int T, int n_embd,
                                const DevMatrix& router, const DevMatrix& shared_gate,
                                float* logits, cudaStream_t s) {
  if (T < 1 || router.cols != n_embd || shared_gate.cols != n_embd || shared_gate.rows < 1 || !h ||
      !norm || !logits)
    return err("router logits: ", T, " tokens, router [", router.rows, ", ", router.cols,
               "], shared gate [", shared_gate.rows, ", ", shared_gate.cols, "]");
  const dim3 grid((T + kTok - 1) / kTok, (router.rows + 1 + kOut - 1) / kOut);
  kernel_router_f32<<<grid, kThreads, 0, s>>>(h, norm, eps, T, n_embd, router, shared_gate, logits);
  return last_launch("router logits (fp32)");
}

}  // namespace orchid::cuda
