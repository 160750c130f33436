// Tests for the streaming output parser: reasoning/content split, Qwen XML tool calls typed by
// schema, malformed calls kept verbatim, and the same result for every way the text is cut.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "orchid/tokenizer/output_parser.h"
#include "orchid/tokenizer/tool_args.h"

namespace orchid {
namespace {

using nlohmann::json;

const json& test_tools() {
  static const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"location": {"type": "string"}, "days": {"type": "integer"},
                     "unit": {"type": "string", "enum": ["c", "f"]}},
      "required": ["location"]}}},
    {"type": "function", "function": {"name": "set_options", "parameters": {"type": "object",
      "properties": {"name": {"type": "string"}, "count": {"type": "integer"},
                     "ratio": {"type": "number"}, "enabled": {"type": "boolean"},
                     "config": {"type": "object"},
                     "tags": {"type": "array", "items": {"type": "string"}},
                     "anything": {"description": "no type given"},
                     "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                     "maybe": {"type": ["integer", "null"]}}}}},
    {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object",
      "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}
  ])");
  return tools;
}

OutputParserOptions make_opts(bool thinking, bool parse_tool_calls = true) {
  OutputParserOptions o;
  o.thinking = thinking;
  o.tools = test_tools();
  o.parse_tool_calls = parse_tool_calls;
  o.make_call_id = [n = 0]() mutable { return "call_" + std::to_string(n++); };
  return o;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80                 ? 1
               : c >= 0xC2 && c <= 0xDF ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// Everything a parser produced for one reply, plus the individual deltas.
struct Collected {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;
  std::vector<std::string> reasoning_pieces;
  std::vector<std::string> content_pieces;
};

void take(Collected& c, ParserDelta d) {
  if (!d.reasoning.empty()) c.reasoning_pieces.push_back(d.reasoning);
  if (!d.content.empty()) c.content_pieces.push_back(d.content);
  c.reasoning += d.reasoning;
  c.content += d.content;
  for (auto& call : d.tool_calls) c.calls.push_back(std::move(call));
}

Collected feed(const OutputParserOptions& opts, const std::vector<std::string>& chunks) {
  OutputParser p(opts);
  Collected c;
  for (const auto& chunk : chunks) take(c, p.push(chunk));
  take(c, p.finish());
  return c;
}

Collected parse(const OutputParserOptions& opts, const std::string& text) {
  return feed(opts, {text});
}

// No delta may end inside a tag that the next delta of the same field completes.
void expect_no_split_tag(const std::vector<std::string>& pieces, const std::string& what) {
  static const std::vector<std::string> kTags = {"<think>", "</think>", "<tool_call>",
                                                 "</tool_call>"};
  for (size_t i = 0; i + 1 < pieces.size(); ++i) {
    for (const auto& tag : kTags) {
      for (size_t k = 1; k < tag.size(); ++k) {
        bool split =
            pieces[i].ends_with(tag.substr(0, k)) && pieces[i + 1].starts_with(tag.substr(k));
        EXPECT_FALSE(split) << what << " delta " << i << " ends inside " << tag << ": '"
                            << pieces[i] << "' + '" << pieces[i + 1] << "'";
      }
    }
  }
}

void expect_same(const Collected& got, const Collected& want, const std::string& how) {
  EXPECT_EQ(got.reasoning, want.reasoning) << how;
  EXPECT_EQ(got.content, want.content) << how;
  ASSERT_EQ(got.calls.size(), want.calls.size()) << how;
  for (size_t i = 0; i < got.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].id, want.calls[i].id) << how;
    EXPECT_EQ(got.calls[i].name, want.calls[i].name) << how;
    EXPECT_EQ(got.calls[i].arguments, want.calls[i].arguments) << how;
  }
}

void check_deltas(const Collected& c, bool utf8_input, const std::string& how) {
  expect_no_split_tag(c.reasoning_pieces, how + " reasoning");
  expect_no_split_tag(c.content_pieces, how + " content");
  if (!utf8_input) return;
  for (const auto& p : c.reasoning_pieces) EXPECT_TRUE(valid_utf8(p)) << how << ": '" << p << "'";
  for (const auto& p : c.content_pieces) EXPECT_TRUE(valid_utf8(p)) << how << ": '" << p << "'";
}

std::string call_xml(const std::string& fn,
                     const std::vector<std::pair<std::string, std::string>>& params) {
  std::string s = "<tool_call>\n<function=" + fn + ">\n";
  for (const auto& [k, v] : params) s += "<parameter=" + k + ">\n" + v + "\n</parameter>\n";
  return s + "</function>\n</tool_call>";
}

// ---------------------------------------------------------------- reasoning split

TEST(OutputParser, ReasoningThenContent) {
  auto c = parse(make_opts(true), "Let me think.\n2+2 is 4.\n</think>\n\nThe answer is 4.");
  EXPECT_EQ(c.reasoning, "Let me think.\n2+2 is 4.");
  EXPECT_EQ(c.content, "The answer is 4.");
  EXPECT_TRUE(c.calls.empty());
}

TEST(OutputParser, NoThinkCloseMeansAllReasoning) {
  auto c = parse(make_opts(true), "Still thinking about a < b and <div>\n");
  EXPECT_EQ(c.reasoning, "Still thinking about a < b and <div>");
  EXPECT_EQ(c.content, "");
}

TEST(OutputParser, ReemittedThinkOpenIsDropped) {
  auto c = parse(make_opts(true), "<think>\nhmm\n</think>\n\nok");
  EXPECT_EQ(c.reasoning, "hmm");
  EXPECT_EQ(c.content, "ok");
}

TEST(OutputParser, EmptyReasoning) {
  auto c = parse(make_opts(true), "\n</think>\n\nHi");
  EXPECT_EQ(c.reasoning, "");
  EXPECT_EQ(c.content, "Hi");
}

TEST(OutputParser, ThinkingOffIsContent) {
  auto c = parse(make_opts(false), "Hello </think> and <think> stay text.\n");
  EXPECT_EQ(c.reasoning, "");
  EXPECT_EQ(c.content, "Hello </think> and <think> stay text.\n");
}

TEST(OutputParser, ThinkingOffButModelThinksAtStart) {
  auto c = parse(make_opts(false), "\n<think>\nhidden\n</think>\n\nvisible");
  EXPECT_EQ(c.reasoning, "hidden");
  EXPECT_EQ(c.content, "visible");
  // Not at the start: text.
  auto d = parse(make_opts(false), "x<think>y</think>z");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "x<think>y</think>z");
}

