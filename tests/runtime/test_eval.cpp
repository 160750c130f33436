// Teacher-forced statistics (runtime/eval.h) on logits whose answers are known in closed form.
#include <gtest/gtest.h>

#include <algorithm>
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
  EvalReference full{ref.data(), V, 0};
  EvalStats same;
  ASSERT_TRUE(add_eval_positions(same, model, V, ids, 0, &full).ok());
  EXPECT_EQ(same.compared, 2);
  EXPECT_EQ(same.top1_agreement(), 1.0);
  EXPECT_NEAR(same.mean_kl(), 0.0, 1e-15);
  // Position 1's reference prefers id 0 (ties to the lowest id are the argmax's rule too).
  ref = {1.f, 0.f, 0.f, 2.f, 0.f, 2.f};
  full.rows = ref.data();
  EvalStats other;
  ASSERT_TRUE(add_eval_positions(other, model, V, ids, 0, &full).ok());
  EXPECT_EQ(other.agree, 1);
  // KL(p ‖ q) at position 1: p = softmax(2, 0, 2), q = softmax(0, 0, 2).
  const double zp = 2 * std::exp(2.0) + 1, zq = 2 + std::exp(2.0);
  const double p[3] = {std::exp(2.0) / zp, 1 / zp, std::exp(2.0) / zp};
  const double q[3] = {1 / zq, 1 / zq, std::exp(2.0) / zq};
  double kl = 0;
  for (int v = 0; v < 3; ++v) kl += p[v] * std::log(p[v] / q[v]);
  EXPECT_NEAR(other.kl_sum, kl, 1e-12);
}

// The compact reference row [lse, k ids, k logits] of a full row: its k largest logits, ties to
// the lowest id first.
std::vector<float> compact_row(const std::vector<float>& row, int k) {
  std::vector<int> order(row.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
  double s = 0;
  for (float x : row) s += std::exp(double(x));
  std::vector<float> out = {float(std::log(s))};
  for (int i = 0; i < k; ++i) out.push_back(float(order[size_t(i)]));
  for (int i = 0; i < k; ++i) out.push_back(row[size_t(order[size_t(i)])]);
  return out;
}

TEST(Eval, CompactReferenceFormIsChosenByWidth) {
  auto full = EvalReference::of_width(50, 50);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->top_k, 0);
  auto compact = EvalReference::of_width(65, 50);
  ASSERT_TRUE(compact.ok());
  EXPECT_EQ(compact->top_k, 32);
  EXPECT_FALSE(EvalReference::of_width(64, 50).ok());   // even: neither form
  EXPECT_FALSE(EvalReference::of_width(101, 50).ok());  // k = 50: not below the vocabulary
  EXPECT_FALSE(EvalReference::of_width(1, 50).ok());
}

// With k covering all but one token the compact KL equals the full KL (the rest bucket is that
// token); with smaller k it is a lower bound, and the agreement is the same.
TEST(Eval, CompactReferenceMatchesTheFullOne) {
  const int64_t V = 6;
  const std::vector<int32_t> ids = {0, 3, 5};
  const std::vector<float> model = {0.5f, 1.f, -1.f, 2.f, 0.f, 0.3f,  //
                                    1.f,  0.f, 0.2f, 0.f, 3.f, -2.f,  //
                                    0.f,  0.f, 0.f,  1.f, 0.f, 0.f};
  const std::vector<float> ref = {0.f, 1.5f, -1.f, 2.2f, 0.1f, 0.f,   //
                                  2.f, 0.f,  0.1f, 0.f,  2.5f, -1.f,  //
                                  0.f, 0.f,  0.f,  0.f,  1.f,  0.f};
  EvalStats want;
  const EvalReference full{ref.data(), V, 0};
  ASSERT_TRUE(add_eval_positions(want, model, V, ids, 0, &full).ok());
  for (int k : {5, 2, 1}) {
    std::vector<float> rows;
    for (int t = 0; t < 3; ++t) {
      const auto r = compact_row({ref.begin() + t * V, ref.begin() + (t + 1) * V}, k);
      rows.insert(rows.end(), r.begin(), r.end());
    }
    auto form = EvalReference::of_width(1 + 2 * k, V);
    ASSERT_TRUE(form.ok());
    form->rows = rows.data();
    EvalStats got;
    ASSERT_TRUE(add_eval_positions(got, model, V, ids, 0, &*form).ok());
    EXPECT_EQ(got.agree, want.agree) << "k " << k;
    EXPECT_EQ(got.nll_sum, want.nll_sum);
    if (k == V - 1)
      EXPECT_NEAR(got.kl_sum, want.kl_sum, 1e-6) << "k " << k;
    else
      EXPECT_LE(got.kl_sum, want.kl_sum + 1e-9) << "k " << k;
    EXPECT_GE(got.kl_sum, 0.0);
  }
}

TEST(Eval, MalformedCompactRowsAreErrors) {
  const int64_t V = 4;
  const std::vector<int32_t> ids = {0};
  const std::vector<float> model = {0.f, 1.f, 2.f, 3.f};
  const std::vector<std::vector<float>> bad = {
      {4.f, 7.f, 3.f, 3.f, 2.f},   // id 7 outside the vocabulary
      {4.f, 1.5f, 3.f, 3.f, 2.f},  // a fractional id
      {4.f, 3.f, 2.f, 2.f, 3.f},   // logits ascending
      {1.f, 3.f, 2.f, 3.f, 2.f},   // a logit above the log-sum-exp
      {4.f, 3.f, 2.f, NAN, 2.f}};  // not finite
  for (const auto& row : bad) {
    const EvalReference ref{row.data(), 5, 2};
    EvalStats s;
    EXPECT_FALSE(add_eval_positions(s, model, V, ids, 0, &ref).ok());
  }
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
