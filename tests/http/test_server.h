// Test helpers for integration tests that run the real `chaise` binary and talk HTTP to it.
//
//   chaise::test::TempDir dir;                               // removed when it goes out of scope
//   chaise::test::ServerProcess server{dir.path() / "data"}; // --port 0, waits for "listening on"
//   chaise::test::HttpClient client{server.port()};          // one keep-alive connection
//   auto response = client.get("/");
//   EXPECT_EQ(response.status, 200);
//   EXPECT_EQ(server.stop().exit_code, 0);                    // SIGTERM, waitpid, SIGKILL fallback
//
// The binary's path comes from the CHAISE_BINARY compile definition
// (target_compile_definitions(... CHAISE_BINARY="$<TARGET_FILE:chaise>")).
// Everything here throws std::runtime_error / boost::system::system_error on failure, which GoogleTest
// reports as a failed test. Header-only so that any test target can include it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#ifndef CHAISE_BINARY
#error "CHAISE_BINARY must name the chaise executable"
#endif

extern char** environ;

namespace chaise::test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Resident memory of a process in KiB (VmRSS from /proc), -1 if unknown.
inline long process_rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/chaise-test-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct ExitStatus {
  bool exited = false;  // true: exit_code is valid; false: killed by term_signal
  int exit_code = -1;
  int term_signal = 0;
};

inline ExitStatus decode_wait_status(int status) {
  ExitStatus result;
  if (WIFEXITED(status)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  return result;
}

// Forks and execs CHAISE_BINARY with `args` (argv[0] excluded) and the current environment plus
// `env` ("NAME=value" entries, overriding). The child's stdout goes to `stdout_fd` (-1: inherit);
// stderr is inherited, so the server's log shows up in the test output. The child is killed if the
// test process dies (PR_SET_PDEATHSIG), so a crashed test never leaves a server behind.
inline pid_t spawn_chaise(const std::vector<std::string>& args, const std::vector<std::string>& env,
                          int stdout_fd) {
  // Everything the child needs is prepared before fork(): after it, only async-signal-safe calls.
  std::vector<std::string> argv_storage = {CHAISE_BINARY};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  std::vector<std::string> env_storage = env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view current = *entry;
    const std::string_view name = current.substr(0, current.find('='));
    bool overridden = false;
    for (const auto& e : env) overridden |= std::string_view(e).substr(0, e.find('=')) == name;
    if (!overridden) env_storage.emplace_back(current);
  }
  std::vector<char*> envp;
  for (auto& entry : env_storage) envp.push_back(entry.data());
  envp.push_back(nullptr);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);  // the parent died before prctl took effect
    if (stdout_fd >= 0 && ::dup2(stdout_fd, STDOUT_FILENO) < 0) ::_exit(126);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

// Waits up to `timeout` for `pid` to exit; nullopt if it is still running.
inline std::optional<ExitStatus> wait_for_exit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return decode_wait_status(status);
    if (done < 0 && errno != EINTR) {
      throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(10ms);
  }
}

// Runs chaise with `args` and waits for it to exit by itself (for startup-failure tests). Kills it
// with SIGKILL if it is still running after `timeout` and reports that as term_signal = SIGKILL.
inline ExitStatus run_chaise_to_exit(const std::vector<std::string>& args,
                                     std::chrono::milliseconds timeout = 30s) {
  const int dev_null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  const pid_t pid = spawn_chaise(args, {}, dev_null);
  ::close(dev_null);
  if (auto status = wait_for_exit(pid, timeout)) return *status;
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return decode_wait_status(status);
}

