// `load_model(FILE.gguf)`: the tiny golden checkpoint written as llama.cpp's converter writes it
// (fp32 tensors, value heads in its order, A as −exp(A_log), one MTP layer declared) loads from
// the file alone and gives, on the CPU backend's exact path, the logits the safetensors
// checkpoint gives (bound 1e-5 relative L2 a position: only A_log goes through exp and log).
// The demo model as one GGUF file (weights, tokenizer, template) answers as its directory does.
// A damaged file is an error naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gguf_fixture.h"
#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/model/gguf_dequant.h"
#include "orchid/model/gguf_split.h"
#include "orchid/model/model.h"
#include "orchid/model/synth.h"
#include "orchid/runtime/chat_assets.h"

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

// The largest ‖got − want‖ / ‖want‖ over the positions (rows of V logits).
double worst_rel_l2(const std::vector<float>& got, const std::vector<float>& want, size_t V) {
  double worst = 0;
  for (size_t p = 0; p < want.size() / V; ++p) {
    double d = 0, n = 0;
    for (size_t v = 0; v < V; ++v) {
      const double a = got[p * V + v], b = want[p * V + v];
      d += (a - b) * (a - b), n += b * b;
    }
    worst = std::max(worst, std::sqrt(d / n));
  }
  return worst;
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
  const double worst = worst_rel_l2(got, want, size_t((*hf)->config.n_vocab));
  std::printf("[ gguf ] tiny: worst rel L2 against the safetensors checkpoint %.2e\n", worst);
  EXPECT_LE(worst, 1e-5);
  std::remove(path.c_str());
}

// Issue 34's bar: a quantized GGUF (Q4_K_M mix, Q8_0, BF16, Q6_K, Q5_K) gives the logits of the
// same file with every tensor dequantized to F32 by the format's reference decoder
// (model/gguf_dequant.h, not the loader's affine re-layout): rel. L2 ≤ 1e-3 a position on the
// CPU's exact path. A model whose matrices fill 256-value blocks (hidden 256), so K-quants run.
TEST(GgufModel, QuantizedFilesGiveTheLogitsOfTheirDequantizedTensors) {
  ModelConfig c = *builtin_config("tiny");
  c.n_embd = 256, c.n_ff_exp = 256, c.n_ff_shexp = 256;
  const std::string dir = ::testing::TempDir() + "orchid-gguf-k256";
  ASSERT_TRUE(synth_checkpoint(c, SynthLayout::hf, dir, 5).ok());
  auto src = load_model(dir);
  ASSERT_TRUE(src.ok()) << src.message();
  std::vector<int32_t> ids;
  for (int i = 0; i < 32; ++i) ids.push_back(int32_t((i * 97 + 13) % c.n_vocab));
  for (const char* type : {"q4_k_m", "q8_0", "bf16", "q6_k", "q5_k"}) {
    SCOPED_TRACE(type);
    GgufExportOptions o;
    const std::string t = type;
    o.types.matrices = uint32_t(t == "q8_0"   ? GgmlType::Q8_0
                                : t == "bf16" ? GgmlType::BF16
                                : t == "q6_k" ? GgmlType::Q6_K
                                : t == "q5_k" ? GgmlType::Q5_K
                                              : GgmlType::Q4_K);
    o.types.q4_k_m = t == "q4_k_m";
    const std::string qpath = ::testing::TempDir() + "k256-" + t + ".gguf";
    ASSERT_TRUE(export_gguf((*src)->config, (*src)->weights, qpath, o).ok());
    auto q = load_model(qpath);
    ASSERT_TRUE(q.ok()) << q.message();
    // The same file, each tensor dequantized by the reference decoder, as F32.
    auto parts = open_gguf(qpath);
    ASSERT_TRUE(parts.ok()) << parts.message();
    std::map<uint32_t, int> kinds;
    std::vector<GgufTensorSource> f32;
    for (const GgufTensor& gt : parts->merged.tensors) {
      ++kinds[gt.type];
      GgufTensorSource ts;
      ts.name = gt.name, ts.dims = gt.dims, ts.type = uint32_t(GgmlType::F32);
      const GgufTensor* g = &gt;
      ts.row = [g](int64_t i, float* out) {
        GgmlBlock b;
        ASSERT_TRUE(ggml_block(g->type, b));
        const uint64_t rb = uint64_t(g->dims[0] / b.elems) * uint64_t(b.bytes);
        ASSERT_TRUE(dequantize_gguf(g->type, g->data.subspan(size_t(uint64_t(i) * rb), size_t(rb)),
                                    g->dims[0], out)
                        .ok());
      };
      f32.push_back(std::move(ts));
    }
    if (t == "q4_k_m") {
      EXPECT_GT(kinds[uint32_t(GgmlType::Q4_K)], 0);
      EXPECT_GT(kinds[uint32_t(GgmlType::Q5_K)], 0);
      EXPECT_GT(kinds[uint32_t(GgmlType::Q6_K)], 0);
    }
    const std::string fpath = ::testing::TempDir() + "k256-" + t + "-f32.gguf";
    ASSERT_TRUE(write_gguf(fpath, parts->merged.metadata, f32).ok());
    auto f = load_model(fpath);
    ASSERT_TRUE(f.ok()) << f.message();
    const std::vector<float> want = logits_of(**f, ids), got = logits_of(**q, ids);
    ASSERT_EQ(got.size(), want.size());
    const double worst = worst_rel_l2(got, want, size_t(c.n_vocab));
    std::printf("[ gguf ] %s: worst rel L2 against its tensors dequantized to F32 %.2e\n", type, worst);
    EXPECT_LE(worst, 1e-3);
    std::remove(qpath.c_str());
    std::remove(fpath.c_str());
  }
}

