// core/db/keyspace.h — every key Chaise writes, in one place (DESIGN.md "core/: the keyspace"):
// the subspaces, the names under them and the value formats. Rooms that own a key build it from
// the names here.
//
// All keys are tuples (storage/tuple.h). Subspace names are small integers, not strings: they are
// repeated in every key, and the RFC names live here as constants instead.
//
// Server-wide:
//   (kSystem, kDbNames, Name)              = (DbFormat, DbId, Partitioned, CreatedUs)
//   (kSystem, kDbIdCounter)                = last DbId allocated (tuple int); ids are never reused
//   (kSystem, kIdemExpiry, ExpiresAtMs, DbId, Key)
//                                          = "": when an idempotency record expires (the janitor
//                                            clears records in this order; core/db/idempotency.h)
//   (kSystem, kInstallation, Name)         = a value every node shares (core/db/installation.h)
//   (kSystem, kNodeReports, NodeId, Chunk) = a server's report of itself (core/db/node_reports.h)
// Per database, under (kDatabases, DbId):
//   (kRevisions, DocId, NotDeleted, RevPos, RevHash)
//        winner: (RevFormat, Sequence, BranchCount, (ParentHash...), BodySize)
//        other:  (RevFormat, null,     null,        (ParentHash...), BodySize)
//        Sequence is a tuple (Incarnation, Versionstamp) nested as one element; written with
//        set_versionstamped_value when it is the committing transaction's own sequence.
//   (kDocs, DocId, RevPos, RevHash, Chunk) = body bytes (compact JSON, no "_" members), chunks of
//                                            kBodyChunkBytes; Chunk = 0, 1, ...
//   (kById, DocId)                         = (ValueFormat, RevPos, RevHash)     live documents only
//                                          (kByIdBodyOnlyFormat: the winner's record is its body
//                                          alone, chunk 0 and no header)
//   (kChanges, ShardId, Incarnation, Versionstamp)
//                                          = (SeqFormat, DocId, RevPos, RevHash, BranchCount,
//                                          NotDeleted)
//   (kCounters, Name)                      = little-endian int64, changed only by atomic add
//   (kLocal, DocId)                        = (LocalFormat, RevCounter, Body), or for a body over
//                                            kBodyChunkBytes (LocalChunkedFormat, RevCounter,
//                                            Chunks) with the body in kLocalChunks
//   (kLocalChunks, DocId, Chunk)           = a _local document's body, chunks of kBodyChunkBytes
//   (kTxIds, TxId)                         = "" (idempotency of document updates, RFC 000)
//   (kIdem, Key, -1)                       = (IdemFormat, Fingerprint:bytes, ExpiresAtMs, Status,
//                                            (HeaderName, HeaderValue, ...), Body:bytes|null)
//   (kIdem, Key, Chunk)                    = a stored response's body too large to go inline (Body
//                                            null), chunks of kBodyChunkBytes
//   (kMeta, Name)                          = revs_limit (tuple int), security (JSON),
//                                            update_counter (little-endian int64, atomic add) ...
//   (kConfig, kChangesShards, StartSeq)    = the shard map in force from StartSeq (core/db/shards.h)
//   (kConfig, kNextShardId)                = the next shard id to allocate (core/db/shards.h)
//   (kAtts, Address, Chunk)                = attachment bytes as stored (core/docs/attachments.h)
//   (kAttRefs, Address)                    = little-endian int64: revision bodies naming Address
//   (kViews, Sig, kViewSeq)                = the Sequence (its text) the index has caught up to
//   (kViews, Sig, kViewRows, View, KeyCollation, DocId, ValueCollation, N)
//                                          = KeyJSON "\n" ValueJSON: a row DocId emitted (core/
//                                            collation.h: bytes that sort as CouchDB collates;
//                                            one document's rows of one key sort by value, as
//                                            CouchDB sorts them; N tells equal ones apart)
//   (kViews, Sig, kViewIds, DocId, View, KeyCollation, ValueCollation, N)
//                                          = "": DocId's rows, to remove them
//   (kViews, Sig, kViewCounts, View)       = little-endian int64: rows in the view (atomic add)
//   (kViews, Sig, kViewNodes, View, Level) [+ RowSuffix]
//                                          = the reduce tree's nodes (core/index/reduce_tree.h)
//   (kViews, Sig, kViewBuildClaim)         = (Owner, WrittenMs): a build runs (core/db/claims.h)
//   (kUnique, IndexId, kUniqueKeys, KeyCollation, DocId)
//                                          = KeyJSON: DocId holds this key of a unique index
//   (kUnique, IndexId, kUniqueDocs, DocId) = KeyCollation: the key DocId holds
//   (kUnique, IndexId, kUniqueViolations, DocId)
//                                          = {"key":..,"conflicts_with":..}: a replicated edit
//                                            took a key another document held
//   (kUnique, IndexId, kUniqueBuildClaim) = (Owner, WrittenMs): a build runs (core/db/claims.h)
//   (kPurged, Incarnation, Versionstamp)   = (PurgedFormat, PurgeSeq, DocId, (RevText...), Count):
//                                            one purge request's document (core/docs/purge.h),
//                                            in purge order; the oldest are trimmed past the
//                                            database's purged_infos_limit
//   (kMeta, kPurgedInfosLimit)             = purged infos kept (tuple int; absent: 1000)
//   (kMeta, kPurgeTrimmed)                 = (Trimmed, (Incarnation, Versionstamp)): how many
//                                            purge entries were trimmed, and the last one's
//                                            sequence (an index behind it starts again)
//   (kMeta, kUniqueIndexes)                = JSON list of the unique indexes (core/index/unique_index.h)
//   (kMeta, kSyncIndexes)                  = JSON list of the synchronous indexes, each ready or
//                                            not (core/index/sync_index.h)
//   Sig is the design document's view signature (core/index/view_index.h); View its view's number.
// A revision's body chunks are Chunk >= 0; its header (deleted flag, attachment list; see
// core/docs/documents.cc) is stored in the same range at Chunk < 0, so one range read returns both.
// Bodies of superseded revisions stay until compaction (CouchDB keeps them too), most of them as
// deltas against their successor's body (core/rev/rev_delta.h; the header then names the base).
// RevHash is stored as bytes: 16 raw bytes for 32-hex revisions, the text itself for opaque ones.
// NotDeleted sorts false < true and RevPos, RevHash ascend, so a document's winning branch
// (CouchDB's rule: live first, then highest pos, then highest hash) is the LAST key of its
// revisions range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "storage/database.h"
#include "storage/subspace.h"
#include "storage/tuple.h"

