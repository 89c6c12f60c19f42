#include "core/db/changes_notifier.h"

#include <algorithm>

#include "core/db/db_updates.h"

namespace chaise::core {

StorageResult<std::int64_t> read_update_counter(Transaction& tr, const DbRef& db) {
  auto v = tr.get(db.space.meta_key(keyspace::kUpdateCounter), storage::Snapshot::yes);
  if (!v.ok()) return v.error();
  return v->has_value() ? keyspace::decode_counter(**v) : 0;
}

void prefetch_update_counter(Transaction& tr, const DbRef& db) {
  tr.prefetch(db.space.meta_key(keyspace::kUpdateCounter), storage::Snapshot::yes);
}

struct ChangesNotifier::WaiterState final : ChangesNotifier::Waiter {
  std::int64_t seen = 0;
  Wake wake;
  std::atomic<bool> done{false};
  void fire(std::int64_t version) {
    if (!done.exchange(true)) wake(version);
  }
};

ChangesNotifier::ChangesNotifier(storage::Database& store) : store_(store) {}

ChangesNotifier::~ChangesNotifier() {
  alive_->store(false);
  std::unordered_map<std::int64_t, Entry> dbs;
  std::thread poller;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    poller.swap(poller_);
  }
  poll_cv_.notify_all();
  if (poller.joinable()) poller.join();
  {
    std::lock_guard lock(mu_);
    dbs.swap(dbs_);
  }
  for (auto& [id, e] : dbs)
    if (e.watch) e.watch->cancel();
}

std::size_t ChangesNotifier::armed_watches() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& [id, e] : dbs_) n += e.armed ? 1 : 0;
  return n;
}

std::size_t ChangesNotifier::polled() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& [id, e] : dbs_) n += e.polled ? 1 : 0;
  return n;
}

std::shared_ptr<ChangesNotifier::Waiter> ChangesNotifier::wait(const DbRef& db,
                                                               std::int64_t seen_counter,
                                                               Wake wake) {
  return wait_on(db.id, db.space.meta_key(keyspace::kUpdateCounter), seen_counter, std::move(wake));
}

std::shared_ptr<ChangesNotifier::Waiter> ChangesNotifier::wait_db_updates(std::int64_t seen_counter,
                                                                          Wake wake) {
  return wait_on(kDbUpdatesEntry, db_updates_counter_key(), seen_counter, std::move(wake));
}

std::shared_ptr<ChangesNotifier::Waiter> ChangesNotifier::wait_on(std::int64_t entry,
                                                                  const std::string& key,
                                                                  std::int64_t seen_counter,
                                                                  Wake wake) {
  auto w = std::make_shared<WaiterState>();
  w->seen = seen_counter;
  w->wake = std::move(wake);
  bool fire_now = false, arm_now = false;
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(mu_);
    Entry& e = dbs_[entry];
    if (e.key.empty()) e.key = key;
    if ((e.armed || e.polled) && e.known > seen_counter) {
      fire_now = true;
    } else {
      // Drop waiters that were cancelled, so an entry does not grow without bound.
      std::erase_if(e.waiters, [](const std::weak_ptr<WaiterState>& x) { return x.expired(); });
      e.waiters.push_back(w);
      if (!e.armed && !e.polled) {
        e.armed = arm_now = true;
        generation = e.generation;
      }
    }
  }
  if (fire_now) w->fire(0);
  if (arm_now) arm(entry, key, generation);
  return w;
}

void ChangesNotifier::arm(std::int64_t db_id, const std::string& key, std::uint64_t generation) {
  auto tr = store_.create_transaction();
  auto v = tr.get(key, storage::Snapshot::yes);
  const std::int64_t current = v.ok() && v->has_value() ? keyspace::decode_counter(**v) : 0;
  std::weak_ptr<std::atomic<bool>> alive = alive_;
  auto watch = tr.watch(key, [this, alive, db_id](storage::Error e, std::int64_t version) {
    auto a = alive.lock();
    if (!a || !a->load()) return;
    if (e == storage::Error::success) return fired(db_id, version);  // the counter moved
    std::lock_guard lock(mu_);
    auto it = dbs_.find(db_id);
    if (it != dbs_.end() && it->second.armed) poll_instead(it->second);
  });
  auto committed = tr.commit();  // read-only: registers the watch with the value read above
  std::vector<std::shared_ptr<WaiterState>> wake;
  {
    std::lock_guard lock(mu_);
    Entry& e = dbs_[db_id];
    if (!committed.ok() || !v.ok()) {
      if (e.armed && e.generation == generation) poll_instead(e);
    } else if (e.generation == generation) {
      e.watch = std::move(watch);
      e.known = current;
      // Waiters that saw less than the database has now need no watch to be woken.
      take_passed(e, current, wake);
    }
  }
  for (auto& s : wake) s->fire(0);
}

void ChangesNotifier::fired(std::int64_t db_id, std::int64_t version) {
  std::vector<std::shared_ptr<WaiterState>> wake;
  {
    std::lock_guard lock(mu_);
    auto it = dbs_.find(db_id);
    if (it == dbs_.end()) return;
    Entry& e = it->second;
    e.armed = false;
    e.known = -1;
    e.watch.reset();
    ++e.generation;
    for (auto& x : e.waiters)
      if (auto s = x.lock()) wake.push_back(std::move(s));
    e.waiters.clear();
  }
  for (auto& s : wake) s->fire(version);
}

void ChangesNotifier::take_passed(Entry& e, std::int64_t current,
                                  std::vector<std::shared_ptr<WaiterState>>& wake) {
  std::erase_if(e.waiters, [&](const std::weak_ptr<WaiterState>& x) {
    auto s = x.lock();
    if (!s) return true;
    if (s->seen < current) {
      wake.push_back(std::move(s));
      return true;
    }
    return false;
  });
}

void ChangesNotifier::poll_instead(Entry& e) {
  e.armed = false;
  e.polled = true;
  e.watch.reset();
  ++e.generation;  // a late arm() of the failed watch leaves the entry alone
  if (!poller_.joinable() && !stopping_) poller_ = std::thread([this] { poll_loop(); });
  poll_cv_.notify_all();
}

void ChangesNotifier::poll_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    poll_cv_.wait(lock, [&] {
      return stopping_ ||
             std::any_of(dbs_.begin(), dbs_.end(), [](const auto& x) { return x.second.polled; });
    });
    if (stopping_) break;
    poll_cv_.wait_for(lock, kPollInterval, [&] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    poll_once();
    lock.lock();
  }
}

void ChangesNotifier::poll_once() {
  std::vector<std::pair<std::int64_t, std::string>> keys;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, e] : dbs_)
      if (e.polled) keys.emplace_back(id, e.key);
  }
  auto tr = store_.create_transaction();
  std::vector<std::pair<std::int64_t, std::int64_t>> counters;
  for (const auto& [id, key] : keys) {
    auto v = tr.get(key, storage::Snapshot::yes);
    if (!v.ok()) return;  // the store is out of reach: the waiters wait for the next round
    counters.emplace_back(id, v->has_value() ? keyspace::decode_counter(**v) : 0);
  }
  std::vector<std::shared_ptr<WaiterState>> wake;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, current] : counters) {
      auto it = dbs_.find(id);
      if (it == dbs_.end() || !it->second.polled) continue;
      Entry& e = it->second;
      e.known = current;
      take_passed(e, current, wake);
      // No one left to poll for: the next wait() sets a watch again.
      if (e.waiters.empty()) {
        e.polled = false;
        e.known = -1;
      }
    }
  }
  for (auto& s : wake) s->fire(0);
}

}  // namespace chaise::core
