// orchid bench serve: concurrent streamed chat completions over a socket, timed per stream.
#include "orchid/bench/serve_bench.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

namespace orchid {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One streamed completion as the client saw it.
struct StreamTimes {
  Clock::time_point start, first, end;
  bool got_first = false;
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// A connected socket to host:port, or an error.
Expected<int> connect_to(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (int e = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); e != 0)
    return err("bench serve: cannot resolve ", host, ": ", gai_strerror(e));
  int fd = -1;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) return err("bench serve: cannot connect to ", host, ":", port);
  return fd;
}

// POSTs a streamed chat completion (HTTP/1.0: the answer ends with the connection) and reads its
// server-sent events: the first content or reasoning delta's time, the usage at the end.
Status stream_once(const ServeBenchOptions& o, const std::string& prompt, int max_tokens,
                   StreamTimes& t) {
  const nlohmann::json body = {
      {"messages", {{{"role", "user"}, {"content", prompt}}}},
      {"temperature", 0},
      {"max_tokens", max_tokens},
      {"ignore_eos", true},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}}};
  const std::string b = body.dump();
  const std::string req = "POST /v1/chat/completions HTTP/1.0\r\nHost: " + o.host +
                          "\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(b.size()) + "\r\n\r\n" + b;
  t.start = Clock::now();
  auto fd = connect_to(o.host, o.port);
  if (!fd) return fd.error();
  for (size_t sent = 0; sent < req.size();) {
    const ssize_t n = send(*fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      close(*fd);
      return err("bench serve: the request could not be sent");
    }
    sent += size_t(n);
  }
  std::string buf, status_line;
  bool in_body = false;
  char chunk[16384];
  Status result;
  // Handles one complete line of the body (an SSE "data: " line or a blank one).
  auto on_line = [&](std::string_view line) {
    if (!line.starts_with("data: ") || line == "data: [DONE]") return;
    const auto ev = nlohmann::json::parse(line.substr(6), nullptr, false);
    if (ev.is_discarded()) return;
    if (ev.contains("usage") && ev["usage"].is_object()) {
      t.prompt_tokens = ev["usage"].value("prompt_tokens", int64_t(0));
      t.completion_tokens = ev["usage"].value("completion_tokens", int64_t(0));
    }
    if (!t.got_first && ev.contains("choices") && ev["choices"].is_array() &&
        !ev["choices"].empty()) {
      const auto& d = ev["choices"][0].value("delta", nlohmann::json::object());
      const auto text = [&](const char* k) {
        return d.contains(k) && d[k].is_string() && !d[k].get<std::string>().empty();
      };
      if (text("content") || text("reasoning_content")) t.first = Clock::now(), t.got_first = true;
    }
  };
  for (;;) {
    const ssize_t n = recv(*fd, chunk, sizeof chunk, 0);
    if (n <= 0) break;
    buf.append(chunk, size_t(n));
    if (!in_body) {
      const size_t h = buf.find("\r\n\r\n");
      if (h == std::string::npos) continue;
      status_line = buf.substr(0, buf.find("\r\n"));
      buf.erase(0, h + 4);
      in_body = true;
      if (status_line.find(" 200 ") == std::string::npos) {
        result = err("bench serve: the server answered ", status_line);
        break;
      }
    }
    size_t pos = 0;
    for (size_t nl; (nl = buf.find('\n', pos)) != std::string::npos; pos = nl + 1) {
      std::string_view line(buf.data() + pos, nl - pos);
      if (line.ends_with('\r')) line.remove_suffix(1);
      on_line(line);
    }
    buf.erase(0, pos);
  }
  close(*fd);
  t.end = Clock::now();
  if (!result.ok()) return result;
  if (!in_body) return err("bench serve: no answer from ", o.host, ":", o.port);
  if (t.completion_tokens == 0) return err("bench serve: a stream ended without its usage");
  if (!t.got_first) t.first = t.end;
  return {};
}

