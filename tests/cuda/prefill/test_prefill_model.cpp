// The chunked prefill path of the whole model (GEMMs on the tensor cores, grouped experts,
// DeltaNet scan, flash attention) against the one-token-per-step decode path, which the golden
// tests check against Hugging Face. Real shapes (a 4-layer cut of Qwen3.6-35B-A3B: three DeltaNet
// layers and one attention layer, random weights made on the device), prompts of 2 … 150 tokens
// in chunks that do and do not divide them. Bounds: chunks of 50 and of 64 agree to 1e-5 rel. L2
// at every position; against the decode path the lower quartile of the positions' logits is
// within 2e-3 rel. L2 and at least half of the positions within 1e-2. The two paths round
// differently (the flash attention's bf16 q and P, ~7e-3 of an attention row; the exact GEMMs'
// hi + lo against the decode path's int8 hi + lo codes), and where a router's top-k nearly ties
// — often, with random weights — the paths pick different experts for a token, whose output then
// jumps, and so do the later positions that attend to it. Ten repeats on the H200 (2026-11-30,
// both attention kernels alike) gave medians from 5.4e-4 to 7.7e-3 and 57-100 % of positions
// within 1e-2, but lower quartiles at most ~1e-3: so the quartile and the half are the bars; a
// broken kernel is off by ~1 nearly everywhere. The fp16 ablation gets looser bars (below).
// The model and prompts come from fixed seeds (test_seed): with fresh ones each run, about one
// model in six had enough early flips to miss the bars, so the test failed at random. The
// kernels themselves are tested on fresh random inputs elsewhere; ORCHID_TEST_SEED picks other
// models and prompts for exploring.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "../cuda_test_logits.h"
#include "../cuda_test_util.h"
#include "orchid/backend/cuda/cuda_backend_impl.h"
#include "orchid/model/config.h"

