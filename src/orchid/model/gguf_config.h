// A qwen35moe GGUF's hyper-parameters (its `qwen35moe.*` metadata, docs/gguf.md) as the
// ModelConfig that config.json gives for the safetensors layouts (issue 34).
#pragma once

#include <string_view>

#include "orchid/model/config.h"
#include "orchid/model/gguf.h"
#include "orchid/util/status.h"

namespace orchid {

// Reads general.architecture (must be "qwen35moe") and the architecture's keys: block_count
// less nextn_predict_layers (the MTP layers orchid skips) is n_layer; vocabulary rows from
// token_embd (else the tokenizer's token list); tied embeddings when `output` is absent; layer
// kinds from attention.recurrent_layers, else full attention every full_attention_interval (4)
// layers. Missing or mistyped keys are errors that name the key and `file`.
Expected<ModelConfig> gguf_config(const GgufFile& f, std::string_view file);

}  // namespace orchid