// A prompt of about `words` words, unique to (tag) so that no cached state covers it.
std::string prompt_of(int words, const std::string& tag) {
  static const char* kWords[] = {"the", "quick", "brown", "fox", "jumps",
                                 "over", "the", "lazy", "dog", "again"};
  std::string s = tag + ":";
  for (int i = 0; i < words; ++i) s += std::string(" ") + kWords[i % 10];
  return s;
}

}  // namespace

Status parse_serve_url(const std::string& url, ServeBenchOptions& opts) {
  std::string rest = url;
  if (rest.starts_with("http://")) rest.erase(0, 7);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return err("--url: HOST:PORT, got '", url, "'");
  opts.host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit) ||
      std::stoi(port) < 1 || std::stoi(port) > 65535)
    return err("--url: bad port in '", url, "'");
  opts.port = std::stoi(port);
  return {};
}

Expected<nlohmann::json> serve_bench(const ServeBenchOptions& o) {
  // Words per token of this server's tokenizer, from one short request.
  StreamTimes probe;
  const int kProbeWords = 200;
  ORCHID_TRY(stream_once(o, prompt_of(kProbeWords, "probe"), 1, probe));
  const double tokens_per_word = double(std::max<int64_t>(probe.prompt_tokens, 1)) / kProbeWords;
  nlohmann::json cases = nlohmann::json::array();
  std::printf("%8s %8s %16s %12s %18s\n", "prompt", "streams", "aggregate tok/s", "x one",
              "first token s (max)");
  int run = 0;
  for (int p : o.prompt_tokens) {
    const int words = std::max(1, int(p / tokens_per_word));
    double one = 0;
    for (int n : o.streams) {
      ++run;
      std::vector<StreamTimes> t(static_cast<size_t>(n));
      std::vector<Status> st(static_cast<size_t>(n));
      std::vector<std::thread> threads;
      const auto t0 = Clock::now();
      for (int i = 0; i < n; ++i)
        threads.emplace_back([&, i] {
          st[size_t(i)] = stream_once(
              o, prompt_of(words, "run " + std::to_string(run) + " stream " + std::to_string(i)),
              o.max_tokens, t[size_t(i)]);
        });
      for (std::thread& th : threads) th.join();
      const auto t1 = Clock::now();
      for (const Status& s : st) ORCHID_TRY(s);
      int64_t total = 0, prompt = 0;
      double ttft_max = 0, ttft_sum = 0;
      nlohmann::json per = nlohmann::json::array(), ttft = nlohmann::json::array();
      for (const StreamTimes& s : t) {
        total += s.completion_tokens, prompt = std::max(prompt, s.prompt_tokens);
        const double f = seconds(s.start, s.first), d = seconds(s.first, s.end);
        ttft.push_back(f), ttft_sum += f, ttft_max = std::max(ttft_max, f);
        per.push_back(d > 0 ? double(s.completion_tokens - 1) / d : 0.0);
      }
      const double agg = double(total) / seconds(t0, t1);
      if (n == o.streams.front()) one = agg / n;
      cases.push_back({{"prompt_tokens", prompt},
                       {"streams", n},
                       {"completion_tokens", total},
                       {"seconds", seconds(t0, t1)},
                       {"aggregate_tok_s", agg},
                       {"vs_one_stream", one > 0 ? agg / one : 0.0},
                       {"per_stream_decode_tok_s", per},
                       {"time_to_first_token_s", ttft},
                       {"time_to_first_token_mean_s", ttft_sum / n},
                       {"time_to_first_token_max_s", ttft_max}});
      std::printf("%8lld %8d %16.1f %12.2f %18.3f\n", static_cast<long long>(prompt), n, agg,
                  one > 0 ? agg / one : 0.0, ttft_max);
      std::fflush(stdout);
    }
  }
  return nlohmann::json{{"what", "orchid bench serve"},
                        {"server", o.host + ":" + std::to_string(o.port)},
                        {"max_tokens", o.max_tokens},
                        {"cases", cases}};
}

}  // namespace orchid
