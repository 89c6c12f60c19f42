// chaise: the server process. Reads the configuration, prepares the data directory, starts the HTTP
// server, tells systemd it is ready, and shuts down cleanly on SIGINT/SIGTERM.
//
// Configuration precedence: built-in defaults < ini file (--config) < command-line flags.
// Exit status: 0 after a clean shutdown, 1 when startup fails, 2 on a usage error.
//
// Contract with the tests and with scripts: once the listener is bound, exactly one line
//   chaise listening on <bind_address>:<port>
// is written to stdout and flushed (the real port, also when --port 0 asked the OS for one).
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
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

#include "config/config.h"
#include "config/settings.h"
#include "core/db/active_tasks.h"
#include "core/db/changes_notifier.h"
#include "core/db/claims.h"
#include "core/db/databases.h"
#include "core/db/db_updates.h"
#include "core/db/idempotency.h"
#include "core/db/installation.h"
#include "core/db/keyspace.h"
#include "core/db/node_reports.h"
#include "core/db/txid_janitor.h"
#include "core/docs/documents.h"
#include "core/js/js.h"
#include "core/replication/scheduler.h"
#include "core/security/replicator_docs.h"
#include "core/security/security.h"
#include "http/api/metrics.h"
#include "http/api/peruser.h"
#include "http/api/replication_endpoints.h"
#include "http/api/router.h"
#include "http/auth/auth.h"
#include "http/transport/server.h"
#include "http/transport/workers.h"
#include "server/log_sink.h"
#include "server/memory.h"
#include "storage/database.h"
#include "storage/fdb/fdb_database.h"

namespace {

namespace fs = std::filesystem;

constexpr int kExitStartupFailed = 1;
// POST /_node/{node}/_restart raises it: the server stops as for SIGTERM, then executes itself
// again with the same arguments (same pid, so systemd and supervisors see no exit).
constexpr int kRestartSignal = SIGUSR2;
constexpr int kExitUsage = 2;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void print_usage(std::ostream& out) {
  out << "usage: chaise [-c|--config PATH]... [--port N] [--bind ADDR] [--data-dir DIR]\n"
         "              [--io-threads N] [--admin-party] [--create-admin] [--help] [--version]\n"
         "Config files are read in order, later ones overriding earlier ones; changes made "
         "through\n"
         "the config API (and hashed admin passwords) are written to the last one. Options "
         "override\n"
         "the files.\n"
         "--admin-party   no admin configured: every request is a server admin (local "
         "development)\n"
         "--create-admin  no admin configured: create 'admin' with a random password, print it\n"
         "                once and store its hash in the last config file\n";
}

// What the command line asks for.
struct Command {
  std::vector<fs::path> config_files;
  // (section, key, value) set over the files, not persisted.
  std::vector<std::array<std::string, 3>> overrides;
  bool admin_party = false;
  bool create_admin = false;
};

// Flags are "--name VALUE" or "--name=VALUE". Returns nullopt when the process should exit 0 after
// --help / --version.
std::optional<Command> parse_command_line(int argc, char** argv) {
  struct Flag {
    std::string_view name;
    std::string_view section;  // "" for --config
    std::string_view key;
  };
  static constexpr std::array<Flag, 6> kFlags = {{{"--config", "", ""},
                                                  {"-c", "", ""},
                                                  {"--port", "chttpd", "port"},
                                                  {"--bind", "chttpd", "bind_address"},
                                                  {"--data-dir", "couchdb", "database_dir"},
                                                  {"--io-threads", "chaise", "io_threads"}}};
  Command command;
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
    if (arg == "--admin-party") {
      command.admin_party = true;
      continue;
    }
    if (arg == "--create-admin") {
      command.create_admin = true;
      continue;
    }
    std::optional<std::string> inline_value;
    if (const auto eq = arg.find('='); eq != std::string_view::npos) {
      inline_value = std::string(arg.substr(eq + 1));
      arg = arg.substr(0, eq);
    }
    const auto flag =
        std::find_if(kFlags.begin(), kFlags.end(), [&](const Flag& f) { return f.name == arg; });
    if (flag == kFlags.end()) throw UsageError("unknown option '" + std::string(argv[i]) + "'");
    if (!inline_value) {
      if (i + 1 >= argc) throw UsageError(std::string(arg) + " needs a value");
      inline_value = argv[++i];
    }
    if (flag->section.empty()) {
      command.config_files.emplace_back(*inline_value);
    } else {
      if (auto problem = chaise::config::validate(flag->section, flag->key, *inline_value)) {
        throw UsageError(std::string(arg) + ": " + *problem);
      }
      command.overrides.push_back(
          {std::string(flag->section), std::string(flag->key), *inline_value});
    }
  }
  // Every file must exist, except the last (where changes are written), which is created on the
  // first write when its directory exists.
  for (std::size_t i = 0; i < command.config_files.size(); ++i) {
    const fs::path& file = command.config_files[i];
    const bool last = i + 1 == command.config_files.size();
    if (fs::is_regular_file(file)) continue;
    const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
    if (last && !fs::exists(file) && fs::is_directory(dir)) continue;
    throw UsageError("config file " + file.string() + " does not exist");
  }
  return command;
}

