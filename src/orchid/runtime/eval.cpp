#include "orchid/runtime/eval.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace orchid {
namespace {

// log Σ exp(row), in double; the row's argmax (lowest id among ties) through `best`.
double log_sum_exp(const float* row, int64_t vocab, int64_t& best) {
  best = 0;
  for (int64_t v = 1; v < vocab; ++v)
    if (row[v] > row[best]) best = v;
  double s = 0;
  for (int64_t v = 0; v < vocab; ++v) s += std::exp(double(row[v]) - double(row[best]));
  return double(row[best]) + std::log(s);
}

bool all_finite(const float* row, int64_t vocab) {
  return std::all_of(row, row + vocab, [](float x) { return std::isfinite(x); });
}

}  // namespace

double EvalStats::perplexity() const {
  return predictions ? std::exp(mean_nll()) : std::numeric_limits<double>::quiet_NaN();
}
double EvalStats::mean_nll() const {
  return predictions ? nll_sum / double(predictions) : std::numeric_limits<double>::quiet_NaN();
}
double EvalStats::top1_agreement() const {
  return compared ? double(agree) / double(compared) : std::numeric_limits<double>::quiet_NaN();
}
double EvalStats::mean_kl() const {
  return compared ? kl_sum / double(compared) : std::numeric_limits<double>::quiet_NaN();
}

Status add_eval_positions(EvalStats& stats, std::span<const float> logits, int64_t vocab,
                          std::span<const int32_t> ids, int64_t first, const float* ref) {
  if (vocab <= 0 || logits.size() % size_t(vocab) != 0)
    return err("eval: ", logits.size(), " logits are not whole rows of ", vocab);
  const int64_t n = int64_t(logits.size()) / vocab, total = int64_t(ids.size());
  if (first < 0 || first + n > total)
    return err("eval: positions ", first, "..", first + n, " outside a sequence of ", total);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = first + i;
    const float* row = logits.data() + i * vocab;
    if (!all_finite(row, vocab)) return err("eval: non-finite logits at position ", t);
    int64_t best = 0;
    const double lse = log_sum_exp(row, vocab, best);
    if (t + 1 < total) {
      const int32_t next = ids[size_t(t + 1)];
      if (next < 0 || next >= vocab) return err("eval: token ", next, " outside the vocabulary");
      stats.nll_sum += lse - double(row[next]);
      ++stats.predictions;
    }
    if (!ref) continue;
    const float* r = ref + i * vocab;
    if (!all_finite(r, vocab)) return err("eval: non-finite reference logits at position ", t);
    int64_t ref_best = 0;
    const double ref_lse = log_sum_exp(r, vocab, ref_best);
    double kl = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double lp_ref = double(r[v]) - ref_lse, lp = double(row[v]) - lse;
      kl += std::exp(lp_ref) * (lp_ref - lp);
    }
    stats.kl_sum += std::max(kl, 0.0);  // rounding can leave −1e-17 for identical rows
    stats.agree += best == ref_best;
    ++stats.compared;
  }
  return {};
}

}  // namespace orchid
