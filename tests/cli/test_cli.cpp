// The `orchid` binary doing its job: info describes both layouts, generate --json prints the
// same greedy tokens as the library, logits writes an [n, vocab] .npy consistent with
// generate, and synth writes checkpoints that info and generate accept.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../test_util.h"
#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/model/model.h"
#include "orchid/runtime/generate.h"
#include "orchid/runtime/sampler.h"
#include "orchid/util/npy.h"

namespace orchid {
namespace {

using test::contains;
using test::golden;
using test::run_orchid;
using test::ScratchDir;
using test::shell_quote;

void expect_success(const test::CommandResult& r) {
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  EXPECT_FALSE(contains(r.output, "error"));
}

// The {"tokens": [...]} line of generate --json.
std::vector<int32_t> json_tokens(const std::string& output) {
  auto j = nlohmann::json::parse(output, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << output;
  if (j.is_discarded() || !j.is_object() || !j.contains("tokens")) {
    ADD_FAILURE() << "no \"tokens\" in: " << output;
    return {};
  }
  EXPECT_EQ(j.size(), 1u) << output;
  return j["tokens"].get<std::vector<int32_t>>();
}

std::vector<int32_t> library_greedy(const std::string& dir, const std::vector<int32_t>& prompt,
                                    int n) {
  auto m = load_model(dir);
  EXPECT_TRUE(m.ok()) << m.message();
  if (!m) return {};
  auto opts = cpu_options_from_env();  // the CLI's choice of path (fast unless ORCHID_CPU_EXACT=1)
  EXPECT_TRUE(opts.ok()) << opts.message();
  auto be = make_cpu_backend(**m, opts.ok() ? *opts : CpuOptions{});
  SamplerParams sp;
  sp.greedy = true;
  auto out = generate(*be, prompt, n, sp);
  EXPECT_TRUE(out.ok()) << out.message();
  return out.ok() ? *out : std::vector<int32_t>{};
}

TEST(Cli, InfoDescribesMlx4Fixture) {
  auto r = run_orchid("info -m " + shell_quote(golden("tiny/mlx4")));
  expect_success(r);
  EXPECT_TRUE(contains(r.output, "layout     mlx"));
  EXPECT_TRUE(contains(r.output, "nested text_config"));
  EXPECT_TRUE(contains(r.output, "q4 g64"));
  EXPECT_TRUE(contains(r.output, "q8 g64"));  // router and shared expert gate
  EXPECT_TRUE(contains(r.output, "vocab      512"));
  EXPECT_TRUE(contains(r.output, "layers 4 (1 full attention, 3 Gated DeltaNet)"));
  EXPECT_TRUE(contains(r.output, "8 experts, top 2"));
  EXPECT_FALSE(contains(r.output, "BF16"));
}

TEST(Cli, InfoDescribesFlatHfFixture) {
  auto r = run_orchid("info -m " + shell_quote(golden("odd/hf")));
  expect_success(r);
  EXPECT_TRUE(contains(r.output, "layout     hf"));
  EXPECT_TRUE(contains(r.output, "flat"));
  EXPECT_TRUE(contains(r.output, "in 2 file(s)"));
  EXPECT_TRUE(contains(r.output, "vocab      1003"));
  EXPECT_TRUE(contains(r.output, "6 q heads, 2 kv heads, head_dim 48, rotary 24"));
  EXPECT_TRUE(contains(r.output, "BF16"));
  EXPECT_FALSE(contains(r.output, "q4"));
}

TEST(Cli, InfoWithQuantizeQ4) {
  auto r = run_orchid("info -m " + shell_quote(golden("tiny/hf")) + " --quantize q4");
  expect_success(r);
  EXPECT_TRUE(contains(r.output, "layout     hf"));
  EXPECT_TRUE(contains(r.output, "q4 g64"));
  EXPECT_TRUE(contains(r.output, "q8 g64"));
}

TEST(Cli, GenerateGreedyJsonMatchesLibrary) {
  const std::string dir = golden("tiny/mlx4");
  auto r =
      run_orchid("generate -m " + shell_quote(dir) + " --tokens 5,17,300 -n 7 --greedy --json");
  expect_success(r);
  auto tokens = json_tokens(r.output);
  ASSERT_EQ(tokens.size(), 7u) << r.output;
  for (int32_t t : tokens) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 512);
  }
  EXPECT_EQ(tokens, library_greedy(dir, {5, 17, 300}, 7));

