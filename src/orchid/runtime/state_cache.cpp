// StateCache: longest-prefix lookup over a short LRU list (a handful of conversations).
#include "orchid/runtime/state_cache.h"

#include <algorithm>

namespace orchid {

void StateCache::insert(int slot, std::span<const int32_t> tokens,
                        std::unique_ptr<StateSnapshot> snap) {
  // A snapshot at the same length of the same history in the same slot replaces the old one.
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->slot == slot && std::ranges::equal(it->tokens, tokens)) {
      bytes_ -= it->bytes();
      entries_.erase(it);
      break;
    }
  }
  Entry e{slot, std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(snap)};
  const int64_t b = e.bytes();
  if (b > max_bytes_ || max_entries_ == 0) return;
  evict_to(max_bytes_ - b, max_entries_ - 1);
  entries_.push_front(std::move(e));
  bytes_ += b;
}

std::list<StateCache::Entry>::const_iterator StateCache::find_longest(
    int slot, std::span<const int32_t> tokens) const {
  auto best = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const auto& t = it->tokens;
    if (it->slot != slot || t.size() > tokens.size() || t.empty()) continue;
    if (best != entries_.end() && t.size() <= best->tokens.size()) continue;
    if (std::equal(t.begin(), t.end(), tokens.begin())) best = it;
  }
  return best;
}

int64_t StateCache::longest_prefix(int slot, std::span<const int32_t> tokens) const {
  const auto it = find_longest(slot, tokens);
  return it == entries_.end() ? 0 : int64_t(it->tokens.size());
}

int64_t StateCache::restore_longest_prefix(Backend& backend, BackendState& state, int slot,
                                           std::span<const int32_t> tokens) {
  for (;;) {
    const auto best = find_longest(slot, tokens);
    if (best == entries_.end()) {
      ++misses_;
      return 0;
    }
    if (backend.restore(state, *best->snap).ok()) {
      entries_.splice(entries_.begin(), entries_, best);  // most recently used
      ++hits_;
      return int64_t(entries_.front().tokens.size());
    }
    bytes_ -= best->bytes();  // stale: its KV rows were rewritten since
    entries_.erase(best);
  }
}

void StateCache::evict_to(int64_t max_bytes, size_t max_entries) {
  while ((bytes_ > max_bytes || entries_.size() > max_entries) && !entries_.empty()) {
    bytes_ -= entries_.back().bytes();
    entries_.pop_back();
  }
}

}  // namespace orchid
