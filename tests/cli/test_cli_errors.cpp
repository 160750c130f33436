// The `orchid` binary on bad input: each case exits normally with a non-zero status (never
// killed by a signal) and prints one clear "orchid: error: ..." line naming what was wrong.
#include <gtest/gtest.h>

#include <string>

#include "../test_util.h"
#ifdef ORCHID_HAVE_CUDA
#include "orchid/backend/cuda/cuda_backend.h"
#endif

namespace orchid {
namespace {

using test::contains;
using test::golden;
using test::run_orchid;
using test::ScratchDir;
using test::shell_quote;

int count(const std::string& text, const std::string& piece) {
  int n = 0;
  for (size_t p = text.find(piece); p != std::string::npos; p = text.find(piece, p + 1)) ++n;
  return n;
}

// The run ended by exit(status != 0), not by a signal (a crash).
void expect_clean_failure(const test::CommandResult& r) {
  EXPECT_FALSE(r.signaled) << r.describe();
  ASSERT_TRUE(r.exited) << r.describe();
  EXPECT_NE(r.exit_code, 0) << r.describe();
}

// An error the engine reports: exit status 1 and exactly one "orchid: error:" line that
// contains every piece.
void expect_error(const test::CommandResult& r, std::initializer_list<std::string> pieces) {
  expect_clean_failure(r);
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_EQ(count(r.output, "orchid: error: "), 1) << r.output;
  for (const auto& p : pieces) EXPECT_TRUE(contains(r.output, p));
}

const std::string kTinyMlx = golden("tiny/mlx4");

// Forcing the GPU backend where there is none (no device, or a build without CUDA) is one
// clear error; auto quietly runs on the CPU.
TEST(CliErrors, BackendCudaWithoutAUsableGpu) {
#ifdef ORCHID_HAVE_CUDA
  if (cuda_device_usable().ok()) GTEST_SKIP() << "a usable GPU is present";
#endif
  auto r =
      run_orchid("generate -m " + shell_quote(kTinyMlx) + " --tokens 1,2,3 -n 2 --backend cuda");
  expect_error(r, {"--backend cuda: "});
  auto a =
      run_orchid("generate -m " + shell_quote(kTinyMlx) + " --tokens 1,2,3 -n 2 --backend auto");
  EXPECT_TRUE(a.exited && a.exit_code == 0) << a.describe();
}

TEST(CliErrors, InfoOnNonexistentDirectory) {
  auto r = run_orchid("info -m /nonexistent");
  expect_error(r, {"/nonexistent/config.json"});
}

TEST(CliErrors, LogitsNonIntegerToken) {
  ScratchDir d;
  auto r = run_orchid("logits -m " + shell_quote(kTinyMlx) + " --tokens 1,x,3 --out " +
                      shell_quote(d / "l.npy"));
  expect_error(r, {"--tokens", "'x'", "not a token id"});
  EXPECT_FALSE(test::fs::exists(d / "l.npy"));
}

TEST(CliErrors, LogitsTokenOutsideVocabulary) {
  ScratchDir d;
  auto r = run_orchid("logits -m " + shell_quote(kTinyMlx) + " --tokens 1,512,3 --out " +
                      shell_quote(d / "l.npy"));
  expect_error(r, {"token id 512", "outside the vocabulary", "512"});
  EXPECT_FALSE(test::fs::exists(d / "l.npy"));
  r = run_orchid("logits -m " + shell_quote(kTinyMlx) + " --tokens=-1,2 --out " +
                 shell_quote(d / "l.npy"));
  expect_error(r, {"token id -1", "outside the vocabulary"});
}

TEST(CliErrors, LogitsEmptyTokenList) {
  ScratchDir d;
  auto r = run_orchid("logits -m " + shell_quote(kTinyMlx) + " --tokens '' --out " +
                      shell_quote(d / "l.npy"));
  expect_error(r, {"--tokens", "not a token id"});
  r = run_orchid("logits -m " + shell_quote(kTinyMlx) + " --tokens 1,,3 --out " +
                 shell_quote(d / "l.npy"));
  expect_error(r, {"--tokens"});
}

TEST(CliErrors, TokenIdTooLargeForInt32) {
  auto r = run_orchid("generate -m " + shell_quote(kTinyMlx) + " --tokens 99999999999 -n 1");
  expect_error(r, {"--tokens", "99999999999"});
}

TEST(CliErrors, GenerateTokenOutsideVocabulary) {
  auto r = run_orchid("generate -m " + shell_quote(kTinyMlx) + " --tokens 3,100000 -n 2 --greedy");
  expect_error(r, {"100000", "outside the vocabulary"});
}

TEST(CliErrors, GenerateOnMalformedConfig) {
  ScratchDir d;
  std::string dir = test::copy_dir(kTinyMlx, d / "m");
  test::write_text(dir + "/config.json", "{\"model_type\": \"qwen3_5_moe\",,}");
  auto r = run_orchid("generate -m " + shell_quote(dir) + " --tokens 1,2 -n 2 --greedy --json");
  expect_error(r, {dir + "/config.json", "not valid JSON"});
  EXPECT_FALSE(contains(r.output, "\"tokens\""));
}

TEST(CliErrors, GenerateOnWrongModelType) {
  ScratchDir d;
  std::string dir = test::copy_dir(golden("odd/hf"), d / "m");
  std::string cfg = test::read_text(dir + "/config.json");
  cfg.replace(cfg.find("\"qwen3_5_moe_text\""), 18, "\"mixtral\"");
  test::write_text(dir + "/config.json", cfg);
  auto r = run_orchid("generate -m " + shell_quote(dir) + " --tokens 1 -n 1");
  expect_error(r, {"config.json", "model_type", "mixtral"});
}

TEST(CliErrors, SynthUnknownConfigName) {
  ScratchDir d;
  auto r = run_orchid("synth --config qwen9-1t --layout mlx4 -o " + shell_quote(d / "out"));
  expect_error(r, {"--config", "qwen9-1t", "tiny"});
  EXPECT_FALSE(test::fs::exists(d / "out"));
}

TEST(CliErrors, SynthConfigFileUnsupported) {
  ScratchDir d;
  std::string cfg = test::read_text(golden("odd/hf/config.json"));
  cfg.replace(cfg.find("\"silu\""), 6, "\"gelu\"");
  test::write_text(d / "cfg.json", cfg);
  auto r =
      run_orchid("synth --config " + shell_quote(d / "cfg.json") + " -o " + shell_quote(d / "out"));
  expect_error(r, {d / "cfg.json", "hidden_act", "gelu"});
}

TEST(CliErrors, InfoOnTruncatedShard) {
  ScratchDir d;
  std::string dir = test::copy_dir(golden("tiny/hf"), d / "m");
  const std::string shard = dir + "/model-00002-of-00002.safetensors";
  test::truncate_file(shard, test::fs::file_size(shard) / 2);
  auto r = run_orchid("info -m " + shell_quote(dir));
  expect_error(r, {"model-00002-of-00002.safetensors"});
}

TEST(CliErrors, InfoOnTruncatedSingleFile) {
  ScratchDir d;
  std::string dir = test::copy_dir(kTinyMlx, d / "m");
  const std::string file = dir + "/model.safetensors";
  test::truncate_file(file, 100);
  auto r = run_orchid("info -m " + shell_quote(dir));
  expect_error(r, {file});
}

TEST(CliErrors, InfoWithoutSafetensors) {
  ScratchDir d;
  std::string dir = test::copy_dir(kTinyMlx, d / "m");
  test::fs::remove(dir + "/model.safetensors");
  auto r = run_orchid("info -m " + shell_quote(dir));
  expect_error(r, {"no model.safetensors", dir});
}

TEST(CliErrors, LogitsOutputNotWritable) {
  auto r = run_orchid("logits -m " + shell_quote(kTinyMlx) +
                      " --tokens 1,2 --out /nonexistent/dir/l.npy");
  expect_error(r, {"/nonexistent/dir/l.npy"});
}

TEST(CliErrors, UsageErrorsExitNonZeroWithoutCrashing) {
  for (const char* args :
       {"", "frobnicate", "info", "logits -m /tmp --out x.npy", "info -m x --quantize q8",
        "info -m x --backend tpu", "synth --config tiny --layout q3 -o /tmp/x",
        "generate -m x --tokens 1 -n -5", "bench sideways -m x"}) {
    SCOPED_TRACE(args);
    auto r = run_orchid(args);
    expect_clean_failure(r);
    EXPECT_FALSE(r.output.empty());
  }
}

}  // namespace
}  // namespace orchid
