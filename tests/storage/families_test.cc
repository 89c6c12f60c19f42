// Column families by subspace (storage/rocksdb/families.h): which family a key and a range belong
// to, and a store whose keys live in several families answering every read as one keyspace, also
// after reopening under another rule (its keys moved at open).
#include "storage/rocksdb/families.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "storage/database.h"
#include "storage/subspace.h"
#include "storage/tuple.h"
#include "tests/storage/model_reads.h"
#include "tests/storage/temp_dir.h"

namespace chaise::storage {
namespace {

// Keys of every shape the rule looks at: (top, x, s, ...) with top, x and s integers or strings,
// shorter tuples, and raw bytes that are no tuple at all.
std::string random_key(std::mt19937& rng) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  if (pick(12) == 0) {
    static const std::vector<std::string> raw = {std::string(),
                                                 std::string("\x15\x01", 2),
                                                 std::string("\x15\x01\xff", 3),
                                                 std::string("\x15\x01\x15\x02\xff", 5),
                                                 std::string("\x14", 1),
                                                 std::string("\xff", 1),
                                                 std::string("\x02\x00\xff", 3)};
    return raw[static_cast<std::size_t>(pick(static_cast<int>(raw.size())))];
  }
  Tuple t;
  t.add(static_cast<std::int64_t>(pick(3)));
  const int len = pick(5);
  for (int i = 1; i < len; ++i) {
    switch (pick(4)) {
      case 0:
        t.add(std::string(1 + static_cast<std::size_t>(pick(2)), static_cast<char>('a' + pick(3))));
        break;
      case 1:
        t.add(std::string("a\0b", 3));
        break;
      default:
        t.add(static_cast<std::int64_t>(pick(6) - 1));
    }
  }
  std::string k = t.pack();
  if (pick(6) == 0) k.push_back(pick(2) ? '\xff' : '\0');
  return k;
}

TEST(Families, ARangeNamesOneFamilyOnlyWhenEveryKeyInsideHasIt) {
  const Families fam(1, {4, 1, 2, 1});
  EXPECT_EQ(fam.size(), 4u);  // default, 1, 2, 4
  EXPECT_EQ(fam.name(0), "default");
  EXPECT_EQ(fam.name(3), "subspace-4");
  std::mt19937 rng(20261127);
  std::set<std::string> keys;
  for (int i = 0; i < 3000; ++i) keys.insert(random_key(rng));
  const std::vector<std::string> sorted(keys.begin(), keys.end());
  int single = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string b = sorted[rng() % sorted.size()], e = sorted[rng() % sorted.size()];
    if (b > e) std::swap(b, e);
    if (b == e) continue;
    const auto f = fam.of_range(b, e);
    if (!f) continue;
    ++single;
    for (auto it = keys.lower_bound(b); it != keys.end() && *it < e; ++it)
      ASSERT_EQ(fam.of_key(*it), *f) << "range " << round;
  }
  EXPECT_GT(single, 2000);
  // The ranges readers use name their family: one subspace, one document in it, part of one.
  for (std::int64_t s : {0, 1, 2, 3, 4}) {
    const Subspace sub(Tuple().add(std::int64_t{1}).add(std::int64_t{7}).add(s));
    const std::size_t want = s == 1 ? 1 : s == 2 ? 2 : s == 4 ? 3 : 0;
    auto [b, e] = sub.range();
    EXPECT_EQ(fam.of_range(b, e), std::optional<std::size_t>(want)) << s;
    auto [db, de] = sub.range(Tuple().add("doc"));
    EXPECT_EQ(fam.of_range(db, de), std::optional<std::size_t>(want)) << s;
    EXPECT_EQ(fam.of_range(sub.pack(Tuple().add("a")), e), std::optional<std::size_t>(want));
    EXPECT_EQ(fam.of_key(sub.pack(Tuple().add("doc").add(std::int64_t{3}))), want);
  }
  // A whole database spans them all; keys before or after top's are the default family's.
  auto [db_b, db_e] = Subspace(Tuple().add(std::int64_t{1}).add(std::int64_t{7})).range();
  EXPECT_EQ(fam.of_range(db_b, db_e), std::nullopt);
  auto [sys_b, sys_e] = Subspace(Tuple().add(std::int64_t{0})).range();
  EXPECT_EQ(fam.of_range(sys_b, sys_e), std::optional<std::size_t>(0));
  EXPECT_EQ(fam.of_range(std::string("\x15\x02", 2), std::string("\xff", 1)),
            std::optional<std::size_t>(0));
  EXPECT_EQ(fam.of_range(std::string(), std::string("\xff", 1)), std::nullopt);
  // No subspaces: one family for everything.
  EXPECT_EQ(Families().of_range(std::string(), std::string("\xff", 1)),
            std::optional<std::size_t>(0));
}

