// Small helpers shared by the config, loader and CLI tests: per-test scratch directories,
// fixture paths, text files, and running the `orchid` binary with its exit status and output.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace orchid::test {

namespace fs = std::filesystem;

// A fresh, empty directory under the gtest temp dir, unique per process and test; removed when
// the object goes out of scope.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag = "") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "orchid_" + std::to_string(::getpid()) + "_" +
                       (info ? std::string(info->test_suite_name()) + "_" + info->name() : "x");
    if (!tag.empty()) name += "_" + tag;
    for (char& c : name)
      if (c == '/') c = '_';
    path_ = fs::path(::testing::TempDir()) / name;
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // path / leaf as a string.
  std::string operator/(const std::string& leaf) const { return (path_ / leaf).string(); }

 private:
  fs::path path_;
};

// EXPECT_TRUE(contains(message, "tensor name")): prints both strings on failure.
inline ::testing::AssertionResult contains(const std::string& text, const std::string& piece) {
  if (text.find(piece) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << piece << "' not found in:\n" << text;
}

// tests/fixtures/golden/<rel> in the source tree.
inline std::string golden(const std::string& rel) {
  return std::string(ORCHID_SOURCE_DIR) + "/tests/fixtures/golden/" + rel;
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

// Copies the files of directory `from` into `to` (created if needed); returns `to`.
inline std::string copy_dir(const std::string& from, const std::string& to) {
  fs::create_directories(to);
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  return to;
}

// Truncates `path` to `bytes` bytes.
inline void truncate_file(const std::string& path, uintmax_t bytes) {
  fs::resize_file(path, bytes);
}

// 'text' quoted for /bin/sh.
inline std::string shell_quote(const std::string& text) {
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct CommandResult {
  bool exited = false;    // WIFEXITED
  int exit_code = -1;     // WEXITSTATUS when exited
  bool signaled = false;  // WIFSIGNALED (a crash)
  int signal = 0;
  std::string output;  // stdout and stderr together

  // For failure messages.
  std::string describe() const {
    return (exited     ? "exit " + std::to_string(exit_code)
            : signaled ? "killed by signal " + std::to_string(signal)
                       : "?") +
           ", output:\n" + output;
  }
};

// Runs `sh -c command` with stderr folded into stdout.
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* p = ::popen(("(" + command + ") 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  if (status == -1) return r;
  r.exited = WIFEXITED(status);
  if (r.exited) r.exit_code = WEXITSTATUS(status);
  // sh reports a child killed by signal N as exit status 128 + N.
  r.signaled = WIFSIGNALED(status) || (r.exited && r.exit_code > 128 && r.exit_code < 160);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  if (r.signaled && !r.signal) r.signal = r.exit_code - 128;
  return r;
}

// Runs the built `orchid` binary with `args` (already shell-quoted where needed).
inline CommandResult run_orchid(const std::string& args) {
  return run_command(shell_quote(ORCHID_BINARY) + " " + args);
}

// n token ids in [3, vocab) from a 64-bit LCG started at `seed` (a stand-in prompt).
inline std::vector<int32_t> prompt_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(size_t(n), 0);
  uint64_t x = seed;
  for (auto& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = int32_t(3 + (x >> 33) % uint64_t(vocab - 3));
  }
  return ids;
}

}  // namespace orchid::test
