// Full-size random weights made on the GPU (no checkpoint on disk): codes are random bits,
// (scale, bias) pairs spread each row's values over about ±1/√cols so activations stay O(1).
#include <cuda_runtime_api.h>

#include <cmath>

#include "orchid/backend/cuda/model/device_model.h"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {
namespace {

class SynthMaker {
 public:
  SynthMaker(DeviceArena& a, uint64_t seed) : a_(a), seed_(seed) {}

  Expected<DevMatrix> matrix(int rows, int cols, int bits) {
    DevMatrix m;
    m.rows = rows, m.cols = cols, m.group = 64;
    m.fmt = bits == 4 ? DevFormat::q4 : DevFormat::q8;
    m.units = cols / unit_elems(m.fmt);
    const int64_t groups = int64_t(rows) * (cols / 64);
    auto w = a_.alloc(size_t(rows) * m.units * 16);
    if (!w) return w.error();
    auto sb = a_.alloc(size_t(groups) * 4);
    if (!sb) return sb.error();
    ORCHID_TRY(launch_fill_random(*w, int64_t(rows) * m.units * 4, next(), nullptr));
    ORCHID_TRY(launch_fill_scale_bias(static_cast<uint32_t*>(*sb), groups,
                                      std::sqrt(3.f / float(cols)), bits, next(), nullptr));
    m.w = *w;
    m.sb = static_cast<const uint32_t*>(*sb);
    ORCHID_TRY(set_scaled_code_exp(m, nullptr));
    return m;
  }

  Expected<const float*> vec(int64_t n, float lo, float hi) {
    auto p = a_.alloc(size_t(n) * 4);
    if (!p) return p.error();
    ORCHID_TRY(launch_fill_uniform_f32(static_cast<float*>(*p), n, lo, hi, next(), nullptr));
    return static_cast<const float*>(*p);
  }

 private:
  uint64_t next() { return seed_ += 0x9e3779b97f4a7c15ull; }
  DeviceArena& a_;
  uint64_t seed_;
};

}  // namespace

Expected<std::unique_ptr<DeviceModel>> synthetic_device_model(const ModelConfig& c, uint64_t seed) {
  auto dm = std::make_unique<DeviceModel>();
  dm->config = c;
  SynthMaker mk(dm->arena, seed);
#define ORCHID_MK(dst, expr)    \
  do {                          \
    auto r_ = (expr);           \
    if (!r_) return r_.error(); \
    dst = *r_;                  \
  } while (0)
  const int H = c.n_embd, hd = c.head_dim;
  ORCHID_MK(dm->embd, mk.matrix(int(c.n_vocab), H, 4));
  ORCHID_MK(dm->lm_head, mk.matrix(int(c.n_vocab), H, 4));
  ORCHID_MK(dm->out_norm, mk.vec(H, 0.9f, 1.1f));
  {
    std::vector<float> f(size_t(std::max(c.n_rot / 2, 1)));
    for (int i = 0; i < c.n_rot / 2; ++i)
      f[size_t(i)] = float(1.0 / std::pow(c.rope_theta, double(2 * i) / double(c.n_rot)));
    auto p = dm->arena.alloc(f.size() * 4);
    if (!p) return p.error();
    if (cudaMemcpy(*p, f.data(), f.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess)
      return err("cudaMemcpy of RoPE frequencies failed");
    dm->inv_freq = static_cast<const float*>(*p);
  }
  const int ff = c.n_ff_exp, E1 = c.n_expert + 1;
  for (int l = 0; l < c.n_layer; ++l) {
    DevLayer L;
    ORCHID_MK(L.attn_norm, mk.vec(H, 0.9f, 1.1f));
    ORCHID_MK(L.post_norm, mk.vec(H, 0.9f, 1.1f));
    if (c.layer_types[size_t(l)] == LayerKind::full_attention) {
      ORCHID_MK(L.q, mk.matrix(c.n_head * hd * 2, H, 4));
      ORCHID_MK(L.k, mk.matrix(c.n_head_kv * hd, H, 4));
      ORCHID_MK(L.v, mk.matrix(c.n_head_kv * hd, H, 4));
      ORCHID_MK(L.o, mk.matrix(H, c.n_head * hd, 4));
      ORCHID_MK(L.q_norm, mk.vec(hd, 0.9f, 1.1f));
      ORCHID_MK(L.k_norm, mk.vec(hd, 0.9f, 1.1f));
    } else {
      const int hv = c.lin_n_head_v;
      ORCHID_MK(L.qkv, mk.matrix(c.lin_conv_dim(), H, 4));
      ORCHID_MK(L.z, mk.matrix(c.lin_value_dim(), H, 4));
      ORCHID_MK(L.b, mk.matrix(hv, H, 4));
      ORCHID_MK(L.a, mk.matrix(hv, H, 4));
      ORCHID_MK(L.out, mk.matrix(H, c.lin_value_dim(), 4));
      ORCHID_MK(L.conv_w, mk.vec(int64_t(c.lin_conv_dim()) * c.lin_conv_kernel, -0.5f, 0.5f));
      ORCHID_MK(L.A_log, mk.vec(hv, 0.f, 2.f));
      ORCHID_MK(L.dt_bias, mk.vec(hv, -1.f, 1.f));
      ORCHID_MK(L.gnorm, mk.vec(c.lin_head_dim_v, 0.9f, 1.1f));
    }
    ORCHID_MK(L.router, mk.matrix(c.n_expert, H, 8));
    ORCHID_MK(L.shared_gate, mk.matrix(1, H, 8));
    ORCHID_TRY(add_router_halves(dm->arena, L));
    ORCHID_MK(L.gate, mk.matrix(E1 * ff, H, 4));
    ORCHID_MK(L.up, mk.matrix(E1 * ff, H, 4));
    ORCHID_MK(L.down, mk.matrix(E1 * H, ff, 4));
    dm->layers.push_back(L);
  }
#undef ORCHID_MK
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
    return err("making synthetic weights: ", cudaGetErrorString(e));
  return dm;
}

}  // namespace orchid::cuda
