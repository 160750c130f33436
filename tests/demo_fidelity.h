// The demo model's fidelity yardstick (issue 7), shared by the CPU and CUDA tests: teacher-forced
// statistics of a backend running models/orchid-demo over the held-out text
// tests/fixtures/orchid-demo/heldout-eval.txt against Hugging Face's fp32 reference of the same
// weights (heldout-eval.ref.npy, the compact top-32 form of runtime/eval.h; reference.json holds
// HF's perplexity and its own bf16 run's top-1 agreement with fp32, the noise floor).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "orchid/backend/backend.h"
#include "orchid/runtime/eval.h"
#include "orchid/tokenizer/tokenizer.h"
#include "orchid/util/npy.h"

namespace orchid::test {

inline std::string demo_file_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline std::string demo_model_dir() {
  return std::string(ORCHID_SOURCE_DIR) + "/models/orchid-demo";
}

struct DemoReference {
  double hf_fp32_perplexity = 0, hf_bf16_top1 = 0, hf_bf16_mean_kl = 0;
};

inline DemoReference demo_reference() {
  const auto j = nlohmann::json::parse(demo_file_text(
      std::string(ORCHID_SOURCE_DIR) + "/tests/fixtures/orchid-demo/reference.json"));
  return {j.at("hf_fp32_perplexity").get<double>(),
          j.at("hf_bf16_top1_agreement_vs_fp32").get<double>(),
          j.at("hf_bf16_mean_kl_vs_fp32_nats").get<double>()};
}

// The backend's statistics over the held-out text, in forward calls of `window` tokens on one
// state (as `orchid eval` runs). Fails the test on any error.
inline EvalStats demo_eval(Backend& backend, int64_t window) {
  const std::string fx = std::string(ORCHID_SOURCE_DIR) + "/tests/fixtures/orchid-demo/";
  EvalStats stats;
  auto tok = Tokenizer::load(demo_model_dir() + "/tokenizer.json");
  EXPECT_TRUE(tok.ok()) << tok.message();
  if (!tok) return stats;
  const std::vector<int32_t> ids = tok->encode(demo_file_text(fx + "heldout-eval.txt"));
  auto ref = read_npy_f32(fx + "heldout-eval.ref.npy");
  EXPECT_TRUE(ref.ok()) << ref.message();
  if (!ref) return stats;
  const int64_t n = int64_t(ids.size()), V = backend.n_vocab();
  EXPECT_EQ(ref->shape.size(), 2u);
  EXPECT_EQ(ref->shape[0], n) << "the reference's positions are the text's tokens";
  auto form = EvalReference::of_width(ref->shape.back(), V);
  EXPECT_TRUE(form.ok()) << form.message();
  if (!form || ref->shape[0] != n) return stats;
  auto st = backend.new_state(n);
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st) return stats;
  std::vector<float> logits;
  for (int64_t t = 0; t < n; t += window) {
    const int64_t w = std::min(window, n - t);
    Status s = backend.forward(**st, std::span<const int32_t>(ids.data() + t, size_t(w)),
                               LogitsMode::all, logits);
    EvalReference rows = *form;
    rows.rows = ref->data.data() + t * form->width;
    if (s) s = add_eval_positions(stats, logits, V, ids, t, &rows);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s) return stats;
  }
  return stats;
}

}  // namespace orchid::test
