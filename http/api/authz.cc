// Authorization: what the authenticated user of a request may do. CouchDB 3.5's rules from
// chttpd_auth_request.erl (paths), couch_db.erl (check_is_member / check_is_admin, design
// documents) and couch_users_db.erl (the _users database).
#include <array>

#include "config/settings.h"
#include "core/db/db_cache.h"
#include "core/security/replicator_docs.h"
#include "http/api/request.h"
#include "http/auth/auth.h"

namespace chaise::http {

namespace {

[[noreturn]] void throw_unauthorized(std::string reason) {
  throw HttpError(err::unauthorized(std::move(reason)));
}

// check_is_member / check_is_admin failures: 401 for an anonymous user, 403 for a named one.
core::CouchError denied(const Call& call, std::string reason) {
  if (!call.user.name) return err::unauthorized(std::move(reason));
  return err::forbidden(std::move(reason));
}

[[noreturn]] void throw_denied(const Call& call, std::string reason) {
  throw HttpError(denied(call, std::move(reason)));
}

bool config_true(const Call& call, std::string_view section, std::string_view key, bool fallback) {
  if (call.ctx.config == nullptr) return fallback;
  return config::get_bool(*call.ctx.config->snapshot(), section, key, fallback);
}

}  // namespace

void require_server_admin(const Call& call) {
  if (!call.user.is_server_admin()) throw_unauthorized("You are not a server admin.");
}

void require_db_admin(const Call& call) {
  if (!core::is_db_admin(call.user, *call.security)) {
    throw_denied(call, "You are not a db or server admin.");
  }
}

void authorize_request(const Call& call) {
  const auto& path = call.path;
  if (path.empty() || path[0] == "favicon.ico") return;
  const std::string& first = path[0];
  if (first.front() == '_' && !core::is_system_db(first)) {
    if (first == "_all_dbs" || first == "_dbs_info") {
      if (config_true(call, "chttpd", "admin_only_all_dbs", true)) require_server_admin(call);
      return;
    }
    if (first == "_up" || first == "_uuids" || first == "_session") return;
    if (first == "_utils" && is_get(call)) return;
    if (first == "_stats" && path.size() == 1) return;
    if (first == "_replicate") {
      if (!call.user.name && !call.user.is_server_admin())
        throw_unauthorized("You are not an authenticated user");
      return;
    }
    if (first == "_node" && path.size() >= 3 &&
        (path[2] == "_stats" || path[2] == "_system" || path[2] == "_prometheus")) {
      if (!call.user.is_server_admin() && !call.user.has_role("_metrics")) {
        throw_unauthorized("You are not a server admin or read-only metrics user");
      }
      return;
    }
    require_server_admin(call);
    return;
  }
  // A database.
  if (path.size() == 1 && (call.is(beast_http::verb::put) || call.is(beast_http::verb::delete_))) {
    require_server_admin(call);
    return;
  }
  if (path.size() >= 2) {
    const std::string& op = path[1];
    if ((first == "_users" || first == "_replicator") && (op == "_all_docs" || op == "_changes")) {
      require_server_admin(call);
    }
    if (op == "_purge" || op == "_purged_infos_limit" || op == "_sync_shards") {
      require_server_admin(call);
    }
  }
}

std::variant<core::DbRef, core::CouchError> open_db_or_error(const Call& call) {
  auto tr = call.store().create_transaction();
  return open_db_or_error(call, tr);
}

std::variant<core::DbRef, core::CouchError> open_db_or_error(const Call& call,
                                                             storage::Transaction& tr) {
  const std::string& name = call.path.at(0);
  const std::int64_t shared = call.fresh_read_version();
  if (shared > 0) tr.set_read_version(shared);
  auto r = value_or_throw(core::open_db_with_security(tr, name));
  // Remembered for a write to follow (GET and HEAD write nothing; asking costs a call into the
  // client).
  if (shared == 0 && !call.is(beast_http::verb::get) && !call.is(beast_http::verb::head)) {
    call.read_version = storage::SeenReadVersion::of(tr);
  }
  // CouchDB answers 404 for a missing database whatever its name; only PUT checks the name.
  if (core::failed(r)) return std::get<core::CouchError>(std::move(r));
  core::OpenedDb opened = std::get<core::OpenedDb>(std::move(r));
  call.security = std::move(opened.security);
  if (!core::is_db_member(call.user, *call.security)) {
    return denied(call, call.user.name ? "You are not allowed to access this db."
                                       : "You are not authorized to access this db.");
  }
  return std::move(opened.db);
}

core::DbRef open_db_or_throw(const Call& call) {
  auto r = open_db_or_error(call);
  if (auto* e = std::get_if<core::CouchError>(&r)) throw HttpError(std::move(*e));
  return std::get<core::DbRef>(std::move(r));
}

std::string check_kept_body(const Call& call, const core::DbRef& db, std::string_view id,
                            std::string body, bool deleted) {
  auto parsed = core::parse_json_text(body, core::JsonNumbers::exact);
  auto* members = std::get_if<Json>(&parsed);
  if (!members || !members->is_object()) return body;
  Json doc = Json::object({{"_id", std::string(id)}});
  if (deleted) doc["_deleted"] = true;
  doc.update(*members);
  if (auto e = check_doc_write(call, db, doc)) throw HttpError(std::move(*e));
  doc.erase("_id");
  doc.erase("_deleted");
  return core::dump_json(doc, false);
}

std::optional<core::CouchError> check_doc_write(const Call& call, const core::DbRef& db,
                                                Json& doc) {
  std::string id;
  if (const auto it = doc.find("_id"); it != doc.end() && it->is_string()) id = *it;
  if (id.starts_with("_local/")) return std::nullopt;
  const bool design = id.starts_with("_design/");
  if (design && !core::is_db_admin(call.user, *call.security))
    return denied(call, "You are not a db or server admin.");
  if (db.name == core::kReplicatorDb) {
    if (design) return std::nullopt;
    return core::prepare_replicator_doc(doc, call.user,
                                        core::is_db_admin(call.user, *call.security));
  }
  if (db.name != core::kUsersDb) return std::nullopt;

  // The current document, for the "may not change name / roles" rules.
  std::optional<Json> old;
  if (!id.empty()) {
    auto tr = call.store().create_transaction();
    auto current = value_or_throw(core::get_doc_json(tr, db, id, core::DocReadOptions{}));
    if (!core::failed(current)) {
      Json parsed = Json::parse(std::get<std::string>(current), nullptr, false);
      if (parsed.is_object()) old = std::move(parsed);
    }
  }
  core::UserDbRules rules;
  if (call.ctx.auth != nullptr) rules = call.ctx.auth->settings()->user_rules;
  // couch_db:check_is_admin for _users: its db admins count as admins here too.
  core::UserCtx as = call.user;
  if (core::is_db_admin(call.user, *call.security) && !as.is_server_admin()) {
    as.roles.push_back(std::string(core::kAdminRole));
  }
  auto prepared = core::prepare_user_doc(doc, old, as, rules);
  if (auto* e = std::get_if<core::CouchError>(&prepared)) return *e;
  doc = std::get<Json>(std::move(prepared));
  return std::nullopt;
}

std::optional<std::vector<std::string>> readable_fields(const Call& call, const core::DbRef& db,
                                                        std::string_view id) {
  if (db.name != core::kUsersDb || core::is_db_admin(call.user, *call.security))
    return std::nullopt;
  if (id.starts_with("_design/")) {
    throw HttpError(
        err::forbidden("Only administrators can view design docs in the users database."));
  }
  if (core::may_read_user_doc(call.user, id)) return std::nullopt;
  if (call.ctx.auth == nullptr) return std::vector<std::string>{};
  return call.ctx.auth->settings()->public_fields;
}

ReadRule read_rule(const Call& call, const core::DbRef& db, std::string_view id) {
  ReadRule rule;
  rule.public_fields = readable_fields(call, db, id);
  if (db.name == core::kReplicatorDb && !core::is_db_admin(call.user, *call.security)) {
    rule.replication_reader = call.user.name;
  }
  return rule;
}

}  // namespace chaise::http
