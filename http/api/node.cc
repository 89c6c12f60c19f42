// /_node/{node}/...: the config API as CouchDB 3.5's chttpd_node.erl answers it. Server admins
// only (authorize_request). Each server is one node, named by [chaise] node_name (by default as a
// CouchDB without a distribution name calls itself: nonode@nohost); "_local" means it too.
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>

#include "config/config.h"
#include "config/settings.h"
#include "core/db/changes_notifier.h"
#include "core/db/claims.h"
#include "core/db/db_updates.h"
#include "core/db/idempotency.h"
#include "core/db/node_reports.h"
#include "core/db/txid_janitor.h"
#include "core/js/js.h"
#include "core/query/collation.h"
#include "core/security/security.h"
#include "http/api/hot_docs.h"
#include "http/api/idempotency.h"
#include "http/api/metrics.h"
#include "http/api/request.h"
#include "http/api/router.h"
#include "http/api/txn.h"
#include "http/transport/workers.h"

namespace chaise::http {

namespace {

// couch_util:check_config_blacklist: sections that hold code, never changed over HTTP.
constexpr std::array<std::string_view, 9> kBlacklisted = {"daemons",
                                                          "external",
                                                          "httpd_design_handlers",
                                                          "httpd_db_handlers",
                                                          "httpd_global_handlers",
                                                          "native_query_servers",
                                                          "os_daemons",
                                                          "query_servers",
                                                          "feature_flags"};

void check_blacklist(std::string_view section) {
  for (std::string_view s : kBlacklisted) {
    if (s == section) {
      throw HttpError(err::forbidden("Config section blacklisted for modification over HTTP API."));
    }
  }
}

config::Config& config_or_throw(const Call& call) {
  if (call.ctx.config == nullptr) throw HttpError(err::not_found());
  return *call.ctx.config;
}

// Values that take effect at once where CouchDB's do: the log level. (Auth settings and admins
// are re-read by the authenticator on its next request.)
void apply_live(std::string_view section, std::string_view key,
                const std::optional<std::string>& value) {
  if (section == "log" && key == "level") {
    const std::string level = value.value_or("info");
    if (level == "warning" || level == "notice") {
      spdlog::set_level(spdlog::level::warn);
    } else if (level == "none") {
      spdlog::set_level(spdlog::level::off);
    } else {
      spdlog::set_level(spdlog::level::from_str(level));
    }
  }
}

// An [admins] value as it is stored: a plain password is replaced by its hash
// (couch_password_hasher: an admin's plain password never reaches the file).
std::string admin_value(const config::Config& config, const std::string& value) {
  if (core::parse_admin_hash(value)) return value;
  const auto snapshot = config.snapshot();
  const std::string prf = config::get_auth(*snapshot, "pbkdf2_prf", "sha256");
  const std::int64_t iterations =
      std::max<std::int64_t>(1, config::get_int(*snapshot, "chttpd_auth", "iterations", 600000));
  return core::format_admin_hash(core::hash_password(value, prf, iterations));
}

Response config_request(Call& call) {
  config::Config& config = config_or_throw(call);
  const auto& path = call.path;  // _node, node, _config, ...
  const bool persist = call.req["X-Couch-Persist"] != "false";
  if (path.size() == 3) {
    if (!is_get(call)) throw_method_not_allowed("GET");
    Json all = Json::object();
    for (const auto& [section, keys] : *config.snapshot()) {
      Json s = Json::object();
      for (const auto& [k, v] : keys) s[k] = v;
      all[section] = std::move(s);
    }
    return json_response(call.req, Status::ok, all);
  }
  if (path.size() == 4 && path[3] == "_reload") {
    if (!call.is(beast_http::verb::post)) throw_method_not_allowed("POST");
    // The ini files are read again and replace every value (changes made without persisting are
    // gone, as in CouchDB). Files whose values the server could not start with are refused whole,
    // with the reason, and nothing changes. Startup settings (ports, the store) keep their values
    // until a restart; the others take effect as a PUT's would.
    config::Sections fresh;
    try {
      fresh = config.read_files();
      std::vector<std::string> warnings;
      config::server_settings(fresh, warnings);
    } catch (const config::ConfigError& e) {
      throw HttpError(err::bad_request(e.what()));
    }
    for (const auto& change : config.replace(std::move(fresh)))
      apply_live(change.section, change.key, change.value);
    return json_response(call.req, Status::ok, Json{{"ok", true}});
  }
  const std::string& section = path[3];
  if (path.size() == 4) {
    if (!is_get(call)) throw_method_not_allowed("GET");
    Json out = Json::object();
    const auto snapshot = config.snapshot();
    if (const auto s = snapshot->find(section); s != snapshot->end()) {
      for (const auto& [k, v] : s->second) out[k] = v;
    }
    return json_response(call.req, Status::ok, out);
  }
  if (path.size() > 5) throw HttpError(err::not_found());
  const std::string& key = path[4];
  if (is_get(call)) {
    const auto value = config.get(section, key);
    if (!value) throw HttpError(err::not_found("unknown_config_value"));
    return json_response(call.req, Status::ok, Json(*value));
  }
  if (call.is(beast_http::verb::put)) {
    check_blacklist(section);
    const Json body = parse_json_body(call.req, false);
    if (!body.is_string()) throw HttpError(err::bad_request("a JSON string expected"));
    std::string value = body.get<std::string>();
    const auto first = value.find_first_not_of(" \t\r\n");
    const auto last = value.find_last_not_of(" \t\r\n");
    value = first == std::string::npos ? std::string() : value.substr(first, last - first + 1);
    if (auto problem = config::validate(section, key, value))
      throw HttpError(err::bad_request(*problem));
    if (section == "admins") value = admin_value(config, value);
    std::optional<std::string> old;
    try {
      old = config.set(section, key, value, persist);
    } catch (const config::ConfigError& e) {
      throw HttpError(err::unknown_error(e.what()));
    }
    apply_live(section, key, value);
    return json_response(call.req, Status::ok, Json(old.value_or("")));
  }
  if (call.is(beast_http::verb::delete_)) {
    check_blacklist(section);
    std::optional<std::string> old;
    try {
      old = config.remove(section, key, persist);
    } catch (const config::ConfigError& e) {
      throw HttpError(err::unknown_error(e.what()));
    }
    if (!old) throw HttpError(err::not_found("unknown_config_value"));
    apply_live(section, key, std::nullopt);
    return json_response(call.req, Status::ok, Json(*old));
  }
  throw_method_not_allowed("GET,PUT,DELETE");
}

}  // namespace

namespace {

// setup:cluster_system_dbs().
const std::vector<std::string> kClusterSystemDbs = {"_users", "_replicator"};

// `ensure_dbs_exist`: a list of database names (400 otherwise).
std::vector<std::string> db_names(const Json& list) {
  if (!list.is_array()) throw HttpError(err::bad_request("ensure_dbs_exist must be a list"));
  std::vector<std::string> names;
  for (const Json& n : list) {
    if (!n.is_string()) throw HttpError(err::bad_request("ensure_dbs_exist must list names"));
    names.push_back(n.get<std::string>());
  }
  return names;
}

bool all_exist(const Call& call, const std::vector<std::string>& names) {
  auto tr = call.store().create_transaction();
  for (const std::string& name : names) {
    auto r = value_or_throw(core::open_db(tr, name));
    if (core::failed(r)) return false;
  }
  return true;
}

bool has_admins(const Call& call) {
  const auto snapshot = call.ctx.config->snapshot();
  const auto it = snapshot->find("admins");
  return it != snapshot->end() && !it->second.empty();
}

// setup:finish_cluster_int: creates the databases unless all exist (then false).
boost::asio::awaitable<bool> create_missing(const Call& call,
                                            const std::vector<std::string>& names) {
  if (all_exist(call, names)) co_return false;
  const bool admin_only =
      call.ctx.config->get("couchdb", "default_security").value_or("admin_only") != "everyone";
  const auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (const std::string& name : names) {
    std::optional<core::CouchError> error;
    storage::Status s = co_await run_txn(call.store(), [&](storage::Transaction& tr) {
      error.reset();
      auto r = core::create_db_with_default_security(tr, name, false, now_us, admin_only);
      if (!r.ok()) return storage::Status(r.error());
      if (auto* e = std::get_if<core::CouchError>(&*r); e && e->error != "file_exists") error = *e;
      return storage::Status{};
    });
    if (!s.ok()) throw HttpError(core::storage_failure(s.error()));
    if (error) throw HttpError(*error);
  }
  co_return true;
}

}  // namespace

// /_cluster_setup for a server that is one node (setup_httpd.erl): GET says whether it is set
// up ("single_node_enabled": admins exist and so do the system databases, or [couchdb]
// single_node is on), POST enable_single_node sets the admin, bind address and port (in the
// config file: they apply at the next start) and creates the system databases, POST
// finish_cluster creates them. Actions that join nodes are refused: there is no other node.
MaybeResponse handle_cluster_setup(Call& call) {
  if (call.path.size() != 1) throw HttpError(err::not_found());
  if (call.ctx.config == nullptr) throw HttpError(err::not_implemented());
  if (is_get(call)) {
    std::vector<std::string> dbs = kClusterSystemDbs;
    if (auto q = call.query.get("ensure_dbs_exist")) dbs = db_names(parse_json_or_throw(*q));
    const bool single_node = call.ctx.config->get("couchdb", "single_node") == "true";
    const bool enabled = single_node || (has_admins(call) && all_exist(call, dbs));
    co_return json_response(call.req, Status::ok,
                            {{"state", enabled ? "single_node_enabled" : "single_node_disabled"}});
  }
  if (!call.is(beast_http::verb::post)) throw_method_not_allowed("GET,POST");
  require_json_content_type(call);
  const Json body = parse_json_object_body(call.req, false);
  const std::string action = body.value("action", "missing");
  std::vector<std::string> dbs = kClusterSystemDbs;
  if (body.contains("ensure_dbs_exist")) dbs = db_names(body["ensure_dbs_exist"]);
  if (action == "enable_single_node") {
    config::Config& config = *call.ctx.config;
    const auto text = [&](const char* member) -> std::optional<std::string> {
      if (!body.contains(member) || body[member].is_null()) return std::nullopt;
      return body[member].is_string() ? body[member].get<std::string>() : body[member].dump();
    };
    const auto username = text("username");
    auto password = text("password_hash");
    if (!password) password = text("password");
    if (!has_admins(call) && (!username || !password))
      throw HttpError(err::bad_request("Cluster setup requires admin account to be configured"));
    std::vector<std::pair<std::pair<std::string, std::string>, std::string>> settings;
    if (username && password)
      settings.push_back({{"admins", *username}, admin_value(config, *password)});
    settings.push_back({{"chttpd", "bind_address"}, text("bind_address").value_or("0.0.0.0")});
    if (auto port = text("port")) settings.push_back({{"chttpd", "port"}, *port});
    for (const auto& [where, value] : settings) {
      if (auto problem = config::validate(where.first, where.second, value))
        throw HttpError(err::bad_request(*problem));
    }
    try {
      for (const auto& [where, value] : settings) config.set(where.first, where.second, value);
    } catch (const config::ConfigError& e) {
      throw HttpError(err::unknown_error(e.what()));
    }
    co_await create_missing(call, dbs);
    co_return json_response(call.req, Status::created, {{"ok", true}});
  }
  if (action == "finish_cluster") {
    if (!co_await create_missing(call, dbs))
      throw HttpError(err::bad_request("Cluster is already finished"));
    co_return json_response(call.req, Status::created, {{"ok", true}});
  }
  if (action == "enable_cluster" || action == "add_node" || action == "remove_node" ||
      action == "receive_cookie")
    throw HttpError(err::bad_request(
        "This server is a single node: use enable_single_node, or finish_cluster"));
  throw HttpError(err::bad_request("Invalid Action'"));
}

std::vector<core::NodeReport> other_node_reports(const Call& call) {
  std::vector<core::NodeReport> out;
  if (!call.ctx.node_reports) return out;
  auto tr = call.ctx.store->create_transaction();
  out = value_or_throw(core::read_node_reports(tr, core::idem_now_ms()));
  std::erase_if(out, [](const core::NodeReport& r) { return r.id == core::node_id(); });
  return out;
}

Response handle_membership(Call& call) {
  // CouchDB 3.5 crashes with 500 function_clause on a longer path; 404 says what it is.
  if (call.path.size() != 1) throw HttpError(err::not_found());
  if (!is_get(call)) throw_method_not_allowed("GET");
  std::set<std::string> names = {call.ctx.node_name};
  for (const core::NodeReport& r : other_node_reports(call)) names.insert(r.name);
  const Json nodes = Json(std::vector<std::string>(names.begin(), names.end()));
  return json_response(call.req, Status::ok, {{"all_nodes", nodes}, {"cluster_nodes", nodes}});
}

namespace {
// The value after `label` in a /proc text file (`label` includes its separator); 0 when absent.
std::uint64_t proc_value(const char* file, std::string_view label) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(label)) return std::strtoull(line.c_str() + label.size(), nullptr, 10);
  }
  return 0;
}

