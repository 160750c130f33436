// Teacher-forced evaluation of a model's logits on a token sequence: perplexity of the next
// token at every position and, against reference logits of the same positions (e.g. Hugging
// Face's), top-1 agreement and the mean KL divergence KL(reference ‖ model).
#pragma once

#include <cstdint>
#include <span>

#include "orchid/util/status.h"

namespace orchid {

// Running sums over positions; add chunks of positions in order, then read the results.
struct EvalStats {
  int64_t predictions = 0;  // positions with a next token (all but the sequence's last)
  double nll_sum = 0;       // Σ −log p(next token), nats
  int64_t compared = 0;     // positions compared with the reference
  int64_t agree = 0;        // of those, where both argmaxes (ties: lowest id) are the same
  double kl_sum = 0;        // Σ KL(p_ref ‖ p_model), nats

  double perplexity() const;      // exp(mean NLL); NaN without predictions
  double mean_nll() const;        // nats
  double top1_agreement() const;  // NaN without a reference
  double mean_kl() const;         // nats; NaN without a reference
};

// Adds positions [first, first + n) of a sequence of `total` tokens: logits [n, vocab] of those
// positions, `ids` the whole sequence (position t is scored on ids[t + 1]; the last position of
// the sequence has no next token), `ref` null or the reference logits [n, vocab] of the same
// positions. Errors on ids out of the vocabulary or non-finite logits.
Status add_eval_positions(EvalStats& stats, std::span<const float> logits, int64_t vocab,
                          std::span<const int32_t> ids, int64_t first, const float* ref);

}  // namespace orchid
