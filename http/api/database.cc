// http/api/database.cc — /{db} and its endpoints: PUT/GET/HEAD/DELETE/POST /{db},
// _bulk_docs, _revs_diff, _missing_revs, _revs_limit, _ensure_full_commit, _compact, _view_cleanup.
//
// CouchDB sources followed (apache/couchdb main): chttpd_db.erl handle_request, create_db_req,
// delete_db_req, do_db_req, db_req (every clause used here), validate_revs,
// update_doc_result_to_json, parse_partitioned_opt, parse_shards_opt; couch_doc.erl
// from_json_obj_validate, parse_rev; couch_db.erl doc_from_json_obj_validate; couch_partition.erl
// validate_docid; fabric.erl idrevs, set_revs_limit; chttpd.erl absolute_uri, error_info;
// couch_util.erl url_encode.
//
// Order of checks, as in CouchDB: PUT and DELETE /{db} first; every other request needs the
// database to exist (do_db_req → mem3:props answers 404 before any handler runs), then the
// method, then the Content-Type, then the body.
#include <spdlog/spdlog.h>

#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "config/config.h"
#include "core/batch/doc_batches.h"
#include "core/db/active_tasks.h"
#include "core/db/databases.h"
#include "core/docs/doc_json.h"
#include "core/docs/documents.h"
#include "core/rev/rev.h"
#include "core/security/replicator_docs.h"
#include "core/util/json_text.h"
#include "http/api/idempotency.h"
#include "http/api/js_request.h"
#include "http/api/pages.h"
#include "http/api/request.h"
#include "http/api/router.h"
#include "http/api/txn.h"

