// GrammarConstraint: masks cached per matcher state (the inside of a string is one state, so
// the full-vocabulary walk runs once per distinct state, not once per token).
#include "orchid/grammar/grammar_constraint.h"

#include <algorithm>

#include "orchid/tokenizer/tokenizer.h"

namespace orchid::grammar {

GrammarConstraint::GrammarConstraint(const Tokenizer& tok, const TokenVocab& vocab,
                                     std::shared_ptr<const Grammar> g,
                                     std::vector<int32_t> stop_ids, std::string engage_after)
    : tok_(tok),
      vocab_(vocab),
      matcher_(std::move(g)),
      state_(matcher_.start()),
      stop_ids_(std::move(stop_ids)),
      marker_(std::move(engage_after)) {
  stop_only_.assign(vocab_.words(), 0u);
  for (int32_t id : stop_ids_)
    if (id >= 0 && id < vocab_.n_vocab()) stop_only_[size_t(id) >> 5] |= 1u << (id & 31);
}

void GrammarConstraint::fill(uint32_t max_distance, Mask& mask) {
  std::vector<uint32_t>& bits = mask.bits;
  mask.farthest = vocab_.allowed(matcher_, state_, bits, max_distance);
  // A stop id ends the answer: allowed exactly where the grammar may end (even when its bytes
  // would continue the text), or when nothing else can follow (never expected).
  for (size_t i = 0; i < bits.size(); ++i) bits[i] &= ~stop_only_[i];
  const bool any = std::any_of(bits.begin(), bits.end(), [](uint32_t w) { return w != 0; });
  if (matcher_.accepting(state_) || !any)
    for (size_t i = 0; i < bits.size(); ++i) bits[i] |= stop_only_[i];
}

const std::vector<uint32_t>* GrammarConstraint::allowed(int64_t remaining) {
  if (!engaged()) return nullptr;
  if (state_ == Matcher::kDead) return last_ = &stop_only_;
  auto [it, added] = masks_.try_emplace(state_);
  if (added) fill(Matcher::kFar, it->second);
  // After this token, remaining - 1 are left to complete the match: when a token of the mask
  // would leave more, the mask cut to those that do not; when even the shortest completion
  // does not fit (a budget too small from the start), the tokens that come closest.
  if (remaining - 1 >= int64_t(it->second.farthest)) return last_ = &it->second.bits;
  const int64_t d = matcher_.distance(state_);
  const int64_t room = std::max<int64_t>(remaining - 1, d - 1);
  fill(uint32_t(std::clamp<int64_t>(room, 0, Matcher::kFar)), budgeted_);
  return last_ = &budgeted_.bits;
}

bool GrammarConstraint::accept(int32_t id) {
  const std::string_view bytes =
      tok_.is_special(id) ? std::string_view() : tok_.token_bytes(id).value_or("");
  if (!engaged()) {
    tail_ += bytes;
    if (const size_t at = tail_.find(marker_); at != std::string::npos) {
      // Engaged: the bytes after the marker in this token are the grammar's first.
      const std::string rest = tail_.substr(at + marker_.size());
      marker_.clear();
      tail_.clear();
      state_ = matcher_.advance(state_, rest);
      return state_ != Matcher::kDead;
    }
    if (tail_.size() > marker_.size()) tail_.erase(0, tail_.size() - marker_.size());
    return true;
  }
  const std::vector<uint32_t>* allow = last_;
  if (!allow) return false;
  if (id < 0 || id >= vocab_.n_vocab() || !((*allow)[size_t(id) >> 5] >> (id & 31) & 1))
    return false;
  last_ = nullptr;
  if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) return true;
  state_ = matcher_.advance(state_, bytes);
  return state_ != Matcher::kDead;
}

}  // namespace orchid::grammar
