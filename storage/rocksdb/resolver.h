// storage/rocksdb/resolver.h — optimistic concurrency control: remembers the write-conflict
// ranges of recent commits with their commit versions, and decides whether a transaction read
// something written after its read version.
//
// The window: writes committed within Options::transaction_lifetime_us of "now" (by the injected
// clock) are kept; older ones are forgotten. A transaction whose read version predates the
// forgotten part cannot be checked and is rejected with transaction_too_old, as FoundationDB's
// resolvers do. Memory is bounded too: past `bytes_max` (an estimate of the heap the remembered
// keys take) the oldest versions are forgotten early, so under a heavy write load the window is
// shorter than the lifetime.
//
// Single keys are kept in runs: sorted arrays of (key, version). Each committed transaction's keys
// become a run, by sorting them (a write map's keys already are); a batch's runs merge while the
// older is at most twice the newer's size, and become one run when the next version begins. Then
// a run merges with the one before it while that one is at most twice its size (so there are
// about log2(n) runs, each key copied about log2(n) times), up to bytes_max / 16 per run. A search
// looks only at runs holding versions newer than the read version: for a transaction that just
// started, the last few. The whole window is forgotten run by run, oldest first, never a part of
// the newest version. (A map of every key was a node allocation and ~17 string comparisons, most
// of them cache misses, per key written: 4% of a PUT; an ordered set for the batch being
// committed was still 5,000 instructions per document of a _bulk_docs.)
//
// Threading: used only by the commit thread; no locking.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "storage/write_map.h"

namespace chaise::storage {

class Resolver {
 public:
  explicit Resolver(std::size_t bytes_max) : bytes_max_(bytes_max) {}

  // Forget versions committed before now_us - lifetime_us (and more when over bytes_max), whole
  // runs at a time; the newest run is always kept.
  void expire(std::int64_t now_us, std::int64_t lifetime_us);
  // True if a transaction at `read_version` can no longer be checked.
  bool too_old(std::int64_t read_version) const { return read_version < forgotten_version_; }
  // True if any write after `read_version` intersects one of `reads`.
  bool conflicts(std::int64_t read_version, const std::vector<KeyRange>& reads) const;
  // Record an accepted transaction's writes at `version` (the batch's commit version; call in batch
  // order, and begin_version before the first): single keys (in any order, repeats allowed) and
  // ranges. A range [k, key_after(k)) counts as the single key k.
  void begin_version(std::int64_t version, std::int64_t now_us);
  void add_writes(std::vector<std::string_view> keys, const std::vector<KeyRange>& ranges);
  void add_writes(const std::vector<KeyRange>& writes) { add_writes({}, writes); }

  std::size_t remembered_keys() const { return keys_ + ranges_.size(); }
  // Estimated heap bytes of what is remembered (keys, entries, ranges).
  std::size_t remembered_bytes() const { return bytes_; }

 private:
  struct Entry {
    std::size_t offset;  // of the key in Run::keys
    std::uint32_t size;
    std::int64_t version;  // of the newest write of the key in this run
  };
  struct Run {
    std::int64_t last_version = 0;
    std::int64_t last_time_us = 0;  // when last_version was committed
    std::string keys;               // the entries' key bytes
    std::vector<Entry> entries;     // in key order, one per key
    std::size_t ranges = 0;  // ranges_ entries of these versions (ranges_ is in version order)
    std::size_t bytes = 0;   // counted in bytes_
    std::string_view key(const Entry& e) const { return {keys.data() + e.offset, e.size}; }
  };
  void merge_last_two();
  void merge_runs(bool same_version_only);
  void forget_oldest();

  std::size_t bytes_max_;
  std::size_t bytes_ = 0;
  std::size_t keys_ = 0;
  std::deque<Run> runs_;                            // oldest first, contiguous version spans
  std::int64_t version_ = 0, version_time_us_ = 0;  // of the batch being committed
  struct RangeWrite {
    std::string begin, end;
    std::int64_t version;
  };
  std::deque<RangeWrite> ranges_;  // multi-key writes (clear_range, explicit ranges), oldest first
  std::int64_t forgotten_version_ = 0;  // every version <= this one has been forgotten
};

}  // namespace chaise::storage
