// http/api/write_turns.h — the document writers of one database that would conflict with each
// other take turns in this process instead.
//
// A write transaction that updates a synchronous index's reduce tree conflicts with every other
// such writer of its database (core/index/sync_index.h): of concurrent ones all but one retry, and
// with many io threads they back off into the transaction timeout. Writers of such a database
// take a turn here before their transaction and give it back after its commit, so one node's
// writers commit one after another and only writers on different nodes still conflict.
//
// Which databases need turns is learned from the writes themselves (learn(), after each round: did
// it touch a reduce tree), so a write is only ever made to wait, never made unsafe: the
// conflicting read in the transaction stays, and a database whose reduce index went away is
// forgotten by its next write. At most kDatabasesMax databases are remembered; past that, writers
// go without turns as before.
//
// Thread-safe; takers may come from any executor. A turn passes straight to the next waiter, which
// resumes on its own executor.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace chaise::http {

class WriteTurns {
 public:
  static constexpr std::size_t kDatabasesMax = 10'000;

  // A turn held; given back when destroyed. Empty (holds nothing) when default-constructed or
  // moved from.
  class Turn {
   public:
    Turn() = default;
    Turn(WriteTurns* turns, std::string db) : turns_(turns), db_(std::move(db)) {}
    Turn(Turn&& o) noexcept : turns_(std::exchange(o.turns_, nullptr)), db_(std::move(o.db_)) {}
    Turn& operator=(Turn&& o) noexcept;
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    ~Turn() { give_back(); }
    explicit operator bool() const { return turns_ != nullptr; }

   private:
    void give_back();
    WriteTurns* turns_ = nullptr;
    std::string db_;
  };

  // Whether writers of `db` take turns.
  bool wanted(const std::string& db) const;
  // What a round of writes to `db` found: whether it updated a reduce tree.
  void learn(const std::string& db, bool conflicts);
  // Waits for `db`'s turn (at once when nobody holds it).
  boost::asio::awaitable<Turn> take(std::string db);

 private:
  struct Waiter {
    std::mutex mu;
    bool granted = false;
    std::function<void()> resume;
    bool ready() const { return granted; }
  };
  struct Entry {
    bool wanted = false;
    bool held = false;
    std::deque<std::shared_ptr<Waiter>> queue;
  };
  // nullptr: the turn is the caller's now; else the waiter to await.
  std::shared_ptr<Waiter> enqueue(const std::string& db);
  void give_back(const std::string& db);

  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  // entries_.size(), written under mu_: writes to a server with no such database (the usual case)
  // learn and ask without taking mu_. A stale 0 only lets a writer go without its turn once.
  std::atomic<std::size_t> entries_count_{0};
};

}  // namespace chaise::http