Options rule(std::vector<std::int64_t> subspaces) {
  Options o;
  o.fsync = false;
  o.bloom_prefix_tuple_elements = 4;
  o.family_top = 1;
  o.family_subspaces = std::move(subspaces);
  return o;
}

std::unique_ptr<Database> open(const std::string& path, const Options& o) {
  auto r = Database::open(path, o);
  EXPECT_TRUE(r.ok()) << error_name(r.error());
  return r.ok() ? std::move(*r) : nullptr;
}

// Writes value(doc) at key(doc) for every doc in [0, docs), in transactions of `per_txn`
// documents, compacts the store into its last level and opens it again: its open tables are then
// the compacted files alone.
template <typename Key, typename Value>
std::unique_ptr<Database> load_compacted(const std::string& path, const Options& o, int docs,
                                         int per_txn, Key key, Value value) {
  auto db = open(path, o);
  for (int first = 0; first < docs; first += per_txn) {
    auto tr = db->create_transaction();
    const int end = std::min(docs, first + per_txn);
    for (int doc = first; doc < end; ++doc) tr.set(key(doc), value(doc));
    EXPECT_TRUE(tr.commit().ok());
  }
  EXPECT_TRUE(db->compact_files().ok());
  db.reset();
  return open(path, o);
}

// For every step-th doc of a store load_compacted wrote at key(2 * doc): the key answers
// value(doc), the odd key after it is absent, and (with ranges) so is the range between the two.
template <typename Key, typename Value>
void expect_even_keys_alone(Database& db, int docs, int step, Key key, Value value, bool ranges) {
  auto tr = db.create_transaction();
  for (int doc = 0; doc < docs; doc += step) {
    auto present = tr.get(key(2 * doc), Snapshot::yes);
    ASSERT_TRUE(present.ok());
    ASSERT_EQ(*present, std::optional<std::string>(value(doc))) << doc;
    auto absent = tr.get(key(2 * doc + 1), Snapshot::yes);
    ASSERT_TRUE(absent.ok());
    ASSERT_EQ(*absent, std::nullopt) << doc;
    if (!ranges) continue;
    auto range = tr.get_range(key(2 * doc + 1), key(2 * doc + 2), 0, Reverse::no, Snapshot::yes);
    ASSERT_TRUE(range.ok());
    ASSERT_TRUE(range->empty()) << doc;
  }
}

std::set<std::string> column_families(const std::string& path) {
  std::vector<std::string> names;
  EXPECT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &names).ok());
  return {names.begin(), names.end()};
}

// Keys the store test writes: (1, db, s, id, n) in and out of the families, and a few elsewhere.
std::string store_key(std::mt19937& rng) {
  auto pick = [&](int n) { return static_cast<std::int64_t>(rng() % static_cast<unsigned>(n)); };
  switch (pick(8)) {
    case 0:
      return Tuple().add(std::int64_t{0}).add(pick(3)).add("sys").pack();
    case 1:
      return Tuple().add(std::int64_t{2}).add(pick(3)).pack();
    default:
      return Tuple()
          .add(std::int64_t{1})
          .add(pick(2))
          .add(pick(5))
          .add(std::string(1, static_cast<char>('a' + pick(8))))
          .add(pick(40))
          .pack();
  }
}

