// Test helpers for integration tests that run the real `chaise` binary and talk HTTP to it.
//
//   chaise::test::TempDir dir;                               // removed when it goes out of scope
//   chaise::test::ServerProcess server{dir.path() / "data"}; // --port 0, waits for "listening on"
//   chaise::test::HttpClient client{server.port()};          // one keep-alive connection
//   auto response = client.get("/");
//   EXPECT_EQ(response.status, 200);
//   EXPECT_EQ(server.stop().exit_code, 0);                    // SIGTERM, waitpid, SIGKILL fallback
//
// The binary's path is the CHAISE_BINARY compile definition of test_server.cc (the library
// chaise_test_http, which every tests/http/ suite links).
// Everything here throws std::runtime_error / boost::system::system_error on failure, which GoogleTest
// reports as a failed test.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/verb.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

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

// CPU time a process has used, user and system, in seconds (from /proc), -1 if unknown.
inline double process_cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto paren = stat.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // fields 14 and 15: utime, stime
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Clears, on the FoundationDB cluster of CHAISE_FDB_CLUSTER_FILE, the store of every ini in `dir`
// and the folders directly inside it that names a `key_prefix` (foundationdb_ini's, and those
// tests write themselves), so that a whole suite leaves the cluster as it found it. Nothing
// without that variable or such an ini.
void clear_foundationdb_stores(const fs::path& dir);

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction (and
// the FoundationDB stores its servers used: clear_foundationdb_stores).
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
    clear_foundationdb_stores(path_);
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

// How waitpid() said a process ended.
ExitStatus decode_wait_status(int status);

// Forks and execs the chaise binary with `args` (argv[0] excluded) and the current environment plus
// `env` ("NAME=value" entries, overriding). The child's stdout goes to `stdout_fd` (-1: inherit);
// stderr is inherited, so the server's log shows up in the test output. The child is killed if the
// test process dies (PR_SET_PDEATHSIG), so a crashed test never leaves a server behind.
pid_t spawn_chaise(const std::vector<std::string>& args, const std::vector<std::string>& env,
                   int stdout_fd);

// Waits up to `timeout` for `pid` to exit; nullopt if it is still running.
std::optional<ExitStatus> wait_for_exit(pid_t pid, std::chrono::milliseconds timeout);

// Runs chaise with `args` and waits for it to exit by itself (for startup-failure tests). Kills it
// with SIGKILL if it is still running after `timeout` and reports that as term_signal = SIGKILL.
ExitStatus run_chaise_to_exit(const std::vector<std::string>& args,
                              std::chrono::milliseconds timeout = 30s);

// The storage engine servers under test run on. Embedded by default; with
// CHAISE_TEST_STORAGE_ENGINE=foundationdb, the cluster of CHAISE_FDB_CLUSTER_FILE through the
// client library CHAISE_FDB_LIBRARY, each data directory with a key prefix of its own, so that every
// test starts from an empty store and a restart on the same directory finds its data again. The
// ini that says so (in the data directory), or nullopt when servers run embedded.
std::optional<fs::path> foundationdb_ini(const fs::path& data_dir);

// True when servers under test run on FoundationDB (CHAISE_TEST_STORAGE_ENGINE=foundationdb).
// Tests of the embedded engine's own machinery (its WAL sync, block cache, memtables, iterators)
// skip then: `if (servers_run_on_foundationdb()) GTEST_SKIP() << "why";`.
inline bool servers_run_on_foundationdb() {
  const char* engine = std::getenv("CHAISE_TEST_STORAGE_ENGINE");
  return engine != nullptr && std::string_view(engine) == "foundationdb";
}

// A running `chaise --port 0 --data-dir <data_dir> <extra_args...>`. The constructor returns once
// the server printed "chaise listening on <addr>:<port>"; the destructor stops it (see stop()).
class ServerProcess {
 public:
  explicit ServerProcess(const fs::path& data_dir, const std::vector<std::string>& extra_args = {},
                         const std::vector<std::string>& env = {},
                         std::chrono::milliseconds startup_timeout = 30s);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }

  // Sends SIGTERM and waits up to `timeout` for the exit; then SIGKILL. Returns how the process
  // ended. Idempotent: later calls return the first result.
  ExitStatus stop(std::chrono::milliseconds timeout = 20s) { return stop_with(SIGTERM, timeout); }
  ExitStatus stop_with(int signal_number, std::chrono::milliseconds timeout = 20s);

  // The server's next line on stdout (without the newline), e.g. "chaise listening with TLS on
  // 127.0.0.1:<port>" after the first. Throws `what_on_timeout` if none comes within `timeout`.
  std::string read_stdout_line(std::chrono::milliseconds timeout,
                               const std::string& what_on_timeout = "no stdout line in time");

 private:
  // The first line the server printed: "chaise listening on <addr>:<port>".
  std::uint16_t read_listening_port(std::chrono::milliseconds timeout);

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

// How long a client waits for an answer by default: 10 s, longer in sanitizer builds and when
// servers run on FoundationDB (a one-process test cluster on the same cores: a 60,000-row view
// build took 9.5 s of design_test's 10 s there while other tests ran).
inline std::chrono::milliseconds default_client_timeout() {
  return 10s * kSanitizerSlowdown * (servers_run_on_foundationdb() ? 3 : 1);
}

// A blocking HTTP/1.1 client on one TCP connection to 127.0.0.1:<port>. Every operation is bounded
// by `timeout` (a server that hangs fails the test instead of hanging it).
class HttpClient {
 public:
  explicit HttpClient(std::uint16_t port,
                      std::chrono::milliseconds timeout = default_client_timeout());
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  HttpResponse request(beast_http::verb method, std::string_view target, std::string body = {},
                       const std::vector<std::pair<std::string, std::string>>& headers = {});
  HttpResponse get(std::string_view target) { return request(beast_http::verb::get, target); }
  HttpResponse head(std::string_view target) { return request(beast_http::verb::head, target); }

  // Bytes as they are, for requests no well-behaved client would send.
  void send_raw(std::string_view bytes);
  // `skip_body`: the response answers a HEAD request (no body follows its Content-Length).
  HttpResponse read_response(bool skip_body = false);
  // Reads (and discards) until the server closes the connection. True if it did within `within`;
  // false if the connection was still open then.
  bool wait_closed(std::chrono::milliseconds within);

 private:
  struct Impl;  // Asio and Beast stay in test_server.cc
  std::uint16_t port_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Impl> impl_;
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

// The store's commits (chaise_store_commits_total) less those of the _db_updates recorder, which
// follow writes in the background (chaise_db_updates_folds_total), once the recorder has nothing
// left to fold: the count is the same twice 100 ms apart (the recorder folds 20 ms after a write).
// `scrape` returns the text of /_node/_local/_prometheus.
template <class Scrape>
long long settled_commits(Scrape scrape) {
  auto net = [&] {
    const std::string text = scrape();
    return metric_value(text, "chaise_store_commits_total") -
           metric_value(text, "chaise_db_updates_folds_total");
  };
  long long last = net();
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const long long now = net();
    if (now == last) return now;
    last = now;
  }
  return last;
}

// Checks `done` every 5 ms until it holds or `within` has passed, and returns whether it held: how
// a test waits for what the server does in the background, instead of sleeping a guessed time.
template <class Predicate>
bool eventually(Predicate done, std::chrono::milliseconds within = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Writes `text` to `path` (for ini files in tests).
inline void write_file(const fs::path& path, std::string_view text) {
  FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) throw std::runtime_error("cannot write " + path.string());
  std::fwrite(text.data(), 1, text.size(), file);
  std::fclose(file);
}

}  // namespace chaise::test
