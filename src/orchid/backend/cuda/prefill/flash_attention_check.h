// The parameter checks every prefill attention launcher makes before it launches anything
// (prefill/flash_attention.cu, prefill/flash_attention_wgmma.cu): the chunk, the heads, the cache and the
// buffers' alignment.
#pragma once

#include <cstdint>

#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {

inline bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}

// What every launch relies on: the chunk, the heads, the cache and qg (16-byte vector loads).
inline Status check_attn_common(const AttnPrefillParams& p, const char* what) {
  if (p.T < 1 || p.T > 65535 || p.pos0 < 0)
    return err(what, ": chunk of ", p.T, " tokens at position ", p.pos0,
               " (expected 1 … 65535 tokens, position ≥ 0)");
  if (p.n_head_kv < 1 || p.n_head % p.n_head_kv != 0 || p.n_head / p.n_head_kv > kMaxGqaGroup)
    return err(what, ": ", p.n_head, " query heads over ", p.n_head_kv,
               " KV heads (expected a group of 1 … ", kMaxGqaGroup, ")");
  if (p.hd < 8 || p.hd > kMaxHeadDim || p.hd % 8 != 0)
    return err(what, ": head_dim ", p.hd, " (expected a multiple of 8 up to ", kMaxHeadDim, ")");
  if (!p.qg || !p.kc || !p.vc || !aligned16(p.qg) || !aligned16(p.kc) || !aligned16(p.vc))
    return err(what, ": qg, kc and vc must be set and 16-byte aligned");
  return {};
}

// The attention launches: the common checks and the output.
inline Status check_attn_output(const AttnPrefillParams& p, const char* what) {
  ORCHID_TRY(check_attn_common(p, what));
  if (!p.out || !aligned16(p.out) || !aligned16(p.out_lo))
    return err(what, ": out must be set and 16-byte aligned (out_lo too, if set)");
  return {};
}

}  // namespace orchid::cuda
