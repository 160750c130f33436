// CPU sparse MoE: softmax router, top-k, renormalised weights, SwiGLU experts run over the
// rows routed to each (weights dequantized once per expert per chunk), sigmoid-gated shared
// expert.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "orchid/backend/cpu/cpu_layers.h"
#include "orchid/backend/cpu/ops.h"

namespace orchid::cpu {
namespace {

// y[n, I] = silu(x·gateᵀ) ⊙ (x·upᵀ), then out[n, H] = y·downᵀ.
void swiglu_ffn(const QuantMatrix& gate, const QuantMatrix& up, const QuantMatrix& down,
                const float* x, int64_t n, float* out) {
  const int64_t I = gate.rows;
  std::vector<float> g(n * I), u(n * I);
  matmul(gate, x, n, g.data());
  matmul(up, x, n, u.data());
  for (int64_t i = 0; i < n * I; ++i) g[size_t(i)] = silu(g[size_t(i)]) * u[size_t(i)];
  matmul(down, g.data(), n, out);
}

}  // namespace

void moe_forward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t T, float* out) {
  const int64_t H = c.n_embd, E = c.n_expert, k = c.n_expert_used;
  std::vector<float> logits(T * E);
  matmul(w.router, x, T, logits.data());

  // Route: softmax over experts, top-k (ties to the lower id), renormalise the k weights.
  std::vector<std::vector<std::pair<int64_t, float>>> rows_of(E);  // (token, weight)
  std::vector<int> order(E);
  for (int64_t t = 0; t < T; ++t) {
    float* l = logits.data() + t * E;
    const float mx = *std::max_element(l, l + E);
    float sum = 0.f;
    for (int64_t e = 0; e < E; ++e) sum += (l[e] = std::exp(l[e] - mx));
    for (int64_t e = 0; e < E; ++e) l[e] /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    float top_sum = 0.f;
    for (int64_t i = 0; i < k; ++i) top_sum += l[order[size_t(i)]];
    for (int64_t i = 0; i < k; ++i)
      rows_of[size_t(order[size_t(i)])].push_back({t, l[order[size_t(i)]] / top_sum});
  }

  std::fill(out, out + T * H, 0.f);
  std::vector<float> xe, ye;
  for (int64_t e = 0; e < E; ++e) {  // ascending expert id, as HF accumulates
    const auto& rows = rows_of[size_t(e)];
    if (rows.empty()) continue;
    const int64_t n = int64_t(rows.size());
    xe.resize(size_t(n * H));
    ye.resize(size_t(n * H));
    for (int64_t i = 0; i < n; ++i)
      std::copy(x + rows[size_t(i)].first * H, x + (rows[size_t(i)].first + 1) * H,
                xe.begin() + i * H);
    swiglu_ffn(w.gate[size_t(e)], w.up[size_t(e)], w.down[size_t(e)], xe.data(), n, ye.data());
    for (int64_t i = 0; i < n; ++i) {
      float* o = out + rows[size_t(i)].first * H;
      const float wt = rows[size_t(i)].second;
      for (int64_t d = 0; d < H; ++d) o[d] += wt * ye[size_t(i * H + d)];
    }
  }

  std::vector<float> shared(T * H), sg(T);
  swiglu_ffn(w.shared_gate, w.shared_up, w.shared_down, x, T, shared.data());
  matmul(w.shared_expert_gate, x, T, sg.data());
  for (int64_t t = 0; t < T; ++t) {
    const float gate = sigmoid(sg[size_t(t)]);
    for (int64_t d = 0; d < H; ++d) out[t * H + d] += gate * shared[size_t(t * H + d)];
  }
}

}  // namespace orchid::cpu