namespace chaise::core::keyspace {

using storage::Subspace;
using storage::Tuple;

// Top-level prefixes.
inline constexpr std::int64_t kSystem = 0;
inline constexpr std::int64_t kDatabases = 1;

// Under kSystem.
inline constexpr std::int64_t kDbNames = 0;
inline constexpr std::int64_t kDbIdCounter = 1;
inline constexpr std::int64_t kIdemExpiry = 2;
inline constexpr std::int64_t kDbEventLog = 3;
inline constexpr std::int64_t kDbEvents = 4;
inline constexpr std::int64_t kDbEventRow = 5;
inline constexpr std::int64_t kDbEventLogCounter = 6;
inline constexpr std::int64_t kDbEventsCounter = 7;
inline constexpr std::int64_t kInstallation = 8;    // core/db/installation.h
inline constexpr std::int64_t kNodeReports = 9;     // core/db/node_reports.h
inline constexpr std::int64_t kDbEventFolder = 10;  // core/db/db_updates.h

// Under (kDatabases, DbId).
inline constexpr std::int64_t kMeta = 0;
inline constexpr std::int64_t kRevisions = 1;
inline constexpr std::int64_t kDocs = 2;
inline constexpr std::int64_t kById = 3;
inline constexpr std::int64_t kChanges = 4;
inline constexpr std::int64_t kCounters = 5;
inline constexpr std::int64_t kLocal = 6;
inline constexpr std::int64_t kTxIds = 7;
inline constexpr std::int64_t kConfig = 8;
inline constexpr std::int64_t kAtts = 9;
inline constexpr std::int64_t kAttRefs = 10;
inline constexpr std::int64_t kViews = 11;
inline constexpr std::int64_t kIdem = 12;
inline constexpr std::int64_t kUnique = 13;
inline constexpr std::int64_t kPurged = 14;
inline constexpr std::int64_t kLocalChunks = 15;

// Under (kUnique, IndexId) (core/index/unique_index.h).
inline constexpr std::int64_t kUniqueKeys = 0;
inline constexpr std::int64_t kUniqueDocs = 1;
inline constexpr std::int64_t kUniqueViolations = 2;
inline constexpr std::int64_t kUniqueBuildClaim = 3;

// Under (kViews, Sig).
inline constexpr std::int64_t kViewSeq = 0;
inline constexpr std::int64_t kViewRows = 1;
inline constexpr std::int64_t kViewIds = 2;
inline constexpr std::int64_t kViewCounts = 3;
inline constexpr std::int64_t kViewNodes = 4;
inline constexpr std::int64_t kViewBuildClaim = 5;

// Value format versions (first element of each value tuple).
// Keys' first tuple elements that RocksDB's prefix bloom filters cover (storage/tuple_prefix.h):
// (kDatabases, DbId, subspace, DocId) names one document's revisions and body chunks, so reading
// a document that is not there (every new document's PUT) skips the tables without it.
inline constexpr std::size_t kBloomPrefixElements = 4;

// The store options that follow from this keyspace: prefix bloom filters on a document's prefix,
// and column families of their own (storage/rocksdb/families.h) for the four subspaces every document
// write appends to, so that a flush's tables each hold one of them and compactions out of level 0
// overlap little of the level below. The server and the core tests open the store with these.
inline void set_store_options(storage::Options& o) {
  o.bloom_prefix_tuple_elements = kBloomPrefixElements;
  o.family_top = kDatabases;
  o.family_subspaces = {kRevisions, kDocs, kById, kChanges};
  // A document's body and by_id entry are read when it exists (GET, _all_docs, include_docs); a
  // new document's write asks its revisions only, which keep their filters on every level.
  o.family_hit_subspaces = {kDocs, kById};
  // Sequences only grow: the changes feed's level-0 tables move down without a rewrite.
  o.family_ordered_subspaces = {kChanges};
}

inline constexpr std::int64_t kDbFormat = 1;
inline constexpr std::int64_t kRevFormat = 1;
inline constexpr std::int64_t kByIdFormat = 1;
// A by_id entry whose winner was written by that edit with no attachments and a body of one chunk:
// a plain GET reads chunk 0 alone, without looking for a header. Readers that only skip the
// format read it as kByIdFormat.
inline constexpr std::int64_t kByIdBodyOnlyFormat = 2;
inline constexpr std::int64_t kSeqFormat = 1;
inline constexpr std::int64_t kLocalFormat = 1;
inline constexpr std::int64_t kLocalChunkedFormat = 2;
inline constexpr std::int64_t kRevHeaderFormat = 1;
// A revision header whose body chunks hold a delta (core/rev/rev_delta.h) against another stored
// revision: (kRevHeaderDeltaFormat, Deleted, AttList, BasePos, BaseHash:bytes).
inline constexpr std::int64_t kRevHeaderDeltaFormat = 2;
inline constexpr std::int64_t kIdemFormat = 1;
inline constexpr std::int64_t kPurgedFormat = 1;
inline constexpr std::int64_t kDbEventFormat = 1;

// Counter names.
inline constexpr std::string_view kDocCount = "doc_count";
inline constexpr std::string_view kDocDelCount = "doc_del_count";
inline constexpr std::string_view kSizeExternal = "sizes.external";
inline constexpr std::string_view kSizeActive = "sizes.active";
// Document changes ever written: the N of the "N-..." sequence text (core/db/sequence.h).
inline constexpr std::string_view kChangeCount = "change_count";
// Purge entries ever written: the database's purge_seq (written by atomic add; purges read it
// with conflict, so each entry's PurgeSeq is exact).
inline constexpr std::string_view kPurgeSeq = "purge_seq";

// Meta names.
inline constexpr std::string_view kRevsLimit = "revs_limit";
inline constexpr std::string_view kSecurity = "security";
// Bumped (atomic add, so writers never conflict on it) by every transaction that changes a
// document; the changes notifier watches it to wake waiting feeds.
inline constexpr std::string_view kUpdateCounter = "update_counter";
inline constexpr std::string_view kUniqueIndexes = "unique_indexes";
inline constexpr std::string_view kSyncIndexes = "sync_indexes";
inline constexpr std::string_view kPurgedInfosLimit = "purged_infos_limit";
inline constexpr std::string_view kPurgeTrimmed = "purge_trimmed";

// Config names (kConfig).
inline constexpr std::string_view kChangesShards = "changes_shards";
inline constexpr std::string_view kNextShardId = "next_shard_id";

// Body chunks stay under FoundationDB's 100,000-byte value limit.
inline constexpr std::size_t kBodyChunkBytes = 90'000;
// The shard of a database's changes until it is resharded (core/db/shards.h).
inline constexpr std::int64_t kDefaultShard = 0;
// Incarnation of every database created here (RFC 000: bumped when a database moves clusters).
inline constexpr std::int64_t kIncarnation = 0;

// Counter values (kCounters, kUpdateCounter): little-endian int64, as FoundationDB's atomic add
// writes them; a shorter value is zero-extended. Absent counters read as 0.
inline std::int64_t decode_counter(std::string_view value) {
  std::uint64_t v = 0;
  for (std::size_t i = value.size() < 8 ? value.size() : 8; i-- > 0;)
    v = (v << 8) | static_cast<std::uint8_t>(value[i]);
  return static_cast<std::int64_t>(v);
}

// A counter's value as FoundationDB's atomic add writes it, for a transaction that read the
// counter with conflict and sets it.
inline std::string encode_counter(std::int64_t value) {
  std::string out(8, '\0');
  auto u = static_cast<std::uint64_t>(value);
  for (std::size_t i = 0; i < 8; ++i, u >>= 8) out[i] = static_cast<char>(u & 0xff);
  return out;
}

inline Subspace system() { return Subspace(Tuple().add(kSystem)); }
inline Subspace db_names() { return system().sub(Tuple().add(kDbNames)); }
inline std::string db_id_counter_key() { return system().pack(Tuple().add(kDbIdCounter)); }
inline Subspace idem_expiry() { return system().sub(Tuple().add(kIdemExpiry)); }

// The subspaces of one database. A handle: copies share one layout of prefixes, and each thread
// keeps the layouts of the databases it used last, so building or copying the DbRef that every
// request opens allocates nothing (its sixteen prefixes were built and copied per request, 1-2%
// of a GET's and a PUT's server CPU).
class DbSpace {
 public:
  explicit DbSpace(std::int64_t db_id) : l_(layout_of(db_id)) {}

