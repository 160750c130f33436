// The CPU backend: the reference forward pass (fp32 activations, weights as stored),
// multi-threaded, prefill in bounded chunks, tiled attention, persistent decode state.
#pragma once

#include <memory>

#include "orchid/backend/backend.h"
#include "orchid/model/model.h"

namespace orchid {

// Precision of the values in the full-attention layers' KV cache.
enum class KvPrecision { fp32, bf16 };

struct CpuOptions {
  // bf16: K and V are rounded to bf16 (nearest even) as they enter the cache and stay stored as
  // fp32, which emulates the CUDA cache's precision on the reference path; memory is unchanged.
  KvPrecision kv = KvPrecision::fp32;
};

// ORCHID_CPU_KV: unset or "fp32" → fp32, "bf16" → bf16; any other value is an error.
Expected<CpuOptions> cpu_options_from_env();

// PRECONDITION: `model` outlives the backend.
std::unique_ptr<Backend> make_cpu_backend(const Model& model, const CpuOptions& opts = {});

}  // namespace orchid
