// Stop strings across every cut: the released text never contains anything at or after the
// first stop string, matches the reference cut whatever the pieces, and holds back no more
// than a possible stop prefix.
#include <gtest/gtest.h>

#include "orchid/server/stop_strings.h"

namespace orchid::server {
namespace {

// The text before the first occurrence of any stop string, and whether one occurs.
std::pair<std::string, bool> reference(const std::string& text,
                                       const std::vector<std::string>& stops) {
  size_t first = std::string::npos;
  for (const auto& s : stops) first = std::min(first, text.find(s));
  if (first == std::string::npos) return {text, false};
  return {text.substr(0, first), true};
}

// Feeds `text` cut at the given byte positions; returns what was released and whether it stopped.
std::pair<std::string, bool> run(const std::string& text, const std::vector<std::string>& stops,
                                 const std::vector<size_t>& cuts) {
  StopMatcher m(stops);
  std::string out;
  size_t prev = 0;
  for (size_t c : cuts) {
    auto r = m.push(std::string_view(text).substr(prev, c - prev));
    out += r.text;
    prev = c;
    if (r.stopped) return {out, true};
  }
  auto r = m.push(std::string_view(text).substr(prev));
  out += r.text;
  if (r.stopped) return {out, true};
  return {out + m.flush(), false};
}

const std::vector<std::pair<std::string, std::vector<std::string>>> kCases = {
    {"Hello there!", {"ere"}},
    {"Hello there!", {"o the"}},
    {"Hello there!", {"xyz", "!"}},
    {"Hello there!", {"nowhere"}},
    {"aaab", {"aab"}},       // overlapping prefix: the match starts one byte in
    {"abababc", {"ababc"}},  // a partial match that fails, then a real one
    {"<think>\nLet me think.\n</think>\n\nHi", {"me think", "</think>"}},
    {"xxab", {"b", "ab"}},             // two stops, the earlier start wins
    {"caf\xc3\xa9 ok", {"\xc3\xa9"}},  // UTF-8: cut before the character
    {"no stops", {}},
};

TEST(StopStrings, EveryCutAtOneByteGivesTheReference) {
  for (const auto& [text, stops] : kCases) {
    const auto want = reference(text, stops);
    for (size_t cut = 0; cut <= text.size(); ++cut)
      EXPECT_EQ(run(text, stops, {cut}), want) << "text '" << text << "' cut at " << cut;
  }
}

TEST(StopStrings, ByteByByteGivesTheReference) {
  for (const auto& [text, stops] : kCases) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
    EXPECT_EQ(run(text, stops, cuts), reference(text, stops)) << text;
  }
}

TEST(StopStrings, HoldsBackOnlyAPossiblePrefix) {
  StopMatcher m({"STOP"});
  auto r = m.push("abc ST");
  EXPECT_EQ(r.text, "abc ");  // "ST" may become STOP
  EXPECT_FALSE(r.stopped);
  r = m.push("Ax");
  EXPECT_EQ(r.text, "STAx");  // it did not
  r = m.push("S");
  EXPECT_EQ(r.text, "");
  r = m.push("TOP and more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(m.push("later").stopped);
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStrings, FlushReleasesTheHeldTail) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("the EN").text, "the ");
  EXPECT_EQ(m.flush(), "EN");
}

}  // namespace
}  // namespace orchid::server
