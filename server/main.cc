// chaise: the server process. Reads the configuration, prepares the data directory, starts the HTTP
// server, tells systemd it is ready, and shuts down cleanly on SIGINT/SIGTERM.
//
// Configuration precedence: built-in defaults < ini file (--config) < command-line flags.
// Exit status: 0 after a clean shutdown, 1 when startup fails, 2 on a usage error.
//
// Contract with the tests and with scripts: once the listener is bound, exactly one line
//   chaise listening on <bind_address>:<port>
// is written to stdout and flushed (the real port, also when --port 0 asked the OS for one).
#include "http/router.h"
#include "http/server.h"
#include "core/changes_notifier.h"
#include "core/txid_janitor.h"
#include "storage/database.h"

#include <boost/property_tree/ini_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;

constexpr int kExitStartupFailed = 1;
constexpr int kExitUsage = 2;

// Every key of the [chaise] section, with its default. An unknown key in the file is an error, so a
// typo cannot silently leave a default in force.
struct Config {
  std::string bind_address = "127.0.0.1";
  std::uint16_t port = 5984;
  fs::path data_dir = "./data";
  unsigned io_threads = 0;  // 0 = one per core
  bool fsync = true;        // sync the WAL before acknowledging a commit (storage::Options::fsync)
  std::size_t max_request_body_bytes = 64 * 1024 * 1024;
  std::size_t max_document_size = 8'000'000;  // CouchDB's [couchdb] max_document_size
  // CouchDB's [couchdb] max_attachment_size (its default is 1 GiB; a request body larger than
  // max_request_body_bytes is refused before this is looked at).
  std::size_t max_attachment_size = 1024ull * 1024 * 1024;
  std::size_t max_header_bytes = 64 * 1024;
  unsigned idle_timeout_seconds = 300;
  std::size_t max_connections = 10000;
  std::string log_level = "info";
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void print_usage(std::ostream& out) {
  out << "usage: chaise [--config PATH] [--port N] [--bind ADDR] [--data-dir DIR] [--io-threads N]\n"
         "              [--help] [--version]\n"
         "Options override the [chaise] section of the ini file given with --config.\n";
}

template <typename Int>
Int parse_int(std::string_view name, std::string_view text, Int min, Int max) {
  Int value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < min || value > max) {
    throw UsageError(std::string(name) + ": expected an integer in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "], got '" + std::string(text) + "'");
  }
  return value;
}

bool parse_bool(std::string_view name, std::string_view text) {
  if (text == "true") return true;
  if (text == "false") return false;
  throw UsageError(std::string(name) + ": expected true or false, got '" + std::string(text) + "'");
}

void apply_setting(Config& config, std::string_view key, const std::string& value) {
  constexpr auto kSizeMax = std::numeric_limits<std::size_t>::max();
  if (key == "bind_address") {
    config.bind_address = value;
  } else if (key == "port") {
    config.port = parse_int<std::uint16_t>(key, value, 0, 65535);
  } else if (key == "data_dir") {
    if (value.empty()) throw UsageError("data_dir: must not be empty");
    config.data_dir = value;
  } else if (key == "io_threads") {
    config.io_threads = parse_int<unsigned>(key, value, 0, 1024);
  } else if (key == "fsync") {
    config.fsync = parse_bool(key, value);
  } else if (key == "max_document_size") {
    config.max_document_size = parse_int<std::size_t>(key, value, 1, kSizeMax);
  } else if (key == "max_attachment_size") {
    config.max_attachment_size = parse_int<std::size_t>(key, value, 0, kSizeMax);
  } else if (key == "max_request_body_bytes") {
    config.max_request_body_bytes = parse_int<std::size_t>(key, value, 1, kSizeMax);
  } else if (key == "max_header_bytes") {
    config.max_header_bytes = parse_int<std::size_t>(key, value, 1024, UINT32_MAX);
  } else if (key == "idle_timeout_seconds") {
    config.idle_timeout_seconds = parse_int<unsigned>(key, value, 1, 24 * 3600);
  } else if (key == "max_connections") {
    config.max_connections = parse_int<std::size_t>(key, value, 1, kSizeMax);
  } else if (key == "log_level") {
    if (spdlog::level::from_str(value) == spdlog::level::off && value != "off") {
      throw UsageError("log_level: expected trace, debug, info, warn, error, critical or off");
    }
    config.log_level = value;
  } else {
    throw UsageError("unknown config key '" + std::string(key) + "'");
  }
}

