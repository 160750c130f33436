// HttpServer on cpp-httplib 0.11 (the Debian package: declarations in httplib.h, the code in
// libcpp-httplib.so, so no CPPHTTPLIB_* option may be redefined here). What 0.11 lacks is
// done around it:
//  - the socket of a request: found by matching the request's local and peer addresses
//    against the process's open sockets (once per request that asks), for the
//    client-disconnect check and for closing a connection after a 413;
//  - a body limit for chunked bodies (payload_max_length only covers Content-Length, and even
//    then 0.11 reads the whole body before answering): POST bodies are read through a content
//    receiver that stops at the limit, and a Content-Length over it is refused before the
//    body is read. Either way the 413 is written directly, then the connection is
//    half-closed and drained for up to 2 s (a lingering close: the client reads the answer
//    instead of a reset) — httplib would otherwise parse the unread body as the next request.
#include "orchid/server/http_server.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

namespace orchid::server {
namespace {

int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

// The numeric host as httplib writes Request::remote_addr (getnameinfo, NI_NUMERICHOST).
std::string numeric_host(const sockaddr_storage& a, socklen_t len) {
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return "";
  return host;
}

// The open socket whose local port and peer address are the request's, or -1.
int find_connection_fd(int local_port, int remote_port, const std::string& remote_addr) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof local, peer_len = sizeof peer;
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    if (port_of(local) != local_port) continue;
    if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    if (port_of(peer) != remote_port || numeric_host(peer, peer_len) != remote_addr) continue;
    found = int(fd);
    break;
  }
  closedir(dir);
  return found;
}

// The connection of one request: its socket, found on first use.
class Connection {
 public:
  explicit Connection(const httplib::Request& req)
      : local_port_(req.local_port), remote_port_(req.remote_port), remote_addr_(req.remote_addr) {}

  int fd() {
    std::call_once(once_,
                   [this] { fd_ = find_connection_fd(local_port_, remote_port_, remote_addr_); });
    return fd_;
  }

  // A peek that neither blocks nor consumes: 0 bytes means the peer closed (FIN); a reset is an
  // error; no data yet (EAGAIN) or pipelined bytes mean it is still there.
  bool alive() {
    const int s = fd();
    if (s < 0) return true;  // not found: cannot tell, assume it is there
    char c;
    const ssize_t n = recv(s, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return true;
    if (n == 0) return false;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }

 private:
  int local_port_, remote_port_;
  std::string remote_addr_;
  std::once_flag once_;
  int fd_ = -1;
};

const char* reason_phrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 413:
      return "Payload Too Large";
    default:
      return "Error";
  }
}

// Answers `status` on the raw socket and closes our side gracefully (see the file comment).
// False when the socket was not found; the caller then answers through httplib.
bool answer_and_close(Connection& conn, int status, const std::string& body) {
  const int fd = conn.fd();
  if (fd < 0) return false;
  std::string msg =
      "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n" + body;
  size_t sent = 0;
  while (sent < msg.size()) {
    const ssize_t n = send(fd, msg.data() + sent, msg.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += size_t(n);
  }
  shutdown(fd, SHUT_WR);
  // Drain what the client still sends until it closes, for at most 2 s.
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  char buf[1 << 16];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, int(left.count())) <= 0) break;
    if (recv(fd, buf, sizeof buf, 0) <= 0) break;
  }
  return true;
}

// Serves connections on at most `max_threads` threads, made on demand. The thread that went
// idle last takes the next connection, so a light load keeps reusing a few warm threads;
// httplib's ThreadPool starts them all at once and wakes them round-robin, which touches every
// thread's stack and malloc cache and lets the resident memory creep up to the pool's size.
class LifoThreadPool final : public httplib::TaskQueue {
 public:
  explicit LifoThreadPool(size_t max_threads) : max_(std::max<size_t>(1, max_threads)) {}

