// storage/resolver.h — optimistic concurrency control: remembers the write-conflict ranges of
// recent commits with their commit versions, and decides whether a transaction read something
// written after its read version.
//
// The window: writes committed within Options::transaction_lifetime_us of "now" (by the injected
// clock) are kept; older ones are forgotten. A transaction whose read version predates the
// forgotten part cannot be checked and is rejected with transaction_too_old, as FoundationDB's
// resolvers do. Memory is bounded too: past `bytes_max` (an estimate of the heap the remembered
// keys take) the oldest versions are forgotten early, so under a heavy write load the window is
// shorter than the lifetime.
//
// Threading: used only by the commit thread; no locking.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "storage/write_map.h"

namespace chaise::storage {

class Resolver {
 public:
  explicit Resolver(std::size_t bytes_max) : bytes_max_(bytes_max) {}

  // Forget versions committed before now_us - lifetime_us (and more when over bytes_max).
  void expire(std::int64_t now_us, std::int64_t lifetime_us);
  // True if a transaction at `read_version` can no longer be checked.
  bool too_old(std::int64_t read_version) const { return read_version < forgotten_version_; }
  // True if any write after `read_version` intersects one of `reads`.
  bool conflicts(std::int64_t read_version, const std::vector<KeyRange>& reads) const;
  // Record an accepted transaction's writes at `version` (the batch's commit version; call in batch
  // order, and begin_version before the first).
  void begin_version(std::int64_t version, std::int64_t now_us);
  void add_writes(const std::vector<KeyRange>& writes);

  std::size_t remembered_keys() const { return points_.size() + ranges_.size(); }
  // Estimated heap bytes of what is remembered (map nodes, strings, history entries).
  std::size_t remembered_bytes() const { return bytes_; }

 private:
  using Points = std::map<std::string, std::int64_t, std::less<>>;  // key -> version of last write
  struct VersionRecord {
    std::int64_t version;
    std::int64_t time_us;
    // The keys written at this version, as nodes of points_. A node rewritten later carries the
    // newer version and is left to that version's record (records are forgotten oldest first,
    // so a node is erased only by the newest record naming it).
    std::vector<Points::iterator> points;
    std::size_t ranges = 0;  // ranges_ entries of this version (ranges_ is in version order)
  };
  void forget_oldest();

  std::size_t bytes_max_;
  std::size_t bytes_ = 0;
  Points points_;
  struct RangeWrite {
    std::string begin, end;
    std::int64_t version;
  };
  std::deque<RangeWrite> ranges_;  // multi-key writes (clear_range, explicit ranges), oldest first
  std::deque<VersionRecord> history_;
  std::int64_t forgotten_version_ = 0;  // every version <= this one has been forgotten
};

}  // namespace chaise::storage
