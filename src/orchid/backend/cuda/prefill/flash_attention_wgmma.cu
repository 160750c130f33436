// Causal flash attention over a prefill chunk on Hopper's warpgroup MMA (sm_90a), with the
// contract of kernel_flash_attention_prefill (prefill/flash_attention.cu: GQA-packed rows, the
// earlier chunks' keys through pos0, the output gate, fp16 hi + lo): the tensor cores read Q, K and
// V straight from swizzled shared memory instead of every warp re-reading them through ldmatrix.
#include <cuda_fp16.h>

#include <cmath>

#include "orchid/backend/cuda/common/mma_sync.cuh"
#include "orchid/backend/cuda/common/wgmma.cuh"
#include "orchid/backend/cuda/prefill/flash_attention_check.h"
#include "orchid/backend/cuda/prefill/flash_attention_wgmma_tile.h"
#include "orchid/backend/cuda/prefill/online_softmax.cuh"

namespace orchid::cuda {
namespace {

// The design, in the shapes of HD 256 (AttnWgmmaTile holds the layouts):
// - A CTA takes 128 GQA-packed query rows of one KV head g (row r: token r / G, query head
//   g · G + r % G, as in the mma.sync kernel) and every key they attend, in tiles of 64 keys;
//   384 threads in three warpgroups, one CTA an SM (193 KB of shared memory).
// - Warpgroup 0, the producer, copies K and V tiles from the cache into kStages shared stages
//   (2 at HD 256) with cp.async, swizzled on the way; each thread's copies of a tile arrive on the
//   tile's "full" mbarrier when they land (cp.async.mbarrier.arrive), and a stage is refilled once
//   every consumer warp has arrived on its "empty" mbarrier. K and V have barriers of their own:
//   a K tile is free as soon as S is computed, a tile before its V.
// - Warpgroups 1 and 2, the consumers, own 64 query rows each. Q is converted to bf16 into shared
//   memory once. S = Q·Kᵀ (64 × 64 fp32: 32 registers a thread) is 16 wgmma m64n64k16 reading Q
//   and K from shared memory; the online softmax runs in registers with the mma.sync kernel's
//   arithmetic; P goes to bf16 straight from S's registers (the accumulator layout is the A
//   layout: wgmma_acc_for_a) and is the register A operand of O += P·V, 4 wgmma m64n256k16 that
//   read V MN-major (the cache rows as stored: keys × dims). O (64 × 256 fp32) is 128 registers.
// - Per tile a consumer issues S_{j+1} = Q·K_{j+1}ᵀ, then O += P_j·V_j, back to back; it waits
//   for S alone and runs the softmax while its P_j·V_j is still on the tensor cores (O's
//   rescaling and the new P wait for it), and two named barriers hand the issue turn back and
//   forth between the consumers (pingpong), so that the other consumer's products are queued
//   behind its own: each softmax runs under a product. Left to themselves (each waiting for both
//   products, then running its softmax: session 7's schedule) the two consumers fall into step,
//   both waiting on the same tiles, and the tensor cores idle through their softmaxes together.
// - Registers: the launch bound caps 384 threads at 168 a thread; setmaxnreg moves them between
//   the warpgroups, the producer keeping 40 and the consumers taking 232 (40 · 128 + 232 · 256 =
//   64,512 of the SM's 65,536).
// Precision as the mma.sync kernel's: q and P rounded to bf16 for the products, fp32
// accumulation, the row sum l of the fp32 P, the output rounded to fp16 (+ its remainder).

// The CTA's rows and keys.
struct CtaRows {
  int T, pos0, G, g, m0;  // m0: the CTA's first packed row
  int kv_end, n_tiles;    // keys [0, kv_end) in tiles of kKeys
  // Query row r of the CTA attends keys [0, limit(r)]; rows past the chunk's end (zero queries,
  // never stored) borrow the last token's range.
  __device__ __forceinline__ int limit(int r) const { return pos0 + min(T - 1, (m0 + r) / G); }
};

// mbarrier `kind` (0: K full, 1: V full, 2: K empty, 3: V empty) of stage s.
template <class L>
__device__ __forceinline__ uint32_t stage_bar(uint32_t bars, int kind, int s) {
  return bars + uint32_t(kind * L::kStages + s) * 8;
}

// Warpgroup 0: K and V of tile j into stage j % kStages, for every tile (thread t's chunks:
// AttnWgmmaTile::copy_row / copy_dim). Keys past kv_end are zero-filled (a masked P = 0 then never
// meets an uninitialised NaN) from a clamped, valid address.
template <class L>
__device__ __forceinline__ void produce(const AttnPrefillParams& p, const CtaRows& cta, char* smem,
                                        uint32_t bars, int t) {
  constexpr int HD = L::kHd, S = L::kStages, BN = L::kKeys;
  const size_t stride = size_t(p.n_head_kv) * HD;  // elements between cache rows
  const int d = L::copy_dim(t);
  const uint16_t* const kc = p.kc + size_t(cta.g) * HD + d;
  const uint16_t* const vc = p.vc + size_t(cta.g) * HD + d;
  auto copy = [&](const uint16_t* src, char* dst, int j) {
    if ((j + 1) * BN <= cta.kv_end) {  // every key of the tile is in range
      const uint16_t* rows = src + size_t(j) * BN * stride;
#pragma unroll
      for (int i = 0; i < L::kPasses; ++i)
        cp_async16(dst + L::elem(BN, L::copy_row(t, i), d),
                   rows + size_t(L::copy_row(t, i)) * stride);
    } else {
#pragma unroll
      for (int i = 0; i < L::kPasses; ++i) {
        const int key = j * BN + L::copy_row(t, i);
        cp_async16(dst + L::elem(BN, L::copy_row(t, i), d),
                   src + size_t(min(key, cta.kv_end - 1)) * stride, key < cta.kv_end ? 16 : 0);
      }
    }
  };
  for (int j = 0; j < cta.n_tiles; ++j) {
    const int s = j % S, use = j / S;
    if (use > 0) mbar_wait(stage_bar<L>(bars, 2, s), (use - 1) & 1);
    copy(kc, smem + L::k_tile(s), j);
    cp_async_mbar_arrive(stage_bar<L>(bars, 0, s));
    if (use > 0) mbar_wait(stage_bar<L>(bars, 3, s), (use - 1) & 1);
    copy(vc, smem + L::v_tile(s), j);
    cp_async_mbar_arrive(stage_bar<L>(bars, 1, s));
  }
  cp_async_wait_all();
}

// Consumer warpgroup w (0, 1; thread ct of it) over the CTA's rows [64w, 64w + 64).
template <class L>
__device__ __forceinline__ void consume(const AttnPrefillParams& p, const CtaRows& cta, char* smem,
                                        uint32_t base, uint32_t bars, int w, int ct) {
  constexpr int HD = L::kHd, S = L::kStages, BN = L::kKeys;
  const int lane = ct & 31, warp = ct >> 5;

  // Q rows to bf16 (zeros past the chunk's last token) while the first tiles are in flight.
  char* const q = smem + L::q_tile(w);
  for (int c = ct; c < 64 * HD / 4; c += 128) {
    const int r = c / (HD / 4), d = c % (HD / 4) * 4, mr = cta.m0 + 64 * w + r, t = mr / cta.G;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (t < cta.T)
      x = *reinterpret_cast<const float4*>(
          p.qg + (size_t(t) * p.n_head + cta.g * cta.G + mr % cta.G) * 2 * HD + d);
    *reinterpret_cast<uint2*>(q + L::elem(64, r, d)) =
        make_uint2(pack_bf16(x.x, x.y), pack_bf16(x.z, x.w));
  }
  fence_proxy_async();             // the tensor cores read what these ordinary stores wrote
  named_barrier_sync(1 + w, 128);  // named barriers 1 and 2; 3 and 4 are the turns below
  const uint64_t qd = wgmma_desc_k(base + L::q_tile(w));

  // This thread's two rows (fragment registers e < 2 and e ≥ 2, common/wgmma_layout.h) and the
  // first row of its warp, whose range is the warp's shortest.
  const int row0 = 64 * w + wgmma_frag_row(ct, 0);
  const int lim[2] = {cta.limit(row0), cta.limit(row0 + 8)};
  const int warp_lo = cta.limit(64 * w + 16 * warp);
  const float scale_log2 = 1.4426950408889634f / sqrtf(float(HD));  // softmax in base 2

  float o[HD / 2], s[BN / 2];  // accumulators: O [64, HD] and S [64, BN] of the warpgroup
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) o[i] = 0.f;
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) s[i] = 0.f;  // the first product ignores it, but reads it
  uint32_t pf[BN / 16][4];                      // P as the A operand, one set per 16 keys
  // Running max (raw q·k units) and this lane's part of the row sum (online_softmax_step).
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  // S = Q · K(stage)ᵀ, committed as one group.
  auto issue_s = [&](int stage) {
    const uint64_t kd = wgmma_desc_k(base + L::k_tile(stage));
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk)
      wgmma_m64n64k16_bf16(s, qd + (L::q_step(kk) >> 4), kd + (L::k_step(kk) >> 4), kk > 0);
    wgmma_commit();
  };
  // O += P · V(stage), committed as one group.
  auto issue_pv = [&](int stage) {
    const uint64_t vd = wgmma_desc_mn(base + L::v_tile(stage), L::kVLbo);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) wgmma_rs_mn_bf16<HD>(o, pf[kk], vd + (L::v_step(kk) >> 4));
    wgmma_commit();
  };
  // Waits until tile j's K (kind 0) or V (kind 1) has landed in its stage, and orders the copies
  // the barrier made visible before the tensor cores read them.
  auto wait_full = [&](int kind, int j) {
    mbar_wait(stage_bar<L>(bars, kind, j % S), (j / S) & 1);
    fence_proxy_async();
  };
  // The warp's last read of tile j's K (kind 2) or V (kind 3) is behind it: one arrival per warp.
  auto release = [&](int kind, int j) {
    if (lane == 0) mbar_arrive(stage_bar<L>(bars, kind, j % S));
  };
  // Tile j's causal mask and online-softmax step on S in place (S becomes the fp32 P), the row
  // sums; corr: O's rescaling by the change of the running max.
  auto softmax = [&](int j, float(&corr)[2]) {
    const int k0 = j * BN;
    if (k0 + BN - 1 > warp_lo) {  // only tiles that reach past the warp's first row's last key
#pragma unroll
      for (int i = 0; i < BN / 2; ++i)
        if (k0 + wgmma_acc_col(ct, i) > lim[(i >> 1) & 1]) s[i] = -INFINITY;
    }
    // This lane's row maxima, then the step (the quad's maxima, corrections).
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
    float neg_m[2];
    online_softmax_step(mx, m, l, scale_log2, corr, neg_m);
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) {
      s[i] = exp2f(fmaf(s[i], scale_log2, neg_m[(i >> 1) & 1]));
      l[(i >> 1) & 1] += s[i];
    }
  };
  // P to bf16 (the A operand) and O rescaled: after the last product that reads pf or adds to O.
  auto to_p = [&](const float(&corr)[2]) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        pf[kk][i] = pack_bf16(s[wgmma_acc_for_a(kk, i)], s[wgmma_acc_for_a(kk, i) + 1]);
    // Once the running maxima settle most tiles leave them unchanged: skip the HD / 2
    // multiplies a lane would spend rescaling O by 1.
    if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
      for (int i = 0; i < HD / 2; ++i) o[i] *= corr[(i >> 1) & 1];
    }
  };

  const int n = cta.n_tiles;
  // Round b = 0 … n issues S_b (b < n) and then O += P_{b-1} · V_{b-1} (b > 0). The turn
  // barriers order the two consumers' issues 0:0, 1:0, 0:1, 1:1, 0:2, …: consumer w waits on
  // barrier kTurnBarrier + w before it issues (256 threads: its own 128 waiting, the other's
  // 128 arriving) and arrives on the other's once it has issued. Consumer 0 starts without
  // waiting and consumer 1 skips its last arrival, so each barrier's waits and arrivals pair
  // up (consumer 0's: n and n, consumer 1's: n + 1 and n + 1) and none is left half-done at
  // exit. The K/V waits come before the turn: the producer depends on the releases only, which
  // each consumer makes in rounds before the one it waits in, so holding the turn never
  // blocks them (perf-notes, "Session 8"). The first and last rounds are peeled: with the
  // products issued and waited for under branches, ptxas serialises every wgmma (C7518).
  constexpr int kTurnBarrier = 3;  // consumer w's turn: named barrier 3 + w
  auto take_turn = [&] { named_barrier_sync(kTurnBarrier + w, 256); };
  auto pass_turn = [&] { named_barrier_arrive(kTurnBarrier + 1 - w, 256); };
  // The last product reading pf and adding to O (P_j · V_j) is done: V_j's stage is free.
  auto finish_pv = [&](int j) {
    wgmma_wait<0>();
    fence_operands(o);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) fence_operands(pf[kk]);  // read until the wait
    release(3, j);
  };
  float corr[2];
  wait_full(0, 0);
  if (w == 1) take_turn();
  issue_s(0);
  pass_turn();
  wgmma_wait<0>();
  fence_operands(s);
  release(2, 0);
  softmax(0, corr);
  to_p(corr);
  for (int b = 1; b < n; ++b) {
    wait_full(0, b);
    wait_full(1, b - 1);
    take_turn();
    issue_s(b % S);
    issue_pv((b - 1) % S);
    pass_turn();
    wgmma_wait<1>();  // S_b, the older group, is done; P_{b-1} · V_{b-1} may still run
    fence_operands(s);
    release(2, b);
    softmax(b, corr);
    finish_pv(b - 1);
    to_p(corr);
  }
  wait_full(1, n - 1);
  take_turn();
  issue_pv((n - 1) % S);
  if (w == 0) pass_turn();
  finish_pv(n - 1);

  // out = O / l ⊙ sigmoid(gate), fp16 (and its remainder when asked for).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int mr = cta.m0 + row0 + 8 * r, t = mr / cta.G;
    if (t >= cta.T) continue;
    const size_t row = size_t(t) * p.n_head + cta.g * cta.G + mr % cta.G;
    const float inv_l = 1.f / l[r];
    const float* gate = p.qg + row * 2 * HD + HD;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      const int d = wgmma_acc_col(ct, 4 * j);
      const float2 gt = *reinterpret_cast<const float2*>(gate + d);
      store_f16x2_split(o[4 * j + 2 * r] * inv_l * sigmoid(gt.x),
                        o[4 * j + 2 * r + 1] * inv_l * sigmoid(gt.y), p.out, p.out_lo,
                        int64_t(row * HD + d));
    }
  }
}

