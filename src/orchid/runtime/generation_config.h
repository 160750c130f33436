// Generation defaults from a model's generation_config.json: stop ids and sampling settings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orchid/runtime/sampler.h"
#include "orchid/util/status.h"

namespace orchid {

struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;  // generation stops after any of these
  SamplerParams sampler;               // do_sample false → greedy
  float repetition_penalty = 1.f;
  float presence_penalty = 0.f;
};

// Parses generation_config.json text. Absent keys keep their defaults.
Expected<GenerationConfig> parse_generation_config(std::string_view json_text,
                                                   std::string_view file_name);
// Reads DIR/generation_config.json; a missing file gives the defaults (greedy, no eos).
Expected<GenerationConfig> load_generation_config(const std::string& dir);

}  // namespace orchid
