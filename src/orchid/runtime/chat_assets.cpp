#include "orchid/runtime/chat_assets.h"

#include <algorithm>
#include <utility>

#include "orchid/model/gguf.h"
#include "orchid/runtime/gguf_tokenizer.h"
#include "orchid/util/mapped_file.h"

namespace orchid {

bool ChatAssets::is_stop(int32_t id) const {
  return std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
}

namespace {

// A GGUF file's tokenizer and chat template (runtime/gguf_tokenizer.h); generation defaults
// (the file carries no sampling settings); its eos / eot ids as stops.
Expected<ChatAssets> load_gguf_chat_assets(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file) return file.error();
  auto f = parse_gguf(file->bytes(), path);
  if (!f) return f.error();
  auto json = gguf_tokenizer_json(*f, path);
  if (!json) return json.error();
  auto tok = Tokenizer::from_json(*json, path);
  if (!tok) return tok.error();
  const std::string source = gguf_chat_template(*f);
  auto tmpl = source.empty() ? Expected<ChatTemplate>(ChatTemplate::builtin())
                             : ChatTemplate::from_source(source);
  if (!tmpl) return err(path, ": tokenizer.chat_template: ", tmpl.message());
  std::vector<int32_t> stops = gguf_stop_ids(*f);
  if (stops.empty())
    for (const char* t : {"<|im_end|>", "<|endoftext|>"})
      if (auto id = tok->token_id(t)) stops.push_back(*id);
  return ChatAssets{std::move(*tok), std::move(*tmpl), GenerationConfig{}, std::move(stops)};
}

}  // namespace

Expected<ChatAssets> load_chat_assets(const std::string& model_dir) {
  if (is_gguf_path(model_dir)) return load_gguf_chat_assets(model_dir);
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