// AttnPrefillParams; HD = hd (64, 128, 256), G = n_head / n_head_kv. Grid (n_head_kv,
// ⌈T · G / L::kRows⌉): a block per 128 GQA-packed query rows of one KV head (the design above);
// dynamic shared memory L::kSmem. sm_90a code only.
template <int HD>
__global__ void __launch_bounds__(AttnWgmmaTile<HD>::kThreads, 1)
    kernel_flash_attention_prefill_wgmma(const __grid_constant__ AttnPrefillParams p) {
  using L = AttnWgmmaTile<HD>;
  if constexpr (!kHaveWgmma) {
    __trap();  // only the sm_90a build has this kernel: attention_prefill_wgmma_supported
  } else {
    extern __shared__ __align__(1024) char smem_wgmma[];
    // The swizzle atoms must start on 1024 bytes: align the base (kSmem holds the slack).
    const uint32_t raw = smem_addr(smem_wgmma), base = (raw + 1023u) & ~1023u;
    char* const smem = smem_wgmma + (base - raw);
    const uint32_t bars = base + L::kBarrierOffset;
    CtaRows cta;
    cta.T = p.T, cta.pos0 = p.pos0, cta.G = p.n_head / p.n_head_kv, cta.g = blockIdx.x;
    // The last row blocks (the latest tokens: the most keys) of every KV head start first, so
    // that the grid's tail is short blocks.
    cta.m0 = (gridDim.y - 1 - blockIdx.y) * L::kRows;
    cta.kv_end = cta.limit(L::kRows - 1) + 1;
    cta.n_tiles = (cta.kv_end + L::kKeys - 1) / L::kKeys;
    if (threadIdx.x == 0) {
      for (int s = 0; s < L::kStages; ++s) {
        mbar_init(stage_bar<L>(bars, 0, s), 128);  // one arrival per producer thread
        mbar_init(stage_bar<L>(bars, 1, s), 128);
        mbar_init(stage_bar<L>(bars, 2, s), 4 * L::kConsumers);  // one per consumer warp
        mbar_init(stage_bar<L>(bars, 3, s), 4 * L::kConsumers);
      }
    }
    __syncthreads();
    if (threadIdx.x < 128) {
      setmaxnreg_dec<L::kProducerRegs>();
      produce<L>(p, cta, smem, bars, threadIdx.x);
    } else {
      setmaxnreg_inc<L::kConsumerRegs>();
      const int w = (threadIdx.x - 128) / 128;
      consume<L>(p, cta, smem, base, bars, w, threadIdx.x - 128 - 128 * w);
    }
  }
}