// A running `chaise --port 0 --data-dir <data_dir> <extra_args...>`. The constructor returns once
// the server printed "chaise listening on <addr>:<port>"; the destructor stops it (see stop()).
class ServerProcess {
 public:
  explicit ServerProcess(const fs::path& data_dir, const std::vector<std::string>& extra_args = {},
                         const std::vector<std::string>& env = {},
                         std::chrono::milliseconds startup_timeout = 30s) {
    // Admin party unless the test configures admins itself (then it passes --no-admin-party,
    // which this harness consumes).
    std::vector<std::string> args = {"--port", "0", "--data-dir", data_dir.string()};
    bool admin_party = true;
    for (const auto& arg : extra_args) {
      if (arg == "--no-admin-party") {
        admin_party = false;
      } else {
        args.push_back(arg);
      }
    }
    if (admin_party) args.push_back("--admin-party");
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
    }
    stdout_fd_ = pipe_fds[0];
    try {
      pid_ = spawn_chaise(args, env, pipe_fds[1]);
    } catch (...) {
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
      throw;
    }
    ::close(pipe_fds[1]);
    try {
      port_ = read_listening_port(startup_timeout);
    } catch (...) {
      stop();
      throw;
    }
  }

  ~ServerProcess() { stop(); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }

  // Sends SIGTERM and waits up to `timeout` for the exit; then SIGKILL. Returns how the process
  // ended. Idempotent: later calls return the first result.
  ExitStatus stop(std::chrono::milliseconds timeout = 20s) { return stop_with(SIGTERM, timeout); }

  ExitStatus stop_with(int signal_number, std::chrono::milliseconds timeout = 20s) {
    if (!reaped_) {
      ::kill(pid_, signal_number);
      auto status = wait_for_exit(pid_, timeout);
      if (!status) {
        ::kill(pid_, SIGKILL);
        int raw = 0;
        ::waitpid(pid_, &raw, 0);
        status = decode_wait_status(raw);
      }
      exit_status_ = *status;
      reaped_ = true;
    }
    if (stdout_fd_ >= 0) {
      ::close(stdout_fd_);
      stdout_fd_ = -1;
    }
    return exit_status_;
  }

 private:
  // The first line the server printed: "chaise listening on <addr>:<port>".
  std::uint16_t read_listening_port(std::chrono::milliseconds timeout) {
    static constexpr std::string_view kPrefix = "chaise listening on ";
    const std::string line = read_stdout_line(timeout, "chaise did not report its port in time");
    const auto colon = line.rfind(':');
    if (line.rfind(kPrefix, 0) != 0 || colon == std::string::npos) {
      throw std::runtime_error("unexpected first stdout line: " + line);
    }
    return static_cast<std::uint16_t>(std::stoul(line.substr(colon + 1)));
  }

 public:
  // The server's next line on stdout (without the newline), e.g. "chaise listening with TLS on
  // 127.0.0.1:<port>" after the first. Throws `what_on_timeout` if none comes within `timeout`.
  std::string read_stdout_line(std::chrono::milliseconds timeout,
                               const std::string& what_on_timeout = "no stdout line in time") {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (stdout_pending_.find('\n') == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) throw std::runtime_error(what_on_timeout);
      pollfd pfd{stdout_fd_, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) continue;
      std::array<char, 256> chunk;
      const ssize_t n = ::read(stdout_fd_, chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw std::runtime_error("chaise exited before listening; stdout: " + stdout_pending_);
      stdout_pending_.append(chunk.data(), static_cast<std::size_t>(n));
    }
    const auto newline = stdout_pending_.find('\n');
    std::string line = stdout_pending_.substr(0, newline);
    stdout_pending_.erase(0, newline + 1);
    return line;
  }

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string stdout_pending_;  // read from stdout, not yet returned as a line
  std::uint16_t port_ = 0;
  bool reaped_ = false;
  ExitStatus exit_status_;
};

namespace beast_http = boost::beast::http;

struct HttpResponse {
  unsigned status = 0;
  beast_http::fields headers;
  std::string body;

  std::string header(beast_http::field name) const { return std::string(headers[name]); }
  std::string header(std::string_view name) const { return std::string(headers[name]); }
  // The body parsed as JSON, keys in the order the server wrote them.
  nlohmann::ordered_json json() const { return nlohmann::ordered_json::parse(body); }
};

// How much longer a client waits by default in sanitizer builds, whose server runs several times
// slower (TSan most: a 60,000-row view build took 13.6 s of design_test's 10 s).
#if defined(__SANITIZE_THREAD__)
inline constexpr int kSanitizerSlowdown = 5;
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr int kSanitizerSlowdown = 2;
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif

