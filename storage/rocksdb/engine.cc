// The embedded engine and its commit pipeline.
//
// Commit pipeline (one thread, `committer_`):
//   1. take up to commit_batch_txns_max pending requests (bounded by commit_batch_bytes_max);
//   2. expire the resolver window by the injected clock;
//   3. for each request in arrival order: reject if too old (1007) or if a read-conflict range was
//      written after its read version (1020), else accept it at this batch's version with order
//      0, 1, 2... (its versionstamp), record its write-conflict ranges in the resolver (so later
//      requests of the same batch see them), and append its mutations to the batch's WriteBatch.
//      Atomic ops read their base from the batch so far (`overlay`), then from the latest RocksDB
//      state;
//   4. write the WriteBatch plus the new version (meta CF) with one WAL sync;
//   5. publish the version, fire watches, run the `done` callbacks.
// Version = previous version + 1 per batch that accepted anything.
#include "storage/rocksdb/engine.h"

#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/perf_level.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/write_buffer_manager.h>

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <random>

#include "storage/database.h"
#include "storage/rocksdb/memtable.h"
#include "storage/rocksdb/merging_iterator.h"
#include "storage/rocksdb/table_options.h"
#include "storage/tuple_prefix.h"

namespace chaise::storage {

namespace {

constexpr char kVersionKey[] = "version";
constexpr char kFamiliesKey[] = "families";
// Level-0 tables that start a compaction into the level below (Options::family_ordered_subspaces).
constexpr int kLevel0Trigger = 8;
constexpr int kOrderedLevel0Trigger = 4;

std::string encode_be64(std::uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) out[i] = static_cast<char>(v & 0xff);
  return out;
}

std::uint64_t decode_be64(std::string_view s) {
  std::uint64_t v = 0;
  for (char c : s) v = (v << 8) | static_cast<std::uint8_t>(c);
  return v;
}

std::string make_versionstamp(std::int64_t version, std::uint16_t order) {
  std::string vs = encode_be64(static_cast<std::uint64_t>(version));
  vs.push_back(static_cast<char>(order >> 8));
  vs.push_back(static_cast<char>(order & 0xff));
  return vs;
}

// Replaces the 10 placeholder bytes named by the template's 4-byte little-endian offset suffix.
// Transaction validated the offset when the mutation was made.
std::string fill_versionstamp(std::string_view tmpl, const std::string& vs) {
  assert(tmpl.size() >= 4);
  std::uint32_t off = 0;
  for (int i = 3; i >= 0; --i)
    off = (off << 8) | static_cast<std::uint8_t>(tmpl[tmpl.size() - 4 + i]);
  std::string out(tmpl.substr(0, tmpl.size() - 4));
  assert(off + kVersionstampSize <= out.size());
  std::memcpy(out.data() + off, vs.data(), kVersionstampSize);
  return out;
}

// RocksDB's view of tuple_prefix_length. The name is recorded in every table: tables written
// with another extractor (or none) are read without their prefix filter.
class TuplePrefix final : public rocksdb::SliceTransform {
 public:
  explicit TuplePrefix(std::size_t elements)
      : elements_(elements), name_("chaise.TuplePrefix." + std::to_string(elements)) {}
  const char* Name() const override { return name_.c_str(); }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    auto n = tuple_prefix_length(std::string_view(key.data(), key.size()), elements_);
    // RocksDB's prefix-mode iterators (prefix_same_as_start) also transform the keys they step
    // onto, in the domain or not. A key outside it is its own "prefix": it cannot equal the
    // prefix of a key inside (that key would then parse into the elements too), so the iterator
    // stops there, as it should.
    return rocksdb::Slice(key.data(), n ? *n : key.size());
  }
  bool InDomain(const rocksdb::Slice& key) const override {
    return tuple_prefix_length(std::string_view(key.data(), key.size()), elements_).has_value();
  }

 private:
  std::size_t elements_;
  std::string name_;
};

}  // namespace

std::int64_t SteadyClock::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

SharedSnapshot::~SharedSnapshot() {
  shelf_.clear();  // the iterators read at the snapshot
  if (snapshot) engine->db()->ReleaseSnapshot(snapshot);
}

std::unique_ptr<rocksdb::Iterator> SharedSnapshot::take_iterator(std::size_t family) const {
  std::lock_guard lock(shelf_mu_);
  for (auto it = shelf_.rbegin(); it != shelf_.rend(); ++it) {
    if (it->first != family) continue;
    auto found = std::move(it->second);
    shelf_.erase(std::next(it).base());
    return found;
  }
  return nullptr;
}