namespace chaise::http {

namespace {

using Item = core::DocWriteBatch::Item;
using ItemResult = core::DocWriteBatch::ItemResult;

// Documents looked up per read transaction by _revs_diff / _missing_revs.
constexpr std::size_t kReadIdsPerTransaction = 1000;
// An answer to _revs_diff / _missing_revs larger than this is streamed in pieces of about this
// size.
constexpr std::size_t kStreamChunkBytes = 256 * 1024;

// /{db} answers these (PUT is handled before, and CouchDB does not list it).
constexpr std::string_view kDbMethods = "DELETE,GET,HEAD,POST";

// Known CouchDB database endpoints Chaise does not serve yet: answered 501 rather than treated as
// document ids, so that a client learns the feature is missing.
constexpr std::string_view kNotImplemented[] = {"_auto_purge", "_time_seq", "_shards",
                                                "_sync_shards"};

// The database of the request as of `tr`; 404 "Database does not exist." for any name that is
// not a database (CouchDB answers 404, not 400, for an invalid name here: only PUT validates).
core::DbRef open_db_at(storage::Transaction& tr, const std::string& name) {
  auto r = value_or_throw(core::open_db(tr, name));
  if (core::failed(r)) throw HttpError(err::db_not_found());
  return std::get<core::DbRef>(std::move(r));
}

// ---- Documents as couch_db:doc_from_json_obj_validate reads them ----------------------------

// CouchDB's parse_rev syntax: "<integer>-<anything>". Used where Chaise's RevId (pos >= 1) is
// narrower than CouchDB: _local revisions ("0-N") and revisions a client asks about.
bool couch_rev_syntax(std::string_view rev) {
  const std::size_t dash = rev.find('-');
  if (dash == std::string_view::npos || dash == 0) return false;
  return rev.substr(0, dash).find_first_not_of("0123456789") == std::string_view::npos;
}

bool is_local_id(std::string_view id) { return id.substr(0, 7) == "_local/"; }
bool is_design_id(std::string_view id) { return id.substr(0, 8) == "_design/"; }

// couch_partition:validate_docid, for ids given by the client in a partitioned database.
void validate_partitioned_docid(const std::string& id) {
  if (is_local_id(id) || is_design_id(id)) return;
  const std::size_t colon = id.find(':');
  if (colon == std::string::npos)
    throw HttpError(err::illegal_docid("Doc id must be of form partition:id"));
  const std::string partition = id.substr(0, colon);
  if (partition.empty()) throw HttpError(err::illegal_partition("Partition must not be empty"));
  if (partition.front() == '_')
    throw HttpError(err::illegal_partition("Partition must not start with an underscore"));
  if (auto e = core::validate_docid(std::string_view(id).substr(colon + 1))) throw HttpError(*e);
}

const std::string& item_id(const Item& item) {
  return item.replicated ? item.replicated_doc.id : item.update.id;
}

// couch_doc:transfer_fields through core::parse_doc. _local documents carry "0-N" revisions,
// which core::RevId (pos >= 1) does not represent: their _rev is taken out first and returned
// as text in `local_rev`.
// `with_body_term`: for an interactive edit (ParsedDoc::body_term).
core::ParsedDoc parse_fields(const Json& doc, bool local, std::optional<std::string>& local_rev,
                             bool with_body_term) {
  std::variant<core::ParsedDoc, core::CouchError> parsed;
  if (local && doc.contains("_rev")) {
    const Json& rev = doc["_rev"];
    if (!rev.is_string() || !couch_rev_syntax(rev.get_ref<const std::string&>()))
      throw HttpError(err::bad_request("Invalid rev format"));
    local_rev = rev.get<std::string>();
    Json without_rev = doc;
    without_rev.erase("_rev");
    parsed = core::parse_doc(without_rev);
  } else {
    parsed = core::parse_doc(doc, with_body_term);
  }
  if (auto* e = std::get_if<core::CouchError>(&parsed)) throw HttpError(std::move(*e));
  return std::get<core::ParsedDoc>(std::move(parsed));
}

// The DocWriteBatch item of a parsed document: a _local write, an interactive edit, or a
// replicated revision (its path from _revisions, or just _rev without ancestors).
Item make_item(core::ParsedDoc parsed, std::string id, bool local,
               std::optional<std::string> local_rev, bool new_edits) {
  Item item;
  if (local || new_edits) {
    item.local = local;
    item.local_rev = std::move(local_rev);
    item.update.id = std::move(id);
    if (!local) item.update.base_rev = std::move(parsed.rev);
    item.update.deleted = parsed.deleted;
    item.update.body = std::move(parsed.body);
    item.update.body_term = std::move(parsed.body_term);
    return item;
  }
  item.replicated = true;
  item.replicated_doc.id = std::move(id);
  if (parsed.revisions) {
    item.replicated_doc.path = std::move(*parsed.revisions);
  } else {
    item.replicated_doc.path.leaf = std::move(*parsed.rev);
  }
  item.replicated_doc.path.deleted = parsed.deleted;
  item.replicated_doc.body = std::move(parsed.body);
  return item;
}

// One document of a write request, checked as couch_db:doc_from_json_obj_validate and
// chttpd_db:validate_revs do. Errors are thrown: CouchDB rejects the whole request when any
// document is malformed, too large, or lacks revisions with new_edits=false. `id_given` is false
// when the server generated the id.
struct ParsedItem {
  Item item;
  bool id_given = true;
  // A per-document refusal that does not fail the whole request (an invalid design document:
  // _bulk_docs answers it in its entry and writes the others, as CouchDB does).
  std::optional<core::CouchError> error;
};

ParsedItem parse_item(const Call& call, const Json& original, const core::DbRef& db, bool new_edits,
                      std::size_t max_document_size, std::size_t max_attachment_size) {
  if (!original.is_object()) throw HttpError(err::bad_request("Document must be a JSON object"));
  // Design documents need a db admin; _users documents are checked and their password hashed;
  // _replicator documents get their owner, and one that breaks the rules fails the whole
  // request (couch_replicator_docs:before_doc_update throws, as in CouchDB).
  Json rewritten;
  std::optional<core::CouchError> write_error;
  const bool replicator_db = db.name == core::kReplicatorDb;
  const bool rewrite = db.name == core::kUsersDb || replicator_db;
  if (rewrite || original.value("_id", Json()).is_string()) {
    if (rewrite) rewritten = original;
    Json probe = rewrite ? Json() : Json::object({{"_id", original["_id"]}});
    write_error = check_doc_write(call, db, rewrite ? rewritten : probe);
  }
  if (replicator_db && write_error) {
    const auto id = original.find("_id");
    if (id == original.end() || !id->is_string() ||
        !id->get_ref<const std::string&>().starts_with("_design/"))
      throw HttpError(std::move(*write_error));
  }
  const Json& doc = rewrite && !write_error ? rewritten : original;
  const auto id_member = doc.find("_id");
  const bool local = id_member != doc.end() && id_member->is_string() &&
                     is_local_id(id_member->get_ref<const std::string&>());
  std::optional<std::string> local_rev;
  core::ParsedDoc parsed = parse_fields(doc, local, local_rev, new_edits && !local);

  if (parsed.body.size() > max_document_size)
    throw HttpError(err::document_too_large(parsed.id.value_or("")));
  std::optional<core::CouchError> design_error =
      core::validate_design_doc(parsed.id.value_or(""), doc, core::Partitioned{db.partitioned});
  if (!design_error) design_error = check_design_functions(call, parsed.id.value_or(""), doc);
  std::vector<core::AttUpload> atts;
  // CouchDB 3 accepts and drops the attachments of a _local document.
  if (parsed.attachments && !parsed.attachments->empty() && !local) {
    auto a = core::parse_attachments_json(*parsed.attachments, max_attachment_size);
    if (auto* e = std::get_if<core::CouchError>(&a)) throw HttpError(std::move(*e));
    atts = std::get<std::vector<core::AttUpload>>(std::move(a));
    for (const core::AttUpload& u : atts)
      if (u.follows) throw HttpError(err::bad_request("Attachment data missing for " + u.name));
  }
  if (local && !local_rev && parsed.rev) local_rev = parsed.rev->str();  // from _revisions
  if (parsed.id && db.partitioned) validate_partitioned_docid(*parsed.id);
  if (!new_edits && !parsed.rev && !local_rev) {
    throw HttpError(err::bad_request(
        "When `new_edits: false`, the document needs `_rev` or `_revisions` specified"));
  }
  ParsedItem out;
  out.id_given = parsed.id.has_value();
  std::string id = parsed.id ? std::move(*parsed.id) : new_uuid();
  out.item = make_item(std::move(parsed), std::move(id), local, std::move(local_rev), new_edits);
  (out.item.replicated ? out.item.replicated_doc.atts : out.item.update.atts) = std::move(atts);
  out.error = write_error ? std::move(write_error) : std::move(design_error);
  return out;
}

// ---- Writing documents ------------------------------------------------------------------------

struct WriteOutcome {
  std::vector<std::optional<ItemResult>> results;  // one per item (nullopt: not written)
  std::vector<std::string> local_revs;             // "0-N" for _local items
};

// Writes `items` (those with `skip[i]` set are left alone) with one DocWriteBatch, which splits
// them into transactions of bounded size itself, and answers with render(the results, in item
// order). A storage error ends the writing (earlier transactions stay committed: CouchDB has no
// all-or-nothing either). With an Idempotency-Key the items must fit one transaction and the
// answer is stored with them (write_and_render).
boost::asio::awaitable<Response> write_items(const Call& call, const std::string& db_name,
                                             std::vector<Item>& items,
                                             const std::vector<bool>& skip,
                                             std::function<Response(const WriteOutcome&)> render) {
  WriteOutcome out;
  out.results.resize(items.size());
  out.local_revs.resize(items.size());
  std::vector<std::size_t> indexes;
  std::vector<Item> batch_items;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (skip[i]) continue;
    indexes.push_back(i);
    batch_items.push_back(std::move(items[i]));
  }
  if (batch_items.empty()) co_return render(out);
  core::DocWriteBatch batch(db_name, std::move(batch_items));
  co_return co_await write_and_render(call, batch, [&](const core::DocWriteBatch& b) {
    WriteOutcome o = out;
    for (std::size_t k = 0; k < indexes.size(); ++k) {
      o.results[indexes[k]] = b.results()[k];
      o.local_revs[indexes[k]] = b.local_revs()[k];
    }
    return render(o);
  });
}

// ---- /{db} ------------------------------------------------------------------------------------

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// chttpd_db:parse_shards_opt: q and n must be positive integers (Chaise has one shard, one copy).
void validate_shards_param(const Call& call, const std::string& key) {
  auto v = call.query.get(key);
  if (!v) return;
  const bool positive = !v->empty() && v->find_first_not_of("0123456789") == std::string::npos &&
                        v->find_first_not_of('0') != std::string::npos;
  if (!positive)
    throw HttpError(err::bad_request("The `" + key + "` value should be a positive integer."));
}

bool is_system_db_for_partitioning(std::string_view name) {
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  return core::is_system_db(name) || ends_with("/_users") || ends_with("/_replicator");
}

// PUT /{db}
MaybeResponse create_database(Call& call) {
  const std::string& name = call.path.front();
  validate_shards_param(call, "n");
  validate_shards_param(call, "q");
  bool partitioned = false;
  if (auto p = call.query.get("partitioned")) {
    if (*p == "true") {
      partitioned = true;
    } else if (*p != "false") {
      throw HttpError(err::bad_request("Invalid `partitioned` parameter"));
    }
  }
  if (!core::valid_db_name(name)) throw HttpError(core::bad_db_name(name));
  if (partitioned && is_system_db_for_partitioning(name))
    throw HttpError(err::bad_request("Cannot partition a system database"));

  // CouchDB 3's [couchdb] default_security: admin_only unless set to everyone.
  const bool admin_only = call.ctx.config == nullptr ||
                          call.ctx.config->get("couchdb", "default_security") != "everyone";
  // The creation time doubles as this request's mark: a retry after commit_unknown_result that
  // finds the database with our timestamp knows the first attempt committed.
  const std::int64_t created_us = now_us();
  std::optional<core::CouchError> error;
  storage::Status s =
      co_await run_txn(call.store(), [&](storage::Transaction& tr) -> storage::Status {
        error.reset();
        auto existing = core::open_db(tr, name);
        if (!existing.ok()) return existing.error();
        if (!core::failed(*existing) && std::get<core::DbRef>(*existing).created_us == created_us) {
          return {};
        }
        auto r =
            core::create_db_with_default_security(tr, name, partitioned, created_us, admin_only);
        if (!r.ok()) return r.error();
        if (core::failed(*r)) error = std::get<core::CouchError>(*r);
        return {};
      });
  if (!s.ok()) co_return storage_error_response(call.req, s.error());
  if (error) throw HttpError(*error);
  Response response = json_response(call.req, Status::created, Json{{"ok", true}});
  response.set(beast_http::field::location, absolute_uri(call, "/" + url_encode(name)));
  co_return response;
}

// DELETE /{db}
MaybeResponse delete_database(Call& call) {
  // A forgotten document id makes "DELETE /db/?rev=..." look like a database deletion.
  if (call.query.has("rev")) {
    throw HttpError(err::bad_request(
        "You tried to DELETE a database with a ?=rev parameter. Did you mean to DELETE a "
        "document instead?"));
  }
  const std::string& name = call.path.front();
  std::optional<core::CouchError> error;
  bool attempted = false;
  storage::Status s =
      co_await run_txn(call.store(), [&](storage::Transaction& tr) -> storage::Status {
        error.reset();
        auto r = core::delete_db(tr, name);
        if (!r.ok()) return r.error();
        // A retry that no longer finds the database: an earlier attempt of ours (whose commit
        // result was unknown) or a concurrent delete removed it; either way it is gone.
        if (core::failed(*r) && !attempted) error = std::get<core::CouchError>(*r);
        attempted = attempted || !core::failed(*r);
        return {};
      });
  if (!s.ok()) co_return storage_error_response(call.req, s.error());
  if (error) throw HttpError(*error);
  co_return json_response(call.req, Status::ok, Json{{"ok", true}});
}

// GET/HEAD /{db}
Response database_info(Call& call) {
  auto tr = call.store().create_transaction();
  const core::DbRef db = open_db_at(tr, call.path.front());
  return json_response(call.req, Status::ok, db_info_json(value_or_throw(core::db_info(tr, db))));
}

// POST /{db}: a document, with a server-generated id unless it has _id.
MaybeResponse post_document(Call& call, const core::DbRef& db) {
  require_json_content_type(call);
  const Json body = parse_json_body(call.req, false, core::JsonNumbers::exact);
  ParsedItem parsed =
      parse_item(call, body, db, true, call.ctx.max_document_size, call.ctx.max_attachment_size);
  if (parsed.error) throw HttpError(std::move(*parsed.error));
  // CouchDB (chttpd_db db_req POST): a document without _id is new, whatever _rev it carries.
  if (!parsed.id_given) parsed.item.update.base_rev.reset();
  const std::string id = item_id(parsed.item);
  const bool batch_ok = call.query.get("batch") == "ok";

  std::vector<Item> items;
  items.push_back(std::move(parsed.item));
  const bool local = items.front().local;
  if (storage::Status s = co_await preupload_attachments(call, db, items.front().update.atts);
      !s.ok())
    co_return storage_error_response(call.req, s.error());
  const std::vector<bool> skip_none(1, false);
  co_return co_await write_items(
      call, db.name, items, skip_none, [&](const WriteOutcome& w) -> Response {
        // batch=ok: CouchDB answers 202 before writing and only logs what goes wrong; Chaise
        // writes first (no queue to lose on a crash) and answers the same.
        if (batch_ok) return json_response(call.req, Status::accepted, {{"ok", true}, {"id", id}});
        const ItemResult& result = *w.results.front();
        if (auto* e = std::get_if<core::CouchError>(&result)) throw HttpError(*e);
        const std::string rev =
            local ? w.local_revs.front() : std::get<core::UpdateResult>(result).rev.str();
        Response response =
            json_response(call.req, Status::created, {{"ok", true}, {"id", id}, {"rev", rev}});
        response.set(beast_http::field::location,
                     absolute_uri(call, "/" + url_encode(db.name) + "/" + url_encode(id)));
        return response;
      });
}

// ---- /{db}/_bulk_docs -------------------------------------------------------------------------

MaybeResponse bulk_docs(Call& call, const core::DbRef& db) {
  if (!call.is(beast_http::verb::post)) throw_method_not_allowed("POST");
  require_json_content_type(call);
  const Json body = parse_json_object_body(call.req, false, core::JsonNumbers::exact);
  const auto docs = body.find("docs");
  if (docs == body.end())
    throw HttpError(err::bad_request("POST body must include `docs` parameter."));
  if (!docs->is_array()) throw HttpError(err::bad_request("`docs` parameter must be an array."));
  bool new_edits = true;
  if (auto ne = body.find("new_edits"); ne != body.end()) {
    if (!ne->is_boolean())
      throw HttpError(err::bad_request("`new_edits` parameter must be a boolean."));
    new_edits = ne->get<bool>();
  }

  std::vector<Item> items;
  std::vector<std::optional<core::CouchError>> refused;  // answered without being written
  items.reserve(docs->size());
  for (const Json& doc : *docs) {
    ParsedItem p = parse_item(call, doc, db, new_edits, call.ctx.max_document_size,
                              call.ctx.max_attachment_size);
    items.push_back(std::move(p.item));
    refused.push_back(std::move(p.error));
  }
  for (Item& it : items) {
    auto& atts = it.replicated ? it.replicated_doc.atts : it.update.atts;
    if (storage::Status s = co_await preupload_attachments(call, db, atts); !s.ok())
      co_return storage_error_response(call.req, s.error());
  }

  // Several edits of one id apply in request order, each against the tree the previous one left
  // (couch_db_updater merge_rev_trees); DocWriteBatch puts each in a later transaction.
  std::vector<bool> skip(items.size(), false);
  for (std::size_t i = 0; i < items.size(); ++i) skip[i] = refused[i].has_value();
  // Kept for the answer: write_items moves the items away.
  std::vector<std::string> ids;
  std::vector<std::string> replicated_revs;
  std::vector<bool> local;
  for (const Item& it : items) {
    ids.push_back(item_id(it));
    replicated_revs.push_back(it.replicated ? it.replicated_doc.path.leaf.str()
                                            : it.local_rev.value_or(std::string()));
    local.push_back(it.local);
  }

  // The answer is written as text, entry by entry: built as a Json array and dumped it was a
  // tenth of a _bulk_docs request's instructions.
  co_return co_await write_items(call, db.name, items, skip, [&](const WriteOutcome& w) {
    std::string out = "[";
    core::JsonWriter jw(out, false);  // as json_response: invalid UTF-8 replaced, not thrown
    const auto error_entry = [&](std::size_t i, const core::CouchError& e) {
      if (out.size() > 1) out.push_back(',');
      out.append("{\"id\":");
      jw.string(ids[i]);
      if (!new_edits) {  // new_edits=false answers failures with their revision
        out.append(",\"rev\":");
        jw.string(replicated_revs[i]);
      }
      out.append(",\"error\":");
      jw.string(e.error);
      out.append(",\"reason\":");
      jw.string(e.reason);
      out.push_back('}');
    };
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (refused[i]) {
        error_entry(i, *refused[i]);
        continue;
      }
      if (!w.results[i]) {  // cannot happen: every item not skipped has a result
        error_entry(i, err::unknown_error("no result"));
        continue;
      }
      const ItemResult& r = *w.results[i];
      if (const auto* e = std::get_if<core::CouchError>(&r)) {
        // new_edits=false lists only the failures, with the revision (update_doc_result_to_json).
        error_entry(i, *e);
      } else if (new_edits) {
        if (out.size() > 1) out.push_back(',');
        out.append("{\"ok\":true,\"id\":");
        jw.string(ids[i]);
        out.append(",\"rev\":");
        jw.string(local[i] ? w.local_revs[i] : std::get<core::UpdateResult>(r).rev.str());
        out.push_back('}');
      }
    }
    out.push_back(']');
    return raw_json_response(call.req, Status::created, std::move(out));
  });
}