TEST(OutputParser, ThinkTagsAfterReasoningAreContent) {
  auto c = parse(make_opts(true), "r</think>\n\n<think>a</think>b");
  EXPECT_EQ(c.reasoning, "r");
  EXPECT_EQ(c.content, "<think>a</think>b");
}

TEST(OutputParser, AngleBracketsThatAreNotTags) {
  for (std::string text : {"a < b", "<div>x</div>", "</thinker>", "<thinking>", "<tool_calls>",
                           "1 <2 <= 3", "<", "ends with </th", "ends with <tool_c",
                           "<tool_call> is how calls start", "<tool_call>\n<func", "<<think>>"}) {
    auto c = parse(make_opts(false), text);
    EXPECT_EQ(c.content, text);
    EXPECT_EQ(c.reasoning, "");
    EXPECT_TRUE(c.calls.empty()) << text;
    auto r = parse(make_opts(true), text);
    EXPECT_EQ(r.reasoning, text);
  }
}

TEST(OutputParser, StreamsEarlyAndHoldsOnlyPossibleTags) {
  OutputParser p(make_opts(false));
  EXPECT_EQ(p.push("Hello wor").content, "Hello wor");
  EXPECT_EQ(p.push("ld <").content, "ld");  // " <" held: WS, then a possible tag
  EXPECT_EQ(p.push("b").content, " <b");    // "<b" cannot be a tag
  EXPECT_EQ(p.push(" </tool").content, "");
  EXPECT_EQ(p.push("_callx").content, " </tool_callx");
  EXPECT_EQ(p.push("\n\n").content, "");  // maybe the WS before a tool call
  EXPECT_EQ(p.push("<tool_call>").content, "");
  EXPECT_EQ(p.push("\n<function=get_weather>\n<parameter=location>\nOslo\n</parameter>\n").content,
            "");
  auto d = p.push("</function>\n</tool_call>\n");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"location":"Oslo"})");
  EXPECT_TRUE(p.finish().empty());
}

// ---------------------------------------------------------------- tool calls

TEST(OutputParser, OneToolCall) {
  auto c = parse(make_opts(false),
                 call_xml("get_weather", {{"location", "Paris"}, {"days", "3"}, {"unit", "c"}}));
  EXPECT_EQ(c.content, "");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].id, "call_0");
  EXPECT_EQ(c.calls[0].name, "get_weather");
  EXPECT_EQ(c.calls[0].arguments, R"({"location":"Paris","days":3,"unit":"c"})");
}

