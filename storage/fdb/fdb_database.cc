// The FoundationDB engine (fdb_database.h has the contract): FdbEngine behind Database, and
// FdbTransaction behind Transaction, each call one call of FoundationDB's C API.
//
// Blocking calls wait on their future (Future::wait: its callback wakes the caller); commit_async
// and watches set a callback on theirs, which FoundationDB runs on its network thread. A future
// is destroyed by whoever waited on it, or by its callback.
//
// Metadata version: \xff/metadataVersion holds the versionstamp (10 bytes: 8-byte big-endian
// commit version, 2-byte order) of the last commit that set it; the generation is twice that
// version. FoundationDB accepts one write of it: set_versionstamped_value with 14 zero bytes (the
// placeholder, and offset 0).
#include "storage/fdb/fdb_database.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <unordered_map>

#include "storage/fdb/fdb_c_api.h"
#include "storage/fdb/fdb_network.h"
#include "storage/write_checks.h"

namespace chaise::storage {
namespace {

using fdb::fdb_error_t;
using fdb::FdbApi;
using fdb::FDBDatabase;
using fdb::FDBFuture;
using fdb::FDBKeyValue;
using fdb::FDBTransaction;

const std::string kMetadataVersionKey = "\xff/metadataVersion";
const std::string kMetadataVersionValue(14, '\0');
// The packed tuple ("chaise", "instance_id"): outside the integer-named subspaces of core's
// keyspace.
constexpr std::string_view kInstanceIdTuple(
    "\x02"
    "chaise\x00\x02"
    "instance_id\x00",
    21);

// Round trips one range read may take (each returns at least one key, FoundationDB's batches
// growing to megabytes): a read that needed more would have outlived the 5-second transaction.
constexpr int kRangeRoundTripsMax = 100'000;

const std::uint8_t* bytes(std::string_view s) {
  return reinterpret_cast<const std::uint8_t*>(s.data());
}
int length(std::string_view s) { return static_cast<int>(s.size()); }
std::string to_string(const std::uint8_t* p, int n) {
  return std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
}

std::uint64_t decode_be64(std::string_view s) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < 8 && i < s.size(); ++i)
    v = (v << 8) | static_cast<std::uint8_t>(s[i]);
  return v;
}

// FoundationDB's error code as an entry of error.h's table.
Error map_error(const FdbApi& api, fdb_error_t code) {
  switch (code) {
    case 0:
      return Error::success;
    case 1007:
      return Error::transaction_too_old;
    case 1009:
      return Error::future_version;
    case 1020:
      return Error::not_committed;
    case 1021:
      return Error::commit_unknown_result;
    case 1025:
    case fdb::kErrorOperationCancelled:
      return Error::transaction_cancelled;
    case fdb::kErrorTransactionTimedOut:
      return Error::transaction_timed_out;
    case 1032:
      return Error::too_many_watches;
    case 1036:
      return Error::accessed_unreadable;
    case 1037:
      return Error::process_behind;
    case 2004:
      return Error::key_outside_legal_range;
    case 2005:
      return Error::inverted_range;
    case 2006:
      return Error::invalid_option_value;
    case 2017:
      return Error::used_during_commit;
    case 2101:
      return Error::transaction_too_large;
    case 2102:
      return Error::key_too_large;
    case 2103:
      return Error::value_too_large;
    default:
      break;
  }
  if (api.error_predicate(fdb::kPredicateMaybeCommitted, code)) return Error::commit_unknown_result;
  if (api.error_predicate(fdb::kPredicateRetryable, code)) return Error::process_behind;
  return Error::io_error;
}

// The client library hands a callback's argument from the thread that armed it to its network
// thread through synchronisation ThreadSanitizer cannot see (the library is not instrumented);
// these say so, and it checks the rest.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
void handed_over(void* arg) { __tsan_release(arg); }
void taken_over(void* arg) { __tsan_acquire(arg); }
#else
void handed_over(void*) {}
void taken_over(void*) {}
#endif

// Owns a future until it is destroyed here or released to a callback.
class Future {
 public:
  Future(const FdbApi& api, FDBFuture* f) : api_(&api), f_(f) {}
  ~Future() {
    if (f_) api_->future_destroy(f_);
  }
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;
  Future(Future&& o) noexcept : api_(o.api_), f_(std::exchange(o.f_, nullptr)) {}
  Future& operator=(Future&&) = delete;
  FDBFuture* get() const { return f_; }
  FDBFuture* release() { return std::exchange(f_, nullptr); }
  // Waits until it is ready: FoundationDB's error code, 0 on success. The thread sleeps on a
  // condition variable that the future's callback signals, rather than in
  // fdb_future_block_until_ready, whose wait (a std::latch in FoundationDB 7.3) spins through
  // sched_yield first: with dozens of request threads waiting on two cores, that was a fifth of
  // the process's CPU time under a PUT load.
  fdb_error_t wait() {
    if (!api_->future_is_ready(f_)) {
      Wakeup w;
      handed_over(&w);
      if (fdb_error_t e = api_->future_set_callback(f_, &Wakeup::on_ready, &w); e != 0) return e;
      std::unique_lock lock(w.mu);
      w.cv.wait(lock, [&] { return w.ready; });
    }
    return api_->future_get_error(f_);
  }

 private:
  // What wait() sleeps on. The callback signals under the mutex, so the waiter, which returns
  // only once it holds the mutex again, never destroys it under the callback.
  struct Wakeup {
    std::mutex mu;
    std::condition_variable cv;
    bool ready = false;
    static void on_ready(FDBFuture*, void* param) {
      taken_over(param);
      auto* w = static_cast<Wakeup*>(param);
      std::lock_guard lock(w->mu);
      w->ready = true;
      w->cv.notify_one();
    }
  };

  const FdbApi* api_;
  FDBFuture* f_;
};

class FdbEngine;

// A watch: FoundationDB's watch future, whose callback runs ours once (cancel() may run it first).
// It owns itself (self_) until FoundationDB's callback, which runs exactly once whatever becomes of
// the future (set, failed, cancelled); the future goes with the watch.
class FdbWatch final : public Watch {
 public:
  FdbWatch(const FdbApi& api, WatchCallback cb) : api_(api), cb_(std::move(cb)) {}
  ~FdbWatch() override {
    if (future_) api_.future_destroy(future_);
  }

  // Takes `f` (never null) and arms its callback.
  static void arm(const std::shared_ptr<FdbWatch>& w, FDBFuture* f) {
    w->future_ = f;
    w->self_ = w;
    handed_over(w.get());
    if (fdb_error_t e = w->api_.future_set_callback(f, &FdbWatch::on_ready, w.get()); e != 0) {
      w->fire(map_error(w->api_, e), 0);  // not armed: nothing will call on_ready
      w->self_.reset();
    }
  }

