// RFC 004: shard maps, routing, resharding under concurrent writes, per-shard and merged feeds.
#include "core/db/shards.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/batch/doc_batches.h"
#include "core/docs/documents.h"
#include "core/index/cursors.h"
#include "storage/database.h"

namespace chaise::core {
namespace {

using Json = nlohmann::json;
using storage::Status;

class ShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "chaise-shards-XXXXXX").string();
    dir_ = mkdtemp(tmpl.data());
    storage::Options o;
    o.fsync = false;
    store_ = std::move(storage::Database::open(dir_, o).value());
    ASSERT_TRUE(store_
                    ->run([&](Transaction& tr) -> Status {
                      auto r = create_db(tr, "db", false, 1);
                      return r.ok() ? Status{} : Status(r.error());
                    })
                    .ok());
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  DbRef db() {
    auto tr = store_->create_transaction();
    return std::get<DbRef>(*open_db(tr, "db"));
  }
  void put(const std::string& id, int n) {
    DocWriteBatch::Item it;
    it.update.id = id;
    it.update.body = "{\"n\":" + std::to_string(n) + "}";
    DocWriteBatch batch("db", {it});
    while (batch.has_more()) {
      // Existing docs: read the winner to get its rev (interactive update).
      Status s = store_->run([&](Transaction& tr) -> Status {
        auto w = read_winner(tr, db(), id, storage::Snapshot::no);
        if (!w.ok()) return w.error();
        batch = DocWriteBatch("db", {[&] {
                                DocWriteBatch::Item x = it;
                                if (*w) x.update.base_rev = (*w)->branch.leaf;
                                return x;
                              }()});
        return batch(tr);
      });
      ASSERT_TRUE(s.ok()) << storage::error_name(s.error());
      batch.committed();
    }
  }
  std::vector<Json> feed(std::optional<std::int64_t> shard, Sequence since = {}) {
    ChangesQuery q;
    q.shard = shard;
    q.since = since;
    ChangesCursor c(db(), q);
    std::vector<std::string> rows;
    for (;;) {
      auto tr = store_->create_transaction();
      auto more = c.next_page(tr, 500, rows);
      EXPECT_TRUE(more.ok());
      if (!*more) break;
    }
    std::vector<Json> out;
    for (auto& r : rows) out.push_back(Json::parse(r));
    return out;
  }
  std::vector<ShardMap> maps() {
    auto tr = store_->create_transaction();
    return *read_shard_maps(tr, db(), storage::Snapshot::yes);
  }
  std::vector<std::int64_t> reshard_to(int n) {
    std::vector<std::int64_t> ids;
    EXPECT_TRUE(store_
                    ->run([&](Transaction& tr) -> Status {
                      auto r = reshard(tr, db(), n);
                      if (!r.ok()) return r.error();
                      if (failed(*r)) {
                        EXPECT_EQ(std::get<CouchError>(*r).status, 400);
                        return {};
                      }
                      ids = std::get<std::vector<std::int64_t>>(*r);
                      return {};
                    })
                    .ok());
    return ids;
  }

  std::string dir_;
  std::unique_ptr<storage::Database> store_;
};

TEST_F(ShardsTest, RoutingIsStableAndSpreads) {
  ShardMap m;
  m.shards = {1, 2, 3, 4};
  std::map<std::int64_t, int> counts;
  for (int i = 0; i < 4000; ++i) {
    std::string id = "doc" + std::to_string(i);
    EXPECT_EQ(route(m, id), route(m, id));
    counts[route(m, id)]++;
  }
  ASSERT_EQ(counts.size(), 4u);
  for (auto& [shard, n] : counts) EXPECT_GT(n, 500) << shard;  // roughly even
  // Consistent hashing: adding a shard moves only part of the keys.
  ShardMap five = m;
  five.shards.push_back(5);
  int moved = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string id = "doc" + std::to_string(i);
    if (route(m, id) != route(five, id)) ++moved;
  }
  EXPECT_LT(moved, 1600);
  DbRef part{"p", 1, true, 0, keyspace::DbSpace(1)};
  EXPECT_EQ(partition_key(part, "sensor1:reading9"), "sensor1");
  EXPECT_EQ(route(m, partition_key(part, "sensor1:a")), route(m, partition_key(part, "sensor1:b")));
}

