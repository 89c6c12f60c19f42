// tests/http/test_server.cc — the process and client helpers of test_server.h, compiled once
// (chaise_test_http) instead of in every test: Beast's HTTP reader and writer are most of a test's
// compile time.
#include "tests/http/test_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "storage/fdb/fdb_database.h"

#ifndef CHAISE_BINARY
#error "CHAISE_BINARY must name the chaise executable"
#endif

extern char** environ;

namespace chaise::test {

ExitStatus decode_wait_status(int status) {
  ExitStatus result;
  if (WIFEXITED(status)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  return result;
}

pid_t spawn_chaise(const std::vector<std::string>& args, const std::vector<std::string>& env,
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

std::optional<ExitStatus> wait_for_exit(pid_t pid, std::chrono::milliseconds timeout) {
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

ExitStatus run_chaise_to_exit(const std::vector<std::string>& args,
                              std::chrono::milliseconds timeout) {
  const int dev_null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  const pid_t pid = spawn_chaise(args, {}, dev_null);
  ::close(dev_null);
  if (auto status = wait_for_exit(pid, timeout)) return *status;
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return decode_wait_status(status);
}

void clear_foundationdb_stores(const fs::path& dir) {
  const char* cluster = std::getenv("CHAISE_FDB_CLUSTER_FILE");
  const char* library = std::getenv("CHAISE_FDB_LIBRARY");
  if (cluster == nullptr || *cluster == 0 || library == nullptr || *library == 0) return;
  std::vector<std::string> prefixes;
  std::error_code ec;
  auto scan = [&](const fs::path& folder) {
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
      if (entry.path().extension() != ".ini") continue;
      std::ifstream in(entry.path());
      for (std::string line; std::getline(in, line);) {
        const std::string key = "key_prefix = ";
        if (line.rfind(key, 0) == 0 && line.size() > key.size())
          prefixes.push_back(line.substr(key.size()));
      }
    }
  };
  scan(dir);
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_directory()) scan(entry.path());
  if (prefixes.empty()) return;
  // One handle on the whole keyspace for the process, opened the first time.
  static std::unique_ptr<storage::Database> whole = [&] {
    storage::FdbOptions o;
    o.cluster_file = cluster;
    o.library = library;
    auto opened = storage::open_foundationdb(o);
    return opened.ok() ? std::move(*opened) : nullptr;
  }();
  if (!whole) return;
  for (const std::string& prefix : prefixes) {
    const std::string end = prefix + "\xff\xff";  // the store's keys and its instance id
    [[maybe_unused]] auto s = whole->run([&](storage::Transaction& tr) -> storage::Status {
      tr.clear_range(prefix, end);
      return {};
    });
  }
}

std::optional<fs::path> foundationdb_ini(const fs::path& data_dir) {
  const char* engine = std::getenv("CHAISE_TEST_STORAGE_ENGINE");
  if (engine == nullptr || std::string_view(engine) != "foundationdb") return std::nullopt;
  const char* cluster = std::getenv("CHAISE_FDB_CLUSTER_FILE");
  const char* library = std::getenv("CHAISE_FDB_LIBRARY");
  if (cluster == nullptr || *cluster == 0 || library == nullptr || *library == 0)
    throw std::runtime_error(
        "CHAISE_TEST_STORAGE_ENGINE=foundationdb needs CHAISE_FDB_CLUSTER_FILE and "
        "CHAISE_FDB_LIBRARY");
  fs::create_directories(data_dir);
  const fs::path ini = data_dir / "foundationdb-test.ini";
  if (fs::exists(ini)) return ini;  // a restart: the same store
  // A prefix no earlier run used, even when mkdtemp hands out a removed directory's name again.
  std::random_device random;
  const auto now = std::chrono::system_clock::now().time_since_epoch().count();
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, "test/%llx-%x%x/", static_cast<unsigned long long>(now),
                random(), random());
  std::ofstream out(ini);
  out << "[chaise]\nstorage_engine = foundationdb\n[foundationdb]\ncluster_file = " << cluster
      << "\nlibrary = " << library << "\nkey_prefix = " << prefix
      << "\n"
      // A test that kills a server and starts it again finds its replications' leases lapsed soon.
      << "[replicator]\nlease_timeout = 2000\n";
  if (!out.flush()) throw std::runtime_error("cannot write " + ini.string());
  return ini;
}

ServerProcess::ServerProcess(const fs::path& data_dir, const std::vector<std::string>& extra_args,
                             const std::vector<std::string>& env,
                             std::chrono::milliseconds startup_timeout) {
  // Admin party unless the test configures admins itself (then it passes --no-admin-party,
  // which this harness consumes).
  std::vector<std::string> args = {"--port", "0", "--data-dir", data_dir.string()};
  if (const auto ini = foundationdb_ini(data_dir)) {
    args.push_back("--config");
    args.push_back(ini->string());
  }
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

ServerProcess::~ServerProcess() { stop(); }

ExitStatus ServerProcess::stop_with(int signal_number, std::chrono::milliseconds timeout) {
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

std::uint16_t ServerProcess::read_listening_port(std::chrono::milliseconds timeout) {
  static constexpr std::string_view kPrefix = "chaise listening on ";
  const std::string line = read_stdout_line(timeout, "chaise did not report its port in time");
  const auto colon = line.rfind(':');
  if (line.rfind(kPrefix, 0) != 0 || colon == std::string::npos) {
    throw std::runtime_error("unexpected first stdout line: " + line);
  }
  return static_cast<std::uint16_t>(std::stoul(line.substr(colon + 1)));
}

std::string ServerProcess::read_stdout_line(std::chrono::milliseconds timeout,
                                            const std::string& what_on_timeout) {
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

struct HttpClient::Impl {
  Impl() : stream(ioc) {}
  void run() {
    ioc.restart();
    ioc.run();
  }
  template <class Message>
  void send(Message& message, std::chrono::milliseconds timeout) {
    boost::system::error_code ec;
    stream.expires_after(timeout);
    beast_http::async_write(stream, message,
                            [&](boost::system::error_code e, std::size_t) { ec = e; });
    run();
    if (ec) throw boost::system::system_error(ec, "write");
  }
  boost::asio::io_context ioc;
  boost::beast::tcp_stream stream;
  boost::beast::flat_buffer buffer;
};

HttpClient::HttpClient(std::uint16_t port, std::chrono::milliseconds timeout)
    : port_(port), timeout_(timeout), impl_(std::make_unique<Impl>()) {
  boost::system::error_code ec;
  impl_->stream.expires_after(timeout_);
  impl_->stream.async_connect(
      boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port_),
      [&](boost::system::error_code e) { ec = e; });
  impl_->run();
  if (ec) throw boost::system::system_error(ec, "connect");
}

HttpClient::~HttpClient() = default;

HttpResponse HttpClient::request(beast_http::verb method, std::string_view target, std::string body,
                                 const std::vector<std::pair<std::string, std::string>>& headers) {
  beast_http::request<beast_http::string_body> request{method, target, 11};
  request.set(beast_http::field::host, "127.0.0.1:" + std::to_string(port_));
  request.set(beast_http::field::user_agent, "chaise-test");
  for (const auto& [name, value] : headers) request.set(name, value);
  request.body() = std::move(body);
  request.prepare_payload();
  impl_->send(request, timeout_);
  return read_response(method == beast_http::verb::head);
}

void HttpClient::send_raw(std::string_view bytes) {
  boost::system::error_code ec;
  impl_->stream.expires_after(timeout_);
  boost::asio::async_write(impl_->stream, boost::asio::buffer(bytes.data(), bytes.size()),
                           [&](boost::system::error_code e, std::size_t) { ec = e; });
  impl_->run();
  if (ec) throw boost::system::system_error(ec, "write");
}

HttpResponse HttpClient::read_response(bool skip_body) {
  beast_http::response_parser<beast_http::string_body> parser;
  parser.skip(skip_body);
  parser.body_limit(std::uint64_t{1} << 30);
  boost::system::error_code ec;
  impl_->stream.expires_after(timeout_);
  beast_http::async_read(impl_->stream, impl_->buffer, parser,
                         [&](boost::system::error_code e, std::size_t) { ec = e; });
  impl_->run();
  if (ec) throw boost::system::system_error(ec, "read");
  auto message = parser.release();
  HttpResponse response;
  response.status = message.result_int();
  response.headers = message.base();
  response.body = std::move(message.body());
  return response;
}

bool HttpClient::wait_closed(std::chrono::milliseconds within) {
  std::array<char, 4096> sink;
  boost::system::error_code ec;
  impl_->stream.expires_after(within);
  while (!ec) {
    impl_->stream.async_read_some(boost::asio::buffer(sink),
                                  [&](boost::system::error_code e, std::size_t) { ec = e; });
    impl_->run();
  }
  return ec != boost::beast::error::timeout;
}

}  // namespace chaise::test
