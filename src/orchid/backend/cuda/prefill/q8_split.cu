// An 8-bit matrix as two 4-bit ones, so that the q4 tiles (the warp-specialised exact GEMM) can
// multiply it: code q = 16 · qh + ql, so s · q + b = (16 s) · qh + s · ql + b, and row n of W
// becomes rows 2n (the high nibbles, scale 16 s, bias b) and 2n + 1 (the low nibbles, scale s,
// bias 0); the GEMM adds each pair of output columns (GemmParams::pair_sum). 16 s is exact in bf16
// (an exponent step; bf16's range reaches past any real scale), so the values are the same weights.
#include "orchid/backend/cuda/common/device_common.cuh"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {

namespace {

// One thread per 4-byte word of q8 codes (4 elements): out rows 2n and 2n + 1 get 2 bytes each.
// q.w [N, K] q8 codes → w_out [2N, K / 4] 16-bit words of q4 codes.
__global__ void kernel_split_q8(const __grid_constant__ DevMatrix q, uint16_t* w_out) {
  const int64_t words = int64_t(q.rows) * q.units * 4;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= words) return;
  const int64_t n = i / (int64_t(q.units) * 4), c = i - n * q.units * 4;  // word c of row n
  const uint32_t v = static_cast<const uint32_t*>(q.w)[i];
  // Elements 4c … 4c + 3 are bytes 0 … 3; in q4 element e is the low nibble of byte e / 2 for
  // even e, the high one for odd e.
  const uint32_t hi = (v >> 4) & 0x0f0f0f0fu, lo = v & 0x0f0f0f0fu;
  const auto pack = [](uint32_t b) {
    return uint16_t((b & 0xf) | (b >> 4 & 0xf0) | (b >> 8 & 0xf00) | (b >> 12 & 0xf000));
  };
  const int64_t row = int64_t(q.units) * 4;  // 16-bit words of a q4 row: cols / 4
  w_out[2 * n * row + c] = pack(hi);
  w_out[(2 * n + 1) * row + c] = pack(lo);
}

// One thread per (row, group): (s, b) → (16 s, b) and (s, 0).
// q.sb [N, K / group] → sb_out [2N, K / group] (scale, bias) bf16 pairs.
__global__ void kernel_split_q8_sb(const __grid_constant__ DevMatrix q, uint32_t* sb_out) {
  const int groups = q.cols / q.group;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(q.rows) * groups) return;
  const int64_t n = i / groups, g = i - n * groups;
  const uint32_t sb = q.sb[i];
  const uint32_t s16 = float_to_bf16_bits(16.f * bf16_lo(sb));
  sb_out[2 * n * groups + g] = (sb & 0xffff0000u) | s16;
  sb_out[(2 * n + 1) * groups + g] = sb & 0x0000ffffu;
}

}  // namespace

Status launch_split_q8(const DevMatrix& q, void* w_out, uint32_t* sb_out, cudaStream_t s) {
  if (q.fmt != DevFormat::q8 || !q.w || !q.sb || q.group < 16 || q.group % 16 != 0 ||
      q.cols % q.group != 0 || q.units * 16 != q.cols || !w_out || !sb_out)
    return err("q8 split: needs a q8 matrix in whole groups (", q.rows, " × ", q.cols, ", group ",
               q.group, ")");
  const int threads = 256;
  const int64_t words = int64_t(q.rows) * q.units * 4;
  kernel_split_q8<<<unsigned((words + threads - 1) / threads), threads, 0, s>>>(
      q, static_cast<uint16_t*>(w_out));
  ORCHID_TRY(last_launch("q8 split codes"));
  const int64_t groups = int64_t(q.rows) * (q.cols / q.group);
  kernel_split_q8_sb<<<unsigned((groups + threads - 1) / threads), threads, 0, s>>>(q, sb_out);
  return last_launch("q8 split scales");
}

}  // namespace orchid::cuda
