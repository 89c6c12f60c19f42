// Request handling for Chaise: a plain function of (request) -> response.
//
// The router knows nothing about sockets, sessions or threads: the server (http/transport/server.h) reads a
// complete request, hands it to Router::handle, and writes back whatever comes out. That keeps every
// endpoint testable without a network and keeps CouchDB's wire formats (status codes, error bodies,
// headers) in one place.
//
// Adding an endpoint: add a branch to Router::dispatch in router.cc (or a helper it calls), build the
// answer with json_response / error_response / method_not_allowed (http/transport/message.h). Handlers may throw; the
// single exception boundary is Router::handle, which turns anything thrown into CouchDB's
// 500 {"error":"unknown_error","reason":...}.
#pragma once

#include <boost/asio/awaitable.hpp>

#include "core/security/security.h"
#include "http/transport/message.h"
#include "storage/database.h"

namespace chaise::config {
class Config;
}
namespace chaise::core {
namespace js {
class Engine;
}
struct DbRef;
struct NodeReport;
class ChangesNotifier;
class TxIdJanitor;
class DbUpdatesRecorder;
class ActiveTasks;
namespace replication {
class Scheduler;
}
}  // namespace chaise::core

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chaise::http {

class IdempotencyInFlight;
class WriteTurns;
class HotDocs;

class ResponseStream;
class WorkerPool;
struct Call;
class Authenticator;
class Metrics;

// Everything the router needs to know about the server it runs in.
struct RouterContext {
  // 32 lowercase hex digits, stable for the lifetime of the data directory (see server/main.cc).
  std::string server_uuid;
  // This server's name, CouchDB's node() ([chaise] node_name): /_node/{name}, its tasks' "node".
  std::string node_name = "nonode@nohost";
  // Other servers share the store and report themselves there (core/db/node_reports.h):
  // /_membership, /_active_tasks and /_scheduler/jobs list theirs with this server's.
  bool node_reports = false;
  // The store every database lives in; outlives the router. nullptr only in router unit tests.
  storage::Database* store = nullptr;
  // Clears transaction ids of committed document writes; may be nullptr (then they stay).
  core::TxIdJanitor* janitor = nullptr;
  // The _db_updates recorder, for its metrics (may be null).
  core::DbUpdatesRecorder* db_updates = nullptr;
  // What runs besides requests (index builds, compactions), for /_active_tasks; nullptr: none
  // is recorded.
  core::ActiveTasks* active_tasks = nullptr;
  // The replicator: POST /_replicate, /_scheduler, its _active_tasks; nullptr: they answer 501.
  core::replication::Scheduler* replicator = nullptr;
  // This server's own URL ("http://127.0.0.1:5984"), where POST /_replicate sends a source or
  // target given as a database name (CouchDB's fix_uri); empty: such names are refused.
  std::function<std::string()> own_url;
  // Wakes waiting longpoll/continuous/eventsource feeds; nullptr: live feeds are refused.
  core::ChangesNotifier* notifier = nullptr;
  // Live feeds: CouchDB's [chttpd] changes_timeout and the heartbeat used for heartbeat=true.
  std::int64_t changes_timeout_ms = 60'000;
  // CouchDB's [couchdb] max_document_size: larger documents get 413 document_too_large.
  std::size_t max_document_size = 8'000'000;
  // CouchDB's [couchdb] max_attachment_size: larger attachments get 413 attachment_too_large.
  std::size_t max_attachment_size = 1024ull * 1024 * 1024;
  // CouchDB's [uuids] max_count for /_uuids.
  std::int64_t uuids_max_count = 1000;
  // Rows per storage transaction when streaming _all_docs / _changes.
  std::size_t stream_page_rows = 1000;
  // The configuration (config API, settings read per request); nullptr in router unit tests.
  config::Config* config = nullptr;
  // Authenticates requests; nullptr: every request is a server admin (router unit tests).
  const Authenticator* auth = nullptr;
  // Request counters and latency; nullptr: not recorded.
  Metrics* metrics = nullptr;
  // Runs design-document JavaScript; nullptr: none (validate_doc_update, JS filters, views and
  // update handlers then answer as if no JavaScript engine existed).
  core::js::Engine* js = nullptr;
  // One info line per request (method, target, status, bytes, duration, user).
  bool access_log = false;
  // Runs the CPU-heavy requests off the io threads (http/transport/workers.h); nullptr: all run inline.
  WorkerPool* workers = nullptr;
  // Idempotency-Keys being executed now (http/api/idempotency.h); the Router makes one if unset.
  std::shared_ptr<IdempotencyInFlight> idempotency_in_flight;
  // The group commit of PATCH updates (http/api/hot_docs.h); the Router makes one if unset.
  std::shared_ptr<HotDocs> hot_docs;
  // Turns of the document writers that would conflict (http/api/write_turns.h); the Router makes
  // one if unset.
  std::shared_ptr<WriteTurns> write_turns;
  // Asks the server to stop and start again (POST /_node/{node}/_restart): it returns at once,
  // and the server restarts once the requests in flight, this one included, are answered.
  // Unset: the endpoint answers 501.
  std::function<void()> restart;
};

using MaybeResponse = boost::asio::awaitable<std::optional<Response>>;

class Router {
 public:
  explicit Router(RouterContext context);

  // Answers one request: a complete Response, or nullopt after streaming one through `stream`.
  // Never throws: HttpError becomes its CouchDB error answer, anything else 500 unknown_error.
  // HEAD is answered like GET without a body. Thread-safe.
  MaybeResponse handle(const Request& request, ResponseStream& stream) const;

  // handle() for a request this server makes of itself on behalf of `user` (the replicator's
  // own reads and writes of _replicator): no authentication, the user as given.
  MaybeResponse handle_as(const Request& request, ResponseStream& stream, core::UserCtx user) const;

  const RouterContext& context() const { return context_; }

 private:
  // handle() for a request that `rewrites` _rewrite steps made, as `as_user` when set.
  MaybeResponse handle_request(const Request& request, ResponseStream& stream, int rewrites,
                               std::optional<core::UserCtx> as_user = std::nullopt) const;
  MaybeResponse dispatch(Call& call) const;
  // /{db}/_design/{ddoc}/_rewrite[/...]: the rewritten request, answered.
  MaybeResponse rewrite(Call& call) const;
  Response welcome(const Request& request) const;
  Response up(const Request& request) const;

  RouterContext context_;
};

// ServerOptions::stream_body for the router: attachment PUTs, and multipart/related document PUTs
// (the replicator's), with a body over 1 MiB (or chunked) reach their handler before the body is
// read, which streams the attachment bytes into storage (http/api/attachments.cc).
bool streams_request_body(const Request& header);

// Endpoint groups, one file each (declared here, defined in http/endpoints_*.cc).
// Server level: /_all_dbs, /_dbs_info, /_uuids.
MaybeResponse handle_server(Call& call);
// /_session: cookie login, the session's user, logout (http/api/session.cc).
Response handle_session(Call& call);
// /_node/{node}/...: the config API, stats (http/api/node.cc).
Response handle_node(Call& call);
// /_cluster_setup: the setup of a single node (http/api/node.cc).
MaybeResponse handle_cluster_setup(Call& call);
// /_membership: this server and the others that report themselves in the store (http/api/node.cc).
Response handle_membership(Call& call);
// The live reports of the other servers sharing the store (none unless RouterContext::node_reports;
// http/api/node.cc).
std::vector<core::NodeReport> other_node_reports(const Call& call);
// /_utils: the web UI's static files (http/api/fauxton.cc).
Response handle_utils(Call& call);
// /favicon.ico: the UI's icon, or CouchDB's plain-text 404 (http/api/fauxton.cc).
Response handle_favicon(Call& call);
// POST /_replicate, GET /_scheduler/...: the replicator (http/api/replicate.cc).
MaybeResponse handle_replication(Call& call);
// GET /_db_updates: the server's database events (http/api/db_updates.cc).
MaybeResponse handle_db_updates(Call& call);
// Database level: /{db}, /{db}/_bulk_docs, _revs_diff, _missing_revs, _revs_limit,
// _ensure_full_commit, _compact, _view_cleanup.
MaybeResponse handle_database(Call& call);
// Documents: /{db}/{docid}, /{db}/_design/{id}, /{db}/_local/{id}.
MaybeResponse handle_document(Call& call);
// PATCH /{db}/{docid}: a JSON Merge Patch or JSON Patch applied by the server, grouped with the
// other updates of the document (http/api/patch.cc), for an opened database.
MaybeResponse patch_document(Call& call, const core::DbRef& db, const std::string& id, bool local);
// Attachments: /{db}/{docid}/{attname...} (GET, HEAD, PUT, DELETE), for an opened database.
MaybeResponse handle_attachment(Call& call, const core::DbRef& db, const std::string& doc_id,
                                const std::string& name);
// POST /{db}/_purge, GET /{db}/_purged_infos, GET|PUT /{db}/_purged_infos_limit
// (http/api/purge.cc), for an opened database.
MaybeResponse handle_purge(Call& call, const core::DbRef& db);
// POST /{db}/_bulk_get, for an opened database.
MaybeResponse handle_bulk_get(Call& call, const core::DbRef& db);
// /{db}/_design/{ddoc}/<rest...>: _view, _info, _update (http/api/view.cc), for an opened database.
MaybeResponse handle_design_action(Call& call, const core::DbRef& db, const std::string& ddoc,
                                   const std::vector<std::string>& rest);
// POST|PUT /{db}/_design/{ddoc}/_update/{name}[/{docid}]: an update handler (http/api/update.cc).
// One on an existing document that can be updated in place runs in the document's group commit
// (update_runs_grouped: the request names such a document); its JavaScript then runs on the worker
// pool, whichever thread the request came in on.
bool update_runs_grouped(const Call& call);
MaybeResponse update_handler(Call& call, const core::DbRef& db, const std::string& ddoc,
                             const std::string& name, const std::optional<std::string>& doc_id);
// /{db}/_design/{ddoc}/_show/... and _list/...: show and list functions (http/api/render.cc).
MaybeResponse render_handler(Call& call, const core::DbRef& db, const std::string& ddoc,
                             const std::vector<std::string>& rest);
// /{db}/_design/{ddoc}/_rewrite[/...]: the request the design document's "rewrites" make of this
// one, or the answer a rewrites function gives at once (http/api/rewrite.cc). The router answers
// the request as if the client had sent it.
struct Rewrite {
  std::optional<Request> request;
  std::optional<Response> answer;
};
Rewrite rewrite_request(Call& call, const core::DbRef& db);
// Mango: /{db}/_find, /_explain, /_index[/...] (http/api/mango.cc), for an opened database.
MaybeResponse handle_mango(Call& call, const core::DbRef& db);
// POST /{db}/_view_cleanup: drops the view indexes no design document names.
MaybeResponse view_cleanup(Call& call, const core::DbRef& db);
// /{db}/_partition/{p}[/...] (http/api/partition.cc): enter_partition validates the partition
// and, for a sub-endpoint, strips "_partition/{p}" from call.path and sets call.partition
// (true: dispatch again); false: the request is GET /{db}/_partition/{p}, for partition_info.
bool enter_partition(Call& call);
// ?partition=p on a view or _all_docs query (couch_mrview_http): the same request as below
// /{db}/_partition/p; a different partition in the path is 400, and _all_docs of a database that
// is not partitioned refuses the parameter. Anything else ignores it, as CouchDB does.
void partition_from_query(Call& call);
Response partition_info(Call& call);
// Streamed cursors (the built-in indexes): /{db}/_all_docs, _design_docs, _local_docs, _all_docs/queries, _changes.
MaybeResponse handle_cursors(Call& call);

}  // namespace chaise::http
