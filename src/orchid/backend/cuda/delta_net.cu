// Gated DeltaNet for one token, one block per value head: the causal conv step over a ring of
// the last K raw inputs + SiLU, q/k L2 norms, β and the decay, the delta-rule update with the
// head's [dk, dv] state held in registers (thread → one column, half the rows), and the gated
// RMSNorm of the output.
#include "orchid/backend/cuda/device_common.cuh"

namespace orchid::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kQuarters = kThreads / kMaxGdnHeadDim;  // row groups × 128 columns
constexpr int kRowsPerThread = kMaxGdnHeadDim / kQuarters;
constexpr int kMaxConvK = 8;  // conv taps the kernel handles

__global__ void __launch_bounds__(kThreads) gdn_step_kernel(const __grid_constant__ GdnParams p) {
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  __shared__ float qs[kMaxGdnHeadDim], ks[kMaxGdnHeadDim], vs[kMaxGdnHeadDim];
  __shared__ float part[kQuarters][kMaxGdnHeadDim];
  __shared__ float scratch[32];
  const int j = blockIdx.x, ratio = p.hv / p.hk, kh = j / ratio;
  const int dk = p.dk, dv = p.dv, K = p.K;
  const int key_dim = p.hk * dk;
  const int pos = *p.pos;
  const int tid = threadIdx.x;

  // 1. Conv step for this head's q, k (shared with the other value heads of key head kh) and
  //    v channels. The ring slot pos % K is written only by the head that owns the channel;
  //    all reads are of other slots, so heads never race.
  for (int i = tid; i < 2 * dk + dv; i += kThreads) {
    int ch;
    float* dst;
    bool owner;
    if (i < dk)
      ch = kh * dk + i, dst = qs + i, owner = j % ratio == 0;
    else if (i < 2 * dk)
      ch = key_dim + kh * dk + (i - dk), dst = ks + (i - dk), owner = j % ratio == 0;
    else
      ch = 2 * key_dim + j * dv + (i - 2 * dk), dst = vs + (i - 2 * dk), owner = true;
    const float cur = p.qkv[ch];
    const float* taps = p.conv_w + size_t(ch) * K;
    const float* ring = p.conv_ring + size_t(ch) * K;
    // All taps and ring entries are loaded before the sum (one round trip, not K).
    float t[kMaxConvK], r[kMaxConvK];
#pragma unroll
    for (int back = 0; back < kMaxConvK; ++back) {
      const bool ok = back < K && pos - back >= 0;
      t[back] = back < K ? taps[K - 1 - back] : 0.f;
      r[back] = back == 0 ? cur : ok ? ring[((pos - back) % K + K) % K] : 0.f;
    }
    float sum = 0.f;
#pragma unroll
    for (int back = 0; back < kMaxConvK; ++back) sum = fmaf(t[back], r[back], sum);
    *dst = silu(sum);
    if (owner) p.conv_ring[size_t(ch) * K + pos % K] = cur;
  }
  __syncthreads();

  // 2. L2 norms (eps 1e-6 on the sum), q scaled by 1/√dk.
  const float qv = tid < dk ? qs[tid] : 0.f;
  const float kv = tid < dk ? ks[tid] : 0.f;
  const float q_ss = block_sum(qv * qv, scratch);
  const float k_ss = block_sum(kv * kv, scratch);
  if (tid < dk) {
    qs[tid] = qv * rsqrtf(q_ss + 1e-6f) * rsqrtf(float(dk));
    ks[tid] = kv * rsqrtf(k_ss + 1e-6f);
  }
  const float beta = sigmoid(p.b[j]);
  const float ax = p.a[j] + p.dt_bias[j];
  const float softplus = ax > 20.f ? ax : log1pf(expf(ax));
  const float decay = expf(-expf(p.A_log[j]) * softplus);
  __syncthreads();

  // 3. Delta rule. Thread: column d = tid % 128, rows [half * 32, half * 32 + 32).
  const int d = tid % kMaxGdnHeadDim, half = tid / kMaxGdnHeadDim;
  const bool col_ok = d < dv;
  float* S = p.S + size_t(j) * dk * dv;
  float s[kRowsPerThread];
  float mem = 0.f;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int i = half * kRowsPerThread + r;
    s[r] = col_ok && i < dk ? S[size_t(i) * dv + d] * decay : 0.f;
    mem = fmaf(s[r], i < dk ? ks[i] : 0.f, mem);
  }
  part[half][d] = mem;
  __syncthreads();
  float m_sum = 0.f;
#pragma unroll
  for (int q = 0; q < kQuarters; ++q) m_sum += part[q][d];
  const float delta = col_ok ? beta * (vs[d] - m_sum) : 0.f;
  __syncthreads();
  float o = 0.f;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int i = half * kRowsPerThread + r;
    if (i < dk) {
      s[r] = fmaf(ks[i], delta, s[r]);
      o = fmaf(s[r], qs[i], o);
      if (col_ok) S[size_t(i) * dv + d] = s[r];
    }
  }
  part[half][d] = o;
  __syncthreads();

  // 4. Gated RMSNorm over the head's dv outputs, then silu(z).
  float out = 0.f;
  if (tid < dv)
#pragma unroll
    for (int q = 0; q < kQuarters; ++q) out += part[q][tid];
  const float inv = rsqrtf(block_sum(out * out, scratch) / float(dv) + p.eps);
  if (tid < dv) {
    const float zz = p.z[size_t(j) * dv + tid];
    p.out[size_t(j) * dv + tid] = out * inv * p.norm[tid] * silu(zz);
  }
}

}  // namespace

Status launch_gdn_step(const GdnParams& p, cudaStream_t s) {
  if (p.dk > kMaxGdnHeadDim || p.dv > kMaxGdnHeadDim)
    return err("delta net: head dims ", p.dk, "/", p.dv, " exceed ", kMaxGdnHeadDim);
  if (p.hk <= 0 || p.hv % p.hk != 0) return err("delta net: ", p.hv, " value heads over ", p.hk);
  if (p.K < 1 || p.K > kMaxConvK) return err("delta net: conv kernel of ", p.K, " taps");
  return launch("delta net step", gdn_step_kernel, dim3(p.hv), dim3(kThreads), 0, s, p);
}

}  // namespace orchid::cuda
