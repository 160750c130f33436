// The request path on random input, bounded so it runs with every test: the fuzz target's body
// (fuzz/request_input.h) over generated requests for every endpoint: valid skeletons with
// random fields, hostile nesting, huge arrays, invalid UTF-8, byte mutations. Every input ends
// in a value, a render or a 400 with a message; the generator must reach every outcome on
// every endpoint, so a driver that stopped exercising one would fail here too.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>

#include "../../fuzz/request_input.h"
#include "orchid/util/json_depth.h"

namespace orchid::fuzz {
namespace {

using OJson = nlohmann::ordered_json;

class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}

  int pick(int n) { return int(rng_() % uint32_t(n)); }
  bool chance(int percent) { return pick(100) < percent; }

  std::string text() {
    static const char* const kPieces[] = {"a", "Paris", " ", "\n", "{", "}", "[", "]", "\"",
                                          "\\", "é", "你", "🙂", "<tool_call>", "</think>",
                                          "{{ x }}", "{%", "<|im_end|>", "null", "\t",
                                          "\x01", "\x02"};
    // \x01 and \x02 stand for invalid UTF-8, put in as raw bytes by dump().
    std::string s;
    for (int i = pick(6); i > 0; --i) s += kPieces[pick(chance(95) ? 20 : 22)];
    return s;
  }

  // A random JSON value at most `depth` levels deep.
  OJson value(int depth) {
    switch (depth <= 0 ? pick(5) : pick(8)) {
      case 0: return nullptr;
      case 1: return chance(50);
      case 2: return int64_t(pick(2000)) - 1000;
      case 3: return double(pick(1000)) / 7.0;
      case 4: return text();
      case 5: {
        OJson a = OJson::array();
        for (int i = pick(4); i > 0; --i) a.push_back(value(depth - 1));
        return a;
      }
      default: {
        OJson o = OJson::object();
        for (int i = pick(4); i > 0; --i) o[text()] = value(depth - 1);
        return o;
      }
    }
  }

  // Nesting around a leaf, `levels` deep, as text (so it can pass any limit).
  std::string deep_text(int levels) {
    std::string open, close;
    for (int i = 0; i < levels; ++i) {
      const bool arr = chance(50);
      open += arr ? "[" : "{\"k\":";
      close += arr ? ']' : '}';
    }
    return open + "1" + std::string(close.rbegin(), close.rend());
  }

  OJson tool_call() {
    OJson args;
    switch (pick(4)) {
      case 0: args = OJson{{"city", text()}, {"days", value(2)}}.dump(); break;
      case 1: args = OJson{{"city", text()}, {"n", value(3)}}; break;
      case 2: args = text(); break;  // not JSON, mostly
      default: args = value(2); break;
    }
    OJson fn = {{"name", chance(90) ? "get_weather" : text()}, {"arguments", args}};
    return {{"id", "c" + std::to_string(pick(9))}, {"type", "function"}, {"function", fn}};
  }

  OJson message() {
    static const char* const kRoles[] = {"user", "assistant", "system", "developer", "tool",
                                         "wizard"};
    OJson m = {{"role", kRoles[pick(6)]}};
    switch (pick(5)) {
      case 0: m["content"] = OJson::array({{{"type", "text"}, {"text", text()}}}); break;
      case 1: m["content"] = value(2); break;
      default: m["content"] = text(); break;
    }
    if (m["role"] == "assistant" && chance(50)) {
      m["tool_calls"] = OJson::array();
      for (int i = 1 + pick(2); i > 0; --i) m["tool_calls"].push_back(tool_call());
      if (chance(50)) m["reasoning_content"] = text();
    }
    if (m["role"] == "tool") m["tool_call_id"] = "c" + std::to_string(pick(9));
    return m;
  }

