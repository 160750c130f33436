// Prefill: a prompt in chunks of up to `prefill_chunk` tokens, every projection a GEMM on the
// tensor cores (q4 tiles dequantised on chip), the experts as grouped GEMMs over the chunk's
// tokens sorted by expert on the device, the DeltaNet scan (sequential with its state in registers,
// or chunked on the tensor cores: ORCHID_GDN_CHUNKED), and flash attention over the cache (on
// Hopper's wgmma where it applies). Every fp16 GEMM operand (xn, mix, act) comes with its
// remainder (xn_lo, …) on the exact path (ORCHID_EXACT_PREFILL, prefill/prefill_kernels.h) and,
// where the warp-specialised tiles run, with its group sums (the scaled codes). Per chunk, per
// layer:
//   xn = fp16(RMSNorm(h))                          [T, n_embd]
//   attention: qg, k, v = xn·W → q/k norm + RoPE + KV write → flash attention → h += o·W_o
//   DeltaNet:  qkv, z, b, a = xn·W → conv, norms, scan, gated norm → h += out·W_out
//   MoE:       xn = fp16(RMSNorm(h)); logits = xn·[W_router; W_shared_gate] (exact path: hi + lo
//              on the tensor cores; else fp32 on the CUDA cores) → route + sort →
//              act = silu(xn·W_gate)·(xn·W_up) per pair → slot_out = w·act·W_down → h += Σ slots
// Then the logits of the last position (or of every position) from the final norm + lm_head.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>

#include "orchid/backend/cuda/cuda_backend_impl.h"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {

namespace {

int64_t gemm_flops(int64_t m, const DevMatrix& w) {
  return 2 * m * w.rows * w.cols;
}

// Whether the tiled GEMMs take w: rows of whole 8-element pieces, whole quantisation groups of a
// power-of-two number of units (exact: of 32 elements or more).
bool gemm_takes(const DevMatrix& w, bool exact) {
  if (w.cols % 8 != 0) return false;
  if (w.fmt == DevFormat::bf16) return true;
  const int units = w.group / unit_elems(w.fmt);
  return w.group > 0 && w.cols % w.group == 0 && units > 0 && (units & (units - 1)) == 0 &&
         (!exact || w.group >= 32);
}

// buf holds at least `need` elements of the ablations' arena afterwards (a larger buffer replaces
// it; the arena frees everything with the prefill buffers).
template <class T>
Status grow(DeviceArena& arena, T*& buf, int64_t& have, int64_t need, const char* what) {
  if (need <= have) return {};
  auto r = arena.alloc_n<T>(need);
  if (!r) return err(what, ": ", r.message());
  buf = *r, have = need;
  return {};
}

// Whether the scaled codes can take w (q4 in groups of 64): else its operand needs no sums.
bool scaled_form(const DevMatrix& w) {
  return w.fmt == DevFormat::q4 && w.group == 64;
}

}  // namespace

bool CudaBackend::router_on_tensor_cores(const DevLayer& L) const {
  return gemm_takes(L.router, true);
}

bool CudaBackend::prefill_supported() const {
  const int hd = c_.head_dim;
  if (c_.n_expert + 1 > 1024 || c_.n_expert_used + 1 > 32 || c_.n_embd % 8 != 0) return false;
  if (hd != 32 && hd != 48 && hd != 64 && hd != 128 && hd != 256) return false;
  if (c_.n_head_kv < 1 || c_.n_head % c_.n_head_kv != 0 || c_.n_head / c_.n_head_kv > 8)
    return false;
  if (c_.lin_head_dim_k > 128 || c_.lin_head_dim_v > 128 || c_.n_ff_exp % 8 != 0) return false;
  for (const DevLayer& L : dm_->layers)
    for (const DevMatrix* w :
         {&L.q, &L.k, &L.v, &L.o, &L.qkv, &L.z, &L.b, &L.a, &L.out, &L.router, &L.shared_gate,
          &L.gate, &L.up, &L.down, &L.sh_gate, &L.sh_up, &L.sh_down})
      if (w->w && !gemm_takes(*w, sw_.exact_prefill)) return false;
  return gemm_takes(dm_->lm_head, sw_.exact_prefill);
}

int64_t CudaBackend::prefill_scratch_bytes() const {
  return pf_ ? pf_->mem.bytes() + pf_->extra.bytes() : 0;
}