  // The future is the watch's until it goes, so cancelling is safe at any time; on_ready follows
  // and finds the callback run.
  void cancel() override {
    fire(Error::transaction_cancelled, 0);
    api_.future_cancel(future_);
  }

  // Runs the callback unless it already ran.
  void fire(Error e, std::int64_t version) {
    if (fired_.exchange(true)) return;
    cb_(e, version);
  }
  void set_key(std::string_view key) { key_ = key; }
  const std::string& key() const { return key_; }  // in the cluster's keyspace

 private:
  static void on_ready(FDBFuture* f, void* param) {
    taken_over(param);
    auto* w = static_cast<FdbWatch*>(param);
    w->fire(map_error(w->api_, w->api_.future_get_error(f)), 0);
    // Set before the callback was armed. It may be the last reference: the watch goes as this
    // returns.
    std::shared_ptr<FdbWatch> self = std::move(w->self_);
  }

  const FdbApi& api_;
  WatchCallback cb_;
  std::atomic<bool> fired_{false};
  FDBFuture* future_ = nullptr;
  std::string key_;
  std::shared_ptr<FdbWatch> self_;
};

class FdbEngine final : public DatabaseBackend {
 public:
  FdbEngine(const FdbApi& api, FDBDatabase* db, const FdbOptions& options)
      : api_(api), db_(db), fdb_options_(options) {
    options_.run_attempts_max = options.run_attempts_max;
    options_.transaction_size_limit =
        static_cast<std::size_t>(options.transaction_size_limit_bytes);
  }
  // Waits for the asynchronous commits in flight (bounded by the transaction timeout), and
  // cancels the watches still waiting (their callbacks run with transaction_cancelled).
  ~FdbEngine() override {
    {
      std::unique_lock lock(commits_mu_);
      const auto limit = std::chrono::milliseconds(fdb_options_.transaction_timeout_ms > 0
                                                       ? fdb_options_.transaction_timeout_ms + 1000
                                                       : kDrainWithoutTimeoutMs);
      if (!commits_cv_.wait_for(lock, limit, [&] { return commits_in_flight_ == 0; }))
        std::fprintf(stderr, "chaise: FoundationDB commits still in flight at close\n");
    }
    WatchMap watches;
    {
      std::lock_guard lock(watch_mu_);
      watches.swap(watches_);
    }
    for (auto& [key, weak] : watches)
      if (auto w = weak.lock()) w->cancel();
    api_.database_destroy(db_);
  }

  Transaction create_transaction() override;
  std::int64_t committed_version() const override;
  StoreStats stats() const override {
    StoreStats s;
    s.commits = commits_.load(std::memory_order_relaxed);
    s.conflicts = conflicts_.load(std::memory_order_relaxed);
    return s;
  }
  const Options& options() const override { return options_; }
  Status compact_files(const std::optional<KeyRange>& range) override {
    if (range && range->begin > range->end) return Error::inverted_range;
    return {};
  }
  void set_commit_fault_hook(std::function<CommitFault()>) override {}
  StoreHealth probe(std::chrono::milliseconds within) override;

  const FdbApi& api() const { return api_; }
  const std::string& key_prefix() const { return fdb_options_.key_prefix; }
  FDBTransaction* new_fdb_transaction() const {
    FDBTransaction* tr = nullptr;
    // Fails only on an out-of-memory client: an invariant, like an allocation.
    [[maybe_unused]] fdb_error_t e = api_.database_create_transaction(db_, &tr);
    assert(e == 0 && tr);
    return tr;
  }
  Error map(fdb_error_t code) const { return map_error(api_, code); }
  void note_commit(std::int64_t version) {
    commits_.fetch_add(1, std::memory_order_relaxed);
    std::int64_t seen = last_commit_version_.load(std::memory_order_relaxed);
    while (version > seen && !last_commit_version_.compare_exchange_weak(seen, version)) {
    }
  }
  void note_conflict() { conflicts_.fetch_add(1, std::memory_order_relaxed); }
  void note_generation(std::uint64_t generation) {
    std::uint64_t seen = last_generation_.load(std::memory_order_relaxed);
    while (generation > seen && !last_generation_.compare_exchange_weak(seen, generation)) {
    }
  }
  std::uint64_t last_generation() const { return last_generation_.load(std::memory_order_relaxed); }
  std::int64_t last_commit_version() const {
    return last_commit_version_.load(std::memory_order_relaxed);
  }
  std::uint64_t instance_id() const { return instance_id_; }
  // An asynchronous commit starts, or has run its callback (the last the commit does here).
  void begin_async_commit() {
    std::lock_guard lock(commits_mu_);
    ++commits_in_flight_;
  }
  void end_async_commit() {
    std::lock_guard lock(commits_mu_);
    if (--commits_in_flight_ == 0) commits_cv_.notify_all();
  }
  // Remembers a watch, to cancel it if it is still waiting when the handle goes, and to fire it
  // when this process changes its key (wake_watches).
  void track(const std::shared_ptr<FdbWatch>& w) {
    std::lock_guard lock(watch_mu_);
    if (watches_.size() >= watch_sweep_at_) {
      std::erase_if(watches_, [](const auto& x) { return x.second.expired(); });
      watch_sweep_at_ = std::max<std::size_t>(1024, 2 * watches_.size());
    }
    watches_.emplace(w->key(), w);
    watching_.store(true, std::memory_order_relaxed);
  }
  // Whether any watch was made here (transactions then note the keys they add to).
  bool watching() const { return watching_.load(std::memory_order_relaxed); }
  // A transaction of this process committed an atomic op on each of `keys` (in the cluster's
  // keyspace) at `version`: the watches on them fire now, with it, without waiting for the storage server to report
  // the change, so a feed on the server that wrote wakes at once. FoundationDB's own report
  // follows and finds the watch fired. A watch armed after the commit's read version may wake
  // for nothing: its waiters read again and wait again.
  void wake_watches(const std::vector<std::string>& keys, std::int64_t version) {
    if (keys.empty()) return;
    std::vector<std::shared_ptr<FdbWatch>> due;
    {
      std::lock_guard lock(watch_mu_);
      for (const std::string& key : keys) {
        auto [b, e] = watches_.equal_range(key);
        for (auto it = b; it != e; ++it)
          if (auto w = it->second.lock()) due.push_back(std::move(w));
      }
    }
    for (auto& w : due) w->fire(Error::success, version);
  }
  // Reads the cluster's instance id, storing a new random one on a new cluster.
  Status load_instance_id();

