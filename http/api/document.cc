// http/api/document.cc — /{db}/{docid}, /{db}/_design/{name} and /{db}/_local/{name}:
// CouchDB's chttpd_db:db_doc_req (GET/HEAD, PUT, DELETE, COPY, POST), documents with their
// attachments as JSON or multipart both ways. Attachment paths are http/api/attachments.cc's.
//
// Behaviour follows apache/couchdb src/chttpd/src/chttpd_db.erl (db_doc_req, couch_doc_from_req,
// extract_header_rev, parse_doc_query, send_doc, send_docs_multipart) and couch_doc.erl.
//
// Every read is one snapshot transaction; every write is one DocWriteBatch run by run_doc_batch,
// so the io thread never waits for a commit.
#include <algorithm>
#include <array>
#include <boost/beast/http/field.hpp>
#include <cassert>
#include <cctype>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/batch/doc_batches.h"
#include "core/docs/documents.h"
#include "core/security/replicator_docs.h"
#include "core/util/ascii.h"
#include "core/util/json_text.h"
#include "http/api/doc_request.h"
#include "http/api/etag.h"
#include "http/api/idempotency.h"
#include "http/api/js_request.h"
#include "http/api/request.h"
#include "http/api/router.h"
#include "http/auth/auth.h"
#include "http/transport/multipart.h"
#include "http/transport/multipart_reader.h"

