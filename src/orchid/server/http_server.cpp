// HttpServer: an epoll reactor on one thread owns every connection that is reading a request,
// writing a plain answer, lingering after an error, or idle between requests. A complete
// request either runs on the reactor (quick routes, and the answers the server gives itself:
// 404, 405, OPTIONS, errors) or is handed, with its connection, to a worker, which hands the
// connection back when its answer is written or queued. Only the reactor closes connections,
// so the per-client counts are kept on one thread.
#include "orchid/server/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "orchid/server/http_parser.h"
#include "orchid/server/worker_pool.h"

namespace orchid::server {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration secs(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// A request body at least this large is followed by malloc_trim: the parsed JSON and its
// copies are freed by then, and glibc would otherwise keep the largest request's peak.
constexpr size_t kTrimAfterBytes = 1 << 20;

bool set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

std::string numeric_host(const sockaddr_storage& a, socklen_t len) {
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return "?";
  return host;
}

// Writes all of `data` to a non-blocking socket, waiting for room at most `timeout` without
// progress; false when the client is gone or stalled.
bool send_all(int fd, std::string_view data, Clock::duration timeout) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      const int ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count());
      if (poll(&p, 1, ms) <= 0 || (p.revents & (POLLERR | POLLHUP))) return false;
      continue;
    }
    return false;
  }
  return true;
}

// A peek that neither blocks nor consumes: 0 bytes means the peer closed (FIN), a reset is an
// error; no data yet or pipelined bytes mean it is still there.
bool peer_alive(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return true;
  if (n == 0) return false;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

// closed: shut and out of the event set, deleted (and its descriptor freed) at the end of the
// loop's turn, so nothing on the stack still holds it.
enum class Phase { reading, writing, lingering, handed, closed };

struct Conn {
  Conn(int f, std::string p, HttpLimits limits) : fd(f), peer(std::move(p)), reader(limits) {}
  int fd;
  std::string peer;  // numeric client address: the key of the per-client count
  std::string in;    // bytes read and not yet consumed
  RequestReader reader;
  Phase phase = Phase::reading;
  Clock::time_point deadline;
  bool head_deadline_set = false;  // the current request's head deadline runs
  std::string out;                 // writing: the answer, from out_off on
  size_t out_off = 0;
  bool close_after = false;  // close once `out` is written (and linger when `linger`)
  bool linger = false;
};

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
  return "";
}

struct HttpServer::Impl {
  explicit Impl(HttpServerOptions o)
      : opts(std::move(o)), limits{64 << 10, 128, opts.max_body_bytes}, pool(opts.threads) {}

  struct Route {
    std::map<std::string, HttpHandler> methods;
    std::set<std::string> quick;  // methods whose handler runs on the reactor
  };

  HttpServerOptions opts;
  HttpLimits limits;
  std::map<std::string, Route> routes;
  WorkerPool pool;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  size_t max_connections = 0;
  std::thread reactor;
  std::atomic<bool> stopping{false};
  std::mutex stop_mu;

  // Reactor-only state.
  std::unordered_map<int, std::unique_ptr<Conn>> conns;  // held by the reactor
  std::set<int> handed;                                  // held by a worker
  std::map<std::string, size_t> per_client;
  Clock::time_point accept_paused_until{};
  bool accept_paused = false;
  // Connections whose next request may be in `in` already: processed by the loop, not from
  // inside the previous answer's write (pipelined requests must not recurse).
  std::vector<int> ready;
  std::vector<int> dead;  // closed this turn (see Phase::closed)
  bool stop_forced = false;  // stopping, and its grace for answers in flight is over

  // Connections coming back from workers.
  std::mutex back_mu;
  std::vector<std::unique_ptr<Conn>> back;
  std::set<int> handed_fds;  // guarded by back_mu: for stop() to shut them down

  ~Impl() {
    for (int fd : {listen_fd, epoll_fd, wake_fd})
      if (fd >= 0) close(fd);
  }

  // ----------------------------------------------------------------------------------------
  // Answers.

  std::string error_body(int status, const std::string& message) const {
    if (opts.error_body) return opts.error_body(status, message);
    return "{\"error\":{\"message\":\"" + message + "\"}}";
  }

  HttpResponse error(int status, const std::string& message) const {
    HttpResponse r;
    r.status = status;
    r.body = error_body(status, message);
    return r;
  }

