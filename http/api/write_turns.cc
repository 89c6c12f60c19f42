#include "http/api/write_turns.h"

#include <boost/asio/use_awaitable.hpp>
#include <utility>

#include "http/api/wakeup.h"

namespace chaise::http {

WriteTurns::Turn& WriteTurns::Turn::operator=(Turn&& o) noexcept {
  if (this != &o) {
    give_back();
    turns_ = std::exchange(o.turns_, nullptr);
    db_ = std::move(o.db_);
  }
  return *this;
}

void WriteTurns::Turn::give_back() {
  if (auto* t = std::exchange(turns_, nullptr)) t->give_back(db_);
}

bool WriteTurns::wanted(const std::string& db) const {
  if (entries_count_.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lock(mu_);
  auto it = entries_.find(db);
  return it != entries_.end() && it->second.wanted;
}

void WriteTurns::learn(const std::string& db, bool conflicts) {
  if (!conflicts && entries_count_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard lock(mu_);
  auto it = entries_.find(db);
  if (it == entries_.end()) {
    if (!conflicts || entries_.size() >= kDatabasesMax) return;
    it = entries_.emplace(db, Entry{}).first;
  }
  it->second.wanted = conflicts;
  if (!conflicts && !it->second.held) entries_.erase(it);
  entries_count_.store(entries_.size(), std::memory_order_relaxed);
}

std::shared_ptr<WriteTurns::Waiter> WriteTurns::enqueue(const std::string& db) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(db);
  if (it == entries_.end()) {
    // Forgotten since the caller asked wanted(), or past the bound: a held entry is kept until
    // it is given back, so the bound is only exceeded by turns in progress.
    it = entries_.emplace(db, Entry{}).first;
    entries_count_.store(entries_.size(), std::memory_order_relaxed);
  }
  if (!it->second.held) {
    it->second.held = true;
    return nullptr;
  }
  auto w = std::make_shared<Waiter>();
  it->second.queue.push_back(w);
  return w;
}

boost::asio::awaitable<WriteTurns::Turn> WriteTurns::take(std::string db) {
  auto w = enqueue(db);
  if (w) co_await async_wait_ready(w, boost::asio::use_awaitable);
  co_return Turn(this, std::move(db));
}

void WriteTurns::give_back(const std::string& db) {
  std::shared_ptr<Waiter> next;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(db);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    if (e.queue.empty()) {
      e.held = false;
      if (!e.wanted) entries_.erase(it);
      entries_count_.store(entries_.size(), std::memory_order_relaxed);
    } else {
      next = std::move(e.queue.front());  // the turn passes on: still held
      e.queue.pop_front();
    }
  }
  if (!next) return;
  std::function<void()> resume;
  {
    std::lock_guard lock(next->mu);
    next->granted = true;
    resume = std::move(next->resume);
  }
  if (resume) resume();
}

}  // namespace chaise::http