Status CudaBackend::ensure_prefill_scratch(int chunk) {
  if (pf_ && pf_->chunk >= chunk && pf_->exact == sw_.exact_prefill) return {};
  pf_.reset();
  auto p = std::make_unique<PrefillScratch>();
  DeviceArena& A = p->mem;
  const int64_t C = chunk, H = c_.n_embd, hd = c_.head_dim, slots = c_.n_expert_used + 1;
  const int64_t attn_w = int64_t(c_.n_head) * hd, vd = c_.lin_value_dim();
  const int64_t pairs = C * slots;
  p->chunk = chunk, p->exact = sw_.exact_prefill;
  // The group sums pay only where the warp-specialised tiles read them.
  p->sums_on = ws_tiles_supported();
  p->max_tiles = int(pairs / 16 + c_.n_expert + 1);  // 16: the smallest tile
  auto take = [&](auto*& dst, int64_t n) -> Status {
    auto r = A.alloc_n<std::remove_reference_t<decltype(*dst)>>(n);
    if (!r) return err("prefill buffers for chunks of ", chunk, " tokens: ", r.message());
    dst = *r;
    return {};
  };
  ORCHID_TRY(take(p->tokens, C));
  ORCHID_TRY(take(p->h, C * H));
  ORCHID_TRY(take(p->xn, C * H));
  ORCHID_TRY(take(p->mix, C * std::max(attn_w, vd)));
  ORCHID_TRY(take(p->qg, C * 2 * attn_w));
  ORCHID_TRY(take(p->k, C * c_.n_head_kv * hd));
  ORCHID_TRY(take(p->v, C * c_.n_head_kv * hd));
  ORCHID_TRY(take(p->qkv, C * c_.lin_conv_dim()));
  ORCHID_TRY(take(p->z, C * vd));
  ORCHID_TRY(take(p->b, C * c_.lin_n_head_v));
  ORCHID_TRY(take(p->a, C * c_.lin_n_head_v));
  ORCHID_TRY(take(p->conv_out, C * c_.lin_conv_dim()));
  ORCHID_TRY(take(p->o, C * vd));
  ORCHID_TRY(take(p->beta, C * c_.lin_n_head_v));
  ORCHID_TRY(take(p->decay, C * c_.lin_n_head_v));
  ORCHID_TRY(take(p->logits, C * (c_.n_expert + 1)));
  ORCHID_TRY(take(p->sel, pairs));
  ORCHID_TRY(take(p->sel_w, pairs));
  ORCHID_TRY(take(p->pair_token, pairs));
  ORCHID_TRY(take(p->pair_slot, pairs));
  ORCHID_TRY(take(p->pair_w, pairs));
  ORCHID_TRY(take(p->counts, c_.n_expert + 1));
  ORCHID_TRY(take(p->offsets, c_.n_expert + 1));
  ORCHID_TRY(take(p->n_tiles, 1));
  ORCHID_TRY(take(p->tile_expert, p->max_tiles));
  ORCHID_TRY(take(p->tile_begin, p->max_tiles));
  ORCHID_TRY(take(p->tile_end, p->max_tiles));
  ORCHID_TRY(take(p->act, pairs * std::max(c_.n_ff_exp, c_.n_ff_shexp)));
  ORCHID_TRY(take(p->slot_out, pairs * H));
  ORCHID_TRY(take(p->head, int64_t(PrefillScratch::kHeadRows) * c_.n_vocab));
  const bool apart = std::any_of(dm_->layers.begin(), dm_->layers.end(),
                                 [](const DevLayer& L) { return L.shared_apart; });
  if (apart) {
    ORCHID_TRY(take(p->sh_gu, C * 2 * c_.n_ff_shexp));
    ORCHID_TRY(take(p->sh_act, C * c_.n_ff_shexp));
  }
  if (p->exact) {
    ORCHID_TRY(take(p->xn_lo, C * H));
    ORCHID_TRY(take(p->mix_lo, C * std::max(attn_w, vd)));
    ORCHID_TRY(take(p->act_lo, pairs * std::max(c_.n_ff_exp, c_.n_ff_shexp)));
    if (apart) ORCHID_TRY(take(p->sh_act_lo, C * c_.n_ff_shexp));
  }
  if (p->sums_on) {
    const auto sums = [](int64_t k) { return 2 * int64_t(group_sums_half(int(k))); };
    ORCHID_TRY(take(p->xn_sums, C * sums(H)));
    ORCHID_TRY(take(p->mix_sums, C * sums(std::max(attn_w, vd))));
    ORCHID_TRY(take(p->act_sums, pairs * sums(std::max(c_.n_ff_exp, c_.n_ff_shexp))));
    if (apart) ORCHID_TRY(take(p->sh_act_sums, C * sums(c_.n_ff_shexp)));
  }
  pf_ = std::move(p);
  return {};
}