// Reads of every kind against a model of the store overlaid with a transaction's own writes.
void expect_reads_as_model(Transaction& tr, const std::map<std::string, std::string>& seen,
                           std::mt19937& rng, int reads) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  for (int i = 0; i < reads; ++i) {
    std::string b, e;
    switch (pick(4)) {
      case 0:  // one subspace of one database, or one document in it
        std::tie(b, e) =
            Subspace(
                Tuple().add(std::int64_t{1}).add(std::int64_t{pick(2)}).add(std::int64_t{pick(5)}))
                .range(pick(2) ? Tuple() : Tuple().add(std::string(1, 'a' + pick(8))));
        break;
      case 1:  // a whole database
        std::tie(b, e) = Subspace(Tuple().add(std::int64_t{1}).add(std::int64_t{pick(2)})).range();
        break;
      case 2:
        b = std::string();
        e = std::string("\xff", 1);
        break;
      default:
        b = store_key(rng);
        e = store_key(rng);
        if (b > e) std::swap(b, e);
    }
    const int limit = pick(4);
    const Reverse rev = pick(2) ? Reverse::yes : Reverse::no;
    const std::vector<KeyValue> want = model_range(seen, b, e, limit, rev);
    auto got = tr.get_range(b, e, limit, rev, Snapshot::yes);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(*got, want) << "read " << i;
    // Selectors: reads that run to either end of the keyspace, across every family.
    const std::string from = store_key(rng);
    auto second = tr.get_key(KeySelector{from, false, 2}, Snapshot::yes);
    ASSERT_TRUE(second.ok());
    auto at = seen.lower_bound(from);
    if (at != seen.end()) ++at;
    ASSERT_EQ(*second, at == seen.end() ? std::string("\xff", 1) : at->first);
    auto before = tr.get_key(KeySelector::last_less_than(from), Snapshot::yes);
    ASSERT_TRUE(before.ok());
    auto lt = seen.lower_bound(from);
    ASSERT_EQ(*before, lt == seen.begin() ? std::string() : std::prev(lt)->first);
  }
  // Several ranges in one call (read through one iterator when the transaction has no writes).
  std::vector<KeyRange> ranges;
  std::string last;
  for (int i = 0; i < 5; ++i) {
    std::string b = store_key(rng), e = store_key(rng);
    if (b > e) std::swap(b, e);
    if (b < last) continue;
    ranges.push_back({b, e});
    last = e;
  }
  auto got = tr.get_ranges(ranges, 0, Snapshot::yes);
  ASSERT_TRUE(got.ok());
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    ASSERT_EQ((*got)[i], model_range(seen, ranges[i].begin, ranges[i].end));
  }
  for (const auto& [k, v] : seen) {
    auto p = tr.get(k, Snapshot::yes);
    ASSERT_TRUE(p.ok());
    ASSERT_EQ(*p, std::optional<std::string>(v));
  }
}

TEST(FamiliesStore, ReadsAcrossFamiliesAnswerAsOneKeyspace) {
  TempDir dir("fam");
  Options o = rule({1, 2, 4});
  o.family_hit_subspaces = {2};  // reads of absent keys in its last level go without a filter
  auto db = open(dir.path(), o);
  std::map<std::string, std::string> model;
  std::mt19937 rng(27112026);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  for (int round = 0; round < 60; ++round) {
    if (round == 20 || round == 40) {
      db.reset();
      db = open(dir.path(), o);  // what was written is in tables now
      if (round == 40) {
        ASSERT_TRUE(db->compact_files().ok());  // and in the last level
      }
    }
    auto tr = db->create_transaction();
    if (pick(3) == 0) expect_reads_as_model(tr, model, rng, 10);  // no writes of its own yet
    std::map<std::string, std::string> seen = model;
    for (int op = 0; op < 30; ++op) {
      const std::string k = store_key(rng);
      switch (pick(8)) {
        case 0:
          tr.clear(k);
          seen.erase(k);
          break;
        case 1: {  // a range clear: one document's keys, or (rarely) any two keys apart
          std::string b, e;
          if (pick(60) == 0) {
            b = k;
            e = store_key(rng);
            if (b > e) std::swap(b, e);
          } else {
            std::tie(b, e) = Subspace(Tuple()
                                          .add(std::int64_t{1})
                                          .add(std::int64_t{pick(2)})
                                          .add(std::int64_t{pick(5)}))
                                 .range(Tuple().add(std::string(1, 'a' + pick(8))));
          }
          tr.clear_range(b, e);
          seen.erase(seen.lower_bound(b), seen.lower_bound(e));
          break;
        }
        default: {
          const std::string v = "v" + std::to_string(round) + "." + std::to_string(op);
          tr.set(k, v);
          seen[k] = v;
        }
      }
    }
    expect_reads_as_model(tr, seen, rng, 10);
    ASSERT_TRUE(tr.commit().ok());
    model = std::move(seen);
  }
  auto tr = db->create_transaction();
  expect_reads_as_model(tr, model, rng, 50);
  EXPECT_GT(model.size(), 200u);
}

