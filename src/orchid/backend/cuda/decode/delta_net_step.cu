// Gated DeltaNet for one token, one block per value head: the causal conv step over a ring of
// the last K raw inputs + SiLU, q/k L2 norms, β and the decay, the delta-rule update with the
// head's [dk, dv] state held in registers (thread → one column, a quarter of the rows), and the
// gated RMSNorm of the output. (A cluster of four blocks per head, the gated RMSNorm's sum shared
// through distributed shared memory, measured 4 % slower on the H200: docs/perf-notes.md.)
#include "orchid/backend/cuda/decode/delta_net_core.cuh"

namespace orchid::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kQuarters = kThreads / kMaxGdnHeadDim;  // row groups × 128 columns
constexpr int kRowsPerThread = kMaxGdnHeadDim / kQuarters;

// GdnParams; grid hv: a block per value head, 512 threads (thread: state column tid % 128,
// a quarter of the dk rows; before the wait, conv channel tid).
// BATCHED: grid y = slot (qkv, z, b, a, out, pos and halt move by the batch's stride; the conv
// ring and S are the slot's own).
template <bool BATCHED>
__global__ void __launch_bounds__(kThreads) gdn_step_kernel(const __grid_constant__ GdnParams p) {
  const int64_t so = BATCHED ? int64_t(blockIdx.y) * p.batch.stride : 0;
  float* const ring = BATCHED ? slot_state<float>(p.batch, blockIdx.y, 0) : p.conv_ring;
  float* const S0 = BATCHED ? slot_state<float>(p.batch, blockIdx.y, 1) : p.S;
  __shared__ float qs[kMaxGdnHeadDim], ks[kMaxGdnHeadDim], vs[kMaxGdnHeadDim];
  __shared__ float part[kQuarters][kMaxGdnHeadDim];
  __shared__ float scratch[64];
  const int j = blockIdx.x, ratio = p.hv / p.hk, kh = j / ratio;
  const int dk = p.dk, dv = p.dv, K = p.K;
  const int key_dim = p.hk * dk;
  const int tid = threadIdx.x;
  const int d = tid % kMaxGdnHeadDim, half = tid / kMaxGdnHeadDim;
  const bool col_ok = d < dv;

  // Before waiting for the in-projection kernel: everything it does not write — this head's
  // state rows, conv taps and ring (written by earlier steps, long finished), the position and
  // the per-head constants — so those loads overlap its tail. Thread `tid` owns conv channel
  // slot tid (2·dk + dv ≤ kThreads): q, then k (shared by the value heads of key head kh),
  // then this head's v.
  const int pos = p.pos[so];
  float* S = S0 + size_t(j) * dk * dv;
  float s[kRowsPerThread];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int i = half * kRowsPerThread + r;
    s[r] = col_ok && i < dk ? S[size_t(i) * dv + d] : 0.f;
  }
  const int n_ch = 2 * dk + dv;
  int ch = 0;
  float* dst = nullptr;
  bool owner = false;
  if (tid < dk)
    ch = kh * dk + tid, dst = qs + tid, owner = j % ratio == 0;
  else if (tid < 2 * dk)
    ch = key_dim + kh * dk + (tid - dk), dst = ks + (tid - dk), owner = j % ratio == 0;
  else if (tid < n_ch)
    ch = 2 * key_dim + j * dv + (tid - 2 * dk), dst = vs + (tid - 2 * dk), owner = true;
  float t[kMaxConvK], r[kMaxConvK];
#pragma unroll
  for (int back = 0; back < kMaxConvK; ++back) {
    const bool ok = tid < n_ch && back < K && pos - back >= 0;
    t[back] = ok ? p.conv_w[size_t(ch) * K + K - 1 - back] : 0.f;
    r[back] = ok && back > 0 ? ring[size_t(ch) * K + ((pos - back) % K + K) % K] : 0.f;
  }
  const float A = p.A_log[j], dt_bias = p.dt_bias[j];
  const float nw = tid < dv ? p.norm[tid] : 0.f;

  grid_dep_wait();
  grid_dep_release();
  if (p.halt && p.halt[so]) return;

  // 1. Conv step + SiLU. The ring slot pos % K is written only by the head that owns the
  //    channel; all reads are of other slots, so heads never race.
  const float cur = tid < n_ch ? p.qkv[so + ch] : 0.f;
  const float zz = tid < dv ? p.z[so + size_t(j) * dv + tid] : 0.f;
  const float b = p.b[so + j], a = p.a[so + j];
  if (tid < n_ch) {
    r[0] = cur;
    float sum = 0.f;
#pragma unroll
    for (int back = 0; back < kMaxConvK; ++back) sum = fmaf(t[back], r[back], sum);
    *dst = silu(sum);
    if (owner) ring[size_t(ch) * K + pos % K] = cur;
  }
  __syncthreads();

  // 2. L2 norms, β and the decay; 3. the delta rule for column d (rows [half · 32, + 32)).
  float beta, decay;
  gdn_norms_and_gates(dk, b, a, A, dt_bias, qs, ks, scratch, beta, decay);
  const float out = gdn_delta_column<kRowsPerThread, kQuarters, kMaxGdnHeadDim>(
      s, half, d, col_ok, dk, decay, beta, col_ok ? vs[d] : 0.f, qs, ks, part, S + d, dv);

  // 4. Gated RMSNorm over the head's dv outputs (thread tid < dv holds column tid's), then
  //    silu(z).
  const float inv = rsqrtf(block_sum(out * out, scratch) / float(dv) + p.eps);
  if (tid < dv) p.out[so + size_t(j) * dv + tid] = out * inv * nw * silu(zz);
}

}  // namespace

Status launch_gdn_step(const GdnParams& p, cudaStream_t s) {
  if (p.dk > kMaxGdnHeadDim || p.dv > kMaxGdnHeadDim)
    return err("delta net: head dims ", p.dk, "/", p.dv, " exceed ", kMaxGdnHeadDim);
  if (p.hk <= 0 || p.hv % p.hk != 0) return err("delta net: ", p.hv, " value heads over ", p.hk);
  if (p.K < 1 || p.K > kMaxConvK) return err("delta net: conv kernel of ", p.K, " taps");
  if (2 * p.dk + p.dv > kThreads) return err("delta net: ", 2 * p.dk + p.dv, " channels per head");
  if (p.batch.slots > 1)
    return launch("delta net step", gdn_step_kernel<true>, dim3(p.hv, p.batch.slots),
                  dim3(kThreads), 0, s, p);
  return launch("delta net step", gdn_step_kernel<false>, dim3(p.hv), dim3(kThreads), 0, s, p);
}

}  // namespace orchid::cuda
