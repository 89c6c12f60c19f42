// core/batch/doc_batches.h — the transactions that write documents: DocWriteBatch (one _bulk_docs, PUT
// or DELETE, idempotent under commit_unknown_result via the transaction-ID subspace of RFC 000)
// DocStepBatch (the group commit of server-side updates of one document) and PurgeBatch (one
// POST /{db}/_purge).
//
// Each is a transaction body built from the write path's primitives (core/docs/documents.h) and the
// hooks every edit runs (core/index/write_hooks.h); the caller runs it, retries included, and commits.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/db/idempotency.h"
#include "core/docs/documents.h"
#include "core/docs/purge.h"
#include "core/docs/validation.h"
#include "core/index/unique_index.h"
#include "core/js/js.h"

namespace chaise::core {

// ---- DocWriteBatch: the body of one _bulk_docs / PUT / DELETE transaction ----
// Usage: add docs, then run `batch(tr)` as a transaction body (retries included) until
// `has_more()` is false; `results()` then holds one entry per added document, in order.
// Idempotent: every attempt writes this attempt's transaction id; an attempt after a
// commit_unknown_result first checks whether the previous one committed and, if it did, keeps its
// results and writes nothing. A document id that appears twice is written in a later transaction.
class DocWriteBatch {
 public:
  // Per transaction (round): documents, and body bytes (a single larger document still goes alone).
  static constexpr std::size_t kDocsPerTransactionMax = 10'000;
  static constexpr std::size_t kBodyBytesPerTransactionMax = 4'000'000;
  // And the transaction's own size (Transaction::approximate_size: keys, values, conflict ranges)
  // before the next document: many small documents are mostly keys, which FoundationDB counts
  // toward its 10,000,000 bytes too. A round that must be one transaction (an Idempotency-Key)
  // is not cut; one too large fails whole.
  static constexpr std::size_t kTransactionBytesPerRoundMax = 5'000'000;

  struct Item {
    bool local = false;
    bool replicated = false;
    DocUpdate update;  // interactive (and _local: base_rev text in local_rev)
    ReplicatedDoc replicated_doc;
    std::optional<std::string> local_rev;
  };
  using ItemResult = Outcome<UpdateResult>;  // for _local docs rev = {0, "N"} is carried as text

  DocWriteBatch(std::string db_name, std::vector<Item> items);
  // Every non-design document edit then passes `v` first (CouchDB's order: an edit that would
  // conflict is not validated, it conflicts).
  void set_validator(std::shared_ptr<DocValidator> v) { validator_ = std::move(v); }

  // POST /{db}/_index of a unique index: every attempt registers `def` (not ready) before the
  // edits, so the design document that declares it is accepted (core/index/write_hooks.h).
  void register_unique(UniqueIndexDef def);
  // The engine synchronous JavaScript indexes run their map functions in (core/index/sync_index.h).
  void set_js(js::Engine* js) { js_ = js; }

  // Idempotency (core/db/idempotency.h). Every attempt first reads the record of `r` in its own
  // transaction: one with the same fingerprint means nothing is written and replayed() holds its
  // response; one for another request sets idem_mismatch(). Otherwise the round is written, then
  // `render(*this)` (results() complete) gives the response, stored in the same transaction and
  // kept in rendered(). The response and the writes commit together, so the batch must be one
  // round: call only when fits_one_round().
  using Render = std::function<StoredResponse(const DocWriteBatch&)>;
  void set_idempotency(IdemRequest r, Render render);
  // Whether every item goes in the first transaction (no more than the per-transaction limits,
  // each id once).
  bool fits_one_round() const;
  const std::optional<StoredResponse>& replayed() const { return replayed_; }
  const std::optional<StoredResponse>& rendered() const { return rendered_; }
  bool idem_mismatch() const { return idem_mismatch_; }

