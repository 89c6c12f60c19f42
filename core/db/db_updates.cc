#include "core/db/db_updates.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/db/idempotency.h"
#include "storage/tuple.h"

namespace chaise::core {

using storage::KeyValue;
using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;

namespace {

storage::Subspace log_space() { return keyspace::system().sub(Tuple().add(keyspace::kDbEventLog)); }
storage::Subspace rows_space() { return keyspace::system().sub(Tuple().add(keyspace::kDbEvents)); }
std::string row_of_key(std::string_view type, std::string_view name) {
  return keyspace::system().pack(Tuple().add(keyspace::kDbEventRow).add(type).add(name));
}
std::string log_counter_key() {
  return keyspace::system().pack(Tuple().add(keyspace::kDbEventLogCounter));
}
std::string folder_claim_key() {
  return keyspace::system().pack(Tuple().add(keyspace::kDbEventFolder));
}

StorageResult<DbUpdateRow> decode_row(const KeyValue& kv) {
  auto k = rows_space().unpack(kv.key);
  auto v = Tuple::unpack(kv.value);
  auto seq = k ? Sequence::from_tuple(*k) : std::nullopt;
  if (!seq || !v || v->size() < 4) return storage::Error::io_error;
  const std::string* name = v->get_string(1);
  const std::string* type = v->get_string(2);
  auto count = v->get_int(3);
  if (!name || !type || !count) return storage::Error::io_error;
  seq->count = *count;
  return DbUpdateRow{*seq, *name, *type};
}

}  // namespace

std::string_view db_event_name(DbEvent e) {
  switch (e) {
    case DbEvent::created:
      return "created";
    case DbEvent::deleted:
      return "deleted";
    case DbEvent::updated:
      break;
  }
  return "updated";
}

std::string db_updates_counter_key() {
  return keyspace::system().pack(Tuple().add(keyspace::kDbEventsCounter));
}

void note_db_event(Transaction& tr, std::string_view name, DbEvent type) {
  // The database's name after the versionstamp keeps the keys of one transaction apart.
  std::string key = log_space().key();
  const std::size_t at = storage::pack_incomplete_versionstamp(&key, 0);
  storage::pack_string(&key, name);
  storage::pack_string(&key, db_event_name(type));
  storage::append_versionstamp_offset(&key, at);
  tr.set_versionstamped_key(key, "");
  tr.add(log_counter_key(), 1);
}

void note_db_updated(Transaction& tr, const DbRef& db) {
  tr.add(db.space.meta_key(keyspace::kUpdateCounter), 1);  // wakes the database's feeds
  note_db_event(tr, db.name, DbEvent::updated);
}

StorageResult<std::size_t> fold_db_events(Transaction& tr, std::size_t max, std::string& from) {
  auto [b, e] = log_space().range();
  if (!from.empty()) b = from;
  auto logged = tr.get_range(b, e, static_cast<int>(max), Reverse::no, Snapshot::yes);
  if (!logged.ok()) return logged.error();
  if (logged->empty()) return std::size_t{0};
  // With conflict on the events read, so two recorders never fold the same ones; not on the rest
  // of the log, where writers append all the time.
  tr.add_read_conflict_range(b, storage::key_after(logged->back().key));
  // Each (type, name) once, in the order of its newest event.
  std::map<std::pair<std::string, std::string>, std::size_t> newest;
  for (std::size_t i = 0; i < logged->size(); ++i) {
    auto t = log_space().unpack((*logged)[i].key);
    const std::string* name = t && t->size() == 3 ? t->get_string(1) : nullptr;
    const std::string* type = name ? t->get_string(2) : nullptr;
    if (!type) return storage::Error::io_error;
    newest[{*type, *name}] = i;
  }
  std::vector<std::pair<std::size_t, std::pair<std::string, std::string>>> pairs;
  pairs.reserve(newest.size());
  for (auto& [pair, at] : newest) pairs.emplace_back(at, pair);
  std::sort(pairs.begin(), pairs.end());

  auto counter = tr.get(db_updates_counter_key(), Snapshot::no);
  if (!counter.ok()) return counter.error();
  const std::int64_t base = *counter ? keyspace::decode_counter(**counter) : 0;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto& [type, name] = pairs[i].second;
    const std::string of_key = row_of_key(type, name);
    auto old = tr.get(of_key, Snapshot::no);
    if (!old.ok()) return old.error();
    if (*old) tr.clear(rows_space().key() + **old);
    const auto order = static_cast<std::uint16_t>(i);
    std::string key = rows_space().key();
    storage::pack_int(&key, keyspace::kIncarnation);
    storage::append_versionstamp_offset(&key, storage::pack_incomplete_versionstamp(&key, order));
    tr.set_versionstamped_key(key, Tuple()
                                       .add(keyspace::kDbEventFormat)
                                       .add(name)
                                       .add(type)
                                       .add(base + static_cast<std::int64_t>(i) + 1)
                                       .pack());
    // The row's key after the subspace prefix, versionstamped the same way.
    std::string of_value;
    storage::pack_int(&of_value, keyspace::kIncarnation);
    storage::append_versionstamp_offset(&of_value,
                                        storage::pack_incomplete_versionstamp(&of_value, order));
    tr.set_versionstamped_value(of_key, of_value);
  }
  // Key by key: a range tombstone costs RocksDB's reads of the memtable until it is flushed.
  for (const KeyValue& kv : *logged) tr.clear(kv.key);
  from = storage::key_after(logged->back().key);
  tr.set(db_updates_counter_key(),
         keyspace::encode_counter(base + static_cast<std::int64_t>(pairs.size())));
  return logged->size();
}

