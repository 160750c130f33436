// `orchid generate -m DIR --tokens 1,2,3 -n 32 --greedy --json`: prefill the prompt, then
// decode n tokens one at a time; prints {"tokens":[...]} with --json, else the ids.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "orchid/runtime/generate.h"

namespace orchid::cli {

void add_generate(CLI::App& app, int& exit_code) {
  struct Args {
    ModelOptions model;
    std::string tokens;
    int n = 32;
    bool greedy = false, json = false;
    SamplerParams sampler;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("generate", "continue a prompt of token ids");
  add_model_options(cmd, args->model);
  cmd->add_option("--tokens", args->tokens, "comma-separated prompt token ids")->required();
  cmd->add_option("-n,--n-predict", args->n, "tokens to generate")->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--greedy", args->greedy, "argmax decoding");
  cmd->add_flag("--json", args->json, "print {\"tokens\":[...]}");
  cmd->add_option("--temperature", args->sampler.temperature, "sampling temperature");
  cmd->add_option("--top-k", args->sampler.top_k, "keep the k most likely tokens (0: off)");
  cmd->add_option("--top-p", args->sampler.top_p, "nucleus sampling mass (1: off)");
  cmd->add_option("--seed", args->sampler.seed, "sampling seed");
  cmd->callback([args, &exit_code] {
    auto ids = parse_token_list(args->tokens);
    if (!ids) return void(exit_code = fail(ids.message()));
    auto lm = open_model(args->model);
    if (!lm) return void(exit_code = fail(lm.message()));
    args->sampler.greedy = args->greedy;
    auto out = generate(*lm->backend, *ids, args->n, args->sampler);
    if (!out) return void(exit_code = fail(out.message()));
    if (args->json) {
      std::printf("%s\n", nlohmann::json{{"tokens", *out}}.dump().c_str());
    } else {
      for (size_t i = 0; i < out->size(); ++i) std::printf("%s%d", i ? "," : "", (*out)[i]);
      std::printf("\n");
    }
  });
}

}  // namespace orchid::cli