namespace orchid {
namespace {

// The first n_layer layers of Qwen3.6-35B-A3B (4: three DeltaNet layers, then attention).
std::unique_ptr<Backend> cut_model(int n_layer, uint64_t seed) {
  auto cfg = builtin_config("qwen3.6-35b-a3b");
  if (!cfg) return nullptr;
  cfg->n_layer = n_layer;
  cfg->layer_types.resize(size_t(n_layer));
  auto be = make_cuda_synthetic_backend(*cfg, seed);
  return be ? std::move(*be) : nullptr;
}

// The seed of the test model (k = 0) and of its prompts (k > 0): ORCHID_TEST_SEED or a fixed one.
uint64_t test_seed(uint64_t k) {
  const char* s = std::getenv("ORCHID_TEST_SEED");
  return (s ? std::strtoull(s, nullptr, 10) : 20261130ull) + k;
}

std::vector<int32_t> random_ids(int n, int64_t vocab, std::mt19937_64& rng) {
  std::vector<int32_t> ids(size_t(n), 0);
  for (auto& id : ids) id = int32_t(rng() % uint64_t(vocab));
  return ids;
}

// Against the decode path: the lower quartile of the positions within `quartile` rel. L2, and at
// least `frac` of the positions within `near`.
struct Bars {
  double quartile = 2e-3, near = 1e-2, frac = 0.5;
};

class CudaPrefill : public ::testing::Test {
 protected:
  void SetUp() override { make(4); }
  void make(int n_layer) {
    ORCHID_REQUIRE_GPU();
    be_ = cut_model(n_layer, test_seed(0));
    ASSERT_NE(be_, nullptr);
    cuda_ = dynamic_cast<cuda::CudaBackend*>(be_.get());
    ASSERT_NE(cuda_, nullptr);
    ASSERT_TRUE(cuda_->prefill_supported());
    cuda_->switches().prefill_chunk = 64;
  }
  // All-position logits of `ids` from an empty state, chunked (chunk tokens) or step by step.
  std::vector<float> logits(const std::vector<int32_t>& ids, bool chunked, int64_t chunk,
                            std::vector<float>* next = nullptr, int32_t next_id = 0) {
    cuda_->switches().prefill = chunked;
    auto st = be_->new_state(int64_t(ids.size()) + 8);
    EXPECT_TRUE(st.ok());
    std::vector<float> l;
    Status s = be_->forward(**st, ids, LogitsMode::all, l, chunk);
    EXPECT_TRUE(s.ok()) << s.message();
    if (next) {
      s = be_->forward(**st, std::span<const int32_t>(&next_id, 1), LogitsMode::last, *next);
      EXPECT_TRUE(s.ok()) << s.message();
    }
    cuda_->switches().prefill = true;
    return l;
  }
  void expect_chunked_matches_steps(const std::vector<int>& lengths, Bars bars = {}) {
    std::mt19937_64 rng(test_seed(1));
    const int64_t V = be_->n_vocab();
    for (int n : lengths) {
      const auto ids = random_ids(n, V, rng);
      const auto want = logits(ids, false, 0);
      const auto whole = logits(ids, true, 0);  // the switch's chunk (64)
      for (int64_t chunk : {int64_t(0), int64_t(50)}) {
        const auto got = chunk ? logits(ids, true, chunk) : whole;
        ASSERT_EQ(got.size(), want.size());
        // Chunk boundaries change no row's arithmetic (each GEMM row, the scan and the attention
        // rows compute the same sums in the same order): equal up to the last bits.
        for (int t = 0; chunk && t < n; ++t)
          ASSERT_LE(test::rel_l2(got.data() + t * V, whole.data() + t * V, V), 1e-5)
              << "prompt " << n << ", chunks of 50 against 64, position " << t;
        // Near-ties in the router's top-k: where the two paths' continuous ~1e-3 differences
        // pick different experts a position (and the positions attending to it) jumps. Most
        // positions must agree to 1e-2 and the typical one far better.
        std::vector<double> e(static_cast<size_t>(n));
        for (int t = 0; t < n; ++t)
          e[size_t(t)] = test::rel_l2(got.data() + t * V, want.data() + t * V, V);
        std::vector<double> sorted = e;
        std::sort(sorted.begin(), sorted.end());
        const double median = sorted[sorted.size() / 2], quartile = sorted[sorted.size() / 4];
        const auto within =
            std::count_if(e.begin(), e.end(), [&](double x) { return x <= bars.near; });
        EXPECT_LE(quartile, bars.quartile) << "prompt " << n << ", chunk " << chunk;
        EXPECT_GE(double(within), bars.frac * n) << "prompt " << n << ", chunk " << chunk;
        std::printf(
            "[ cuda prefill ] %d tokens, chunk %lld: rel L2 quartile %.2e, median %.2e, worst "
            "%.2e, "
            "%lld of %d within %.0e\n",
            n, static_cast<long long>(chunk), quartile, median, sorted.back(),
            static_cast<long long>(within), n, bars.near);
      }
    }
  }
  // The last position's logits of one prefill of ids from an empty state (empty on a failure,
  // which is reported).
  std::vector<float> last_logits(const std::vector<int32_t>& ids) {
    std::vector<float> out;
    auto st = be_->new_state(int64_t(ids.size()) + 8);
    if (!st.ok()) {
      ADD_FAILURE() << st.message();
      return {};
    }
    const Status s = be_->forward(**st, ids, LogitsMode::last, out);
    if (!s.ok()) ADD_FAILURE() << s.message();
    return out;
  }
  std::unique_ptr<Backend> be_;
  cuda::CudaBackend* cuda_ = nullptr;
};

TEST_F(CudaPrefill, ChunkedLogitsMatchStepByStep) {
  expect_chunked_matches_steps({2, 9, 63, 64, 65, 150});
}

// The fp16 path (ORCHID_EXACT_PREFILL=0), the ablation: its ~1e-3 per projection flips near-tied
// routes more often (one run of 2026-11-30: median 1.05e-2 at 65 tokens, 32 of 65 within 1e-2);
// a broken path is off by ~1. Looser bars for it.
TEST_F(CudaPrefill, Fp16PathChunkedLogitsMatchStepByStep) {
  cuda_->switches().exact_prefill = false;
  expect_chunked_matches_steps({9, 65}, {.quartile = 2e-2, .near = 0.25, .frac = 0.5});
}

// The routing ablation (ORCHID_DEVICE_ROUTING=0) moves the same tables through the host: the
// logits are the same bits.
TEST_F(CudaPrefill, HostRoundTripOfTheRoutingChangesNothing) {
  std::mt19937_64 rng(test_seed(2));
  const auto ids = random_ids(150, be_->n_vocab(), rng);
  const auto want = logits(ids, true, 0);
  cuda_->switches().device_routing = false;
  const auto got = logits(ids, true, 0);
  cuda_->switches().device_routing = true;
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(got, want);
}

// DeltaNet layers only (no attention layer): separates the two mixers when the above fails.
TEST_F(CudaPrefill, ChunkedLogitsMatchStepByStepWithoutAttention) {
  make(3);
  expect_chunked_matches_steps({9, 65});
}

// A chunk long enough for the scaled codes' 128 × 256 tiles to fill the GPU in every projection
// (the prefill gives shorter launches no group sums: gemm_scaled_fills), one chunk of 2,304
// tokens, against the same prompt in chunks of 64, whose launches are all too small for the sums
// (the fold's tiles; the experts' 16-row ones): the last position's logits. Both run the
// sequential DeltaNet scan (the long chunk would take the chunked form, which rounds otherwise),
// and chunk boundaries change no row's arithmetic beyond the GEMMs' forms, each exact to ~1e-6 a
// projection: so they agree far inside the paths' 1e-2 (a broken operand sum or tile is off by
// ~1); 1e-3 leaves room for a rare near-tied route among the 2,304 tokens. Where the
// warp-specialised tiles do not run, neither takes the sums.
TEST_F(CudaPrefill, LongChunkOnScaledCodesMatchesShortChunks) {
  std::mt19937_64 rng(test_seed(4));
  const auto ids = random_ids(2304, be_->n_vocab(), rng);
  cuda_->switches().gdn_chunked = 0;
  std::vector<float> got[2];
  for (int i : {0, 1}) {
    cuda_->switches().prefill_chunk = i == 0 ? 4096 : 64;
    got[i] = last_logits(ids);
  }
  const int64_t V = be_->n_vocab();
  ASSERT_EQ(got[0].size(), size_t(V));
  ASSERT_EQ(got[1].size(), size_t(V));
  const double e = test::rel_l2(got[0].data(), got[1].data(), V);
  std::printf("[ cuda prefill ] 2304 tokens, one chunk against chunks of 64: rel L2 %.2e\n", e);
  EXPECT_LE(e, 1e-3);
}

// The state a chunked prefill leaves (KV rows, DeltaNet state and conv ring, position) serves a
// decode step: its logits equal the last position's of one chunked prefill of the prompt and that
// token (the same routing for the prompt, so within the paths' continuous 1e-2).
TEST_F(CudaPrefill, DecodeAfterChunkedPrefillMatchesPrefillOfOneMore) {
  std::mt19937_64 rng(test_seed(3));
  const int64_t V = be_->n_vocab();
  for (int n : {65, 130}) {
    auto ids = random_ids(n, V, rng);
    const int32_t next = int32_t(rng() % uint64_t(V));
    std::vector<float> got;
    logits(ids, true, 0, &got, next);
    ids.push_back(next);
    const auto all = logits(ids, true, 0);
    ASSERT_EQ(got.size(), size_t(V));
    EXPECT_LE(test::rel_l2(got.data(), all.data() + int64_t(n) * V, V), 1e-2) << "prompt " << n;
  }
}

}  // namespace
}  // namespace orchid
