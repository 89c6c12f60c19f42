// storage/transaction.h — a FoundationDB-shaped transaction over the embedded engine.
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
// - A transaction is valid for Options::transaction_lifetime_us (5 s) after its read version; reads
// or a
//   commit after that fail with transaction_too_old (1007).
// - Errors from mutation calls (set/clear/...) are deferred: the call records the first one and
//   commit() returns it, as in FoundationDB.
//
// Threading: a Transaction is used by one thread at a time. Its Database must outlive it.
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

namespace rocksdb {
class Iterator;
}  // namespace rocksdb

namespace chaise::storage {

// FoundationDB's hard limits.
inline constexpr std::size_t kKeySizeMax = 10'000;
inline constexpr std::size_t kValueSizeMax = 100'000;
inline constexpr std::size_t kTransactionSizeMax = 10'000'000;
// Versionstamps: 8-byte commit version + 2-byte order within the commit batch (+ 2 user bytes in
// the tuple layer). A versionstamped key or value carries a 4-byte little-endian offset suffix (API
// >= 520).
inline constexpr std::size_t kVersionstampSize = 10;

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
// with the commit's error if the watching transaction failed. It runs on the commit thread (or the
// cancelling/committing caller's thread) and must not block.
class Watch {
 public:
  virtual ~Watch() = default;
  virtual void cancel() = 0;
};
using WatchCallback = std::function<void(Error)>;

class Engine;
struct ReadView;
struct CommitRequest;
class WatchState;

class Transaction {
 public:
  Transaction(Transaction&&) noexcept;
  Transaction& operator=(Transaction&&) noexcept;
  ~Transaction();

  // Reads. get: the value, or nullopt if absent. get_range: keys in [begin, end) in order (reverse:
  // descending), at most `limit` (0 = no limit). get_key: the key a selector resolves to.
  Result<std::optional<std::string>> get(std::string_view key, Snapshot snapshot = Snapshot::no);
  Result<std::vector<KeyValue>> get_range(std::string_view begin, std::string_view end,
                                          int limit = 0, Reverse reverse = Reverse::no,
                                          Snapshot snapshot = Snapshot::no);
  Result<std::string> get_key(const KeySelector& selector, Snapshot snapshot = Snapshot::no);
  // Several ranges at once: `ranges` ascending and not overlapping, at most `limit_each` keys from
  // each (0 = no limit). The same answer and conflicts as get_range per range, but one storage
  // iterator walks them all in order, moving on without a seek when the next range starts where
  // the last one ended (a page of rows whose bodies are near one another in key order).
  Result<std::vector<std::vector<KeyValue>>> get_ranges(const std::vector<KeyRange>& ranges,
                                                        int limit_each = 0,
                                                        Snapshot snapshot = Snapshot::no);

  // FoundationDB's get_estimated_range_size_bytes: about how many bytes the keys and values in
  // [begin, end) take in storage, as the engine estimates it from its files and memory (no read,
  // no conflict; a range written in this transaction counts as committed so far).
  Result<std::int64_t> get_estimated_range_size_bytes(std::string_view begin, std::string_view end);

  // FoundationDB's read_server_side_cache_disable: this transaction's reads do not fill the
  // storage engine's block cache (bulk reads, such as attachment bytes streamed out, that would
  // evict what other requests read and grow memory).
  void disable_read_cache();

  // The read version, acquiring it if not yet done.
  Result<std::int64_t> get_read_version();

  // Writes (buffered until commit; errors deferred to commit()).
  void set(std::string_view key, std::string_view value);
  void clear(std::string_view key);
  void clear_range(std::string_view begin, std::string_view end);
  // Atomic ops on little-endian unsigned/two's-complement integers of the operand's width.
  void add(std::string_view key, std::string_view operand);
  void add(std::string_view key, std::int64_t delta);  // 8-byte little-endian int64
  void max(std::string_view key, std::string_view operand);
  void min(std::string_view key, std::string_view operand);
  // `key_template`/`value_template` end with a 4-byte little-endian offset of 10 placeholder bytes
  // that the commit fills with the versionstamp (Tuple::pack_with_versionstamp produces this form).
  void set_versionstamped_key(std::string_view key_template, std::string_view value);
  void set_versionstamped_value(std::string_view key, std::string_view value_template);

  void add_read_conflict_range(std::string_view begin, std::string_view end);
  void add_read_conflict_key(std::string_view key);
  void add_write_conflict_range(std::string_view begin, std::string_view end);
  void add_write_conflict_key(std::string_view key);

