// Mango: POST /{db}/_find, POST /{db}/_explain, GET|POST /{db}/_index,
// DELETE /{db}/_index/{ddoc}/json/{name} (CouchDB 3: mango_httpd).
//
// Indexes are "json" indexes kept as language "query" design documents, built like views with
// their map in C++ (core/index/mango_index.h). A query uses the usable index with the most fields (or
// the one named by use_index), scanning only the first field's range the selector allows, and
// checks every document against the whole selector; without one it scans _all_docs. Text
// indexes need a search service CouchDB 3.5 does not ship either: refused with CouchDB's error.
#include <boost/asio/awaitable.hpp>
#include <charconv>
#include <chrono>
#include <map>

#include "core/docs/attachments.h"
#include "core/docs/design_doc.h"
#include "core/index/cursors.h"
#include "core/index/mango_index.h"
#include "core/index/unique_index.h"
#include "core/index/view_index.h"
#include "core/rev/couch_rev.h"
#include "core/util/digest.h"
#include "http/api/idempotency.h"
#include "http/api/js_request.h"
#include "http/api/pages.h"
#include "http/api/request.h"
#include "http/api/router.h"
#include "http/api/txn.h"

namespace chaise::http {

namespace {

using core::md5_hex;
using core::OrderedJson;

struct DesignDocs {
  std::vector<core::MangoIndex> indexes;
  std::map<std::string, OrderedJson> bodies;  // id -> body (with _id, _rev)
};

DesignDocs read_design_docs(const Call& call, const core::DbRef& db) {
  DesignDocs out;
  for (auto& [id, doc] : read_design_doc_bodies(call, db)) {
    for (auto& idx : core::mango_indexes(id, doc, db.partitioned))
      out.indexes.push_back(std::move(idx));
    out.bodies[id] = std::move(doc);
  }
  return out;
}

OrderedJson index_json(const core::MangoIndex& idx) {
  OrderedJson j = OrderedJson::object();
  j["ddoc"] = idx.ddoc;
  j["name"] = idx.name;
  j["type"] = "json";
  j["partitioned"] = idx.partitioned;
  j["def"] = idx.def;
  return j;
}

// The registered unique index of a design document's view, if any.
const core::UniqueIndexDef* find_unique(const core::UniqueIndexes& list, std::string_view ddoc,
                                        std::string_view name) {
  for (const auto& d : list)
    if (d.ddoc == ddoc && d.name == name) return &d;
  return nullptr;
}

core::UniqueIndexes read_unique(const Call& call, const core::DbRef& db) {
  auto tr = call.store().create_transaction();
  auto r = value_or_throw(core::read_unique_indexes(tr, db));
  return *r;
}

// Unique indexes being built by this server (one builder per index).

OrderedJson all_docs_index_json() {
  return OrderedJson::parse(
      R"({"ddoc":null,"name":"_all_docs","type":"special","def":{"fields":[{"_id":"asc"}]}})");
}

Response ordered_response(const Request& req, Status status, const OrderedJson& body) {
  return raw_json_response(req, status, body.dump());
}

// Writes an index design document (`doc` with its "_rev" when it exists), or deletes it, as the
// caller (design documents need a db admin), and answers with `answer()` once it is written
// (write_and_render: stored with the write under an Idempotency-Key); throws the document's
// CouchError.
// The write of an index design document `ddoc` (`doc`, with its "_rev" when it exists), or its
// deletion, checked as the caller's write (design documents need a db admin).
core::DocWriteBatch::Item index_ddoc_item(const Call& call, const core::DbRef& db,
                                          const std::string& ddoc, const OrderedJson& doc,
                                          bool deleted) {
  Json as_json = Json::parse(doc.dump());
  if (auto err = check_doc_write(call, db, as_json)) throw HttpError(*err);
  if (!deleted)
    if (auto e = core::validate_design_doc(ddoc, as_json, core::Partitioned{db.partitioned}))
      throw HttpError(*e);
  core::DocUpdate u;
  u.id = ddoc;
  if (doc.contains("_rev")) u.base_rev = core::RevId::parse(doc["_rev"].get<std::string>());
  u.deleted = deleted;
  OrderedJson stored = OrderedJson::object();
  if (!deleted)
    for (auto it = doc.begin(); it != doc.end(); ++it)
      if (!it.key().starts_with("_")) stored[it.key()] = it.value();
  u.body = stored.dump();
  core::DocWriteBatch::Item item;
  item.update = std::move(u);
  return item;
}

core::DocWriteBatch index_ddoc_batch(const Call& call, const core::DbRef& db,
                                     const std::string& ddoc, const OrderedJson& doc,
                                     bool deleted) {
  std::vector<core::DocWriteBatch::Item> items;
  items.push_back(index_ddoc_item(call, db, ddoc, doc, deleted));
  return core::DocWriteBatch(db.name, std::move(items));
}

boost::asio::awaitable<Response> write_index_ddoc(const Call& call, const core::DbRef& db,
                                                  const std::string& ddoc, const OrderedJson& doc,
                                                  bool deleted, std::function<Response()> answer) {
  core::DocWriteBatch batch = index_ddoc_batch(call, db, ddoc, doc, deleted);
  co_return co_await write_and_render(call, batch, [&](const core::DocWriteBatch& b) {
    if (auto* e = std::get_if<core::CouchError>(&*b.results().at(0))) throw HttpError(*e);
    return answer();
  });
}

// ---- _index ----------------------------------------------------------------------------------------

bool ddoc_sync_option(const OrderedJson& ddoc) {
  auto o = ddoc.find("options");
  return o != ddoc.end() && o->is_object() && o->value("sync_index", false) == true;
}

// Builds a synchronous index's design document's views until they have caught up: from then on
// every write maintains them (core/index/sync_index.h).
boost::asio::awaitable<void> build_sync(const Call& call, const core::DbRef& db,
                                        const std::string& ddoc) {
  DesignDocs now = read_design_docs(call, db);
  auto it = now.bodies.find(ddoc);
  if (it == now.bodies.end()) co_return;
  auto g = core::ViewGroup::from_design_doc(ddoc, it->second.dump(), "", db.partitioned);
  if (auto* vg = std::get_if<core::ViewGroup>(&g); vg && vg->sync)
    co_await build_index(call, db, *vg);
}

// POST /_index of a unique index (core/index/unique_index.h): registers it with its design document
// `doc` (written when `write_ddoc`, else only registered), builds its table over the live
// documents, then answers "created"; when documents already share a key, the view goes again and
// the answer is 409 with them. The final answer is stored with the final write under an
// Idempotency-Key (a retry of an interrupted build builds again).
boost::asio::awaitable<Response> build_unique(const Call& call, const core::DbRef& db,
                                              const OrderedJson& doc, const std::string& name,
                                              const OrderedJson& map, bool write_ddoc) {
  const std::string ddoc = doc["_id"].get<std::string>();
  core::UniqueIndexDef def{core::unique_index_id(ddoc, name, map), ddoc, name, map, false};
  bool claimed = false;
  ok_or_throw(co_await run_txn(call.store(), [&](storage::Transaction& tr) -> storage::Status {
    auto r = core::take_unique_claim(tr, db, def.id, core::idem_now_ms());
    if (!r.ok()) return r.error();
    claimed = *r;
    return {};
  }));
  if (!claimed) throw HttpError(err::conflict("Index " + name + " is being built"));
  // However the build ends, its claim goes (a server that dies leaves it to lapse).
  RunAtExit drop(call.store(),
                 [&](storage::Transaction& tr) { return core::drop_unique_claim(tr, db, def.id); });

  if (write_ddoc) {
    core::DocWriteBatch batch = index_ddoc_batch(call, db, ddoc, doc, false);
    batch.register_unique(def);
    storage::Status s = co_await run_doc_batch(call, batch);
    ok_or_throw(s);
    if (batch.db_missing()) throw HttpError(err::db_not_found());
    if (auto* e = std::get_if<core::CouchError>(&*batch.results().at(0))) throw HttpError(*e);
  } else {
    storage::Status s =
        co_await run_txn(call.store(), [&](storage::Transaction& tr) -> storage::Status {
          auto cur = core::read_unique_indexes(tr, db);
          if (!cur.ok()) return cur.error();
          core::UniqueIndexes list = **cur;
          std::erase_if(list, [&](const auto& d) { return d.ddoc == ddoc && d.name == name; });
          list.push_back(def);
          core::write_unique_indexes(tr, db, list);
          return {};
        });
    ok_or_throw(s);
  }

  core::UniqueIndexBuild build(db, def);
  while (!build.done()) {
    storage::Status s = co_await run_txn(call.store(), build);
    ok_or_throw(s);
    build.committed();
  }
  const std::vector<core::UniqueDuplicate>& dups = build.duplicates();

  if (!dups.empty()) {
    OrderedJson ids = OrderedJson::array();
    OrderedJson found = OrderedJson::array();
    std::string list;
    for (const auto& d : dups) {
      found.push_back(OrderedJson{{"key", d.key}, {"ids", d.ids}});
      for (const auto& id : d.ids) {
        ids.push_back(id);
        list += (list.empty() ? "" : ", ") + id;
      }
    }
    OrderedJson out = OrderedJson::object();
    out["error"] = "conflict";
    out["reason"] = "unique constraint " + name + " violated by " + list;
    out["duplicates"] = found;
    auto answer = [&] { return ordered_response(call.req, Status::conflict, out); };
    // The view goes again, and its constraint with it (unique_write of the design document).
    DesignDocs now = read_design_docs(call, db);
    auto it = now.bodies.find(ddoc);
    if (it != now.bodies.end() && it->second.contains("views") &&
        it->second["views"].contains(name)) {
      OrderedJson without = it->second;
      without["views"].erase(name);
      co_return co_await write_index_ddoc(call, db, ddoc, without, without["views"].empty(),
                                          answer);
    }
    storage::Status s =
        co_await run_txn(call.store(), [&](storage::Transaction& tr) -> storage::Status {
          auto r = core::unique_finish(tr, db, def.id, false);
          return r.ok() ? storage::Status{} : storage::Status(r.error());
        });
    ok_or_throw(s);
    co_return answer();
  }

  OrderedJson out = OrderedJson::object();
  out["result"] = "created";
  out["id"] = ddoc;
  out["name"] = name;
  Response created = ordered_response(call.req, Status::ok, out);
  bool kept = false;
  storage::Status s =
      co_await run_txn(call.store(), [&](storage::Transaction& tr) -> storage::Status {
        auto r = core::unique_finish(tr, db, def.id, true);
        if (!r.ok()) return r.error();
        kept = *r;
        if (kept && call.idem) {
          const std::int64_t now = core::idem_now_ms();
          auto found = core::idem_lookup(tr, db, call.idem->request(), now, storage::Snapshot::no);
          if (!found.ok()) return found.error();
          auto stored = core::idem_store(tr, db, call.idem->request(), now,
                                         stored_response(created), found->expired);
          if (!stored.ok()) return stored.error();
        }
        return {};
      });
  ok_or_throw(s);
  if (!kept)
    throw HttpError(err::conflict("Index " + name + " was changed while it was being built"));
  co_return created;
}

// A boolean option of POST /{db}/_index: nullopt when absent; anything but true or false, 400.
std::optional<bool> index_option(const OrderedJson& body, const char* key) {
  if (!body.contains(key)) return std::nullopt;
  if (!body[key].is_boolean())
    throw HttpError(err::bad_request("Invalid value for " + std::string(key) + ": " +
                                     body[key].dump() + " (true or false)"));
  return body[key].get<bool>();
}

// What POST /{db}/_index asks for (mango_httpd:handle_index_req, mango_idx:new).
struct IndexRequest {
  OrderedJson fields;  // as given
  OrderedJson map;     // {"fields": {name: "asc"|"desc"}, "partial_filter_selector": ...}
  std::string name;
  std::string ddoc;  // with its "_design/" prefix
  // mango_opts:validate_partitioned/1: true or false; absent means the database's default.
  std::optional<bool> partitioned;
  bool unique = false;  // Chaise's unique indexes (core/index/unique_index.h)
  bool sync = false;    // Chaise's synchronous indexes (core/index/sync_index.h)
};

// mango_opts:validate_idx_create, in its order: index, type, name, ddoc, w, partitioned (then
// Chaise's unique and sync_index); any other key is invalid_key.
void validate_index_options(const OrderedJson& body) {
  static constexpr std::string_view kKeys[] = {"index", "type",        "name",   "ddoc",
                                               "w",     "partitioned", "unique", "sync_index"};
  if (!body.contains("index"))
    throw HttpError(err::missing_required_key("Missing required key: index"));
  const auto invalid_string = [](const OrderedJson& v) {
    return HttpError(
        core::CouchError{400, "invalid_string", "Invalid string: " + core::erlang_term_text(v)});
  };
  if (body.contains("type") && !body["type"].is_string()) throw invalid_string(body["type"]);
  for (const char* key : {"name", "ddoc"}) {
    if (!body.contains(key)) continue;
    const OrderedJson& v = body[key];
    if (!v.is_string()) throw invalid_string(v);
    if (v.get_ref<const std::string&>().empty())
      throw HttpError(core::CouchError{400, "invalid_empty_string",
                                       "Index name or ddoc cannot be empty string"});
  }
  if (body.contains("w") && !(body["w"].is_number_integer() && body["w"].get<std::int64_t>() > 0))
    throw HttpError(err::invalid_pos_integer(core::erlang_term_text(body["w"]) +
                                             " is not an integer greater than zero"));
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (std::find(std::begin(kKeys), std::end(kKeys), it.key()) == std::end(kKeys))
      throw HttpError(err::invalid_key("Invalid key " + it.key() + " for this request."));
  }
}

IndexRequest parse_index_request(const OrderedJson& body, std::string_view body_text) {
  validate_index_options(body);
  const std::string type = body.value("type", "json");
  if (type == "text" || type == "nouveau")
    throw HttpError(
        err::invalid_index("Invalid index type: " + type +
                           " (text indexes need a search service, which Chaise does not have)"));
  if (type != "json") throw HttpError(err::invalid_index("Invalid type for index: " + type));
  const OrderedJson& index = body["index"];
  if (!index.is_object())
    throw HttpError(err::invalid_index("JSON indexes must be an object, not: " +
                                       core::erlang_term_text(index)));
  if (!index.contains("fields"))
    throw HttpError(err::missing_required_key("Missing required key: fields"));
  auto parsed = core::parse_mango_fields(index["fields"]);
  if (auto* e = std::get_if<core::CouchError>(&parsed)) throw HttpError(*e);
  const auto& fields = std::get<std::vector<core::MangoField>>(parsed);
  if (fields.empty()) throw HttpError(err::invalid_index("Index fields must not be empty"));
  IndexRequest r;
  r.fields = index["fields"];
  OrderedJson field_map = OrderedJson::object();
  for (const auto& f : fields) {
    if (f.descending != fields[0].descending)
      throw HttpError(err::unsupported_mixed_sort(
          "Sorts currently only support a single direction for all fields."));
    field_map[f.name] = f.descending ? "desc" : "asc";
  }
  r.map = OrderedJson::object();
  r.map["fields"] = field_map;
  OrderedJson partial = OrderedJson::object();
  if (index.contains("partial_filter_selector")) {
    auto sel = core::Selector::parse(index["partial_filter_selector"]);
    if (auto* e = std::get_if<core::CouchError>(&sel)) throw HttpError(*e);
    partial = core::normalize_selector(index["partial_filter_selector"]);
  }
  r.map["partial_filter_selector"] = partial;
  r.partitioned = index_option(body, "partitioned");
  r.unique = index_option(body, "unique").value_or(false);
  r.sync = index_option(body, "sync_index").value_or(false);
  // Default names as CouchDB makes them (mango_idx:gen_name), from the request as it came.
  core::MangoIndexNaming naming;
  if (body.contains("name") && body["name"].is_string()) naming.name = body["name"];
  if (body.contains("ddoc") && body["ddoc"].is_string()) naming.ddoc = body["ddoc"];
  naming.partitioned = r.partitioned;
  naming.type = type;
  if (body.contains("w") && body["w"].is_number_integer()) naming.w = body["w"];
  naming.unique = r.unique;
  naming.sync_index = r.sync;
  std::string hash = core::mango_index_gen_name(body_text, naming);
  // A body jiffy would not read (CouchDB refuses it before naming): named from its JSON value.
  if (hash.empty()) hash = md5_hex(body.dump());
  r.name = naming.name.value_or(hash);
  r.ddoc = naming.ddoc.value_or(hash);
  if (!r.ddoc.starts_with("_design/")) r.ddoc = "_design/" + r.ddoc;
  return r;
}

MaybeResponse create_index(Call& call, const core::DbRef& db) {
  const IndexRequest req = parse_index_request(parse_json_object_body(call.req), call.req.body());
  const OrderedJson& map = req.map;
  const std::string& name = req.name;
  const std::string& ddoc = req.ddoc;
  const std::optional<bool> partitioned = req.partitioned;
  const bool unique = req.unique, sync = req.sync;
  DesignDocs existing = read_design_docs(call, db);
  OrderedJson doc = OrderedJson::object();
  if (auto it = existing.bodies.find(ddoc); it != existing.bodies.end()) {
    doc = it->second;
    if (doc.value("language", "") != "query")
      throw HttpError(
          err::invalid_index("Design document " + ddoc + " is not a Mango index design document"));
    // mango_idx:set_ddoc_partitioned/2: an existing design document keeps its option, and an
    // index asking for another one (or for none when it has one) is refused.
    if (core::ddoc_partitioned_option(doc) != partitioned)
      throw HttpError(err::invalid_partitioned_option(
          "Requested partitioned option does not match existing value on design document " + ddoc));
    if (doc.contains("views") && doc["views"].contains(name) &&
        doc["views"][name].contains("map") && doc["views"][name]["map"] == map &&
        core::view_declared_unique(doc["views"][name]) == unique &&
        (!sync || ddoc_sync_option(doc))) {
      if (ddoc_sync_option(doc)) co_await build_sync(call, db, ddoc);
      if (unique) {
        // Declared: exists once its constraint is registered and built; else finish the build
        // (one stopped by a restart, or a design document that arrived by replication).
        const core::UniqueIndexes list = read_unique(call, db);
        const core::UniqueIndexDef* d = find_unique(list, ddoc, name);
        if (!d || !d->ready || d->map != map)
          co_return co_await build_unique(call, db, doc, name, map, false);
      }
      OrderedJson out = OrderedJson::object();
      out["result"] = "exists";
      out["id"] = ddoc;
      out["name"] = name;
      co_return ordered_response(call.req, Status::ok, out);
    }
  }
  doc["_id"] = ddoc;
  doc["language"] = "query";
  if (!doc.contains("views") || !doc["views"].is_object()) doc["views"] = OrderedJson::object();
  OrderedJson view = OrderedJson::object();
  view["map"] = map;
  view["reduce"] = "_count";
  view["options"] = OrderedJson{{"def", OrderedJson{{"fields", req.fields}}}};
  if (unique) view["options"]["unique"] = true;
  doc["views"][name] = view;
  if (partitioned && !doc.contains("_rev")) {
    if (!doc.contains("options") || !doc["options"].is_object())
      doc["options"] = OrderedJson::object();
    doc["options"]["partitioned"] = *partitioned;
  }

  if (sync) {
    if (!doc.contains("options") || !doc["options"].is_object())
      doc["options"] = OrderedJson::object();
    doc["options"]["sync_index"] = true;
  }

  // (Not a conditional expression: GCC 12 miscompiles co_await inside one.)
  Response answer;
  if (unique) {
    answer = co_await build_unique(call, db, doc, name, map, true);
  } else {
    answer = co_await write_index_ddoc(call, db, ddoc, doc, false, [&] {
      OrderedJson out = OrderedJson::object();
      out["result"] = "created";
      out["id"] = ddoc;
      out["name"] = name;
      return ordered_response(call.req, Status::ok, out);
    });
  }
  // A synchronous index is built before the answer, so that writes after it maintain it.
  if (ddoc_sync_option(doc) && answer.result() == Status::ok) co_await build_sync(call, db, ddoc);
  co_return answer;
}

MaybeResponse delete_index(Call& call, const core::DbRef& db, std::string ddoc,
                           const std::string& name) {
  if (!ddoc.starts_with("_design/")) ddoc = "_design/" + ddoc;
  DesignDocs existing = read_design_docs(call, db);
  auto it = existing.bodies.find(ddoc);
  if (it == existing.bodies.end() || !it->second.contains("views") ||
      !it->second["views"].contains(name) || it->second.value("language", "") != "query")
    throw HttpError(err::not_found("Index not found"));
  OrderedJson doc = it->second;
  doc["views"].erase(name);
  co_return co_await write_index_ddoc(call, db, ddoc, doc, doc["views"].empty(), [&] {
    return json_response(call.req, Status::ok, Json{{"ok", true}});
  });
}

// POST /{db}/_index/_bulk_delete {"docids": [...]} (mango_httpd): every Mango index of each
// named design document goes (the document with them when nothing else is left in it), all in
// one batch; the answer lists each id under "success" or "fail", newest first as CouchDB's
// fold builds them. CouchDB crashes on a design document with several indexes; here they all go.
MaybeResponse bulk_delete_indexes(Call& call, const core::DbRef& db) {
  require_method(call, "POST");
  require_json_content_type(call);
  constexpr std::size_t kDocIdsMax = 1000;
  const OrderedJson body = parse_json_object_body(call.req);
  if (!body.contains("docids"))
    throw HttpError(err::missing_required_key("Missing required key: docids"));
  const OrderedJson& ids = body["docids"];
  if (!ids.is_array())
    throw HttpError(err::invalid_bulk_docs(
        "Bulk Delete requires an array of non-null docids. Docids: " + ids.dump()));
  if (ids.size() > kDocIdsMax)
    throw HttpError(err::bad_request("at most " + std::to_string(kDocIdsMax) + " docids"));
  if (body.contains("w") && (!body["w"].is_number_integer() || body["w"].get<std::int64_t>() < 1))
    throw HttpError(err::invalid_argument("Invalid value for w: " + body["w"].dump()));
  // mango_opts:validate_use_index: "name" or "_design/name".
  std::vector<std::string> wanted;
  for (const OrderedJson& id : ids) {
    const std::string text = id.is_string() ? id.get<std::string>() : std::string();
    const bool prefixed = text.starts_with("_design/");
    const std::string name = prefixed ? text.substr(8) : text;
    if (!id.is_string() || name.empty() || name.find('/') != std::string::npos)
      throw HttpError(err::invalid_index_name("Invalid index name: " + id.dump()));
    const std::string ddoc = "_design/" + name;
    if (std::find(wanted.begin(), wanted.end(), ddoc) == wanted.end()) wanted.push_back(ddoc);
  }
  DesignDocs existing = read_design_docs(call, db);
  std::vector<std::string> written, missing;
  std::vector<core::DocWriteBatch::Item> items;
  for (const std::string& ddoc : wanted) {
    auto it = existing.bodies.find(ddoc);
    const bool has_index =
        std::any_of(existing.indexes.begin(), existing.indexes.end(),
                    [&](const core::MangoIndex& idx) { return idx.ddoc == ddoc; });
    if (it == existing.bodies.end() || !has_index) {
      missing.push_back(ddoc);
      continue;
    }
    OrderedJson doc = it->second;
    for (const core::MangoIndex& idx : existing.indexes)
      if (idx.ddoc == ddoc) doc["views"].erase(idx.name);
    items.push_back(index_ddoc_item(call, db, ddoc, doc, doc["views"].empty()));
    written.push_back(ddoc);
  }
  auto answer = [&](const core::DocWriteBatch* b) {
    OrderedJson success = OrderedJson::array(), fail = OrderedJson::array();
    for (std::size_t i = written.size(); i-- > 0;) {
      const auto* e = b ? std::get_if<core::CouchError>(&*b->results().at(i)) : nullptr;
      OrderedJson entry = OrderedJson::object();
      entry["id"] = written[i];
      if (e != nullptr) {
        entry["error"] = e->error;
        fail.push_back(std::move(entry));
      } else {
        entry["ok"] = true;
        success.push_back(std::move(entry));
      }
    }
    for (std::size_t i = missing.size(); i-- > 0;) {
      OrderedJson entry = OrderedJson::object();
      entry["id"] = missing[i];
      entry["error"] = "not_found";
      fail.push_back(std::move(entry));
    }
    OrderedJson out = OrderedJson::object();
    out["success"] = std::move(success);
    out["fail"] = std::move(fail);
    return ordered_response(call.req, Status::ok, out);
  };
  if (items.empty()) co_return answer(nullptr);
  core::DocWriteBatch batch(db.name, std::move(items));
  co_return co_await write_and_render(call, batch,
                                      [&](const core::DocWriteBatch& b) { return answer(&b); });
}

MaybeResponse list_indexes(Call& call, const core::DbRef& db) {
  DesignDocs d = read_design_docs(call, db);
  OrderedJson list = OrderedJson::array();
  list.push_back(all_docs_index_json());
  const core::UniqueIndexes unique = read_unique(call, db);
  auto tr = call.store().create_transaction();
  for (const auto& idx : d.indexes) {
    OrderedJson j = index_json(idx);
    if (const core::UniqueIndexDef* u = find_unique(unique, idx.ddoc, idx.name)) {
      j["unique"] = true;
      if (!u->ready) {
        const bool running =
            value_or_throw(core::unique_claim_held(tr, db, u->id, core::idem_now_ms()));
        j["build"] = running ? "running" : "interrupted";
      }
      auto v = value_or_throw(core::unique_violations(tr, db, u->id, core::kUniqueDuplicatesMax));
      j["violations"] = v;
    }
    list.push_back(std::move(j));
  }
  // ?limit (at least 1) and ?skip (at least 0, past the end: none), as mango_httpd; CouchDB
  // answers a bad value with 500, Chaise with 400 and the same error.
  const auto total = static_cast<std::int64_t>(list.size());
  auto param = [&](const char* name, std::int64_t fallback, std::int64_t min) {
    const auto v = call.query.get(name);
    if (!v) return fallback;
    std::int64_t n = 0;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
    if (ec != std::errc{} || end != v->data() + v->size() || n < min)
      throw HttpError(
          err::invalid_list_index_params("Index parameter ranges: limit > 1, skip > 0"));
    return n;
  };
  const std::int64_t limit = param("limit", total, 1);
  const std::int64_t skip = std::min(param("skip", 0, 0), total);
  OrderedJson page = OrderedJson::array();
  for (std::int64_t i = skip; i < total && i - skip < limit; ++i)
    page.push_back(std::move(list[static_cast<std::size_t>(i)]));
  OrderedJson out = OrderedJson::object();
  out["total_rows"] = total;
  out["indexes"] = std::move(page);
  co_return ordered_response(call.req, Status::ok, out);
}

// ---- _find -----------------------------------------------------------------------------------------

struct FindRequest {
  OrderedJson selector;
  std::optional<core::Selector> matcher;
  std::int64_t limit = 25;
  std::int64_t skip = 0;
  std::optional<std::vector<std::string>> fields;
  std::vector<core::MangoField> sort;
  std::optional<std::vector<std::string>> use_index;  // [ddoc] or [ddoc, name]
  bool execution_stats = false;
  bool conflicts = false;
  bool update = true;
  bool allow_fallback = true;  // false: no index but the one use_index names (or a usable one)
};

// A boolean option of a query (mango_opts:is_boolean): absent is `fallback`, anything but true
// or false is 400 invalid_boolean.
bool bool_option(const OrderedJson& body, const char* name, bool fallback) {
  const auto it = body.find(name);
  if (it == body.end()) return fallback;
  if (!it->is_boolean())
    throw HttpError(err::invalid_boolean("Invalid boolean value: " + core::erlang_term_text(*it)));
  return it->get<bool>();
}

// mango_opts:is_non_neg_integer.
std::int64_t non_negative(const OrderedJson& v) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
    throw HttpError(err::invalid_non_neg_integer(
        core::erlang_term_text(v) + " is not an integer greater than or equal to zero"));
  return v.get<std::int64_t>();
}