// ---- /{db}/_revs_diff, /{db}/_missing_revs ------------------------------------------------------

struct IdRevs {
  std::string id;
  std::vector<std::string> revs;
};

// The {id: [rev, ...]} body of _revs_diff and _missing_revs, checked as fabric:idrevs does.
std::vector<IdRevs> parse_id_revs(const Call& call) {
  require_json_content_type(call);
  const Json body = parse_json_object_body(call.req, false);
  std::vector<IdRevs> out;
  out.reserve(body.size());
  for (const auto& [id, revs] : body.items()) {
    if (!revs.is_array()) throw HttpError(err::bad_request("Invalid revisions, must be a list"));
    IdRevs entry{id, {}};
    for (const Json& rev : revs) {
      if (!rev.is_string() || !couch_rev_syntax(rev.get_ref<const std::string&>()))
        throw HttpError(err::bad_request("Invalid rev format"));
      entry.revs.push_back(rev.get<std::string>());
    }
    out.push_back(std::move(entry));
  }
  return out;
}

// A revision as CouchDB prints it back (couch_doc:rev_to_str: hex hashes in lowercase).
std::string normalized_rev(const std::string& text) {
  auto rev = core::RevId::parse(text);
  return rev ? rev->str() : text;
}

// Appends a JSON list of the revisions, normalized.
void append_rev_list(std::string& out, const std::vector<std::string>& revs) {
  out.push_back('[');
  for (std::size_t i = 0; i < revs.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += core::json_string(normalized_rev(revs[i]));
  }
  out.push_back(']');
}

