// core/db/shards.h — the sharded changes feed (RFC 004): shard maps, routing, resharding.
//
// Keys (under the database):
//   (kConfig, "changes_shards", Incarnation, Versionstamp) = (kShardMapFormat, Scheme, (ShardId...), Tombstone)
//   (kConfig, "next_shard_id")                              = next ShardId (tuple int); ids are never reused
// The key's sequence is where the map starts: a new database gets one map at sequence 0 with shard 0;
// a reshard writes a new map at its own versionstamp (so every change committed after it is routed
// by it) and rewrites the previous map with Tombstone = true. Writers read the current map with a
// read conflict, so a write racing a reshard fails and retries under the new map: no change ever
// lands in a replaced shard. A change's shard is computed, never stored: route(map in force at its
// sequence, partition key).
//
// Routing: consistent hashing of the partition key (the doc id, or the part before ':' in a
// partitioned database) on a ring of kVirtualNodes points per shard (FNV-1a 64 + a 64-bit mixer),
// so every update of one document lands in one shard of a map.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/db/databases.h"

namespace chaise::core {

inline constexpr std::int64_t kShardMapFormat = 1;
inline constexpr std::string_view kHashScheme = "consistent-v1";
inline constexpr int kVirtualNodes = 64;
inline constexpr int kShardsMax = 64;

struct ShardMap {
  Sequence start;  // the map routes changes with sequence > start
  std::string scheme{kHashScheme};
  std::vector<std::int64_t> shards;
  bool tombstone = false;  // replaced by a later map
  std::string key;         // its storage key
};

// All maps of the database in start order (at least one). Snapshot::no puts the *current* (last)
// map's key in the read-conflict set, as writers must (RFC 004 "Write Path").
StorageResult<std::vector<ShardMap>> read_shard_maps(Transaction& tr, const DbRef& db,
                                                     storage::Snapshot snapshot);
// The map in force for a change at `seq`: the last map whose start is below seq (maps[0] for 0).
const ShardMap& map_for(const std::vector<ShardMap>& maps, const Sequence& seq);
std::string partition_key(const DbRef& db, std::string_view doc_id);
std::int64_t route(const ShardMap& map, std::string_view partition_key);
// Every shard id that any map ever used, ascending (older shards still hold older changes).
std::vector<std::int64_t> all_shards(const std::vector<ShardMap>& maps);

// Writes the first map (shard 0) of a new database.
void init_shard_map(Transaction& tr, const DbRef& db);
// Replaces the current map by one with `count` new shards starting at this transaction's sequence.
// 400 bad_request for a count outside 1..kShardsMax.
StorageResult<Outcome<std::vector<std::int64_t>>> reshard(Transaction& tr, const DbRef& db,
                                                          int count);

}  // namespace chaise::core
