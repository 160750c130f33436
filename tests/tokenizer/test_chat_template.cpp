// ChatTemplate: where the template comes from (chat_template.jinja, chat_template.json,
// tokenizer_config.json string or named list), the fallback to the built-in Qwen3.6 template
// with one warning, message normalisation, the variables passed, and `orchid template`.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "../test_util.h"
#include "orchid/tokenizer/chat_template.h"

namespace orchid {
namespace {

using OJson = nlohmann::ordered_json;
using test::contains;
using test::read_text;
using test::ScratchDir;
using test::shell_quote;
using test::write_text;

std::string template_file(const std::string& name) {
  return std::string(ORCHID_SOURCE_DIR) + "/tests/tokenizer/template_compare/templates/" + name;
}

OJson plain_chat() {
  return OJson::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris.", "reasoning_content": "Simple."},
    {"role": "user", "content": "And of Germany?"}])");
}

constexpr const char* kPlainChatPrompt =
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\nThe capital of France is Paris.<|im_end|>\n"
    "<|im_start|>user\nAnd of Germany?<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n";

// Loads `dir`, returning the template and what was printed on stderr.
std::pair<Expected<ChatTemplate>, std::string> load_capturing(const std::string& dir) {
  ::testing::internal::CaptureStderr();
  auto t = ChatTemplate::load(dir);
  return {std::move(t), ::testing::internal::GetCapturedStderr()};
}

int count(const std::string& text, const std::string& piece) {
  int n = 0;
  for (size_t p = text.find(piece); p != std::string::npos; p = text.find(piece, p + 1)) ++n;
  return n;
}

TEST(ChatTemplate, BuiltinIsTheOfficialQwen36Template) {
  const ChatTemplate t = ChatTemplate::builtin();
  EXPECT_EQ(t.source(), read_text(template_file("qwen3.6-35b-a3b.jinja")))
      << "re-run tests/tokenizer/template_compare/embed_builtin.py";
  EXPECT_FALSE(t.is_builtin_fallback());
  auto text = t.render(plain_chat(), OJson(), {});
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_EQ(*text, kPlainChatPrompt);
}

TEST(ChatTemplate, LoadPrefersChatTemplateJinja) {
  ScratchDir dir;
  write_text(dir / "chat_template.jinja", "from jinja file\n");
  write_text(dir / "tokenizer_config.json", R"({"chat_template": "from config"})");
  auto [t, err] = load_capturing(dir.str());
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(err, "");
  EXPECT_FALSE(t->is_builtin_fallback());
  EXPECT_EQ(*t->render(plain_chat(), OJson(), {}), "from jinja file");  // trailing \n dropped
}

TEST(ChatTemplate, LoadFromChatTemplateJson) {
  ScratchDir dir;
  write_text(dir / "chat_template.json", R"({"chat_template": "{{ messages|length }}"})");
  auto [t, err] = load_capturing(dir.str());
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(err, "");
  EXPECT_EQ(*t->render(plain_chat(), OJson(), {}), "4");
}

TEST(ChatTemplate, LoadFromTokenizerConfigString) {
  ScratchDir dir;
  write_text(dir / "tokenizer_config.json",
             R"({"bos_token": null, "eos_token": {"content": "<|im_end|>", "lstrip": false},
                 "chat_template": "{{ messages[0].role }}|{{ bos_token is defined }}|{{ eos_token }}"})");
  auto [t, err] = load_capturing(dir.str());
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(err, "");
  EXPECT_EQ(*t->render(plain_chat(), OJson(), {}), "system|False|<|im_end|>");
}

TEST(ChatTemplate, LoadFromTokenizerConfigNamedList) {
  ScratchDir dir;
  write_text(dir / "tokenizer_config.json", R"({"chat_template": [
      {"name": "tool_use", "template": "tools"}, {"name": "default", "template": "default one"}]})");
  auto [t, err] = load_capturing(dir.str());
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(err, "");
  EXPECT_EQ(*t->render(plain_chat(), OJson(), {}), "default one");
}