 private:
  const FdbApi& api_;
  FDBDatabase* db_;
  FdbOptions fdb_options_;
  Options options_;
  std::uint64_t instance_id_ = 0;
  std::atomic<std::uint64_t> commits_{0};
  std::atomic<std::uint64_t> conflicts_{0};
  std::atomic<std::uint64_t> last_generation_{0};
  std::atomic<std::int64_t> last_commit_version_{0};
  // How long the destructor waits for asynchronous commits when transactions have no timeout.
  static constexpr std::int64_t kDrainWithoutTimeoutMs = 60'000;
  std::mutex commits_mu_;  // guards commits_in_flight_
  std::condition_variable commits_cv_;
  int commits_in_flight_ = 0;
  using WatchMap = std::unordered_multimap<std::string, std::weak_ptr<FdbWatch>>;
  std::mutex watch_mu_;                // guards watches_ and watch_sweep_at_
  WatchMap watches_;                   // by key
  std::size_t watch_sweep_at_ = 1024;  // drop the gone ones when the map reaches this
  std::atomic<bool> watching_{false};
};

// The FDBTransaction, shared with a commit in flight (commit_async) so that it outlives its
// Transaction when that is dropped before the commit completes.
using TrHandle = std::shared_ptr<FDBTransaction>;

class FdbTransaction final : public TransactionBackend {
 public:
  explicit FdbTransaction(FdbEngine* engine)
      : engine_(engine),
        api_(engine->api()),
        prefix_(engine->key_prefix()),
        tr_(engine->new_fdb_transaction(),
            [api = &engine->api()](FDBTransaction* t) { api->transaction_destroy(t); }) {}

  Result<std::optional<std::string>> get(std::string_view key, Snapshot snapshot) override;
  void prefetch(std::string_view key, Snapshot snapshot) override;
  Result<std::vector<KeyValue>> get_range(std::string_view begin, std::string_view end, int limit,
                                          Reverse reverse, Snapshot snapshot) override;
  Result<std::string> get_key(const KeySelector& selector, Snapshot snapshot) override;
  Result<std::vector<std::vector<KeyValue>>> get_ranges(const std::vector<KeyRange>& ranges,
                                                        int limit_each, Snapshot snapshot) override;
  Result<std::int64_t> get_estimated_range_size_bytes(std::string_view begin,
                                                      std::string_view end) override;
  void disable_read_cache() override {
    if (fdb_error_t e = api_.transaction_set_option(
            tr_.get(), fdb::kTrOptionReadServerSideCacheDisable, nullptr, 0);
        e != 0)
      defer(e);
  }
  void set_timeout(std::chrono::milliseconds within) override {
    const std::int64_t ms = std::max<std::int64_t>(1, within.count());
    if (fdb_error_t e =
            api_.transaction_set_option(tr_.get(), fdb::kTrOptionTimeout,
                                        reinterpret_cast<const std::uint8_t*>(&ms), sizeof ms);
        e != 0)
      defer(e);
  }
  void set_read_version(std::int64_t version) override {
    api_.transaction_set_read_version(tr_.get(), version);
    read_version_known_ = true;
  }
  Result<std::int64_t> get_read_version() override;
  void set(std::string_view key, std::string_view value) override;
  void clear(std::string_view key) override;
  void clear_range(std::string_view begin, std::string_view end) override;
  void atomic_op(std::string_view key, MutationType type, std::string_view operand) override;
  void set_versionstamped_key(std::string_view key_template, std::string_view value) override;
  void set_versionstamped_value(std::string_view key, std::string_view value_template) override;
  void add_read_conflict_range(std::string_view begin, std::string_view end) override {
    // The range conflicts with commits after the read version as of now (as the embedded
    // engine's): without one yet, FoundationDB would take it at commit, and miss them.
    if (!committing_ && !read_version_known_) {
      if (auto v = get_read_version(); !v.ok()) return defer(v.error());
    }
    add_conflict_range(begin, end, fdb::kConflictRangeRead);
  }
  void add_write_conflict_range(std::string_view begin, std::string_view end) override {
    if (add_conflict_range(begin, end, fdb::kConflictRangeWrite)) writes_ = true;
  }
  std::shared_ptr<Watch> watch(std::string_view key, WatchCallback callback) override;
  Result<CommitResult> commit() override;
  void commit_async(std::function<void(Result<CommitResult>)> done) override;
  Result<std::chrono::microseconds> prepare_retry(Error e) override;
  Status on_error(Error e) override {
    auto r = prepare_retry(e);
    if (!r.ok()) return r.error();
    return {};
  }
  void reset() override {
    api_.transaction_reset(tr_.get());  // its watches end with transaction_cancelled
    clear_state();
  }
  bool read_only() const override { return !writes_; }
  bool may_commit_unknown_result() const override { return true; }
  void touch_metadata() override { touches_metadata_ = true; }
  bool touches_metadata() const override { return touches_metadata_; }
  std::uint64_t metadata_generation() const override { return engine_->last_generation(); }
  std::optional<std::uint64_t> snapshot_metadata_generation() override;
  std::uint64_t instance_id() const override { return engine_->instance_id(); }
  std::size_t approximate_size() const override { return size_bytes_; }
  std::size_t size_limit() const override { return engine_->options().transaction_size_limit; }

  // What a transaction's size counts toward FoundationDB's 10,000,000-byte limit, as the client
  // counts it: each mutation's key and value, and each read and write conflict range's two keys,
  // all with the key prefix. A write of `key` also adds its write conflict range [key, key\0).
  void count_write(std::size_t key, std::size_t payload) {
    size_bytes_ += 3 * (prefix_.size() + key) + 1 + payload;
  }
  // A range [begin, end) counted `times` (a clear: its mutation and its conflict range).
  void count_range(std::size_t begin, std::size_t end, int times) {
    size_bytes_ += static_cast<std::size_t>(times) * (2 * prefix_.size() + begin + end);
  }

 private:
  struct CommitOp;
  static void on_commit_ready(FDBFuture* f, void* param);
  static void on_versionstamp_ready(FDBFuture* f, void* param);