  // The CORS origin to echo for this request, "" when none applies.
  std::string cors_origin(const ParsedRequest& req) const {
    const std::string origin = req.header("Origin");
    if (origin.empty()) return "";
    for (const auto& o : opts.cors_origins) {
      if (o == "*") return "*";
      if (o == origin) return origin;
    }
    return "";
  }

  std::string allowed_methods(const Route& r) const {
    std::string allow;
    for (const auto& [m, _] : r.methods) {
      allow += (allow.empty() ? "" : ", ") + m;
      if (m == "GET") allow += ", HEAD";
    }
    return allow + ", OPTIONS";
  }

  // The status line and headers of an answer; a stream's length is its chunks (1.1) or the
  // connection's end (1.0).
  std::string head_of(const HttpResponse& r, const ParsedRequest& req, bool close,
                      bool stream) const {
    std::string h = "HTTP/1.1 " + std::to_string(r.status) + " " + http_reason(r.status) + "\r\n";
    if (r.status != 204) {
      h += "Content-Type: " + r.content_type + "\r\n";
      if (!stream)
        h += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
      else if (req.minor >= 1)
        h += "Transfer-Encoding: chunked\r\n";
    }
    h += close ? "Connection: close\r\n" : "Connection: keep-alive\r\n";
    for (const auto& [k, v] : r.headers) h += k + ": " + v + "\r\n";
    if (const std::string origin = cors_origin(req); !origin.empty()) {
      h += "Access-Control-Allow-Origin: " + origin + "\r\n";
      if (origin != "*") h += "Vary: Origin\r\n";
    }
    return h + "\r\n";
  }

  // The route of a path: its exact one, else the longest "PREFIX*" route it starts with
  // (a non-empty rest).
  std::map<std::string, Route>::const_iterator find_route(const std::string& path) const {
    auto it = routes.find(path);
    if (it != routes.end()) return it;
    auto best = routes.end();
    for (auto r = routes.begin(); r != routes.end(); ++r) {
      const std::string& key = r->first;
      if (!key.ends_with('*')) continue;
      const std::string_view prefix(key.data(), key.size() - 1);
      if (path.size() > prefix.size() && path.starts_with(prefix) &&
          (best == routes.end() || key.size() > best->first.size()))
        best = r;
    }
    return best;
  }

  // What the server answers without a handler: unknown paths, other methods, OPTIONS.
  std::optional<HttpResponse> own_answer(const ParsedRequest& req, const Route** route) const {
    auto it = find_route(req.path);
    if (it == routes.end()) {
      if (req.method == "OPTIONS" && req.path == "*") {
        HttpResponse r;
        r.status = 204;
        return r;
      }
      return error(404, "Invalid URL (" + req.method + " " + req.path + ")");
    }
    *route = &it->second;
    const Route& rt = it->second;
    if (req.method == "OPTIONS") {
      HttpResponse r;
      r.status = 204;
      const std::string allow = allowed_methods(rt);
      r.headers.emplace_back("Allow", allow);
      if (!cors_origin(req).empty()) {
        r.headers.emplace_back("Access-Control-Allow-Methods", allow);
        const std::string asked = req.header("Access-Control-Request-Headers");
        r.headers.emplace_back("Access-Control-Allow-Headers",
                               asked.empty() ? "Authorization, Content-Type" : asked);
        r.headers.emplace_back("Access-Control-Max-Age", "600");
      }
      return r;
    }
    const std::string& m = req.method == "HEAD" ? std::string("GET") : req.method;
    if (!rt.methods.count(m)) {
      const std::string allow = allowed_methods(rt);
      HttpResponse r = error(
          405, "Method " + req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")");
      r.headers.emplace_back("Allow", allow);
      return r;
    }
    return std::nullopt;
  }

  // The route's handler behind the gate; exceptions become 500.
  HttpResponse run_handler(const Route& rt, const ParsedRequest& req, HttpRequest& r) {
    try {
      std::optional<HttpResponse> gated;
      if (opts.gate) gated = opts.gate(r);
      if (gated) return std::move(*gated);
      return rt.methods.at(req.method == "HEAD" ? "GET" : req.method)(r);
    } catch (const std::exception& e) {
      return error(500, std::string("internal error: ") + e.what());
    } catch (...) {
      return error(500, "internal error");
    }
  }

