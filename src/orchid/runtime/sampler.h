// Token selection from a logits row: greedy, or temperature / top-k / top-p / min-p sampling
// with a seeded generator (host side; the CUDA backend samples on the device).
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace orchid {

struct SamplerParams {
  bool greedy = true;
  float temperature = 1.f;
  int top_k = 0;      // 0: off
  float top_p = 1.f;  // 1: off
  float min_p = 0.f;  // 0: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {}
  int32_t sample(std::span<const float> logits);

 private:
  SamplerParams p_;
  std::mt19937_64 rng_;
};

// Index of the largest logit (the lowest index on ties).
int32_t argmax(std::span<const float> logits);

}  // namespace orchid