TEST(OutputParser, SeveralCallsAfterReasoningWithContentBefore) {
  std::string text = "The user wants two cities.\n</think>\n\nLet me check both.\n\n" +
                     call_xml("get_weather", {{"location", "Paris"}}) + "\n" +
                     call_xml("get_weather", {{"location", "Tokyo"}, {"days", "2"}});
  auto c = parse(make_opts(true), text);
  EXPECT_EQ(c.reasoning, "The user wants two cities.");
  EXPECT_EQ(c.content, "Let me check both.");
  ASSERT_EQ(c.calls.size(), 2u);
  EXPECT_EQ(c.calls[0].id, "call_0");
  EXPECT_EQ(c.calls[0].arguments, R"({"location":"Paris"})");
  EXPECT_EQ(c.calls[1].id, "call_1");
  EXPECT_EQ(c.calls[1].arguments, R"({"location":"Tokyo","days":2})");
}

TEST(OutputParser, TextBetweenAndAfterCallsIsContent) {
  std::string text = "A\n" + call_xml("get_weather", {{"location", "x"}}) + "\nB  \n" +
                     call_xml("write_file", {{"path", "p"}}) + "\nC\n";
  auto c = parse(make_opts(false), text);
  EXPECT_EQ(c.content, "ABC\n");
  ASSERT_EQ(c.calls.size(), 2u);
  EXPECT_EQ(c.calls[1].name, "write_file");
}

TEST(OutputParser, ToolCallInsideThinkingEndsReasoning) {
  std::string text = "I need the weather.\n\n" + call_xml("get_weather", {{"location", "Rome"}});
  auto c = parse(make_opts(true), text);
  EXPECT_EQ(c.reasoning, "I need the weather.");
  EXPECT_EQ(c.content, "");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].arguments, R"({"location":"Rome"})");
  // A mention of the tag without a function is still reasoning.
  auto m = parse(make_opts(true), "I could use <tool_call> here.</think>ok");
  EXPECT_EQ(m.reasoning, "I could use <tool_call> here.");
  EXPECT_EQ(m.content, "ok");
}

TEST(OutputParser, ToolParsingOffKeepsText) {
  std::string text = "x " + call_xml("get_weather", {{"location", "Paris"}});
  auto c = parse(make_opts(false, /*parse_tool_calls=*/false), text);
  EXPECT_EQ(c.content, text);
  EXPECT_TRUE(c.calls.empty());
}

TEST(OutputParser, UnknownFunctionIsAcceptedWithStringArgs) {
  auto c = parse(make_opts(false), call_xml("mystery", {{"x", "42"}, {"y", "{\"a\":1}"}}));
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].name, "mystery");
  EXPECT_EQ(c.calls[0].arguments, R"({"x":"42","y":"{\"a\":1}"})");
}

TEST(OutputParser, MissingFunctionCloseIsTolerated) {
  auto c = parse(make_opts(false),
                 "<tool_call>\n<function=get_weather>\n<parameter=days>\n5\n</parameter>\n"
                 "</tool_call>");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].arguments, R"({"days":5})");
}

TEST(OutputParser, MultilineStringValueKeepsInnerNewlines) {
  std::string body = "\nfirst line\n\n  indented\nlast line\n";
  auto c = parse(make_opts(false), call_xml("write_file", {{"path", "a.txt"}, {"content", body}}));
  ASSERT_EQ(c.calls.size(), 1u);
  json args = json::parse(c.calls[0].arguments);
  EXPECT_EQ(args["content"], body);  // only the template's own "\n" on each side is removed
  EXPECT_EQ(args["path"], "a.txt");
}

TEST(OutputParser, ValueMayContainTagText) {
  std::string body = "<tool_call>\n</tool_call>\n<parameter=x>\n</think>";
  auto c = parse(make_opts(false), call_xml("write_file", {{"content", body}}) + "\ntail");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(json::parse(c.calls[0].arguments)["content"], body);
  EXPECT_EQ(c.content, "tail");
}

TEST(OutputParser, NestedObjectAndArrayArgs) {
  auto c = parse(make_opts(false),
                 call_xml("set_options", {{"config", "{\"a\": [1, {\"b\": null}], \"c\": \"é\"}"},
                                          {"tags", "[\"x\", [\"y\", 2]]"}}));
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].arguments,
            R"({"config":{"a":[1,{"b":null}],"c":"é"},"tags":["x",["y",2]]})");
}

