#include "storage/resolver.h"

#include <cassert>

namespace chaise::storage {

namespace {
// A range [b, e) is a single key when e == b + '\0'.
bool is_point(const KeyRange& r) {
  return r.end.size() == r.begin.size() + 1 && r.end.back() == '\0' &&
         r.end.compare(0, r.begin.size(), r.begin) == 0;
}
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
      if (!inserted) it->second = rec.version;
      rec.points.push_back(w.begin);
    } else {
      ranges_.push_back(RangeWrite{w.begin, w.end, rec.version});
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
  for (const std::string& k : rec.points) {
    auto it = points_.find(k);
    if (it != points_.end() && it->second == rec.version) points_.erase(it);
  }
  for (std::size_t i = 0; i < rec.ranges; ++i) {
    assert(!ranges_.empty() && ranges_.front().version == rec.version);
    ranges_.pop_front();
  }
  forgotten_version_ = rec.version;
  history_.pop_front();
}

void Resolver::expire(std::int64_t now_us, std::int64_t lifetime_us) {
  // Keep the newest version always: it is what current read versions point at.
  while (history_.size() > 1 && history_.front().time_us < now_us - lifetime_us) forget_oldest();
  while (history_.size() > 1 && remembered_keys() > keys_max_) forget_oldest();
}

}  // namespace chaise::storage