void SharedSnapshot::shelve_iterator(std::size_t family,
                                     std::unique_ptr<rocksdb::Iterator> it) const {
  if (!it || !it->status().ok()) return;
  std::lock_guard lock(shelf_mu_);
  if (shelf_.size() >= kShelved) return;  // `it` is dropped after the lock is
  shelf_.emplace_back(family, std::move(it));
}

void SharedSnapshot::clear_shelf() const {
  std::vector<std::pair<std::size_t, std::unique_ptr<rocksdb::Iterator>>> dropped;
  {
    std::lock_guard lock(shelf_mu_);
    dropped.swap(shelf_);
  }
}

std::size_t SharedSnapshot::shelved() const {
  std::lock_guard lock(shelf_mu_);
  return shelf_.size();
}

namespace {
// A shelved iterator holds the memtables and tables it was made over: after a flush or a
// compaction it would keep the flushed memtable's memory, or the replaced tables' files, until
// its snapshot goes (the next commit). RocksDB calls these without its mutex held.
class ShelfListener final : public rocksdb::EventListener {
 public:
  explicit ShelfListener(Engine* engine) : engine_(engine) {}
  void OnFlushCompleted(rocksdb::DB*, const rocksdb::FlushJobInfo&) override {
    engine_->clear_iterator_shelf();
  }
  void OnCompactionCompleted(rocksdb::DB*, const rocksdb::CompactionJobInfo&) override {
    engine_->clear_iterator_shelf();
  }

 private:
  Engine* engine_;
};
}  // namespace

std::shared_ptr<const SharedSnapshot> Engine::latest_snapshot() const {
  std::lock_guard lock(snapshot_mu_);
  return latest_snapshot_;
}

void Engine::clear_iterator_shelf() {
  if (auto latest = latest_snapshot()) latest->clear_shelf();
}