Expected<CudaBackend::Operand> CudaBackend::with_sums(const uint16_t* hi, const uint16_t* lo,
                                                      int rows, int k, uint16_t* out, bool wanted) {
  if (!pf_->sums_on || !wanted || k % 64 != 0) return Operand{hi, lo, nullptr};
  ORCHID_TRY(launch_group_sums(hi, lo, rows, k, k, out, stream_));
  return Operand{hi, lo, out};
}

Status CudaBackend::prefill_gemm(const DevMatrix& w, const Operand& a, int lda, int T, float* c,
                                 int ldc, const float* add) {
  const bool sums = a.sums && gemm_scaled_fills(T, scaled_col_tiles(w.rows));  // else the fold
  if (!a.lo && !sw_.fused_dequant && w.fmt != DevFormat::bf16) {
    // The ablation's fp16 copy of the largest matrix it meets, grown on demand.
    ORCHID_TRY(grow(pf_->extra, pf_->dequant, pf_->dequant_elems, int64_t(w.rows) * w.cols,
                    "dequantised weight buffer"));
    set_gemm_dequant_scratch(pf_->dequant, pf_->dequant_elems);
  }
  GemmParams g;
  g.w = w, g.a = a.hi, g.a_lo = a.lo, g.a_sums = sums ? a.sums : nullptr, g.lda = lda, g.m = T;
  g.c = c;
  g.ldc = ldc, g.add = add;
  return launch_gemm(g, stream_);
}

Status CudaBackend::prefill_xn_gemms(std::initializer_list<XnProduct> products, const Operand& xn,
                                     int T) {
  const int H = c_.n_embd;
  if (!xn.lo && !xn.sums) {
    for (const XnProduct& x : products)
      ORCHID_TRY(prefill_gemm(*x.w, xn, H, T, x.c, x.ldc, nullptr));
    return {};
  }
  int64_t tiles256 = 0;
  for (const XnProduct& x : products) tiles256 += scaled_col_tiles(x.w->rows);
  const uint16_t* sums = gemm_scaled_fills(T, tiles256) ? xn.sums : nullptr;  // else the fold
  GemmParams g[kMaxGemmGroup];
  int n = 0;
  for (const XnProduct& x : products) {
    if (n == kMaxGemmGroup) return err("prefill: more than ", kMaxGemmGroup, " grouped products");
    g[n].w = *x.w, g[n].a = xn.hi, g[n].a_lo = xn.lo, g[n].a_sums = sums, g[n].lda = H;
    g[n].m = T, g[n].c = x.c, g[n].ldc = x.ldc, ++n;
  }
  return launch_gemm_group(std::span<const GemmParams>(g, size_t(n)), stream_);
}

