// The built-in demo model on the CPU backend against Hugging Face (issue 7's fidelity bar):
// teacher-forced over the 4,100-token held-out text, top-1 agreement with HF fp32 ≥ 99.5 % and
// perplexity within 0.1 % of HF fp32's (measured: 100 % and 2.4e-7,
// bench/results/demo-model-fidelity-2026-11-30.json).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "../demo_fidelity.h"
#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/model/model.h"

namespace orchid {
namespace {

TEST(DemoModel, CpuMatchesHuggingFaceOnHeldOutText) {
  auto m = load_model(test::demo_model_dir());
  ASSERT_TRUE(m.ok()) << m.message();
  auto be = make_cpu_backend(**m);
  const test::DemoReference ref = test::demo_reference();
  const EvalStats s = test::demo_eval(*be, 1024);
  ASSERT_EQ(s.compared, 4100);
  const double ppl_rel = s.perplexity() / ref.hf_fp32_perplexity - 1;
  std::printf(
      "[ demo model ] cpu: top-1 agreement %.4f, perplexity %.4f (HF fp32 %.4f, %+.2e), "
      "mean KL %.2e nats\n",
      s.top1_agreement(), s.perplexity(), ref.hf_fp32_perplexity, ppl_rel, s.mean_kl());
  EXPECT_GE(s.top1_agreement(), 0.995);
  EXPECT_LE(std::fabs(ppl_rel), 1e-3);
}

}  // namespace
}  // namespace orchid
