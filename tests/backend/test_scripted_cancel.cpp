// The scripted backend's slow prefill ("prefill_ms_per_token") and its cancellation: a cancelled
// prompt stops within a piece of kScriptPiece tokens, and the next request gets its reply.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "../test_util.h"
#include "orchid/backend/scripted/scripted_backend.h"
#include "orchid/runtime/engine.h"

namespace orchid {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int32_t kEos = 1;

TEST(ScriptedCancel, ScriptReadsThePrefillDelay) {
  test::ScratchDir dir;
  test::write_text(dir / "a.json", R"({"replies": ["hi"], "prefill_ms_per_token": 2.5})");
  auto s = load_script(dir / "a.json");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->replies, std::vector<std::string>{"hi"});
  EXPECT_EQ(s->prefill_ms_per_token, 2.5);
  test::write_text(dir / "b.json", R"({"replies": ["hi"]})");
  s = load_script(dir / "b.json");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->prefill_ms_per_token, 0.0);
  test::write_text(dir / "c.json", R"({"replies": ["hi"], "prefill_ms_per_token": -1})");
  s = load_script(dir / "c.json");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(test::contains(s.message(), "c.json"));
  EXPECT_TRUE(test::contains(s.message(), "prefill_ms_per_token"));
}

// 500 prompt tokens at 1 ms each, cancelled from another thread after 50 ms: generate() returns
// "cancelled" about one 16-token piece after the flag, and the next request runs in full.
TEST(ScriptedCancel, SlowPrefillIsCancelledWithinAPiece) {
  auto backend = make_scripted_backend(64, {{10, 11, 12}}, kEos, /*prefill_ms_per_token=*/1.0);
  Engine e(*backend, 1024, 1 << 20);
  GenerateRequest req;
  req.prompt.assign(500, 5);
  req.stop_ids = {kEos};
  std::atomic<bool> flag{false};
  std::atomic<int> checks{0};
  req.cancelled = [&] {
    ++checks;
    return flag.load();
  };
  Clock::time_point flipped;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    flipped = Clock::now();
    flag = true;
  });
  std::vector<int32_t> ids;
  const auto t0 = Clock::now();
  auto r = e.generate(req, [&](const TokenEvent& ev) {
    ids.push_back(ev.id);
    return true;
  });
  const auto returned = Clock::now();
  canceller.join();
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->finish_reason, "cancelled");
  EXPECT_TRUE(ids.empty());
  const double latency_ms = std::chrono::duration<double, std::milli>(returned - flipped).count();
  std::printf(
      "scripted prefill cancelled after %d checks, %.1f ms in all, %.1f ms after the flag\n",
      checks.load(), std::chrono::duration<double, std::milli>(returned - t0).count(), latency_ms);
  EXPECT_LT(latency_ms, 150.0);  // one piece is 16 ms; the whole prompt 500
  EXPECT_LT(checks.load(), 500 / int(kScriptPiece));
  EXPECT_EQ(e.cache().size(), 0u);

  req.cancelled = {};
  req.prompt.assign(20, 5);
  ids.clear();
  r = e.generate(req, [&](const TokenEvent& ev) {
    ids.push_back(ev.id);
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->finish_reason, "stop");
  EXPECT_EQ(ids, (std::vector<int32_t>{10, 11, 12}));
}

// Without a delay the check is still asked: a request cancelled up front does nothing.
TEST(ScriptedCancel, CancelledUpFront) {
  auto backend = make_scripted_backend(64, {{10, 11}}, kEos);
  auto st = backend->new_state(64);
  ASSERT_TRUE(st.ok());
  std::vector<float> logits;
  const std::vector<int32_t> prompt = {2, 3, 4};
  Status s = backend->forward(**st, prompt, LogitsMode::last, logits, 0, [] { return true; });
  EXPECT_TRUE(s.cancelled()) << s.message();
  EXPECT_EQ((*st)->n_past(), 0);
}

}  // namespace
}  // namespace orchid
