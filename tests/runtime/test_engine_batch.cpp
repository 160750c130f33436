// The engine's batched decode: requests decoding on the device at once run as lanes of one
// batch (Backend::decode_batch), and each gets exactly the tokens it gets alone. The CPU backend
// has no on-device picks, so a wrapper (tests/lockstep_picks.h) gives it greedy ones and steps its
// lanes together.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "../lockstep_picks.h"
#include "../tiny_cpu_model.h"
#include "orchid/runtime/engine.h"

namespace orchid {
namespace {

class EngineBatchTest : public TinyCpuModel {
 protected:
  static GenerateRequest request(int i) {
    GenerateRequest req;
    for (int k = 0; k < 5 + i; ++k) req.prompt.push_back(int32_t((37 * i + 11 * k) % 500 + 3));
    req.max_tokens = 20 + 7 * i;  // several bursts of kTurnBurst for the longer ones
    req.sampler.greedy = true;
    if (i % 3 == 2) req.stop_ids = {int32_t(100 + i)};
    return req;
  }
  static std::vector<int32_t> run(Engine& e, const GenerateRequest& req) {
    std::vector<int32_t> out;
    auto r = e.generate(req, [&](const TokenEvent& ev) {
      out.push_back(ev.id);
      return true;
    });
    EXPECT_TRUE(r.ok()) << r.message();
    return out;
  }
};

// Six requests at once on six slots: batches of several lanes form, and each request's tokens
// equal its tokens alone; a follow-up turn of each then resumes from its slot's cached state.
TEST_F(EngineBatchTest, LanesAtOnceGetTheirTokensAlone) {
  constexpr int kN = 6;
  LockstepPicks picks(*backend_);
  std::vector<std::vector<int32_t>> alone(kN), together(kN);
  {
    Engine engine(picks, 512, 64 << 20, 1);
    for (int i = 0; i < kN; ++i) alone[size_t(i)] = run(engine, request(i));
  }
  EXPECT_EQ(alone[0].size(), 20u);
  Engine engine(picks, 512, 64 << 20, kN);
  // A start line so that all six decode at the same time.
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kN; ++i)
    threads.emplace_back([&, i] {
      ++ready;
      while (ready.load() < kN) std::this_thread::yield();
      together[size_t(i)] = run(engine, request(i));
    });
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kN; ++i) EXPECT_EQ(together[size_t(i)], alone[size_t(i)]) << "request " << i;
  const BatchStats bs = engine.batch_stats();
  EXPECT_GE(bs.max_lanes, 2);
  EXPECT_GT(bs.lanes, bs.bursts);  // mean batch above one
  int biggest = 0;
  for (int b : picks.batches) biggest = std::max(biggest, b);
  EXPECT_EQ(biggest, bs.max_lanes);
  std::printf("batched decode: %lld bursts, %lld lanes, at most %lld at once\n",
              (long long)bs.bursts, (long long)bs.lanes, (long long)bs.max_lanes);
}

// A request arriving while two others decode: the batch pauses for its prefill (which waits for a
// turn), so its first token comes long before theirs end, and every request still gets its tokens
// alone.
TEST_F(EngineBatchTest, ABurstPausesForAWaitingPrefill) {
  LockstepPicks picks(*backend_);
  auto req = [&](int i, int n) {
    GenerateRequest r = request(i);
    r.stop_ids.clear();
    r.max_tokens = n;
    return r;
  };
  std::vector<std::vector<int32_t>> alone(3), together(3);
  {
    Engine engine(picks, 512, 64 << 20, 1);
    for (int i = 0; i < 3; ++i) alone[size_t(i)] = run(engine, req(i, i < 2 ? 300 : 8));
  }
  Engine engine(picks, 512, 64 << 20, 3);
  std::atomic<int> tokens{0}, done{0};
  std::atomic<int> done_when_third_started{-1};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      auto r = engine.generate(req(i, 300), [&](const TokenEvent& ev) {
        together[size_t(i)].push_back(ev.id);
        ++tokens;
        return true;
      });
      ASSERT_TRUE(r.ok()) << r.message();
      ++done;
    });
  while (tokens.load() < 20) std::this_thread::yield();
  const int pauses_before = picks.pauses.load();
  together[2] = run(engine, req(2, 8));
  done_when_third_started = done.load();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(done_when_third_started.load(), 0) << "the third waited for the others to end";
  EXPECT_GT(picks.pauses.load(), pauses_before);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(together[size_t(i)], alone[size_t(i)]) << "request " << i;
}

// A lane whose caller stops early (on_token false) ends alone; the others run to their end.
TEST_F(EngineBatchTest, ACallerStoppingEndsOnlyItsLane) {
  LockstepPicks picks(*backend_);
  Engine engine(picks, 512, 64 << 20, 3);
  std::vector<int> got(3, 0);
  std::vector<std::string> reasons(3);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i)
    threads.emplace_back([&, i] {
      GenerateRequest req = request(i);
      req.stop_ids.clear();
      req.max_tokens = 40;
      ++ready;
      while (ready.load() < 3) std::this_thread::yield();
      auto r = engine.generate(req, [&](const TokenEvent&) { return ++got[size_t(i)] < 5 || i != 1; });
      ASSERT_TRUE(r.ok()) << r.message();
      reasons[size_t(i)] = r->finish_reason;
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(got, (std::vector<int>{40, 5, 40}));
  EXPECT_EQ(reasons, (std::vector<std::string>{"length", "stop", "length"}));
}

}  // namespace
}  // namespace orchid