  const Subspace& root() const { return l_->root; }
  const Subspace& revisions() const { return l_->revisions; }
  const Subspace& docs() const { return l_->docs; }
  const Subspace& by_id() const { return l_->by_id; }
  const Subspace& changes() const { return l_->changes; }
  const Subspace& counters() const { return l_->counters; }
  const Subspace& local() const { return l_->local; }
  const Subspace& txids() const { return l_->txids; }
  const Subspace& meta() const { return l_->meta; }
  const Subspace& atts() const { return l_->atts; }
  const Subspace& att_refs() const { return l_->att_refs; }
  const Subspace& views() const { return l_->views; }
  const Subspace& idem() const { return l_->idem; }
  const Subspace& unique() const { return l_->unique; }
  const Subspace& purged() const { return l_->purged; }
  const Subspace& local_chunks() const { return l_->local_chunks; }
  // One unique index's table (core/index/unique_index.h).
  Subspace unique_index(std::string_view index_id) const {
    return l_->unique.sub(Tuple().add_bytes(index_id));
  }
  // One design document's view index (by signature).
  Subspace view_index(std::string_view sig) const { return l_->views.sub(Tuple().add_bytes(sig)); }

  std::string counter_key(std::string_view name) const { return with_string(l_->counters, name); }
  // A partitioned database's per-partition counters (same names): (kCounters, "partition", P, Name).
  std::string partition_counter_key(std::string_view partition, std::string_view name) const {
    return l_->counters.pack(Tuple().add(std::string_view("partition")).add(partition).add(name));
  }
  std::string meta_key(std::string_view name) const { return with_string(l_->meta, name); }
  // The per-document keys below are packed element by element (storage::pack_*), without a Tuple:
  // every document read and write builds several of them.
  std::string by_id_key(std::string_view doc_id) const { return with_string(l_->by_id, doc_id); }
  std::string local_key(std::string_view doc_id) const {
    return l_->local.pack(Tuple().add(doc_id));
  }
  // [begin, end) of one document's revision branches.
  std::pair<std::string, std::string> doc_revisions_range(std::string_view doc_id) const {
    return range_of(with_string(l_->revisions, doc_id));
  }
  std::string revision_key(std::string_view doc_id, bool not_deleted, std::int64_t pos,
                           std::string_view hash) const {
    std::string k = with_string(l_->revisions, doc_id);
    storage::pack_bool(&k, not_deleted);
    storage::pack_int(&k, pos);
    storage::pack_bytes(&k, hash);
    return k;
  }
  // (DocId, RevPos, RevHash) packed after the docs subspace: the prefix of one revision's body
  // chunks.
  std::string body_prefix(std::string_view doc_id, std::int64_t pos, std::string_view hash) const {
    std::string k = with_string(l_->docs, doc_id);
    storage::pack_int(&k, pos);
    storage::pack_bytes(&k, hash);
    return k;
  }
  // [begin, end) of one revision's body chunks.
  std::pair<std::string, std::string> body_range(std::string_view doc_id, std::int64_t pos,
                                                 std::string_view hash) const {
    return range_of(body_prefix(doc_id, pos, hash));
  }
  std::string body_chunk_key(std::string_view doc_id, std::int64_t pos, std::string_view hash,
                             std::int64_t chunk) const {
    std::string k = body_prefix(doc_id, pos, hash);
    storage::pack_int(&k, chunk);
    return k;
  }
  const Subspace& shard_changes(std::int64_t /*shard*/) const { return l_->changes; }

