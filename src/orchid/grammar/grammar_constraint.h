// A TokenConstraint from a grammar: the tokens whose bytes keep the matcher alive, and the
// stop ids once the grammar may end. Optionally dormant until a marker has been generated (the
// reasoning block: structured output applies to the answer after "</think>").
//
// The answer completes within the token budget: when some allowed token would leave more to
// complete than the tokens left after it, only tokens after which the match can still be
// completed in time are allowed. Every byte is a token of a byte-level vocabulary and some
// byte always shortens the completion by one, so a match that could be completed at the start
// is completed by the last token (a model that would ramble inside a string closes it in time
// instead of being cut by max_tokens). Masks are cached per matcher state with the farthest
// completion among their tokens, so the budget costs a fresh walk only near its end.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "orchid/grammar/matcher.h"
#include "orchid/grammar/token_vocab.h"
#include "orchid/runtime/token_constraint.h"

namespace orchid {
class Tokenizer;
}

namespace orchid::grammar {

class GrammarConstraint final : public TokenConstraint {
 public:
  // PRECONDITION: tok and vocab outlive the constraint. engage_after: the text after which the
  // grammar applies (empty: from the first token).
  GrammarConstraint(const Tokenizer& tok, const TokenVocab& vocab,
                    std::shared_ptr<const Grammar> g,
                    std::vector<int32_t> stop_ids, std::string engage_after);

  const std::vector<uint32_t>* allowed(int64_t remaining) override;
  bool accept(int32_t id) override;
  // The grammar has been satisfied (the text so far is a complete match).
  bool complete() const { return engaged() && matcher_.accepting(state_); }

 private:
  bool engaged() const { return marker_.empty(); }
  struct Mask {
    std::vector<uint32_t> bits;
    uint32_t farthest = 0;  // the largest completion distance a token of it leaves
  };
  // The mask of state_ with tokens that leave at most max_distance bytes to complete.
  void fill(uint32_t max_distance, Mask& mask);

  const Tokenizer& tok_;
  const TokenVocab& vocab_;
  Matcher matcher_;
  int32_t state_;
  std::vector<int32_t> stop_ids_;
  std::string marker_;  // text still awaited before engaging ("" once engaged)
  std::string tail_;    // the last bytes generated, to find the marker across token cuts
  std::unordered_map<int32_t, Mask> masks_;  // by matcher state, without a budget
  std::vector<uint32_t> stop_only_;
  Mask budgeted_;                          // the last mask cut by the budget
  const std::vector<uint32_t>* last_ = nullptr;  // what allowed() last returned
};

}  // namespace orchid::grammar
