// The full-size model on the CUDA backend against the CPU backend: the kernels' real shapes
// (2,048-wide projections, 256 experts of 512) that the small golden fixtures never reach — the
// dp4a projection and expert kernels run only there. Needs a checkpoint made by
// `orchid synth --config qwen3.6-35b-a3b --layout mlx4` named by ORCHID_FULL_SIZE_MODEL (the GPU
// machine's scripts/device/run.sh fullsize makes one); skipped without.
// Random full-size weights give flat router logits, so tiny differences (the bf16 KV cache,
// summation order) flip expert choices: the fp32 kernels (ORCHID_DP4A=0) already differ from the
// CPU by 1-3 % rel. L2 per position (device run 10, session 4). Bounds: every position within
// 0.1 on both paths (a wrong kernel gives ~1), and the dp4a kernels' mean rel. L2 within twice the
// fp32 kernels' mean + 0.005 (the dp4a inputs are within 2⁻¹⁶ of each group's largest value).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "cuda_test_logits.h"
#include "cuda_test_util.h"
#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/model/model.h"

namespace orchid {
namespace {

using test::argmax;
using test::rel_l2;

std::vector<float> logits_all(Backend& be, const std::vector<int32_t>& ids) {
  auto st = be.new_state(int64_t(ids.size()) + 8);
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<float> l;
  if (!st.ok()) return l;
  Status s = be.forward(**st, ids, LogitsMode::all, l);
  EXPECT_TRUE(s.ok()) << s.message();
  return l;
}

TEST(CudaFullSize, LogitsMatchCpuOnBothKernelPaths) {
  ORCHID_REQUIRE_GPU();
  const char* dir = std::getenv("ORCHID_FULL_SIZE_MODEL");
  if (!dir) GTEST_SKIP() << "ORCHID_FULL_SIZE_MODEL not set";
  auto m = load_model(dir);
  ASSERT_TRUE(m.ok()) << m.message();
  const int64_t V = (*m)->config.n_vocab;
  std::mt19937_64 rng(7);
  std::vector<int32_t> ids(12);
  for (int32_t& t : ids) t = int32_t(rng() % uint64_t(V));
  const std::vector<float> want = logits_all(*make_cpu_backend(**m), ids);
  ASSERT_EQ(want.size(), ids.size() * size_t(V));
  double mean[2] = {0, 0};  // [dp4a, fp32]
  for (int path = 0; path < 2; ++path) {
    const char* dp4a = path == 0 ? "1" : "0";
    setenv("ORCHID_DP4A", dp4a, 1);  // read when the backend is made
    auto cuda = make_cuda_backend(**m);
    unsetenv("ORCHID_DP4A");
    ASSERT_TRUE(cuda.ok()) << cuda.message();
    const std::vector<float> got = logits_all(**cuda, ids);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    int agree = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const double e = rel_l2(got.data() + t * V, want.data() + t * V, V);
      worst = std::max(worst, e);
      mean[path] += e / double(ids.size());
      EXPECT_LE(e, 0.1) << "ORCHID_DP4A=" << dp4a << " position " << t;
      agree += argmax(got.data() + t * V, V) == argmax(want.data() + t * V, V);
    }
    std::printf(
        "[ cuda full size ] ORCHID_DP4A=%s: rel L2 vs CPU mean %.2e, worst %.2e; top-1 %d/%zu\n",
        dp4a, mean[path], worst, agree, ids.size());
  }
  EXPECT_LE(mean[0], 2 * mean[1] + 0.005) << "dp4a kernels against the fp32 ones";
}

}  // namespace
}  // namespace orchid
