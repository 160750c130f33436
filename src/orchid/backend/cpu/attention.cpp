// CPU gated attention: q/gate split per head, q/k RMSNorm, partial rotate-half RoPE, causal
// GQA attention tiled with an online softmax (no [T, n_ctx] score matrix), sigmoid gate, o_proj.
#include <algorithm>
#include <cmath>
#include <limits>

#include "orchid/backend/cpu/cpu_layers.h"
#include "orchid/backend/cpu/ops.h"
#include "orchid/util/bf16.h"
#include "orchid/util/thread_pool.h"

namespace orchid::cpu {
namespace {

// Rotate-half RoPE on the first n_rot dims of one head vector, position p. Angles are formed
// in fp32 as HF does (inv_freq · p), so long positions round the same way.
void rope(float* x, int n_rot, double theta, int64_t p) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const float inv_freq = float(1.0 / std::pow(theta, double(2 * i) / double(n_rot)));
    const float ang = inv_freq * float(p);
    const float c = std::cos(ang), s = std::sin(ang);
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

constexpr int64_t kQueryTile = 16;  // query rows per work item
constexpr int64_t kKeyTile = 64;    // keys scored at once per query row

}  // namespace

void attention_forward(const Matmul& mm, const ModelConfig& c, const AttentionWeights& w,
                       CpuState& st, int layer, const float* x, int64_t T, int64_t pos0,
                       float* out) {
  const int64_t H = c.n_embd, hd = c.head_dim, nh = c.n_head, nkv = c.n_head_kv;
  const int64_t group = nh / nkv;
  std::vector<float> qg(T * nh * 2 * hd), kk(T * nkv * hd), vv(T * nkv * hd);
  mm.many({{&w.q_proj, qg.data()}, {&w.k_proj, kk.data()}, {&w.v_proj, vv.data()}}, x, T);

  // Normalise + rotate q in place inside qg; k likewise, then append K/V to the cache.
  std::vector<float>& kc = st.k[size_t(layer)];
  std::vector<float>& vc = st.v[size_t(layer)];
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < nh; ++h) {
      float* q = qg.data() + (t * nh + h) * 2 * hd;
      rms_norm(q, w.q_norm.data(), c.rms_norm_eps, hd, q);
      rope(q, c.n_rot, c.rope_theta, pos0 + t);
    }
    for (int64_t g = 0; g < nkv; ++g) {
      float* k = kk.data() + (t * nkv + g) * hd;
      rms_norm(k, w.k_norm.data(), c.rms_norm_eps, hd, k);
      rope(k, c.n_rot, c.rope_theta, pos0 + t);
    }
  }
  if (st.kv_bf16) {
    // Emulates the CUDA cache's precision (bf16, nearest even); storage stays fp32.
    std::transform(kk.begin(), kk.end(), kc.begin() + pos0 * nkv * hd, round_bf16);
    std::transform(vv.begin(), vv.end(), vc.begin() + pos0 * nkv * hd, round_bf16);
  } else {
    std::copy(kk.begin(), kk.end(), kc.begin() + pos0 * nkv * hd);
    std::copy(vv.begin(), vv.end(), vc.begin() + pos0 * nkv * hd);
  }

  // o[t, h*hd + d]: attention output per head, then gated by sigmoid(gate).
  std::vector<float> o(T * nh * hd);
  const float scale = 1.f / std::sqrt(float(hd));
  const int64_t n_qtiles = (T + kQueryTile - 1) / kQueryTile;
  // A work item: a query tile of `hb` heads sharing one KV head, which read each key and value
  // row once for all of them (one head at a time read the group's K and V `group` times: at
  // decode, 530 keys, 0.76 ms of an attention layer's step). hb: the whole group, unless that
  // leaves threads without work.
  int64_t hb = group;
  while (hb % 2 == 0 && nkv * (group / hb) * n_qtiles < default_pool().size()) hb /= 2;
  const int64_t n_hblocks = nh / hb;
  default_pool().parallel_for(n_hblocks * n_qtiles, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores(size_t(hb * kKeyTile)), acc(size_t(hb * hd));
    std::vector<float> m(static_cast<size_t>(hb)), l(static_cast<size_t>(hb)),
        corr(static_cast<size_t>(hb));
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t h0 = (item / n_qtiles) * hb, g = h0 / group;
      const int64_t t0 = (item % n_qtiles) * kQueryTile, t1 = std::min(T, t0 + kQueryTile);
      for (int64_t t = t0; t < t1; ++t) {
        auto query = [&](int64_t i) { return qg.data() + (t * nh + h0 + i) * 2 * hd; };
        const int64_t n_keys = pos0 + t + 1;  // causal: keys 0..pos0+t
        std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
        std::fill(l.begin(), l.end(), 0.f);
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t k0 = 0; k0 < n_keys; k0 += kKeyTile) {
          const int64_t k1 = std::min(n_keys, k0 + kKeyTile);
          for (int64_t j = k0; j < k1; ++j) {
            const float* krow = kc.data() + (j * nkv + g) * hd;
            for (int64_t i = 0; i < hb; ++i)
              scores[size_t(i * kKeyTile + j - k0)] = dot(query(i), krow, hd) * scale;
          }
          for (int64_t i = 0; i < hb; ++i) {
            const float* s = scores.data() + i * kKeyTile;
            const float tile_max = *std::max_element(s, s + (k1 - k0));
            const float m_new = std::max(m[size_t(i)], tile_max);
            corr[size_t(i)] = std::exp(m[size_t(i)] - m_new);
            l[size_t(i)] *= corr[size_t(i)];
            m[size_t(i)] = m_new;
          }
          for (int64_t j = k0; j < k1; ++j) {
            const float* vrow = vc.data() + (j * nkv + g) * hd;
            for (int64_t i = 0; i < hb; ++i) {
              const float p = std::exp(scores[size_t(i * kKeyTile + j - k0)] - m[size_t(i)]);
              l[size_t(i)] += p;
              // The tile's correction folded into its first value row's update.
              scale_add(acc.data() + i * hd, j == k0 ? corr[size_t(i)] : 1.f, p, vrow, hd);
            }
          }
        }
        for (int64_t i = 0; i < hb; ++i) {
          const float* gate = query(i) + hd;
          const float* a = acc.data() + i * hd;
          float* orow = o.data() + (t * nh + h0 + i) * hd;
          for (int64_t d = 0; d < hd; ++d) orow[d] = a[d] / l[size_t(i)] * sigmoid(gate[d]);
        }
      }
    }
  });
  mm(w.o_proj, o.data(), T, out);
  (void)H;
}

}  // namespace orchid::cpu
