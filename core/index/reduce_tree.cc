#include "core/index/reduce_tree.h"

#include <algorithm>
#include <set>

#include "storage/tuple.h"
#include "storage/write_map.h"

namespace chaise::core {

namespace {

using storage::KeyValue;
using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;

constexpr unsigned char kHeadLevel = 0x7f;
constexpr std::size_t kPartialBytesMax = 90'000;
constexpr int kReadChunk = 64;
constexpr int kRecomputeChunk = 24;  // a node spans 16 entries on average

std::string overflow_failure() {
  return "E{\"status\":500,\"error\":\"reduce_overflow_error\",\"reason\":\"A reduction over "
         "more than 90000 bytes cannot be stored in the view's reduce tree.\"}";
}

}  // namespace

int ReduceTree::level_of(std::string_view suffix) {
  const std::uint64_t h = key_hash(suffix);
  if (h == 0) return kReduceTreeLevels;
  return std::min(kReduceTreeLevels, __builtin_ctzll(h) / kReduceTreeFanoutBits);
}

ReduceTree::ReduceTree(const storage::Subspace& rows, const storage::Subspace& nodes,
                       const Reducer& reducer)
    : rows_prefix_(rows.key()), reducer_(reducer) {
  std::tie(rows_begin_, rows_end_) = rows.range();
  level_prefix_.resize(kReduceTreeLevels + 1);
  for (int l = 1; l <= kReduceTreeLevels; ++l)
    level_prefix_[l] = nodes.pack(Tuple().add(static_cast<std::int64_t>(l)));
}

std::string ReduceTree::key_at(int level, std::string_view suffix) const {
  if (level == 0) return suffix.empty() ? rows_begin_ : rows_prefix_ + std::string(suffix);
  return level_prefix_[level] + std::string(suffix);
}

std::string ReduceTree::level_end(int level) const {
  return level == 0 ? rows_end_ : storage::strinc(level_prefix_[level]);
}

StorageResult<std::vector<ReduceTree::Entry>> ReduceTree::read(Transaction& tr, int level,
                                                               std::string_view from_key,
                                                               std::string_view to_key, int limit) {
  auto kvs = tr.get_range(from_key, to_key, limit, Reverse::no, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  std::vector<Entry> out;
  out.reserve(kvs->size());
  const std::string& prefix = level == 0 ? rows_prefix_ : level_prefix_[level];
  for (KeyValue& kv : *kvs) {
    Entry e;
    e.suffix = kv.key.substr(prefix.size());
    if (level == 0) {
      e.level = level_of(e.suffix);
      auto t = Tuple::unpack(e.suffix);
      const std::string* ck = t ? t->get_bytes(0) : nullptr;
      const std::string* id = t ? t->get_string(1) : nullptr;
      const std::size_t nl = kv.value.find('\n');
      if (!ck || !id || nl == std::string::npos) return storage::Error::io_error;
      e.row.ck = *ck;
      e.row.id = *id;
      e.row.key_json = kv.value.substr(0, nl);
      e.row.value_json = kv.value.substr(nl + 1);
    } else {
      if (kv.value.empty()) return storage::Error::io_error;
      e.level = static_cast<unsigned char>(kv.value[0]);
      e.partial = kv.value.substr(1);
    }
    out.push_back(std::move(e));
  }
  return out;
}

storage::Status ReduceTree::gather(Transaction& tr, int level, const std::string& x,
                                   std::vector<LeafRow>& rows, std::vector<std::string>& partials) {
  // The entries one level down from x (x itself first) up to the next one of level >= `level`.
  const int below = level - 1;
  std::string from = key_at(below, x);
  const std::string to = level_end(below);
  for (bool done = false; !done;) {
    auto chunk = read(tr, below, from, to, kRecomputeChunk);
    if (!chunk.ok()) return chunk.error();
    for (Entry& e : *chunk) {
      if (!(e.suffix == x && !x.empty()) && !(below > 0 && e.suffix.empty() && x.empty()) &&
          e.level >= level) {
        done = true;
        break;
      }
      if (below == 0)
        rows.push_back(std::move(e.row));
      else
        partials.push_back(std::move(e.partial));
    }
    if (done || chunk->size() < static_cast<std::size_t>(kRecomputeChunk)) break;
    from = storage::key_after(key_at(below, chunk->back().suffix));
  }
  return {};
}

void ReduceTree::write_node(Transaction& tr, int level, const std::string& x, std::string partial) {
  if (partial.size() > kPartialBytesMax) partial = overflow_failure();
  const unsigned char own = x.empty() ? kHeadLevel : static_cast<unsigned char>(level_of(x));
  std::string value(1, static_cast<char>(own));
  value += partial;
  tr.set(key_at(level, x), value);
}

storage::Status ReduceTree::update(Transaction& tr, const std::map<std::string, bool>& touched) {
  if (touched.empty()) return {};
  struct Touched {
    std::string_view suffix;
    bool exists;
    int level;
    std::string parent;  // the node before it one level up, then at the current level
  };
  std::vector<Touched> t;
  t.reserve(touched.size());
  for (const auto& [s, exists] : touched) t.push_back(Touched{s, exists, level_of(s), {}});
  // The structure first: nodes of added rows appear (partials computed below), those of removed
  // rows go, at every level.
  for (const Touched& x : t) {
    for (int l = 1; l <= x.level; ++l) {
      if (x.exists)
        tr.set(key_at(l, x.suffix), std::string(1, static_cast<char>(x.level)));
      else
        tr.clear(key_at(l, x.suffix));
    }
  }
  // Top down, the node before each changed row at each level: it lies in the span of the node
  // before it one level up, so each level reads only the spans of the previous level's answers,
  // forward (touched rows are sorted, so rows sharing a span share one read).
  std::vector<std::set<std::string>> dirty(kReduceTreeLevels + 1);
  for (int l = kReduceTreeLevels; l >= 1; --l) {
    std::size_t i = 0;
    while (i < t.size()) {
      const std::string parent = t[i].parent;  // "" = the head (always, at the top level)
      std::size_t j = i;
      while (j < t.size() && t[j].parent == parent) ++j;
      // Level-l entries from the parent up to the last changed row of the group.
      std::string last_before;  // the last entry < the current row
      std::size_t k = i;
      std::string from = key_at(l, parent);
      const std::string to = key_at(l, t[j - 1].suffix);
      while (k < j) {
        auto chunk = read(tr, l, from, to, kRecomputeChunk);
        if (!chunk.ok()) return chunk.error();
        for (const Entry& e : *chunk) {
          while (k < j && t[k].suffix <= e.suffix) t[k++].parent = last_before;
          last_before = e.suffix;
        }
        if (chunk->size() < static_cast<std::size_t>(kRecomputeChunk)) {
          while (k < j) t[k++].parent = last_before;
          break;
        }
        from = storage::key_after(key_at(l, chunk->back().suffix));
      }
      i = j;
    }
    for (const Touched& x : t) {
      dirty[l].insert(x.parent);
      if (x.exists && x.level >= l) dirty[l].insert(std::string(x.suffix));
    }
  }
  // Bottom up, the partials: each level's changed nodes reduced together (one engine call for
  // a JavaScript reduce).
  for (int l = 1; l <= kReduceTreeLevels; ++l) {
    const std::vector<std::string> xs(dirty[l].begin(), dirty[l].end());
    std::vector<std::vector<LeafRow>> rows(l == 1 ? xs.size() : 0);
    std::vector<std::vector<std::string>> partials(l == 1 ? 0 : xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      std::vector<LeafRow> r;
      std::vector<std::string> p;
      if (auto st = gather(tr, l, xs[i], r, p); !st) return st.error();
      if (l == 1)
        rows[i] = std::move(r);
      else
        partials[i] = std::move(p);
    }
    std::vector<std::string> out =
        l == 1 ? reducer_.reduce_each(rows) : reducer_.rereduce_each(partials);
    for (std::size_t i = 0; i < xs.size(); ++i) write_node(tr, l, xs[i], std::move(out[i]));
  }
  return {};
}

StorageResult<std::string> ReduceTree::aggregate(Transaction& tr, std::string_view begin,
                                                 std::string_view end) {
  if (begin >= end) return std::string();
  const bool to_end = end >= rows_end_;
  const std::string b_suffix =
      begin <= rows_begin_ ? std::string() : std::string(begin.substr(rows_prefix_.size()));
  const std::string e_suffix =
      to_end ? std::string() : std::string(end.substr(rows_prefix_.size()));
  std::vector<std::string> partials;
  std::vector<LeafRow> pending;
  auto flush_rows = [&] {
    if (pending.empty()) return;
    partials.push_back(reducer_.reduce(pending));
    pending.clear();
  };
  int l = 0;
  bool descended = false;
  std::string pos = b_suffix;  // level 0: where the row scan starts; above: an entry at level l
  for (;;) {
    if (l == 0) {
      std::string from = pos.empty() ? rows_begin_ : key_at(0, pos);
      const std::string to = to_end ? rows_end_ : std::string(end);
      bool climbed = false;
      for (;;) {
        auto chunk = read(tr, 0, from, to, kReadChunk);
        if (!chunk.ok()) return chunk.error();
        for (Entry& e : *chunk) {
          if (!descended && e.level >= 1) {
            pos = std::move(e.suffix);
            l = 1;
            climbed = true;
            break;
          }
          pending.push_back(std::move(e.row));
          if (pending.size() >= 1000) flush_rows();
        }
        if (climbed || chunk->size() < static_cast<std::size_t>(kReadChunk)) break;
        from = storage::key_after(key_at(0, chunk->back().suffix));
      }
      if (climbed) continue;
      break;  // every row of the range is in
    }
    // Level l >= 1, at the entry `pos`.
    if (!descended && l < kReduceTreeLevels && level_of(pos) >= l + 1) {
      ++l;
      continue;
    }
    const std::string to =
        to_end ? level_end(l) : storage::key_after(key_at(l, e_suffix));  // entries <= end
    auto chunk = read(tr, l, key_at(l, pos), to, kReadChunk);
    if (!chunk.ok()) return chunk.error();
    if (chunk->empty() || chunk->front().suffix != pos) return storage::Error::io_error;
    bool finished = false, moved = false;
    for (std::size_t i = 0; i < chunk->size(); ++i) {
      Entry& x = (*chunk)[i];
      if (i + 1 < chunk->size()) {
        // x's span ends at the next entry, inside the range: take it whole.
        flush_rows();
        partials.push_back(std::move(x.partial));
        const Entry& next = (*chunk)[i + 1];
        pos = next.suffix;
        if (!to_end && pos >= e_suffix) {
          finished = true;
          break;
        }
        if (!descended && l < kReduceTreeLevels && next.level >= l + 1) {
          ++l;
          moved = true;
          break;
        }
        continue;
      }
      if (chunk->size() == static_cast<std::size_t>(kReadChunk)) break;  // read on from x
      if (to_end) {  // x spans to the end of the view
        flush_rows();
        partials.push_back(std::move(x.partial));
        finished = true;
      } else {  // x's span passes the end: go down a level from x
        descended = true;
        --l;
        moved = true;
      }
    }
    if (finished) break;
    (void)moved;
  }
  flush_rows();
  return reducer_.rereduce(partials);
}

}  // namespace chaise::core
