// storage/transaction.h — a FoundationDB-shaped transaction, the same over every engine (the
// embedded RocksDB one, storage/rocksdb/; FoundationDB itself, storage/fdb/).
//
// Semantics (FoundationDB's, see DESIGN.md):
// - Reads see a consistent snapshot taken at the read version (acquired lazily at the first read),
//   overlaid with this transaction's own uncommitted writes (read-your-writes).
// - Non-snapshot reads add read-conflict ranges; at commit the resolver fails the transaction with
//   not_committed (1020) if a transaction committed after the read version wrote into any of them.
//   Range reads conflict on the range actually read (narrowed to the last key returned when `limit`
//   stopped the read), so an empty range read conflicts with a later insert into that range.
// - Writes are buffered and applied atomically at commit. Atomic ops (add/max/min) take no read
//   conflict and are evaluated against the latest committed value at commit time.
// - A transaction is valid for 5 s after its read version (Options::transaction_lifetime_us on the
//   embedded engine, FoundationDB's own limit on FoundationDB); reads or a commit after that fail
//   with transaction_too_old (1007).
// - Errors from mutation calls (set/clear/...) are deferred: the call records the first one and
//   commit() returns it, as in FoundationDB.
//
// Threading: a Transaction is used by one thread at a time. Its Database must outlive it.
//
// Engines: a Transaction holds its engine's TransactionBackend and forwards each call to it (one
// virtual call); the contract below is every engine's, and where an engine differs its header says
// so (storage/fdb/fdb_database.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/error.h"
#include "storage/write_map.h"

