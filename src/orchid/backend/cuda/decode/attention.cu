// Gated attention for one token (the q/k path before it: decode/qk_norm_rope_kv.cu).
// attention_decode: one block per (KV head, KV range); each K/V row is loaded once for all query
// heads of its GQA group (lane ℓ holds dims [8ℓ, 8ℓ+8)); tiles of 32 keys per warp with an online
// softmax. With more than one range per head a combine kernel merges the ranges and applies the
// sigmoid gate. attention_mma_kernel (default for head sizes 64, 128, 256) does both products on
// the tensor cores, the group's query heads as the rows of one tile.
#include <atomic>
#include <cmath>

#include "orchid/backend/cuda/common/mma_sync.cuh"

namespace orchid::cuda {
namespace {

constexpr int kAttnWarps = 4, kTile = 32;

constexpr int kBatch = 8;  // K or V rows in flight per lane

// One lane's 16 bytes (8 bf16) of a cache row; zero for lanes past the head's dims.
__device__ __forceinline__ uint4 load_row(const uint16_t* src, bool ok) {
  return ok ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0u, 0u, 0u, 0u);
}

__device__ __forceinline__ void unpack8(uint4 u, float (&out)[8]) {
  out[0] = bf16_lo(u.x), out[1] = bf16_hi(u.x), out[2] = bf16_lo(u.y), out[3] = bf16_hi(u.y);
  out[4] = bf16_lo(u.z), out[5] = bf16_hi(u.z), out[6] = bf16_lo(u.w), out[7] = bf16_hi(u.w);
}

// After a block's warps have left (m, l) per head in s_ml and their accumulators in s_acc:
// the block's result per query head of the group — the gated output (one range) or the range's
// partial for the combine kernel.
template <int G, int W>
// so: the slot's offset in a batch (kernels.h: SlotBatch; 0 alone).
__device__ __forceinline__ void merge_and_store(const AttnParams& p, int g, int split, int n_split,
                                                const float (&s_ml)[W][G][2],
                                                const float (&s_acc)[W][G][kMaxHeadDim],
                                                int64_t so = 0) {
  const int hd = p.hd;
  const int gq = G * hd;
  const bool direct = n_split == 1;
  // Per head: the max over warps, each warp's weight exp(m_w − max) (0 for a warp without keys)
  // and the weighted sum of l — once per head, not per output dim (at 4K context the merge
  // was most of the kernel's instructions).
  __shared__ float s_f[W][G], s_head[G][2];
  if (int(threadIdx.x) < G) {
    const int h = threadIdx.x;
    float mx = -INFINITY, ls = 0.f;
    for (int w = 0; w < W; ++w) mx = fmaxf(mx, s_ml[w][h][0]);
    for (int w = 0; w < W; ++w) {
      const float f = s_ml[w][h][0] == -INFINITY ? 0.f : expf(s_ml[w][h][0] - mx);
      s_f[w][h] = f;
      ls += s_ml[w][h][1] * f;
    }
    s_head[h][0] = mx, s_head[h][1] = ls;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < gq; i += blockDim.x) {
    const int h = i / hd, d = i % hd;
    const float mx = s_head[h][0], ls = s_head[h][1];
    float a = 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) a = fmaf(s_acc[w][h][d], s_f[w][h], a);
    const int head = g * G + h;
    if (direct) {
      const float gate = p.qg[so + size_t(head) * 2 * hd + hd + d];
      p.out[so + size_t(head) * hd + d] = a / ls * sigmoid(gate);
    } else {
      const size_t slot = (size_t(g) * n_split + split) * G + h;
      p.part_acc[so + slot * hd + d] = a;
      if (d == 0) p.part_ml[so + slot * 2] = mx, p.part_ml[so + slot * 2 + 1] = ls;
    }
  }
}

