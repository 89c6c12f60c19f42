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
// A watch the store refuses or fails (FoundationDB's too_many_watches past [foundationdb]
// max_watches, a cluster out of reach) does not wake its waiters, who would read, wait and be
// refused again in a loop: the database is polled instead, every kPollInterval, by one thread of
// the notifier's, until its waiters are gone; the next wait() tries a watch again.
//
// A wake callback gets the version of the commit that woke it when that commit was this
// process's (else 0; see storage::WatchCallback): the woken feed may read at it.
//
// Threading: all methods are thread-safe. Wake callbacks run on a storage thread (the commit
// thread, or the caller of wait()) and must not block: post to the feed's executor.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/db/databases.h"
#include "storage/database.h"

namespace chaise::core {

// The update counter of a database as of `tr`'s snapshot (0 if never written).
StorageResult<std::int64_t> read_update_counter(Transaction& tr, const DbRef& db);
// Starts read_update_counter's read (Transaction::prefetch): a feed reading a page before it
// waits for the two reads at once.
void prefetch_update_counter(Transaction& tr, const DbRef& db);

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
  // Databases (and the events' counter) polled for want of a watch (/_node/_local/_system shows
  // both counts).
  std::size_t polled() const;

  static constexpr std::chrono::milliseconds kPollInterval{250};

 private:
  struct WaiterState;
  struct Entry {
    bool armed = false;            // a watch is being set or is set
    bool polled = false;           // no watch: the poller reads the counter
    std::uint64_t generation = 0;  // bumped when the watch fires or fails
    std::int64_t known = -1;       // counter value the watch was set against, or last polled
    std::string key;
    std::shared_ptr<storage::Watch> watch;
    std::vector<std::weak_ptr<WaiterState>> waiters;
  };
  // Entries are keyed by database id; kDbUpdatesEntry (no database has it) is the events'.
  static constexpr std::int64_t kDbUpdatesEntry = -1;
  std::shared_ptr<Waiter> wait_on(std::int64_t entry, const std::string& key,
                                  std::int64_t seen_counter, Wake wake);
  void arm(std::int64_t db_id, const std::string& key, std::uint64_t generation);
  void fired(std::int64_t db_id, std::int64_t version);
  // Moves the waiters of `e` that saw less than `current` to `wake`, and drops cancelled ones
  // (under mu_).
  static void take_passed(Entry& e, std::int64_t current,
                          std::vector<std::shared_ptr<WaiterState>>& wake);
  // The entry's watch could not be set or failed: its waiters are polled for (under mu_).
  void poll_instead(Entry& e);
  void poll_loop();
  // Reads the polled counters once and wakes the waiters they have moved past.
  void poll_once();

  storage::Database& store_;
  mutable std::mutex mu_;
  std::unordered_map<std::int64_t, Entry> dbs_;  // guarded by mu_
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);
  std::condition_variable poll_cv_;  // with mu_: an entry is polled, or the notifier stops
  bool stopping_ = false;            // guarded by mu_
  std::thread poller_;               // started by the first poll_instead(); guarded by mu_
};

}  // namespace chaise::core
