// RocksTransaction: read-your-writes over a RocksDB snapshot, conflict-range bookkeeping, limits,
// and the hand-off of buffered writes to the commit pipeline (engine.h).
//
// Read-conflict ranges recorded per non-snapshot read:
//   get(k)                       [k, k+'\0')   unless this transaction's writes tell the value
//   get_range(b, e) unlimited    [b, e)
//   ... limited, forward         [b, last+'\0')   (only the keys actually returned were observed)
//   ... limited, reverse         [last, e)
//   get_key                      the range its internal range read covered
#include "storage/rocksdb/transaction.h"

#include <rocksdb/iterator.h>

#include <algorithm>
#include <cassert>
#include <future>
#include <random>
#include <thread>

#include "storage/rocksdb/engine.h"
#include "storage/tuple_prefix.h"
#include "storage/write_checks.h"

namespace chaise::storage {

namespace {

std::string_view to_sv(const rocksdb::Slice& s) { return {s.data(), s.size()}; }
rocksdb::Slice to_slice(std::string_view s) { return {s.data(), s.size()}; }

std::string apply_ops(std::optional<std::string_view> base, const std::vector<AtomicOp>& ops) {
  std::string v;
  bool present = base.has_value();
  if (present) v.assign(*base);
  for (const AtomicOp& op : ops) {
    v = apply_atomic(present ? std::optional<std::string_view>(v) : std::nullopt, op);
    present = true;
  }
  return v;
}

}  // namespace

bool RocksTransaction::may_commit_unknown_result() const {
  return engine_->may_report_unknown_results();
}

RocksTransaction::~RocksTransaction() {
  shelve_prefix_iterators();
  for (auto& w : watches_) w->fire(Error::transaction_cancelled);
}

void RocksTransaction::shelve_prefix_iterators() {
  // Those made without filling the cache stay out: the shelf's are taken by transactions that
  // fill it.
  for (std::size_t family = 0; family < prefix_its_.size(); ++family) {
    if (prefix_its_[family] && fill_cache_ && view_)
      view_->shared->shelve_iterator(family, std::move(prefix_its_[family]));
  }
  prefix_its_.clear();
}

void RocksTransaction::disable_read_cache() {
  shelve_prefix_iterators();
  fill_cache_ = false;
}

void RocksTransaction::defer(Error e) {
  if (deferred_ == Error::success) deferred_ = e;
}

Status RocksTransaction::check_usable() {
  if (committing_) return Error::used_during_commit;
  return {};
}

Status RocksTransaction::ensure_read_view() {
  Engine::quiet_perf_context_on_this_thread();
  if (!view_) {
    static_assert(kNoGeneration == SharedSnapshot::kNone);
    view_ = engine_->acquire_view();
    snapshot_generation_ = view_->shared->generation;
  }
  if (engine_->now_us() - view_->acquired_us > engine_->options().transaction_lifetime_us)
    return Error::transaction_too_old;
  return {};
}

std::size_t RocksTransaction::size_limit() const {
  return engine_->options().transaction_size_limit;
}

Result<std::int64_t> RocksTransaction::get_read_version() {
  if (auto s = check_usable(); !s) return s.error();
  if (auto s = ensure_read_view(); !s) return s.error();
  return view_->version;
}

bool RocksTransaction::check_key(std::string_view key) {
  Error e = committing_ ? Error::used_during_commit : check_written_key(key);
  if (e == Error::success) return true;
  defer(e);
  return false;
}

void RocksTransaction::add_conflict(std::vector<KeyRange>& ranges, std::string_view begin,
                                    std::string_view end) {
  if (begin >= end) return;
  size_bytes_ += begin.size() + end.size();
  ranges.push_back({std::string(begin), std::string(end)});
}

namespace {
// With a prefix extractor, RocksDB's iterators default to prefix mode, whose results are defined
// only inside the seek key's prefix. A range whose bounds share one bloom prefix is read in that
// mode (tables without the prefix are skipped by their filters); any other in total order.
bool within_one_prefix(std::string_view begin, std::string_view end, std::size_t prefix_elements) {
  if (prefix_elements == 0) return false;
  const auto b = tuple_prefix_length(begin, prefix_elements);
  if (!b) return false;
  const auto e = tuple_prefix_length(end, prefix_elements);
  return e && *e == *b && begin.substr(0, *b) == end.substr(0, *e);
}
}  // namespace

rocksdb::Iterator* RocksTransaction::prefix_iterator(std::size_t family) {
  // One per transaction and family, made at its first one-prefix range read there: every later
  // one seeks it again instead of building a new iterator over every memtable and table (a
  // _bulk_docs request reads each new document's revisions range). Its bounds are checked by
  // read_range: RocksDB's iterators cache per-block decisions made against the bounds they were
  // given.
  if (prefix_its_.empty()) prefix_its_.resize(engine_->families().size());
  auto& it = prefix_its_[family];
  if (!it && fill_cache_) {
    it = view_->shared->take_iterator(family);
    if (it) engine_->note_iterator_reused();
  }
  if (!it) {
    rocksdb::ReadOptions ro;
    ro.snapshot = view_->snapshot();
    ro.fill_cache = fill_cache_;
    ro.total_order_seek = false;
    ro.prefix_same_as_start = true;
    it.reset(engine_->db()->NewIterator(ro, engine_->family_cf(family)));
  }
  return it.get();
}

Result<std::optional<std::string>> RocksTransaction::read_storage(std::string_view key) {
  if (auto s = ensure_read_view(); !s) return s.error();
  rocksdb::ReadOptions ro;
  ro.snapshot = view_->snapshot();
  ro.fill_cache = fill_cache_;
  rocksdb::PinnableSlice v;
  rocksdb::Status s = engine_->db()->Get(ro, engine_->cf_of_key(key), to_slice(key), &v);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return Error::io_error;
  return std::optional<std::string>(v.ToString());
}

Result<std::optional<std::string>> RocksTransaction::get(std::string_view key, Snapshot snapshot) {
  if (auto s = check_usable(); !s) return s.error();
  if (key.size() > kKeySizeMax) return Error::key_too_large;
  WriteMap::Lookup l = writes_.lookup(key);
  switch (l.known) {
    case WriteMap::Known::value:
      return std::optional<std::string>(l.write->value);
    case WriteMap::Known::absent:
      return std::optional<std::string>();
    case WriteMap::Known::unreadable:
      return Error::accessed_unreadable;
    case WriteMap::Known::atomic:
    case WriteMap::Known::unknown:
      break;
  }
  auto base = read_storage(key);
  if (!base.ok()) return base;
  if (snapshot == Snapshot::no) add_conflict(read_conflicts_, key, key_after(key));
  if (l.known == WriteMap::Known::unknown) return base;
  const auto& b = *base;
  return std::optional<std::string>(
      apply_ops(b ? std::optional<std::string_view>(*b) : std::nullopt, l.write->ops));
}

Status RocksTransaction::read_range(std::string_view begin, std::string_view end, int limit,
                                    Reverse reverse, std::vector<KeyValue>& out, bool& limited) {
  limited = false;
  if (auto s = ensure_read_view(); !s) return s;
  rocksdb::Slice lo = to_slice(begin), hi = to_slice(end);
  std::unique_ptr<rocksdb::Iterator> own;
  rocksdb::Iterator* it = nullptr;
  const std::optional<std::size_t> family = engine_->families().of_range(begin, end);
  if (family && within_one_prefix(begin, end, engine_->options().bloom_prefix_tuple_elements)) {
    it = prefix_iterator(*family);
  } else {
    rocksdb::ReadOptions ro;
    ro.snapshot = view_->snapshot();
    ro.fill_cache = fill_cache_;
    ro.iterate_lower_bound = &lo;
    ro.iterate_upper_bound = &hi;
    ro.total_order_seek = true;
    own = engine_->new_range_iterator(ro, family);
    it = own.get();
  }
  // Whether the iterator stands on a key of [begin, end) (the shared one has no bounds).
  auto below_end = [&] { return it->Valid() && to_sv(it->key()) < end; };
  auto from_begin = [&] { return it->Valid() && to_sv(it->key()) >= begin; };
  const WriteMap::Points& points = writes_.points();
  const RangeSet& cleared = writes_.cleared();
  const std::size_t n_max = limit > 0 ? static_cast<std::size_t>(limit) : SIZE_MAX;

  // Emits the merged entry for an overlay point `p` whose storage value (if the iterator is on the
  // same key) is `stored`. Returns false on an unreadable key.
  auto emit_point = [&](const std::string& key, const PointWrite& w,
                        std::optional<std::string_view> stored) {
    switch (w.kind) {
      case PointWrite::Kind::set:
        out.push_back({key, w.value});
        return true;
      case PointWrite::Kind::clear:
        return true;
      case PointWrite::Kind::atomic:
        out.push_back({key, apply_ops(stored, w.ops)});
        return true;
      case PointWrite::Kind::versionstamped_value:
        return false;
    }
    return true;
  };

  if (reverse == Reverse::no) {
    // A cleared range may end past `end` (and, in prefix mode, outside the prefix, where the
    // iterator cannot seek): past `end` nothing more is read.
    auto skip_cleared = [&] {
      while (below_end()) {
        const auto* r = cleared.find(to_sv(it->key()));
        if (!r) break;
        it->Seek(r->second < end ? to_slice(r->second) : hi);
      }
    };
    it->Seek(lo);
    skip_cleared();
    auto p = points.lower_bound(begin);
    for (;;) {
      if (out.size() >= n_max) {
        limited = true;
        break;
      }
      const bool has_s = below_end();
      const bool has_p = p != points.end() && p->first < end;
      if (!has_s && !has_p) break;
      if (has_p && (!has_s || to_sv(it->key()) >= p->first)) {
        const bool same = has_s && to_sv(it->key()) == p->first;
        std::optional<std::string_view> stored;
        if (same) stored = to_sv(it->value());
        if (!emit_point(p->first, p->second, stored)) return Error::accessed_unreadable;
        if (same) {
          it->Next();
          skip_cleared();
        }
        ++p;
      } else {
        out.push_back({it->key().ToString(), it->value().ToString()});
        it->Next();
        skip_cleared();
      }
    }
  } else {
    auto skip_cleared = [&] {
      while (from_begin()) {
        const auto* r = cleared.find(to_sv(it->key()));
        if (!r) break;
        // As forward: a cleared range that starts before `begin` ends the read at `begin`.
        const std::string_view to = r->first > begin ? std::string_view(r->first) : begin;
        it->SeekForPrev(to_slice(to));
        if (it->Valid() && to_sv(it->key()) == to) it->Prev();
      }
    };
    // The last key before `end`.
    it->SeekForPrev(hi);
    if (it->Valid() && to_sv(it->key()) == end) it->Prev();
    skip_cleared();
    auto p = std::make_reverse_iterator(points.lower_bound(end));
    for (;;) {
      if (out.size() >= n_max) {
        limited = true;
        break;
      }
      const bool has_s = from_begin();
      const bool has_p = p != points.rend() && p->first >= begin;
      if (!has_s && !has_p) break;
      if (has_p && (!has_s || to_sv(it->key()) <= p->first)) {
        const bool same = has_s && to_sv(it->key()) == p->first;
        std::optional<std::string_view> stored;
        if (same) stored = to_sv(it->value());
        if (!emit_point(p->first, p->second, stored)) return Error::accessed_unreadable;
        if (same) {
          it->Prev();
          skip_cleared();
        }
        ++p;
      } else {
        out.push_back({it->key().ToString(), it->value().ToString()});
        it->Prev();
        skip_cleared();
      }
    }
  }
  if (!it->status().ok()) return Error::io_error;
  return {};
}

Result<std::vector<KeyValue>> RocksTransaction::get_range(std::string_view begin,
                                                          std::string_view end, int limit,
                                                          Reverse reverse, Snapshot snapshot) {
  if (auto s = check_usable(); !s) return s.error();
  if (begin > end) return Error::inverted_range;
  if (limit < 0) return Error::invalid_option_value;
  std::vector<KeyValue> out;
  if (begin == end) return out;
  bool limited = false;
  if (auto s = read_range(begin, end, limit, reverse, out, limited); !s) return s.error();
  if (snapshot == Snapshot::no) {
    if (!limited) {
      add_conflict(read_conflicts_, begin, end);
    } else if (reverse == Reverse::no) {
      add_conflict(read_conflicts_, begin, key_after(out.back().key));
    } else {
      add_conflict(read_conflicts_, out.back().key, end);
    }
  }
  return out;
}

Result<std::int64_t> RocksTransaction::get_estimated_range_size_bytes(std::string_view begin,
                                                                      std::string_view end) {
  if (auto s = check_usable(); !s) return s.error();
  if (begin > end) return Error::inverted_range;
  if (begin == end) return std::int64_t{0};
  rocksdb::SizeApproximationOptions options;
  options.include_memtables = true;
  options.include_files = true;
  const rocksdb::Slice b(begin.data(), begin.size());
  const rocksdb::Slice e(end.data(), end.size());
  const rocksdb::Range range(b, e);
  const std::optional<std::size_t> only = engine_->families().of_range(begin, end);
  std::int64_t total = 0;
  for (std::size_t f = 0; f < engine_->families().size(); ++f) {
    if (only && f != *only) continue;
    std::uint64_t size = 0;
    const rocksdb::Status st =
        engine_->db()->GetApproximateSizes(options, engine_->family_cf(f), &range, 1, &size);
    if (!st.ok()) return Error::io_error;
    total += static_cast<std::int64_t>(size);
  }
  return total;
}

// get_ranges: how many keys the iterator steps over before it seeks instead.
constexpr int kStepsBeforeSeek = 4;

Result<std::vector<std::vector<KeyValue>>> RocksTransaction::get_ranges(
    const std::vector<KeyRange>& ranges, int limit_each, Snapshot snapshot) {
  if (auto s = check_usable(); !s) return s.error();
  if (limit_each < 0) return Error::invalid_option_value;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].begin > ranges[i].end) return Error::inverted_range;
    if (i > 0 && ranges[i].begin < ranges[i - 1].end) return Error::invalid_option_value;
  }
  std::vector<std::vector<KeyValue>> out(ranges.size());
  if (ranges.empty()) return out;
  const std::size_t n_max = limit_each > 0 ? static_cast<std::size_t>(limit_each) : SIZE_MAX;
  std::vector<bool> limited(ranges.size(), false);
  if (!writes_.empty()) {
    // This transaction's own writes overlay the store: each range through read_range.
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      bool lim = false;
      if (ranges[i].begin == ranges[i].end) continue;
      if (auto s = read_range(ranges[i].begin, ranges[i].end, limit_each, Reverse::no, out[i], lim);
          !s)
        return s.error();
      limited[i] = lim;
    }
  } else {
    if (auto s = ensure_read_view(); !s) return s.error();
    rocksdb::ReadOptions ro;
    ro.snapshot = view_->snapshot();
    ro.fill_cache = fill_cache_;
    rocksdb::Slice lo = to_slice(ranges.front().begin), hi = to_slice(ranges.back().end);
    ro.iterate_lower_bound = &lo;
    ro.iterate_upper_bound = &hi;
    ro.total_order_seek = true;  // one iterator across many prefixes
    std::unique_ptr<rocksdb::Iterator> it = engine_->new_range_iterator(
        ro, engine_->families().of_range(ranges.front().begin, ranges.back().end));
    bool positioned = false;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      const KeyRange& r = ranges[i];
      if (r.begin == r.end) continue;
      // The iterator rests on the first key at or after the previous range's end (<= r.begin):
      // when that key is already inside this range, it is this range's first key. A few keys
      // before it (another revision's body in between) are stepped over; farther, it seeks.
      if (positioned) {
        for (int step = 0; step < kStepsBeforeSeek && it->Valid() && to_sv(it->key()) < r.begin;
             ++step)
          it->Next();
      }
      if (!positioned || !it->Valid() || to_sv(it->key()) < r.begin) it->Seek(to_slice(r.begin));
      positioned = true;
      while (it->Valid() && to_sv(it->key()) < r.end) {
        if (out[i].size() >= n_max) {
          limited[i] = true;
          break;
        }
        out[i].push_back({it->key().ToString(), it->value().ToString()});
        it->Next();
      }
    }
    if (!it->status().ok()) return Error::io_error;
  }
  if (snapshot == Snapshot::no) {
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      const KeyRange& r = ranges[i];
      if (r.begin == r.end) continue;
      if (!limited[i]) {
        add_conflict(read_conflicts_, r.begin, r.end);
      } else {
        add_conflict(read_conflicts_, r.begin, key_after(out[i].back().key));
      }
    }
  }
  return out;
}