// A family named in family_hit_subspaces keeps no filter in its last level: the same keys take
// less memory in open tables, and every read still answers as before, absent keys included.
TEST(FamiliesStore, AHitFamilyKeepsNoFilterInItsLastLevel) {
  std::uint64_t readers[2] = {0, 0};
  for (int hits = 0; hits < 2; ++hits) {
    TempDir dir("hits");
    Options o = rule({1, 2});
    o.table_index_in_cache = false;  // the filters measured as what the open tables hold
    if (hits) o.family_hit_subspaces = {2};
    const auto key = [](int doc) {  // ids in key order: doc00000000, doc00000001, ...
      std::string id = std::to_string(doc);
      id = "doc" + std::string(8 - id.size(), '0') + id;
      return Tuple()
          .add(std::int64_t{1})
          .add(std::int64_t{0})
          .add(std::int64_t{2})
          .add(id)
          .add(std::int64_t{0})
          .pack();
    };
    const auto body = [](int doc) { return "body" + std::to_string(doc); };
    auto db = load_compacted(
        dir.path(), o, 40000, 4000, [&](int doc) { return key(2 * doc); }, body);
    ASSERT_TRUE(db);
    expect_even_keys_alone(*db, 40000, 97, key, body, true);
    readers[hits] = db->stats().table_readers_bytes;
  }
  // 40,000 document prefixes at about 7-10 bits each: 35-50 KB of filter.
  EXPECT_LT(readers[1] + 25'000, readers[0]) << readers[1] << " vs " << readers[0];
}

// Index blocks keep a full key only every 16 entries (the others keep what differs from the one
// before): this keyspace's keys share long prefixes (database, subspace, then ids in order), so
// open tables hold a fraction of the index they would with a full key per data block.
TEST(FamiliesStore, IndexBlocksStoreSharedKeyPrefixesOnce) {
  TempDir dir("index");
  Options o = rule({1, 2});
  o.family_hit_subspaces = {2};    // no filter in the last level: the readers hold the index alone
  o.table_index_in_cache = false;  // the index measured as what the open tables hold
  const std::string database(40, 'n');  // as long as a database's prefix and a document id
  const auto key = [&](int doc) {
    std::string id = std::to_string(doc);
    id = "document-" + std::string(8 - id.size(), '0') + id;
    return Tuple().add(std::int64_t{1}).add(database).add(std::int64_t{2}).add(id).pack();
  };
  const std::string body(100, 'b');
  auto db = load_compacted(dir.path(), o, 200000, 10000, key, [&](int) { return body; });
  ASSERT_TRUE(db);
  auto tr = db->create_transaction();
  for (int doc = 0; doc < 200000; doc += 101) {
    auto v = tr.get(key(doc), Snapshot::yes);
    ASSERT_TRUE(v.ok());
    ASSERT_EQ(*v, std::optional<std::string>(body));
  }
  // About 6,500 data blocks: with a full key in every index entry the open tables hold 456 KB,
  // with the shared prefixes stored once 60 KB.
  EXPECT_LT(db->stats().table_readers_bytes, 200'000u) << db->stats().table_readers_bytes;
}

// A hit family's data blocks carry a hash index of their keys (RocksDB's DataBlockHashIndex): a
// point read finds its key in a block by one probe. Its tables are written with it, the other
// families' without, and reads of keys present and absent (between two keys of one block, or past
// a block's last key) answer as before.
TEST(FamiliesStore, HitFamiliesDataBlocksCarryAHashIndex) {
  TempDir dir("hash");
  Options o = rule({1, 2});
  o.family_hit_subspaces = {2};
  const auto key = [](int doc) {
    std::string id = std::to_string(doc);
    id = std::string(8 - id.size(), '0') + id;
    return Tuple()
        .add(std::int64_t{1})
        .add(std::int64_t{0})
        .add(std::int64_t{doc % 3})
        .add(id)
        .pack();
  };
  const auto value = [](int doc) { return "v" + std::to_string(doc); };
  auto db = load_compacted(
      dir.path(), o, 60000, 6000, [&](int doc) { return key(2 * doc); }, value);
  ASSERT_TRUE(db);
  expect_even_keys_alone(*db, 60000, 7, key, value, false);
  db.reset();
  // What the store was opened with, as RocksDB wrote it down: the table options of each column
  // family (the meta family, the default one and one per subspace), in order.
  std::vector<std::string> families, index_types;
  for (const auto& f : std::filesystem::directory_iterator(dir.path())) {
    if (!f.path().filename().string().starts_with("OPTIONS-")) continue;
    // RocksDB keeps the last two options files; each is complete and they agree: one is enough.
    std::ifstream in(f.path());
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("[TableOptions/BlockBasedTable")) families.push_back(line);
      if (const auto at = line.find("data_block_index_type="); at != std::string::npos)
        index_types.push_back(line.substr(at + 22));
    }
    break;
  }
  ASSERT_EQ(families.size(), index_types.size());
  int hashed = 0;
  for (std::size_t i = 0; i < families.size(); ++i) {
    const bool hit = families[i].find("\"subspace-2\"") != std::string::npos;
    EXPECT_EQ(index_types[i], hit ? "kDataBlockBinaryAndHash" : "kDataBlockBinarySearch")
        << families[i];
    hashed += hit;
  }
  EXPECT_EQ(hashed, 1);
}

