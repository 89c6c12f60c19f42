// core::ActiveTasks: a task lives as long as a handle to it, workers on one thing share one task,
// and the list shows CouchDB's members with the progress so far.
#include "core/db/active_tasks.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace chaise::core {
namespace {

TEST(ActiveTasksTest, ATaskLivesAsLongAsItsHandles) {
  ActiveTasks tasks;
  EXPECT_TRUE(tasks.list("n").empty());
  {
    auto a = tasks.join("k", {{"type", "indexer"}, {"database", "db"}}, 10);
    auto b = tasks.join("k", {{"type", "indexer"}, {"database", "other"}}, 99);
    EXPECT_EQ(a, b);  // the second worker joins the first's task
    a->add_done(3);
    b->add_done(2);
    const auto list = tasks.list("nonode@nohost");
    ASSERT_EQ(list.size(), 1u);
    const auto& t = list[0];
    EXPECT_EQ(t["type"], "indexer");
    EXPECT_EQ(t["database"], "db");
    EXPECT_EQ(t["node"], "nonode@nohost");
    EXPECT_EQ(t["changes_done"], 5);
    EXPECT_EQ(t["total_changes"], 10);
    EXPECT_EQ(t["progress"], 50);
    EXPECT_EQ(t["pid"], t["indexer_pid"]);
    EXPECT_GT(t["started_on"].get<std::int64_t>(), 1'700'000'000);
    EXPECT_GE(t["updated_on"].get<std::int64_t>(), t["started_on"].get<std::int64_t>());
    a.reset();
    EXPECT_EQ(tasks.list("n").size(), 1u);  // b still works on it
  }
  EXPECT_TRUE(tasks.list("n").empty());
}

TEST(ActiveTasksTest, DoneNeverPassesTheTotalAndTasksListInStartOrder) {
  ActiveTasks tasks;
  auto first = tasks.join("1", {{"type", "database_compaction"}}, 4);
  auto second = tasks.join("2", {{"type", "indexer"}}, 0);
  first->add_done(6);
  const auto list = tasks.list("n");
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["type"], "database_compaction");
  EXPECT_EQ(list[0]["total_changes"], 6);
  EXPECT_EQ(list[0]["progress"], 100);
  EXPECT_FALSE(list[0].contains("indexer_pid"));
  EXPECT_EQ(list[1]["progress"], 0);
  EXPECT_NE(list[0]["pid"], list[1]["pid"]);
}

TEST(ActiveTasksTest, HandlesComeAndGoFromManyThreads) {
  ActiveTasks tasks;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&tasks, t] {
      for (int i = 0; i < 2000; ++i) {
        auto h = tasks.join("k" + std::to_string(i % 3), {{"type", "indexer"}}, 5);
        h->add_done(1);
        if (i % 100 == t) (void)tasks.list("n");
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_TRUE(tasks.list("n").empty());
}

}  // namespace
}  // namespace chaise::core
