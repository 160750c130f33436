// Tests for config.json parsing: both fixture configs (nested `qwen3_5_moe` and flat
// `qwen3_5_moe_text`) give every dimension, layer_types defaults, rope fields at either level,
// MLX quantization with per-path overrides, one test per unsupported / malformed value
// (asserting the message names the file and the field), and config_to_json round trips.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../test_util.h"
#include "orchid/model/config.h"

namespace orchid {
namespace {

using json = nlohmann::json;
using test::contains;
using test::golden;
using test::read_text;

constexpr const char* kFile = "some/dir/config.json";

const LayerKind L = LayerKind::linear_attention;
const LayerKind F = LayerKind::full_attention;

json fixture_json(const std::string& rel) {
  return json::parse(read_text(golden(rel + "/config.json")));
}
// tiny/hf: nested qwen3_5_moe with text_config; odd/hf: flat qwen3_5_moe_text.
json nested() {
  return fixture_json("tiny/hf");
}
json flat() {
  return fixture_json("odd/hf");
}

Expected<ModelConfig> parse(const json& j) {
  return parse_config(j.dump(), kFile);
}

// Parses `j`, expecting an error whose message names the file and contains every piece.
void expect_error(const json& j, std::initializer_list<std::string> pieces) {
  auto c = parse(j);
  ASSERT_FALSE(c.ok()) << "expected an error for: " << j.dump();
  EXPECT_TRUE(contains(c.message(), kFile));
  for (const auto& p : pieces) EXPECT_TRUE(contains(c.message(), p));
}

// ---- The fixture configs ----

TEST(Config, TinyNestedFixtureHasEveryDimension) {
  auto c = load_config(golden("tiny/hf"));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->model_type, "qwen3_5_moe");
  EXPECT_TRUE(c->nested);
  EXPECT_EQ(c->n_embd, 64);
  EXPECT_EQ(c->n_layer, 4);
  EXPECT_EQ(c->layer_types, (std::vector<LayerKind>{L, L, L, F}));
  EXPECT_EQ(c->n_full_layers(), 1);
  EXPECT_EQ(c->n_head, 8);
  EXPECT_EQ(c->n_head_kv, 1);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->n_rot, 8);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e7);
  EXPECT_EQ(c->mrope_section, (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(c->max_position_embeddings, 4096);
  EXPECT_EQ(c->lin_n_head_k, 2);
  EXPECT_EQ(c->lin_n_head_v, 4);
  EXPECT_EQ(c->lin_head_dim_k, 32);
  EXPECT_EQ(c->lin_head_dim_v, 32);
  EXPECT_EQ(c->lin_conv_kernel, 4);
  EXPECT_EQ(c->lin_key_dim(), 64);
  EXPECT_EQ(c->lin_value_dim(), 128);
  EXPECT_EQ(c->lin_conv_dim(), 256);
  EXPECT_EQ(c->n_expert, 8);
  EXPECT_EQ(c->n_expert_used, 2);
  EXPECT_EQ(c->n_ff_exp, 64);
  EXPECT_EQ(c->n_ff_shexp, 64);
  EXPECT_EQ(c->n_vocab, 512);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-6f);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->quant.has_value());
  EXPECT_FALSE(c->quant_for("language_model.model.layers.0.mlp.gate").has_value());
}