  // A JSON schema, mostly of the supported keywords, sometimes not (or not a schema at all).
  OJson schema(int depth) {
    static const char* const kTypes[] = {"object", "array", "string", "integer", "number",
                                         "boolean", "null", "wizard"};
    if (chance(5)) return value(1);
    OJson s = OJson::object();
    switch (depth <= 0 ? pick(3) + 2 : pick(8)) {
      case 0: {
        OJson props = OJson::object();
        OJson req = OJson::array();
        for (int i = pick(4); i > 0; --i) {
          const std::string k = chance(80) ? std::string(1, char('a' + pick(6))) : text();
          props[k] = schema(depth - 1);
          if (chance(50)) req.push_back(chance(95) ? k : text());
        }
        s = {{"type", "object"}, {"properties", props}, {"required", req}};
        if (chance(20)) s["additionalProperties"] = chance(50) ? OJson(false) : schema(depth - 1);
        break;
      }
      case 1:
        s = {{"type", "array"}, {"items", schema(depth - 1)}};
        if (chance(40)) s["maxItems"] = pick(5);
        if (chance(20)) s["minItems"] = pick(3);
        break;
      case 2:
        s = {{"type", "string"}};
        if (chance(30)) s["maxLength"] = pick(20);
        if (chance(10)) s["format"] = chance(70) ? "date-time" : text();
        if (chance(5)) s["pattern"] = text();
        break;
      case 3:
        s = {{"type", kTypes[pick(8)]}};
        if (chance(30)) s["minimum"] = pick(10) - 2;
        if (chance(30)) s["maximum"] = pick(2000);
        break;
      case 4: s = {{"enum", OJson::array({value(1), value(1)})}}; break;
      case 5: s = {{"anyOf", OJson::array({schema(depth - 1), schema(depth - 1)})}}; break;
      case 6: s = {{"$ref", chance(70) ? "#" : "#/" + text()}}; break;
      default: s = {{"const", value(2)}}; break;
    }
    if (chance(5)) s[text()] = value(1);
    return s;
  }

  OJson request() {
    OJson b = {{"model", "m"}, {"messages", OJson::array()}};
    if (chance(60)) b["messages"].push_back({{"role", "system"}, {"content", text()}});
    b["messages"].push_back({{"role", "user"}, {"content", text() + "?"}});
    for (int i = pick(5); i > 0; --i) b["messages"].push_back(message());
    if (chance(50)) {
      OJson params = {{"type", "object"},
                      {"properties", {{"city", {{"type", "string"}}}, {"x", value(3)}}}};
      b["tools"] = OJson::array({{{"type", "function"},
                                  {"function", {{"name", "get_weather"}, {"parameters", params}}}}});
    }
    if (chance(20)) b["chat_template_kwargs"] = {{"enable_thinking", chance(50)}, {"k", value(2)}};
    if (chance(20)) b["tool_choice"] = chance(50) ? OJson("auto") : OJson("none");
    if (chance(15))
      b["tool_choice"] = chance(50) ? OJson("required")
                                    : OJson{{"type", "function"},
                                            {"function", {{"name", chance(80) ? "get_weather" : text()}}}};
    if (chance(10)) b["parallel_tool_calls"] = chance(90) ? OJson(chance(50)) : value(1);
    if (chance(25))
      b["response_format"] = chance(70) ? OJson{{"type", "json_schema"},
                                                {"json_schema", {{"name", "s"}, {"schema", schema(3)}}}}
                                        : OJson{{"type", chance(80) ? "json_object" : text()}};
    if (chance(10)) b["n"] = pick(20);
    if (chance(10)) b["logit_bias"] = {{std::to_string(pick(100)), pick(300) - 150}};
    if (chance(10)) b[text()] = value(2);
    return b;
  }

