#include "storage/rocksdb/resolver.h"

#include <algorithm>
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
// A deque slot of two strings and a version.
constexpr std::size_t kRangeOverhead = 2 * 32 + 8;
// A run's own object in the deque.
constexpr std::size_t kRunOverhead = 192;
}  // namespace

void Resolver::begin_version(std::int64_t version, std::int64_t now_us) {
  assert(version > version_);
  // The last version's runs become one (unless that grows past a run's bound), then runs merge
  // across versions.
  const std::size_t run_bytes_max = std::max<std::size_t>(bytes_max_ / 16, 4096);
  while (runs_.size() >= 2 && runs_[runs_.size() - 2].last_version == version_ &&
         runs_[runs_.size() - 2].bytes + runs_.back().bytes <= run_bytes_max)
    merge_last_two();
  version_ = version;
  version_time_us_ = now_us;
  merge_runs(/*same_version_only=*/false);
}

void Resolver::merge_runs(bool same_version_only) {
  const std::size_t run_bytes_max = std::max<std::size_t>(bytes_max_ / 16, 4096);
  while (runs_.size() >= 2) {
    const Run& older = runs_[runs_.size() - 2];
    const Run& newer = runs_.back();
    if (same_version_only && older.last_version != newer.last_version) break;
    if (older.entries.size() > 2 * newer.entries.size()) break;
    if (older.bytes + newer.bytes > run_bytes_max) break;
    merge_last_two();
  }
}

void Resolver::add_writes(std::vector<std::string_view> keys, const std::vector<KeyRange>& ranges) {
  assert(version_ > 0);
  Run run;
  run.last_version = version_;
  run.last_time_us = version_time_us_;
  run.bytes = kRunOverhead;
  for (const KeyRange& w : ranges) {
    if (w.begin >= w.end) continue;
    if (is_point(w)) {
      keys.push_back(w.begin);
      continue;
    }
    ranges_.push_back(RangeWrite{w.begin, w.end, version_});
    run.bytes += kRangeOverhead + string_heap(w.begin.size()) + string_heap(w.end.size());
    ++run.ranges;
  }
  if (keys.empty() && run.ranges == 0) return;
  // Usually a sorted write map's keys, then a few more (versionstamped keys, explicit conflicts):
  // only those are sorted, then merged in.
  if (auto tail = std::is_sorted_until(keys.begin(), keys.end()); tail != keys.end()) {
    std::sort(tail, keys.end());
    std::inplace_merge(keys.begin(), tail, keys.end());
  }
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::size_t key_bytes = 0;
  for (std::string_view k : keys) key_bytes += k.size();
  run.keys.reserve(key_bytes);
  run.entries.reserve(keys.size());
  for (std::string_view k : keys) {
    run.entries.push_back(Entry{run.keys.size(), static_cast<std::uint32_t>(k.size()), version_});
    run.keys.append(k);
  }
  run.bytes += key_bytes + run.entries.size() * sizeof(Entry);
  bytes_ += run.bytes;
  keys_ += run.entries.size();
  runs_.push_back(std::move(run));
  // Across versions runs merge when the next version begins, as the window ages them by their
  // newest version.
  merge_runs(/*same_version_only=*/true);
}

void Resolver::merge_last_two() {
  Run newer = std::move(runs_.back());
  runs_.pop_back();
  Run& older = runs_.back();
  Run merged;
  merged.last_version = newer.last_version;
  merged.last_time_us = newer.last_time_us;
  merged.ranges = older.ranges + newer.ranges;
  merged.keys.reserve(older.keys.size() + newer.keys.size());
  merged.entries.reserve(older.entries.size() + newer.entries.size());
  auto add = [&merged](const Run& from, const Entry& e) {
    merged.entries.push_back(Entry{merged.keys.size(), e.size, e.version});
    merged.keys.append(from.key(e));
  };
  std::size_t i = 0, j = 0;
  while (i < older.entries.size() || j < newer.entries.size()) {
    const int c = j == newer.entries.size() ? -1
                  : i == older.entries.size()
                      ? 1
                      : older.key(older.entries[i]).compare(newer.key(newer.entries[j]));
    if (c < 0) {
      add(older, older.entries[i++]);
    } else {
      if (c == 0) ++i;  // rewritten: the newer run's entry, with its version
      add(newer, newer.entries[j++]);
    }
  }
  // The ranges' share of both runs' bytes carries over; keys and entries are counted anew.
  auto keyed = [](const Run& r) { return r.keys.size() + r.entries.size() * sizeof(Entry); };
  merged.bytes =
      older.bytes - keyed(older) + newer.bytes - keyed(newer) - kRunOverhead + keyed(merged);
  bytes_ = bytes_ - older.bytes - newer.bytes + merged.bytes;
  keys_ = keys_ - older.entries.size() - newer.entries.size() + merged.entries.size();
  older = std::move(merged);
}

bool Resolver::conflicts(std::int64_t read_version, const std::vector<KeyRange>& reads) const {
  for (auto run = runs_.rbegin(); run != runs_.rend() && run->last_version > read_version; ++run) {
    const Run& r = *run;
    for (const KeyRange& read : reads) {
      if (read.begin >= read.end) continue;
      auto it = std::lower_bound(r.entries.begin(), r.entries.end(), std::string_view(read.begin),
                                 [&r](const Entry& e, std::string_view k) { return r.key(e) < k; });
      for (; it != r.entries.end() && r.key(*it) < std::string_view(read.end); ++it) {
        if (it->version > read_version) return true;
      }
    }
  }
  for (const KeyRange& read : reads) {
    if (read.begin >= read.end) continue;
    // Newest first: stop at the first range no newer than the read version.
    for (auto it = ranges_.rbegin(); it != ranges_.rend() && it->version > read_version; ++it) {
      if (it->begin < read.end && read.begin < it->end) return true;
    }
  }
  return false;
}

void Resolver::forget_oldest() {
  Run& run = runs_.front();
  for (std::size_t i = 0; i < run.ranges; ++i) {
    assert(!ranges_.empty() && ranges_.front().version <= run.last_version);
    ranges_.pop_front();
  }
  bytes_ -= run.bytes;
  keys_ -= run.entries.size();
  forgotten_version_ = run.last_version;
  runs_.pop_front();
}

void Resolver::expire(std::int64_t now_us, std::int64_t lifetime_us) {
  // Keep the newest version's runs always: they hold what current read versions point at.
  auto older_than_newest = [this] {
    return runs_.size() > 1 && runs_.front().last_version < runs_.back().last_version;
  };
  while (older_than_newest() && runs_.front().last_time_us < now_us - lifetime_us) forget_oldest();
  while (older_than_newest() && bytes_ > bytes_max_) forget_oldest();
}

}  // namespace chaise::storage
