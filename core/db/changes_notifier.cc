#include "core/db/changes_notifier.h"

#include "core/db/db_updates.h"

namespace chaise::core {

StorageResult<std::int64_t> read_update_counter(Transaction& tr, const DbRef& db) {
  auto v = tr.get(db.space.meta_key(keyspace::kUpdateCounter), storage::Snapshot::yes);
  if (!v.ok()) return v.error();
  return v->has_value() ? keyspace::decode_counter(**v) : 0;
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
    if (e.armed && e.known > seen_counter) {
      fire_now = true;
    } else {
      // Drop waiters that were cancelled, so an entry does not grow without bound.
      std::erase_if(e.waiters, [](const std::weak_ptr<WaiterState>& x) { return x.expired(); });
      e.waiters.push_back(w);
      if (!e.armed) {
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
    // Fired (the counter moved), cancelled, or failed: in every case wake the waiters, who re-read.
    if (auto a = alive.lock(); a && a->load())
      fired(db_id, e == storage::Error::success ? version : 0);
  });
  auto committed = tr.commit();  // read-only: registers the watch with the value read above
  std::vector<std::shared_ptr<WaiterState>> wake;
  {
    std::lock_guard lock(mu_);
    Entry& e = dbs_[db_id];
    if (!committed.ok() || !v.ok()) {
      // Could not arm: wake everyone so they retry rather than hang.
      e.armed = false;
      ++e.generation;
      for (auto& x : e.waiters)
        if (auto s = x.lock()) wake.push_back(std::move(s));
      e.waiters.clear();
    } else if (e.generation == generation) {
      e.watch = std::move(watch);
      e.known = current;
      // Waiters that saw less than the database has now need no watch to be woken.
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

}  // namespace chaise::core