  // An Anthropic content block of any kind, valid or not.
  OJson block() {
    switch (pick(7)) {
      case 0: return {{"type", "text"}, {"text", text()}};
      case 1: return {{"type", "thinking"}, {"thinking", text()}, {"signature", text()}};
      case 2: {
        OJson input = chance(80) ? OJson{{"city", text()}, {"days", value(2)}} : value(2);
        return {{"type", "tool_use"}, {"id", "toolu_" + std::to_string(pick(9))},
                {"name", chance(90) ? "get_weather" : text()}, {"input", input}};
      }
      case 3: {
        OJson content = chance(50) ? OJson(text())
                                   : OJson::array({{{"type", "text"}, {"text", text()}}});
        return {{"type", "tool_result"}, {"tool_use_id", "toolu_" + std::to_string(pick(9))},
                {"content", chance(90) ? content : value(2)}};
      }
      case 4: return {{"type", "image"}, {"source", value(1)}};
      case 5: return {{"type", "redacted_thinking"}, {"data", text()}};
      default: return value(2);
    }
  }

  // POST /v1/messages.
  OJson anthropic() {
    OJson b = {{"model", "m"}, {"max_tokens", chance(95) ? pick(64) + 1 : pick(3) - 1}};
    if (chance(40)) b["system"] = chance(50) ? OJson(text())
                                             : OJson::array({{{"type", "text"}, {"text", text()}}});
    b["messages"] = OJson::array({{{"role", "user"}, {"content", text() + "?"}}});
    for (int i = pick(5); i > 0; --i) {
      const char* role = chance(50) ? "assistant" : chance(95) ? "user" : "system";
      OJson content = OJson::array();
      for (int k = pick(4); k > 0; --k) content.push_back(chance(80) ? block() : value(1));
      b["messages"].push_back({{"role", role}, {"content", chance(80) ? content : OJson(text())}});
    }
    if (chance(50)) {
      OJson schema = {{"type", "object"},
                      {"properties", {{"city", {{"type", "string"}}}, {"x", value(3)}}}};
      b["tools"] = OJson::array({{{"name", "get_weather"}, {"input_schema", schema}}});
      if (chance(10)) b["tools"].push_back({{"type", "web_search_20250305"}, {"name", "s"}});
    }
    if (chance(20)) b["thinking"] = {{"type", chance(80) ? "enabled" : text()}};
    if (chance(20)) b["tool_choice"] = {{"type", chance(80) ? "auto" : text()}};
    if (chance(15)) b["tool_choice"] = {{"type", chance(50) ? "any" : "tool"}, {"name", "get_weather"}};
    if (chance(15)) b["stop_sequences"] = OJson::array({text()});
    if (chance(10)) b[text()] = value(2);
    return b;
  }

  OJson completion() {
    OJson b = {{"model", "m"}, {"max_tokens", pick(20)}};
    switch (pick(4)) {
      case 0: b["prompt"] = text(); break;
      case 1: b["prompt"] = ids(); break;
      case 2: b["prompt"] = OJson::array({text(), text()}); break;
      default: b["prompt"] = value(3); break;
    }
    if (chance(30)) b["stop"] = OJson::array({text()});
    return b;
  }

