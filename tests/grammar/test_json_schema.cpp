// JSON schema grammars: documents valid against the schema are accepted (compact and
// pretty-printed), invalid ones refused; random walks through the automaton of bounded schemas
// always end in JSON that validates (checked by a small validator written here from the
// keywords' definitions); unsupported keywords are errors, never ignored.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>

#include "orchid/grammar/json_schema.h"
#include "orchid/grammar/matcher.h"

namespace orchid::grammar {
namespace {

using json = nlohmann::ordered_json;

std::unique_ptr<Matcher> matcher_for(const json& schema) {
  auto g = json_schema_grammar(schema);
  EXPECT_TRUE(g.ok()) << g.message();
  if (!g) return nullptr;
  return std::make_unique<Matcher>(std::make_shared<const Grammar>(std::move(*g)));
}

bool matches(Matcher& m, std::string_view text) {
  const int32_t s = m.advance(m.start(), text);
  return s != Matcher::kDead && m.accepting(s);
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

// The keywords these tests use, as JSON Schema defines them.
bool valid(const json& v, const json& s, const json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string p = s["$ref"].get<std::string>();
    return valid(v, p == "#" ? root : root.at(json::json_pointer(p.substr(1))), root);
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum")) {
    bool any = false;
    for (const json& e : s["enum"]) any = any || e == v;
    if (!any) return false;
  }
  if (s.contains("anyOf")) {
    bool any = false;
    for (const json& sub : s["anyOf"]) any = any || valid(v, sub, root);
    if (!any) return false;
  }
  if (s.contains("type")) {
    const auto is = [&](const std::string& t) {
      return (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
             (t == "string" && v.is_string()) || (t == "integer" && v.is_number_integer()) ||
             (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) ||
             (t == "null" && v.is_null());
    };
    bool ok = false;
    if (s["type"].is_string()) ok = is(s["type"].get<std::string>());
    for (const json& t : s["type"].is_array() ? s["type"] : json::array()) ok = ok || is(t.get<std::string>());
    if (!ok) return false;
  }
  if (v.is_object()) {
    for (const json& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return false;
    const json props = s.value("properties", json::object());
    for (const auto& [k, x] : v.items()) {
      if (props.contains(k)) {
        if (!valid(x, props[k], root)) return false;
      } else if (s.contains("additionalProperties")) {
        if (!valid(x, s["additionalProperties"], root)) return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("items"))
      for (const json& x : v)
        if (!valid(x, s["items"], root)) return false;
  }
  if (v.is_string()) {
    const size_t n = code_points(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
  }
  if (v.is_number()) {
    if (s.contains("minimum") && v.get<double>() < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && v.get<double>() > s["maximum"].get<double>()) return false;
  }
  return true;
}

// A random walk: bytes chosen uniformly among those the automaton takes, ending as soon as it
// may (with probability 1/2 per step) or when no byte is left; the text, or "" past max_bytes.
std::string random_walk(Matcher& m, std::mt19937& rng, size_t max_bytes) {
  std::string text;
  int32_t s = m.start();
  while (text.size() < max_bytes) {
    std::vector<int> next;
    for (int b = 0; b < 256; ++b)
      if (m.advance(s, uint8_t(b)) != Matcher::kDead) next.push_back(b);
    if (m.accepting(s) && (next.empty() || rng() % 2)) return text;
    if (next.empty()) return "";
    const int b = next[rng() % next.size()];
    text += char(b);
    s = m.advance(s, uint8_t(b));
  }
  return "";
}

const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 6},
    "age": {"type": "integer", "minimum": 0, "maximum": 130},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3},
    "pet": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"kind": {"const": "cat"}},
                                          "required": ["kind"], "additionalProperties": false}]},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "age", "tags"],
  "additionalProperties": false
})");

TEST(JsonSchema, AcceptsValidDocumentsCompactAndPretty) {
  auto m = matcher_for(kPerson);
  ASSERT_TRUE(m);
  for (const char* doc : {R"({"name":"Ann","age":31,"tags":["a"]})",
                          R"({"name":"Bo","age":0,"tags":["c","a","b"],"pet":null,"ok":true})",
                          R"({"name":"é€😀x","age":130,"tags":["b"],"pet":{"kind":"cat"}})",
                          R"({"name":"a\"\\\n\u00e9","age":7,"tags":["a"],"ok":false})"}) {
    EXPECT_TRUE(matches(*m, doc)) << doc;
    EXPECT_TRUE(matches(*m, json::parse(doc).dump(2))) << json::parse(doc).dump(2);
    EXPECT_TRUE(valid(json::parse(doc), kPerson, kPerson)) << doc;
  }
}

TEST(JsonSchema, RefusesInvalidDocuments) {
  auto m = matcher_for(kPerson);
  ASSERT_TRUE(m);
  for (const char* doc : {
           R"({"age":31,"tags":["a"]})",                           // name missing
           R"({"name":"","age":31,"tags":["a"]})",                 // too short
           R"({"name":"abcdefg","age":31,"tags":["a"]})",          // too long
           R"({"name":"A","age":131,"tags":["a"]})",               // above maximum
           R"({"name":"A","age":-1,"tags":["a"]})",                // below minimum
           R"({"name":"A","age":3.5,"tags":["a"]})",               // not an integer
           R"({"name":"A","age":3,"tags":[]})",                    // minItems
           R"({"name":"A","age":3,"tags":["a","a","a","a"]})",     // maxItems
           R"({"name":"A","age":3,"tags":["d"]})",                 // enum
           R"({"name":"A","age":3,"tags":["a"],"x":1})",           // additional property
           R"({"name":"A","age":3,"tags":["a"],"pet":{"kind":"dog"}})",
           R"({"name":"A","age":3,"tags":["a"],"ok":"true"})",
           R"({"name":"a\ud800","age":3,"tags":["a"]})",           // lone surrogate escape
           "{\"name\":\"\xff\",\"age\":3,\"tags\":[\"a\"]}",      // invalid UTF-8
           "{\"name\":\"\xc0\xaf\",\"age\":3,\"tags\":[\"a\"]}",  // overlong UTF-8
           "{\"name\":\"a\nb\",\"age\":3,\"tags\":[\"a\"]}",      // raw control character
           R"({"name":"A","age":3,"tags":["a"]} x)",
       })
    EXPECT_FALSE(matches(*m, doc)) << doc;
}

