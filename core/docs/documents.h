// core/docs/documents.h — documents: the RFC 003 update paths, new_edits=false merging, reads, _local
// documents, and the edit primitives that core/batch/ composes into write transactions.
//
// Like core/db/databases.h, functions here are transaction-body pieces: they never commit. A
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

#include "core/db/databases.h"
#include "core/db/idempotency.h"
#include "core/db/shards.h"
#include "core/docs/attachments.h"
#include "core/docs/doc_json.h"
#include "core/rev/rev.h"

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
// read_branches of several documents at once (one round trip on FoundationDB), in the order of
// `ids`, which may repeat.
StorageResult<std::vector<std::vector<StoredBranch>>> read_branches_of(
    Transaction& tr, const DbRef& db, const std::vector<std::string_view>& ids,
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
StorageResult<std::optional<RevRecord>> read_rev(
    Transaction& tr, const DbRef& db, std::string_view id, const RevId& rev,
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
// text clients see (see core/db/sequence.h).
struct SeqSlot {
  std::uint16_t order = 0;
  std::int64_t count = 0;
};

// What every document edit of a transaction maintains besides the document (the unique and
// synchronous indexes of core/index/write_hooks.h). The write path calls it for each edit, before
// the edit is written; it sees only the edited document's winner, never the storage layout.
class EditHooks {
 public:
  virtual ~EditHooks() = default;
  // Whether a change of document `id`'s winner matters (check() and winner_changed()).
  virtual bool watches_winner(std::string_view id) const = 0;
  // Whether every edit's new winner, rendered as a view's map function sees it, is wanted.
  virtual bool wants_rendered() const = 0;
  // An interactive edit changes the winner's body to `body` (nullptr: deleted): the error that
  // refuses it, if any.
  virtual StorageResult<std::optional<CouchError>> check(Transaction& tr, const DbRef& db,
                                                         std::string_view id,
                                                         const std::string* body) = 0;
  // The winner's body becomes `body` (nullptr: deleted). `record_violations`: a replicated edit,
  // which is never refused.
  virtual storage::Status winner_changed(Transaction& tr, const DbRef& db, std::string_view id,
                                         const std::string* body, bool record_violations) = 0;
  // The edited document's new winner as views see it (nullopt: deleted), in edit order.
  virtual void rendered(std::string id, std::optional<std::string> doc) = 0;
};

// `maps` are the database's shard maps read with read_shard_maps(..., Snapshot::no) in `tr`;
// `hooks` read in `tr` (core/index/write_hooks.h). An interactive edit that
// the hooks refuse is refused. The caller finishes the hooks once the transaction's edits are done.
// `stored` may say that `tr` already knows no revision of the id is stored (ids_without_revisions,
// before this transaction wrote any revision of it): an edit without a base revision (or a
// replicated one) then reads nothing and takes the read conflict the read would have taken.
enum class Stored { unknown, none };
StorageResult<Outcome<UpdateResult>> update_doc(Transaction& tr, const DbRef& db,
                                                const DocUpdate& u, int revs_limit,
                                                const std::vector<ShardMap>& maps, SeqSlot slot,
                                                EditHooks& hooks, Stored stored = Stored::unknown);
// Which of `sorted_ids` (ascending, distinct) have no revision stored, as `tr` sees them (a
// snapshot read; the caller takes each id's read conflict when it relies on the answer). It
// reads the revisions subspace in key order from an id on: the first stored key found there
// proves every id whose range ends before it. Ids that follow one another (CouchDB's
// sequential uuids, a client's counter) take one read per batch. It stops once reads prove
// fewer than about eight ids each (random ids among many stored documents), leaving the rest
// false: their edits read their own ranges.
StorageResult<std::vector<bool>> ids_without_revisions(
    Transaction& tr, const DbRef& db, const std::vector<std::string_view>& sorted_ids);
// Returns whether anything was written (false: the revision was already present). Never refused
// by a unique index: a violation is recorded.
StorageResult<Outcome<bool>> replicate_doc(Transaction& tr, const DbRef& db, const ReplicatedDoc& d,
                                           int revs_limit, const std::vector<ShardMap>& maps,
                                           SeqSlot slot, EditHooks& hooks,
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
  bool any = false;              // the revision has attachments
  std::vector<AttInfo> follows;  // rendered as "follows" (att_follows), in document order: their
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
  std::int64_t docs_visited = 0;  // documents whose revisions were looked at (progress)
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
// What `revs` of a document with `branches` (read_branches) lack; nullopt when none.
std::optional<RevsDiff> revs_diff(const std::vector<StoredBranch>& branches,
                                  const std::vector<std::string>& revs);

// ---- _local documents: (kLocal, DocId) = (Format, RevCounter, Body); revs are "0-N" ----
StorageResult<Outcome<std::string>> get_local_json(Transaction& tr, const DbRef& db,
                                                   std::string_view id);
// base_rev: the client's "_rev" text (nullopt if none). Returns the new rev text ("0-0" on delete).
StorageResult<Outcome<std::string>> put_local(Transaction& tr, const DbRef& db, std::string_view id,
                                              const std::optional<std::string>& base_rev,
                                              bool deleted, std::string_view body);
// A compare-and-set put_local, which CouchDB's HTTP API has not (it compares no _local revisions):
// writes `body` only if the document's revision is still `rev` (nullopt: there is none); false,
// writing nothing, when it is not. Of two transactions that both saw `rev`, one commits and the
// other conflicts, to find on its retry that the revision moved.
StorageResult<Outcome<bool>> put_local_if(Transaction& tr, const DbRef& db, std::string_view id,
                                          const std::optional<std::string>& rev,
                                          std::string_view body);
// The same in a transaction of its own, on database `db_name`; a storage failure is a CouchError.
Outcome<bool> put_local_if(storage::Database& store, std::string_view db_name, std::string_view id,
                           const std::optional<std::string>& rev, std::string_view body);

// ---- validate_doc_update ----
// Runs a database's validation functions on each edit, inside the write transaction
// (core/docs/validation.h has the JavaScript one). Design documents and _local documents are not
// validated (CouchDB checks only that a design document's writer is a db admin).
class DocValidator {
 public:
  virtual ~DocValidator() = default;
  // Once per transaction attempt: whether there is anything to run (false: validate() is not
  // called for that attempt).
  virtual StorageResult<bool> begin(Transaction& tr, const DbRef& db) = 0;
  // `new_doc` and `old_doc` as CouchDB hands them to validate_doc_update (old_doc "null" when the
  // edit replaces nothing). nullopt: accepted; else the answer for this document.
  virtual std::optional<CouchError> validate(std::string_view new_doc,
                                             std::string_view old_doc) = 0;
};

// ---- Edit primitives: core/batch/ composes them into transactions ----

// One edit of a document, whatever the path that produced it.
struct EditPlan {
  std::vector<AttInfo> atts;                        // of the added revision
  const std::vector<AttUpload>* uploads = nullptr;  // bytes to write with it
  std::optional<StoredBranch> old_winner;           // before the edit (nullopt: new document)
  std::optional<StoredBranch> removed;              // the leaf the new revision replaces
  std::optional<StoredBranch> best_other;           // the best remaining existing branch
  Branch added;
  std::string_view body;
  std::int64_t branch_count = 1;  // after the edit
};

// Writes the plan: revisions, body, changes, by_id, counters.
storage::Status apply_edit(Transaction& tr, const DbRef& db, std::string_view id, const EditPlan& p,
                           const std::vector<ShardMap>& maps, SeqSlot slot);

// The hooks of edit `p`, before apply_edit writes it: the error that refuses an interactive edit,
// else what the hooks keep (a replicated edit is never refused; a unique index records a
// violation instead).
StorageResult<std::optional<CouchError>> edit_hooks(Transaction& tr, const DbRef& db,
                                                    EditHooks& hooks, std::string_view id,
                                                    const EditPlan& p, bool interactive);

// The hash of an interactive edit: CouchDB's own (couch_rev.h), so that the same edit gets the
// same rev on Chaise and on CouchDB; Chaise's deterministic hash (rev.h) where CouchDB has none.
// `body_term`, when not empty, is `body` as couch_rev_hash reads it (DocUpdate::body_term).
std::string new_rev_hash(bool deleted, const std::optional<RevId>& parent, std::string_view body,
                         std::string_view body_term, const std::vector<AttInfo>& atts);

}  // namespace chaise::core
