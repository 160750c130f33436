// Engine: multi-turn reuse through the state cache gives the same output as a fresh prefill
// while prefilling only the new tokens; stop ids, cancellation, context limits, scheduler.
#include <gtest/gtest.h>

#include <atomic>

#include "../tiny_cpu_model.h"
#include "orchid/runtime/engine.h"
#include "orchid/runtime/scheduler.h"

namespace orchid {
namespace {

class EngineTest : public TinyCpuModel {
 protected:
  std::vector<int32_t> run(Engine& e, const std::vector<int32_t>& prompt, int n,
                           GenerateResult* res = nullptr, int64_t snapshot_at = 0) {
    GenerateRequest req;
    req.prompt = prompt;
    req.max_tokens = n;
    req.snapshot_at = snapshot_at;
    std::vector<int32_t> out;
    auto r = e.generate(req, [&](const TokenEvent& ev) {
      out.push_back(ev.id);
      return true;
    });
    EXPECT_TRUE(r.ok()) << r.message();
    if (res && r.ok()) *res = *r;
    return out;
  }
};

// Two conversations interleaved (X1 Y1 X2 Y2 X3 Y3): with two slots each turn after a
// conversation's first resumes from its own cached state and gives the same output as a fresh
// engine; with one slot every such turn starts over (the other conversation overwrote it).
TEST_F(EngineTest, InterleavedConversationsKeepTheirSlots) {
  for (int slots : {1, 2}) {
    Engine engine(*backend_, 1024, 64 << 20, slots);
    std::vector<int32_t> x = {11, 22, 33, 44}, y = {99, 88, 77, 66, 55};
    for (int turn = 0; turn < 3; ++turn) {
      for (std::vector<int32_t>* h : {&x, &y}) {
        GenerateResult res;
        const auto reply = run(engine, *h, 6, &res);
        Engine fresh(*backend_, 1024, 64 << 20);
        EXPECT_EQ(reply, run(fresh, *h, 6)) << "slots " << slots << " turn " << turn;
        if (slots == 1) {
          EXPECT_EQ(res.cached_tokens, 0) << turn;
        } else if (turn > 0) {
          // All but the last reply token (never fed back) and the 2 new ones.
          EXPECT_EQ(res.cached_tokens, int64_t(h->size()) - 3) << turn;
        }
        h->insert(h->end(), reply.begin(), reply.end());
        h->insert(h->end(), {5, 6});  // the next user turn
      }
    }
  }
}

// A 4-turn conversation re-sending its whole history: turns 2-4 prefill only the new tokens
// and produce the same greedy output as a fresh engine given the same full prompt.
TEST_F(EngineTest, MultiTurnReusePrefillsOnlyNewTokens) {
  Engine reused(*backend_, 1024, 64 << 20);
  std::vector<int32_t> history = {11, 22, 33, 44, 55, 66, 77};
  for (int turn = 0; turn < 4; ++turn) {
    GenerateResult res;
    const auto reply = run(reused, history, 8, &res);
    Engine fresh(*backend_, 1024, 64 << 20);
    EXPECT_EQ(reply, run(fresh, history, 8)) << "turn " << turn;
    if (turn > 0) {
      // Everything but the previous reply's last token (never fed back) and the 3 new ones.
      EXPECT_EQ(res.cached_tokens, int64_t(history.size()) - 4) << "turn " << turn;
    } else {
      EXPECT_EQ(res.cached_tokens, 0);
    }
    history.insert(history.end(), reply.begin(), reply.end());
    for (int32_t t : {100 + turn, 200 + turn, 300 + turn}) history.push_back(t);
  }
  EXPECT_GE(reused.cache().hits(), 3);
}

// The next turn re-renders the reply differently (e.g. reasoning dropped): the snapshot at
// the generation prompt still serves everything before it.
TEST_F(EngineTest, SnapshotAtGenerationPromptServesARerenderedReply) {
  Engine e(*backend_, 1024, 64 << 20);
  std::vector<int32_t> turn1 = {5, 6, 7, 8, 9, 1, 2};  // ..., then a 2-token generation prompt
  run(e, turn1, 6, nullptr, /*snapshot_at=*/5);
  std::vector<int32_t> turn2 = {5, 6, 7, 8, 9, 1, 40, 41, 42, 3, 4, 1, 2};
  GenerateResult res;
  auto got = run(e, turn2, 6, &res);
  EXPECT_EQ(res.cached_tokens, 5);
  Engine fresh(*backend_, 1024, 64 << 20);
  EXPECT_EQ(got, run(fresh, turn2, 6));
}

TEST_F(EngineTest, StopIdsAndCallerStop) {
  Engine e(*backend_, 1024, 1 << 20);
  std::vector<int32_t> prompt = {1, 2, 3};
  auto free_run = run(e, prompt, 6);
  ASSERT_EQ(free_run.size(), 6u);
  GenerateRequest req;
  req.prompt = prompt;
  req.max_tokens = 6;
  req.stop_ids = {free_run[2]};
  std::vector<int32_t> out;
  auto r = e.generate(req, [&](const TokenEvent& ev) {
    out.push_back(ev.id);
    return true;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish_reason, "stop");
  EXPECT_EQ(out, std::vector<int32_t>(free_run.begin(), free_run.begin() + 2));
  int seen = 0;
  req.stop_ids.clear();
  r = e.generate(req, [&](const TokenEvent&) { return ++seen < 3; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->completion_tokens, 3);
  EXPECT_EQ(r->finish_reason, "stop");
}

TEST_F(EngineTest, LogprobsAreNormalised) {
  Engine e(*backend_, 1024, 1 << 20);
  GenerateRequest req;
  req.prompt = {1, 2, 3};
  req.max_tokens = 3;
  req.top_logprobs = 5;
  auto r = e.generate(req, [&](const TokenEvent& ev) {
    EXPECT_LE(ev.logprob, 0.f);
    EXPECT_EQ(ev.top.size(), 5u);
    EXPECT_EQ(ev.top[0].first, ev.id);  // greedy picks the most likely
    EXPECT_FLOAT_EQ(ev.top[0].second, ev.logprob);
    return true;
  });
  ASSERT_TRUE(r.ok());
}

TEST_F(EngineTest, PromptLongerThanContextIsRefusedUpFront) {
  Engine e(*backend_, 8, 1 << 20);
  std::vector<int32_t> prompt(8, 1);
  GenerateRequest req;
  req.prompt = prompt;
  auto r = e.generate(req, [](const TokenEvent&) { return true; });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("context"), std::string::npos);
  req.prompt = {1, 9999};
  r = e.generate(req, [](const TokenEvent&) { return true; });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("vocabulary"), std::string::npos);
}

TEST(Scheduler, RunsInOrderAndBoundsTheQueue) {
  std::vector<int> order;
  std::mutex mu;
  std::atomic<bool> release{false};
  {
    Scheduler s(2);
    ASSERT_TRUE(s.submit([&](bool) {
      while (!release) std::this_thread::yield();
      std::lock_guard l(mu);
      order.push_back(0);
    }));
    while (!s.busy()) std::this_thread::yield();
    EXPECT_TRUE(s.submit([&](bool) {
      std::lock_guard l(mu);
      order.push_back(1);
    }));
    EXPECT_TRUE(s.submit([&](bool) {
      std::lock_guard l(mu);
      order.push_back(2);
    }));
    EXPECT_FALSE(s.submit([&](bool) {}));  // queue full
    EXPECT_EQ(s.queued(), 2u);
    release = true;
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

}  // namespace
}  // namespace orchid