  OJson ids() {
    OJson a = OJson::array();
    // Sometimes a huge list (a 100,000-id detokenize).
    for (int i = chance(3) ? 100'000 : pick(8); i > 0; --i)
      a.push_back(chance(97) ? int64_t(pick(200'000)) : int64_t(pick(3)) - 1);
    return a;
  }

  // Serialized, with the stand-ins of text() made invalid UTF-8: a stray byte and a cut
  // sequence for \x01, an encoded surrogate for \x02 (nlohmann would refuse to dump them).
  static std::string dump(const OJson& j) {
    std::string s = j.dump();
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"\\u0001", "\xff\xc3"},
                                   {"\\u0002", "\xed\xa0\x80"}})
      for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
        s.replace(at, from.size(), to);
    return s;
  }

  // `which` endpoint's body, serialized.
  std::string endpoint_body(Endpoint which) {
    switch (which) {
      case Endpoint::chat: {
        OJson b = request();
        if (chance(3))  // a huge conversation
          for (int i = 0; i < 4'000; ++i) b["messages"].push_back({{"role", "user"}, {"content", "x"}});
        return dump(b);
      }
      case Endpoint::completion:
        return dump(completion());
      case Endpoint::tokenize:
      case Endpoint::apply_template: {
        OJson b = request();
        b.erase("model");
        if (which == Endpoint::tokenize && chance(50)) b = {{"prompt", text()}};
        if (chance(20)) b["add_generation_prompt"] = value(0);
        return dump(b);
      }
      case Endpoint::detokenize:
        return dump(OJson{{"tokens", chance(90) ? ids() : value(2)}});
      case Endpoint::messages:
        return dump(anthropic());
    }
    return "{}";
  }

  // The input as the fuzz target takes it: the endpoint's byte, then the body, perhaps with
  // hostile nesting spliced in, perhaps mutated.
  std::string body(Endpoint which) {
    std::string s = endpoint_body(which);
    if (chance(15)) {
      static const int kLevels[] = {kMaxJsonDepth - 20, kMaxJsonDepth + 1, 5000, 200000};
      const int levels = kLevels[pick(4)];
      const std::string deep = deep_text(levels);
      const std::string spot = chance(50) ? "\"content\":" : "\"arguments\":";
      // As JSON, or as a string holding it (arguments are parsed from one); the deepest only
      // as JSON: a megabyte of text through the template adds time, not coverage.
      const bool as_string = levels <= 5000 && chance(50);
      if (const size_t at = s.find(spot); at != std::string::npos)
        s.insert(at + spot.size(), (as_string ? OJson(deep).dump() : deep) + ",\"z\":");
    }
    for (int i = chance(30) ? 1 + pick(3) : 0; i > 0 && !s.empty(); --i) {
      const size_t at = size_t(pick(int(s.size())));
      switch (pick(3)) {
        case 0: s[at] = char(pick(256)); break;
        case 1: s.erase(at, 1 + size_t(pick(4))); break;
        default: s.insert(at, s.substr(at, size_t(pick(16)))); break;
      }
    }
    return char('0' + int(which)) + s;
  }

 private:
  std::mt19937 rng_;
};

TEST(RequestRandom, EveryInputIsAValueARenderOrA400) {
  Gen gen(20261203);
  constexpr int kPerEndpoint = 400;  // ~1 s in a release build, ~15 s under ASan
  const char* const kNames[] = {"chat",       "completions", "tokenize", "apply-template",
                                "detokenize", "messages"};
  const auto t0 = std::chrono::steady_clock::now();
  for (int e = 0; e < kEndpoints; ++e) {
    int counts[4] = {};
    for (int i = 0; i < kPerEndpoint; ++i) {
      const std::string input = gen.body(Endpoint(e));
      const Outcome o = exercise_request(input);
      ASSERT_NE(o, Outcome::broken) << kNames[e] << " input " << i << ": " << input.substr(0, 300);
      ++counts[int(o)];
    }
    std::printf("[ random  ] %-14s %d inputs: %d refused, %d accepted, %d template errors\n",
                kNames[e], kPerEndpoint, counts[int(Outcome::refused)],
                counts[int(Outcome::accepted)], counts[int(Outcome::template_error)]);
    EXPECT_GT(counts[int(Outcome::refused)], kPerEndpoint / 20) << kNames[e];
    EXPECT_GT(counts[int(Outcome::accepted)], kPerEndpoint / 20) << kNames[e];
    const bool templated = e == int(Endpoint::chat) || e == int(Endpoint::tokenize) ||
                           e == int(Endpoint::apply_template);
    if (templated) {
      EXPECT_GT(counts[int(Outcome::template_error)], 0) << kNames[e];
    }
  }
  std::printf("[ random  ] %.2f s in all\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace
}  // namespace orchid::fuzz
