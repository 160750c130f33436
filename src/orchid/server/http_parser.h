// An incremental HTTP/1.0 and 1.1 request reader: bytes go in as they arrive, a whole request
// (head + body) comes out, or a status to refuse it with. It holds no socket, so the reactor
// feeds it from non-blocking reads and the tests feed it byte by byte.
//
// Strict where leniency would be a hazard: one Content-Length (digits only), never together
// with Transfer-Encoding (request smuggling), only "chunked" as a transfer coding, a head of
// at most `max_head_bytes` and `max_headers` fields, a body of at most `max_body_bytes` —
// refused as soon as its announced or received size passes the limit, before it is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace orchid::server {

struct HttpLimits {
  size_t max_head_bytes = 64 << 10;  // request line + header fields
  size_t max_headers = 128;
  size_t max_body_bytes = 8 << 20;
};

struct ParsedRequest {
  std::string method;
  std::string path;  // the target without its query string
  int minor = 1;     // HTTP/1.minor
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool keep_alive = true;  // what the client asked for (1.1: unless "close"; 1.0: "keep-alive")
  bool expect_continue = false;  // "Expect: 100-continue" with a body to come

  // Value of a header (case-insensitive name), "" when absent.
  std::string header(std::string_view name) const;
};

class RequestReader {
 public:
  enum class State {
    need_more,   // feed more bytes
    head_done,   // the head is parsed and the body is still to come (once per request)
    complete,    // take() the request
    failed,      // refuse with status() / error()
  };

  explicit RequestReader(HttpLimits limits) : limits_(limits) {}

  // Consumes from the front of `in` what belongs to the current request (the rest, e.g. a
  // pipelined next request, stays). Returns the state after it.
  State feed(std::string& in);
  State state() const { return state_; }
  // Whether any byte of the current request has arrived (an idle keep-alive connection: no).
  bool started() const { return started_; }
  const ParsedRequest& request() const { return req_; }
  // The finished request; the reader is ready for the next one.
  ParsedRequest take();
  int status() const { return status_; }
  const std::string& error() const { return error_; }

 private:
  State fail(int status, std::string message);
  State parse_head(std::string_view head);
  State read_body(std::string& in);
  State read_chunked(std::string& in);

  HttpLimits limits_;
  State state_ = State::need_more;
  bool started_ = false;
  bool head_parsed_ = false;
  ParsedRequest req_;
  // The body: a fixed length, or chunked (the size of the chunk being read, or -1 while a
  // size line is awaited; trailers after the last chunk).
  bool chunked_ = false;
  size_t body_left_ = 0;
  int64_t chunk_left_ = -1;
  bool in_trailers_ = false;
  int status_ = 0;
  std::string error_;
};

// "OK", "Not Found", ... for the statuses the server answers.
const char* http_reason(int status);

}  // namespace orchid::server
