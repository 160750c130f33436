// The built-in demo model on the CUDA backend against Hugging Face (issue 7's fidelity bar):
// teacher-forced over the 4,100-token held-out text, top-1 agreement with HF fp32 no lower than
// HF bf16's own agreement with it minus 0.5 points, perplexity within 0.5 % of HF fp32's — on
// the chunked prefill (1,024-token windows and one 4,100-token prompt) and step by step.
#include <cmath>
#include <cstdio>

#include "../demo_fidelity.h"
#include "cuda_test_util.h"
#include "orchid/backend/cuda/cuda_backend.h"
#include "orchid/backend/cuda/cuda_backend_impl.h"
#include "orchid/model/model.h"

namespace orchid {
namespace {

TEST(CudaDemoModel, MatchesHuggingFaceOnHeldOutText) {
  ORCHID_REQUIRE_GPU();
  auto m = load_model(test::demo_model_dir());
  ASSERT_TRUE(m.ok()) << m.message();
  auto be = make_cuda_backend(**m);
  ASSERT_TRUE(be.ok()) << be.message();
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(be->get());
  ASSERT_NE(cuda, nullptr);
  const test::DemoReference ref = test::demo_reference();
  struct Run {
    const char* name;
    int64_t window;
    bool prefill;
  };
  for (const Run& r :
       {Run{"chunked prefill, 1024-token windows", 1024, true},
        Run{"one 4100-token prefill", 4100, true}, Run{"step by step", 1024, false}}) {
    cuda->switches().prefill = r.prefill;
    const EvalStats s = test::demo_eval(**be, r.window);
    cuda->switches().prefill = true;
    ASSERT_EQ(s.compared, 4100) << r.name;
    const double ppl_rel = s.perplexity() / ref.hf_fp32_perplexity - 1;
    std::printf(
        "[ demo model ] cuda, %s: top-1 agreement %.4f (HF bf16 %.4f), perplexity %.4f "
        "(HF fp32 %.4f, %+.2e), mean KL %.2e nats\n",
        r.name, s.top1_agreement(), ref.hf_bf16_top1, s.perplexity(), ref.hf_fp32_perplexity,
        ppl_rel, s.mean_kl());
    EXPECT_GE(s.top1_agreement(), ref.hf_bf16_top1 - 0.005) << r.name;
    EXPECT_LE(std::fabs(ppl_rel), 5e-3) << r.name;
  }
}

}  // namespace
}  // namespace orchid
