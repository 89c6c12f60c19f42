// core/index/view_index.h — map/reduce views: the index of a design document's views in the store,
// built incrementally from _changes, and the cursors that answer view queries.
//
// A design document's views form one index named by its signature (a digest of the language,
// the views' map/reduce sources and options, and views.lib): a design document edited without
// touching its views keeps its index; one whose views changed gets a new one, and
// _view_cleanup removes the indexes no design document names any more. Keys:
// core/db/keyspace.h (kViews).
//
// Building: update_step() is a transaction body that indexes the next batch of changes after the
// index's sequence (at most kDocsPerStep documents, kBytesPerStep of document JSON and about
// kWriteBytesPerStep of rows: always well inside FoundationDB's 5 s and 10 MB), removing each changed document's old rows through
// the id index and adding the rows the map functions emit. Its read of the index sequence is a
// conflicting one, so two builders never both apply one batch.
//
// Querying: ViewCursor pages through rows (map) or groups (reduce) like the _all_docs cursor:
// each page in its own short transaction, rows serialized ready to stream. A reduce query reads
// each group's reduction from the view's reduce tree (core/index/reduce_tree.h), which update_step
// keeps current: O(log n) entries per group, not every row.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/db/claims.h"
#include "core/docs/documents.h"
#include "core/index/reducers.h"
#include "core/js/js.h"

namespace chaise::core {

using OrderedJson = nlohmann::ordered_json;

struct ViewDef {
  std::string name;
  std::string map;
  std::optional<std::string> reduce;  // JS source or a built-in ("_sum", "_count", ...)
  std::optional<OrderedJson>
      mango_map;  // language "query": {"fields":{..},"partial_filter_selector":{..}}
};

// A design document's views, as the indexer and the query need them.
struct ViewGroup {
  std::string ddoc_id;         // "_design/x"
  js::DesignDoc ddoc;          // for the JS engine (key names the revision)
  std::string signature;       // 32 hex digits
  std::string language;        // "javascript", or "query" (Mango json indexes, mapped in C++)
  std::vector<ViewDef> views;  // sorted by name; a view's number is its index here
  bool include_design = false;
  bool local_seq = false;
  // options.sync_index (core/index/sync_index.h); never with local_seq (a writer cannot know its
  // documents' sequences before commit).
  bool sync = false;
  // A partitioned design document (in a partitioned database, unless options.partitioned is
  // false; Mango indexes too): its rows are kept per partition (the document id's part
  // before ':'), and it is queried one partition at a time.
  bool partitioned = false;