  static HttpRequest to_request(ParsedRequest& req, int fd) {
    HttpRequest r;
    r.method = req.method;
    r.path = req.path;
    r.body = std::move(req.body);
    r.headers = req.headers;  // kept: the answer's CORS headers read Origin
    r.connected = [fd] { return peer_alive(fd); };
    return r;
  }

  void told(const ParsedRequest& req, int status) {
    if (opts.on_answer) {
      const auto it = find_route(req.path);
      opts.on_answer(it != routes.end() ? it->first : std::string(), status);
    }
  }

  // ----------------------------------------------------------------------------------------
  // The reactor.

  void watch(int fd, uint32_t events, int op) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd, op, fd, &ev);
  }

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(wake_fd, &one, sizeof one);
  }

  size_t open_connections() const { return conns.size() + handed.size(); }

  void close_conn(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end() || it->second->phase == Phase::closed) return;
    auto pc = per_client.find(it->second->peer);
    if (pc != per_client.end() && --pc->second == 0) per_client.erase(pc);
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    it->second->phase = Phase::closed;
    dead.push_back(fd);
  }

  void reap() {
    for (int fd : dead) {
      close(fd);
      conns.erase(fd);
    }
    dead.clear();
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage a{};
      socklen_t len = sizeof a;
      const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: stop listening for a moment instead of spinning on the event.
          watch(listen_fd, 0, EPOLL_CTL_MOD);
          accept_paused = true;
          accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
        }
        return;
      }
      std::string peer = numeric_host(a, len);
      if (open_connections() >= max_connections ||
          per_client[peer] >= opts.max_connections_per_client) {
        const std::string b = error_body(503, "too many connections; retry later");
        const std::string msg = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
                                "application/json\r\nContent-Length: " +
                                std::to_string(b.size()) +
                                "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + b;
        [[maybe_unused]] const ssize_t n = send(fd, msg.data(), msg.size(), MSG_NOSIGNAL);
        if (per_client[peer] == 0) per_client.erase(peer);
        close(fd);
        continue;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ++per_client[peer];
      auto c = std::make_unique<Conn>(fd, std::move(peer), limits);
      c->deadline = Clock::now() + secs(opts.head_timeout_s);
      c->head_deadline_set = true;  // a new connection has a head's time to send it
      watch(fd, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
      conns.emplace(fd, std::move(c));
    }
  }

  // Queues an answer the reactor writes; `close` ends the connection after it.
  void answer_on_reactor(Conn& c, std::string bytes, bool close, bool linger = false) {
    c.out = std::move(bytes);
    c.out_off = 0;
    c.close_after = close;
    c.linger = linger;
    c.phase = Phase::writing;
    c.deadline = Clock::now() + secs(opts.write_timeout_s);
    watch(c.fd, EPOLLOUT, EPOLL_CTL_MOD);
    write_some(c);
  }

  // Refuses a request the reader could not take: the answer, then a lingering close (the
  // client reads it instead of a reset, and its unread body is never parsed as a request).
  void refuse(Conn& c, int status, const std::string& message) {
    ParsedRequest req = c.reader.request();
    HttpResponse r = error(status, message);
    if (status == 408) r.headers.emplace_back("Connection", "close");
    told(req, status);
    answer_on_reactor(c, head_of(r, req, true, false) + r.body, true, true);
  }

  // Reads what has arrived, a small piece at a time, each processed before the next is read:
  // `in` stays small, so consuming pipelined requests from its front stays cheap.
  void read_some(Conn& c) {
    char buf[16 << 10];
    for (size_t got = 0; got < (256 << 10);) {
      const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        got += size_t(n);
        if (c.phase == Phase::lingering) continue;  // drained and dropped
        c.in.append(buf, size_t(n));
        const int fd = c.fd;
        process(c);
        // A dispatched request may have handed `c` to a worker, which can finish and free it
        // before we get here: look it up again rather than touch `c`.
        const auto it = conns.find(fd);
        if (it == conns.end() || it->second->phase != Phase::reading) return;  // rest waits
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      // The peer closed or reset: a request it did not finish is dropped with it.
      return close_conn(c.fd);
    }
  }

  // Reads on from `in`: sets deadlines as a request arrives, dispatches it when complete.
  void process(Conn& c) {
    for (;;) {
      const RequestReader::State s = c.reader.feed(c.in);
      if (c.reader.started() && !c.head_deadline_set) {
        c.head_deadline_set = true;
        c.deadline = Clock::now() + secs(opts.head_timeout_s);
      }
      switch (s) {
        case RequestReader::State::need_more:
          return;
        case RequestReader::State::failed:
          return refuse(c, c.reader.status(), c.reader.error());
        case RequestReader::State::head_done: {
          const std::string length = c.reader.request().header("Content-Length");
          const double bytes = length.empty() ? double(opts.max_body_bytes) : std::atof(length.c_str());
          c.deadline = Clock::now() + secs(opts.head_timeout_s + bytes / opts.body_min_bytes_per_s);
          if (c.reader.request().expect_continue) {
            constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
            [[maybe_unused]] const ssize_t n =
                send(c.fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL);
          }
          continue;  // the body may be in `in` already
        }
        case RequestReader::State::complete:
          return dispatch(c);
      }
    }
  }

  void dispatch(Conn& c) {
    ParsedRequest req = c.reader.take();
    c.head_deadline_set = false;
    const bool close = !req.keep_alive || stopping;
    const Route* route = nullptr;
    if (auto own = own_answer(req, &route)) {
      told(req, own->status);
      if (req.body.size() >= kTrimAfterBytes) {
        req.body = std::string();
        malloc_trim(0);
      }
      const bool head_only = req.method == "HEAD" || own->status == 204;
      return answer_on_reactor(c, head_of(*own, req, close, false) + (head_only ? "" : own->body),
                               close);
    }
    const std::string& m = req.method == "HEAD" ? std::string("GET") : req.method;
    if (route->quick.count(m)) {
      HttpRequest r = to_request(req, c.fd);
      HttpResponse out = run_handler(*route, req, r);
      if (!out.stream) {
        told(req, out.status);
        std::string bytes = head_of(out, req, close, false);
        if (req.method != "HEAD") bytes += out.body;
        if (out.on_close) out.on_close();
        return answer_on_reactor(c, std::move(bytes), close);
      }
      // A quick route that streams after all: its stream runs on a worker.
      return hand(c, std::move(req), std::move(out));
    }
    hand(c, std::move(req), std::nullopt);
  }

  // Gives the connection to a worker for the request (and the answer, when already made).
  void hand(Conn& c, ParsedRequest req, std::optional<HttpResponse> made) {
    const int fd = c.fd;
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    c.phase = Phase::handed;
    auto node = conns.extract(fd);
    handed.insert(fd);
    {
      std::lock_guard lock(back_mu);
      handed_fds.insert(fd);
    }
    auto conn = std::shared_ptr<Conn>(std::move(node.mapped()));
    auto request = std::make_shared<ParsedRequest>(std::move(req));
    auto answer = std::make_shared<std::optional<HttpResponse>>(std::move(made));
    pool.enqueue([this, conn, request, answer] {
      serve_on_worker(*conn, *request, std::move(*answer));
      give_back(std::unique_ptr<Conn>(new Conn(std::move(*conn))));
    });
  }

  void give_back(std::unique_ptr<Conn> c) {
    {
      std::lock_guard lock(back_mu);
      handed_fds.erase(c->fd);
      back.push_back(std::move(c));
    }
    wake();
  }

  // Connections back from workers: written in full (reading the next request, which may be
  // in `in` already), with an answer left to write, or to be closed.
  void take_back() {
    std::vector<std::unique_ptr<Conn>> got;
    {
      std::lock_guard lock(back_mu);
      got.swap(back);
    }
    for (auto& c : got) {
      const int fd = c->fd;
      handed.erase(fd);
      Conn& conn = *c;
      conns.emplace(fd, std::move(c));
      if (conn.phase == Phase::writing && !stop_forced) {
        watch(fd, EPOLLOUT, EPOLL_CTL_ADD);
        write_some(conn);
      } else if (conn.close_after || stopping || conn.phase == Phase::writing) {
        watch(fd, EPOLLIN, EPOLL_CTL_ADD);
        close_conn(fd);
      } else {
        watch(fd, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
        next_request(conn);
      }
    }
  }

  void next_request(Conn& c) {
    c.phase = Phase::reading;
    c.out.clear();
    c.out.shrink_to_fit();
    c.deadline = Clock::now() + secs(opts.idle_timeout_s);
    if (!c.in.empty()) ready.push_back(c.fd);
  }

  void write_some(Conn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n =
          send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_off += size_t(n);
        c.deadline = Clock::now() + secs(opts.write_timeout_s);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // EPOLLOUT brings us back
      return close_conn(c.fd);
    }
    if (c.close_after && c.linger) {
      // Half-close and drain what the client still sends for up to 2 s.
      shutdown(c.fd, SHUT_WR);
      c.phase = Phase::lingering;
      c.deadline = Clock::now() + std::chrono::seconds(2);
      c.out.clear();
      watch(c.fd, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
      return;
    }
    if (c.close_after || stopping) return close_conn(c.fd);
    watch(c.fd, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
    next_request(c);
  }

  void expire() {
    const auto now = Clock::now();
    if (accept_paused && now >= accept_paused_until && !stopping) {
      accept_paused = false;
      watch(listen_fd, EPOLLIN, EPOLL_CTL_MOD);
    }
    std::vector<int> late;
    for (const auto& [fd, c] : conns)
      if (c->phase != Phase::closed && now >= c->deadline) late.push_back(fd);
    for (int fd : late) {
      Conn& c = *conns.at(fd);
      if (c.phase == Phase::reading && c.reader.started()) {
        refuse(c, 408, "the request did not arrive in time");
        // Its 408 gets one write attempt; a client that sends too slowly gets no more time.
        if (c.phase == Phase::writing) close_conn(fd);
      } else {
        close_conn(fd);  // idle keep-alive, a stalled reader, or the end of a lingering close
      }
    }
  }

  void loop() {
    epoll_event events[256];
    auto next_scan = Clock::now();
    bool listening = true;
    Clock::time_point stop_at{};
    for (;;) {
      const int n = epoll_wait(epoll_fd, events, 256, 50);
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == listen_fd) {
          if (listening) accept_all();
        } else if (fd == wake_fd) {
          uint64_t v;
          [[maybe_unused]] const ssize_t r = read(wake_fd, &v, sizeof v);
        } else if (auto it = conns.find(fd); it != conns.end()) {
          Conn& c = *it->second;
          if (c.phase == Phase::writing)
            write_some(c);
          else if (c.phase == Phase::reading || c.phase == Phase::lingering)
            read_some(c);
        }
      }
      take_back();
      while (!ready.empty()) {
        const int fd = ready.back();
        ready.pop_back();
        auto it = conns.find(fd);
        if (it != conns.end() && it->second->phase == Phase::reading) process(*it->second);
      }
      if (Clock::now() >= next_scan) {
        expire();
        next_scan = Clock::now() + std::chrono::milliseconds(50);
      }
      reap();
      if (!stopping) continue;
      if (listening) {
        // Stop: no new connections; idle ones and half-read requests end now; answers being
        // written and requests in handlers finish.
        listening = false;
        epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
        close(listen_fd);
        listen_fd = -1;
        stop_at = Clock::now() + std::chrono::seconds(2);
        std::vector<int> idle;
        for (const auto& [fd, c] : conns)
          if (c->phase == Phase::reading) idle.push_back(fd);
        for (int fd : idle) close_conn(fd);
        reap();
      }
      if (!stop_forced && Clock::now() >= stop_at) {
        // Handlers still waiting on their clients: shut the sockets so the waits end.
        stop_forced = true;
        std::lock_guard lock(back_mu);
        for (int fd : handed_fds) ::shutdown(fd, SHUT_RDWR);
        std::vector<int> rest;
        for (const auto& [fd, c] : conns) rest.push_back(fd);
        for (int fd : rest) close_conn(fd);
        reap();
      }
      bool left = !handed.empty();
      for (const auto& [fd, c] : conns) left = left || c->phase != Phase::closed;
      if (!left) return;
    }
  }

  // ----------------------------------------------------------------------------------------
  // A worker: the handler, then the answer (a plain one goes back to the reactor to write
  // what the socket did not take at once; a stream is written here).

  void serve_on_worker(Conn& c, ParsedRequest& req, std::optional<HttpResponse> made) {
    const size_t body_bytes = req.body.size();
    const Route& rt = routes.at(req.path);
    const bool close = !req.keep_alive || stopping;
    HttpResponse out;
    if (made) {
      out = std::move(*made);
    } else {
      HttpRequest r = to_request(req, c.fd);
      out = run_handler(rt, req, r);
    }
    told(req, out.status);
    if (!out.stream) {
      std::string bytes = head_of(out, req, close, false);
      if (req.method != "HEAD") bytes += out.body;
      out = HttpResponse{};
      if (body_bytes >= kTrimAfterBytes) malloc_trim(0);
      // One try here; what the socket does not take now, the reactor writes as room comes.
      const ssize_t n = send(c.fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      const size_t sent = n > 0 ? size_t(n) : 0;
      if (sent < bytes.size()) {
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
          c.close_after = true;
        } else {
          c.out = std::move(bytes);
          c.out_off = sent;
          c.phase = Phase::writing;
          c.deadline = Clock::now() + secs(opts.write_timeout_s);
        }
      }
      c.close_after = c.close_after || close;
      if (out.on_close) out.on_close();
      return;
    }
    // A stream: chunked to 1.1 clients; to 1.0 clients the body ends with the connection.
    const bool chunked = req.minor >= 1;
    const auto timeout = secs(opts.write_timeout_s);
    bool ok = send_all(c.fd, head_of(out, req, close || !chunked, true), timeout);
    ChunkWriter write = [&](std::string_view s) {
      if (!ok || s.empty()) return ok;
      if (chunked) {
        char size[32];
        const int len = std::snprintf(size, sizeof size, "%zx\r\n", s.size());
        ok = send_all(c.fd, std::string(size, size_t(len)) + std::string(s) + "\r\n", timeout);
      } else {
        ok = send_all(c.fd, s, timeout);
      }
      return ok;
    };
    if (ok) {
      try {
        out.stream(write);
      } catch (...) {
        ok = false;
      }
    }
    if (ok && chunked) ok = send_all(c.fd, "0\r\n\r\n", timeout);
    c.close_after = !ok || close || !chunked;
    if (out.on_close) out.on_close();
  }
};

