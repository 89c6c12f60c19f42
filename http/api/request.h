// http/api/request.h — what every CouchDB endpoint needs: the parsed request (path segments, query
// parameters with CouchDB's parsing rules), JSON bodies, and error answers.
//
// Client mistakes are thrown as HttpError from these helpers and answered at the one boundary in
// Router::handle with CouchDB's {"error","reason"} body and status; endpoints stay linear.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/batch/doc_batches.h"
#include "core/db/databases.h"
#include "core/docs/documents.h"
#include "core/security/security.h"
#include "core/util/error.h"
#include "core/util/json_text.h"
#include "http/api/router.h"
#include "http/transport/request_parse.h"
#include "http/transport/response_stream.h"
#include "storage/database.h"

namespace chaise::http {

class IdempotentCall;  // http/api/idempotency.h

// Everything an endpoint gets.
struct Call {
  const Request& req;
  ResponseStream& stream;
  const RouterContext& ctx;
  std::vector<std::string> path;  // percent-decoded segments
  Query query;
  // Who the request acts for (http/auth/auth.h); a server admin when the router has no authenticator.
  core::UserCtx user = core::UserCtx{std::nullopt, {std::string(core::kAdminRole)}};
  // "default", "cookie", "proxy" or "" (anonymous): GET /_session's info.authenticated.
  std::string auth_handler;
  // The security object of the database open_db_or_throw opened (its member check passed),
  // shared with the database cache (core/db/db_cache.h); an empty one before that.
  mutable std::shared_ptr<const core::SecurityObject> security = no_security();
  // /{db}/_partition/{p}/...: the partition; `path` is then the request's path without the
  // "_partition/{p}" segments (http/api/partition.cc).
  std::optional<std::string> partition;
  // Set when the request carries an Idempotency-Key (http/api/idempotency.h).
  std::shared_ptr<IdempotentCall> idem;
  // How many _rewrite steps made this request (bounded by [chttpd] rewrite_limit).
  int rewrites = 0;
  // A read version this request read at itself, and when: its credentials' lookup's (from the
  // router), else the database's opening's (open_db_or_error). The opening reads at it, and the
  // request's first write transaction (take_read_version), instead of asking the cluster for
  // another, a round trip fewer each on FoundationDB. A version the request itself read is as
  // new as any commit that preceded the request, and a write that landed since makes the commit
  // conflict and retry at a new one. A request that commits something of its own first
  // (attachment bytes written apart) drops it: that version does not show them.
  mutable storage::SeenReadVersion read_version;

