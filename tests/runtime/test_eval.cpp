// Teacher-forced statistics (runtime/eval.h) on logits whose answers are known in closed form.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "orchid/runtime/eval.h"

namespace orchid {
namespace {

TEST(Eval, UniformLogitsHavePerplexityOfTheVocabulary) {
  const int64_t V = 7;
  std::vector<float> logits(3 * V, 0.25f);  // 3 positions, all uniform
  const std::vector<int32_t> ids = {1, 5, 2};
  EvalStats s;
  ASSERT_TRUE(add_eval_positions(s, logits, V, ids, 0, nullptr).ok());
  EXPECT_EQ(s.predictions, 2);  // the last position has no next token
  EXPECT_NEAR(s.perplexity(), 7.0, 1e-9);
  EXPECT_NEAR(s.mean_nll(), std::log(7.0), 1e-12);
  EXPECT_EQ(s.compared, 0);
  EXPECT_TRUE(std::isnan(s.top1_agreement()));
}

TEST(Eval, ChunksAddUpAndScoreTheNextToken) {
  // Two positions over V = 2: position 0 gives the next token (id 1) probability
  // e^2 / (1 + e^2); position 1 gives the next token (id 0) probability 1 / 2.
  const int64_t V = 2;
  const std::vector<int32_t> ids = {0, 1, 0};
  const std::vector<float> p0 = {0.f, 2.f}, p1 = {3.f, 3.f};
  EvalStats s;
  ASSERT_TRUE(add_eval_positions(s, p0, V, ids, 0, nullptr).ok());
  ASSERT_TRUE(add_eval_positions(s, p1, V, ids, 1, nullptr).ok());
  const double want = std::log1p(std::exp(-2.0)) + std::log(2.0);
  EXPECT_EQ(s.predictions, 2);
  EXPECT_NEAR(s.nll_sum, want, 1e-12);
}

TEST(Eval, AgreementAndKlAgainstAReference) {
  const int64_t V = 3;
  const std::vector<int32_t> ids = {0, 1};
  const std::vector<float> model = {1.f, 0.f, 0.f, 0.f, 0.f, 2.f};
  std::vector<float> ref = model;
  EvalStats same;
  ASSERT_TRUE(add_eval_positions(same, model, V, ids, 0, ref.data()).ok());
  EXPECT_EQ(same.compared, 2);
  EXPECT_EQ(same.top1_agreement(), 1.0);
  EXPECT_NEAR(same.mean_kl(), 0.0, 1e-15);
  // Position 1's reference prefers id 0 (ties to the lowest id are the argmax's rule too).
  ref = {1.f, 0.f, 0.f, 2.f, 0.f, 2.f};
  EvalStats other;
  ASSERT_TRUE(add_eval_positions(other, model, V, ids, 0, ref.data()).ok());
  EXPECT_EQ(other.agree, 1);
  // KL(p ‖ q) at position 1: p = softmax(2, 0, 2), q = softmax(0, 0, 2).
  const double zp = 2 * std::exp(2.0) + 1, zq = 2 + std::exp(2.0);
  const double p[3] = {std::exp(2.0) / zp, 1 / zp, std::exp(2.0) / zp};
  const double q[3] = {1 / zq, 1 / zq, std::exp(2.0) / zq};
  double kl = 0;
  for (int v = 0; v < 3; ++v) kl += p[v] * std::log(p[v] / q[v]);
  EXPECT_NEAR(other.kl_sum, kl, 1e-12);
}

TEST(Eval, BadInputIsAnError) {
  EvalStats s;
  const std::vector<int32_t> ids = {0, 9};
  const std::vector<float> row = {0.f, 1.f};
  EXPECT_FALSE(add_eval_positions(s, row, 2, ids, 0, nullptr).ok());  // id 9 not in 2 tokens
  const std::vector<float> odd = {0.f, 1.f, 2.f};
  EXPECT_FALSE(add_eval_positions(s, odd, 2, ids, 0, nullptr).ok());  // not whole rows
  EXPECT_FALSE(add_eval_positions(s, row, 2, ids, 2, nullptr).ok());  // past the sequence
  const std::vector<float> nan = {0.f, std::nanf("")};
  EXPECT_FALSE(add_eval_positions(s, nan, 2, {ids.data(), 1}, 0, nullptr).ok());
}

}  // namespace
}  // namespace orchid
