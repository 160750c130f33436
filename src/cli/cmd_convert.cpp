// `orchid convert -m DIR -o FILE.gguf [--type q4_k_m|q4_0|q8_0|...]`: a checkpoint orchid loads,
// written as llama.cpp's converter writes a qwen35moe GGUF (model/gguf_export.h), re-quantized to
// one type or llama.cpp's Q4_K_M mix, with the tokenizer and chat template in the file: the
// same model for orchid and for llama.cpp (the CPU peer benchmark, scripts/peer/).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "orchid/model/gguf_export.h"
#include "orchid/model/model.h"

namespace orchid::cli {
namespace {

uint32_t type_named(const std::string& s) {
  if (s == "q4_0") return uint32_t(GgmlType::Q4_0);
  if (s == "q8_0") return uint32_t(GgmlType::Q8_0);
  if (s == "q4_k" || s == "q4_k_m") return uint32_t(GgmlType::Q4_K);
  if (s == "q5_k") return uint32_t(GgmlType::Q5_K);
  if (s == "q6_k") return uint32_t(GgmlType::Q6_K);
  if (s == "f16") return uint32_t(GgmlType::F16);
  if (s == "bf16") return uint32_t(GgmlType::BF16);
  return uint32_t(GgmlType::F32);
}

}  // namespace

void add_convert(CLI::App& app, int& exit_code) {
  struct Args {
    std::string model, out, type = "q4_0", router = "f32", tokenizer;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("convert", "write a checkpoint as a GGUF file (qwen35moe)");
  cmd->add_option("-m,--model", args->model, "model directory (or .gguf file)")->required();
  cmd->add_option("-o,--out", args->out, "output .gguf file")->required();
  cmd->add_option("--type", args->type,
                  "matrices: q4_k_m (llama.cpp's mix of Q4_K, Q5_K, Q6_K), q4_k, q5_k, q6_k, q4_0, "
                  "q8_0, bf16, f16 or f32 (rows not filling the type's blocks: q8_0 or f32)")
      ->check(CLI::IsMember({"q4_k_m", "q4_k", "q5_k", "q6_k", "q4_0", "q8_0", "bf16", "f16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--router", args->router,
                  "the router (ffn_gate_inp): f32, as llama.cpp's quantizer keeps it, or q8_0")
      ->check(CLI::IsMember({"f32", "q8_0"}))
      ->capture_default_str();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "directory with the tokenizer.json (default: the model directory's); ids past "
                  "it up to the model's vocabulary become [PAD] tokens");
  cmd->callback([args, &exit_code] {
    namespace fs = std::filesystem;
    const auto t0 = std::chrono::steady_clock::now();
    auto m = load_model(args->model);
    if (!m) return void(exit_code = fail(m.message()));
    GgufExportOptions o;
    const fs::path tok_dir =
        args->tokenizer.empty() ? fs::path(args->model) : fs::path(args->tokenizer);
    if (fs::exists(tok_dir / "tokenizer.json")) {
      auto text = read_file((tok_dir / "tokenizer.json").string());
      if (!text) return void(exit_code = fail(text.message()));
      o.tokenizer_json = std::move(*text);
    } else if (!args->tokenizer.empty()) {
      return void(exit_code = fail("--tokenizer: no tokenizer.json in " + args->tokenizer));
    }
    if (fs::exists(fs::path(args->model) / "chat_template.jinja")) {
      auto text = read_file((fs::path(args->model) / "chat_template.jinja").string());
      if (!text) return void(exit_code = fail(text.message()));
      o.chat_template = std::move(*text);
    }
    o.types.matrices = type_named(args->type), o.types.router = type_named(args->router);
    o.types.q4_k_m = args->type == "q4_k_m";
    const bool tty = isatty(STDERR_FILENO);
    o.progress = [&](uint64_t done, uint64_t total) {
      if (!tty) return;
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "\r%6.2f / %.2f GiB  %5.1f MiB/s", done / 1073741824.0,
                   total / 1073741824.0, done / 1048576.0 / sec);
    };
    Status s = export_gguf((*m)->config, (*m)->weights, args->out, o);
    if (tty) std::fprintf(stderr, "\n");
    if (!s) return void(exit_code = fail(s.message()));
    std::fprintf(stderr, "orchid: wrote %s (%s, %.1f s)\n", args->out.c_str(), args->type.c_str(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  });
}

}  // namespace orchid::cli