void load_ini(Config& config, const std::string& path) {
  boost::property_tree::ptree tree;
  try {
    boost::property_tree::ini_parser::read_ini(path, tree);
  } catch (const boost::property_tree::ini_parser_error& e) {
    throw UsageError(std::string("config: ") + e.what());
  }
  for (const auto& [section, keys] : tree) {
    if (section != "chaise") {
      throw UsageError(path + ": unknown section [" + section + "] (settings go in [chaise])");
    }
    for (const auto& [key, value] : keys) {
      try {
        apply_setting(config, key, value.data());
      } catch (const UsageError& e) {
        throw UsageError(path + ": " + e.what());
      }
    }
  }
}

// Flags are "--name VALUE" or "--name=VALUE". Returns nullopt when the process should exit 0 after
// --help / --version.
std::optional<Config> parse_command_line(int argc, char** argv) {
  struct Flag {
    std::string_view name;
    std::string_view key;  // the ini key it overrides; "" for --config
  };
  static constexpr std::array<Flag, 5> kFlags = {{{"--config", ""},
                                                  {"--port", "port"},
                                                  {"--bind", "bind_address"},
                                                  {"--data-dir", "data_dir"},
                                                  {"--io-threads", "io_threads"}}};
  std::optional<std::string> config_path;
  std::vector<std::pair<std::string_view, std::string>> overrides;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_usage(std::cout);
      return std::nullopt;
    }
    if (arg == "--version") {
      std::cout << "chaise " << chaise::http::kChaiseVersion << "\n";
      return std::nullopt;
    }
    std::optional<std::string> inline_value;
    if (const auto eq = arg.find('='); eq != std::string_view::npos) {
      inline_value = std::string(arg.substr(eq + 1));
      arg = arg.substr(0, eq);
    }
    const auto flag = std::find_if(kFlags.begin(), kFlags.end(),
                                   [&](const Flag& f) { return f.name == arg; });
    if (flag == kFlags.end()) throw UsageError("unknown option '" + std::string(argv[i]) + "'");
    if (!inline_value) {
      if (i + 1 >= argc) throw UsageError(std::string(arg) + " needs a value");
      inline_value = argv[++i];
    }
    if (flag->key.empty()) {
      config_path = *inline_value;
    } else {
      overrides.emplace_back(flag->key, *inline_value);
    }
  }
  Config config;
  if (config_path) load_ini(config, *config_path);
  for (const auto& [key, value] : overrides) apply_setting(config, key, value);
  return config;
}

bool is_server_uuid(std::string_view text) {
  return text.size() == 32 && text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string new_server_uuid() {
  std::array<unsigned char, 16> bytes{};
  std::size_t filled = 0;
  while (filled < bytes.size()) {
    const ssize_t n = getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    filled += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string uuid;
  for (unsigned char byte : bytes) {
    uuid.push_back(kHex[byte >> 4]);
    uuid.push_back(kHex[byte & 0xf]);
  }
  return uuid;
}

void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("open " + path.string() + ": " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) throw std::runtime_error("fsync " + path.string() + ": " + std::strerror(saved));
}

// The server's identity (GET / "uuid") lives in <data_dir>/server_uuid as 32 lowercase hex digits and
// a newline. It is created once, atomically (write, fsync, rename, fsync dir), and reused on every
// later start; a file with anything else in it is an error rather than silently replaced, because
// replicators remember the uuid.
std::string load_or_create_server_uuid(const fs::path& data_dir) {
  const fs::path path = data_dir / "server_uuid";
  if (fs::exists(path)) {
    std::ifstream in(path);
    std::string uuid;
    in >> uuid;
    if (!is_server_uuid(uuid)) {
      throw std::runtime_error(path.string() + " does not hold 32 lowercase hex digits");
    }
    return uuid;
  }
  const std::string uuid = new_server_uuid();
  const fs::path temp = data_dir / "server_uuid.tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << uuid << "\n";
    out.flush();
    if (!out) throw std::runtime_error("cannot write " + temp.string());
  }
  fsync_path(temp);
  fs::rename(temp, path);
  fsync_path(data_dir);
  return uuid;
}

// systemd's readiness protocol (sd_notify(3)), written by hand to avoid linking libsystemd: one
// datagram to the AF_UNIX socket named by $NOTIFY_SOCKET ('@' = abstract namespace). Does nothing
// when the variable is unset. Failures are logged, never fatal: the server works without systemd.
void notify_systemd(std::string_view state) {
  const char* socket_path = std::getenv("NOTIFY_SOCKET");
  if (socket_path == nullptr || socket_path[0] == '\0') return;
  const std::size_t length = std::strlen(socket_path);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if ((socket_path[0] != '/' && socket_path[0] != '@') || length >= sizeof(address.sun_path)) {
    spdlog::warn("NOTIFY_SOCKET '{}' is not a usable socket path", socket_path);
    return;
  }
  std::memcpy(address.sun_path, socket_path, length);
  if (address.sun_path[0] == '@') address.sun_path[0] = '\0';
  const auto address_length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length);
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    spdlog::warn("sd_notify: socket: {}", std::strerror(errno));
    return;
  }
  if (::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&address), address_length) < 0) {
    spdlog::warn("sd_notify({}): {}", state, std::strerror(errno));
  }
  ::close(fd);
}

