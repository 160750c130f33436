// qwen35moe GGUF metadata → ModelConfig (model/gguf_config.h): the metadata llama.cpp's converter
// writes for a config gives back that config's fields; a wrong architecture, missing or mistyped
// keys and inconsistent values are errors that name the key.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "gguf_fixture.h"
#include "orchid/model/gguf_config.h"

namespace orchid {
namespace {

using gguf_fixture::integer;
using gguf_fixture::real;
using gguf_fixture::text;

// What the converter writes for `c` (with `mtp` MTP layers and padded mrope sections): its
// metadata and the embedding's (and output's) dims.
GgufFile file_for(const ModelConfig& c, int mtp) {
  GgufFile f;
  gguf_fixture::add_metadata(f, c, mtp);
  GgufTensor embd;
  embd.name = "token_embd.weight", embd.dims = {c.n_embd, c.n_vocab};
  f.tensors.push_back(embd);
  if (!c.tie_word_embeddings) {
    GgufTensor out = embd;
    out.name = "output.weight";
    f.tensors.push_back(out);
  }
  return f;
}

TEST(GgufConfig, TheConvertersMetadataGivesBackTheConfig) {
  for (const char* name : {"qwen3.6-35b-a3b", "tiny"}) {
    const ModelConfig want = *builtin_config(name);
    for (int mtp : {0, 1}) {
      auto got = gguf_config(file_for(want, mtp), "m.gguf");
      ASSERT_TRUE(got.ok()) << name << ": " << got.message();
      const ModelConfig& c = *got;
      EXPECT_EQ(c.n_vocab, want.n_vocab);
      EXPECT_EQ(c.n_embd, want.n_embd);
      EXPECT_EQ(c.n_layer, want.n_layer) << "MTP layers " << mtp;
      EXPECT_EQ(c.layer_types, want.layer_types);
      EXPECT_EQ(c.n_head, want.n_head);
      EXPECT_EQ(c.n_head_kv, want.n_head_kv);
      EXPECT_EQ(c.head_dim, want.head_dim);
      EXPECT_EQ(c.n_rot, want.n_rot);
      EXPECT_FLOAT_EQ(float(c.rope_theta), float(want.rope_theta));
      EXPECT_EQ(c.mrope_section, want.mrope_section);
      EXPECT_EQ(c.max_position_embeddings, want.max_position_embeddings);
      EXPECT_EQ(c.lin_n_head_k, want.lin_n_head_k);
      EXPECT_EQ(c.lin_n_head_v, want.lin_n_head_v);
      EXPECT_EQ(c.lin_head_dim_k, want.lin_head_dim_k);
      EXPECT_EQ(c.lin_head_dim_v, want.lin_head_dim_v);
      EXPECT_EQ(c.lin_conv_kernel, want.lin_conv_kernel);
      EXPECT_EQ(c.n_expert, want.n_expert);
      EXPECT_EQ(c.n_expert_used, want.n_expert_used);
      EXPECT_EQ(c.n_ff_exp, want.n_ff_exp);
      EXPECT_EQ(c.n_ff_shexp, want.n_ff_shexp);
      EXPECT_FLOAT_EQ(c.rms_norm_eps, want.rms_norm_eps);
      EXPECT_EQ(c.tie_word_embeddings, want.tie_word_embeddings);
    }
  }
}

TEST(GgufConfig, RecurrentLayerFlagsOverrideTheInterval) {
  const ModelConfig want = *builtin_config("tiny");
  GgufFile f = file_for(want, 0);
  GgufValue flags;
  flags.type = GgufValueType::ARRAY, flags.elem = GgufValueType::BOOL;
  for (int i = 0; i < want.n_layer; ++i) {
    GgufValue b;
    b.type = GgufValueType::BOOL, b.b = i % 2 == 0;
    flags.array.push_back(b);
  }
  f.metadata["qwen35moe.attention.recurrent_layers"] = flags;
  auto c = gguf_config(f, "m.gguf");
  ASSERT_TRUE(c.ok()) << c.message();
  for (int i = 0; i < want.n_layer; ++i)
    EXPECT_EQ(c->layer_types[size_t(i)],
              i % 2 == 0 ? LayerKind::linear_attention : LayerKind::full_attention);
}

TEST(GgufConfig, BadMetadataIsAnErrorNamingTheKey) {
  const ModelConfig base = *builtin_config("tiny");
  struct Case {
    const char* what;
    void (*edit)(GgufFile&);
    const char* says;
  };
  const Case cases[] = {
      {"another architecture", [](GgufFile& f) { f.metadata["general.architecture"] = text("llama"); },
       "llama"},
      {"no architecture", [](GgufFile& f) { f.metadata.erase("general.architecture"); },
       "general.architecture"},
      {"missing head count", [](GgufFile& f) { f.metadata.erase("qwen35moe.attention.head_count"); },
       "attention.head_count"},
      {"a string for an integer",
       [](GgufFile& f) { f.metadata["qwen35moe.expert_count"] = text("256"); }, "expert_count"},
      {"zero experts", [](GgufFile& f) { f.metadata["qwen35moe.expert_count"] = integer(0); },
       "expert_count"},
      {"all layers MTP",
       [](GgufFile& f) { f.metadata["qwen35moe.nextn_predict_layers"] = integer(1000); },
       "nextn_predict_layers"},
      {"value length differs",
       [](GgufFile& f) { f.metadata["qwen35moe.attention.value_length"] = integer(3); },
       "value_length"},
      {"inner size not whole heads",
       [](GgufFile& f) { f.metadata["qwen35moe.ssm.inner_size"] = integer(1001); }, "inner_size"},
      {"odd rotary dims",
       [](GgufFile& f) { f.metadata["qwen35moe.rope.dimension_count"] = integer(7); },
       "dimension_count"},
      {"sections that do not add up",
       [](GgufFile& f) { f.metadata["qwen35moe.rope.dimension_sections"].array[0] = integer(999); },
       "dimension_sections"},
      {"no vocabulary",
       [](GgufFile& f) { f.tensors.clear(); }, "token_embd"},
      {"top-k above the experts",
       [](GgufFile& f) { f.metadata["qwen35moe.expert_used_count"] = integer(1000); },
       "num_experts_per_tok"},
  };
  for (const Case& k : cases) {
    GgufFile f = file_for(base, 0);
    k.edit(f);
    auto c = gguf_config(f, "bad.gguf");
    ASSERT_FALSE(c.ok()) << k.what;
    EXPECT_NE(c.message().find(k.says), std::string::npos) << k.what << ": " << c.message();
    EXPECT_NE(c.message().find("bad.gguf"), std::string::npos) << k.what;
  }
}

}  // namespace
}  // namespace orchid
