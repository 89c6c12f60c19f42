// A test client for live feeds: sends one GET/POST and then reads the chunked body incrementally,
// so a test can wait for a line, a heartbeat or the end of the response with a deadline.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace chaise::test {

// A blocking TCP socket connected to 127.0.0.1:<port> (the caller closes it).
inline int connect_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("connect failed");
  }
  return fd;
}

// A plain socket: bodies too large to build in memory, requests sent in pieces, connections
// cut on purpose.
class RawConnection {
 public:
  explicit RawConnection(std::uint16_t port) : fd_(connect_loopback(port)) {}
  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  bool send_all(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  // Up to `max` bytes; "" at end of stream or after 30 s without any.
  std::string read_some(std::size_t max = 1 << 20) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 30000) <= 0) return {};
    std::string out(max, '\0');
    const ssize_t n = ::recv(fd_, out.data(), out.size(), 0);
    out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    return out;
  }
  // The response head (through the blank line); what came after it stays in `rest`.
  std::string read_head(std::string& rest) {
    std::string got;
    for (;;) {
      if (auto end = got.find("\r\n\r\n"); end != std::string::npos) {
        rest = got.substr(end + 4);
        return got.substr(0, end + 4);
      }
      std::string more = read_some();
      if (more.empty()) return got;
      got += more;
    }
  }

 private:
  int fd_ = -1;
};

class FeedClient {
 public:
  // `head_lines`: more header lines, each ending in "\r\n" (an Authorization, say).
  FeedClient(std::uint16_t port, const std::string& target, const std::string& method = "GET",
             const std::string& body = "", const std::string& head_lines = "") {
    fd_ = connect_loopback(port);
    std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + head_lines;
    if (!body.empty())
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n";
    req += "\r\n" + body;
    if (::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
      throw std::runtime_error("send failed");
  }
  ~FeedClient() { close(); }
  FeedClient(const FeedClient&) = delete;
  FeedClient& operator=(const FeedClient&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Reads until the decoded body contains `needle` (after `from`) or the deadline passes. Returns
  // whether it was found.
  bool wait_for(const std::string& needle, std::chrono::milliseconds within, std::size_t from = 0) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    for (;;) {
      if (body_.find(needle, from) != std::string::npos) return true;
      if (ended_ || !read_some(deadline)) return body_.find(needle, from) != std::string::npos;
    }
  }
  // Reads until the response head has arrived (the server has begun answering). Returns whether it
  // did within the time.
  bool wait_head(std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (head_.empty() && !ended_)
      if (!read_some(deadline)) break;
    return !head_.empty();
  }
  // Reads until the response ends (last chunk) or the deadline passes. Returns whether it ended.
  bool wait_end(std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (!ended_)
      if (!read_some(deadline)) break;
    return ended_;
  }

  // Reads until the server ends the response or closes the connection, or the deadline passes.
  // Returns whether it did either.
  bool wait_closed(std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (!ended_ && !eof_)
      if (!read_some(deadline)) break;
    return ended_ || eof_;
  }

  const std::string& body() const { return body_; }
  const std::string& head() const { return head_; }
  bool ended() const { return ended_; }

 private:
  // One read with a deadline, then decode what can be decoded. False on timeout or EOF.
  bool read_some(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    raw_.append(buf, static_cast<std::size_t>(n));
    decode();
    return true;
  }

  void decode() {
    if (head_.empty()) {
      auto end = raw_.find("\r\n\r\n");
      if (end == std::string::npos) return;
      head_ = raw_.substr(0, end + 4);
      raw_.erase(0, end + 4);
      chunked_ = head_.find("chunked") != std::string::npos;
    }
    if (!chunked_) {
      body_ += raw_;
      raw_.clear();
      return;
    }
    for (;;) {
      auto line_end = raw_.find("\r\n");
      if (line_end == std::string::npos) return;
      std::size_t size = std::stoul(raw_.substr(0, line_end), nullptr, 16);
      if (raw_.size() < line_end + 2 + size + 2) return;
      if (size == 0) {
        ended_ = true;
        raw_.clear();
        return;
      }
      body_.append(raw_, line_end + 2, size);
      raw_.erase(0, line_end + 2 + size + 2);
    }
  }

  int fd_ = -1;
  std::string raw_, head_, body_;
  bool chunked_ = false;
  bool ended_ = false;
  bool eof_ = false;
};

}  // namespace chaise::test
