// POST|PUT /{db}/_design/{ddoc}/_update/{name}[/{docid}]: update handlers
// (couch_mrview_show:handle_doc_update_req). The handler gets the document (null if none) and
// CouchDB's request object and answers [doc, response]; the document, if any, is saved as an
// interactive edit by the caller, and the response gives the status, headers and body.
//
// A call on an existing document goes through the document's group commit (http/api/hot_docs.h)
// as PATCH does: the calls queued for one document run in one entry into the JavaScript engine,
// each on what the call before it saved, inside the group's transaction on the latest revision,
// so concurrent calls never answer 409 because another came first. A call that saves something
// else than that document in place (another id, a deletion), or one on a document that has
// attachments or does not exist, is declined there and saved the ordinary way, as CouchDB does.
#include <boost/asio/awaitable.hpp>

#include "core/docs/attachments.h"
#include "core/docs/doc_json.h"
#include "core/index/filters.h"
#include "core/security/replicator_docs.h"
#include "http/api/hot_docs.h"
#include "http/api/idempotency.h"
#include "http/api/js_request.h"
#include "http/api/request.h"
#include "http/api/router.h"
#include "http/transport/workers.h"

namespace chaise::http {

namespace {

// The status of an update handler's answer: its "code", else `fallback`.
int update_status(const Json& resp, int fallback) {
  return resp.contains("code") && resp["code"].is_number_integer() ? resp["code"].get<int>()
                                                                   : fallback;
}

// The status of an answer that saved a document: 201 unless the response has a "code".
int saved_status(const Json& resp) {
  return resp.contains("code") ? update_status(resp, 200) : 201;
}

// The handler's response object (an object; anything else answers as an empty one).
Json response_object(const std::string& json) {
  Json resp = Json::parse(json, nullptr, false);
  return resp.is_object() ? resp : Json::object();
}

// The answer from the handler's response `resp` and, when it saved document `saved_id`, its
// revision `new_rev` (CouchDB's send_doc_update_response).
Response update_answer(const Call& call, const Json& resp, int status_code,
                       const std::optional<std::string>& new_rev, const std::string& saved_id) {
  ExternalResponse r = parse_external_response(resp);
  r.code = status_code;
  if (new_rev) {
    r.headers.emplace_back("X-Couch-Update-NewRev", *new_rev);
    r.headers.emplace_back("X-Couch-Id", url_encode(saved_id));
  }
  return external_response(call, std::move(r));
}

// The call of updates.<name> on the existing document `doc_id`, through its group commit;
// nullopt when the call is declined there and takes the ordinary path.
boost::asio::awaitable<std::optional<Response>> grouped_update(
    Call& call, const core::DbRef& db, std::shared_ptr<const core::js::DesignDoc> d,
    const std::string& name, const std::string& doc_id, const std::string& req_text) {
  using Kind = core::js::UpdateOutcome::Kind;
  auto script = std::make_shared<core::ScriptStep>();
  script->ddoc = std::move(d);
  script->call.name = name;
  script->call.req = req_text;
  script->validator = doc_validator(call);
  script->max_body_bytes = call.ctx.max_document_size;
  core::DocStep step;
  step.script = script;
  const auto answer = [&call, &doc_id, script](const core::Outcome<core::RevId>& o) -> Response {
    if (const auto* e = std::get_if<core::CouchError>(&o)) return error_response(call.req, *e);
    const Json resp = response_object(script->response_json);
    if (script->kind == Kind::saved)
      return update_answer(call, resp, saved_status(resp), std::get<core::RevId>(o).str(), doc_id);
    return update_answer(call, resp, update_status(resp, 200), std::nullopt, doc_id);
  };
  if (call.idem) {
    co_await call.idem->finish(call);
    step.idem = call.idem->request();
    step.render = [&answer](const core::Outcome<core::RevId>& o) {
      return stored_response(answer(o));
    };
  }
  auto outcome = co_await call.ctx.hot_docs->update(call.store(), call.ctx.janitor, db.name, doc_id,
                                                    std::move(step));
  if (!outcome.ok()) co_return storage_error_response(call.req, outcome.error());
  if (script->kind == Kind::declined) co_return std::nullopt;
  if (const auto* e = std::get_if<core::CouchError>(&*outcome)) throw HttpError(*e);
  co_return answer(*outcome);
}

// Whether document `doc_id` of database `db_name` may be updated in its group commit.
bool groupable(std::string_view db_name, std::string_view doc_id) {
  return !doc_id.starts_with("_design/") && !doc_id.starts_with("_local/") &&
         db_name != core::kUsersDb && db_name != core::kReplicatorDb;
}

// The ordinary way: the handler runs on the document as read now, and what it returns is saved
// as a PUT of it would be (CouchDB's way; 409 when another update came first).
MaybeResponse ordinary_update(Call& call, const core::DbRef& db,
                              std::shared_ptr<const LoadedDesignDoc> loaded,
                              const std::string& name, const std::optional<std::string>& doc_id,
                              const std::string& req_text) {
  core::js::Engine& engine = js_engine(call);
  const core::js::DesignDoc& d = loaded->js;
  std::string current = "null";
  if (doc_id) {
    auto tr = call.store().create_transaction();
    auto doc = value_or_throw(core::get_doc_json(tr, db, *doc_id, core::DocReadOptions{}));
    if (auto* s = std::get_if<std::string>(&doc)) current = *s;
  }
  auto r = engine.update(d, name, current, req_text);
  if (auto* e = std::get_if<core::js::JsError>(&r)) throw HttpError(core::js_error(*e));
  const core::js::UpdateAnswer& a = std::get<core::js::UpdateAnswer>(r);
  const Json resp = response_object(a.response_json);
  if (a.doc_json.empty() || a.doc_json == "null")
    co_return update_answer(call, resp, update_status(resp, 200), std::nullopt, "");
  Json doc = Json::parse(a.doc_json, nullptr, false);
  if (!doc.is_object())
    throw HttpError(err::render_error("the update handler's document is not an object"));
  if (!doc.contains("_id") || !doc["_id"].is_string())
    throw HttpError(err::render_error("Document id must be a string"));
  // Saved like a PUT of the document (couch_mrview_show: couch_db:update_doc as the user).
  const std::string id = doc["_id"].get<std::string>();
  if (auto err = check_doc_write(call, db, doc)) throw HttpError(*err);
  auto parsed = core::parse_doc(doc, true);
  if (auto* e = std::get_if<core::CouchError>(&parsed)) throw HttpError(std::move(*e));
  core::ParsedDoc& saved = std::get<core::ParsedDoc>(parsed);
  core::DocUpdate u;
  u.id = id;
  u.base_rev = saved.rev;
  u.deleted = saved.deleted;
  u.body = std::move(saved.body);
  u.body_term = std::move(saved.body_term);
  // The handler's `_attachments`, read as a PUT reads them: an entry with "stub": true keeps the
  // stored attachment of that name, base64 "data" adds one (its bytes written first when large,
  // as a PUT's are).
  if (saved.attachments && !saved.attachments->empty()) {
    auto atts = core::parse_attachments_json(*saved.attachments, call.ctx.max_attachment_size);
    if (auto* e = std::get_if<core::CouchError>(&atts)) throw HttpError(std::move(*e));
    u.atts = std::get<std::vector<core::AttUpload>>(std::move(atts));
    if (storage::Status s = co_await preupload_attachments(call, db, u.atts); !s.ok())
      co_return storage_error_response(call.req, s.error());
  }
  std::vector<core::DocWriteBatch::Item> items(1);
  items[0].update = std::move(u);
  core::DocWriteBatch batch(db.name, std::move(items));
  co_return co_await write_and_render(call, batch, [&](const core::DocWriteBatch& b) {
    const auto& result = *b.results().at(0);
    if (auto* e = std::get_if<core::CouchError>(&result)) throw HttpError(*e);
    return update_answer(call, resp, saved_status(resp),
                         std::get<core::UpdateResult>(result).rev.str(), id);
  });
}

}  // namespace

bool update_runs_grouped(const Call& call) {
  // /{db}/_design/{ddoc}/_update/{name}/{docid}
  const auto& p = call.path;
  return call.ctx.hot_docs && call.ctx.js && p.size() == 6 && p[1] == "_design" &&
         p[3] == "_update" && groupable(p[0], p[5]) && !call.partition;
}

MaybeResponse update_handler(Call& call, const core::DbRef& db, const std::string& ddoc,
                             const std::string& name, const std::optional<std::string>& doc_id) {
  if (call.is(beast_http::verb::get))
    throw HttpError(err::method_not_allowed("Update functions do not allow GET"));
  js_engine(call);  // 500 without an engine
  std::shared_ptr<const LoadedDesignDoc> loaded;
  {
    auto tr = call.store().create_transaction();
    loaded = design_doc(tr, db, ddoc);
  }
  const Json& body = loaded->body;
  if (!body.is_object() || !body.contains("updates") || !body["updates"].is_object() ||
      !body["updates"].contains(name))
    throw HttpError(
        err::not_found("missing function updates." + name + " on design doc _design/" + ddoc));
  const std::string req_text = js_request_object(call, doc_id).dump();
  if (doc_id && call.ctx.hot_docs && groupable(db.name, *doc_id)) {
    if (auto grouped = co_await grouped_update(
            call, db, std::shared_ptr<const core::js::DesignDoc>(loaded, &loaded->js), name,
            *doc_id, req_text))
      co_return std::move(*grouped);
    // Declined: the request is on an io thread (update_runs_grouped), its JavaScript is not.
    if (update_runs_grouped(call) && call.ctx.workers != nullptr)
      co_return co_await call.ctx.workers->run(
          ordinary_update(call, db, std::move(loaded), name, doc_id, req_text));
  }
  co_return co_await ordinary_update(call, db, std::move(loaded), name, doc_id, req_text);
}

}  // namespace chaise::http