  void clear_state() {
    prefetched_.clear();
    watches_.clear();
    added_keys_.clear();
    pending_adds_.clear();
    size_bytes_ = 0;
    deferred_ = Error::success;
    committing_ = false;
    writes_ = false;
    touches_metadata_ = false;
    read_version_known_ = false;
    generation_.reset();
  }
  // Adds of one width to one key fold into one add of their sum (apply_atomic, as the embedded
  // engine's WriteMap folds them), handed to FoundationDB when the transaction next reads or
  // writes that key, or commits: its client passes every call through its one network thread,
  // and a _bulk_docs round adds to the same few counters once per document (3 of a document's 7
  // client calls). (x + a) + b == x + (a + b) modulo 2^(8 * width): the same value, the same write
  // conflict and, read back, the same read-your-writes. Keys as the cluster names them.
  void flush_add(std::string_view key) {
    if (pending_adds_.empty()) return;
    if (auto it = pending_adds_.find(key); it != pending_adds_.end()) {
      issue_add(it->first, it->second);
      pending_adds_.erase(it);
    }
  }
  void flush_adds(std::string_view begin, std::string_view end) {
    if (pending_adds_.empty()) return;
    auto it = pending_adds_.lower_bound(begin);
    while (it != pending_adds_.end() && it->first < end) {
      issue_add(it->first, it->second);
      it = pending_adds_.erase(it);
    }
  }
  void flush_adds() {
    for (const auto& [key, sum] : pending_adds_) issue_add(key, sum);
    pending_adds_.clear();
  }
  // A write to `key` (as the cluster names it) or to [begin, end): a read of it started before
  // (prefetch) no longer answers for the transaction.
  void drop_prefetched(std::string_view key) {
    if (prefetched_.empty()) return;
    if (auto it = prefetched_.find(key); it != prefetched_.end()) prefetched_.erase(it);
  }
  void drop_prefetched(std::string_view begin, std::string_view end) {
    if (prefetched_.empty()) return;
    prefetched_.erase(prefetched_.lower_bound(begin), prefetched_.lower_bound(end));
  }
  void issue_add(std::string_view key, std::string_view operand) {
    api_.transaction_atomic_op(tr_.get(), bytes(key), length(key), bytes(operand), length(operand),
                               fdb::kMutationAdd);
  }

