// The CUDA backend's public face: availability checks and factories. Plain C++.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "orchid/backend/backend.h"
#include "orchid/model/config.h"
#include "orchid/model/model.h"

namespace orchid {

// OK when a CUDA device of compute capability ≥ 8.0 is present; otherwise says why not.
Status cuda_device_usable();
// Uploads `model` (which must outlive nothing: the backend keeps its own device copy).
Expected<std::unique_ptr<Backend>> make_cuda_backend(const Model& model);
// Random weights of `config`'s shapes made on the device (benchmarks).
Expected<std::unique_ptr<Backend>> make_cuda_synthetic_backend(const ModelConfig& config,
                                                               uint64_t seed);
struct DecodeBenchOptions {
  std::vector<int64_t> contexts;  // tokens of (synthetic) context before decoding
  int tokens = 64;                // decode steps timed per context
  std::vector<int64_t> ablation_contexts = {4096, 32768};
  std::vector<int> batches;  // states decoded at once (each context; profile at the first)
};
// Decode speed of a CUDA backend at each context, per-kernel times at the ablation contexts
// and each switch's matched ablation there; the JSON that bench/results keeps.
Expected<nlohmann::json> cuda_decode_bench(Backend& backend, const DecodeBenchOptions& opts);

struct PrefillBenchOptions {
  std::vector<int64_t> lengths;                               // prompt tokens
  std::vector<int64_t> ablation_lengths = {512, 2048, 8192};  // profile + switch ablations
  std::vector<int64_t> profile_lengths;                       // per-kernel profile only
  std::vector<std::string> variants;  // the ablations to run by name (empty: all of them)
};
// Prefill speed of a CUDA backend per prompt length (from an empty state), per-kernel times and
// the prefill switches' matched ablations at the ablation lengths, memory after the longest.
Expected<nlohmann::json> cuda_prefill_bench(Backend& backend, const PrefillBenchOptions& opts);

// One line describing the device and the model's footprint on it.
std::string cuda_backend_summary(const Backend& backend);

}  // namespace orchid