StorageResult<std::vector<DbUpdateRow>> read_db_updates(Transaction& tr, const Sequence& after,
                                                        std::size_t limit, bool descending) {
  auto [b, e] = rows_space().range();
  if (!after.is_zero()) {
    const std::string k = rows_space().pack(after.tuple());
    if (descending) {
      e = k;
    } else {
      b = storage::key_after(k);
    }
  }
  auto kvs = tr.get_range(b, e, static_cast<int>(limit), descending ? Reverse::yes : Reverse::no,
                          Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  std::vector<DbUpdateRow> out;
  out.reserve(kvs->size());
  for (const KeyValue& kv : *kvs) {
    auto row = decode_row(kv);
    if (!row.ok()) return row.error();
    out.push_back(std::move(*row));
  }
  return out;
}

StorageResult<Sequence> newest_db_update(Transaction& tr) {
  auto rows = read_db_updates(tr, Sequence{}, 1, true);
  if (!rows.ok()) return rows.error();
  return rows->empty() ? Sequence{} : rows->front().seq;
}

StorageResult<std::int64_t> read_db_updates_counter(Transaction& tr) {
  auto v = tr.get(db_updates_counter_key(), Snapshot::yes);
  if (!v.ok()) return v.error();
  return *v ? keyspace::decode_counter(**v) : 0;
}

void prefetch_db_updates_counter(Transaction& tr) {
  tr.prefetch(db_updates_counter_key(), Snapshot::yes);
}

// ---- DbUpdatesRecorder ------------------------------------------------------------------------

DbUpdatesRecorder::DbUpdatesRecorder(storage::Database& store)
    : store_(store), owner_(work_owner()), thread_([this] { loop(); }) {}

DbUpdatesRecorder::~DbUpdatesRecorder() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  thread_.join();
}

std::size_t DbUpdatesRecorder::passes() const {
  std::lock_guard lock(state_->mu);
  return state_->passes;
}

std::size_t DbUpdatesRecorder::folds() const { return folds_.load(std::memory_order_relaxed); }

void DbUpdatesRecorder::loop() {
  std::shared_ptr<storage::Watch> watch;
  State& st = *state_;
  std::unique_lock lock(st.mu);
  auto last_pass = std::chrono::steady_clock::now() - kBatchDelay;
  while (!st.stopping) {
    // A watch that fails (or a lost wake-up) costs at most this long.
    st.cv.wait_for(lock, std::chrono::seconds(1), [&] { return st.stopping || st.poked; });
    if (st.stopping) break;
    // Events that come together are folded together (CouchDB's global_changes waits too): at
    // most one pass per kBatchDelay however fast databases change, and at once after a quiet
    // spell, so that a waiting feed hears of a lone write within a commit or two.
    st.cv.wait_until(lock, last_pass + kBatchDelay, [&] { return st.stopping; });
    if (st.stopping) break;
    last_pass = std::chrono::steady_clock::now();
    st.poked = false;
    lock.unlock();
    if (watch) watch->cancel();
    watch.reset();
    if (!another_folds()) {
      // The watch first: an event logged while the pass runs fires it.
      auto tr = store_.create_transaction();
      (void)tr.get(log_counter_key(), Snapshot::yes);
      watch = tr.watch(log_counter_key(), [state = state_](storage::Error e, std::int64_t) {
        if (e != storage::Error::success) return;  // a failed watch: the next pass is within 1 s
        {
          std::lock_guard l(state->mu);
          state->poked = true;
        }
        state->cv.notify_all();
      });
      (void)tr.commit();
      fold_all();
    }
    lock.lock();
    ++st.passes;
  }
  lock.unlock();
  if (watch) watch->cancel();
  // Handed on at once: another recorder need not wait for the claim to lapse.
  if (claimed_at_ != std::chrono::steady_clock::time_point{}) {
    (void)store_.run([&](Transaction& tr) { return drop_claim(tr, folder_claim_key(), owner_); });
  }
}

bool DbUpdatesRecorder::another_folds() {
  auto tr = store_.create_transaction();
  auto claim = read_claim(tr, folder_claim_key(), Snapshot::yes);
  if (!claim.ok() || !*claim || (*claim)->owner == owner_) return false;
  return !claim_watch_.lapsed(**claim, ClaimWatch::Clock::now());
}

void DbUpdatesRecorder::fold_all() {
  for (;;) {
    std::size_t folded = 0;
    std::string from;
    const auto now = std::chrono::steady_clock::now();
    const bool renew = now - claimed_at_ >= kClaimRenew;
    storage::Status s = store_.run([&](Transaction& tr) -> storage::Status {
      from = from_;
      auto n = fold_db_events(tr, kEventsPerTransaction, from);
      if (!n.ok()) return n.error();
      folded = *n;
      if (folded > 0 && renew) write_claim(tr, folder_claim_key(), owner_, idem_now_ms());
      return {};
    });
    if (s.ok()) from_ = std::move(from);
    if (s.ok() && folded > 0) folds_.fetch_add(1, std::memory_order_relaxed);
    if (s.ok() && folded > 0 && renew) claimed_at_ = now;
    if (!s.ok() || folded < kEventsPerTransaction) return;
  }
}

}  // namespace chaise::core