  void enqueue(std::function<void()> fn) override {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      Worker* w = idle_.back();
      idle_.pop_back();
      w->job = std::move(fn);
      w->cv.notify_one();
    } else if (workers_.size() < max_) {
      auto w = std::make_unique<Worker>();
      w->job = std::move(fn);
      Worker* p = w.get();
      workers_.push_back(std::move(w));
      p->thread = std::thread([this, p] { run(*p); });
    } else {
      pending_.push_back(std::move(fn));  // every thread is busy: the next one free takes it
    }
  }

  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      for (auto& w : workers_) w->cv.notify_one();
    }
    for (auto& w : workers_) w->thread.join();
  }

 private:
  struct Worker {
    std::thread thread;
    std::condition_variable cv;
    std::function<void()> job;
  };

  void run(Worker& w) {
    std::unique_lock lock(mu_);
    for (;;) {
      if (w.job) {
        auto job = std::move(w.job);
        w.job = nullptr;
        lock.unlock();
        job();
        lock.lock();
      } else if (!pending_.empty()) {
        w.job = std::move(pending_.front());
        pending_.pop_front();
      } else if (stopping_) {
        return;
      } else {
        idle_.push_back(&w);
        w.cv.wait(lock, [&] { return w.job || stopping_; });
        if (!w.job) return;  // stopping (enqueue took it off idle_ when it gave a job)
      }
    }
  }

  const size_t max_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> idle_;  // most recently idle last
  std::deque<std::function<void()>> pending_;
  bool stopping_ = false;
};

std::string regex_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::strchr(".^$|()[]{}*+?\\", c)) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
  return "";
}

struct HttpServer::Impl {
  explicit Impl(HttpServerOptions o) : opts(std::move(o)) {}

  HttpServerOptions opts;
  httplib::Server svr;
  std::map<std::string, std::map<std::string, HttpHandler>> routes;  // path → method → handler
  std::thread thread;
  std::mutex stop_mu;
  bool bound = false;

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

  // Runs the route's handler (after the gate) and copies its answer into httplib's response.
  void dispatch(const std::string& path, const httplib::Request& req, std::string body,
                httplib::Response& res) {
    HttpRequest r;
    r.method = req.method;
    r.path = req.path;
    r.body = std::move(body);
    for (const auto& [k, v] : req.headers) r.headers.emplace_back(k, v);
    auto conn = std::make_shared<Connection>(req);
    r.connected = [conn] { return conn->alive(); };

    HttpResponse out;
    const auto& methods = routes.at(path);
    auto h = methods.find(req.method);
    if (h == methods.end()) {
      std::string allow;
      for (const auto& [m, _] : methods) allow += (allow.empty() ? "" : ", ") + m;
      out = error(
          405, "Method " + req.method + " is not allowed on " + path + " (allowed: " + allow + ")");
      out.headers.emplace_back("Allow", allow);
    } else {
      try {
        std::optional<HttpResponse> gated;
        if (opts.gate) gated = opts.gate(r);
        out = gated ? std::move(*gated) : h->second(r);
      } catch (const std::exception& e) {
        out = error(500, std::string("internal error: ") + e.what());
      } catch (...) {
        out = error(500, "internal error");
      }
    }
    apply(std::move(out), res);
  }

  static void apply(HttpResponse out, httplib::Response& res) {
    res.status = out.status;
    for (const auto& [k, v] : out.headers) res.set_header(k, v);
    if (!out.stream) {
      res.set_content(out.body, out.content_type);
      if (out.on_close) out.on_close();
      return;
    }
    auto stream = std::make_shared<std::function<void(const ChunkWriter&)>>(std::move(out.stream));
    res.set_chunked_content_provider(
        out.content_type,
        [stream](size_t, httplib::DataSink& sink) {
          bool ok = true;
          ChunkWriter write = [&](std::string_view s) {
            if (ok && !s.empty()) ok = sink.write(s.data(), s.size());
            return ok;
          };
          try {
            (*stream)(write);
          } catch (...) {
            ok = false;
          }
          if (ok) sink.done();
          return ok;  // false: httplib closes the connection
        },
        [on_close = std::move(out.on_close)](bool) {
          if (on_close) on_close();
        });
  }

  // Reads a POST/PUT/PATCH/DELETE body up to the limit; false after answering 413/400.
  bool read_body(const httplib::Request& req, httplib::Response& res,
                 const httplib::ContentReader& reader, std::string& body) {
    bool too_big = false;
    const bool ok = reader([&](const char* data, size_t n) {
      if (body.size() + n > opts.max_body_bytes) {
        too_big = true;
        return false;
      }
      body.append(data, n);
      return true;
    });
    if (ok) return true;
    const int status = too_big ? 413 : 400;
    const std::string msg =
        too_big ? "the request body exceeds " + std::to_string(opts.max_body_bytes) + " bytes"
                : "the request body could not be read";
    Connection conn(req);
    const std::string b = error_body(status, msg);
    res.status = status;
    if (!answer_and_close(conn, status, b)) {
      res.set_header("Connection", "close");
      res.set_content(b, "application/json");
    }
    return false;
  }

