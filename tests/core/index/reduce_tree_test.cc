// The reduce tree against brute force: random rows added and removed over many transactions,
// every reduction of random ranges equal to reducing the rows directly, and the stored nodes
// independent of the order the rows arrived in.
#include "core/index/reduce_tree.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/query/collation.h"
#include "storage/database.h"
#include "storage/tuple.h"
#include "storage/write_map.h"

namespace chaise::core {
namespace {

using storage::Status;
using storage::Tuple;
using Json = nlohmann::ordered_json;

class ReduceTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "chaise-rtree-XXXXXX").string();
    dir_ = mkdtemp(tmpl.data());
    storage::Options o;
    o.fsync = false;
    store_ = std::move(storage::Database::open(dir_, o).value());
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A row as the view index stores it: key [k / 10, k], value v, emitted by doc "d<id>".
  static std::pair<std::string, std::string> row(int k, int id, int v) {
    Json key = Json::array({k / 10, k});
    Json value = v;
    return {Tuple()
                .add_bytes(collation_key(key))
                .add("d" + std::to_string(id))
                .add_bytes(collation_key(value))
                .add(std::int64_t{0})
                .pack(),
            key.dump() + "\n" + value.dump()};
  }

  // Applies `changes` (suffix -> value, or nullopt to remove) in one transaction.
  void apply(const storage::Subspace& rows, const storage::Subspace& nodes, const Reducer& red,
             const std::map<std::string, std::optional<std::string>>& changes) {
    ASSERT_TRUE(store_
                    ->run([&](storage::Transaction& tr) -> Status {
                      std::map<std::string, bool> touched;
                      for (const auto& [s, v] : changes) {
                        if (v)
                          tr.set(rows.key() + s, *v);
                        else
                          tr.clear(rows.key() + s);
                        touched[s] = v.has_value();
                      }
                      ReduceTree tree(rows, nodes, red);
                      return tree.update(tr, touched);
                    })
                    .ok());
  }

  // Brute force: reduce the rows of [b, e) directly.
  std::string direct(const storage::Subspace& rows, const Reducer& red, const std::string& b,
                     const std::string& e) {
    auto tr = store_->create_transaction();
    auto kvs = tr.get_range(b, e, 0);
    EXPECT_TRUE(kvs.ok());
    std::vector<LeafRow> leaf;
    for (const auto& kv : *kvs) {
      auto t = rows.unpack(kv.key);
      const auto nl = kv.value.find('\n');
      leaf.push_back(LeafRow{kv.value.substr(0, nl), *t->get_string(1), kv.value.substr(nl + 1),
                             *t->get_bytes(0)});
    }
    return red.reduce(leaf);
  }

  std::string via_tree(const storage::Subspace& rows, const storage::Subspace& nodes,
                       const Reducer& red, const std::string& b, const std::string& e) {
    auto tr = store_->create_transaction();
    ReduceTree tree(rows, nodes, red);
    auto r = tree.aggregate(tr, b, e);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : "";
  }

  std::map<std::string, std::string> dump(const storage::Subspace& space) {
    auto tr = store_->create_transaction();
    auto [b, e] = space.range();
    auto kvs = tr.get_range(b, e, 0);
    std::map<std::string, std::string> out;
    for (const auto& kv : *kvs) out[kv.key.substr(space.key().size())] = kv.value;
    return out;
  }

  std::string dir_;
  std::unique_ptr<storage::Database> store_;
};

