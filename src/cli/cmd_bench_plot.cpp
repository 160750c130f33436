// `orchid bench plot --series LABEL=FILE.json ... --out PREFIX`: prefill and decode tokens/s
// against length, one line per series (orchid's bench JSONs, the llama.cpp peer file), written
// as PREFIX.svg and PREFIX.png.
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "orchid/util/chart.h"

namespace orchid::cli {
namespace {

// Series colours in order: orchid's first.
constexpr uint32_t kPalette[] = {0xc2255c, 0x495057, 0x1c7ed6, 0x2b8a3e, 0xe8590c, 0x7048e8};

// (length, tok/s) points of the first of `keys` that the file has.
Expected<std::vector<std::pair<double, double>>> points_of(const nlohmann::json& j,
                                                           std::initializer_list<const char*> keys,
                                                           const std::string& file) {
  std::vector<std::pair<double, double>> pts;
  for (const char* k : keys) {
    if (!j.contains(k)) continue;
    const nlohmann::json& m = j[k];
    if (!m.is_object()) return err(file, ": \"", k, "\" is not an object of length → tok/s");
    for (auto it = m.begin(); it != m.end(); ++it) {
      char* end = nullptr;
      const double len = std::strtod(it.key().c_str(), &end);
      if (*end != '\0' || !(len > 0) || !it.value().is_number() || !(it.value().get<double>() >= 0))
        return err(file, ": \"", k, "\" entry \"", it.key(), "\" is not a length with a rate");
      pts.emplace_back(len, it.value().get<double>());
    }
    break;
  }
  return pts;
}

}  // namespace

int bench_plot(const std::vector<std::string>& series, const std::string& out) {
  if (series.empty()) return fail("bench plot: give at least one --series LABEL=FILE.json");
  if (out.empty()) return fail("bench plot: --out PREFIX is required");
  Chart prefill{"prefill tok/s (batch 1)", "prompt tokens", {}};
  Chart decode{"decode tok/s (batch 1)", "context tokens", {}};
  for (size_t i = 0; i < series.size(); ++i) {
    const size_t eq = series[i].find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == series[i].size())
      return fail("bench plot: --series takes LABEL=FILE.json, not '" + series[i] + "'");
    const std::string label = series[i].substr(0, eq), file = series[i].substr(eq + 1);
    std::ifstream in(file);
    if (!in) return fail("bench plot: cannot read " + file);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return fail("bench plot: " + file + " is not JSON");
    auto p = points_of(j, {"prefill_tok_s"}, file);
    auto d = points_of(j, {"decode_tok_s", "decode_tok_s_at_context"}, file);
    if (!p) return fail("bench plot: " + p.message());
    if (!d) return fail("bench plot: " + d.message());
    if (p->empty() && d->empty())
      return fail("bench plot: " + file + " has no prefill_tok_s or decode tok/s");
    const uint32_t rgb = kPalette[i % std::size(kPalette)];
    prefill.series.push_back({label, rgb, *p});
    decode.series.push_back({label, rgb, *d});
  }
  const Drawing drawing = lay_out_charts({prefill, decode});
  auto png = encode_png(draw_raster(drawing));
  if (!png) return fail("bench plot: " + png.message());
  for (const auto& [path, bytes] :
       {std::pair{out + ".svg", draw_svg(drawing)}, std::pair{out + ".png", *png}}) {
    std::ofstream f(path, std::ios::binary);
    f << bytes;
    if (!f) return fail("bench plot: cannot write " + path);
    std::printf("wrote %s\n", path.c_str());
  }
  return 0;
}

}  // namespace orchid::cli
