// Server metrics and their Prometheus text exposition (format 0.0.4): token counters,
// latency histograms, queue and state-cache gauges. Updated from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace orchid::server {

// A histogram with fixed upper bounds (ascending; +Inf is implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (= count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), the last one for +Inf
  double sum_ = 0;
};

// Writes the exposition text: each family's HELP and TYPE, then its samples, contiguous.
class PrometheusWriter {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  // Starts a family; type is counter, gauge or histogram.
  void family(std::string_view name, std::string_view help, std::string_view type);
  void sample(std::string_view name, const Labels& labels, double value);
  void counter(std::string_view name, std::string_view help, double value);
  void gauge(std::string_view name, std::string_view help, double value);
  void histogram(std::string_view name, std::string_view help, const Histogram::Snapshot& h);
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// A sample value as Prometheus reads it: integers without a fraction, +Inf/-Inf/NaN spelled so.
std::string prometheus_number(double v);
// A label value with \ " and newline escaped.
std::string prometheus_label_value(std::string_view v);

struct ServerMetrics {
  ServerMetrics();

  std::atomic<uint64_t> prompt_tokens{0};         // prompt tokens of finished generations
  std::atomic<uint64_t> cached_prompt_tokens{0};  // of which restored from the state cache
  std::atomic<uint64_t> generation_tokens{0};     // generated tokens
  std::atomic<int64_t> cache_hits{0}, cache_misses{0}, cache_bytes{0}, cache_entries{0};
  std::atomic<int64_t> cache_host_hits{0}, cache_host_bytes{0}, cache_host_entries{0};
  // The batched decode (Engine::batch_stats): bursts run, lanes summed over them, most at once.
  std::atomic<int64_t> decode_bursts{0}, decode_burst_lanes{0}, decode_max_lanes{0};
  Histogram time_to_first_token;  // seconds from the request's arrival to its first token
  Histogram inter_token_latency;  // seconds between consecutive tokens
  Histogram request_duration;     // seconds from arrival to the last token

  // Counts one answered request by route and HTTP status.
  void count_request(std::string_view route, int status);
  // The engine's slots after a request: the tokens each live state holds (-1: not made yet).
  void set_slots(std::vector<int64_t> tokens);

  // The whole exposition; the gauges that live elsewhere are passed in.
  std::string render(size_t queue_depth, int running, bool model_loaded) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::vector<int64_t> slot_tokens_;
};

}  // namespace orchid::server
