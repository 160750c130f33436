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

// Reference rows, one per position, in one of two forms:
//   full:    the logits [vocab];
//   compact: [1 + 2k]: log Σ exp of the full logits row, the ids of its k largest logits
//            (floats, exact below 2²⁴) in descending order of logit, then those k logits.
// The compact form keeps a reference of thousands of positions small (k = 32: 260 bytes a
// position against 4 · vocab). Its KL(reference ‖ model) is taken over the k tokens plus one
// bucket for the rest of the vocabulary: a lower bound of the full KL, short of it only by the
// tail's own divergence (the tail holds ~1e-3 of a trained model's mass).
struct EvalReference {
  const float* rows = nullptr;  // [positions, width], positions as the logits passed with it
  int64_t width = 0;            // vocab (full) or 1 + 2k (compact)
  int64_t top_k = 0;            // 0: full rows; else k

  // The form of rows of `width` floats for a model of `vocab` tokens: full if width == vocab,
  // else compact when width = 1 + 2k with 1 ≤ k < vocab; an error otherwise.
  static Expected<EvalReference> of_width(int64_t width, int64_t vocab);
};

// Adds positions [first, first + n) of a sequence of `total` tokens: logits [n, vocab] of those
// positions, `ids` the whole sequence (position t is scored on ids[t + 1]; the last position of
// the sequence has no next token), `ref` null or the reference rows of the same positions
// (ref->rows points at position `first`'s row). Errors on ids out of the vocabulary, non-finite
// logits and malformed compact rows.
Status add_eval_positions(EvalStats& stats, std::span<const float> logits, int64_t vocab,
                          std::span<const int32_t> ids, int64_t first, const EvalReference* ref);

}  // namespace orchid
