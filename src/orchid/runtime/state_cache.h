// Multi-turn reuse: snapshots of one live backend state at token boundaries, kept in an LRU
// bounded in bytes. A request whose tokens extend a kept prefix restores it and prefills only
// the rest. The live state's token history says which snapshots are still backed by its KV
// rows; Backend::restore refuses stale ones, which are then dropped.
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

  // Keeps a snapshot of the state after `tokens` (its whole history so far).
  void insert(std::span<const int32_t> tokens, std::unique_ptr<StateSnapshot> snap);
  // Restores the longest kept snapshot whose tokens are a prefix of `tokens` and returns its
  // length, or 0 when none applies (the caller then starts from an empty state).
  int64_t restore_longest_prefix(Backend& backend, BackendState& state,
                                 std::span<const int32_t> tokens);
  void clear() { entries_.clear(), bytes_ = 0; }

  int64_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::unique_ptr<StateSnapshot> snap;
    int64_t bytes() const { return snap->bytes() + int64_t(tokens.size() * sizeof(int32_t)); }
  };
  void evict_to(int64_t max_bytes, size_t max_entries);

  int64_t max_bytes_;
  size_t max_entries_;
  int64_t bytes_ = 0;
  int64_t hits_ = 0, misses_ = 0;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace orchid
