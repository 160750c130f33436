// Internal to the CPU backend: its state layout and the per-layer forward functions, each
// over a chunk of T consecutive tokens (activations [T, n] row-major fp32).
#pragma once

#include <cstdint>
#include <vector>

#include "orchid/backend/backend.h"
#include "orchid/backend/cpu/ops.h"
#include "orchid/model/model.h"

namespace orchid::cpu {

struct CpuState final : BackendState {
  int64_t n_past_ = 0;
  int64_t capacity_ = 0;
  bool kv_bf16 = false;  // K/V rounded to bf16 entering the cache (CpuOptions::kv)
  // Per layer index; empty for layers of the other kind.
  std::vector<std::vector<float>> conv;  // linear: [conv_dim, conv_kernel - 1] last raw inputs
  std::vector<std::vector<float>> rec;   // linear: [n_head_v, head_dim_k, head_dim_v] fp32
  std::vector<std::vector<float>> k;     // full: [capacity, n_head_kv, head_dim] post-RoPE
  std::vector<std::vector<float>> v;     // full: [capacity, n_head_kv, head_dim]
  std::vector<int64_t> rewinds;          // lengths restored to that were shorter than n_past then

  int64_t n_past() const override { return n_past_; }
  int64_t capacity() const override { return capacity_; }
};

struct CpuSnapshot final : StateSnapshot {
  int64_t n_past_ = 0;
  size_t rewinds_seen = 0;  // CpuState::rewinds.size() when taken
  std::vector<std::vector<float>> conv, rec;
  int64_t n_past() const override { return n_past_; }
  int64_t bytes() const override;
};

// Gated attention over tokens at positions [pos0, pos0 + T): writes their K/V into the
// state and out [T, n_embd].
void attention_forward(const Matmul& mm, const ModelConfig& c, const AttentionWeights& w,
                       CpuState& st, int layer, const float* x, int64_t T, int64_t pos0,
                       float* out);

// Gated DeltaNet over T tokens, advancing the conv and recurrent state; out [T, n_embd].
void delta_net_forward(const Matmul& mm, const ModelConfig& c, const DeltaNetWeights& w,
                       CpuState& st, int layer, const float* x, int64_t T, float* out);

// Sparse MoE with the shared expert; out [T, n_embd].
void moe_forward(const Matmul& mm, const ModelConfig& c, const MoeWeights& w, const float* x,
                 int64_t T, float* out);

}  // namespace orchid::cpu