// POST /{db}/_revs_diff (missing_revs = false) and /{db}/_missing_revs (true).
MaybeResponse revs_diff(Call& call, bool missing_revs) {
  if (!call.is(beast_http::verb::post)) throw_method_not_allowed("POST");
  const std::vector<IdRevs> request = parse_id_revs(call);
  // The revision trees of kReadIdsPerTransaction documents are read at once, in one snapshot
  // transaction each (one round trip on FoundationDB), between the pieces the answer is sent in.
  // The answer is written as text: a JSON object of that many members would be built in
  // quadratic time (ordered_json finds members by a linear scan). The parsed body has unique ids.
  // A small answer goes out whole; a larger one is streamed (chunked) in pieces of about
  // kStreamChunkBytes, so that it is never held whole next to the request.
  const core::DbRef db = open_db_or_throw(call);
  std::vector<std::vector<core::StoredBranch>> block;  // those of the ids from i - i % K on
  std::string out = missing_revs ? "{\"missing_revs\":{" : "{";
  bool first = true;
  bool streaming = false;
  for (std::size_t i = 0; i < request.size(); ++i) {
    if (out.size() >= kStreamChunkBytes) {
      if (!streaming && !co_await call.stream.begin(stream_head(call.req))) co_return std::nullopt;
      streaming = true;
      if (!co_await call.stream.write(out)) co_return std::nullopt;
      out.clear();
    }
    const IdRevs& entry = request[i];
    if (i % kReadIdsPerTransaction == 0) {
      std::vector<std::string_view> ids;
      for (std::size_t j = i; j < std::min(i + kReadIdsPerTransaction, request.size()); ++j)
        ids.push_back(request[j].id);
      try {
        auto tr = call.store().create_transaction();
        block = value_or_throw(core::read_branches_of(tr, db, ids, storage::Snapshot::yes));
      } catch (const HttpError&) {
        if (!streaming) throw;
        co_return std::nullopt;  // the head is sent: ending the stream unfinished is all we can do
      }
    }
    const std::optional<core::RevsDiff> diff =
        core::revs_diff(block[i % kReadIdsPerTransaction], entry.revs);
    if (!diff) continue;
    if (!first) out.push_back(',');
    first = false;
    out += core::json_string(entry.id);
    out.push_back(':');
    if (missing_revs) {
      append_rev_list(out, diff->missing);
      continue;
    }
    out += "{\"missing\":";
    append_rev_list(out, diff->missing);
    if (!diff->possible_ancestors.empty()) {
      out += ",\"possible_ancestors\":";
      append_rev_list(out, diff->possible_ancestors);
    }
    out.push_back('}');
  }
  out += missing_revs ? "}}" : "}";
  if (!streaming) co_return raw_json_response(call.req, Status::ok, std::move(out));
  out.push_back('\n');  // as raw_json_response ends its body
  if (co_await call.stream.write(out)) co_await call.stream.finish();
  co_return std::nullopt;
}

