// The online-softmax step the flash-attention kernels share (prefill/flash_attention.cu on mma.sync,
// prefill/flash_attention_wgmma.cu on wgmma): both hold a score tile in the mma accumulator layout, two
// rows a lane, a quad of lanes (4 (lane / 4) … + 3) sharing each row.
#pragma once

namespace orchid::cuda {

// Row r's update for a new tile of scores (raw q·k units; softmax in base 2 with scale_log2 =
// log2(e) / √hd): mx[r], this lane's maximum of the tile's row, becomes the quad's; the running
// max m[r] moves to max(m[r], mx[r]) and this lane's row sum l[r] is rescaled by corr[r] =
// 2^((m_old − m_new) · scale_log2) (0 on a row's first tile, where m_old = −∞); then
// P = exp2(s · scale_log2 + neg_m[r]). Every row's first tile holds key 0, which it attends, so m
// is finite from then on and no exp2 sees −∞ − (−∞).
__device__ __forceinline__ void online_softmax_step(float (&mx)[2], float (&m)[2], float (&l)[2],
                                                    float scale_log2, float (&corr)[2],
                                                    float (&neg_m)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float m_new = fmaxf(m[r], mx[r]);
    corr[r] = exp2f((m[r] - m_new) * scale_log2);
    neg_m[r] = -m_new * scale_log2;
    m[r] = m_new;
    l[r] *= corr[r];
  }
}

}  // namespace orchid::cuda