// Each way of having no usable template: one warning, then the built-in Qwen3.6 behaviour.
TEST(ChatTemplate, UnusableTemplatesFallBackWithOneWarning) {
  struct Case {
    const char* file;
    const char* text;
    const char* why;  // in the warning
  };
  const Case cases[] = {
      {"tokenizer_config.json", R"({"eos_token": "<|im_end|>"})", "no chat template"},
      {"tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})",
       "none called \"default\""},
      {"tokenizer_config.json", "{not json", "not a JSON object"},
      {"chat_template.jinja", "{% generation %}{{ m }}{% endgeneration %}",
       "unknown tag 'generation'"},
      {"chat_template.jinja", "{{ messages[0].content.title() }}", "str.title() is not supported"},
      {"chat_template.jinja",  // only the probe with tool calls reaches it
       "{% for m in messages %}{% if m.tool_calls %}{{ m.role.zfill(9) }}{% endif %}{% endfor %}",
       "str.zfill() is not supported"},
      {"chat_template.jinja", "{% for m in messages %}{{ m|wordcount }}{% endfor %}",
       "No filter named 'wordcount'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    ScratchDir dir(std::to_string(&c - cases));
    write_text(dir / c.file, c.text);
    auto [t, err] = load_capturing(dir.str());
    ASSERT_TRUE(t.ok()) << t.message();
    EXPECT_TRUE(t->is_builtin_fallback());
    EXPECT_EQ(count(err, "orchid: warning: "), 1) << err;
    EXPECT_TRUE(contains(err, c.why));
    EXPECT_TRUE(contains(err, "using the built-in Qwen3.6 template"));
    auto text = t->render(plain_chat(), OJson(), {});
    ASSERT_TRUE(text.ok()) << text.message();
    EXPECT_EQ(*text, kPlainChatPrompt);
    // Rendering again does not warn again.
    ::testing::internal::CaptureStderr();
    EXPECT_TRUE(t->render(plain_chat(), OJson(), {}).ok());
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  }
}

// A template that fails on the probe by its own doing (raise_exception, a TypeError) is kept:
// it fails the same way under transformers, so falling back would hide that.
TEST(ChatTemplate, TemplateThatFailsOnTheProbeIsKept) {
  ScratchDir dir;
  write_text(dir / "chat_template.jinja", "{{ messages|length + 'x' }}");
  auto [t, err] = load_capturing(dir.str());
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(err, "");
  EXPECT_FALSE(t->is_builtin_fallback());
  auto text = t->render(plain_chat(), OJson(), {});
  ASSERT_FALSE(text.ok());
  EXPECT_TRUE(contains(text.message(), "TypeError: unsupported operand type(s) for +"));
}

TEST(ChatTemplate, TemplateThatRaisesOnTheProbeIsKept) {
  ScratchDir dir;
  write_text(dir / "chat_template.jinja",
             "{% if messages[0].role != 'system' %}{{ raise_exception('need a system turn') }}"
             "{% endif %}ok");
  auto [t, err] = load_capturing(dir.str());
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(err, "");
  EXPECT_FALSE(t->is_builtin_fallback());
  EXPECT_EQ(*t->render(plain_chat(), OJson(), {}), "ok");
  auto bad = t->render(OJson::parse(R"([{"role": "user", "content": "x"}])"), OJson(), {});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.message(), "need a system turn"));
  // Render errors reach clients: they name the model's file, not where the server keeps it.
  EXPECT_TRUE(contains(bad.message(), "chat_template.jinja")) << bad.message();
  EXPECT_FALSE(contains(bad.message(), dir.str())) << bad.message();
}

TEST(ChatTemplate, LoadMissingDirectoryIsAnError) {
  auto t = ChatTemplate::load("/nonexistent/orchid/model");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(contains(t.message(), "/nonexistent/orchid/model"));
}

