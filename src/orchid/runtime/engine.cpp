// Engine::generate: restore the longest cached prefix, prefill the rest (snapshotting at the
// generation prompt), then sample → callback → decode until a stop id, the caller, a
// cancellation or the limit.
#include "orchid/runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <unordered_map>

namespace orchid {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Penalties on the logits before sampling. repetition (HF): divide positive / multiply
// negative logits of every token seen; presence/frequency (OpenAI): subtract per output token;
// logit_bias (OpenAI): add per token.
void apply_penalties(const GenerateRequest& req, std::span<const int32_t> output,
                     std::vector<float>& logits) {
  if (req.repetition_penalty != 1.f) {
    std::vector<bool> seen(logits.size(), false);
    for (int32_t id : req.prompt) seen[size_t(id)] = true;
    for (int32_t id : output) seen[size_t(id)] = true;
    for (size_t i = 0; i < logits.size(); ++i)
      if (seen[i])
        logits[i] =
            logits[i] > 0 ? logits[i] / req.repetition_penalty : logits[i] * req.repetition_penalty;
  }
  if (req.presence_penalty != 0.f || req.frequency_penalty != 0.f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t id : output) ++counts[id];
    for (auto [id, n] : counts)
      logits[size_t(id)] -= req.presence_penalty + req.frequency_penalty * float(n);
  }
  for (auto [id, bias] : req.logit_bias)
    if (id >= 0 && size_t(id) < logits.size()) logits[size_t(id)] += bias;
}

// The logits with every token outside `allowed` (a bitset) at -inf.
void mask_logits(const std::vector<uint32_t>& allowed, std::vector<float>& logits) {
  for (size_t i = 0; i < logits.size(); ++i)
    if (!(allowed[i >> 5] >> (i & 31) & 1)) logits[i] = -INFINITY;
}

// log-softmax value of `id` and the k most likely ids with theirs, over the logits sampled
// from (penalties applied, temperature not).
TokenEvent make_event(std::span<const float> logits, int32_t id, int k) {
  TokenEvent ev;
  ev.id = id;
  if (k < 0) return ev;
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l - mx));
  const float lse = mx + float(std::log(sum));
  ev.logprob = logits[size_t(id)] - lse;
  if (k > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
    for (int i = 0; i < k; ++i)
      ev.top.push_back({ids[size_t(i)], logits[size_t(ids[size_t(i)])] - lse});
  }
  return ev;
}

// A turn on the backend for the guard's scope.
class Turn {
 public:
  explicit Turn(TurnLock& l) : l_(l) { l_.lock(); }
  ~Turn() { l_.unlock(); }
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;

 private:
  TurnLock& l_;
};

}  // namespace

void TurnLock::lock() {
  std::unique_lock lock(mu_);
  const uint64_t ticket = next_++;
  cv_.wait(lock, [&] { return serving_ == ticket; });
}

void TurnLock::unlock() {
  {
    std::lock_guard lock(mu_);
    ++serving_;
  }
  cv_.notify_all();
}

bool TurnLock::contended() const {
  std::lock_guard lock(mu_);
  return next_ - serving_ > 1;
}

Engine::Engine(Backend& backend, int64_t ctx, int64_t cache_bytes, int slots,
               int64_t host_cache_bytes)
    : backend_(backend), ctx_(ctx), slots_(size_t(std::max(slots, 1))), cache_(cache_bytes) {
  if (host_cache_bytes > 0) cache_.set_host_tier(&backend_, host_cache_bytes);
}

CacheStats Engine::cache_stats() const {
  std::lock_guard lock(mu_);
  return {cache_.hits(),      cache_.misses(),     cache_.bytes(),
          int64_t(cache_.size()), cache_.host_hits(), cache_.host_bytes(),
          int64_t(cache_.host_size())};
}

std::vector<int64_t> Engine::slot_tokens() const {
  std::lock_guard lock(mu_);
  std::vector<int64_t> out;
  for (const Slot& s : slots_) out.push_back(s.tokens);
  return out;
}

