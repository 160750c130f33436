// The engine on the CUDA backend: decoding with the next token chosen on the device gives the
// same greedy output as host-side sampling (ORCHID_DEVICE_DECODE=0), stops on stop ids, and
// leaves the state cache exact (a follow-up turn reusing the cached prefix matches a fresh run).
#include <algorithm>
#include <cstdlib>
#include <random>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cuda_test_util.h"
#include "orchid/model/model.h"
#include "orchid/runtime/engine.h"
#include "orchid/runtime/token_constraint.h"

namespace orchid {
namespace {

std::string fixture(const std::string& rel) {
  return std::string(ORCHID_SOURCE_DIR) + "/tests/fixtures/golden/" + rel;
}

struct Outcome {
  std::vector<int32_t> tokens;
  GenerateResult result;
};

Outcome run(Engine& e, const GenerateRequest& req) {
  Outcome r;
  auto res = e.generate(req, [&](const TokenEvent& ev) {
    r.tokens.push_back(ev.id);
    return true;
  });
  EXPECT_TRUE(res.ok()) << res.message();
  if (res) r.result = *res;
  return r;
}

class CudaEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    ORCHID_REQUIRE_GPU();
    auto m = load_model(fixture("tiny/mlx4"));
    ASSERT_TRUE(m.ok()) << m.message();
    model_ = std::move(*m);
    auto b = make_cuda_backend(*model_);
    ASSERT_TRUE(b.ok()) << b.message();
    backend_ = std::move(*b);
    std::ifstream in(fixture("tiny/ref/golden.json"));
    req_.prompt = nlohmann::json::parse(in)["prompts"][0].get<std::vector<int32_t>>();
    req_.max_tokens = 24;
    req_.sampler.greedy = true;
  }
  Outcome host_run(const GenerateRequest& req) {
    setenv("ORCHID_DEVICE_DECODE", "0", 1);
    Engine e(*backend_, 1024, int64_t(64) << 20);
    Outcome r = run(e, req);
    unsetenv("ORCHID_DEVICE_DECODE");
    return r;
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> backend_;
  GenerateRequest req_;
};

TEST_F(CudaEngine, DeviceDecodingMatchesHostSampling) {
  Engine e(*backend_, 1024, int64_t(64) << 20);
  const Outcome dev = run(e, req_);
  const Outcome host = host_run(req_);
  EXPECT_EQ(dev.tokens, host.tokens);
  EXPECT_EQ(dev.tokens.size(), 24u);
  EXPECT_EQ(dev.result.finish_reason, "length");
}

// A constraint allowing a fresh random third of the vocabulary at each step (the same sets for
// the same seed), for comparing masked picks on the device with masked sampling on the host.
class RandomSubsets final : public TokenConstraint {
 public:
  RandomSubsets(int64_t n_vocab, uint64_t seed) : n_(n_vocab), seed_(seed) {}
  const std::vector<uint32_t>* allowed(int64_t) override {
    std::mt19937_64 rng(seed_ * 7919 + uint64_t(step_));
    bits_.assign(size_t((n_ + 31) / 32), 0u);
    for (int64_t i = 0; i < n_; ++i)
      if (rng() % 3 == 0) bits_[size_t(i) >> 5] |= 1u << (i & 31);
    bits_[0] |= 1u;  // never empty
    return &bits_;
  }
  bool accept(int32_t id) override {
    const bool ok = bits_[size_t(id) >> 5] >> (id & 31) & 1;
    ++step_;
    picks.push_back(ok);
    return ok;
  }
  std::vector<bool> picks;

