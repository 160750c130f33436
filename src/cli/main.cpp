// orchid: command-line entry point; one subcommand per file in src/cli/cmd_*.cpp.
#include <cstdio>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"orchid — inference engine for the Qwen3.5/3.6 hybrid MoE family"};
  app.require_subcommand(1);
  int exit_code = 0;
  orchid::cli::add_info(app, exit_code);
  orchid::cli::add_logits(app, exit_code);
  orchid::cli::add_eval(app, exit_code);
  orchid::cli::add_generate(app, exit_code);
  orchid::cli::add_synth(app, exit_code);
  orchid::cli::add_convert(app, exit_code);
  orchid::cli::add_bench(app, exit_code);
  orchid::cli::add_tokenize(app, exit_code);
  orchid::cli::add_template(app, exit_code);
  orchid::cli::add_run(app, exit_code);
  orchid::cli::add_chat(app, exit_code);
  orchid::cli::add_serve(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