  // Registers a watch on `key`, active once this transaction commits (read-only commits included).
  std::shared_ptr<Watch> watch(std::string_view key, WatchCallback callback);

  // Commits and blocks until durable (per Options::fsync). On success the transaction may not be
  // used again except through reset().
  Result<CommitResult> commit();
  // Asynchronous commit: `done` runs once, on the commit thread (must not block), or inline when
  // the outcome is known without the commit pipeline (read-only, deferred error).
  void commit_async(std::function<void(Result<CommitResult>)> done);

  // If `e` is retryable, resets the transaction and returns the backoff to wait before retrying;
  // otherwise returns `e`. on_error() does the same and sleeps the backoff (FDB's on_error).
  Result<std::chrono::microseconds> prepare_retry(Error e);
  Status on_error(Error e);
  // Drops all reads, writes and the read version; keeps the retry backoff state.
  void reset();
  // Nothing to write (no point or range write, versionstamped key or write conflict): the commit
  // checks nothing and completes at once, FoundationDB's read-only transaction.
  bool read_only() const {
    return writes_.empty() && versionstamped_keys_.empty() && write_conflicts_.empty();
  }
  // Whether this transaction's commit may end in commit_unknown_result, after which a retry must
  // tell whether it landed (FoundationDB's 1021). The embedded engine knows every commit's
  // outcome: true only while a test's fault hook is set (Database::set_commit_fault_hook).
  bool may_commit_unknown_result() const;

  // Metadata that readers remember between transactions (which databases exist, their security
  // objects) is read through a generation, FoundationDB's metadataVersion in spirit: a
  // transaction that changes such data calls touch_metadata(), and its commit moves the
  // generation to an odd value before its writes become visible and to the next even value
  // after. snapshot_metadata_generation() names the generation a snapshot shows exactly; what
  // was read at one snapshot may be used at any other of the same generation. instance_id()
  // tells stores apart.
  void touch_metadata() { touches_metadata_ = true; }
  bool touches_metadata() const { return touches_metadata_; }
  std::uint64_t metadata_generation() const;
  // The generation whose metadata this transaction's snapshot (acquired here when not yet) shows
  // exactly; nullopt when a metadata commit was being applied as it was taken, or when this
  // transaction changes metadata itself. Values read at snapshots of the same generation are the
  // same.
  std::optional<std::uint64_t> snapshot_metadata_generation();
  std::uint64_t instance_id() const;

  // Approximate size in bytes counted against kTransactionSizeMax.
  std::size_t approximate_size() const { return size_bytes_; }

 private:
  friend class Database;
  explicit Transaction(Engine* engine);

  Status ensure_read_view();
  Status check_usable();
  void defer(Error e);
  bool check_key(std::string_view key);
  void atomic_op(std::string_view key, MutationType type, std::string_view operand);
  void add_conflict(std::vector<KeyRange>& ranges, std::string_view begin, std::string_view end);
  // Range read through the write overlay; `limited` tells whether `limit` cut it short.
  Status read_range(std::string_view begin, std::string_view end, int limit, Reverse reverse,
                    std::vector<KeyValue>& out, bool& limited);
  Result<std::optional<std::string>> read_storage(std::string_view key);
  // The transaction's iterator in `family` for ranges within one bloom prefix (needs the read
  // view).
  rocksdb::Iterator* prefix_iterator(std::size_t family);
  // Hands the prefix iterators to the view's shared snapshot for later transactions.
  void shelve_prefix_iterators();
  std::unique_ptr<CommitRequest> take_commit_request();

  Engine* engine_ = nullptr;
  // Reads at view_'s snapshot, so it goes before the view does: declared first (a move
  // assignment replaces it first) and dropped first by the destructor and reset().
  std::vector<std::unique_ptr<rocksdb::Iterator>> prefix_its_;  // by family, made when first used
  std::shared_ptr<ReadView> view_;
  WriteMap writes_;
  std::vector<VersionstampedKey> versionstamped_keys_;
  std::vector<KeyRange> read_conflicts_;
  std::vector<KeyRange> write_conflicts_;
  std::vector<std::shared_ptr<WatchState>> watches_;
  std::size_t size_bytes_ = 0;
  Error deferred_ = Error::success;
  bool committing_ = false;
  bool fill_cache_ = true;
  bool touches_metadata_ = false;
  static constexpr std::uint64_t kNoGeneration = ~std::uint64_t{0};
  std::uint64_t snapshot_generation_ = kNoGeneration;
  std::chrono::microseconds backoff_{0};
};

}  // namespace chaise::storage