TEST(ToolArgs, TypedBySchema) {
  auto typed = [](const std::string& param, const std::string& raw) {
    return type_param_value(raw, find_param_schema(test_tools(), "set_options", param)).dump();
  };
  // string: always the raw text
  EXPECT_EQ(typed("name", "007"), R"("007")");
  EXPECT_EQ(typed("name", "true"), R"("true")");
  EXPECT_EQ(typed("name", "null"), R"("null")");
  EXPECT_EQ(typed("name", "{\"a\":1}"), R"("{\"a\":1}")");
  // integer
  EXPECT_EQ(typed("count", "42"), "42");
  EXPECT_EQ(typed("count", "-7"), "-7");
  EXPECT_EQ(typed("count", " 42 "), "42");
  EXPECT_EQ(typed("count", "4x2"), R"("4x2")");
  EXPECT_EQ(typed("count", "1.5"), R"("1.5")");
  EXPECT_EQ(typed("count", "null"), "null");
  // number
  EXPECT_EQ(typed("ratio", "3.5"), "3.5");
  EXPECT_EQ(typed("ratio", "2"), "2");
  EXPECT_EQ(typed("ratio", "1e-3"), "0.001");
  EXPECT_EQ(typed("ratio", "abc"), R"("abc")");
  EXPECT_EQ(typed("ratio", "NaN"), R"("NaN")");
  // boolean
  EXPECT_EQ(typed("enabled", "true"), "true");
  EXPECT_EQ(typed("enabled", "True"), "true");
  EXPECT_EQ(typed("enabled", "FALSE"), "false");
  EXPECT_EQ(typed("enabled", "yes"), R"("yes")");
  EXPECT_EQ(typed("enabled", "1"), R"("1")");
  // object / array
  EXPECT_EQ(typed("config", R"({"k": [1, 2]})"), R"({"k":[1,2]})");
  EXPECT_EQ(typed("config", "{k: 1}"), R"("{k: 1}")");
  EXPECT_EQ(typed("config", "[1]"), R"("[1]")");
  EXPECT_EQ(typed("tags", R"(["a", "b"])"), R"(["a","b"])");
  EXPECT_EQ(typed("tags", "a, b"), R"("a, b")");
  // Model output nested past kMaxJsonDepth stays text (the answer's dump recurses per level).
  const std::string deep = std::string(40000, '[') + std::string(40000, ']');
  EXPECT_EQ(type_param_value(deep, find_param_schema(test_tools(), "set_options", "tags")),
            nlohmann::ordered_json(deep));
  // no type: JSON if it parses, else the string
  EXPECT_EQ(typed("anything", "12"), "12");
  EXPECT_EQ(typed("anything", R"({"k":1})"), R"({"k":1})");
  EXPECT_EQ(typed("anything", "hello"), R"("hello")");
  EXPECT_EQ(typed("anything", R"("quoted")"), R"("\"quoted\"")");  // strings stay raw
  // anyOf integer|string; type [integer, null]
  EXPECT_EQ(typed("either", "5"), "5");
  EXPECT_EQ(typed("either", "five"), R"("five")");
  EXPECT_EQ(typed("maybe", "null"), "null");
  EXPECT_EQ(typed("maybe", "7"), "7");
  EXPECT_EQ(typed("maybe", "seven"), R"("seven")");
  // not in the schema: string
  EXPECT_EQ(typed("undeclared", "12"), R"("12")");
}

TEST(ToolArgs, ArgumentsKeepOrderAndUtf8) {
  XmlToolCall call{"get_weather", {{"unit", "c"}, {"location", "東京 🗼"}, {"days", "1"}}};
  EXPECT_EQ(tool_arguments_json(call, test_tools()),
            R"({"unit":"c","location":"東京 🗼","days":1})");
  XmlToolCall dup{"get_weather", {{"days", "1"}, {"location", "x"}, {"days", "2"}}};
  EXPECT_EQ(tool_arguments_json(dup, test_tools()), R"({"days":2,"location":"x"})");
}

TEST(ToolArgs, ParseErrors) {
  EXPECT_FALSE(parse_tool_call_xml("no function").ok());
  EXPECT_FALSE(parse_tool_call_xml("\n<function=>\n").ok());
  EXPECT_FALSE(parse_tool_call_xml("\n<function=f\nx>\n").ok());
  EXPECT_FALSE(parse_tool_call_xml("\n<function=f>\njunk\n</function>\n").ok());
  EXPECT_FALSE(parse_tool_call_xml("\n<function=f>\n<parameter=a>\n1\n").ok());
  EXPECT_FALSE(parse_tool_call_xml("\n<function=f>\n</function>\nafter\n").ok());
  auto ok = parse_tool_call_xml("\n<function= f >\n<parameter=a>1</parameter></function>\n");
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->name, "f");
  ASSERT_EQ(ok->params.size(), 1u);
  EXPECT_EQ(ok->params[0].second, "1");
}

