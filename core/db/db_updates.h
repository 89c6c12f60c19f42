// core/db/db_updates.h — what GET /_db_updates reads: the server's database events (a database
// created, updated or deleted), kept in the store as their own versionstamped index.
//
// Writers never touch the index itself, so that no two writers ever conflict over it: each
// transaction that creates or deletes a database, or changes its documents, appends a blind
// entry to an event log (keyspace kDbEventLog, keyed by its own versionstamp) and bumps a
// counter with an atomic add. A recorder (DbUpdatesRecorder, one per process) watches that
// counter and folds the log into the index:
// each (type, database) pair has one row, at the sequence of its newest event, so a burst of
// updates to one database is one row, as CouchDB's _global_changes keeps one document per pair.
// Folding bumps the index's own counter, which the changes notifier watches for waiting feeds.
//
// Keys (server-wide, under kSystem):
//   (kDbEventLog, Versionstamp, DbName, Type) = "": an event not folded yet
//   (kDbEvents, Incarnation, Versionstamp)    = (Format, DbName, Type, Count): a row of the feed
//   (kDbEventRow, Type, DbName)               = (Incarnation, Versionstamp): the pair's row
//   (kDbEventLogCounter)                      = little-endian int64 (atomic add): log appends
//   (kDbEventsCounter)                        = little-endian int64: rows ever written (the N of
//                                               their sequences)
//   (kDbEventFolder)                          = (Owner, WrittenMs): the recorder that folds
//                                               (core/db/claims.h)
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/db/claims.h"
#include "core/db/databases.h"
#include "core/db/sequence.h"

namespace chaise::core {

enum class DbEvent { created, updated, deleted };
std::string_view db_event_name(DbEvent e);

// Appends an event of database `name` to the log, in `tr`.
void note_db_event(Transaction& tr, std::string_view name, DbEvent type);
// What every transaction that changes documents of `db` does: bumps the database's update
// counter (which wakes its feeds) and notes the update.
void note_db_updated(Transaction& tr, const DbRef& db);

// Folds up to `max` logged events into the index; returns how many it folded (0: the log was
// empty). `from` (empty: the log's start) is where the log's unfolded part begins, as far as the
// caller knows; it is moved past what this transaction folds. Folded events are cleared, and
// the log keeps their tombstones until the store compacts them: a recorder that starts where
// it stopped never reads through them again. (Every event logged later sorts after it: its
// versionstamp is newer than this transaction's reads.)
StorageResult<std::size_t> fold_db_events(Transaction& tr, std::size_t max, std::string& from);

struct DbUpdateRow {
  Sequence seq;
  std::string db_name;
  std::string type;
};
// Up to `limit` rows after `after` (before it when `descending`; "0" then means from the newest),
// snapshot reads.
StorageResult<std::vector<DbUpdateRow>> read_db_updates(Transaction& tr, const Sequence& after,
                                                        std::size_t limit, bool descending);
// The newest row's sequence ("0" when there is none).
StorageResult<Sequence> newest_db_update(Transaction& tr);
// The index's counter (rows ever written), and its key: the changes notifier watches it.
StorageResult<std::int64_t> read_db_updates_counter(Transaction& tr);
// Starts read_db_updates_counter's read (Transaction::prefetch), for a feed about to read a page
// before it.
void prefetch_db_updates_counter(Transaction& tr);
std::string db_updates_counter_key();

// Folds the log in the background: a pass when the log's counter moves (a storage watch), at
// most one per kBatchDelay, each pass transactions of at most kEventsPerTransaction events until
// the log is empty.
//
// Of the recorders of the servers sharing a store (on FoundationDB), one folds at a time, under
// the claim at kDbEventFolder, which its fold transactions write (at most once per
// kClaimRenew). The others neither watch nor fold: every event would wake each of them, and
// their passes would only conflict with the holder's. They look at the claim once a second and
// take over when it has not changed for kClaimLapse (its holder stopped, or folded nothing for
// that long). A claim saves work, not correctness: two recorders folding at once still conflict
// and fold each event once.
class DbUpdatesRecorder {
 public:
  static constexpr std::size_t kEventsPerTransaction = 1000;
  static constexpr std::chrono::milliseconds kBatchDelay{20};
  static constexpr std::chrono::seconds kClaimRenew{1};
  static constexpr std::chrono::seconds kClaimLapse{5};

  explicit DbUpdatesRecorder(storage::Database& store);
  ~DbUpdatesRecorder();  // stops after the pass under way
  DbUpdatesRecorder(const DbUpdatesRecorder&) = delete;
  DbUpdatesRecorder& operator=(const DbUpdatesRecorder&) = delete;

  // Passes completed so far (tests wait on it).
  std::size_t passes() const;
  // Transactions that folded events, committed so far (what the store's commit counters owe to
  // the recorder).
  std::size_t folds() const;

 private:
  // Shared with the watch's callback, which may run on the commit thread after a pass ended.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool stopping = false;   // guarded by mu
    bool poked = true;       // guarded by mu: a pass is due
    std::size_t passes = 0;  // guarded by mu
  };
  void loop();
  void fold_all();
  // Whether another recorder's claim is live by this one's clock (a store error: no).
  bool another_folds();

  storage::Database& store_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::string from_;  // fold_db_events' `from`, on the recorder's thread
  // On the recorder's thread: its claim's owner name, when it last wrote the claim, and how long
  // another's claim has stood unchanged.
  const std::string owner_;
  std::chrono::steady_clock::time_point claimed_at_{};
  ClaimWatch claim_watch_{kClaimLapse};
  std::atomic<std::size_t> folds_{0};
  std::thread thread_;
};

}  // namespace chaise::core