void setup_logging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("chaise");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
}

chaise::http::ServerOptions server_options(const Config& config) {
  chaise::http::ServerOptions options;
  options.bind_address = config.bind_address;
  options.port = config.port;
  options.io_threads = config.io_threads;
  options.max_request_body_bytes = config.max_request_body_bytes;
  options.max_header_bytes = config.max_header_bytes;
  options.idle_timeout = std::chrono::seconds(config.idle_timeout_seconds);
  options.max_connections = config.max_connections;
  return options;
}

// Blocks SIGINT and SIGTERM in this thread, before any other thread exists, so every thread
// inherits the mask and the signals are only ever consumed by sigwait() in main.
sigset_t block_shutdown_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A peer that vanishes must cost its connection, not the process.
  std::signal(SIGPIPE, SIG_IGN);
  return signals;
}

int run(const Config& config) {
  const sigset_t signals = block_shutdown_signals();
  std::error_code fs_error;
  fs::create_directories(config.data_dir, fs_error);
  if (fs_error) {
    spdlog::critical("cannot create data_dir {}: {}", config.data_dir.string(), fs_error.message());
    return kExitStartupFailed;
  }
  std::string uuid;
  try {
    uuid = load_or_create_server_uuid(config.data_dir);
  } catch (const std::exception& e) {
    spdlog::critical("server uuid: {}", e.what());
    return kExitStartupFailed;
  }
  spdlog::info("chaise {} starting: data_dir={} uuid={} fsync={}", chaise::http::kChaiseVersion,
               config.data_dir.string(), uuid, config.fsync);

  chaise::storage::Options store_options;
  store_options.fsync = config.fsync;
  auto opened = chaise::storage::Database::open((config.data_dir / "store").string(), store_options);
  if (!opened.ok()) {
    spdlog::critical("cannot open the store in {}: {}", (config.data_dir / "store").string(),
                     chaise::storage::error_name(opened.error()));
    return kExitStartupFailed;
  }
  std::unique_ptr<chaise::storage::Database> store = std::move(*opened);

  auto janitor = std::make_unique<chaise::core::TxIdJanitor>(*store);
  auto notifier = std::make_unique<chaise::core::ChangesNotifier>(*store);

  chaise::http::RouterContext context;
  context.server_uuid = uuid;
  context.store = store.get();
  context.max_document_size = config.max_document_size;
  context.max_attachment_size = config.max_attachment_size;
  context.janitor = janitor.get();
  context.notifier = notifier.get();
  chaise::http::Router router{std::move(context)};
  chaise::http::Server server{
      server_options(config),
      [&router](const chaise::http::Request& request, chaise::http::ResponseStream& stream) {
        return router.handle(request, stream);
      }};
  if (const auto ec = server.start()) {
    spdlog::critical("cannot listen on {}:{}: {}", config.bind_address, config.port, ec.message());
    return kExitStartupFailed;
  }
  const bool ipv6 = config.bind_address.find(':') != std::string::npos;
  std::printf(ipv6 ? "chaise listening on [%s]:%u\n" : "chaise listening on %s:%u\n",
              config.bind_address.c_str(), static_cast<unsigned>(server.port()));
  std::fflush(stdout);
  notify_systemd("READY=1");

  int signal_number = 0;
  while (sigwait(&signals, &signal_number) != 0) {
  }
  spdlog::info("received {}, shutting down", strsignal(signal_number));
  notify_systemd("STOPPING=1");
  server.stop();
  // The store drains its pending commits, whose callbacks post into the server's io_context:
  // it goes before the server (and its io_context) is destroyed.
  notifier.reset();
  janitor.reset();
  store.reset();
  spdlog::info("shutdown complete");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Config> config;
  try {
    config = parse_command_line(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "chaise: " << e.what() << "\n";
    print_usage(std::cerr);
    return kExitUsage;
  }
  if (!config) return 0;
  setup_logging(config->log_level);
  try {
    return run(*config);
  } catch (const std::exception& e) {
    spdlog::critical("fatal: {}", e.what());
    return kExitStartupFailed;
  }
}