// AttnParams; G = n_head / n_head_kv. Grid (n_head_kv, n_split): a block per (KV head, key
// range), its 4 warps taking the range's 32-key tiles in turn; writes out, or (n_split > 1)
// part_acc / part_ml for attention_combine_kernel.
template <int G>
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_kernel(const __grid_constant__ AttnParams p) {
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && *p.halt) return;
  const int g = blockIdx.x, split = blockIdx.y, n_split = gridDim.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hd = p.hd, nkv = p.n_head_kv;
  const int n_keys = *p.pos + 1;
  const float scale = rsqrtf(float(hd));
  const bool dim_ok = lane * 8 < hd;
  // Key range of this block, in whole tiles.
  const int n_tiles = (n_keys + kTile - 1) / kTile;
  const int tiles_per = (n_tiles + n_split - 1) / n_split;
  const int t_begin = split * tiles_per, t_end = min(n_tiles, t_begin + tiles_per);

  float q[G][8], acc[G][8], m[G], l[G];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    const float* qh = p.qg + size_t(g * G + h) * 2 * hd + lane * 8;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      q[h][e] = dim_ok ? qh[e] * scale : 0.f;
      acc[h][e] = 0.f;
    }
    m[h] = -INFINITY;
    l[h] = 0.f;
  }
  const size_t row_stride = size_t(nkv) * hd;
  const uint16_t* kbase = p.kc + size_t(g) * hd + lane * 8;
  const uint16_t* vbase = p.vc + size_t(g) * hd + lane * 8;

  for (int t = t_begin + warp; t < t_end; t += kAttnWarps) {
    const int j0 = t * kTile;
    // Scores: lane kk ends up holding key j0+kk's score for every head. Rows are loaded kBatch
    // at a time before any is used (addresses clamped to the last key, results masked), so a
    // tile costs kTile / kBatch memory round trips, not kTile.
    float mine[G];
#pragma unroll
    for (int h = 0; h < G; ++h) mine[h] = -INFINITY;
    for (int kb = 0; kb < kTile; kb += kBatch) {
      uint4 kr[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        kr[b] = load_row(kbase + size_t(min(j0 + kb + b, n_keys - 1)) * row_stride, dim_ok);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        float k8[8];
        unpack8(kr[b], k8);
#pragma unroll
        for (int h = 0; h < G; ++h) {
          float s = 0.f;
#pragma unroll
          for (int e = 0; e < 8; ++e) s = fmaf(q[h][e], k8[e], s);
          s = warp_sum(s);
          if (lane == kb + b && j0 + kb + b < n_keys) mine[h] = s;
        }
      }
    }
    // Online softmax over the tile.
    float pr[G];
#pragma unroll
    for (int h = 0; h < G; ++h) {
      const float m_new = fmaxf(m[h], warp_max(mine[h]));
      const float corr = expf(m[h] - m_new);
      pr[h] = expf(mine[h] - m_new);  // 0 for lanes past the last key
      l[h] = l[h] * corr + warp_sum(pr[h]);
      m[h] = m_new;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[h][e] *= corr;
    }
    for (int kb = 0; kb < kTile; kb += kBatch) {
      uint4 vr[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        vr[b] = load_row(vbase + size_t(min(j0 + kb + b, n_keys - 1)) * row_stride, dim_ok);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        float v8[8];
        unpack8(vr[b], v8);
#pragma unroll
        for (int h = 0; h < G; ++h) {
          const float ph = __shfl_sync(0xffffffffu, pr[h], kb + b);  // 0 past the last key
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[h][e] = fmaf(ph, v8[e], acc[h][e]);
        }
      }
    }
  }

  // Merge the warps: (m, l, acc) per head through shared memory.
  __shared__ float s_ml[kAttnWarps][G][2];
  __shared__ float s_acc[kAttnWarps][G][kMaxHeadDim];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    if (lane == 0) s_ml[warp][h][0] = m[h], s_ml[warp][h][1] = l[h];
    if (dim_ok)