Expected<Engine::Run> Engine::acquire_slot(std::span<const int32_t> prompt) {
  int best = -1;
  bool fresh = false;
  {
    std::unique_lock lock(mu_);
    slot_freed_.wait(lock, [&] {
      return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.busy; });
    });
    int64_t best_len = 0;
    for (int s = 0; s < int(slots_.size()); ++s) {
      const Slot& sl = slots_[size_t(s)];
      if (!sl.state || sl.busy) continue;
      const int64_t len = cache_.longest_prefix(s, prompt);
      if (len > best_len || (len == best_len && len > 0 && sl.used < slots_[size_t(best)].used))
        best = s, best_len = len;
    }
    if (best < 0) {
      // Nothing cached: an unused slot, else the free one that served a request longest ago
      // (its conversation's snapshots go stale as this one overwrites its rows).
      for (int s = 0; s < int(slots_.size()); ++s) {
        const Slot& sl = slots_[size_t(s)];
        if (sl.busy) continue;
        if (!sl.state) {
          best = s;
          break;
        }
        if (best < 0 || sl.used < slots_[size_t(best)].used) best = s;
      }
    }
    Slot& slot = slots_[size_t(best)];
    slot.busy = true;
    slot.used = ++requests_;
    fresh = !slot.state;
  }
  Slot& slot = slots_[size_t(best)];
  if (fresh) {
    Turn turn(turns_);
    auto st = backend_.new_state(ctx_);
    if (!st) {
      release_slot(Run{best, nullptr});
      return st.error();
    }
    std::unique_ptr<StateSnapshot> empty = backend_.snapshot(**st);
    std::lock_guard lock(mu_);
    slot.state = std::move(*st);
    slot.empty = std::move(empty);
  }
  return Run{best, slot.state.get()};
}

void Engine::release_slot(const Run& run) {
  {
    std::lock_guard lock(mu_);
    slots_[size_t(run.slot)].busy = false;
  }
  slot_freed_.notify_one();
}

Status Engine::prefill_prompt(const Run& run, const GenerateRequest& req,
                              std::vector<float>& logits, GenerateResult& res) {
  std::span<const int32_t> prompt(req.prompt);
  // At least the last prompt token is run: its logits choose the first output token. Every
  // request starts from a restored snapshot, so a state left undefined by a cancelled or failed
  // request is never read.
  int64_t done = 0;
  {
    Turn turn(turns_);
    std::lock_guard lock(mu_);
    done = cache_.restore_longest_prefix(backend_, *run.state, run.slot,
                                         prompt.first(prompt.size() - 1));
    if (done == 0) ORCHID_TRY(backend_.restore(*run.state, *slots_[size_t(run.slot)].empty));
  }
  res.cached_tokens = done;
  // The rest in turns of at most kTurnPrefill tokens, stopping at the snapshot cut (a
  // cancellation returns before the cut is snapshotted).
  const int64_t n = int64_t(prompt.size()), cut = req.snapshot_at;
  while (done < n) {
    int64_t end = std::min(n, done + kTurnPrefill);
    const bool at_cut = cut > done && cut < end;
    if (at_cut) end = cut;
    Turn turn(turns_);
    ORCHID_TRY(backend_.forward(*run.state, prompt.subspan(size_t(done), size_t(end - done)),
                                LogitsMode::last, logits, 0, req.cancelled));
    if (at_cut || (end == cut && cut < n)) {
      std::lock_guard lock(mu_);
      cache_.insert(run.slot, prompt.first(size_t(cut)), backend_.snapshot(*run.state));
    }
    done = end;
  }
  return {};
}

bool Engine::device_decodable(const GenerateRequest& req) const {
  if (!backend_.can_decode_on_device() || req.top_logprobs >= 0) return false;
  if (const char* v = std::getenv("ORCHID_DEVICE_DECODE"); v && std::string_view(v) == "0")
    return false;
  if (req.repetition_penalty != 1.f || req.presence_penalty != 0.f ||
      req.frequency_penalty != 0.f || !req.logit_bias.empty())
    return false;
  const SamplerParams& s = req.sampler;
  return s.greedy || s.temperature <= 0.f || (s.top_k == 0 && s.top_p >= 1.f && s.min_p <= 0.f);
}

struct Engine::Lane {
  BackendState* state = nullptr;
  const GenerateRequest* req = nullptr;
  const std::function<bool(const TokenEvent&)>* on_token = nullptr;
  GenerateResult* res = nullptr;
  std::vector<int32_t>* history = nullptr;  // ends with `next`
  int32_t next = 0;                         // fed first by the next burst
  int left = 0;                             // picks still allowed
  bool finished = false;
  Status status;
};

BatchStats Engine::batch_stats() const {
  std::lock_guard lock(lanes_mu_);
  return batch_stats_;
}

