// A plain TCP client for the server tests: exact bytes out (a body that never ends, a head
// sent a byte at a time, pipelined requests), whatever comes back read as it arrives, and a
// hang-up at any point.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <string_view>

namespace orchid::test {

class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawConnection() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool ok() const { return connected_; }
  bool send(std::string_view s) {
    while (!s.empty()) {
      const ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      s.remove_prefix(size_t(n));
    }
    return true;
  }
  // Reads until `marker` has arrived (true), the peer closes, or the time is up.
  bool read_until(std::string_view marker, double timeout_s) {
    using Clock = std::chrono::steady_clock;
    const auto until = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (received.find(marker) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, int(left.count())) <= 0) return false;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed = true;
        return received.find(marker) != std::string::npos;
      }
      received.append(buf, size_t(n));
    }
    return true;
  }
  // Reads until the peer closes (true) or the time is up.
  bool read_to_close(double timeout_s) {
    while (!closed)
      if (!read_until(std::string_view("\x01\x02never"), timeout_s) && !closed) return false;
    return true;
  }
  std::string received;
  bool closed = false;  // the peer closed (or reset) the connection

 private:
  int fd_ = -1;
  bool connected_ = false;
};

}  // namespace orchid::test
