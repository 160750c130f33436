// Runs a Grammar over bytes as a deterministic automaton built lazily: a state is the set of
// parse stacks still alive (a pushdown automaton's nondeterminism, as sets), interned so that
// equal sets are one id, with each state's transitions memoised. Stacks are persistent lists
// whose frames are shared and interned too, so a state costs a few ids and a loop such as the
// inside of a JSON string comes back to the same state: after warm-up a byte is one lookup.
//
// A stack's top frame points at a byte set (a terminal) or the state is accepting (some
// stack has finished the root rule). Stacks are at most kMaxDepth frames (recursive schemas
// nest at most that deep); tail calls do not grow them, so s* loops run in constant depth.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "orchid/grammar/grammar.h"

namespace orchid::grammar {

class Matcher {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr int kMaxDepth = 256;

  explicit Matcher(std::shared_ptr<const Grammar> g);

  int32_t start() const { return start_; }
  // The state after byte b; kDead when no stack can take it.
  int32_t advance(int32_t state, uint8_t b);
  // The state after every byte of `bytes`; kDead as soon as one is refused.
  int32_t advance(int32_t state, std::string_view bytes);
  // The root rule can end here.
  bool accepting(int32_t state) const { return states_[size_t(state)].accept; }
  // Some byte can follow.
  bool can_continue(int32_t state) const { return !states_[size_t(state)].stacks.empty(); }
  // The fewest bytes that complete a match from here (0 when accepting): per stack, the
  // shortest completion of each frame's alternative, summed down the stack. A shortest
  // completion always exists byte by byte, so some byte lowers it by one (kFar: none).
  static constexpr uint32_t kFar = UINT32_MAX / 4;
  uint32_t distance(int32_t state) const { return states_[size_t(state)].distance; }
  size_t n_states() const { return states_.size(); }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Frame {
    uint32_t pos;     // index into grammar elements: what this frame matches next
    uint32_t parent;  // frame to return to at the end of the alternative; kNone: the root
    uint32_t depth;
    uint32_t distance;  // shortest completion of this frame and those below it
  };
  struct State {
    std::vector<uint32_t> stacks;  // top frames, each at a byte set; sorted, unique
    bool accept = false;
    uint32_t distance = kFar;
    std::unique_ptr<std::array<int32_t, 256>> next;  // memo; -2: not computed yet
  };

  uint32_t frame(uint32_t pos, uint32_t parent);  // interned; kNone past kMaxDepth
  // Expands frame f to stacks whose tops are byte sets (into tops_), noting an accepting end.
  void close(uint32_t f, bool& accept);
  int32_t intern(std::vector<uint32_t> stacks, bool accept);

  std::shared_ptr<const Grammar> g_;
  std::vector<uint32_t> rest_;  // element index → shortest completion of its alternative from it
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, uint32_t> frame_ids_;
  std::vector<State> states_;
  std::unordered_map<uint64_t, std::vector<int32_t>> state_ids_;  // hash → candidates
  std::vector<uint32_t> work_, tops_;
  std::vector<uint32_t> mark_;
  uint32_t pass_ = 0;
  int32_t start_ = kDead;
};

}  // namespace orchid::grammar