#pragma unroll
      for (int e = 0; e < 8; ++e) s_acc[warp][h][lane * 8 + e] = acc[h][e];
  }
  __syncthreads();
  merge_and_store<G, kAttnWarps>(p, g, split, n_split, s_ml, s_acc);
}

// The same on tensor cores (ORCHID_MMA_ATTENTION=0: the kernel above), for head sizes 64, 128,
// 256 and groups of at most 8 query heads; per warp and stage of 16 keys, as mma.m16n8k16 with
// bf16 inputs and fp32 accumulators:
//  - S = Q · Kᵀ: A rows 0-7 hold the group's queries rounded to bf16, rows 8-15 the rounding
//    remainders, so S = C[h] + C[h + 8] is as exact as an fp32 dot with the bf16 keys; B is a K
//    row as stored (lane 4g + t loads dims [8t, 8t + 8) of each 32-dim block of key g; the mma's
//    k order is permuted to match, in Q too). Lane 4g + t ends with head g's scores of keys
//    2t, 2t + 1 of each 8-key column block, where the online softmax runs.
//  - Oᵀ += Vᵀ · Pᵀ per 8 keys: B = P, which is exactly those registers (k slots 0-7: P rounded to
//    bf16, 8-15: its remainders, against the same V rows); A = Vᵀ, whose rows (output dims) are
//    permuted so that lane 4g + t reads dims [HD/8 · g, HD/8 · (g + 1)) of keys 2t and 2t + 1 as
//    contiguous 16-byte loads and pairs them with one byte permute per fragment register.
// The output accumulators (16 dims × 8 heads per mma) waste nothing; lane 4g + t holds heads
// 2t, 2t + 1 at dims HD/8 · g + [0, HD/8).
// Stages of kStage keys: each warp copies a stage's K and V rows into its own shared memory with
// cp.async (every row of the stage in flight at once: one memory round trip per stage, where
// loading fragments straight from global memory cost six per 32 keys), then multiplies from
// there. K and V are committed as two groups: q·k waits for K only, so V's copy overlaps it.
// Rows are padded to a 64-byte offset modulo 128, so a quarter warp's K fragment reads fall in
// distinct banks (its V reads, rows 2t of one address modulo 128, still conflict 4-way). After
// the key loop the same memory holds the warps' accumulators.
// W warps a block: 4, or 8 (when the grid fits one block an SM): a
// range of 128 keys is 8 stages, so 8 warps request all of them before the dependency wait,
// where 4 warps take two stages each and the second one's round trip comes after the first's
// products. Past one block an SM (long contexts: 2 × 128 ranges) 4 warps keep three blocks an
// SM, which 8 warps' 147 KB of stages would not.
constexpr int kStage = 16;
constexpr int kStageNt = kStage / 8;  // 8-key column blocks per stage
template <int HD>
__host__ __device__ constexpr int stage_row() {  // bf16 per staged row
  return HD + 32;
}
// ONE_BUF: a stage's K and V take turns in one buffer (V copied after q·k): half the stage
// memory, so that a batch's wide blocks fit two an SM (its slots' blocks then take half the
// waves); the arithmetic is the same.
template <int G, int HD, int W, bool ONE_BUF = false>
constexpr size_t attention_mma_smem() {
  const size_t stages =
      size_t(W) * (ONE_BUF ? 1 : 2) * kStage * stage_row<HD>() * sizeof(uint16_t);
  const size_t merge = sizeof(float) * W * G * kMaxHeadDim;
  return stages > merge ? stages : merge;
}

