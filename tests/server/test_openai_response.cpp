// Response formatting: SSE framing, chat.completion.chunk deltas (role first, reasoning also
// as "reasoning", tool calls with index/id/type/function), the usage chunk, [DONE], and the
// non-streaming chat.completion / text_completion bodies.
#include <gtest/gtest.h>

#include "orchid/server/openai_response.h"

namespace orchid::server {
namespace {

using OJson = nlohmann::ordered_json;

// The JSON payloads of SSE frames ("[DONE]" kept as a string).
std::vector<OJson> parse_sse(const std::string& text) {
  std::vector<OJson> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated frame in " << text;
    if (end == std::string::npos) break;
    const std::string frame = text.substr(pos, end - pos);
    EXPECT_EQ(frame.rfind("data: ", 0), 0u) << frame;
    const std::string payload = frame.substr(6);
    out.push_back(payload == "[DONE]" ? OJson("[DONE]") : OJson::parse(payload));
    pos = end + 2;
  }
  return out;
}

ResponseOptions chat_opts(bool stream, bool usage = false) {
  return ResponseOptions{Endpoint::chat, "chatcmpl-abc", 1700000000, "tiny", stream, usage, false};
}

TEST(OpenAIResponse, SseFrame) {
  EXPECT_EQ(sse_frame(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  EXPECT_EQ(make_response_id("chatcmpl-").size(), 9u + 24u);
  EXPECT_NE(make_response_id("x"), make_response_id("x"));
}

TEST(OpenAIResponse, StreamedChat) {
  ResponseWriter w(chat_opts(true, true));
  std::string wire = w.start();
  wire += w.add(ParserDelta{"Let me think.", "", {}});
  wire += w.add(ParserDelta{});  // nothing: no frame
  wire += w.add(ParserDelta{"", "Hello", {}});
  wire += w.add(ParserDelta{"", "", {ToolCall{"call_1", "get_weather", R"({"city":"Paris"})"}}});
  wire += w.add(ParserDelta{"", "", {ToolCall{"call_2", "f", "{}"}}});
  wire += w.finish("tool_calls", Usage{20, 7, 16});
  auto ev = parse_sse(wire);
  ASSERT_EQ(ev.size(), 8u) << wire;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    EXPECT_EQ(ev[i]["id"], "chatcmpl-abc");
    EXPECT_EQ(ev[i]["object"], "chat.completion.chunk");
    EXPECT_EQ(ev[i]["created"], 1700000000);
    EXPECT_EQ(ev[i]["model"], "tiny");
  }
  EXPECT_EQ(ev[0]["choices"][0]["delta"], (OJson{{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(ev[0]["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(ev[0]["usage"].is_null());  // include_usage: null until the last chunk
  EXPECT_EQ(ev[1]["choices"][0]["delta"]["reasoning_content"], "Let me think.");
  EXPECT_EQ(ev[1]["choices"][0]["delta"]["reasoning"], "Let me think.");
  EXPECT_FALSE(ev[1]["choices"][0]["delta"].contains("content"));
  EXPECT_EQ(ev[2]["choices"][0]["delta"], (OJson{{"content", "Hello"}}));
  const OJson call = ev[3]["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(call,
            (OJson{{"index", 0},
                   {"id", "call_1"},
                   {"type", "function"},
                   {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}}}));
  EXPECT_EQ(ev[4]["choices"][0]["delta"]["tool_calls"][0]["index"], 1);
  EXPECT_EQ(ev[5]["choices"][0]["delta"], OJson::object());
  EXPECT_EQ(ev[5]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(ev[6]["choices"], OJson::array());
  EXPECT_EQ(ev[6]["usage"], (OJson{{"prompt_tokens", 20},
                                   {"completion_tokens", 7},
                                   {"total_tokens", 27},
                                   {"prompt_tokens_details", {{"cached_tokens", 16}}}}));
  EXPECT_EQ(ev[7], "[DONE]");
  EXPECT_EQ(w.tool_call_count(), 2);
}

TEST(OpenAIResponse, StreamedChatWithoutUsageHasNoUsageField) {
  ResponseWriter w(chat_opts(true, false));
  std::string wire = w.start() + w.add(ParserDelta{"", "x", {}}) + w.finish("stop", Usage{1, 1, 0});
  auto ev = parse_sse(wire);
  ASSERT_EQ(ev.size(), 4u);
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(ev[i].contains("usage"));
  EXPECT_EQ(ev[2]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(ev[3], "[DONE]");
}

TEST(OpenAIResponse, ChatCompletionBody) {
  ResponseWriter w(chat_opts(false));
  EXPECT_EQ(w.start(), "");
  EXPECT_EQ(w.add(ParserDelta{"think", "", {}}), "");
  EXPECT_EQ(w.add(ParserDelta{"ing", "Hi", {}}), "");
  auto j = OJson::parse(w.finish("stop", Usage{5, 3, 0}));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"], "chatcmpl-abc");
  const OJson& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], "Hi");
  EXPECT_EQ(c["message"]["reasoning_content"], "thinking");
  EXPECT_EQ(c["message"]["reasoning"], "thinking");
  EXPECT_FALSE(c["message"].contains("tool_calls"));
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["total_tokens"], 8);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST(OpenAIResponse, ToolCallsMakeContentNull) {
  ResponseWriter w(chat_opts(false));
  w.add(ParserDelta{"", "", {ToolCall{"call_x", "f", R"({"a":1})"}}});
  auto j = OJson::parse(w.finish("tool_calls", Usage{}));
  const OJson& m = j["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_FALSE(m.contains("reasoning_content"));
  EXPECT_EQ(m["tool_calls"][0],
            (OJson{{"id", "call_x"},
                   {"type", "function"},
                   {"function", {{"name", "f"}, {"arguments", R"({"a":1})"}}}}));
}

TEST(OpenAIResponse, ChatLogprobs) {
  ResponseOptions o = chat_opts(false);
  o.logprobs = true;
  ResponseWriter w(o);
  w.add(ParserDelta{"", "H\xc3", {}},
        {TokenLogprob{"H\xc3", -0.5f, {{"H\xc3", -0.5f}, {"x", -2.f}}}});
  auto j = OJson::parse(w.finish("stop", Usage{}));
  const OJson& lp = j["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(lp["token"], "H\xef\xbf\xbd");   // the partial character shows as U+FFFD
  EXPECT_EQ(lp["bytes"], (OJson{72, 195}));  // and stays exact in bytes
  EXPECT_FLOAT_EQ(lp["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(lp["top_logprobs"].size(), 2u);
  EXPECT_EQ(lp["top_logprobs"][1]["token"], "x");
}

TEST(OpenAIResponse, Completions) {
  ResponseOptions o{Endpoint::completion, "cmpl-1", 7, "tiny", true, true, true};
  ResponseWriter w(o);
  EXPECT_EQ(w.start(), "");  // no role chunk for completions
  std::string wire = w.add(ParserDelta{"", "Hel", {}}, {TokenLogprob{"Hel", -1.f, {}}});
  wire += w.add(ParserDelta{"", "lo", {}}, {TokenLogprob{"lo", -2.f, {{"lo", -2.f}}}});
  wire += w.finish("length", Usage{3, 2, 0});
  auto ev = parse_sse(wire);
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0]["object"], "text_completion");
  EXPECT_EQ(ev[0]["choices"][0]["text"], "Hel");
  EXPECT_EQ(ev[1]["choices"][0]["logprobs"]["text_offset"][0], 3);
  EXPECT_EQ(ev[1]["choices"][0]["logprobs"]["top_logprobs"][0]["lo"], -2.0);
  EXPECT_EQ(ev[2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(ev[3]["usage"]["completion_tokens"], 2);
  EXPECT_EQ(ev[4], "[DONE]");

  ResponseWriter whole(
      ResponseOptions{Endpoint::completion, "cmpl-2", 7, "tiny", false, false, false});
  whole.add(ParserDelta{"", "Hello", {}});
  auto j = OJson::parse(whole.finish("stop", Usage{1, 1, 0}));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST(OpenAIResponse, StreamError) {
  auto ev = parse_sse(ResponseWriter::stream_error(ApiError{500, "server_error", "boom", "", ""}));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0]["error"]["message"], "boom");
  EXPECT_EQ(ev[1], "[DONE]");
}

}  // namespace
}  // namespace orchid::server