// GET /_node/{node}/_system: CouchDB's fields that mean something for this process. Memory is the
// resident set and the parts the store holds by design; CouchDB's message queues are the queues
// work waits in here (commits, worker threads, JavaScript contexts, the janitor); os_proc_count
// counts JavaScript contexts, as CouchDB counts its couchjs processes; process_count counts
// threads. A figure /proc does not give (a restricted container) is 0.
Response system(Call& call) {
  if (!is_get(call)) throw_method_not_allowed("GET");
  if (call.path.size() != 3) throw HttpError(err::not_found());
  const storage::StoreStats store = call.store().stats();
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const std::uint64_t rss = proc_value("/proc/self/status", "VmRSS:") * 1024;
  const std::uint64_t held = store.block_cache_bytes + store.memtable_bytes +
                             store.table_readers_bytes + store.resolver_bytes;
  const std::size_t js_contexts = call.ctx.js ? call.ctx.js->contexts() : 0;
  Json memory = {{"other", rss > held ? rss - held : 0},
                 {"block_cache", store.block_cache_bytes},
                 {"memtables", store.memtable_bytes},
                 {"table_readers", store.table_readers_bytes},
                 {"conflict_window", store.resolver_bytes}};
  Json queues = {{"commits", store.commit_queue},
                 {"workers", call.ctx.workers ? call.ctx.workers->queued() : 0},
                 {"javascript", call.ctx.js ? call.ctx.js->queued() : 0},
                 {"janitor", call.ctx.janitor ? call.ctx.janitor->queued() : 0}};
  const auto uptime = call.ctx.metrics ? call.ctx.metrics->uptime_seconds() : 0.0;
  // Chaise's own member: the engine, and whether (and how fast) the store answers now.
  const storage::StoreHealth health = call.store().probe(std::chrono::milliseconds(2000));
  // Live feeds wait on one storage watch per database, or are polled when the store refuses one
  // ([foundationdb] max_watches).
  Json storage_health = {
      {"engine", health.engine},
      {"available", health.available},
      {"probe_us", health.latency_us},
      {"feed_watches", call.ctx.notifier ? call.ctx.notifier->armed_watches() : 0},
      {"feed_polled_databases", call.ctx.notifier ? call.ctx.notifier->polled() : 0}};
  if (!health.available) storage_health["error"] = health.error;
  Json out = {{"uptime", static_cast<std::int64_t>(uptime)},
              {"memory", std::move(memory)},
              {"run_queue", call.ctx.workers ? call.ctx.workers->queued() : 0},
              {"run_queue_dirty_cpu", 0},
              {"context_switches", usage.ru_nvcsw + usage.ru_nivcsw},
              {"io_input", proc_value("/proc/self/io", "rchar: ")},
              {"io_output", proc_value("/proc/self/io", "wchar: ")},
              {"os_proc_count", js_contexts},
              {"stale_proc_count", 0},
              {"process_count", proc_value("/proc/self/status", "Threads:")},
              {"message_queues", std::move(queues)},
              {"internal_replication_jobs", 0},
              {"distribution", Json::object()},
              {"distribution_events", Json::array()},
              {"storage", std::move(storage_health)}};
  return json_response(call.req, Status::ok, out);
}

