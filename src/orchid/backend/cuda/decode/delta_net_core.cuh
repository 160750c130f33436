// The DeltaNet step's per-block stages (decode/delta_net_step.cu): q/k norms and gates, and the delta rule
// for a state column whose rows are spread over a few threads.
#pragma once

#include "orchid/backend/cuda/common/device_common.cuh"

namespace orchid::cuda {

constexpr int kMaxConvK = 8;  // conv taps the kernels handle

// q and k (dk each, in shared memory) L2-normalised in place (eps 1e-6 on the sum), q also scaled
// by 1/√dk, by the whole block; β = sigmoid(b) and the decay exp(−exp(A) · softplus(a + dt_bias)).
// `scratch`: 64 floats. Ends with a barrier.
__device__ __forceinline__ void gdn_norms_and_gates(int dk, float b, float a, float A,
                                                    float dt_bias, float* qs, float* ks,
                                                    float* scratch, float& beta, float& decay) {
  const int tid = threadIdx.x;
  const float qv = tid < dk ? qs[tid] : 0.f;
  const float kv = tid < dk ? ks[tid] : 0.f;
  const float2 ss = block_sum2(make_float2(qv * qv, kv * kv), scratch);
  const float q_ss = ss.x, k_ss = ss.y;
  if (tid < dk) {
    qs[tid] = qv * rsqrtf(q_ss + 1e-6f) * rsqrtf(float(dk));
    ks[tid] = kv * rsqrtf(k_ss + 1e-6f);
  }
  beta = sigmoid(b);
  const float ax = a + dt_bias;
  const float softplus = ax > 20.f ? ax : log1pf(expf(ax));
  decay = expf(-expf(A) * softplus);
  __syncthreads();
}

// The delta rule for one state column c, whose rows [grp · ROWS, (grp + 1) · ROWS) this thread
// holds in s (the block's GROUPS threads of a column hold all of them): decay, the memory read
// m = Sᵀk, δ = β (v − m), S += k δᵀ (written back through S_col, row stride `stride`), and this
// thread's part of the output Sᵀq. Returns the column's output (the groups' parts summed) to the
// grp 0 thread. part: [GROUPS][COLS] shared scratch. Ends with a barrier.
template <int ROWS, int GROUPS, int COLS>
__device__ __forceinline__ float gdn_delta_column(float (&s)[ROWS], int grp, int c, bool col_ok,
                                                  int dk, float decay, float beta, float v,
                                                  const float* qs, const float* ks,
                                                  float (&part)[GROUPS][COLS], float* S_col,
                                                  int stride) {
  float mem = 0.f;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = grp * ROWS + r;
    s[r] *= decay;
    mem = fmaf(s[r], i < dk ? ks[i] : 0.f, mem);
  }
  part[grp][c] = mem;
  __syncthreads();
  float m_sum = 0.f;
#pragma unroll
  for (int g = 0; g < GROUPS; ++g) m_sum += part[g][c];
  const float delta = col_ok ? beta * (v - m_sum) : 0.f;
  __syncthreads();
  float o = 0.f;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = grp * ROWS + r;
    if (i < dk) {
      s[r] = fmaf(ks[i], delta, s[r]);
      o = fmaf(s[r], qs[i], o);
      if (col_ok) S_col[size_t(i) * stride] = s[r];
    }
  }
  part[grp][c] = o;
  __syncthreads();
  float out = 0.f;
  if (grp == 0 && col_ok)
#pragma unroll
    for (int g = 0; g < GROUPS; ++g) out += part[g][c];
  return out;
}

}  // namespace orchid::cuda