  storage::Database& store() const { return *ctx.store; }
  // read_version while it is young enough to start at without likely conflicting (what follows
  // it does so at once, unless the request waited); 0 otherwise.
  std::int64_t fresh_read_version() const {
    return read_version.if_younger_than(kReadVersionFresh);
  }
  // fresh_read_version, once.
  std::int64_t take_read_version() const {
    const std::int64_t v = fresh_read_version();
    read_version = {};
    return v;
  }
  static constexpr std::chrono::milliseconds kReadVersionFresh{50};
  static const std::shared_ptr<const core::SecurityObject>& no_security() {
    static const auto empty = std::make_shared<const core::SecurityObject>();
    return empty;
  }
  beast_http::verb method() const { return req.method(); }
  bool is(beast_http::verb v) const { return req.method() == v; }
};

// The request body as JSON (parse_json_or_throw); 415 bad_content_type unless the Content-Type is
// application/json (when `require_json_type`). Document bodies ask for JsonNumbers::exact.
Json parse_json_body(const Request& req, bool require_json_type = true,
                     core::JsonNumbers numbers = core::JsonNumbers::doubles);
// Same, for a body that must be a JSON object ("Request body must be a JSON object").
Json parse_json_object_body(const Request& req, bool require_json_type = true,
                            core::JsonNumbers numbers = core::JsonNumbers::doubles);

// A response whose body is already-serialized JSON (documents are spliced, not re-serialized).
Response raw_json_response(const Request& req, Status status, std::string body);
// A storage error that survived the retry loop: 500 unknown_error (io_error, limits) or, for the
// FoundationDB size limits a client can cause, 413.
Response storage_error_response(const Request& req, storage::Error e);

// Opens the database named in path[0]; throws 404 not_found "Database does not exist." (and 400 for
// a bad name), then 401/403 unless the user is a member (CouchDB's check_is_member). Leaves the
// database's security object in call.security.
core::DbRef open_db_or_throw(const Call& call);
// The same, with the 404, 400, 401 and 403 returned instead of thrown (for answer_error); storage
// failures are still thrown.
std::variant<core::DbRef, core::CouchError> open_db_or_error(const Call& call);
// The same, read in `tr`: a request whose next read follows at once reads in the same transaction,
// and so at the same read version (on FoundationDB, one read version fetched instead of two).
// Both read at the request's fresh_read_version when it has one; `tr` has read nothing yet.
std::variant<core::DbRef, core::CouchError> open_db_or_error(const Call& call,
                                                             storage::Transaction& tr);
// The answer the router gives an error thrown by a handler (a 401's WWW-Authenticate or login
// redirect included), for a handler that answers one without throwing: on a path that serves
// many requests, unwinding costs more than the request (http/api/router.cc).
Response answer_error(const Call& call, const core::CouchError& error);

// ---- Authorization (http/api/authz.cc; CouchDB's chttpd_auth_request and couch_db checks) ----------

// The rules that need no database: server-admin-only paths, PUT/DELETE /{db}, ...
void authorize_request(const Call& call);
// 401 unauthorized "You are not a server admin." unless the user is one.
void require_server_admin(const Call& call);
// 401 (anonymous) / 403 "You are not a db or server admin." unless the user is an admin of the
// database open_db_or_throw opened.
void require_db_admin(const Call& call);
// The per-document write rules: a design document needs a db admin; a _users document is checked
// and its password hashed (couch_users_db). Returns the document's error or nullopt; may rewrite
// `doc`. `doc` must be an object.
// In _replicator, sets the owner and applies couch_replicator_docs' rules (to new_edits=false
// writes too: CouchDB 3.5 skips them only for its internal replication).
std::optional<core::CouchError> check_doc_write(const Call& call, const core::DbRef& db, Json& doc);
// check_doc_write for an edit that keeps a stored body (an attachment PUT/DELETE, a COPY): `body`
// (compact JSON without "_" members) as document `id`, a tombstone when `deleted`. Returns the
// body to write (in _replicator, with its owner set) or throws the rule's error; a body that is
// not an object comes back unchanged.
std::string check_kept_body(const Call& call, const core::DbRef& db, std::string_view id,
                            std::string body, bool deleted);
// couch_users_db:after_doc_read: what the user of `call` may read of document `id` in `db`.
// nullopt: all of it (any database but _users; in _users, db admins and the user the document is
// for); else only the body members [chttpd_auth] public_fields lists (none when it is unset).
// Design documents of _users: 403 forbidden for everyone else.
std::optional<std::vector<std::string>> readable_fields(const Call& call, const core::DbRef& db,
                                                        std::string_view id);
// What the user of `call` may read of document `id` in `db`: readable_fields in _users, and in
// _replicator the credentials masking of couch_replicator_docs:after_doc_read for everyone
// but its admins. apply() puts it into the options a document is read with.
struct ReadRule {
  std::optional<std::vector<std::string>> public_fields;
  std::optional<std::optional<std::string>> replication_reader;
  void apply(core::DocReadOptions& o) const {
    o.public_fields = public_fields;
    o.replication_reader = replication_reader;
  }
};
ReadRule read_rule(const Call& call, const core::DbRef& db, std::string_view id);

// The head of a streamed JSON answer (200, chunked): Server, Date, Content-Type, Cache-Control.
Response stream_head(const Request& req);

// The validate_doc_update runner for the user of `call` (nullptr without a JavaScript engine).
std::shared_ptr<core::JsDocValidator> doc_validator(const Call& call);

// Runs a DocWriteBatch to completion (every round, each its own transaction, without blocking the
// io thread) and hands each committed round's transaction id to the janitor. Returns the storage
// error that ended it, if any; batch.db_missing() tells a missing database.
boost::asio::awaitable<storage::Status> run_doc_batch(const Call& call, core::DocWriteBatch& batch);

// Writes the bytes of large new attachments (over 1 MB) in transactions of their own, before the
// document's transaction, and marks them preuploaded (their bytes leave memory). Defined in
// http/api/attachments.cc.
boost::asio::awaitable<storage::Status> preupload_attachments(const Call& call,
                                                              const core::DbRef& db,
                                                              std::vector<core::AttUpload>& atts);

// A response body of literal text and attachment bytes (multipart answers). Small ones are
// assembled in memory (materialize_body_plan); larger ones are streamed piece by piece, each
// attachment read a few chunks per transaction, so memory stays flat (write_body_plan).
struct BodyPlan {
  std::vector<std::variant<std::string, core::AttInfo>> pieces;
  std::uint64_t att_bytes = 0;  // stored bytes of the attachments in it

