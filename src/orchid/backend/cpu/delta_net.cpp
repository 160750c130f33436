// CPU Gated DeltaNet: projections, causal depthwise conv with carried state + SiLU, q/k L2
// norms, β and g, the delta-rule recurrence (fp32 state [dk, dv] per value head), gated
// RMSNorm, out_proj. Prefill runs the same recurrence token by token as decode.
#include <algorithm>
#include <cmath>

#include "orchid/backend/cpu/cpu_layers.h"
#include "orchid/backend/cpu/ops.h"
#include "orchid/util/scratch.h"
#include "orchid/util/thread_pool.h"

namespace orchid::cpu {
namespace {

// x · rsqrt(Σx² + 1e-6): HF's l2norm (eps on the sum, fixed, not rms_norm_eps).
void l2_normalize(float* x, int64_t n) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace

void delta_net_forward(const Matmul& mm, const ModelConfig& c, const DeltaNetWeights& w,
                       CpuState& st, int layer, const float* x, int64_t T, float* out) {
  const int64_t C = c.lin_conv_dim(), K = c.lin_conv_kernel;
  const int64_t hk = c.lin_n_head_k, hv = c.lin_n_head_v;
  const int64_t dk = c.lin_head_dim_k, dv = c.lin_head_dim_v;
  const int64_t kd = c.lin_key_dim(), vd = c.lin_value_dim();
  Scratch<float> qkv(T * C), z(T * vd), b(T * hv), a(T * hv);
  mm.many({{&w.in_proj_qkv, qkv.data()},
           {&w.in_proj_z, z.data()},
           {&w.in_proj_b, b.data()},
           {&w.in_proj_a, a.data()}},
          x, T);

  // Causal depthwise conv over [state (K-1 raw inputs) | this chunk], then SiLU, in place.
  std::vector<float>& conv_state = st.conv[size_t(layer)];  // [C, K-1]
  // One token (decode) is 8,192 channels of K taps: on the calling thread (on the pool it took
  // 0.12 ms a layer).
  default_pool().parallel_for(C, T == 1 ? C : 64, [&](int64_t c0, int64_t c1) {
    std::vector<float> window(T + K - 1);
    for (int64_t ch = c0; ch < c1; ++ch) {
      float* s = conv_state.data() + ch * (K - 1);
      std::copy(s, s + K - 1, window.begin());
      for (int64_t t = 0; t < T; ++t) window[size_t(K - 1 + t)] = qkv[size_t(t * C + ch)];
      const float* taps = w.conv.data() + ch * K;
      for (int64_t t = 0; t < T; ++t) {
        float sum = 0.f;
        for (int64_t j = 0; j < K; ++j) sum += taps[j] * window[size_t(t + j)];
        qkv[size_t(t * C + ch)] = silu(sum);
      }
      std::copy(window.end() - (K - 1), window.end(), s);
    }
  });

  // Per token: L2-normalise q and k per key head, scale q by 1/√dk.
  const float q_scale = 1.f / std::sqrt(float(dk));
  for (int64_t t = 0; t < T; ++t) {
    float* row = qkv.data() + t * C;
    for (int64_t h = 0; h < hk; ++h) {
      l2_normalize(row + h * dk, dk);
      l2_normalize(row + kd + h * dk, dk);
      for (int64_t i = 0; i < dk; ++i) row[h * dk + i] *= q_scale;
    }
  }

  // Recurrence per value head j (key head j / (hv/hk)); o [T, vd] then gated RMSNorm.
  Scratch<float> o(T * vd);  // every element written by the recurrence
  const int64_t ratio = hv / hk;
  default_pool().parallel_for(hv, 1, [&](int64_t j0, int64_t j1) {
    std::vector<float> mem(dv);
    for (int64_t j = j0; j < j1; ++j) {
      float* S = st.rec[size_t(layer)].data() + j * dk * dv;  // [dk, dv]
      const int64_t kh = j / ratio;
      const float a_neg = -std::exp(w.A_log[size_t(j)]);
      for (int64_t t = 0; t < T; ++t) {
        const float* row = qkv.data() + t * C;
        const float* q = row + kh * dk;
        const float* k = row + kd + kh * dk;
        const float* v = row + 2 * kd + j * dv;
        const float beta = sigmoid(b[size_t(t * hv + j)]);
        const float decay =
            std::exp(a_neg * softplus(a[size_t(t * hv + j)] + w.dt_bias[size_t(j)]));
        // S ← decay·S;  mem = Sᵀk;  δ = β(v − mem);  S ← S + k δᵀ;  o = Sᵀq.
        std::fill(mem.begin(), mem.end(), 0.f);
        for (int64_t i = 0; i < dk; ++i) {
          float* Si = S + i * dv;
          for (int64_t d = 0; d < dv; ++d) {
            Si[d] *= decay;
            mem[size_t(d)] += Si[d] * k[i];
          }
        }
        for (int64_t d = 0; d < dv; ++d) mem[size_t(d)] = beta * (v[d] - mem[size_t(d)]);
        float* od = o.data() + t * vd + j * dv;
        std::fill(od, od + dv, 0.f);
        for (int64_t i = 0; i < dk; ++i) {
          float* Si = S + i * dv;
          for (int64_t d = 0; d < dv; ++d) {
            Si[d] += k[i] * mem[size_t(d)];
            od[d] += Si[d] * q[i];
          }
        }
        // Gated RMSNorm: normalise o, scale by the plain weight, gate with silu(z).
        rms_norm(od, w.norm.data(), c.rms_norm_eps, dv, od);
        const float* zz = z.data() + t * vd + j * dv;
        for (int64_t d = 0; d < dv; ++d) od[d] *= silu(zz[d]);
      }
    }
  });
  mm(w.out_proj, o.data(), T, out);
}

}  // namespace orchid::cpu