Status CudaBackend::prefill_attention(CudaState& st, int l, int T, const Operand& xn,
                                      Profiler* prof) {
  const DevLayer& L = dm_->layers[size_t(l)];
  PrefillScratch& P = *pf_;
  const int H = c_.n_embd, hd = c_.head_dim, kvw = c_.n_head_kv * hd;
  ORCHID_TRY(prefill_xn_gemms({{&L.q, P.qg, L.q.rows}, {&L.k, P.k, kvw}, {&L.v, P.v, kvw}}, xn, T));
  if (prof) prof->mark("attn qkv gemm", T * (gemm_flops(1, L.q) + 2 * gemm_flops(1, L.k)));
  AttnPrefillParams a;
  a.qg = P.qg, a.k = P.k, a.v = P.v, a.q_norm = L.q_norm, a.k_norm = L.k_norm;
  a.inv_freq = dm_->inv_freq, a.eps = c_.rms_norm_eps;
  a.n_head = c_.n_head, a.n_head_kv = c_.n_head_kv, a.hd = hd, a.n_rot = c_.n_rot;
  a.kc = st.kc[size_t(l)], a.vc = st.vc[size_t(l)], a.pos0 = int(st.n_past_), a.T = T;
  a.out = P.mix, a.out_lo = P.mix_lo;
  ORCHID_TRY(launch_qk_norm_rope_kv_prefill(a, stream_));
  if (prof) prof->mark("qk norm+rope+kv", 0);
  // Causal: query t meets pos0 + t + 1 keys; QKᵀ and PV are 2 · hd FLOPs per (query, key) each.
  const int64_t pairs = int64_t(T) * st.n_past_ + int64_t(T) * (T + 1) / 2;
  if (sw_.flash_prefill && attention_prefill_wgmma_supported(hd)) {
    ORCHID_TRY(launch_attention_prefill_wgmma(a, stream_));
  } else if (sw_.flash_prefill) {
    ORCHID_TRY(launch_attention_prefill(a, stream_));
  } else {
    ORCHID_TRY(grow(P.extra, P.scores, P.scores_elems, int64_t(c_.n_head) * T * (st.n_past_ + T),
                    "attention scores buffer"));
    ORCHID_TRY(launch_attention_prefill_naive(a, P.scores, stream_));
  }
  if (prof) prof->mark("attention", 4 * pairs * hd * c_.n_head);
  auto mix = with_sums(P.mix, P.mix_lo, T, c_.n_head * hd, P.mix_sums,
                       gemm_scaled_fills(T, scaled_col_tiles(L.o.rows)));
  if (!mix) return mix.error();
  if (prof) prof->mark("group sums", 0);
  ORCHID_TRY(prefill_gemm(L.o, *mix, c_.n_head * hd, T, P.h, H, P.h));
  if (prof) prof->mark("attn o gemm", gemm_flops(T, L.o));
  return {};
}

Status CudaBackend::prefill_delta_net(CudaState& st, int l, int T, const Operand& xn,
                                      Profiler* prof) {
  const DevLayer& L = dm_->layers[size_t(l)];
  PrefillScratch& P = *pf_;
  const int H = c_.n_embd, hv = c_.lin_n_head_v, vd = c_.lin_value_dim();
  ORCHID_TRY(prefill_xn_gemms(
      {{&L.qkv, P.qkv, c_.lin_conv_dim()}, {&L.z, P.z, vd}, {&L.b, P.b, hv}, {&L.a, P.a, hv}}, xn,
      T));
  if (prof)
    prof->mark("gdn in gemm",
               gemm_flops(T, L.qkv) + gemm_flops(T, L.z) + gemm_flops(T, L.b) + gemm_flops(T, L.a));
  GdnPrefillParams g;
  g.qkv = P.qkv, g.z = P.z, g.b = P.b, g.a = P.a, g.conv_w = L.conv_w;
  g.conv_ring = st.ring[size_t(l)], g.S = st.S[size_t(l)];
  g.A_log = L.A_log, g.dt_bias = L.dt_bias, g.norm = L.gnorm;
  g.hk = c_.lin_n_head_k, g.hv = hv, g.dk = c_.lin_head_dim_k, g.dv = c_.lin_head_dim_v;
  g.K = c_.lin_conv_kernel, g.eps = c_.rms_norm_eps, g.pos0 = int(st.n_past_), g.T = T;
  g.conv_out = P.conv_out, g.beta = P.beta, g.decay = P.decay, g.o = P.o;
  g.out = P.mix, g.out_lo = P.mix_lo;
  // auto keeps the sequential scan on devices without the chunked form's shared memory; 1 forces
  // the chunked form (and fails loudly there).
  const bool chunked = sw_.gdn_chunked == 1 || (sw_.gdn_chunked < 0 && T >= kGdnChunkedMinTokens &&
                                                gdn_chunked_supported());
  if (chunked) {
    // Tiles for the largest chunk seen so far, grown on demand (the switch may change between
    // prompts; the bench flips it).
    const size_t bytes = gdn_chunked_scratch_bytes(T, g.hk, hv);
    if (bytes > P.gdn_tiles_bytes) {
      auto r = P.extra.alloc(bytes);
      if (!r) return err("chunked DeltaNet tiles: ", r.message());
      P.gdn_tiles = *r, P.gdn_tiles_bytes = bytes;
    }
    g.form = GdnScanForm::chunked, g.chunk_scratch = P.gdn_tiles;
  }
  ORCHID_TRY(launch_gdn_prefill(g, stream_));
  // Per token and state element, decay + two products + update ≈ 8 FLOPs: the sequential scan's
  // work, counted the same for the chunked form so that the two rates compare as speeds.
  if (prof) prof->mark(chunked ? "gdn chunked" : "gdn scan", 8 * int64_t(T) * hv * g.dk * g.dv);
  auto mix = with_sums(P.mix, P.mix_lo, T, vd, P.mix_sums,
                       gemm_scaled_fills(T, scaled_col_tiles(L.out.rows)));
  if (!mix) return mix.error();
  if (prof) prof->mark("group sums", 0);
  ORCHID_TRY(prefill_gemm(L.out, *mix, vd, T, P.h, H, P.h));
  if (prof) prof->mark("gdn out gemm", gemm_flops(T, L.out));
  return {};
}