TEST(OutputParser, DefaultIdsAreCallPlus24Alphanumerics) {
  OutputParserOptions o = make_opts(false);
  o.make_call_id = nullptr;
  auto c = parse(o, call_xml("get_weather", {{"location", "a"}}) + "\n" +
                        call_xml("get_weather", {{"location", "b"}}));
  ASSERT_EQ(c.calls.size(), 2u);
  for (const auto& call : c.calls) {
    ASSERT_EQ(call.id.size(), 5u + 24u) << call.id;
    EXPECT_EQ(call.id.substr(0, 5), "call_");
    for (char ch : call.id.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)));
  }
  EXPECT_NE(c.calls[0].id, c.calls[1].id);
  auto a = seeded_tool_call_ids(7), b = seeded_tool_call_ids(7);
  EXPECT_EQ(a(), b());
}

// ---------------------------------------------------------------- malformed → content verbatim

TEST(OutputParser, MalformedCallsAreContentVerbatim) {
  const std::vector<std::string> texts = {
      // text between parameters
      "Text <tool_call>\n<function=get_weather>\nnot a parameter\n</function>\n</tool_call> tail",
      // empty function name
      "<tool_call>\n<function=>\n</tool_call>",
      // truncated inside a value
      "Before.\n\n<tool_call>\n<function=get_weather>\n<parameter=location>\nPar",
      // truncated right after the start
      "x <tool_call>\n<function=get_wea",
      // parameter never closed: the block never ends
      "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</function>\n"
      "</tool_call>\nmore text",
      // text after </function>
      "<tool_call>\n<function=get_weather>\n</function>\noops\n</tool_call>",
  };
  for (const auto& text : texts) {
    auto c = parse(make_opts(false), text);
    EXPECT_EQ(c.content, text);
    EXPECT_EQ(c.reasoning, "");
    EXPECT_TRUE(c.calls.empty()) << text;
  }
}

TEST(OutputParser, MalformedCallAfterReasoningKeepsEveryByte) {
  std::string text =
      "Reason.</think>X <tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\njunk\n"
      "</tool_call>\n" +
      call_xml("get_weather", {{"location", "ok"}});
  auto c = parse(make_opts(true), text);
  ASSERT_EQ(c.calls.size(), 1u);
  std::string raw_call = call_xml("get_weather", {{"location", "ok"}});
  EXPECT_EQ(c.reasoning + "</think>" + c.content + "\n" + raw_call, text);
  // Implicit end of reasoning, then a truncated call: only the WS before it is formatting.
  auto t = parse(make_opts(true), "Reason <tool_call>\n<function=f");
  EXPECT_EQ(t.reasoning, "Reason");
  EXPECT_EQ(t.content, "<tool_call>\n<function=f");
}

// ---------------------------------------------------------------- UTF-8

TEST(OutputParser, Utf8NeverSplitAcrossDeltas) {
  std::string text = "思考 🤔 é\n</think>\n\n答案 👍🏽 ok " +
                     call_xml("get_weather", {{"location", "東京"}});
  auto whole = parse(make_opts(true), text);
  EXPECT_EQ(whole.reasoning, "思考 🤔 é");
  EXPECT_EQ(whole.content, "答案 👍🏽 ok");
  ASSERT_EQ(whole.calls.size(), 1u);
  EXPECT_EQ(whole.calls[0].arguments, R"({"location":"東京"})");
  std::vector<std::string> bytes;
  for (char ch : text) bytes.emplace_back(1, ch);
  auto bytewise = feed(make_opts(true), bytes);
  expect_same(bytewise, whole, "byte by byte");
  check_deltas(bytewise, true, "byte by byte");
  EXPECT_GT(bytewise.content_pieces.size(), 3u);  // it did stream
}

TEST(OutputParser, InvalidUtf8PassesThrough) {
  std::string text = "a\xff b \xe4\xb8";  // a stray byte, then a truncated CJK character
  auto c = parse(make_opts(false), text);
  EXPECT_EQ(c.content, text);
  OutputParser p(make_opts(false));
  EXPECT_EQ(p.push(text).content, "a\xff b");  // the truncated tail is held
  EXPECT_EQ(p.finish().content, " \xe4\xb8");
}

