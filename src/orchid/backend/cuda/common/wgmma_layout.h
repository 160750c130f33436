// The layouts Hopper's warpgroup MMA (wgmma, sm_90a) reads, as plain index arithmetic: the
// 128-byte shared-memory swizzle, the matrix descriptors of K-major and MN-major operands, and
// which (row, column) every register of a warpgroup's fragments holds. Plain C++ usable on both
// sides, so that the CPU tests hold these maps against an emulation of the PTX rules
// (tests/backend/test_wgmma_layout.cpp) and the kernels use the very same functions.
#pragma once

#include <cstdint>

#include "orchid/backend/cuda/common/host_device.h"

namespace orchid::cuda {

// ---- Shared memory: the 128-byte swizzle ----------------------------------------------------

// A tile of 128-byte rows (64 16-bit elements) that starts on 1024 bytes holds 16-byte chunk c
// (elements 8c … 8c + 7) of row r at chunk c ^ (r & 7) of that row. Each 8 rows form a 1024-byte
// atom in which any 8 rows' same chunk fall in 8 different bank groups: ldmatrix, cp.async and
// the tensor cores all read or write it without bank conflicts. The hardware applies the swizzle
// to address bits (bits 4-6 ^= bits 7-9), so a descriptor may start at any 16-byte chunk of the
// first row (+32 bytes steps 16 elements along a K-major row).
ORCHID_HOST_DEVICE constexpr uint32_t sw128_offset(int r, int c) {
  return uint32_t(r * 128 + ((c ^ (r & 7)) << 4));
}

// ---- Matrix descriptors ------------------------------------------------------------------------

// 64-bit descriptor of a 128-byte-swizzled operand: bits [0, 14) start address >> 4, [16, 30)
// leading-dimension byte offset >> 4, [32, 46) stride-dimension byte offset >> 4, [49, 52) base
// offset (0: the atoms start on 1024 bytes), [62, 64) swizzle mode (1: 128 bytes). Shared
// addresses are below 256 KB, so start >> 4 fits its 14 bits and later k-steps may be added to
// the descriptor itself (desc + bytes / 16).
ORCHID_HOST_DEVICE constexpr uint64_t wgmma_desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3ffff) >> 4) | uint64_t((lbo & 0x3ffff) >> 4) << 16 |
         uint64_t((sbo & 0x3ffff) >> 4) << 32 | uint64_t(1) << 62;
}
// K-major operand (A [M, K] or B [N, K] with K contiguous, one 128-byte row per M or N index):
// an instruction reads 16 k-elements (32 bytes) of each row, its 8-row atoms 1024 bytes apart
// (the stride byte offset); the leading byte offset is unused by this layout (1 by convention).
ORCHID_HOST_DEVICE constexpr uint64_t wgmma_desc_k(uint32_t addr) {
  return wgmma_desc_sw128(addr, 16, 1024);
}
// MN-major B operand ([K, N] with N contiguous: one 128-byte row per k holds 64 n-elements): an
// instruction's 16 k-rows are two atoms 1024 bytes apart (the stride byte offset), and each
// further 64 n-elements sit `lbo` bytes on (the leading byte offset: the next column block).
ORCHID_HOST_DEVICE constexpr uint64_t wgmma_desc_mn(uint32_t addr, uint32_t lbo) {
  return wgmma_desc_sw128(addr, lbo, 1024);
}

// ---- Register fragments (m64nNk16, 16-bit inputs, fp32 accumulators) -------------------------

// Thread t of the warpgroup (0 … 127): warp t / 32 owns rows 16 (t / 32) … + 15; within the
// warp, lane l holds rows l / 4 and l / 4 + 8 and columns 2 (l % 4), + 1 of every 8-column block:
// the layout of mma.sync m16n8k16, one per warp.
ORCHID_HOST_DEVICE constexpr int wgmma_frag_row(int t, int upper) {
  return 16 * (t / 32) + (t % 32) / 4 + 8 * upper;
}
// Accumulator D (N / 2 fp32 registers): register 4j + e holds row wgmma_frag_row(t, e >> 1),
// column 8j + 2 (t % 4) + (e & 1).
ORCHID_HOST_DEVICE constexpr int wgmma_acc_row(int t, int reg) {
  return wgmma_frag_row(t, (reg >> 1) & 1);
}
ORCHID_HOST_DEVICE constexpr int wgmma_acc_col(int t, int reg) {
  return 8 * (reg / 4) + 2 * (t % 4) + (reg & 1);
}
// A from registers (4 × 32 bits, two 16-bit elements each, the first in the low half): register
// i holds row wgmma_frag_row(t, i & 1), columns 2 (t % 4) + 8 (i >> 1) + half (half 0, 1).
ORCHID_HOST_DEVICE constexpr int wgmma_a_row(int t, int reg) {
  return wgmma_frag_row(t, reg & 1);
}
ORCHID_HOST_DEVICE constexpr int wgmma_a_col(int t, int reg, int half) {
  return 2 * (t % 4) + 8 * (reg >> 1) + half;
}
// An accumulator as the A operand of the next product (P = S of 16 columns per k-step): A
// register i of k-step kk packs accumulator registers acc_for_a(kk, i) and + 1, which hold the
// same row and columns 16 kk + wgmma_a_col(t, i, 0 | 1) — so the conversion moves no data
// between threads.
ORCHID_HOST_DEVICE constexpr int wgmma_acc_for_a(int kk, int i) {
  return 8 * kk + 2 * i;
}

}  // namespace orchid::cuda
