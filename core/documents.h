// core/documents.h — documents: the RFC 003 update paths, new_edits=false merging, reads, _local
// documents, and DocWriteBatch (a transaction's worth of writes, idempotent under
// commit_unknown_result via the transaction-ID subspace of RFC 000).
//
// Like core/databases.h, functions here are transaction-body pieces: they never commit. A
// storage::Error result means "retry or fail the transaction"; a CouchError is a per-document
// answer.
//
// Read costs of an interactive update (RFC 003): extend the winner = 1 point read; insert = 1
// reverse range read with limit 1; delete the winner = 1 reverse range read with limit 2; extend a
// losing branch = 2 reads. Index maintenance (by_id, changes, counters) is blind.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/attachments.h"
#include "core/databases.h"
#include "core/doc_json.h"
#include "core/idempotency.h"
#include "core/rev.h"
#include "core/shards.h"
#include "core/sync_index.h"
#include "core/unique_index.h"

namespace chaise::core {

inline constexpr std::size_t kMaxDocumentSizeDefault = 8'000'000;  // CouchDB's max_document_size

// One branch KV as stored.
struct StoredBranch {
  Branch branch;
  std::string key;
  bool is_winner = false;         // carries Sequence and BranchCount
  std::optional<Sequence> seq;    // winner only
  std::int64_t branch_count = 0;  // winner only
  std::int64_t body_size = 0;
};

// All branches of a document in key order (the winner last); empty if the document never existed.
StorageResult<std::vector<StoredBranch>> read_branches(Transaction& tr, const DbRef& db,
                                                       std::string_view id,
                                                       storage::Snapshot snapshot);
StorageResult<std::optional<StoredBranch>> read_winner(Transaction& tr, const DbRef& db,
                                                       std::string_view id,
                                                       storage::Snapshot snapshot);
// The winning revision of a live document as its by_id entry names it, without reading its
// revision entry; nullopt when there is no by_id entry (a missing or deleted document). For a
// plain GET, which needs the winner's id and body only.
StorageResult<std::optional<RevId>> live_winner_rev(Transaction& tr, const DbRef& db,
                                                    std::string_view id,
                                                    storage::Snapshot snapshot);
// A plain read of a live document (no option, no attachment): its winner and the JSON that
// branch_doc_json gives it, from the by_id entry and the body alone. nullopt when the document is
// missing or deleted, or has attachments: branch_doc_json answers those.
struct PlainDoc {
  RevId rev;
  std::string json;
};
StorageResult<std::optional<PlainDoc>> plain_doc_json(Transaction& tr, const DbRef& db,
                                                      std::string_view id);
// The body bytes of a stored revision (nullopt if not stored).
StorageResult<std::optional<std::string>> read_body(Transaction& tr, const DbRef& db,
                                                    std::string_view id, const RevId& rev);

// A stored revision: its body and its header. Bodies of superseded revisions stay stored until
// compaction, so this also finds non-leaf revisions (nullopt once compacted or never stored).
struct RevRecord {
  std::string body;
  bool deleted = false;
  std::vector<AttInfo> atts;
};
// Whether a revision's body is still stored, and as a tombstone: at most one key is read.
enum class RevStatus { missing, available, deleted };
StorageResult<RevStatus> rev_status(Transaction& tr, const DbRef& db, std::string_view id,
                                    const RevId& rev);
StorageResult<std::optional<RevRecord>> read_rev(Transaction& tr, const DbRef& db,
                                                 std::string_view id, const RevId& rev,
                                                 storage::Snapshot snapshot = storage::Snapshot::yes);
// read_rev of several revisions (snapshot reads), answers in the order asked. One storage
// iterator walks their bodies in key order, so rows whose documents lie near one another (a page
// of _changes after a bulk load) cost a step each instead of a seek; a long body or a delta is
// read by read_rev itself.
StorageResult<std::vector<std::optional<RevRecord>>> read_revs(
    Transaction& tr, const DbRef& db, const std::vector<std::pair<std::string, RevId>>& revs);


// An interactive edit (new_edits=true).
struct DocUpdate {
  std::string id;
  std::optional<RevId> base_rev;
  bool deleted = false;
  std::string body;  // compact JSON object without "_" members
  std::vector<AttUpload> atts;
  // `body` as couch_rev_hash reads it, when the caller has it (ParsedDoc::body_term); empty: the
  // new revision's hash reads `body`.
  std::string body_term = {};
};
// A replicated revision (new_edits=false): the full path as sent by the client.
struct ReplicatedDoc {
  std::string id;
  Branch path;  // leaf = the revision; ancestors from _revisions
  std::string body;
  std::vector<AttUpload> atts;
};
struct UpdateResult {
  std::string id;
  RevId rev;
};

// Where a document's change lands: `order` numbers its sequence within the transaction (the
// versionstamp's user bytes, distinct per document); `count` is the N of the "N-..." sequence
// text clients see (see core/sequence.h).
struct SeqSlot {
  std::uint16_t order = 0;
  std::int64_t count = 0;
};

// What every document edit of a transaction maintains besides the document: unique indexes
// (core/unique_index.h) and synchronous indexes (core/sync_index.h), read with conflict once per
// transaction. A design document edit may change both lists.
struct WriteHooks {
  UniqueIndexes unique;
  SyncIndexes sync;
};
StorageResult<WriteHooks> read_write_hooks(Transaction& tr, const DbRef& db);

// `maps` are the database's shard maps read with read_shard_maps(..., Snapshot::no) in `tr`;
// `hooks` from read_write_hooks() in `tr`. An interactive edit that would violate a unique
// index is refused. The caller runs sync_index_edits() once the transaction's edits are done.
// `stored` may say that `tr` already knows no revision of the id is stored (ids_without_revisions,
// before this transaction wrote any revision of it): an edit without a base revision (or a
// replicated one) then reads nothing and takes the read conflict the read would have taken.
enum class Stored { unknown, none };
StorageResult<Outcome<UpdateResult>> update_doc(Transaction& tr, const DbRef& db,
                                                const DocUpdate& u, int revs_limit,
                                                const std::vector<ShardMap>& maps, SeqSlot slot,
                                                WriteHooks& hooks, Stored stored = Stored::unknown);
// Which of `sorted_ids` (ascending, distinct) have no revision stored, as `tr` sees them (a
// snapshot read; the caller takes each id's read conflict when it relies on the answer). It
// reads the revisions subspace in key order from an id on: the first stored key found there
// proves every id whose range ends before it. Ids that follow one another (CouchDB's
// sequential uuids, a client's counter) take one read per batch. It stops once reads prove
// fewer than about eight ids each (random ids among many stored documents), leaving the rest
// false: their edits read their own ranges.
StorageResult<std::vector<bool>> ids_without_revisions(Transaction& tr, const DbRef& db,
                                                       const std::vector<std::string_view>& sorted_ids);
// Returns whether anything was written (false: the revision was already present). Never refused
// by a unique index: a violation is recorded.
StorageResult<Outcome<bool>> replicate_doc(Transaction& tr, const DbRef& db, const ReplicatedDoc& d,
                                           int revs_limit, const std::vector<ShardMap>& maps,
                                           SeqSlot slot, WriteHooks& hooks,
                                           Stored stored = Stored::unknown);

// ---- Reading documents as CouchDB returns them ----
struct DocReadOptions {
  std::optional<RevId> rev;
  bool revs = false;
  bool revs_info = false;
  bool conflicts = false;
  bool deleted_conflicts = false;
  bool local_seq = false;
  // Attachments: bodies inline (attachments=true), or only those newer than the nearest of
  // `atts_since` on the revision's path; as "follows" stubs for a multipart answer.
  bool attachments = false;
  std::optional<std::vector<RevId>> atts_since;
  bool att_encoding_info = false;
  bool att_follows = false;
  // couch_users_db:after_doc_read for a reader who is not the user: the body keeps only these
  // members (see strip_non_public_fields); a body that keeps none renders as "" (not_found).
  std::optional<std::vector<std::string>> public_fields;
  // couch_replicator_docs:after_doc_read for a reader of _replicator who is not an admin (the
  // reader's name, null for none): a document this reader does not own shows its source and
  // target without credentials, under the revision id CouchDB makes up for that body.
  std::optional<std::optional<std::string>> replication_reader;
};
// The document JSON with _id/_rev spliced into the stored body. 404 missing / deleted as CouchDB.
StorageResult<Outcome<std::string>> get_doc_json(Transaction& tr, const DbRef& db,
                                                 std::string_view id, const DocReadOptions& o);
// Live documents' winning revisions (`docs`: id and the rev by_id names, ids ascending) as
// get_doc_json renders them with default options (each attachment as CouchDB's metadata-only
// entry, "stub": true, without its bytes; att_encoding_info as given),
// in the same order. One range read over their bodies where the documents lie close together
// (what _all_docs?include_docs=true reads), a read per document where not; "null" for one
// whose body is gone.
StorageResult<std::vector<std::string>> winners_json(
    Transaction& tr, const DbRef& db, const std::vector<std::pair<std::string, RevId>>& docs,
    bool att_encoding_info);

// open_revs: one entry per requested revision (all leaves when `revs` is nullopt):
// {"ok": doc} or {"missing": rev}. With `latest`, a non-leaf revision is answered with the leaves
// that descend from it. 404 missing when the document does not exist and `revs` is nullopt.
StorageResult<Outcome<std::vector<std::string>>> get_open_revs_json(
    Transaction& tr, const DbRef& db, std::string_view id,
    const std::optional<std::vector<RevId>>& revs, bool latest, const DocReadOptions& o);
// What branch_doc_json tells about the attachments it rendered.
struct RenderedAtts {
  bool any = false;               // the revision has attachments
  std::vector<AttInfo> follows;   // rendered as "follows" (att_follows), in document order: their
                                  // bytes go in the parts after the document in a multipart answer
};
// Serializes a stored branch as a document (tombstones as {"_id","_rev","_deleted":true}); ""
// when o.public_fields hides the whole body.
StorageResult<std::string> branch_doc_json(Transaction& tr, const DbRef& db, std::string_view id,
                                           const std::vector<StoredBranch>& all,
                                           const StoredBranch& b, const DocReadOptions& o,
                                           RenderedAtts* atts_out = nullptr);
// The same, with b's record already read (read_revs): no read of its body.
StorageResult<std::string> branch_doc_json(Transaction& tr, const DbRef& db, std::string_view id,
                                           const std::vector<StoredBranch>& all,
                                           const StoredBranch& b, const DocReadOptions& o,
                                           std::optional<RevRecord> record);
// The revision `rev` of a document as a branch ending there: a leaf's own branch, or for a
// superseded revision whose body is still stored, the path below it on the branch that holds it.
// nullopt if neither.
StorageResult<std::optional<StoredBranch>> find_revision(Transaction& tr, const DbRef& db,
                                                         std::string_view id,
                                                         const std::vector<StoredBranch>& all,
                                                         const RevId& rev);

// ---- Compaction: drops bodies of superseded revisions and attachment bytes no body names ----
struct CompactStats {
  std::int64_t bodies_removed = 0;
  std::int64_t attachments_removed = 0;
};
// One bounded step; `cursor` (empty to start) says where to resume. Returns true when done.
StorageResult<bool> compact_step(Transaction& tr, const DbRef& db, std::string& cursor,
                                 CompactStats& stats);

// fabric:open_revs' choice of revisions: all leaves when `revs` is nullopt; else each requested
// revision that is a leaf, or with `latest` the leaves descending from it. `found` is sorted by
// revision and without duplicates (pointers into `all`); `missing` the requested revisions that
// matched nothing, sorted the same way.
struct OpenRevsSelection {
  std::vector<const StoredBranch*> found;
  std::vector<RevId> missing;
};
OpenRevsSelection select_open_revs(const std::vector<StoredBranch>& all,
                                   const std::optional<std::vector<RevId>>& revs, bool latest);

// ---- _revs_diff ----
struct RevsDiff {
  std::vector<std::string> missing;
  std::vector<std::string> possible_ancestors;
};
StorageResult<std::optional<RevsDiff>> revs_diff(Transaction& tr, const DbRef& db,
                                                 std::string_view id,
                                                 const std::vector<std::string>& revs);

// ---- _local documents: (kLocal, DocId) = (Format, RevCounter, Body); revs are "0-N" ----
StorageResult<Outcome<std::string>> get_local_json(Transaction& tr, const DbRef& db,
                                                   std::string_view id);
// base_rev: the client's "_rev" text (nullopt if none). Returns the new rev text ("0-0" on delete).
StorageResult<Outcome<std::string>> put_local(Transaction& tr, const DbRef& db, std::string_view id,
                                              const std::optional<std::string>& base_rev,
                                              bool deleted, std::string_view body);

// ---- validate_doc_update ----
// Runs a database's validation functions on each edit, inside the write transaction
// (core/validation.h has the JavaScript one). Design documents and _local documents are not
// validated (CouchDB checks only that a design document's writer is a db admin).
class DocValidator {
 public:
  virtual ~DocValidator() = default;
  // Once per transaction attempt: whether there is anything to run (false: validate() is not
  // called for that attempt).
  virtual StorageResult<bool> begin(Transaction& tr, const DbRef& db) = 0;
  // `new_doc` and `old_doc` as CouchDB hands them to validate_doc_update (old_doc "null" when the
  // edit replaces nothing). nullopt: accepted; else the answer for this document.
  virtual std::optional<CouchError> validate(std::string_view new_doc, std::string_view old_doc) = 0;
};

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
  // edits, so the design document that declares it is accepted (core/unique_index.h).
  void register_unique(UniqueIndexDef def);
  // The engine synchronous JavaScript indexes run their map functions in (core/sync_index.h).
  void set_js(js::Engine* js) { js_ = js; }

