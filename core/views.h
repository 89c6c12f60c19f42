// core/views.h — the built-in indexes as streams of rows: _all_docs (+ _design_docs, _local_docs)
// over by_id (RFC 002) and _changes over the changes subspace (RFC 000).
//
// Cursors are paged: each next_page() runs in the transaction it is given and remembers where it
// stopped, so a response of any size is served by a series of short transactions with bounded
// memory (RFC 000 "Access Patterns": a document updated during a long response may show up twice;
// the last occurrence is its newest state). Rows come out serialized, ready to stream.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "core/documents.h"
#include "core/selector.h"
#include "core/shards.h"

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
  bool conflicts = false;  // with include_docs
  bool attachments = false;        // with include_docs: attachment bodies inline
  bool att_encoding_info = false;  // with include_docs
};

class AllDocsCursor {
 public:
  AllDocsCursor(DbRef db, AllDocsQuery q);
  // Appends up to `rows_max` serialized rows to `out`. Returns true while more may follow.
  StorageResult<bool> next_page(Transaction& tr, std::size_t rows_max,
                                std::vector<std::string>& out);
  // total_rows (doc_count; -1 for _local_docs, which CouchDB answers with null) and offset (rows
  // before the first returned one in iteration order, skip included). Call before the first page.
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
};

// `keys=[...]` lookups for _all_docs: one row per key, in order (deleted docs and unknown keys as
// CouchDB shows them).
StorageResult<std::vector<std::string>> all_docs_keys(Transaction& tr, const DbRef& db,
                                                      const std::vector<std::string>& keys,
                                                      const AllDocsQuery& q);

struct ChangesQuery {
  Sequence since;  // exclusive
  bool descending = false;
  std::int64_t limit = -1;  // -1: no limit
  bool all_docs_style = false;
  bool include_docs = false;
  bool conflicts = false;
  bool attachments = false;        // with include_docs: attachment bodies inline
  bool att_encoding_info = false;  // with include_docs
  std::optional<std::vector<std::string>> doc_ids;  // filter=_doc_ids
  bool design_only = false;                         // filter=_design
  std::optional<Selector> selector;                 // filter=_selector: the winning doc must match
  std::optional<std::int64_t> shard;                // one shard's feed (RFC 004); else all, merged
  std::int64_t seq_interval = 0;                    // >0: only every Nth row carries its seq
};

// Reads one shard, or merges every shard that ever existed by sequence (a k-way merge: sequences
// are unique and totally ordered across shards, RFC 004), so /_changes stays one ordered feed.
class ChangesCursor {
 public:
  ChangesCursor(DbRef db, ChangesQuery q);
  StorageResult<bool> next_page(Transaction& tr, std::size_t rows_max,
                                std::vector<std::string>& out);
  // The sequence of the last change scanned (emitted or filtered out), else `since`.
  const Sequence& last_seq() const { return last_seq_; }
  std::int64_t emitted() const { return emitted_; }
  // Changes after last_seq() in iteration order: exact up to kPendingCountMax, beyond that the
  // database's total number of changes bounds it (CouchDB's own value is an estimate too).
  StorageResult<std::int64_t> pending(Transaction& tr);
  // A single-shard feed that reached the end of a shard no longer in the current map: the
  // consumer must move to the new topology (GET /{db}/_changes/_meta?since=last_seq).
  bool topology_changed() const { return topology_changed_; }

  static constexpr std::int64_t kPendingCountMax = 100'000;
  // With at most this many doc_ids, the feed looks the documents up instead of scanning every change
  // (CouchDB's changes_doc_ids_optimization_threshold).
  static constexpr std::size_t kDocIdsLookupMax = 1000;

 private:
  struct Entry {
    Sequence seq;
    std::string key;
    std::string value;
  };
  struct ShardScan {
    std::int64_t shard = 0;
    std::string begin, end;  // what is left to fetch
    std::deque<Entry> buffer;
    bool exhausted = false;
  };
  StorageResult<bool> init(Transaction& tr);
  storage::Status fetch(Transaction& tr, ShardScan& scan, std::size_t rows_max);
  StorageResult<std::optional<std::string>> row_json(Transaction& tr, const Sequence& seq,
                                                     const std::string& id, const RevId& rev,
                                                     std::int64_t branch_count, bool deleted);
  StorageResult<bool> next_page_by_doc_ids(Transaction& tr, std::vector<std::string>& out);
  void finish();

  DbRef db_;
  ChangesQuery q_;
  std::vector<ShardMap> maps_;
  std::vector<ShardScan> scans_;
  Sequence last_seq_;
  std::int64_t emitted_ = 0;
  bool initialized_ = false;
  bool done_ = false;
  bool by_doc_ids_ = false;
  bool topology_changed_ = false;
};

}  // namespace chaise::core
