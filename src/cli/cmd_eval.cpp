// `orchid eval -m DIR --text FILE [--reference logits.npy]`: teacher-forced perplexity of the
// text's tokens (the model's own tokenizer, nothing added) and, given reference logits of every
// position (.npy, e.g. from Hugging Face: full [n_tokens, vocab] or the compact top-k form
// [n_tokens, 1 + 2k] of runtime/eval.h), top-1 agreement and mean KL divergence
// KL(reference ‖ orchid). The text runs through one state in windows of --window
// tokens, so the logits held at once are bounded by the window, not the text.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "orchid/runtime/eval.h"
#include "orchid/tokenizer/tokenizer.h"
#include "orchid/util/npy.h"

namespace orchid::cli {

void add_eval(CLI::App& app, int& exit_code) {
  struct Args {
    ModelOptions model;
    std::string text, reference;
    int64_t window = 1024;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "teacher-forced perplexity of a text; top-1 agreement and KL against reference logits");
  add_model_options(cmd, args->model);
  cmd->add_option("--text", args->text, "UTF-8 text file")->required();
  cmd->add_option("--reference", args->reference,
                  "reference logits of every token position (.npy float32: [n_tokens, vocab], or "
                  "[n_tokens, 1 + 2k]: log-sum-exp, top-k ids, their logits)");
  cmd->add_option("--window", args->window, "tokens per forward call (bounds the logits held)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_flag("--json", args->json, "print one JSON object instead of text");
  cmd->callback([args, &exit_code] {
    auto text = read_file(args->text);
    if (!text) return void(exit_code = fail(text.message()));
    // Weights and tokenizer only: a text needs no chat template or generation config.
    auto tok = Tokenizer::load(args->model.dir + "/tokenizer.json");
    if (!tok) return void(exit_code = fail(tok.message()));
    auto lm = open_model(args->model);
    if (!lm) return void(exit_code = fail(lm.message()));
    const std::vector<int32_t> ids = tok->encode(*text);
    const int64_t n = int64_t(ids.size()), V = lm->backend->n_vocab();
    if (n < 2)
      return void(exit_code = fail("eval: the text has " + std::to_string(n) +
                                   " tokens; at least 2 are needed"));
    NpyArray ref;
    std::optional<EvalReference> form;
    if (!args->reference.empty()) {
      auto r = read_npy_f32(args->reference);
      if (!r) return void(exit_code = fail(r.message()));
      if (r->shape.size() != 2 || r->shape[0] != n)
        return void(exit_code = fail("eval: the reference must have " + std::to_string(n) +
                                     " rows (the text's tokens)"));
      auto f = EvalReference::of_width(r->shape[1], V);
      if (!f) return void(exit_code = fail(f.message()));
      ref = std::move(*r), form = *f;
    }
    auto st = lm->backend->new_state(n);
    if (!st) return void(exit_code = fail(st.message()));
    EvalStats stats;
    std::vector<float> logits;
    for (int64_t t = 0; t < n; t += args->window) {
      const int64_t w = std::min(args->window, n - t);
      const std::span<const int32_t> part(ids.data() + t, size_t(w));
      Status s = lm->backend->forward(**st, part, LogitsMode::all, logits);
      std::optional<EvalReference> window_ref = form;
      if (window_ref) window_ref->rows = ref.data.data() + t * form->width;
      if (s) s = add_eval_positions(stats, logits, V, ids, t, window_ref ? &*window_ref : nullptr);
      if (!s) return void(exit_code = fail(s.message()));
    }
    if (args->json) {
      nlohmann::ordered_json j = {{"tokens", n},
                                  {"predictions", stats.predictions},
                                  {"perplexity", stats.perplexity()},
                                  {"mean_nll_nats", stats.mean_nll()}};
      if (stats.compared) {
        j["compared"] = stats.compared;
        j["top1_agreement"] = stats.top1_agreement();
        j["mean_kl_nats"] = stats.mean_kl();
      }
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("tokens %lld, %lld predictions\nperplexity %.4f (mean NLL %.5f nats)\n",
                static_cast<long long>(n), static_cast<long long>(stats.predictions),
                stats.perplexity(), stats.mean_nll());
    if (stats.compared)
      std::printf("reference: top-1 agreement %.4f (%lld of %lld), mean KL %.3e nats\n",
                  stats.top1_agreement(), static_cast<long long>(stats.agree),
                  static_cast<long long>(stats.compared), stats.mean_kl());
  });
}

}  // namespace orchid::cli