Result<std::unique_ptr<Engine>> Engine::open(const std::string& path, Options options) {
  if (options.commit_batch_txns_max == 0 || options.commit_batch_txns_max > 65535)
    return Error::invalid_option_value;
  if (options.transaction_size_limit == 0 || options.transaction_size_limit > kTransactionSizeMax)
    return Error::invalid_option_value;
  if (!options.clock) options.clock = std::make_shared<SteadyClock>();
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = options;
  e->resolver_ = Resolver(options.resolver_bytes_max);

  rocksdb::Options ro;
  ro.create_if_missing = options.create_if_missing;
  ro.create_missing_column_families = true;
  ro.IncreaseParallelism(2);
  ro.allow_concurrent_memtable_write =
      false;  // one commit thread; storage/rocksdb/memtable.h needs it
  ro.listeners.push_back(std::make_shared<ShelfListener>(e.get()));
  // Memory: every memtable of every column family counts against write_buffer_bytes (a flush
  // starts as they near it); each memtable is half of it and flushes alone, so at most about
  // 1.5x is held while one flushes. Data blocks are cached in block_cache_bytes, and by default
  // (table_index_in_cache) the tables' index and filter blocks with them, so memory stays within
  // the bound at any data size; what the open tables hold beside the cache is reported as
  // chaise_memory_bytes{part="table_readers"}. The memtables are charged to the block cache as
  // well (below), so the two share block_cache_bytes.
  ro.write_buffer_size = std::max<std::size_t>(options.write_buffer_bytes / 2, 1u << 20);
  ro.max_write_buffer_number = 3;
  ro.min_write_buffer_number_to_merge = 1;
  ro.max_total_wal_size = std::max<std::size_t>(4 * options.write_buffer_bytes, 64u << 20);
  // Levels sized from the memtable, with dynamic level sizes so most data sits in the last level.
  // Level 0 compacts at 8 tables, families written in key order at 4 (Options::
  // family_ordered_subspaces): 5% less server CPU per PUT of new documents, GET and _all_docs no
  // slower after writes (measured with bench/http/paired.sh). Level 0 also compacts once it
  // holds max_bytes_for_level_base, whatever its count of tables.
  ro.level0_file_num_compaction_trigger = kLevel0Trigger;
  ro.max_bytes_for_level_base = 4 * ro.write_buffer_size;
  ro.target_file_size_base = ro.write_buffer_size;
  ro.level_compaction_dynamic_level_bytes = true;
  // LZ4 on every level: cheap to compress in flushes and to decompress on every block-cache miss
  // (ZSTD on the last level took half the CPU of _bulk_docs, decompressing blocks on reads).
  ro.compression = rocksdb::kLZ4Compression;
  e->block_cache_ = rocksdb::NewLRUCache(options.block_cache_bytes);
  // The memtables' memory is charged to the block cache (in 256 KiB reservations), which evicts
  // blocks to make room: under heavy writes the cache holds fewer blocks, and the two together
  // stay within block_cache_bytes instead of adding up. Reads while writes fill the memtables
  // find their recent documents there anyway. bench/http/run.sh's workloads one after the other:
  // peak RSS (during _bulk_docs) 118-121 -> 97-98 MiB, after them all 82-85 -> 52-58 MiB, at the
  // same rates.
  e->write_buffer_manager_ =
      std::make_shared<rocksdb::WriteBufferManager>(options.write_buffer_bytes, e->block_cache_);
  ro.write_buffer_manager = e->write_buffer_manager_;
  const rocksdb::BlockBasedTableOptions table = family_table_options(options, e->block_cache_);
  rocksdb::ColumnFamilyOptions cfo(ro);
  if (options.bloom_prefix_tuple_elements > 0) {
    cfo.prefix_extractor = std::make_shared<TuplePrefix>(options.bloom_prefix_tuple_elements);
    // The memtables too: a new document's revisions range is then not sought in them either
    // (the memtable seek was most of that read's cost once tables were filtered). 2% of a
    // memtable's bytes.
    cfo.memtable_prefix_bloom_size_ratio = 0.02;
  }
  cfo.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  // Our memtable (storage/rocksdb/memtable.h): Debian's RocksDB checks its own with assertions on
  // every step. It inserts from one thread at a time.
  cfo.memtable_factory = ordered_memtable_factory();
  e->families_ = Families(options.family_top, options.family_subspaces);
  const rocksdb::BlockBasedTableOptions hit_table = hit_family_table_options(table);
  const std::shared_ptr<rocksdb::TableFactory> hit_tables(
      rocksdb::NewBlockBasedTableFactory(hit_table));
  std::vector<rocksdb::ColumnFamilyOptions> cfos(e->families_.size(), cfo);
  for (std::size_t f = 0; f < cfos.size(); ++f) {
    const auto s = e->families_.subspace(f);
    const auto& hits = options.family_hit_subspaces;
    if (s && std::find(hits.begin(), hits.end(), *s) != hits.end()) {
      cfos[f].optimize_filters_for_hits = true;
      cfos[f].table_factory = hit_tables;
      // Their memtables' point reads through a hash index (storage/rocksdb/memtable.h): a slot per
      // 128 bytes of memtable, 6% of it. A by_id or body memtable held 18,000-30,000 keys when
      // flushed (200,000 documents loaded by _bulk_docs), a 65,536-slot index at most 46% full.
      // GET of a recently written document: 19.6 -> 17.6 us of server CPU (bench/README.md).
      cfos[f].memtable_factory = ordered_memtable_factory(ro.write_buffer_size / 128);
      // The index answers a read of an absent key as cheaply as the memtable's prefix bloom
      // filter would, so the filter is left out: one cache miss less per point read (GET 4-6%
      // less server CPU in paired windows, PUT of new documents unchanged).
      cfos[f].memtable_prefix_bloom_size_ratio = 0;
    }
    const auto& ordered = options.family_ordered_subspaces;
    if (s && std::find(ordered.begin(), ordered.end(), *s) != ordered.end())
      cfos[f].level0_file_num_compaction_trigger = kOrderedLevel0Trigger;
  }
  if (auto st = e->open_families(path, ro, cfos); !st) return st.error();

  std::string v;
  rocksdb::Status s = e->db_->Get(rocksdb::ReadOptions(), e->meta_cf_, kVersionKey, &v);
  if (s.ok() && v.size() == 8) {
    e->last_version_ = static_cast<std::int64_t>(decode_be64(v));
  } else if (!s.IsNotFound()) {
    return Error::io_error;
  }
  e->committed_version_.store(e->last_version_);
  e->committer_ = std::thread([eng = e.get()] { eng->commit_loop(); });
  return e;
}

