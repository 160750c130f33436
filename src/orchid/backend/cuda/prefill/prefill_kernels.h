// The prefill kernels (a chunk of T prompt tokens per launch) as seen from the host. Activations
// between layers are fp32 [T, width] rows; the operands the tensor cores read are fp16 (10-bit
// mantissa: 8× finer than bf16). The exact path (ORCHID_EXACT_PREFILL, the default) carries each
// operand as two fp16 buffers, hi = fp16(x) and lo = fp16(x − hi): hi + lo is x within
// 2^-22 |x| + 2^-25, so the projections are as exact as fp32 sums (prefill/gemm_tile.cuh), as the
// decode path's are; the fp16 path reads hi alone (~2^-12 per operand). The values are normed or
// gated, far inside fp16's range (|x| < 65,504); a producer saturates hi there rather than write
// inf. Every producer of an fp16 operand takes a nullable lo output beside it. Plain C++ (no CUDA
// syntax) so that g++ can include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "orchid/backend/cuda/common/kernels.h"

namespace orchid::cuda {

// ---- Dense projections: C[M, N] (+)= A[M, K] · Wᵀ, W = DevMatrix [N, K] -----------------------

struct GemmParams {
  DevMatrix w;                  // [N, K]: q4 / q8 dequantised tile by tile in shared memory; bf16
  const uint16_t* a = nullptr;  // [M, lda] fp16 bits
  // [M, lda] fp16 x − a (16-byte aligned): set, the exact path (q4 / q8 groups of 32 or more;
  // the dequantisation ablation does not apply), null the fp16 one.
  const uint16_t* a_lo = nullptr;
  // [M, 2 · group_sums_half(K)] A's group sums (launch_group_sums of a and a_lo), or null: with
  // them the q4 GEMMs in groups of 64 take the scaled codes (ws_tiles_supported).
  const uint16_t* a_sums = nullptr;
  int lda = 0;                 // elements; a multiple of 8
  int m = 0;                   // rows (tokens)
  float* c = nullptr;          // [M, ldc] fp32
  int ldc = 0;                 // elements
  const float* add = nullptr;  // optional [M, ldc] added to the product (may equal c)
  // W's rows in pairs (N even, no add): C[:, j] = product columns 2j + 2j + 1 (a q8 matrix as its
  // two q4 halves: launch_split_q8).
  bool pair_sum = false;
};
Status launch_gemm(const GemmParams& p, cudaStream_t s);
// The products of one A (the same a, a_lo, a_sums, lda, m and K) with up to kMaxGemmGroup
// matrices: one launch of the warp-specialised tiles walking all their tiles when every one is q4
// in groups of 64 that those tiles take (exact, or with A's sums), so that no product's small
// column count or last wave idles the GPU alone; otherwise launch_gemm for each in turn.
constexpr int kMaxGemmGroup = 4;
Status launch_gemm_group(std::span<const GemmParams> ps, cudaStream_t s);
// q [N, K] q8 in groups of 16 or more → q4 [2N, K] (w_out: 2N · K / 2 bytes, 16-byte aligned;
// sb_out: 2N · K / group words) whose row pairs sum to q's rows: rows 2n the codes' high nibbles
// with scale 16 s and bias b, 2n + 1 the low ones with scale s and bias 0. Exact (the same
// weights); for the q4-only warp-specialised GEMM with pair_sum.
Status launch_split_q8(const DevMatrix& q, void* w_out, uint32_t* sb_out, cudaStream_t s);

// Whether the q4 / q8 tiles are dequantised inside the GEMM (default) or the whole matrix is
// first dequantised to an fp16 buffer that a plain GEMM then reads (the ablation; the buffer is
// the largest matrix's size, held by the backend). Process-wide; the backend sets it.
bool gemm_fused_dequant_enabled();
void set_gemm_fused_dequant_enabled(bool on);
// Whether this device runs the warp-specialised Hopper tiles (prefill/gemm_ws.cuh: a producer
// warpgroup copies the operands, two consumer warpgroups multiply): an sm_90a device. Where it
// does they take every q4 GEMM in groups of 64 of the exact path (dense, and the experts' 128-row
// tiles; the fold) and every one whose launch brings A's group sums (the scaled codes: W as the
// fp16 values s·(q − 8), the biases as extra k-steps against the sums, no per-group fold).
bool ws_tiles_supported();
// Whether a launch of m rows whose products have tiles256 column tiles of 256 in all fills the GPU
// on the scaled codes' 128 × 256 tiles (a tile an SM at least). The prefill gives smaller
// launches no group sums, so they keep the fold's 128 × 128 tiles, twice as many (H200, 512
// tokens: the out-projections' 32 scaled tiles ran at 55 TFLOP/s).
bool gemm_scaled_fills(int64_t m, int64_t tiles256);
// Columns of the scaled codes' tiles, and the tiles of a matrix of `rows` rows (its products).
constexpr int kScaledTileCols = 256;
constexpr int64_t scaled_col_tiles(int rows) {
  return (int64_t(rows) + kScaledTileCols - 1) / kScaledTileCols;
}
// The scaled codes' power of two E for a q4 matrix whose largest max(8|s|, |b + 8s|) over its
// groups is `magnitude`: the largest E (within ±30) with 64 · magnitude · 2^E ≤ 65,504, so that
// the bias columns fit fp16; then s·(q − 8)·2^E is exact for every s ≥ 2^(-17-E). 0 for none.
int scaled_code_exp(float magnitude);
// m.code_exp from m's (scale, bias) words (q4; other formats: 0), read back synchronously.
Status set_scaled_code_exp(DevMatrix& m, cudaStream_t s);
// The group sums of an fp16 operand A [rows, k] (k a multiple of 64; G = k / 64 groups) for the
// scaled codes: each row of `sums` is two blocks of group_sums_half(k) fp16 values, hi =
// [R_hi(0 … G−1) | R_hi(0 … G−1) | 0 …] and lo = [R_lo(0 … G−1) | 0 …], where R_g = Σ_{k∈g} (hi +
// lo) / 64 in fp32 (lo may be null: hi alone) and R_hi = fp16(R_g), R_lo = fp16(R_g − R_hi). Read
// against a B row [b'_hi(g) | b'_lo(g)] the two passes add Σ_g R_g · b'_g to within
// 2^-22 · |R_g| + 2^-25 (R_lo subnormal below 2^-3) of each term.
constexpr int group_sums_half(int k) {
  return (2 * (k / 64) + 63) / 64 * 64;
}
Status launch_group_sums(const uint16_t* hi, const uint16_t* lo, int rows, int k, int lda,
                         uint16_t* sums, cudaStream_t s);
// Blocks of a warp-specialised launch of n_work tiles: one an SM (at most one a tile), each
// walking the launch's tiles, its producer copying the next tile's first k-steps while the
// consumers store the last one (prefill/gemm_ws.cuh's ws_persistent).
int ws_grid(int64_t n_work);
// w [N, K] dequantised into out [N, K] fp16 (the ablation's first half).
Status launch_dequant_f16(const DevMatrix& w, uint16_t* out, cudaStream_t s);
// The ablation's fp16 buffer ([elems], at least the largest q4 / q8 matrix's rows · cols), used
// by launch_gemm with the fused dequantisation off; the backend sets it (null: none, and such a
// launch fails). Launches that use it must be ordered (one stream).
void set_gemm_dequant_scratch(uint16_t* buf, int64_t elems);

// ---- Row-wise helpers -------------------------------------------------------------------------

// out[t, :] = fp16(x[t, :] · rsqrt(mean(x[t, :]²) + eps) · w), one block per row; out_lo (may be
// null) the remainder. With dot_out, also dot_out[t · dot_ld] = x̂[t, :] · dot_w[0, :] in fp32
// (as rsqrt(…) · Σ x · w · dot_w, summed beside Σ x²: the MoE's shared-expert gate, one row, which
// as a GEMM would take a whole 128-column tile and a launch).
Status launch_rms_norm_rows_f16(const float* x, const float* w, float eps, int rows, int n,
                                uint16_t* out, uint16_t* out_lo, cudaStream_t s,
                                const DevMatrix* dot_w = nullptr, float* dot_out = nullptr,
                                int dot_ld = 0);
// h[t, :] = dequantised row tokens[t] of the embedding, t < T.
Status launch_embed_rows(const DevMatrix& embd, const int* tokens, int T, float* h, int n_embd,
                         cudaStream_t s);

// ---- MoE over a chunk -------------------------------------------------------------------------

// logits[t, :] = [router; shared_gate] · x̂_t with x̂_t = h_t · rsqrt(mean(h_t²) + eps) · norm, all
// in fp32 (prefill/router.cu says why not on the tensor cores). logits [T, router.rows + 1].
Status launch_router_logits_f32(const float* h, const float* norm, float eps, int T, int n_embd,
                                const DevMatrix& router, const DevMatrix& shared_gate,
                                float* logits, cudaStream_t s);

// The routing of T tokens sorted by expert. "Pairs" are (token, slot) assignments: slot < top_k
// a routed expert, slot top_k the shared expert (stacked as expert n_expert). Sorted by expert,
// then by token, so every run is deterministic.
struct MoeRouting {
  int T = 0, n_expert = 0, top_k = 0;  // pairs = T · (top_k + 1)
  // false: the shared expert is kept apart (its own dense GEMMs); its pairs are left out of the
  // sorted order and the tile map.
  bool shared_stacked = true;
  const float* logits = nullptr;  // [T, n_expert + 1]: router logits, then the shared gate
  int* pair_token = nullptr;      // [pairs] in sorted order
  int* pair_slot = nullptr;       // [pairs]
  float* pair_w = nullptr;        // [pairs] routing weight (softmax over the top_k,
                                  // renormalised) or the shared expert's sigmoid gate
  int* sel = nullptr;             // [T, top_k + 1] scratch: stacked expert per slot
  float* sel_w = nullptr;         // [T, top_k + 1] scratch
  int* counts = nullptr;          // [n_expert + 1] scratch: pairs per stacked expert
  int* offsets = nullptr;         // [n_expert + 1] scratch: each expert's first sorted pair
  // Tiles of at most tile_rows consecutive sorted pairs of one expert: 16, 32, 64 or 128 (the
  // expert GEMMs' variants; 128 pays once experts average a few hundred rows, 16 / 32 for few).
  int tile_rows = 64;
  int max_tiles = 0;           // ≥ T · (top_k + 1) / tile_rows + n_expert + 1
  int* n_tiles = nullptr;      // device scalar
  int* tile_expert = nullptr;  // [max_tiles]
  int* tile_begin = nullptr;   // [max_tiles] first sorted pair
  int* tile_end = nullptr;     // [max_tiles] one past the last
};
// Top-k per token, then counting by expert, offsets, the sorted pairs and the tile map: all on
// the device, no host synchronisation.
Status launch_moe_route_sort(const MoeRouting& r, cudaStream_t s);

// x_lo / act_lo set: the exact path (the GEMM reads the pair; gate/up also writes act's remainder
// into act_lo: both or neither there).
struct ExpertGateUpParams {
  DevMatrix gate, up;  // stacked [(n_expert + 1) · n_ff, K]
  int n_ff = 0;
  const uint16_t* x = nullptr;       // [T, K] fp16 normed hidden
  const uint16_t* x_lo = nullptr;    // [T, K] fp16 remainder, or null
  const uint16_t* x_sums = nullptr;  // [T, 2 · group_sums_half(K)] x's group sums, or null
  const MoeRouting* r = nullptr;     // host copy of the routing's pointers
  uint16_t* act = nullptr;           // [pairs, n_ff] fp16 silu(gate) ⊙ up per sorted pair
  uint16_t* act_lo = nullptr;        // [pairs, n_ff] its remainder, or null
};
struct ExpertDownParams {
  DevMatrix down;  // stacked [(n_expert + 1) · n_embd, n_ff]
  int n_embd = 0, n_ff = 0;
  const uint16_t* act = nullptr;       // [pairs, n_ff]
  const uint16_t* act_lo = nullptr;    // [pairs, n_ff] remainder, or null
  const uint16_t* act_sums = nullptr;  // [pairs, 2 · group_sums_half(n_ff)] act's sums, or null
  const MoeRouting* r = nullptr;
  float* slot_out = nullptr;  // [T, top_k + 1, n_embd]: w · down(act) of each (token, slot)
};
Status launch_expert_gate_up(const ExpertGateUpParams& p, cudaStream_t s);
Status launch_expert_down(const ExpertDownParams& p, cudaStream_t s);
// A shared expert kept apart (other shape than the routed ones) runs as dense GEMMs over all T
// tokens: act = fp16(silu(gate) · up) ([T, n] each), and its down rows (written into slot_out's
// shared slot, rows ldy apart) scaled by sigmoid of the shared gate's logit (logit[t · ld]);
// act_lo (may be null) the remainder.
Status launch_silu_mul_rows_f16(const float* gate, const float* up, int T, int n, uint16_t* act,
                                uint16_t* act_lo, cudaStream_t s);
Status launch_scale_rows_sigmoid(float* y, int64_t ldy, int T, int n, const float* logit, int ld,
                                 cudaStream_t s);
// h[t] += Σ_slot slot_out[t, slot] in slot order (deterministic).
Status launch_moe_combine(const float* slot_out, int T, int n_slot, int n_embd, float* h,
                          cudaStream_t s);

// ---- Gated attention over a chunk -------------------------------------------------------------

struct AttnPrefillParams {
  float* qg = nullptr;              // [T, n_head, 2 · hd]: query | gate; q normed + roped in place
  const float* k = nullptr;         // [T, n_head_kv · hd] (before norm and RoPE)
  const float* v = nullptr;         // [T, n_head_kv · hd]
  const float* q_norm = nullptr;    // [hd]
  const float* k_norm = nullptr;    // [hd]
  const float* inv_freq = nullptr;  // [n_rot / 2]
  float eps = 1e-6f;
  int n_head = 0, n_head_kv = 0, hd = 0, n_rot = 0;
  uint16_t* kc = nullptr;      // [capacity, n_head_kv, hd] bf16, post-RoPE; rows pos0 … pos0+T-1
  uint16_t* vc = nullptr;      // written by the norm launch
  int pos0 = 0, T = 0;         // the chunk's first position and length
  uint16_t* out = nullptr;     // [T, n_head · hd] fp16: attention ⊙ sigmoid(gate)
  uint16_t* out_lo = nullptr;  // [T, n_head · hd] fp16 remainder, or null
};
// q/k RMSNorm + partial RoPE for every token of the chunk, K and V into the cache.
Status launch_qk_norm_rope_kv_prefill(const AttnPrefillParams& p, cudaStream_t s);
// Causal flash attention of the chunk's queries over cache rows [0, pos0 + T): tiles of keys
// with an online softmax, GQA-aware (one K/V tile serves the group's heads); the score matrix
// never leaves the chip.
Status launch_attention_prefill(const AttnPrefillParams& p, cudaStream_t s);
// The same attention on Hopper's warpgroup MMA (prefill/flash_attention_wgmma.cu): the same
// contract and precision (q and P rounded to bf16, fp32 sums), for head_dim 64, 128 and 256 on a
// device that runs the sm_90a build — attention_prefill_wgmma_supported(hd) says whether it does.
// Its two consumer warpgroups run in pingpong: named barriers hand the tensor cores from one to
// the other, so that each one's softmax runs under the other's products.
bool attention_prefill_wgmma_supported(int hd);
Status launch_attention_prefill_wgmma(const AttnPrefillParams& p, cudaStream_t s);
// The ablation: scores materialised in `scores` ([n_head, T, pos0 + T] fp32), softmax, then P·V.
Status launch_attention_prefill_naive(const AttnPrefillParams& p, float* scores, cudaStream_t s);

// ---- Gated DeltaNet over a chunk ----------------------------------------------------------------

// The delta-rule scan's two forms: token by token with the state in registers (the sequential
// scan), or in chunks of 64 tokens on the tensor cores (the WY form of spec §6.7: parallel work per
// chunk, then one dependent step per chunk instead of per token). The same arithmetic up to
// rounding: the tests hold both to 1e-4 rel. L2 of a double reference.
enum class GdnScanForm : uint8_t { sequential, chunked };

struct GdnPrefillParams {
  const float* qkv = nullptr;      // [T, conv_dim] raw in_proj_qkv output
  const float* z = nullptr;        // [T, hv · dv]
  const float* b = nullptr;        // [T, hv]
  const float* a = nullptr;        // [T, hv]
  const float* conv_w = nullptr;   // [conv_dim, K]: tap K-1 multiplies the current token
  float* conv_ring = nullptr;      // [conv_dim, K]: raw inputs, slot p % K holds position p
  float* S = nullptr;              // [hv, dk, dv] recurrent state, updated through the chunk
  const float* A_log = nullptr;    // [hv]
  const float* dt_bias = nullptr;  // [hv]
  const float* norm = nullptr;     // [dv] gated RMSNorm weight
  int hk = 0, hv = 0, dk = 0, dv = 0, K = 0;
  float eps = 1e-6f;
  int pos0 = 0, T = 0;
  // Scratch: [T, conv_dim] conv + SiLU output, q and k L2-normed (q also · 1/√dk) in place;
  // [T, hv] β and decay; [T, hv · dv] the raw (pre-norm) outputs.
  float* conv_out = nullptr;
  float* beta = nullptr;
  float* decay = nullptr;
  float* o = nullptr;
  uint16_t* out = nullptr;  // [T, hv · dv] fp16 gated-RMSNormed outputs (the out projection's A)
  uint16_t* out_lo = nullptr;  // [T, hv · dv] fp16 remainder, or null
  GdnScanForm form = GdnScanForm::sequential;
  // The chunked form's per-chunk tiles, gdn_chunked_scratch_bytes(T, hk, hv) bytes, 16-byte
  // aligned (unused by the sequential form).
  void* chunk_scratch = nullptr;
};
// Bytes of the chunked form's scratch for a chunk of T tokens: per 64 tokens, 64 KiB per key head
// (q̂, k̂ split into bf16 hi + lo) and 80.5 KiB per value head (W, P, U, decays): 225 MiB at the real
// shape (hk 16, hv 32) and T = 4,096.
size_t gdn_chunked_scratch_bytes(int T, int hk, int hv);
// Whether the current device gives a block the chunked form's shared memory (161.5 KiB: sm_80 and
// sm_90 do, sm_86 / sm_89 with ~100 KiB do not).
bool gdn_chunked_supported();
// Conv + SiLU over the chunk (the ring supplies the taps before pos0, then takes the chunk's last
// raw inputs), q/k L2 norms, β and decay; the delta-rule scan in p.form (every state column is
// independent given q, k, β, decay: blocks take (head, column range) pairs); the gated RMSNorm.
Status launch_gdn_prefill(const GdnPrefillParams& p, cudaStream_t s);
// The chunked form's scan alone (prefill/delta_net_chunked.cu): reads conv_out, beta and decay as
// the norms launch leaves them, writes o and advances S. launch_gdn_prefill calls it.
Status launch_gdn_scan_chunked(const GdnPrefillParams& p, cudaStream_t s);

}  // namespace orchid::cuda