HttpServer::HttpServer(HttpServerOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::route(const std::string& method, const std::string& path, HttpHandler handler,
                       Runs runs) {
  auto& r = impl_->routes[path];
  r.methods[method] = std::move(handler);
  if (runs == Runs::quick) r.quick.insert(method);
}

Expected<int> HttpServer::bind() {
  std::signal(SIGPIPE, SIG_IGN);
  Impl& m = *impl_;
  // Every connection is a descriptor: take what the hard limit allows, and keep some for the
  // model's files and the rest of the process.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 1 << 16);
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  const size_t fd_room = lim.rlim_cur > 256 ? size_t(lim.rlim_cur) - 128 : 128;
  m.max_connections = std::max<size_t>(1, std::min(m.opts.max_connections, fd_room));

  const auto& o = m.opts;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const std::string port = std::to_string(o.port);
  if (const int rc = getaddrinfo(o.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return err("cannot listen on ", o.host, ":", o.port, ": ", gai_strerror(rc));
  int fd = -1, last_errno = 0;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) break;
    last_errno = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0)
    return err("cannot listen on ", o.host, ":", o.port, ": ",
               last_errno ? std::strerror(last_errno) : "no usable address");
  set_nonblocking(fd);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port = bound.ss_family == AF_INET6
                             ? ntohs(reinterpret_cast<sockaddr_in6&>(bound).sin6_port)
                             : ntohs(reinterpret_cast<sockaddr_in&>(bound).sin_port);
  m.listen_fd = fd;
  m.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  m.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m.epoll_fd < 0 || m.wake_fd < 0) return err("cannot create the server's event loop: ", std::strerror(errno));
  m.watch(m.listen_fd, EPOLLIN, EPOLL_CTL_ADD);
  m.watch(m.wake_fd, EPOLLIN, EPOLL_CTL_ADD);
  return bound_port;
}

void HttpServer::start() {
  impl_->reactor = std::thread([this] { impl_->loop(); });
}

void HttpServer::stop() {
  std::lock_guard lock(impl_->stop_mu);
  if (impl_->reactor.joinable()) {
    impl_->stopping = true;
    impl_->wake();
    impl_->reactor.join();
  }
  impl_->pool.shutdown();
}

}  // namespace orchid::server
