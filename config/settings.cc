#include "config/settings.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>

namespace chaise::config {

namespace {

enum class Kind { kString, kNonEmpty, kBool, kInt, kSizeOrInfinity, kHex32, kLogLevel, kOneOf };

struct Key {
  std::string_view section;
  std::string_view key;
  Kind kind;
  std::int64_t min = 0;
  std::int64_t max = std::numeric_limits<std::int64_t>::max();
  std::string_view choices = {};  // kOneOf: '|'-separated
};

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

// Every key Chaise reads. [admins] is open: every key is an admin name.
constexpr auto kKeys = std::to_array<Key>({
    {"chttpd", "bind_address", Kind::kNonEmpty},
    {"chttpd", "port", Kind::kInt, 0, 65535},
    {"chttpd", "max_http_request_size", Kind::kInt, 1, kMax},
    {"chttpd", "require_valid_user", Kind::kBool},
    {"chttpd", "changes_timeout", Kind::kInt, 1, kMax},
    {"chttpd", "enable_cors", Kind::kBool},
    {"chttpd", "authentication_handlers", Kind::kString},
    {"chttpd", "admin_only_all_dbs", Kind::kBool},
    {"chttpd", "require_valid_user_except_for_up", Kind::kBool},
    {"chttpd", "WWW-Authenticate", Kind::kString},
    {"chttpd_auth", "authentication_redirect", Kind::kString},
    {"couchdb", "database_dir", Kind::kNonEmpty},
    {"couchdb", "uuid", Kind::kHex32},
    {"couchdb", "max_document_size", Kind::kInt, 1, kMax},
    {"couchdb", "max_attachment_size", Kind::kSizeOrInfinity},
    {"couchdb", "default_security", Kind::kOneOf, 0, 0, "admin_only|everyone"},
    {"couchdb", "single_node", Kind::kBool},
    {"couchdb", "users_db_security_editable", Kind::kBool},
    {"couchdb", "maintenance_mode", Kind::kOneOf, 0, 0, "true|false|nolb"},
    {"couchdb", "os_process_timeout", Kind::kInt, 1, 3'600'000},
    {"query_server_config", "reduce_limit", Kind::kBool},
    {"purge", "max_document_id_number", Kind::kInt, 1, kMax},
    {"couch_peruser", "enable", Kind::kBool},
    {"couch_peruser", "delete_dbs", Kind::kBool},
    {"couch_peruser", "database_prefix", Kind::kNonEmpty},
    {"couch_peruser", "q", Kind::kInt, 1, kMax},
    {"purge", "max_revisions_number", Kind::kInt, 1, kMax},
    {"chaise", "js_contexts", Kind::kInt, 1, 64},
    {"chaise", "js_heap_mb", Kind::kInt, 8, 4096},
    {"chaise", "js_jit", Kind::kBool},
    {"log", "access_log", Kind::kBool},
    {"log", "writer", Kind::kOneOf, 0, 0, "stderr|file|journald"},
    {"log", "file", Kind::kNonEmpty},
    {"chttpd_auth", "secret", Kind::kString},
    {"chttpd_auth", "timeout", Kind::kInt, 1, kMax},
    {"chttpd_auth", "allow_persistent_cookies", Kind::kBool},
    {"chttpd_auth", "same_site", Kind::kOneOf, 0, 0, "|strict|lax|none|Strict|Lax|None"},
    {"chttpd_auth", "cookie_domain", Kind::kString},
    {"chttpd_auth", "iterations", Kind::kInt, 1, 100'000'000},
    {"chttpd_auth", "pbkdf2_prf", Kind::kOneOf, 0, 0, "sha|sha224|sha256|sha384|sha512"},
    {"chttpd_auth", "password_scheme", Kind::kOneOf, 0, 0, "pbkdf2"},
    {"chttpd_auth", "require_valid_user", Kind::kBool},
    {"chttpd_auth", "proxy_use_secret", Kind::kBool},
    {"chttpd_auth", "x_auth_username", Kind::kNonEmpty},
    {"chttpd_auth", "x_auth_roles", Kind::kNonEmpty},
    {"chttpd_auth", "x_auth_token", Kind::kNonEmpty},
    {"chttpd_auth", "authentication_db", Kind::kOneOf, 0, 0, "_users"},
    {"chttpd_auth", "hash_algorithms", Kind::kString},
    {"chttpd_auth", "public_fields", Kind::kString},
    {"chttpd_auth", "password_regexp", Kind::kString},
    {"chttpd_auth", "users_db_public", Kind::kBool},
    {"chttpd_auth", "upgrade_hash_on_auth", Kind::kBool},
    {"jwt_auth", "required_claims", Kind::kString},
    {"jwt_auth", "roles_claim_name", Kind::kNonEmpty},
    {"jwt_auth", "roles_claim_path", Kind::kNonEmpty},
    {"chaise", "io_threads", Kind::kInt, 0, 1024},
    {"chaise", "node_name", Kind::kNonEmpty},
    {"chaise", "fsync", Kind::kBool},
    {"chaise", "fauxton_dir", Kind::kString},
    {"chaise", "max_header_bytes", Kind::kInt, 1024, 0xffffffff},
    {"chaise", "idle_timeout_seconds", Kind::kInt, 1, 24 * 3600},
    {"chaise", "header_timeout_seconds", Kind::kInt, 1, 3600},
    {"chaise", "max_connections", Kind::kInt, 1, kMax},
    {"chaise", "max_connections_per_address", Kind::kInt, 1, kMax},
    {"chaise", "body_timeout_seconds", Kind::kInt, 1, 3600},
    {"chaise", "worker_threads", Kind::kInt, 0, 1024},
    {"chaise", "max_request_bytes_in_flight", Kind::kInt, 1024 * 1024, kMax},
    {"chaise", "block_cache_bytes", Kind::kInt, 1024 * 1024, kMax},
    {"chaise", "write_buffer_bytes", Kind::kInt, 1024 * 1024, 1024ll * 1024 * 1024},
    {"chaise", "conflict_window_bytes", Kind::kInt, 64 * 1024, kMax},
    {"chaise", "table_index_in_cache", Kind::kBool},
    {"chaise", "idempotency_key_ttl", Kind::kInt, 1, 365ll * 24 * 3600},
    {"chaise", "storage_engine", Kind::kOneOf, 0, 0, "rocksdb|foundationdb"},
    {"foundationdb", "cluster_file", Kind::kString},
    {"foundationdb", "library", Kind::kNonEmpty},
    {"foundationdb", "api_version", Kind::kInt, 710, 730},
    {"foundationdb", "transaction_timeout", Kind::kInt, 0, 0x7fffffff},
    {"foundationdb", "retry_limit", Kind::kInt, -1, 0x7fffffff},
    {"foundationdb", "transaction_size_limit", Kind::kInt, 1'000'000, 10'000'000},
    {"foundationdb", "max_watches", Kind::kInt, 0, 1'000'000},
    {"foundationdb", "future_version_retry_delay", Kind::kInt, 1, 1'000'000},
    {"foundationdb", "key_prefix", Kind::kString},
    {"log", "level", Kind::kLogLevel},
    {"uuids", "max_count", Kind::kInt, 1, kMax},
    {"cors", "origins", Kind::kString},
    {"cors", "credentials", Kind::kBool},
    {"cors", "methods", Kind::kString},
    {"cors", "headers", Kind::kString},
    {"cors", "max_age", Kind::kInt, 0, kMax},
    {"ssl", "enable", Kind::kBool},
    {"ssl", "port", Kind::kInt, 0, 65535},
    {"ssl", "cert_file", Kind::kString},
    {"ssl", "key_file", Kind::kString},
    {"ssl", "password", Kind::kString},
    {"ssl", "cacert_file", Kind::kString},
    {"ssl", "verify_ssl_certificates", Kind::kBool},
    {"ssl", "fail_if_no_peer_cert", Kind::kBool},
    {"ssl", "ciphers", Kind::kString},
    {"replicator", "max_jobs", Kind::kInt, 1, 100'000},
    {"replicator", "interval", Kind::kInt, 100, kMax},
    {"replicator", "max_churn", Kind::kInt, 0, 100'000},
    {"replicator", "lease_timeout", Kind::kInt, 100, 3'600'000},
    {"replicator", "max_history", Kind::kInt, 1, 1000},
    {"replicator", "worker_processes", Kind::kInt, 1, 64},
    {"replicator", "worker_batch_size", Kind::kInt, 1, 100'000},
    {"replicator", "http_connections", Kind::kInt, 1, 1000},
    {"replicator", "connection_timeout", Kind::kInt, 1, 3'600'000},
    {"replicator", "retries_per_request", Kind::kInt, 0, 100},
    {"replicator", "checkpoint_interval", Kind::kInt, 1, 86'400'000},
    {"replicator", "use_checkpoints", Kind::kBool},
    {"replicator", "use_bulk_get", Kind::kBool},
    {"replicator", "verify_ssl_certificates", Kind::kBool},
    {"replicator", "ssl_trusted_certificates_file", Kind::kString},
});

// Keys of the old all-in-[chaise] layout, and where each lives now. Refused with that hint, so an
// old file cannot silently lose its settings.
constexpr auto kMoved = std::to_array<std::array<std::string_view, 3>>({
    {"bind_address", "chttpd", "bind_address"},
    {"port", "chttpd", "port"},
    {"data_dir", "couchdb", "database_dir"},
    {"max_document_size", "couchdb", "max_document_size"},
    {"max_attachment_size", "couchdb", "max_attachment_size"},
    {"max_request_body_bytes", "chttpd", "max_http_request_size"},
    {"log_level", "log", "level"},
});

const Key* find_key(std::string_view section, std::string_view key) {
  // [couch_httpd_auth] is CouchDB's older name of [chttpd_auth]; both are read.
  if (section == "couch_httpd_auth") section = "chttpd_auth";
  // [cors:<host>]: [cors]'s keys for one virtual host.
  if (section.starts_with("cors:")) section = "cors";
  for (const Key& k : kKeys) {
    if (k.section == section && k.key == key) return &k;
  }
  return nullptr;
}

std::optional<std::int64_t> to_int(std::string_view text) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

bool one_of(std::string_view choices, std::string_view value) {
  while (true) {
    const auto bar = choices.find('|');
    if (choices.substr(0, bar) == value) return true;
    if (bar == std::string_view::npos) return false;
    choices.remove_prefix(bar + 1);
  }
}

std::string lookup(const Sections& values, std::string_view section, std::string_view key,
                   bool& found) {
  found = false;
  const auto s = values.find(section);
  if (s == values.end()) return {};
  const auto k = s->second.find(std::string(key));
  if (k == s->second.end()) return {};
  found = true;
  return k->second;
}

// [ssl] ciphers as CouchDB's local.ini writes them (an Erlang list of OpenSSL names,
// ["ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES128-SHA"]) or as an OpenSSL cipher list; returns
// the OpenSSL form ("A:B"). "undefined" or empty: OpenSSL's default.
std::string openssl_cipher_list(std::string_view text) {
  if (text.empty() || text == "undefined") return {};
  if (text.front() != '[') return std::string(text);
  std::string out;
  std::string name;
  bool quoted = false;
  for (char c : text) {
    if (c == '"') {
      if (quoted && !name.empty()) out.append(out.empty() ? "" : ":").append(name);
      name.clear();
      quoted = !quoted;
    } else if (quoted) {
      name.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::optional<std::string> validate(std::string_view section, std::string_view key,
                                    std::string_view value) {
  if (section == "chaise") {
    for (const auto& moved : kMoved) {
      if (moved[0] == key) {
        return "moved: set [" + std::string(moved[1]) + "] " + std::string(moved[2]) +
               " instead of [chaise] " + std::string(key);
      }
    }
  }
  const Key* k = find_key(section, key);
  if (k == nullptr) return std::nullopt;
  switch (k->kind) {
    case Kind::kString:
      return std::nullopt;
    case Kind::kNonEmpty:
      if (value.empty()) return std::string("must not be empty");
      return std::nullopt;
    case Kind::kBool:
      if (value == "true" || value == "false") return std::nullopt;
      return "expected true or false, got '" + std::string(value) + "'";
    case Kind::kInt: {
      const auto n = to_int(value);
      if (n && *n >= k->min && *n <= k->max) return std::nullopt;
      return "expected an integer in [" + std::to_string(k->min) + ", " + std::to_string(k->max) +
             "], got '" + std::string(value) + "'";
    }
    case Kind::kSizeOrInfinity: {
      if (value == "infinity") return std::nullopt;
      const auto n = to_int(value);
      if (n && *n >= 0) return std::nullopt;
      return "expected a size in bytes or infinity, got '" + std::string(value) + "'";
    }
    case Kind::kHex32:
      if (value.size() == 32 &&
          value.find_first_not_of("0123456789abcdef") == std::string_view::npos) {
        return std::nullopt;
      }
      return std::string("expected 32 lowercase hex digits");
    case Kind::kLogLevel:
      if (one_of("trace|debug|info|notice|warn|warning|error|critical|alert|emergency|none|off",
                 value)) {
        return std::nullopt;
      }
      return "expected a log level (debug, info, warning, error, ...), got '" + std::string(value) +
             "'";
    case Kind::kOneOf:
      if (one_of(k->choices, value)) return std::nullopt;
      return "expected one of " + std::string(k->choices) + ", got '" + std::string(value) + "'";
  }
  return std::nullopt;
}

bool is_known(std::string_view section, std::string_view key) {
  return section == "admins" || section == "jwt_keys" || find_key(section, key) != nullptr;
}

bool get_bool(const Sections& values, std::string_view section, std::string_view key,
              bool fallback) {
  bool found = false;
  const std::string v = lookup(values, section, key, found);
  if (v == "true") return true;
  if (v == "false") return false;
  return fallback;
}

std::int64_t get_int(const Sections& values, std::string_view section, std::string_view key,
                     std::int64_t fallback) {
  bool found = false;
  const std::string v = lookup(values, section, key, found);
  if (!found) return fallback;
  return to_int(v).value_or(fallback);
}

std::string get_string(const Sections& values, std::string_view section, std::string_view key,
                       std::string fallback) {
  bool found = false;
  std::string v = lookup(values, section, key, found);
  if (found) return v;
  return fallback;
}

std::string get_auth(const Sections& values, std::string_view key, std::string fallback) {
  bool found = false;
  std::string v = lookup(values, "chttpd_auth", key, found);
  if (found) return v;
  v = lookup(values, "couch_httpd_auth", key, found);
  if (found) return v;
  return fallback;
}

ServerSettings server_settings(const Sections& values, std::vector<std::string>& warnings) {
  for (const auto& [section, keys] : values) {
    for (const auto& [key, value] : keys) {
      if (auto problem = validate(section, key, value)) {
        throw ConfigError("[" + section + "] " + key + ": " + *problem);
      }
      if (!is_known(section, key)) {
        warnings.push_back("[" + section + "] " + key + " is not a setting Chaise reads; ignored");
      }
    }
  }
  ServerSettings s;
  s.bind_address = get_string(values, "chttpd", "bind_address", s.bind_address);
  s.port = static_cast<std::uint16_t>(get_int(values, "chttpd", "port", s.port));
  s.data_dir = get_string(values, "couchdb", "database_dir", s.data_dir.string());
  if (auto uuid = get_string(values, "couchdb", "uuid"); !uuid.empty()) s.uuid = uuid;
  s.io_threads = static_cast<unsigned>(get_int(values, "chaise", "io_threads", s.io_threads));
  s.node_name = get_string(values, "chaise", "node_name", s.node_name);
  s.fsync = get_bool(values, "chaise", "fsync", s.fsync);
  s.single_node = get_bool(values, "couchdb", "single_node", s.single_node);
  s.block_cache_bytes = static_cast<std::size_t>(get_int(
      values, "chaise", "block_cache_bytes", static_cast<std::int64_t>(s.block_cache_bytes)));
  s.write_buffer_bytes = static_cast<std::size_t>(get_int(
      values, "chaise", "write_buffer_bytes", static_cast<std::int64_t>(s.write_buffer_bytes)));
  s.table_index_in_cache =
      get_bool(values, "chaise", "table_index_in_cache", s.table_index_in_cache);
  s.conflict_window_bytes =
      static_cast<std::size_t>(get_int(values, "chaise", "conflict_window_bytes",
                                       static_cast<std::int64_t>(s.conflict_window_bytes)));
  s.max_request_body_bytes =
      static_cast<std::size_t>(get_int(values, "chttpd", "max_http_request_size",
                                       static_cast<std::int64_t>(s.max_request_body_bytes)));
  s.max_document_size = static_cast<std::size_t>(get_int(
      values, "couchdb", "max_document_size", static_cast<std::int64_t>(s.max_document_size)));
  const std::string att = get_string(values, "couchdb", "max_attachment_size");
  if (att == "infinity") {
    s.max_attachment_size = std::numeric_limits<std::size_t>::max();
  } else if (!att.empty()) {
    s.max_attachment_size = static_cast<std::size_t>(*to_int(att));
  }
  s.max_header_bytes = static_cast<std::size_t>(
      get_int(values, "chaise", "max_header_bytes", static_cast<std::int64_t>(s.max_header_bytes)));
  s.idle_timeout_seconds = static_cast<unsigned>(
      get_int(values, "chaise", "idle_timeout_seconds", s.idle_timeout_seconds));
  s.header_timeout_seconds = static_cast<unsigned>(
      get_int(values, "chaise", "header_timeout_seconds", s.header_timeout_seconds));
  s.max_connections = static_cast<std::size_t>(
      get_int(values, "chaise", "max_connections", static_cast<std::int64_t>(s.max_connections)));
  s.max_connections_per_address =
      static_cast<std::size_t>(get_int(values, "chaise", "max_connections_per_address",
                                       static_cast<std::int64_t>(s.max_connections_per_address)));
  s.worker_threads =
      static_cast<unsigned>(get_int(values, "chaise", "worker_threads", s.worker_threads));
  // 0 is automatic. The embedded store answers a request on its thread at once: one thread per
  // core. On FoundationDB a request waits for the cluster on its thread, so more threads serve
  // more requests at once (bench/README.md, "Storage engines").
  if (get_string(values, "chaise", "storage_engine", "rocksdb") == "foundationdb") {
    if (s.io_threads == 0) s.io_threads = kFoundationDbIoThreads;
    if (s.worker_threads == 0) s.worker_threads = kFoundationDbWorkerThreads;
  }
  s.body_timeout_seconds = static_cast<unsigned>(
      get_int(values, "chaise", "body_timeout_seconds", s.body_timeout_seconds));
  s.max_request_bytes_in_flight =
      static_cast<std::size_t>(get_int(values, "chaise", "max_request_bytes_in_flight",
                                       static_cast<std::int64_t>(s.max_request_bytes_in_flight)));
  s.changes_timeout_ms = get_int(values, "chttpd", "changes_timeout", s.changes_timeout_ms);
  s.js_timeout_ms = get_int(values, "couchdb", "os_process_timeout", s.js_timeout_ms);
  s.js_reduce_limit = get_bool(values, "query_server_config", "reduce_limit", s.js_reduce_limit);
  s.js_contexts = static_cast<unsigned>(get_int(values, "chaise", "js_contexts", s.js_contexts));
  s.js_heap_mb = static_cast<unsigned>(get_int(values, "chaise", "js_heap_mb", s.js_heap_mb));
  s.js_jit = get_bool(values, "chaise", "js_jit", s.js_jit);
  s.uuids_max_count = get_int(values, "uuids", "max_count", s.uuids_max_count);
  s.log_level = get_string(values, "log", "level", s.log_level);
  if (get_bool(values, "ssl", "enable", false)) {
    TlsSettings tls;
    tls.port = static_cast<std::uint16_t>(get_int(values, "ssl", "port", tls.port));
    tls.cert_file = get_string(values, "ssl", "cert_file");
    tls.key_file = get_string(values, "ssl", "key_file");
    if (tls.cert_file.empty() || tls.key_file.empty()) {
      throw ConfigError("[ssl] enable = true needs cert_file and key_file");
    }
    tls.password = get_string(values, "ssl", "password");
    tls.cacert_file = get_string(values, "ssl", "cacert_file");
    tls.verify_peer = get_bool(values, "ssl", "verify_ssl_certificates", false);
    tls.fail_if_no_peer_cert = get_bool(values, "ssl", "fail_if_no_peer_cert", false);
    tls.ciphers = openssl_cipher_list(get_string(values, "ssl", "ciphers"));
    s.tls = std::move(tls);
  }
  return s;
}

}  // namespace chaise::config
