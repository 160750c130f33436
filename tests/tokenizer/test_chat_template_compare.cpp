// The proof that orchid renders prompts exactly like Python Jinja2 under transformers: every
// conversation of tests/tokenizer/template_compare/conversations.json, rendered with each
// template there, byte-identical to expected.json (written by render_ref.py from
// python3-jinja2). Where Python raised, orchid must fail too; for the templates' own
// raise_exception the message must be the same.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "orchid/tokenizer/chat_template.h"
#include "orchid/tokenizer/jinja/template.h"

namespace orchid {
namespace {

using OJson = nlohmann::ordered_json;

std::string compare_dir() {
  return std::string(ORCHID_SOURCE_DIR) + "/tests/tokenizer/template_compare/";
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

OJson read_json(const std::string& path) {
  return OJson::parse(read_file(path));
}

// Where two renders first differ, with some context, for a readable failure.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i < 40 ? 0 : i - 40;
  return "first difference at byte " + std::to_string(i) +
         "\n  python: " + OJson(want.substr(from, 120)).dump() +
         "\n  orchid: " + OJson(got.substr(from, 120)).dump();
}

// A conversation marked "raw" goes straight to the interpreter with the variables transformers
// would pass (no normalisation); the others go through ChatTemplate::render.
Expected<std::string> render(const ChatTemplate& chat, const jinja::Template& raw,
                             const OJson& conv) {
  const OJson tools = conv.value("tools", OJson());
  if (conv.value("raw", false)) {
    OJson vars = conv.value("kwargs", OJson::object());
    vars["messages"] = conv["messages"];
    vars["tools"] = tools;
    vars["documents"] = nullptr;
    vars["add_generation_prompt"] = conv.value("add_generation_prompt", true);
    for (const char* key : {"enable_thinking", "preserve_thinking"})
      if (conv.contains(key)) vars[key] = conv[key];
    return raw.render(vars);
  }
  ChatTemplateOptions opts;
  opts.add_generation_prompt = conv.value("add_generation_prompt", true);
  if (conv.contains("enable_thinking")) opts.enable_thinking = conv["enable_thinking"].get<bool>();
  if (conv.contains("preserve_thinking"))
    opts.preserve_thinking = conv["preserve_thinking"].get<bool>();
  opts.extra_kwargs = conv.value("kwargs", OJson::object());
  return chat.render(conv["messages"], tools, opts);
}

void compare_template(const std::string& file) {
  const OJson convs = read_json(compare_dir() + "conversations.json");
  const OJson expected = read_json(compare_dir() + "expected.json")["templates"][file];
  ASSERT_GE(convs.size(), 50u);
  ASSERT_EQ(expected.size(), convs.size()) << "expected.json is stale: run render_ref.py";
  const std::string source = read_file(compare_dir() + "templates/" + file);
  auto chat = ChatTemplate::from_source(source);
  ASSERT_TRUE(chat.ok()) << chat.message();
  auto raw = jinja::Template::parse(source, file);
  ASSERT_TRUE(raw.ok()) << raw.message();
  int identical = 0, errors = 0;
  for (const OJson& conv : convs) {
    const std::string name = conv["name"];
    SCOPED_TRACE(file + " / " + name);
    ASSERT_TRUE(expected.contains(name)) << "expected.json is stale: run render_ref.py";
    const OJson& want = expected[name];
    auto got = render(*chat, *raw, conv);
    if (want.contains("text")) {
      const std::string text = want["text"];
      ASSERT_TRUE(got.ok()) << got.message();
      EXPECT_EQ(*got, text) << first_difference(text, *got);
      identical += *got == text;
    } else {
      ASSERT_FALSE(got.ok()) << "Python raised " << want["error"] << ": " << want["message"]
                             << "\norchid rendered: " << *got;
      if (want["error"] == "TemplateError") {
        EXPECT_NE(got.message().find(want["message"].get<std::string>()), std::string::npos)
            << got.message();
      }
      ++errors;
    }
  }
  std::printf("%s: %d conversations byte-identical, %d raise in both\n", file.c_str(), identical,
              errors);
  EXPECT_EQ(identical + errors, int(convs.size()));
}

TEST(ChatTemplateCompare, Qwen35) {
  compare_template("qwen3.5-35b-a3b.jinja");
}
TEST(ChatTemplateCompare, Qwen36) {
  compare_template("qwen3.6-35b-a3b.jinja");
}
TEST(ChatTemplateCompare, Qwen36Unsloth) {
  compare_template("qwen3.6-35b-a3b.unsloth.jinja");
}

}  // namespace
}  // namespace orchid