// Fresh random walks through bounded schemas: each ends in JSON that validates.
TEST(JsonSchema, RandomWalksEndInValidJson) {
  const json recursive = json::parse(R"({
    "$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer", "minimum": 1, "maximum": 9},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
      "required": ["v"]}},
    "$ref": "#/$defs/node"})");
  const json formats = json::parse(R"({"type": "array", "maxItems": 2, "items": {"anyOf": [
      {"type": "string", "format": "date"}, {"type": "string", "format": "uuid"},
      {"type": ["boolean", "null"]}, {"enum": [1.5, "x", [1, 2], {"k": null}]}]}})");
  std::mt19937 rng(std::random_device{}());
  for (const json& schema : {kPerson, recursive, formats}) {
    auto m = matcher_for(schema);
    ASSERT_TRUE(m);
    int done = 0;
    for (int t = 0; t < 300; ++t) {
      const std::string text = random_walk(*m, rng, 4000);
      if (text.empty()) continue;  // too long: not the property under test
      ++done;
      json v;
      ASSERT_NO_THROW(v = json::parse(text)) << text;
      ASSERT_TRUE(valid(v, schema, schema)) << text;
    }
    EXPECT_GT(done, 250) << schema.dump();
  }
}

TEST(JsonSchema, JsonObjectModeTakesAnyObjectOnly) {
  Matcher m(std::make_shared<const Grammar>(json_object_grammar()));
  for (const char* ok : {"{}", R"({"a":[1,-2.5e3,{"b":null}],"c":"\u20ac"})", " {\n  \"x\": true\n} "})
    EXPECT_TRUE(matches(m, ok)) << ok;
  for (const char* bad : {"[]", "1", R"({"a":01})", R"({"a":1,})", R"({a:1})", R"({"a":tru})"})
    EXPECT_FALSE(matches(m, bad)) << bad;
  std::mt19937 rng(std::random_device{}());
  for (int t = 0; t < 200; ++t) {
    const std::string text = random_walk(m, rng, 4000);
    if (text.empty()) continue;
    json v;
    ASSERT_NO_THROW(v = json::parse(text)) << text;
    ASSERT_TRUE(v.is_object()) << text;
  }
}

TEST(JsonSchema, UnsupportedSchemasAreErrorsNamingTheKeyword) {
  for (const char* bad : {R"({"type":"string","pattern":"a+"})", R"({"type":"object","patternProperties":{}})",
                          R"({"not":{}})", R"({"type":"integer","minimum":5})",
                          R"({"type":"integer","minimum":0,"maximum":5000})",
                          R"({"type":"string","format":"email"})", R"({"type":"wizard"})",
                          R"({"$ref":"http://x/y"})", R"({"$ref":"#/nope"})", R"(false)",
                          R"({"type":"object","properties":{"a":{}},"required":["b"]})",
                          R"({"type":"string","maxLength":100000})", R"({"type":"number","maximum":3})"}) {
    auto g = json_schema_grammar(json::parse(bad));
    EXPECT_FALSE(g.ok()) << bad;
  }
  EXPECT_NE(json_schema_grammar(json::parse(R"({"type":"string","pattern":"a+"})")).message().find("pattern"),
            std::string::npos);
  // Nested past the limit: an error, not a deep recursion.
  json deep = {{"type", "string"}};
  for (int i = 0; i < 200; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_FALSE(json_schema_grammar(deep).ok());
}

TEST(JsonSchema, PropertiesComeInTheSchemasOrder) {
  auto m = matcher_for(json::parse(R"({"type":"object","properties":{"z":{"type":"null"},"a":{"type":"null"}},
                                       "required":["z","a"]})"));
  ASSERT_TRUE(m);
  EXPECT_TRUE(matches(*m, R"({"z":null,"a":null})"));
  EXPECT_FALSE(matches(*m, R"({"a":null,"z":null})"));
}

// A tool without arguments declares "properties": {}; its call is {} (a sampled model once
// wrote 3,000 tokens of made-up keys there). Without "properties", keys are free unless
// additionalProperties says otherwise.
TEST(JsonSchema, EmptyPropertiesMeanAnEmptyObject) {
  auto none = matcher_for(json::parse(R"({"type":"object","properties":{}})"));
  ASSERT_TRUE(none);
  EXPECT_TRUE(matches(*none, "{}"));
  EXPECT_TRUE(matches(*none, "{ }"));
  EXPECT_FALSE(matches(*none, R"({"a":1})"));
  auto typed = matcher_for(json::parse(R"({"type":"object","properties":{},"additionalProperties":{"type":"integer"}})"));
  ASSERT_TRUE(typed);
  EXPECT_TRUE(matches(*typed, R"({"a":1,"b":2})"));
  EXPECT_FALSE(matches(*typed, R"({"a":"x"})"));
  auto any = matcher_for(json::parse(R"({"type":"object"})"));
  ASSERT_TRUE(any);
  EXPECT_TRUE(matches(*any, R"({"a":[1,{"b":null}]})"));
}

}  // namespace
}  // namespace orchid::grammar