  // Plain output: the same ids, comma-separated.
  auto plain = run_orchid("generate -m " + shell_quote(dir) + " --tokens 5,17,300 -n 7 --greedy");
  expect_success(plain);
  std::string want;
  for (size_t i = 0; i < tokens.size(); ++i) want += (i ? "," : "") + std::to_string(tokens[i]);
  EXPECT_EQ(plain.output, want + "\n");
}

TEST(Cli, GenerateHfFixtureAndZeroTokens) {
  const std::string dir = golden("odd/hf");
  auto r = run_orchid("generate -m " + shell_quote(dir) + " --tokens 1000,2 -n 4 --greedy --json");
  expect_success(r);
  auto tokens = json_tokens(r.output);
  EXPECT_EQ(tokens.size(), 4u);
  EXPECT_EQ(tokens, library_greedy(dir, {1000, 2}, 4));

  auto none = run_orchid("generate -m " + shell_quote(dir) + " --tokens 7 -n 0 --json");
  expect_success(none);
  EXPECT_TRUE(json_tokens(none.output).empty());
}

TEST(Cli, GenerateSampledIsSeeded) {
  const std::string cmd = "generate -m " + shell_quote(golden("tiny/mlx4")) +
                          " --tokens 1,2 -n 8 --temperature 0.8 --top-k 40 --top-p 0.95 --json";
  auto a = run_orchid(cmd + " --seed 3"), b = run_orchid(cmd + " --seed 3");
  expect_success(a);
  expect_success(b);
  EXPECT_EQ(json_tokens(a.output), json_tokens(b.output));
  EXPECT_EQ(json_tokens(a.output).size(), 8u);
}

TEST(Cli, LogitsWritesNpyOfShapeNByVocab) {
  ScratchDir d;
  const std::string dir = golden("tiny/mlx4"), out = d / "logits.npy";
  auto r = run_orchid("logits -m " + shell_quote(dir) + " --tokens 5,17,300,4 --out " +
                      shell_quote(out));
  expect_success(r);
  auto npy = read_npy_f32(out);
  ASSERT_TRUE(npy.ok()) << npy.message();
  ASSERT_EQ(npy->shape, (std::vector<int64_t>{4, 512}));
  ASSERT_EQ(npy->data.size(), size_t(4 * 512));
  for (float v : npy->data) ASSERT_TRUE(std::isfinite(v));

  // The last row's argmax is the first greedy token after the same prompt.
  std::span<const float> last(npy->data.data() + 3 * 512, 512);
  EXPECT_EQ(argmax(last), library_greedy(dir, {5, 17, 300, 4}, 1).at(0));

  // On the exact path, chunked prefill gives the same logits (to float rounding). (The fast
  // path's one-row and many-row kernels round differently, and on this random model a routing
  // choice can flip on that.)
  const std::string exact = "ORCHID_CPU_EXACT=1 " + shell_quote(ORCHID_BINARY) + " logits -m " +
                            shell_quote(dir) + " --tokens 5,17,300,4 --out ";
  const std::string out0 = d / "whole.npy", out1 = d / "chunked.npy";
  expect_success(test::run_command(exact + shell_quote(out0)));
  expect_success(test::run_command(exact + shell_quote(out1) + " --chunk 1"));
  npy = read_npy_f32(out0);
  ASSERT_TRUE(npy.ok()) << npy.message();
  auto chunked = read_npy_f32(out1);
  ASSERT_TRUE(chunked.ok()) << chunked.message();
  ASSERT_EQ(chunked->shape, npy->shape);
  for (size_t i = 0; i < npy->data.size(); ++i)
    ASSERT_NEAR(chunked->data[i], npy->data[i], 1e-3f * (1 + std::fabs(npy->data[i]))) << i;
}

TEST(Cli, LogitsOnHfFixture) {
  ScratchDir d;
  const std::string out = d / "l.npy";
  auto r = run_orchid("logits -m " + shell_quote(golden("odd/hf")) + " --tokens 1002 --out " +
                      shell_quote(out));
  expect_success(r);
  auto npy = read_npy_f32(out);
  ASSERT_TRUE(npy.ok()) << npy.message();
  EXPECT_EQ(npy->shape, (std::vector<int64_t>{1, 1003}));
}

TEST(Cli, SynthMlx4ThenInfoAndGenerate) {
  ScratchDir d;
  const std::string dir = d / "tiny-mlx4";
  auto s = run_orchid("synth --config tiny --layout mlx4 -o " + shell_quote(dir));
  expect_success(s);
  EXPECT_TRUE(test::fs::exists(dir + "/config.json"));
  EXPECT_TRUE(test::fs::exists(dir + "/model.safetensors"));

  auto info = run_orchid("info -m " + shell_quote(dir));
  expect_success(info);
  EXPECT_TRUE(contains(info.output, "layout     mlx"));
  EXPECT_TRUE(contains(info.output, "q4"));
  EXPECT_TRUE(contains(info.output, "in 1 file(s)"));

  auto gen = run_orchid("generate -m " + shell_quote(dir) + " --tokens 1,2,3 -n 3 --greedy --json");
  expect_success(gen);
  EXPECT_EQ(json_tokens(gen.output).size(), 3u);
}

TEST(Cli, SynthHfFromConfigFileThenInfo) {
  ScratchDir d;
  const std::string dir = d / "odd-hf";
  auto s = run_orchid("synth --config " + shell_quote(golden("odd/mlx4/config.json")) +
                      " --layout hf --seed 5 -o " + shell_quote(dir));
  expect_success(s);
  EXPECT_TRUE(test::fs::exists(dir + "/model.safetensors.index.json"));
  auto info = run_orchid("info -m " + shell_quote(dir));
  expect_success(info);
  EXPECT_TRUE(contains(info.output, "layout     hf"));
  EXPECT_TRUE(contains(info.output, "vocab      1003"));
  EXPECT_TRUE(contains(info.output, "5 experts, top 3, ff 96, shared ff 64"));
  EXPECT_TRUE(contains(info.output, "BF16"));
  EXPECT_FALSE(contains(info.output, "q4"));  // the source config's quantization is dropped
}

TEST(Cli, SynthIsDeterministicInTheSeed) {
  ScratchDir d;
  for (const char* leaf : {"a", "b"}) {
    auto s = run_orchid("synth --config tiny --layout mlx4 --seed 11 -o " + shell_quote(d / leaf));
    expect_success(s);
  }
  auto c = run_orchid("synth --config tiny --layout mlx4 --seed 12 -o " + shell_quote(d / "c"));
  expect_success(c);
  const std::string a = test::read_text(d / "a/model.safetensors");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, test::read_text(d / "b/model.safetensors"));
  EXPECT_NE(a, test::read_text(d / "c/model.safetensors"));
}

}  // namespace
}  // namespace orchid

