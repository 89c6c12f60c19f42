// core/index/unique_index.h — unique Mango indexes: a constraint as simple to use as a
// relational database's unique index.
//
// A Mango json index created with "unique": true (POST /{db}/_index) is also a constraint: no
// two live documents may have the same index key ([v1, v2, ...] of its fields, compared as
// CouchDB collates; documents without every field, or not matching its partial_filter_selector,
// have no key and are not constrained). Design documents are never constrained.
//
// Enforcement happens inside the write transaction of every document edit (update_doc,
// replicate_doc, DocStepBatch), against a table that maps each key to the documents holding it:
//   (kUnique, IndexId, kUniqueKeys, KeyCollation, DocId) = KeyJSON
//   (kUnique, IndexId, kUniqueDocs, DocId)               = KeyCollation   (to move a doc's entry)
//   (kUnique, IndexId, kUniqueViolations, DocId)         = {"key":..,"conflicts_with":"<id>"}
// An interactive edit whose new winner would take a key another live document holds is refused
// with 409 conflict "unique constraint <index> violated by <that document>"; the check reads the
// key's range with conflict, so of two concurrent writers claiming one key exactly one commits.
// A replicated edit (new_edits=false) is never refused (CouchDB's semantics win): it takes the
// key too and a violation record names both documents until the edited document changes again.
//
// Which indexes are unique is the registry (kMeta, "unique_indexes"), read with conflict by
// every write transaction (one point read), so an index registered concurrently with a write
// either sees that write's entry or makes it retry. POST /{db}/_index registers the index in the
// same transaction that writes its design document, then builds its table in bounded steps over
// the live documents; writes meanwhile are already enforced. If the documents already violate
// it, the index is dropped again and the creation fails with the offending ids. Editing or
// deleting the design document so that the unique view is gone (or changed) drops the
// constraint in that write; a design document written directly (PUT, _bulk_docs) may not add a
// unique view, only POST /_index does (a replicated one is accepted as a plain index).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/db/databases.h"
#include "core/docs/doc_json.h"

namespace chaise::core {

using OrderedJson = nlohmann::ordered_json;

struct UniqueIndexDef {
  std::string id;    // 32 hex digits: digest of ddoc, name and map
  std::string ddoc;  // "_design/..."
  std::string name;
  OrderedJson map;     // the view's map: {"fields":{..},"partial_filter_selector":{..}}
  bool ready = false;  // false while its table is being built
};
using UniqueIndexes = std::vector<UniqueIndexDef>;

std::string unique_index_id(std::string_view ddoc, std::string_view name, const OrderedJson& map);
// Whether a design document body's view (its value in "views") is declared unique.
bool view_declared_unique(const OrderedJson& view);

// The registry, read with conflict. Shared: parsed once per distinct stored value.
StorageResult<std::shared_ptr<const UniqueIndexes>> read_unique_indexes(Transaction& tr,
                                                                        const DbRef& db);
void write_unique_indexes(Transaction& tr, const DbRef& db, const UniqueIndexes& list);

// The unique-index work of one document edit, between reading the document and writing it.
// `body` is the new winner's body (compact JSON without "_" members), nullptr when the document
// ends deleted. check() only reads: the error that refuses an interactive edit. write() moves the
// document's entries (and for a design document drops the constraints its new body no longer
// declares, updating `list`); with record_violations, keys held by another document are taken
// anyway and recorded as violations.
StorageResult<std::optional<CouchError>> unique_check(Transaction& tr, const DbRef& db,
                                                      const UniqueIndexes& list,
                                                      std::string_view id, const std::string* body);
storage::Status unique_write(Transaction& tr, const DbRef& db, UniqueIndexes& list,
                             std::string_view id, const std::string* body, bool record_violations);

// ---- Building a new unique index (POST /{db}/_index) ----
struct UniqueDuplicate {
  OrderedJson key;
  std::vector<std::string> ids;  // the documents holding it (two or more)
};
// One bounded step over the live documents after `cursor` (a document id; empty to start),
// adding their entries; documents whose key another one holds are collected in `dups` (at most
// kUniqueDuplicatesMax ids in all). Returns true when every document was visited.
inline constexpr std::size_t kUniqueBuildDocsPerStep = 500;
inline constexpr std::size_t kUniqueDuplicatesMax = 100;
StorageResult<bool> unique_build_step(Transaction& tr, const DbRef& db, const UniqueIndexDef& def,
                                      std::string& cursor, std::vector<UniqueDuplicate>& dups);

// Building a unique index's table over the live documents, as a sequence of transaction bodies of
// kUniqueBuildDocsPerStep documents each (unique_build_step): run it until done(), calling
// committed() after each commit. A retried attempt starts again from the last committed step.
class UniqueIndexBuild {
 public:
  UniqueIndexBuild(DbRef db, UniqueIndexDef def);  // each step writes the build's claim
  storage::Status operator()(Transaction& tr);
  void committed();
  bool done() const { return done_; }
  // The documents found sharing a key so far (at most kUniqueDuplicatesMax ids in all).
  const std::vector<UniqueDuplicate>& duplicates() const { return dups_; }

 private:
  DbRef db_;
  UniqueIndexDef def_;
  std::string cursor_, attempt_cursor_;
  std::vector<UniqueDuplicate> dups_, attempt_dups_;
  bool done_ = false, attempt_done_ = false;
};

// The claim on building a unique index, kept in the store so that every server sharing it (on
// FoundationDB) sees it: a second POST /_index of the same index is refused while a build runs,
// wherever it runs, and GET /_index can tell a running build from an interrupted one. A build
// takes the claim in a transaction, writes it again with every step (UniqueIndexBuild), and
// drops it when it ends; a claim not written for kUniqueClaimMs (its server died) has lapsed.
// The claim is core/db/claims.h's, held by this process's node_id().
inline constexpr std::int64_t kUniqueClaimMs = 30'000;
// Takes the claim for this process at `now_ms` (wall clock); false when a build holds it.
StorageResult<bool> take_unique_claim(Transaction& tr, const DbRef& db, const std::string& index_id,
                                      std::int64_t now_ms);
// Whether a build holds the claim at `now_ms` (read without conflict).
StorageResult<bool> unique_claim_held(Transaction& tr, const DbRef& db, const std::string& index_id,
                                      std::int64_t now_ms);
// Drops this process's claim (another's, taken after this one lapsed, stays).
storage::Status drop_unique_claim(Transaction& tr, const DbRef& db, const std::string& index_id);

// Marks the index ready (true), or removes it with its table (false), in the registry.
StorageResult<bool> unique_finish(Transaction& tr, const DbRef& db, const std::string& index_id,
                                  bool keep);

// Up to `limit` recorded violations of an index: {"id","key","conflicts_with"}.
StorageResult<std::vector<OrderedJson>> unique_violations(Transaction& tr, const DbRef& db,
                                                          const std::string& index_id,
                                                          std::size_t limit);

}  // namespace chaise::core