int CudaBackend::expert_tile_rows(int T) const {
  // Rows per tile from the average routed rows per expert (the shared expert takes all T), by the
  // measured ablations on the exact path (tok/s with 16 / 32 / 64 / 128-row tiles):
  // cuda-prefill-2026-11-30-s7.json: 512 tokens (16 rows per expert) 9.7K / 10.4K / 9.1K / 6.4K,
  // 8K in chunks of 4K (128) 14.8K / 17.7K / 19.6K / 18.9K; with the warp-specialised 128-row tiles
  // (cuda-prefill-2026-11-30-s8-tiles.json) 128 rows won from 96 per expert (3K, 4K, 6K); with the
  // scaled codes' 128 × 256 tiles (session 13, cuda-prefill-2026-12-02-s13-full-ablations.json)
  // also at 2K (64 per expert): 22.1K / 24.0K (64 / 128 rows).
  const int E = c_.n_expert, per_expert = T * c_.n_expert_used / std::max(E, 1);
  // The 128-row tiles from 33 rows per expert on the scaled codes; the fold's and the fp16
  // path's from 65 (their measurements above).
  const bool scaled = pf_ && pf_->sums_on;
  const int t = sw_.prefill_tile;
  return t == 16 || t == 32 || t == 64 || t == 128 ? t
         : per_expert <= 4                         ? 16
         : per_expert <= 16                        ? 32
         : per_expert <= (scaled ? 32 : 64)        ? 64
                                                   : 128;
}