// ---- /{db}/_revs_limit --------------------------------------------------------------------------

// Writes one of the database's settings with `set(tr, db)` in a transaction of its own and
// answers {"ok":true}; 404 when the database is gone, or its name is now another database's.
template <typename Set>
MaybeResponse set_db_meta(const Call& call, const core::DbRef& db, Set set) {
  bool missing = false;
  storage::Status s =
      co_await run_txn(call.store(), [&](storage::Transaction& tr) -> storage::Status {
        auto r = core::open_db(tr, db.name);
        if (!r.ok()) return r.error();
        missing = core::failed(*r) || std::get<core::DbRef>(*r).id != db.id;
        if (!missing) set(tr, std::get<core::DbRef>(*r));
        return {};
      });
  if (!s.ok()) co_return storage_error_response(call.req, s.error());
  if (missing) throw HttpError(err::db_not_found());
  co_return json_response(call.req, Status::ok, Json{{"ok", true}});
}

MaybeResponse revs_limit(Call& call, const core::DbRef& db) {
  if (is_get(call)) {
    auto tr = call.store().create_transaction();
    const int limit = value_or_throw(core::revs_limit(tr, db));
    co_return raw_json_response(call.req, Status::ok, std::to_string(limit));
  }
  if (!call.is(beast_http::verb::put)) throw_method_not_allowed("PUT,GET");
  require_db_admin(call);
  // chttpd:json_body: no Content-Type check. CouchDB answers 500 function_clause for a value that
  // is not a positive integer; Chaise answers 400, and caps the limit (RFC 003: a branch's
  // revision ids must fit one value).
  const Json body = parse_json_body(call.req, false);
  // The JSON parser reads every non-negative integer as unsigned.
  if (!body.is_number_unsigned() || body.get<std::uint64_t>() == 0)
    throw HttpError(err::bad_request("The revs_limit must be a positive integer."));
  if (body.get<std::uint64_t>() > static_cast<std::uint64_t>(core::kRevsLimitMax)) {
    throw HttpError(err::bad_request("The revs_limit must not be greater than " +
                                     std::to_string(core::kRevsLimitMax) + "."));
  }
  const int limit = static_cast<int>(body.get<std::uint64_t>());
  co_return co_await set_db_meta(call, db, [&](storage::Transaction& tr, const core::DbRef& now) {
    core::set_revs_limit(tr, now, limit);
  });
}

