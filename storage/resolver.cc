#include "storage/resolver.h"

#include <cassert>

namespace chaise::storage {

namespace {
// A range [b, e) is a single key when e == b + '\0'.
bool is_point(const KeyRange& r) {
  return r.end.size() == r.begin.size() + 1 && r.end.back() == '\0' &&
         r.end.compare(0, r.begin.size(), r.begin) == 0;
}
// Heap bytes a string of n characters takes beyond its object (libstdc++ keeps 15 inline).
std::size_t string_heap(std::size_t n) {
  return n > 15 ? ((n + 1 + 8 + 15) & ~std::size_t{15}) : 0;
}
// A map node (tree links, key object, version) plus the record's iterator to it.
constexpr std::size_t kPointOverhead = 80 + sizeof(void*);
// A deque slot of two strings and a version.
constexpr std::size_t kRangeOverhead = 2 * 32 + 8;
}  // namespace

void Resolver::begin_version(std::int64_t version, std::int64_t now_us) {
  assert(history_.empty() || history_.back().version < version);
  history_.push_back(VersionRecord{version, now_us, {}, 0});
}

void Resolver::add_writes(const std::vector<KeyRange>& writes) {
  assert(!history_.empty());
  VersionRecord& rec = history_.back();
  for (const KeyRange& w : writes) {
    if (w.begin >= w.end) continue;
    if (is_point(w)) {
      auto [it, inserted] = points_.try_emplace(w.begin, rec.version);
      if (inserted) {
        bytes_ += kPointOverhead + string_heap(w.begin.size());
      } else if (it->second == rec.version) {
        continue;  // already in this record
      } else {
        it->second = rec.version;
        bytes_ += sizeof(void*);
      }
      rec.points.push_back(it);
    } else {
      ranges_.push_back(RangeWrite{w.begin, w.end, rec.version});
      bytes_ += kRangeOverhead + string_heap(w.begin.size()) + string_heap(w.end.size());
      ++rec.ranges;
    }
  }
}

bool Resolver::conflicts(std::int64_t read_version, const std::vector<KeyRange>& reads) const {
  for (const KeyRange& r : reads) {
    if (r.begin >= r.end) continue;
    for (auto it = points_.lower_bound(r.begin); it != points_.end() && it->first < r.end; ++it) {
      if (it->second > read_version) return true;
    }
    // Newest first: stop at the first range no newer than the read version.
    for (auto it = ranges_.rbegin(); it != ranges_.rend() && it->version > read_version; ++it) {
      if (it->begin < r.end && r.begin < it->end) return true;
    }
  }
  return false;
}

void Resolver::forget_oldest() {
  VersionRecord& rec = history_.front();
  for (Points::iterator it : rec.points) {
    if (it->second == rec.version) {
      bytes_ -= kPointOverhead + string_heap(it->first.size());
      points_.erase(it);
    } else {
      bytes_ -= sizeof(void*);
    }
  }
  for (std::size_t i = 0; i < rec.ranges; ++i) {
    assert(!ranges_.empty() && ranges_.front().version == rec.version);
    const RangeWrite& r = ranges_.front();
    bytes_ -= kRangeOverhead + string_heap(r.begin.size()) + string_heap(r.end.size());
    ranges_.pop_front();
  }
  forgotten_version_ = rec.version;
  history_.pop_front();
}

void Resolver::expire(std::int64_t now_us, std::int64_t lifetime_us) {
  // Keep the newest version always: it is what current read versions point at.
  while (history_.size() > 1 && history_.front().time_us < now_us - lifetime_us) forget_oldest();
  while (history_.size() > 1 && bytes_ > bytes_max_) forget_oldest();
}

}  // namespace chaise::storage
