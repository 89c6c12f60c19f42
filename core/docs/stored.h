// core/docs/stored.h — how a document is stored and read back, shared by the files of core/docs/
// (records.cc, write_path.cc, render.cc, compaction.cc). Not for other rooms: they read and write
// documents through core/docs/documents.h. The value layouts are at the top of records.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/docs/documents.h"

namespace chaise::core {

// ---- Revision entries and changes (records.cc) ----

// A revisions-subspace entry as stored; nullopt when it cannot be decoded.
std::optional<StoredBranch> decode_branch(const keyspace::DbSpace& space,
                                          const storage::KeyValue& kv);
// The revisions-subspace key of branch `b`'s leaf.
std::string revision_key(const DbRef& db, std::string_view id, const Branch& b);
// The value of a leaf that is not the winner.
std::string loser_value(const Branch& b, std::int64_t body_size);
// The winner's value, with room for the committing transaction's versionstamp at `slot`.
std::string winner_value_template(const Branch& b, std::int64_t branch_count,
                                  std::int64_t body_size, SeqSlot slot);
// The changes-subspace key of sequence `s` in `shard`.
std::string changes_key(const DbRef& db, std::int64_t shard, const Sequence& s);
// Adds a read conflict on every revision of `id` (what a read of its range would have taken).
void conflict_on_revisions(Transaction& tr, const DbRef& db, std::string_view id);
// The winner of `id`, read from its revisions range (nullopt: no revision stored).
StorageResult<std::optional<StoredBranch>> winner_from_range(Transaction& tr, const DbRef& db,
                                                             std::string_view id,
                                                             storage::Snapshot snapshot);
// The leaf `rev` among `all`, or nullptr.
StoredBranch* find_leaf(std::vector<StoredBranch>& all, const RevId& rev);

// ---- Document-level entries every winner change maintains (write_path.cc) ----

// Clears the changes entry of `id` at `seq`.
void clear_change(Transaction& tr, const DbRef& db, std::string_view id,
                  const std::vector<ShardMap>& maps, const Sequence& seq);
// Adds the changes entry of `id`, whose winner is now `winner`, at this transaction's `slot`.
void write_change(Transaction& tr, const DbRef& db, std::string_view id, const Branch& winner,
                  std::int64_t branch_count, const std::vector<ShardMap>& maps, SeqSlot slot);
// What a document's winner is, for the counters.
enum class WinnerState { none, live, deleted };
// doc_count, doc_del_count and the sizes (and a partitioned database's per-partition ones) after
// the winner of `id` went from `before` to `after`.
void count_winner_change(Transaction& tr, const DbRef& db, std::string_view id, WinnerState before,
                         WinnerState after, std::int64_t external_delta, std::int64_t active_delta);
// The winner `winner` (body `body`, attachments `atts`) of a document whose leaves are `leaves`
// (the winner among them), as a view's map function sees it: what _changes shows with
// include_docs=true&conflicts=true.
StorageResult<std::string> doc_for_views(Transaction& tr, const DbRef& db, std::string_view id,
                                         std::vector<Branch> leaves, const Branch& winner,
                                         std::string_view body, const std::vector<AttInfo>& atts);

// ---- Revision records: body chunks and header (records.cc) ----

// Writes revision `rev`'s record: its body in chunks and, when it has one, its header (deleted
// flag, attachments, `delta_base` when the body is a delta against that revision).
void write_rev(Transaction& tr, const DbRef& db, std::string_view id, const RevId& rev,
               std::string_view body, bool deleted, const std::vector<AttInfo>& atts,
               const RevId* delta_base = nullptr);
// Whether the key of a record's chunk, whose chunk number starts at `chunk_at`, is a header chunk.
bool is_header_chunk(std::string_view key, std::size_t chunk_at);
// A record's header decoded (`ok` false when it cannot be); `delta_base` receives the revision a
// delta body applies to.
RevRecord decode_header_or_empty(std::string_view header, bool& ok,
                                 std::optional<RevId>* delta_base = nullptr);
// A revision's record as stored: with `base`, its body is a delta against that revision.
struct StoredRecord {
  RevRecord rec;
  std::optional<RevId> base;
};
// `no_header`: the caller knows the record has none (by_id's kByIdBodyOnlyFormat), so a body of
// one chunk is read alone.
StorageResult<std::optional<StoredRecord>> read_stored_record(Transaction& tr, const DbRef& db,
                                                              std::string_view id, const RevId& rev,
                                                              storage::Snapshot snapshot,
                                                              bool no_header = false);
// When an edit supersedes the leaf `old_leaf` with `added` (body `added_body`), the leaf's whole
// body becomes a delta against the new one, when that is exact and worth it. Returns the change of
// stored body bytes (<= 0).
StorageResult<std::int64_t> store_superseded_as_delta(Transaction& tr, const DbRef& db,
                                                      std::string_view id, const Branch& old_leaf,
                                                      const Branch& added,
                                                      std::string_view added_body);

// ---- Rendering (render.cc) ----

// Appends members before the closing brace of a serialized JSON object.
std::string append_members(std::string obj, const std::vector<std::string>& members);
// A JSON array of revision strings.
std::string rev_array(const std::vector<std::string>& revs);
// The "_attachments" member of branch `b` as `o` asks for it (empty: none); `follows` receives the
// attachments whose bytes go in the parts after the document in a multipart answer.
StorageResult<std::string> attachments_member(Transaction& tr, const DbRef& db, const Branch& b,
                                              const std::vector<AttInfo>& atts,
                                              const DocReadOptions& o,
                                              std::vector<AttInfo>* follows);

}  // namespace chaise::core