// AttnParams; G = n_head / n_head_kv, HD = hd, W warps. Grid (n_head_kv, n_split): a block per
// (KV head, key range), as attention_kernel, on the tensor cores as described above; dynamic
// shared memory attention_mma_smem<G, HD, W>().
// BATCHED: grid z = slot (qg, out, the partials, pos and halt move by the batch's stride; the
// caches are the slot's own); the slot takes the ranges its context takes alone (of the grid's
// gridDim.y), and runs in this launch only if its ranges fit one block an SM as it would alone
// exactly when W is the wide width (wide_max_split: the most ranges that run wide).
template <int G, int HD, int W, bool BATCHED, bool ONE_BUF = false>
__global__ void __launch_bounds__(W * 32)
    attention_mma_kernel(const __grid_constant__ AttnParams p, int wide_max_split) {
  constexpr int kBlocks = HD / 32;  // 32-dim blocks of a row (q·k)
  constexpr int kMt = HD / 16;      // 16-dim output tiles (P·V)
  constexpr int kWords = HD / 16;   // bf16 pairs of a row a lane reads for P·V
  constexpr int RS = stage_row<HD>();
  const int64_t so = BATCHED ? int64_t(blockIdx.z) * p.batch.stride : 0;
  const int n_keys = p.pos[so] + 1;
  const int g = blockIdx.x, split = blockIdx.y;
  const int n_split = BATCHED ? splits_for_keys(n_keys, kMaxSplitsPerHead) : int(gridDim.y);
  if constexpr (BATCHED) {
    if (split >= n_split || (W == 8) != (n_split <= wide_max_split)) return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, t = lane & 3;
  const int nkv = p.n_head_kv;
  const float scale = rsqrtf(float(HD));
  const int n_tiles = (n_keys + kTile - 1) / kTile;
  const int tiles_per = (n_tiles + n_split - 1) / n_split;
  const int t_begin = split * tiles_per, t_end = min(n_tiles, t_begin + tiles_per);
  extern __shared__ uint4 smem_attn[];
  uint16_t* sk =
      reinterpret_cast<uint16_t*>(smem_attn) + size_t(warp) * (ONE_BUF ? 1 : 2) * kStage * RS;
  uint16_t* sv = ONE_BUF ? sk : sk + kStage * RS;
  const size_t row_stride = size_t(nkv) * HD;
  const uint16_t* kcache =
      (BATCHED ? slot_state<const uint16_t>(p.batch, blockIdx.z, 0) : p.kc) + size_t(g) * HD;
  const uint16_t* vcache =
      (BATCHED ? slot_state<const uint16_t>(p.batch, blockIdx.z, 1) : p.vc) + size_t(g) * HD;

  // Warp w takes stages (kStage keys) w, w + W, … of the block's range. Rows
  // [r_begin, r_end) of the stage at key j0 into the warp's stage memory as one cp.async group;
  // rows past the last key repeat it (they are masked). Lane ℓ copies 16-byte chunks ℓ, ℓ + 32,
  // … of each row (a row is HD / 8 chunks), walking rows by pointer increments.
  auto stage_rows = [&](const uint16_t* cache, uint16_t* dst, int j0, int r_begin, int r_end) {
    static_assert(HD / 8 <= 32 || (HD / 8) % 32 == 0);
    const int row0 = min(j0 + r_begin, n_keys - 1);
    const uint16_t* src = cache + size_t(row0) * row_stride;
    uint16_t* d = dst + r_begin * RS;
    for (int r = r_begin; r < r_end; ++r, d += RS) {
#pragma unroll
      for (int ch = lane; ch < HD / 8; ch += 32) cp_async16(d + 8 * ch, src + 8 * ch);
      if (j0 + r + 1 < n_keys) src += row_stride;  // past the last key: stay on it
    }
    cp_async_commit();
  };
  // Rows of a stage before the newest key (the q/k kernel writes the newest one).
  auto stable_rows = [&](int j0) { return max(0, min(kStage, n_keys - 1 - j0)); };
  const int s_end = min(t_end * (kTile / kStage), (n_keys + kStage - 1) / kStage);
  int s = t_begin * (kTile / kStage) + warp;
  // Every key but the newest (which the q/k kernel before this one writes) is in the cache
  // already: the warp's first stage is requested before the wait, so its memory round trip
  // overlaps the previous kernels (at 4K context that is all of a warp's keys).
  if (s < s_end) {
    stage_rows(kcache, sk, s * kStage, 0, stable_rows(s * kStage));
    if (!ONE_BUF) stage_rows(vcache, sv, s * kStage, 0, stable_rows(s * kStage));
  }
  grid_dep_wait();
  grid_dep_release();
  if (p.halt && p.halt[so]) {
    cp_async_wait<0>();
    return;
  }

  // A fragments of Q (hi, lo) for every (32-dim block, half) and lane, built by the block.
  __shared__ uint4 s_qa[kBlocks * 2][32];
  for (int i = threadIdx.x; i < kBlocks * 2 * 32; i += blockDim.x) {
    const int bc = i >> 5, ln = i & 31, head = ln >> 2, tt = ln & 3;
    const int d0 = (bc >> 1) * 32 + 8 * tt + 4 * (bc & 1);
    float hi[4] = {0.f, 0.f, 0.f, 0.f}, lo[4] = {0.f, 0.f, 0.f, 0.f};
    if (head < G) {
      const float* qh = p.qg + so + size_t(g * G + head) * 2 * HD + d0;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float v = qh[e] * scale;
        hi[e] = bf16_bits_to_float(float_to_bf16_bits(v));
        lo[e] = v - hi[e];
      }
    }
    s_qa[bc][ln] = make_uint4(pack_bf16(hi[0], hi[1]), pack_bf16(lo[0], lo[1]),
                              pack_bf16(hi[2], hi[3]), pack_bf16(lo[2], lo[3]));
  }
  __syncthreads();

  float acc[kMt][4] = {};  // Oᵀ: [dims HD/8·gq + i (c0, c1), + kMt + i (c2, c3)] × heads 2t, 2t+1
  float m = -INFINITY, l = 0.f;  // head gq's running max and sum
  for (bool first = true; s < s_end; s += W, first = false) {
    const int j0 = s * kStage;
    // The first stage's newest-key rows, or a whole later stage: K then V, so that after
    // the wait below at most the last V group is in flight.
    if (!first) __syncwarp();                         // the previous stage's reads are done
    const int r_begin = first ? stable_rows(j0) : 0;  // the first stage: what is left of it
    stage_rows(kcache, sk, j0, r_begin, kStage);
    if constexpr (ONE_BUF) {
      cp_async_wait<0>();  // K is in
    } else {
      stage_rows(vcache, sv, j0, r_begin, kStage);
      cp_async_wait<1>();  // K is in
    }
    __syncwarp();
    float c[kStageNt][4] = {};
#pragma unroll 2
    for (int b = 0; b < kBlocks; ++b) {
      const uint4 a0 = s_qa[2 * b][lane], a1 = s_qa[2 * b + 1][lane];
#pragma unroll
      for (int nt = 0; nt < kStageNt; ++nt) {
        const uint4 kr = *reinterpret_cast<const uint4*>(sk + (nt * 8 + gq) * RS + 32 * b + 8 * t);
        mma_bf16(c[nt], a0.x, a0.y, a0.z, a0.w, kr.x, kr.y);
        mma_bf16(c[nt], a1.x, a1.y, a1.z, a1.w, kr.z, kr.w);
      }
    }
    // Head gq's scores of keys j0 + 8 nt + 2t (+1); past the last key: -inf.
    float sc[kStageNt][2], mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kStageNt; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = j0 + nt * 8 + 2 * t + e;
        sc[nt][e] = key < n_keys ? c[nt][e] + c[nt][e + 2] : -INFINITY;
        mx = fmaxf(mx, sc[nt][e]);
      }
    if constexpr (ONE_BUF) {
      __syncwarp();  // every lane's K reads are done: V takes the buffer
      stage_rows(vcache, sv, j0, 0, kStage);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);
    // A stage wholly past the last key leaves m at -inf; exp(-inf - -inf) would be NaN.
    const float corr = m_new == -INFINITY ? 1.f : expf(m - m_new);
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < kStageNt; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        sc[nt][e] = m_new == -INFINITY ? 0.f : expf(sc[nt][e] - m_new);  // 0 past the last key
        sum += sc[nt][e];
      }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    l = l * corr + sum;
    m = m_new;
    // This lane's output heads 2t, 2t + 1 take their corrections from lanes 8t and 8t + 4.
    const float corr_a = __shfl_sync(0xffffffffu, corr, 8 * t);
    const float corr_b = __shfl_sync(0xffffffffu, corr, 8 * t + 4);