TEST_F(ReduceTreeTest, EveryRangeReducesAsTheRowsDoThroughAddsAndRemoves) {
  const storage::Subspace rows(Tuple().add("rows"));
  const storage::Subspace nodes(Tuple().add("nodes"));
  for (const std::string fn : {"_sum", "_count", "_stats", "_first", "_last"}) {
    SCOPED_TRACE(fn);
    Reducer red(fn, nullptr);
    const storage::Subspace r = rows.sub(Tuple().add(fn));
    const storage::Subspace n = nodes.sub(Tuple().add(fn));
    std::mt19937 rng(7);
    std::map<std::string, std::string> live;  // suffix -> value
    for (int round = 0; round < 12; ++round) {
      std::map<std::string, std::optional<std::string>> changes;
      for (int i = 0; i < 400; ++i) {
        auto [s, v] = row(static_cast<int>(rng() % 5000), static_cast<int>(rng() % 50),
                          static_cast<int>(rng() % 100) - 20);
        changes[s] = v;
        live[s] = v;
      }
      // Remove a quarter of the live rows (some added in this very round).
      for (auto it = live.begin(); it != live.end();) {
        if (rng() % 4 == 0) {
          changes[it->first] = std::nullopt;
          it = live.erase(it);
        } else {
          ++it;
        }
      }
      apply(r, n, red, changes);
    }
    ASSERT_GT(live.size(), 1000u);
    auto [all_b, all_e] = r.range();
    EXPECT_EQ(via_tree(r, n, red, all_b, all_e), direct(r, red, all_b, all_e));
    std::vector<std::string> keys;
    for (const auto& [s, v] : live) keys.push_back(s);
    for (int q = 0; q < 300; ++q) {
      // Bounds on rows, between rows, and at the ends.
      auto bound = [&]() -> std::string {
        switch (rng() % 4) {
          case 0:
            return all_b;
          case 1:
            return all_e;
          case 2:
            return r.key() + keys[rng() % keys.size()];
          default:
            return storage::key_after(r.key() + keys[rng() % keys.size()]);
        }
      };
      std::string b = bound(), e = bound();
      if (e < b) std::swap(b, e);
      ASSERT_EQ(via_tree(r, n, red, b, e), direct(r, red, b, e)) << q;
    }
  }
}

TEST_F(ReduceTreeTest, NodesDependOnlyOnTheRowsNotOnTheirOrder) {
  Reducer red("_sum", nullptr);
  std::vector<std::pair<std::string, std::string>> all;
  for (int i = 0; i < 3000; ++i) all.push_back(row(i * 7 % 3001, i % 13, i % 17));
  const storage::Subspace r1(Tuple().add("r1")), n1(Tuple().add("n1"));
  const storage::Subspace r2(Tuple().add("r2")), n2(Tuple().add("n2"));
  // One order in batches of 500; the reverse order in batches of 37.
  for (std::size_t b = 0; b < all.size(); b += 500) {
    std::map<std::string, std::optional<std::string>> c;
    for (std::size_t i = b; i < std::min(all.size(), b + 500); ++i) c[all[i].first] = all[i].second;
    apply(r1, n1, red, c);
  }
  for (std::size_t b = 0; b < all.size(); b += 37) {
    std::map<std::string, std::optional<std::string>> c;
    for (std::size_t i = b; i < std::min(all.size(), b + 37); ++i)
      c[all[all.size() - 1 - i].first] = all[all.size() - 1 - i].second;
    apply(r2, n2, red, c);
  }
  const auto d1 = dump(n1), d2 = dump(n2);
  EXPECT_EQ(d1, d2);
  EXPECT_GT(d1.size(), 3000u / 16);  // level-1 nodes exist: the tree is used
  // Removing everything leaves empty heads only.
  std::map<std::string, std::optional<std::string>> c;
  for (const auto& [s, v] : all) c[s] = std::nullopt;
  apply(r1, n1, red, c);
  for (const auto& [k, v] : dump(n1)) EXPECT_EQ(v, "\x7f") << "a node outlived its row";
  auto [b, e] = r1.range();
  EXPECT_EQ(via_tree(r1, n1, red, b, e), "");
}

TEST_F(ReduceTreeTest, LevelsAreGeometric) {
  std::vector<int> at(kReduceTreeLevels + 1, 0);
  for (int i = 0; i < 100'000; ++i) at[ReduceTree::level_of(row(i, i, 0).first)]++;
  EXPECT_NEAR(at[0], 100'000 * 15 / 16, 1000);
  EXPECT_NEAR(at[1], 100'000 * 15 / 256, 400);
  EXPECT_GT(at[2], 100);
}

}  // namespace
}  // namespace chaise::core