TEST(ChatTemplate, FromSourceReportsSyntaxErrorsWithLine) {
  auto t = ChatTemplate::from_source("line one\n{% if x %}\n{{ y + }}\n{% endif %}");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(contains(t.message(), ":3: syntax error")) << t.message();
}

TEST(ChatTemplate, DeveloperRoleIsRenderedAsSystem) {
  const ChatTemplate t = ChatTemplate::builtin();
  OJson dev = plain_chat();
  dev[0]["role"] = "developer";
  auto a = t.render(dev, OJson(), {});
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(*a, kPlainChatPrompt);
}

TEST(ChatTemplate, StringToolArgumentsAreParsed) {
  const ChatTemplate t = ChatTemplate::builtin();
  auto with_args = [](OJson args) {
    OJson m = OJson::parse(R"([{"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "get_weather"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])");
    m[1]["tool_calls"][0]["function"]["arguments"] = std::move(args);
    return m;
  };
  auto object = t.render(
      with_args(OJson::parse(R"({"city": "Zürich", "days": 2, "metric": true})")), OJson(), {});
  auto string =
      t.render(with_args(R"({"city": "Zürich", "days": 2, "metric": true})"), OJson(), {});
  ASSERT_TRUE(object.ok()) << object.message();
  ASSERT_TRUE(string.ok()) << string.message();
  EXPECT_EQ(*object, *string);
  EXPECT_TRUE(contains(*string,
                       "<parameter=city>\nZürich\n</parameter>\n<parameter=days>\n2\n"
                       "</parameter>\n<parameter=metric>\ntrue\n</parameter>"));
  auto bad = t.render(with_args("{city: Paris"), OJson(), {});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.message(), "messages[1].tool_calls[0] arguments are not valid JSON"));
  // Nested past kMaxJsonDepth: refused before parsing (the template's tojson recurses).
  const std::string deep = "{\"a\":" + std::string(20000, '[') + std::string(20000, ']') + "}";
  auto too_deep = t.render(with_args(deep), OJson(), {});
  ASSERT_FALSE(too_deep.ok());
  EXPECT_TRUE(contains(too_deep.message(), "levels deep")) << too_deep.message();
}

TEST(ChatTemplate, VariablesPassedLikeTransformers) {
  auto t = ChatTemplate::from_source(
      "{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|"
      "{{ enable_thinking is defined }}|{{ preserve_thinking }}|{{ custom }}|{{ messages|length "
      "}}");
  ASSERT_TRUE(t.ok()) << t.message();
  const OJson msgs = plain_chat();
  EXPECT_EQ(*t->render(msgs, OJson::array(), {}), "True|True|True|False|||4");
  EXPECT_EQ(*t->render(msgs, OJson(), {}), "True|True|True|False|||4");
  ChatTemplateOptions opts;
  opts.add_generation_prompt = false;
  opts.enable_thinking = false;
  opts.preserve_thinking = true;
  opts.extra_kwargs = {{"custom", "x"}, {"preserve_thinking", false}};  // the option wins
  EXPECT_EQ(*t->render(msgs, OJson::parse(R"([{"type": "function"}])"), opts),
            "False|True|False|True|True|x|4");
}

TEST(ChatTemplate, BadInputsAreErrors) {
  const ChatTemplate t = ChatTemplate::builtin();
  EXPECT_FALSE(t.render(OJson::object(), OJson(), {}).ok());
  EXPECT_FALSE(t.render(OJson::array({"not an object"}), OJson(), {}).ok());
  EXPECT_FALSE(t.render(plain_chat(), OJson::object(), {}).ok());
  ChatTemplateOptions opts;
  opts.extra_kwargs = OJson::array();
  EXPECT_FALSE(t.render(plain_chat(), OJson(), opts).ok());
  auto empty = t.render(OJson::array(), OJson(), {});
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(contains(empty.message(), "No messages provided."));
}

