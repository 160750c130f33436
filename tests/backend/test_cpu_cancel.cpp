// The CPU backend's cancellation: forward() asks its CancelCheck before every layer of every
// 256-token chunk, stops at the first true with a cancelled() error and n_past where it was, and
// a state restored from a snapshot then runs exactly like one never cancelled.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "../test_util.h"
#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/model/model.h"

namespace orchid {
namespace {

// The stand-in prompts' seed (test::prompt_ids).
constexpr uint64_t kPromptSeed = 0x9e3779b97f4a7c15ull;

using Clock = std::chrono::steady_clock;

constexpr int64_t kChunk = 256;  // the CPU backend's default prefill chunk

// n ids in [3, vocab), the same every run.
// Counts its calls; says stop from call `stop_at` on (1-based; 0: never), noting when it first
// did.
struct CountingCheck {
  int calls = 0;
  int stop_at = 0;
  Clock::time_point flipped{};
  CancelCheck fn() {
    return [this] {
      ++calls;
      if (stop_at == 0 || calls < stop_at) return false;
      if (calls == stop_at) flipped = Clock::now();
      return true;
    };
  }
};

class CpuCancel : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = load_model(test::golden("tiny/mlx4"));
    ASSERT_TRUE(m.ok()) << m.message();
    model_ = std::move(*m);
    backend_ = make_cpu_backend(*model_);
    n_layer_ = model_->config.n_layer;
  }
  std::unique_ptr<BackendState> new_state() {
    auto st = backend_->new_state(2048);
    EXPECT_TRUE(st.ok()) << st.message();
    return st.ok() ? std::move(*st) : nullptr;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> backend_;
  int n_layer_ = 0;
};

// 1,100 tokens are 5 chunks of at most 256: the check runs before each of the 4 layers of each.
TEST_F(CpuCancel, AskedBeforeEveryLayerOfEveryChunk) {
  const auto ids = test::prompt_ids(1100, backend_->n_vocab(), kPromptSeed);
  const int chunks = int((1100 + kChunk - 1) / kChunk);
  auto st = new_state();
  CountingCheck check;
  std::vector<float> logits;
  ASSERT_TRUE(backend_->forward(*st, ids, LogitsMode::last, logits, 0, check.fn()).ok());
  EXPECT_EQ(check.calls, chunks * n_layer_);
  EXPECT_EQ(st->n_past(), 1100);
  // A decode step is one chunk of one token.
  check.calls = 0;
  const int32_t next = 7;
  ASSERT_TRUE(
      backend_->forward(*st, std::span(&next, 1), LogitsMode::last, logits, 0, check.fn()).ok());
  EXPECT_EQ(check.calls, n_layer_);
}

// Cancelled at layer 3 of chunk 3 of a 1,100-token forward after 100 tokens of context: the
// forward returns at that check, says so, and leaves n_past at 100; restoring the snapshot taken
// at 100 tokens, the same forward then gives exactly the logits of a state never cancelled.
TEST_F(CpuCancel, StopsAtTheNextLayerAndTheRestoredStateRunsAsNew) {
  const auto ids = test::prompt_ids(1200, backend_->n_vocab(), kPromptSeed);
  const std::span<const int32_t> head(ids.data(), 100), rest(ids.data() + 100, 1100);
  std::vector<float> want, got;
  {
    auto ref = new_state();
    ASSERT_TRUE(backend_->forward(*ref, head, LogitsMode::last, want).ok());
    ASSERT_TRUE(backend_->forward(*ref, rest, LogitsMode::all, want).ok());
  }
  auto st = new_state();
  ASSERT_TRUE(backend_->forward(*st, head, LogitsMode::last, got).ok());
  auto at_100 = backend_->snapshot(*st);

  CountingCheck check;
  check.stop_at = 2 * n_layer_ + 3;  // chunk 3 (tokens 512..767 of the call), layer 3
  const auto t0 = Clock::now();
  Status s = backend_->forward(*st, rest, LogitsMode::all, got, 0, check.fn());
  const auto t1 = Clock::now();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.cancelled()) << s.message();
  EXPECT_TRUE(test::contains(s.message(), "cancelled after 512 of 1100 tokens"));
  EXPECT_EQ(check.calls, check.stop_at);  // no layer ran after the check said stop
  EXPECT_EQ(st->n_past(), 100);
  std::printf("cancelled forward: %.2f ms in all, %.3f ms from the flag to the return\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count(),
              std::chrono::duration<double, std::milli>(t1 - check.flipped).count());

  ASSERT_TRUE(backend_->restore(*st, *at_100).ok());
  ASSERT_TRUE(backend_->forward(*st, rest, LogitsMode::all, got).ok());
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "logits differ after a cancelled forward and a restore";
  EXPECT_EQ(st->n_past(), 1200);
}

// Cancelled in its first layer, a decode step also reports it and leaves n_past alone; other
// errors are not cancellations.
TEST_F(CpuCancel, DecodeStepAndOtherErrors) {
  auto st = new_state();
  std::vector<float> logits;
  const std::vector<int32_t> ids = {5, 6, 7};
  ASSERT_TRUE(backend_->forward(*st, ids, LogitsMode::last, logits).ok());
  CountingCheck check;
  check.stop_at = 1;
  Status s =
      backend_->forward(*st, std::span(ids.data(), 1), LogitsMode::last, logits, 0, check.fn());
  EXPECT_TRUE(s.cancelled());
  EXPECT_EQ(st->n_past(), 3);
  const std::vector<int32_t> bad = {int32_t(backend_->n_vocab())};
  s = backend_->forward(*st, bad, LogitsMode::last, logits, 0, check.fn());
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(s.cancelled());
}

}  // namespace
}  // namespace orchid