  // The views of a design document body (as stored: with _id, _rev). Errors as CouchDB:
  // 404 not_found "missing" when `view` names no view there (pass "" to skip that check).
  static Outcome<ViewGroup> from_design_doc(const std::string& ddoc_id, const std::string& json,
                                            const std::string& js_key, bool db_partitioned);
  std::optional<std::size_t> index_of(std::string_view view) const;
};

// About how many bytes the index takes in the store (its rows, id entries and reduce trees),
// as the storage engine estimates it (Transaction::get_estimated_range_size_bytes).
StorageResult<std::int64_t> view_index_size(Transaction& tr, const DbRef& db, const ViewGroup& g);

// The index's sequence (zero before the first build step).
StorageResult<Sequence> view_index_seq(Transaction& tr, const DbRef& db, const ViewGroup& g,
                                       storage::Snapshot snapshot);

// One build step; returns true once the index has caught up with the database as `tr` sees it.
// A map function that fails to compile (or a JS engine failure) is the CouchError.
inline constexpr std::size_t kDocsPerStep = 500;
inline constexpr std::size_t kBytesPerStep = 4'000'000;
// Writes (rows, id entries) one step may hold before the rest waits for the next step; the
// reduce tree's nodes come on top, well inside FoundationDB's 10 MB.
inline constexpr std::size_t kWriteBytesPerStep = 4'000'000;
// `applied`, when given, receives the number of changes (and purges) the step took in.
StorageResult<Outcome<bool>> update_step(Transaction& tr, const DbRef& db, const ViewGroup& g,
                                         js::Engine& js, std::size_t* applied = nullptr);

// Building an index as one of many requests, on one server or many sharing the store: one builds
// at a time, under the index's claim (core/db/claims.h), the others wait for it. step() is a
// transaction body, run again until it says caught_up:
//  - with no live claim of another's (none, this build's own, or lapsed by this server's clock
//    after kViewBuildLapse unchanged), it takes the claim and runs update_step(); `progressed`
//    leaves the claim written (the next step writes it again), `caught_up` clears it;
//  - with another's live claim it only reads: `caught_up` once the index has reached the
//    database's update sequence as of this build's first wait, else `wait` (run it again later).
// The claim only spares work: update_step's conflicting read of the index sequence keeps two
// builders exact if a stalled one wakes after being taken over.
inline constexpr std::chrono::milliseconds kViewBuildLapse{10'000};
enum class BuildStep { progressed, caught_up, wait };

class ViewIndexBuild {
 public:
  ViewIndexBuild(DbRef db, const ViewGroup& g, js::Engine& js);
  // `applied`: as update_step's. A map function that fails is the CouchError.
  StorageResult<Outcome<BuildStep>> step(Transaction& tr, std::size_t* applied);
  // Gives the claim back when this build holds it (a build that ends in an error; one that
  // caught up holds none).
  storage::Status release(Transaction& tr);

 private:
  DbRef db_;
  const ViewGroup& g_;
  js::Engine& js_;
  std::string owner_;
  std::string claim_key_;
  ClaimWatch watch_{kViewBuildLapse};
  std::optional<Sequence> target_;
};

// Whether a build of the index holds a live claim (by the wall clocks): design info's
// updater_running.
StorageResult<bool> view_build_running(Transaction& tr, const DbRef& db, const ViewGroup& g);

// Whether the group keeps reduce trees (JavaScript views with a reduce function: Mango's
// "_count" is never queried). Their synchronous writers take turns (core/index/sync_index.h).
bool has_reduce_trees(const ViewGroup& g);

// A synchronous index's part of a write transaction (core/index/sync_index.h): replaces the rows of
// `docs` (id, the new winner as the views see it or nullopt when deleted) and sets the index's
// sequence to this transaction's versionstamp. The CouchError: the views cannot run here (a map
// function that does not compile, no JavaScript engine).
StorageResult<Outcome<bool>> index_in_transaction(
    Transaction& tr, const DbRef& db, const ViewGroup& g, js::Engine* js,
    const std::vector<std::pair<std::string, std::optional<std::string>>>& docs);

// Removes the indexes of `db` whose signature is not in `keep`, a bounded amount per call;
// returns true when done.
StorageResult<bool> cleanup_step(Transaction& tr, const DbRef& db,
                                 const std::vector<std::string>& keep);

// Rows in a view (total_rows); of one partition for a partitioned group.
StorageResult<std::int64_t> view_row_count(Transaction& tr, const DbRef& db, const ViewGroup& g,
                                           std::size_t view, const std::string& partition = {});

struct ViewQuery {
  std::size_t view = 0;
  std::optional<OrderedJson> start_key, end_key;
  std::optional<std::string> start_docid, end_docid;
  bool inclusive_end = true;
  bool descending = false;
  std::int64_t limit = -1;  // -1: none
  std::int64_t skip = 0;
  bool include_docs = false;
  bool conflicts = false;          // with include_docs
  bool attachments = false;        // with include_docs: attachment bodies inline
  bool att_encoding_info = false;  // with include_docs
  bool reduce = true;              // for views with a reduce function
  // Reduce grouping: nullopt = one group for the whole range (group=false); SIZE_MAX = exact
  // keys (group=true); N = group_level.
  std::optional<std::size_t> group_level;
  std::optional<std::vector<OrderedJson>> keys;  // rows of these keys, in this order
  std::string partition;                         // the partition queried (partitioned groups)
};

class ViewCursor {
 public:
  ViewCursor(DbRef db, std::shared_ptr<const ViewGroup> g, ViewQuery q, js::Engine* js);
  // Appends up to about `rows_max` serialized rows; true while more may follow. A reduce error
  // (built-in on bad values, a JS failure) is the CouchError.
  StorageResult<Outcome<bool>> next_page(Transaction& tr, std::size_t rows_max,
                                         std::vector<std::string>& out);
  // Rows before the first one the query selects, skip included (map queries).
  StorageResult<std::int64_t> offset(Transaction& tr);
  bool reducing() const { return reducing_; }

 private:
  struct Range {
    std::string begin, end;  // remaining [begin, end)
  };
  StorageResult<Outcome<bool>> map_page(Transaction& tr, std::size_t rows_max,
                                        std::vector<std::string>& out);
  StorageResult<Outcome<bool>> reduce_page(Transaction& tr, std::size_t rows_max,
                                           std::vector<std::string>& out);
  StorageResult<std::string> doc_for(Transaction& tr, std::string_view id,
                                     std::string_view value_json);

  storage::Subspace rows() const;
  storage::Subspace nodes() const;

  DbRef db_;
  std::shared_ptr<const ViewGroup> g_;
  ViewQuery q_;
  js::Engine* js_;
  bool reducing_ = false;
  std::vector<Range> ranges_;
  std::size_t range_ = 0;
  std::int64_t to_skip_;
  std::int64_t to_emit_;
  std::shared_ptr<const Reducer> reducer_;  // reduce queries
};

}  // namespace chaise::core
