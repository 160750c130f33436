// Whole-model checks against Hugging Face transformers (fixtures from
// scripts/fixtures/make_golden.py): logits of every position vs HF fp32, greedy
// continuations, prefill == token-by-token decode, and chunked prefill == one chunk.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/model/model.h"
#include "orchid/runtime/generate.h"
#include "orchid/util/npy.h"

namespace orchid {
namespace {

struct GoldenCase {
  std::string config, layout;
  friend void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.config << "/" << c.layout; }
};

std::string golden_dir(const std::string& config) {
  return std::string(ORCHID_SOURCE_DIR) + "/tests/fixtures/golden/" + config;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// ‖a − b‖ / ‖b‖ over one row of n.
double rel_l2(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// Largest per-row rel. L2 between two [rows, n] arrays.
double worst_row_rel_l2(const std::vector<float>& a, const std::vector<float>& b, int64_t n) {
  double worst = 0;
  for (size_t r = 0; r < a.size() / size_t(n); ++r)
    worst = std::max(worst, rel_l2(a.data() + r * n, b.data() + r * n, n));
  return worst;
}

class Golden : public ::testing::TestWithParam<GoldenCase> {
 protected:
  void SetUp() override {
    const auto& p = GetParam();
    golden_ = read_json(golden_dir(p.config) + "/ref/golden.json");
    auto m = load_model(golden_dir(p.config) + "/" + p.layout);
    ASSERT_TRUE(m.ok()) << m.message();
    model_ = std::move(*m);
    backend_ = make_cpu_backend(*model_);
  }

  std::vector<int32_t> prompt(int i) const {
    return golden_["prompts"][i].get<std::vector<int32_t>>();
  }
  const nlohmann::json& ref() const { return golden_["layouts"][GetParam().layout]; }

  std::vector<float> logits_all(std::span<const int32_t> tokens, int64_t chunk) {
    auto st = backend_->new_state(int64_t(tokens.size()));
    EXPECT_TRUE(st.ok());
    std::vector<float> logits;
    Status s = backend_->forward(**st, tokens, LogitsMode::all, logits, chunk);
    EXPECT_TRUE(s.ok()) << s.message();
    return logits;
  }

  nlohmann::json golden_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> backend_;
};

// Bar: relative L2 error of the logits at every position <= 1e-3 against HF fp32.
TEST_P(Golden, LogitsMatchHfFp32AtEveryPosition) {
  const int64_t V = model_->config.n_vocab;
  for (int p = 0; p < 2; ++p) {
    auto ids = prompt(p);
    auto ref_npy = read_npy_f32(golden_dir(GetParam().config) + "/ref/" +
                                ref()["logits"][p].get<std::string>());
    ASSERT_TRUE(ref_npy.ok()) << ref_npy.message();
    ASSERT_EQ(ref_npy->shape, (std::vector<int64_t>{int64_t(ids.size()), V}));
    auto got = logits_all(ids, 0);
    for (size_t t = 0; t < ids.size(); ++t) {
      double e = rel_l2(got.data() + t * V, ref_npy->data.data() + t * V, V);
      EXPECT_LE(e, 1e-3) << "prompt " << p << " position " << t;
    }
    std::printf("[ golden ] %s/%s prompt %d: worst rel L2 %.2e\n", GetParam().config.c_str(),
                GetParam().layout.c_str(), p, worst_row_rel_l2(got, ref_npy->data, V));
  }
}

// Bar: identical 32-token greedy continuations.
TEST_P(Golden, GreedyContinuationMatchesHf) {
  for (int p = 0; p < 2; ++p) {
    auto want = ref()["greedy"][p].get<std::vector<int32_t>>();
    SamplerParams greedy;
    auto got = generate(*backend_, prompt(p), int(want.size()), greedy);
    ASSERT_TRUE(got.ok()) << got.message();
    EXPECT_EQ(*got, want) << "prompt " << p;
  }
}

// Bar: logits from prefill == logits from token-by-token decode (<= 1e-4).
TEST_P(Golden, PrefillEqualsTokenByTokenDecode) {
  const int64_t V = model_->config.n_vocab;
  auto ids = prompt(0);
  auto prefill = logits_all(ids, 0);
  auto st = backend_->new_state(int64_t(ids.size()));
  ASSERT_TRUE(st.ok());
  std::vector<float> step, decode;
  for (int32_t id : ids) {
    ASSERT_TRUE(
        backend_->forward(**st, std::span<const int32_t>(&id, 1), LogitsMode::last, step).ok());
    decode.insert(decode.end(), step.begin(), step.end());
  }
  EXPECT_LE(worst_row_rel_l2(decode, prefill, V), 1e-4);
}

// Bar: prefill in chunks of 16, 64 and 1000 gives the same logits as one chunk.
TEST_P(Golden, ChunkedPrefillEqualsOneChunk) {
  const int64_t V = model_->config.n_vocab;
  auto ids = prompt(0);
  auto whole = logits_all(ids, int64_t(ids.size()));
  for (int64_t chunk : {16, 64, 1000}) {
    auto got = logits_all(ids, chunk);
    EXPECT_LE(worst_row_rel_l2(got, whole, V), 1e-4) << "chunk " << chunk;
  }
}

// Snapshot at a token boundary, run on, restore: the continuation repeats exactly.
TEST_P(Golden, SnapshotRestoreRepeatsContinuation) {
  auto ids = prompt(0);
  const size_t half = ids.size() / 2;
  auto st = backend_->new_state(int64_t(ids.size()));
  ASSERT_TRUE(st.ok());
  std::vector<float> a, b;
  std::span<const int32_t> all(ids);
  ASSERT_TRUE(backend_->forward(**st, all.first(half), LogitsMode::last, a).ok());
  auto snap = backend_->snapshot(**st);
  ASSERT_TRUE(backend_->forward(**st, all.subspan(half), LogitsMode::all, a).ok());
  ASSERT_TRUE(backend_->restore(**st, *snap).ok());
  EXPECT_EQ((*st)->n_past(), int64_t(half));
  ASSERT_TRUE(backend_->forward(**st, all.subspan(half), LogitsMode::all, b).ok());
  EXPECT_EQ(a, b);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden,
                         ::testing::Values(GoldenCase{"tiny", "hf"}, GoldenCase{"tiny", "mlx4"},
                                           GoldenCase{"odd", "hf"}, GoldenCase{"odd", "mlx4"}),
                         [](const auto& info) {
                           return info.param.config + "_" + info.param.layout;
                         });

}  // namespace
}  // namespace orchid
