// generate(): prefill (last-position logits only), then sample → decode → sample ...
#include "orchid/runtime/generate.h"

namespace orchid {

Expected<std::vector<int32_t>> generate(Backend& backend, std::span<const int32_t> prompt, int n,
                                        const SamplerParams& params,
                                        const std::function<bool(int32_t)>& on_token) {
  if (prompt.empty()) return err("generate: the prompt is empty");
  auto st = backend.new_state(int64_t(prompt.size()) + n);
  if (!st) return st.error();
  std::vector<float> logits;
  ORCHID_TRY(backend.forward(**st, prompt, LogitsMode::last, logits));
  Sampler sampler(params);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t id = sampler.sample(logits);
    out.push_back(id);
    if (on_token && !on_token(id)) break;
    if (i + 1 == n) break;
    ORCHID_TRY(backend.forward(**st, std::span<const int32_t>(&id, 1), LogitsMode::last, logits));
  }
  return out;
}

}  // namespace orchid