Status CudaBackend::prefill_moe(const DevLayer& L, int T, Profiler* prof) {
  PrefillScratch& P = *pf_;
  const int H = c_.n_embd, E = c_.n_expert, slots = c_.n_expert_used + 1;
  // Router logits [T, E + 1] (the shared expert's gate last). On the exact path the router's are
  // GEMMs of xn's hi + lo pairs: within ~2⁻²⁰ of Σ|x·w| like the fp32 kernel, so near-tied top-k
  // choices fall as the decode path's do; the shared gate's one row is an fp32 dot in the norm
  // kernel. The fp16 path keeps the fp32 kernel for all (fp16 operands flip near ties).
  const int n_logits = E + 1;
  const bool tc = P.xn_lo && router_on_tensor_cores(L);
  ORCHID_TRY(launch_rms_norm_rows_f16(P.h, L.post_norm, c_.rms_norm_eps, T, H, P.xn, P.xn_lo,
                                      stream_, tc ? &L.shared_gate : nullptr,
                                      tc ? P.logits + E : nullptr, n_logits));
  // The sums serve the 128-row expert tiles (warp-specialised) and a router launch that fills
  // the GPU.
  const int tile_rows = expert_tile_rows(T);
  const bool router_sums =
      tc && L.router_halves.w && gemm_scaled_fills(T, scaled_col_tiles(L.router_halves.rows));
  auto xn = with_sums(P.xn, P.xn_lo, T, H, P.xn_sums, tile_rows == 128 || router_sums);
  if (!xn) return xn.error();
  if (tc && L.router_halves.w && ws_tiles_supported()) {
    // The q8 router as its q4 halves on the warp-specialised tiles, each pair of columns summed.
    GemmParams g;
    g.w = L.router_halves, g.a = P.xn, g.a_lo = P.xn_lo, g.lda = H, g.m = T;
    g.a_sums = router_sums ? xn->sums : nullptr;
    g.c = P.logits, g.ldc = n_logits, g.pair_sum = true;
    ORCHID_TRY(launch_gemm(g, stream_));
  } else if (tc) {
    ORCHID_TRY(prefill_gemm(L.router, *xn, H, T, P.logits, n_logits, nullptr));
  } else {
    ORCHID_TRY(launch_router_logits_f32(P.h, L.post_norm, c_.rms_norm_eps, T, H, L.router,
                                        L.shared_gate, P.logits, stream_));
  }
  if (prof) prof->mark("router", gemm_flops(T, L.router) + gemm_flops(T, L.shared_gate));
  MoeRouting r;
  r.T = T, r.n_expert = E, r.top_k = c_.n_expert_used, r.logits = P.logits;
  r.shared_stacked = !L.shared_apart;
  r.pair_token = P.pair_token, r.pair_slot = P.pair_slot, r.pair_w = P.pair_w;
  r.sel = P.sel, r.sel_w = P.sel_w, r.counts = P.counts, r.offsets = P.offsets;
  r.tile_rows = tile_rows;
  r.max_tiles = P.max_tiles, r.n_tiles = P.n_tiles;
  r.tile_expert = P.tile_expert, r.tile_begin = P.tile_begin, r.tile_end = P.tile_end;
  ORCHID_TRY(launch_moe_route_sort(r, stream_));
  const int64_t stacked = E + (L.shared_apart ? 0 : 1);
  const int64_t pairs = int64_t(T) * (c_.n_expert_used + (L.shared_apart ? 0 : 1));
  if (!sw_.device_routing) ORCHID_TRY(round_trip_routing(r, pairs));
  if (prof) prof->mark("moe route+sort", 0);
  ExpertGateUpParams gu;
  gu.gate = L.gate, gu.up = L.up, gu.n_ff = c_.n_ff_exp, gu.x = P.xn, gu.x_lo = P.xn_lo, gu.r = &r;
  gu.x_sums = xn->sums, gu.act = P.act, gu.act_lo = P.act_lo;
  ORCHID_TRY(launch_expert_gate_up(gu, stream_));
  if (prof) prof->mark("expert gate/up", 2 * gemm_flops(pairs, L.gate) / stacked);
  auto act = with_sums(P.act, P.act_lo, int(pairs), c_.n_ff_exp, P.act_sums,
                       tile_rows == 128 && scaled_form(L.down));
  if (!act) return act.error();
  if (prof) prof->mark("group sums", 0);
  ExpertDownParams dn;
  dn.down = L.down, dn.n_embd = H, dn.n_ff = c_.n_ff_exp, dn.act = P.act, dn.act_lo = P.act_lo;
  dn.act_sums = act->sums, dn.r = &r;
  dn.slot_out = P.slot_out;
  ORCHID_TRY(launch_expert_down(dn, stream_));
  if (prof) prof->mark("expert down", gemm_flops(pairs, L.down) / stacked);
  if (L.shared_apart) {
    // The shared expert as dense GEMMs over every token, its rows into slot_out's shared slot.
    const int ff = c_.n_ff_shexp;
    float *g = P.sh_gu, *u = P.sh_gu + int64_t(T) * ff;
    ORCHID_TRY(prefill_gemm(L.sh_gate, *xn, H, T, g, ff, nullptr));
    ORCHID_TRY(prefill_gemm(L.sh_up, *xn, H, T, u, ff, nullptr));
    ORCHID_TRY(launch_silu_mul_rows_f16(g, u, T, ff, P.sh_act, P.sh_act_lo, stream_));
    auto sh_act = with_sums(P.sh_act, P.sh_act_lo, T, ff, P.sh_act_sums,
                            gemm_scaled_fills(T, scaled_col_tiles(L.sh_down.rows)));
    if (!sh_act) return sh_act.error();
    float* shared_slot = P.slot_out + int64_t(c_.n_expert_used) * H;
    ORCHID_TRY(prefill_gemm(L.sh_down, *sh_act, ff, T, shared_slot, slots * H, nullptr));
    ORCHID_TRY(launch_scale_rows_sigmoid(shared_slot, int64_t(slots) * H, T, H, P.logits + E, E + 1,
                                         stream_));
    if (prof)
      prof->mark("shared expert",
                 gemm_flops(T, L.sh_gate) + gemm_flops(T, L.sh_up) + gemm_flops(T, L.sh_down));
  }
  ORCHID_TRY(launch_moe_combine(P.slot_out, T, slots, H, P.h, stream_));
  if (prof) prof->mark("moe combine", 0);
  return {};
}