Status Engine::open_families(const std::string& path, const rocksdb::Options& ro,
                             const std::vector<rocksdb::ColumnFamilyOptions>& data_cfos) {
  // The meta column family holds a few keys (the store's version, the families' rule): small
  // memtables.
  rocksdb::ColumnFamilyOptions meta_cfo;
  meta_cfo.write_buffer_size = 1u << 20;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {{"meta", meta_cfo}};
  for (std::size_t f = 0; f < families_.size(); ++f)
    cfs.push_back({families_.name(f), data_cfos[f]});
  const std::size_t wanted = cfs.size();
  // RocksDB opens a store only with every column family it has: those of an earlier rule too
  // (their keys move below). A new store has none to list.
  std::vector<std::string> names;
  if (!rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(ro), path, &names).ok()) names.clear();
  for (const std::string& n : names)
    if (std::none_of(cfs.begin(), cfs.end(), [&](const auto& d) { return d.name == n; }))
      cfs.push_back({n, data_cfos[0]});
  rocksdb::DB* raw = nullptr;
  if (!rocksdb::DB::Open(rocksdb::DBOptions(ro), path, cfs, &handles_, &raw).ok())
    return Error::io_error;
  db_.reset(raw);
  meta_cf_ = handles_[0];
  family_cfs_.assign(handles_.begin() + 1, handles_.begin() + static_cast<std::ptrdiff_t>(wanted));
  std::string rule;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_cf_, kFamiliesKey, &rule);
  if (!s.ok() && !s.IsNotFound()) return Error::io_error;
  if (s.ok() && rule == families_.describe() && handles_.size() == wanted) return {};
  return place_keys({handles_.begin() + static_cast<std::ptrdiff_t>(wanted), handles_.end()});
}

Status Engine::place_keys(const std::vector<rocksdb::ColumnFamilyHandle*>& stale) {
  constexpr std::size_t kBatchBytesMax = 4u << 20;
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::WriteBatch wb;
  std::vector<rocksdb::ColumnFamilyHandle*> sources = family_cfs_;
  sources.insert(sources.end(), stale.begin(), stale.end());
  for (rocksdb::ColumnFamilyHandle* from : sources) {
    rocksdb::ReadOptions r;
    r.total_order_seek = true;
    r.fill_cache = false;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(r, from));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      const rocksdb::Slice k = it->key();
      rocksdb::ColumnFamilyHandle* to = cf_of_key(std::string_view(k.data(), k.size()));
      if (to == from) continue;
      // Each batch moves whole keys: written to their family and deleted here atomically.
      wb.Put(to, k, it->value());
      wb.Delete(from, k);
      if (wb.GetDataSize() < kBatchBytesMax) continue;
      if (!db_->Write(wo, &wb).ok()) return Error::io_error;
      wb.Clear();
    }
    if (!it->status().ok()) return Error::io_error;
  }
  wb.Put(meta_cf_, kFamiliesKey, families_.describe());
  if (!db_->Write(wo, &wb).ok()) return Error::io_error;
  for (rocksdb::ColumnFamilyHandle* h : stale) {
    if (!db_->DropColumnFamily(h).ok()) return Error::io_error;
    db_->DestroyColumnFamilyHandle(h);
    handles_.erase(std::find(handles_.begin(), handles_.end(), h));
  }
  return {};
}

std::unique_ptr<rocksdb::Iterator> Engine::new_range_iterator(const rocksdb::ReadOptions& ro,
                                                              std::optional<std::size_t> family) {
  if (family) return std::unique_ptr<rocksdb::Iterator>(db_->NewIterator(ro, family_cfs_[*family]));
  std::vector<std::unique_ptr<rocksdb::Iterator>> children;
  for (rocksdb::ColumnFamilyHandle* cf : family_cfs_)
    children.emplace_back(db_->NewIterator(ro, cf));
  return std::make_unique<MergingIterator>(std::move(children));
}

Engine::~Engine() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (committer_.joinable()) committer_.join();
  std::multimap<std::string, std::shared_ptr<WatchState>, std::less<>> watches;
  {
    std::lock_guard lock(watch_mu_);
    watches.swap(watches_);
  }
  for (auto& [k, w] : watches) w->fire(Error::transaction_cancelled);
  // Flushes and compactions end before the snapshots go: their completion listener
  // (clear_iterator_shelf) can hold the last reference to a snapshot, whose release needs db_,
  // and db_.reset() empties db_ before the DB waits for its background work.
  rocksdb::CancelAllBackgroundWork(db_.get(), /*wait=*/true);
  latest_snapshot_.reset();
  for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h);
  db_.reset();
}