 private:
  // The subspace's prefix and one string element: what s.pack(Tuple().add(v)) packs.
  static std::string with_string(const Subspace& s, std::string_view v) {
    std::string k = s.key();
    storage::pack_string(&k, v);
    return k;
  }
  // Subspace::range of the tuple packed in `packed` (prefix included): [packed + 0x00,
  // packed + 0xff).
  static std::pair<std::string, std::string> range_of(std::string packed) {
    std::string end = packed;
    packed.push_back('\x00');
    end.push_back('\xff');
    return {std::move(packed), std::move(end)};
  }
  struct Layout {
    explicit Layout(std::int64_t db_id)
        : root(Tuple().add(kDatabases).add(db_id)),
          revisions(root.sub(Tuple().add(kRevisions))),
          docs(root.sub(Tuple().add(kDocs))),
          by_id(root.sub(Tuple().add(kById))),
          changes(root.sub(Tuple().add(kChanges))),
          counters(root.sub(Tuple().add(kCounters))),
          local(root.sub(Tuple().add(kLocal))),
          txids(root.sub(Tuple().add(kTxIds))),
          meta(root.sub(Tuple().add(kMeta))),
          atts(root.sub(Tuple().add(kAtts))),
          att_refs(root.sub(Tuple().add(kAttRefs))),
          views(root.sub(Tuple().add(kViews))),
          idem(root.sub(Tuple().add(kIdem))),
          unique(root.sub(Tuple().add(kUnique))),
          purged(root.sub(Tuple().add(kPurged))),
          local_chunks(root.sub(Tuple().add(kLocalChunks))) {}
    Subspace root, revisions, docs, by_id, changes, counters, local, txids, meta, atts, att_refs,
        views, idem, unique, purged, local_chunks;
  };
  // At most this many layouts per thread; past it the thread's set starts again.
  static constexpr std::size_t kLayoutsPerThread = 256;
  static std::shared_ptr<const Layout> layout_of(std::int64_t db_id) {
    thread_local std::unordered_map<std::int64_t, std::shared_ptr<const Layout>> layouts;
    if (auto it = layouts.find(db_id); it != layouts.end()) return it->second;
    if (layouts.size() >= kLayoutsPerThread) layouts.clear();
    auto layout = std::make_shared<const Layout>(db_id);
    layouts.emplace(db_id, layout);
    return layout;
  }
  std::shared_ptr<const Layout> l_;
};

}  // namespace chaise::core::keyspace