Status CudaBackend::round_trip_routing(const MoeRouting& r, int64_t pairs) {
  struct Table {
    void* p;
    size_t bytes;
  };
  const size_t tiles = size_t(r.max_tiles) * sizeof(int);
  const Table tables[] = {{r.pair_token, pairs * sizeof(int)},
                          {r.pair_slot, pairs * sizeof(int)},
                          {r.pair_w, pairs * sizeof(float)},
                          {r.tile_expert, tiles},
                          {r.tile_begin, tiles},
                          {r.tile_end, tiles},
                          {r.n_tiles, sizeof(int)}};
  size_t total = 0;
  for (const Table& t : tables) total += t.bytes;
  std::vector<char> host(total);
  size_t at = 0;
  for (const Table& t : tables) {
    ORCHID_CUDA(cudaMemcpyAsync(host.data() + at, t.p, t.bytes, cudaMemcpyDeviceToHost, stream_));
    at += t.bytes;
  }
  ORCHID_TRY(sync("routing to the host"));
  at = 0;
  for (const Table& t : tables) {
    ORCHID_CUDA(cudaMemcpyAsync(t.p, host.data() + at, t.bytes, cudaMemcpyHostToDevice, stream_));
    at += t.bytes;
  }
  return sync("routing back to the device");  // the host buffer goes out of scope
}

Status CudaBackend::prefill_chunk(CudaState& st, int T, Profiler* prof) {
  PrefillScratch& P = *pf_;
  const int H = c_.n_embd;
  ORCHID_TRY(launch_embed_rows(dm_->embd, P.tokens, T, P.h, H, stream_));
  if (prof) prof->mark("embed", 0);
  for (int l = 0; l < c_.n_layer; ++l) {
    const DevLayer& L = dm_->layers[size_t(l)];
    ORCHID_TRY(
        launch_rms_norm_rows_f16(P.h, L.attn_norm, c_.rms_norm_eps, T, H, P.xn, P.xn_lo, stream_));
    // The sums serve the layer's in-projections where their tiles fill the GPU.
    const bool attention = c_.layer_types[size_t(l)] == LayerKind::full_attention;
    const auto tiles = [](const DevMatrix& w) { return scaled_col_tiles(w.rows); };
    const int64_t tiles256 = attention ? tiles(L.q) + tiles(L.k) + tiles(L.v)
                                       : tiles(L.qkv) + tiles(L.z) + tiles(L.b) + tiles(L.a);
    auto xn = with_sums(P.xn, P.xn_lo, T, H, P.xn_sums, gemm_scaled_fills(T, tiles256));
    if (!xn) return xn.error();
    if (prof) prof->mark("rms norm", 0);
    if (attention)
      ORCHID_TRY(prefill_attention(st, l, T, *xn, prof));
    else
      ORCHID_TRY(prefill_delta_net(st, l, T, *xn, prof));
    ORCHID_TRY(prefill_moe(L, T, prof));
  }
  return {};
}

