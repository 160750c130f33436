// Engine cancellation (GenerateRequest::cancelled): a request cancelled during its prefill or its
// decoding returns finish_reason "cancelled" within about a layer or a token, keeps no snapshot
// past what it finished, and the next request on the engine runs exactly as on a fresh engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "../lockstep_picks.h"
#include "../test_util.h"
#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/model/model.h"
#include "orchid/runtime/engine.h"

namespace orchid {
namespace {

// The stand-in prompts' seed (test::prompt_ids).
constexpr uint64_t kPromptSeed = 0x2545f4914f6cdd1dull;

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// n ids in [3, vocab), the same every run.
struct Outcome {
  Expected<GenerateResult> res = err("not run");
  std::vector<int32_t> ids;
  std::vector<float> logprobs;  // of each chosen token (host decoding only)
};

class EngineCancel : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = load_model(test::golden("tiny/mlx4"));
    ASSERT_TRUE(m.ok()) << m.message();
    model_ = std::move(*m);
    backend_ = make_cpu_backend(*model_);
    n_layer_ = model_->config.n_layer;
  }

  // Greedy; after_token (if set) sees the count of tokens so far after each.
  Outcome run(Engine& e, GenerateRequest req, const std::function<void(int)>& after_token = {}) {
    Outcome r;
    r.res = e.generate(req, [&](const TokenEvent& ev) {
      r.ids.push_back(ev.id);
      r.logprobs.push_back(ev.logprob);
      if (after_token) after_token(int(r.ids.size()));
      return true;
    });
    EXPECT_TRUE(r.res.ok()) << r.res.message();
    return r;
  }
  GenerateRequest request(std::vector<int32_t> prompt, int max_tokens, int64_t snapshot_at = 0) {
    GenerateRequest req;
    req.prompt = std::move(prompt);
    req.max_tokens = max_tokens;
    req.snapshot_at = snapshot_at;
    req.top_logprobs = 0;  // the chosen token's logprob: compares the logits
    return req;
  }
  // The next request after a cancelled one equals the same request on a fresh engine.
  void expect_like_fresh(Engine& used, const GenerateRequest& req, int64_t cached) {
    Engine fresh(*backend_, used.ctx(), 64 << 20);
    const Outcome want = run(fresh, req), got = run(used, req);
    ASSERT_TRUE(got.res.ok() && want.res.ok());
    EXPECT_EQ(got.res->cached_tokens, cached);
    EXPECT_EQ(got.res->finish_reason, want.res->finish_reason);
    EXPECT_EQ(got.ids, want.ids);
    EXPECT_EQ(got.logprobs, want.logprobs);
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> backend_;
  int n_layer_ = 0;
};

// A 2,000-token prompt (a 300-token cut, then 7 chunks of 256) is cancelled from another thread
// once 12 layer checks have passed (the cut's 2 chunks are done). generate() returns
// "cancelled" within about one layer of the flag flipping, the cache holds only the cut, and the
// same request then restores the cut and matches a fresh engine token for token and logit for
// logit.
TEST_F(EngineCancel, PrefillCancelledFromAnotherThread) {
  const auto prompt = test::prompt_ids(2000, backend_->n_vocab(), kPromptSeed);
  GenerateRequest req = request(prompt, 6, /*snapshot_at=*/300);

  // The uncancelled prefill: its time and how many checks it makes.
  std::atomic<int> checks{0};
  req.cancelled = [&] {
    ++checks;
    return false;
  };
  Engine timing(*backend_, 4096, 64 << 20);
  const Outcome full = run(timing, req);
  ASSERT_TRUE(full.res.ok());
  const double full_ms = full.res->prefill_seconds * 1e3;
  const int full_checks = 9 * n_layer_;  // prefill: (2 + 7 chunks) × layers
  // Then one before each of the 6 tokens and one per layer of the 5 steps feeding them back.
  EXPECT_EQ(checks.load(), full_checks + 6 + 5 * n_layer_);
  const double layer_ms = full_ms / full_checks;

  Engine e(*backend_, 4096, 64 << 20);
  std::atomic<bool> flag{false};
  checks = 0;
  req.cancelled = [&] {
    ++checks;
    return flag.load();
  };
  Clock::time_point flipped;
  std::thread watcher([&] {
    while (checks.load() < 12) std::this_thread::yield();
    flipped = Clock::now();
    flag = true;
  });
  const Outcome cancelled = run(e, req);
  const auto returned = Clock::now();
  watcher.join();
  ASSERT_TRUE(cancelled.res.ok());
  EXPECT_EQ(cancelled.res->finish_reason, "cancelled");
  EXPECT_EQ(cancelled.res->completion_tokens, 0);
  EXPECT_TRUE(cancelled.ids.empty());
  const double latency_ms = ms_between(flipped, returned);
  std::printf(
      "prefill of 2,000 tokens: %.1f ms (%.2f ms per layer of a chunk); cancelled after %d of "
      "%d checks, %.2f ms from the flag to generate() returning\n",
      full_ms, layer_ms, checks.load(), full_checks, latency_ms);
  EXPECT_LT(latency_ms, full_ms / 4) << "about one layer (" << layer_ms << " ms) expected";
  EXPECT_LT(checks.load(), full_checks);
  EXPECT_EQ(e.cache().size(), 1u);  // the cut at 300 tokens, nothing later

  req.cancelled = {};
  expect_like_fresh(e, req, /*cached=*/300);
}

// Cancelled before its cut: nothing is kept, and the next request starts from the empty state.
TEST_F(EngineCancel, PrefillCancelledBeforeTheCutKeepsNothing) {
  const auto prompt = test::prompt_ids(700, backend_->n_vocab(), kPromptSeed);
  GenerateRequest req = request(prompt, 5, /*snapshot_at=*/600);
  int checks = 0;
  req.cancelled = [&] { return ++checks >= 3; };  // layer 3 of the first chunk
  Engine e(*backend_, 1024, 64 << 20);
  const Outcome r = run(e, req);
  ASSERT_TRUE(r.res.ok());
  EXPECT_EQ(r.res->finish_reason, "cancelled");
  EXPECT_EQ(checks, 3);
  EXPECT_EQ(e.cache().size(), 0u);
  req.cancelled = {};
  expect_like_fresh(e, req, /*cached=*/0);
}

// Cancelled as the prefill ends (the check after its last layer, before the first token is
// chosen): no token. Then once the third token is shown: the next check (in the step feeding it
// back) stops the request; no fourth token. Neither keeps a snapshot of its end.
TEST_F(EngineCancel, DecodeCancelledBetweenTokens) {
  const auto prompt = test::prompt_ids(40, backend_->n_vocab(), kPromptSeed);  // one chunk: n_layer checks
  GenerateRequest req = request(prompt, 12);
  int checks = 0;
  req.cancelled = [&] { return ++checks > n_layer_; };
  Engine e(*backend_, 1024, 64 << 20);
  Outcome r = run(e, req);
  ASSERT_TRUE(r.res.ok());
  EXPECT_EQ(r.res->finish_reason, "cancelled");
  EXPECT_EQ(r.res->completion_tokens, 0);
  EXPECT_TRUE(r.ids.empty());
  EXPECT_EQ(e.cache().size(), 0u);

  bool flag = false;
  req.cancelled = [&] { return flag; };
  r = run(e, req, [&](int n) { flag = n == 3; });
  ASSERT_TRUE(r.res.ok());
  EXPECT_EQ(r.res->finish_reason, "cancelled");
  EXPECT_EQ(r.res->completion_tokens, 3);
  EXPECT_EQ(r.ids.size(), 3u);
  EXPECT_EQ(e.cache().size(), 0u);
  req.cancelled = {};
  expect_like_fresh(e, req, /*cached=*/0);
}

// The flag flips inside the decode step that feeds the second token back (at its third layer):
// the step stops there, and the half-run state is neither kept nor read by the next request.
TEST_F(EngineCancel, DecodeCancelledInsideAStep) {
  const auto prompt = test::prompt_ids(40, backend_->n_vocab(), kPromptSeed);
  GenerateRequest req = request(prompt, 12);
  int armed_calls = -1;  // checks since the second token; -1: not yet
  req.cancelled = [&] { return armed_calls >= 0 && ++armed_calls >= 3; };
  Engine e(*backend_, 1024, 64 << 20);
  const Outcome r = run(e, req, [&](int n) {
    if (n == 2) armed_calls = 0;
  });
  ASSERT_TRUE(r.res.ok());
  EXPECT_EQ(r.res->finish_reason, "cancelled");
  EXPECT_EQ(r.res->completion_tokens, 2);
  EXPECT_EQ(armed_calls, 3);  // the step's third layer, not a check after it
  EXPECT_EQ(e.cache().size(), 0u);
  req.cancelled = {};
  expect_like_fresh(e, req, /*cached=*/0);
}

// On-device decoding (here emulated on the host) stops at the next pick after the flag.
TEST_F(EngineCancel, DeviceDecodeCancelled) {
  LockstepPicks device(*backend_);
  const auto prompt = test::prompt_ids(40, backend_->n_vocab(), kPromptSeed);
  GenerateRequest req = request(prompt, 12);
  req.top_logprobs = -1;  // on-device decoding has no logprobs
  bool flag = false;
  req.cancelled = [&] { return flag; };
  Engine e(device, 1024, 64 << 20);
  Outcome r = run(e, req, [&](int n) { flag = n == 4; });
  ASSERT_TRUE(r.res.ok());
  EXPECT_EQ(r.res->finish_reason, "cancelled");
  EXPECT_EQ(r.res->completion_tokens, 4);
  EXPECT_EQ(r.ids.size(), 4u);
  EXPECT_EQ(e.cache().size(), 0u);

  req.cancelled = {};
  Engine fresh(device, 1024, 64 << 20);
  const Outcome want = run(fresh, req), got = run(e, req);
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.res->finish_reason, "length");
  EXPECT_EQ(std::vector<int32_t>(want.ids.begin(), want.ids.begin() + 4), r.ids);
}

}  // namespace
}  // namespace orchid
