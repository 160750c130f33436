// `orchid chat -m DIR`: an interactive terminal chat on the engine (multi-turn state reuse),
// streamed output with reasoning dimmed; /reset, /system TEXT, /exit; Ctrl-C stops the reply.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "orchid/runtime/engine.h"
#include "orchid/tokenizer/output_parser.h"
#include "orchid/tokenizer/tokenizer.h"

namespace orchid::cli {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) {
  g_interrupted = true;
}

// Writes reasoning dimmed (on a terminal) and content plainly; collects both for the history.
struct ReplyPrinter {
  bool tty = isatty(fileno(stdout));
  bool dim = false;
  std::string reasoning, content;

  void print(const ParserDelta& d) {
    if (!d.reasoning.empty()) write(d.reasoning, true), reasoning += d.reasoning;
    if (!d.content.empty()) write(d.content, false), content += d.content;
    std::fflush(stdout);
  }
  void write(const std::string& s, bool want_dim) {
    if (tty && want_dim != dim) std::fputs(want_dim ? "\033[2m" : "\033[0m", stdout);
    if (!tty && want_dim && !dim) std::fputs("[thinking] ", stdout);
    if (!tty && !want_dim && dim) std::fputs("\n[answer] ", stdout);
    dim = want_dim;
    std::fwrite(s.data(), 1, s.size(), stdout);
  }
  void end() {
    if (tty && dim) std::fputs("\033[0m", stdout);
    std::fputs("\n", stdout);
  }
};

}  // namespace

void add_chat(CLI::App& app, int& exit_code) {
  struct Args {
    ModelOptions model;
    int64_t ctx = 8192;
    int max_tokens = 1024;
    bool no_thinking = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("chat", "interactive chat in the terminal");
  add_model_options(cmd, args->model, /*required=*/false);
  cmd->add_option("--ctx", args->ctx, "context length in tokens")->check(CLI::Range(16, 1 << 22));
  cmd->add_option("-n,--max-tokens", args->max_tokens, "most tokens per reply");
  cmd->add_flag("--no-thinking", args->no_thinking, "thinking off");
  cmd->callback([args, &exit_code] {
    auto cm = open_chat_model(args->model);
    if (!cm) return void(exit_code = fail(cm.message()));
    const ChatAssets& assets = cm->assets;
    const Tokenizer& tok = assets.tokenizer;
    const ChatTemplate& tmpl = assets.chat_template;
    const GenerationConfig& gen = assets.generation;
    Backend& backend = *cm->lm.backend;
    Engine engine(backend, args->ctx, int64_t(256) << 20);
    std::signal(SIGINT, on_sigint);

    std::string system;
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    std::fprintf(stderr, "orchid chat — /reset, /system TEXT, /exit; Ctrl-C stops a reply\n");
    for (std::string line;;) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
      g_interrupted = false;
      if (!std::getline(std::cin, line) || g_interrupted) break;
      if (line.empty()) continue;
      if (line == "/exit" || line == "/quit") break;
      if (line == "/reset") {
        messages = nlohmann::ordered_json::array();
        std::puts("(conversation cleared)");
        continue;
      }
      if (line.rfind("/system", 0) == 0) {
        system = line.size() > 8 ? line.substr(8) : "";
        messages = nlohmann::ordered_json::array();
        std::puts("(system prompt set; conversation cleared)");
        continue;
      }
      nlohmann::ordered_json turn = messages;
      if (!system.empty())
        turn.insert(turn.begin(), nlohmann::ordered_json{{"role", "system"}, {"content", system}});
      turn.push_back({{"role", "user"}, {"content", line}});

      ChatTemplateOptions topts;
      topts.enable_thinking = !args->no_thinking;
      topts.add_generation_prompt = false;
      auto head = tmpl.render(turn, nullptr, topts);
      topts.add_generation_prompt = true;
      auto full = tmpl.render(turn, nullptr, topts);
      if (!head || !full) {
        std::fprintf(stderr, "orchid: error: %s\n", (!head ? head : full).message().c_str());
        continue;
      }
      GenerateRequest req;
      req.prompt = tok.encode(*full);
      req.snapshot_at = int64_t(tok.encode(*head).size());
      req.max_tokens = args->max_tokens;
      req.sampler = gen.sampler;
      req.stop_ids = assets.stop_ids;
      req.presence_penalty = gen.presence_penalty;
      req.repetition_penalty = gen.repetition_penalty;

      OutputParserOptions popts;
      popts.thinking = !args->no_thinking;
      popts.parse_tool_calls = false;
      OutputParser parser(popts);
      StreamingDetokenizer detok(tok, /*skip_special=*/true);
      ReplyPrinter out;
      auto res = engine.generate(req, [&](const TokenEvent& ev) {
        if (g_interrupted) return false;
        auto text = detok.push(ev.id);
        if (text) out.print(parser.push(*text));
        return true;
      });
      out.print(parser.push(detok.flush()));
      out.print(parser.finish());
      out.end();
      if (!res) {
        std::fprintf(stderr, "orchid: error: %s\n", res.message().c_str());
        continue;
      }
      if (g_interrupted) std::fputs("(stopped)\n", stdout);
      messages.push_back({{"role", "user"}, {"content", line}});
      nlohmann::ordered_json reply = {{"role", "assistant"}, {"content", out.content}};
      if (!out.reasoning.empty()) reply["reasoning_content"] = out.reasoning;
      messages.push_back(reply);
    }
    std::fputs("\n", stdout);
  });
}

}  // namespace orchid::cli