// The demo model (MLX 4-bit) written as one GGUF file with its tokenizer and chat template: the
// file alone gives the same prompt ids for a chat and the same 24 greedy tokens on the CPU.
TEST(GgufModel, TheDemoModelRunsFromOneFile) {
  const std::string dir = std::string(ORCHID_SOURCE_DIR) + "/models/orchid-demo";
  auto demo = load_model(dir);
  ASSERT_TRUE(demo.ok()) << demo.message();
  auto demo_assets = load_chat_assets(dir);
  ASSERT_TRUE(demo_assets.ok()) << demo_assets.message();
  GgufFile f;
  std::deque<std::vector<uint8_t>> store;
  gguf_fixture::add_metadata(f, (*demo)->config, 0);
  gguf_fixture::add_weights(f, store, (*demo)->config, (*demo)->weights);
  gguf_fixture::add_tokenizer(f, gguf_fixture::read(dir + "/tokenizer.json"), "qwen2");
  f.metadata["tokenizer.chat_template"] = gguf_fixture::text(demo_assets->chat_template.source());
  const std::string path = write_file("demo.gguf", gguf_fixture::file_bytes(f));
  auto g = load_model(path);
  ASSERT_TRUE(g.ok()) << g.message();
  auto assets = load_chat_assets(path);
  ASSERT_TRUE(assets.ok()) << assets.message();
  const nlohmann::ordered_json msgs =
      nlohmann::ordered_json::parse(R"([{"role":"user","content":"What does orchid mean?"}])");
  auto want_prompt = demo_assets->chat_template.render(msgs, nlohmann::ordered_json::array(), {});
  auto got_prompt = assets->chat_template.render(msgs, nlohmann::ordered_json::array(), {});
  ASSERT_TRUE(want_prompt.ok() && got_prompt.ok());
  EXPECT_EQ(*got_prompt, *want_prompt);
  const std::vector<int32_t> ids = demo_assets->tokenizer.encode(*want_prompt);
  EXPECT_EQ(assets->tokenizer.encode(*got_prompt), ids);
  auto greedy = [&](const Model& m) {
    auto backend = make_cpu_backend(m);
    auto st = backend->new_state(512);
    std::vector<int32_t> out;
    std::vector<float> logits;
    std::vector<int32_t> feed = ids;
    for (int i = 0; i < 24 && st.ok(); ++i) {
      if (!backend->forward(**st, feed, LogitsMode::last, logits).ok()) break;
      const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      out.push_back(next);
      feed = {next};
    }
    return out;
  };
  const std::vector<int32_t> want = greedy(**demo);
  ASSERT_EQ(want.size(), 24u);
  EXPECT_EQ(greedy(**g), want);
  std::remove(path.c_str());
}

// The tiny checkpoint split in three as gguf-split writes it (metadata in part 1, split.no /
// split.count / split.tensors.count in each): loaded from part 1, the same logits; part 2 given,
// or part 3 missing, is an error naming the file to give or the one missing.
TEST(GgufModel, ASplitFileLoadsFromItsFirstPart) {
  auto hf = load_model(std::string(ORCHID_SOURCE_DIR) + "/tests/fixtures/golden/tiny/hf");
  ASSERT_TRUE(hf.ok()) << hf.message();
  GgufFile whole;
  std::deque<std::vector<uint8_t>> store;
  gguf_fixture::add_metadata(whole, (*hf)->config, 0);
  gguf_fixture::add_weights(whole, store, (*hf)->config, (*hf)->weights);
  constexpr int kParts = 3;
  const size_t per = (whole.tensors.size() + kParts - 1) / kParts;
  std::vector<std::string> paths;
  for (int i = 0; i < kParts; ++i) {
    GgufFile part;
    if (i == 0) part.metadata = whole.metadata;
    part.metadata["split.no"] = gguf_fixture::integer(i, GgufValueType::U16);
    part.metadata["split.count"] = gguf_fixture::integer(kParts, GgufValueType::U16);
    part.metadata["split.tensors.count"] =
        gguf_fixture::integer(int64_t(whole.tensors.size()), GgufValueType::I32);
    for (size_t t = size_t(i) * per; t < std::min(whole.tensors.size(), size_t(i + 1) * per); ++t)
      part.tensors.push_back(whole.tensors[t]);
    char name[48];
    std::snprintf(name, sizeof name, "tiny-%05d-of-%05d.gguf", i + 1, kParts);
    paths.push_back(write_file(name, gguf_fixture::file_bytes(part)));
  }
  auto g = load_model(paths[0]);
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_EQ((*g)->gguf.size(), size_t(kParts));
  std::vector<int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back(int32_t((i * 97 + 13) % (*hf)->config.n_vocab));
  EXPECT_EQ(logits_of(**g, ids), logits_of(**hf, ids));
  auto second = load_model(paths[1]);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.message().find("tiny-00001-of-00003.gguf"), std::string::npos) << second.message();
  std::remove(paths[2].c_str());
  auto missing = load_model(paths[0]);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("tiny-00003-of-00003.gguf"), std::string::npos) << missing.message();
  for (const std::string& p : paths) std::remove(p.c_str());
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