  // The mapped error, remembering FoundationDB's code for on_error.
  Error fail(fdb_error_t code) {
    last_code_ = code;
    return engine_->map(code);
  }
  void defer(Error e) {
    if (deferred_ == Error::success) deferred_ = e;
  }
  void defer(fdb_error_t code) { defer(fail(code)); }
  Status check_usable() const {
    if (committing_) return Error::used_during_commit;
    return {};
  }
  // As the embedded engine checks a written key (so both answer alike, before FoundationDB would).
  bool check_key(std::string_view key) {
    Error e = committing_ ? Error::used_during_commit : check_written_key(key);
    if (e == Error::success) return true;
    defer(e);
    return false;
  }
  // `key` in the cluster's keyspace: under the prefix, built in `buf` when there is one.
  std::string_view in(std::string_view key, std::string& buf) const {
    if (prefix_.empty()) return key;
    buf.assign(prefix_).append(key);
    return buf;
  }
  // A key the cluster returned, in this handle's keyspace: "" below the prefix, "\xff" above.
  std::string user_key(const std::uint8_t* p, int n) const {
    const std::string_view k(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
    if (prefix_.empty()) return std::string(k);
    if (k.starts_with(prefix_)) return std::string(k.substr(prefix_.size()));
    return k < prefix_ ? std::string() : kKeyspaceEnd;
  }
  bool add_conflict_range(std::string_view begin, std::string_view end, int type);
  Result<std::optional<std::string>> read_value(std::string_view key, Snapshot snapshot);
  Future start_read(std::string_view key, Snapshot snapshot);
  // Reads [begin, end) to the end or `limit` keys (0: all), batch after batch, into `out`; `first`
  // is the first batch's future when already asked for.
  Status read_range(std::string_view begin, std::string_view end, int limit, Reverse reverse,
                    Snapshot snapshot, std::vector<KeyValue>& out, FDBFuture* first = nullptr);
  FDBFuture* range_future(std::string_view begin, bool begin_or_equal, int begin_offset,
                          std::string_view end, int limit, Reverse reverse, Snapshot snapshot) {
    read_version_known_ = true;
    std::string bb, eb;
    begin = in(begin, bb);
    end = in(end, eb);
    return api_.transaction_get_range(tr_.get(), bytes(begin), length(begin), begin_or_equal,
                                      begin_offset, bytes(end), length(end), 0, 1, limit, 0,
                                      fdb::kStreamingModeWantAll, 1, snapshot == Snapshot::yes,
                                      reverse == Reverse::yes);
  }
  // The commit's first steps, shared by commit() and commit_async(): nullopt when the commit is
  // to go to FoundationDB, else the outcome known without it.
  std::optional<Result<CommitResult>> begin_commit();
  // A read-only commit's result: its read version if it has one, else the newest version this
  // handle has committed.
  CommitResult read_only_result();

  FdbEngine* engine_;
  const FdbApi& api_;
  const std::string& prefix_;  // FdbOptions::key_prefix
  TrHandle tr_;
  // Watches made here, until the commit: failed with its error if it fails before FoundationDB
  // (a deferred error), which would otherwise leave them to the transaction's reset.
  std::vector<std::shared_ptr<FdbWatch>> watches_;
  // The distinct keys this transaction adds to atomically (at most kAddedKeysMax, while the
  // engine has watches): the feeds' counters, whose watches the commit fires (wake_watches).
  static constexpr std::size_t kAddedKeysMax = 64;
  std::vector<std::string> added_keys_;
  // Folded adds not yet handed to FoundationDB (flush_add): key -> the sum, an operand of the
  // adds' width.
  std::map<std::string, std::string, std::less<>> pending_adds_;
  // Reads started by prefetch() and not yet taken by get(): key as the cluster names it -> the
  // read and its snapshot mode.
  std::map<std::string, std::pair<Future, Snapshot>, std::less<>> prefetched_;
  std::size_t size_bytes_ = 0;
  Error deferred_ = Error::success;
  fdb_error_t last_code_ = 0;
  bool committing_ = false;
  bool writes_ = false;
  bool touches_metadata_ = false;
  bool read_version_known_ = false;
  std::optional<std::uint64_t> generation_;  // snapshot_metadata_generation's, once read
};

Transaction FdbEngine::create_transaction() {
  return Transaction(std::make_unique<FdbTransaction>(this));
}

std::int64_t FdbEngine::committed_version() const {
  FDBTransaction* tr = new_fdb_transaction();
  Future f(api_, api_.transaction_get_read_version(tr));
  std::int64_t version = 0;
  if (f.wait() != 0 || api_.future_get_int64(f.get(), &version) != 0) version = 0;
  api_.transaction_destroy(tr);
  return std::max(version, last_commit_version());
}

StoreHealth FdbEngine::probe(std::chrono::milliseconds within) {
  StoreHealth h{"foundationdb", false, 0, {}};
  const auto start = std::chrono::steady_clock::now();
  FDBTransaction* tr = new_fdb_transaction();
  const std::int64_t timeout_ms = std::max<std::int64_t>(1, within.count());
  fdb_error_t e = api_.transaction_set_option(tr, fdb::kTrOptionTimeout,
                                              reinterpret_cast<const std::uint8_t*>(&timeout_ms),
                                              sizeof timeout_ms);
  if (e == 0) {
    Future f(api_, api_.transaction_get_read_version(tr));
    e = f.wait();
  }
  api_.transaction_destroy(tr);
  h.latency_us = std::chrono::duration_cast<std::chrono::microseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count();
  h.available = e == 0;
  if (e != 0) h.error = error_name(map(e));
  return h;
}

Result<std::optional<std::string>> FdbTransaction::get(std::string_view key, Snapshot snapshot) {
  if (auto s = check_usable(); !s) return s.error();
  if (key.size() > kKeySizeMax) return Error::key_too_large;
  std::string kb;
  return read_value(in(key, kb), snapshot);
}

void FdbTransaction::prefetch(std::string_view key, Snapshot snapshot) {
  if (committing_ || key.size() > kKeySizeMax) return;  // the get() that follows says why
  std::string kb;
  key = in(key, kb);
  if (prefetched_.contains(key)) return;
  prefetched_.emplace(std::string(key), std::pair{start_read(key, snapshot), snapshot});
}

// A read of `key` as the cluster names it, asked for.
Future FdbTransaction::start_read(std::string_view key, Snapshot snapshot) {
  read_version_known_ = true;
  flush_add(key);
  if (snapshot == Snapshot::no) size_bytes_ += 2 * key.size() + 1;  // its read conflict range
  return Future(
      api_, api_.transaction_get(tr_.get(), bytes(key), length(key), snapshot == Snapshot::yes));
}

// A read of `key` as the cluster names it: the one prefetch() started, or a new one.
Result<std::optional<std::string>> FdbTransaction::read_value(std::string_view key,
                                                              Snapshot snapshot) {
  std::optional<Future> early;
  if (!prefetched_.empty()) {
    if (auto it = prefetched_.find(key); it != prefetched_.end()) {
      if (it->second.second == snapshot) early.emplace(std::move(it->second.first));
      prefetched_.erase(it);
    }
  }
  Future f = early ? std::move(*early) : start_read(key, snapshot);
  if (fdb_error_t e = f.wait(); e != 0) return fail(e);
  fdb::fdb_bool_t present = 0;
  const std::uint8_t* value = nullptr;
  int n = 0;
  if (fdb_error_t e = api_.future_get_value(f.get(), &present, &value, &n); e != 0) return fail(e);
  if (!present) return std::optional<std::string>();
  return std::optional<std::string>(to_string(value, n));
}

Status FdbTransaction::read_range(std::string_view begin, std::string_view end, int limit,
                                  Reverse reverse, Snapshot snapshot, std::vector<KeyValue>& out,
                                  FDBFuture* first) {
  // The range still to read: [lo, hi) as key selectors. Forward, lo moves past each batch's last
  // key (first_greater_than); reverse, hi moves down to it (first_greater_or_equal).
  std::string lo(begin), hi(end);
  if (snapshot == Snapshot::no) count_range(begin.size(), end.size(), 1);  // its conflict range
  if (!pending_adds_.empty()) {
    std::string bb, eb;
    flush_adds(in(begin, bb), in(end, eb));
  }
  bool lo_or_equal = false;  // first_greater_or_equal(lo), then first_greater_than(last)
  const std::size_t n_max = limit > 0 ? static_cast<std::size_t>(limit) : SIZE_MAX;
  for (int round = 0; round < kRangeRoundTripsMax; ++round) {
    const int remaining = limit > 0 ? static_cast<int>(n_max - out.size()) : 0;
    Future f(api_, round == 0 && first
                       ? first
                       : range_future(lo, lo_or_equal, 1, hi, remaining, reverse, snapshot));
    if (fdb_error_t e = f.wait(); e != 0) return fail(e);
    const FDBKeyValue* kvs = nullptr;
    int count = 0;
    fdb::fdb_bool_t more = 0;
    if (fdb_error_t e = api_.future_get_keyvalue_array(f.get(), &kvs, &count, &more); e != 0)
      return fail(e);
    for (int i = 0; i < count && out.size() < n_max; ++i) {
      // Copied out: the client library's array need not be aligned even to the struct's 4 bytes.
      FDBKeyValue kv;
      std::memcpy(&kv, reinterpret_cast<const unsigned char*>(kvs) + i * sizeof kv, sizeof kv);
      out.push_back({user_key(kv.key, kv.key_length), to_string(kv.value, kv.value_length)});
    }
    if (!more || out.size() >= n_max || count == 0) return {};
    if (reverse == Reverse::no) {
      lo = out.back().key;
      lo_or_equal = true;
    } else {
      hi = out.back().key;
    }
  }
  return Error::transaction_too_old;  // kRangeRoundTripsMax: see there
}

Result<std::vector<KeyValue>> FdbTransaction::get_range(std::string_view begin,
                                                        std::string_view end, int limit,
                                                        Reverse reverse, Snapshot snapshot) {
  if (auto s = check_usable(); !s) return s.error();
  if (begin > end) return Error::inverted_range;
  if (limit < 0) return Error::invalid_option_value;
  std::vector<KeyValue> out;
  if (begin == end) return out;
  if (auto s = read_range(begin, end, limit, reverse, snapshot, out); !s) return s.error();
  return out;
}

Result<std::vector<std::vector<KeyValue>>> FdbTransaction::get_ranges(
    const std::vector<KeyRange>& ranges, int limit_each, Snapshot snapshot) {
  if (auto s = check_usable(); !s) return s.error();
  if (limit_each < 0) return Error::invalid_option_value;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].begin > ranges[i].end) return Error::inverted_range;
    if (i > 0 && ranges[i].begin < ranges[i - 1].end) return Error::invalid_option_value;
  }
  // Every range's first batch is asked for at once: one round trip for them all.
  if (!pending_adds_.empty()) {
    for (const KeyRange& r : ranges) {
      std::string bb, eb;
      flush_adds(in(r.begin, bb), in(r.end, eb));
    }
  }
  std::vector<FDBFuture*> firsts(ranges.size(), nullptr);
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].begin == ranges[i].end) continue;
    firsts[i] =
        range_future(ranges[i].begin, false, 1, ranges[i].end, limit_each, Reverse::no, snapshot);
  }
  std::vector<std::vector<KeyValue>> out(ranges.size());
  Status status;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (!firsts[i]) continue;
    FDBFuture* first = std::exchange(firsts[i], nullptr);
    if (!status.ok()) {
      api_.future_destroy(first);  // after an error: the rest are not waited for
      continue;
    }
    status = read_range(ranges[i].begin, ranges[i].end, limit_each, Reverse::no, snapshot, out[i],
                        first);
  }
  if (!status.ok()) return status.error();
  return out;
}

