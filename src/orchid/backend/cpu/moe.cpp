// CPU sparse MoE: softmax router, top-k, renormalised weights, SwiGLU experts run over the
// rows routed to each, sigmoid-gated shared expert. Exact path: weights dequantized once per
// expert per chunk. Fast path: every active expert's (and the shared expert's) gate/up rows in
// one fan-out over the threads, then every down — at decode a layer's 9 experts are a few
// hundred microseconds of work, too little to wake the threads 27 times for.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "orchid/backend/cpu/cpu_layers.h"
#include "orchid/backend/cpu/ops.h"
#include "orchid/backend/cpu/qmatmul.h"
#include "orchid/util/scratch.h"
#include "orchid/util/thread_pool.h"

namespace orchid::cpu {
namespace {

// y[n, I] = silu(x·gateᵀ) ⊙ (x·upᵀ), then out[n, H] = y·downᵀ.
void swiglu_ffn(const Matmul& mm, const QuantMatrix& gate, const QuantMatrix& up,
                const QuantMatrix& down, const float* x, int64_t n, float* out) {
  const int64_t I = gate.rows;
  std::vector<float> g(n * I), u(n * I);
  mm.many({{&gate, g.data()}, {&up, u.data()}}, x, n);
  for (int64_t i = 0; i < n * I; ++i) g[size_t(i)] = silu(g[size_t(i)]) * u[size_t(i)];
  mm(down, g.data(), n, out);
}

// One expert's share of a chunk on the fast path: its tokens' rows in, its output rows out.
struct ExpertRun {
  const QuantMatrix *gate, *up, *down;
  Scratch<float> x, g, u, y;  // [n, H], [n, I], [n, I] (then the SwiGLU), [n, H]
  QuantizedActs xq, hq;
  int64_t n = 0;
};

// Runs each expert's SwiGLU FFN on its gathered rows: gate+up of all experts in one fan-out,
// then all downs. PRECONDITION: every matrix qmm_supported.
void run_experts_fast(std::vector<ExpertRun>& runs, CpuIsa isa) {
  constexpr int64_t kRows = 16;  // rows of one matrix per work item
  const QmmKernel kernel = qmm_kernel(isa);
  struct Item {
    ExpertRun* run;
    int which;  // 0 gate, 1 up, 2 down
    int64_t r0;
  };
  std::vector<Item> items;
  std::vector<QmmActs> acts(runs.size());
  auto fan_out = [&] {
    default_pool().parallel_for(int64_t(items.size()), 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const Item& it = items[size_t(i)];
        ExpertRun& e = *it.run;
        const QuantMatrix& M = it.which == 0 ? *e.gate : it.which == 1 ? *e.up : *e.down;
        float* Y = it.which == 0 ? e.g.data() : it.which == 1 ? e.u.data() : e.y.data();
        const size_t k = size_t(&e - runs.data());
        kernel(qmm_weights(M), acts[k], it.r0, std::min(M.rows, it.r0 + kRows), Y, M.rows);
      }
    });
  };
  // Each expert's inputs are quantized on the threads too: at a 512-token prefill these loops
  // (and the SwiGLU's 2M exponentials a layer) ran on one thread while the others waited.
  // (At decode, one row an expert, that is too little work to wake a thread for.)
  const int64_t n_runs = int64_t(runs.size()), rows = runs.back().n;
  auto each_run = [&](auto&& f) {
    default_pool().parallel_for(n_runs, rows < 16 ? n_runs : 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) f(runs[size_t(k)], size_t(k));
    });
  };
  each_run([&](ExpertRun& e, size_t k) {
    e.xq.quantize(e.x.data(), e.n, e.gate->cols);
    acts[k] = e.xq.view(e.gate->group);
    // gate and up share the activations (fast_ffn checked their groups agree).
    e.g.resize(size_t(e.n * e.gate->rows));
    e.u.resize(size_t(e.n * e.up->rows));
  });
  for (ExpertRun& e : runs) {
    for (int64_t r = 0; r < e.gate->rows; r += kRows) items.push_back({&e, 0, r});
    for (int64_t r = 0; r < e.up->rows; r += kRows) items.push_back({&e, 1, r});
  }
  fan_out();
  items.clear();
  each_run([&](ExpertRun& e, size_t k) {
    for (size_t i = 0; i < e.g.size(); ++i) e.g[i] = silu(e.g[i]) * e.u[i];
    e.hq.quantize(e.g.data(), e.n, e.down->cols);
    acts[k] = e.hq.view(e.down->group);
    e.y.resize(size_t(e.n * e.down->rows));
  });
  for (ExpertRun& e : runs)
    for (int64_t r = 0; r < e.down->rows; r += kRows) items.push_back({&e, 2, r});
  fan_out();
}