namespace chaise::storage {

// FoundationDB's hard limits.
inline constexpr std::size_t kKeySizeMax = 10'000;
inline constexpr std::size_t kValueSizeMax = 100'000;
inline constexpr std::size_t kTransactionSizeMax = 10'000'000;
// Versionstamps: 8-byte commit version + 2-byte order within the commit batch (+ 2 user bytes in
// the tuple layer). A versionstamped key or value carries a 4-byte little-endian offset suffix (API
// >= 520).
inline constexpr std::size_t kVersionstampSize = 10;

// Work that spreads over transactions sizes each by a bound chosen for kTransactionSizeMax: under
// a lower size limit (Options::transaction_size_limit) the bound keeps its share of the limit.
inline std::size_t share_of_size_limit(std::size_t bytes_at_max, std::size_t size_limit) {
  return static_cast<std::size_t>(static_cast<std::uint64_t>(bytes_at_max) * size_limit /
                                  kTransactionSizeMax);
}

enum class Snapshot : bool { no = false, yes = true };
enum class Reverse : bool { no = false, yes = true };

struct KeyValue {
  std::string key;
  std::string value;
  bool operator==(const KeyValue&) const = default;
};

// FoundationDB key selectors. resolve: take the last key < key (<= if or_equal), then move `offset`
// keys forward (offset 1 = the key after it). Keys outside the database resolve to "" or "\xff".
struct KeySelector {
  std::string key;
  bool or_equal = false;
  int offset = 1;
  static KeySelector last_less_than(std::string k) { return {std::move(k), false, 0}; }
  static KeySelector last_less_or_equal(std::string k) { return {std::move(k), true, 0}; }
  static KeySelector first_greater_than(std::string k) { return {std::move(k), true, 1}; }
  static KeySelector first_greater_or_equal(std::string k) { return {std::move(k), false, 1}; }
};

struct CommitResult {
  // The version at which the transaction committed; the read version for a read-only transaction.
  std::int64_t version = 0;
  // The transaction's 10-byte versionstamp (version big-endian + order in batch big-endian); empty
  // for a read-only transaction.
  std::string versionstamp;
};

// A registered watch. The callback runs exactly once: with success after a commit changes the key's
// value from the one the watching transaction saw, with transaction_cancelled after cancel(), or
// with the commit's error if the watching transaction failed. Its second argument is the version
// of the commit that fired it when that commit was this process's (else 0): a transaction given it
// by set_read_version sees the change without asking the cluster for a read version. It runs on the engine's commit thread
// (FoundationDB's network thread), or on the cancelling or committing caller's thread, and must not
// block.
class Watch {
 public:
  virtual ~Watch() = default;
  virtual void cancel() = 0;
};
using WatchCallback = std::function<void(Error, std::int64_t version)>;

// What an engine implements behind Transaction: one object per transaction, made by its
// DatabaseBackend. Each call has the contract of the Transaction method of the same name.
class TransactionBackend {
 public:
  virtual ~TransactionBackend() = default;
  virtual Result<std::optional<std::string>> get(std::string_view key, Snapshot snapshot) = 0;
  virtual void prefetch(std::string_view key, Snapshot snapshot) = 0;
  virtual Result<std::vector<KeyValue>> get_range(std::string_view begin, std::string_view end,
                                                  int limit, Reverse reverse,
                                                  Snapshot snapshot) = 0;
  virtual Result<std::string> get_key(const KeySelector& selector, Snapshot snapshot) = 0;
  virtual Result<std::vector<std::vector<KeyValue>>> get_ranges(const std::vector<KeyRange>& ranges,
                                                                int limit_each,
                                                                Snapshot snapshot) = 0;
  virtual Result<std::int64_t> get_estimated_range_size_bytes(std::string_view begin,
                                                              std::string_view end) = 0;
  virtual void disable_read_cache() = 0;
  virtual void set_timeout(std::chrono::milliseconds within) = 0;
  virtual void set_read_version(std::int64_t version) = 0;
  virtual Result<std::int64_t> get_read_version() = 0;
  virtual void set(std::string_view key, std::string_view value) = 0;
  virtual void clear(std::string_view key) = 0;
  virtual void clear_range(std::string_view begin, std::string_view end) = 0;
  virtual void atomic_op(std::string_view key, MutationType type, std::string_view operand) = 0;
  virtual void set_versionstamped_key(std::string_view key_template, std::string_view value) = 0;
  virtual void set_versionstamped_value(std::string_view key, std::string_view value_template) = 0;
  virtual void add_read_conflict_range(std::string_view begin, std::string_view end) = 0;
  virtual void add_write_conflict_range(std::string_view begin, std::string_view end) = 0;
  virtual std::shared_ptr<Watch> watch(std::string_view key, WatchCallback callback) = 0;
  virtual Result<CommitResult> commit() = 0;
  virtual void commit_async(std::function<void(Result<CommitResult>)> done) = 0;
  virtual Result<std::chrono::microseconds> prepare_retry(Error e) = 0;
  virtual Status on_error(Error e) = 0;
  virtual void reset() = 0;
  virtual bool read_only() const = 0;
  virtual bool may_commit_unknown_result() const = 0;
  virtual void touch_metadata() = 0;
  virtual bool touches_metadata() const = 0;
  virtual std::uint64_t metadata_generation() const = 0;
  virtual std::optional<std::uint64_t> snapshot_metadata_generation() = 0;
  virtual std::uint64_t instance_id() const = 0;
  virtual std::size_t approximate_size() const = 0;
  virtual std::size_t size_limit() const = 0;
};

class Transaction {
 public:
  // For engines: a transaction over `backend` (never null). Callers get theirs from
  // Database::create_transaction().
  explicit Transaction(std::unique_ptr<TransactionBackend> backend) : b_(std::move(backend)) {}
  Transaction(Transaction&&) noexcept = default;
  Transaction& operator=(Transaction&&) noexcept = default;
  ~Transaction() = default;

  // Reads. get: the value, or nullopt if absent. get_range: keys in [begin, end) in order (reverse:
  // descending), at most `limit` (0 = no limit). get_key: the key a selector resolves to.
  Result<std::optional<std::string>> get(std::string_view key, Snapshot snapshot = Snapshot::no) {
    return b_->get(key, snapshot);
  }
  // Starts get(key, snapshot) now, so that the get() of it made later (with the same snapshot
  // mode) waits only for what is left of this read: on FoundationDB the reads made in between
  // share its round trip. The later get() answers as it would have without it (a write to `key`
  // in between, or a reset, drops the early read). Snapshot::no takes the key's read conflict
  // here, even if no get() follows. The embedded engine, whose reads are local, takes that
  // conflict and nothing else.
  void prefetch(std::string_view key, Snapshot snapshot = Snapshot::no) {
    b_->prefetch(key, snapshot);
  }
  Result<std::vector<KeyValue>> get_range(std::string_view begin, std::string_view end,
                                          int limit = 0, Reverse reverse = Reverse::no,
                                          Snapshot snapshot = Snapshot::no) {
    return b_->get_range(begin, end, limit, reverse, snapshot);
  }
  Result<std::string> get_key(const KeySelector& selector, Snapshot snapshot = Snapshot::no) {
    return b_->get_key(selector, snapshot);
  }
  // Several ranges at once: `ranges` ascending and not overlapping, at most `limit_each` keys from
  // each (0 = no limit). The same answer and conflicts as get_range per range, but one storage
  // iterator walks them all in order, moving on without a seek when the next range starts where
  // the last one ended (a page of rows whose bodies are near one another in key order).
  Result<std::vector<std::vector<KeyValue>>> get_ranges(const std::vector<KeyRange>& ranges,
                                                        int limit_each = 0,
                                                        Snapshot snapshot = Snapshot::no) {
    return b_->get_ranges(ranges, limit_each, snapshot);
  }

