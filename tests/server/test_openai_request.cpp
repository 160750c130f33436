// Request parsing and validation: OpenAI bodies → ChatRequest / CompletionRequest / ..., or
// the 400 that names the field; pure functions, no model.
#include <gtest/gtest.h>

#include "orchid/server/openai_request.h"

namespace orchid::server {
namespace {

using OJson = nlohmann::ordered_json;

// The error of parsing `body` as a chat request (fails the test when it parses).
ApiError chat_error(const std::string& body) {
  auto r = parse_chat_request(body);
  EXPECT_FALSE(r.ok()) << "parsed: " << body;
  return r.ok() ? ApiError{} : r.error();
}

TEST(OpenAIRequest, ChatMinimal) {
  auto r = parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->messages.size(), 1u);
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->parse_tool_calls);
  EXPECT_TRUE(r->tools.empty());
  EXPECT_FALSE(r->sampling.max_tokens);
  EXPECT_EQ(r->sampling.top_logprobs, -1);
  EXPECT_FALSE(r->template_options.enable_thinking.has_value());
}

TEST(OpenAIRequest, ChatAllFields) {
  auto r = parse_chat_request(R"({
    "messages": [{"role":"system","content":"be brief"},
                 {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
                 {"role":"assistant","content":null,"reasoning":"thought",
                  "tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},
                 {"role":"tool","tool_call_id":"c1","content":"42"}],
    "tools": [{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
    "tool_choice": "auto", "max_tokens": 10, "max_completion_tokens": 7, "temperature": 0.5,
    "top_p": 0.9, "top_k": 20, "min_p": 0.05, "presence_penalty": 1.5, "frequency_penalty": -0.5,
    "repetition_penalty": 1.1, "seed": -3, "stop": ["x", "yz"], "logprobs": true,
    "top_logprobs": 3, "stream": true, "stream_options": {"include_usage": true},
    "chat_template_kwargs": {"enable_thinking": false, "preserve_thinking": true, "custom": 1},
    "n": 1, "user": "ignored", "parallel_tool_calls": false, "logit_bias": {}
  })");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& s = r->sampling;
  EXPECT_EQ(*s.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(*s.temperature, 0.5f);
  EXPECT_FLOAT_EQ(*s.top_p, 0.9f);
  EXPECT_EQ(*s.top_k, 20);
  EXPECT_FLOAT_EQ(*s.min_p, 0.05f);
  EXPECT_FLOAT_EQ(*s.presence_penalty, 1.5f);
  EXPECT_FLOAT_EQ(*s.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(*s.repetition_penalty, 1.1f);
  EXPECT_EQ(*s.seed, uint64_t(-3));
  EXPECT_EQ(s.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(s.top_logprobs, 3);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->parse_tool_calls);
  EXPECT_EQ(r->tools.size(), 1u);
  EXPECT_EQ(r->template_options.enable_thinking, false);
  EXPECT_EQ(r->template_options.preserve_thinking, true);
  EXPECT_EQ(r->template_options.extra_kwargs["custom"], 1);
  // "reasoning" sent back in history becomes reasoning_content for the template.
  EXPECT_EQ(r->messages[2]["reasoning_content"], "thought");
}

TEST(OpenAIRequest, StructuredOutputAndForcedCalls) {
  const std::string user = R"("messages":[{"role":"user","content":"hi"}])";
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g"}}])";
  auto r = parse_chat_request("{" + user + R"(,"response_format":{"type":"json_schema",
    "json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"b":{},"a":{}}}}}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->output.kind, OutputConstraint::Kind::json_schema);
  // The schema keeps its property order (the answer writes properties in it).
  EXPECT_EQ(r->output.schema["properties"].begin().key(), "b");
  r = parse_chat_request("{" + user + R"(,"response_format":{"type":"json_object"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->output.kind, OutputConstraint::Kind::json_object);
  r = parse_chat_request("{" + user + R"(,"response_format":{"type":"text"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->output.kind, OutputConstraint::Kind::none);
  r = parse_chat_request("{" + user + "," + tools + R"(,"tool_choice":"required","parallel_tool_calls":false})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->output.kind, OutputConstraint::Kind::tool_call);
  EXPECT_EQ(r->output.function, "");
  EXPECT_FALSE(r->parallel_tool_calls);
  // A forced call wins over a response format.
  r = parse_chat_request("{" + user + "," + tools +
                         R"(,"response_format":{"type":"json_object"},"tool_choice":{"type":"function","function":{"name":"g"}}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->output.kind, OutputConstraint::Kind::tool_call);
  EXPECT_EQ(r->output.function, "g");
  r = parse_chat_request("{" + user + R"(,"n":4,"logit_bias":{"11":-100,"3":2.5}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sampling.n, 4);
  EXPECT_EQ(r->sampling.logit_bias.size(), 2u);
}

TEST(OpenAIRequest, StopAsAString) {
  auto r = parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}],"stop":"END"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sampling.stop, std::vector<std::string>{"END"});
}

TEST(OpenAIRequest, ToolChoiceNoneDropsTheTools) {
  auto r = parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}],
    "tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->parse_tool_calls);
  EXPECT_TRUE(r->tools.empty());
}

TEST(OpenAIRequest, ReasoningEffortNoneTurnsThinkingOff) {
  auto r = parse_chat_request(
      R"({"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"none"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->template_options.enable_thinking, false);
  r = parse_chat_request(
      R"({"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"high"})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->template_options.enable_thinking.has_value());
  // Explicit kwargs win.
  r = parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"none",
    "chat_template_kwargs":{"enable_thinking":true}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->template_options.enable_thinking, true);
}

TEST(OpenAIRequest, IntegralFloatsAreIntegers) {
  auto r = parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":12.0})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->sampling.max_tokens, 12);
}

TEST(OpenAIRequest, MalformedJsonIs400) {
  for (const char* body : {"", "hello", "{", "{'a': 1}", R"({"a":1} x)",
                           R"({"messages":[{"role":"user","content":"\ud800"}]})"}) {
    ApiError e = chat_error(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_NE(e.message.find("JSON"), std::string::npos) << e.message;
  }
}

TEST(OpenAIRequest, InvalidUtf8Is400) {
  for (std::string bad : {"\xff", "\xc3", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80"}) {
    std::string body = R"({"messages":[{"role":"user","content":"ab)" + bad + R"(cd"}]})";
    EXPECT_EQ(chat_error(body).status, 400);
  }
}

TEST(OpenAIRequest, WrongTypesAndValuesName400Params) {
  const std::string user = R"("messages":[{"role":"user","content":"hi"}])";
  struct Case {
    std::string body, param;
  };
  const std::vector<Case> cases = {
      {"[1,2]", ""},
      {"null", ""},
      {"\"x\"", ""},
      {R"({"messages":"x"})", "messages"},
      {R"({"model":"m"})", "messages"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":[1]})", "messages[0]"},
      {R"({"messages":[{"content":"hi"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"wizard","content":"hi"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
       "messages[0].content[0].type"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"nope"}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
      {"{" + user + R"(,"max_tokens":"a"})", "max_tokens"},
      {"{" + user + R"(,"max_tokens":-1})", "max_tokens"},
      {"{" + user + R"(,"max_tokens":0})", "max_tokens"},
      {"{" + user + R"(,"max_tokens":1.5})", "max_tokens"},
      {"{" + user + R"(,"temperature":"hot"})", "temperature"},
      {"{" + user + R"(,"temperature":-1})", "temperature"},
      {"{" + user + R"(,"temperature":2.5})", "temperature"},
      {"{" + user + R"(,"top_p":1.5})", "top_p"},
      {"{" + user + R"(,"top_p":0})", "top_p"},
      {"{" + user + R"(,"top_k":-2})", "top_k"},
      {"{" + user + R"(,"presence_penalty":3})", "presence_penalty"},
      {"{" + user + R"(,"repetition_penalty":0})", "repetition_penalty"},
      {"{" + user + R"(,"stream":"yes"})", "stream"},
      {"{" + user + R"(,"stream_options":{"include_usage":1}})", "stream_options.include_usage"},
      {"{" + user + R"(,"stop":5})", "stop"},
      {"{" + user + R"(,"stop":[""]})", "stop"},
      {"{" + user + R"(,"stop":["a",1]})", "stop"},
      {"{" + user + R"(,"tools":"x"})", "tools"},
      {"{" + user + R"(,"tools":[{"type":"function"}]})", "tools[0].function"},
      // A forced call without tools, or of a function that is not among them.
      {"{" + user + R"(,"tool_choice":"required"})", "tool_choice"},
      {"{" + user + R"(,"tool_choice":"always"})", "tool_choice"},
      {"{" + user + R"(,"tool_choice":{"type":"function","function":{"name":"f"}}})",
       "tool_choice.function.name"},
      {"{" + user + R"(,"tools":[{"type":"function","function":{"name":"g"}}],)" +
           R"("tool_choice":{"type":"function","function":{"name":"f"}}})",
       "tool_choice.function.name"},
      {"{" + user + R"(,"tool_choice":{"type":"function"}})", "tool_choice.function"},
      {"{" + user + R"(,"parallel_tool_calls":"no"})", "parallel_tool_calls"},
      {"{" + user + R"(,"n":0})", "n"},
      {"{" + user + R"(,"n":17,"stream":true})", "n"},
      {"{" + user + R"(,"top_logprobs":2})", "top_logprobs"},
      {"{" + user + R"(,"logprobs":true,"top_logprobs":21})", "top_logprobs"},
      {"{" + user + R"(,"logit_bias":{"x":1}})", "logit_bias.x"},
      {"{" + user + R"(,"logit_bias":{"5":101}})", "logit_bias.5"},
      {"{" + user + R"(,"logit_bias":{"-5":1}})", "logit_bias.-5"},
      {"{" + user + R"(,"logit_bias":[1]})", "logit_bias"},
      {"{" + user + R"(,"response_format":{"type":"xml"}})", "response_format.type"},
      {"{" + user + R"(,"response_format":{"type":"json_schema"}})", "response_format.json_schema"},
      {"{" + user + R"(,"response_format":{"type":"json_schema","json_schema":{"schema":3}}})",
       "response_format.json_schema.schema"},
      {"{" + user + R"(,"response_format":"json"})", "response_format"},
      {"{" + user + R"(,"chat_template_kwargs":{"enable_thinking":"no"}})",
       "chat_template_kwargs.enable_thinking"},
      {"{" + user + R"(,"reasoning_effort":3})", "reasoning_effort"},
      {"{" + user + R"(,"model":7})", "model"},
  };
  for (const auto& c : cases) {
    ApiError e = chat_error(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " → " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(OpenAIRequest, Completion) {
  auto r = parse_completion_request(R"({"model":"m","prompt":"Hello","max_tokens":5,"logprobs":2,
    "stop":"x","stream":true,"echo":false})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->prompt, "Hello");
  EXPECT_FALSE(r->prompt_ids);
  EXPECT_EQ(r->sampling.top_logprobs, 2);
  EXPECT_TRUE(r->stream);
  r = parse_completion_request(R"({"prompt":["one string"]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompt, "one string");
  r = parse_completion_request(R"({"prompt":[1,2,3]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  r = parse_completion_request(R"({"prompt":"a","n":3,"logit_bias":{"7":-100}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sampling.n, 3);
  ASSERT_EQ(r->sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r->sampling.logit_bias[0], (std::pair<int32_t, float>{7, -100.f}));
  for (const char* bad : {R"({"model":"m"})", R"({"prompt":5})", R"({"prompt":"hi","n":30})",
                          R"({"prompt":"hi","response_format":{"type":"json_object"}})",
                          R"({"prompt":["a","b"]})", R"({"prompt":[-1]})",
                          R"({"prompt":"a","echo":true})", R"({"prompt":"a","logprobs":true})",
                          R"({"prompt":"a","logprobs":6})", R"({"prompt":"a","best_of":2})"}) {
    auto e = parse_completion_request(bad);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.error().status, 400);
  }
}

TEST(OpenAIRequest, TokenizeDetokenizeTemplate) {
  auto t = parse_tokenize_request(R"({"prompt":"abc","add_special_tokens":false})");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->text, "abc");
  t = parse_tokenize_request(R"({"text":"abc"})");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->text, "abc");
  t = parse_tokenize_request(
      R"({"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false})");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->text);
  EXPECT_FALSE(t->chat.options.add_generation_prompt);
  for (const char* bad :
       {R"({"prompt":5})", R"({})", R"({"prompt":"a","messages":[]})", R"({"messages":[]})"})
    EXPECT_FALSE(parse_tokenize_request(bad).ok()) << bad;

  auto d = parse_detokenize_request(R"({"tokens":[1,2,3]})");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, (std::vector<int32_t>{1, 2, 3}));
  for (const char* bad : {R"({"tokens":"x"})", R"({"tokens":[-1]})", R"({"tokens":[1e12]})",
                          R"({"tokens":[1.5]})", R"({"tokens":[4294967296]})", R"({})"})
    EXPECT_FALSE(parse_detokenize_request(bad).ok()) << bad;

  auto a = parse_template_request(R"({"messages":[{"role":"user","content":"hi"}],
    "tools":[{"type":"function","function":{"name":"f"}}]})");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->options.add_generation_prompt);
  EXPECT_EQ(a->tools.size(), 1u);
}

TEST(OpenAIRequest, ErrorBodyShape) {
  auto j = OJson::parse(error_body(bad_request("bad max_tokens", "max_tokens")));
  EXPECT_EQ(j["error"]["message"], "bad max_tokens");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "max_tokens");
  EXPECT_TRUE(j["error"]["code"].is_null());
  j = OJson::parse(error_body(bad_request("x")));
  EXPECT_TRUE(j["error"]["param"].is_null());
}

}  // namespace
}  // namespace orchid::server