std::shared_ptr<ReadView> Engine::acquire_view() {
  auto view = std::make_shared<ReadView>();
  // Version first, then the snapshot: the snapshot then contains every batch <= version (one
  // taken for this version earlier does too).
  view->version = committed_version();
  {
    std::lock_guard lock(snapshot_mu_);
    if (latest_snapshot_version_ == view->version) view->shared = latest_snapshot_;
  }
  if (!view->shared) {
    auto shared = std::make_shared<SharedSnapshot>();
    shared->engine = this;
    // The metadata generation on both sides of the snapshot: equal and even, the snapshot shows
    // exactly the metadata of that generation (see Transaction::touch_metadata).
    const std::uint64_t before = metadata_generation();
    shared->snapshot = db_->GetSnapshot();
    const std::uint64_t after = metadata_generation();
    if (before == after && after % 2 == 0) shared->generation = after;
    view->shared = shared;
    std::shared_ptr<const SharedSnapshot> replaced;  // released after the lock, if the last one
    {
      std::lock_guard lock(snapshot_mu_);
      if (view->version > latest_snapshot_version_) {
        replaced = std::exchange(latest_snapshot_, std::move(shared));
        latest_snapshot_version_ = view->version;
      }
    }
  }
  view->acquired_us = now_us();
  return view;
}

void Engine::drop_snapshot_before(std::int64_t version) {
  std::shared_ptr<const SharedSnapshot> dropped;
  std::lock_guard lock(snapshot_mu_);
  if (latest_snapshot_version_ < version) dropped = std::move(latest_snapshot_);
}

void Engine::submit(std::unique_ptr<CommitRequest> req) {
  // Notified under the lock: the destructor takes it before it ends the commit thread and
  // destroys cv_, so a submit racing with it never signals a destroyed condition variable.
  std::lock_guard lock(mu_);
  pending_.push_back(std::move(req));
  cv_.notify_one();
}

void Engine::set_commit_fault_hook(std::function<CommitFault()> hook) {
  std::lock_guard lock(mu_);
  fault_hook_set_.store(static_cast<bool>(hook), std::memory_order_release);
  fault_hook_ = std::move(hook);
}

void Engine::quiet_perf_context_on_this_thread() {
  thread_local bool quiet = false;
  if (quiet) return;
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
  quiet = true;
}

void Engine::commit_loop() {
  quiet_perf_context_on_this_thread();
  std::vector<std::unique_ptr<CommitRequest>> batch;
  std::vector<std::unique_ptr<CommitRequest>> rest;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      // Idle for a second: forget what has aged out of the window, so that the memory it holds
      // is not kept until the next commit.
      while (!cv_.wait_for(lock, std::chrono::seconds(1),
                           [&] { return stopping_ || !pending_.empty(); })) {
        lock.unlock();  // the resolver is the commit thread's alone
        resolver_.expire(now_us(), options_.transaction_lifetime_us);
        stat_resolver_keys_.store(resolver_.remembered_keys(), std::memory_order_relaxed);
        stat_resolver_bytes_.store(resolver_.remembered_bytes(), std::memory_order_relaxed);
        lock.lock();
      }
      if (pending_.empty()) return;  // stopping, and drained
      // Take a bounded batch; the remainder stays queued in arrival order.
      std::size_t n = 0, bytes = 0;
      while (n < pending_.size() && n < options_.commit_batch_txns_max &&
             (n == 0 || bytes + pending_[n]->bytes <= options_.commit_batch_bytes_max)) {
        bytes += pending_[n]->bytes;
        ++n;
      }
      if (n == pending_.size()) {
        batch.swap(pending_);
      } else {
        batch.assign(std::make_move_iterator(pending_.begin()),
                     std::make_move_iterator(pending_.begin() + n));
        pending_.erase(pending_.begin(), pending_.begin() + n);
      }
    }
    process_batch(batch);
    batch.clear();
  }
}

std::optional<std::string> Engine::latest_value(std::string_view key, const WriteMap* overlay) {
  if (overlay) {
    WriteMap::Lookup l = overlay->lookup(key);
    if (l.known == WriteMap::Known::absent) return std::nullopt;
    if (l.known == WriteMap::Known::value) return l.write->value;
    assert(l.known == WriteMap::Known::unknown);  // the overlay holds only sets and clears
  }
  std::string v;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), cf_of_key(key), rocksdb::Slice(key.data(), key.size()), &v);
  if (s.ok()) return v;
  return std::nullopt;  // not found (or an I/O error, which the batch write will report)
}

