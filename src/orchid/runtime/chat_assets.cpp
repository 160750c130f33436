#include "orchid/runtime/chat_assets.h"

#include <algorithm>
#include <utility>

namespace orchid {

bool ChatAssets::is_stop(int32_t id) const {
  return std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
}

Expected<ChatAssets> load_chat_assets(const std::string& model_dir) {
  auto tok = Tokenizer::load(model_dir + "/tokenizer.json");
  if (!tok) return tok.error();
  auto tmpl = ChatTemplate::load(model_dir);
  if (!tmpl) return tmpl.error();
  auto gen = load_generation_config(model_dir);
  if (!gen) return gen.error();
  std::vector<int32_t> stops = gen->eos_token_ids;
  if (stops.empty())
    for (const char* t : {"<|im_end|>", "<|endoftext|>"})
      if (auto id = tok->token_id(t)) stops.push_back(*id);
  return ChatAssets{std::move(*tok), std::move(*tmpl), std::move(*gen), std::move(stops)};
}

}  // namespace orchid
