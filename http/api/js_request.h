// http/api/js_request.h — the request object design-document functions receive (filters, update
// handlers), shaped like CouchDB's chttpd_external:json_req_obj.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <optional>
#include <string>

#include "core/index/view_index.h"
#include "core/js/js.h"
#include "http/api/request.h"

namespace chaise::http {

// {"info":{"db_name":..},"id":..,"uuid":..,"method":..,"requested_path":[..],"path":[..],
//  "raw_path":..,"query":{..},"headers":{..},"body":..,"peer":..,"form":{..},"cookie":{..},
//  "userCtx":{"db","name","roles"},"secObj":{..}}. `body` is the request body text, "undefined"
// when there is none (as CouchDB sends it); `form` the decoded body of a form POST.
Json js_request_object(const Call& call, const std::optional<std::string>& doc_id);
// The request object of a rewrites function: the same without "info", "uuid", "id" and "form", as
// CouchDB's couch_query_servers:rewrite sends it.
Json js_rewrite_request_object(const Call& call);

// What a design function's response object asks for (chttpd_external:parse_external_response):
// "code" (200 unless given), "headers", and a body from "json" (application/json), "base64"
// (decoded; application/binary) or "body" (text/html; charset=utf-8); a Content-Type among the
// headers wins. Any other member is a 500 external_response_error, as in CouchDB.
struct ExternalResponse {
  int code = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // Content-Type excluded
  std::string body;
  bool json = false;  // sent as CouchDB sends JSON (Cache-Control: must-revalidate)
};
ExternalResponse parse_external_response(const Json& resp);
// Its HTTP head (status and headers, no body). A response that is not JSON carries [csp]
// showlist_header_value ("sandbox") as Content-Security-Policy unless [csp] showlist_enable is
// false: show, list and update functions answer on the database's origin, and the policy keeps
// what they render from acting as that origin.
Response external_head(const Call& call, const ExternalResponse& r);
// The complete answer.
Response external_response(const Call& call, ExternalResponse r);

// The design document `_design/<name>` of the opened database as the JS engine wants it (its key
// names the database and the revision, so a new revision compiles afresh). 404 as CouchDB.
// Every design document of `db` as (id, body), read in one transaction; 500 unknown_error
// past 10,000 of them (a bound on what one request holds in memory).
std::vector<std::pair<std::string, Json>> read_design_doc_bodies(const Call& call,
                                                                 const core::DbRef& db);

core::js::DesignDoc load_design_doc(storage::Transaction& tr, const core::DbRef& db,
                                    const std::string& name);
// The same with its body parsed, shared: design documents up to kRememberedDesignDocMax bytes are
// remembered between transactions (a design document changes only in a transaction marked
// touch_metadata(), core/db/db_cache.h), so a function called on every request reads and parses
// its design document once per revision.
struct LoadedDesignDoc {
  core::js::DesignDoc js;
  Json body;
};
inline constexpr std::size_t kRememberedDesignDocMax = 256 * 1024;
std::shared_ptr<const LoadedDesignDoc> design_doc(storage::Transaction& tr, const core::DbRef& db,
                                                  const std::string& name);

// CouchDB compiles a JavaScript design document's view functions when it is written
// (couch_mrview:validate): 400 compilation_error "Compilation of the map function in the 'v'
// view failed: <reason>" (reduce likewise; built-in reduces are not compiled). Other functions
// (validate_doc_update, filters, updates) compile when first used, as in CouchDB. nullopt for
// other documents, deletions, other languages, or a server without an engine.
std::optional<core::CouchError> check_design_functions(const Call& call, std::string_view id,
                                                       const Json& doc);

// Brings a view index (JavaScript or Mango) up to date with the database, one bounded build
// step per transaction (http/api/view.cc). Throws the step's CouchError.
boost::asio::awaitable<void> build_index(const Call& call, const core::DbRef& db,
                                         const core::ViewGroup& g);

// The engine, or 500 when the server runs without one (router unit tests).
core::js::Engine& js_engine(const Call& call);

}  // namespace chaise::http
