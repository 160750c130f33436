// RequestReader: the head is parsed once it has fully arrived (it is small and bounded); the
// body is taken as it comes, by length or by chunks, and counted against the limit as it
// grows, so an oversize body is refused without being held.
#include "orchid/server/http_parser.h"

#include <strings.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace orchid::server {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// RFC 9110 token characters (methods and field names).
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!(std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(char(c)) !=
                                 std::string_view::npos))
      return false;
  return true;
}

// Whether a comma-separated header value lists `token` (case-insensitive).
bool lists(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    if (iequals(trim(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

// The end of the head: the offset just past its empty line, or npos. Bare LF line ends are
// taken too (RFC 9112 lets a server accept them).
size_t head_end(std::string_view in) {
  for (size_t i = in.find('\n'); i != std::string_view::npos; i = in.find('\n', i + 1)) {
    if (i + 1 < in.size() && in[i + 1] == '\n') return i + 2;
    if (i + 2 < in.size() && in[i + 1] == '\r' && in[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

}  // namespace

std::string ParsedRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return "";
}

RequestReader::State RequestReader::fail(int status, std::string message) {
  status_ = status;
  error_ = std::move(message);
  return state_ = State::failed;
}

ParsedRequest RequestReader::take() {
  ParsedRequest r = std::move(req_);
  *this = RequestReader(limits_);
  return r;
}

RequestReader::State RequestReader::feed(std::string& in) {
  if (state_ == State::failed || state_ == State::complete) return state_;
  if (!head_parsed_) {
    // Empty lines before a request line are skipped (RFC 9112 §2.2).
    if (!started_) {
      const size_t skip = in.find_first_not_of("\r\n");
      in.erase(0, skip == std::string::npos ? in.size() : skip);
      if (in.empty()) return state_ = State::need_more;
      started_ = true;
    }
    const size_t end = head_end(in);
    if (end == std::string::npos) {
      if (in.size() > limits_.max_head_bytes)
        return fail(431, "the request head exceeds " + std::to_string(limits_.max_head_bytes) +
                             " bytes");
      return state_ = State::need_more;
    }
    if (end > limits_.max_head_bytes)
      return fail(431,
                  "the request head exceeds " + std::to_string(limits_.max_head_bytes) + " bytes");
    const State s = parse_head(std::string_view(in).substr(0, end));
    in.erase(0, end);
    if (s == State::failed) return s;
    head_parsed_ = true;
    if (!chunked_ && body_left_ == 0) return state_ = State::complete;
    return state_ = State::head_done;
  }
  return chunked_ ? read_chunked(in) : read_body(in);
}

RequestReader::State RequestReader::parse_head(std::string_view head) {
  // The request line: METHOD SP target SP HTTP/1.x
  const size_t eol = head.find('\n');
  const std::string_view line = trim(head.substr(0, eol));
  head.remove_prefix(eol + 1);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "malformed request line");
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, "malformed request method");
  if (!version.starts_with("HTTP/")) return fail(400, "malformed HTTP version");
  if (version == "HTTP/1.1") {
    req_.minor = 1;
  } else if (version == "HTTP/1.0") {
    req_.minor = 0;
  } else {
    return fail(505, "HTTP version " + std::string(version.substr(5)) +
                         " is not supported (HTTP/1.0 and 1.1 are)");
  }
  // Absolute form (a proxy's): keep the path.
  if (target.starts_with("http://") || target.starts_with("https://")) {
    const size_t slash = target.find('/', target.find("//") + 2);
    target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  if (target.empty() || (target.front() != '/' && target != "*"))
    return fail(400, "malformed request target");
  for (unsigned char c : target)
    if (c <= ' ' || c == 0x7f) return fail(400, "malformed request target");
  req_.method = std::string(method);
  req_.path = std::string(target.substr(0, target.find_first_of("?#")));

  // Header fields.
  std::string content_length;
  bool has_length = false, has_te = false;
  std::string te;
  while (!head.empty()) {
    const size_t nl = head.find('\n');
    std::string_view field = head.substr(0, nl);
    head.remove_prefix(nl == std::string_view::npos ? head.size() : nl + 1);
    if (!field.empty() && field.back() == '\r') field.remove_suffix(1);
    if (field.empty()) break;
    if (field.front() == ' ' || field.front() == '\t')
      return fail(400, "obsolete header line folding is not accepted");
    const size_t colon = field.find(':');
    if (colon == std::string_view::npos || !is_token(field.substr(0, colon)))
      return fail(400, "malformed header field");
    if (req_.headers.size() >= limits_.max_headers)
      return fail(431, "more than " + std::to_string(limits_.max_headers) + " header fields");
    const std::string_view name = field.substr(0, colon), value = trim(field.substr(colon + 1));
    req_.headers.emplace_back(std::string(name), std::string(value));
    if (iequals(name, "Content-Length")) {
      if (has_length && content_length != value)
        return fail(400, "conflicting Content-Length headers");
      has_length = true;
      content_length = std::string(value);
    } else if (iequals(name, "Transfer-Encoding")) {
      te += (has_te ? "," : "") + std::string(value);
      has_te = true;
    }
  }

  const std::string connection = req_.header("Connection");
  req_.keep_alive = req_.minor == 1 ? !lists(connection, "close") : lists(connection, "keep-alive");
  if (has_te) {
    if (has_length) return fail(400, "Content-Length and Transfer-Encoding together");
    if (req_.minor == 0) return fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    // "chunked" must be the one (and last) coding: orchid decodes no others.
    if (!iequals(trim(te), "chunked"))
      return fail(501, "Transfer-Encoding '" + te + "' is not supported (only chunked)");
    chunked_ = true;
  } else if (has_length) {
    uint64_t n = 0;
    const char* b = content_length.data();
    const char* e = b + content_length.size();
    const auto [p, ec] = std::from_chars(b, e, n);
    if (content_length.empty() || !std::all_of(b, e, [](char c) { return c >= '0' && c <= '9'; }) ||
        ec != std::errc() || p != e)
      return fail(400, "invalid Content-Length '" + content_length + "'");
    if (n > limits_.max_body_bytes)
      return fail(413, "the request body (" + content_length + " bytes) exceeds " +
                           std::to_string(limits_.max_body_bytes) + " bytes");
    body_left_ = size_t(n);
  }
  const std::string expect = req_.header("Expect");
  if (!expect.empty()) {
    if (!iequals(expect, "100-continue")) return fail(417, "Expect '" + expect + "' is not supported");
    req_.expect_continue = req_.minor == 1 && (chunked_ || body_left_ > 0);
  }
  return state_ = State::need_more;
}

RequestReader::State RequestReader::read_body(std::string& in) {
  const size_t n = std::min(body_left_, in.size());
  req_.body.append(in, 0, n);
  in.erase(0, n);
  body_left_ -= n;
  return state_ = body_left_ == 0 ? State::complete : State::need_more;
}

RequestReader::State RequestReader::read_chunked(std::string& in) {
  constexpr size_t kMaxLine = 4096;  // a chunk-size line or a trailer field
  const auto too_big = [&] {
    return fail(413, "the request body exceeds " + std::to_string(limits_.max_body_bytes) +
                         " bytes");
  };
  for (;;) {
    if (in_trailers_ || chunk_left_ == -1) {
      const size_t nl = in.find('\n');
      if (nl == std::string::npos) {
        if (in.size() > kMaxLine) return fail(400, "malformed chunked body");
        return state_ = State::need_more;
      }
      std::string_view line(in.data(), nl);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (in_trailers_) {
        const bool last = line.empty();
        in.erase(0, nl + 1);
        if (last) return state_ = State::complete;
        continue;  // trailer fields are read and dropped
      }
      const std::string_view digits = trim(line.substr(0, line.find(';')));
      uint64_t size = 0;
      const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), size, 16);
      if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size())
        return fail(400, "malformed chunk size");
      in.erase(0, nl + 1);
      if (size == 0) {
        in_trailers_ = true;
        continue;
      }
      if (size > limits_.max_body_bytes - req_.body.size()) return too_big();
      chunk_left_ = int64_t(size);
    } else if (chunk_left_ > 0) {
      if (in.empty()) return state_ = State::need_more;
      const size_t n = std::min(size_t(chunk_left_), in.size());
      req_.body.append(in, 0, n);
      in.erase(0, n);
      chunk_left_ -= int64_t(n);
      if (chunk_left_ == 0) chunk_left_ = -2;  // the line end after the data
    } else {                                   // -2: CRLF (or LF) after a chunk's data
      if (in.empty() || (in == "\r")) return state_ = State::need_more;
      if (in.starts_with("\r\n")) {
        in.erase(0, 2);
      } else if (in.front() == '\n') {
        in.erase(0, 1);
      } else {
        return fail(400, "malformed chunked body");
      }
      chunk_left_ = -1;
    }
  }
}

const char* http_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Error";
  }
}

}  // namespace orchid::server