template <int HD>
Status launch_wgmma(const AttnPrefillParams& p, cudaStream_t s) {
  using L = AttnWgmmaTile<HD>;
  const auto kernel = kernel_flash_attention_prefill_wgmma<HD>;
  // More than 48 KB of dynamic shared memory must be allowed explicitly; set on every launch
  // (cheap), so it holds for whichever device is current.
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::kSmem));
      e != cudaSuccess)
    return err("attention prefill (wgmma): ", cudaGetErrorString(e));
  const int rows = p.T * (p.n_head / p.n_head_kv);
  const dim3 grid(p.n_head_kv, (rows + L::kRows - 1) / L::kRows);
  kernel<<<grid, L::kThreads, L::kSmem, s>>>(p);
  return last_launch("attention prefill (wgmma)");
}

}  // namespace

bool attention_prefill_wgmma_supported(int hd) {
  // The largest tile's shared memory (hd 256).
  static const bool device_ok =
      sm90a_kernel_runs(reinterpret_cast<const void*>(kernel_flash_attention_prefill_wgmma<256>),
                        AttnWgmmaTile<256>::kSmem);
  return device_ok && (hd == 64 || hd == 128 || hd == 256);
}

Status launch_attention_prefill_wgmma(const AttnPrefillParams& p, cudaStream_t s) {
  constexpr const char* what = "attention prefill (wgmma)";
  ORCHID_TRY(check_attn_output(p, what));
  if (!attention_prefill_wgmma_supported(p.hd))
    return err(what, ": head_dim ", p.hd,
               " on this device (expected 64, 128 or 256 on an sm_90a device)");
  switch (p.hd) {
    case 64:
      return launch_wgmma<64>(p, s);
    case 128:
      return launch_wgmma<128>(p, s);
    default:
      return launch_wgmma<256>(p, s);
  }
}

}  // namespace orchid::cuda
