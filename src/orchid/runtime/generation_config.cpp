// generation_config.json → GenerationConfig.
#include "orchid/runtime/generation_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace orchid {

Expected<GenerationConfig> parse_generation_config(std::string_view text, std::string_view file) {
  using json = nlohmann::json;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return err(file, ": not a JSON object");
  GenerationConfig g;
  g.sampler.greedy = true;
  auto number = [&](const char* key, float& dst) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return {};
    if (!it->is_number()) return err(file, ": '", key, "' must be a number");
    dst = it->get<float>();
    return {};
  };
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    json ids = it->is_array() ? *it : json::array({*it});
    for (const auto& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0)
        return err(file, ": 'eos_token_id' must be a non-negative integer or a list of them");
      g.eos_token_ids.push_back(id.get<int32_t>());
    }
  }
  if (auto it = j.find("do_sample"); it != j.end() && it->is_boolean())
    g.sampler.greedy = !it->get<bool>();
  ORCHID_TRY(number("temperature", g.sampler.temperature));
  ORCHID_TRY(number("top_p", g.sampler.top_p));
  ORCHID_TRY(number("min_p", g.sampler.min_p));
  ORCHID_TRY(number("repetition_penalty", g.repetition_penalty));
  ORCHID_TRY(number("presence_penalty", g.presence_penalty));
  float top_k = 0.f;
  ORCHID_TRY(number("top_k", top_k));
  g.sampler.top_k = int(top_k);
  return g;
}

Expected<GenerationConfig> load_generation_config(const std::string& dir) {
  const std::string path = dir + "/generation_config.json";
  if (!std::filesystem::exists(path)) return GenerationConfig{};
  std::ifstream in(path, std::ios::binary);
  if (!in) return err(path, ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_generation_config(ss.str(), path);
}

}  // namespace orchid
