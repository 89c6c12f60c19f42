// config/settings.h — what the configuration's strings mean: which (section, key) pairs Chaise
// reads, which values each accepts, and the typed settings the server starts with.
//
// CouchDB's sections are used where CouchDB has the setting ([chttpd] port, [couchdb]
// max_document_size, [chttpd_auth] timeout, [admins], [log] level, ...); Chaise's own settings live
// in [chaise]. Unknown sections and keys are reported as warnings (a CouchDB local.ini carries many
// keys Chaise has no use for); a known key with a bad value is an error that stops startup, and a
// 400 from the config API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace chaise::config {

// nullopt when `value` is acceptable for [section] key (or the key is not one Chaise reads);
// otherwise what is wrong with it.
std::optional<std::string> validate(std::string_view section, std::string_view key,
                                    std::string_view value);
// True when Chaise reads [section] key ([admins] accepts any key).
bool is_known(std::string_view section, std::string_view key);

// "true"/"false" as CouchDB's config:get_boolean reads them; anything else gives `fallback`.
bool get_bool(const Sections& values, std::string_view section, std::string_view key,
              bool fallback);
std::int64_t get_int(const Sections& values, std::string_view section, std::string_view key,
                     std::int64_t fallback);
std::string get_string(const Sections& values, std::string_view section, std::string_view key,
                       std::string fallback = {});
// [chttpd_auth] key, falling back to [couch_httpd_auth] key as CouchDB 3 does.
std::string get_auth(const Sections& values, std::string_view key, std::string fallback = {});

// [ssl]: HTTPS on a second port (CouchDB's keys).
struct TlsSettings {
  std::uint16_t port = 6984;          // [ssl] port
  std::string cert_file;              // [ssl] cert_file
  std::string key_file;               // [ssl] key_file
  std::string password;               // [ssl] password
  std::string cacert_file;            // [ssl] cacert_file
  bool verify_peer = false;           // [ssl] verify_ssl_certificates
  bool fail_if_no_peer_cert = false;  // [ssl] fail_if_no_peer_cert
  std::string ciphers;                // [ssl] ciphers, as an OpenSSL cipher list
};

// io_threads and worker_threads when 0 (automatic) with storage_engine = foundationdb; one per
// core with the embedded store.
inline constexpr unsigned kFoundationDbIoThreads = 64;
inline constexpr unsigned kFoundationDbWorkerThreads = 8;

// Read once at startup.
struct ServerSettings {
  std::string bind_address = "127.0.0.1";        // [chttpd] bind_address
  std::uint16_t port = 5984;                     // [chttpd] port
  std::filesystem::path data_dir = "./data";     // [couchdb] database_dir
  std::optional<std::string> uuid;               // [couchdb] uuid
  unsigned io_threads = 0;                       // [chaise] io_threads; 0 = automatic (above)
  std::string node_name = "nonode@nohost";       // [chaise] node_name: CouchDB's node()
  bool fsync = true;                             // [chaise] fsync
  bool single_node = false;                      // [couchdb] single_node: system databases at start
  std::size_t block_cache_bytes = 32u << 20;     // [chaise] block_cache_bytes
  std::size_t write_buffer_bytes = 16u << 20;    // [chaise] write_buffer_bytes
  bool table_index_in_cache = true;              // [chaise] table_index_in_cache
  std::size_t conflict_window_bytes = 8u << 20;  // [chaise] conflict_window_bytes
  std::size_t max_request_body_bytes = 64 * 1024 * 1024;    // [chttpd] max_http_request_size
  std::size_t max_document_size = 8'000'000;                // [couchdb] max_document_size
  std::size_t max_attachment_size = 1024ull * 1024 * 1024;  // [couchdb] max_attachment_size
  std::size_t max_header_bytes = 64 * 1024;                 // [chaise] max_header_bytes
  unsigned idle_timeout_seconds = 300;                      // [chaise] idle_timeout_seconds
  unsigned header_timeout_seconds = 30;                     // [chaise] header_timeout_seconds
  std::size_t max_connections = 10000;                      // [chaise] max_connections
  std::size_t max_connections_per_address = 1000;           // [chaise] max_connections_per_address
  unsigned body_timeout_seconds = 30;                       // [chaise] body_timeout_seconds
  unsigned worker_threads = 0;                              // [chaise] worker_threads; ditto
  std::size_t max_request_bytes_in_flight = 512ull << 20;   // [chaise] max_request_bytes_in_flight
  std::int64_t changes_timeout_ms = 60'000;                 // [chttpd] changes_timeout
  std::int64_t uuids_max_count = 1000;                      // [uuids] max_count
  std::string log_level = "info";                           // [log] level
  std::int64_t js_timeout_ms = 5000;                        // [couchdb] os_process_timeout
  bool js_reduce_limit = true;                              // [query_server_config] reduce_limit
  unsigned js_contexts = 2;                                 // [chaise] js_contexts
  unsigned js_heap_mb = 64;                                 // [chaise] js_heap_mb
  bool js_jit = false;                                      // [chaise] js_jit
  std::optional<TlsSettings> tls;                           // [ssl] enable = true
};

// Validates every known key of `values` (ConfigError naming the first bad one) and returns the
// startup settings; unknown sections/keys are appended to `warnings`.
ServerSettings server_settings(const Sections& values, std::vector<std::string>& warnings);

}  // namespace chaise::config
