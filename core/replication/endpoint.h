// core/replication/endpoint.h — a database as the replicator sees it: the handful of CouchDB
// calls a replication makes of its source and its target.
//
// Two implementations live above core: a database on a remote server reached over HTTP, and a
// database of this server answered in process (http/client/). The replicator knows neither: it
// speaks JSON to this interface, so core stays free of HTTP.
//
// Contract
// - Every call blocks until its answer or an error. An error is a CouchError: the peer's own
//   (status and body as it answered) or, with status 0, a failed exchange (refused, timed out,
//   malformed answer) — error "network_error" or "timeout" and a reason saying what happened.
// - Calls are made by one thread at a time per Endpoint object, except that the replicator opens
//   an Endpoint per worker thread when it runs several.
// - cancel() may be called from any thread: a call in progress ends soon with an error and later
//   calls fail at once.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/security/security.h"
#include "core/util/error.h"

namespace chaise::core::replication {

using Json = nlohmann::ordered_json;

// One _changes request: `since` as the source gave it (a number or a string), at most `limit`
// rows, style=all_docs; `longpoll` waits up to `timeout_ms` for a first change.
struct ChangesQuery {
  Json since = 0;
  std::size_t limit = 500;
  bool longpoll = false;
  std::int64_t timeout_ms = 10'000;
  // Filters (at most one): a design-document filter "ddoc/name" or "_view", with query_params;
  // "_doc_ids" with doc_ids; "_selector" with selector.
  std::string filter;
  Json query_params = Json::object();
  std::optional<Json> doc_ids;
  std::optional<Json> selector;
  bool include_docs = false;
};

class Endpoint {
 public:
  virtual ~Endpoint() = default;

  // The database's URL without its password (or its name), as jobs and tasks show it.
  virtual std::string display() const = 0;

  // GET /{db}: the info object (404 not_found when the database does not exist).
  virtual Outcome<Json> info() = 0;
  // PUT /{db} with `params` as query parameters (create_target_params).
  virtual Outcome<Json> create(const Json& params) = 0;
  // A _local document by its id without "_local/": nullopt when there is none.
  virtual Outcome<std::optional<Json>> get_local(std::string_view id) = 0;
  // Writes a _local document (its "_rev" as read, if any); the new revision's answer.
  virtual Outcome<Json> put_local(std::string_view id, const Json& doc) = 0;
  // A document as GET /{db}/{id} returns it (design documents for filters).
  virtual Outcome<Json> get_doc(std::string_view id) = 0;
  // PUT /{db}/{id} of `doc` (interactive edit); the answer ({ok, id, rev}).
  virtual Outcome<Json> put_doc(std::string_view id, const Json& doc) = 0;
  // GET /{db}/_changes: {"results": [...], "last_seq": ..., "pending": ...}.
  virtual Outcome<Json> changes(const ChangesQuery& q) = 0;
  // POST /{db}/_revs_diff with {id: [rev, ...]}.
  virtual Outcome<Json> revs_diff(const Json& id_revs) = 0;
  // POST /{db}/_bulk_get?revs=true&latest=true with `docs` ([{id, rev, atts_since}]): the
  // "results" array; each attachment carries its metadata and digest but not its bytes, as
  // CouchDB answers without attachments=true. `use_bulk_get` false (or a source without _bulk_get):
  // the same rows fetched with GET /{db}/{id}?open_revs=[...], one request per document.
  virtual Outcome<Json> bulk_get(const Json& docs, bool use_bulk_get) = 0;
  // POST /{db}/_bulk_docs with new_edits=false: the answer array (errors only, as CouchDB gives).
  virtual Outcome<Json> bulk_docs(const Json& docs) = 0;

  // A body read piece by piece: a revision with its attachments, whatever their size, passes
  // through a replication in bounded memory.
  class BodyReader {
   public:
    virtual ~BodyReader() = default;
    virtual const std::string& content_type() const = 0;
    // Appends at most `max` bytes to `out`: how many, 0 once the body is complete; an error when
    // the source fails or stalls.
    virtual Outcome<std::size_t> read(std::string& out, std::size_t max) = 0;
  };
  // A revision with its history and the bytes of the attachments the target lacks (those newer
  // than `atts_since`): with `multipart`, multipart/related where there are such bytes (the
  // attachments as stored, gzip included, with their encoding said), else JSON with the
  // attachments inline (base64, decoded). content_type() says which.
  virtual Outcome<std::unique_ptr<BodyReader>> open_doc_with_attachments(std::string_view id,
                                                                         const Json& rev,
                                                                         const Json& atts_since,
                                                                         bool multipart) = 0;
  // Whether the server takes a multipart/related PUT with encoded attachments as CouchDB does
  // (CouchDB and Chaise; pouchdb-server stores the encoded bytes as they are). Asked once.
  virtual bool takes_encoded_multipart() = 0;
  // PUT /{db}/{id}?new_edits=false of a body open_doc_with_attachments gave, sent as it is read.
  virtual Outcome<Json> put_replicated(std::string_view id, BodyReader& body) = 0;
  // POST /{db}/_ensure_full_commit.
  virtual Outcome<Json> ensure_full_commit() = 0;

  virtual void cancel() = 0;
};

// Where the replicator's endpoints come from: the server gives it one of these.
class EndpointFactory {
 public:
  virtual ~EndpointFactory() = default;
  struct Options {
    std::int64_t connection_timeout_ms = 30'000;
    int http_connections = 20;
  };
  // `endpoint` is a replication's "source" or "target" as given (a URL string or an object
  // with "url", "headers", "auth"). A URL naming this server's own listener is answered in
  // process, as the user its credentials name. Errors: 400 for a URL that cannot be used.
  virtual Outcome<std::unique_ptr<Endpoint>> open(const Json& endpoint, const Options& o) = 0;
  // The _replicator database of this server, read and written as the replicator itself.
  virtual std::unique_ptr<Endpoint> replicator_db(std::string_view db_name) = 0;
};

}  // namespace chaise::core::replication