// Keys of 100,000 documents split between the families of subspaces 1 and 2, and a read of every
// data block a store of them has, through the block cache (every third document).
std::string split_key(int doc) {
  std::string id = std::to_string(doc);
  id = std::string(8 - id.size(), '0') + id;
  return Tuple()
      .add(std::int64_t{1})
      .add(std::int64_t{0})
      .add(std::int64_t{doc % 2 + 1})
      .add(id)
      .pack();
}

void read_every_block(Database& db, const std::string& body) {
  auto tr = db.create_transaction();
  for (int doc = 0; doc < 100000; doc += 3) {
    auto v = tr.get(split_key(doc), Snapshot::yes);
    ASSERT_TRUE(v.ok());
    ASSERT_EQ(*v, std::optional<std::string>(body));
  }
}

// Held beside the cache (table_index_in_cache = false), the tables' index and filter blocks are
// charged to it: the data blocks it keeps make room for them, so the two together stay within
// block_cache_bytes.
TEST(FamiliesStore, TableReadersShareTheBlockCacheBound) {
  TempDir dir("charge");
  Options o = rule({1, 2});
  o.block_cache_bytes = 1u << 20;
  o.table_index_in_cache = false;
  const std::string body(100, 'b');
  auto db = load_compacted(dir.path(), o, 100000, 5000, split_key, [&](int) { return body; });
  ASSERT_TRUE(db);
  // Open, the tables' readers are charged before any block is read.
  const StoreStats opened = db->stats();
  EXPECT_GT(opened.table_readers_bytes, 100'000u);
  EXPECT_GE(opened.block_cache_usage_bytes, opened.table_readers_bytes);
  read_every_block(*db, body);
  const StoreStats s = db->stats();
  // About 12 MB of data blocks read; index and filters of 100,000 keys: a few hundred KB. (The
  // memtables are charged to the cache too: here their filters alone take more than 1 MiB.)
  EXPECT_LE(s.block_cache_usage_bytes - s.memtable_reserved_bytes, (1u << 20) + (256u << 10));
  EXPECT_LE(s.block_cache_bytes + s.table_readers_bytes, (1u << 20) + (256u << 10))
      << s.block_cache_bytes << " + " << s.table_readers_bytes;
}

// The memtables are charged to the block cache: as writes fill them, the cache evicts blocks to
// make room, so the cached blocks and the memtables together stay within block_cache_bytes.
TEST(FamiliesStore, MemtablesShareTheBlockCacheBound) {
  TempDir dir("memtables");
  Options o = rule({1, 2});
  o.block_cache_bytes = 4u << 20;
  o.write_buffer_bytes = 2u << 20;  // memtables of 1 MiB: the writes below flush none
  const std::string body(100, 'b');
  auto db = load_compacted(dir.path(), o, 100000, 5000, split_key, [&](int) { return body; });
  ASSERT_TRUE(db);
  read_every_block(*db, body);
  const StoreStats full = db->stats();
  EXPECT_GT(full.block_cache_bytes, 3u << 20);  // about 12 MB of blocks read through 4 MiB
  // About 600 KB of new keys, into memtables of both families.
  const std::string other(100, 'n');
  for (int first = 100000; first < 104000; first += 1000) {
    auto tr = db->create_transaction();
    for (int doc = first; doc < first + 1000; ++doc) tr.set(split_key(doc), other);
    ASSERT_TRUE(tr.commit().ok());
  }
  read_every_block(*db, body);
  const StoreStats s = db->stats();
  EXPECT_GT(s.memtable_bytes, full.memtable_bytes + 400'000u);
  EXPECT_GE(s.memtable_reserved_bytes + (256u << 10), s.memtable_bytes)
      << s.memtable_reserved_bytes << " reserved for " << s.memtable_bytes;
  EXPECT_LE(s.block_cache_usage_bytes, (4u << 20) + (256u << 10));
  EXPECT_LE(s.block_cache_bytes + s.memtable_reserved_bytes, (4u << 20) + (256u << 10))
      << s.block_cache_bytes << " + " << s.memtable_reserved_bytes;
}

// Level 0 waits for 8 tables before it compacts into the level below, except in a family named
// in family_ordered_subspaces, which compacts at 4: six flushes of one family leave six level-0
// tables, or fewer than four once the ordered family's compaction is done.
TEST(FamiliesStore, OrderedFamiliesCompactLevelZeroSooner) {
  for (const bool ordered : {false, true}) {
    TempDir dir(ordered ? "ordered" : "unordered");
    Options o = rule({1, 2});
    o.write_buffer_bytes = 1u << 20;  // a flush every half MiB of writes
    if (ordered) o.family_ordered_subspaces = {2};
    auto db = open(dir.path(), o);
    ASSERT_TRUE(db);
    const std::string body(1000, 'b');
    int doc = 0;
    std::uint64_t flushes = 0;
    // Writes in order until the family has flushed six times (its level-0 tables, plus those
    // compaction has taken away, which only the ordered family's may have).
    for (int round = 0; round < 400 && flushes < 6; ++round) {
      auto tr = db->create_transaction();
      for (int i = 0; i < 100; ++i, ++doc) {
        char id[16];
        std::snprintf(id, sizeof id, "d%08d", doc);
        tr.set(
            Tuple().add(std::int64_t{1}).add(std::int64_t{0}).add(std::int64_t{2}).add(id).pack(),
            body);
      }
      ASSERT_TRUE(tr.commit().ok());
      flushes = std::max(flushes, db->stats().level0_tables);
      if (ordered && flushes >= 4) break;
    }
    // Background work settles: a flush in flight lands, a compaction it starts finishes.
    std::uint64_t tables = db->stats().level0_tables;
    for (int i = 0; i < 100; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      tables = db->stats().level0_tables;
      if (ordered ? tables < 4 : tables >= 6) break;
    }
    if (ordered) {
      EXPECT_LT(tables, 4u);
    } else {
      EXPECT_GE(tables, 6u);
      EXPECT_LT(tables, 8u);
    }
  }
}

TEST(FamiliesStore, ReopeningUnderAnotherRuleMovesEveryKey) {
  TempDir dir("fam");
  std::map<std::string, std::string> model;
  std::mt19937 rng(112026);
  auto write = [&](Database& db, int round) {
    auto tr = db.create_transaction();
    for (int i = 0; i < 400; ++i) {
      const std::string k = store_key(rng);
      const std::string v = "r" + std::to_string(round) + "." + std::to_string(i);
      tr.set(k, v);
      model[k] = v;
    }
    ASSERT_TRUE(tr.commit().ok());
  };
  const std::vector<std::vector<std::int64_t>> rules = {{}, {1, 2, 3, 4}, {2, 9}, {}, {4}};
  const std::vector<std::set<std::string>> families = {
      {"default", "meta"},
      {"default", "meta", "subspace-1", "subspace-2", "subspace-3", "subspace-4"},
      {"default", "meta", "subspace-2", "subspace-9"},
      {"default", "meta"},
      {"default", "meta", "subspace-4"}};
  for (std::size_t i = 0; i < rules.size(); ++i) {
    auto db = open(dir.path(), rule(rules[i]));
    ASSERT_TRUE(db);
    {
      auto tr = db->create_transaction();
      expect_reads_as_model(tr, model, rng, 20);
    }
    write(*db, static_cast<int>(i));
    {
      auto after = db->create_transaction();
      expect_reads_as_model(after, model, rng, 5);
    }
    db.reset();
    EXPECT_EQ(column_families(dir.path()), families[i]) << i;
  }
  EXPECT_GT(model.size(), 1000u);
}

}  // namespace
}  // namespace chaise::storage