std::string Engine::evaluated(std::string_view key, const PointWrite& w, const std::string& vs,
                              const WriteMap* overlay) {
  if (w.kind == PointWrite::Kind::versionstamped_value) return fill_versionstamp(w.value, vs);
  assert(w.kind == PointWrite::Kind::atomic);
  std::optional<std::string> base = latest_value(key, overlay);
  std::string v = base ? std::move(*base) : std::string();
  bool present = base.has_value();
  for (const AtomicOp& op : w.ops) {
    v = apply_atomic(present ? std::optional<std::string_view>(v) : std::nullopt, op);
    present = true;
  }
  return v;
}

Result<CommitResult> Engine::commit_one(CommitRequest& req, std::int64_t version,
                                        std::uint16_t order, WriteMap& overlay) {
  const std::string vs = make_versionstamp(version, order);
  // The written keys, for the resolver: views of the write map's keys, which stay where they are
  // whether the map is merged into the overlay or becomes it.
  std::vector<std::string_view> written;
  written.reserve(req.writes.points().size() + req.versionstamped_keys.size());
  for (const auto& [key, w] : req.writes.points()) written.push_back(key);
  if (overlay.empty()) {
    // Nothing before it in the batch: its writes become the batch's, evaluated where they are.
    // Inserting them one by one into an empty map was a twentieth of a _bulk_docs request.
    overlay = std::move(req.writes);
    for (auto& [key, w] : overlay.points_to_evaluate()) {
      if (w.kind == PointWrite::Kind::set || w.kind == PointWrite::Kind::clear) continue;
      w.value = evaluated(key, w, vs, nullptr);  // an atomic's base: the store's value
      w.kind = PointWrite::Kind::set;
      w.ops.clear();
    }
  } else {
    for (const auto& [b, e] : req.writes.cleared().ranges()) overlay.clear_range(b, e);
    for (const auto& [key, w] : req.writes.points()) {
      if (w.kind == PointWrite::Kind::set) {
        overlay.set(key, w.value);
      } else if (w.kind == PointWrite::Kind::clear) {
        overlay.clear(key);
      } else {
        overlay.set(key, evaluated(key, w, vs, &overlay));
      }
    }
  }
  std::vector<std::string> stamped;
  stamped.reserve(req.versionstamped_keys.size());
  for (const VersionstampedKey& vk : req.versionstamped_keys) {
    stamped.push_back(fill_versionstamp(vk.key_template, vs));
    overlay.set(stamped.back(), vk.value);
  }
  for (const std::string& key : stamped) written.push_back(key);
  resolver_.add_writes(std::move(written), req.write_conflicts);
  return CommitResult{version, vs};
}