// ---- `orchid template` ----

TEST(ChatTemplateCli, PrintsThePromptExactly) {
  ScratchDir dir;
  write_text(dir / "chat_template.jinja", read_text(template_file("qwen3.6-35b-a3b.jinja")));
  write_text(dir / "messages.json", plain_chat().dump());
  auto r = test::run_orchid("template -m " + shell_quote(dir.str()) + " --messages " +
                            shell_quote(dir / "messages.json"));
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  EXPECT_EQ(r.output, kPlainChatPrompt);  // no newline added

  auto nothink = test::run_orchid("template -m " + shell_quote(dir.str()) + " --messages " +
                                  shell_quote(dir / "messages.json") + " --no-thinking");
  ASSERT_TRUE(nothink.exited && nothink.exit_code == 0) << nothink.describe();
  const std::string tail =
      "<|im_start|>user\nAnd of Germany?<|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  ASSERT_GE(nothink.output.size(), tail.size());
  EXPECT_EQ(nothink.output.substr(nothink.output.size() - tail.size()), tail);
}

TEST(ChatTemplateCli, RequestBodyAndToolsFile) {
  ScratchDir dir;
  write_text(dir / "chat_template.jinja", read_text(template_file("qwen3.6-35b-a3b.jinja")));
  write_text(dir / "body.json", R"({"messages": [{"role": "user", "content": "Weather?"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Météo"}}]})");
  write_text(dir / "tools.json", R"([{"type": "function", "function": {"name": "other"}}])");
  auto body = test::run_orchid("template -m " + shell_quote(dir.str()) + " --messages " +
                               shell_quote(dir / "body.json"));
  ASSERT_TRUE(body.exited && body.exit_code == 0) << body.describe();
  EXPECT_TRUE(
      contains(body.output,
               "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
               "\"description\": \"Météo\"}}\n</tools>"));
  auto tools = test::run_orchid("template -m " + shell_quote(dir.str()) + " --messages " +
                                shell_quote(dir / "body.json") + " --tools " +
                                shell_quote(dir / "tools.json"));
  ASSERT_TRUE(tools.exited && tools.exit_code == 0) << tools.describe();
  EXPECT_TRUE(contains(tools.output, "\"name\": \"other\""));
  EXPECT_FALSE(contains(tools.output, "get_weather"));
}

TEST(ChatTemplateCli, Errors) {
  ScratchDir dir;
  write_text(dir / "bad.json", "[{]");
  write_text(dir / "system_late.json",
             R"([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])");
  const std::string m = " -m " + shell_quote(dir.str());
  auto missing = test::run_orchid("template" + m + " --messages " + shell_quote(dir / "nope.json"));
  EXPECT_TRUE(missing.exited && missing.exit_code == 1) << missing.describe();
  EXPECT_TRUE(contains(missing.output, "orchid: error: --messages: cannot open"));
  auto bad = test::run_orchid("template" + m + " --messages " + shell_quote(dir / "bad.json"));
  EXPECT_TRUE(bad.exited && bad.exit_code == 1) << bad.describe();
  EXPECT_TRUE(contains(bad.output, "is not valid JSON"));
  // No template in DIR: a warning, the built-in template, which raises for this conversation.
  auto late =
      test::run_orchid("template" + m + " --messages " + shell_quote(dir / "system_late.json"));
  EXPECT_TRUE(late.exited && late.exit_code == 1) << late.describe();
  EXPECT_EQ(count(late.output, "orchid: warning: "), 1) << late.output;
  EXPECT_TRUE(contains(late.output, "System message must be at the beginning."));
  auto nodir =
      test::run_orchid("template -m /nonexistent/dir --messages " + shell_quote(dir / "bad.json"));
  EXPECT_TRUE(nodir.exited && nodir.exit_code == 1) << nodir.describe();
}

}  // namespace
}  // namespace orchid
