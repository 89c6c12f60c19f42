// core/index/cursors.h — the built-in indexes as streams of rows: _all_docs (+ _design_docs, _local_docs)
// over by_id (RFC 002) and _changes over the changes subspace (RFC 000).
//
// Cursors are paged: each next_page() runs in the transaction it is given and remembers where it
// stopped, so a response of any size is served by a series of short transactions with bounded
// memory (RFC 000 "Access Patterns": a document updated during a long response may show up twice;
// the last occurrence is its newest state). Rows come out serialized, ready to stream.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/db/shards.h"
#include "core/docs/documents.h"
#include "core/query/selector.h"

namespace chaise::core {

enum class AllDocsKind { all_docs, design_docs, local_docs };

struct AllDocsQuery {
  AllDocsKind kind = AllDocsKind::all_docs;
  std::optional<std::string> start_key;  // doc ids (startkey / start_key, or key)
  std::optional<std::string> end_key;
  bool inclusive_end = true;
  bool descending = false;
  std::int64_t limit = -1;  // -1: no limit
  std::int64_t skip = 0;
  bool include_docs = false;
  bool conflicts = false;          // with include_docs
  bool attachments = false;        // with include_docs: attachment bodies inline
  bool att_encoding_info = false;  // with include_docs
};

class AllDocsCursor {
 public:
  AllDocsCursor(DbRef db, AllDocsQuery q);
  // Appends up to `rows_max` serialized rows to `out`. Returns true while more may follow.
  StorageResult<bool> next_page(Transaction& tr, std::size_t rows_max,
                                std::vector<std::string>& out);
  // total_rows and offset as CouchDB 3.5 reports them (couch_mrview all_docs_fold,
  // fabric_view_all_docs). total_rows: doc_count for _all_docs, the number of design documents for
  // _design_docs, -1 for _local_docs (CouchDB: null). offset: the documents of the whole by-id
  // index (design and others alike, also for _design_docs) before the first one the range selects
  // in iteration order, plus skip, at most total_rows. Call before the first page.
  StorageResult<std::int64_t> total_rows(Transaction& tr);
  StorageResult<std::int64_t> offset(Transaction& tr);

 private:
  StorageResult<std::string> row_json(Transaction& tr, std::string_view id, const RevId& rev);
  DbRef db_;
  AllDocsQuery q_;
  std::string begin_, end_;  // remaining key range [begin_, end_)
  std::int64_t to_skip_;
  std::int64_t to_emit_;  // -1: unlimited
  bool done_ = false;
  std::optional<std::int64_t> total_rows_;  // read once
};

// One key of a `keys=[...]` lookup: a document id, or (is_id false) the JSON text of a key that
// is not a string, which names no document.
struct AllDocsKey {
  std::string text;
  bool is_id = true;
};

// `keys=[...]` lookups for _all_docs: one row per key, in order (deleted docs and unknown keys as
// CouchDB shows them; a key that is not a string as {"key":1,"error":"not_found"}). _local_docs
// leaves unknown and non-string keys out, as CouchDB 3.5 does.
StorageResult<std::vector<std::string>> all_docs_keys(Transaction& tr, const DbRef& db,
                                                      const std::vector<AllDocsKey>& keys,
                                                      const AllDocsQuery& q);

// A filter on the winning revision of each change (filter=ddoc/name, filter=_view; core/index/filters.h
// has the JavaScript ones). Called from the cursor, one change at a time.
class ChangesDocFilter {
 public:
  virtual ~ChangesDocFilter() = default;
  // Whether the change passes; `doc` is the winning revision as CouchDB shows it (with "_id",
  // "_rev", "_deleted" for a tombstone). Once a call failed, failed() says how and every later
  // call answers false: the feed must stop.
  virtual bool pass(std::string_view doc) = 0;
  virtual const std::optional<CouchError>& failed() const = 0;
};

struct ChangesQuery {
  Sequence since;  // exclusive
  bool descending = false;
  std::int64_t limit = -1;  // -1: no limit
  bool all_docs_style = false;
  bool include_docs = false;
  bool conflicts = false;
  bool attachments = false;                         // with include_docs: attachment bodies inline
  bool att_encoding_info = false;                   // with include_docs
  std::optional<std::vector<std::string>> doc_ids;  // filter=_doc_ids
  bool design_only = false;                         // filter=_design
  std::optional<Selector> selector;                 // filter=_selector: the winning doc must match
  std::shared_ptr<ChangesDocFilter> doc_filter;     // filter=ddoc/name, filter=_view
  std::optional<std::int64_t> shard;                // one shard's feed (RFC 004); else all, merged
  // > 0: a row carries its seq only when the number of rows the feed may still send, counted
  // before the row, is a multiple of seq_interval; the others have "seq":null. CouchDB counts down
  // from `limit`, or from kCouchLimitDefault without one (fabric_view_changes), so with
  // seq_interval=3 and no limit the 2nd, 5th, 8th... rows carry theirs.
  std::int64_t seq_interval = 0;
  // Rows earlier cursors of the same live feed have sent (`limit` is then what is left of it).
  std::int64_t rows_sent_before = 0;
  // The bound on N the earlier cursor of the same live feed reached (its count_bound()): this
  // cursor goes on from it instead of reading the database's counters (three reads per wake).
  std::optional<std::int64_t> count_bound;