bool fast_ffn(const QuantMatrix& gate, const QuantMatrix& up, const QuantMatrix& down) {
  return qmm_supported(gate) && qmm_supported(up) && qmm_supported(down) && gate.bits == up.bits &&
         gate.group == up.group && gate.cols == up.cols;
}

}  // namespace

void moe_forward(const Matmul& mm, const ModelConfig& c, const MoeWeights& w, const float* x,
                 int64_t T, float* out) {
  const int64_t H = c.n_embd, E = c.n_expert, k = c.n_expert_used;
  Scratch<float> logits(T * E);
  mm(w.router, x, T, logits.data());

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
  Scratch<float> shared(T * H);
  std::vector<float> sg(T);
  bool fast = mm.fast && fast_ffn(w.shared_gate, w.shared_up, w.shared_down);
  for (int64_t e = 0; fast && e < E; ++e)
    fast = rows_of[size_t(e)].empty() ||
           fast_ffn(w.gate[size_t(e)], w.up[size_t(e)], w.down[size_t(e)]);
  if (fast) {
    std::vector<ExpertRun> runs;
    std::vector<int64_t> expert_of;
    for (int64_t e = 0; e < E; ++e) {
      const auto& rows = rows_of[size_t(e)];
      if (rows.empty()) continue;
      ExpertRun& r = runs.emplace_back();
      r.gate = &w.gate[size_t(e)], r.up = &w.up[size_t(e)], r.down = &w.down[size_t(e)];
      r.n = int64_t(rows.size());
      expert_of.push_back(e);
    }
    const int64_t n_run = int64_t(expert_of.size());
    default_pool().parallel_for(n_run, T < 16 ? n_run : 1, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        ExpertRun& r = runs[size_t(j)];
        const auto& rows = rows_of[size_t(expert_of[size_t(j)])];
        r.x.resize(size_t(r.n * H));
        for (int64_t i = 0; i < r.n; ++i)
          std::copy(x + rows[size_t(i)].first * H, x + (rows[size_t(i)].first + 1) * H,
                    r.x.begin() + i * H);
      }
    });
    ExpertRun& s = runs.emplace_back();
    s.gate = &w.shared_gate, s.up = &w.shared_up, s.down = &w.shared_down, s.n = T;
    s.x.assign(x, x + T * H);
    run_experts_fast(runs, mm.isa);
    // Ascending expert id, as HF accumulates; the threads split the columns, so each output
    // element sums in the same order as on one thread.
    default_pool().parallel_for(H, T < 16 ? H : 256, [&](int64_t d0, int64_t d1) {
      for (size_t j = 0; j + 1 < runs.size(); ++j) {
        const auto& rows = rows_of[size_t(expert_of[j])];
        for (size_t i = 0; i < rows.size(); ++i) {
          float* o = out + rows[i].first * H;
          const float* y = runs[j].y.data() + int64_t(i) * H;
          for (int64_t d = d0; d < d1; ++d) o[d] += rows[i].second * y[d];
        }
      }
    });
    shared = std::move(runs.back().y);
  } else {
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
      swiglu_ffn(mm, w.gate[size_t(e)], w.up[size_t(e)], w.down[size_t(e)], xe.data(), n,
                 ye.data());
      for (int64_t i = 0; i < n; ++i) {
        float* o = out + rows[size_t(i)].first * H;
        const float wt = rows[size_t(i)].second;
        for (int64_t d = 0; d < H; ++d) o[d] += wt * ye[size_t(i * H + d)];
      }
    }
    swiglu_ffn(mm, w.shared_gate, w.shared_up, w.shared_down, x, T, shared.data());
  }
  mm(w.shared_expert_gate, x, T, sg.data());
  for (int64_t t = 0; t < T; ++t) {
    const float gate = sigmoid(sg[size_t(t)]);
    for (int64_t d = 0; d < H; ++d) out[t * H + d] += gate * shared[size_t(t * H + d)];
  }
}

}  // namespace orchid::cpu