TEST(Config, OddFlatFixtureHasEveryDimension) {
  auto c = load_config(golden("odd/hf"));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->model_type, "qwen3_5_moe_text");
  EXPECT_FALSE(c->nested);
  EXPECT_EQ(c->n_embd, 128);
  EXPECT_EQ(c->n_layer, 5);
  EXPECT_EQ(c->layer_types, (std::vector<LayerKind>{L, F, L, L, F}));
  EXPECT_EQ(c->n_full_layers(), 2);
  EXPECT_EQ(c->n_head, 6);
  EXPECT_EQ(c->n_head_kv, 2);
  EXPECT_EQ(c->head_dim, 48);
  EXPECT_EQ(c->n_rot, 24);  // partial_rotary_factor 0.5
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->mrope_section, (std::vector<int>{4, 4, 4}));
  EXPECT_EQ(c->lin_n_head_k, 3);
  EXPECT_EQ(c->lin_n_head_v, 6);
  EXPECT_EQ(c->lin_head_dim_k, 32);
  EXPECT_EQ(c->lin_head_dim_v, 48);
  EXPECT_EQ(c->lin_conv_dim(), 2 * 3 * 32 + 6 * 48);
  EXPECT_EQ(c->n_expert, 5);
  EXPECT_EQ(c->n_expert_used, 3);
  EXPECT_EQ(c->n_ff_exp, 96);
  EXPECT_EQ(c->n_ff_shexp, 64);
  EXPECT_EQ(c->n_vocab, 1003);
  EXPECT_FALSE(c->quant.has_value());
}

TEST(Config, Mlx4FixturesHaveDefaultQuantAndPerPathOverrides) {
  for (const char* name : {"tiny/mlx4", "odd/mlx4"}) {
    SCOPED_TRACE(name);
    auto c = load_config(golden(name));
    ASSERT_TRUE(c.ok()) << c.message();
    ASSERT_TRUE(c->quant.has_value());
    EXPECT_EQ(c->quant->bits, 4);
    EXPECT_EQ(c->quant->group_size, 64);
    EXPECT_EQ(c->quant_overrides.size(), size_t(2 * c->n_layer));
    for (int i = 0; i < c->n_layer; ++i) {
      const std::string p = "language_model.model.layers." + std::to_string(i) + ".mlp.";
      auto router = c->quant_for(p + "gate");
      ASSERT_TRUE(router.has_value());
      EXPECT_EQ(router->bits, 8);
      EXPECT_EQ(router->group_size, 64);
      EXPECT_EQ(c->quant_for(p + "shared_expert_gate")->bits, 8);
      EXPECT_EQ(c->quant_for(p + "switch_mlp.gate_proj")->bits, 4);
      EXPECT_EQ(c->quant_for(p + "shared_expert.down_proj")->bits, 4);
    }
    EXPECT_EQ(c->quant_for("language_model.model.embed_tokens")->bits, 4);
  }
  // Same dimensions as the hf twin.
  auto a = load_config(golden("odd/hf")), b = load_config(golden("odd/mlx4"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->n_vocab, b->n_vocab);
  EXPECT_EQ(a->layer_types, b->layer_types);
  EXPECT_EQ(a->n_rot, b->n_rot);
}

TEST(Config, LoadConfigOfMissingDirectoryNamesTheFile) {
  auto c = load_config("/nonexistent/orchid-model");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(contains(c.message(), "/nonexistent/orchid-model/config.json"));
}

// ---- Defaults and alternative spellings ----

TEST(Config, LayerTypesDerivedFromFullAttentionIntervalWhenAbsent) {
  json j = flat();
  j.erase("layer_types");
  j["num_hidden_layers"] = 6;
  j["full_attention_interval"] = 3;
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->layer_types, (std::vector<LayerKind>{L, L, F, L, L, F}));

  // No interval either: the family default of 4.
  j.erase("full_attention_interval");
  j["num_hidden_layers"] = 8;
  c = parse(j);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->layer_types, (std::vector<LayerKind>{L, L, L, F, L, L, L, F}));

  // Nested form too.
  json n = nested();
  n["text_config"].erase("layer_types");
  n["text_config"]["full_attention_interval"] = 2;
  c = parse(n);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->layer_types, (std::vector<LayerKind>{L, F, L, F}));
}

TEST(Config, InvalidFullAttentionIntervalIsAnError) {
  json j = flat();
  j.erase("layer_types");
  j["full_attention_interval"] = 0;
  expect_error(j, {"full_attention_interval"});
}

