// The engine: one model, a few live states (slots). Each slot holds one conversation's KV rows
// and recurrent state; a request goes to the free slot whose cached snapshots cover the longest
// prefix of its prompt (else the least recently used one), so several conversations
// interleaved keep their states. Requests on different threads run at once, one per slot:
// they take turns on the backend in arrival order, a turn being a prefill chunk of at most
// kTurnPrefill tokens, one decode step, or a burst of up to kTurnBurst on-device picks for
// every request decoding on the device at once (one batch: each step reads the weights once for
// all of them). It owns the backend, the multi-turn state cache and the decode loop with
// sampling, penalties and logprobs; text (templates, stop strings, parsing) stays with the
// caller.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "orchid/backend/backend.h"
#include "orchid/runtime/sampler.h"
#include "orchid/runtime/state_cache.h"
#include "orchid/runtime/token_constraint.h"

namespace orchid {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  // Token index where the prompt's last message ends and the generation prompt begins; a
  // snapshot is kept there, so the next turn — which re-renders this turn's reply its own
  // way — still reuses everything before it. 0: none.
  int64_t snapshot_at = 0;
  int max_tokens = 256;
  SamplerParams sampler;
  float repetition_penalty = 1.f;  // HF style: over prompt and output
  float presence_penalty = 0.f;    // OpenAI style: over output
  float frequency_penalty = 0.f;   // OpenAI style: over output
  // OpenAI logit_bias: added to a token's logit before sampling (-100 bans it, 100 forces it).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Constrained sampling (structured output, forced tool calls): the engine picks only tokens
  // it allows, and tells it each pick. Empty: none. Owned by this request alone.
  std::shared_ptr<TokenConstraint> constraint;
  std::vector<int32_t> stop_ids;   // end of generation (not part of the output)
  int top_logprobs = -1;           // -1: no logprobs; 0..20: chosen token (+ this many)
  // Asked before each prefill chunk (CPU: each layer) and each generated token; true ends the
  // request with finish_reason "cancelled" within about one chunk, layer or token. Empty: never.
  // It runs on the engine's thread: read an atomic flag set elsewhere.
  CancelCheck cancelled;
};

struct TokenEvent {
  int32_t id = 0;
  float logprob = 0.f;                         // of the chosen token (raw model logits)
  std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives
};

struct GenerateResult {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;      // prompt tokens restored from the state cache
  int64_t completion_tokens = 0;  // tokens passed to on_token (stop ids excluded)
  std::string finish_reason;      // "stop" (stop id, or on_token said so), "length", "cancelled"
  double prefill_seconds = 0, decode_seconds = 0;
};

// Requests take turns on the backend in the order they asked (a ticket lock).
class TurnLock {
 public:
  void lock();
  void unlock();
  bool contended() const;  // someone else is waiting for a turn

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ = 0, serving_ = 0;
};

// How the batched decode has run: bursts, and lanes summed over bursts (their ratio: the mean
// batch).
struct BatchStats {
  int64_t bursts = 0, lanes = 0, max_lanes = 0;
};

struct CacheStats {
  int64_t hits = 0, misses = 0, bytes = 0, entries = 0;
  int64_t host_hits = 0, host_bytes = 0, host_entries = 0;  // the host tier (StateCache)
};

class Engine {
 public:
  static constexpr int64_t kTurnPrefill = 8192;
  static constexpr int kTurnBurst = 32;

  // PRECONDITION: backend outlives the engine. ctx: most tokens a request may hold. slots:
  // live states, each made on first use (ctx tokens each). host_cache_bytes: the state cache's
  // host tier for device snapshots (0: none).
  Engine(Backend& backend, int64_t ctx, int64_t cache_bytes, int slots = 1,
         int64_t host_cache_bytes = 0);

  int64_t ctx() const { return ctx_; }
  CacheStats cache_stats() const;
  int slots() const { return int(slots_.size()); }
  BatchStats batch_stats() const;
  // Tokens each slot's state holds (-1: not made yet).
  std::vector<int64_t> slot_tokens() const;
  // Not while requests run (tests).
  const StateCache& cache() const { return cache_; }

  // Runs one request (thread-safe: requests on several threads share the backend by turns;
  // one waiting for a free slot waits). on_token sees each generated token; returning false
  // stops generation (finish_reason "stop"). A prompt that does not fit the context is an
  // error, up front.
  // A cancelled request (req.cancelled) is not an error: it returns what was done, and keeps no
  // snapshot of its end in the cache (only the snapshot_at cut, if its prefill got past it).
  Expected<GenerateResult> generate(const GenerateRequest& req,
                                    const std::function<bool(const TokenEvent&)>& on_token);

 private:
  // A request's slot while it runs.
  struct Run {
    int slot = 0;
    BackendState* state = nullptr;
  };
  // Whether the rest of a request can be decoded with the next token chosen on the device
  // (greedy or plain temperature sampling, no penalties, no logprobs; ORCHID_DEVICE_DECODE=0
  // turns it off).
  bool device_decodable(const GenerateRequest& req) const;
  // Up to `picks` tokens after `first`, one step at a time with the constraint's mask applied
  // by the device's pick; history (which ends with `first`) grows by each token fed.
  Status decode_constrained_on_device(const Run& run, const GenerateRequest& req, int32_t first,
                                      int picks,
                                      const std::function<bool(const TokenEvent&)>& on_token,
                                      GenerateResult& res, std::vector<int32_t>& history);
  // A request decoding on the device without a constraint: one lane of the batched decode.
  struct Lane;
  // Decodes `lane` to its end as part of the batch: lanes join between bursts; the thread that
  // finds nobody driving runs bursts of up to kTurnBurst steps for every lane (a turn each,
  // Backend::decode_batch) until its own lane ends, then hands the batch on.
  Status decode_in_batch(Lane& lane);
  // One burst for `batch` (in a turn). Per lane: how it ended (OK or an error), nothing while it
  // goes on.
  std::vector<std::optional<Status>> run_burst(const std::vector<Lane*>& batch);
  // The slot for a prompt: the free one whose cache covers most of it, else an unused one, else
  // the least recently used free one (waiting while none is free); its state made if new.
  Expected<Run> acquire_slot(std::span<const int32_t> prompt);
  void release_slot(const Run& run);
  // Restores the longest cached prefix (or the empty state) and runs the rest of the prompt;
  // a cancellation comes back as an error with cancelled() set, the live state then undefined.
  Status prefill_prompt(const Run& run, const GenerateRequest& req, std::vector<float>& logits,
                        GenerateResult& res);
  Expected<GenerateResult> generate_in(const Run& run, const GenerateRequest& req,
                                       const std::function<bool(const TokenEvent&)>& on_token);

  struct Slot {
    std::unique_ptr<BackendState> state;  // made on first use
    std::unique_ptr<StateSnapshot> empty;  // the state before any token
    uint64_t used = 0;                     // when it last served a request (a counter)
    bool busy = false;                     // a request runs in it
    int64_t tokens = -1;                   // what its state held after its last request
  };

  Backend& backend_;
  int64_t ctx_;
  TurnLock turns_;
  mutable std::mutex mu_;  // guards slots_, requests_ and cache_ (taken inside a turn, never around one)
  std::condition_variable slot_freed_;
  std::vector<Slot> slots_;
  uint64_t requests_ = 0;
  StateCache cache_;
  // The batched decode: lanes waiting to join, lanes in the batch, whether a thread drives it.
  mutable std::mutex lanes_mu_;
  std::condition_variable lanes_cv_;
  std::vector<Lane*> joining_, batch_;
  bool driving_ = false;
  BatchStats batch_stats_;
};

}  // namespace orchid
