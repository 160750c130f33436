// The scripted test backend through the real Engine: request i gets reply i mod n then the
// end-of-sequence id, under greedy decoding and sampling, whatever the prompt ends with, with
// the state cache in use and a snapshot cut.
#include <gtest/gtest.h>

#include <cstdio>

#include "orchid/backend/scripted/scripted_backend.h"
#include "orchid/runtime/engine.h"

namespace orchid {
namespace {

constexpr int32_t kEos = 1;

struct Reply {
  std::vector<int32_t> ids;
  std::string finish;
  int64_t cached = 0;
};

Reply run(Engine& e, std::vector<int32_t> prompt, int max_tokens = 50, SamplerParams sp = {},
          int64_t snapshot_at = 0) {
  GenerateRequest req;
  req.prompt = std::move(prompt);
  req.max_tokens = max_tokens;
  req.sampler = sp;
  req.stop_ids = {kEos};
  req.snapshot_at = snapshot_at;
  Reply out;
  auto r = e.generate(req, [&](const TokenEvent& ev) {
    out.ids.push_back(ev.id);
    return true;
  });
  EXPECT_TRUE(r.ok()) << r.message();
  if (r.ok()) out.finish = r->finish_reason, out.cached = r->cached_tokens;
  return out;
}

class ScriptedBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = make_scripted_backend(64, {{10, 11, 12}, {20}, {}}, kEos);
};

TEST_F(ScriptedBackendTest, RequestIGetsReplyIModN) {
  Engine e(*backend_, 128, 1 << 20);
  const std::vector<int32_t> prompt = {2, 3, 4};
  for (int round = 0; round < 2; ++round) {
    Reply a = run(e, prompt);
    EXPECT_EQ(a.ids, (std::vector<int32_t>{10, 11, 12}));
    EXPECT_EQ(a.finish, "stop");
    Reply b = run(e, prompt);
    EXPECT_EQ(b.ids, (std::vector<int32_t>{20}));
    Reply c = run(e, prompt);  // an empty reply: the end-of-sequence id at once
    EXPECT_TRUE(c.ids.empty());
    EXPECT_EQ(c.finish, "stop");
  }
}

TEST_F(ScriptedBackendTest, APromptEndingLikeTheReplyStillGetsTheWholeReply) {
  Engine e(*backend_, 128, 1 << 20);
  EXPECT_EQ(run(e, {2, 10, 11}).ids, (std::vector<int32_t>{10, 11, 12}));
}

TEST_F(ScriptedBackendTest, SamplingFollowsTheScript) {
  Engine e(*backend_, 128, 1 << 20);
  SamplerParams sp;
  sp.greedy = false;
  sp.temperature = 2.f;
  sp.top_p = 0.99f;
  sp.seed = 7;
  EXPECT_EQ(run(e, {2, 3}, 50, sp).ids, (std::vector<int32_t>{10, 11, 12}));
}

TEST_F(ScriptedBackendTest, MaxTokensCutsTheReply) {
  Engine e(*backend_, 128, 1 << 20);
  Reply r = run(e, {2, 3}, 2);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(r.finish, "length");
}

TEST_F(ScriptedBackendTest, CachedPrefixAndSnapshotCut) {
  Engine e(*backend_, 128, 1 << 20);
  // Turn 1 with a snapshot where its 2-token generation prompt begins.
  Reply a = run(e, {5, 6, 7, 8, 2, 3}, 50, {}, /*snapshot_at=*/4);
  EXPECT_EQ(a.ids, (std::vector<int32_t>{10, 11, 12}));
  // Turn 2 extends turn 1's history: restored from the cache, still its own reply.
  Reply b = run(e, {5, 6, 7, 8, 9, 9, 2, 3});
  EXPECT_EQ(b.cached, 4);
  EXPECT_EQ(b.ids, (std::vector<int32_t>{20}));
}

TEST_F(ScriptedBackendTest, ContextOverflowIsAnError) {
  auto st = backend_->new_state(4);
  ASSERT_TRUE(st.ok());
  std::vector<float> logits;
  const std::vector<int32_t> five = {1, 2, 3, 4, 5};
  EXPECT_FALSE(backend_->forward(**st, five, LogitsMode::last, logits).ok());
  const std::vector<int32_t> bad = {99};
  EXPECT_FALSE(backend_->forward(**st, bad, LogitsMode::last, logits).ok());
}

// A rule's reply goes to any request whose prompt (cached part included) holds its pattern; the
// others get "replies" in turn.
TEST(ScriptedRules, APromptHoldingThePatternGetsTheRulesReply) {
  auto backend = make_scripted_backend(64, {{10, 11}}, kEos, 0, {{{7, 8}, {30, 31}}, {{9}, {40}}});
  Engine e(*backend, 128, 1 << 20);
  EXPECT_EQ(run(e, {2, 3, 4}).ids, (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(run(e, {2, 7, 8, 4}).ids, (std::vector<int32_t>{30, 31}));
  EXPECT_EQ(run(e, {2, 7, 4, 8}).ids, (std::vector<int32_t>{10, 11}));  // not contiguous
  EXPECT_EQ(run(e, {9, 7, 8}).ids, (std::vector<int32_t>{30, 31}));     // the first rule wins
  EXPECT_EQ(run(e, {9, 5}).ids, (std::vector<int32_t>{40}));
  // The pattern in the cached prefix: a follow-up of the last conversation.
  Reply r = run(e, {9, 5, 40, 6, 6});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{40}));
  EXPECT_GT(r.cached, 0);
}

TEST(ScriptFile, Errors) {
  EXPECT_FALSE(load_script_replies("/nonexistent/script.json").ok());
  const std::string path = ::testing::TempDir() + "/orchid_script_rules.json";
  auto load = [&](const char* text) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fputs(text, f);
    std::fclose(f);
    return load_script(path);
  };
  auto ok = load(R"({"replies": ["a"], "rules": [{"contains": "x", "reply": "b"}]})");
  ASSERT_TRUE(ok.ok()) << ok.message();
  ASSERT_EQ(ok->rules.size(), 1u);
  EXPECT_EQ(ok->rules[0].contains, "x");
  EXPECT_EQ(ok->rules[0].reply, "b");
  for (const char* bad : {R"({"replies": ["a"], "rules": {}})", R"({"replies": ["a"], "rules": [{"reply": "b"}]})",
                          R"({"replies": ["a"], "rules": [{"contains": "", "reply": "b"}]})",
                          R"({"replies": ["a"], "rules": [{"contains": "x", "reply": 3}]})"}) {
    auto r = load(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.message().find("rule"), std::string::npos) << r.message();
    }
  }
}

}  // namespace
}  // namespace orchid
