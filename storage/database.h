// storage/database.h — a FoundationDB-semantics store (see transaction.h for the transaction
// contract, DESIGN.md for why): the embedded RocksDB engine (Database::open, storage/rocksdb/) or a
// FoundationDB cluster (open_foundationdb, storage/fdb/fdb_database.h), the same API over both.
//
//   auto db = Database::open("/var/lib/chaise/store", {});       //
//   Result<std::unique_ptr<Database>> Status s = (*db)->run([&](Transaction& tr) -> Status {     //
//   retried on 1007/1020/1021
//     auto v = tr.get(key);
//     if (!v) return v.error();
//     tr.set(key, "x");
//     return {};
//   });
//
// Embedded engine: commits from all threads flow into one commit pipeline: a batch of transactions
// is resolved (conflict checked) in arrival order, written as one RocksDB WriteBatch with one WAL
// sync, and acknowledged together (group commit). Every batch gets the next commit version;
// versions are persisted with the data, so versionstamps keep increasing across restarts.
//
// Threading: all methods are thread-safe. The Database must outlive its transactions and watches.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "storage/error.h"
#include "storage/transaction.h"

namespace chaise::storage {

// Time source for transaction lifetimes and the resolver window; tests inject a ManualClock.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::int64_t now_us() const = 0;
};

class SteadyClock final : public Clock {
 public:
  std::int64_t now_us() const override;
};

class ManualClock final : public Clock {
 public:
  std::int64_t now_us() const override { return now_us_.load(); }
  void advance_us(std::int64_t us) { now_us_.fetch_add(us); }

 private:
  std::atomic<std::int64_t> now_us_{1'000'000};
};

// Test hook: decides the fate of each write transaction that reaches the commit pipeline.
enum class CommitFault : std::uint8_t {
  none,
  not_committed,               // reject as if it conflicted (1020)
  unknown_result_not_applied,  // report 1021, and do not apply it
  unknown_result_applied,      // apply it durably, but report 1021
};

// The embedded (RocksDB) engine's options; FoundationDB's are FdbOptions (storage/fdb/).
struct Options {
  // Sync the WAL before acknowledging each commit batch. Default true: an acknowledged commit
  // survives kill -9 and power loss. false: survives kill -9 (the OS has the data), not power loss.
  bool fsync = true;
  bool create_if_missing = true;
  // Transactions per commit batch (<= 65535, the 2-byte order in a versionstamp). Default 4096.
  std::size_t commit_batch_txns_max = 4096;
  // Mutation bytes per commit batch; a single larger transaction still commits alone. Default 32
  // MiB.
  std::size_t commit_batch_bytes_max = 32u << 20;
  // Transaction lifetime from its read version, and the resolver's window. Default 5 s (FDB's).
  std::int64_t transaction_lifetime_us = 5'000'000;
  // Bytes a transaction may write (Transaction::approximate_size at commit), at most
  // kTransactionSizeMax. Default kTransactionSizeMax; FoundationDB's size limit where configured
  // (storage/fdb/fdb_database.h).
  std::size_t transaction_size_limit = kTransactionSizeMax;
  // Estimated heap bytes of the write-conflict keys the resolver remembers; past this the window
  // shrinks early (transactions older than it get transaction_too_old and retry). Default 8 MiB.
  std::size_t resolver_bytes_max = 8u << 20;
  // RocksDB block cache, bytes: data blocks, and the open tables' index and filter blocks (in it
  // with table_index_in_cache, else held by the tables and charged to it). Default 32 MiB.
  std::size_t block_cache_bytes = 32u << 20;
  // All RocksDB memtables together, bytes: a flush starts as they near it (each memtable is
  // half of it; up to about 1.5x exists while one is being flushed). Charged to the block cache,
  // so memtables and cached blocks together stay within block_cache_bytes. Default 16 MiB.
  std::size_t write_buffer_bytes = 16u << 20;
  // Keep the tables' index and filter blocks (partitioned) in the block cache instead of beside
  // it: memory bounded by block_cache_bytes at any data size. Default true; false holds them all,
  // charged to the cache, for point reads that never look them up in it.
  bool table_index_in_cache = true;
  // Prefix bloom filters on each key's first N tuple elements (storage/tuple_prefix.h): a range
  // read whose bounds share them skips tables that hold no such key. 0 = none. Default 0; the
  // server sets the elements that name one document.
  std::size_t bloom_prefix_tuple_elements = 0;
  // Column families (storage/rocksdb/families.h): keys that are packed tuples (family_top, x, s,
  // ...) with s in family_subspaces live in a RocksDB column family per s, every other key in one
  // more; readers see one keyspace either way. A store written under another rule has its keys
  // moved at open, in batches each moving its keys atomically (a crash part-way leaves every key
  // in exactly one family; the next open goes on). Default none (one family); the server names
  // the busy per-database subspaces.
  std::int64_t family_top = 0;
  std::vector<std::int64_t> family_subspaces;
  // Those of family_subspaces whose reads are nearly always of keys that exist (a document's body,
  // its by_id entry): their last level's tables carry no filter (RocksDB's
  // optimize_filters_for_hits). Most of a large store sits in the last level, so that is most of
  // those filters' memory; a read of a key that is absent costs that level an index and a data
  // block lookup instead of a filter probe. Their data blocks carry a hash index for point reads.
  // Default none.
  std::vector<std::int64_t> family_hit_subspaces;
  // Those of family_subspaces whose keys are written in increasing order (a log, such as the
  // changes feed): their level-0 tables do not overlap the level below, so compacting them moves
  // files without rewriting, and it runs as soon as 4 are there, which keeps ordered scans merging
  // few tables. Every other family compacts level 0 once 8 tables are there: each compaction
  // merges its level-0 tables with the level below, so waiting for twice as many rewrites that
  // level half as often under writes. Default none.
  std::vector<std::int64_t> family_ordered_subspaces;
  // Retry backoff of on_error(): starts at initial, doubles up to max, jittered. Defaults 1 ms / 1
  // s.
  std::int64_t retry_backoff_initial_us = 1'000;
  std::int64_t retry_backoff_max_us = 1'000'000;
  // Attempts Database::run() makes before giving up with the last error. Default 100,000.
  int run_attempts_max = 100'000;
  // Time source; nullptr = SteadyClock.
  std::shared_ptr<Clock> clock;
};

