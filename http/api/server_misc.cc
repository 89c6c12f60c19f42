// http/api/server_misc.cc — server-level endpoints: /_all_dbs, /_dbs_info, /_uuids, and the answer
// to every other "/_xxx" (CouchDB treats an unknown "_xxx" as a database name it cannot have).
//
// CouchDB sources followed (apache/couchdb main): chttpd_misc.erl handle_all_dbs_req,
// handle_dbs_info_req; couch_httpd_misc_handlers.erl handle_uuids_req; couch_uuids.erl
// (the "sequential" algorithm, the 3.x default); chttpd_db.erl handle_request (unknown names);
// fabric_db_info.erl (the dbinfo key order); couch_mrview_http.erl parse_param (query params).
#include <algorithm>
#include <array>
#include <boost/asio/use_awaitable.hpp>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/db/active_tasks.h"
#include "core/db/databases.h"
#include "core/db/node_reports.h"
#include "core/replication/scheduler.h"
#include "core/util/ascii.h"
#include "http/api/etag.h"
#include "http/api/request.h"
#include "http/api/router.h"

namespace chaise::http {

// ---- Shared with http/api/database.cc (declared there; no header may be added for them) ------

// A new document id / uuid: CouchDB 3.x's default "sequential" algorithm (couch_uuids.erl): 26
// hex digits shared by consecutive ids, then a 6-hex-digit counter that grows by a random
// 1..0xffe, with a new prefix once it passes 0xfff000. CouchDB draws each new prefix at random;
// here only the first is random and each next one is the last plus a random 1..2^32, so every id
// a server run makes sorts after the ones before it (the store's tables then hold ascending runs
// that move down its levels without being rewritten; README "Differences from CouchDB"). 32
// lowercase hex digits. Thread-safe.
std::string new_uuid();

// The dbinfo object exactly as CouchDB 3.x orders it (fabric_db_info.erl: instance_start_time,
// db_name, purge_seq, update_seq, then the merged shard infos in reverse key order).
Json db_info_json(const core::DbInfo& info);

std::string new_uuid() {
  static std::mutex mutex;
  static std::mt19937_64 rng{std::random_device{}()};
  // The prefix, 104 bits: the high 40 and the low 64. Starting anywhere in 2^104, steps of at
  // most 2^32 wrap around only after 2^72 of them.
  static std::uint64_t prefix_high = 0, prefix_low = 0;
  static bool started = false;
  static std::uint32_t counter = 0;
  static constexpr char kHex[] = "0123456789abcdef";

  std::lock_guard lock(mutex);
  auto increment = [] { return static_cast<std::uint32_t>(rng() % 0xffe) + 1; };
  if (!started) {
    prefix_high = rng() & ((std::uint64_t{1} << 40) - 1);
    prefix_low = rng();
    started = true;
    counter = increment();
  } else if (counter >= 0xfff000) {
    const std::uint64_t step = (rng() & 0xffffffffu) + 1;
    prefix_low += step;
    if (prefix_low < step) prefix_high = (prefix_high + 1) & ((std::uint64_t{1} << 40) - 1);
    counter = increment();
  }
  std::string id;
  id.reserve(32);
  for (int shift = 36; shift >= 0; shift -= 4) id.push_back(kHex[(prefix_high >> shift) & 0xf]);
  for (int shift = 60; shift >= 0; shift -= 4) id.push_back(kHex[(prefix_low >> shift) & 0xf]);
  for (int shift = 20; shift >= 0; shift -= 4) id.push_back(kHex[(counter >> shift) & 0xf]);
  counter += increment();
  return id;
}

Json db_info_json(const core::DbInfo& info) {
  Json props = Json::object();
  if (info.partitioned) props["partitioned"] = true;
  Json body = Json::object();
  // Chaise has no shards whose creation time could differ between calls: "0" is what the
  // replicator accepts without comparing (couch_replicator_scheduler_job.erl do_checkpoint).
  body["instance_start_time"] = "0";
  body["db_name"] = info.name;
  // CouchDB's is "N-<opaque>", N the purges; Chaise's has the form of update_seq.
  body["purge_seq"] = info.purge_seq.str();
  body["update_seq"] = info.update_seq.str();
  body["sizes"] = {
      {"file", info.sizes_file}, {"external", info.sizes_external}, {"active", info.sizes_active}};
  body["props"] = std::move(props);
  body["doc_del_count"] = info.doc_del_count;
  body["doc_count"] = info.doc_count;
  body["disk_format_version"] = 8;
  body["compact_running"] = false;
  body["cluster"] = {{"q", 1}, {"n", 1}, {"w", 1}, {"r", 1}};
  return body;
}

namespace {

// CouchDB's [chttpd] max_db_number_for_dbs_info_req default.
constexpr std::size_t kDbsInfoKeysMax = 100;
// More databases than one server can list.
constexpr std::int64_t kAllDbsRowsMax = std::int64_t{1} << 30;
// Database infos read per transaction by GET /_dbs_info.
constexpr std::size_t kInfosPerTransaction = 200;

// couch_mrview_http:parse_pos_int.
std::optional<std::int64_t> parse_non_negative_param(const Query& query, std::string_view key) {
  auto v = query.get_int(key);  // "Invalid value for integer: ..." when not an integer
  if (v && *v < 0)
    throw HttpError(
        err::query_parse_error("Invalid value for positive integer: \"" + *query.get(key) + "\""));
  return v;
}

// Where a JSON key falls relative to database names (strings), in CouchDB's collation: null,
// booleans and numbers sort before every string; arrays and objects after.
struct NameBound {
  enum class Kind { before_all, name, after_all } kind = Kind::name;
  std::string name;
};

std::optional<NameBound> name_bound(const Query& query, std::string_view key,
                                    std::string_view alias) {
  auto j = query.get_json(key);
  if (!j) j = query.get_json(alias);
  if (!j) return std::nullopt;
  if (j->is_string()) return NameBound{NameBound::Kind::name, j->get<std::string>()};
  if (j->is_array() || j->is_object()) return NameBound{NameBound::Kind::after_all, {}};
  return NameBound{NameBound::Kind::before_all, {}};
}

// The _all_dbs query parameters (also GET /_dbs_info). Returns nullopt when the bounds select
// nothing.
std::optional<core::AllDbsQuery> all_dbs_query(const Query& query) {
  core::AllDbsQuery q;
  q.descending = query.get_bool("descending", false);
  q.inclusive_end = query.get_bool("inclusive_end", true);
  // Beyond kAllDbsRowsMax a limit means "no limit" and a skip "skip everything"; clamping also
  // keeps core::list_dbs's limit + skip from overflowing.
  if (auto limit = parse_non_negative_param(query, "limit"))
    q.limit = *limit > kAllDbsRowsMax ? -1 : *limit;
  if (auto skip = parse_non_negative_param(query, "skip")) q.skip = std::min(*skip, kAllDbsRowsMax);
  const auto start = name_bound(query, "startkey", "start_key");
  const auto end = name_bound(query, "endkey", "end_key");
  using Kind = NameBound::Kind;
  // In iteration order the start key is the first bound; a non-string bound either removes the
  // bound or empties the result.
  const Kind start_empty = q.descending ? Kind::before_all : Kind::after_all;
  const Kind end_empty = q.descending ? Kind::after_all : Kind::before_all;
  if (start) {
    if (start->kind == start_empty) return std::nullopt;
    if (start->kind == Kind::name) q.start_key = start->name;
  }
  if (end) {
    if (end->kind == end_empty) return std::nullopt;
    if (end->kind == Kind::name) q.end_key = end->name;
  }
  return q;
}

// A 200 JSON answer with an ETag, or 304 when the client has it (chttpd:etag_respond). CouchDB
// sends one on GET /_all_dbs and GET /_dbs_info, derived from its _dbs database, so it changes
// when databases come and go; Chaise's is a hash of the body itself (or of `basis`, the body
// without what moves while the data does not), so a 304 is never stale.
Response etagged_json(const Call& call, const Json& body, const Json* basis = nullptr) {
  const Json& hashed = basis ? *basis : body;
  const std::string etag =
      EtagBuilder().add(hashed.dump(-1, ' ', false, Json::error_handler_t::replace)).str();
  if (if_none_match_has(call.req, etag)) return not_modified_response(call.req, etag);
  Response response = json_response(call.req, Status::ok, body);
  response.set(beast_http::field::etag, etag);
  return response;
}

std::vector<std::string> list_dbs(storage::Transaction& tr, const Query& query) {
  auto q = all_dbs_query(query);
  if (!q) return {};
  return value_or_throw(core::list_dbs(tr, *q));
}

// GET /_all_dbs
Response all_dbs(const Call& call) {
  if (call.path.size() > 1) {
    if (is_get(call)) throw HttpError(err::not_found());
    throw_method_not_allowed("GET,HEAD");
  }
  if (!is_get(call)) throw_method_not_allowed("GET,HEAD");
  auto tr = call.store().create_transaction();
  Json names = Json::array();
  for (std::string& name : list_dbs(tr, call.query)) names.push_back(std::move(name));
  return etagged_json(call, names);
}

// The info of `name`, or nullopt if there is no such database.
std::optional<Json> info_of(storage::Transaction& tr, const std::string& name) {
  auto db = value_or_throw(core::open_db(tr, name));
  if (core::failed(db)) return std::nullopt;
  return db_info_json(value_or_throw(core::db_info(tr, std::get<core::DbRef>(db))));
}

// GET /_dbs_info (every database, _all_dbs parameters), POST /_dbs_info {"keys": [...]}.
Response dbs_info(const Call& call) {
  if (call.path.size() > 1) {
    if (is_get(call) || call.is(beast_http::verb::post)) throw HttpError(err::not_found());
    throw_method_not_allowed("GET,HEAD,POST");
  }
  Json out = Json::array();
  if (is_get(call)) {
    auto tr = call.store().create_transaction();
    const std::vector<std::string> names = list_dbs(tr, call.query);
    for (std::size_t i = 0; i < names.size(); ++i) {
      // A fresh snapshot now and then: one transaction may only read for 5 s.
      if (i > 0 && i % kInfosPerTransaction == 0) tr = call.store().create_transaction();
      // A database deleted since the listing is left out, as CouchDB does.
      if (auto info = info_of(tr, names[i]))
        out.push_back({{"key", names[i]}, {"info", std::move(*info)}});
    }
    // sizes.file is the store's estimate, which its flushes and compactions move.
    Json basis = out;
    for (Json& entry : basis) entry["info"]["sizes"].erase("file");
    return etagged_json(call, out, &basis);
  }
  if (!call.is(beast_http::verb::post)) throw_method_not_allowed("GET,HEAD,POST");
  require_json_content_type(call);
  const Json body = parse_json_object_body(call.req, false);
  const auto keys = body.find("keys");
  if (keys == body.end()) throw HttpError(err::bad_request("`keys` member must exist."));
  if (!keys->is_array()) throw HttpError(err::bad_request("`keys` member must be an array."));
  if (keys->size() > kDbsInfoKeysMax) throw HttpError(err::bad_request("too_many_keys"));
  auto tr = call.store().create_transaction();
  for (const Json& key : *keys) {
    std::optional<Json> info;
    if (key.is_string()) info = info_of(tr, key.get<std::string>());
    if (info) {
      out.push_back({{"key", key}, {"info", std::move(*info)}});
    } else {
      out.push_back({{"key", key}, {"error", "not_found"}});
    }
  }
  return json_response(call.req, Status::ok, out);
}

// The count parameter as Erlang's list_to_integer reads it; nullopt if it is not an integer,
// INT64_MAX for integers too large to represent (they are "too large" either way).
std::optional<std::int64_t> parse_count(std::string_view text) {
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) value = INT64_MAX;
  (void)end;
  return negative ? -value : value;
}

// GET /_uuids?count=N
Response uuids(const Call& call) {
  if (!is_get(call)) throw_method_not_allowed("GET");
  std::int64_t count = 1;
  if (auto text = call.query.get("count")) {
    auto parsed = parse_count(*text);
    if (!parsed) throw HttpError(err::bad_request("count must be a positive integer"));
    count = *parsed;
  }
  // CouchDB's order: too large first, then negative; 0 is allowed and gives an empty list.
  if (count > call.ctx.uuids_max_count)
    throw HttpError(err::bad_request("count parameter too large"));
  if (count < 0) throw HttpError(err::bad_request("count must be a positive integer"));
  Json list = Json::array();
  std::string all;
  for (std::int64_t i = 0; i < count; ++i) {
    std::string id = new_uuid();
    all += id;
    list.push_back(std::move(id));
  }
  Response response = json_response(call.req, Status::ok, Json{{"uuids", std::move(list)}});
  // Cache busting exactly as couch_httpd_misc_handlers: these override the default
  // "must-revalidate".
  response.set(beast_http::field::cache_control, "no-cache");
  response.set(beast_http::field::expires, "Mon, 01 Jan 1990 00:00:00 GMT");  // past, on purpose
  response.set(beast_http::field::pragma, "no-cache");
  response.set(beast_http::field::etag, EtagBuilder().add(all).str());
  return response;
}

// Any other "/_xxx": CouchDB hands it to its database handler (chttpd_db:handle_request), where a
// name starting with "_" can be neither created nor found.
[[noreturn]] void not_a_database(const Call& call) {
  const std::string& name = call.path.front();
  if (call.path.size() == 1 && call.is(beast_http::verb::put))
    throw HttpError(core::bad_db_name(name));
  if (call.path.size() == 1 && call.is(beast_http::verb::delete_) && call.query.has("rev")) {
    throw HttpError(err::bad_request(
        "You tried to DELETE a database with a ?=rev parameter. Did you mean to DELETE a "
        "document instead?"));
  }
  throw HttpError(err::db_not_found());
}

}  // namespace