  // FoundationDB's get_estimated_range_size_bytes: about how many bytes the keys and values in
  // [begin, end) take in storage, as the engine estimates it from its files and memory (no read,
  // no conflict; a range written in this transaction counts as committed so far).
  Result<std::int64_t> get_estimated_range_size_bytes(std::string_view begin,
                                                      std::string_view end) {
    return b_->get_estimated_range_size_bytes(begin, end);
  }

  // FoundationDB's read_server_side_cache_disable: this transaction's reads do not fill the
  // storage engine's block cache (bulk reads, such as attachment bytes streamed out, that would
  // evict what other requests read and grow memory).
  void disable_read_cache() { b_->disable_read_cache(); }

  // FoundationDB's timeout option: the transaction fails with transaction_timed_out once `within`
  // has passed since it began (retries included), in place of the store's transaction timeout,
  // until reset(). For a read the caller can do without when the store is slow to answer. The
  // embedded engine never waits on a network: nothing to bound.
  void set_timeout(std::chrono::milliseconds within) { b_->set_timeout(within); }

  // FoundationDB's set_read_version: the reads use `version` instead of a read version asked of
  // the cluster, a round trip fewer. `version` is one this process saw committed (a watch's, a
  // CommitResult's) within the last second, well inside the five seconds a version stays
  // readable; the reads see every commit up to it and perhaps none after. Called before the
  // first read. The embedded engine reads its newest snapshot, which is at least as new.
  void set_read_version(std::int64_t version) { b_->set_read_version(version); }

  // The read version, acquiring it if not yet done.
  Result<std::int64_t> get_read_version() { return b_->get_read_version(); }

  // Writes (buffered until commit; errors deferred to commit()).
  void set(std::string_view key, std::string_view value) { b_->set(key, value); }
  void clear(std::string_view key) { b_->clear(key); }
  void clear_range(std::string_view begin, std::string_view end) { b_->clear_range(begin, end); }
  // Atomic ops on little-endian unsigned/two's-complement integers of the operand's width.
  void add(std::string_view key, std::string_view operand) {
    b_->atomic_op(key, MutationType::add, operand);
  }
  void add(std::string_view key, std::int64_t delta);  // 8-byte little-endian int64
  void max(std::string_view key, std::string_view operand) {
    b_->atomic_op(key, MutationType::max, operand);
  }
  void min(std::string_view key, std::string_view operand) {
    b_->atomic_op(key, MutationType::min, operand);
  }
  // `key_template`/`value_template` end with a 4-byte little-endian offset of 10 placeholder bytes
  // that the commit fills with the versionstamp (Tuple::pack_with_versionstamp produces this form).
  void set_versionstamped_key(std::string_view key_template, std::string_view value) {
    b_->set_versionstamped_key(key_template, value);
  }
  void set_versionstamped_value(std::string_view key, std::string_view value_template) {
    b_->set_versionstamped_value(key, value_template);
  }

  void add_read_conflict_range(std::string_view begin, std::string_view end) {
    b_->add_read_conflict_range(begin, end);
  }
  void add_read_conflict_key(std::string_view key) {
    b_->add_read_conflict_range(key, key_after(key));
  }
  void add_write_conflict_range(std::string_view begin, std::string_view end) {
    b_->add_write_conflict_range(begin, end);
  }
  void add_write_conflict_key(std::string_view key) {
    b_->add_write_conflict_range(key, key_after(key));
  }

