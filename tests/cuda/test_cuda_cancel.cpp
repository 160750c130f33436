// Cancellation on the CUDA backend: forward() asks its CancelCheck before each prefill chunk
// (and, on the step-by-step path, before each token), stops with a cancelled() error and n_past
// where it was, and the state restored from a snapshot then gives the logits of one never
// cancelled. Through the engine, on-device decoding stops at the next pick after the flag.
// Model: a 4-layer cut of Qwen3.6-35B-A3B with random weights made on the device (as in
// tests/cuda/prefill/test_prefill_model.cpp), in chunks of 64 tokens; the engine test runs the tiny fixture.
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "cuda_test_logits.h"
#include "cuda_test_util.h"
#include "orchid/backend/cuda/cuda_backend_impl.h"
#include "orchid/model/config.h"
#include "orchid/model/model.h"
#include "orchid/runtime/engine.h"

namespace orchid {
namespace {

constexpr int kChunk = 64;

// Counts its calls; says stop from call `stop_at` on (1-based; 0: never).
struct CountingCheck {
  int calls = 0;
  int stop_at = 0;
  CancelCheck fn() {
    return [this] {
      ++calls;
      return stop_at > 0 && calls >= stop_at;
    };
  }
};

class CudaCancel : public ::testing::Test {
 protected:
  void SetUp() override {
    ORCHID_REQUIRE_GPU();
    auto cfg = builtin_config("qwen3.6-35b-a3b");
    ASSERT_TRUE(cfg.has_value());
    cfg->n_layer = 4;
    cfg->layer_types.resize(4);
    auto be = make_cuda_synthetic_backend(*cfg, 20261204);
    ASSERT_TRUE(be.ok()) << be.message();
    be_ = std::move(*be);
    cuda_ = dynamic_cast<cuda::CudaBackend*>(be_.get());
    ASSERT_NE(cuda_, nullptr);
    ASSERT_TRUE(cuda_->prefill_supported());
    cuda_->switches().prefill_chunk = kChunk;
    std::mt19937_64 rng(7);
    ids_.resize(300);
    for (auto& id : ids_) id = int32_t(rng() % uint64_t(be_->n_vocab()));
  }
  void TearDown() override {
    if (cuda_) cuda_->switches().prefill = true;
  }

  // After 20 tokens of context, the other 280 (5 chunks) are cancelled at check `stop_at`:
  // `done` tokens were consumed; after restoring the snapshot at 20 tokens the same forward
  // matches a state never cancelled, at every position.
  void cancel_and_resume(int stop_at, int done) {
    const std::span<const int32_t> head(ids_.data(), 20), rest(ids_.data() + 20, 280);
    const int64_t V = be_->n_vocab();
    std::vector<float> want, got;
    {
      auto ref = be_->new_state(512);
      ASSERT_TRUE(ref.ok()) << ref.message();
      ASSERT_TRUE(be_->forward(**ref, head, LogitsMode::last, want).ok());
      ASSERT_TRUE(be_->forward(**ref, rest, LogitsMode::all, want).ok());
    }
    auto st = be_->new_state(512);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_TRUE(be_->forward(**st, head, LogitsMode::last, got).ok());
    auto at_20 = be_->snapshot(**st);
    ASSERT_NE(at_20, nullptr);

    CountingCheck check;
    check.stop_at = stop_at;
    const Status s = be_->forward(**st, rest, LogitsMode::all, got, 0, check.fn());
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(s.cancelled()) << s.message();
    EXPECT_NE(s.message().find("after " + std::to_string(done) + " of 280"), std::string::npos)
        << s.message();
    EXPECT_EQ(check.calls, stop_at);
    EXPECT_EQ((*st)->n_past(), 20);

    ASSERT_TRUE(be_->restore(**st, *at_20).ok());
    ASSERT_TRUE(be_->forward(**st, rest, LogitsMode::all, got).ok());
    ASSERT_EQ(got.size(), want.size());
    for (int t = 0; t < 280; ++t)
      ASSERT_LE(test::rel_l2(got.data() + t * V, want.data() + t * V, V), 1e-5)
          << "position " << t << " after a cancelled forward and a restore";
    // And one decode step on from there.
    const int32_t next = ids_[0];
    std::vector<float> a, b;
    ASSERT_TRUE(be_->forward(**st, std::span(&next, 1), LogitsMode::last, a).ok());
    auto ref = be_->new_state(512);
    ASSERT_TRUE(ref.ok());
    ASSERT_TRUE(be_->forward(**ref, head, LogitsMode::last, b).ok());
    ASSERT_TRUE(be_->forward(**ref, rest, LogitsMode::last, b).ok());
    ASSERT_TRUE(be_->forward(**ref, std::span(&next, 1), LogitsMode::last, b).ok());
    EXPECT_LE(test::rel_l2(a.data(), b.data(), V), 1e-5);
  }

