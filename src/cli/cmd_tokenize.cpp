// `orchid tokenize`: ids of a text (special-token strings recognised, nothing added), the text
// of ids (--decode, optionally through the streaming detokenizer), or encode throughput
// (--bench N, used by bench/tokenizer/bench.mjs). The tokenizer is DIR/tokenizer.json (-m DIR)
// or --tokenizer FILE.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "orchid/tokenizer/tokenizer.h"

namespace orchid::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Ids given as a JSON array or as a comma/space/newline separated list.
Expected<std::vector<int32_t>> parse_ids(const std::string& text) {
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_array()) return err("--decode: input is not a JSON array");
    std::vector<int32_t> ids;
    for (const auto& v : j) {
      if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
        return err("--decode: ", v.dump(), " is not a token id");
      ids.push_back(v.get<int32_t>());
    }
    return ids;
  }
  std::string list = text;
  for (char& c : list)
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') c = ',';
  std::string compact;
  for (size_t i = 0; i < list.size(); ++i)
    if (!(list[i] == ',' && (compact.empty() || compact.back() == ','))) compact += list[i];
  while (!compact.empty() && compact.back() == ',') compact.pop_back();
  if (compact.empty()) return std::vector<int32_t>{};
  return parse_token_list(compact);
}

std::string json_ids(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

struct Args {
  std::string model_dir, tokenizer_path, file, text;
  bool json = false, decode = false, stream = false, skip_special = false, stats = false;
  bool docs = false;
  int bench = 0;
};

int run(const Args& a) {
  std::string path = a.tokenizer_path;
  if (path.empty()) {
    if (a.model_dir.empty()) return fail("tokenize: give -m DIR or --tokenizer FILE");
    path = a.model_dir + "/tokenizer.json";
  }
  if (a.file.empty() == a.text.empty()) return fail("tokenize: give exactly one of --file, --text");
  std::string input = a.text;
  if (!a.file.empty()) {
    auto r = read_file(a.file);
    if (!r) return fail(r.message());
    input = std::move(*r);
  }
  auto t0 = Clock::now();
  auto tok = Tokenizer::load(path);
  if (!tok) return fail(tok.message());
  double load_s = seconds_since(t0);

  if (a.decode) {
    auto ids = parse_ids(input);
    if (!ids) return fail(ids.message());
    std::string out;
    if (a.stream) {
      StreamingDetokenizer detok(*tok, a.skip_special);
      for (int32_t id : *ids) {
        auto piece = detok.push(id);
        if (!piece) return fail(piece.message());
        out += *piece;
      }
      out += detok.flush();
    } else {
      auto text = tok->decode(*ids, a.skip_special);
      if (!text) return fail(text.message());
      out = std::move(*text);
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }

  // With --docs the input is documents separated by the byte 0x1E, each encoded on its own.
  std::vector<std::string_view> docs;
  if (a.docs) {
    size_t start = 0;
    for (size_t i = 0; i <= input.size(); ++i)
      if (i == input.size() || input[i] == '\x1e') {
        docs.push_back(std::string_view(input).substr(start, i - start));
        start = i + 1;
      }
  } else {
    docs.push_back(input);
  }

  if (a.bench > 0) {
    // N single-threaded encodes of all documents. The first run starts with an empty BPE
    // cache; the best one is the steady state.
    size_t bytes = 0;
    for (auto d : docs) bytes += d.size();
    double first = 0, best = 1e30, best_cpu = 1e30;
    size_t n_tokens = 0;
    for (int i = 0; i < a.bench; ++i) {
      double c0 = thread_cpu_seconds();
      auto t1 = Clock::now();
      n_tokens = 0;
      for (auto d : docs) n_tokens += tok->encode(d).size();
      double wall = seconds_since(t1), cpu = thread_cpu_seconds() - c0;
      if (i == 0) first = wall;
      best = std::min(best, wall);
      best_cpu = std::min(best_cpu, cpu);
    }
    nlohmann::json j = {{"bytes", bytes},
                        {"docs", docs.size()},
                        {"tokens", n_tokens},
                        {"load_s", load_s},
                        {"first_s", first},
                        {"best_s", best},
                        {"best_cpu_s", best_cpu},
                        {"mb_per_s_first", double(bytes) / 1e6 / first},
                        {"mb_per_s_best", double(bytes) / 1e6 / best},
                        {"engine", tok->pretokenizer_engine()},
                        {"runs", a.bench}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }

  auto t1 = Clock::now();
  std::vector<std::vector<int32_t>> all;
  size_t n_tokens = 0;
  for (auto d : docs) {
    all.push_back(tok->encode(d));
    n_tokens += all.back().size();
  }
  double encode_s = seconds_since(t1);
  if (a.stats)
    std::fprintf(stderr, "%s\n",
                 nlohmann::json({{"bytes", input.size()},
                                 {"docs", docs.size()},
                                 {"tokens", n_tokens},
                                 {"load_s", load_s},
                                 {"encode_s", encode_s},
                                 {"engine", tok->pretokenizer_engine()}})
                     .dump()
                     .c_str());
  if (a.json) {  // one array per document, one per line
    for (const auto& ids : all) std::printf("%s\n", json_ids(ids).c_str());
    return 0;
  }
  std::vector<int32_t> ids;
  for (const auto& d : all) ids.insert(ids.end(), d.begin(), d.end());
  // One line per token: id and its text (escaped bytes for partial UTF-8).
  for (int32_t id : ids) {
    std::string_view b = tok->token_bytes(id).value_or("");
    std::printf("%d\t%s\n", id,
                nlohmann::json(std::string(b))
                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                    .c_str());
  }
  return 0;
}

}  // namespace

void add_tokenize(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("tokenize", "text → token ids (or ids → text with --decode)");
  cmd->add_option("-m,--model", args->model_dir, "model directory containing tokenizer.json");
  cmd->add_option("--tokenizer", args->tokenizer_path, "path of a tokenizer.json");
  cmd->add_option("--file", args->file, "read the input from this file (bytes as they are)");
  cmd->add_option("--text", args->text, "the input text");
  cmd->add_flag("--json", args->json, "print the ids as one JSON array");
  cmd->add_flag("--stats", args->stats,
                "also print load/encode seconds and the split engine as JSON on stderr");
  cmd->add_flag("--decode", args->decode, "input is ids (JSON array or list); print their text");
  cmd->add_flag("--stream", args->stream, "with --decode: use the streaming detokenizer");
  cmd->add_flag("--skip-special", args->skip_special, "with --decode: leave out special tokens");
  cmd->add_option("--bench", args->bench, "encode N times; print load time and MB/s as JSON")
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--docs", args->docs,
                "the input is documents separated by the byte 0x1E, each encoded on its own "
                "(--json prints one array per line)");
  cmd->callback([args, &exit_code] { exit_code = run(*args); });
}

}  // namespace orchid::cli
