// json_depth: the nesting of arrays and objects counted on the text, strings (with their
// escapes) skipped, so a deep request is refused before anything recurses over it.
#include <gtest/gtest.h>

#include <string>

#include "orchid/util/json_depth.h"

namespace orchid {
namespace {

TEST(JsonDepth, CountsArraysAndObjectsOutsideStrings) {
  EXPECT_EQ(json_depth(""), 0);
  EXPECT_EQ(json_depth("1"), 0);
  EXPECT_EQ(json_depth("[]"), 1);
  EXPECT_EQ(json_depth(R"({"a":[1,{"b":[]}],"c":{}})"), 4);
  EXPECT_EQ(json_depth(R"(["[[[[", "{{", "\"[[", "\\", [1]])"), 2);  // brackets in strings
  EXPECT_EQ(json_depth(R"(["\\\"[[[["])"), 1);                         // escaped quote then [
  EXPECT_EQ(json_depth("]]]][[]"), 2);  // unbalanced: the parser says what is wrong
}

TEST(JsonDepth, TheLimitSitsBetweenRealAndHostileNesting) {
  auto nested = [](int n) { return std::string(size_t(n), '[') + std::string(size_t(n), ']'); };
  EXPECT_FALSE(json_too_deep(nested(kMaxJsonDepth)));
  EXPECT_TRUE(json_too_deep(nested(kMaxJsonDepth + 1)));
  EXPECT_TRUE(json_too_deep(nested(1'000'000)));
}

}  // namespace
}  // namespace orchid