// mango_opts:validate_use_index: "ddoc", "_design/ddoc", "ddoc/name", "_design/ddoc/name",
// [ddoc] or [ddoc, name]; null and [] name none. The design document gets its prefix.
std::optional<std::vector<std::string>> parse_use_index(const OrderedJson& u) {
  std::vector<std::string> parts;
  const auto bad = [&u]() {
    throw HttpError(err::invalid_index_name("Invalid index name: " + core::erlang_term_text(u)));
  };
  if (u.is_null()) return std::nullopt;
  if (u.is_string()) {
    std::string_view rest = u.get_ref<const std::string&>();
    for (;;) {
      const std::size_t slash = rest.find('/');
      parts.emplace_back(rest.substr(0, slash));
      if (slash == std::string_view::npos) break;
      rest.remove_prefix(slash + 1);
    }
    if (parts.size() >= 2 && parts[0] == "_design") parts.erase(parts.begin());
    if (parts.size() > 2) bad();
  } else if (u.is_array() && u.size() <= 2) {
    for (const auto& p : u) {
      if (!p.is_string()) bad();
      parts.push_back(p.get<std::string>());
    }
  } else {
    bad();
  }
  if (parts.empty()) return std::nullopt;
  if (!parts[0].starts_with("_design/")) parts[0] = "_design/" + parts[0];
  return parts;
}