TEST(Config, RopeFieldsAtTopLevel) {
  json j = flat();
  j.erase("rope_parameters");
  j["rope_theta"] = 500000;
  j["partial_rotary_factor"] = 0.25;
  j["mrope_section"] = {2, 2, 2};
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_DOUBLE_EQ(c->rope_theta, 5e5);
  EXPECT_EQ(c->n_rot, 12);
  EXPECT_EQ(c->mrope_section, (std::vector<int>{2, 2, 2}));
}

TEST(Config, RopeParametersTakePrecedenceOverTopLevel) {
  json j = flat();
  j["rope_theta"] = 123;
  j["partial_rotary_factor"] = 1.0;
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->n_rot, 24);
}

TEST(Config, RopeDefaultsWithNoRopeFields) {
  json j = flat();
  j.erase("rope_parameters");
  j.erase("partial_rotary_factor");
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->n_rot, c->head_dim);
  EXPECT_TRUE(c->mrope_section.empty());
}

TEST(Config, OlderRopeScalingSpelling) {
  json j = flat();
  j.erase("rope_parameters");
  j["rope_theta"] = 1000000;
  j["rope_scaling"] = {{"type", "mrope"}, {"mrope_section", {4, 4, 4}}};
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->mrope_section, (std::vector<int>{4, 4, 4}));
  EXPECT_EQ(c->n_rot, 24);
}

TEST(Config, HeadDimDefaultsToHiddenOverHeads) {
  json j = flat();
  j.erase("head_dim");
  j["rope_parameters"].erase("mrope_section");
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->head_dim, 128 / 6);
}

TEST(Config, TieWordEmbeddingsTopLevelOverridesTextConfig) {
  json j = nested();
  j["text_config"]["tie_word_embeddings"] = true;
  j.erase("tie_word_embeddings");
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_TRUE(c->tie_word_embeddings);
  j["tie_word_embeddings"] = false;
  c = parse(j);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_FALSE(c->tie_word_embeddings);
}

TEST(Config, QuantizationDefaultAndOverrides) {
  json j = nested();
  j["quantization"] = {
      {"group_size", 32},
      {"bits", 4},
      {"mode", "affine"},
      {"language_model.model.layers.1.mlp.gate", {{"bits", 8}, {"group_size", 64}}},
      {"language_model.model.layers.2.mlp.gate", {{"bits", 4}, {"group_size", 128}}}};
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.message();
  ASSERT_TRUE(c->quant.has_value());
  EXPECT_EQ(c->quant->bits, 4);
  EXPECT_EQ(c->quant->group_size, 32);
  EXPECT_EQ(c->quant_overrides.size(), 2u);
  auto a = c->quant_for("language_model.model.layers.1.mlp.gate");
  EXPECT_EQ(a->bits, 8);
  EXPECT_EQ(a->group_size, 64);
  auto b = c->quant_for("language_model.model.layers.2.mlp.gate");
  EXPECT_EQ(b->bits, 4);
  EXPECT_EQ(b->group_size, 128);
  auto d = c->quant_for("language_model.model.layers.3.mlp.gate");
  EXPECT_EQ(d->bits, 4);
  EXPECT_EQ(d->group_size, 32);
  // quantization_config alone is read too.
  json k = nested();
  k["quantization_config"] = {{"group_size", 64}, {"bits", 8}};
  c = parse(k);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->quant->bits, 8);
}

// ---- Errors: each names the file and the field ----

TEST(ConfigErrors, MalformedJson) {
  auto c = parse_config("{\"model_type\": \"qwen3_5_moe\",", kFile);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(contains(c.message(), kFile));
  EXPECT_TRUE(contains(c.message(), "not valid JSON"));
  EXPECT_FALSE(parse_config("", kFile).ok());
  EXPECT_FALSE(parse_config("\xff\xfe", kFile).ok());
}