namespace chaise::http {
namespace {

using beast_http::field;
using beast_http::verb;

constexpr std::string_view kDocMethods = "DELETE,GET,HEAD,POST,PUT,COPY";

// Design document actions CouchDB serves under /{db}/_design/{name}/{action}; not in Chaise yet.
constexpr std::array<std::string_view, 10> kDesignActions = {
    "_view",    "_info",   "_show",        "_list",    "_update",
    "_rewrite", "_search", "_search_info", "_nouveau", "_nouveau_info"};

// The attachment options of a read.
void set_att_options(core::DocReadOptions& o, const DocQuery& q) {
  o.attachments = q.attachments;
  o.att_encoding_info = q.att_encoding_info;
  if (q.atts_since) {
    std::vector<core::RevId> since;
    for (const std::string& text : *q.atts_since)
      if (auto r = core::RevId::parse(text)) since.push_back(std::move(*r));
    o.atts_since = std::move(since);
  }
}

// A document and the bytes of its "follows" attachments as one multipart/related body
// (couch_doc:doc_to_multi_part_stream): the JSON part first, then one part per attachment.
BodyPlan multipart_related_plan(std::string_view json, const std::vector<core::AttInfo>& follows,
                                std::string_view boundary) {
  BodyPlan plan;
  std::string text;
  append_part(text, boundary, {{"Content-Type", "application/json"}}, json);
  for (const core::AttInfo& a : follows) {
    // The part's delimiter and headers (append_part with an empty body, less its CRLF), the
    // bytes, then the CRLF.
    append_part(text, boundary,
                attachment_part_headers(a.name, a.content_type,
                                        static_cast<std::size_t>(a.encoded_length), a.encoding),
                "");
    text.resize(text.size() - 2);
    plan.text(text);
    text.clear();
    plan.att(a);
    text = "\r\n";
  }
  append_close(text, boundary);
  plan.text(text);
  return plan;
}

// The answer `head` with `plan` as its body: assembled when small (or for HEAD, which only needs
// its length); when large, the plan goes to `deferred` for the caller to stream (write_body_plan)
// and the head is returned without a body.
Response finish_with_plan(const Call& call, storage::Transaction& tr, const core::DbRef& db,
                          Response head, BodyPlan plan, BodyPlan* deferred) {
  if (call.is(verb::head)) {
    head.content_length(plan.size());
    return head;
  }
  if (deferred != nullptr && plan.att_bytes > kBodyPlanWholeBytesMax) {
    *deferred = std::move(plan);
    return head;
  }
  auto body = materialize_body_plan(tr, db, plan);
  if (!body.ok()) return storage_error_response(call.req, body.error());
  head.body() = std::move(*body);
  head.prepare_payload();
  return head;
}

// ---- open_revs ---------------------------------------------------------------------------------

struct OpenRevsResult {
  std::vector<std::string> ok;       // serialized documents
  std::vector<std::string> missing;  // rev strings
  // Multipart answers with attachments: ok[i] as a whole multipart/related part body, with its
  // boundary (empty when the document has no attachment bytes to send).
  std::vector<BodyPlan> related;
  std::vector<std::string> related_boundary;
};

// chttpd_db:send_docs_multipart: every document is its own application/json part (it would be a
// nested multipart/related with attachments); a missing rev is an error="true" part.
Response open_revs_multipart(const Call& call, storage::Transaction& tr, const core::DbRef& db,
                             OpenRevsResult& r, BodyPlan* deferred) {
  const std::string b = make_boundary();
  BodyPlan plan;
  plan.text("--" + b);
  for (std::size_t i = 0; i < r.ok.size(); ++i) {
    if (i < r.related_boundary.size() && !r.related_boundary[i].empty()) {
      plan.text("\r\nContent-Type: multipart/related; boundary=\"" + r.related_boundary[i] +
                "\"\r\n\r\n");
      plan.append(std::move(r.related[i]));
      plan.text("\r\n--" + b);
    } else {
      plan.text("\r\nContent-Type: application/json\r\n\r\n" + r.ok[i] + "\r\n--" + b);
    }
  }
  for (const std::string& rev : r.missing)
    plan.text("\r\nContent-Type: application/json; error=\"true\"\r\n\r\n{\"missing\":" +
              core::json_string(rev) + "}\r\n--" + b);
  plan.text("--");
  Response resp{Status::ok, call.req.version()};
  resp.set(field::server, kServerHeader);
  resp.set(field::date, http_date_now());
  resp.set(field::content_type, "multipart/mixed; boundary=\"" + b + "\"");
  resp.set(field::cache_control, "must-revalidate");
  resp.keep_alive(call.req.keep_alive());
  return finish_with_plan(call, tr, db, std::move(resp), std::move(plan), deferred);
}

Response open_revs_response(const Call& call, storage::Transaction& tr, const core::DbRef& db,
                            OpenRevsResult& r, BodyPlan* deferred) {
  const Request& req = call.req;
  if (accepts_media_type(req, "multipart/mixed"))
    return open_revs_multipart(call, tr, db, r, deferred);
  std::string body = "[";
  for (const std::string& doc : r.ok) {
    if (body.size() > 1) body.push_back(',');
    body += "{\"ok\":" + doc + "}";
  }
  for (const std::string& rev : r.missing) {
    if (body.size() > 1) body.push_back(',');
    body += "{\"missing\":" + core::json_string(rev) + "}";
  }
  body.push_back(']');
  return raw_json_response(req, Status::ok, std::move(body));
}

// fabric:open_revs as chttpd answers it: the found leaves first, sorted by (pos, hash) and without
// duplicates, then the missing revisions, sorted the same way. Documents carry no meta members
// (couch_db:open_doc_revs does not compute them); `revs` is honoured.
storage::Result<OpenRevsResult> read_open_revs(storage::Transaction& tr, const core::DbRef& db,
                                               std::string_view id,
                                               const std::vector<core::StoredBranch>& all,
                                               const std::optional<std::vector<core::RevId>>& revs,
                                               const DocQuery& q, bool multipart,
                                               const ReadRule& fields) {
  auto [found, missing] = core::select_open_revs(all, revs, q.latest);
  core::DocReadOptions o;
  fields.apply(o);
  o.revs = q.revs;
  set_att_options(o, q);
  // chttpd_db:send_docs_multipart always sends attachment bodies (only atts_since leaves some as
  // stubs): CouchDB's replicator asks for open_revs without attachments=true and relies on it.
  if (multipart) o.attachments = o.att_encoding_info = true;
  o.att_follows = multipart;
  OpenRevsResult out;
  for (const core::StoredBranch* b : found) {
    core::RenderedAtts rendered;
    auto json = core::branch_doc_json(tr, db, id, all, *b, o, &rendered);
    const std::vector<core::AttInfo>& follows = rendered.follows;
    if (!json.ok()) return json.error();
    if (json->empty()) {  // nothing of it is public (CouchDB answers 500 function_clause)
      out.missing.push_back(b->branch.leaf.str());
      continue;
    }
    if (multipart) {
      std::string boundary;
      BodyPlan related;
      if (!follows.empty()) {
        boundary = make_boundary();
        related = multipart_related_plan(*json, follows, boundary);
      }
      out.related.push_back(std::move(related));
      out.related_boundary.push_back(std::move(boundary));
    }
    out.ok.push_back(std::move(*json));
  }
  for (const core::RevId& rev : missing) out.missing.push_back(rev.str());
  return out;
}

// ---- GET / HEAD --------------------------------------------------------------------------------

std::vector<core::RevId> open_revs_ids(const DocQuery& q) {
  std::vector<core::RevId> revs;
  for (const std::string& text : *q.open_revs) revs.push_back(parse_rev_or_throw(text));
  return revs;
}

// chttpd_db:send_doc_efficiently: with attachments asked for and a client that accepts
// multipart/related, the document and its attachment bytes as one multipart/related body;
// otherwise JSON (attachment bytes inline as base64 when asked for).
Response send_doc(const Call& call, storage::Transaction& tr, const core::DbRef& db,
                  const std::string& id, const std::vector<core::StoredBranch>& all,
                  const core::StoredBranch& b, core::DocReadOptions o,
                  const std::optional<std::string>& etag, BodyPlan* deferred) {
  // A document only partly public is answered 304 only once it is known to be readable at all.
  if (etag && !o.public_fields && if_none_match_has(call.req, *etag))
    return not_modified(call.req, *etag);
  const bool want_data = o.attachments || o.atts_since.has_value();
  const bool multipart = want_data && accepts_media_type(call.req, "multipart/related");
  // Rendered once, in the form a multipart answer needs; a document without attachments looks
  // the same either way and is answered as JSON (send_doc_efficiently's atts = [] clause).
  if (multipart) o.att_follows = o.att_encoding_info = true;
  core::RenderedAtts rendered;
  auto json = core::branch_doc_json(tr, db, id, all, b, o, &rendered);
  if (!json.ok()) return storage_error_response(call.req, json.error());
  if (json->empty()) throw HttpError(err::not_found());  // none of its fields is public
  if (etag && o.public_fields && if_none_match_has(call.req, *etag))
    return not_modified(call.req, *etag);
  if (!multipart || !rendered.any) return doc_response(call.req, std::move(*json), etag);
  const std::string boundary = make_boundary();
  BodyPlan plan = multipart_related_plan(*json, rendered.follows, boundary);
  Response r{Status::ok, call.req.version()};
  r.set(field::server, kServerHeader);
  r.set(field::date, http_date_now());
  r.set(field::content_type, "multipart/related; boundary=\"" + boundary + "\"");
  r.set(field::cache_control, "must-revalidate");
  if (etag) r.set(field::etag, *etag);
  r.keep_alive(call.req.keep_alive());
  return finish_with_plan(call, tr, db, std::move(r), std::move(plan), deferred);
}

// The winning revision, all leaves when conflicts are asked for; the doc's meta members decide
// whether CouchDB sends an ETag (send_doc: only when the document has no meta).
Response get_winner(const Call& call, storage::Transaction& tr, const core::DbRef& db,
                    const std::string& id, const DocQuery& q, const ReadRule& fields,
                    BodyPlan* deferred) {
  // A GET without options of a live document without attachments needs neither the revision's
  // path nor its attachment entries: core::plain_doc_json reads only the winner's name and body.
  const bool plain = !q.conflicts && !q.deleted_conflicts && !q.revs && !q.revs_info &&
                     !q.local_seq && !q.attachments && !q.att_encoding_info && !q.atts_since &&
                     !fields.public_fields && !fields.replication_reader;
  if (plain) {
    auto doc = core::plain_doc_json(tr, db, id);
    if (!doc.ok()) return storage_error_response(call.req, doc.error());
    if (*doc) {
      const std::string etag = dquote((*doc)->rev.str());
      if (if_none_match_has(call.req, etag)) return not_modified(call.req, etag);
      return doc_response(call.req, std::move((*doc)->json), etag);
    }
  }
  std::vector<core::StoredBranch> all;
  if (q.conflicts || q.deleted_conflicts) {
    auto r = core::read_branches(tr, db, id, storage::Snapshot::yes);
    if (!r.ok()) return storage_error_response(call.req, r.error());
    all = std::move(*r);
  } else {
    auto w = core::read_winner(tr, db, id, storage::Snapshot::yes);
    if (!w.ok()) return storage_error_response(call.req, w.error());
    if (*w) all.push_back(std::move(**w));
  }
  // Answered, not thrown: unwinding made a GET of a missing document cost 60% more server CPU
  // than one of a present document (35-37 us against 22).
  if (all.empty()) return error_response(call.req, err::not_found());
  const core::StoredBranch& winner = all.back();
  if (winner.branch.deleted && !q.deleted) return error_response(call.req, err::doc_deleted());
  core::DocReadOptions o;
  fields.apply(o);
  o.revs = q.revs;
  o.revs_info = q.revs_info;
  o.conflicts = q.conflicts;
  o.deleted_conflicts = q.deleted_conflicts;
  o.local_seq = q.local_seq;
  set_att_options(o, q);
  bool meta = q.revs_info || q.local_seq;
  for (std::size_t i = 0; i + 1 < all.size(); ++i) {
    const bool deleted = all[i].branch.deleted;
    meta = meta || (deleted ? q.deleted_conflicts : q.conflicts);
  }
  std::optional<std::string> etag;
  if (!meta) etag = dquote(winner.branch.leaf.str());
  return send_doc(call, tr, db, id, all, winner, o, etag, deferred);
}

// A large multipart answer leaves its body in `deferred` for the caller to stream.
// `tr`: the transaction the database was opened in.
Response get_doc(const Call& call, storage::Transaction& tr, const core::DbRef& db, const Target& t,
                 const DocQuery& q, BodyPlan* deferred) {
  // In _users, 403 for another's design document before anything is read.
  const ReadRule fields = read_rule(call, db, t.id);
  if (q.open_revs || q.open_revs_all) {
    std::optional<std::vector<core::RevId>> revs;
    if (q.open_revs) revs = open_revs_ids(q);
    auto all = core::read_branches(tr, db, t.id, storage::Snapshot::yes);
    if (!all.ok()) return storage_error_response(call.req, all.error());
    if (!revs && all->empty()) throw HttpError(err::not_found());
    const bool multipart = accepts_media_type(call.req, "multipart/mixed");
    auto r = read_open_revs(tr, db, t.id, *all, revs, q, multipart, fields);
    if (!r.ok()) return storage_error_response(call.req, r.error());
    return open_revs_response(call, tr, db, *r, deferred);
  }
  if (q.rev_text && !q.latest) {
    // A specific revision (couch_doc_open through open_revs): tombstones too, no meta members.
    core::DocReadOptions o;
    fields.apply(o);
    o.revs = q.revs;
    o.rev = parse_rev_or_throw(*q.rev_text);
    set_att_options(o, q);
    auto all = core::read_branches(tr, db, t.id, storage::Snapshot::yes);
    if (!all.ok()) return storage_error_response(call.req, all.error());
    auto found = core::find_revision(tr, db, t.id, *all, *o.rev);
    if (!found.ok()) return storage_error_response(call.req, found.error());
    if (!*found) throw HttpError(err::not_found());
    return send_doc(call, tr, db, t.id, *all, **found, o, dquote(o.rev->str()), deferred);
  }
  return get_winner(call, tr, db, t.id, q, fields, deferred);
}

// get_doc, with a large multipart body streamed.
MaybeResponse get_doc_answer(Call& call, storage::Transaction& tr, const core::DbRef& db,
                             const Target& t, const DocQuery& q) {
  BodyPlan deferred;
  Response head = get_doc(call, tr, db, t, q, &deferred);
  if (deferred.pieces.empty()) co_return head;
  head.body().clear();
  if (!co_await call.stream.begin(std::move(head))) co_return std::nullopt;
  if (co_await write_body_plan(call, db, deferred)) co_await call.stream.finish();
  co_return std::nullopt;
}

// The "0-N" rev of a document spliced by core::get_local_json ({"_id":..,"_rev":"0-N",...}).
std::string spliced_rev(std::string_view json, std::string_view id) {
  const std::size_t start = 7 + core::json_string(id).size() + 9;  // {"_id":<id>,"_rev":"
  const std::size_t end = json.find('"', start);
  return std::string(json.substr(start, end - start));
}

Response get_local(const Call& call, const core::DbRef& db, const Target& t, const DocQuery& q) {
  // Local documents live outside the revision tree, so open_revs and ?rev= (which CouchDB looks up
  // in that tree) never find them.
  if (q.open_revs_all) throw HttpError(err::not_found());
  if (q.open_revs) {
    OpenRevsResult r;
    for (const std::string& rev : *q.open_revs) r.missing.push_back(local_rev_or_throw(rev));
    auto tr = call.store().create_transaction();
    return open_revs_response(call, tr, db, r, nullptr);
  }
  if (q.rev_text && !q.latest) throw HttpError(err::not_found());
  auto tr = call.store().create_transaction();
  auto r = core::get_local_json(tr, db, t.id);
  if (!r.ok()) return storage_error_response(call.req, r.error());
  // A missing checkpoint (every replication's first read) answered, not thrown.
  if (core::failed(*r)) return error_response(call.req, std::get<core::CouchError>(*r));
  std::string json = std::get<std::string>(std::move(*r));
  const std::string etag = local_etag(json);
  if (q.revs) {
    const std::string rev = spliced_rev(json, t.id);
    json.pop_back();
    json += ",\"_revisions\":{\"start\":0,\"ids\":[" + core::json_string(rev.substr(2)) + "]}}";
  }
  return doc_response(call.req, std::move(json), etag);
}

// ---- Writes ------------------------------------------------------------------------------------

struct WriteResult {
  core::DocWriteBatch::ItemResult outcome = core::CouchError{};
  std::string local_rev;
};

// A refused write (409 conflict, 403 forbidden, ...) answered as the router answers a thrown
// error, without the throw: unwinding cost a 409 about as much server CPU as a PUT that writes.
// A 401 is still thrown, for the login headers the router adds to it.
std::optional<Response> refusal(const Call& call, const WriteResult& w) {
  const auto* e = std::get_if<core::CouchError>(&w.outcome);
  if (e == nullptr) return std::nullopt;
  if (e->status == 401) throw HttpError(*e);
  return error_response(call.req, *e);
}

// Writes one item and answers with render(its result), or with its refusal (see write_and_render:
// with an Idempotency-Key the answer is rendered inside the write transaction and stored with it).
boost::asio::awaitable<Response> write_one(Call& call, core::DocWriteBatch::Item item,
                                           std::function<Response(const WriteResult&)> render) {
  std::vector<core::DocWriteBatch::Item> items;
  items.push_back(std::move(item));
  core::DocWriteBatch batch(call.path.at(0), std::move(items));
  const bool batch_ok = call.query.get("batch") == "ok";  // answered 202 whatever the outcome
  co_return co_await write_and_render(call, batch, [&](const core::DocWriteBatch& b) {
    assert(b.results().size() == 1 && b.results()[0].has_value());
    WriteResult w{*b.results()[0], b.local_revs()[0]};
    if (!batch_ok) {
      if (auto refused = refusal(call, w)) return std::move(*refused);
    }
    return render(w);
  });
}

// `body_term`: ParsedDoc::body_term of `body`, when the body came from one.
core::DocWriteBatch::Item interactive_item(std::string id, std::optional<core::RevId> base,
                                           bool deleted, std::string body,
                                           std::string body_term = {}) {
  core::DocWriteBatch::Item it;
  it.update = core::DocUpdate{std::move(id),       std::move(base), deleted, std::move(body), {},
                              std::move(body_term)};
  return it;
}

core::DocWriteBatch::Item local_item(std::string id, std::optional<std::string> base, bool deleted,
                                     std::string body) {
  core::DocWriteBatch::Item it;
  it.local = true;
  it.local_rev = std::move(base);
  it.update = core::DocUpdate{std::move(id), std::nullopt, deleted, std::move(body), {}};
  return it;
}

// The text of the new revision, or throws the per-document error (a 401, or a refusal of a
// batch=ok write that is not a PUT: see write_one).
std::string written_rev(const WriteResult& w) {
  if (const auto* e = std::get_if<core::CouchError>(&w.outcome)) throw HttpError(*e);
  if (!w.local_rev.empty()) return w.local_rev;
  return std::get<core::UpdateResult>(w.outcome).rev.str();
}

// The request body as a JSON value (not yet known to be an object).
Json request_json(const Request& req) {
  if (req.body().empty() && !req.has_content_length() && !req.chunked())
    throw HttpError(err::bad_request("Missing request body"));
  return parse_json_body(req, false, core::JsonNumbers::exact);
}

void check_size(const Call& call, const core::ParsedDoc& d) {
  if (d.body.size() > call.ctx.max_document_size)
    throw HttpError(err::document_too_large(d.id.value_or("")));  // couch_doc: the body's _id
}

core::ParsedDoc parse_doc_or_throw(const Json& j, bool with_body_term = false) {
  auto parsed = core::parse_doc(j, with_body_term);
  if (auto* e = std::get_if<core::CouchError>(&parsed)) throw HttpError(std::move(*e));
  return std::get<core::ParsedDoc>(std::move(parsed));
}

bool has_attachments(const core::ParsedDoc& d) { return d.attachments && !d.attachments->empty(); }

MaybeResponse put_local(Call& call, const Target& t, const DocQuery& q, Json j) {
  // _local revisions are "0-N", which RevId (pos >= 1) does not represent: take _rev out first.
  std::optional<std::string> body_rev;
  if (j.is_object() && j.contains("_rev")) {
    const Json& r = j["_rev"];
    if (!r.is_string()) throw_invalid_rev();
    body_rev = local_rev_or_throw(r.get_ref<const std::string&>());
    j.erase("_rev");
  }
  // CouchDB keeps neither the history nor the attachments of a _local document: _revisions
  // (start 0 is fine there) and _attachments are dropped.
  if (j.is_object() && j.contains("_revisions")) {
    const Json& r = j["_revisions"];
    if (!body_rev && r.is_object() && r.contains("ids") && r["ids"].is_array() &&
        !r["ids"].empty() && r["ids"][0].is_string())
      body_rev = local_rev_or_throw("0-" + r["ids"][0].get<std::string>());
    j.erase("_revisions");
  }
  if (j.is_object()) j.erase("_attachments");
  core::ParsedDoc d = parse_doc_or_throw(j);
  check_size(call, d);
  std::optional<std::string> qs_rev, im_rev;
  if (auto r = call.query.get("rev")) qs_rev = local_rev_or_throw(*r);
  if (auto r = if_match_text(call.req)) im_rev = local_rev_or_throw(*r);
  auto base = merge_revs(body_rev, qs_rev, im_rev);
  if (!q.new_edits && !base)
    throw HttpError(err::bad_request(
        "When `new_edits: false`, the document needs `_rev` or `_revisions` specified"));
  const bool deleted = d.deleted;
  co_return co_await write_one(
      call, local_item(t.id, base, deleted, d.body), [&](const WriteResult& w) -> Response {
        if (call.query.get("batch") == "ok")
          return json_response(call.req, Status::accepted, Json{{"ok", true}, {"id", t.id}});
        const std::string rev = written_rev(w);
        const std::string etag = local_etag(core::splice_doc(d.body, t.id, rev, {}));
        return update_response(call, deleted ? Status::ok : Status::created, t.id, rev, etag,
                               doc_location(call, t.id));
      });
}

// The item a PUT of a regular document writes: an interactive edit or, with new_edits=false, the
// given revision path (from _revisions, else just the revision).
core::DocWriteBatch::Item put_item(const Call& call, const Target& t, const DocQuery& q,
                                   core::ParsedDoc d) {
  std::optional<core::RevId> qs_rev, im_rev;
  if (auto r = call.query.get("rev")) qs_rev = parse_rev_or_throw(*r);
  if (auto r = if_match_text(call.req)) im_rev = parse_rev_or_throw(*r);
  const bool from_body = d.rev.has_value();
  auto rev = merge_revs(d.rev, qs_rev, im_rev);
  if (q.new_edits)
    return interactive_item(t.id, std::move(rev), d.deleted, std::move(d.body),
                            std::move(d.body_term));
  if (!rev)
    throw HttpError(err::bad_request(
        "When `new_edits: false`, the document needs `_rev` or `_revisions` specified"));
  core::DocWriteBatch::Item it;
  it.replicated = true;
  it.replicated_doc.id = t.id;
  if (from_body && d.revisions) {
    it.replicated_doc.path = std::move(*d.revisions);
  } else {
    it.replicated_doc.path.leaf = std::move(*rev);
  }
  it.replicated_doc.path.deleted = d.deleted;
  it.replicated_doc.body = std::move(d.body);
  return it;
}

// The JSON document of a PUT, and for multipart/related (couch_doc:doc_from_multi_part_stream)
// the parts after it, which hold the bytes of the "follows" attachments in document order.
Json put_body(const Call& call, std::vector<MultipartPart>& parts) {
  const std::string_view ctype = call.req[field::content_type];
  if (!core::ascii_lower(ctype).starts_with("multipart/related")) return request_json(call.req);
  auto boundary = multipart_boundary(ctype);
  if (!boundary)
    throw HttpError(err::bad_request("Invalid multipart/related request: no boundary"));
  auto parsed = parse_multipart(call.req.body(), *boundary);
  if (!parsed || parsed->empty())
    throw HttpError(err::bad_request("Invalid multipart/related request body"));
  parts = std::move(*parsed);
  return parse_json_or_throw(parts.front().body, core::JsonNumbers::exact);
}

// The attachments of a document to write, their "follows" bytes taken from `parts` (after the
// first) in order.
std::vector<core::AttUpload> upload_atts(const Call& call, const core::ParsedDoc& d,
                                         const std::vector<MultipartPart>& parts) {
  if (!has_attachments(d)) return {};
  auto parsed = core::parse_attachments_json(*d.attachments, call.ctx.max_attachment_size);
  if (auto* e = std::get_if<core::CouchError>(&parsed)) throw HttpError(std::move(*e));
  auto atts = std::get<std::vector<core::AttUpload>>(std::move(parsed));
  std::size_t next = 1;
  for (core::AttUpload& u : atts) {
    if (!u.follows) continue;
    if (next >= parts.size())
      throw HttpError(err::bad_request("Attachment data missing for " + u.name));
    const std::string_view bytes = parts[next++].body;
    if (bytes.size() > call.ctx.max_attachment_size)
      throw HttpError(err::attachment_too_large(u.name));
    if (!u.follows_encoding.empty()) {
      // Encoded bytes (CouchDB's replicator sends gzip-stored attachments as they are stored).
      if (u.follows_encoded_length >= 0 &&
          static_cast<std::size_t>(u.follows_encoded_length) != bytes.size())
        throw HttpError(err::bad_request("Attachment length mismatch for " + u.name));
      if (u.follows_length < 0)
        throw HttpError(err::bad_request("Attachment length missing for " + u.name));
      core::set_att_encoded_data(u, std::string(bytes), u.follows_encoding, u.follows_length);
      continue;
    }
    if (u.follows_length >= 0 && static_cast<std::size_t>(u.follows_length) != bytes.size())
      throw HttpError(err::bad_request("Attachment length mismatch for " + u.name));
    core::set_att_data(u, std::string(bytes));
  }
  return atts;
}

// The document of a PUT, checked: the write rules of its database, its size, a design
// document's validity. May rewrite `j` (_users, _replicator). `new_edits`: an interactive edit,
// which gets ParsedDoc::body_term.
core::ParsedDoc checked_put_doc(const Call& call, const core::DbRef& db, const Target& t, Json& j,
                                bool new_edits) {
  if (j.is_object()) {
    // Only _users and _replicator rewrite the document; elsewhere the rules read just its id,
    // and a copy of the whole document was 2% of a PUT.
    const bool rewrite = db.name == core::kUsersDb || db.name == core::kReplicatorDb;
    Json checked = rewrite ? j : Json::object();
    checked["_id"] = t.id;
    if (auto e = check_doc_write(call, db, checked)) throw HttpError(std::move(*e));
    if (rewrite) j = std::move(checked);
  }
  core::ParsedDoc d = parse_doc_or_throw(j, new_edits);
  check_size(call, d);
  if (auto e = core::validate_design_doc(t.id, j, core::Partitioned{db.partitioned}))
    throw HttpError(std::move(*e));
  if (auto e = check_design_functions(call, t.id, j)) throw HttpError(std::move(*e));
  return d;
}

// A streamed multipart/related PUT (streams_request_body: the replicator's upload of a document
// with large attachments): the document part is read whole, each "follows" attachment is streamed
// into storage as its part arrives. `own` collects the addresses of bytes written here.
boost::asio::awaitable<std::pair<core::ParsedDoc, std::vector<core::AttUpload>>> streamed_put(
    Call& call, const core::DbRef& db, const Target& t, bool new_edits,
    std::vector<std::string>& own) {
  const std::string_view ctype = call.req[field::content_type];
  auto boundary = multipart_boundary(ctype);
  if (!boundary)
    throw HttpError(err::bad_request("Invalid multipart/related request: no boundary"));
  MultipartReader reader(
      [&call](std::string& out, std::size_t max) { return call.stream.read_body(out, max); },
      *boundary);
  std::vector<std::pair<std::string, std::string>> headers;
  if (!co_await reader.next_part(headers))
    throw HttpError(err::bad_request("Invalid multipart/related request body"));
  std::string text;
  // The JSON part: a document, with its attachments as stubs or "follows".
  const std::size_t text_max = call.ctx.max_document_size + (1u << 20);
  while (co_await reader.read(text, 256 * 1024) > 0) {
    if (text.size() > text_max) throw HttpError(err::too_large());
  }
  Json j = parse_json_or_throw(text, core::JsonNumbers::exact);
  text = std::string();
  core::ParsedDoc d = checked_put_doc(call, db, t, j, new_edits);
  std::vector<core::AttUpload> atts;
  if (!has_attachments(d)) co_return std::make_pair(std::move(d), std::move(atts));
  auto parsed = core::parse_attachments_json(*d.attachments, call.ctx.max_attachment_size);
  if (auto* e = std::get_if<core::CouchError>(&parsed)) throw HttpError(std::move(*e));
  atts = std::get<std::vector<core::AttUpload>>(std::move(parsed));
  const AttPull pull = [&reader](
                           std::string& out,
                           std::size_t max) -> boost::asio::awaitable<std::optional<std::size_t>> {
    co_return co_await reader.read(out, max);
  };
  for (core::AttUpload& u : atts) {
    if (!u.follows) continue;
    if (!co_await reader.next_part(headers))
      throw HttpError(err::bad_request("Attachment data missing for " + u.name));
    core::AttUpload up = u;
    if (!u.follows_encoding.empty()) {
      // Encoded bytes (CouchDB's replicator sends gzip-stored attachments as they are stored).
      if (u.follows_length < 0)
        throw HttpError(err::bad_request("Attachment length missing for " + u.name));
      up.info.encoding = u.follows_encoding;
      up.info.length = u.follows_length;
    }
    std::string address;
    up = co_await stream_attachment(call, db, std::move(up), pull, address);
    if (!address.empty()) own.push_back(address);
    const bool mismatch =
        u.follows_encoding.empty()
            ? u.follows_length >= 0 && u.follows_length != up.info.length
            : u.follows_encoded_length >= 0 && u.follows_encoded_length != up.info.encoded_length;
    if (mismatch) throw HttpError(err::bad_request("Attachment length mismatch for " + u.name));
    u = std::move(up);
  }
  co_return std::make_pair(std::move(d), std::move(atts));
}

MaybeResponse put_doc_write(Call& call, const core::DbRef& db, const Target& t, const DocQuery& q,
                            core::ParsedDoc d, std::vector<core::AttUpload> atts);

MaybeResponse put_doc(Call& call, const core::DbRef& db, const Target& t, const DocQuery& q) {
  if (auto e = core::validate_docid(t.id)) throw HttpError(std::move(*e));
  if (call.stream.body_streamed() && !t.local) {
    // Whatever goes wrong, the bytes streamed for an edit that did not happen must not stay.
    std::vector<std::string> own;
    std::exception_ptr failed;
    std::optional<Response> answer;
    try {
      auto [d, atts] = co_await streamed_put(call, db, t, q.new_edits, own);
      answer = co_await put_doc_write(call, db, t, q, std::move(d), std::move(atts));
    } catch (...) {
      failed = std::current_exception();
    }
    // (Also when the answer is one stored under an Idempotency-Key: this edit was not made.)
    if (failed || !answer || answer->result_int() >= 300 ||
        answer->find("Idempotent-Replayed") != answer->end()) {
      for (const std::string& address : own) co_await drop_streamed_attachment(call, db, address);
    }
    if (failed) std::rethrow_exception(failed);
    co_return answer;
  }
  std::vector<MultipartPart> parts;
  Json j = put_body(call, parts);
  if (t.local) co_return co_await put_local(call, t, q, std::move(j));
  core::ParsedDoc d = checked_put_doc(call, db, t, j, q.new_edits);
  std::vector<core::AttUpload> atts = upload_atts(call, d, parts);
  co_return co_await put_doc_write(call, db, t, q, std::move(d), std::move(atts));
}

MaybeResponse put_doc_write(Call& call, const core::DbRef& db, const Target& t, const DocQuery& q,
                            core::ParsedDoc d, std::vector<core::AttUpload> atts) {
  const bool deleted = d.deleted;
  auto item = put_item(call, t, q, std::move(d));
  auto& item_atts = item.replicated ? item.replicated_doc.atts : item.update.atts;
  item_atts = std::move(atts);
  if (storage::Status s = co_await preupload_attachments(call, db, item_atts); !s.ok())
    co_return storage_error_response(call.req, s.error());
  co_return co_await write_one(call, std::move(item), [&](const WriteResult& w) -> Response {
    if (call.query.get("batch") == "ok") {
      // CouchDB writes batch=ok documents in the background and never reports their errors.
      return json_response(call.req, Status::accepted, Json{{"ok", true}, {"id", t.id}});
    }
    const std::string rev = written_rev(w);
    return update_response(call, deleted ? Status::ok : Status::created, t.id, rev, dquote(rev),
                           doc_location(call, t.id));
  });
}

// ---- DELETE ------------------------------------------------------------------------------------

MaybeResponse delete_doc(Call& call, const core::DbRef& db, const Target& t) {
  // CouchDB opens the document first: 404 missing (or deleted) before looking at the revision.
  auto tr = call.store().create_transaction();
  if (t.local) {
    auto r = core::get_local_json(tr, db, t.id);
    if (!r.ok()) co_return storage_error_response(call.req, r.error());
    if (core::failed(*r)) throw HttpError(std::get<core::CouchError>(*r));
    std::optional<std::string> qs_rev, im_rev;
    if (auto r2 = call.query.get("rev")) qs_rev = local_rev_or_throw(*r2);
    if (auto r2 = if_match_text(call.req)) im_rev = local_rev_or_throw(*r2);
    auto base = merge_revs(qs_rev, std::optional<std::string>{}, im_rev);
    co_return co_await write_one(
        call, local_item(t.id, base, true, "{}"), [&](const WriteResult& w) -> Response {
          const std::string rev = written_rev(w);
          return update_response(call, Status::ok, t.id, rev,
                                 local_etag(core::splice_doc("{}", t.id, rev, {})));
        });
  }
  auto winner = core::read_winner(tr, db, t.id, storage::Snapshot::yes);
  if (!winner.ok()) co_return storage_error_response(call.req, winner.error());
  // Answered, not thrown (as refusal above).
  if (!*winner) co_return error_response(call.req, err::not_found());
  if ((*winner)->branch.deleted) co_return error_response(call.req, err::doc_deleted());
  // The tombstone's body: {} (in _replicator, with the "owner" the rules give it).
  std::string tombstone_body = "{}";
  {
    Json tombstone{{"_id", t.id}, {"_deleted", true}};
    if (auto e = check_doc_write(call, db, tombstone)) throw HttpError(std::move(*e));
    if (db.name == core::kReplicatorDb) {
      Json body = Json::object();
      for (auto it = tombstone.begin(); it != tombstone.end(); ++it)
        if (!it.key().starts_with('_')) body[it.key()] = it.value();
      tombstone_body = body.dump();
    }
  }
  std::optional<core::RevId> qs_rev, im_rev;
  if (auto r = call.query.get("rev")) qs_rev = parse_rev_or_throw(*r);
  if (auto r = if_match_text(call.req)) im_rev = parse_rev_or_throw(*r);
  auto base = merge_revs(qs_rev, std::optional<core::RevId>{}, im_rev);
  co_return co_await write_one(call, interactive_item(t.id, std::move(base), true, tombstone_body),
                               [&](const WriteResult& w) -> Response {
                                 const std::string rev = written_rev(w);
                                 return update_response(call, Status::ok, t.id, rev, dquote(rev));
                               });
}

// ---- COPY --------------------------------------------------------------------------------------

struct Destination {
  std::string id;
  std::optional<std::string> rev_text;
};

// couch_httpd_db:parse_copy_destination_header.
Destination parse_destination(const Request& req) {
  auto value = header_value(req, field::destination);
  if (!value) throw HttpError(err::bad_request("Destination header is mandatory for COPY."));
  if (value->starts_with("http://") || value->starts_with("https://"))
    throw HttpError(err::bad_request("Destination URL must be relative."));
  Destination d;
  const std::size_t qm = value->find('?');
  d.id = unquote_plus(std::string_view(*value).substr(0, qm));
  if (qm != std::string::npos) {
    std::string_view qs = std::string_view(*value).substr(qm + 1);
    const std::size_t eq = qs.find('=');
    // CouchDB needs exactly "key=rev" here (anything else is a badmatch, a 500 there).
    if (eq == std::string_view::npos || qs.find('=', eq + 1) != std::string_view::npos ||
        qs.find('?') != std::string_view::npos)
      throw_invalid_rev();
    d.rev_text = std::string(qs.substr(eq + 1));
  }
  return d;
}

struct SourceDoc {
  std::string body;
  bool deleted = false;
  std::vector<core::AttInfo> atts;  // copied by reference: their bytes are already stored
};

// couch_doc_open for COPY's source: the winner (404 missing / deleted) or the given revision.
std::optional<SourceDoc> read_source(const Call& call, storage::Transaction& tr,
                                     const core::DbRef& db, const std::string& id,
                                     const std::optional<core::RevId>& rev,
                                     std::optional<Response>& failure) {
  auto all = core::read_branches(tr, db, id, storage::Snapshot::yes);
  if (!all.ok()) return failure = storage_error_response(call.req, all.error()), std::nullopt;
  const core::StoredBranch* chosen = nullptr;
  if (rev) {
    for (const auto& b : *all)
      if (b.branch.leaf == *rev) chosen = &b;
    if (!chosen) throw HttpError(err::not_found());
  } else {
    if (all->empty()) throw HttpError(err::not_found());
    chosen = &all->back();
    if (chosen->branch.deleted) throw HttpError(err::doc_deleted());
  }
  auto rec = core::read_rev(tr, db, id, chosen->branch.leaf);
  if (!rec.ok()) return failure = storage_error_response(call.req, rec.error()), std::nullopt;
  if (!*rec) return SourceDoc{"{}", chosen->branch.deleted, {}};
  return SourceDoc{std::move((*rec)->body), chosen->branch.deleted, std::move((*rec)->atts)};
}

std::optional<SourceDoc> read_local_source(const Call& call, storage::Transaction& tr,
                                           const core::DbRef& db, const std::string& id,
                                           bool has_rev, std::optional<Response>& failure) {
  if (has_rev) throw HttpError(err::not_found());  // not in the revision tree (see get_local)
  auto r = core::get_local_json(tr, db, id);
  if (!r.ok()) return failure = storage_error_response(call.req, r.error()), std::nullopt;
  if (core::failed(*r)) throw HttpError(std::get<core::CouchError>(*r));
  Json j = Json::parse(std::get<std::string>(*r));
  j.erase("_id");
  j.erase("_rev");
  return SourceDoc{j.dump(-1, ' ', false, Json::error_handler_t::replace), false, {}};
}

MaybeResponse copy_doc(Call& call, const core::DbRef& db, const Target& t) {
  std::optional<std::string> src_rev_text;
  {
    std::optional<std::string> qs = call.query.get("rev"), im = if_match_text(call.req);
    std::optional<std::string> qs_norm, im_norm;
    if (qs) qs_norm = local_rev_or_throw(*qs);
    if (im) im_norm = local_rev_or_throw(*im);
    merge_revs(std::optional<std::string>{}, qs_norm, im_norm);  // 400 when they differ
    src_rev_text = qs ? qs : im;
  }
  const Destination dest = parse_destination(call.req);
  if (auto e = core::validate_docid(dest.id)) throw HttpError(std::move(*e));
  if (dest.id.starts_with("_design/") || db.name == core::kUsersDb) {
    // The copy's body is not known yet; a design destination needs a db admin, and _users
    // documents are written through PUT (their passwords must be hashed there).
    Json probe{{"_id", dest.id}};
    if (db.name == core::kUsersDb && !call.user.is_server_admin())
      throw HttpError(err::forbidden("Only admins may copy documents in the users database."));
    if (auto e = check_doc_write(call, db, probe); e && dest.id.starts_with("_design/"))
      throw HttpError(std::move(*e));
  }
  const bool dest_local = dest.id.starts_with(kLocalPrefix);
  std::optional<core::RevId> dest_rev;
  std::optional<std::string> dest_local_rev;
  if (dest.rev_text) {
    if (dest_local) {
      dest_local_rev = local_rev_or_throw(*dest.rev_text);
    } else {
      dest_rev = parse_rev_or_throw(*dest.rev_text);
    }
  }
  auto tr = call.store().create_transaction();
  std::optional<Response> failure;
  std::optional<SourceDoc> src;
  if (t.local) {
    src = read_local_source(call, tr, db, t.id, src_rev_text.has_value(), failure);
  } else {
    std::optional<core::RevId> rev;
    if (src_rev_text) rev = parse_rev_or_throw(*src_rev_text);
    src = read_source(call, tr, db, t.id, rev, failure);
  }
  if (failure) co_return std::move(failure);
  if (db.name == core::kReplicatorDb && !dest_local && !dest.id.starts_with("_design/")) {
    // The copy is a write of the source's body: _replicator's owner rule and validation apply.
    src->body = check_kept_body(call, db, dest.id, std::move(src->body), src->deleted);
  }
  auto item = dest_local ? local_item(dest.id, dest_local_rev, src->deleted, src->body)
                         : interactive_item(dest.id, dest_rev, src->deleted, src->body);
  // CouchDB copies the attachments too (a _local destination keeps none). Their bytes are in
  // this database already, so the new revision only names them (and counts a reference).
  if (!dest_local) {
    for (core::AttInfo& a : src->atts) {
      core::AttUpload u;
      u.name = a.name;
      u.info = std::move(a);
      u.preuploaded = true;
      item.update.atts.push_back(std::move(u));
    }
  }
  co_return co_await write_one(call, std::move(item), [&](const WriteResult& w) -> Response {
    const std::string rev = written_rev(w);
    return update_response(call, Status::created, dest.id, rev, dquote(rev),
                           doc_location(call, dest.id));
  });
}

// ---- POST (multipart/form-data uploads) --------------------------------------------------------

// The name of a multipart/form-data part and its file name (absent for a plain field).
struct FormField {
  std::string name;
  std::optional<std::string> filename;
};
FormField form_field(const MultipartPart& part) {
  const std::string_view disposition = part.header("content-disposition");
  return FormField{header_param(disposition, "name").value_or(""),
                   header_param(disposition, "filename")};
}

// POST /{db}/{docid} as the upload form of Futon and Fauxton sends it (chttpd_db:db_doc_req):
// the document from the `_doc` field (JSON), else its revision `_rev` as stored, gets each file of
// the `_attachments` fields as an attachment named after the file (replacing one of that name).
// Without `_rev` or `_doc` the form creates the document (CouchDB answers 500 badarg).
MaybeResponse post_doc(Call& call, const core::DbRef& db, const Target& t) {
  // couch_httpd:validate_referer, validate_docid, validate_ctype("multipart/form-data").
  auto referer = header_value(call.req, field::referer);
  if (!referer) throw HttpError(err::bad_request("Referer header required."));
  // mochiweb_util:urlsplit: the netloc is only there after a scheme.
  std::string_view ref_host;
  if (auto p = referer->find("://"); p != std::string::npos) {
    ref_host = std::string_view(*referer).substr(p + 3);
    ref_host = ref_host.substr(0, ref_host.find_first_of("/?#"));
  }
  std::string host = std::string(call.req["X-Forwarded-Host"]);
  if (host.empty()) host = std::string(call.req[field::host]);
  if (ref_host != host) throw HttpError(err::bad_request("Referer header must match host."));
  if (auto e = core::validate_docid(t.id)) throw HttpError(std::move(*e));
  std::string_view ctype = call.req[field::content_type];
  if (ctype.substr(0, ctype.find(';')) != "multipart/form-data")
    throw HttpError(err::bad_content_type("Content-Type must be multipart/form-data"));
  if (t.local) throw HttpError(err::bad_request("Attachments are not allowed on local documents"));
  auto boundary = multipart_boundary(ctype);
  auto parts = boundary ? parse_multipart(call.req.body(), *boundary) : std::nullopt;
  if (!parts) throw HttpError(err::bad_request("Invalid multipart/form-data request body"));
  std::optional<std::string_view> doc_field, rev_field;
  std::vector<const MultipartPart*> files;
  for (const MultipartPart& part : *parts) {
    const FormField f = form_field(part);
    if (f.name == "_doc") doc_field = part.body;
    if (f.name == "_rev") rev_field = part.body;
    if (f.name == "_attachments" && f.filename) files.push_back(&part);
  }
  Json j = Json::object();
  if (doc_field) {
    j = parse_json_or_throw(*doc_field, core::JsonNumbers::exact);
  } else if (rev_field) {
    core::DocReadOptions o;
    o.rev = parse_rev_or_throw(std::string(*rev_field));
    auto tr = call.store().create_transaction();
    auto doc = value_or_throw(core::get_doc_json(tr, db, t.id, o));
    if (auto* e = std::get_if<core::CouchError>(&doc)) throw HttpError(std::move(*e));
    j = parse_json_or_throw(std::get<std::string>(doc), core::JsonNumbers::exact);
  }
  core::ParsedDoc d = checked_put_doc(call, db, t, j, true);
  std::vector<core::AttUpload> atts = upload_atts(call, d, {});
  std::vector<core::AttUpload> uploads;
  for (const MultipartPart* part : files) {
    std::string name = *form_field(*part).filename;
    if (auto e = core::validate_att_name(name)) throw HttpError(std::move(*e));
    if (part->body.size() > call.ctx.max_attachment_size)
      throw HttpError(err::attachment_too_large(name));
    std::erase_if(atts, [&](const core::AttUpload& a) { return a.name == name; });
    std::erase_if(uploads, [&](const core::AttUpload& a) { return a.name == name; });
    core::AttUpload u;
    u.name = name;
    u.info.name = std::move(name);
    const std::string_view type = part->header("content-type");
    u.info.content_type = type.empty() ? "application/octet-stream" : std::string(type);
    core::set_att_data(u, std::string(part->body));
    uploads.push_back(std::move(u));
  }
  // CouchDB puts the uploads before the attachments the document kept.
  uploads.insert(uploads.end(), std::make_move_iterator(atts.begin()),
                 std::make_move_iterator(atts.end()));
  auto item = interactive_item(t.id, d.rev, d.deleted, std::move(d.body), std::move(d.body_term));
  item.update.atts = std::move(uploads);
  if (storage::Status s = co_await preupload_attachments(call, db, item.update.atts); !s.ok())
    co_return storage_error_response(call.req, s.error());
  co_return co_await write_one(call, std::move(item), [&](const WriteResult& w) -> Response {
    const std::string rev = written_rev(w);
    return update_response(call, Status::created, t.id, rev, dquote(rev));
  });
}

// ---- Attachment paths (/{db}/{doc}/{att...}) ---------------------------------------------------

// /{db}/_design/{name}/_view/... and the other design handlers: CouchDB opens the design doc first.
bool is_design_action(const Target& t) {
  return t.id.starts_with("_design/") && !t.rest.empty() &&
         std::find(kDesignActions.begin(), kDesignActions.end(), t.rest[0]) != kDesignActions.end();
}

// chttpd_db:db_req: GET /{db}/_design%2F{name} is redirected to the unencoded path (301). Only
// reachable if the router hands such paths (one segment "_design/...") to handle_document.
std::optional<Response> design_redirect(const Call& call) {
  if (call.path.size() != 2 || !call.path[1].starts_with("_design/") || !call.is(verb::get))
    return std::nullopt;
  std::string target(call.req.target());
  const std::string lowered = core::ascii_lower(target);
  const std::size_t at = lowered.find("_design%2f");
  if (at == std::string::npos) return std::nullopt;
  target.replace(at, 10, "_design/");
  Response r{Status::moved_permanently, call.req.version()};
  r.set(field::server, kServerHeader);
  r.set(field::date, http_date_now());
  r.set(field::location, absolute_uri(call, target));
  r.keep_alive(call.req.keep_alive());
  r.prepare_payload();
  return r;
}

}  // namespace

MaybeResponse handle_document(Call& call) {
  // 404 first, whatever the method (do_db_req). A read refused or sent to a missing database is
  // answered without throwing, as the router would answer the error (an anonymous GET of a
  // members-only database's document: 27.8 us of server CPU through the throw, bench/README.md).
  // A document's GET reads in the transaction that opened the database; every other path lets it
  // go at once (a snapshot held through a long answer pins old versions in the embedded store).
  std::optional<storage::Transaction> tr(call.store().create_transaction());
  auto opened = open_db_or_error(call, *tr);
  if (auto* e = std::get_if<core::CouchError>(&opened)) {
    if (call.is(verb::get) || call.is(verb::head)) co_return answer_error(call, *e);
    throw HttpError(std::move(*e));
  }
  const core::DbRef db = std::get<core::DbRef>(std::move(opened));
  if (auto redirect = design_redirect(call)) co_return redirect;
  const Target t = resolve_target(call);
  if (is_design_action(t) || !t.rest.empty() || t.local ||
      !(call.is(verb::get) || call.is(verb::head)))
    tr.reset();
  if (is_design_action(t)) {
    // _users: opening the design document is a read (_info does not open it in CouchDB).
    if (t.rest != std::vector<std::string>{"_info"}) (void)readable_fields(call, db, t.id);
    co_return co_await handle_design_action(call, db, t.id.substr(8), t.rest);
  }
  if (!t.rest.empty()) {
    std::string name;
    for (const std::string& part : t.rest) name += (name.empty() ? "" : "/") + part;
    co_return co_await handle_attachment(call, db, t.id, name);
  }
  switch (call.method()) {
    case verb::get:
    case verb::head: {
      const DocQuery q = parse_doc_query(call);
      if (t.local) co_return get_local(call, db, t, q);
      co_return co_await get_doc_answer(call, *tr, db, t, q);
    }
    case verb::put: {
      const DocQuery q = parse_doc_query(call);
      co_return co_await put_doc(call, db, t, q);
    }
    case verb::delete_:
      co_return co_await delete_doc(call, db, t);
    case verb::copy:
      co_return co_await copy_doc(call, db, t);
    case verb::post:
      co_return co_await post_doc(call, db, t);
    case verb::patch:
      co_return co_await patch_document(call, db, t.id, t.local);
    default:
      require_method(call, kDocMethods);
  }
  throw_not_implemented();  // unreachable: require_method threw
}

}  // namespace chaise::http
