// What turns chat messages into prompt tokens and decides when a reply ends: a model
// directory's tokenizer.json, chat template and generation_config.json, loaded together so
// that `orchid run`, `orchid chat` and `orchid serve` agree on them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orchid/runtime/generation_config.h"
#include "orchid/tokenizer/chat_template.h"
#include "orchid/tokenizer/tokenizer.h"
#include "orchid/util/status.h"

namespace orchid {

struct ChatAssets {
  Tokenizer tokenizer;
  ChatTemplate chat_template;
  GenerationConfig generation;
  // generation_config's eos ids; when it names none, <|im_end|> and <|endoftext|> if the
  // tokenizer has them. May still be empty (the caller decides whether that is an error).
  std::vector<int32_t> stop_ids;

  bool is_stop(int32_t id) const;
};

Expected<ChatAssets> load_chat_assets(const std::string& model_dir);

}  // namespace orchid