Result<std::string> FdbTransaction::get_key(const KeySelector& sel, Snapshot snapshot) {
  if (auto s = check_usable(); !s) return s.error();
  read_version_known_ = true;
  flush_adds();  // a selector may resolve to any key
  std::string kb;
  const std::string_view k = in(sel.key, kb);
  Future f(api_, api_.transaction_get_key(tr_.get(), bytes(k), length(k), sel.or_equal, sel.offset,
                                          snapshot == Snapshot::yes));
  if (fdb_error_t e = f.wait(); e != 0) return fail(e);
  const std::uint8_t* key = nullptr;
  int n = 0;
  if (fdb_error_t e = api_.future_get_key(f.get(), &key, &n); e != 0) return fail(e);
  std::string result = user_key(key, n);
  // FoundationDB answers keys past the user keyspace as its end.
  if (result > kKeyspaceEnd) result = kKeyspaceEnd;
  return result;
}

Result<std::int64_t> FdbTransaction::get_estimated_range_size_bytes(std::string_view begin,
                                                                    std::string_view end) {
  if (auto s = check_usable(); !s) return s.error();
  if (begin > end) return Error::inverted_range;
  if (begin == end) return std::int64_t{0};
  std::string bb, eb;
  begin = in(begin, bb);
  end = in(end, eb);
  Future f(api_, api_.transaction_get_estimated_range_size_bytes(
                     tr_.get(), bytes(begin), length(begin), bytes(end), length(end)));
  if (fdb_error_t e = f.wait(); e != 0) return fail(e);
  std::int64_t size = 0;
  if (fdb_error_t e = api_.future_get_int64(f.get(), &size); e != 0) return fail(e);
  return size;
}

Result<std::int64_t> FdbTransaction::get_read_version() {
  if (auto s = check_usable(); !s) return s.error();
  read_version_known_ = true;
  Future f(api_, api_.transaction_get_read_version(tr_.get()));
  if (fdb_error_t e = f.wait(); e != 0) return fail(e);
  std::int64_t version = 0;
  if (fdb_error_t e = api_.future_get_int64(f.get(), &version); e != 0) return fail(e);
  return version;
}

void FdbTransaction::set(std::string_view key, std::string_view value) {
  if (!check_key(key)) return;
  if (Error e = check_written_value(value); e != Error::success) return defer(e);
  count_write(key.size(), value.size());
  writes_ = true;
  std::string kb;
  key = in(key, kb);
  flush_add(key);
  drop_prefetched(key);
  api_.transaction_set(tr_.get(), bytes(key), length(key), bytes(value), length(value));
}

void FdbTransaction::clear(std::string_view key) {
  if (!check_key(key)) return;
  count_write(key.size(), prefix_.size() + key.size() + 1);  // a clear of [key, key\0)
  writes_ = true;
  std::string kb;
  key = in(key, kb);
  flush_add(key);
  drop_prefetched(key);
  api_.transaction_clear(tr_.get(), bytes(key), length(key));
}

void FdbTransaction::clear_range(std::string_view begin, std::string_view end) {
  if (committing_) return defer(Error::used_during_commit);
  if (Error e = check_cleared_range(begin, end); e != Error::success) return defer(e);
  count_range(begin.size(), end.size(), 2);  // the mutation and its write conflict range
  writes_ = true;
  std::string bb, eb;
  begin = in(begin, bb);
  end = in(end, eb);
  flush_adds(begin, end);
  drop_prefetched(begin, end);
  api_.transaction_clear_range(tr_.get(), bytes(begin), length(begin), bytes(end), length(end));
}

void FdbTransaction::atomic_op(std::string_view key, MutationType type, std::string_view operand) {
  if (!check_key(key)) return;
  if (Error e = check_written_value(operand); e != Error::success) return defer(e);
  int op = fdb::kMutationAdd;
  switch (type) {
    case MutationType::add:
      op = fdb::kMutationAdd;
      break;
    case MutationType::max:
      op = fdb::kMutationMax;
      break;
    case MutationType::min:
      op = fdb::kMutationMin;
      break;
  }
  count_write(key.size(), operand.size());
  writes_ = true;
  std::string kb;
  key = in(key, kb);
  drop_prefetched(key);
  if (engine_->watching() && added_keys_.size() < kAddedKeysMax &&
      std::find(added_keys_.begin(), added_keys_.end(), key) == added_keys_.end())
    added_keys_.emplace_back(key);
  if (type == MutationType::add) {
    auto it = pending_adds_.find(key);
    if (it != pending_adds_.end() && it->second.size() == operand.size()) {
      it->second = apply_atomic(it->second, AtomicOp{MutationType::add, std::string(operand)});
      return;
    }
    flush_add(key);  // another width: its sum goes first
    pending_adds_.emplace(std::string(key), std::string(operand));
    return;
  }
  flush_add(key);
  api_.transaction_atomic_op(tr_.get(), bytes(key), length(key), bytes(operand), length(operand),
                             op);
}

void FdbTransaction::set_versionstamped_key(std::string_view key_template, std::string_view value) {
  if (committing_) return defer(Error::used_during_commit);
  if (!versionstamp_template_ok(key_template)) return defer(Error::invalid_option_value);
  if (!check_key(key_template.substr(0, key_template.size() - 4))) return;
  if (Error e = check_written_value(value); e != Error::success) return defer(e);
  count_write(key_template.size(), value.size());
  writes_ = true;
  prefetched_.clear();  // the key it writes is known at commit only
  std::string tb;
  if (!prefix_.empty()) {
    // The placeholder moves by the prefix: the offset suffix is rewritten.
    std::uint32_t off = 0;
    for (int i = 3; i >= 0; --i)
      off = (off << 8) | static_cast<std::uint8_t>(key_template[key_template.size() - 4 + i]);
    off += static_cast<std::uint32_t>(prefix_.size());
    tb.assign(prefix_).append(key_template.substr(0, key_template.size() - 4));
    for (int i = 0; i < 4; ++i) tb.push_back(static_cast<char>((off >> (8 * i)) & 0xff));
    key_template = tb;
  }
  api_.transaction_atomic_op(tr_.get(), bytes(key_template), length(key_template), bytes(value),
                             length(value), fdb::kMutationSetVersionstampedKey);
}

void FdbTransaction::set_versionstamped_value(std::string_view key,
                                              std::string_view value_template) {
  if (!check_key(key)) return;
  if (Error e = check_value_template(value_template); e != Error::success) return defer(e);
  count_write(key.size(), value_template.size());
  writes_ = true;
  std::string kb;
  key = in(key, kb);
  flush_add(key);
  drop_prefetched(key);
  api_.transaction_atomic_op(tr_.get(), bytes(key), length(key), bytes(value_template),
                             length(value_template), fdb::kMutationSetVersionstampedValue);
}