#pragma unroll
    for (int i = 0; i < kMt; ++i) {
      acc[i][0] *= corr_a, acc[i][2] *= corr_a;
      acc[i][1] *= corr_b, acc[i][3] *= corr_b;
    }
    cp_async_wait<0>();  // V is in
    __syncwarp();
#pragma unroll
    for (int nt = 0; nt < kStageNt; ++nt) {
      const uint4* va = reinterpret_cast<const uint4*>(sv + (nt * 8 + 2 * t) * RS + (HD / 8) * gq);
      const uint4* vb =
          reinterpret_cast<const uint4*>(sv + (nt * 8 + 2 * t + 1) * RS + (HD / 8) * gq);
      uint32_t ra[kWords], rb[kWords];
#pragma unroll
      for (int w = 0; w < kWords; w += 4) {
        const uint4 x = va[w / 4], y = vb[w / 4];
        ra[w] = x.x, ra[w + 1] = x.y, ra[w + 2] = x.z, ra[w + 3] = x.w;
        rb[w] = y.x, rb[w + 1] = y.y, rb[w + 2] = y.z, rb[w + 3] = y.w;
      }
      const float p0 = sc[nt][0], p1 = sc[nt][1];
      const float h0 = bf16_bits_to_float(float_to_bf16_bits(p0));
      const float h1 = bf16_bits_to_float(float_to_bf16_bits(p1));
      const uint32_t b_hi = pack_bf16(h0, h1), b_lo = pack_bf16(p0 - h0, p1 - h1);
#pragma unroll
      for (int i = 0; i < kMt; ++i) {
        const uint32_t sel = (i & 1) ? 0x7632u : 0x5410u;  // the same half of both rows' words
        const uint32_t lo_dims = __byte_perm(ra[i / 2], rb[i / 2], sel);
        const uint32_t hi_dims = __byte_perm(ra[kMt / 2 + i / 2], rb[kMt / 2 + i / 2], sel);
        mma_bf16(acc[i], lo_dims, hi_dims, lo_dims, hi_dims, b_hi, b_lo);
      }
    }
  }

  // Merge the warps as attention_kernel does; head h's (m, l) sit in lanes 4h … 4h + 3. The
  // stage memory now holds the accumulators.
  __shared__ float s_ml[W][G][2];
  __syncthreads();  // every warp's last stage is read
  auto& s_acc = *reinterpret_cast<float(*)[W][G][kMaxHeadDim]>(smem_attn);
  if (t == 0 && gq < G) s_ml[warp][gq][0] = m, s_ml[warp][gq][1] = l;