MaybeResponse handle_server(Call& call) {
  const std::string& first = call.path.front();
  if (first == "_all_dbs") co_return all_dbs(call);
  if (first == "_dbs_info") co_return dbs_info(call);
  if (first == "_uuids") co_return uuids(call);
  if (first == "_session") co_return handle_session(call);
  if (first == "_node") co_return handle_node(call);
  if (first == "_membership") co_return handle_membership(call);
  if (first == "_cluster_setup") co_return co_await handle_cluster_setup(call);
  if (first == "_utils") co_return handle_utils(call);
  if (first == "_db_updates") co_return co_await handle_db_updates(call);
  if (first == "_active_tasks" && call.path.size() == 1) {
    // Index builds, database compactions and replications while they run
    // (core/db/active_tasks.h), this server's and those the others sharing the store report.
    require_server_admin(call);
    if (!is_get(call)) throw_method_not_allowed("GET,HEAD");
    Json tasks = Json::array();
    if (call.ctx.active_tasks != nullptr) tasks = call.ctx.active_tasks->list(call.ctx.node_name);
    if (call.ctx.replicator != nullptr) {
      for (auto& t : call.ctx.replicator->active_tasks()) tasks.push_back(std::move(t));
    }
    for (core::NodeReport& r : other_node_reports(call))
      for (auto& t : r.tasks) tasks.push_back(std::move(t));
    co_return json_response(call.req, Status::ok, tasks);
  }
  if (first == "_replicate" || first == "_scheduler") co_return co_await handle_replication(call);
  not_a_database(call);
}

}  // namespace chaise::http