// Logits of the chunk's last position (mode last) or of all T positions into `host`.
Status CudaBackend::prefill_logits(int T, LogitsMode mode, float* host) {
  PrefillScratch& P = *pf_;
  const int H = c_.n_embd;
  const int64_t V = c_.n_vocab;
  if (mode != LogitsMode::all) {
    // One row: the decode path's lm_head GEMV with the final norm in its prologue.
    GemvParams p;
    p.task[0] = {dm_->lm_head, logits_, nullptr};
    p.n_task = 1, p.x = P.h + int64_t(T - 1) * H, p.cols = H, p.norm = dm_->out_norm;
    p.eps = c_.rms_norm_eps;
    ORCHID_TRY(launch_gemv(p, stream_));
    ORCHID_CUDA(cudaMemcpyAsync(host, logits_, size_t(V) * 4, cudaMemcpyDeviceToHost, stream_));
    return {};
  }
  ORCHID_TRY(
      launch_rms_norm_rows_f16(P.h, dm_->out_norm, c_.rms_norm_eps, T, H, P.xn, P.xn_lo, stream_));
  auto xn = with_sums(P.xn, P.xn_lo, T, H, P.xn_sums, scaled_form(dm_->lm_head));
  if (!xn) return xn.error();
  for (int r0 = 0; r0 < T; r0 += PrefillScratch::kHeadRows) {
    const int n = std::min(PrefillScratch::kHeadRows, T - r0);
    const int64_t off = int64_t(r0) * H, sums_off = int64_t(r0) * 2 * group_sums_half(H);
    const Operand a{P.xn + off, P.xn_lo ? P.xn_lo + off : nullptr,
                    xn->sums ? xn->sums + sums_off : nullptr};
    ORCHID_TRY(prefill_gemm(dm_->lm_head, a, H, n, P.head, int(V), nullptr));
    ORCHID_CUDA(cudaMemcpyAsync(host + int64_t(r0) * V, P.head, size_t(n * V) * 4,
                                cudaMemcpyDeviceToHost, stream_));
  }
  return {};
}

int CudaBackend::chunk_tokens() const {
  if (sw_.prefill_chunk > 0) return sw_.prefill_chunk;
  static const int by_memory = [] {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      cudaGetLastError();
      return 8192;
    }
    return total_b >= (size_t(64) << 30) ? 16384 : 8192;
  }();
  return by_memory;
}

Status CudaBackend::forward_chunked(CudaState& st, std::span<const int32_t> tokens, LogitsMode mode,
                                    std::vector<float>& logits, int64_t chunk, Profiler* prof,
                                    const CancelCheck& cancel) {
  const int64_t n = int64_t(tokens.size()), V = c_.n_vocab, n_past0 = st.n_past_;
  const int C = int(chunk > 0 ? std::min<int64_t>(chunk, chunk_tokens()) : chunk_tokens());
  // Buffers for the chunk, or for the prompt rounded up to a power of two (≥ 256) when it is
  // shorter: short prompts need not hold a full chunk's 2.7 GiB, and regrowth stays rare.
  const int64_t fit = int64_t(std::bit_ceil(uint64_t(std::max<int64_t>(n, 256))));
  ORCHID_TRY(ensure_prefill_scratch(int(std::min<int64_t>(C, fit))));
  set_gemm_fused_dequant_enabled(sw_.fused_dequant);
  for (int64_t c0 = 0; c0 < n; c0 += C) {
    // Each chunk ends synchronised (below), so a cancellation here leaves no work in flight.
    if (cancel_requested(cancel)) return cancel_forward(st, n_past0, c0, n);
    const int T = int(std::min<int64_t>(C, n - c0));
    ORCHID_CUDA(cudaMemcpyAsync(pf_->tokens, tokens.data() + c0, size_t(T) * 4,
                                cudaMemcpyHostToDevice, stream_));
    ORCHID_TRY(prefill_chunk(st, T, prof));
    if (mode == LogitsMode::all)
      ORCHID_TRY(prefill_logits(T, mode, logits.data() + c0 * V));
    else if (c0 + T == n)
      ORCHID_TRY(prefill_logits(T, mode, logits.data()));
    st.n_past_ += T;
    const int pos = int(st.n_past_);
    ORCHID_CUDA(cudaMemcpyAsync(st.d_pos, &pos, sizeof pos, cudaMemcpyHostToDevice, stream_));
    ORCHID_TRY(sync("prefill chunk"));  // the token buffer and `pos` are reused next round
  }
  return {};
}

Expected<std::vector<KernelTiming>> CudaBackend::profile_prefill(CudaState& st,
                                                                 std::span<const int32_t> tokens) {
  ORCHID_TRY(check_forward_input(tokens, c_.n_vocab, st.n_past_, st.capacity_));
  if (!prefill_supported()) return err("this model's shapes have no chunked prefill");
  Profiler prof(stream_);
  std::vector<float> logits(size_t(c_.n_vocab));
  prof.mark("start", 0);
  ORCHID_TRY(forward_chunked(st, tokens, LogitsMode::last, logits, 0, &prof, {}));
  return prof.timings();
}

}  // namespace orchid::cuda