TEST(ConfigErrors, TopLevelNotAnObject) {
  for (const char* text : {"[1, 2]", "42", "\"qwen3_5_moe\"", "null"}) {
    auto c = parse_config(text, kFile);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_TRUE(contains(c.message(), kFile));
    EXPECT_TRUE(contains(c.message(), "object"));
  }
}

TEST(ConfigErrors, WrongModelType) {
  json j = flat();
  j["model_type"] = "qwen3_moe";
  expect_error(j, {"model_type", "qwen3_moe", "qwen3_5_moe"});
  j.erase("model_type");
  expect_error(j, {"model_type"});
  j["model_type"] = 35;
  expect_error(j, {"model_type"});
}

TEST(ConfigErrors, NestedWithoutTextConfig) {
  json j = nested();
  j.erase("text_config");
  expect_error(j, {"text_config"});
  j["text_config"] = "not an object";
  expect_error(j, {"text_config"});
}

TEST(ConfigErrors, MissingRequiredFields) {
  for (const char* key :
       {"hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "linear_num_key_heads", "linear_num_value_heads",
        "linear_key_head_dim", "linear_value_head_dim", "num_experts", "num_experts_per_tok",
        "moe_intermediate_size", "shared_expert_intermediate_size"}) {
    SCOPED_TRACE(key);
    json j = flat();
    j.erase(key);
    expect_error(j, {"missing required field", key});
    json n = nested();
    n["text_config"].erase(key);
    expect_error(n, {key});
  }
}

TEST(ConfigErrors, NonIntegerField) {
  json j = flat();
  j["num_attention_heads"] = "6";
  expect_error(j, {"num_attention_heads", "integer", "\"6\""});
  j = flat();
  j["hidden_size"] = 128.5;
  expect_error(j, {"hidden_size", "integer"});
  j = flat();
  j["num_experts"] = json::array({5});
  expect_error(j, {"num_experts", "integer"});
  j = flat();
  j["rope_parameters"]["rope_theta"] = "big";
  expect_error(j, {"rope_theta", "number"});
  j = flat();
  j["attention_bias"] = "no";
  expect_error(j, {"attention_bias", "true or false"});
}

TEST(ConfigErrors, NegativeOrZeroDims) {
  for (const char* key : {"hidden_size", "num_key_value_heads", "moe_intermediate_size",
                          "linear_value_head_dim", "vocab_size", "head_dim"}) {
    SCOPED_TRACE(key);
    json j = flat();
    j[key] = -64;
    expect_error(j, {key, "positive", "-64"});
    j[key] = 0;
    expect_error(j, {key, "positive"});
  }
}

TEST(ConfigErrors, DimTooLargeForInt) {
  // 2^31 does not fit the int fields; it must not wrap to a negative dimension.
  json j = flat();
  j["hidden_size"] = int64_t(1) << 31;
  expect_error(j, {"hidden_size"});
  j = flat();
  j["num_experts"] = int64_t(1) << 40;
  expect_error(j, {"num_experts"});
}

TEST(ConfigErrors, HeadsNotDivisibleByKvHeads) {
  json j = flat();
  j["num_key_value_heads"] = 4;  // 6 % 4 != 0
  expect_error(j, {"num_attention_heads", "num_key_value_heads"});
  j = flat();
  j["linear_num_value_heads"] = 4;  // 4 % 3 != 0
  expect_error(j, {"linear_num_value_heads", "linear_num_key_heads"});
}

TEST(ConfigErrors, MoreExpertsPerTokenThanExperts) {
  json j = flat();
  j["num_experts_per_tok"] = 6;
  expect_error(j, {"num_experts_per_tok", "num_experts"});
}

TEST(ConfigErrors, UnsupportedConvKernel) {
  json j = flat();
  j["linear_conv_kernel_dim"] = 99;
  expect_error(j, {"linear_conv_kernel_dim"});
}

TEST(ConfigErrors, UnknownLayerType) {
  json j = flat();
  j["layer_types"][2] = "sliding_attention";
  expect_error(j, {"layer_types", "sliding_attention"});
  j["layer_types"][2] = 7;
  expect_error(j, {"layer_types"});
}