Result<std::string> RocksTransaction::get_key(const KeySelector& sel, Snapshot snapshot) {
  if (auto s = check_usable(); !s) return s.error();
  std::vector<KeyValue> out;
  bool limited = false;
  if (sel.offset >= 1) {
    // The offset-th key after "last key < key" (or <=): the offset-th key >= key (or > key).
    std::string start = sel.or_equal ? key_after(sel.key) : sel.key;
    if (start >= kKeyspaceEnd) return kKeyspaceEnd;
    if (auto s = read_range(start, kKeyspaceEnd, sel.offset, Reverse::no, out, limited); !s)
      return s.error();
    const bool found = out.size() == static_cast<std::size_t>(sel.offset);
    std::string result = found ? out.back().key : kKeyspaceEnd;
    if (snapshot == Snapshot::no)
      add_conflict(read_conflicts_, start, found ? key_after(result) : kKeyspaceEnd);
    return result;
  }
  // offset <= 0: walk back 1 - offset keys among those < key (or <= key).
  std::string end = sel.or_equal ? key_after(sel.key) : sel.key;
  if (end > kKeyspaceEnd) end = kKeyspaceEnd;
  const int n = 1 - sel.offset;
  if (auto s = read_range("", end, n, Reverse::yes, out, limited); !s) return s.error();
  const bool found = out.size() == static_cast<std::size_t>(n);
  std::string result = found ? out.back().key : std::string();
  if (snapshot == Snapshot::no) add_conflict(read_conflicts_, result, end);
  return result;
}

