// The whole model on the CUDA backend against the golden fixtures (HF transformers fp32): logits
// rel. L2 ≤ 1e-2 at every position, or at most HF's own bf16 error at that position where that
// is larger (golden.json's bf16_rel_l2: the bf16 noise floor), or else explained by the bf16 KV
// cache (the CPU backend with a bf16 KV cache is above 1e-2 there too, and CUDA is within 1e-2
// of it); teacher-forced top-1 agreement with
// HF fp32 at least HF's own bf16 agreement (golden.json's top1_bf16 vs top1_fp32, the bf16 noise
// floor); greedy decode on the device after a CUDA prefill equal to the CPU's wherever the CPU's
// top-2 margin exceeds the measured noise; on-device decoding equal to host-side greedy on the same
// backend; snapshots replay exactly.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cuda_test_logits.h"
#include "cuda_test_util.h"
#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/backend/cuda/cuda_backend_impl.h"
#include "orchid/model/model.h"
#include "orchid/util/npy.h"

namespace orchid {
namespace {

struct Case {
  std::string config, layout;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.config << "/" << c.layout; }
};

std::string fixture(const std::string& config) {
  return std::string(ORCHID_SOURCE_DIR) + "/tests/fixtures/golden/" + config;
}

using test::argmax;
using test::rel_l2;

// Top-1 minus top-2.
float margin(const float* x, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i)
    if (x[i] > a)
      b = a, a = x[i];
    else if (x[i] > b)
      b = x[i];
  return a - b;
}

class CudaGolden : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    ORCHID_REQUIRE_GPU();
    std::ifstream in(fixture(GetParam().config) + "/ref/golden.json");
    golden_ = nlohmann::json::parse(in);
    auto m = load_model(fixture(GetParam().config) + "/" + GetParam().layout);
    ASSERT_TRUE(m.ok()) << m.message();
    model_ = std::move(*m);
    auto b = make_cuda_backend(*model_);
    ASSERT_TRUE(b.ok()) << b.message();
    cuda_ = std::move(*b);
    cpu_ = make_cpu_backend(*model_);
    cpu_kv_bf16_ = make_cpu_backend(*model_, {.kv = KvPrecision::bf16});
  }
  std::vector<int32_t> prompt(int i) const {
    return golden_["prompts"][i].get<std::vector<int32_t>>();
  }
  std::vector<float> logits_all(Backend& be, const std::vector<int32_t>& ids) {
    auto st = be.new_state(int64_t(ids.size()) + 64);
    EXPECT_TRUE(st.ok());
    std::vector<float> l;
    Status s = be.forward(**st, ids, LogitsMode::all, l);
    EXPECT_TRUE(s.ok()) << s.message();
    return l;
  }
  void check_logits(bool chunked);
  nlohmann::json golden_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> cuda_, cpu_;
  std::unique_ptr<Backend> cpu_kv_bf16_;  // the CPU reference with CUDA's KV cache precision
};