#pragma unroll
  for (int i = 0; i < kMt; ++i) {
    const int d_lo = (HD / 8) * gq + i, d_hi = d_lo + kMt;
    if (2 * t < G) s_acc[warp][2 * t][d_lo] = acc[i][0], s_acc[warp][2 * t][d_hi] = acc[i][2];
    if (2 * t + 1 < G)
      s_acc[warp][2 * t + 1][d_lo] = acc[i][1], s_acc[warp][2 * t + 1][d_hi] = acc[i][3];
  }
  __syncthreads();
  merge_and_store<G, W>(p, g, split, n_split, s_ml, s_acc, so);
}

// Merges the per-range partials of every (KV head, group head) and applies the output gate.
// Grid: n_head_kv * group blocks; block: kCombineParts × hd threads — part q of each output dim
// sums every kCombineParts-th range (branch-free, so loads stay in flight), then the parts are
// added in shared memory.
constexpr int kCombineParts = 4;

// AttnParams: part_acc / part_ml → out [n_head * hd]; group = n_head / n_head_kv.
// Batched (grid y = slot): each slot with its own ranges; a slot of one range was written whole.
__global__ void attention_combine_kernel(const __grid_constant__ AttnParams p, int group) {
  grid_dep_wait();
  grid_dep_release();
  const int64_t so = int64_t(blockIdx.y) * p.batch.stride;
  if (p.halt && p.halt[so]) return;
  const int n_split =
      p.batch.slots > 1 ? splits_for_keys(int64_t(p.pos[so]) + 1, kMaxSplitsPerHead) : p.n_split;
  if (n_split == 1) return;
  __shared__ float s_mx[32], s_ls[kCombineParts][kMaxHeadDim], s_a[kCombineParts][kMaxHeadDim];
  const int g = blockIdx.x / group, h = blockIdx.x % group, hd = p.hd;
  const int hd_r = blockDim.x / kCombineParts, d = threadIdx.x % hd_r, q = threadIdx.x / hd_r;
  const float* ml = p.part_ml + so + (size_t(g) * n_split * group + h) * 2;  // range s at s·group·2
  // Max over ranges, by the whole block.
  float mx = -INFINITY;
  for (int s = threadIdx.x; s < n_split; s += blockDim.x) mx = fmaxf(mx, ml[size_t(s) * group * 2]);
  mx = warp_max(mx);
  if ((threadIdx.x & 31) == 0) s_mx[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) mx = fmaxf(mx, s_mx[w]);
  float ls = 0.f, a = 0.f;
  if (d < hd) {
#pragma unroll 8
    for (int s = q; s < n_split; s += kCombineParts) {
      const size_t slot = (size_t(g) * n_split + s) * group + h;
      const float f = expf(ml[size_t(s) * group * 2] - mx);  // 0 for empty ranges (-inf)
      ls = fmaf(ml[size_t(s) * group * 2 + 1], f, ls);
      a = fmaf(p.part_acc[so + slot * hd + d], f, a);
    }
  }
  s_ls[q][d] = ls;
  s_a[q][d] = a;
  __syncthreads();
  if (q != 0 || d >= hd) return;
  for (int k = 1; k < kCombineParts; ++k) ls += s_ls[k][d], a += s_a[k][d];
  const int head = g * group + h;
  const float gate = p.qg[so + size_t(head) * 2 * hd + hd + d];
  p.out[so + size_t(head) * hd + d] = a / ls * sigmoid(gate);
}

