// http/api/idempotency.h — the Idempotency-Key header (IETF httpapi draft) on
// every document write: PUT/POST/DELETE/COPY of documents and attachments, _bulk_docs, _update
// handlers and _index (_purge is not served).
//
// The first execution's answer (status, headers, body) is stored in the write's own transaction
// (core/db/idempotency.h); a retry with the same key on the same database gets exactly that answer
// (plus `Idempotent-Replayed: true`) and writes nothing. The same key with a different request
// (method, target, user, Content-Type or body) gets 422; a retry while the first execution is
// still running in this server gets 409. Records expire after [chaise] idempotency_key_ttl seconds
// (default 86400), cleared by the janitor.
//
// Flow: Router::handle calls begin_idempotent() before dispatching (a stored answer is replayed
// without running the endpoint); endpoints write through write_and_render(), which renders their
// answer inside the write transaction when the request carries a key.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "core/batch/doc_batches.h"
#include "core/db/idempotency.h"
#include "core/docs/documents.h"
#include "http/api/request.h"

namespace chaise::http {

// The keys being executed now in this server, by database: a second request with one of them is
// answered 409 instead of racing the first. Thread-safe.
class IdempotencyInFlight {
 public:
  bool enter(const std::string& key);
  void leave(const std::string& key);
  std::size_t size() const;

 private:
  mutable std::mutex mu_;
  std::set<std::string> keys_;  // guarded by mu_
};

// One request's idempotency state (Call::idem).
class IdempotentCall {
 public:
  IdempotentCall(const Call& call, std::string key, std::int64_t ttl_ms,
                 std::shared_ptr<IdempotencyInFlight> in_flight);
  ~IdempotentCall();
  IdempotentCall(const IdempotentCall&) = delete;
  IdempotentCall& operator=(const IdempotentCall&) = delete;

  // Body bytes as a streamed body is read (the router's stream taps them here); `end` once it is
  // complete.
  void body_bytes(std::string_view bytes, bool end);
  // Reads what is left of a streamed body and computes the fingerprint (once).
  boost::asio::awaitable<void> finish(const Call& call);
  const core::IdemRequest& request() const { return request_; }
  bool entered() const { return entered_; }

 private:
  core::IdemRequest request_;
  struct Sha256;
  std::string prefix_;  // method, target, user, content type: the fingerprint's first part
  std::unique_ptr<Sha256> body_;  // the body's SHA-256, as it arrives
  bool body_complete_ = false;
  bool finished_ = false;
  std::string in_flight_key_;
  std::shared_ptr<IdempotencyInFlight> in_flight_;
  bool entered_ = false;
};

// For Router::handle, after authorization: sets up call.idem when the request carries an
// Idempotency-Key and is a document write; answers it (a replay, 422 for another request's key,
// 409 while the key is in flight, 400 for a malformed key) when it must not run. `tap(fn)` makes
// the router's stream hand each streamed body piece to fn.
boost::asio::awaitable<std::optional<Response>> begin_idempotent(
    Call& call, const std::function<void(std::function<void(std::string_view, bool)>)>& tap);

// Writes `batch` and answers with `render(batch)`. With an Idempotency-Key, render runs inside the
// write transaction and its answer is stored with the writes (the batch must fit one
// transaction: 413 otherwise); a retry's stored answer is returned instead. `render` may throw
// HttpError (its error answer is what gets stored). Storage failures and a missing database are
// answered here.
using BatchRender = std::function<Response(const core::DocWriteBatch&)>;
boost::asio::awaitable<Response> write_and_render(const Call& call, core::DocWriteBatch& batch,
                                                  BatchRender render);

// The answer as stored, and back (Server and Date are fresh; Idempotent-Replayed marks a replay).
core::StoredResponse stored_response(const Response& r);
// `replay` false: the answer of this very execution, rendered inside its transaction.
Response replayed_response(const Request& req, const core::StoredResponse& s, bool replay = true);

}  // namespace chaise::http