// The logits bars on one prompt path: step by step (the decode kernels) or in chunks on the tensor
// cores (the prefill kernels, prefill/chunk.cpp).
void CudaGolden::check_logits(bool chunked) {
  auto* cb = dynamic_cast<cuda::CudaBackend*>(cuda_.get());
  ASSERT_NE(cb, nullptr);
  cb->switches().prefill = chunked;
  const char* path = chunked ? "chunked" : "steps";
  const int64_t V = model_->config.n_vocab;
  const nlohmann::json& lay = golden_["layouts"][GetParam().layout];
  for (int p = 0; p < 2; ++p) {
    auto ids = prompt(p);
    auto ref = read_npy_f32(fixture(GetParam().config) + "/ref/" +
                            golden_["layouts"][GetParam().layout]["logits"][p].get<std::string>());
    ASSERT_TRUE(ref.ok()) << ref.message();
    auto got = logits_all(*cuda_, ids);
    auto kv16 = logits_all(*cpu_kv_bf16_, ids);
    double worst = 0;
    int agree = 0;
    std::vector<double> floor_l2(ids.size(), 0.0);
    if (lay.contains("bf16_rel_l2")) floor_l2 = lay["bf16_rel_l2"][p].get<std::vector<double>>();
    ASSERT_EQ(floor_l2.size(), ids.size());
    int above_1e2 = 0, above_bar = 0, explained = 0;
    double worst_vs_kv16 = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const float *g = got.data() + t * V, *r = ref->data.data() + t * V;
      const double e = rel_l2(g, r, V);
      const double vs_kv16 = rel_l2(g, kv16.data() + t * V, V);
      worst = std::max(worst, e);
      worst_vs_kv16 = std::max(worst_vs_kv16, vs_kv16);
      above_1e2 += e > 1e-2;
      agree += argmax(g, V) == argmax(r, V);
      if (e <= std::max(1e-2, floor_l2[t])) continue;
      // Above the bar: acceptable only as the bf16 KV cache's doing. Rounding K/V to bf16 can
      // flip a near-tie in the MoE routing, which moves the logits far beyond 1e-2; the CPU
      // backend with the same KV precision must then (1) itself be above 1e-2 against HF here,
      // so the excursion exists without CUDA, and (2) agree with CUDA within the usual 1e-2,
      // so CUDA adds nothing of its own.
      ++above_bar;
      const double kv16_vs_hf = rel_l2(kv16.data() + t * V, r, V);
      const bool ok = kv16_vs_hf > 1e-2 && vs_kv16 <= 1e-2;
      explained += ok;
      EXPECT_TRUE(ok) << "prompt " << p << " position " << t << ": rel L2 " << e
                      << " (HF bf16 there: " << floor_l2[t]
                      << "); CPU with bf16 KV vs HF: " << kv16_vs_hf << " (must be > 1e-2), CUDA "
                      << "vs CPU with bf16 KV: " << vs_kv16 << " (must be <= 1e-2)";
    }
    const double agreement = double(agree) / double(ids.size());
    std::printf(
        "[ cuda golden ] %s/%s %s prompt %d: worst rel L2 %.2e (%d positions above 1e-2, %d above "
        "the bar, %d of them reproduced by the CPU with a bf16 KV cache; CUDA vs that CPU: worst "
        "%.2e), top-1 agreement %.4f",
        GetParam().config.c_str(), GetParam().layout.c_str(), path, p, worst, above_1e2, above_bar,
        explained, worst_vs_kv16, agreement);
    // HF's own bf16 run against HF fp32 on the same positions.
    const auto f32 = lay["top1_fp32"][p].get<std::vector<int32_t>>();
    const auto b16 = lay["top1_bf16"][p].get<std::vector<int32_t>>();
    ASSERT_EQ(f32.size(), ids.size());
    int floor_agree = 0;
    for (size_t t = 0; t < f32.size(); ++t) floor_agree += f32[t] == b16[t];
    const double floor = double(floor_agree) / double(f32.size());
    std::printf(" (HF bf16: %.4f)\n", floor);
    EXPECT_GE(agreement, floor) << "prompt " << p;
  }
  cb->switches().prefill = true;
}

TEST_P(CudaGolden, LogitsAndTop1AgainstHf) {
  check_logits(false);
}

// Issue 6's bar for the chunked prefill, the same as the decode path's. Open: fp16 tensor-core
// operands (~1e-3 per projection) flip near-ties in the tiny fixture's routing at a few positions
// where HF's bf16 run does not (docs/perf-notes.md, prefill precision).
TEST_P(CudaGolden, ChunkedPrefillLogitsAndTop1AgainstHf) {
  check_logits(true);
}

TEST_P(CudaGolden, DeviceGreedyAfterCudaPrefillMatchesCpuAboveNoise) {
  const int64_t V = model_->config.n_vocab;
  auto ids = prompt(0);
  // Noise: the largest logit difference CUDA vs CPU over the prompt's positions.
  auto a = logits_all(*cuda_, ids), b = logits_all(*cpu_, ids);
  double noise = 0;
  for (size_t i = 0; i < a.size(); ++i) noise = std::max(noise, std::fabs(double(a[i]) - b[i]));
  const int n = 32;
  // CPU greedy with margins.
  auto cst = cpu_->new_state(int64_t(ids.size()) + n + 1);
  ASSERT_TRUE(cst.ok());
  std::vector<float> l;
  ASSERT_TRUE(cpu_->forward(**cst, ids, LogitsMode::last, l).ok());
  std::vector<int32_t> want;
  std::vector<float> margins;
  for (int i = 0; i < n; ++i) {
    want.push_back(argmax(l.data(), V));
    margins.push_back(margin(l.data(), V));
    ASSERT_TRUE(
        cpu_->forward(**cst, std::span<const int32_t>(&want.back(), 1), LogitsMode::last, l).ok());
  }
  // CUDA: prefill all but the last prompt token, then decode on the device.
  auto gst = cuda_->new_state(int64_t(ids.size()) + n + 1);
  ASSERT_TRUE(gst.ok());
  ASSERT_TRUE(cuda_
                  ->forward(**gst, std::span<const int32_t>(ids.data(), ids.size() - 1),
                            LogitsMode::last, l)
                  .ok());
  std::vector<int32_t> got;
  auto consumed = cuda_->decode_on_device(**gst, ids.back(), n, {}, [&](int32_t id) {
    got.push_back(id);
    return true;
  });
  ASSERT_TRUE(consumed.ok()) << consumed.message();
  ASSERT_EQ(got.size(), size_t(n));
  EXPECT_EQ((**gst).n_past(), int64_t(ids.size()) + n - 1);
  int compared = 0;
  for (int i = 0; i < n; ++i) {
    if (margins[size_t(i)] <= 2 * noise) break;  // a near tie: later tokens may legitimately differ
    EXPECT_EQ(got[size_t(i)], want[size_t(i)]) << "step " << i << " margin " << margins[size_t(i)];
    ++compared;
  }
  // Where a near tie inside the prompt already separated the two runs (noise above every
  // margin), nothing is comparable; the count says how much was checked.
  std::printf("[ cuda greedy ] %s/%s: noise %.2e, %d of %d steps above it, all equal\n",
              GetParam().config.c_str(), GetParam().layout.c_str(), noise, compared, n);
}

