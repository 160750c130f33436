// Sampler: softmax with temperature, then top-k, top-p and min-p truncation.
#include "orchid/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace orchid {

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (p_.greedy || p_.temperature <= 0.f) return argmax(logits);
  const int64_t n = int64_t(logits.size());
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  int64_t keep = p_.top_k > 0 ? std::min<int64_t>(p_.top_k, n) : n;
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(),
                    [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  std::vector<double> probs(keep);
  const double mx = logits[size_t(ids[0])];
  double sum = 0.0;
  for (int64_t i = 0; i < keep; ++i)
    sum += probs[size_t(i)] = std::exp((logits[size_t(ids[size_t(i)])] - mx) / p_.temperature);
  for (auto& p : probs) p /= sum;
  // min-p: drop tokens below min_p × the top probability; top-p: smallest prefix ≥ top_p.
  int64_t cut = keep;
  if (p_.min_p > 0.f)
    while (cut > 1 && probs[size_t(cut - 1)] < p_.min_p * probs[0]) --cut;
  if (p_.top_p < 1.f) {
    double acc = 0.0;
    for (int64_t i = 0; i < cut; ++i) {
      acc += probs[size_t(i)];
      if (acc >= p_.top_p) {
        cut = i + 1;
        break;
      }
    }
  }
  std::discrete_distribution<int64_t> dist(probs.begin(), probs.begin() + cut);
  return ids[size_t(dist(rng_))];
}

}  // namespace orchid
