// The `orchid` subcommands. Each add_* registers one subcommand on the app; its callback
// stores the process exit code in `exit_code`.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "orchid/util/status.h"

namespace orchid::cli {

void add_info(CLI::App& app, int& exit_code);
void add_logits(CLI::App& app, int& exit_code);
void add_eval(CLI::App& app, int& exit_code);
void add_generate(CLI::App& app, int& exit_code);
void add_synth(CLI::App& app, int& exit_code);
void add_convert(CLI::App& app, int& exit_code);
void add_bench(CLI::App& app, int& exit_code);
void add_tokenize(CLI::App& app, int& exit_code);
void add_template(CLI::App& app, int& exit_code);
void add_run(CLI::App& app, int& exit_code);
void add_chat(CLI::App& app, int& exit_code);
void add_serve(CLI::App& app, int& exit_code);

// "1,2,3" → ids; an empty list or a non-integer entry is an error.
Expected<std::vector<int32_t>> parse_token_list(const std::string& text);
// The whole file at `path` (an error names the path when it cannot be opened or read).
Expected<std::string> read_file(const std::string& path);
// Prints "orchid: error: MESSAGE" to stderr and returns 1.
int fail(const std::string& message);
// `orchid bench plot`: the series' prefill / decode tok/s charts as OUT.svg and OUT.png.
int bench_plot(const std::vector<std::string>& series, const std::string& out);

}  // namespace orchid::cli

#include <memory>

#include "orchid/backend/backend.h"
#include "orchid/model/model.h"
#include "orchid/runtime/chat_assets.h"

namespace orchid::cli {

// -m DIR, --quantize, --backend as shared by the subcommands that run the model.
struct ModelOptions {
  std::string dir;
  std::string quantize;  // "" or "q4"
  std::string backend = "auto";
  bool exact = false;  // cpu backend: the exact fp32 path instead of the fast one
};
// `required`: -m must be given; else an empty dir means the built-in demo model.
void add_model_options(CLI::App* cmd, ModelOptions& opts, bool required = true);

// The built-in demo model's directory (a small trained model of the architecture,
// docs/demo-model.md): $ORCHID_DEMO_MODEL if set, else models/orchid-demo beside the binary's
// folder (the build tree in the repo: build/orchid → models/orchid-demo) or
// share/orchid/models/orchid-demo under its install prefix. An error naming the places looked at
// when none holds a config.json.
Expected<std::string> demo_model_dir();
// `dir`, or the demo model's directory when `dir` is empty (no -m given).
Expected<std::string> model_dir_or_demo(const std::string& dir);

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
};
Expected<LoadedModel> open_model(const ModelOptions& opts);

// A model to chat with: weights and backend, plus its tokenizer, template and generation config.
struct ChatModel {
  LoadedModel lm;
  ChatAssets assets;
};
Expected<ChatModel> open_chat_model(const ModelOptions& opts);

}  // namespace orchid::cli
