// Metrics: mutex-guarded histograms, atomic counters, and the text exposition writer.
#include "orchid/server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace orchid::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  std::lock_guard lock(mu_);
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];  // bucket i: bounds_[i-1] < v <= bounds_[i]; the last one is +Inf
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  std::lock_guard lock(mu_);
  Snapshot s;
  s.upper_bounds = bounds_;
  uint64_t acc = 0;
  for (uint64_t c : counts_) s.cumulative.push_back(acc += c);
  s.count = acc;
  s.sum = sum_;
  return s;
}

std::string prometheus_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(int64_t(v));
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  return std::string(buf, end);
}

std::string prometheus_label_value(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void PrometheusWriter::family(std::string_view name, std::string_view help, std::string_view type) {
  std::string h;
  for (char c : help) h += c == '\\' ? "\\\\" : c == '\n' ? "\\n" : std::string(1, c);
  out_.append("# HELP ").append(name).append(" ").append(h).append("\n");
  out_.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void PrometheusWriter::sample(std::string_view name, const Labels& labels, double value) {
  out_.append(name);
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out_ += ',';
      out_.append(labels[i].first).append("=\"").append(prometheus_label_value(labels[i].second));
      out_ += '"';
    }
    out_ += '}';
  }
  out_.append(" ").append(prometheus_number(value)).append("\n");
}

void PrometheusWriter::counter(std::string_view name, std::string_view help, double value) {
  family(name, help, "counter");
  sample(name, {}, value);
}

void PrometheusWriter::gauge(std::string_view name, std::string_view help, double value) {
  family(name, help, "gauge");
  sample(name, {}, value);
}

void PrometheusWriter::histogram(std::string_view name, std::string_view help,
                                 const Histogram::Snapshot& h) {
  family(name, help, "histogram");
  const std::string base(name);
  for (size_t i = 0; i < h.upper_bounds.size(); ++i)
    sample(base + "_bucket", {{"le", prometheus_number(h.upper_bounds[i])}},
           double(h.cumulative[i]));
  sample(base + "_bucket", {{"le", "+Inf"}}, double(h.count));
  sample(base + "_sum", {}, h.sum);
  sample(base + "_count", {}, double(h.count));
}

ServerMetrics::ServerMetrics()
    : time_to_first_token({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      inter_token_latency({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      request_duration({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}) {}

void ServerMetrics::count_request(std::string_view route, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{std::string(route), status}];
}

void ServerMetrics::set_slots(std::vector<int64_t> tokens) {
  std::lock_guard lock(mu_);
  slot_tokens_ = std::move(tokens);
}

std::string ServerMetrics::render(size_t queue_depth, int running, bool model_loaded) const {
  PrometheusWriter w;
  w.counter("orchid_prompt_tokens_total", "Prompt tokens of finished generation requests.",
            double(prompt_tokens.load()));
  w.counter("orchid_cached_prompt_tokens_total",
            "Prompt tokens restored from the multi-turn state cache instead of prefilled.",
            double(cached_prompt_tokens.load()));
  w.counter("orchid_generation_tokens_total", "Generated tokens.",
            double(generation_tokens.load()));
  w.histogram("orchid_time_to_first_token_seconds",
              "Time from a request's arrival to its first generated token.",
              time_to_first_token.snapshot());
  w.histogram("orchid_inter_token_latency_seconds", "Time between consecutive generated tokens.",
              inter_token_latency.snapshot());
  w.histogram("orchid_request_duration_seconds",
              "Time from a generation request's arrival to its last token.",
              request_duration.snapshot());
  w.gauge("orchid_queue_depth", "Generation requests waiting for the model.", double(queue_depth));
  w.gauge("orchid_requests_running",
          "Generation requests running on the model (at most --parallel, taking turns).",
          double(running));
  w.gauge("orchid_model_loaded", "1 once the model is loaded.", model_loaded ? 1 : 0);
  w.counter("orchid_state_cache_hits_total",
            "Requests that restored a cached state snapshot (multi-turn reuse).",
            double(cache_hits.load()));
  w.counter("orchid_state_cache_misses_total", "Requests that found no usable state snapshot.",
            double(cache_misses.load()));
  w.gauge("orchid_state_cache_bytes", "Bytes held by state snapshots.", double(cache_bytes.load()));
  w.gauge("orchid_state_cache_entries", "State snapshots held.", double(cache_entries.load()));
  w.counter("orchid_state_cache_host_hits_total",
            "Requests that resumed from a snapshot in the cache's host tier.",
            double(cache_host_hits.load()));
  w.gauge("orchid_state_cache_host_bytes", "Bytes of state snapshots moved to host memory.",
          double(cache_host_bytes.load()));
  w.gauge("orchid_state_cache_host_entries", "State snapshots in host memory.",
          double(cache_host_entries.load()));
  w.counter("orchid_decode_bursts_total",
            "Bursts of the batched on-device decode (each steps every decoding request).",
            double(decode_bursts.load()));
  w.counter("orchid_decode_burst_lanes_total",
            "Requests summed over the bursts (divided by the bursts: the mean batch).",
            double(decode_burst_lanes.load()));
  w.gauge("orchid_decode_max_lanes", "Most requests one burst has stepped together.",
          double(decode_max_lanes.load()));
  std::lock_guard lock(mu_);
  w.gauge("orchid_slots", "Live states the engine keeps (--parallel).", double(slot_tokens_.size()));
  w.family("orchid_slot_tokens", "Tokens held by each slot's state (-1: not made yet).", "gauge");
  for (size_t i = 0; i < slot_tokens_.size(); ++i)
    w.sample("orchid_slot_tokens", {{"slot", std::to_string(i)}}, double(slot_tokens_[i]));
  w.family("orchid_http_requests_total", "HTTP requests answered, by route and status.", "counter");
  for (const auto& [key, n] : requests_)
    w.sample("orchid_http_requests_total",
             {{"route", key.first}, {"status", std::to_string(key.second)}}, double(n));
  return w.text();
}

}  // namespace orchid::server