bool FdbTransaction::add_conflict_range(std::string_view begin, std::string_view end, int type) {
  if (committing_) {
    defer(Error::used_during_commit);
    return false;
  }
  if (begin > end) {
    defer(Error::inverted_range);
    return false;
  }
  if (begin == end) return false;
  count_range(begin.size(), end.size(), 1);
  std::string bb, eb;
  begin = in(begin, bb);
  end = in(end, eb);
  if (fdb_error_t e = api_.transaction_add_conflict_range(tr_.get(), bytes(begin), length(begin),
                                                          bytes(end), length(end), type);
      e != 0) {
    defer(e);
    return false;
  }
  return true;
}

std::shared_ptr<Watch> FdbTransaction::watch(std::string_view key, WatchCallback callback) {
  auto w = std::make_shared<FdbWatch>(api_, std::move(callback));
  if (committing_) {
    w->fire(Error::used_during_commit, 0);
    return w;
  }
  std::string kb;
  key = in(key, kb);
  flush_add(key);
  w->set_key(key);
  FdbWatch::arm(w, api_.transaction_watch(tr_.get(), bytes(key), length(key)));
  engine_->track(w);
  watches_.push_back(w);
  return w;
}

std::optional<std::uint64_t> FdbTransaction::snapshot_metadata_generation() {
  if (touches_metadata_ || committing_) return std::nullopt;
  if (generation_) return *generation_;
  // Readable in every transaction, with no read conflict as a snapshot read; unreadable (1036) in
  // one that has set it.
  auto v = read_value(kMetadataVersionKey, Snapshot::yes);
  if (!v.ok()) return std::nullopt;  // not remembered: the next call reads again
  std::uint64_t generation = 0;
  if (*v) {
    if ((*v)->size() < 8) return std::nullopt;
    generation = 2 * decode_be64(**v);
  }
  engine_->note_generation(generation);
  generation_ = generation;
  return generation;
}

std::optional<Result<CommitResult>> FdbTransaction::begin_commit() {
  if (committing_) return Result<CommitResult>(Error::used_during_commit);
  flush_adds();
  prefetched_.clear();  // no get() can take them now
  committing_ = true;
  if (deferred_ != Error::success) {
    for (auto& w : watches_) w->fire(deferred_, 0);
    watches_.clear();
    return Result<CommitResult>(deferred_);
  }
  watches_.clear();  // FoundationDB ends them from here on
  if (touches_metadata_ && writes_) {
    api_.transaction_atomic_op(tr_.get(), bytes(kMetadataVersionKey), length(kMetadataVersionKey),
                               bytes(kMetadataVersionValue), length(kMetadataVersionValue),
                               fdb::kMutationSetVersionstampedValue);
  }
  return std::nullopt;
}

CommitResult FdbTransaction::read_only_result() {
  std::int64_t version = engine_->last_commit_version();
  if (read_version_known_) {
    Future f(api_, api_.transaction_get_read_version(tr_.get()));
    std::int64_t v = 0;
    if (f.wait() == 0 && api_.future_get_int64(f.get(), &v) == 0) version = v;
  }
  return CommitResult{version, {}};
}

Result<CommitResult> FdbTransaction::commit() {
  if (auto known = begin_commit()) return std::move(*known);
  const bool read_only = !writes_;
  CommitResult result = read_only ? read_only_result() : CommitResult{};
  Future stamp(api_, read_only ? nullptr : api_.transaction_get_versionstamp(tr_.get()));
  Future f(api_, api_.transaction_commit(tr_.get()));
  if (fdb_error_t e = f.wait(); e != 0) {
    if (e == 1020) engine_->note_conflict();
    return fail(e);
  }
  if (read_only) return result;
  if (fdb_error_t e = api_.transaction_get_committed_version(tr_.get(), &result.version); e != 0)
    return fail(e);
  engine_->note_commit(result.version);
  engine_->wake_watches(added_keys_, result.version);
  if (stamp.wait() == 0) {
    const std::uint8_t* key = nullptr;
    int n = 0;
    if (api_.future_get_key(stamp.get(), &key, &n) == 0) result.versionstamp = to_string(key, n);
  }
  return result;
}

// A commit in flight (commit_async): owns its futures, and the FDBTransaction through tr.
struct FdbTransaction::CommitOp {
  FdbEngine* engine;
  TrHandle tr;
  FDBFuture* commit = nullptr;
  FDBFuture* stamp = nullptr;
  CommitResult result;
  std::function<void(Result<CommitResult>)> done;
  std::vector<std::string> added_keys;  // FdbTransaction::added_keys_

  void finish(Result<CommitResult> r) {
    const FdbApi& api = engine->api();
    if (commit) api.future_destroy(commit);
    if (stamp) api.future_destroy(stamp);
    FdbEngine* e = engine;
    auto d = std::move(done);
    delete this;
    d(std::move(r));
    e->end_async_commit();
  }
  void finish_with_stamp() {
    const std::uint8_t* key = nullptr;
    int n = 0;
    const FdbApi& api = engine->api();
    if (api.future_get_error(stamp) == 0 && api.future_get_key(stamp, &key, &n) == 0)
      result.versionstamp = to_string(key, n);
    finish(std::move(result));
  }
};

void FdbTransaction::on_commit_ready(FDBFuture* f, void* param) {
  taken_over(param);
  auto* op = static_cast<CommitOp*>(param);
  const FdbApi& api = op->engine->api();
  if (fdb_error_t e = api.future_get_error(f); e != 0) {
    if (e == 1020) op->engine->note_conflict();
    return op->finish(op->engine->map(e));
  }
  if (fdb_error_t e = api.transaction_get_committed_version(op->tr.get(), &op->result.version);
      e != 0)
    return op->finish(op->engine->map(e));
  op->engine->note_commit(op->result.version);
  op->engine->wake_watches(op->added_keys, op->result.version);
  // FoundationDB sets the versionstamp with the commit; should it come later, its own callback
  // finishes.
  if (api.future_is_ready(op->stamp)) return op->finish_with_stamp();
  handed_over(op);
  if (fdb_error_t e = api.future_set_callback(op->stamp, &on_versionstamp_ready, op); e != 0)
    op->finish(std::move(op->result));
}

void FdbTransaction::on_versionstamp_ready(FDBFuture*, void* param) {
  taken_over(param);
  static_cast<CommitOp*>(param)->finish_with_stamp();
}

