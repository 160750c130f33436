// Helpers shared by the subcommands.
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "cli/commands.h"

namespace orchid::cli {

Expected<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return err("cannot open ", path);
  std::string s{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  if (f.bad()) return err("cannot read ", path);
  return s;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "orchid: error: %s\n", message.c_str());
  return 1;
}

Expected<std::vector<int32_t>> parse_token_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string_view item(text.data() + pos, comma - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int32_t id = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size())
      return err("--tokens: '", std::string(item), "' is not a token id (expected e.g. 1,2,3)");
    ids.push_back(id);
    pos = comma + 1;
  }
  return ids;
}

}  // namespace orchid::cli

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "orchid/backend/select_backend.h"
#include "orchid/util/load_progress.h"

namespace orchid::cli {

void add_model_options(CLI::App* cmd, ModelOptions& opts, bool required) {
  cmd->add_option("-m,--model", opts.dir,
                  required ? "model directory (config.json + safetensors)"
                           : "model directory (config.json + safetensors; default: the built-in "
                             "demo model)")
      ->required(required);
  cmd->add_option("--quantize", opts.quantize, "quantize a bf16 checkpoint at load: q4")
      ->check(CLI::IsMember({"q4"}));
  cmd->add_option("--backend", opts.backend,
                  "compute backend: auto (cuda when a GPU is usable), cpu, cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_flag("--exact", opts.exact,
                "cpu backend: the exact path (weights dequantized to fp32, fp32 products: the "
                "reference) instead of the fast one (also ORCHID_CPU_EXACT=1)");
}

Expected<std::string> demo_model_dir() {
  std::vector<std::filesystem::path> places;
  if (const char* env = std::getenv("ORCHID_DEMO_MODEL"); env && *env) {
    places.emplace_back(env);
  } else {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      const auto prefix = exe.parent_path().parent_path();
      places.push_back(prefix / "models" / "orchid-demo");
      places.push_back(prefix / "share" / "orchid" / "models" / "orchid-demo");
    }
  }
  std::string looked;
  for (const auto& dir : places) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(dir / "config.json", ec)) return dir.string();
    looked += (looked.empty() ? "" : ", ") + dir.string();
  }
  return err("no -m given and the built-in demo model is not in ", looked.empty() ? "?" : looked,
             " (set ORCHID_DEMO_MODEL or pass -m DIR)");
}

Expected<std::string> model_dir_or_demo(const std::string& dir) {
  return dir.empty() ? demo_model_dir() : Expected<std::string>(dir);
}

// On a terminal, the load's slow steps as a bar on stderr: what, bytes done of the total, rate;
// a step's last line stays with its time.
void show_load_progress() {
  if (!isatty(STDERR_FILENO)) return;
  set_load_progress_sink([](const LoadProgress& p) {
    const double gib = 1024.0 * 1024 * 1024, rate = p.seconds > 0 ? p.done / p.seconds / 1e9 : 0;
    const double f = p.total ? std::min(1.0, double(p.done) / double(p.total)) : 0;
    if (p.finished) {
      std::fprintf(stderr, "\r\033[Korchid: %s: %.2f GiB in %.1f s (%.2f GB/s)\n", p.what.c_str(),
                   p.done / gib, p.seconds, rate);
      return;
    }
    char bar[31];
    const int filled = int(f * 30);
    for (int i = 0; i < 30; ++i) bar[i] = i < filled ? '#' : '.';
    bar[30] = 0;
    std::fprintf(stderr, "\r\033[K%s [%s] %.2f / %.2f GiB  %.2f GB/s", p.what.c_str(), bar,
                 p.done / gib, p.total / gib, rate);
    std::fflush(stderr);
  });
}

Expected<LoadedModel> open_model(const ModelOptions& opts) {
  show_load_progress();
  LoadOptions lo;
  lo.quantize_q4 = opts.quantize == "q4";
  auto dir = model_dir_or_demo(opts.dir);
  if (!dir) return dir.error();
  auto m = load_model(*dir, lo);
  if (!m) return m.error();
  LoadedModel out;
  out.model = std::move(*m);
  std::string note;
  auto b = make_backend(opts.backend, *out.model, &note, opts.exact);
  if (!b) return b.error();
  if (!note.empty()) std::fprintf(stderr, "orchid: %s\n", note.c_str());
  out.backend = std::move(*b);
  return out;
}

Expected<ChatModel> open_chat_model(const ModelOptions& given) {
  auto dir = model_dir_or_demo(given.dir);
  if (!dir) return dir.error();
  ModelOptions opts = given;
  opts.dir = *dir;
  auto lm = open_model(opts);
  if (!lm) return lm.error();
  auto assets = load_chat_assets(opts.dir);
  if (!assets) return assets.error();
  return ChatModel{std::move(*lm), std::move(*assets)};
}

}  // namespace orchid::cli
