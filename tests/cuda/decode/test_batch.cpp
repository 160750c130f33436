// The batched decode (decode/batch.cpp): lanes stepped together get exactly the picks, and end
// with exactly the states, that each gets alone from decode_on_device — greedy and sampled, with
// stop ids, a caller that stops early and a short pick budget; contexts on both attention widths
// and one crossing from one to the other mid-run (8,190 tokens: 64 → 128 KV ranges). Model: an
// 8-layer cut of Qwen3.6-35B-A3B (2 attention layers) with random weights made on the device, so
// every batched kernel runs on its real shapes. Through the engine, streams at once share bursts.
#include <atomic>
#include <random>
#include <string>
#include <thread>

#include "../cuda_test_util.h"
#include "orchid/backend/cuda/cuda_backend_impl.h"
#include "orchid/model/config.h"
#include "orchid/runtime/engine.h"

namespace orchid {
namespace {

class CudaBatch : public ::testing::Test {
 protected:
  void SetUp() override {
    ORCHID_REQUIRE_GPU();
    auto cfg = builtin_config("qwen3.6-35b-a3b");
    ASSERT_TRUE(cfg.has_value());
    cfg->n_layer = 8;
    cfg->layer_types.resize(8);
    auto be = make_cuda_synthetic_backend(*cfg, 20261204);
    ASSERT_TRUE(be.ok()) << be.message();
    be_ = std::move(*be);
    cuda_ = dynamic_cast<cuda::CudaBackend*>(be_.get());
    ASSERT_NE(cuda_, nullptr);
  }

