// `load_model(FILE.gguf)`: the tiny golden checkpoint written as llama.cpp's converter writes it
// (fp32 tensors, value heads in its order, A as −exp(A_log), one MTP layer declared) loads from
// the file alone and gives, on the CPU backend's exact path, the logits the safetensors
// checkpoint gives (bound 1e-5 relative L2 a position: only A_log goes through exp and log).
// A damaged file is an error naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gguf_fixture.h"
#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/model/model.h"

namespace orchid {
namespace {

std::string write_file(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              std::streamsize(bytes.size()));
  return path;
}

std::vector<float> logits_of(const Model& m, const std::vector<int32_t>& ids) {
  auto backend = make_cpu_backend(m);
  auto st = backend->new_state(256);
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<float> out;
  if (st.ok()) {
    const Status s = backend->forward(**st, ids, LogitsMode::all, out);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  return out;
}

std::vector<uint8_t> tiny_gguf_bytes(const Model& hf) {
  GgufFile f;
  std::deque<std::vector<uint8_t>> store;
  gguf_fixture::add_metadata(f, hf.config, 1);
  gguf_fixture::add_weights(f, store, hf.config, hf.weights);
  return gguf_fixture::file_bytes(f);
}

TEST(GgufModel, AConvertedCheckpointGivesItsLogits) {
  auto hf = load_model(std::string(ORCHID_SOURCE_DIR) + "/tests/fixtures/golden/tiny/hf");
  ASSERT_TRUE(hf.ok()) << hf.message();
  const std::string path = write_file("tiny.gguf", tiny_gguf_bytes(**hf));
  auto g = load_model(path);
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_EQ((*g)->layout_name(), "gguf");
  EXPECT_EQ((*g)->config.n_layer, (*hf)->config.n_layer);
  EXPECT_EQ((*g)->config.n_vocab, (*hf)->config.n_vocab);
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(int32_t((i * 97 + 13) % (*hf)->config.n_vocab));
  const std::vector<float> want = logits_of(**hf, ids), got = logits_of(**g, ids);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(want.empty());
  const size_t V = size_t((*hf)->config.n_vocab);
  double worst = 0;
  for (size_t p = 0; p < ids.size(); ++p) {
    double d = 0, n = 0;
    for (size_t v = 0; v < V; ++v) {
      const double a = got[p * V + v], b = want[p * V + v];
      d += (a - b) * (a - b), n += b * b;
    }
    worst = std::max(worst, std::sqrt(d / n));
  }
  std::printf("[ gguf ] tiny: worst rel L2 against the safetensors checkpoint %.2e\n", worst);
  EXPECT_LE(worst, 1e-5);
  std::remove(path.c_str());
}

TEST(GgufModel, DamagedFilesAreErrorsNamingThem) {
  auto hf = load_model(std::string(ORCHID_SOURCE_DIR) + "/tests/fixtures/golden/tiny/hf");
  ASSERT_TRUE(hf.ok()) << hf.message();
  std::vector<uint8_t> bytes = tiny_gguf_bytes(**hf);
  bytes.resize(bytes.size() / 2);
  const std::string path = write_file("half.gguf", bytes);
  auto g = load_model(path);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("half.gguf"), std::string::npos) << g.message();
  std::remove(path.c_str());
  auto missing = load_model(::testing::TempDir() + "absent.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("absent.gguf"), std::string::npos) << missing.message();
}

}  // namespace
}  // namespace orchid
