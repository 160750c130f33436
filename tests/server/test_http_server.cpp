// The HTTP layer on its own: the request reader fed byte by byte (framing, limits, the
// refusals), and HttpServer on an ephemeral port under what clients and attackers send —
// 200 slow-header connections while /health and a stream are served, head deadlines,
// per-client limits, HTTP/1.0 streams, HEAD, OPTIONS and CORS, pipelining.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "orchid/server/http_parser.h"
#include "orchid/server/http_server.h"
#include "raw_connection.h"

namespace orchid::test {
namespace {

using server::HttpRequest;
using server::HttpResponse;
using server::HttpServer;
using server::HttpServerOptions;
using server::ParsedRequest;
using server::RequestReader;
using State = RequestReader::State;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Feeds `bytes` one at a time; the reader's last state.
State feed_bytewise(RequestReader& r, const std::string& bytes, std::string& rest) {
  State s = State::need_more;
  for (char c : bytes) {
    rest += c;
    s = r.feed(rest);
    if (s == State::head_done) s = r.feed(rest);
    if (s == State::failed || s == State::complete) break;
  }
  return s;
}

// The status a whole request gets from a reader with a 1 KiB body limit (0: complete).
int status_of(const std::string& bytes) {
  RequestReader r(server::HttpLimits{1024, 16, 1024});
  std::string rest;
  const State s = feed_bytewise(r, bytes, rest);
  if (s == State::complete) return 0;
  return s == State::failed ? r.status() : -1;
}

TEST(HttpRequestReader, ReadsHeadAndBodyByteByByte) {
  RequestReader r(server::HttpLimits{});
  std::string rest;
  const std::string req =
      "POST /v1/x?y=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nX-A:  b \r\n\r\nhello";
  ASSERT_EQ(feed_bytewise(r, req + "GET", rest), State::complete);
  ParsedRequest p = r.take();
  EXPECT_EQ(p.method, "POST");
  EXPECT_EQ(p.path, "/v1/x");
  EXPECT_EQ(p.body, "hello");
  EXPECT_EQ(p.header("x-a"), "b");
  EXPECT_TRUE(p.keep_alive);
  // A pipelined request's first bytes stay for the next one.
  std::string more = "GET / HTTP/1.0\n\n";
  ASSERT_EQ(r.feed(more), State::complete);
  EXPECT_FALSE(r.request().keep_alive);  // 1.0 without keep-alive
  EXPECT_EQ(r.request().minor, 0);
}

TEST(HttpRequestReader, ChunkedBodyWithExtensionsAndTrailers) {
  RequestReader r(server::HttpLimits{});
  std::string rest;
  const std::string req =
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\n";
  ASSERT_EQ(feed_bytewise(r, req, rest), State::complete);
  EXPECT_EQ(r.request().body, "abc0123456789abcdef");
  EXPECT_TRUE(rest.empty());
}

TEST(HttpRequestReader, RefusesWhatWouldBeAHazard) {
  const std::string h = "POST / HTTP/1.1\r\nHost: a\r\n";
  EXPECT_EQ(status_of(h + "Content-Length: -5\r\n\r\n"), 400);
  EXPECT_EQ(status_of(h + "Content-Length: 5x\r\n\r\n"), 400);
  EXPECT_EQ(status_of(h + "Content-Length: 99999999999999999999999\r\n\r\n"), 400);
  EXPECT_EQ(status_of(h + "Content-Length: 3\r\nContent-Length: 4\r\n\r\n"), 400);
  EXPECT_EQ(status_of(h + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(status_of(h + "Transfer-Encoding: gzip\r\n\r\n"), 501);
  EXPECT_EQ(status_of(h + "Content-Length: 2048\r\n\r\n"), 413);  // before the body
  EXPECT_EQ(status_of(h + "Transfer-Encoding: chunked\r\n\r\n401\r\n"), 413);
  EXPECT_EQ(status_of(h + "Transfer-Encoding: chunked\r\n\r\nzz\r\n"), 400);
  EXPECT_EQ(status_of(h + "Expect: 200-ok\r\n\r\n"), 417);
  EXPECT_EQ(status_of(h + " folded\r\n\r\n"), 400);
  EXPECT_EQ(status_of(h + "Bad Name: x\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET /\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET nopath HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX: " + std::string(2000, 'a') + "\r\n\r\n"), 431);
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 20; ++i) many += "X" + std::to_string(i) + ": 1\r\n";
  EXPECT_EQ(status_of(many + "\r\n"), 431);
  EXPECT_EQ(status_of(h + "Content-Length: 3\r\n\r\nabc"), 0);
}

// ---------------------------------------------------------------------------------------------

class HttpServerTest : public ::testing::Test {
 protected:
  void start(HttpServerOptions o = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    o.max_body_bytes = 1 << 20;
    srv_ = std::make_unique<HttpServer>(o);
    srv_->route("GET", "/health", [](const HttpRequest&) {
      HttpResponse r;
      r.body = R"({"status":"ok"})";
      return r;
    }, HttpServer::Runs::quick);
    srv_->route("POST", "/echo", [](const HttpRequest& q) {
      HttpResponse r;
      r.body = q.body;
      return r;
    });
    // A stream of 20 frames, 10 ms apart.
    srv_->route("POST", "/stream", [](const HttpRequest&) {
      HttpResponse r;
      r.content_type = "text/event-stream";
      r.stream = [](const server::ChunkWriter& write) {
        for (int i = 0; i < 20; ++i) {
          if (!write("data: " + std::to_string(i) + "\n\n")) return;
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        write("data: [DONE]\n\n");
      };
      return r;
    });
    auto port = srv_->bind();
    ASSERT_TRUE(port) << port.message();
    port_ = *port;
    srv_->start();
  }
  void TearDown() override {
    if (srv_) srv_->stop();
  }

  // One request on a fresh connection; everything the server sent until it closed or `until`.
  std::string exchange(const std::string& req, std::string_view until = "", double timeout = 5) {
    RawConnection c(port_);
    EXPECT_TRUE(c.ok());
    EXPECT_TRUE(c.send(req));
    if (until.empty())
      c.read_to_close(timeout);
    else
      c.read_until(until, timeout);
    return c.received;
  }

  // GET /health on a fresh connection: its time, or a negative number if it failed.
  double health_seconds() {
    const auto t0 = Clock::now();
    const std::string got =
        exchange("GET /health HTTP/1.1\r\nHost: a\r\n\r\n", R"({"status":"ok"})", 5);
    return got.rfind("HTTP/1.1 200", 0) == 0 ? since(t0) : -1;
  }

  std::unique_ptr<HttpServer> srv_;
  int port_ = 0;
};

TEST_F(HttpServerTest, SlowHeadersStarveNeitherHealthNorStreams) {
  HttpServerOptions o;
  o.threads = 4;  // far fewer workers than attackers: slow heads must hold none
  start(o);
  constexpr int kSlow = 200;
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(std::make_unique<RawConnection>(port_));
    ASSERT_TRUE(slow.back()->ok());
    ASSERT_TRUE(slow.back()->send("POST /echo HTTP/1.1\r\n"));
  }
  // A stream runs while the attackers trickle a header byte each every 100 ms.
  std::string streamed;
  std::thread stream([&] {
    streamed = exchange("POST /stream HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
                        "data: [DONE]", 10);
  });
  double worst = 0;
  for (int round = 0; round < 10; ++round) {
    for (auto& c : slow) c->send("X");
    const double t = health_seconds();
    ASSERT_GE(t, 0) << "round " << round;
    worst = std::max(worst, t);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stream.join();
  EXPECT_LT(worst, 1.0);
  EXPECT_NE(streamed.find("data: 19\n\n"), std::string::npos) << streamed;
  EXPECT_NE(streamed.find("data: [DONE]"), std::string::npos);
  // The attackers are still connected (within their head deadline) and were all accepted.
  int open = 0;
  for (auto& c : slow) open += c->send("Y") ? 1 : 0;
  EXPECT_EQ(open, kSlow);
}

TEST_F(HttpServerTest, HeadAndBodyDeadlinesCloseSlowClients) {
  HttpServerOptions o;
  o.head_timeout_s = 0.3;
  o.body_min_bytes_per_s = 1 << 20;
  start(o);
  RawConnection head(port_);
  ASSERT_TRUE(head.send("GET /health HTTP/1.1\r\nHos"));
  RawConnection body(port_);
  ASSERT_TRUE(body.send("POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc"));
  const auto t0 = Clock::now();
  for (RawConnection* c : {&head, &body}) {
    ASSERT_TRUE(c->read_to_close(5)) << c->received;
    EXPECT_EQ(c->received.rfind("HTTP/1.1 408", 0), 0u) << c->received;
  }
  EXPECT_LT(since(t0), 3.0);
  EXPECT_GE(health_seconds(), 0);
}

TEST_F(HttpServerTest, ConnectionsPerClientAreBounded) {
  HttpServerOptions o;
  o.max_connections_per_client = 4;
  start(o);
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawConnection>(port_));
    ASSERT_TRUE(held.back()->send("G"));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string refused = exchange("GET /health HTTP/1.1\r\n\r\n");
  EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
  EXPECT_NE(refused.find("Retry-After"), std::string::npos);
  held.clear();  // their slots free as the server sees them close
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_GE(health_seconds(), 0);
}

TEST_F(HttpServerTest, Http10StreamIsNotChunked) {
  start();
  const std::string got = exchange("POST /stream HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  EXPECT_EQ(got.find("Transfer-Encoding"), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos);
  const std::string body = got.substr(got.find("\r\n\r\n") + 4);
  EXPECT_EQ(body.rfind("data: 0\n\ndata: 1\n\n", 0), 0u) << body;
  EXPECT_TRUE(body.ends_with("data: [DONE]\n\n")) << body;
  // 1.1 gets chunks.
  const std::string chunked =
      exchange("POST /stream HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  EXPECT_NE(chunked.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_TRUE(chunked.ends_with("0\r\n\r\n"));
}

TEST_F(HttpServerTest, HeadOptionsAndCors) {
  HttpServerOptions o;
  o.cors_origins = {"http://app.example"};
  start(o);
  const std::string head = exchange("HEAD /health HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 15"), std::string::npos) << head;
  EXPECT_TRUE(head.ends_with("\r\n\r\n")) << "HEAD has no body: " << head;

  const std::string opts = exchange("OPTIONS /echo HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(opts.rfind("HTTP/1.1 204", 0), 0u) << opts;
  EXPECT_NE(opts.find("Allow: POST, OPTIONS"), std::string::npos) << opts;
  EXPECT_EQ(opts.find("Access-Control"), std::string::npos) << "no Origin, no CORS";

  const std::string pre = exchange(
      "OPTIONS /echo HTTP/1.1\r\nOrigin: http://app.example\r\nAccess-Control-Request-Method: "
      "POST\r\nAccess-Control-Request-Headers: authorization, content-type\r\n"
      "Connection: close\r\n\r\n");
  EXPECT_EQ(pre.rfind("HTTP/1.1 204", 0), 0u) << pre;
  EXPECT_NE(pre.find("Access-Control-Allow-Origin: http://app.example"), std::string::npos) << pre;
  EXPECT_NE(pre.find("Access-Control-Allow-Methods: POST, OPTIONS"), std::string::npos) << pre;
  EXPECT_NE(pre.find("Access-Control-Allow-Headers: authorization, content-type"),
            std::string::npos);
  const std::string post = exchange(
      "POST /echo HTTP/1.1\r\nOrigin: http://app.example\r\nContent-Length: 2\r\nConnection: "
      "close\r\n\r\nhi");
  EXPECT_NE(post.find("Access-Control-Allow-Origin: http://app.example"), std::string::npos);
  const std::string other = exchange(
      "POST /echo HTTP/1.1\r\nOrigin: http://evil.example\r\nContent-Length: 2\r\nConnection: "
      "close\r\n\r\nhi");
  EXPECT_EQ(other.find("Access-Control"), std::string::npos) << other;
  EXPECT_EQ(exchange("OPTIONS /nope HTTP/1.1\r\nConnection: close\r\n\r\n").rfind("HTTP/1.1 404", 0),
            0u);
  EXPECT_EQ(exchange("DELETE /echo HTTP/1.1\r\nConnection: close\r\n\r\n").rfind("HTTP/1.1 405", 0),
            0u);
}

TEST_F(HttpServerTest, NegativeContentLengthIs400AndExpectContinueIsAnswered) {
  start();
  const std::string neg = exchange("POST /echo HTTP/1.1\r\nContent-Length: -1\r\n\r\n");
  EXPECT_EQ(neg.rfind("HTTP/1.1 400", 0), 0u) << neg;
  RawConnection c(port_);
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"));
  ASSERT_TRUE(c.read_until("100 Continue\r\n\r\n", 5)) << c.received;
  ASSERT_TRUE(c.send("ping"));
  ASSERT_TRUE(c.read_until("ping", 5)) << c.received;
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrderWithoutRecursion) {
  start();
  std::string many;
  constexpr int kN = 20000;  // one write of ~600 KB: answered one by one, never recursively
  for (int i = 0; i < kN; ++i) many += "GET /health HTTP/1.1\r\n\r\n";
  many += "POST /echo HTTP/1.1\r\nContent-Length: 4\r\nConnection: close\r\n\r\nlast";
  RawConnection c(port_);
  std::thread writer([&] { c.send(many); });
  ASSERT_TRUE(c.read_to_close(30));
  writer.join();
  size_t count = 0;
  for (size_t p = 0; (p = c.received.find("HTTP/1.1 200", p)) != std::string::npos; ++p) ++count;
  EXPECT_EQ(count, size_t(kN) + 1);
  EXPECT_TRUE(c.received.ends_with("last"));
}

}  // namespace
}  // namespace orchid::test
