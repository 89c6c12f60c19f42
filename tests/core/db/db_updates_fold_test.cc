// The _db_updates log and its folding (core/db/db_updates.h): recorders that fold the same events
// conflict, so each event becomes one row; a fold does not conflict with writers appending to the
// log meanwhile.
#include <gtest/gtest.h>

#include <string>

#include "core/db/db_updates.h"
#include "tests/core/one_db_store.h"

namespace chaise::core {
namespace {

class DbUpdatesFoldTest : public OneDbStore {
 protected:
  void note(std::string_view name) {
    ASSERT_TRUE(store_
                    ->run([&](Transaction& tr) -> storage::Status {
                      note_db_event(tr, name, DbEvent::updated);
                      return {};
                    })
                    .ok());
  }
  std::vector<DbUpdateRow> rows() {
    auto tr = store_->create_transaction();
    return read_db_updates(tr, Sequence{}, 100, false).value();
  }
};

TEST_F(DbUpdatesFoldTest, AFoldConflictsWithAnotherFoldNotWithNewEvents) {
  note("a");
  note("b");
  std::string from;
  auto fold = store_->create_transaction();
  ASSERT_EQ(fold_db_events(fold, 100, from).value(), 3u);  // with the fixture's "db" created
  note("c");                                               // appended after the fold read the log
  ASSERT_TRUE(fold.commit().ok());
  ASSERT_EQ(rows().size(), 3u);

  // Two recorders fold the same event: one commits, the other is refused.
  std::string from1 = from, from2 = from;
  auto t1 = store_->create_transaction();
  auto t2 = store_->create_transaction();
  ASSERT_EQ(fold_db_events(t1, 100, from1).value(), 1u);
  ASSERT_EQ(fold_db_events(t2, 100, from2).value(), 1u);
  ASSERT_TRUE(t1.commit().ok());
  auto second = t2.commit();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error(), storage::Error::not_committed);
  const auto all = rows();
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[3].db_name, "c");

  // Nothing is left to fold.
  auto t3 = store_->create_transaction();
  EXPECT_EQ(fold_db_events(t3, 100, from1).value(), 0u);
}

}  // namespace
}  // namespace chaise::core