TEST(ConfigErrors, LayerTypesWrongLength) {
  json j = flat();
  j["layer_types"].erase(j["layer_types"].size() - 1);
  expect_error(j, {"layer_types", "num_hidden_layers", "5"});
  j["layer_types"] = "linear_attention";
  expect_error(j, {"layer_types"});
}

TEST(ConfigErrors, HiddenActGelu) {
  json j = flat();
  j["hidden_act"] = "gelu";
  expect_error(j, {"hidden_act", "gelu", "silu"});
}

TEST(ConfigErrors, AttentionBiasTrue) {
  json j = nested();
  j["text_config"]["attention_bias"] = true;
  expect_error(j, {"attention_bias"});
}

TEST(ConfigErrors, RopeTypeYarn) {
  json j = flat();
  j["rope_parameters"]["rope_type"] = "yarn";
  j["rope_parameters"]["factor"] = 4.0;
  expect_error(j, {"rope_type", "yarn"});
  // Top-level spelling too.
  j = flat();
  j.erase("rope_parameters");
  j["rope_type"] = "yarn";
  expect_error(j, {"rope_type", "yarn"});
}

TEST(ConfigErrors, BadRotaryValues) {
  json j = flat();
  j["rope_parameters"]["partial_rotary_factor"] = 1.5;
  expect_error(j, {"partial_rotary_factor"});
  j = flat();
  j["rope_parameters"]["rope_theta"] = -1;
  expect_error(j, {"rope_theta"});
  j = flat();
  j["rope_parameters"]["mrope_section"] = {4, 4, 5};  // sums to 13, rotary/2 = 12
  expect_error(j, {"mrope_section"});
  j = flat();
  j["rope_parameters"] = "default";
  expect_error(j, {"rope_parameters"});
}

TEST(ConfigErrors, RmsNormEpsOutOfRange) {
  json j = flat();
  j["rms_norm_eps"] = 0;
  expect_error(j, {"rms_norm_eps"});
}

TEST(ConfigErrors, QuantizationBits3) {
  json j = nested();
  j["quantization"] = {{"group_size", 64}, {"bits", 3}};
  expect_error(j, {"quantization", "bits 3", "4 or 8"});
  // In a per-path override the message names the path.
  j["quantization"] = {
      {"group_size", 64}, {"bits", 4}, {"language_model.model.layers.0.mlp.gate", {{"bits", 3}}}};
  expect_error(j, {"bits 3", "language_model.model.layers.0.mlp.gate"});
}

TEST(ConfigErrors, QuantizationModeMxfp4) {
  json j = nested();
  j["quantization"] = {{"group_size", 32}, {"bits", 4}, {"mode", "mxfp4"}};
  expect_error(j, {"mode", "mxfp4", "affine"});
}

TEST(ConfigErrors, QuantizationGroupSizeAndShape) {
  json j = nested();
  j["quantization"] = {{"group_size", 48}, {"bits", 4}};
  expect_error(j, {"group_size", "48"});
  j["quantization"] = {{"group_size", "64"}, {"bits", 4}};
  expect_error(j, {"group_size"});
  j["quantization"] = 4;
  expect_error(j, {"quantization"});
}

TEST(ConfigErrors, NonMlxQuantizationMethod) {
  // An HF quantization_config (GPTQ, AWQ, ...) is not MLX affine: it must not be read as
  // MLX 4-bit just because it has "bits" / "group_size" keys (or none). (FP8: tests/model/test_fp8.cpp.)
  json j = nested();
  j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}};
  expect_error(j, {"quant_method", "gptq"});
  j["quantization_config"] = {{"quant_method", "awq"}};
  expect_error(j, {"quant_method", "awq"});
}

// ---- Round trip ----

