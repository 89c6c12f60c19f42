// core/index/reduce_tree.h — a view's reductions kept in the store, so that a reduce query reads
// O(log n) entries instead of every row of its range (the role of CouchDB's b-tree reductions
// and of CouchDB-on-FDB's ebtree).
//
// Shape: a deterministic skip list over the view's rows. Each row has a level from a hash of its
// key (level >= l with probability 16^-l, at most kReduceTreeLevels), so the structure depends
// only on which rows exist, never on the order they were written in. For every level l >= 1 a
// node is stored for each row of level >= l, plus a head node before all rows; node (l, x)
// holds the reduction (a partial, core/index/reducers.h) of the rows from x up to the next row of
// level >= l. It is therefore the rereduction of the level l-1 entries it spans: about 16.
//
//   (kViews, Sig, kViewNodes, View, Level) + RowSuffix = Level of the row (1 byte) + partial
//   (kViews, Sig, kViewNodes, View, Level)             = head: 0x7f + partial
// where RowSuffix is the row's key after the view's rows prefix (so nodes sort as their rows).
//
// Updating: after a build step changed some rows, update() recomputes, level by level from the
// bottom, the nodes whose span contains a changed row (and adds/removes the nodes of added and
// removed rows): about 16 * levels entries read per changed row, far fewer when changed rows
// share nodes. Querying: aggregate() climbs from the range's start as long as whole nodes fit
// in the range, then descends towards its end: O(16 * levels) entries per range.
//
// Contract: both run inside the caller's transaction (snapshot reads: the index build serializes
// writers through its sequence key). A partial too large for one value (> 90,000 bytes, e.g. a
// JavaScript reduce that accumulates) is stored as a reduce_overflow_error failure, reported to
// the queries whose range includes it.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/db/databases.h"
#include "core/index/reducers.h"
#include "storage/subspace.h"

namespace chaise::core {

inline constexpr int kReduceTreeLevels = 6;      // levels above the rows: 16^6 = 16M rows
inline constexpr int kReduceTreeFanoutBits = 4;  // 16 entries per node on average

class ReduceTree {
 public:
  // `rows`: the view's rows (keys (KeyColl, DocId, ValueColl, N), values "keyjson\nvaluejson");
  // `nodes`: the view's node subspace.
  ReduceTree(const storage::Subspace& rows, const storage::Subspace& nodes, const Reducer& reducer);

  // After rows changed in `tr`: `touched` maps each changed row's key suffix (after the rows
  // prefix) to whether the row exists now.
  storage::Status update(Transaction& tr, const std::map<std::string, bool>& touched);

  // The partial of the rows whose keys lie in [begin, end) (keys inside the rows subspace).
  StorageResult<std::string> aggregate(Transaction& tr, std::string_view begin,
                                       std::string_view end);

  // The level of a row (0..kReduceTreeLevels) from its key suffix.
  static int level_of(std::string_view suffix);

 private:
  struct Entry {
    std::string suffix;
    int level = 0;
    std::string partial;  // nodes
    LeafRow row;          // level 0
  };
  std::string key_at(int level, std::string_view suffix) const;
  std::string level_end(int level) const;
  StorageResult<std::vector<Entry>> read(Transaction& tr, int level, std::string_view from_key,
                                         std::string_view to_key, int limit);
  // The inputs of node (level, x): rows (level 1) or partials one level down.
  storage::Status gather(Transaction& tr, int level, const std::string& x,
                         std::vector<LeafRow>& rows, std::vector<std::string>& partials);
  void write_node(Transaction& tr, int level, const std::string& x, std::string partial);

  std::string rows_prefix_, rows_begin_, rows_end_;
  std::vector<std::string> level_prefix_;  // [l] for l >= 1
  const Reducer& reducer_;
};

}  // namespace chaise::core
