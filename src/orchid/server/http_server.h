// The HTTP/1.1 (and 1.0) server: one reactor thread reads every connection's requests without
// blocking and writes plain answers; handlers that may block (generation) run on a bounded
// pool of worker threads, which also write streamed answers. A connection that is slow to send
// its head or body holds no thread and is closed at its deadline; connections are bounded in
// total and per client address. Routes are exact paths or prefixes; bodies are read with a byte limit
// (413 before they are read); handlers never throw past the server (500). HEAD is answered
// for GET routes and OPTIONS for every route (with CORS when origins are configured). Streamed
// bodies go out chunked to HTTP/1.1 clients, and until the connection closes to HTTP/1.0 ones.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "orchid/util/status.h"

namespace orchid::server {

struct HttpRequest {
  std::string method;
  std::string path;  // without the query string
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Value of a header (case-insensitive name), "" when absent.
  std::string header(std::string_view name) const;
  // False once the client has closed the connection (a non-blocking peek at the socket).
  // Callable from any thread while the handler or its stream runs, never after.
  std::function<bool()> connected = [] { return true; };
};

// Writes one chunk of a streamed body; false once the client is gone.
using ChunkWriter = std::function<bool(std::string_view)>;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // When set, the body is streamed (chunked to HTTP/1.1 clients): called once, after the
  // headers are sent, on a worker thread; it writes until it returns.
  std::function<void(const ChunkWriter& write)> stream;
  // Called once when the response is finished with, whether `stream` ran or not.
  std::function<void()> on_close;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  size_t max_body_bytes = 8 << 20;
  size_t threads = 32;  // requests handled at once on worker threads (more wait for one)
  // Open connections in all and per client address; one more is answered 503 and closed.
  size_t max_connections = 1024;
  size_t max_connections_per_client = 256;
  // Deadlines: a request's head must arrive within head_timeout_s of its first byte, its body
  // within head_timeout_s + its size at body_min_bytes_per_s; an idle keep-alive connection
  // is closed after idle_timeout_s, and one that does not read its answer after
  // write_timeout_s without progress.
  double head_timeout_s = 10;
  double body_min_bytes_per_s = 64 << 10;
  double idle_timeout_s = 5;
  double write_timeout_s = 30;
  // Browser clients: origins allowed by CORS ("*": any). Empty: no CORS headers.
  std::vector<std::string> cors_origins;
  // Runs before the route's handler, after the body is read (e.g. authentication); a
  // response here answers the request instead.
  std::function<std::optional<HttpResponse>(const HttpRequest&)> gate;
  // The JSON body of the errors the wrapper answers itself (404, 405, 413, 500, bad HTTP).
  std::function<std::string(int status, const std::string& message)> error_body;
  // Told of every answered request: the route ("" for unknown paths) and the status.
  std::function<void(std::string_view route, int status)> on_answer;
};

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions opts);
  ~HttpServer();  // stops
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers a handler for METHOD PATH: exact, or a prefix when PATH ends with '*' ("/v1/models/*"
  // takes "/v1/models/x" and "/v1/models/a/b", not "/v1/models/"). Before bind(). Other methods on a
  // registered path answer 405. A quick handler (one that never blocks: health, metrics) runs
  // on the reactor thread, so it answers even when every worker is busy.
  enum class Runs { on_worker, quick };
  void route(const std::string& method, const std::string& path, HttpHandler handler,
             Runs runs = Runs::on_worker);
  // Binds and listens (connections queue until start()). Returns the port. Ignores SIGPIPE
  // for the process (a client that goes away must not kill the server) and raises the open
  // file limit to its hard limit (connections are file descriptors).
  Expected<int> bind();
  // Serves on a background thread.
  void start();
  // Stops accepting, closes idle connections, and returns once every request in a handler
  // has finished (after 2 s, their sockets are shut down so that waits on the client end).
  // Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace orchid::server
