// The chunked DeltaNet scan's partition (prefill/delta_net_chunked.cu) as plain arithmetic shared with the
// CPU emulation test (tests/backend/test_delta_net_chunk_tile.cpp): which warp owns which tokens,
// state rows and columns, where each lane's ldmatrix row address points, which element each
// fragment register holds, and the shared-memory slots through which warps hand fragments on.
#pragma once

#include "orchid/backend/cuda/common/host_device.h"

namespace orchid::cuda::gdn_chunk {

constexpr int kChunk = 64;  // tokens a chunk (C of spec §6.7)
constexpr int kHd = 128;    // dk and dv, every tile zero-padded to it
constexpr int kTokenBlocks = kChunk / 16;

// ---- The scan block: one value head, kScanCols state columns, kScanWarps warps ----------------
// Warp w takes column tile col_tile(w) (16 columns: the M of all its products, Sᵀ and V′ᵀ being
// the A operands) and block blk(w): tokens 16 blk … 16 blk + 15 of V′ and O, and state rows
// 32 blk … 32 blk + 31 of the update (so 4 blocks × 2 column tiles). Token block b's P·V′ term
// takes b + 1 k-steps, so warps w and w + 4 (one scheduler, as warps are dealt out w % 4) take
// blocks that add up to 3: blocks 0, 0, 1, 1, 3, 3, 2, 2.
constexpr int kScanCols = 32;
constexpr int kScanWarps = 8;
ORCHID_HOST_DEVICE constexpr int col_tile(int warp) {
  return warp & 1;
}
ORCHID_HOST_DEVICE constexpr int blk(int warp) {
  return (warp >> 1) ^ (warp >> 2);
}

// ---- mma.sync m16n8k16 fragments (lane = 4 g + q)
// ------------------------------------------------ Accumulator register e of an m16n8 tile: row g +
// 8 (e >> 1), column 2 q + (e & 1).
ORCHID_HOST_DEVICE constexpr int acc_row(int lane, int e) {
  return lane / 4 + 8 * (e >> 1);
}
ORCHID_HOST_DEVICE constexpr int acc_col(int lane, int e) {
  return 2 * (lane % 4) + (e & 1);
}
// ldmatrix.x4 row addresses of a B operand of 16 k × 16 n (registers 0, 1: n 0-7; 2, 3: n 8-15).
// Stored with n as rows and k contiguous (plain ldmatrix): lane reads row n0 + ldm_b_row(lane),
// column k0 + ldm_b_col(lane).
ORCHID_HOST_DEVICE constexpr int ldm_b_row(int lane) {
  return (lane & 7) + (lane >> 4) * 8;
}
ORCHID_HOST_DEVICE constexpr int ldm_b_col(int lane) {
  return ((lane >> 3) & 1) * 8;
}
// Stored with k as rows and n contiguous (ldmatrix .trans): row k0 + ldm_bt_row(lane), column
// n0 + ldm_bt_col(lane).
ORCHID_HOST_DEVICE constexpr int ldm_bt_row(int lane) {
  return (lane & 7) + ((lane >> 3) & 1) * 8;
}
ORCHID_HOST_DEVICE constexpr int ldm_bt_col(int lane) {
  return (lane >> 4) * 8;
}

// ---- Hand-on slots: one A fragment (4 × 32 bits a lane) each, stored [slot][lane] ---------------
// Sᵀ of column tile m, dk k-step kk (rows 16 kk … 16 kk + 15), plane 0 (bf16 hi) or 1 (lo):
// written by warp (m, kk / 2), the owner of those rows, at the end of a chunk; read by the four
// warps of column tile m in the next chunk's V′ and O products.
constexpr int kSSlots = 2 * (kHd / 16) * 2;
ORCHID_HOST_DEVICE constexpr int s_slot(int m, int kk, int plane) {
  return (m * (kHd / 16) + kk) * 2 + plane;
}
// V′ᵀ of column tile m, token k-step kb (tokens 16 kb … 16 kb + 15), as `which` = 0, 1: V′ hi, lo
// (the A of P V′); 2, 3: V′ scaled by e^{γ₆₃−γ} hi, lo (the A of the state update): written by
// warp (m, kb), read by the warps of column tile m.
constexpr int kVSlots = 2 * kTokenBlocks * 4;
ORCHID_HOST_DEVICE constexpr int v_slot(int m, int kb, int which) {
  return (m * kTokenBlocks + kb) * 4 + which;
}

}  // namespace orchid::cuda::gdn_chunk
