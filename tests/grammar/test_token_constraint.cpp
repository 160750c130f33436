// Token masks: the sorted-vocabulary walk gives the same set as advancing every token alone;
// the constraint engages after its marker, admits stop ids only where the grammar may end,
// and an engine run under it (CPU backend, random weights, temperature 1) always yields text
// the grammar accepts. Forced tool calls come out in the form the output parser reads.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "../tiny_cpu_model.h"
#include "orchid/grammar/grammar_constraint.h"
#include "orchid/grammar/json_schema.h"
#include "orchid/grammar/tool_call_grammar.h"
#include "orchid/grammar/token_vocab.h"
#include "orchid/model/model.h"
#include "orchid/runtime/engine.h"
#include "orchid/tokenizer/output_parser.h"
#include "orchid/tokenizer/tokenizer.h"

namespace orchid::grammar {
namespace {

using json = nlohmann::ordered_json;

const Tokenizer& demo_tokenizer() {
  static const Tokenizer tok = [] {
    auto t = Tokenizer::load(std::string(ORCHID_SOURCE_DIR) + "/models/orchid-demo/tokenizer.json");
    if (!t) throw std::runtime_error(t.message());
    return std::move(*t);
  }();
  return tok;
}

constexpr int64_t kMany = 1 << 20;  // a token budget that never binds

bool bit(const std::vector<uint32_t>& bits, int32_t id) {
  return bits[size_t(id) >> 5] >> (id & 31) & 1;
}

// Fresh random states of the JSON object automaton: the mask equals the token-by-token check.
TEST(TokenVocab, MaskEqualsTokenByTokenCheck) {
  const Tokenizer& tok = demo_tokenizer();
  const TokenVocab vocab(tok, tok.vocab_size());
  Matcher m(std::make_shared<const Grammar>(json_object_grammar()));
  std::mt19937 rng(std::random_device{}());
  std::vector<uint32_t> bits;
  int checked = 0;
  for (int walk = 0; walk < 40; ++walk) {
    int32_t s = m.start();
    for (int step = 0; step < 12 && s != Matcher::kDead; ++step) {
      vocab.allowed(m, s, bits);
      std::vector<int32_t> ok;
      for (int32_t id = 0; id < tok.vocab_size(); ++id) {
        const auto b = tok.token_bytes(id);
        const bool expect = b && !b->empty() && !tok.is_special(id) && m.advance(s, *b) != Matcher::kDead;
        ASSERT_EQ(bit(bits, id), expect) << "token " << id << " state " << s;
        if (expect) ok.push_back(id);
      }
      ++checked;
      if (ok.empty()) break;
      s = m.advance(s, *tok.token_bytes(ok[rng() % ok.size()]));
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(GrammarConstraint, EngagesAfterItsMarkerAndEndsOnlyWhereTheGrammarMay) {
  const Tokenizer& tok = demo_tokenizer();
  const TokenVocab vocab(tok, tok.vocab_size());
  const int32_t stop = *tok.token_id("<|im_end|>");
  auto g = std::make_shared<const Grammar>(*json_schema_grammar(json::parse(R"({"enum":[true]})")));
  GrammarConstraint c(tok, vocab, g, {stop}, "</think>");
  EXPECT_EQ(c.allowed(kMany), nullptr);  // reasoning: anything goes
  for (int32_t id : tok.encode("let me think")) EXPECT_TRUE(c.accept(id));
  EXPECT_EQ(c.allowed(kMany), nullptr);
  EXPECT_TRUE(c.accept(*tok.token_id("</think>")));
  const std::vector<uint32_t>* a = c.allowed(kMany);
  ASSERT_NE(a, nullptr);
  EXPECT_FALSE(bit(*a, stop));  // nothing written yet
  for (int32_t id : tok.encode("\n\ntrue")) {
    ASSERT_TRUE(bit(*c.allowed(kMany), id)) << id;
    EXPECT_TRUE(c.accept(id));
  }
  EXPECT_TRUE(c.complete());
  EXPECT_TRUE(bit(*c.allowed(kMany), stop));
  EXPECT_FALSE(bit(*c.allowed(kMany), tok.encode("x")[0]));
  EXPECT_FALSE(c.accept(tok.encode("x")[0]));
}

// The tiny model's 512 ids read as the demo tokenizer's first 512 (its bytes and first merges,
// enough to write any JSON).
class ConstrainedEngine : public TinyCpuModel {
 protected:
  void SetUp() override {
    TinyCpuModel::SetUp();
    vocab_ = std::make_unique<TokenVocab>(demo_tokenizer(), backend_->n_vocab());
  }

  // Generates under `g` at temperature 1. The tiny vocabulary has no chat tokens, so an
  // ordinary id stands for the stop id: the constraint allows it only where the grammar ends.
  std::string generate(std::shared_ptr<const Grammar> g, uint64_t seed, std::string* finish,
                       int max_tokens = 1500) {
    Engine engine(*backend_, 2048, 0);
    GenerateRequest req;
    req.prompt = {1, 2, 3, 4, 5};
    req.max_tokens = max_tokens;
    req.sampler.greedy = false;
    req.sampler.temperature = 1.f;
    req.sampler.seed = seed;
    req.stop_ids = {kStop};
    req.constraint = std::make_shared<GrammarConstraint>(demo_tokenizer(), *vocab_, g, req.stop_ids, "");
    std::string text;
    auto r = engine.generate(req, [&](const TokenEvent& ev) {
      text += *demo_tokenizer().token_bytes(ev.id);
      return true;
    });
    EXPECT_TRUE(r.ok()) << r.message();
    if (r) *finish = r->finish_reason;
    return text;
  }

  static constexpr int32_t kStop = 511;
  std::unique_ptr<TokenVocab> vocab_;
};

TEST_F(ConstrainedEngine, SampledAnswersAlwaysMatchTheSchema) {
  const json schema = json::parse(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":12},"n":{"type":"integer","minimum":0,"maximum":99},
      "flags":{"type":"array","items":{"type":"boolean"},"maxItems":4}},
    "required":["name","n","flags"]})");
  auto g = std::make_shared<const Grammar>(*json_schema_grammar(schema));
  Matcher check(g);
  std::mt19937_64 rng(std::random_device{}());
  for (int run = 0; run < 8; ++run) {
    std::string finish;
    const std::string text = generate(g, rng(), &finish);
    EXPECT_EQ(finish, "stop") << text;
    const int32_t s = check.advance(check.start(), text);
    ASSERT_NE(s, Matcher::kDead) << text;
    EXPECT_TRUE(check.accepting(s)) << text;
    const json v = json::parse(text);
    EXPECT_TRUE(v["name"].is_string() && v["n"].is_number_integer() && v["flags"].is_array()) << text;
  }
}

// A budget far below what free sampling would write (unbounded strings and arrays at
// temperature 1 over random weights): every answer still completes within max_tokens.
TEST_F(ConstrainedEngine, AnswersCompleteWithinTheTokenBudget) {
  const json schema = json::parse(R"({"type":"object","properties":{
      "a":{"type":"string"},"b":{"type":"array","items":{"type":"string"}},
      "c":{"type":"object","properties":{"d":{"type":"number"}},"required":["d"]}},
    "required":["a","b","c"]})");
  auto g = std::make_shared<const Grammar>(*json_schema_grammar(schema));
  Matcher check(g);
  std::mt19937_64 rng(std::random_device{}());
  for (int max_tokens : {30, 45, 80}) {
    for (int run = 0; run < 4; ++run) {
      std::string finish;
      const std::string text = generate(g, rng(), &finish, max_tokens);
      const int32_t s = check.advance(check.start(), text);
      ASSERT_NE(s, Matcher::kDead) << text;
      EXPECT_TRUE(check.accepting(s)) << max_tokens << " tokens: " << text;
      EXPECT_TRUE(json::accept(text)) << text;
    }
  }
}

TEST(ToolCallGrammar, ForcedCallsParseAsCallsWithTypedArguments) {
  const json tools = json::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7},
                    "unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}},
    {"type":"function","function":{"name":"ping"}}])");
  auto g = tool_call_grammar(tools, "", /*parallel=*/true);
  ASSERT_TRUE(g.ok()) << g.message();
  Matcher m(std::make_shared<const Grammar>(std::move(*g)));
  const std::string call =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
  const auto matches = [&](const std::string& t) {
    const int32_t s = m.advance(m.start(), t);
    return s != Matcher::kDead && m.accepting(s);
  };
  EXPECT_TRUE(matches(call));
  EXPECT_TRUE(matches(call + "\n<tool_call>\n<function=ping>\n</function>\n</tool_call>"));
  EXPECT_FALSE(matches("Sure! " + call));
  EXPECT_FALSE(matches("<tool_call>\n<function=get_weather>\n</function>\n</tool_call>"));  // city
  EXPECT_FALSE(matches("<tool_call>\n<function=nope>\n</function>\n</tool_call>"));
  EXPECT_FALSE(matches("<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n"
                       "<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>"));
  // What the grammar writes, the parser reads as a call with typed arguments.
  OutputParserOptions po;
  po.thinking = false;
  po.tools = nlohmann::json::parse(tools.dump());
  OutputParser parser(po);
  ParserDelta d = parser.push(call);
  ParserDelta f = parser.finish();
  d.tool_calls.insert(d.tool_calls.end(), f.tool_calls.begin(), f.tool_calls.end());
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(d.tool_calls[0].arguments), json::parse(R"({"city":"New York","days":3})"));

  // A named function, one call only.
  auto only = tool_call_grammar(tools, "ping", /*parallel=*/false);
  ASSERT_TRUE(only.ok());
  Matcher one(std::make_shared<const Grammar>(std::move(*only)));
  const std::string ping = "<tool_call>\n<function=ping>\n</function>\n</tool_call>";
  EXPECT_TRUE(one.accepting(one.advance(one.start(), ping)));
  EXPECT_EQ(one.advance(one.start(), ping + "\n<tool_call>"), Matcher::kDead);
  EXPECT_EQ(one.advance(one.start(), call), Matcher::kDead);
  EXPECT_FALSE(tool_call_grammar(tools, "nope", true).ok());
}

