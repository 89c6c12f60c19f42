// storage/rocksdb/engine.h — internal to storage/rocksdb/: the RocksDB engine behind Database and
// Transaction, and the commit pipeline. Nothing outside storage/rocksdb/ includes this header (it
// pulls in RocksDB).
//
// On-disk layout (RocksDB column families):
//   default      user keys -> values, exactly as the transactions wrote them, except those of:
//   subspace-<s> the keys of subspace s under Options::family_top (storage/rocksdb/families.h)
//   meta         "version" -> 8-byte big-endian last committed version (written in every commit
//                batch); "families" -> Families::describe() of the rule the keys are placed by
#pragma once

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/write_buffer_manager.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "storage/database.h"
#include "storage/rocksdb/families.h"
#include "storage/rocksdb/resolver.h"
#include "storage/rocksdb/transaction.h"
#include "storage/transaction.h"
#include "storage/write_map.h"

namespace chaise::storage {

// A consistent view for reads: the committed version and a RocksDB snapshot that contains every
// batch up to that version (the version is published only after its batch is written, and a view
// reads the version before taking the snapshot, so the snapshot may hold more, never less; more
// only makes the resolver stricter).
//
// Views of one version share one RocksDB snapshot (taking and releasing one locks RocksDB's mutex:
// 2% of a GET's CPU): it is taken by the first view of a version and released when the last view
// of it and the engine's hold on it (until the next version is committed) are gone.
struct SharedSnapshot {
  Engine* engine = nullptr;
  const rocksdb::Snapshot* snapshot = nullptr;
  // The metadata generation the snapshot shows exactly (Transaction::snapshot_metadata_generation),
  // or kNone when a metadata write was being applied as it was taken.
  static constexpr std::uint64_t kNone = ~std::uint64_t{0};
  std::uint64_t generation = kNone;
  ~SharedSnapshot();

  // Prefix iterators (Transaction::prefix_iterator) at this snapshot that transactions are done
  // with, for the next transaction of the version to seek again: building one over every
  // memtable and table and dropping it was 4% of a single-document PUT's server CPU. At most
  // kShelved; they go with the snapshot (the engine drops it as it publishes the next version)
  // or when a flush or compaction completes (Engine::clear_iterator_shelf).
  static constexpr std::size_t kShelved = 8;
  std::unique_ptr<rocksdb::Iterator> take_iterator(std::size_t family) const;
  void shelve_iterator(std::size_t family, std::unique_ptr<rocksdb::Iterator> it) const;
  void clear_shelf() const;
  std::size_t shelved() const;

 private:
  mutable std::mutex shelf_mu_;
  mutable std::vector<std::pair<std::size_t, std::unique_ptr<rocksdb::Iterator>>> shelf_;
};

struct ReadView {
  std::int64_t version = 0;
  std::shared_ptr<const SharedSnapshot> shared;
  std::int64_t acquired_us = 0;
  const rocksdb::Snapshot* snapshot() const { return shared->snapshot; }
};

class WatchState final : public Watch {
 public:
  WatchState(std::string key, WatchCallback cb) : key_(std::move(key)), cb_(std::move(cb)) {}
  void cancel() override { fire(Error::transaction_cancelled); }
  // Runs the callback unless it already ran. Returns whether this call ran it.
  bool fire(Error e) {
    if (fired_.exchange(true)) return false;
    cb_(e, 0);
    return true;
  }
  bool fired() const { return fired_.load(); }
  const std::string& key() const { return key_; }

  // The value the watching transaction saw; nullopt baseline_known = read it at registration.
  bool baseline_known = false;
  std::optional<std::string> baseline;

 private:
  std::string key_;
  WatchCallback cb_;
  std::atomic<bool> fired_{false};
};

struct CommitRequest {
  std::int64_t read_version = -1;  // -1: no reads (blind writes), nothing to check
  std::vector<KeyRange> read_conflicts;
  // Explicit write conflicts and cleared ranges; the point writes count by their keys in `writes`.
  std::vector<KeyRange> write_conflicts;
  WriteMap writes;
  std::vector<VersionstampedKey> versionstamped_keys;
  std::vector<std::shared_ptr<WatchState>> watches;
  bool touches_metadata = false;
  std::size_t bytes = 0;
  std::function<void(Result<CommitResult>)> done;
};

// The embedded engine behind Database (DatabaseBackend; Database::open makes one). Its
// transactions (RocksTransaction) call it through Engine*, so `final` keeps those calls direct.
class Engine final : public DatabaseBackend {
 public:
  static Result<std::unique_ptr<Engine>> open(const std::string& path, Options options);
  ~Engine() override;

  Transaction create_transaction() override;

  std::shared_ptr<ReadView> acquire_view();
  // Drops the iterators shelved at the latest snapshot (SharedSnapshot::take_iterator): after a
  // flush or a compaction, so that they do not keep what it replaced.
  void clear_iterator_shelf();
  void note_iterator_reused() { stat_iterators_reused_.fetch_add(1, std::memory_order_relaxed); }
  // RocksDB counts every key comparison in a thread-local perf context unless the thread's perf
  // level says not to: a fifth of the commit thread's instructions (callgrind). Chaise reads no
  // perf context, so each thread that calls into RocksDB turns the counting off once.
  static void quiet_perf_context_on_this_thread();
  rocksdb::DB* db() { return db_.get(); }
  const Families& families() const { return families_; }
  rocksdb::ColumnFamilyHandle* family_cf(std::size_t family) { return family_cfs_[family]; }
  rocksdb::ColumnFamilyHandle* cf_of_key(std::string_view key) {
    return family_cfs_[families_.of_key(key)];
  }
  // An iterator at `ro` (whose bounds, if any, the caller set) over a range whose family is
  // `family` (Families::of_range): that family's, or when nullopt a MergingIterator over all.
  std::unique_ptr<rocksdb::Iterator> new_range_iterator(const rocksdb::ReadOptions& ro,
                                                        std::optional<std::size_t> family);
  const Options& options() const override { return options_; }
  std::int64_t now_us() const { return options_.clock->now_us(); }
  std::uint64_t metadata_generation() const {
    return metadata_generation_.load(std::memory_order_acquire);
  }
  std::uint64_t instance_id() const { return instance_id_; }
  std::int64_t committed_version() const override {
    return committed_version_.load(std::memory_order_acquire);
  }