// What the store has done since it was opened, and how big it is.
struct StoreStats {
  std::uint64_t commits = 0;    // transactions committed
  std::uint64_t conflicts = 0;  // transactions refused with not_committed
  std::uint64_t batches = 0;    // commit batches written (one WAL write each)
  // Commit batches whose WAL write was synced to disk before any of their commits was
  // acknowledged; equal to `batches` when `fsync` (Options::fsync) is on, 0 when it is off.
  std::uint64_t synced_batches = 0;
  bool fsync = false;
  std::uint64_t commit_queue = 0;  // transactions waiting for the commit thread now
  std::uint64_t disk_bytes = 0;    // SST files plus memtables
  // Memory held by design (each bounded by an Options field).
  std::uint64_t block_cache_bytes = 0;  // blocks in the block cache
  // All the block cache counts against its bound: its blocks, the memtables' reservations and,
  // unless table_index_in_cache, the charge for the table readers' memory.
  std::uint64_t block_cache_usage_bytes = 0;
  std::uint64_t memtable_bytes = 0;           // in memtables
  std::uint64_t memtable_reserved_bytes = 0;  // the cache reserved for them (256 KiB steps)
  std::uint64_t table_readers_bytes = 0;      // tables' index and filter blocks outside the cache
  std::uint64_t resolver_keys = 0;            // write-conflict keys remembered
  std::uint64_t resolver_bytes = 0;           // their estimated heap bytes
  std::uint64_t snapshots = 0;  // RocksDB snapshots held (the read views of a version share one)
  // Prefix iterators a transaction took from the shelf of its version's snapshot instead of
  // building one, and those on the latest version's shelf now.
  std::uint64_t iterators_reused = 0;
  std::uint64_t iterators_shelved = 0;
  // Cleared ranges committed, each written as a RocksDB range tombstone: every read of the
  // memtable it lands in and every iterator over the tables it reaches then steps through it.
  std::uint64_t range_clears = 0;
  // Level-0 tables of the data families (every family but the store's own metadata): those a
  // point read may look in one by one, waiting for a compaction.
  std::uint64_t level0_tables = 0;
};