void RocksTransaction::set(std::string_view key, std::string_view value) {
  if (!check_key(key)) return;
  if (Error e = check_written_value(value); e != Error::success) return defer(e);
  size_bytes_ += key.size() + value.size();
  writes_.set(key, value);
}

void RocksTransaction::clear(std::string_view key) {
  if (!check_key(key)) return;
  size_bytes_ += key.size();
  writes_.clear(key);
}

void RocksTransaction::clear_range(std::string_view begin, std::string_view end) {
  if (committing_) return defer(Error::used_during_commit);
  if (Error e = check_cleared_range(begin, end); e != Error::success) return defer(e);
  size_bytes_ += begin.size() + end.size();
  writes_.clear_range(begin, end);
}

void RocksTransaction::atomic_op(std::string_view key, MutationType type,
                                 std::string_view operand) {
  if (!check_key(key)) return;
  if (Error e = check_written_value(operand); e != Error::success) return defer(e);
  if (!writes_.atomic(key, AtomicOp{type, std::string(operand)}))
    return defer(Error::accessed_unreadable);
  size_bytes_ += key.size() + operand.size();
}

void RocksTransaction::set_versionstamped_key(std::string_view key_template,
                                              std::string_view value) {
  if (committing_) return defer(Error::used_during_commit);
  if (!versionstamp_template_ok(key_template)) return defer(Error::invalid_option_value);
  if (!check_key(key_template.substr(0, key_template.size() - 4))) return;
  if (Error e = check_written_value(value); e != Error::success) return defer(e);
  size_bytes_ += key_template.size() + value.size();
  versionstamped_keys_.push_back({std::string(key_template), std::string(value)});
}

