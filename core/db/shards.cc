#include "core/db/shards.h"

#include <algorithm>
#include <cassert>

#include "core/db/db_cache.h"

namespace chaise::core {

using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;
using storage::Versionstamp;

namespace {

storage::Subspace maps_space(const DbRef& db) {
  return db.space.root().sub(Tuple().add(keyspace::kConfig).add(keyspace::kChangesShards));
}
std::string next_id_key(const DbRef& db) {
  return db.space.root().pack(Tuple().add(keyspace::kConfig).add(keyspace::kNextShardId));
}

std::string map_value(const ShardMap& m) {
  Tuple ids;
  for (std::int64_t s : m.shards) ids.add(s);
  return Tuple().add(kShardMapFormat).add(m.scheme).add(ids).add(m.tombstone).pack();
}

// FNV-1a 64, then a 64-bit finalizer (splitmix) so that nearby inputs spread over the ring.
std::uint64_t hash64(std::string_view s, std::uint64_t seed) {
  std::uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

}  // namespace

namespace {
StorageResult<std::vector<ShardMap>> load_shard_maps(Transaction& tr, const DbRef& db) {
  const storage::Subspace space = maps_space(db);
  auto [b, e] = space.range();
  auto kvs = tr.get_range(b, e, 0, Reverse::no, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  std::vector<ShardMap> maps;
  for (const auto& kv : *kvs) {
    auto k = space.unpack(kv.key);
    auto v = Tuple::unpack(kv.value);
    if (!k || !v || v->size() != 4) return storage::Error::io_error;
    auto start = Sequence::from_tuple(*k, 0);
    const std::string* scheme = v->get_string(1);
    const Tuple* ids = v->get_tuple(2);
    auto tomb = v->get_bool(3);
    if (!start || !scheme || !ids || !tomb) return storage::Error::io_error;
    ShardMap m;
    m.start = *start;
    m.scheme = *scheme;
    for (std::size_t i = 0; i < ids->size(); ++i) {
      auto id = ids->get_int(i);
      if (!id) return storage::Error::io_error;
      m.shards.push_back(*id);
    }
    m.tombstone = *tomb;
    m.key = kv.key;
    maps.push_back(std::move(m));
  }
  if (maps.empty()) {
    // A database created before shard maps existed: one shard, shard 0, from the beginning.
    ShardMap m;
    m.shards = {keyspace::kDefaultShard};
    m.key = space.pack(Sequence{}.tuple());
    maps.push_back(std::move(m));
  }
  return maps;
}
}  // namespace

StorageResult<std::vector<ShardMap>> read_shard_maps(Transaction& tr, const DbRef& db,
                                                     Snapshot snapshot) {
  // Every write reads them: remembered between transactions (core/db/db_cache.h), since only
  // create_db and reshard write them, and both mark their transactions.
  auto remembered = remembered_read<std::vector<ShardMap>>(
      tr, memo_key("shard_maps", std::to_string(db.id)),
      [&](Transaction& t) { return load_shard_maps(t, db); });
  if (!remembered.ok()) return remembered.error();
  std::vector<ShardMap> maps = **remembered;
  if (snapshot == Snapshot::no) tr.add_read_conflict_key(maps.back().key);
  return maps;
}

const ShardMap& map_for(const std::vector<ShardMap>& maps, const Sequence& seq) {
  assert(!maps.empty());
  const ShardMap* best = &maps.front();
  for (const ShardMap& m : maps)
    if (m.start < seq) best = &m;
  return *best;
}

std::string partition_key(const DbRef& db, std::string_view doc_id) {
  if (db.partitioned) {
    auto colon = doc_id.find(':');
    if (colon != std::string_view::npos) return std::string(doc_id.substr(0, colon));
  }
  return std::string(doc_id);
}

std::int64_t route(const ShardMap& map, std::string_view key) {
  assert(!map.shards.empty());
  if (map.shards.size() == 1) return map.shards.front();
  // The ring point of (shard, replica) that follows the key's hash, found without materialising
  // the ring: the smallest clockwise distance wins.
  const std::uint64_t h = hash64(key, 0);
  std::int64_t best = map.shards.front();
  std::uint64_t best_distance = UINT64_MAX;
  for (std::int64_t shard : map.shards) {
    for (int v = 0; v < kVirtualNodes; ++v) {
      const std::string point = std::to_string(shard) + "#" + std::to_string(v);
      const std::uint64_t distance = hash64(point, 1) - h;  // wraps: clockwise distance
      if (distance < best_distance) {
        best_distance = distance;
        best = shard;
      }
    }
  }
  return best;
}

std::vector<std::int64_t> all_shards(const std::vector<ShardMap>& maps) {
  std::vector<std::int64_t> out;
  for (const ShardMap& m : maps) out.insert(out.end(), m.shards.begin(), m.shards.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void init_shard_map(Transaction& tr, const DbRef& db) {
  ShardMap m;
  m.shards = {keyspace::kDefaultShard};
  tr.set(maps_space(db).pack(Sequence{}.tuple()), map_value(m));
  tr.set(next_id_key(db), Tuple().add(keyspace::kDefaultShard + 1).pack());
}

StorageResult<Outcome<std::vector<std::int64_t>>> reshard(Transaction& tr, const DbRef& db,
                                                          int count) {
  using R = Outcome<std::vector<std::int64_t>>;
  if (count < 1 || count > kShardsMax)
    return R(err::bad_request("shards must be an integer from 1 to " + std::to_string(kShardsMax)));
  auto maps = read_shard_maps(tr, db, Snapshot::no);
  if (!maps.ok()) return maps.error();
  auto next = tr.get(next_id_key(db));
  if (!next.ok()) return next.error();
  std::int64_t first = keyspace::kDefaultShard + 1;
  if (next->has_value()) {
    auto t = Tuple::unpack(**next);
    if (!t || !t->get_int(0)) return storage::Error::io_error;
    first = *t->get_int(0);
  } else {
    for (std::int64_t s : all_shards(*maps)) first = std::max(first, s + 1);
  }
  tr.touch_metadata();  // read_shard_maps remembers them
  ShardMap fresh;
  for (int i = 0; i < count; ++i) fresh.shards.push_back(first + i);
  tr.set(next_id_key(db), Tuple().add(first + count).pack());
  // Tombstone the map in force: writers hold its key in their read-conflict set.
  ShardMap old = maps->back();
  old.tombstone = true;
  tr.set(old.key, map_value(old));
  auto key = maps_space(db).pack_with_versionstamp(
      Tuple().add(keyspace::kIncarnation).add(Versionstamp::incomplete(0xffff)));
  assert(key.ok());
  tr.set_versionstamped_key(*key, map_value(fresh));
  // Feeds waiting on the database learn about the new topology.
  tr.add(db.space.meta_key(keyspace::kUpdateCounter), 1);
  return R(fresh.shards);
}

}  // namespace chaise::core
