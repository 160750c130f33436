// What the engine asks of constrained sampling (structured output, forced tool calls): the
// tokens allowed next, and the token chosen. The engine masks the logits (on the host, or on
// the device for backends that pick there) and never picks a token outside the set.
#pragma once

#include <cstdint>
#include <vector>

namespace orchid {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // The tokens allowed next as a bitset over the model's vocabulary (bit i of word i / 32), or
  // nullptr while every token is (e.g. inside the reasoning block, before the constraint
  // engages). Never an empty set: when the constraint is complete, the stop ids it was given.
  // `remaining`: tokens the request may still generate, this one included (so a constraint
  // can finish its form within them).
  virtual const std::vector<uint32_t>* allowed(int64_t remaining) = 0;
  // Advances past the chosen token; false when it was not allowed (the caller's bug).
  virtual bool accept(int32_t id) = 0;
};

}  // namespace orchid
