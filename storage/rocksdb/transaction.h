// storage/rocksdb/transaction.h — internal to storage/rocksdb/: the embedded engine's transaction
// (storage/transaction.h has the contract): read-your-writes over a RocksDB snapshot,
// conflict-range bookkeeping, FoundationDB's limits, and the hand-off of buffered writes to the
// commit pipeline (engine.h).
//
// Threading: one thread at a time, as Transaction. The Engine must outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/transaction.h"
#include "storage/write_map.h"

namespace rocksdb {
class Iterator;
}  // namespace rocksdb

namespace chaise::storage {

class Engine;
struct ReadView;
struct CommitRequest;
class WatchState;

class RocksTransaction final : public TransactionBackend {
 public:
  explicit RocksTransaction(Engine* engine) : engine_(engine) {}
  ~RocksTransaction() override;
  RocksTransaction(const RocksTransaction&) = delete;
  RocksTransaction& operator=(const RocksTransaction&) = delete;

  Result<std::optional<std::string>> get(std::string_view key, Snapshot snapshot) override;
  // Reads are local: nothing to overlap. The read conflict is taken as a read would.
  void prefetch(std::string_view key, Snapshot snapshot) override {
    if (snapshot == Snapshot::no) add_read_conflict_range(key, key_after(key));
  }
  Result<std::vector<KeyValue>> get_range(std::string_view begin, std::string_view end, int limit,
                                          Reverse reverse, Snapshot snapshot) override;
  Result<std::string> get_key(const KeySelector& selector, Snapshot snapshot) override;
  Result<std::vector<std::vector<KeyValue>>> get_ranges(const std::vector<KeyRange>& ranges,
                                                        int limit_each, Snapshot snapshot) override;
  Result<std::int64_t> get_estimated_range_size_bytes(std::string_view begin,
                                                      std::string_view end) override;
  void disable_read_cache() override;
  void set_timeout(std::chrono::milliseconds) override {}
  void set_read_version(std::int64_t) override {}
  Result<std::int64_t> get_read_version() override;
  void set(std::string_view key, std::string_view value) override;
  void clear(std::string_view key) override;
  void clear_range(std::string_view begin, std::string_view end) override;
  void atomic_op(std::string_view key, MutationType type, std::string_view operand) override;
  void set_versionstamped_key(std::string_view key_template, std::string_view value) override;
  void set_versionstamped_value(std::string_view key, std::string_view value_template) override;
  void add_read_conflict_range(std::string_view begin, std::string_view end) override;
  void add_write_conflict_range(std::string_view begin, std::string_view end) override;
  std::shared_ptr<Watch> watch(std::string_view key, WatchCallback callback) override;
  Result<CommitResult> commit() override;
  void commit_async(std::function<void(Result<CommitResult>)> done) override;
  Result<std::chrono::microseconds> prepare_retry(Error e) override;
  Status on_error(Error e) override;
  void reset() override;
  bool read_only() const override {
    return writes_.empty() && versionstamped_keys_.empty() && write_conflicts_.empty();
  }
  bool may_commit_unknown_result() const override;
  void touch_metadata() override { touches_metadata_ = true; }
  bool touches_metadata() const override { return touches_metadata_; }
  std::uint64_t metadata_generation() const override;
  std::optional<std::uint64_t> snapshot_metadata_generation() override;
  std::uint64_t instance_id() const override;
  std::size_t approximate_size() const override { return size_bytes_; }
  std::size_t size_limit() const override;

 private:
  Status ensure_read_view();
  Status check_usable();
  void defer(Error e);
  bool check_key(std::string_view key);
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
  // Reads at view_'s snapshot, so it goes before the view does: declared first and dropped first
  // by the destructor and reset().
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
