// `orchid synth --config (tiny|qwen3.6-35b-a3b|FILE.json) --layout (hf|mlx4|fp8|gguf-q4_k_m|gguf-q4_0|gguf-q8_0) -o
// DIR`: a random checkpoint of real structure (peaked logits, distinct norms) for the demo, tests
// and benches.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "orchid/model/gguf_export.h"
#include "orchid/model/model.h"
#include "orchid/model/synth.h"
#include "orchid/tokenizer/chat_template.h"
#include "orchid/tokenizer/tokenizer.h"

namespace orchid::cli {
namespace {

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) return err("cannot write ", path);
  return {};
}

// Gives a synthetic checkpoint a real tokenizer: tokenizer.json (+ tokenizer_config.json)
// copied from tok_dir, the built-in Qwen3.6 chat template, and Qwen3.6's sampling defaults
// with the tokenizer's end-of-turn ids as stop tokens.
Status add_tokenizer_files(const std::string& tok_dir, const Tokenizer& tok,
                           const std::string& out_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::path src = fs::path(tok_dir) / name;
    if (!fs::exists(src)) continue;
    fs::copy_file(src, fs::path(out_dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return err("cannot copy ", src.string(), ": ", ec.message());
  }
  ORCHID_TRY(write_text(out_dir + "/chat_template.jinja", ChatTemplate::builtin().source()));
  nlohmann::json eos = nlohmann::json::array();
  for (const char* t : {"<|im_end|>", "<|endoftext|>"})
    if (auto id = tok.token_id(t)) eos.push_back(*id);
  nlohmann::json gen = {{"do_sample", true},
                        {"temperature", 1.0},
                        {"top_p", 0.95},
                        {"top_k", 20},
                        {"eos_token_id", eos}};
  return write_text(out_dir + "/generation_config.json", gen.dump(2) + "\n");
}

// The model in `dir` as one GGUF file of `layout` (gguf-q4_0: Q4_0 matrices, Q8_0 router, as
// scripts/peer uses; gguf-q8_0: Q8_0 throughout; gguf-q4_k_m: llama.cpp's Q4_K_M mix, F32
// router), with the tokenizer of tok_dir if given.
Status write_synth_gguf(const std::string& dir, const std::string& out, const std::string& layout,
                        const std::string& tok_dir) {
  auto m = load_model(dir);
  if (!m) return m.error();
  GgufExportOptions o;
  if (!tok_dir.empty()) {
    auto text = read_file(tok_dir + "/tokenizer.json");
    if (!text) return text.error();
    o.tokenizer_json = std::move(*text);
    o.chat_template = ChatTemplate::builtin().source();
  }
  o.types.matrices = uint32_t(layout == "gguf-q8_0"     ? GgmlType::Q8_0
                              : layout == "gguf-q4_k_m" ? GgmlType::Q4_K
                                                        : GgmlType::Q4_0);
  o.types.q4_k_m = layout == "gguf-q4_k_m";
  // Q4_K_M keeps the router F32, as llama.cpp's quantizer does.
  o.types.router = uint32_t(o.types.q4_k_m ? GgmlType::F32 : GgmlType::Q8_0);
  return export_gguf((*m)->config, (*m)->weights, out, o);
}

}  // namespace

void add_synth(CLI::App& app, int& exit_code) {
  struct Args {
    std::string config, layout = "mlx4", out, tokenizer;
    uint64_t seed = 0;
    int layers = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("synth", "write a random checkpoint of a config");
  cmd->add_option("--config", args->config, "tiny | qwen3.6-35b-a3b | path to a config.json")
      ->required();
  cmd->add_option("--layout", args->layout,
                  "hf (bf16, sharded), mlx4 (MLX affine 4-bit), fp8 (Qwen's FP8 layout: e4m3, 128x128 "
                  "block scales, experts one by one), or one GGUF file (-o FILE.gguf): "
                  "gguf-q4_k_m (llama.cpp's Q4_K_M mix), gguf-q4_0 (Q4_0, Q8_0 router) or "
                  "gguf-q8_0 — the mlx4 model of the seed re-quantized")
      ->check(CLI::IsMember({"hf", "mlx4", "fp8", "gguf-q4_k_m", "gguf-q4_0", "gguf-q8_0"}));
  cmd->add_option("-o,--out", args->out, "output directory")->required();
  cmd->add_option("--seed", args->seed, "random seed");
  cmd->add_option("--layers", args->layers,
                  "keep only the first N layers (the config's layer pattern): a model of the "
                  "real shapes small enough for a CPU benchmark")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--tokenizer", args->tokenizer,
                  "directory with a tokenizer.json: copied in, vocabulary sized to match");
  cmd->callback([args, &exit_code] {
    ModelConfig cfg;
    if (auto b = builtin_config(args->config)) {
      cfg = *b;
    } else {
      std::ifstream in(args->config, std::ios::binary);
      if (!in)
        return void(exit_code = fail("--config '" + args->config +
                                     "' is neither a built-in config (tiny, qwen3.6-35b-a3b) "
                                     "nor a readable file"));
      std::stringstream ss;
      ss << in.rdbuf();
      auto parsed = parse_config(ss.str(), args->config);
      if (!parsed) return void(exit_code = fail(parsed.message()));
      cfg = *parsed;
      cfg.quant.reset();
      cfg.quant_overrides.clear();
    }
    if (args->layers > 0) {
      if (args->layers > cfg.n_layer)
        return void(exit_code = fail("--layers " + std::to_string(args->layers) +
                                     ": the config has " + std::to_string(cfg.n_layer)));
      cfg.n_layer = args->layers;
      cfg.layer_types.resize(size_t(args->layers));
    }
    std::optional<Tokenizer> tok;
    if (!args->tokenizer.empty()) {
      auto t = Tokenizer::load(args->tokenizer + "/tokenizer.json");
      if (!t) return void(exit_code = fail(t.message()));
      cfg.n_vocab = t->vocab_size();
      tok = std::move(*t);
    }
    if (args->layout.rfind("gguf-", 0) == 0) {
      // The mlx4 checkpoint of the seed, then that model written as GGUF (orchid convert's path).
      const std::string tmp = args->out + ".synth-tmp";
      Status s = synth_checkpoint(cfg, SynthLayout::mlx4, tmp, args->seed);
      if (s) s = write_synth_gguf(tmp, args->out, args->layout, args->tokenizer);
      std::error_code ec;
      std::filesystem::remove_all(tmp, ec);
      if (!s) return void(exit_code = fail(s.message()));
      return;
    }
    SynthLayout layout = *parse_synth_layout(args->layout);
    Status s = synth_checkpoint(cfg, layout, args->out, args->seed);
    if (s.ok() && tok) s = add_tokenizer_files(args->tokenizer, *tok, args->out);
    if (!s) return void(exit_code = fail(s.message()));
  });
}

}  // namespace orchid::cli