  // Registers a watch on `key`, active once this transaction commits (read-only commits included).
  std::shared_ptr<Watch> watch(std::string_view key, WatchCallback callback) {
    return b_->watch(key, std::move(callback));
  }

  // Commits and blocks until durable (per Options::fsync). On success the transaction may not be
  // used again except through reset().
  Result<CommitResult> commit() { return b_->commit(); }
  // Asynchronous commit: `done` runs once, on the engine's commit thread (FoundationDB's network
  // thread; it must not block), or inline when the outcome is known without the commit pipeline
  // (read-only, deferred error).
  void commit_async(std::function<void(Result<CommitResult>)> done) {
    b_->commit_async(std::move(done));
  }

  // If `e` is retryable, resets the transaction and returns the backoff to wait before retrying;
  // otherwise returns `e`. on_error() does the same and sleeps the backoff (FDB's on_error).
  Result<std::chrono::microseconds> prepare_retry(Error e) { return b_->prepare_retry(e); }
  Status on_error(Error e) { return b_->on_error(e); }
  // Drops all reads, writes and the read version; keeps the retry backoff state.
  void reset() { b_->reset(); }
  // Nothing to write (no point or range write, versionstamped key or write conflict): the commit
  // checks nothing and completes at once, FoundationDB's read-only transaction.
  bool read_only() const { return b_->read_only(); }
  // Whether this transaction's commit may end in commit_unknown_result, after which a retry must
  // tell whether it landed (FoundationDB's 1021). The embedded engine knows every commit's
  // outcome: true only while a test's fault hook is set (Database::set_commit_fault_hook); on
  // FoundationDB always true.
  bool may_commit_unknown_result() const { return b_->may_commit_unknown_result(); }

  // Metadata that readers remember between transactions (which databases exist, their security
  // objects) is read through a generation, FoundationDB's metadataVersion: a transaction that
  // changes such data calls touch_metadata(), and its commit moves the generation with its
  // writes, so that no snapshot naming a generation shows part of them (the embedded engine moves
  // it to an odd value before writing and to the next even value after; FoundationDB sets
  // \xff/metadataVersion in the same commit, storage/fdb/fdb_database.h).
  // snapshot_metadata_generation() names the generation a snapshot shows exactly (an even
  // number); what was read at one snapshot may be used at any other of the same generation.
  // instance_id() tells stores apart (every handle on one FoundationDB store has the same).
  void touch_metadata() { b_->touch_metadata(); }
  bool touches_metadata() const { return b_->touches_metadata(); }
  // The newest generation this Database has seen (embedded: the store's; FoundationDB: the
  // highest any of this handle's transactions has read, a lower bound of the cluster's).
  std::uint64_t metadata_generation() const { return b_->metadata_generation(); }
  // The generation whose metadata this transaction's snapshot (acquired here when not yet) shows
  // exactly; nullopt when a metadata commit was being applied as it was taken, or when this
  // transaction changes metadata itself. Values read at snapshots of the same generation are the
  // same.
  std::optional<std::uint64_t> snapshot_metadata_generation() {
    return b_->snapshot_metadata_generation();
  }
  std::uint64_t instance_id() const { return b_->instance_id(); }

  // Approximate size in bytes counted against size_limit().
  std::size_t approximate_size() const { return b_->approximate_size(); }
  // The bytes this transaction may write: approximate_size() past it fails the commit with
  // transaction_too_large. Options::transaction_size_limit, kTransactionSizeMax unless lowered.
  std::size_t size_limit() const { return b_->size_limit(); }

 private:
  std::unique_ptr<TransactionBackend> b_;
};

// A read version a transaction read at, and when (steady clock): what a later transaction of the
// same piece of work (one request) may start at (Transaction::set_read_version) instead of asking
// the store for another. Zero: none.
struct SeenReadVersion {
  std::int64_t version = 0;
  std::chrono::steady_clock::time_point at;

  // `tr`'s read version, as of now; none when it cannot tell.
  static SeenReadVersion of(Transaction& tr) {
    auto v = tr.get_read_version();
    return v.ok() ? SeenReadVersion{*v, std::chrono::steady_clock::now()} : SeenReadVersion{};
  }
  // The version while it is younger than `within`, else 0.
  std::int64_t if_younger_than(std::chrono::steady_clock::duration within) const {
    return std::chrono::steady_clock::now() - at < within ? version : 0;
  }
};

}  // namespace chaise::storage