TEST_P(CudaGolden, DeviceDecodingEqualsHostGreedyAndStopsOnStopIds) {
  const int64_t V = model_->config.n_vocab;
  auto ids = prompt(1);
  const int n = 24;
  auto h = cuda_->new_state(int64_t(ids.size()) + n + 1);
  ASSERT_TRUE(h.ok());
  std::vector<float> l;
  ASSERT_TRUE(
      cuda_->forward(**h, std::span<const int32_t>(ids.data(), ids.size() - 1), LogitsMode::last, l)
          .ok());
  auto snap = cuda_->snapshot(**h);
  ASSERT_TRUE(snap);
  std::vector<int32_t> host;
  int32_t cur = ids.back();
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(cuda_->forward(**h, std::span<const int32_t>(&cur, 1), LogitsMode::last, l).ok());
    cur = argmax(l.data(), V);
    host.push_back(cur);
  }
  ASSERT_TRUE(cuda_->restore(**h, *snap).ok());
  std::vector<int32_t> dev;
  auto r = cuda_->decode_on_device(**h, ids.back(), n, {}, [&](int32_t id) {
    dev.push_back(id);
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(dev, host);
  // The state cache's host tier: the snapshot moved to host memory restores the same state (the
  // rest of this test restores from there).
  ASSERT_TRUE(snap->on_device());
  ASSERT_TRUE(cuda_->move_to_host(*snap).ok());
  EXPECT_FALSE(snap->on_device());
  ASSERT_TRUE(cuda_->restore(**h, *snap).ok());
  dev.clear();
  r = cuda_->decode_on_device(**h, ids.back(), n, {}, [&](int32_t id) {
    dev.push_back(id);
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(dev, host);
  // A stop id ends decoding on the device: the stop id is not passed on, nothing after it runs.
  const int cut = 5;
  ASSERT_TRUE(cuda_->restore(**h, *snap).ok());
  DeviceDecodeOptions opts;
  opts.stop_ids = {host[cut]};
  dev.clear();
  r = cuda_->decode_on_device(**h, ids.back(), n, opts, [&](int32_t id) {
    dev.push_back(id);
    return true;
  });
  ASSERT_TRUE(r.ok());
  const auto first = std::find(host.begin(), host.end(), host[cut]) - host.begin();
  EXPECT_EQ(dev, std::vector<int32_t>(host.begin(), host.begin() + first));
  EXPECT_EQ((**h).n_past(), int64_t(ids.size()) - 1 + first + 1);
  // The host asking to stop: the state holds what the device consumed, reported exactly.
  ASSERT_TRUE(cuda_->restore(**h, *snap).ok());
  dev.clear();
  r = cuda_->decode_on_device(**h, ids.back(), n, {}, [&](int32_t id) {
    dev.push_back(id);
    return dev.size() < 3;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(int64_t(r->size()), (**h).n_past() - int64_t(ids.size()) + 1);
  for (size_t i = 1; i < r->size(); ++i) EXPECT_EQ((*r)[i], host[i - 1]);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGolden,
                         ::testing::Values(Case{"tiny", "hf"}, Case{"tiny", "mlx4"},
                                           Case{"odd", "hf"}, Case{"odd", "mlx4"}));

TEST(CudaBackend, ContextThatDoesNotFitIsRefusedUpFront) {
  ORCHID_REQUIRE_GPU();
  auto m = load_model(fixture("tiny") + "/mlx4");
  ASSERT_TRUE(m.ok());
  auto b = make_cuda_backend(**m);
  ASSERT_TRUE(b.ok()) << b.message();
  auto st = (*b)->new_state(int64_t(1) << 40);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("GPU memory"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace orchid
