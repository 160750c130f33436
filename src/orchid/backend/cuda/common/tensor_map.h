// Tensor maps: the descriptors the copy engine (TMA, sm_90) reads to move a box of a 2D array
// between global and shared memory in one instruction. Here only the kind the exact GEMMs' A
// operand needs: fp16 rows, boxes of 64 elements (128 bytes: one q4 group, one shared tile row)
// by `box_rows` rows, written in the 128-byte swizzle that wgmma reads (common/wgmma_layout.h). The
// driver's encoder is reached through the runtime (no link to libcuda).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "orchid/backend/cuda/common/kernels.h"

namespace orchid::cuda {

// Whether this process can encode tensor maps (a driver with cuTensorMapEncodeTiled). Cached.
bool tensor_maps_supported();

// A map of the fp16 array base[rows, cols] with `ld` elements between rows (base 16-byte aligned,
// ld a multiple of 8, cols ≥ 64, 1 ≤ box_rows ≤ 256): a copy at coordinates (c, r) moves elements
// [c, c + 64) of rows [r, r + box_rows) to shared memory, rows 128 bytes apart and swizzled; parts
// of the box past the array's edges arrive as zeros (and still count as copied bytes).
Status encode_f16_row_map(CUtensorMap* map, const uint16_t* base, int64_t rows, int64_t cols,
                          int64_t ld, int box_rows);

// The GEMMs' A operand for the warp-specialised tiles' copy engine (a kernel parameter): maps of
// A_hi, A_lo and A's group sums (the scaled codes' bias steps) whose boxes are a whole 128-row
// tile (kTmaATileRows); off: A goes by cp.async instead.
constexpr int kTmaATileRows = 128;
struct ATmaMaps {
  CUtensorMap map[3];  // A_hi, A_lo (exact path), sums (scaled codes)
  bool on = false;
};
// Maps of hi and lo (may be null) [rows, cols] (ld elements between rows) and of sums (may be
// null) [rows, sums_ld] where the driver encodes them (tensor_maps_supported()) and rows > 0;
// otherwise m.on = false.
Status encode_a_maps(ATmaMaps& m, const uint16_t* hi, const uint16_t* lo, int64_t rows,
                     int64_t cols, int64_t ld, const uint16_t* sums = nullptr, int64_t sums_ld = 0);

}  // namespace orchid::cuda