namespace orchid {
namespace {

// `orchid convert` writes the demo model as llama.cpp's converter would (F32: exactly the same
// numbers; Q8_0: re-quantized), with its tokenizer and template: the exact path then generates
// the directory's greedy tokens from the F32 file, and a chat prompt runs from either file alone.
TEST(Cli, ConvertWritesAGgufOrchidRunsAlone) {
  ScratchDir d;
  const std::string demo = std::string(ORCHID_SOURCE_DIR) + "/models/orchid-demo";
  const std::string f32 = d / "demo-f32.gguf", q8 = d / "demo-q8_0.gguf";
  expect_success(run_orchid("convert -m " + shell_quote(demo) + " -o " + shell_quote(f32) + " --type f32"));
  expect_success(run_orchid("convert -m " + shell_quote(demo) + " -o " + shell_quote(q8) +
                            " --type q8_0 --router q8_0"));
  const std::string gen = " --tokens 5,17,300,41 -n 12 --greedy --json --exact";
  auto a = run_orchid("generate -m " + shell_quote(demo) + gen);
  auto b = run_orchid("generate -m " + shell_quote(f32) + gen);
  expect_success(a);
  expect_success(b);
  EXPECT_EQ(json_tokens(a.output), json_tokens(b.output));
  EXPECT_EQ(json_tokens(a.output).size(), 12u);
  auto r = run_orchid("run -m " + shell_quote(q8) + " --prompt 'What is the capital of France?' -n 8");
  expect_success(r);
  EXPECT_FALSE(r.output.empty());
  auto bad = run_orchid("convert -m " + shell_quote(demo) + " -o " + shell_quote(d / "x.gguf") +
                        " --tokenizer " + shell_quote(d.str()));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("no tokenizer.json"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace orchid

namespace orchid {
namespace {

// `orchid synth --layout gguf-q4_0` writes one GGUF file (the mlx4 model of the seed re-quantized,
// Q8_0 router) that orchid runs alone; `orchid info` lists the file's tensor types and bits per
// weight.
TEST(Cli, SynthGgufThenInfoAndRun) {
  ScratchDir d;
  const std::string demo = std::string(ORCHID_SOURCE_DIR) + "/models/orchid-demo";
  const std::string f = d / "tiny-q4_0.gguf";
  expect_success(run_orchid("synth --config tiny --layout gguf-q4_0 -o " + shell_quote(f) +
                            " --tokenizer " + shell_quote(demo)));
  auto info = run_orchid("info -m " + shell_quote(f));
  expect_success(info);
  EXPECT_NE(info.output.find("Q4_0"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("Q8_0"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("bpw"), std::string::npos) << info.output;
  auto r = run_orchid("run -m " + shell_quote(f) + " --prompt hello -n 4");
  expect_success(r);
  EXPECT_FALSE(std::filesystem::exists(f + ".synth-tmp"));
}

}  // namespace
}  // namespace orchid