  std::unique_ptr<Backend> be_;
  cuda::CudaBackend* cuda_ = nullptr;
  std::vector<int32_t> ids_;
};

TEST_F(CudaCancel, AskedBeforeEachChunk) {
  auto st = be_->new_state(512);
  ASSERT_TRUE(st.ok());
  CountingCheck check;
  std::vector<float> l;
  ASSERT_TRUE(be_->forward(**st, ids_, LogitsMode::last, l, 0, check.fn()).ok());
  EXPECT_EQ(check.calls, (300 + kChunk - 1) / kChunk);
}

// Cancelled before the third chunk: two chunks (128 tokens) were run.
TEST_F(CudaCancel, ChunkedPrefillCancelledThenRestored) {
  cancel_and_resume(/*stop_at=*/3, /*done=*/2 * kChunk);
}

// Cancelled before the first chunk: nothing ran.
TEST_F(CudaCancel, CancelledBeforeTheFirstChunk) {
  cancel_and_resume(/*stop_at=*/1, /*done=*/0);
}

// The step-by-step path (ORCHID_PREFILL_CHUNK=1): asked before each token.
TEST_F(CudaCancel, StepPathCancelledThenRestored) {
  cuda_->switches().prefill = false;
  cancel_and_resume(/*stop_at=*/31, /*done=*/30);
}

// The engine with on-device decoding: the flag flips once the fifth token is shown; the request
// ends "cancelled" with five tokens and keeps no snapshot, and the next request equals a fresh
// engine's.
TEST(CudaEngineCancel, DeviceDecodeCancelled) {
  ORCHID_REQUIRE_GPU();
  const std::string dir = std::string(ORCHID_SOURCE_DIR) + "/tests/fixtures/golden/tiny/";
  auto m = load_model(dir + "mlx4");
  ASSERT_TRUE(m.ok()) << m.message();
  auto b = make_cuda_backend(**m);
  ASSERT_TRUE(b.ok()) << b.message();
  Backend& be = **b;
  ASSERT_TRUE(be.can_decode_on_device());
  GenerateRequest req;
  std::ifstream in(dir + "ref/golden.json");
  req.prompt = nlohmann::json::parse(in)["prompts"][0].get<std::vector<int32_t>>();
  req.max_tokens = 24;
  bool flag = false;
  req.cancelled = [&] { return flag; };
  std::vector<int32_t> got;
  auto on_token = [&](const TokenEvent& ev) {
    got.push_back(ev.id);
    flag = got.size() == 5;
    return true;
  };
  Engine e(be, 1024, int64_t(64) << 20);
  auto r = e.generate(req, on_token);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->finish_reason, "cancelled");
  EXPECT_EQ(r->completion_tokens, 5);
  EXPECT_EQ(got.size(), 5u);
  EXPECT_EQ(e.cache().size(), 0u);

  req.cancelled = {};
  flag = false;
  const std::vector<int32_t> first_five = got;
  got.clear();
  Engine fresh(be, 1024, int64_t(64) << 20);
  ASSERT_TRUE(fresh
                  .generate(req,
                            [&](const TokenEvent& ev) {
                              got.push_back(ev.id);
                              return true;
                            })
                  .ok());
  const std::vector<int32_t> want = got;
  got.clear();
  ASSERT_TRUE(e.generate(req, [&](const TokenEvent& ev) {
                 got.push_back(ev.id);
                 return true;
               }).ok());
  EXPECT_EQ(got, want);
  EXPECT_EQ(std::vector<int32_t>(want.begin(), want.begin() + 5), first_five);
}

}  // namespace
}  // namespace orchid
