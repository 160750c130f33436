// A GGUF file's tokenizer (issue 34): llama.cpp's converter stores a byte-level BPE tokenizer as
// `tokenizer.ggml.*` metadata (model "gpt2": the tokens in id order, their types, the merges;
// `pre` names the pre-tokenizer), which is turned back into the tokenizer.json it came from, so
// that the one tokenizer implementation runs it. Token types: 3 (control) are special added
// tokens, 4 (user-defined) non-special added tokens, 5 (unused: the converter's padding) left
// out; the rest form the BPE vocabulary. Normalizer NFC, decoder ByteLevel, as Qwen's files.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "orchid/model/gguf.h"
#include "orchid/util/status.h"

namespace orchid {

// The tokenizer.json text; errors name the key and `file` (a model other than "gpt2", a `pre`
// other than "qwen2" / "qwen35", missing or mistyped lists, lists of different lengths).
Expected<std::string> gguf_tokenizer_json(const GgufFile& f, std::string_view file);

// tokenizer.chat_template ("" when absent).
std::string gguf_chat_template(const GgufFile& f);

// tokenizer.ggml.eos_token_id and tokenizer.ggml.eot_token_id, those present.
std::vector<int32_t> gguf_stop_ids(const GgufFile& f);

}  // namespace orchid