std::vector<std::optional<Status>> Engine::run_burst(const std::vector<Lane*>& batch) {
  struct Seen {
    int shown = 0;
    int32_t last = 0;
    bool cancelled = false;
  };
  std::vector<Seen> seen(batch.size());
  std::vector<DecodeLane> lanes(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    Lane& l = *batch[i];
    const SamplerParams& s = l.req->sampler;
    DecodeLane& d = lanes[i];
    d.state = l.state;
    d.token = l.next;
    d.max_new = std::min(l.left, kTurnBurst);
    d.opts.stop_ids = l.req->stop_ids;
    d.opts.temperature = s.greedy || s.temperature <= 0.f ? 0.f : s.temperature;
    d.opts.seed = s.seed;
    d.on_token = [&l, &sn = seen[i]](int32_t id) {
      if (cancel_requested(l.req->cancelled)) {
        sn.cancelled = true;  // this pick is not shown: the caller has gone
        return false;
      }
      ++sn.shown;
      sn.last = id;
      ++l.res->completion_tokens;
      TokenEvent ev;
      ev.id = id;
      return (*l.on_token)(ev);  // false ends the lane (DecodeLane::ended)
    };
  }
  Status st;
  {
    Turn turn(turns_);
    // Paused (every lane keeps its place) when another request waits for a turn.
    st = backend_.decode_batch(lanes, [this] { return turns_.contended(); });
  }
  // Per lane: how it ended (OK or an error), nothing while it goes on.
  std::vector<std::optional<Status>> ended(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    Lane& l = *batch[i];
    const Seen& sn = seen[i];
    if (!st.ok()) {
      ended[i] = st;
      continue;
    }
    if (sn.cancelled)
      l.res->finish_reason = "cancelled";
    else if (lanes[i].ended)
      l.res->finish_reason = "stop";  // a stop id, or the caller
    // What the state holds: what it held, then every token the device consumed from `next` on
    // (it may have run a step past the last one shown to the caller).
    l.history->pop_back();
    l.history->insert(l.history->end(), lanes[i].consumed.begin(), lanes[i].consumed.end());
    l.left -= sn.shown;  // a pause may end the burst early
    if (l.left > 0 && l.res->finish_reason == "length" && sn.shown > 0) {
      l.next = sn.last;
      l.history->push_back(l.next);
    } else {
      ended[i] = Status();
    }
  }
  return ended;
}

Status Engine::decode_in_batch(Lane& lane) {
  std::unique_lock lock(lanes_mu_);
  joining_.push_back(&lane);
  lanes_cv_.notify_all();
  while (!lane.finished) {
    if (driving_) {
      lanes_cv_.wait(lock);
      continue;
    }
    // Drive: a burst for every lane in the batch (joiners enter between bursts) until this
    // thread's own lane ends; then another waiting thread takes over.
    driving_ = true;
    while (!lane.finished) {
      batch_.insert(batch_.end(), joining_.begin(), joining_.end());
      joining_.clear();
      const std::vector<Lane*> batch = batch_;
      ++batch_stats_.bursts;
      batch_stats_.lanes += int64_t(batch.size());
      batch_stats_.max_lanes = std::max(batch_stats_.max_lanes, int64_t(batch.size()));
      lock.unlock();
      std::vector<std::optional<Status>> ended;
      try {
        ended = run_burst(batch);
      } catch (...) {  // a caller's callback threw: end the burst's lanes, keep the engine up
        ended.assign(batch.size(), Status(err("decoding failed: an exception in the burst")));
      }
      lock.lock();
      for (size_t i = 0; i < batch.size(); ++i)
        if (ended[i]) batch[i]->status = *ended[i], batch[i]->finished = true;
      std::erase_if(batch_, [](const Lane* l) { return l->finished; });
      lanes_cv_.notify_all();  // the ended lanes' threads
    }
    driving_ = false;
    lanes_cv_.notify_all();  // someone else drives the rest
  }
  return lane.status;
}

Status Engine::decode_constrained_on_device(
    const Run& run, const GenerateRequest& req, int32_t first, int picks,
    const std::function<bool(const TokenEvent&)>& on_token, GenerateResult& res,
    std::vector<int32_t>& history) {
  DeviceDecodeOptions opts;
  const SamplerParams& s = req.sampler;
  opts.temperature = s.greedy || s.temperature <= 0.f ? 0.f : s.temperature;
  opts.seed = s.seed;
  int32_t fed = first;
  for (int k = 0; k < picks; ++k) {
    if (cancel_requested(req.cancelled)) {
      res.finish_reason = "cancelled";
      return {};
    }
    const std::vector<uint32_t>* allowed = req.constraint->allowed(picks - k);
    Expected<int32_t> id = [&] {
      Turn turn(turns_);
      return backend_.step_and_pick(*run.state, fed, allowed, opts);
    }();
    if (!id) return id.error();
    if (std::find(req.stop_ids.begin(), req.stop_ids.end(), *id) != req.stop_ids.end()) {
      res.finish_reason = "stop";
      return {};
    }
    if (!req.constraint->accept(*id))
      return err("constrained decoding: the device picked token ", *id, ", which the mask refuses");
    history.push_back(*id);
    ++res.completion_tokens;
    TokenEvent ev;
    ev.id = *id;
    if (!on_token(ev)) {
      res.finish_reason = "stop";
      return {};
    }
    fed = *id;
  }
  // The last pick was shown but never fed: the state holds history minus it, as on the host.
  return {};
}

