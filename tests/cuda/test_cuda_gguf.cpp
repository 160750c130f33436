// A quantized GGUF on the CUDA backend (issue 34): the tiny golden checkpoint written as llama.cpp
// writes a Q8_0 or Q4_0 file (router and vectors F32) loads through gguf_weights into the affine
// layout with group 32 and fp32 scales, which the CUDA upload takes (scales to bf16); its logits
// must match the CPU backend's run of the same file with CUDA's bf16 KV cache: rel. L2 ≤ 1e-2
// (the bound CudaGolden holds the group-64 checkpoints to) at three quarters of the positions or
// more — a position where rounding flips a near-tied routing choice is far off, as CudaGolden
// explains it, and so may the positions after it — and the same top-1 as the exact CPU at 90 % of
// them or more.
#include <algorithm>
#include <fstream>

#include "../model/gguf_fixture.h"
#include "cuda_test_logits.h"
#include "cuda_test_util.h"
#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/backend/cuda/cuda_backend_impl.h"
#include "orchid/model/model.h"

namespace orchid {
namespace {

void check(GgmlType type, const char* name) {
  auto hf = load_model(std::string(ORCHID_SOURCE_DIR) + "/tests/fixtures/golden/tiny/hf");
  ASSERT_TRUE(hf.ok()) << hf.message();
  GgufFile f;
  std::deque<std::vector<uint8_t>> store;
  gguf_fixture::add_metadata(f, (*hf)->config, 0);
  gguf_fixture::add_weights(f, store, (*hf)->config, (*hf)->weights, type);
  const std::vector<uint8_t> bytes = gguf_fixture::file_bytes(f);
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              std::streamsize(bytes.size()));
  auto m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.message();
  auto cuda = make_cuda_backend(**m);
  ASSERT_TRUE(cuda.ok()) << cuda.message();
  auto cpu = make_cpu_backend(**m);
  auto cpu_kv16 = make_cpu_backend(**m, {.kv = KvPrecision::bf16});
  std::vector<int32_t> ids;
  for (int i = 0; i < 64; ++i) ids.push_back(int32_t((i * 131 + 7) % (*m)->config.n_vocab));
  auto run = [&](Backend& b) { return test::prompt_logits(b, ids); };
  const std::vector<float> want = run(*cpu), kv16 = run(*cpu_kv16), got = run(**cuda);
  ASSERT_EQ(got.size(), want.size());
  const int64_t V = (*m)->config.n_vocab;
  double worst = 0, worst_exact = 0;
  std::vector<double> rel;
  int same = 0;
  for (size_t p = 0; p < ids.size(); ++p) {
    rel.push_back(test::rel_l2(got.data() + p * V, kv16.data() + p * V, V));
    worst = std::max(worst, rel.back());
    worst_exact = std::max(worst_exact, test::rel_l2(got.data() + p * V, want.data() + p * V, V));
    same += test::argmax(got.data() + p * V, V) == test::argmax(want.data() + p * V, V);
  }
  std::sort(rel.begin(), rel.end());
  const double median = rel[rel.size() / 2], p75 = rel[rel.size() * 3 / 4];
  std::printf("[ cuda gguf ] %s: rel L2 vs CPU with a bf16 KV cache median %.2e, 75th %.2e, worst "
              "%.2e (vs exact CPU %.2e), top-1 %d/%zu\n", name, median, p75, worst, worst_exact, same,
              ids.size());
  // Judged as the fidelity contract judges a fast path: a near-tied routing choice may flip at a
  // position (and move the positions after it through the caches) — the Q8_0 file has one, which
  // the CPU alone shows between its fp32 and bf16 KV caches — so three quarters of the positions
  // within the golden bound, and top-1 at 90 %.
  EXPECT_LE(p75, 1e-2) << name;
  EXPECT_GE(same, int(ids.size() * 9 / 10)) << name;
  std::remove(path.c_str());
}

TEST(CudaGguf, Q8_0FileMatchesTheCpu) {
  ORCHID_REQUIRE_GPU();
  check(GgmlType::Q8_0, "tiny-q8_0.gguf");
}

TEST(CudaGguf, Q4_0FileMatchesTheCpu) {
  ORCHID_REQUIRE_GPU();
  check(GgmlType::Q4_0, "tiny-q4_0.gguf");
}

}  // namespace
}  // namespace orchid
