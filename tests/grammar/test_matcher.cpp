// Matcher: the automaton accepts exactly the grammar's strings (literals, alternatives,
// repetition bounds, recursion), keeps loops in one state, and bounds recursion depth.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>

#include "orchid/grammar/grammar.h"
#include "orchid/grammar/matcher.h"

namespace orchid::grammar {
namespace {

// Whether the whole of `text` is a string of the grammar.
bool matches(Matcher& m, std::string_view text) {
  const int32_t s = m.advance(m.start(), text);
  return s != Matcher::kDead && m.accepting(s);
}
// Whether `text` can be continued into one.
bool viable(Matcher& m, std::string_view text) {
  return m.advance(m.start(), text) != Matcher::kDead;
}

TEST(Matcher, LiteralsAlternativesAndBounds) {
  GrammarBuilder b;
  // "ab" ("c" | "de")* then 2 to 4 digits
  const Sym digit = b.bytes(ByteSet::range('0', '9'));
  const Sym g = b.seq({b.lit("ab"), b.star(b.alt({b.lit("c"), b.lit("de")})), b.repeat(digit, 2, 4)});
  Matcher m(std::make_shared<const Grammar>(b.finish(g)));
  for (const char* ok : {"ab12", "abc12", "abdec1234", "abcccdede999"}) EXPECT_TRUE(matches(m, ok)) << ok;
  for (const char* bad : {"ab1", "ab12345", "abd12", "a", "abx12", "ab12c"}) EXPECT_FALSE(matches(m, bad)) << bad;
  EXPECT_TRUE(viable(m, "abd"));
  EXPECT_FALSE(viable(m, "abdd"));
  EXPECT_FALSE(m.accepting(m.advance(m.start(), "ab1")));
  EXPECT_TRUE(m.can_continue(m.advance(m.start(), "ab123")));
  EXPECT_FALSE(m.can_continue(m.advance(m.start(), "ab1234")));
}

TEST(Matcher, StarLoopsComeBackToOneState) {
  GrammarBuilder b;
  const Sym g = b.seq({b.lit("\""), b.star(b.bytes(ByteSet::range('a', 'z'))), b.lit("\"")});
  Matcher m(std::make_shared<const Grammar>(b.finish(g)));
  const int32_t s1 = m.advance(m.start(), "\"a");
  const int32_t s2 = m.advance(s1, "bcdefghijklmnop");
  EXPECT_EQ(s1, s2);
  const size_t states = m.n_states();
  m.advance(s2, "qrstuvwxyz");
  EXPECT_EQ(m.n_states(), states);
}

// Balanced brackets: recursion, up to Matcher::kMaxDepth levels deep.
TEST(Matcher, RecursionAndItsDepthLimit) {
  GrammarBuilder b;
  const uint32_t r = b.declare();
  b.define(r, {{b.lit("("), GrammarBuilder::rule(r), b.lit(")"), GrammarBuilder::rule(r)}, {}});
  Matcher m(std::make_shared<const Grammar>(b.finish(GrammarBuilder::rule(r))));
  for (const char* ok : {"", "()", "(())()", "((()())())"}) EXPECT_TRUE(matches(m, ok)) << ok;
  for (const char* bad : {"(", ")", "())", "(()"}) EXPECT_FALSE(matches(m, bad)) << bad;
  const auto nested = [](int d) { return std::string(size_t(d), '(') + std::string(size_t(d), ')'); };
  EXPECT_TRUE(matches(m, nested(50)));
  EXPECT_FALSE(viable(m, std::string(size_t(Matcher::kMaxDepth) + 5, '(')));
}

// Fresh random strings over a small alphabet against a direct check of the same language:
// a ("x" | "yz")* b with 1 to 3 b's.
TEST(Matcher, RandomStringsAgreeWithADirectCheck) {
  GrammarBuilder b;
  const Sym g = b.seq({b.lit("a"), b.star(b.alt({b.lit("x"), b.lit("yz")})), b.repeat(b.lit("b"), 1, 3)});
  Matcher m(std::make_shared<const Grammar>(b.finish(g)));
  const auto direct = [](const std::string& s) {
    if (s.empty() || s[0] != 'a') return false;
    size_t i = 1;
    while (i < s.size() && (s[i] == 'x' || (s[i] == 'y' && i + 1 < s.size() && s[i + 1] == 'z')))
      i += s[i] == 'x' ? 1 : 2;
    const size_t bs = s.size() - i;
    return bs >= 1 && bs <= 3 && s.find_first_not_of('b', i) == std::string::npos;
  };
  std::mt19937 rng(std::random_device{}());
  const std::string alphabet = "axyzb";
  int accepted = 0;
  for (int t = 0; t < 20000; ++t) {
    std::string s;
    const int n = int(rng() % 9);
    for (int i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    if (rng() % 2) s[0] = 'a';
    ASSERT_EQ(matches(m, s), direct(s)) << s;
    accepted += direct(s);
  }
  EXPECT_GT(accepted, 50);
}

// distance(): the fewest bytes to a match, against a breadth-first search over bytes, in
// fresh random states of a recursive grammar.
TEST(Matcher, DistanceIsTheShortestCompletion) {
  GrammarBuilder b;
  // v ::= "[" (v ("," v)*)? "]" | "ab" | "c"+ "d"
  const uint32_t v = b.declare();
  const Sym vs = GrammarBuilder::rule(v);
  b.define(v, {{b.lit("["), b.opt(b.seq({vs, b.star(b.seq({b.lit(","), vs}))})), b.lit("]")},
               {b.lit("ab")},
               {b.repeat(b.lit("c"), 1, -1), b.lit("d")}});
  Matcher m(std::make_shared<const Grammar>(b.finish(vs)));
  const auto bfs = [&](int32_t from) {
    std::vector<std::pair<int32_t, uint32_t>> q = {{from, 0}};
    std::vector<int32_t> seen = {from};
    for (size_t i = 0; i < q.size(); ++i) {
      const auto [s, d] = q[i];
      if (m.accepting(s)) return d;
      for (int c : {'[', ']', ',', 'a', 'b', 'c', 'd'}) {
        const int32_t t = m.advance(s, uint8_t(c));
        if (t == Matcher::kDead || std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
        seen.push_back(t);
        q.push_back({t, d + 1});
      }
    }
    return Matcher::kFar;
  };
  EXPECT_EQ(m.distance(m.start()), 2u);  // "[]" or "ab" or "cd"
  std::mt19937 rng(std::random_device{}());
  for (int walk = 0; walk < 200; ++walk) {
    int32_t s = m.start();
    for (int step = 0; step < 30; ++step) {
      ASSERT_EQ(m.distance(s), bfs(s));
      std::vector<int32_t> next;
      for (int c : {'[', ']', ',', 'a', 'b', 'c', 'd'})
        if (int32_t t = m.advance(s, uint8_t(c)); t != Matcher::kDead) next.push_back(t);
      if (next.empty()) break;
      s = next[rng() % next.size()];
    }
  }
}

}  // namespace
}  // namespace orchid::grammar