// mango_opts:validate_find, in its order (the first failure wins), then any other key is
// invalid_key.
FindRequest parse_find(const OrderedJson& body) {
  static constexpr std::string_view kKeys[] = {
      "selector",      "use_index", "bookmark",  "limit", "skip",   "sort",   "fields",
      "partition",     "r",         "conflicts", "stale", "update", "stable", "execution_stats",
      "allow_fallback"};
  FindRequest r;
  if (!body.contains("selector"))
    throw HttpError(err::missing_required_key("Missing required key: selector"));
  r.selector = body["selector"];
  auto sel = core::Selector::parse(r.selector);
  if (auto* e = std::get_if<core::CouchError>(&sel)) throw HttpError(*e);
  r.matcher = std::get<core::Selector>(std::move(sel));
  if (body.contains("use_index")) r.use_index = parse_use_index(body["use_index"]);
  std::int64_t seen = 0;
  if (body.contains("bookmark")) {
    const OrderedJson& bm = body["bookmark"];
    if (!bm.is_null() && !bm.is_string())
      throw HttpError(err::invalid_bookmark("Invalid bookmark value: " + bm.dump()));
    if (bm.is_string() && !bm.get_ref<const std::string&>().empty() && bm != "nil") {
      auto decoded = core::base64_decode(bm.get<std::string>());
      OrderedJson b = decoded ? OrderedJson::parse(*decoded, nullptr, false) : OrderedJson();
      if (!b.is_object() || !b.contains("seen") || !b["seen"].is_number_integer())
        throw HttpError(err::invalid_bookmark("Invalid bookmark value: " + bm.dump()));
      seen = b["seen"].get<std::int64_t>();
    }
  }
  if (body.contains("limit")) r.limit = non_negative(body["limit"]);
  if (body.contains("skip")) r.skip = non_negative(body["skip"]);
  r.skip += seen;
  if (body.contains("sort")) {
    auto s = core::parse_mango_fields(body["sort"]);
    if (auto* e = std::get_if<core::CouchError>(&s)) throw HttpError(*e);
    r.sort = std::get<std::vector<core::MangoField>>(std::move(s));
    for (const auto& f : r.sort)
      if (f.descending != r.sort[0].descending)
        throw HttpError(err::unsupported_mixed_sort(
            "Sorts currently only support a single direction for all fields."));
  }
  if (body.contains("fields")) {
    const OrderedJson& fields = body["fields"];
    if (!fields.is_array())
      throw HttpError(err::invalid_fields("Fields must be an array of strings, not: " +
                                          core::erlang_term_text(fields)));
    r.fields.emplace();
    for (const auto& f : fields) {
      if (!f.is_string())
        throw HttpError(
            err::invalid_field("Invalid JSON for field spec: " + core::erlang_term_text(f)));
      r.fields->push_back(f.get<std::string>());
    }
    if (r.fields->empty()) r.fields.reset();  // [] is every field, as in CouchDB
  }
  if (body.contains("r")) {
    const OrderedJson& v = body["r"];
    if (!v.is_number_integer() || v.get<std::int64_t>() <= 0)
      throw HttpError(err::invalid_pos_integer(core::erlang_term_text(v) +
                                               " is not an integer greater than zero"));
  }
  r.conflicts = bool_option(body, "conflicts", false);
  r.update = bool_option(body, "update", true);
  bool_option(body, "stable", false);  // validated; every answer is from one snapshot
  r.execution_stats = bool_option(body, "execution_stats", false);
  r.allow_fallback = bool_option(body, "allow_fallback", true);
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (std::find(std::begin(kKeys), std::end(kKeys), it.key()) == std::end(kKeys))
      throw HttpError(err::invalid_key("Invalid key " + it.key() + " for this request."));
  }
  return r;
}

