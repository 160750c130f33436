// `orchid logits -m DIR --tokens 1,2,3 --out FILE.npy`: fp32 logits [n_tokens, vocab] of
// every position, prefilled in chunks of --chunk tokens.
#include "cli/commands.h"
#include "orchid/util/npy.h"

namespace orchid::cli {

void add_logits(CLI::App& app, int& exit_code) {
  struct Args {
    ModelOptions model;
    std::string tokens, out;
    int64_t chunk = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("logits", "write the logits of every prompt position (.npy)");
  add_model_options(cmd, args->model);
  cmd->add_option("--tokens", args->tokens, "comma-separated token ids")->required();
  cmd->add_option("--out", args->out, "output .npy file")->required();
  cmd->add_option("--chunk", args->chunk, "prefill chunk size in tokens (0: default)");
  cmd->callback([args, &exit_code] {
    auto ids = parse_token_list(args->tokens);
    if (!ids) return void(exit_code = fail(ids.message()));
    auto lm = open_model(args->model);
    if (!lm) return void(exit_code = fail(lm.message()));
    auto st = lm->backend->new_state(int64_t(ids->size()));
    if (!st) return void(exit_code = fail(st.message()));
    std::vector<float> logits;
    Status s = lm->backend->forward(**st, *ids, LogitsMode::all, logits, args->chunk);
    if (!s) return void(exit_code = fail(s.message()));
    const int64_t shape[] = {int64_t(ids->size()), lm->backend->n_vocab()};
    s = write_npy_f32(args->out, logits, shape);
    if (!s) return void(exit_code = fail(s.message()));
  });
}

}  // namespace orchid::cli
