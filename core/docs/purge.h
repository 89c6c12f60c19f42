// core/docs/purge.h — purge: the one hard delete. A purged leaf leaves no trace: its revision
// entry, every revision only it named (their bodies, and the attachment bytes no remaining
// revision names), and, when no leaf is left, the document's changes and by_id entries and its
// share of the counters. A document that keeps leaves moves to a new sequence, as CouchDB moves
// it, so that lazily built indexes see it again.
//
// Each purged document (a request's id with its revisions, purged or not, as CouchDB records
// them) gets an entry in the purge log (keyspace kPurged), ordered by sequence like _changes:
// GET /{db}/_purged_infos reads it, purge_seq counts it, and an index that is built from
// _changes (core/index/view_index.h) removes the rows of the ids logged after its own sequence
// before it takes in the changes that follow. The log keeps the newest purged_infos_limit
// entries (CouchDB's default 1000); an index behind the oldest one it no longer has starts
// again. Indexes maintained in the write transaction (unique and synchronous ones) take the
// purge through the EditHooks, in the purge's own transaction.
//
// Like the rest of core/docs/, these are transaction-body pieces: they never commit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/docs/documents.h"

namespace chaise::core {

inline constexpr std::int64_t kPurgedInfosLimitDefault = 1000;
// CouchDB's [purge] max_document_id_number and max_revisions_number defaults.
inline constexpr std::int64_t kPurgeDocsMaxDefault = 100;
inline constexpr std::int64_t kPurgeRevsMaxDefault = 1000;

// One document of a purge request: its id and the revisions asked for.
struct PurgeRequest {
  std::string id;
  std::vector<RevId> revs;
};

// Purges the leaves of `r.id` among `r.revs` (other revisions are ignored, as CouchDB ignores
// them) and returns them, in the order asked, each once. When the document keeps a leaf, its
// changes entry moves to `slot`. The hooks see the winner change as a replicated edit (never
// refused). Does not write the purge log: log_purge() does.
StorageResult<std::vector<RevId>> purge_doc(Transaction& tr, const DbRef& db, const PurgeRequest& r,
                                            const std::vector<ShardMap>& maps, SeqSlot slot,
                                            EditHooks& hooks);

// The purge log entry of `r` at this transaction's versionstamp order `order`, as purge
// `purge_seq` of the database, with `count` the N of its sequence text.
void log_purge(Transaction& tr, const DbRef& db, const PurgeRequest& r, std::int64_t purge_seq,
               std::uint16_t order, std::int64_t count);

// Purge entries ever written (what /{db} shows as purge_seq).
StorageResult<std::int64_t> purge_seq(Transaction& tr, const DbRef& db, storage::Snapshot snapshot);

struct PurgedInfo {
  Sequence seq;
  std::int64_t purge_seq = 0;
  std::string id;
  std::vector<std::string> revs;  // as requested, in their text form
};
// Up to `limit` entries after `after` (exclusive), oldest first, snapshot reads.
StorageResult<std::vector<PurgedInfo>> purged_infos(Transaction& tr, const DbRef& db,
                                                    const Sequence& after, std::size_t limit);
// The newest entry at or before `at` (nullopt: none).
StorageResult<std::optional<PurgedInfo>> purged_info_at(Transaction& tr, const DbRef& db,
                                                        const Sequence& at);

// GET/PUT /{db}/_purged_infos_limit.
StorageResult<std::int64_t> purged_infos_limit(Transaction& tr, const DbRef& db);
void set_purged_infos_limit(Transaction& tr, const DbRef& db, std::int64_t limit);
// Removes the oldest entries past the limit, at most `max` of them; returns whether any remain
// past it. `written` counts the entries this transaction logged and has not yet counted in the
// purge counter.
StorageResult<bool> trim_purged_infos(Transaction& tr, const DbRef& db, std::int64_t written,
                                      std::size_t max);
// The sequence of the newest entry trimmed ("0" when none was): an index whose sequence is
// below it missed purges and starts again.
StorageResult<Sequence> purges_trimmed_through(Transaction& tr, const DbRef& db,
                                               storage::Snapshot snapshot);

}  // namespace chaise::core