  StoreStats stats() const override;
  // Database::compact_files: every table, or those holding keys of `range`.
  Status compact_files(const std::optional<KeyRange>& range) override;

  // Queues a write transaction for the commit pipeline; req->done runs on the commit thread.
  void submit(std::unique_ptr<CommitRequest> req);
  // Activates watches (after their transaction committed). Fires at once if the value already
  // moved.
  void register_watches(std::vector<std::shared_ptr<WatchState>>& watches);
  void set_commit_fault_hook(std::function<CommitFault()> hook) override;
  StoreHealth probe(std::chrono::milliseconds) override { return {"rocksdb", true, 0, {}}; }
  // Whether a commit may end in commit_unknown_result: only when a test's fault hook is set. A
  // failed write of this engine fails its batch and every later one with io_error; a commit's
  // outcome is otherwise always known.
  bool may_report_unknown_results() const {
    return fault_hook_set_.load(std::memory_order_acquire);
  }

 private:
  Engine() = default;
  void commit_loop();
  void process_batch(std::vector<std::unique_ptr<CommitRequest>>& batch);
  // Adds an accepted transaction's writes to `overlay`, the batch's net effect so far.
  Result<CommitResult> commit_one(CommitRequest& req, std::int64_t version, std::uint16_t order,
                                  WriteMap& overlay);
  std::optional<std::string> latest_value(std::string_view key, const WriteMap* overlay);
  // The value an atomic or versionstamped point write leaves, given the batch's writes so far
  // (`overlay`; nullptr when there are none) and the commit's versionstamp `vs`.
  std::string evaluated(std::string_view key, const PointWrite& w, const std::string& vs,
                        const WriteMap* overlay);
  void fire_watches(const WriteMap& written);
  // Opens the store's column families (every one it has, and the rule's) into handles_, family f
  // with data_cfos[f] (a family of an earlier rule with data_cfos[0]).
  Status open_families(const std::string& path, const rocksdb::Options& ro,
                       const std::vector<rocksdb::ColumnFamilyOptions>& data_cfos);
  // Moves every key not in its rule's family there, then drops families the rule has no more.
  Status place_keys(const std::vector<rocksdb::ColumnFamilyHandle*>& stale);

  Options options_;
  std::unique_ptr<rocksdb::DB> db_;
  Families families_;
  std::vector<rocksdb::ColumnFamilyHandle*> family_cfs_;  // by family number
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;

  // Commit pipeline. pending_ is guarded by mu_; everything below `Resolver` belongs to the commit
  // thread alone.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<CommitRequest>> pending_;
  bool stopping_ = false;
  std::thread committer_;
  std::function<CommitFault()> fault_hook_;  // guarded by mu_; copied per batch
  std::atomic<bool> fault_hook_set_{false};
  Resolver resolver_{0};
  std::int64_t last_version_ = 0;
  bool failed_ = false;  // a RocksDB write failed: every later commit fails with io_error
  std::atomic<std::int64_t> committed_version_{0};
  // Odd while a batch with a metadata write (Transaction::touch_metadata) is being applied:
  // bumped before its write and again after, like a sequence lock.
  std::atomic<std::uint64_t> metadata_generation_{0};
  // The snapshot views of latest_snapshot_version_ share; dropped by the commit thread as it
  // publishes a newer version, so that no snapshot outlives its version for want of readers.
  mutable std::mutex snapshot_mu_;
  std::shared_ptr<const SharedSnapshot> latest_snapshot_;
  std::int64_t latest_snapshot_version_ = -1;
  // A reference to latest_snapshot_ (or null), taken under snapshot_mu_.
  std::shared_ptr<const SharedSnapshot> latest_snapshot() const;
  // Drops latest_snapshot_ if it is older than `version` (released outside snapshot_mu_).
  void drop_snapshot_before(std::int64_t version);
  const std::uint64_t instance_id_ = next_instance_id();
  static std::uint64_t next_instance_id() {
    static std::atomic<std::uint64_t> next{1};
    return next.fetch_add(1);
  }
  std::atomic<std::uint64_t> stat_commits_{0};
  std::atomic<std::uint64_t> stat_conflicts_{0};
  std::atomic<std::uint64_t> stat_batches_{0};
  std::atomic<std::uint64_t> stat_synced_batches_{0};
  std::atomic<std::uint64_t> stat_iterators_reused_{0};
  std::atomic<std::uint64_t> stat_range_clears_{0};
  std::atomic<std::size_t> stat_resolver_keys_{0};
  std::atomic<std::size_t> stat_resolver_bytes_{0};
  std::shared_ptr<rocksdb::Cache> block_cache_;
  std::shared_ptr<rocksdb::WriteBufferManager> write_buffer_manager_;  // charged to block_cache_

  // Watches by key, guarded by watch_mu_.
  std::mutex watch_mu_;
  std::multimap<std::string, std::shared_ptr<WatchState>, std::less<>> watches_;
  std::atomic<std::size_t> watch_count_{0};  // watches_.size(), for diagnostics
  std::size_t watch_sweep_at_ = 1024;        // drop cancelled watches when the map reaches this
};

}  // namespace chaise::storage