template <int G, int HD, int W, bool BATCHED, bool ONE_BUF = false>
Status launch_mma(const AttnParams& p, dim3 grid, int wide_max_split, cudaStream_t s) {
  constexpr size_t smem = attention_mma_smem<G, HD, W, ONE_BUF>();
  const auto kernel = attention_mma_kernel<G, HD, W, BATCHED, ONE_BUF>;
  // More than the default 48 KB of dynamic shared memory must be allowed explicitly.
  // Set on every launch (cheap), so it holds for whichever device is current.
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      e != cudaSuccess)
    return err("attention (mma): ", cudaGetErrorString(e));
  return launch("attention (mma)", kernel, grid, dim3(W * 32), smem, s, p, wide_max_split);
}

// 8 warps a block where the grid takes at most one block an SM (see kStage) and the device
// allows the 8 warps' stages (147 KB at head size 256: not on GPUs of 99 KB a block).
template <int G, int HD>
bool wide_fits(int64_t blocks) {
  return attention_wide_enabled() && blocks <= sm_count() &&
         attention_mma_smem<G, HD, 8>() <= size_t(smem_optin());
}

template <int G, int HD>
Status launch_mma_width(const AttnParams& p, dim3 grid, cudaStream_t s) {
  constexpr int kWide = 8;
  if (p.batch.slots > 1) {
    // Each slot at the width it takes alone: the wide launch for the slots whose own ranges fit
    // one block an SM, the narrow one for the rest (a launch whose slots are all of the other
    // width does nothing: its blocks return at once).
    int wide_max = 0;
    for (int n = 1; n <= int(grid.y); n *= 2)
      if (wide_fits<G, HD>(int64_t(grid.x) * n)) wide_max = n;
    grid.z = unsigned(p.batch.slots);
    // The wide blocks with K and V in one buffer: two an SM, so 4 slots at 4K take one wave,
    // not two (attention 0.469 -> 0.385 ms a step at 4 slots, 0.825 -> 0.640 at 8).
    if (wide_max > 0 && p.n_split_min <= wide_max)
      ORCHID_TRY((launch_mma<G, HD, kWide, true, true>(p, grid, wide_max, s)));
    if (int(grid.y) > wide_max)
      ORCHID_TRY((launch_mma<G, HD, kAttnWarps, true>(p, grid, wide_max, s)));
    return {};
  }
  if (wide_fits<G, HD>(int64_t(grid.x) * grid.y))
    return launch_mma<G, HD, kWide, false>(p, grid, 0, s);
  return launch_mma<G, HD, kAttnWarps, false>(p, grid, 0, s);
}

