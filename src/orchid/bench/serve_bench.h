// `orchid bench serve`: streams at once against a running `orchid serve` (any backend) — for each
// prompt length and each number of concurrent streams, the aggregate and per-stream tok/s and
// each stream's time to first token, as JSON (bench/results/*-serve-*.json). A plain HTTP/1.0
// client on a socket (the GPU machine has no node), streamed chat completions, greedy, ignoring
// EOS, each prompt made unique so the state cache serves none of it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "orchid/util/status.h"

namespace orchid {

struct ServeBenchOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<int> streams = {1, 2, 4, 8};
  std::vector<int> prompt_tokens = {4096, 32768};  // about; the server's count is reported
  int max_tokens = 256;
};

// Runs every (prompt length, streams) case; errors name the request that failed.
Expected<nlohmann::json> serve_bench(const ServeBenchOptions& opts);

// "http://HOST:PORT" (or "HOST:PORT") into opts' host and port.
Status parse_serve_url(const std::string& url, ServeBenchOptions& opts);

}  // namespace orchid
