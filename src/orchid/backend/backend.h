// The contract between the runtime and a compute backend (CPU now, CUDA next). A backend
// holds the uploaded weights; states (KV cache + Gated DeltaNet conv/recurrent state) belong
// to sessions and are created by the backend that runs them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "orchid/util/status.h"

namespace orchid {

// Per-sequence state: KV of the full-attention layers, conv + recurrent state of the linear
// layers, and how many tokens it has consumed.
class BackendState {
 public:
  virtual ~BackendState() = default;
  virtual int64_t n_past() const = 0;
  virtual int64_t capacity() const = 0;  // most tokens it may hold
};

// A copy of a state's recurrent parts and length at a token boundary. KV rows below that
// length are never rewritten, so restoring only needs the length for them.
class StateSnapshot {
 public:
  virtual ~StateSnapshot() = default;
  virtual int64_t n_past() const = 0;
  virtual int64_t bytes() const = 0;
};

enum class LogitsMode { last, all };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int64_t n_vocab() const = 0;

  virtual Expected<std::unique_ptr<BackendState>> new_state(int64_t max_tokens) = 0;
  // Consumes `tokens` after state.n_past(), in chunks of at most `chunk` tokens (0: backend
  // default). logits receives [tokens.size(), n_vocab] (all) or [n_vocab] (last), fp32.
  // A token id outside the vocabulary or a state overflow is an error and changes nothing.
  virtual Status forward(BackendState& state, std::span<const int32_t> tokens, LogitsMode mode,
                         std::vector<float>& logits, int64_t chunk = 0) = 0;
  virtual std::unique_ptr<StateSnapshot> snapshot(const BackendState& state) = 0;
  virtual Status restore(BackendState& state, const StateSnapshot& snap) = 0;
};

}  // namespace orchid