// "properties": {} declares a tool without parameters: its call is empty (a sampled demo model
// once wrote 3,000 tokens of invented parameter names there). No "properties" key, or an
// additionalProperties that allows them, still takes any names.
TEST(ToolCallGrammar, EmptyPropertiesTakeNoParameters) {
  const std::string empty = "<tool_call>\n<function=f>\n</function>\n</tool_call>";
  const std::string named =
      "<tool_call>\n<function=f>\n<parameter=x>\nhello\n</parameter>\n</function>\n</tool_call>";
  const auto accepts = [](const char* params, const std::string& text) {
    const json tools = json::array(
        {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::parse(params)}}}}});
    auto g = tool_call_grammar(tools, "", false);
    EXPECT_TRUE(g.ok()) << g.message();
    Matcher m(std::make_shared<const Grammar>(std::move(*g)));
    const int32_t s = m.advance(m.start(), text);
    return s != Matcher::kDead && m.accepting(s);
  };
  for (const char* none : {R"({"type":"object","properties":{}})",
                           R"({"type":"object","properties":{},"additionalProperties":false})"}) {
    EXPECT_TRUE(accepts(none, empty)) << none;
    EXPECT_FALSE(accepts(none, named)) << none;
  }
  for (const char* any : {R"({"type":"object"})",
                          R"({"type":"object","properties":{},"additionalProperties":true})"}) {
    EXPECT_TRUE(accepts(any, empty)) << any;
    EXPECT_TRUE(accepts(any, named)) << any;
  }
}

}  // namespace
}  // namespace orchid::grammar
