// Multi-turn reuse: snapshots of the engine's live states (its slots) at token boundaries, kept
// in an LRU bounded in bytes. Two tiers where the backend keeps snapshots in device memory: the
// least recently used device snapshot beyond the device budget moves to host memory
// (Backend::move_to_host) while the host budget holds it, instead of being dropped; a hit there
// costs a host-to-device copy of the recurrent state (~63 MB on the full-size model), not a
// prefill. Each snapshot belongs to the slot whose state it was taken from
// (its KV rows stay in that state). A request whose tokens extend a kept prefix restores it
// into that slot and prefills only the rest. A slot's token history says which of its
// snapshots are still backed by its KV rows; Backend::restore refuses stale ones, which are
// then dropped.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <vector>

#include "orchid/backend/backend.h"

namespace orchid {

class StateCache {
 public:
  // max_bytes bounds the snapshots and their token lists; max_entries bounds the number kept
  // (each lookup scans them all).
  explicit StateCache(int64_t max_bytes, size_t max_entries = 64)
      : max_bytes_(max_bytes), max_entries_(max_entries) {}

  // The host tier: device snapshots evicted from the byte budget move to host memory through
  // `backend` (which made them) while their bytes fit max_host_bytes; 0 turns it off.
  void set_host_tier(Backend* backend, int64_t max_host_bytes) {
    host_backend_ = backend, max_host_bytes_ = max_host_bytes;
  }
  // Keeps a snapshot of slot `slot`'s state after `tokens` (its whole history so far).
  void insert(int slot, std::span<const int32_t> tokens, std::unique_ptr<StateSnapshot> snap);
  // The length of the longest kept snapshot of `slot` whose tokens are a prefix of `tokens`
  // (0: none). It may turn out stale when restored.
  int64_t longest_prefix(int slot, std::span<const int32_t> tokens) const;
  // Restores the longest kept snapshot of `slot` whose tokens are a prefix of `tokens` into
  // `state` (that slot's) and returns its length, or 0 when none applies (the caller then
  // starts from an empty state). Counts a hit or a miss.
  int64_t restore_longest_prefix(Backend& backend, BackendState& state, int slot,
                                 std::span<const int32_t> tokens);
  void clear() { entries_.clear(), bytes_ = 0, host_bytes_ = 0, host_entries_ = 0; }

  int64_t bytes() const { return bytes_; }  // where the backend keeps snapshots
  size_t size() const { return entries_.size(); }  // both tiers
  int64_t hits() const { return hits_; }  // both tiers
  int64_t misses() const { return misses_; }
  int64_t host_bytes() const { return host_bytes_; }
  size_t host_size() const { return host_entries_; }
  int64_t host_hits() const { return host_hits_; }

 private:
  struct Entry {
    int slot = 0;
    std::vector<int32_t> tokens;
    std::unique_ptr<StateSnapshot> snap;
    bool host = false;  // moved to the host tier
    int64_t bytes() const { return snap->bytes() + int64_t(tokens.size() * sizeof(int32_t)); }
  };
  void evict_to(int64_t max_bytes, size_t max_entries);
  // Drops `it`, keeping the tiers' counts.
  std::list<Entry>::iterator erase(std::list<Entry>::const_iterator it);
  std::list<Entry>::const_iterator find_longest(int slot, std::span<const int32_t> tokens) const;

  int64_t max_bytes_;
  size_t max_entries_;
  int64_t bytes_ = 0;
  int64_t hits_ = 0, misses_ = 0;
  Backend* host_backend_ = nullptr;
  int64_t max_host_bytes_ = 0, host_bytes_ = 0, host_hits_ = 0;
  size_t host_entries_ = 0;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace orchid