void Engine::process_batch(std::vector<std::unique_ptr<CommitRequest>>& batch) {
  std::function<CommitFault()> hook;
  if (may_report_unknown_results()) {  // a test's hook is set: copy it for this batch
    std::lock_guard lock(mu_);
    hook = fault_hook_;
  }
  const std::int64_t now = now_us();
  resolver_.expire(now, options_.transaction_lifetime_us);
  const std::int64_t version = last_version_ + 1;

  // The batch's writes so far: the bases of atomic ops, and in the end what is written. One
  // RocksDB write applies the whole batch, so only its net effect is written (WriteMap's rule:
  // cleared ranges, then point writes), in key order: a counter every transaction adds to goes
  // into the memtable once per batch, not once per transaction, and consecutive inserts land
  // near each other in the memtable's skip list.
  WriteMap overlay;
  std::vector<Result<CommitResult>> outcomes;
  outcomes.reserve(batch.size());
  std::vector<CommitRequest*> accepted;
  std::uint16_t order = 0;
  for (auto& req : batch) {
    CommitFault fault = hook ? hook() : CommitFault::none;
    if (failed_) {
      outcomes.emplace_back(Error::io_error);
    } else if (req->read_version >= 0 && resolver_.too_old(req->read_version)) {
      outcomes.emplace_back(Error::transaction_too_old);
    } else if (fault == CommitFault::not_committed ||
               (req->read_version >= 0 &&
                resolver_.conflicts(req->read_version, req->read_conflicts))) {
      outcomes.emplace_back(Error::not_committed);
      stat_conflicts_.fetch_add(1, std::memory_order_relaxed);
    } else if (fault == CommitFault::unknown_result_not_applied) {
      outcomes.emplace_back(Error::commit_unknown_result);
    } else {
      if (accepted.empty()) resolver_.begin_version(version, now);
      auto r = commit_one(*req, version, order++, overlay);
      outcomes.push_back(fault == CommitFault::unknown_result_applied
                             ? Result<CommitResult>(Error::commit_unknown_result)
                             : std::move(r));
      accepted.push_back(req.get());
    }
  }
  stat_resolver_keys_.store(resolver_.remembered_keys(), std::memory_order_relaxed);
  stat_resolver_bytes_.store(resolver_.remembered_bytes(), std::memory_order_relaxed);

  if (!accepted.empty()) {
    last_version_ = version;
    rocksdb::WriteBatch wb;
    stat_range_clears_.fetch_add(overlay.cleared().ranges().size(), std::memory_order_relaxed);
    for (const auto& [b, e] : overlay.cleared().ranges()) {
      if (auto f = families_.of_range(b, e)) {
        wb.DeleteRange(family_cfs_[*f], b, e);
      } else {
        for (rocksdb::ColumnFamilyHandle* cf : family_cfs_) wb.DeleteRange(cf, b, e);
      }
    }
    for (const auto& [key, w] : overlay.points()) {
      if (w.kind == PointWrite::Kind::clear) {
        wb.Delete(cf_of_key(key), key);
      } else {
        assert(w.kind == PointWrite::Kind::set);  // commit_one evaluates everything else
        wb.Put(cf_of_key(key), key, w.value);
      }
    }
    wb.Put(meta_cf_, kVersionKey, encode_be64(static_cast<std::uint64_t>(version)));
    rocksdb::WriteOptions wo;
    wo.sync = options_.fsync;
    const bool metadata = std::any_of(accepted.begin(), accepted.end(),
                                      [](const CommitRequest* r) { return r->touches_metadata; });
    if (metadata) metadata_generation_.fetch_add(1, std::memory_order_acq_rel);
    rocksdb::Status s = db_->Write(wo, &wb);
    if (metadata) metadata_generation_.fetch_add(1, std::memory_order_acq_rel);
    if (!s.ok()) {
      failed_ = true;
      for (std::size_t i = 0; i < batch.size(); ++i)
        if (outcomes[i].ok() || outcomes[i].error() == Error::commit_unknown_result)
          outcomes[i] = Error::io_error;
    } else {
      committed_version_.store(version, std::memory_order_release);
      drop_snapshot_before(version);
      stat_commits_.fetch_add(accepted.size(), std::memory_order_relaxed);
      stat_batches_.fetch_add(1, std::memory_order_relaxed);
      if (wo.sync) stat_synced_batches_.fetch_add(1, std::memory_order_relaxed);
      // Under watch_mu_, not via watch_count_: a registration reads the value and inserts its
      // watch under the same mutex, so it either sees this batch's write or is seen here.
      fire_watches(overlay);
    }
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    CommitRequest& req = *batch[i];
    if (outcomes[i].ok()) {
      register_watches(req.watches);
    } else {
      for (auto& w : req.watches) w->fire(outcomes[i].error());
    }
    if (req.done) req.done(std::move(outcomes[i]));
  }
}

void Engine::fire_watches(const WriteMap& written) {
  std::vector<std::shared_ptr<WatchState>> hit;
  {
    std::lock_guard lock(watch_mu_);
    if (watches_.empty()) return;
    // A watched key's value can have changed only if the batch wrote it (a point write or a cleared
    // range). Whichever side is smaller is walked, the other searched.
    auto check = [&](auto it) {
      auto& w = it->second;
      if (w->fired() || latest_value(w->key(), nullptr) != w->baseline) {
        hit.push_back(std::move(w));
        return watches_.erase(it);
      }
      return std::next(it);
    };
    if (watches_.size() <= written.points().size()) {
      for (auto it = watches_.begin(); it != watches_.end();) {
        const bool touched =
            written.points().contains(it->first) || written.cleared().find(it->first) != nullptr;
        it = touched ? check(it) : std::next(it);
      }
    } else {
      for (const auto& [key, w] : written.points()) {
        for (auto it = watches_.lower_bound(key); it != watches_.end() && it->first == key;)
          it = check(it);
      }
      for (const auto& [b, e] : written.cleared().ranges()) {
        for (auto it = watches_.lower_bound(b); it != watches_.end() && it->first < e;)
          it = check(it);
      }
    }
    watch_count_.store(watches_.size());
  }
  for (auto& w : hit) w->fire(Error::success);
}