  // CouchDB's #changes_args{} limit when none is given.
  static constexpr std::int64_t kCouchLimitDefault = 1'000'000'000'000'000;
};

// Reads one shard, or merges every shard that ever existed by sequence (a k-way merge: sequences
// are unique and totally ordered across shards, RFC 004), so /_changes stays one ordered feed.
class ChangesCursor {
 public:
  ChangesCursor(DbRef db, ChangesQuery q);
  StorageResult<bool> next_page(Transaction& tr, std::size_t rows_max,
                                std::vector<std::string>& out);
  // Where the feed got to, as CouchDB reports it in last_seq: the sequence of the last change
  // scanned (emitted or filtered out); before any, `since` (descending: the update_seq).
  // filter=_doc_ids (looked up) and filter=_design report CouchDB's lookup results instead: the
  // update_seq once an ascending feed of every shard is complete, else the last row's sequence.
  const Sequence& last_seq() const { return last_seq_; }
  std::int64_t emitted() const { return emitted_; }
  // The N below which no later row's N may go (monotonic_count), if `since` or a row set one.
  std::optional<std::int64_t> count_bound() const { return count_bound_; }
  // CouchDB's "pending": the changes after last_seq() in iteration order (with a filter, those
  // the filter has not looked at yet), also when limit=0 stopped the feed before its first row.
  // For filter=_doc_ids (looked up) and filter=_design CouchDB counts the changes after `since`
  // less the rows emitted, and so does this. Exact up to kPendingCountMax, beyond that the
  // database's total number of changes bounds it (CouchDB's own value is an estimate too).
  StorageResult<std::int64_t> pending(Transaction& tr);
  // A single-shard feed that reached the end of a shard no longer in the current map: the
  // consumer must move to the new topology (GET /{db}/_changes/_meta?since=last_seq).
  bool topology_changed() const { return topology_changed_; }

  static constexpr std::int64_t kPendingCountMax = 100'000;
  // With at most this many doc_ids, the feed looks the documents up instead of scanning every change
  // (CouchDB's changes_doc_ids_optimization_threshold).
  static constexpr std::size_t kDocIdsLookupMax = 1000;
  // Rows of a page stop growing past this many bytes (next_page).
  static constexpr std::size_t kPageBytesMax = 1024 * 1024;

 private:
  struct Entry {
    Sequence seq;
    std::string key;
    std::string value;
  };
  // A change taken from the scans (merged in feed order), its entry decoded, waiting to be
  // rendered; `record` is its named revision read ahead with the others of its batch.
  struct Ready {
    Sequence seq;
    std::string id;
    RevId rev;
    std::int64_t branch_count = 0;
    bool deleted = false;
    std::optional<std::optional<RevRecord>> record;
  };
  // Changes taken into ready_ at a time (fewer when the page or the limit needs fewer): their
  // bodies are read together when rows show or filter documents.
  static constexpr std::size_t kReadyBatch = 64;
  struct ShardScan {
    std::int64_t shard = 0;
    std::string begin, end;  // what is left to fetch
    std::deque<Entry> buffer;
    bool exhausted = false;
  };
  StorageResult<bool> init(Transaction& tr);
  storage::Status fetch(Transaction& tr, ShardScan& scan, std::size_t rows_max);
  // Takes up to `n` changes from the scans into ready_ (none: the scans are done).
  storage::Status take_ready(Transaction& tr, std::size_t n, std::size_t rows_max);
  // The keys of `shard` in the changes index that the feed covers: after `since` ascending,
  // all of them descending.
  std::pair<std::string, std::string> shard_range(std::int64_t shard) const;
  // `counted` changes, or beyond kPendingCountMax the database's number of changes (one per
  // document) if that is more.
  StorageResult<std::int64_t> bounded(Transaction& tr, std::int64_t counted);
  bool stopped_by_limit() const { return q_.limit >= 0 && emitted_ >= q_.limit; }
  StorageResult<std::optional<std::string>> row_json(Transaction& tr, const Sequence& seq,
                                                     const std::string& id, const RevId& rev,
                                                     std::int64_t branch_count, bool deleted,
                                                     const std::optional<RevRecord>* record);
  StorageResult<bool> next_page_by_doc_ids(Transaction& tr, std::vector<std::string>& out);
  storage::Status finish(Transaction& tr);
  // Keeps the N of `s` from going back along the feed (down when ascending, from `since`'s N on;
  // up when descending): writers take N from a snapshot read, so concurrent transactions' Ns
  // can come out of their versionstamps' order, and clients read N as progress.
  void monotonic_count(Sequence& s);

  DbRef db_;
  ChangesQuery q_;
  std::vector<ShardMap> maps_;
  std::vector<ShardScan> scans_;
  std::deque<Ready> ready_;
  Sequence last_seq_;
  std::optional<std::int64_t> count_bound_;  // monotonic_count's: the N shown last
  std::int64_t emitted_ = 0;
  bool initialized_ = false;
  bool done_ = false;
  bool by_doc_ids_ = false;
  std::vector<std::string> sorted_doc_ids_;  // q_.doc_ids sorted, to filter a scanned feed
  bool lookup_ = false;  // CouchDB serves this feed by a lookup (by_doc_ids_, design_only)
  std::optional<Sequence> last_row_seq_;
  bool topology_changed_ = false;
};

}  // namespace chaise::core
