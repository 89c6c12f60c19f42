// Building a unique index in steps (UniqueIndexBuild) and the claim a build holds in the store,
// against a real store.
#include "core/index/unique_index.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/batch/doc_batches.h"
#include "core/db/idempotency.h"
#include "core/db/keyspace.h"
#include "storage/database.h"
#include "tests/core/one_db_store.h"

namespace chaise::core {
namespace {

using storage::Database;
using storage::Status;

class UniqueIndexBuildTest : public OneDbStore {
 protected:
  // Documents d0000.. with "email": "e<i>", except that d0007 and d1100 both hold "e7".
  void load(int n) {
    std::vector<DocWriteBatch::Item> items;
    for (int i = 0; i < n; ++i) {
      DocWriteBatch::Item it;
      char id[16];
      std::snprintf(id, sizeof id, "d%04d", i);
      it.update.id = id;
      it.update.body = "{\"email\":\"e" + std::to_string(i == 1100 ? 7 : i) + "\"}";
      items.push_back(std::move(it));
    }
    DocWriteBatch batch("db", std::move(items));
    while (batch.has_more()) {
      ASSERT_TRUE(store_->run([&](Transaction& tr) { return batch(tr); }).ok());
      batch.committed();
    }
  }

  static UniqueIndexDef email_index() {
    OrderedJson map = OrderedJson::object();
    map["fields"] = OrderedJson{{"email", "asc"}};
    return UniqueIndexDef{unique_index_id("_design/u", "email", map), "_design/u", "email", map,
                          false};
  }
};

TEST_F(UniqueIndexBuildTest, StepsResumeFromTheLastCommitAndFindTheSharedKey) {
  load(1200);  // three steps of kUniqueBuildDocsPerStep
  UniqueIndexBuild build(db(), email_index());
  int steps = 0;
  while (!build.done()) {
    ASSERT_LT(steps, 10);
    // Every step runs twice, as a retried attempt does: the second attempt starts again from the
    // committed cursor, so no document is skipped and no duplicate is counted twice.
    for (int attempt = 0; attempt < 2; ++attempt) {
      auto tr = store_->create_transaction();
      ASSERT_TRUE(build(tr).ok());
      if (attempt == 1) {
        ASSERT_TRUE(tr.commit().ok());
      }
    }
    build.committed();
    ++steps;
  }
  EXPECT_EQ(steps, 3);
  ASSERT_EQ(build.duplicates().size(), 1u);
  EXPECT_EQ(build.duplicates()[0].key, OrderedJson::array({"e7"}));
  EXPECT_EQ(build.duplicates()[0].ids, (std::vector<std::string>{"d0007", "d1100"}));
}

TEST_F(UniqueIndexBuildTest, WithoutSharedKeysTheBuildFindsNone) {
  load(600);  // d1100 is not loaded, so every key is held once
  UniqueIndexBuild build(db(), email_index());
  while (!build.done()) {
    ASSERT_TRUE(store_->run([&](Transaction& tr) { return build(tr); }).ok());
    build.committed();
  }
  EXPECT_TRUE(build.duplicates().empty());
}

// Two edits claim one key, interleaved by hand: the second commits between the first's check and
// its commit. The first's check read the key's range with conflict, so its commit is refused
// (not_committed: retried, it then sees the holder) and never a second holder of the key.
TEST_F(UniqueIndexBuildTest, TheLaterOfTwoInterleavedClaimsOfOneKeyDoesNotCommit) {
  UniqueIndexDef def = email_index();
  def.ready = true;
  const std::string body = R"({"email":"same"})";
  auto claim = [&](Transaction& tr, const char* id) {
    UniqueIndexes list{def};
    auto refused = unique_check(tr, db(), list, id, &body);
    EXPECT_TRUE(refused.ok() && !*refused);
    EXPECT_TRUE(unique_write(tr, db(), list, id, &body, false).ok());
  };
  auto first = store_->create_transaction();
  claim(first, "a");  // checked: nobody holds the key yet
  auto second = store_->create_transaction();
  claim(second, "b");
  ASSERT_TRUE(second.commit().ok());
  auto committed = first.commit();
  ASSERT_FALSE(committed.ok());
  EXPECT_EQ(committed.error(), storage::Error::not_committed);
  // Retried, the first edit is refused: "b" holds the key.
  auto retry = store_->create_transaction();
  UniqueIndexes list{def};
  auto refused = unique_check(retry, db(), list, "a", &body);
  ASSERT_TRUE(refused.ok() && *refused);
  EXPECT_EQ(refused->value().reason, "unique constraint email violated by b");
}

TEST_F(UniqueIndexBuildTest, OneBuildPerIndexUntilItsClaimIsDroppedOrLapses) {
  const std::int64_t t0 = 1'000'000;
  auto run = [&](auto&& body) {
    StorageResult<bool> out = false;
    EXPECT_TRUE(store_
                    ->run([&](Transaction& tr) -> Status {
                      out = body(tr);
                      return out.ok() ? Status{} : Status(out.error());
                    })
                    .ok());
    return out.ok() && *out;
  };
  auto take = [&](const std::string& id, std::int64_t now) {
    return run([&](Transaction& tr) { return take_unique_claim(tr, db(), id, now); });
  };
  auto held = [&](const std::string& id, std::int64_t now) {
    return run([&](Transaction& tr) { return unique_claim_held(tr, db(), id, now); });
  };
  EXPECT_FALSE(held("ix", t0));
  ASSERT_TRUE(take("ix", t0));
  EXPECT_TRUE(held("ix", t0 + 1));
  EXPECT_FALSE(take("ix", t0 + 1));  // a second build of the same index is refused
  EXPECT_TRUE(take("other", t0));
  // A build's steps write its claim again (at the wall clock's now), so it holds while they run.
  UniqueIndexBuild step(db(), email_index());
  ASSERT_TRUE(store_->run([&](Transaction& tr) { return step(tr); }).ok());
  EXPECT_TRUE(held(email_index().id, idem_now_ms()));
  // Dropped: free at once.
  ASSERT_TRUE(store_->run([&](Transaction& tr) { return drop_unique_claim(tr, db(), "ix"); }).ok());
  EXPECT_FALSE(held("ix", t0 + 2));
  EXPECT_TRUE(take("ix", t0 + 2));
  // Not written again for kUniqueClaimMs (its server died): lapsed.
  EXPECT_TRUE(held("other", t0 + kUniqueClaimMs - 1));
  EXPECT_FALSE(held("other", t0 + kUniqueClaimMs));
  EXPECT_TRUE(take("other", t0 + kUniqueClaimMs));
}

}  // namespace
}  // namespace chaise::core
