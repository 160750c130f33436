// The HTTP/1.1 layer: cpp-httplib behind a small interface; this wrapper's .cpp is the only
// file that includes httplib.h. Routes are exact paths; bodies are read with a byte limit
// (Content-Length over it: 413 before reading; chunked bodies: 413 as soon as the limit is
// passed), handlers never throw past the wrapper (500), and streamed bodies go out chunked.
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
  // When set, the body is streamed (Transfer-Encoding: chunked): called once, after the
  // headers are sent, on the connection's thread; it writes until it returns.
  std::function<void(const ChunkWriter& write)> stream;
  // Called once when the response is finished with, whether `stream` ran or not.
  std::function<void()> on_close;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  size_t max_body_bytes = 8 << 20;
  size_t threads = 32;  // connections served at once (each holds a thread while open)
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

  // Registers a handler for METHOD PATH (exact). Before bind(). Other methods on a
  // registered path answer 405.
  void route(const std::string& method, const std::string& path, HttpHandler handler);
  // Binds and listens (connections queue until start()). Returns the port. Ignores SIGPIPE
  // for the process: a client that goes away must not kill the server.
  Expected<int> bind();
  // Serves on a background thread.
  void start();
  // Stops accepting and returns once every connection has been served and closed (idle
  // keep-alive connections end within 2 s). Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace orchid::server