// ---- /{db}/_security ------------------------------------------------------------------------

// GET answers the stored object (members may read it); PUT replaces it (db admins only). CouchDB
// 3.5 answers a malformed object with 500 no_majority (a cluster artefact); Chaise says 400 and
// why. _users' object is read-only unless [couchdb] users_db_security_editable is not "false".
MaybeResponse security(Call& call, const core::DbRef& db) {
  if (is_get(call)) co_return json_response(call.req, Status::ok, call.security->raw);
  if (!call.is(beast_http::verb::put)) throw_method_not_allowed("PUT,GET");
  if (db.name == core::kUsersDb &&
      (call.ctx.config == nullptr ||
       call.ctx.config->get("couchdb", "users_db_security_editable").value_or("false") ==
           "false")) {
    throw HttpError(err::forbidden("You can't edit the security object of the user database."));
  }
  require_db_admin(call);
  const Json body = parse_json_body(call.req, false);
  auto parsed = core::parse_security(body);
  if (auto* e = std::get_if<core::CouchError>(&parsed)) throw HttpError(std::move(*e));
  const std::string text = body.dump();
  if (text.size() > 1024 * 1024)
    throw HttpError(err::too_large("the security object is too large"));
  co_return co_await set_db_meta(call, db, [&](storage::Transaction& tr, const core::DbRef& now) {
    core::set_security_json(tr, now, text);
  });
}