// Whether the store answers: what health checks report (/_up, /_node/{node}/_system).
struct StoreHealth {
  std::string engine;           // "rocksdb" or "foundationdb"
  bool available = true;        // the probe was answered in time
  std::int64_t latency_us = 0;  // how long the probe took (FoundationDB: a read version)
  std::string error;            // why not available: the error's name
};

class Database;

// What an engine implements behind Database (see Database for each call's contract).
class DatabaseBackend {
 public:
  virtual ~DatabaseBackend() = default;
  virtual Transaction create_transaction() = 0;
  virtual std::int64_t committed_version() const = 0;
  virtual StoreStats stats() const = 0;
  virtual const Options& options() const = 0;
  // Every table when `range` is nullopt.
  virtual Status compact_files(const std::optional<KeyRange>& range) = 0;
  virtual void set_commit_fault_hook(std::function<CommitFault()> hook) = 0;
  virtual StoreHealth probe(std::chrono::milliseconds within) = 0;
};

class Database {
 public:
  // Opens (creating if allowed) the embedded store at `path`. Error::io_error if RocksDB cannot
  // open it. (Defined by storage/rocksdb/: link storage_rocksdb.)
  static Result<std::unique_ptr<Database>> open(const std::string& path, Options options = {});
  // For engines: a Database over `backend` (never null).
  explicit Database(std::unique_ptr<DatabaseBackend> backend) : backend_(std::move(backend)) {}
  ~Database();  // drains pending commits, stops the engine's threads, cancels watches
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  Transaction create_transaction() { return backend_->create_transaction(); }

  // Runs fn(Transaction&) -> Status or Result<T>, commits, and retries retryable errors (with
  // on_error's backoff) up to Options::run_attempts_max times. Returns fn's result once committed,
  // or the first non-retryable error (from fn or from commit). fn must be safe to run more than
  // once, and must itself handle commit_unknown_result idempotently if it is not idempotent.
  template <typename F>
  auto run(F&& fn) -> std::invoke_result_t<F&, Transaction&>;

  // The newest committed (durable and visible) version (on FoundationDB: a fresh read version,
  // one round trip to the cluster).
  std::int64_t committed_version() const { return backend_->committed_version(); }
  // Counters since open and the store's size, for metrics (FoundationDB: commits and conflicts
  // of this handle; the rest 0).
  StoreStats stats() const { return backend_->stats(); }
  // Asks the store for the cheapest answer it gives (the embedded store: none; FoundationDB: a
  // read version from the cluster), waiting at most `within`.
  StoreHealth probe(std::chrono::milliseconds within) { return backend_->probe(within); }
  // The embedded engine's options; on FoundationDB defaults, with run_attempts_max from its
  // options.
  const Options& options() const { return backend_->options(); }
  std::size_t transaction_size_limit() const { return backend_->options().transaction_size_limit; }
  // Rewrites every table of every column family into the last level, blocking until done: the
  // files at their smallest and the read path of a fully compacted store. Slow on a large store.
  // With a range [begin, end): only the tables that hold its keys (what a database's compaction
  // asks for; a FoundationDB cluster's storage servers do this on their own, and there this
  // succeeds at once).
  Status compact_files() { return backend_->compact_files(std::nullopt); }
  Status compact_files(std::string_view begin, std::string_view end);

  // Test hooks. Set a fault hook between transactions: one that began before it was set may get
  // commit_unknown_result without having prepared for it (Transaction::
  // may_commit_unknown_result). The embedded engine only: FoundationDB ignores it.
  void set_commit_fault_hook(std::function<CommitFault()> hook) {
    backend_->set_commit_fault_hook(std::move(hook));
  }

 private:
  int run_attempts_max() const { return backend_->options().run_attempts_max; }
  std::unique_ptr<DatabaseBackend> backend_;
};

template <typename F>
auto Database::run(F&& fn) -> std::invoke_result_t<F&, Transaction&> {
  using R = std::invoke_result_t<F&, Transaction&>;
  Transaction tr = create_transaction();
  Error last = Error::success;
  for (int attempt = 0; attempt < run_attempts_max(); ++attempt) {
    R r = fn(tr);
    Error e = r.error();
    if (e == Error::success) {
      auto c = tr.commit();
      if (c.ok()) return r;
      e = c.error();
    }
    last = e;
    if (!tr.on_error(e).ok()) return R(e);
  }
  return R(last);
}

}  // namespace chaise::storage
