// The engine on the CUDA backend: decoding with the next token chosen on the device gives the
// same greedy output as host-side sampling (ORCHID_DEVICE_DECODE=0), stops on stop ids, and
// leaves the state cache exact (a follow-up turn reusing the cached prefix matches a fresh run).
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cuda_test_util.h"
#include "orchid/model/model.h"
#include "orchid/runtime/engine.h"

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
