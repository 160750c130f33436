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

Expected<EvalReference> EvalReference::of_width(int64_t width, int64_t vocab) {
  EvalReference r;
  r.width = width;
  if (width == vocab) return r;
  if (width >= 3 && width % 2 == 1 && (width - 1) / 2 < vocab) {
    r.top_k = (width - 1) / 2;
    return r;
  }
  return err("eval: reference rows of ", width, " values fit neither the full form (", vocab,
             " logits) nor the compact one (1 + 2k values, k < ", vocab, ")");
}

namespace {

// KL(ref ‖ model) of one position and the reference's argmax, from a full reference row.
Status compare_full(const float* r, const float* row, int64_t vocab, double lse, double& kl,
                    int64_t& ref_best, int64_t t) {
  if (!all_finite(r, vocab)) return err("eval: non-finite reference logits at position ", t);
  const double ref_lse = log_sum_exp(r, vocab, ref_best);
  kl = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double lp_ref = double(r[v]) - ref_lse, lp = double(row[v]) - lse;
    kl += std::exp(lp_ref) * (lp_ref - lp);
  }
  return {};
}

// The same from a compact row (EvalReference): the k listed tokens, then the rest of the
// vocabulary as one outcome on each side.
Status compare_compact(const float* r, int64_t k, const float* row, int64_t vocab, double lse,
                       double& kl, int64_t& ref_best, int64_t t) {
  if (!all_finite(r, 1 + 2 * k)) return err("eval: non-finite reference values at position ", t);
  const double ref_lse = r[0];
  const float *id = r + 1, *logit = r + 1 + k;
  double p_top = 0, q_top = 0;
  kl = 0;
  for (int64_t i = 0; i < k; ++i) {
    const float v = id[i];
    if (!(v >= 0 && v < float(vocab) && v == std::floor(v)) ||
        (i > 0 && !(logit[i] <= logit[i - 1])) || logit[i] > ref_lse + 1e-4)
      return err("eval: malformed compact reference row at position ", t,
                 " (ids in the vocabulary, logits descending and below their log-sum-exp)");
    const double lp_ref = double(logit[i]) - ref_lse, lp = double(row[int64_t(v)]) - lse;
    const double p = std::exp(lp_ref);
    kl += p * (lp_ref - lp);
    p_top += p, q_top += std::exp(lp);
  }
  const double p_rest = 1 - p_top, q_rest = std::max(1 - q_top, 1e-300);
  if (p_rest > 0) kl += p_rest * std::log(p_rest / q_rest);
  ref_best = int64_t(id[0]);
  return {};
}

}  // namespace

Status add_eval_positions(EvalStats& stats, std::span<const float> logits, int64_t vocab,
                          std::span<const int32_t> ids, int64_t first, const EvalReference* ref) {
  if (vocab <= 0 || logits.size() % size_t(vocab) != 0)
    return err("eval: ", logits.size(), " logits are not whole rows of ", vocab);
  if (ref && ref->width != (ref->top_k ? 1 + 2 * ref->top_k : vocab))
    return err("eval: reference rows of ", ref->width, " values for ", vocab, " tokens");
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
    const float* r = ref->rows + i * ref->width;
    double kl = 0;
    int64_t ref_best = 0;
    ORCHID_TRY(ref->top_k ? compare_compact(r, ref->top_k, row, vocab, lse, kl, ref_best, t)
                          : compare_full(r, row, vocab, lse, kl, ref_best, t));
    stats.kl_sum += std::max(kl, 0.0);  // rounding can leave −1e-17 for identical rows
    stats.agree += best == ref_best;
    ++stats.compared;
  }
  return {};
}

}  // namespace orchid