// GET /_node/{node}/_versions: what decides the answers of JavaScript functions and the order of
// view keys (CouchDB also names its Erlang, which Chaise has not).
Response versions(Call& call) {
  if (!is_get(call)) throw_method_not_allowed("GET");
  if (call.path.size() != 3) throw HttpError(err::not_found());
  const core::CollationVersions c = core::collation_versions();
  return json_response(call.req, Status::ok,
                       {{"javascript_engine",
                         {{"version", core::js::spidermonkey_version()}, {"name", "spidermonkey"}}},
                        {"collation_driver",
                         {{"name", "libicu"},
                          {"library_version", c.library_version},
                          {"collator_version", c.collator_version},
                          {"collation_algorithm_version", c.collation_algorithm_version}}}});
}
}  // namespace

Response handle_node(Call& call) {
  const auto& path = call.path;
  if (path.size() == 1) throw HttpError(err::bad_request("Incomplete path to _node request"));
  if (path[1] != "_local" && path[1] != call.ctx.node_name) throw HttpError(err::not_found());
  if (path.size() == 2) {
    if (!is_get(call)) throw_method_not_allowed("GET");
    return json_response(call.req, Status::ok, Json{{"name", call.ctx.node_name}});
  }
  if (path[2] == "_config") return config_request(call);
  if (path[2] == "_versions") return versions(call);
  if (path[2] == "_system") return system(call);
  if (path[2] == "_restart" && path.size() == 3) {
    if (!call.is(beast_http::verb::post)) throw_method_not_allowed("POST");
    if (!call.ctx.restart) throw HttpError(err::not_implemented("this server cannot restart"));
    call.ctx.restart();
    return json_response(call.req, Status::ok, Json{{"ok", true}});
  }
  if (path[2] == "_stats" || path[2] == "_prometheus") {
    if (!is_get(call)) throw_method_not_allowed("GET");
    if (call.ctx.metrics == nullptr) throw HttpError(err::not_found());
    const storage::StoreStats store = call.store().stats();
    BackgroundCounts bg;
    if (call.ctx.janitor != nullptr) {
      bg.janitor_passes = call.ctx.janitor->passes();
      bg.idempotency_expired = call.ctx.janitor->expired();
    }
    if (call.ctx.db_updates != nullptr) bg.db_updates_folds = call.ctx.db_updates->folds();
    if (call.ctx.idempotency_in_flight)
      bg.idempotency_in_flight = call.ctx.idempotency_in_flight->size();
    if (call.ctx.hot_docs) {
      bg.hot_doc_updates = call.ctx.hot_docs->updates();
      bg.hot_doc_groups = call.ctx.hot_docs->groups();
    }
    if (call.ctx.js != nullptr) bg.js_calls = call.ctx.js->calls();
    if (path[2] == "_prometheus") {
      if (path.size() != 3) throw HttpError(err::not_found());
      Response r = json_response(call.req, Status::ok, Json::object());
      r.set(beast_http::field::content_type, "text/plain; version=2.0");
      r.body() = call.ctx.metrics->prometheus(store, bg);
      r.prepare_payload();
      if (call.is(beast_http::verb::head)) r.body().clear();
      return r;
    }
    // /_stats/a/b/...: the part of the tree the path names (null when there is none), as CouchDB.
    Json node = call.ctx.metrics->stats(store, bg);
    for (std::size_t i = 3; i < path.size(); ++i) {
      if (!node.is_object() || !node.contains(path[i])) {
        node = nullptr;
        break;
      }
      node = Json(node[path[i]]);
    }
    return json_response(call.req, Status::ok, node);
  }
  throw HttpError(err::not_found());
}

}  // namespace chaise::http
