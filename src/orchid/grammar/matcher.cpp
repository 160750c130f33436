// Matcher: closure over rule references and alternative ends, interning of frames and states.
#include "orchid/grammar/matcher.h"

#include <algorithm>

namespace orchid::grammar {

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  // Shortest completions: relax rule minima until nothing changes (rules mostly refer to
  // rules made before them, so this takes a pass or two).
  const std::vector<Element>& el = g_->elements;
  rest_.assign(el.size(), kFar);
  std::vector<uint32_t> rule_min(g_->rules.size(), kFar);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g_->rules.size(); ++r) {
      uint32_t best = kFar;
      for (uint32_t a : g_->rules[r]) {
        size_t end = a;
        while (el[end].kind != Element::Kind::end) ++end;
        rest_[end] = 0;
        for (size_t p = end; p-- > a;) {
          const uint32_t len = el[p].kind == Element::Kind::bytes ? 1 : rule_min[el[p].index];
          rest_[p] = std::min(kFar, len + rest_[p + 1]);
        }
        best = std::min(best, rest_[a]);
      }
      if (best < rule_min[r]) rule_min[r] = best, changed = true;
    }
  }
  bool accept = false;
  tops_.clear();
  ++pass_;
  for (uint32_t a : g_->rules[g_->root]) {
    const uint32_t f = frame(a, kNone);
    if (f != kNone) close(f, accept);
  }
  start_ = intern(tops_, accept);
}

uint32_t Matcher::frame(uint32_t pos, uint32_t parent) {
  const uint32_t depth = parent == kNone ? 0 : frames_[parent].depth + 1;
  if (depth >= uint32_t(kMaxDepth)) return kNone;
  const uint64_t key = uint64_t(pos) << 32 | parent;
  auto [it, added] = frame_ids_.try_emplace(key, uint32_t(frames_.size()));
  if (added) {
    const uint32_t below = parent == kNone ? 0 : frames_[parent].distance;
    frames_.push_back(Frame{pos, parent, depth, std::min(kFar, rest_[pos] + below)});
    mark_.push_back(0);
  }
  return it->second;
}

void Matcher::close(uint32_t f, bool& accept) {
  work_.assign(1, f);
  while (!work_.empty()) {
    const uint32_t cur = work_.back();
    work_.pop_back();
    if (mark_[cur] == pass_) continue;  // already expanded in this pass
    mark_[cur] = pass_;
    const Frame fr = frames_[cur];
    const Element& e = g_->elements[fr.pos];
    switch (e.kind) {
      case Element::Kind::bytes:
        tops_.push_back(cur);
        break;
      case Element::Kind::end:
        if (fr.parent == kNone)
          accept = true;
        else
          work_.push_back(fr.parent);
        break;
      case Element::Kind::rule: {
        // Return to the next element; a reference that ends its alternative is a tail call.
        uint32_t ret = fr.parent;
        if (g_->elements[fr.pos + 1].kind != Element::Kind::end) {
          ret = frame(fr.pos + 1, fr.parent);
          if (ret == kNone) break;  // too deep: this stack dies
        }
        for (uint32_t a : g_->rules[e.index]) {
          const uint32_t callee = frame(a, ret);
          if (callee != kNone) work_.push_back(callee);
        }
        break;
      }
    }
  }
}

int32_t Matcher::intern(std::vector<uint32_t> stacks, bool accept) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.empty() && !accept) return kDead;
  uint64_t h = accept ? 0x9e3779b97f4a7c15ull : 0;
  for (uint32_t s : stacks) h = (h ^ s) * 0x100000001b3ull + 0x632be59bd9b4e019ull;
  auto& bucket = state_ids_[h];
  for (int32_t id : bucket)
    if (states_[size_t(id)].accept == accept && states_[size_t(id)].stacks == stacks) return id;
  State st;
  st.distance = accept ? 0 : kFar;
  for (uint32_t f : stacks) st.distance = std::min(st.distance, frames_[f].distance);
  st.stacks = std::move(stacks);
  st.accept = accept;
  states_.push_back(std::move(st));
  bucket.push_back(int32_t(states_.size() - 1));
  return int32_t(states_.size() - 1);
}

int32_t Matcher::advance(int32_t state, uint8_t b) {
  if (state == kDead) return kDead;
  {
    State& s = states_[size_t(state)];
    if (!s.next) {
      s.next = std::make_unique<std::array<int32_t, 256>>();
      s.next->fill(-2);
    }
    if ((*s.next)[b] != -2) return (*s.next)[b];
  }
  bool accept = false;
  tops_.clear();
  ++pass_;
  // states_ may grow (and move) while closing; copy the stacks first.
  const std::vector<uint32_t> stacks = states_[size_t(state)].stacks;
  for (uint32_t top : stacks) {
    const Frame fr = frames_[top];
    if (!g_->sets[g_->elements[fr.pos].index].has(b)) continue;
    const uint32_t f = frame(fr.pos + 1, fr.parent);
    if (f != kNone) close(f, accept);
  }
  const int32_t next = intern(tops_, accept);
  (*states_[size_t(state)].next)[b] = next;
  return next;
}

int32_t Matcher::advance(int32_t state, std::string_view bytes) {
  for (char c : bytes) {
    state = advance(state, uint8_t(c));
    if (state == kDead) break;
  }
  return state;
}

}  // namespace orchid::grammar
