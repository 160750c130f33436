// Gated DeltaNet for one token on Hopper thread-block clusters: each value head's state columns
// are split over a cluster of kSplit blocks (the delta rule is independent per column: column d
// needs all rows of k, q and its own v), so a head's 64 KB of state is read and written by four
// SMs instead of one, and each block's barriers span 8 warps instead of 16. The gated RMSNorm
// over the head's dv outputs is the one cross-block step: each block's partial sum of squares is
// read by the others from its shared memory (distributed shared memory) between two cluster
// barriers. Same arithmetic per column as delta_net.cu's kernel (the fallback elsewhere, and with
// ORCHID_GDN_CLUSTER=0).
#include <cooperative_groups.h>

#include <atomic>

#include "orchid/backend/cuda/delta_net_core.cuh"

namespace orchid::cuda {
namespace {

namespace cg = cooperative_groups;

std::atomic<bool> g_gdn_cluster{true};

constexpr int kSplit = 4;      // blocks per value head
constexpr int kThreads = 256;  // per block

__global__ void __launch_bounds__(kThreads)
    gdn_step_cluster_kernel(const __grid_constant__ GdnParams p) {
#if __CUDA_ARCH__ >= 900
  constexpr int kCols = kMaxGdnHeadDim / kSplit;  // state columns per block (≤ 32)
  constexpr int kSlots = 2;  // conv channels per thread: q, k (2·dk) and this block's v (≤ 288)
  constexpr int kRowGroups = kThreads / kCols;        // 8 groups of rows
  constexpr int kRows = kMaxGdnHeadDim / kRowGroups;  // rows per thread (16)
  __shared__ float qs[kMaxGdnHeadDim], ks[kMaxGdnHeadDim], vs[kCols];
  __shared__ float part[kRowGroups][kCols];
  __shared__ float scratch[32];
  __shared__ float head_ss;  // this block's Σ o² (read by the cluster)
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank());
  const int j = blockIdx.x / kSplit, ratio = p.hv / p.hk, kh = j / ratio;
  const int dk = p.dk, dv = p.dv, K = p.K, cw = dv / kSplit, col0 = rank * cw;
  const int key_dim = p.hk * dk;
  const int tid = threadIdx.x, c = tid % kCols, grp = tid / kCols;
  const bool col_ok = c < cw;

  // Before the wait, as in delta_net.cu: state, conv taps and history, constants.
  const int pos = *p.pos;
  float* S = p.S + size_t(j) * dk * dv;
  float s[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = grp * kRows + r;
    s[r] = col_ok && i < dk ? S[size_t(i) * dv + col0 + c] : 0.f;
  }
  // Channel slot t (t < 2·dk + cw): q, then k (of key head kh), then this block's v columns.
  const int n_ch = 2 * dk + cw;
  int ch[kSlots];
  float* dst[kSlots];
  bool owner[kSlots];
  float taps[kSlots][kMaxConvK], hist[kSlots][kMaxConvK];
#pragma unroll
  for (int q = 0; q < kSlots; ++q) {
    const int t = tid + q * kThreads;
    // q / k channels are shared by the value heads of key head kh and by the cluster's blocks:
    // the first of them writes their ring slot.
    const bool first = j % ratio == 0 && rank == 0;
    ch[q] = 0, dst[q] = nullptr, owner[q] = false;
    if (t < dk)
      ch[q] = kh * dk + t, dst[q] = qs + t, owner[q] = first;
    else if (t < 2 * dk)
      ch[q] = key_dim + kh * dk + (t - dk), dst[q] = ks + (t - dk), owner[q] = first;
    else if (t < n_ch)
      ch[q] = 2 * key_dim + j * dv + col0 + (t - 2 * dk), dst[q] = vs + (t - 2 * dk),
      owner[q] = true;
#pragma unroll
    for (int back = 0; back < kMaxConvK; ++back) {
      const bool ok = t < n_ch && back < K && pos - back >= 0;
      taps[q][back] = ok ? p.conv_w[size_t(ch[q]) * K + K - 1 - back] : 0.f;
      hist[q][back] =
          ok && back > 0 ? p.conv_ring[size_t(ch[q]) * K + ((pos - back) % K + K) % K] : 0.f;
    }
  }
  const float A = p.A_log[j], dt_bias = p.dt_bias[j];
  const float nw = col_ok && grp == 0 ? p.norm[col0 + c] : 0.f;

  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;  // uniform over the grid: no block waits at a cluster barrier

  // 1. Conv step + SiLU.
  const float zz = col_ok && grp == 0 ? p.z[size_t(j) * dv + col0 + c] : 0.f;
  const float b = p.b[j], a = p.a[j];
#pragma unroll
  for (int q = 0; q < kSlots; ++q) {
    if (!dst[q]) continue;
    const float cur = p.qkv[ch[q]];
    hist[q][0] = cur;
    float sum = 0.f;
#pragma unroll
    for (int back = 0; back < kMaxConvK; ++back) sum = fmaf(taps[q][back], hist[q][back], sum);
    *dst[q] = silu(sum);
    if (owner[q]) p.conv_ring[size_t(ch[q]) * K + pos % K] = cur;
  }
  __syncthreads();

  // 2. L2 norms, β and the decay; 3. the delta rule for column col0 + c, rows
  //    [grp · kRows, + kRows).
  float beta, decay;
  gdn_norms_and_gates(dk, b, a, A, dt_bias, qs, ks, scratch, beta, decay);
  const float out = gdn_delta_column<kRows, kRowGroups, kCols>(
      s, grp, c, col_ok, dk, decay, beta, col_ok ? vs[c] : 0.f, qs, ks, part, S + col0 + c, dv);

  // 4. Gated RMSNorm over the head's dv outputs: this block's Σ o², then the cluster's.
  const float ss = block_sum(out * out, scratch);
  if (tid == 0) head_ss = ss;
  cluster.sync();  // every block's head_ss is written
  float total = 0.f;
#pragma unroll
  for (int r = 0; r < kSplit; ++r) total += *cluster.map_shared_rank(&head_ss, r);
  cluster.sync();  // no block leaves while another still reads its head_ss
  const float inv = rsqrtf(total / float(dv) + p.eps);
  if (grp == 0 && col_ok) p.out[size_t(j) * dv + col0 + c] = out * inv * nw * silu(zz);
#endif
}

}  // namespace

bool gdn_cluster_enabled() {
  return g_gdn_cluster.load(std::memory_order_relaxed);
}
void set_gdn_cluster_enabled(bool on) {
  g_gdn_cluster.store(on, std::memory_order_relaxed);
}

Expected<bool> launch_gdn_step_cluster(const GdnParams& p, cudaStream_t s) {
  // Hopper code only (clusters); state columns split evenly (launch_gdn_step has checked the
  // rest: dk, dv ≤ kMaxGdnHeadDim, so a block's 2 dk + dv / kSplit channels fit its slots).
  if (!gdn_cluster_enabled() || !pdl_supported() || p.dv % kSplit != 0) return false;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(p.hv * kSplit), cfg.blockDim = dim3(kThreads), cfg.stream = s;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kSplit, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr, cfg.numAttrs = 1;
  if (pdl_enabled()) {
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.numAttrs = 2;
  }
  if (cudaError_t e = cudaLaunchKernelEx(&cfg, gdn_step_cluster_kernel, p); e != cudaSuccess)
    return err("delta net step (cluster): ", cudaGetErrorString(e));
  return true;
}

}  // namespace orchid::cuda