OrderedJson project(const OrderedJson& doc, const std::optional<std::vector<std::string>>& fields) {
  if (!fields) return doc;
  OrderedJson out = OrderedJson::object();
  for (const std::string& f : *fields) {
    auto path = core::parse_field_path(f);
    if (!path) continue;
    const OrderedJson* v = core::field_value(doc, *path);
    if (!v) continue;
    OrderedJson* cur = &out;
    for (std::size_t i = 0; i + 1 < path->size(); ++i) {
      if (!cur->contains((*path)[i]) || !(*cur)[(*path)[i]].is_object())
        (*cur)[(*path)[i]] = OrderedJson::object();
      cur = &(*cur)[(*path)[i]];
    }
    (*cur)[path->back()] = *v;
  }
  return out;
}

struct Plan {
  std::optional<core::MangoIndex> index;  // nullopt: _all_docs
  std::optional<std::string> warning;
};

// `partition_query`: a /{db}/_partition/{p}/_find, which only partitioned indexes can answer
// (and a global query only global ones: mango_idx:filter_partition_indexes/2).
Plan choose(const FindRequest& r, const std::vector<core::MangoIndex>& indexes, bool db_partitioned,
            bool partition_query) {
  // mango_idx:get_usable_indexes: the json indexes that can answer, plus _all_docs when the sort
  // (if any) is by _id; none at all is the sort error.
  std::vector<const core::MangoIndex*> usable;
  for (const auto& idx : indexes)
    if (idx.partitioned == partition_query && core::mango_index_usable(idx, r.selector, r.sort))
      usable.push_back(&idx);
  bool id_sort = true;
  for (const auto& f : r.sort) id_sort = id_sort && f.name == "_id";
  if (usable.empty() && !id_sort) {  // mango_idx:mango_sort_error/2
    const char* which = !db_partitioned ? "" : partition_query ? " partitioned" : " global";
    throw HttpError(
        err::no_usable_index(std::string("No") + which +
                             " index exists for this sort, try indexing by the sort fields."));
  }
  auto best_of = [](const std::vector<const core::MangoIndex*>& candidates) {
    const core::MangoIndex* best = nullptr;
    for (const core::MangoIndex* idx : candidates)
      if (!best || idx->fields.size() > best->fields.size()) best = idx;
    return best;
  };
  // mango_cursor:create: the indexes use_index names among the usable ones; none (or no
  // use_index) falls back to the best usable one, unless allow_fallback is false, where only a
  // choice among several usable indexes (_all_docs counted) is allowed.
  std::vector<const core::MangoIndex*> named;
  if (r.use_index) {
    for (const core::MangoIndex* idx : usable)
      if (idx->ddoc == (*r.use_index)[0] &&
          (r.use_index->size() == 1 || idx->name == (*r.use_index)[1]))
        named.push_back(idx);
  }
  auto named_text = [&] {  // "_design/d" or "_design/d, name"
    return (*r.use_index)[0] + (r.use_index->size() > 1 ? ", " + (*r.use_index)[1] : "");
  };
  Plan p;
  std::vector<std::string> warnings;
  const core::MangoIndex* chosen = best_of(named);
  if (!chosen) {
    const std::size_t usable_count = usable.size() + (id_sort ? 1 : 0);
    if (!r.allow_fallback && (r.use_index || usable_count <= 1)) {
      if (!r.use_index)
        throw HttpError(
            err::invalid_index("You must specify an index with the `use_index` parameter."));
      throw HttpError(err::invalid_index(
          named_text() + " specified by `use_index` could not be found or it is not suitable."));
    }
    if (r.use_index)
      warnings.push_back(named_text() +
                         " was not used because it does not contain a valid index for this query.");
    chosen = best_of(usable);
  }
  if (chosen) {
    p.index = *chosen;
  } else {
    warnings.emplace_back("No matching index found, create an index to optimize query time.");
  }
  if (!warnings.empty()) {
    std::string joined;
    for (const std::string& w : warnings) joined += (joined.empty() ? "" : "\n") + w;
    p.warning = std::move(joined);
  }
  return p;
}