TEST_F(ShardsTest, ConcurrentWritersWhileReshardingFromOneToFourToTwo) {
  constexpr int kWriters = 8, kWrites = 1250;  // 10,000 writes over 400 documents
  std::atomic<int> phase{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < kWrites; ++i) {
        put("d" + std::to_string((w * 131 + i * 7) % 400), i);
        if (w == 0 && i == kWrites / 3) phase = 1;
        if (w == 0 && i == 2 * kWrites / 3) phase = 2;
      }
    });
  }
  // Reshard 1 -> 4 -> 2 shards while the writers run: nothing lost, nothing duplicated.
  while (phase.load() < 1) std::this_thread::yield();
  EXPECT_EQ(reshard_to(4), (std::vector<std::int64_t>{1, 2, 3, 4}));
  while (phase.load() < 2) std::this_thread::yield();
  EXPECT_EQ(reshard_to(2), (std::vector<std::int64_t>{5, 6}));
  for (auto& t : threads) t.join();

  const auto merged = feed(std::nullopt);
  ASSERT_EQ(merged.size(), 400u);  // one entry per document, whatever shard it is in
  for (std::size_t i = 1; i < merged.size(); ++i)
    ASSERT_LT(*core::Sequence::parse(merged[i - 1]["seq"].get<std::string>()),
              *core::Sequence::parse(merged[i]["seq"].get<std::string>()));
  const auto all_maps = maps();
  ASSERT_EQ(all_maps.size(), 3u);
  EXPECT_TRUE(all_maps[0].tombstone && all_maps[1].tombstone);
  EXPECT_FALSE(all_maps[2].tombstone);
  // The union of the shard feeds is the merged feed; each entry sits in the shard its map routes
  // to, and no entry is in a shard of a map that was replaced before the entry's sequence.
  std::set<std::string> union_seqs;
  for (std::int64_t shard : all_shards(all_maps)) {
    for (const Json& row : feed(shard)) {
      const std::string seq = row["seq"];
      EXPECT_TRUE(union_seqs.insert(seq).second) << "duplicate " << seq;
      const ShardMap& m = map_for(all_maps, *Sequence::parse(seq));
      EXPECT_EQ(route(m, row["id"].get<std::string>()), shard) << row.dump();
    }
  }
  std::set<std::string> merged_seqs;
  // (The merged feed shows CouchDB's "N-" prefix; a shard's feed the bare form.)
  for (const Json& row : merged) {
    Sequence s = *Sequence::parse(row["seq"].get<std::string>());
    s.count = 0;
    merged_seqs.insert(s.str());
  }
  EXPECT_EQ(union_seqs, merged_seqs);
  // Each document's entry is in exactly one shard.
  std::map<std::string, int> per_doc;
  for (std::int64_t shard : all_shards(all_maps))
    for (const Json& row : feed(shard)) per_doc[row["id"].get<std::string>()]++;
  EXPECT_EQ(per_doc.size(), 400u);
  for (auto& [id, n] : per_doc) EXPECT_EQ(n, 1) << id;
}

TEST_F(ShardsTest, MapForFindsTheTopologyOnEachSideOfAReshard) {
  put("a", 1);
  const Sequence before = *Sequence::parse(feed(std::nullopt).back()["seq"].get<std::string>());
  reshard_to(4);
  put("b", 2);
  const Sequence after = *Sequence::parse(feed(std::nullopt).back()["seq"].get<std::string>());
  auto m = maps();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(map_for(m, before).shards, std::vector<std::int64_t>{0});
  EXPECT_EQ(map_for(m, after).shards, (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_TRUE(before < m[1].start && m[1].start < after);
  // A consumer of the replaced shard 0 is told the topology changed at its end.
  ChangesQuery q;
  q.shard = 0;
  ChangesCursor c(db(), q);
  std::vector<std::string> rows;
  auto tr = store_->create_transaction();
  while (*c.next_page(tr, 100, rows)) {
  }
  EXPECT_EQ(rows.size(), 1u);
  EXPECT_TRUE(c.topology_changed());
  // Updating "a" moves its entry from shard 0 to its shard in the new map.
  put("a", 3);
  EXPECT_TRUE(feed(0).empty());
  EXPECT_EQ(feed(std::nullopt).size(), 2u);
  EXPECT_EQ(reshard_to(0).size(), 0u);  // rejected: a count of 0
}

}  // namespace
}  // namespace chaise::core