void Engine::register_watches(std::vector<std::shared_ptr<WatchState>>& watches) {
  if (watches.empty()) return;
  std::vector<std::shared_ptr<WatchState>> now_fired;
  {
    std::lock_guard lock(watch_mu_);
    // Drop cancelled watches now and then so they do not pile up on keys nobody writes.
    if (watches_.size() >= watch_sweep_at_) {
      for (auto it = watches_.begin(); it != watches_.end();)
        it = it->second->fired() ? watches_.erase(it) : std::next(it);
      watch_sweep_at_ = std::max<std::size_t>(1024, 2 * watches_.size());
    }
    for (auto& w : watches) {
      if (w->fired()) continue;
      std::optional<std::string> current = latest_value(w->key(), nullptr);
      if (!w->baseline_known) {
        w->baseline = current;
        w->baseline_known = true;
      }
      if (current != w->baseline) {
        now_fired.push_back(w);
      } else {
        watches_.emplace(w->key(), w);
      }
    }
    watch_count_.store(watches_.size());
  }
  for (auto& w : now_fired) w->fire(Error::success);
}

// ---- Database ----

Result<std::unique_ptr<Database>> Database::open(const std::string& path, Options options) {
  auto e = Engine::open(path, std::move(options));
  if (!e.ok()) return e.error();
  return std::make_unique<Database>(std::move(*e));
}

Transaction Engine::create_transaction() {
  return Transaction(std::make_unique<RocksTransaction>(this));
}

Status Engine::compact_files(const std::optional<KeyRange>& range) {
  rocksdb::CompactRangeOptions o;
  o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  std::optional<rocksdb::Slice> b, e;
  if (range) {
    b.emplace(range->begin);
    e.emplace(range->end);
  }
  for (rocksdb::ColumnFamilyHandle* cf : handles_)
    if (!db_->CompactRange(o, cf, b ? &*b : nullptr, e ? &*e : nullptr).ok())
      return Error::io_error;
  return {};
}

StoreStats Engine::stats() const {
  StoreStats s;
  s.commits = stat_commits_.load(std::memory_order_relaxed);
  s.conflicts = stat_conflicts_.load(std::memory_order_relaxed);
  s.batches = stat_batches_.load(std::memory_order_relaxed);
  s.synced_batches = stat_synced_batches_.load(std::memory_order_relaxed);
  {
    std::lock_guard lock(mu_);
    s.commit_queue = pending_.size();
  }
  s.fsync = options_.fsync;
  std::uint64_t value = 0;
  for (rocksdb::ColumnFamilyHandle* cf : family_cfs_) {
    if (db_->GetIntProperty(cf, "rocksdb.total-sst-files-size", &value)) s.disk_bytes += value;
    if (db_->GetIntProperty(cf, "rocksdb.cur-size-all-mem-tables", &value)) {
      s.disk_bytes += value;
      s.memtable_bytes += value;
    }
    if (db_->GetIntProperty(cf, "rocksdb.estimate-table-readers-mem", &value))
      s.table_readers_bytes += value;
    // A string property (RocksDB has no integer form of it).
    if (std::string files; db_->GetProperty(cf, "rocksdb.num-files-at-level0", &files))
      s.level0_tables += std::strtoull(files.c_str(), nullptr, 10);
  }
  if (db_->GetIntProperty(meta_cf_, "rocksdb.cur-size-all-mem-tables", &value))
    s.memtable_bytes += value;
  if (db_->GetIntProperty("rocksdb.num-snapshots", &value)) s.snapshots = value;
  s.iterators_reused = stat_iterators_reused_.load(std::memory_order_relaxed);
  s.range_clears = stat_range_clears_.load(std::memory_order_relaxed);
  if (auto latest = latest_snapshot()) s.iterators_shelved = latest->shelved();
  // The cache's usage counts the memtables' reservations and, with the tables' index and filter
  // blocks held beside it, the table readers' charge (both above): blocks are the rest.
  s.block_cache_usage_bytes = block_cache_->GetUsage();
  s.memtable_reserved_bytes = write_buffer_manager_->dummy_entries_in_cache_usage();
  std::uint64_t charged = s.memtable_reserved_bytes;
  if (!options_.table_index_in_cache) charged += s.table_readers_bytes;
  s.block_cache_bytes = s.block_cache_usage_bytes - std::min(s.block_cache_usage_bytes, charged);
  s.resolver_keys = stat_resolver_keys_.load(std::memory_order_relaxed);
  s.resolver_bytes = stat_resolver_bytes_.load(std::memory_order_relaxed);
  return s;
}
}  // namespace chaise::storage