void RocksTransaction::set_versionstamped_value(std::string_view key,
                                                std::string_view value_template) {
  if (!check_key(key)) return;
  if (Error e = check_value_template(value_template); e != Error::success) return defer(e);
  size_bytes_ += key.size() + value_template.size();
  writes_.set_versionstamped_value(key, value_template);
}

void RocksTransaction::add_read_conflict_range(std::string_view begin, std::string_view end) {
  if (committing_) return defer(Error::used_during_commit);
  if (begin > end) return defer(Error::inverted_range);
  if (auto s = ensure_read_view(); !s) return defer(s.error());
  add_conflict(read_conflicts_, begin, end);
}

void RocksTransaction::add_write_conflict_range(std::string_view begin, std::string_view end) {
  if (committing_) return defer(Error::used_during_commit);
  if (begin > end) return defer(Error::inverted_range);
  add_conflict(write_conflicts_, begin, end);
}

std::shared_ptr<Watch> RocksTransaction::watch(std::string_view key, WatchCallback callback) {
  auto w = std::make_shared<WatchState>(std::string(key), std::move(callback));
  if (committing_) {
    w->fire(Error::used_during_commit);
    return w;
  }
  watches_.push_back(w);
  return w;
}

std::unique_ptr<CommitRequest> RocksTransaction::take_commit_request() {
  auto req = std::make_unique<CommitRequest>();
  if (!read_conflicts_.empty()) req->read_version = view_->version;
  req->read_conflicts = std::move(read_conflicts_);
  req->write_conflicts = std::move(write_conflicts_);
  for (const auto& [b, e] : writes_.cleared().ranges()) req->write_conflicts.push_back({b, e});
  req->writes = std::move(writes_);
  req->versionstamped_keys = std::move(versionstamped_keys_);
  req->bytes = size_bytes_;
  req->watches = std::move(watches_);
  req->touches_metadata = touches_metadata_;
  return req;
}

