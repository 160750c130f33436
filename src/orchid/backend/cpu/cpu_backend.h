// The CPU backend: the reference forward pass (fp32 activations, weights as stored),
// multi-threaded, prefill in bounded chunks, tiled attention, persistent decode state.
#pragma once

#include <memory>

#include "orchid/backend/backend.h"
#include "orchid/backend/cpu/isa.h"
#include "orchid/model/model.h"

namespace orchid {

// Precision of the values in the full-attention layers' KV cache.
enum class KvPrecision { fp32, bf16 };

struct CpuOptions {
  // bf16: K and V are rounded to bf16 (nearest even) as they enter the cache and stay stored as
  // fp32, which emulates the CUDA cache's precision on the reference path; memory is unchanged.
  KvPrecision kv = KvPrecision::fp32;
  // false: the exact path (weights dequantized to fp32, fp32 dots: matches HF fp32 to ~1e-5).
  // true: quantized matrices multiply int8 activations with their stored codes on `isa`
  // (backend/cpu/qmatmul.h), judged by the fidelity contract (docs/fidelity.md).
  bool fast = false;
  cpu::CpuIsa isa = cpu::CpuIsa::scalar;
};

// The product's choice: the fast path on the detected ISA, unless ORCHID_CPU_EXACT=1 (or the
// CLI's --exact) asks for the exact one. ORCHID_CPU_ISA lowers the ISA (isa.h).
// ORCHID_CPU_KV: unset or "fp32" → fp32, "bf16" → bf16; any other value is an error.
Expected<CpuOptions> cpu_options_from_env();

// PRECONDITION: `model` outlives the backend.
std::unique_ptr<Backend> make_cpu_backend(const Model& model, const CpuOptions& opts = {});

}  // namespace orchid
