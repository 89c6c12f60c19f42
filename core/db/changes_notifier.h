// core/db/changes_notifier.h — the process-wide changes poller (RFC 000 "Access Patterns"): it notices
// updates to any database and wakes the feeds waiting on it.
//
// One storage watch per database that has waiting feeds (not one per feed), on the database's
// update counter (keyspace kUpdateCounter, bumped by every document write); one more for the
// feeds of /_db_updates, on the database events' counter (core/db/db_updates.h). When it fires, every
// waiter of that database is woken once and the watch is dropped; the next wait() arms a new one.
// An idle server with 10,000 waiting feeds therefore holds a handful of watches and uses no CPU.
//
// Race-freedom: a feed reads the update counter in the same snapshot as its last changes page and
// passes it as `seen_counter`; if the database has moved past it, wait() wakes at once.
//
// A wake callback gets the version of the commit that woke it when that commit was this
// process's (else 0; see storage::WatchCallback): the woken feed may read at it.
//
// Threading: all methods are thread-safe. Wake callbacks run on a storage thread (the commit
// thread, or the caller of wait()) and must not block: post to the feed's executor.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/db/databases.h"
#include "storage/database.h"

namespace chaise::core {

// The update counter of a database as of `tr`'s snapshot (0 if never written).
StorageResult<std::int64_t> read_update_counter(Transaction& tr, const DbRef& db);

class ChangesNotifier {
 public:
  // A pending wake-up; destroying it cancels the wake-up (the callback never runs after that).
  class Waiter {
   public:
    virtual ~Waiter() = default;
  };

  explicit ChangesNotifier(storage::Database& store);
  ~ChangesNotifier();
  ChangesNotifier(const ChangesNotifier&) = delete;
  ChangesNotifier& operator=(const ChangesNotifier&) = delete;

  using Wake = std::function<void(std::int64_t version)>;

  // Calls `wake` once, after database `db` changes past `seen_counter` (at once if it already has).
  [[nodiscard]] std::shared_ptr<Waiter> wait(const DbRef& db, std::int64_t seen_counter, Wake wake);
  // The same for the server's database events (core/db/db_updates.h): `seen_counter` is
  // read_db_updates_counter().
  [[nodiscard]] std::shared_ptr<Waiter> wait_db_updates(std::int64_t seen_counter, Wake wake);

  std::size_t armed_watches() const;

 private:
  struct WaiterState;
  struct Entry {
    bool armed = false;
    std::uint64_t generation = 0;  // bumped when the watch fires
    std::int64_t known = -1;       // counter value the armed watch was set against
    std::shared_ptr<storage::Watch> watch;
    std::vector<std::weak_ptr<WaiterState>> waiters;
  };
  // Entries are keyed by database id; kDbUpdatesEntry (no database has it) is the events'.
  static constexpr std::int64_t kDbUpdatesEntry = -1;
  std::shared_ptr<Waiter> wait_on(std::int64_t entry, const std::string& key,
                                  std::int64_t seen_counter, Wake wake);
  void arm(std::int64_t db_id, const std::string& key, std::uint64_t generation);
  void fired(std::int64_t db_id, std::int64_t version);

  storage::Database& store_;
  mutable std::mutex mu_;
  std::unordered_map<std::int64_t, Entry> dbs_;  // guarded by mu_
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);
};

}  // namespace chaise::core