// POST /{db}/_explain: the plan _find would follow (mango_httpd:handle_explain_req).
OrderedJson explain_plan(const Call& call, const core::DbRef& db, const OrderedJson& body,
                         const FindRequest& r, const Plan& plan, bool descending) {
  OrderedJson out = OrderedJson::object();
  out["dbname"] = db.name;
  out["index"] = plan.index ? index_json(*plan.index) : all_docs_index_json();
  out["partitioned"] = db.partitioned;
  out["selector"] = r.selector;
  OrderedJson opts = OrderedJson::object();
  if (call.partition) opts["partition"] = *call.partition;
  opts["use_index"] = r.use_index ? OrderedJson(*r.use_index) : OrderedJson::array();
  opts["bookmark"] = "nil";
  opts["limit"] = r.limit;
  opts["skip"] = r.skip;
  opts["sort"] = body.contains("sort") ? body["sort"] : OrderedJson::object();
  opts["fields"] = r.fields ? OrderedJson(*r.fields) : OrderedJson("all_fields");
  opts["conflicts"] = r.conflicts;
  out["opts"] = opts;
  out["limit"] = r.limit;
  out["skip"] = r.skip;
  out["fields"] = r.fields ? OrderedJson(*r.fields) : OrderedJson("all_fields");
  if (plan.index) {
    auto range = core::mango_range(*plan.index, r.selector);
    OrderedJson mr = OrderedJson::object();
    mr["include_docs"] = true;
    mr["view_type"] = "map";
    mr["reduce"] = false;
    mr["start_key"] = range.start ? *range.start : OrderedJson::array();
    mr["end_key"] = range.end ? *range.end : OrderedJson::array({"<MAX>"});
    mr["direction"] = descending ? "rev" : "fwd";
    mr["stable"] = false;
    mr["update"] = r.update ? "true" : "false";
    mr["conflicts"] = r.conflicts ? "true" : "undefined";
    out["mrargs"] = mr;
  }
  out["covering"] = false;
  return out;
}