// ---- /{db}/_compact[/{ddoc}] --------------------------------------------------------------------

// POST /{db}/_compact drops the bodies of superseded revisions and the attachment bytes no stored
// revision names (core::compact_step), in bounded transactions, before answering; RocksDB
// compacts its files on its own. /_compact/{ddoc} (view compaction) only checks the design doc.
MaybeResponse compact(Call& call, const core::DbRef& db) {
  if (!call.is(beast_http::verb::post)) throw_method_not_allowed("POST");
  require_json_content_type(call);
  if (call.path.size() > 2) {
    // ddoc_cache:open: the design document must exist.
    auto tr = call.store().create_transaction();
    auto winner = value_or_throw(
        core::read_winner(tr, db, "_design/" + call.path[2], storage::Snapshot::yes));
    if (!winner) throw HttpError(err::not_found());
    if (winner->branch.deleted) throw HttpError(err::doc_deleted());
    co_return json_response(call.req, Status::accepted, Json{{"ok", true}});
  }
  std::string cursor;
  core::CompactStats stats;
  // Shown in _active_tasks while it runs: documents looked at out of those in the database.
  core::ActiveTasks::Handle task;
  if (call.ctx.active_tasks != nullptr) {
    auto tr = call.store().create_transaction();
    const core::DbInfo info = value_or_throw(core::db_info(tr, db));
    task = call.ctx.active_tasks->join(
        "compaction\0" + std::to_string(db.id),
        Json{{"type", "database_compaction"}, {"database", db.name}, {"phase", "document_copy"}},
        info.doc_count + info.doc_del_count);
  }
  for (bool done = false; !done;) {
    std::string attempt_cursor;
    core::CompactStats attempt_stats;
    storage::Status s = co_await run_txn(call.store(), [&](storage::Transaction& tr) {
      attempt_cursor = cursor;
      attempt_stats = stats;
      auto r = core::compact_step(tr, db, attempt_cursor, attempt_stats);
      if (!r.ok()) return storage::Status(r.error());
      done = *r;
      return storage::Status{};
    });
    if (!s.ok()) co_return storage_error_response(call.req, s.error());
    cursor = std::move(attempt_cursor);
    if (task) task->add_done(attempt_stats.docs_visited - stats.docs_visited);
    stats = attempt_stats;
  }
  // What was removed leaves the store's files too, as CouchDB's compaction rewrites its file.
  const std::pair<std::string, std::string> keys = db.space.root().range();
  if (storage::Status files = call.store().compact_files(keys.first, keys.second); !files.ok())
    co_return storage_error_response(call.req, files.error());
  spdlog::info("compacted {}: {} superseded bodies and {} attachment contents removed", db.name,
               stats.bodies_removed, stats.attachments_removed);
  co_return json_response(call.req, Status::accepted, Json{{"ok", true}});
}