// ---------------------------------------------------------------- any cut gives the same result

struct Case {
  bool thinking;
  std::string text;
  bool utf8 = true;
};

std::vector<Case> property_cases() {
  std::string w = call_xml("get_weather", {{"location", "Paris"}, {"days", "3"}});
  std::string s = call_xml("set_options", {{"name", "n"},
                                           {"count", "12"},
                                           {"ratio", "0.5"},
                                           {"enabled", "True"},
                                           {"config", "{\"a\": {\"b\": [1, 2]}}"},
                                           {"tags", "[\"x\"]"},
                                           {"anything", "null"}});
  std::string f = call_xml(
      "write_file", {{"path", "a.html"}, {"content", "<html>\n</tool_call>\n<think>\n</html>\n"}});
  return {
      {true, "Let me think.\n2+2=4\n</think>\n\nThe answer is **4**."},
      {true, "Still thinking about a < b </thin and <think"},
      {false, "Hello <b>world</b>, a < b > c, </thinker> <tool_callx>"},
      {false, "\n<think>\nhidden\n</think>\n\nvisible"},
      {true, "<think>\nr\n</think>\n\nc"},
      {true, "Weather time.\n</think>\n\n" + w},
      {true, "Two cities.\n</think>\n\nChecking both.\n\n" + w + "\n" + w},
      {true, "Need weather.\n\n" + w + "\n" + s},
      {false, s},
      {false, "Writing it.\n\n" + f + "\nDone."},
      {false, "x <tool_call>\n<function=get_weather>\ngarbage\n</tool_call> after"},
      {true,
       "r</think>\n\nBefore.\n\n<tool_call>\n<function=get_weather>\n<parameter=location>\nPa"},
      {false, "Use <tool_call> like <tool_call>x</tool_call> or <tool_call>\n  <fun."},
      {true, "思考中 🤔…\n</think>\n\n答案是 👍🏽 ok\n" +
                 call_xml("get_weather", {{"location", "東京 🗼"}})},
      {false, "A\n" + w + "\nB  \n" + w + "\nC  \n"},
      {true, "\n\n  \n</think>\n\n\n  \n"},
      {false, call_xml("mystery", {{"x", "42"}}) + "<tool_call>\n<function=f>\n"},
      {true, "a <"},
      {false, "ends </th"},
      {false, "bad \xff\xfe bytes then cut \xe4\xb8", false},
      {false,
       "<tool_call>\n<function=get_weather>\n<parameter=location>\nno close\n</function>\n"
       "</tool_call>\n" +
           w},
      {false,
       "<<think>> <</think> <<tool_call>\n<function=get_weather>\n</function>\n</tool_call>"},
  };
}

TEST(OutputParser, SameResultForEveryCut) {
  for (const auto& tc : property_cases()) {
    auto opts = make_opts(tc.thinking);
    Collected whole = parse(opts, tc.text);
    check_deltas(whole, tc.utf8, "whole");
    for (size_t cut = 0; cut <= tc.text.size(); ++cut) {
      std::string how = "cut at " + std::to_string(cut) + " of: " + tc.text;
      Collected two = feed(opts, {tc.text.substr(0, cut), tc.text.substr(cut)});
      expect_same(two, whole, how);
      check_deltas(two, tc.utf8, how);
    }
    std::vector<std::string> bytes;
    for (char ch : tc.text) bytes.emplace_back(1, ch);
    Collected bytewise = feed(opts, bytes);
    expect_same(bytewise, whole, "byte by byte: " + tc.text);
    check_deltas(bytewise, tc.utf8, "byte by byte: " + tc.text);
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      std::mt19937 rng(seed);
      std::uniform_int_distribution<size_t> len(0, 9);
      std::vector<std::string> chunks;
      for (size_t pos = 0; pos < tc.text.size();) {
        size_t n = std::min(len(rng), tc.text.size() - pos);
        chunks.push_back(tc.text.substr(pos, n));
        pos += n;
      }
      std::string how = "random chunks, seed " + std::to_string(seed) + ": " + tc.text;
      Collected random = feed(opts, chunks);
      expect_same(random, whole, how);
      check_deltas(random, tc.utf8, how);
    }
    for (const auto& call : whole.calls)
      EXPECT_FALSE(json::parse(call.arguments, nullptr, false).is_discarded()) << call.arguments;
    if (HasFailure()) return;  // one case's failures are enough to read
  }
}

}  // namespace
}  // namespace orchid
