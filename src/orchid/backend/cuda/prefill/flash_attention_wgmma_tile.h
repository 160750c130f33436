// The tile of the Hopper flash-attention kernel (prefill/flash_attention_wgmma.cu): its shape, its
// shared-memory map and the byte of every operand element, as plain arithmetic shared with the
// CPU layout test (tests/backend/test_wgmma_layout.cpp).
#pragma once

#include <cstddef>

#include "orchid/backend/cuda/common/wgmma_layout.h"

namespace orchid::cuda {

// A CTA: a producer warpgroup that streams K/V tiles, then kConsumers warpgroups of 64 query rows
// each (GQA-packed rows of one KV head). Every operand tile is [rows, HD] bf16 stored as HD / 64
// column blocks of [rows, 64] (128-byte rows, 128-byte swizzle), one block after another:
//   Q  [64 rows, HD] per consumer: A of S = Q · Kᵀ, K-major (dims contiguous);
//   K  [kKeys, HD] per stage:      B of S (N = keys), K-major;
//   V  [kKeys, HD] per stage:      B of O += P · V (K = keys, N = dims), MN-major (dims
//   contiguous),
// and the K and V tiles are the KV cache rows as stored, only swizzled.
template <int HD>
struct AttnWgmmaTile {
  static_assert(HD == 64 || HD == 128 || HD == 256, "head dims of whole 128-byte blocks, ≤ 256");
  static constexpr int kHd = HD;
  static constexpr int kConsumers = 2;
  static constexpr int kRows = 64 * kConsumers;                   // query rows a CTA
  static constexpr int kThreads = 128 * (kConsumers + 1);         // + the producer warpgroup
  static constexpr int kKeys = 64;                                // keys a K/V tile: S is m64n64
  static constexpr int kBlocks = HD / 64;                         // 64-dim column blocks
  static constexpr uint32_t kQBytes = 64u * HD * 2;               // one consumer's Q tile
  static constexpr uint32_t kKvBytes = uint32_t(kKeys) * HD * 2;  // one K or V tile
  // Registers a thread after setmaxnreg: the producer gives back, the consumers take (40 · 128 +
  // 232 · 256 = 64,512 of an SM's 65,536; the launch bound starts all 384 threads at 168).
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static constexpr int kBarriers = 4;  // per stage: K full, V full, K empty, V empty (8 bytes)
  // Stages of K and V: as many as the 227 KB a block may have allow (1 KB of slack to align the
  // dynamic shared memory to 1024 bytes), at most 4: 2 at HD 256 (192 KB), 4 below.
  static constexpr int kMaxSmem = 227 * 1024;
  static constexpr int fit_stages() {
    const int per = int(2 * kKvBytes) + kBarriers * 8;
    const int n = (kMaxSmem - 1024 - kConsumers * int(kQBytes)) / per;
    return n < 4 ? n : 4;
  }
  static constexpr int kStages = fit_stages();
  static_assert(kStages >= 2, "double buffering needs two stages");

  // Byte offsets from the 1024-aligned base: Q tiles, K tiles, V tiles, then the mbarriers.
  ORCHID_HOST_DEVICE static constexpr uint32_t q_tile(int consumer) {
    return uint32_t(consumer) * kQBytes;
  }
  ORCHID_HOST_DEVICE static constexpr uint32_t k_tile(int stage) {
    return kConsumers * kQBytes + uint32_t(stage) * kKvBytes;
  }
  ORCHID_HOST_DEVICE static constexpr uint32_t v_tile(int stage) { return k_tile(kStages + stage); }
  static constexpr uint32_t kBarrierOffset = k_tile(2 * kStages);
  static constexpr size_t kSmem = kBarrierOffset + kBarriers * kStages * 8 + 1024;
  static_assert(kSmem <= size_t(kMaxSmem));

  // Byte of element (row r, dim d) in a [rows, HD] tile.
  ORCHID_HOST_DEVICE static constexpr uint32_t elem(int rows, int r, int d) {
    return uint32_t(d / 64) * uint32_t(rows) * 128 + sw128_offset(r, (d % 64) / 8) + (d % 8) * 2;
  }
  // Where k-step kk's descriptor starts, in bytes from its tile: S's k-steps are 16 dims (32
  // bytes along the rows of one column block, then the next block); O's are 16 keys (16 rows of
  // every column block: two atoms, the blocks kVLbo bytes apart).
  ORCHID_HOST_DEVICE static constexpr uint32_t q_step(int kk) {
    return uint32_t(kk / 4) * 64 * 128 + uint32_t(kk % 4) * 32;
  }
  ORCHID_HOST_DEVICE static constexpr uint32_t k_step(int kk) {
    return uint32_t(kk / 4) * kKeys * 128 + uint32_t(kk % 4) * 32;
  }
  ORCHID_HOST_DEVICE static constexpr uint32_t v_step(int kk) { return uint32_t(kk) * 16 * 128; }
  static constexpr uint32_t kVLbo = uint32_t(kKeys) * 128;

  // The producer's copies of a K or V tile: 16-byte chunks, thread t (of 128) taking dims
  // copy_dim(t) … + 7 of rows copy_row(t, i), i < kPasses. A warp reads whole cache rows
  // (coalesced), and 8 consecutive threads write 8 different chunks of one 128-byte row (the 8
  // bank groups: no conflicts).
  static constexpr int kChunks = HD / 8;  // 16-byte chunks a row
  static constexpr int kRowsPerPass = 128 / kChunks, kPasses = kKeys / kRowsPerPass;
  ORCHID_HOST_DEVICE static constexpr int copy_dim(int t) { return t % kChunks * 8; }
  ORCHID_HOST_DEVICE static constexpr int copy_row(int t, int i) {
    return t / kChunks + i * kRowsPerPass;
  }
};

}  // namespace orchid::cuda