Expected<GenerateResult> Engine::generate(const GenerateRequest& req,
                                          const std::function<bool(const TokenEvent&)>& on_token) {
  if (req.prompt.empty()) return err("the prompt is empty");
  if (int64_t(req.prompt.size()) + 1 > ctx_)
    return err("the prompt has ", req.prompt.size(), " tokens; the context holds ", ctx_);
  for (int32_t id : req.prompt)
    if (id < 0 || id >= backend_.n_vocab())
      return err("prompt token id ", id, " is outside the vocabulary");
  auto run = acquire_slot(std::span<const int32_t>(req.prompt).first(req.prompt.size() - 1));
  if (!run) return run.error();
  // The slot is freed however the request ends (an exception included).
  struct Release {
    Engine* e;
    Run r;
    ~Release() { e->release_slot(r); }
  } release{this, *run};
  return generate_in(*run, req, on_token);
}

Expected<GenerateResult> Engine::generate_in(
    const Run& run, const GenerateRequest& req,
    const std::function<bool(const TokenEvent&)>& on_token) {
  GenerateResult res;
  res.prompt_tokens = int64_t(req.prompt.size());
  std::vector<float> logits, masked;
  auto t0 = Clock::now();
  const Status prefilled = prefill_prompt(run, req, logits, res);
  res.prefill_seconds = since(t0);
  if (prefilled.cancelled()) {
    res.finish_reason = "cancelled";
    return res;
  }
  ORCHID_TRY(prefilled);

  t0 = Clock::now();
  Sampler sampler(req.sampler);
  std::vector<int32_t> history = req.prompt, output;
  res.finish_reason = "length";
  const int max_new = int(std::min<int64_t>(req.max_tokens, ctx_ - res.prompt_tokens));
  const bool on_device = device_decodable(req);
  for (int i = 0; i < max_new; ++i) {
    if (cancel_requested(req.cancelled)) {
      res.finish_reason = "cancelled";
      break;
    }
    apply_penalties(req, output, logits);
    // Constrained: sampled from the masked logits; logprobs still describe the model's own.
    const std::vector<uint32_t>* allowed =
        req.constraint ? req.constraint->allowed(max_new - i) : nullptr;
    if (allowed) {
      masked = logits;
      mask_logits(*allowed, masked);
    }
    const int32_t id = sampler.sample(allowed ? masked : logits);
    if (std::find(req.stop_ids.begin(), req.stop_ids.end(), id) != req.stop_ids.end()) {
      res.finish_reason = "stop";
      break;
    }
    if (req.constraint && !req.constraint->accept(id))
      return err("constrained sampling picked token ", id, ", which the mask refuses");
    output.push_back(id);
    history.push_back(id);
    ++res.completion_tokens;
    if (!on_token(make_event(logits, id, req.top_logprobs))) {
      res.finish_reason = "stop";
      break;
    }
    if (i + 1 == max_new) break;
    if (on_device && req.constraint) {
      // The host computes each mask from the last pick; the device applies it as it picks.
      ORCHID_TRY(
          decode_constrained_on_device(run, req, id, max_new - i - 1, on_token, res, history));
      break;
    }
    if (on_device) {
      // The rest on the device, batched with every other request decoding there: each pick
      // feeds the next step on the device and the host only watches.
      Lane lane;
      lane.state = run.state, lane.req = &req, lane.on_token = &on_token, lane.res = &res;
      lane.history = &history, lane.next = id, lane.left = max_new - i - 1;
      ORCHID_TRY(decode_in_batch(lane));
      break;
    }
    Turn turn(turns_);
    const Status stepped = backend_.forward(*run.state, std::span<const int32_t>(&id, 1),
                                            LogitsMode::last, logits, 0, req.cancelled);
    if (stepped.cancelled()) {
      res.finish_reason = "cancelled";
      break;
    }
    ORCHID_TRY(stepped);
  }
  res.decode_seconds = since(t0);
  // A cancelled request's caller has gone and its state may be half a step: keep nothing.
  if (res.finish_reason == "cancelled") return res;
  // The state now holds history minus (possibly) the last sampled token, which was never
  // fed back; keep a snapshot of exactly what it holds.
  Turn turn(turns_);
  history.resize(size_t(run.state->n_past()));
  std::unique_ptr<StateSnapshot> snap = backend_.snapshot(*run.state);
  std::lock_guard lock(mu_);
  cache_.insert(run.slot, history, std::move(snap));
  slots_[size_t(run.slot)].tokens = int64_t(history.size());
  return res;
}

}  // namespace orchid
