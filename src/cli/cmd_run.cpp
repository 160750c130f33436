// `orchid run -m DIR -p "text"`: one user turn through the model's chat template, generated
// and printed as it streams (reasoning dimmed on a terminal, then the answer).
#include <unistd.h>

#include <cstdio>

#include "cli/commands.h"
#include "orchid/runtime/engine.h"
#include "orchid/tokenizer/output_parser.h"
#include "orchid/tokenizer/tokenizer.h"

namespace orchid::cli {
namespace {

// Prints parser output: reasoning in dim grey on a terminal, content plainly, tool calls as JSON.
class StreamPrinter {
 public:
  StreamPrinter() : tty_(isatty(fileno(stdout))) {}
  void print(const ParserDelta& d) {
    if (!d.reasoning.empty()) write(d.reasoning, true);
    if (!d.content.empty()) write(d.content, false);
    for (const ToolCall& c : d.tool_calls)
      write("\n[tool call] " + c.name + " " + c.arguments + "\n", false);
    std::fflush(stdout);
  }
  void end() {
    if (tty_ && dim_) std::fputs("\033[0m", stdout);
    std::fputs("\n", stdout);
  }

 private:
  void write(const std::string& s, bool dim) {
    if (tty_ && dim != dim_) std::fputs(dim ? "\033[2m" : "\033[0m", stdout);
    dim_ = dim;
    std::fwrite(s.data(), 1, s.size(), stdout);
  }
  bool tty_;
  bool dim_ = false;
};

}  // namespace

void add_run(CLI::App& app, int& exit_code) {
  struct Args {
    ModelOptions model;
    std::string prompt;
    int n = 512;
    bool no_thinking = false, greedy = false;
    std::optional<float> temperature;
    std::optional<uint64_t> seed;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("run", "answer one prompt, streaming the reply");
  add_model_options(cmd, args->model, /*required=*/false);
  cmd->add_option("-p,--prompt", args->prompt, "the user's message")->required();
  cmd->add_option("-n,--max-tokens", args->n, "most tokens to generate")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--no-thinking", args->no_thinking, "render the prompt with thinking off");
  cmd->add_flag("--greedy", args->greedy, "argmax decoding instead of the model's defaults");
  cmd->add_option("--temperature", args->temperature, "sampling temperature");
  cmd->add_option("--seed", args->seed, "sampling seed");
  cmd->callback([args, &exit_code] {
    auto cm = open_chat_model(args->model);
    if (!cm) return void(exit_code = fail(cm.message()));
    const ChatAssets& assets = cm->assets;
    const Tokenizer& tok = assets.tokenizer;
    const ChatTemplate& tmpl = assets.chat_template;
    const GenerationConfig& gen = assets.generation;
    Backend& backend = *cm->lm.backend;

    ChatTemplateOptions topts;
    topts.enable_thinking = !args->no_thinking;
    nlohmann::ordered_json messages = {{{"role", "user"}, {"content", args->prompt}}};
    auto prompt = tmpl.render(messages, nlohmann::ordered_json::array(), topts);
    if (!prompt) return void(exit_code = fail(prompt.message()));
    std::vector<int32_t> ids = tok.encode(*prompt);

    SamplerParams sp = gen.sampler;
    if (args->greedy) sp.greedy = true;
    if (args->temperature) sp.temperature = *args->temperature, sp.greedy = *args->temperature <= 0;
    if (args->seed) sp.seed = *args->seed;
    OutputParserOptions popts;
    popts.thinking = !args->no_thinking;
    popts.parse_tool_calls = false;
    OutputParser parser(popts);
    StreamingDetokenizer detok(tok, /*skip_special=*/true);
    StreamPrinter out;
    Status failure;
    auto on_token = [&](const TokenEvent& ev) {
      auto text = detok.push(ev.id);
      if (!text) {
        failure = text.error();
        return false;
      }
      out.print(parser.push(*text));
      return true;
    };
    // Through the engine, so a GPU decodes with the next token chosen on the device.
    Engine engine(backend, int64_t(ids.size()) + args->n + 1, 0);
    GenerateRequest req;
    req.prompt = std::move(ids);
    req.max_tokens = args->n;
    req.sampler = sp;
    req.stop_ids = assets.stop_ids;
    auto res = engine.generate(req, on_token);
    if (!res) return void(exit_code = fail(res.message()));
    if (!failure.ok()) return void(exit_code = fail(failure.message()));
    out.print(parser.push(detok.flush()));
    out.print(parser.finish());
    out.end();
  });
}

}  // namespace orchid::cli
