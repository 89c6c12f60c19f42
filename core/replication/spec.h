// core/replication/spec.h — what a replication is asked to do: a POST /_replicate body or a
// _replicator document, checked and read into a ReplicationSpec, and the replication id CouchDB
// gives it.
//
// Contract: pure functions, no I/O, thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/security/security.h"
#include "core/util/error.h"

namespace chaise::core::replication {

using Json = nlohmann::ordered_json;

// The tunables of a replication: the [replicator] section gives their defaults, a request or
// document may set them.
struct ReplicatorDefaults {
  std::int64_t checkpoint_interval_ms = 30'000;
  int worker_processes = 4;
  int worker_batch_size = 500;
  int http_connections = 20;
  std::int64_t connection_timeout_ms = 30'000;
  int retries_per_request = 5;
  bool use_checkpoints = true;
  bool use_bulk_get = true;
};

// What a replication does: the options CouchDB's replicator reads, the tunables starting from
// the [replicator] defaults.
struct ReplicationSpec : ReplicatorDefaults {
  Json source;  // as given: a URL, or {"url", "headers", "auth"}
  Json target;
  bool continuous = false;
  bool create_target = false;
  Json create_target_params = Json::object();
  // At most one filter: a design-document filter ("ddoc/name") or "_view" with query_params;
  // doc_ids; a Mango selector.
  std::string filter;
  Json query_params = Json::object();
  std::optional<Json> doc_ids;
  std::optional<Json> selector;
  std::optional<Json> since_seq;
  bool winning_revs_only = false;
  // Who asked: the user the job runs for (its name shows in _scheduler).
  UserCtx user;
  // Set for a job of a _replicator document.
  std::string db_name;
  std::string doc_id;
};

// Reads a replication request. Errors are 400 bad_request with CouchDB's reason (the same rules
// as core/security/replicator_docs.h applies to _replicator documents).
Outcome<ReplicationSpec> parse_replication(const Json& body, const UserCtx& user,
                                           const ReplicatorDefaults& defaults);

// The replication id, CouchDB's version 4: the MD5, in hex, of the Erlang term
//   [ServerUUID, SourceInfo, TargetInfo | FilterPart]
// where an endpoint's info is {remote, User, Host, NonDefaultPort, Path, Headers, undefined} (the
// URL with a trailing '/', its basic-auth user, the port unless 80/443/5984, the custom headers)
// and the filter part is [Code, QueryParams] for a design-document filter (`filter_code`, the
// function's source), [Filter, QueryParams] for _view, [DocIds], [Selector], or nothing.
// `full_id` adds "+continuous" and "+create_target" as CouchDB does.
struct ReplicationId {
  std::string base;  // 32 hex digits
  std::string full;  // base + options
};
ReplicationId replication_id(const ReplicationSpec& spec, std::string_view server_uuid,
                             const std::optional<std::string>& filter_code);

// An endpoint object's "auth": {"basic": {"username", "password"}}, when both are strings.
std::optional<std::pair<std::string, std::string>> basic_auth(const Json& endpoint);
// An endpoint object's "headers" Authorization: Basic credentials, decoded (CouchDB's
// remove_basic_auth_from_headers reads them so).
std::optional<std::pair<std::string, std::string>> header_basic_auth(const Json& endpoint);

// An endpoint's URL (string or object) with a '/' at its end and without credentials, as
// _scheduler shows it.
std::string endpoint_url(const Json& endpoint);
// The URL with its password replaced by "*****" (couch_util:url_strip_password), as _scheduler
// shows endpoints.
std::string masked_url(const Json& endpoint);

}  // namespace chaise::core::replication