template <int G>
Status launch_scores(const AttnParams& p, cudaStream_t s) {
  const dim3 grid(p.n_head_kv, p.n_split);
  if (p.batch.slots > 1 && !(attention_mma_enabled() && (p.hd == 256 || p.hd == 128 || p.hd == 64)))
    return err("attention: a batch takes the tensor-core kernel only");
  if (attention_mma_enabled()) {
    if (p.hd == 256) return launch_mma_width<G, 256>(p, grid, s);
    if (p.hd == 128) return launch_mma_width<G, 128>(p, grid, s);
    if (p.hd == 64) return launch_mma_width<G, 64>(p, grid, s);
  }
  return launch("attention", attention_kernel<G>, grid, dim3(kAttnWarps * 32), 0, s, p);
}

template <int G>
Status launch_g(const AttnParams& p, cudaStream_t s) {
  ORCHID_TRY(launch_scores<G>(p, s));
  if (p.n_split == 1) return {};
  return launch("attention combine", attention_combine_kernel, dim3(p.n_head_kv * G, p.batch.slots),
                dim3((p.hd + 31) / 32 * 32 * kCombineParts), 0, s, p, G);
}

std::atomic<bool> g_attention_mma{true}, g_attention_wide{true};

}  // namespace

bool attention_mma_enabled() {
  return g_attention_mma.load(std::memory_order_relaxed);
}
void set_attention_mma_enabled(bool on) {
  g_attention_mma.store(on, std::memory_order_relaxed);
}
bool attention_wide_enabled() {
  return g_attention_wide.load(std::memory_order_relaxed);
}
void set_attention_wide_enabled(bool on) {
  g_attention_wide.store(on, std::memory_order_relaxed);
}

Status launch_attention_decode(const AttnParams& p, cudaStream_t s) {
  const int group = p.n_head / p.n_head_kv;
  if (p.n_split > 1 && (!p.part_acc || !p.part_ml))
    return err("attention: split-KV buffers missing");
  switch (group) {
    case 1:
      return launch_g<1>(p, s);
    case 2:
      return launch_g<2>(p, s);
    case 3:
      return launch_g<3>(p, s);
    case 4:
      return launch_g<4>(p, s);
    case 6:
      return launch_g<6>(p, s);
    case 8:
      return launch_g<8>(p, s);
    default:
      return err("attention: GQA group of ", group, " query heads is not supported");
  }
}

}  // namespace orchid::cuda
