// `orchid template -m DIR --messages F.json [--tools T.json] [--no-thinking]`: prints the prompt
// that the model's chat template renders, byte for byte (no newline is added). F.json is a
// messages array or an OpenAI request body {"messages", "tools", "chat_template_kwargs"}.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "orchid/tokenizer/chat_template.h"

namespace orchid::cli {
namespace {

using OJson = nlohmann::ordered_json;

// The JSON in file `path` ("-": stdin).
Expected<OJson> read_json(const std::string& path, const char* option) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream f(path, std::ios::binary);
    if (!f) return err(option, ": cannot open ", path);
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  OJson j = OJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return err(option, ": ", path, " is not valid JSON");
  return j;
}

}  // namespace

void add_template(CLI::App& app, int& exit_code) {
  struct Args {
    std::string dir, messages, tools, kwargs;
    bool no_thinking = false, preserve_thinking = false, no_generation_prompt = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("template", "print the prompt the chat template renders");
  cmd->add_option("-m,--model", args->dir, "model directory (its chat template)")->required();
  cmd->add_option("--messages", args->messages,
                  "JSON file: a messages array or a request body with \"messages\" ('-': stdin)")
      ->required();
  cmd->add_option("--tools", args->tools, "JSON file: the tools array");
  cmd->add_flag("--no-thinking", args->no_thinking, "enable_thinking=false");
  cmd->add_flag("--preserve-thinking", args->preserve_thinking, "preserve_thinking=true");
  cmd->add_flag("--no-generation-prompt", args->no_generation_prompt,
                "add_generation_prompt=false");
  cmd->add_option("--kwargs", args->kwargs, "extra template variables, a JSON object");
  cmd->callback([args, &exit_code] {
    auto input = read_json(args->messages, "--messages");
    if (!input) return void(exit_code = fail(input.message()));
    OJson messages = *input, tools;
    ChatTemplateOptions opts;
    if (input->is_object()) {  // an OpenAI request body
      messages = input->value("messages", OJson());
      tools = input->value("tools", OJson());
      if (input->contains("chat_template_kwargs"))
        opts.extra_kwargs = (*input)["chat_template_kwargs"];
    }
    if (!messages.is_array())
      return void(exit_code = fail("--messages: expected a JSON array of messages"));
    if (!args->tools.empty()) {
      auto t = read_json(args->tools, "--tools");
      if (!t) return void(exit_code = fail(t.message()));
      tools = t->is_object() && t->contains("tools") ? (*t)["tools"] : *t;
    }
    if (!args->kwargs.empty()) {
      OJson kw = OJson::parse(args->kwargs, nullptr, false);
      if (!kw.is_object()) return void(exit_code = fail("--kwargs: expected a JSON object"));
      if (!opts.extra_kwargs.is_object()) opts.extra_kwargs = OJson::object();
      for (auto it = kw.begin(); it != kw.end(); ++it) opts.extra_kwargs[it.key()] = it.value();
    }
    if (args->no_thinking) opts.enable_thinking = false;
    if (args->preserve_thinking) opts.preserve_thinking = true;
    opts.add_generation_prompt = !args->no_generation_prompt;
    auto tpl = ChatTemplate::load(args->dir);
    if (!tpl) return void(exit_code = fail(tpl.message()));
    auto text = tpl->render(messages, tools, opts);
    if (!text) return void(exit_code = fail(text.message()));
    std::fwrite(text->data(), 1, text->size(), stdout);
    std::fflush(stdout);
  });
}

}  // namespace orchid::cli