// A blocking HTTP/1.1 client on one TCP connection to 127.0.0.1:<port>. Every operation is bounded
// by `timeout` (a server that hangs fails the test instead of hanging it).
class HttpClient {
 public:
  explicit HttpClient(std::uint16_t port,
                      std::chrono::milliseconds timeout = 10s * kSanitizerSlowdown)
      : port_(port), timeout_(timeout), stream_(ioc_) {
    boost::system::error_code ec;
    stream_.expires_after(timeout_);
    stream_.async_connect(
        boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port_),
        [&](boost::system::error_code e) { ec = e; });
    run();
    if (ec) throw boost::system::system_error(ec, "connect");
  }

  HttpResponse request(beast_http::verb method, std::string_view target, std::string body = {},
                       const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    beast_http::request<beast_http::string_body> request{method, target, 11};
    request.set(beast_http::field::host, "127.0.0.1:" + std::to_string(port_));
    request.set(beast_http::field::user_agent, "chaise-test");
    for (const auto& [name, value] : headers) request.set(name, value);
    request.body() = std::move(body);
    request.prepare_payload();
    send(request);
    return read_response(method == beast_http::verb::head);
  }

  HttpResponse get(std::string_view target) { return request(beast_http::verb::get, target); }
  HttpResponse head(std::string_view target) { return request(beast_http::verb::head, target); }

  template <class Message>
  void send(Message& message) {
    boost::system::error_code ec;
    stream_.expires_after(timeout_);
    beast_http::async_write(stream_, message,
                            [&](boost::system::error_code e, std::size_t) { ec = e; });
    run();
    if (ec) throw boost::system::system_error(ec, "write");
  }

  void send_raw(std::string_view bytes) {
    boost::system::error_code ec;
    stream_.expires_after(timeout_);
    boost::asio::async_write(stream_, boost::asio::buffer(bytes.data(), bytes.size()),
                             [&](boost::system::error_code e, std::size_t) { ec = e; });
    run();
    if (ec) throw boost::system::system_error(ec, "write");
  }

  // `skip_body`: the response answers a HEAD request (no body follows its Content-Length).
  HttpResponse read_response(bool skip_body = false) {
    beast_http::response_parser<beast_http::string_body> parser;
    parser.skip(skip_body);
    parser.body_limit(std::uint64_t{1} << 30);
    boost::system::error_code ec;
    stream_.expires_after(timeout_);
    beast_http::async_read(stream_, buffer_, parser,
                           [&](boost::system::error_code e, std::size_t) { ec = e; });
    run();
    if (ec) throw boost::system::system_error(ec, "read");
    auto message = parser.release();
    HttpResponse response;
    response.status = message.result_int();
    response.headers = message.base();
    response.body = std::move(message.body());
    return response;
  }

  // Reads (and discards) until the server closes the connection. True if it did within `within`;
  // false if the connection was still open then.
  bool wait_closed(std::chrono::milliseconds within) {
    std::array<char, 4096> sink;
    boost::system::error_code ec;
    stream_.expires_after(within);
    while (!ec) {
      stream_.async_read_some(boost::asio::buffer(sink),
                              [&](boost::system::error_code e, std::size_t) { ec = e; });
      run();
    }
    return ec != boost::beast::error::timeout;
  }

 private:
  void run() {
    ioc_.restart();
    ioc_.run();
  }

  std::uint16_t port_;
  std::chrono::milliseconds timeout_;
  boost::asio::io_context ioc_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
};

// What orders a sequence string: the fixed-width part after CouchDB's "N-" prefix.
inline std::string seq_order(const nlohmann::json& seq) {
  const std::string s = seq.get<std::string>();
  const auto dash = s.find('-');
  return dash == std::string::npos ? s : s.substr(dash + 1);
}

// The value of the sample `name` (with its labels) in Prometheus text, or -1 when it is absent.
inline long long metric_value(const std::string& text, const std::string& name) {
  const std::string prefix = "\n" + name + " ";
  const auto at = text.find(prefix);
  return at == std::string::npos ? -1 : std::stoll(text.substr(at + prefix.size()));
}

// Writes `text` to `path` (for ini files in tests).
inline void write_file(const fs::path& path, std::string_view text) {
  FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) throw std::runtime_error("cannot write " + path.string());
  std::fwrite(text.data(), 1, text.size(), file);
  std::fclose(file);
}

}  // namespace chaise::test
