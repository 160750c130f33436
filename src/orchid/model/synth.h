// Random checkpoints of any ModelConfig (`orchid synth`): tiny models for tests, the demo
// model, and full-size checkpoints for benchmarks. Weights are deterministic in the seed and
// scaled so the model behaves like a trained one where tests can see it: peaked logits
// (std ~4), decisive routing, norm weights far from 1 (a "w vs 1 + w" mistake changes the
// output). Generation streams shard by shard, so the full 35B model never sits in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "orchid/model/config.h"
#include "orchid/util/status.h"

namespace orchid {

enum class SynthLayout {
  hf,    // HF release layout (spec §10): bf16, fused experts, zero-centred norms, A_log F32
  mlx4,  // mlx-community 4-bit layout (spec §11): 8-bit router and shared_expert_gate
  fp8,   // Qwen's FP8 release layout: HF names, experts one by one, e4m3 weights with bf16
         // 128 x 128 block scales (`_scale_inv`); embeddings, lm_head, router, shared-expert gate
         // and in_proj_a / in_proj_b bf16 (modules_to_not_convert)
};

std::optional<SynthLayout> parse_synth_layout(std::string_view name);  // "hf" | "mlx4" | "fp8"
std::string_view synth_layout_name(SynthLayout layout);

struct SynthOptions {
  uint64_t seed = 0;
  // Target bytes per shard (cuts fall between tensors, so a shard may exceed it by one).
  // Peak memory is about two shards: one being written while the next is generated.
  uint64_t shard_bytes = 4'000'000'000;
  // hf: at least 2 shards, so even tiny checkpoints exercise the index; mlx4: 1 (a small
  // model is one model.safetensors, as small mlx-community conversions are).
  std::optional<int> min_shards;
  int n_threads = 0;  // 0: std::thread::hardware_concurrency()
  // Called after each shard is written (shard index from 0, shard count), e.g. for progress.
  std::function<void(int shard, int n_shards)> on_shard_written;
};

// Writes OUT_DIR/{config.json, generation_config.json, model*.safetensors[, index]}.
//
// All layouts are the same model: each value is drawn from a stream keyed by (seed, HF
// tensor name, HF row), so the mlx4 checkpoint of a seed is exactly the MLX conversion of
// the hf checkpoint of that seed (norms stored as bf16(1 + w), conv1d as [C, K, 1], experts
// split, every matrix quantized with quantize_affine from the bf16 values), and the fp8 one its
// block-wise FP8 quantization (scale = bf16(amax / 448) a 128 x 128 block, e4m3 codes).
// Distributions, N(mean, variance), then rounded to bf16 (A_log is stored F32 but holds
// bf16-exact values, so an HF bf16 run sees the same numbers):
//   embed_tokens N(0, 1); linear layers and experts N(0, 1/fan_in); lm_head 4 x N(0, 1/H);
//   router (mlp.gate) 3 x N(0, 1/H); shared_expert_gate N(0, 1/H); conv1d N(0, 0.25);
//   zero-centred norms (input/post/final/q/k) w ~ U(-0.5, 0.5), i.e. 1 + w in [0.5, 1.5];
//   linear_attn.norm U(0.5, 1.5); A_log, dt_bias U(-1, 1).
// Normals are Irwin-Hall(4) approximations (bounded at 3.5 sigma), which is fine for weights.
// mlx4 quantization: 4-bit group 64 for every matrix whose input dim is a multiple of 64,
// 8-bit group 64 for mlp.gate and mlp.shared_expert_gate (recorded as per-path overrides in
// config.json), plain bf16 `.weight` for a matrix whose input dim is not a multiple of 64.
Status synth_checkpoint(const ModelConfig& cfg, SynthLayout layout, const std::string& out_dir,
                        uint64_t seed = 0);
Status synth_checkpoint(const ModelConfig& cfg, SynthLayout layout, const std::string& out_dir,
                        const SynthOptions& options);

}  // namespace orchid