  // The transaction body. Fails the transaction only with storage errors.
  storage::Status operator()(Transaction& tr);
  // Call before retrying an attempt that failed with `e`. A round that outlived its transaction
  // (transaction_too_old: more documents than a loaded machine reads and writes in 5 seconds) is
  // cut in half for the retry and the rounds after it, down to one document; a round with an
  // Idempotency-Key is one transaction whole and is not cut.
  void retrying(storage::Error e);
  // Call after a transaction committed (or definitely failed) to move to the next round.
  void committed();
  bool has_more() const {
    return next_round_ < items_.size() && !db_missing_ && !replayed_ && !idem_mismatch_;
  }
  bool db_missing() const { return db_missing_; }
  const std::vector<std::optional<ItemResult>>& results() const { return results_; }
  // _local results carry their text rev here (same index); empty for others.
  const std::vector<std::string>& local_revs() const { return local_revs_; }
  // The transaction-ID key the last attempt wrote (empty if it wrote none); once that attempt is
  // committed, hand it to a TxIdJanitor.
  const std::string& tx_key() const { return tx_key_; }
  // Whether the last attempt updated a synchronous index's reduce tree, and so conflicts with every
  // other such writer of the database (core/index/sync_index.h).
  bool updated_reduce_trees() const { return updated_reduce_trees_; }

 private:
  std::string db_name_;
  std::vector<Item> items_;
  std::vector<std::optional<ItemResult>> results_;
  std::vector<std::string> local_revs_;
  std::vector<std::size_t> round_;  // indexes handled by the current round
  std::size_t next_round_ = 0;      // items before this index are finished
  std::vector<bool> done_;
  std::string tx_id_;
  std::string tx_key_;
  int attempts_ = 0;
  bool db_missing_ = false;
  std::shared_ptr<DocValidator> validator_;
  std::optional<UniqueIndexDef> register_unique_;
  js::Engine* js_ = nullptr;
  std::optional<IdemRequest> idem_;
  Render render_;
  std::optional<StoredResponse> replayed_;
  std::optional<StoredResponse> rendered_;
  bool idem_mismatch_ = false;
  bool idem_expired_ = false;  // this attempt found an expired record of the key
  bool updated_reduce_trees_ = false;
  std::size_t round_docs_max_ = kDocsPerTransactionMax;
};

// ---- DocStepBatch: server-side updates of one document, many per transaction ----
// The group commit behind PATCH (hot documents): each step is a function of the
// current body; the steps apply in order, each to what the one before left, and every accepted
// step is a revision of its own, child of the one before. One transaction writes the last of
// them, with the others as its ancestors (their bodies are not kept, as after compaction), so
// _changes shows the last revision of each group. A step never conflicts with the other steps.
// An update handler's call as a step (DocStep::script): adjacent script steps of one design
// document run in one entry into the JavaScript engine (js::Engine::update_many), the document
// entering once. The batch fills in `kind` and `response_json`; the step's outcome is the new
// revision when saved, the error when failed, and RevId{} when nothing was saved here (unsaved:
// the handler saved nothing; declined: it saves something other than this document in place,
// which the caller then writes the ordinary way, as it does when the document has attachments or
// does not exist).
struct ScriptStep {
  std::shared_ptr<const js::DesignDoc> ddoc;
  js::UpdateCall call;
  std::shared_ptr<JsDocValidator> validator;  // may be null
  std::size_t max_body_bytes = 0;             // document_too_large beyond
  js::UpdateOutcome::Kind kind = js::UpdateOutcome::Kind::failed;
  std::string response_json;
};

struct DocStep {
  // The new body (compact JSON object without "_" members) from the current one and its
  // revision, or the error that refuses this step (the next step then sees the same body).
  std::function<Outcome<std::string>(const std::string& body, const RevId& rev)> apply;
  // If-Match: refused with 409 unless the current revision is this one.
  std::optional<RevId> expected;
  // validate_doc_update for this step's writer (may be null; design documents are not validated).
  std::shared_ptr<DocValidator> validator;
  // An Idempotency-Key: `render(outcome)` is stored under it in the same transaction.
  std::optional<IdemRequest> idem;
  std::function<StoredResponse(const Outcome<RevId>&)> render;
  // Instead of `apply`, `expected` and `validator`: an update handler's call.
  std::shared_ptr<ScriptStep> script;
  // Set by the batch when the step's JavaScript ran past its time limit: its outcome in every
  // later attempt, which does not run it again (an attempt that ran it may be too old to commit).
  std::optional<CouchError> settled;
};

class DocStepBatch {
 public:
  static constexpr std::size_t kStepsPerTransactionMax = 1000;
  // JavaScript time an attempt spends on steps before it leaves the rest to the next group: well
  // inside the 5 s a transaction may live (one step still runs past it, up to its own limit).
  static constexpr std::chrono::milliseconds kStepsTimeMax{1000};

