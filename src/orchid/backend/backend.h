// The contract between the runtime and a compute backend (CPU now, CUDA next). A backend
// holds the uploaded weights; states (KV cache + Gated DeltaNet conv/recurrent state) belong
// to sessions and are created by the backend that runs them.
#pragma once

#include <cstdint>
#include <functional>
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
  // Whether its data sits in device memory (which Backend::move_to_host can give back).
  virtual bool on_device() const { return false; }
};

enum class LogitsMode { last, all };

// Asked between pieces of work; true: stop now. Empty: never cancelled. It runs on the thread
// that runs forward(), so a flag set from elsewhere should be an atomic it reads.
using CancelCheck = std::function<bool()>;

// Decoding with the next token chosen on the device (see Backend::decode_on_device).
struct DeviceDecodeOptions {
  std::vector<int32_t> stop_ids;  // a chosen stop id ends decoding (not passed to on_token)
  float temperature = 0.f;        // 0: greedy; > 0: sampling from softmax(logits / T)
  uint64_t seed = 0;
};

// One sequence of a batched decode (Backend::decode_batch): decode_on_device's arguments and
// result, per lane.
struct DecodeLane {
  BackendState* state = nullptr;
  int32_t token = 0;  // fed first
  int max_new = 0;    // picks at most
  DeviceDecodeOptions opts;
  std::function<bool(int32_t)> on_token;  // sees each pick; false ends the lane
  std::vector<int32_t> consumed;          // out: what decode_on_device returns
  bool ended = false;  // out: a stop id or on_token ended it (not max_new, a full state or a pause)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int64_t n_vocab() const = 0;

  virtual Expected<std::unique_ptr<BackendState>> new_state(int64_t max_tokens) = 0;
  // The largest context, at most `limit` tokens, for which `states` states fit this backend's
  // memory beside what it needs to run (the server's default context).
  virtual int64_t max_context(int64_t limit, int states = 1) const { return limit; }
  // Consumes `tokens` after state.n_past(), in chunks of at most `chunk` tokens (0: backend
  // default). logits receives [tokens.size(), n_vocab] (all) or [n_vocab] (last), fp32.
  // A token id outside the vocabulary or a state overflow is an error and changes nothing.
  // `cancel` is asked before each chunk (the CPU backend: before each layer of each chunk; CUDA
  // without chunked prefill: before each token); when it says stop, forward() returns an error
  // with cancelled() set (nothing else sets it). After a cancelled forward the state's contents
  // (recurrent state, KV rows from n_past() on) and the logits are undefined until restore() of
  // a snapshot; n_past() is back at its value before the call, so the KV rows the call wrote lie
  // past it, where nothing reads them, and every snapshot valid before the call stays valid.
  virtual Status forward(BackendState& state, std::span<const int32_t> tokens, LogitsMode mode,
                         std::vector<float>& logits, int64_t chunk = 0,
                         const CancelCheck& cancel = {}) = 0;
  virtual std::unique_ptr<StateSnapshot> snapshot(const BackendState& state) = 0;
  virtual Status restore(BackendState& state, const StateSnapshot& snap) = 0;
  // Moves a device snapshot's data into host memory and frees its device memory; restore() then
  // reads it from there (the state cache's host tier). Backends without device memory keep
  // their snapshots in host memory already: unsupported.
  virtual Status move_to_host(StateSnapshot& snap) {
    (void)snap;
    return err(name(), ": its snapshots have no device memory to leave");
  }
  // The state cache's budget when the server is not given one.
  virtual int64_t default_state_cache_bytes() const { return int64_t(1) << 30; }

  // Backends that pick tokens on the device (no logits to the host between steps) say so.
  virtual bool can_decode_on_device() const { return false; }
  // Feeds `token`, then each id the device picks, for at most `max_new` picks; on_token sees
  // the picks in order, and returning false ends decoding. Returns the tokens the state
  // consumed, in order, starting with `token` (the device may have consumed a pick or two
  // beyond the one that ended decoding; they are included).
  virtual Expected<std::vector<int32_t>> decode_on_device(
      BackendState& state, int32_t token, int max_new, const DeviceDecodeOptions& opts,
      const std::function<bool(int32_t)>& on_token) {
    return err(name(), " backend: no on-device decoding");
  }
  // Decodes several states at once: every step advances each lane that has not ended by one
  // token (a stop id, on_token returning false or max_new picks end a lane), so that the weights
  // are read once a step for all of them. Each lane gets exactly the picks decode_on_device would
  // give it alone. `pause`, asked after each step where given, ends every lane early when it
  // says so (someone else waits for the device). The default runs the lanes one after the other
  // (and never pauses).
  virtual Status decode_batch(std::span<DecodeLane> lanes,
                              const std::function<bool()>& pause = {}) {
    for (DecodeLane& l : lanes) {
      int shown = 0;
      bool caller = false;
      auto c = decode_on_device(*l.state, l.token, l.max_new, l.opts, [&](int32_t id) {
        ++shown;
        caller = !l.on_token(id);
        return !caller;
      });
      if (!c) return c.error();
      l.consumed = std::move(*c);
      l.ended = caller || shown < l.max_new;  // a stop id (or a full state) ends it early
    }
    return {};
  }
  // One decode step with the pick on the device, for constrained decoding (the host must see
  // each id before it can say which tokens may follow): feeds `token`, then picks the next id
  // by opts' temperature and seed among the ids set in `allowed` (a bitset over the
  // vocabulary, bit i of word i / 32; nullptr: all). opts.stop_ids are not looked at.
  virtual Expected<int32_t> step_and_pick(BackendState& state, int32_t token,
                                          const std::vector<uint32_t>* allowed,
                                          const DeviceDecodeOptions& opts) {
    return err(name(), " backend: no on-device picks");
  }
  // Speed runs: makes the state hold n tokens of synthetic context (random KV and recurrent
  // state) without computing them.
  virtual Status fill_synthetic_context(BackendState& state, int64_t n, uint64_t seed) {
    return err(name(), " backend: no synthetic contexts");
  }
};

// The checks every backend's forward() makes before touching its state: a non-empty batch,
// every id inside [0, n_vocab), and room for the tokens after n_past.
Status check_forward_input(std::span<const int32_t> tokens, int64_t n_vocab, int64_t n_past,
                           int64_t capacity);

// Whether `cancel` asks to stop (false when it is empty).
inline bool cancel_requested(const CancelCheck& cancel) {
  return cancel && cancel();
}
// The error a cancelled forward() returns: `done` of `total` tokens had been consumed.
Error forward_cancelled(int64_t done, int64_t total);

}  // namespace orchid