void RocksTransaction::commit_async(std::function<void(Result<CommitResult>)> done) {
  if (committing_) return done(Error::used_during_commit);
  committing_ = true;
  Error e = deferred_;
  if (e == Error::success && view_ && !read_conflicts_.empty() &&
      engine_->now_us() - view_->acquired_us > engine_->options().transaction_lifetime_us)
    e = Error::transaction_too_old;
  if (e == Error::success && size_bytes_ > size_limit()) e = Error::transaction_too_large;

  // Baselines for watches: this transaction's view of each key (its own writes included).
  for (auto& w : watches_) {
    if (e != Error::success) break;
    committing_ = false;  // get() is allowed here
    auto v = get(w->key(), Snapshot::yes);
    committing_ = true;
    if (v.ok()) {
      w->baseline = std::move(*v);
      w->baseline_known = true;
    }
  }
  if (e != Error::success) {
    for (auto& w : watches_) w->fire(e);
    watches_.clear();
    return done(e);
  }
  if (read_only()) {
    engine_->register_watches(watches_);
    watches_.clear();
    return done(CommitResult{view_ ? view_->version : engine_->committed_version(), {}});
  }
  shelve_prefix_iterators();  // nothing more is read
  auto req = take_commit_request();
  req->done = std::move(done);
  engine_->submit(std::move(req));
}