  // Idempotency (core/idempotency.h). Every attempt first reads the record of `r` in its own
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
};

// ---- DocStepBatch: server-side updates of one document, many per transaction ----
// The group commit behind PATCH (hot documents, seed 001): each step is a function of the
// current body; the steps apply in order, each to what the one before left, and every accepted
// step is a revision of its own, child of the one before. One transaction writes the last of
// them, with the others as its ancestors (their bodies are not kept, as after compaction), so
// _changes shows the last revision of each group. A step never conflicts with the other steps.
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
};

class DocStepBatch {
 public:
  static constexpr std::size_t kStepsPerTransactionMax = 1000;

  // The revision written last and its record, which the next batch of the same document may
  // start from without reading the body again (it still reads, and conflicts on, the winner).
  struct Cache {
    RevId rev;
    RevRecord record;
  };

  // `js`: the engine synchronous JavaScript indexes run in (core/sync_index.h).
  DocStepBatch(std::string db_name, std::string id, std::vector<DocStep> steps,
               std::optional<Cache> cache = std::nullopt, js::Engine* js = nullptr);
  // The transaction body (retries included; idempotent under commit_unknown_result like
  // DocWriteBatch). Fails the transaction only with storage errors.
  storage::Status operator()(Transaction& tr);
  bool db_missing() const { return db_missing_; }
  // One per step: its new revision or its error (404 when the document is missing or deleted).
  const std::vector<Outcome<RevId>>& results() const { return results_; }
  const std::string& tx_key() const { return tx_key_; }
  std::optional<Cache> take_cache() { return std::move(cache_); }

 private:
  js::Engine* js_ = nullptr;
  std::string db_name_;
  std::string id_;
  std::vector<DocStep> steps_;
  std::optional<Cache> cache_;
  std::vector<Outcome<RevId>> results_;
  std::string tx_id_;
  std::string tx_key_;
  int attempts_ = 0;
  bool db_missing_ = false;
};

}  // namespace chaise::core