MaybeResponse find(Call& call, const core::DbRef& db, bool explain) {
  require_method(call, "POST");
  const OrderedJson body = parse_json_object_body(call.req);
  const FindRequest r = parse_find(body);
  DesignDocs d = read_design_docs(call, db);
  const Plan plan = choose(r, d.indexes, db.partitioned, call.partition.has_value());
  const bool descending = !r.sort.empty() && r.sort[0].descending;

  if (explain) {
    co_return ordered_response(call.req, Status::ok,
                               explain_plan(call, db, body, r, plan, descending));
  }

  const auto started = std::chrono::steady_clock::now();
  std::int64_t keys_examined = 0, docs_examined = 0;
  std::int64_t matched = 0;  // matches seen, skipped ones included
  std::vector<OrderedJson> results;
  auto consider = [&](OrderedJson& doc) {
    ++docs_examined;
    if (!doc.is_object()) return;
    const std::string id = doc.value("_id", "");
    if (id.starts_with("_design/")) return;
    if (call.partition && !id.starts_with(*call.partition + ":")) return;
    // In _users, others' documents are matched and answered as their public fields only; in
    // _replicator, others' jobs as their readers see them (no credentials, a made-up rev).
    const ReadRule rule = read_rule(call, db, id);
    if (rule.public_fields && !core::strip_non_public_fields(doc, *rule.public_fields)) return;
    if (rule.replication_reader) {
      core::DocReadOptions o;
      rule.apply(o);
      o.conflicts = r.conflicts;
      auto tr = call.store().create_transaction();
      auto shown = value_or_throw(core::get_doc_json(tr, db, id, o));
      if (core::failed(shown)) return;
      doc = OrderedJson::parse(std::get<std::string>(shown), nullptr, false);
    }
    if (!r.matcher->matches(doc)) return;
    ++matched;
    if (matched <= r.skip) return;
    results.push_back(project(doc, r.fields));
  };
  // Pages of the index (or of _all_docs) in transactions of their own, until `limit` results.
  std::vector<std::string> rows;
  auto scan = [&](auto& cursor) {
    for (bool more = true; more && static_cast<std::int64_t>(results.size()) < r.limit;) {
      auto tr = call.store().create_transaction();
      more = Pages::read(cursor, tr, 500, rows);
      for (const std::string& row : rows) {
        ++keys_examined;
        if (static_cast<std::int64_t>(results.size()) >= r.limit) break;
        OrderedJson j = OrderedJson::parse(row, nullptr, false);
        if (j.is_object() && j.contains("doc")) consider(j["doc"]);
      }
      rows.clear();
    }
  };
  if (plan.index) {
    auto tr0 = call.store().create_transaction();
    core::js::DesignDoc dd = load_design_doc(tr0, db, plan.index->ddoc.substr(8));
    auto g = core::ViewGroup::from_design_doc(plan.index->ddoc, dd.json, dd.key, db.partitioned);
    if (auto* e = std::get_if<core::CouchError>(&g)) throw HttpError(*e);
    auto group = std::make_shared<const core::ViewGroup>(std::get<core::ViewGroup>(std::move(g)));
    if (r.update) co_await build_index(call, db, *group);
    auto view = group->index_of(plan.index->name);
    if (!view) throw HttpError(err::not_found("missing_named_view"));
    core::ViewQuery q;
    q.view = *view;
    if (group->partitioned) q.partition = call.partition.value_or("");
    q.include_docs = true;
    q.conflicts = r.conflicts;
    q.reduce = false;
    q.descending = descending;
    auto range = core::mango_range(*plan.index, r.selector);
    if (descending) {
      q.start_key = range.end;
      q.end_key = range.start;
    } else {
      q.start_key = range.start;
      q.end_key = range.end;
    }
    core::ViewCursor cursor(db, group, q, call.ctx.js);
    scan(cursor);
  } else {
    core::AllDocsQuery q;
    q.include_docs = true;
    q.conflicts = r.conflicts;
    q.descending = descending;
    if (call.partition) {  // the partition's ids only, as CouchDB's partitioned _all_docs scan
      std::string lo = *call.partition + ":", hi = *call.partition + ":\xef\xbf\xb0";
      if (descending) std::swap(lo, hi);
      q.start_key = lo;
      q.end_key = hi;
    }
    core::AllDocsCursor cursor(db, q);
    scan(cursor);
  }
  OrderedJson out = OrderedJson::object();
  out["docs"] = results;
  OrderedJson mark = OrderedJson{{"seen", matched}};
  out["bookmark"] = results.empty() ? std::string("nil") : core::base64_encode(mark.dump());
  if (plan.warning) out["warning"] = *plan.warning;
  if (r.execution_stats) {
    OrderedJson st = OrderedJson::object();
    st["total_keys_examined"] = keys_examined;
    st["total_docs_examined"] = docs_examined;
    st["total_quorum_docs_examined"] = 0;
    st["results_returned"] = results.size();
    st["execution_time_ms"] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    out["execution_stats"] = st;
  }
  co_return ordered_response(call.req, Status::ok, out);
}

}  // namespace

MaybeResponse handle_mango(Call& call, const core::DbRef& db) {
  const std::string& op = call.path.at(1);
  if (op == "_find" && call.path.size() == 2) co_return co_await find(call, db, false);
  if (op == "_explain" && call.path.size() == 2) co_return co_await find(call, db, true);
  if (op == "_index") {
    if (call.path.size() == 2) {
      if (call.is(beast_http::verb::post)) co_return co_await create_index(call, db);
      require_method(call, "GET,HEAD,POST");
      co_return co_await list_indexes(call, db);
    }
    if (call.path.size() == 3 && call.path[2] == "_bulk_delete")
      co_return co_await bulk_delete_indexes(call, db);
    if (call.path.size() == 5 && call.path[3] == "json") {
      require_method(call, "DELETE");
      co_return co_await delete_index(call, db, call.path[2], call.path[4]);
    }
    if (call.path.size() == 6 && call.path[2] == "_design" && call.path[4] == "json") {
      require_method(call, "DELETE");
      co_return co_await delete_index(call, db, "_design/" + call.path[3], call.path[5]);
    }
  }
  throw HttpError(err::not_found());
}

}  // namespace chaise::http
