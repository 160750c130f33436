// StateCache: longest-prefix lookup over a short LRU list (a handful of conversations).
#include "orchid/runtime/state_cache.h"

#include <algorithm>
#include <iterator>

namespace orchid {

void StateCache::insert(int slot, std::span<const int32_t> tokens,
                        std::unique_ptr<StateSnapshot> snap) {
  // A snapshot at the same length of the same history in the same slot replaces the old one.
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->slot == slot && std::ranges::equal(it->tokens, tokens)) {
      erase(it);
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
      if (entries_.front().host) ++host_hits_;
      return int64_t(entries_.front().tokens.size());
    }
    // Stale: its KV rows were rewritten since.
    erase(best);
  }
}

std::list<StateCache::Entry>::iterator StateCache::erase(std::list<Entry>::const_iterator it) {
  if (it->host)
    host_bytes_ -= it->bytes(), --host_entries_;
  else
    bytes_ -= it->bytes();
  return entries_.erase(it);
}

void StateCache::evict_to(int64_t max_bytes, size_t max_entries) {
  // The byte budget: the least recently used entry of the first tier leaves it — to the host
  // tier when it is a device snapshot that fits there (after the host tier's own least recently
  // used entries make room), else for good.
  while (bytes_ > max_bytes) {
    auto it = entries_.end();
    while (it != entries_.begin() && std::prev(it)->host) --it;
    if (it == entries_.begin()) break;  // only host entries (cannot happen: bytes_ would be 0)
    --it;
    const int64_t b = it->bytes();
    if (host_backend_ && it->snap->on_device() && b <= max_host_bytes_) {
      for (auto h = entries_.end(); host_bytes_ + b > max_host_bytes_ && h != entries_.begin();) {
        --h;
        if (h->host) h = erase(h);
      }
      if (host_backend_->move_to_host(*it->snap).ok()) {
        it->host = true;
        bytes_ -= b, host_bytes_ += b, ++host_entries_;
        continue;
      }
    }
    erase(it);
  }
  while (entries_.size() > max_entries && !entries_.empty()) erase(std::prev(entries_.end()));
}

}  // namespace orchid