  void install() {
    svr.new_task_queue = [n = opts.threads] { return new LifoThreadPool(n); };
    svr.set_keep_alive_timeout(2);
    svr.set_keep_alive_max_count(100);
    svr.set_payload_max_length(opts.max_body_bytes);

    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      int status = 0;
      std::string msg;
      if (req.has_header("Content-Length")) {
        const std::string v = req.get_header_value("Content-Length");
        char* end = nullptr;
        errno = 0;
        const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || errno == ERANGE) {
          status = 400, msg = "invalid Content-Length";
        } else if (n > opts.max_body_bytes) {
          status = 413, msg = "the request body (" + v + " bytes) exceeds " +
                              std::to_string(opts.max_body_bytes) + " bytes";
        }
      } else if (req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos &&
                 req.method != "POST" && req.method != "PUT" && req.method != "PATCH" &&
                 req.method != "DELETE") {
        status = 400, msg = "a " + req.method + " request carries no body";
      }
      if (status == 0) return httplib::Server::HandlerResponse::Unhandled;
      Connection conn(req);
      const std::string b = error_body(status, msg);
      res.status = status;
      if (!answer_and_close(conn, status, b)) {
        res.set_header("Connection", "close");
        res.set_content(b, "application/json");
      }
      return httplib::Server::HandlerResponse::Handled;
    });

    for (const auto& [path, methods] : routes) {
      const std::string pattern = regex_escape(path);
      svr.Get(pattern, [this, path = path](const httplib::Request& req, httplib::Response& res) {
        dispatch(path, req, "", res);
      });
      auto with_body = [this, path = path](const httplib::Request& req, httplib::Response& res,
                                           const httplib::ContentReader& reader) {
        std::string body;
        if (read_body(req, res, reader, body)) dispatch(path, req, std::move(body), res);
      };
      svr.Post(pattern, with_body);
      svr.Put(pattern, with_body);
      svr.Patch(pattern, with_body);
      svr.Delete(pattern, with_body);
    }
    // Unknown paths: read (bounded) and answer 404 from the error handler.
    auto unknown = [this](const httplib::Request& req, httplib::Response& res,
                          const httplib::ContentReader& reader) {
      std::string body;
      if (read_body(req, res, reader, body)) res.status = 404;
    };
    svr.Post(".*", unknown);
    svr.Put(".*", unknown);
    svr.Patch(".*", unknown);
    svr.Delete(".*", unknown);

    svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string msg = res.status == 404 ? "Invalid URL (" + req.method + " " + req.path + ")"
                                          : std::string("HTTP error ") + std::to_string(res.status);
      res.set_content(error_body(res.status, msg), "application/json");
    });
    svr.set_exception_handler(
        [this](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          res.status = 500;
          res.set_content(error_body(500, "internal error"), "application/json");
        });
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      if (opts.on_answer) opts.on_answer(routes.count(req.path) ? req.path : "", res.status);
    });
  }
};

HttpServer::HttpServer(HttpServerOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::route(const std::string& method, const std::string& path, HttpHandler handler) {
  impl_->routes[path][method] = std::move(handler);
}

Expected<int> HttpServer::bind() {
  std::signal(SIGPIPE, SIG_IGN);
  impl_->install();
  const auto& o = impl_->opts;
  errno = 0;
  int port = o.port;
  bool ok;
  if (o.port == 0) {
    port = impl_->svr.bind_to_any_port(o.host);
    ok = port > 0;
  } else {
    ok = impl_->svr.bind_to_port(o.host, o.port);
  }
  if (!ok) {
    const int e = errno;
    return err("cannot listen on ", o.host, ":", o.port,
               e ? std::string(": ") + std::strerror(e)
                 : std::string(" (address in use or invalid host)"));
  }
  impl_->bound = true;
  return port;
}

void HttpServer::start() {
  impl_->thread = std::thread([this] { impl_->svr.listen_after_bind(); });
}

void HttpServer::stop() {
  std::lock_guard lock(impl_->stop_mu);
  if (impl_->thread.joinable()) {
    // httplib's stop() does nothing until the accept loop runs: let a fresh start() get there.
    for (int i = 0; i < 200 && !impl_->svr.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    impl_->svr.stop();
    impl_->thread.join();
  }
  impl_->bound = false;
}

}  // namespace orchid::server
