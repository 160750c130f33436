// `orchid synth --config (tiny|qwen3.6-35b-a3b|FILE.json) --layout (hf|mlx4) -o DIR`: a random
// checkpoint of real structure (peaked logits, distinct norms) for the demo, tests and benches.
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "orchid/model/synth.h"

namespace orchid::cli {

void add_synth(CLI::App& app, int& exit_code) {
  struct Args {
    std::string config, layout = "mlx4", out;
    uint64_t seed = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("synth", "write a random checkpoint of a config");
  cmd->add_option("--config", args->config, "tiny | qwen3.6-35b-a3b | path to a config.json")
      ->required();
  cmd->add_option("--layout", args->layout, "hf (bf16, sharded) or mlx4 (MLX affine 4-bit)")
      ->check(CLI::IsMember({"hf", "mlx4"}));
  cmd->add_option("-o,--out", args->out, "output directory")->required();
  cmd->add_option("--seed", args->seed, "random seed");
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
    SynthLayout layout = args->layout == "hf" ? SynthLayout::hf : SynthLayout::mlx4;
    Status s = synth_checkpoint(cfg, layout, args->out, args->seed);
    if (!s) return void(exit_code = fail(s.message()));
  });
}

}  // namespace orchid::cli