  void text(std::string_view s) {
    if (pieces.empty() || !std::holds_alternative<std::string>(pieces.back()))
      pieces.emplace_back(std::string());
    std::get<std::string>(pieces.back()) += s;
  }
  void att(const core::AttInfo& a) {
    pieces.emplace_back(a);
    att_bytes += static_cast<std::uint64_t>(a.encoded_length);
  }
  void append(BodyPlan other) {
    for (auto& p : other.pieces) {
      if (auto* t = std::get_if<std::string>(&p)) {
        text(*t);
      } else {
        pieces.push_back(std::move(p));
      }
    }
    att_bytes += other.att_bytes;
  }
  // Total bytes of the body.
  std::uint64_t size() const;
};
// Plans with more attachment bytes than this are streamed rather than assembled.
inline constexpr std::uint64_t kBodyPlanWholeBytesMax = 1 << 20;
// The whole body, attachment bytes read with `tr`. (Defined in http/api/attachments.cc, as the
// three below.)
storage::Result<std::string> materialize_body_plan(storage::Transaction& tr, const core::DbRef& db,
                                                   const BodyPlan& plan);
// Writes the plan to a begun stream; false if the client went away or a read failed.
boost::asio::awaitable<bool> write_body_plan(const Call& call, const core::DbRef& db,
                                             const BodyPlan& plan);
// Writes stored bytes [from, from + len) of an attachment to a begun stream, a few chunks per
// read transaction (the bytes under an address never change); false as write_body_plan.
boost::asio::awaitable<bool> write_att_stored(const Call& call, const core::DbRef& db,
                                              const core::AttInfo& att, std::int64_t from,
                                              std::int64_t len);
// Where a streamed attachment's bytes come from: appends at most `max` bytes to `out`, returns
// how many (0 at the end), nullopt if the client is gone; may throw HttpError (malformed input).
using AttPull = std::function<boost::asio::awaitable<std::optional<std::size_t>>(std::string& out,
                                                                                 std::size_t max)>;
// Streams one attachment's bytes from `pull` into storage, ~1 MB per transaction, under an address
// of its own (the SHA-256 is only known at the end), so memory stays flat whatever the size. `up`
// names it and gives its content type; bytes already encoded (info.encoding "gzip", as CouchDB's
// replicator sends them) are stored as they come with info.length their identity length; others
// are compressed when the type is compressible (as set_att_data). max_attachment_size is enforced
// (413). Returns the upload marked preuploaded; when equal bytes were already stored it shares
// them, else `own_address` names its copy: drop_streamed_attachment() it if the edit fails.
// Throws HttpError after dropping what it wrote. Defined in http/api/attachments.cc.
boost::asio::awaitable<core::AttUpload> stream_attachment(const Call& call, const core::DbRef& db,
                                                          core::AttUpload up, const AttPull& pull,
                                                          std::string& own_address);
// Clears the bytes under `address`, unless a stored revision names them (an edit whose commit
// outcome was unknown): a failure leaves unreferenced bytes, never a revision without its bytes.
boost::asio::awaitable<void> drop_streamed_attachment(const Call& call, const core::DbRef& db,
                                                      const std::string& address);

// mochiweb_request:accepts_content_type(type): some Accept entry with q > 0 is `type`, its
// "major/*" or "*/*", and none refuses `type` or "major/*" with q=0. A missing Accept header
// accepts everything; a malformed q value accepts nothing (mochiweb: bad_accept_header).
bool accepts_media_type(const Request& req, std::string_view type);

// chttpd:absolute_uri: the host from X-Forwarded-Host, else Host (else "localhost": handlers do
// not see the socket's address); https when X-Forwarded-Ssl is "on", X-Forwarded-Proto is
// "https", or the request came over TLS (`secure`). `path` starts with "/".
std::string absolute_uri(const Request& req, bool secure, std::string_view path);
std::string absolute_uri(const Call& call, std::string_view path);

// GET or HEAD (CouchDB answers HEAD like GET without the body).
inline bool is_get(const Call& call) {
  return call.is(beast_http::verb::get) || call.is(beast_http::verb::head);
}
// 405 method_not_allowed "Only <allowed> allowed" with an Allow header.
[[noreturn]] void throw_method_not_allowed(std::string_view allowed);
// CouchDB's chttpd:validate_ctype: the media type before any ";" must be exactly application/json;
// else 415 bad_content_type.
void require_json_content_type(const Call& call);
// The value of a storage result, or a 500 for the storage error that ended the retries.
template <typename T>
T value_or_throw(storage::Result<T> r) {
  if (!r.ok()) throw HttpError(core::storage_failure(r.error()));
  return std::move(*r);
}
// Nothing, or a 500 for the storage error that ended the retries.
inline void ok_or_throw(const storage::Status& s) {
  if (!s.ok()) throw HttpError(core::storage_failure(s.error()));
}
// The value of a core outcome, or its CouchDB error.
template <typename T>
T outcome_or_throw(core::Outcome<T> o) {
  if (auto* e = std::get_if<core::CouchError>(&o)) throw HttpError(std::move(*e));
  return std::get<T>(std::move(o));
}

// A new document id / _uuids entry: CouchDB 3's default "sequential" uuid algorithm (32 hex).
// Defined in http/api/server_misc.cc.
std::string new_uuid();
// The GET /{db} object, in CouchDB's key order (fabric_db_info). Defined in http/api/server_misc.cc.
Json db_info_json(const core::DbInfo& info);

// 405 with CouchDB's "Only X allowed" unless the method is one of `allowed` ("GET,HEAD,POST").
void require_method(const Call& call, std::string_view allowed);

}  // namespace chaise::http