void FdbTransaction::commit_async(std::function<void(Result<CommitResult>)> done) {
  if (auto known = begin_commit()) return done(std::move(*known));
  if (!writes_) {
    // FoundationDB commits a read-only transaction at once; its watches start now.
    CommitResult result = read_only_result();
    Future f(api_, api_.transaction_commit(tr_.get()));
    if (fdb_error_t e = f.wait(); e != 0) return done(fail(e));
    return done(result);
  }
  engine_->begin_async_commit();
  auto* op =
      new CommitOp{engine_, tr_, nullptr, nullptr, {}, std::move(done), std::move(added_keys_)};
  op->stamp = api_.transaction_get_versionstamp(tr_.get());
  op->commit = api_.transaction_commit(tr_.get());
  handed_over(op);
  if (fdb_error_t e = api_.future_set_callback(op->commit, &on_commit_ready, op); e != 0)
    op->finish(fail(e));
}

Result<std::chrono::microseconds> FdbTransaction::prepare_retry(Error e) {
  if (!is_retryable(e)) return e;
  // FoundationDB's own code when `e` is what it reported, so that its backoff and retry limit
  // see the real error.
  const fdb_error_t code =
      last_code_ != 0 && engine_->map(last_code_) == e ? last_code_ : static_cast<fdb_error_t>(e);
  Future f(api_, api_.transaction_on_error(tr_.get(), code));
  const fdb_error_t r = f.wait();
  clear_state();
  last_code_ = 0;
  if (r != 0) return fail(r);
  return std::chrono::microseconds(0);
}

Status FdbEngine::load_instance_id() {
  // Through FoundationDB directly: the key is the cluster's name for it, which may lie outside
  // the handle's keyspace (FdbOptions::instance_id_key).
  std::string key = fdb_options_.instance_id_key;
  if (key.empty()) {
    key = fdb_options_.key_prefix.empty() ? std::string(kInstanceIdTuple)
                                          : fdb_options_.key_prefix + "\xff/instance_id";
  }
  TrHandle tr(new_fdb_transaction(),
              [api = &api_](FDBTransaction* t) { api->transaction_destroy(t); });
  std::random_device rd;
  for (int attempt = 0; attempt < options_.run_attempts_max; ++attempt) {
    Future get(api_, api_.transaction_get(tr.get(), bytes(key), length(key), false));
    fdb_error_t e = get.wait();
    if (e == 0) {
      fdb::fdb_bool_t present = 0;
      const std::uint8_t* value = nullptr;
      int n = 0;
      e = api_.future_get_value(get.get(), &present, &value, &n);
      if (e == 0 && present && n == 8) {
        instance_id_ = decode_be64(to_string(value, n));
        return {};
      }
    }
    if (e == 0) {
      // A new store (or a damaged id): a random non-zero id. Two first opens conflict, and the
      // loser reads the winner's.
      std::uint64_t id = 0;
      for (int i = 0; i < 8 && id == 0; ++i) id = (std::uint64_t{rd()} << 32) | rd();
      std::string value(8, '\0');
      for (int i = 7; i >= 0; --i, id >>= 8) value[i] = static_cast<char>(id & 0xff);
      api_.transaction_set(tr.get(), bytes(key), length(key), bytes(value), length(value));
      Future commit(api_, api_.transaction_commit(tr.get()));
      e = commit.wait();
      if (e == 0) {
        instance_id_ = decode_be64(value);
        return {};
      }
    }
    Future retry(api_, api_.transaction_on_error(tr.get(), e));
    if (fdb_error_t r = retry.wait(); r != 0) return map(r);
  }
  return Error::io_error;
}

Status set_int_option(const FdbApi& api, FDBDatabase* db, int option, std::int64_t value) {
  std::uint8_t le[8];
  auto u = static_cast<std::uint64_t>(value);
  for (int i = 0; i < 8; ++i, u >>= 8) le[i] = static_cast<std::uint8_t>(u & 0xff);
  if (fdb_error_t e = api.database_set_option(db, option, le, 8); e != 0) return map_error(api, e);
  return {};
}

}  // namespace

Result<std::unique_ptr<Database>> open_foundationdb(const FdbOptions& options, std::string* why) {
  auto bad = [&](const char* what) {
    if (why) *why = what;
    return Error::invalid_option_value;
  };
  if (options.transaction_timeout_ms < 0) return bad("transaction_timeout_ms must be >= 0");
  if (options.transaction_retry_limit < -1) return bad("transaction_retry_limit must be >= -1");
  if (options.transaction_max_retry_delay_ms < 0)
    return bad("transaction_max_retry_delay_ms must be >= 0");
  if (options.transaction_size_limit_bytes < 32 ||
      options.transaction_size_limit_bytes > static_cast<std::int64_t>(kTransactionSizeMax))
    return bad("transaction_size_limit_bytes must be in [32, 10000000]");
  if (options.run_attempts_max < 1) return bad("run_attempts_max must be >= 1");
  if (options.future_version_retry_delay_us < 1 ||
      options.future_version_retry_delay_us > 1'000'000)
    return bad("future_version_retry_delay_us must be in [1, 1000000]");
  if (!options.instance_id_key.empty() &&
      static_cast<std::uint8_t>(options.instance_id_key[0]) == 0xff)
    return bad("instance_id_key must be a key of the user keyspace");
  if (!options.key_prefix.empty() && static_cast<std::uint8_t>(options.key_prefix[0]) == 0xff)
    return bad("key_prefix must be in the user keyspace");

  char delay[64];
  std::snprintf(delay, sizeof delay, "future_version_retry_delay=%.6f",
                static_cast<double>(options.future_version_retry_delay_us) / 1e6);
  auto api = fdb::start_network(options.library, options.api_version, {delay}, why);
  if (!api.ok()) return api.error();
  const FdbApi& a = **api;
  FDBDatabase* db = nullptr;
  const char* cluster_file = options.cluster_file.empty() ? nullptr : options.cluster_file.c_str();
  if (fdb_error_t e = a.create_database(cluster_file, &db); e != 0) {
    if (why) *why = std::string("fdb_create_database: ") + a.get_error(e);
    return map_error(a, e);
  }
  auto engine = std::make_unique<FdbEngine>(a, db, options);
  for (auto [option, value] :
       {std::pair{fdb::kDbOptionTransactionTimeout, options.transaction_timeout_ms},
        {fdb::kDbOptionTransactionRetryLimit, options.transaction_retry_limit},
        {fdb::kDbOptionTransactionMaxRetryDelay, options.transaction_max_retry_delay_ms},
        {fdb::kDbOptionTransactionSizeLimit, options.transaction_size_limit_bytes},
        {fdb::kDbOptionMaxWatches, options.max_watches}}) {
    if (auto s = set_int_option(a, db, option, value); !s) {
      if (why) *why = "a FoundationDB database option was refused";
      return s.error();
    }
  }
  if (auto s = engine->load_instance_id(); !s) {
    if (why) *why = std::string("reading the instance id: ") + std::string(error_name(s.error()));
    return s.error();
  }
  fdb::stop_network_at_exit();
  return std::make_unique<Database>(std::move(engine));
}

}  // namespace chaise::storage