bool not_implemented(std::string_view op) {
  for (std::string_view known : kNotImplemented)
    if (op == known) return true;
  return false;
}

}  // namespace

MaybeResponse handle_database(Call& call) {
  const auto& path = call.path;
  if (path.size() == 1 && call.is(beast_http::verb::put)) co_return co_await create_database(call);
  if (path.size() == 1 && call.is(beast_http::verb::delete_))
    co_return co_await delete_database(call);

  const core::DbRef db = open_db_or_throw(call);
  if (path.size() == 1) {
    if (is_get(call)) co_return database_info(call);
    if (call.is(beast_http::verb::post)) co_return co_await post_document(call, db);
    throw_method_not_allowed(kDbMethods);
  }

  const std::string& op = path[1];
  // CouchDB's db_handler table matches these whatever follows them; chttpd_auth_request wants a
  // db admin for them, and says so with a 401 whoever asks.
  if ((op == "_compact" || op == "_view_cleanup") && !core::is_db_admin(call.user, *call.security))
    throw HttpError(err::unauthorized("You are not a server or db admin."));
  if (op == "_compact") co_return co_await compact(call, db);
  if (op == "_view_cleanup") co_return co_await view_cleanup(call, db);
  if (path.size() == 2) {
    if (op == "_bulk_docs") co_return co_await bulk_docs(call, db);
    if (op == "_bulk_get") co_return co_await handle_bulk_get(call, db);
    if (op == "_revs_diff") co_return co_await revs_diff(call, false);
    if (op == "_missing_revs") co_return co_await revs_diff(call, true);
    if (op == "_revs_limit") co_return co_await revs_limit(call, db);
    if (op == "_security") co_return co_await security(call, db);
    if (op == "_purge" || op == "_purged_infos" || op == "_purged_infos_limit")
      co_return co_await handle_purge(call, db);
    if (op == "_ensure_full_commit") {
      if (!call.is(beast_http::verb::post)) throw_method_not_allowed("POST");
      require_json_content_type(call);
      co_return json_response(call.req, Status::created,
                              {{"ok", true}, {"instance_start_time", "0"}});
    }
  }
  if (op == "_find" || op == "_explain" || op == "_index")
    co_return co_await handle_mango(call, db);
  if (op == "_temp_view")  // any method, as chttpd_view:handle_temp_view_req
    throw HttpError(err::gone("Temporary views are not supported in CouchDB"));
  if (not_implemented(op)) throw HttpError(err::not_implemented());
  // CouchDB treats any other "/{db}/_xxx[/...]" as a document (or attachment) path: GET finds no
  // such document, PUT is refused for its id.
  co_return co_await handle_document(call);
}

}  // namespace chaise::http