 private:
  int64_t n_;
  uint64_t seed_;
  int step_ = 0;
  std::vector<uint32_t> bits_;
};

TEST_F(CudaEngine, MaskedPicksOnTheDeviceMatchTheHost) {
  GenerateRequest req = req_;
  req.constraint = std::make_shared<RandomSubsets>(backend_->n_vocab(), 5);
  Engine e(*backend_, 1024, int64_t(64) << 20);
  const Outcome dev = run(e, req);
  req.constraint = std::make_shared<RandomSubsets>(backend_->n_vocab(), 5);
  const Outcome host = host_run(req);
  EXPECT_EQ(dev.tokens, host.tokens);
  EXPECT_EQ(dev.tokens.size(), 24u);
  // Sampling at temperature 1 on the device: every pick inside its step's set.
  auto sub = std::make_shared<RandomSubsets>(backend_->n_vocab(), 11);
  req.constraint = sub;
  req.sampler.greedy = false;
  req.sampler.temperature = 1.f;
  req.sampler.seed = 3;
  req.max_tokens = 64;
  Engine e2(*backend_, 1024, int64_t(64) << 20);
  const Outcome sampled = run(e2, req);
  EXPECT_EQ(sampled.tokens.size(), 64u);
  EXPECT_EQ(std::count(sub->picks.begin(), sub->picks.end(), true), 64);
}

// Two conversations interleaved in two slots (two device states): each turn after the first
// resumes from its own snapshot and matches a fresh engine's greedy output.
TEST_F(CudaEngine, InterleavedConversationsKeepTheirSlots) {
  Engine engine(*backend_, 1024, int64_t(64) << 20, /*slots=*/2);
  std::vector<int32_t> x = req_.prompt, y(req_.prompt.rbegin(), req_.prompt.rend());
  for (int turn = 0; turn < 3; ++turn) {
    for (std::vector<int32_t>* h : {&x, &y}) {
      GenerateRequest req = req_;
      req.prompt = *h;
      req.max_tokens = 6;
      const Outcome got = run(engine, req);
      Engine fresh(*backend_, 1024, int64_t(64) << 20);
      EXPECT_EQ(got.tokens, run(fresh, req).tokens) << "turn " << turn;
      if (turn > 0) {
        EXPECT_EQ(got.result.cached_tokens, int64_t(h->size()) - 3) << "turn " << turn;
      }
      h->insert(h->end(), got.tokens.begin(), got.tokens.end());
      h->insert(h->end(), {5, 6});
    }
  }
}

// The server's default context: the model's limit when the GPU holds its state, and a state
// of that size can be made.
TEST_F(CudaEngine, DefaultContextFitsTheGpu) {
  const int64_t ctx = backend_->max_context(262144);
  EXPECT_EQ(ctx, 262144);  // the tiny model's state is small
  auto st = backend_->new_state(ctx);
  EXPECT_TRUE(st.ok()) << st.message();
}

TEST_F(CudaEngine, StopIdEndsDeviceDecoding) {
  const Outcome all = host_run(req_);
  ASSERT_GE(all.tokens.size(), 8u);
  GenerateRequest req = req_;
  req.stop_ids = {all.tokens[6]};
  Engine e(*backend_, 1024, int64_t(64) << 20);
  const Outcome dev = run(e, req);
  const auto first = std::find(all.tokens.begin(), all.tokens.end(), all.tokens[6]);
  EXPECT_EQ(dev.tokens, std::vector<int32_t>(all.tokens.begin(), first));
  EXPECT_EQ(dev.result.finish_reason, "stop");
}

TEST_F(CudaEngine, FollowUpTurnReusesTheCacheAndMatchesAFreshRun) {
  Engine e(*backend_, 1024, int64_t(64) << 20);
  const Outcome turn1 = run(e, req_);
  GenerateRequest req2 = req_;
  req2.prompt.insert(req2.prompt.end(), turn1.tokens.begin(), turn1.tokens.end() - 1);
  req2.prompt.push_back(7);  // a "new message" token
  const Outcome turn2 = run(e, req2);
  EXPECT_GT(turn2.result.cached_tokens, int64_t(req_.prompt.size()));
  Engine fresh(*backend_, 1024, int64_t(64) << 20);
  const Outcome again = run(fresh, req2);
  EXPECT_EQ(again.result.cached_tokens, 0);
  EXPECT_EQ(turn2.tokens, again.tokens);
}

}  // namespace
}  // namespace orchid
