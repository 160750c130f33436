// The CPU backend's fast matmul for block-wise FP8 matrices (WeightFormat::fp8, Qwen's FP8
// checkpoints) and dense bf16 / f16 ones (FP8 checkpoints' embeddings, lm_head and router; HF
// bf16 checkpoints): each 16 e4m3 codes become fp32 weights by bit moves (no table), times their
// block's scale — the exact weight, code × scale, as dequant_row gives it; bf16 / f16 widen
// exactly — and meet fp32 activations in fp32 FMAs, 4 weight rows × 4 activation rows a tile.
// So the fast path's numbers for these are the exact path's but for the order of the sums (no
// activation rounding).
#pragma once

#include <cstdint>

#include "orchid/backend/cpu/isa.h"
#include "orchid/model/weights.h"

namespace orchid::cpu {

// Whether fp8_matmul takes W on the kernels' path `isa`: an fp8 matrix with cols and its block
// columns multiples of 16, or a dense bf16 / f16 one with cols a multiple of 16; and AVX-512
// (else the exact matmul runs it).
bool fp8_supported(const QuantMatrix& W, CpuIsa isa);

// Y[t, r] = row r of W · X[t] for t < n, split over the thread pool. PRECONDITION: fp8_supported(W, isa) for
// some isa.
void fp8_matmul(const QuantMatrix& W, const float* X, int64_t n, float* Y);

}  // namespace orchid::cpu