  // The revision written last and its record, which the next batch of the same document may
  // start from without reading the body again (it still reads, and conflicts on, the winner).
  struct Cache {
    RevId rev;
    RevRecord record;
  };

  // `js`: the engine synchronous JavaScript indexes run in (core/index/sync_index.h).
  DocStepBatch(std::string db_name, std::string id, std::vector<DocStep> steps,
               std::optional<Cache> cache = std::nullopt, js::Engine* js = nullptr);
  // The transaction body (retries included; idempotent under commit_unknown_result like
  // DocWriteBatch). Fails the transaction only with storage errors.
  storage::Status operator()(Transaction& tr);
  bool db_missing() const { return db_missing_; }
  // One per step: its new revision or its error (404 when the document is missing or deleted).
  const std::vector<Outcome<RevId>>& results() const { return results_; }
  // Whether step i was left to a later group (kStepsTimeMax), and taking it back to queue it.
  bool deferred(std::size_t i) const { return deferred_[i]; }
  DocStep take_step(std::size_t i) { return std::move(steps_[i]); }
  const std::string& tx_key() const { return tx_key_; }
  std::optional<Cache> take_cache() { return std::move(cache_); }

 private:
  js::Engine* js_ = nullptr;
  std::string db_name_;
  std::string id_;
  std::vector<DocStep> steps_;
  std::optional<Cache> cache_;
  std::vector<Outcome<RevId>> results_;
  std::vector<bool> deferred_;
  std::string tx_id_;
  std::string tx_key_;
  int attempts_ = 0;
  bool db_missing_ = false;
};

// ---- PurgeBatch: the body of one POST /{db}/_purge ----
// Usage as DocWriteBatch: run `batch(tr)` (retries included) and call committed() after each
// commit until has_more() is false; purged() then holds, per request, the leaves it purged.
// Each request gets its purge log entry and one update of the database's sequence, as in
// CouchDB, whether it purged anything or not. Purges of one database go one at a time: each
// reads the purge counter with conflict, which numbers its entries. Idempotent under
// commit_unknown_result like DocWriteBatch.
class PurgeBatch {
 public:
  static constexpr std::size_t kDocsPerTransactionMax = 10'000;
  // Bytes a transaction holds before the remaining documents wait for the next one (bodies
  // rewritten whole when their delta base goes).
  static constexpr std::size_t kBytesPerTransactionMax = 4'000'000;
  // Old purge entries trimmed per transaction.
  static constexpr std::size_t kTrimMax = 1000;

  PurgeBatch(std::string db_name, std::vector<PurgeRequest> requests);
  // The engine synchronous JavaScript indexes run in (core/index/sync_index.h).
  void set_js(js::Engine* js) { js_ = js; }
  storage::Status operator()(Transaction& tr);
  void committed();
  bool has_more() const { return next_ < requests_.size() && !db_missing_; }
  bool db_missing() const { return db_missing_; }
  const std::vector<PurgeRequest>& requests() const { return requests_; }
  const std::vector<std::vector<RevId>>& purged() const { return purged_; }
  const std::string& tx_key() const { return tx_key_; }

 private:
  std::string db_name_;
  std::vector<PurgeRequest> requests_;
  std::vector<std::vector<RevId>> purged_;
  std::size_t next_ = 0;       // requests before it are committed
  std::size_t round_end_ = 0;  // the current attempt handles [next_, round_end_)
  js::Engine* js_ = nullptr;
  std::string tx_id_;
  std::string tx_key_;
  int attempts_ = 0;
  bool db_missing_ = false;
};

}  // namespace chaise::core
