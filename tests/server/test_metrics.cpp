// Prometheus text exposition: HELP/TYPE before samples, number spelling, label escaping,
// cumulative histogram buckets ending at +Inf with _sum and _count.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <sstream>

#include "orchid/server/metrics.h"

namespace orchid::server {
namespace {

TEST(Metrics, Numbers) {
  EXPECT_EQ(prometheus_number(3), "3");
  EXPECT_EQ(prometheus_number(0), "0");
  EXPECT_EQ(prometheus_number(-2), "-2");
  EXPECT_EQ(prometheus_number(0.25), "0.25");
  EXPECT_EQ(prometheus_number(0.0025), "0.0025");
  EXPECT_EQ(prometheus_number(1.0 / 0.0), "+Inf");
  EXPECT_EQ(prometheus_number(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(prometheus_number(std::nan("")), "NaN");
  EXPECT_EQ(prometheus_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(Metrics, CounterGaugeAndLabels) {
  PrometheusWriter w;
  w.counter("x_total", "Things.\nSecond line", 5);
  w.gauge("g", "A gauge.", 1.5);
  w.family("r_total", "By route.", "counter");
  w.sample("r_total", {{"route", "/v1/x"}, {"status", "200"}}, 2);
  EXPECT_EQ(w.text(),
            "# HELP x_total Things.\\nSecond line\n# TYPE x_total counter\nx_total 5\n"
            "# HELP g A gauge.\n# TYPE g gauge\ng 1.5\n"
            "# HELP r_total By route.\n# TYPE r_total counter\n"
            "r_total{route=\"/v1/x\",status=\"200\"} 2\n");
}

TEST(Metrics, HistogramIsCumulative) {
  Histogram h({0.5, 1, 10});
  for (double v : {0.0625, 0.5, 0.75, 5.0, 50.0, 0.25}) h.observe(v);
  PrometheusWriter w;
  w.histogram("lat_seconds", "Latency.", h.snapshot());
  EXPECT_EQ(w.text(),
            "# HELP lat_seconds Latency.\n# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{le=\"0.5\"} 3\n"  // 0.0625, 0.5 (le is inclusive), 0.25
            "lat_seconds_bucket{le=\"1\"} 4\n"
            "lat_seconds_bucket{le=\"10\"} 5\n"
            "lat_seconds_bucket{le=\"+Inf\"} 6\n"
            "lat_seconds_sum 56.5625\n"
            "lat_seconds_count 6\n");
}

TEST(Metrics, ServerExpositionIsWellFormed) {
  ServerMetrics m;
  m.prompt_tokens += 12;
  m.generation_tokens += 3;
  m.time_to_first_token.observe(0.2);
  m.count_request("/v1/chat/completions", 200);
  m.count_request("/v1/chat/completions", 400);
  const std::string text = m.render(2, 1, true);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_NE(text.find("\norchid_prompt_tokens_total 12\n"), std::string::npos);
  EXPECT_NE(text.find("\norchid_generation_tokens_total 3\n"), std::string::npos);
  EXPECT_NE(text.find("\norchid_queue_depth 2\n"), std::string::npos);
  EXPECT_NE(text.find("orchid_time_to_first_token_seconds_count 1\n"), std::string::npos);
  EXPECT_NE(
      text.find("orchid_http_requests_total{route=\"/v1/chat/completions\",status=\"400\"} 1\n"),
      std::string::npos);
  // Every sample's family was declared with TYPE just before its samples, once.
  std::istringstream in(text);
  std::string line, current;
  std::set<std::string> typed;
  for (int n = 1; std::getline(in, line); ++n) {
    ASSERT_FALSE(line.empty()) << "line " << n;
    if (line.rfind("# TYPE ", 0) == 0) {
      current = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(typed.insert(current).second) << "second TYPE for " << current;
      continue;
    }
    if (line[0] == '#') continue;
    const std::string name = line.substr(0, line.find_first_of(" {"));
    EXPECT_EQ(name.rfind(current, 0), 0u) << "line " << n << ": " << line << " outside " << current;
  }
}

}  // namespace
}  // namespace orchid::server