  std::unique_ptr<Backend> be_;
  cuda::CudaBackend* cuda_ = nullptr;
};

struct LaneSpec {
  int64_t context;
  int max_new;
  float temperature;
  int stop_after;    // the caller says stop at this pick (0: never)
  bool stop_id;      // the pick alone makes at step 9 becomes a stop id
};

TEST_F(CudaBatch, LanesGetTheirTokensAlone) {
  if (!cuda_->batch_step_runs()) GTEST_SKIP() << "no batched step on this device";
  const std::vector<LaneSpec> specs = {
      {100, 40, 0.f, 0, false},   {3000, 40, 0.8f, 0, false}, {8190, 40, 0.f, 0, true},
      {20000, 40, 0.f, 12, false}, {600, 7, 1.f, 0, false},
  };
  const int B = int(specs.size());
  std::vector<std::unique_ptr<BackendState>> states;
  std::vector<std::unique_ptr<StateSnapshot>> snaps;
  for (int b = 0; b < B; ++b) {
    auto st = be_->new_state(32768);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_TRUE(be_->fill_synthetic_context(**st, specs[size_t(b)].context, 100 + b).ok());
    snaps.push_back(be_->snapshot(**st));
    states.push_back(std::move(*st));
  }
  auto make_lanes = [&](std::vector<std::vector<int32_t>>& shown,
                        const std::vector<int32_t>& stop_ids) {
    std::vector<DecodeLane> lanes(static_cast<size_t>(B));
    shown.assign(static_cast<size_t>(B), {});
    for (int b = 0; b < B; ++b) {
      const LaneSpec& s = specs[size_t(b)];
      DecodeLane& l = lanes[size_t(b)];
      l.state = states[size_t(b)].get();
      l.token = int32_t(1000 + 77 * b);
      l.max_new = s.max_new;
      l.opts.temperature = s.temperature;
      l.opts.seed = uint64_t(9 + b);
      if (stop_ids[size_t(b)] >= 0) l.opts.stop_ids = {stop_ids[size_t(b)]};
      l.on_token = [&shown, b, s](int32_t id) {
        shown[size_t(b)].push_back(id);
        return s.stop_after == 0 || int(shown[size_t(b)].size()) < s.stop_after;
      };
    }
    return lanes;
  };
  auto restore_all = [&] {
    for (int b = 0; b < B; ++b) ASSERT_TRUE(be_->restore(*states[size_t(b)], *snaps[size_t(b)]).ok());
  };
  // Alone, first without stop ids to find each stop lane's 9th pick.
  std::vector<int32_t> stop_ids(static_cast<size_t>(B), -1);
  std::vector<std::vector<int32_t>> probe;
  {
    auto lanes = make_lanes(probe, stop_ids);
    for (DecodeLane& l : lanes) ASSERT_TRUE(be_->Backend::decode_batch(std::span(&l, 1)).ok());
  }
  for (int b = 0; b < B; ++b)
    if (specs[size_t(b)].stop_id) stop_ids[size_t(b)] = probe[size_t(b)].at(8);
  restore_all();
  std::vector<std::vector<int32_t>> alone_shown, alone_consumed(static_cast<size_t>(B));
  std::vector<int64_t> alone_past(static_cast<size_t>(B));
  {
    auto lanes = make_lanes(alone_shown, stop_ids);
    for (int b = 0; b < B; ++b) {
      ASSERT_TRUE(be_->Backend::decode_batch(std::span(&lanes[size_t(b)], 1)).ok());
      alone_consumed[size_t(b)] = lanes[size_t(b)].consumed;
      alone_past[size_t(b)] = states[size_t(b)]->n_past();
    }
  }
  // Twice batched (the second launch reuses the captured graph).
  for (int round = 0; round < 2; ++round) {
    restore_all();
    std::vector<std::vector<int32_t>> shown;
    auto lanes = make_lanes(shown, stop_ids);
    const Status s = be_->decode_batch(lanes);
    ASSERT_TRUE(s.ok()) << s.message();
    for (int b = 0; b < B; ++b) {
      EXPECT_EQ(shown[size_t(b)], alone_shown[size_t(b)]) << "lane " << b << " round " << round;
      EXPECT_EQ(lanes[size_t(b)].consumed, alone_consumed[size_t(b)]) << "lane " << b;
      EXPECT_EQ(states[size_t(b)]->n_past(), alone_past[size_t(b)]) << "lane " << b;
    }
  }
  EXPECT_EQ(alone_shown[2].size(), 8u);  // the stop id ended it (not shown)
  EXPECT_EQ(alone_shown[3].size(), 12u);
  EXPECT_EQ(alone_shown[4].size(), 7u);
  // After the batch each state decodes on alone exactly as it would have.
  std::vector<int32_t> after_alone, after_batch;
  for (std::vector<int32_t>* out : {&after_alone, &after_batch}) {
    restore_all();
    std::vector<std::vector<int32_t>> shown;
    auto lanes = make_lanes(shown, stop_ids);
    if (out == &after_batch)
      ASSERT_TRUE(be_->decode_batch(lanes).ok());
    else
      for (DecodeLane& l : lanes) ASSERT_TRUE(be_->Backend::decode_batch(std::span(&l, 1)).ok());
    auto more = be_->decode_on_device(*states[0], shown[0].back(), 16, DeviceDecodeOptions{},
                                      [&](int32_t id) {
                                        out->push_back(id);
                                        return true;
                                      });
    ASSERT_TRUE(more.ok()) << more.message();
  }
  EXPECT_EQ(after_batch, after_alone);
}

// Eight greedy streams at once through the engine: each gets its tokens alone, in bursts that
// step several of them together.
TEST_F(CudaBatch, EngineStreamsAtOnceGetTheirTokensAlone) {
  if (!cuda_->batch_step_runs()) GTEST_SKIP() << "no batched step on this device";
  constexpr int kN = 8;
  auto request = [&](int i) {
    GenerateRequest req;
    std::mt19937_64 rng(uint64_t(i) + 1);
    for (int k = 0; k < 40 + 13 * i; ++k) req.prompt.push_back(int32_t(rng() % 200000));
    req.max_tokens = 50 + 9 * i;
    req.sampler.greedy = true;
    return req;
  };
  auto run = [&](Engine& e, int i) {
    std::vector<int32_t> out;
    auto r = e.generate(request(i), [&](const TokenEvent& ev) {
      out.push_back(ev.id);
      return true;
    });
    EXPECT_TRUE(r.ok()) << r.message();
    return out;
  };
  std::vector<std::vector<int32_t>> alone(kN), together(kN);
  {
    Engine engine(*be_, 4096, 0, 1);
    for (int i = 0; i < kN; ++i) alone[size_t(i)] = run(engine, i);
  }
  Engine engine(*be_, 4096, 0, kN);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kN; ++i)
    threads.emplace_back([&, i] {
      ++ready;
      while (ready.load() < kN) std::this_thread::yield();
      together[size_t(i)] = run(engine, i);
    });
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kN; ++i) EXPECT_EQ(together[size_t(i)], alone[size_t(i)]) << "stream " << i;
  const BatchStats bs = engine.batch_stats();
  std::printf("[ cuda batch ] %lld bursts, %lld lanes, at most %lld at once\n",
              (long long)bs.bursts, (long long)bs.lanes, (long long)bs.max_lanes);
  EXPECT_GE(bs.max_lanes, 4);
}

}  // namespace
}  // namespace orchid
