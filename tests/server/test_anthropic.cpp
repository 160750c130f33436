// The Anthropic Messages API without a server: bodies → ChatRequest (the mapping of system,
// blocks, tools, thinking; the 400s), and MessagesWriter's message objects and event streams.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "orchid/server/anthropic_request.h"
#include "orchid/server/anthropic_response.h"

namespace orchid::server {
namespace {

using OJson = nlohmann::ordered_json;

ChatRequest parse_ok(const OJson& body) {
  auto r = parse_messages_request(body.dump());
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : ChatRequest{};
}

ApiError parse_err(const OJson& body) {
  auto r = parse_messages_request(body.dump());
  EXPECT_FALSE(r.ok()) << body.dump();
  return r.ok() ? ApiError{} : r.error();
}

TEST(AnthropicRequest, MapsSystemBlocksToolsAndThinking) {
  const OJson body = {
      {"model", "claude"},
      {"max_tokens", 100},
      {"system", OJson::array({{{"type", "text"}, {"text", "A"}, {"cache_control", {{"type", "ephemeral"}}}},
                               {{"type", "text"}, {"text", "B"}}})},
      {"tools", OJson::array({{{"name", "get_weather"},
                               {"description", "Weather"},
                               {"input_schema", {{"type", "object"}}}}})},
      {"messages",
       OJson::array(
           {{{"role", "user"}, {"content", "Weather?"}},
            {{"role", "assistant"},
             {"content", OJson::array({{{"type", "thinking"}, {"thinking", "Call it."}, {"signature", "s"}},
                                       {{"type", "text"}, {"text", "Checking."}},
                                       {{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "get_weather"},
                                        {"input", {{"city", "Paris"}}}}})}},
            {{"role", "user"},
             {"content", OJson::array({{{"type", "tool_result"}, {"tool_use_id", "toolu_1"},
                                        {"content", OJson::array({{{"type", "text"}, {"text", "sunny"}}})}},
                                       {{"type", "text"}, {"text", "Thanks."}},
                                       {{"type", "text"}, {"text", "Bye."}}})}}})},
      {"stop_sequences", OJson::array({"END"})},
      {"temperature", 0.5},
      {"top_k", 20},
      {"stream", true}};
  const ChatRequest r = parse_ok(body);
  const OJson want = OJson::array(
      {{{"role", "system"}, {"content", "A\n\nB"}},
       {{"role", "user"}, {"content", "Weather?"}},
       {{"role", "assistant"},
        {"content", "Checking."},
        {"reasoning_content", "Call it."},
        {"tool_calls", OJson::array({{{"id", "toolu_1"},
                                      {"type", "function"},
                                      {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "sunny"}},
       {{"role", "user"}, {"content", "Thanks.\n\nBye."}}});
  EXPECT_EQ(r.messages, want) << r.messages.dump(1);
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0]["function"]["parameters"], OJson({{"type", "object"}}));
  EXPECT_EQ(r.tools[0]["function"]["description"], "Weather");
  EXPECT_TRUE(r.parse_tool_calls);
  EXPECT_EQ(r.sampling.max_tokens, 100);
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"END"});
  EXPECT_FLOAT_EQ(*r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 20);
  EXPECT_TRUE(r.stream);
  // Thinking off unless asked (Anthropic's default); past thinking kept for the cache.
  EXPECT_EQ(r.template_options.enable_thinking, false);
  EXPECT_EQ(r.template_options.preserve_thinking, true);
}

// System notes in `messages`: before any turn they join the system prompt; later, a user turn.
TEST(AnthropicRequest, SystemMessagesBetweenTurns) {
  const OJson body = {{"max_tokens", 8},
                      {"system", "S"},
                      {"messages", OJson::array({{{"role", "system"}, {"content", "early"}},
                                                 {{"role", "user"}, {"content", "hi"}},
                                                 {{"role", "system"}, {"content", OJson::array({{{"type", "text"}, {"text", "late"}}})}},
                                                 {{"role", "assistant"}, {"content", "ok"}}})}};
  const OJson want = OJson::array({{{"role", "system"}, {"content", "S\n\nearly"}},
                                   {{"role", "user"}, {"content", "hi"}},
                                   {{"role", "user"}, {"content", "late"}},
                                   {{"role", "assistant"}, {"content", "ok"}}});
  EXPECT_EQ(parse_ok(body).messages, want) << parse_ok(body).messages.dump();
}

TEST(AnthropicRequest, ThinkingAndToolChoice) {
  OJson b = {{"max_tokens", 8}, {"messages", OJson::array({{{"role", "user"}, {"content", "x"}}})}};
  b["thinking"] = {{"type", "enabled"}, {"budget_tokens", 1024}};
  EXPECT_EQ(parse_ok(b).template_options.enable_thinking, true);
  b["thinking"] = {{"type", "disabled"}};
  EXPECT_EQ(parse_ok(b).template_options.enable_thinking, false);
  b["tools"] = OJson::array({{{"name", "f"}, {"input_schema", {{"type", "object"}}}}});
  b["tool_choice"] = {{"type", "none"}};
  const ChatRequest none = parse_ok(b);
  EXPECT_TRUE(none.tools.empty());
  EXPECT_FALSE(none.parse_tool_calls);
  // count_tokens needs no max_tokens.
  b.erase("max_tokens");
  EXPECT_TRUE(parse_messages_request(b.dump(), /*count_tokens=*/true).ok());
}

TEST(AnthropicRequest, BadBodiesAre400sNamingTheField) {
  const OJson user = OJson::array({{{"role", "user"}, {"content", "x"}}});
  struct Case {
    OJson body;
    std::string param;
  };
  const Case cases[] = {
      {{{"messages", user}}, "max_tokens"},
      {{{"max_tokens", 0}, {"messages", user}}, "max_tokens"},
      {{{"max_tokens", 8}}, "messages"},
      {{{"max_tokens", 8}, {"messages", OJson::array()}}, "messages"},
      {{{"max_tokens", 8}, {"messages", OJson::array({{{"role", "tool"}, {"content", "x"}}})}},
       "messages[0].role"},
      {{{"max_tokens", 8},
        {"messages", OJson::array({{{"role", "user"}, {"content", OJson::array({{{"type", "image"}}})}}})}},
       "messages[0].content[0].type"},
      {{{"max_tokens", 8},
        {"messages", OJson::array({{{"role", "user"},
                                    {"content", OJson::array({{{"type", "tool_use"}, {"name", "f"}}})}}})}},
       "messages[0].content[0].type"},
      {{{"max_tokens", 8},
        {"messages", OJson::array({{{"role", "assistant"},
                                    {"content", OJson::array({{{"type", "tool_use"}, {"name", "f"}, {"input", 3}}})}}})}},
       "messages[0].content[0].input"},
      {{{"max_tokens", 8}, {"messages", user}, {"tools", OJson::array({{{"name", "f"}}})}},
       "tools[0].input_schema"},
      {{{"max_tokens", 8}, {"messages", user}, {"tools", OJson::array({{{"type", "bash_20250124"}, {"name", "bash"}}})}},
       "tools[0].type"},
      {{{"max_tokens", 8}, {"messages", user}, {"tool_choice", {{"type", "any"}}}}, "tool_choice"},
      {{{"max_tokens", 8}, {"messages", user}, {"thinking", {{"type", "maybe"}}}}, "thinking.type"},
      {{{"max_tokens", 8}, {"messages", user}, {"stop_sequences", OJson::array({""})}}, "stop_sequences"},
      {{{"max_tokens", 8}, {"messages", user}, {"system", 3}}, "system"},
  };
  for (const Case& c : cases) {
    const ApiError e = parse_err(c.body);
    EXPECT_EQ(e.status, 400) << c.body.dump();
    EXPECT_EQ(e.param, c.param) << c.body.dump() << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

// The events of a stream, as (name, data) pairs.
std::vector<std::pair<std::string, OJson>> events(const std::string& wire) {
  std::vector<std::pair<std::string, OJson>> out;
  size_t at = 0;
  while (at < wire.size()) {
    const size_t end = wire.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << wire.substr(at);
    if (end == std::string::npos) break;
    const std::string block = wire.substr(at, end - at);
    const size_t nl = block.find('\n');
    EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
    EXPECT_EQ(block.compare(nl + 1, 6, "data: "), 0) << block;
    out.emplace_back(block.substr(7, nl - 7), OJson::parse(block.substr(nl + 7)));
    at = end + 2;
  }
  return out;
}

TEST(MessagesWriter, StreamsBlocksInOrderWithMatchingIndexes) {
  MessagesWriter w({"msg_1", "m", /*stream=*/true, /*input_tokens=*/20});
  std::string wire = w.start();
  wire += w.add(ParserDelta{"Let me ", "", {}});
  wire += w.add(ParserDelta{"think.", "Hi", {}});
  wire += w.add(ParserDelta{"", " there", {ToolCall{"call_abc", "f", R"({"x":1})"}}});
  wire += w.finish("tool_calls", Usage{20, 9, 16});
  const auto ev = events(wire);
  std::vector<std::string> names;
  for (const auto& [n, d] : ev) {
    names.push_back(n);
    EXPECT_EQ(d["type"], n);
  }
  const std::vector<std::string> want = {
      "message_start",       "ping",          "content_block_start", "content_block_delta",
      "content_block_delta", "content_block_stop", "content_block_start", "content_block_delta",
      "content_block_delta", "content_block_stop", "content_block_start", "content_block_delta",
      "content_block_stop",  "message_delta", "message_stop"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(ev[0].second["message"]["usage"]["input_tokens"], 20);
  EXPECT_EQ(ev[2].second["content_block"]["type"], "thinking");
  EXPECT_EQ(ev[4].second["delta"], OJson({{"type", "thinking_delta"}, {"thinking", "think."}}));
  EXPECT_EQ(ev[6].second["index"], 1);
  EXPECT_EQ(ev[8].second["delta"], OJson({{"type", "text_delta"}, {"text", " there"}}));
  EXPECT_EQ(ev[10].second["content_block"],
            OJson({{"type", "tool_use"}, {"id", "toolu_abc"}, {"name", "f"}, {"input", OJson::object()}}));
  EXPECT_EQ(ev[11].second["delta"], OJson({{"type", "input_json_delta"}, {"partial_json", R"({"x":1})"}}));
  EXPECT_EQ(ev[12].second["index"], 2);
  EXPECT_EQ(ev[13].second["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(ev[13].second["usage"], OJson::parse(R"({"input_tokens":4,"cache_creation_input_tokens":0,
                                                     "cache_read_input_tokens":16,"output_tokens":9})"));
  EXPECT_EQ(w.tool_call_count(), 1);
}

TEST(MessagesWriter, WholeMessageStopReasonsAndUsage) {
  MessagesWriter w({"msg_1", "m", /*stream=*/false, 20});
  EXPECT_EQ(w.start(), "");
  EXPECT_EQ(w.add(ParserDelta{"Hm.", "Hello ", {}}), "");
  EXPECT_EQ(w.add(ParserDelta{"", "there", {}}), "");
  w.stopped_by("END");
  const OJson m = OJson::parse(w.finish("stop", Usage{20, 5, 16}));
  EXPECT_EQ(m["id"], "msg_1");
  EXPECT_EQ(m["content"], OJson::parse(R"([{"type":"thinking","thinking":"Hm.","signature":""},
                                           {"type":"text","text":"Hello there"}])"));
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "END");
  EXPECT_EQ(m["usage"], OJson::parse(R"({"input_tokens":4,"cache_creation_input_tokens":0,
                                         "cache_read_input_tokens":16,"output_tokens":5})"));
  for (const auto& [reason, want] : {std::pair<const char*, const char*>{"stop", "end_turn"},
                                     {"length", "max_tokens"},
                                     {"tool_calls", "tool_use"}}) {
    MessagesWriter v({"msg_2", "m", false, 1});
    EXPECT_EQ(OJson::parse(v.finish(reason, Usage{1, 1, 0}))["stop_reason"], want) << reason;
  }
}

TEST(MessagesWriter, ErrorsInAnthropicsShape) {
  const OJson e = OJson::parse(anthropic_error_body(ApiError{401, "x", "no key", "", ""}));
  EXPECT_EQ(e, OJson::parse(R"({"type":"error","error":{"type":"authentication_error","message":"no key"}})"));
  EXPECT_EQ(OJson::parse(anthropic_error_body(bad_request("bad")))["error"]["type"],
            "invalid_request_error");
  EXPECT_EQ(OJson::parse(anthropic_error_body(ApiError{503, "x", "busy", "", ""}))["error"]["type"],
            "overloaded_error");
  const std::string frame = anthropic_stream_error(bad_request("bad"));
  EXPECT_EQ(frame.rfind("event: error\ndata: {", 0), 0u) << frame;
}

}  // namespace
}  // namespace orchid::server