void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.nested, b.nested);
  EXPECT_EQ(a.n_vocab, b.n_vocab);
  EXPECT_EQ(a.n_embd, b.n_embd);
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.layer_types, b.layer_types);
  EXPECT_EQ(a.n_head, b.n_head);
  EXPECT_EQ(a.n_head_kv, b.n_head_kv);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.n_rot, b.n_rot);
  EXPECT_DOUBLE_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.mrope_section, b.mrope_section);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.lin_n_head_k, b.lin_n_head_k);
  EXPECT_EQ(a.lin_n_head_v, b.lin_n_head_v);
  EXPECT_EQ(a.lin_head_dim_k, b.lin_head_dim_k);
  EXPECT_EQ(a.lin_head_dim_v, b.lin_head_dim_v);
  EXPECT_EQ(a.lin_conv_kernel, b.lin_conv_kernel);
  EXPECT_EQ(a.n_expert, b.n_expert);
  EXPECT_EQ(a.n_expert_used, b.n_expert_used);
  EXPECT_EQ(a.n_ff_exp, b.n_ff_exp);
  EXPECT_EQ(a.n_ff_shexp, b.n_ff_shexp);
  EXPECT_FLOAT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  ASSERT_EQ(a.quant.has_value(), b.quant.has_value());
  if (a.quant) {
    EXPECT_EQ(a.quant->bits, b.quant->bits);
    EXPECT_EQ(a.quant->group_size, b.quant->group_size);
  }
  ASSERT_EQ(a.quant_overrides.size(), b.quant_overrides.size());
  for (const auto& [path, spec] : a.quant_overrides) {
    auto it = b.quant_overrides.find(path);
    ASSERT_NE(it, b.quant_overrides.end()) << path;
    EXPECT_EQ(spec.bits, it->second.bits) << path;
    EXPECT_EQ(spec.group_size, it->second.group_size) << path;
  }
}

TEST(ConfigRoundTrip, BuiltinTiny) {
  auto tiny = builtin_config("tiny");
  ASSERT_TRUE(tiny.has_value());
  auto c = parse_config(config_to_json(*tiny), "tiny.json");
  ASSERT_TRUE(c.ok()) << c.message();
  expect_same(*tiny, *c);
  // Same dims as the golden tiny fixture.
  auto fx = load_config(golden("tiny/hf"));
  ASSERT_TRUE(fx.ok()) << fx.message();
  expect_same(*fx, *c);
}

TEST(ConfigRoundTrip, BuiltinTinyWithQuantizationAndTiedEmbeddings) {
  ModelConfig t = *builtin_config("tiny");
  t.tie_word_embeddings = true;
  t.quant = QuantSpec{4, 64};
  t.quant_overrides["language_model.model.layers.0.mlp.gate"] = QuantSpec{8, 64};
  t.quant_overrides["language_model.model.layers.1.mlp.shared_expert_gate"] = QuantSpec{8, 32};
  auto c = parse_config(config_to_json(t), "tiny.json");
  ASSERT_TRUE(c.ok()) << c.message();
  expect_same(t, *c);
}

TEST(ConfigRoundTrip, BuiltinFullSizeAndFixtures) {
  auto big = builtin_config("qwen3.6-35b-a3b");
  ASSERT_TRUE(big.has_value());
  auto c = parse_config(config_to_json(*big), "big.json");
  ASSERT_TRUE(c.ok()) << c.message();
  expect_same(*big, *c);
  EXPECT_FALSE(builtin_config("no-such-config").has_value());

  // A parsed fixture written back out (nested form) parses to the same config, less the flag.
  auto odd = load_config(golden("odd/mlx4"));
  ASSERT_TRUE(odd.ok()) << odd.message();
  auto again = parse_config(config_to_json(*odd), "odd.json");
  ASSERT_TRUE(again.ok()) << again.message();
  ModelConfig want = *odd;
  want.model_type = "qwen3_5_moe";
  want.nested = true;
  expect_same(want, *again);
}

}  // namespace
}  // namespace orchid
