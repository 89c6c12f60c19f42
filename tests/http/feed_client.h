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

class FeedClient {
 public:
  FeedClient(std::uint16_t port, const std::string& target, const std::string& method = "GET",
             const std::string& body = "") {
    fd_ = connect_loopback(port);
    std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    if (!body.empty())
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
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
