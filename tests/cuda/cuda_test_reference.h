// Double-precision references shared by the CUDA kernel tests: the RMSNorm'd GEMV input and
// the MoE routing.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace orchid::test {

// x̂ as the kernels should see it: x, or x · rsqrt(mean(x²) + eps) · norm.
inline std::vector<double> x_hat(const std::vector<float>& x, const std::vector<float>* norm,
                                 float eps) {
  std::vector<double> v(x.begin(), x.end());
  if (!norm) return v;
  double ss = 0;
  for (double a : v) ss += a * a;
  const double inv = 1.0 / std::sqrt(ss / double(v.size()) + eps);
  for (size_t i = 0; i < v.size(); ++i) v[i] *= inv * (*norm)[i];
  return v;
}

// The largest |x̂| of each element's group of `group` elements (the dp4a kernels quantise x̂ per
// group: cuda_test_matrix.h's dp4a_bound).
inline std::vector<double> group_max_abs(const std::vector<double>& xh, int group) {
  std::vector<double> g(xh.size());
  for (size_t b = 0; b < xh.size(); b += size_t(group)) {
    const size_t e = std::min(xh.size(), b + size_t(group));
    double m = 0;
    for (size_t i = b; i < e; ++i) m = std::max(m, std::fabs(xh[i]));
    for (size_t i = b; i < e; ++i) g[i] = m;
  }
  return g;
}

// MoE routing from logits [E + 1]: softmax over the first E, the top k by probability (ties to
// the lower id), weights renormalised over them; then the shared expert (id E) with
// sigmoid(logits[E]).
struct Routing {
  std::vector<int> sel;   // [k + 1]
  std::vector<double> w;  // [k + 1]
};
inline Routing reference_routing(const std::vector<float>& logits, int E, int k) {
  std::vector<double> prob(static_cast<size_t>(E));
  const double mx = *std::max_element(logits.begin(), logits.begin() + E);
  for (int e = 0; e < E; ++e) prob[size_t(e)] = std::exp(double(logits[size_t(e)]) - mx);
  std::vector<int> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
  Routing r;
  r.sel.assign(order.begin(), order.begin() + k);
  double top = 0;
  for (int i = 0; i < k; ++i) top += prob[size_t(r.sel[size_t(i)])];
  for (int i = 0; i < k; ++i) r.w.push_back(prob[size_t(r.sel[size_t(i)])] / top);
  r.sel.push_back(E);
  r.w.push_back(1.0 / (1.0 + std::exp(-double(logits[size_t(E)]))));
  return r;
}

}  // namespace orchid::test