bool is_server_uuid(std::string_view text) {
  return text.size() == 32 && text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
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
  std::string uuid = chaise::core::random_hex32();
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

// CouchDB's [log] level names, mapped onto spdlog's.
spdlog::level::level_enum log_level(const std::string& level) {
  if (level == "warning" || level == "warn" || level == "notice") return spdlog::level::warn;
  if (level == "alert" || level == "emergency" || level == "critical")
    return spdlog::level::critical;
  if (level == "none" || level == "off") return spdlog::level::off;
  return spdlog::level::from_str(level);
}

// spdlog's flusher thread (flush_every), started with every signal blocked: setup_logging runs
// before main blocks SIGTERM and friends for sigwait, and a thread that did not block them would
// take SIGTERM's default action (the process dies instead of shutting down).
void start_log_flusher() {
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  spdlog::flush_every(std::chrono::seconds(1));
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

// Logs go to stderr (journald under systemd) or, with [log] writer = file, to [log] file, which
// SIGHUP reopens (for logrotate).
std::shared_ptr<chaise::server::ReopenableFileSink> log_file_sink;  // with [log] writer = file

void setup_logging(const std::string& level, const std::string& file) {
  std::shared_ptr<spdlog::logger> logger;
  if (file.empty() && isatty(STDERR_FILENO)) {
    logger = std::make_shared<spdlog::logger>(
        "chaise", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  } else if (file.empty()) {
    logger = std::make_shared<spdlog::logger>(
        "chaise", std::make_shared<chaise::server::BufferedFdSink>(STDERR_FILENO));
    start_log_flusher();
  } else {
    log_file_sink = std::make_shared<chaise::server::ReopenableFileSink>(file);
    logger = std::make_shared<spdlog::logger>("chaise", log_file_sink);
    // As on stderr (server/log_sink.h): warnings at once, info lines within a second.
    logger->flush_on(spdlog::level::warn);
    start_log_flusher();
  }
  spdlog::set_default_logger(logger);
  spdlog::set_level(log_level(level));
}

// The interval systemd expects WATCHDOG=1 pings at (half its WatchdogSec), or nullopt.
std::optional<std::chrono::microseconds> watchdog_interval() {
  const char* usec = std::getenv("WATCHDOG_USEC");
  if (usec == nullptr) return std::nullopt;
  if (const char* pid = std::getenv("WATCHDOG_PID"); pid != nullptr && std::atol(pid) != getpid()) {
    return std::nullopt;
  }
  const long long value = std::atoll(usec);
  if (value <= 0) return std::nullopt;
  return std::chrono::microseconds(value / 2);
}

chaise::http::ServerOptions server_options(const chaise::config::ServerSettings& config) {
  chaise::http::ServerOptions options;
  options.bind_address = config.bind_address;
  options.port = config.port;
  options.io_threads = config.io_threads;
  options.max_request_body_bytes = config.max_request_body_bytes;
  options.max_header_bytes = config.max_header_bytes;
  options.idle_timeout = std::chrono::seconds(config.idle_timeout_seconds);
  options.header_timeout = std::chrono::seconds(config.header_timeout_seconds);
  options.max_connections = config.max_connections;
  options.max_connections_per_address = config.max_connections_per_address;
  options.body_timeout = std::chrono::seconds(config.body_timeout_seconds);
  options.max_request_bytes_in_flight = config.max_request_bytes_in_flight;
  if (config.tls) {
    const auto& t = *config.tls;
    options.tls = chaise::http::TlsOptions{.port = t.port,
                                           .cert_file = t.cert_file,
                                           .key_file = t.key_file,
                                           .password = t.password,
                                           .cacert_file = t.cacert_file,
                                           .verify_peer = t.verify_peer,
                                           .fail_if_no_peer_cert = t.fail_if_no_peer_cert,
                                           .ciphers = t.ciphers};
  }
  return options;
}

// Blocks SIGINT and SIGTERM in this thread, before any other thread exists, so every thread
// inherits the mask and the signals are only ever consumed by sigwait() in main.
sigset_t block_shutdown_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, kRestartSignal);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A peer that vanishes must cost its connection, not the process.
  std::signal(SIGPIPE, SIG_IGN);
  return signals;
}

// Server admins, as CouchDB sets them up at start: COUCHDB_USER/COUCHDB_PASSWORD add one (as
// CouchDB's Docker image does), plain-text passwords in [admins] are replaced by their PBKDF2 hash
// (written back to the last config file), and --create-admin makes one when there is none.
// Returns false when the server must not start (no admin, no --admin-party).
bool prepare_admins(chaise::config::Config& config, const Command& command) {
  namespace config_ns = chaise::config;
  const auto persist = [&](const std::string& name, const std::string& value) {
    try {
      if (config.writable_file().empty()) {
        config.pin("admins", name, value);  // no file to keep it: it stays over a reload
      } else {
        config.set("admins", name, value, /*persist=*/true);
      }
    } catch (const config_ns::ConfigError& e) {
      spdlog::warn("cannot store the hashed password of admin '{}': {}", name, e.what());
      config.pin("admins", name, value);
    }
    const char* from_env = std::getenv("COUCHDB_USER");
    if (config.writable_file().empty() && (from_env == nullptr || name != from_env)) {
      spdlog::warn("admin '{}' is kept in memory only: give a writable --config file", name);
    }
  };
  const auto values = config.snapshot();
  const std::string prf = config_ns::get_auth(*values, "pbkdf2_prf", "sha256");
  const std::int64_t iterations =
      std::atoll(config_ns::get_auth(*values, "iterations", "600000").c_str());
  const char* env_user = std::getenv("COUCHDB_USER");
  const char* env_password = std::getenv("COUCHDB_PASSWORD");
  if (env_user != nullptr && *env_user != '\0' && env_password != nullptr) {
    // Kept in memory only (hashed): the environment names it again at every start, and a config
    // file must not collect it.
    const auto existing = config.get("admins", env_user);
    const auto parsed = existing ? chaise::core::parse_admin_hash(*existing) : std::nullopt;
    if (!parsed || !chaise::core::verify_password(*parsed, env_password)) {
      config.set("admins", env_user,
                 chaise::core::format_admin_hash(
                     chaise::core::hash_password(env_password, prf, iterations)),
                 /*persist=*/false);
    }
  }
  const auto before_hashing = config.snapshot();  // held: persist() replaces the live one
  if (const auto admins = before_hashing->find("admins"); admins != before_hashing->end()) {
    for (const auto& [name, value] : admins->second) {
      if (chaise::core::parse_admin_hash(value)) continue;
      const auto hash = chaise::core::hash_password(value, prf, iterations);
      persist(name, chaise::core::format_admin_hash(hash));
    }
  }
  const auto after_hashing = config.snapshot();
  const auto admins = after_hashing->find("admins");
  const bool have_admin = admins != after_hashing->end() && !admins->second.empty();
  if (have_admin) return true;
  if (command.create_admin) {
    const std::string password = chaise::core::random_hex32().substr(0, 20);
    persist("admin", chaise::core::format_admin_hash(
                         chaise::core::hash_password(password, prf, iterations)));
    std::printf("chaise created the server admin 'admin' with password %s (stored hashed in %s)\n",
                password.c_str(), config.writable_file().string().c_str());
    std::fflush(stdout);
    return true;
  }
  if (command.admin_party) {
    spdlog::warn("admin party: no server admin is configured and every request is an admin");
    return true;
  }
  spdlog::critical(
      "no server admin configured: add one under [admins] in a config file, set COUCHDB_USER and "
      "COUCHDB_PASSWORD, or start with --create-admin (or --admin-party for local development)");
  return false;
}

// Creates the data directory and returns the server's uuid (from the configuration, else the
// one kept in the data directory, made on first start); nullopt, logged, when either fails.
std::optional<std::string> prepare_data_dir(const chaise::config::ServerSettings& config) {
  std::error_code fs_error;
  fs::create_directories(config.data_dir, fs_error);
  if (fs_error) {
    spdlog::critical("cannot create data_dir {}: {}", config.data_dir.string(), fs_error.message());
    return std::nullopt;
  }
  try {
    return config.uuid ? *config.uuid : load_or_create_server_uuid(config.data_dir);
  } catch (const std::exception& e) {
    spdlog::critical("server uuid: {}", e.what());
    return std::nullopt;
  }
}

// [couchdb] single_node: the system databases that are missing are created, with the security
// object [couchdb] default_security gives new databases. False, logged, when the store fails.
bool create_system_dbs(chaise::storage::Database& store, const chaise::config::Config& config) {
  const bool admin_only = config.get("couchdb", "default_security") != "everyone";
  const auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  auto created = chaise::core::create_system_dbs(store, admin_only, now_us);
  if (!created.ok()) {
    spdlog::critical("cannot create the system databases: {}",
                     chaise::storage::error_name(created.error()));
    return false;
  }
  for (const std::string& name : *created) spdlog::info("created system database {}", name);
  return true;
}

// The FoundationDB store of [foundationdb] ([chaise] storage_engine = foundationdb); nullptr,
// logged, when it cannot open.
std::unique_ptr<chaise::storage::Database> open_foundationdb_store(
    const chaise::config::Sections& settings) {
  chaise::storage::FdbOptions o;
  o.cluster_file = chaise::config::get_string(settings, "foundationdb", "cluster_file", "");
  o.library = chaise::config::get_string(settings, "foundationdb", "library", o.library);
  o.api_version = static_cast<int>(
      chaise::config::get_int(settings, "foundationdb", "api_version", o.api_version));
  o.transaction_timeout_ms = chaise::config::get_int(
      settings, "foundationdb", "transaction_timeout", o.transaction_timeout_ms);
  o.transaction_retry_limit =
      chaise::config::get_int(settings, "foundationdb", "retry_limit", o.transaction_retry_limit);
  o.transaction_size_limit_bytes = chaise::config::get_int(
      settings, "foundationdb", "transaction_size_limit", o.transaction_size_limit_bytes);
  o.max_watches = chaise::config::get_int(settings, "foundationdb", "max_watches", o.max_watches);
  o.future_version_retry_delay_us = chaise::config::get_int(
      settings, "foundationdb", "future_version_retry_delay", o.future_version_retry_delay_us);
  o.key_prefix = chaise::config::get_string(settings, "foundationdb", "key_prefix", "");
  const std::string cluster = o.cluster_file.empty() ? "(FoundationDB's default)" : o.cluster_file;
  std::string why;
  auto opened = chaise::storage::open_foundationdb(o, &why);
  if (!opened.ok()) {
    spdlog::critical("cannot open the FoundationDB store, cluster file {}, library {}: {}{}{}",
                     cluster, o.library, chaise::storage::error_name(opened.error()),
                     why.empty() ? "" : ": ", why);
    return nullptr;
  }
  spdlog::info("store: FoundationDB, cluster file {}, library {}, API version {}", cluster,
               o.library, o.api_version);
  return std::move(*opened);
}

// The store: the embedded one in <data_dir>/store with the configured options, or FoundationDB
// ([chaise] storage_engine); nullptr, logged, when it cannot open.
std::unique_ptr<chaise::storage::Database> open_store(const chaise::config::ServerSettings& config,
                                                      const chaise::config::Sections& settings) {
  if (chaise::config::get_string(settings, "chaise", "storage_engine", "rocksdb") == "foundationdb")
    return open_foundationdb_store(settings);
  chaise::storage::Options store_options;
  store_options.fsync = config.fsync;
  store_options.block_cache_bytes = config.block_cache_bytes;
  store_options.write_buffer_bytes = config.write_buffer_bytes;
  store_options.resolver_bytes_max = config.conflict_window_bytes;
  store_options.table_index_in_cache = config.table_index_in_cache;
  chaise::core::keyspace::set_store_options(store_options);
  auto opened =
      chaise::storage::Database::open((config.data_dir / "store").string(), store_options);
  if (!opened.ok()) {
    spdlog::critical("cannot open the store in {}: {}", (config.data_dir / "store").string(),
                     chaise::storage::error_name(opened.error()));
    return nullptr;
  }
  return std::move(*opened);
}

// How run() ended: the exit code, or a restart asked for.
struct RunEnd {
  RunEnd(int code, bool restart_asked = false)  // NOLINT(google-explicit-constructor): exit codes
      : exit_code(code), restart(restart_asked) {}
  int exit_code;
  bool restart;
};

RunEnd run(chaise::config::Config& config_store, const chaise::config::ServerSettings& config,
           const Command& command) {
  const sigset_t signals = block_shutdown_signals();
  if (!prepare_admins(config_store, command)) return kExitStartupFailed;
  const std::optional<std::string> uuid = prepare_data_dir(config);
  if (!uuid) return kExitStartupFailed;
  spdlog::info("chaise {} starting: data_dir={} uuid={} fsync={} allocator={}",
               chaise::http::kChaiseVersion, config.data_dir.string(), *uuid, config.fsync,
               chaise::server::allocator_description());

  std::unique_ptr<chaise::storage::Database> store = open_store(config, *config_store.snapshot());
  if (!store) return kExitStartupFailed;
  // Servers sharing a FoundationDB store are one installation with one identity (the uuid of GET
  // / and of replication ids), the first server's, unless [couchdb] uuid says otherwise.
  const bool shared_store =
      chaise::config::get_string(*config_store.snapshot(), "chaise", "storage_engine", "rocksdb") ==
      "foundationdb";
  std::string server_uuid = *uuid;
  if (shared_store && !config.uuid) {
    auto shared = chaise::core::installation_value(*store, chaise::core::kServerUuidName,
                                                   [&] { return *uuid; });
    if (!shared.ok()) {
      spdlog::critical("cannot read the installation's uuid: {}",
                       chaise::storage::error_name(shared.error()));
      return kExitStartupFailed;
    }
    if (*shared != *uuid) spdlog::info("uuid of the installation: {}", *shared);
    server_uuid = std::move(*shared);
  }
  if (config.single_node && !create_system_dbs(*store, config_store)) return kExitStartupFailed;

  auto janitor = std::make_unique<chaise::core::TxIdJanitor>(*store);
  chaise::server::MemoryTrimmer trimmer{std::chrono::seconds(5)};
  auto notifier = std::make_unique<chaise::core::ChangesNotifier>(*store);
  auto db_updates = std::make_unique<chaise::core::DbUpdatesRecorder>(*store);
  auto peruser = std::make_unique<chaise::http::PerUserDbs>(*store, config_store, *notifier);
  chaise::http::Authenticator authenticator{config_store, *store, command.admin_party};

  chaise::core::js::Engine js_engine{
      chaise::core::js::EngineOptions{.contexts = config.js_contexts,
                                      .timeout = std::chrono::milliseconds(config.js_timeout_ms),
                                      .heap_bytes = std::size_t{config.js_heap_mb} << 20,
                                      .jit = config.js_jit,
                                      .reduce_limit = config.js_reduce_limit}};

  // Declared before the server; stopped after it and destroyed after the store (see the end).
  auto workers = std::make_unique<chaise::http::WorkerPool>(config.worker_threads);
  chaise::core::ActiveTasks active_tasks;
  // The replicator: its endpoints reach this server through the router, which holds it.
  const auto settings = config_store.snapshot();
  auto replication_endpoints =
      std::make_unique<chaise::http::ReplicationEndpoints>(chaise::http::RemoteEndpointOptions{
          chaise::config::get_bool(*settings, "replicator", "verify_ssl_certificates", false),
          chaise::config::get_string(*settings, "replicator", "ssl_trusted_certificates_file")});
  chaise::core::replication::SchedulerOptions replicator_options;
  replicator_options.server_uuid = server_uuid;
  replicator_options.max_jobs =
      static_cast<int>(chaise::config::get_int(*settings, "replicator", "max_jobs", 500));
  replicator_options.interval_ms =
      chaise::config::get_int(*settings, "replicator", "interval", 60'000);
  replicator_options.max_churn =
      static_cast<int>(chaise::config::get_int(*settings, "replicator", "max_churn", 20));
  replicator_options.max_history =
      static_cast<int>(chaise::config::get_int(*settings, "replicator", "max_history", 20));
  // On FoundationDB other servers may share the store: _replicator jobs run under leases.
  if (shared_store) {
    replicator_options.lease_owner = chaise::core::node_id();
    replicator_options.put_local_if = [&store](std::string_view id,
                                               const std::optional<std::string>& rev,
                                               const chaise::core::replication::Json& doc) {
      return chaise::core::put_local_if(*store, chaise::core::kReplicatorDb,
                                        "_local/" + std::string(id), rev, doc.dump());
    };
  }
  replicator_options.node = config.node_name;
  replicator_options.lease_ms =
      chaise::config::get_int(*settings, "replicator", "lease_timeout", 30'000);
  // The defaults of a replication's own options, for POST /_replicate and _replicator alike.
  {
    auto& d = replicator_options.defaults;
    const auto int_of = [&](const char* key, std::int64_t fallback) {
      return chaise::config::get_int(*settings, "replicator", key, fallback);
    };
    d.checkpoint_interval_ms = int_of("checkpoint_interval", d.checkpoint_interval_ms);
    d.worker_processes = static_cast<int>(int_of("worker_processes", d.worker_processes));
    d.worker_batch_size = static_cast<int>(int_of("worker_batch_size", d.worker_batch_size));
    d.http_connections = static_cast<int>(int_of("http_connections", d.http_connections));
    d.connection_timeout_ms = int_of("connection_timeout", d.connection_timeout_ms);
    d.retries_per_request = static_cast<int>(int_of("retries_per_request", d.retries_per_request));
    d.use_checkpoints =
        chaise::config::get_bool(*settings, "replicator", "use_checkpoints", d.use_checkpoints);
    d.use_bulk_get =
        chaise::config::get_bool(*settings, "replicator", "use_bulk_get", d.use_bulk_get);
  }
  auto replicator = std::make_unique<chaise::core::replication::Scheduler>(
      *replication_endpoints, std::move(replicator_options));
  chaise::http::RouterContext context;
  context.replicator = replicator.get();
  context.own_url = [&replication_endpoints] { return replication_endpoints->own_url(); };
  context.server_uuid = server_uuid;
  context.node_name = config.node_name;
  context.node_reports = shared_store;
  context.workers = workers.get();
  context.js = &js_engine;
  context.store = store.get();
  context.max_document_size = config.max_document_size;
  context.max_attachment_size = config.max_attachment_size;
  context.changes_timeout_ms = config.changes_timeout_ms;
  context.uuids_max_count = config.uuids_max_count;
  context.janitor = janitor.get();
  context.notifier = notifier.get();
  context.db_updates = db_updates.get();
  context.active_tasks = &active_tasks;
  context.config = &config_store;
  context.auth = &authenticator;
  chaise::http::Metrics metrics;
  context.metrics = &metrics;
  context.restart = [] { ::kill(::getpid(), kRestartSignal); };
  context.access_log =
      chaise::config::get_bool(*config_store.snapshot(), "log", "access_log", true);
  chaise::http::Router router{std::move(context)};
  replication_endpoints->set_router(router);
  chaise::http::ServerOptions options = server_options(config);
  options.stream_body = chaise::http::streams_request_body;
  chaise::http::Server server{std::move(options), [&router](const chaise::http::Request& request,
                                                            chaise::http::ResponseStream& stream) {
                                return router.handle(request, stream);
                              }};
  metrics.set_connection_counter([&server] { return server.open_connections(); });
  if (const auto ec = server.start()) {
    spdlog::critical("cannot listen on {}:{}: {}", config.bind_address, config.port, ec.message());
    return kExitStartupFailed;
  }
  // Before the ports are printed: a client that reads them may ask for a replication to a local
  // database at once, and the replicator names this server by them.
  replication_endpoints->set_listener(config.bind_address, server.port(),
                                      config.tls ? server.tls_port() : 0);
  const bool ipv6 = config.bind_address.find(':') != std::string::npos;
  std::printf(ipv6 ? "chaise listening on [%s]:%u\n" : "chaise listening on %s:%u\n",
              config.bind_address.c_str(), static_cast<unsigned>(server.port()));
  if (config.tls) {
    std::printf(
        ipv6 ? "chaise listening with TLS on [%s]:%u\n" : "chaise listening with TLS on %s:%u\n",
        config.bind_address.c_str(), static_cast<unsigned>(server.tls_port()));
  }
  std::fflush(stdout);
  replicator->start();
  // On a shared store this server reports itself (its name, tasks and jobs) for the others'
  // /_membership, /_active_tasks and /_scheduler/jobs.
  std::unique_ptr<chaise::core::NodeReporter> reporter;
  if (shared_store) {
    reporter = std::make_unique<chaise::core::NodeReporter>(
        *store, chaise::core::node_id(), [&active_tasks, &replicator, name = config.node_name] {
          chaise::core::NodeReport r;
          r.name = name;
          r.written_ms = chaise::core::idem_now_ms();
          r.tasks = nlohmann::ordered_json(active_tasks.list(name));
          for (auto& t : replicator->active_tasks()) r.tasks.push_back(std::move(t));
          r.jobs = replicator->jobs(0, std::nullopt)["jobs"];
          return r;
        });
  }
  notify_systemd("READY=1");

  // Until SIGINT/SIGTERM: SIGHUP reopens the log file; under a systemd watchdog, a ping every half
  // interval while the HTTP threads answer a posted probe and the store answers a read.
  const auto watchdog = watchdog_interval();
  int signal_number = 0;
  for (;;) {
    int received = -1;
    if (watchdog) {
      const auto total = watchdog->count();
      timespec wait{static_cast<time_t>(total / 1'000'000),
                    static_cast<long>((total % 1'000'000) * 1000)};
      received = sigtimedwait(&signals, nullptr, &wait);
      if (received < 0 && errno == EAGAIN) {
        bool healthy =
            server.probe(std::chrono::duration_cast<std::chrono::milliseconds>(*watchdog));
        if (healthy) {
          auto tr = store->create_transaction();
          healthy = tr.get("\xff/chaise/watchdog", chaise::storage::Snapshot::yes).ok();
        }
        if (healthy) {
          notify_systemd("WATCHDOG=1");
        } else {
          spdlog::error("watchdog: the server did not answer its health probe; no ping sent");
        }
        continue;
      }
    } else if (sigwait(&signals, &received) != 0) {
      continue;
    }
    if (received < 0) continue;
    if (received == SIGHUP) {
      if (log_file_sink) log_file_sink->reopen();
      spdlog::info("received SIGHUP: log file reopened");
      continue;
    }
    signal_number = received;
    break;
  }
  const bool restart = signal_number == kRestartSignal;
  if (restart) {
    spdlog::info("restart asked for: shutting down, then starting again");
  } else {
    spdlog::info("received {}, shutting down", strsignal(signal_number));
  }
  notify_systemd("STOPPING=1");
  // The others stop listing this server at once.
  reporter.reset();
  // Jobs checkpoint and stop first: they read and write through the router and the store.
  replicator->stop();
  server.stop();
  workers->stop();
  // The store drains its pending commits, whose callbacks post into the server's io_context or
  // the workers': it goes before the server (and its io_context) and the workers are destroyed.
  peruser.reset();
  notifier.reset();
  db_updates.reset();
  janitor.reset();
  store.reset();
  workers.reset();
  spdlog::info("shutdown complete");
  spdlog::default_logger()->flush();
  return RunEnd(0, restart);
}

}  // namespace

int main(int argc, char** argv) {
  chaise::server::tune_malloc();
  std::optional<Command> command;
  std::unique_ptr<chaise::config::Config> config;
  chaise::config::ServerSettings settings;
  std::vector<std::string> warnings;
  try {
    command = parse_command_line(argc, argv);
    if (!command) return 0;
    config = std::make_unique<chaise::config::Config>(command->config_files);
    for (const auto& [section, key, value] : command->overrides) {
      config->pin(section, key, value);
    }
    settings = chaise::config::server_settings(*config->snapshot(), warnings);
  } catch (const UsageError& e) {
    std::cerr << "chaise: " << e.what() << "\n";
    print_usage(std::cerr);
    return kExitUsage;
  } catch (const chaise::config::ConfigError& e) {
    std::cerr << "chaise: config: " << e.what() << "\n";
    return kExitUsage;
  }
  const auto values = config->snapshot();
  const std::string log_file =
      chaise::config::get_string(*values, "log", "writer", "stderr") == "file"
          ? chaise::config::get_string(*values, "log", "file", "./chaise.log")
          : std::string();
  try {
    setup_logging(settings.log_level, log_file);
  } catch (const spdlog::spdlog_ex& e) {
    std::cerr << "chaise: cannot open the log file " << log_file << ": " << e.what() << "\n";
    return kExitStartupFailed;
  }
  for (const auto& warning : warnings) spdlog::warn("config: {}", warning);
  try {
    const RunEnd end = run(*config, settings, *command);
    if (!end.restart) return end.exit_code;
    // The same program with the same arguments, in this process: the store is closed and the
    // listening sockets are gone, so the new image opens them again.
    std::fflush(stdout);
    ::execv("/proc/self/exe", argv);
    spdlog::critical("restart: cannot execute /proc/self/exe again: {}", std::strerror(errno));
    return kExitStartupFailed;
  } catch (const std::exception& e) {
    spdlog::critical("fatal: {}", e.what());
    return kExitStartupFailed;
  }
}
