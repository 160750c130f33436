// The model in GPU memory: every weight uploaded once and kept quantized (MLX affine codes as
// they are, scale and bias interleaved as bf16 pairs; dense weights as bf16), routed experts
// and the shared expert stacked so that one launch reaches any of them by index.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "orchid/backend/cuda/common/kernels.h"
#include "orchid/model/config.h"
#include "orchid/model/model.h"

namespace orchid::cuda {

// Owns cudaMalloc'd blocks; freed together.
class DeviceArena {
 public:
  DeviceArena() = default;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  ~DeviceArena();
  Expected<void*> alloc(size_t bytes);  // zero-filled, 256-byte aligned
  // n elements of T (at least one).
  template <class T>
  Expected<T*> alloc_n(int64_t n) {
    auto p = alloc(size_t(n > 1 ? n : 1) * sizeof(T));
    if (!p) return p.error();
    return static_cast<T*>(*p);
  }
  int64_t bytes() const { return bytes_; }

 private:
  std::vector<void*> blocks_;
  int64_t bytes_ = 0;
};

struct DevLayer {
  const float* attn_norm = nullptr;  // [n_embd]
  const float* post_norm = nullptr;  // [n_embd]
  // Gated attention.
  DevMatrix q, k, v, o;
  const float* q_norm = nullptr;  // [head_dim]
  const float* k_norm = nullptr;
  // Gated DeltaNet.
  DevMatrix qkv, z, b, a, out;
  const float* conv_w = nullptr;   // [conv_dim, K]
  const float* A_log = nullptr;    // [hv]
  const float* dt_bias = nullptr;  // [hv]
  const float* gnorm = nullptr;    // [dv]
  // MoE: router and shared-expert gate share a format. gate/up/down stack the routed experts
  // and, when it has their shape and format, the shared expert as expert n_expert; otherwise
  // the shared expert is kept apart in sh_gate/sh_up/sh_down (shared_apart).
  DevMatrix router, shared_gate;
  // A q8 router in groups of 64 as its two q4 halves (launch_split_q8: [2 · n_expert, n_embd]) for
  // the prefill's warp-specialised GEMM, which takes q4 only; empty for other formats.
  DevMatrix router_halves;
  DevMatrix gate, up, down;
  bool shared_apart = false;
  DevMatrix sh_gate, sh_up, sh_down;
};

struct DeviceModel {
  ModelConfig config;
  DevMatrix embd, lm_head;
  const float* out_norm = nullptr;
  const float* inv_freq = nullptr;  // [n_rot / 2] RoPE frequencies
  std::vector<DevLayer> layers;
  DeviceArena arena;
  int64_t weight_bytes() const { return arena.bytes(); }
};

// Uploads a loaded model. Fails with a clear message when a shape is beyond the kernels or the
// device runs out of memory.
Expected<std::unique_ptr<DeviceModel>> upload_model(const Model& model);

// Random weights of `config`'s shapes made directly in device memory, quantized as MLX does
// (4-bit group 64; router and shared-expert gate 8-bit): for speed runs of full-size shapes.
Expected<std::unique_ptr<DeviceModel>> synthetic_device_model(const ModelConfig& config,
                                                              uint64_t seed);

// Fills L.router_halves when L.router is q8 in groups of 64 (device memory from `arena`).
Status add_router_halves(DeviceArena& arena, DevLayer& L);

// Bytes a matrix occupies on the device (codes + scale/bias pairs).
int64_t matrix_bytes(const DevMatrix& m);

}  // namespace orchid::cuda
