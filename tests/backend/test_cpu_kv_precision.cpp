// The CPU backend's KV precision option (CpuOptions::kv, ORCHID_CPU_KV): bf16 rounds K and V to
// bf16 as they enter the cache, exactly as the CUDA cache stores them; fp32 (the default) keeps
// them as computed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "../test_util.h"
#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/backend/cpu/cpu_layers.h"
#include "orchid/backend/select_backend.h"
#include "orchid/model/model.h"
#include "orchid/util/bf16.h"

namespace orchid {
namespace {

using test::contains;
using test::golden;

struct Prefilled {
  std::unique_ptr<BackendState> state;
  std::vector<float> logits;  // [prompt, n_vocab]
};

// Prefill of ids into a fresh state, which is kept for inspection.
Prefilled prefill(Backend& be, const std::vector<int32_t>& ids) {
  Prefilled r;
  auto st = be.new_state(int64_t(ids.size()));
  EXPECT_TRUE(st.ok()) << st.message();
  r.state = std::move(*st);
  Status s = be.forward(*r.state, ids, LogitsMode::all, r.logits);
  EXPECT_TRUE(s.ok()) << s.message();
  return r;
}

const cpu::CpuState& cpu_state(const Prefilled& r) {
  return static_cast<const cpu::CpuState&>(*r.state);
}

// Cache entries of the first n tokens that bf16 cannot represent exactly.
int64_t not_bf16(const std::vector<float>& cache, int64_t n) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += round_bf16(cache[size_t(i)]) != cache[size_t(i)];
  return count;
}

class CpuKvPrecision : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream in(golden("odd/ref/golden.json"));
    ids_ = nlohmann::json::parse(in)["prompts"][0].get<std::vector<int32_t>>();
    auto m = load_model(golden("odd/mlx4"));
    ASSERT_TRUE(m.ok()) << m.message();
    model_ = std::move(*m);
  }
  std::vector<int32_t> ids_;
  std::unique_ptr<Model> model_;
};

// In prefill, every token's K/V of the first full-attention layer are computed before anything
// reads the cache, from layers the cache does not feed: with bf16 they must be exactly the fp32
// run's values rounded to nearest even. Later layers see inputs that the rounding has already
// changed, so there every entry is only checked to be bf16-exact.
TEST_F(CpuKvPrecision, Bf16CacheHoldsTheFp32ValuesRoundedToBf16) {
  const ModelConfig& c = model_->config;
  auto fp32_be = make_cpu_backend(*model_);
  auto bf16_be = make_cpu_backend(*model_, {.kv = KvPrecision::bf16});
  const Prefilled f = prefill(*fp32_be, ids_), b = prefill(*bf16_be, ids_);
  const int64_t n = int64_t(ids_.size()) * c.n_head_kv * c.head_dim;
  bool first = true;
  for (size_t l = 0; l < size_t(c.n_layer); ++l) {
    if (c.layer_types[l] != LayerKind::full_attention) continue;
    for (const auto& [fc, bc] : {std::pair{&cpu_state(f).k[l], &cpu_state(b).k[l]},
                                 std::pair{&cpu_state(f).v[l], &cpu_state(b).v[l]}}) {
      ASSERT_GE(int64_t(fc->size()), n);
      ASSERT_GE(int64_t(bc->size()), n);
      // The default keeps K/V as computed: most entries are not bf16 values.
      EXPECT_GT(not_bf16(*fc, n), n / 2) << "layer " << l;
      EXPECT_EQ(not_bf16(*bc, n), 0) << "layer " << l;
      if (!first) continue;
      int64_t mismatches = 0;
      for (int64_t i = 0; i < n; ++i)
        mismatches += round_bf16((*fc)[size_t(i)]) != (*bc)[size_t(i)];
      EXPECT_EQ(mismatches, 0) << "layer " << l;
    }
    first = false;
  }
  // The rounded cache is what attention reads: the logits move (here 2e-2 rel. L2 over the
  // prompt, most of it from one MoE routing near-tie that the rounding flips), while a rounding
  // that wrote wrong bits or rows would move them by O(1).
  ASSERT_EQ(f.logits.size(), b.logits.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < f.logits.size(); ++i) {
    diff += (double(b.logits[i]) - f.logits[i]) * (double(b.logits[i]) - f.logits[i]);
    norm += double(f.logits[i]) * f.logits[i];
  }
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(std::sqrt(diff / norm), 0.1);
}

// Without the option nothing changes: the default and an explicit fp32 give identical logits.
TEST_F(CpuKvPrecision, DefaultIsFp32) {
  auto def = make_cpu_backend(*model_);
  auto fp32 = make_cpu_backend(*model_, {.kv = KvPrecision::fp32});
  EXPECT_EQ(prefill(*def, ids_).logits, prefill(*fp32, ids_).logits);
}

// Sets an environment variable for one scope and restores the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST_F(CpuKvPrecision, EnvironmentSelectsItForMakeBackend) {
  for (const auto& [value, want] : {std::pair<const char*, KvPrecision>{nullptr, KvPrecision::fp32},
                                    {"fp32", KvPrecision::fp32},
                                    {"bf16", KvPrecision::bf16}}) {
    ScopedEnv env("ORCHID_CPU_KV", value);
    auto o = cpu_options_from_env();
    ASSERT_TRUE(o.ok()) << o.message();
    EXPECT_EQ(o->kv, want) << (value ? value : "(unset)");
    auto be = make_backend("cpu", *model_, nullptr);
    ASSERT_TRUE(be.ok()) << be.message();
    auto st = (*be)->new_state(8);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(static_cast<const cpu::CpuState&>(**st).kv_bf16, want == KvPrecision::bf16);
  }
  ScopedEnv env("ORCHID_CPU_KV", "fp16");
  auto o = cpu_options_from_env();
  ASSERT_FALSE(o.ok());
  EXPECT_TRUE(contains(o.message(), "ORCHID_CPU_KV: expected fp32 or bf16, got 'fp16'"));
  auto be = make_backend("auto", *model_, nullptr);
  ASSERT_FALSE(be.ok());
  EXPECT_TRUE(contains(be.message(), "ORCHID_CPU_KV"));
}

}  // namespace
}  // namespace orchid
