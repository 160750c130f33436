// A test backend: any backend with "on-device" greedy picks made on the host, and a decode_batch
// that steps every lane once a step (as a batched GPU step does), so the engine's on-device and
// batched decoding paths run without a GPU. Records the lanes of each batch and its pauses.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "orchid/backend/backend.h"

namespace orchid {

class LockstepPicks final : public Backend {
 public:
  explicit LockstepPicks(Backend& b) : b_(b) {}
  std::string name() const override { return "lockstep"; }
  int64_t n_vocab() const override { return b_.n_vocab(); }
  Expected<std::unique_ptr<BackendState>> new_state(int64_t n) override { return b_.new_state(n); }
  Status forward(BackendState& st, std::span<const int32_t> t, LogitsMode m,
                 std::vector<float>& logits, int64_t chunk, const CancelCheck& c) override {
    return b_.forward(st, t, m, logits, chunk, c);
  }
  std::unique_ptr<StateSnapshot> snapshot(const BackendState& st) override {
    return b_.snapshot(st);
  }
  Status restore(BackendState& st, const StateSnapshot& s) override { return b_.restore(st, s); }
  bool can_decode_on_device() const override { return true; }
  Expected<std::vector<int32_t>> decode_on_device(
      BackendState& st, int32_t token, int max_new, const DeviceDecodeOptions& opts,
      const std::function<bool(int32_t)>& on_token) override {
    DecodeLane l{&st, token, max_new, opts, on_token, {}, false};
    ORCHID_TRY(decode_batch(std::span<DecodeLane>(&l, 1)));
    return l.consumed;
  }
  // Pauses (every lane ends early) after a step where `pause` says so.
  Status decode_batch(std::span<DecodeLane> lanes,
                      const std::function<bool()>& pause = {}) override {
    {
      std::lock_guard lock(mu_);
      batches.push_back(int(lanes.size()));
    }
    std::vector<int> picks(lanes.size(), 0);
    std::vector<bool> live(lanes.size(), true);
    std::vector<int32_t> next(lanes.size());
    std::vector<float> logits;
    for (size_t i = 0; i < lanes.size(); ++i) lanes[i].consumed.clear(), next[i] = lanes[i].token;
    for (bool any = true; any;) {
      any = false;
      for (size_t i = 0; i < lanes.size(); ++i) {
        if (!live[i]) continue;
        DecodeLane& l = lanes[i];
        ORCHID_TRY(b_.forward(*l.state, std::span<const int32_t>(&next[i], 1), LogitsMode::last,
                              logits));
        l.consumed.push_back(next[i]);
        const int32_t id = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
        ++picks[i];
        const bool stop = std::find(l.opts.stop_ids.begin(), l.opts.stop_ids.end(), id) !=
                          l.opts.stop_ids.end();
        if (stop || !l.on_token(id)) {
          live[i] = false, l.ended = true;
          continue;
        }
        next[i] = id;
        if (picks[i] == l.max_new) {
          live[i] = false;
          continue;
        }
        any = true;
      }
      if (any && pause && pause()) {
        ++pauses;
        break;
      }
    }
    return {};
  }
  std::mutex mu_;
  std::vector<int> batches;
  std::atomic<int> pauses{0};

 private:
  Backend& b_;
};

}  // namespace orchid