Result<CommitResult> RocksTransaction::commit() {
  std::promise<Result<CommitResult>> p;
  auto f = p.get_future();
  commit_async([&p](Result<CommitResult> r) { p.set_value(std::move(r)); });
  return f.get();
}

void RocksTransaction::reset() {
  for (auto& w : watches_) w->fire(Error::transaction_cancelled);
  watches_.clear();
  shelve_prefix_iterators();
  view_.reset();
  writes_.reset();
  versionstamped_keys_.clear();
  read_conflicts_.clear();
  write_conflicts_.clear();
  size_bytes_ = 0;
  deferred_ = Error::success;
  committing_ = false;
  touches_metadata_ = false;
}

std::uint64_t RocksTransaction::metadata_generation() const {
  return engine_->metadata_generation();
}

std::optional<std::uint64_t> RocksTransaction::snapshot_metadata_generation() {
  if (!check_usable() || !ensure_read_view()) return std::nullopt;
  if (snapshot_generation_ == kNoGeneration || touches_metadata_) return std::nullopt;
  return snapshot_generation_;
}
std::uint64_t RocksTransaction::instance_id() const { return engine_->instance_id(); }

Result<std::chrono::microseconds> RocksTransaction::prepare_retry(Error e) {
  if (!is_retryable(e)) return e;
  reset();
  const Options& o = engine_->options();
  backoff_ = backoff_.count() == 0
                 ? std::chrono::microseconds(o.retry_backoff_initial_us)
                 : std::min(backoff_ * 2, std::chrono::microseconds(o.retry_backoff_max_us));
  thread_local std::minstd_rand rng(std::random_device{}());
  // Full jitter: concurrent losers of one conflict should not retry in lockstep.
  std::uniform_int_distribution<std::int64_t> jitter(0, backoff_.count());
  return std::chrono::microseconds(jitter(rng));
}

Status RocksTransaction::on_error(Error e) {
  auto d = prepare_retry(e);
  if (!d.ok()) return d.error();
  if (d->count() > 0) std::this_thread::sleep_for(*d);
  return {};
}

}  // namespace chaise::storage
