// PATCH /{db}/{docid}: server-side updates of a document (hot documents). The body is a
// JSON Merge Patch (Content-Type application/merge-patch+json, or application/json) or a JSON
// Patch with Chaise's "increment" operation (application/json-patch+json); see core/docs/json_patch.h.
//
// The patch applies to the latest revision when its group commits (http/api/hot_docs.h), so updates
// never conflict with each other; ?rev= or If-Match makes it conditional (409 unless that is the
// latest revision). The answer is PUT's: 201 {"ok":true,"id","rev"} with the ETag; a missing or
// deleted document is 404. validate_doc_update runs on each update; design documents need a db
// admin; _local documents, _users and _replicator are refused (400; use PUT there).
#include <string>
#include <string_view>

#include "core/docs/json_patch.h"
#include "core/security/replicator_docs.h"
#include "core/util/ascii.h"
#include "core/util/json_text.h"
#include "http/api/hot_docs.h"
#include "http/api/idempotency.h"
#include "http/api/request.h"
#include "http/api/router.h"

namespace chaise::http {

namespace {

enum class PatchKind { merge, json_patch };

PatchKind patch_kind(const Request& req) {
  std::string type(req[beast_http::field::content_type]);
  type = type.substr(0, type.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.pop_back();
  type = core::ascii_lower(type);
  if (type == "application/merge-patch+json" || type == "application/json") return PatchKind::merge;
  if (type == "application/json-patch+json") return PatchKind::json_patch;
  throw HttpError(err::bad_content_type(
      "Content-Type must be application/merge-patch+json, application/json or "
      "application/json-patch+json"));
}

std::optional<core::RevId> expected_rev(const Call& call) {
  std::optional<std::string> text = call.query.get("rev");
  if (auto it = call.req.find(beast_http::field::if_match); it != call.req.end()) {
    std::string_view v = it->value();
    while (!v.empty() && v.front() == '"') v.remove_prefix(1);
    while (!v.empty() && v.back() == '"') v.remove_suffix(1);
    if (text && *text != v)
      throw HttpError(err::bad_request("Document rev and etag have different values."));
    text = std::string(v);
  }
  if (!text) return std::nullopt;
  auto rev = core::RevId::parse(*text);
  if (!rev) throw HttpError(err::bad_request("Invalid rev format"));
  return rev;
}

}  // namespace

MaybeResponse patch_document(Call& call, const core::DbRef& db, const std::string& id, bool local) {
  if (local)
    throw HttpError(err::bad_request("PATCH does not apply to _local documents: use PUT."));
  if (db.name == core::kUsersDb || db.name == core::kReplicatorDb)
    throw HttpError(err::bad_request("PATCH does not apply in " + db.name + ": use PUT."));
  if (auto e = core::validate_docid(id)) throw HttpError(*e);
  if (id.starts_with("_design/")) require_db_admin(call);
  const PatchKind kind = patch_kind(call.req);
  if (call.req.body().empty()) throw HttpError(err::bad_request("Missing request body"));
  const Json patch = parse_json_body(call.req, false, core::JsonNumbers::exact);
  if (kind == PatchKind::json_patch) {
    if (auto e = core::check_json_patch(patch)) throw HttpError(*e);
  } else if (!patch.is_object()) {
    throw HttpError(err::bad_request("A JSON Merge Patch of a document must be an object"));
  }
  const std::size_t max_size = call.ctx.max_document_size;

  core::DocStep step;
  step.expected = expected_rev(call);
  step.validator = doc_validator(call);
  // Runs in the group's transaction, on the body the previous update left.
  step.apply = [&patch, kind, max_size, &id](const std::string& body,
                                             const core::RevId&) -> core::Outcome<std::string> {
    auto parsed = core::parse_json_text(body, core::JsonNumbers::exact);
    auto* current = std::get_if<Json>(&parsed);
    if (current == nullptr) return err::unknown_error("stored body is not JSON");
    core::PatchResult r = kind == PatchKind::merge ? core::merge_patch(std::move(*current), patch)
                                                   : core::json_patch(std::move(*current), patch);
    if (auto* e = std::get_if<core::CouchError>(&r)) return std::move(*e);
    const Json& doc = std::get<Json>(r);
    for (auto it = doc.begin(); it != doc.end(); ++it)
      if (it.key().starts_with('_'))
        return err::doc_validation("Bad special document member: " + it.key());
    std::string out = core::dump_json(doc, false);
    if (out.size() > max_size) return err::document_too_large(id);
    return out;
  };
  const auto render = [&](const core::Outcome<core::RevId>& o) -> Response {
    if (const auto* e = std::get_if<core::CouchError>(&o)) return error_response(call.req, *e);
    const std::string rev = std::get<core::RevId>(o).str();
    Response r =
        json_response(call.req, Status::created, Json{{"ok", true}, {"id", id}, {"rev", rev}});
    r.set(beast_http::field::etag, "\"" + rev + "\"");
    return r;
  };
  if (call.idem) {
    co_await call.idem->finish(call);
    step.idem = call.idem->request();
    step.render = [&](const core::Outcome<core::RevId>& o) { return stored_response(render(o)); };
  }
  auto outcome = co_await call.ctx.hot_docs->update(call.store(), call.ctx.janitor, db.name, id,
                                                    std::move(step));
  if (!outcome.ok()) co_return storage_error_response(call.req, outcome.error());
  co_return render(*outcome);
}

}  // namespace chaise::http
