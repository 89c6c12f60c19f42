// Idempotency records (core/db/idempotency.h) and DocWriteBatch's use of them: the answer commits
// with the write, a retry replays it and writes nothing, commit_unknown_result keeps one answer,
// and records expire in order.
#include "core/db/idempotency.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include "core/batch/doc_batches.h"
#include "core/db/keyspace.h"
#include "core/docs/documents.h"
#include "storage/database.h"
#include "tests/core/one_db_store.h"

namespace chaise::core {
namespace {

using storage::Database;
using storage::Status;
using storage::Transaction;

class IdempotencyTest : public OneDbStore {
 protected:
  std::int64_t counter(std::string_view name) {
    auto tr = store_->create_transaction();
    return *read_counter(tr, db(), name);
  }
  static DocWriteBatch::Item edit(std::string id, std::string body) {
    DocWriteBatch::Item it;
    it.update.id = std::move(id);
    it.update.body = std::move(body);
    return it;
  }
  // Runs a one-document batch under `key` with fingerprint `fp`; the answer names the new rev and
  // how many times render ran.
  struct Run {
    std::optional<StoredResponse> rendered, replayed;
    bool mismatch = false;
    int renders = 0;
  };
  Run run(const std::string& id, const std::string& key, const std::string& fp) {
    std::vector<DocWriteBatch::Item> items;
    items.push_back(edit(id, R"({"v":1})"));
    DocWriteBatch batch("db", std::move(items));
    Run out;
    EXPECT_TRUE(batch.fits_one_round());
    batch.set_idempotency(IdemRequest{key, fp, 60'000}, [&](const DocWriteBatch& b) {
      ++out.renders;
      StoredResponse r;
      r.status = 201;
      r.headers = {{"ETag", "\"x\""}, {"Location", "/db/" + id}};
      const auto& res = *b.results()[0];
      r.body =
          failed(res) ? std::get<CouchError>(res).error : std::get<UpdateResult>(res).rev.str();
      return r;
    });
    while (batch.has_more()) {
      Status s = store_->run([&](Transaction& tr) { return batch(tr); });
      EXPECT_TRUE(s.ok()) << storage::error_name(s.error());
      batch.committed();
    }
    out.rendered = batch.rendered();
    out.replayed = batch.replayed();
    out.mismatch = batch.idem_mismatch();
    return out;
  }
};

TEST_F(IdempotencyTest, AnswerCommitsWithTheWriteAndARetryReplaysItWithoutWriting) {
  Run first = run("a", "k1", "fp");
  ASSERT_TRUE(first.rendered);
  EXPECT_FALSE(first.replayed);
  EXPECT_EQ(first.rendered->status, 201);
  EXPECT_TRUE(first.rendered->body.starts_with("1-"));
  const std::int64_t changes = counter(keyspace::kChangeCount);

  // The same document id again would be a 409 conflict if it were executed: a replay is not.
  Run retry = run("a", "k1", "fp");
  ASSERT_TRUE(retry.replayed);
  EXPECT_EQ(retry.renders, 0);
  EXPECT_EQ(*retry.replayed, *first.rendered);
  EXPECT_EQ(counter(keyspace::kChangeCount), changes);
  EXPECT_EQ(counter(keyspace::kDocCount), 1);

  // The key with another request: refused, nothing written.
  Run other = run("b", "k1", "another fingerprint");
  EXPECT_TRUE(other.mismatch);
  EXPECT_FALSE(other.rendered);
  EXPECT_EQ(counter(keyspace::kDocCount), 1);

  // Keys are per request: another key executes (and here conflicts, which is its stored answer).
  Run conflict = run("a", "k2", "fp");
  ASSERT_TRUE(conflict.rendered);
  EXPECT_EQ(conflict.rendered->body, "conflict");
  EXPECT_EQ(run("a", "k2", "fp").replayed->body, "conflict");
}

TEST_F(IdempotencyTest, UnknownCommitResultsLeaveOneDocumentAndOneAnswer) {
  for (auto fault : {storage::CommitFault::unknown_result_applied,
                     storage::CommitFault::unknown_result_not_applied}) {
    const std::string id =
        fault == storage::CommitFault::unknown_result_applied ? "applied" : "dropped";
    std::atomic<int> n{0};
    store_->set_commit_fault_hook([&] { return n++ == 0 ? fault : storage::CommitFault::none; });
    Run first = run(id, "key-" + id, "fp");
    store_->set_commit_fault_hook(nullptr);
    ASSERT_TRUE(first.rendered) << id;
    EXPECT_TRUE(first.rendered->body.starts_with("1-")) << id;
    // A client retry after the lost answer gets the answer the committed attempt stored.
    Run retry = run(id, "key-" + id, "fp");
    ASSERT_TRUE(retry.replayed) << id;
    EXPECT_EQ(*retry.replayed, *first.rendered) << id;
  }
  EXPECT_EQ(counter(keyspace::kDocCount), 2);
}

TEST_F(IdempotencyTest, LargeAnswersAreChunkedAndRecordsExpireInOrder) {
  const DbRef d = db();
  StoredResponse big;
  big.status = 201;
  big.headers = {{"Content-Type", "application/json"}};
  big.body = std::string(250'000, 'x');
  big.body[123'456] = 'y';
  auto store = [&](const std::string& key, std::int64_t now, std::int64_t ttl) {
    Status s = store_->run([&](Transaction& tr) -> Status {
      auto found = idem_lookup(tr, d, IdemRequest{key, "fp", ttl}, now, storage::Snapshot::no);
      if (!found.ok()) return found.error();
      auto r = idem_store(tr, d, IdemRequest{key, "fp", ttl}, now, big, found->expired);
      return r.ok() ? Status{} : Status(r.error());
    });
    ASSERT_TRUE(s.ok());
  };
  auto lookup = [&](const std::string& key, std::int64_t now) {
    auto tr = store_->create_transaction();
    auto r = idem_lookup(tr, d, IdemRequest{key, "fp", 0}, now, storage::Snapshot::yes);
    EXPECT_TRUE(r.ok());
    return *r;
  };
  auto expire = [&](std::int64_t now) {
    std::size_t handled = 0;
    Status s = store_->run([&](Transaction& tr) -> Status {
      auto r = idem_expire_step(tr, now, 100);
      if (!r.ok()) return r.error();
      handled = *r;
      return {};
    });
    EXPECT_TRUE(s.ok());
    return handled;
  };
  store("early", 1'000, 10);  // expires at 1010
  store("late", 1'000, 20);   // 1020
  IdemLookup found = lookup("early", 1'005);
  ASSERT_EQ(found.state, IdemState::replay);
  EXPECT_EQ(found.response, big);
  EXPECT_EQ(lookup("early", 1'010).state, IdemState::absent);  // expired reads as absent

  EXPECT_EQ(expire(1'009), 0u);
  EXPECT_EQ(expire(1'010), 1u);
  EXPECT_EQ(lookup("early", 1'000).state, IdemState::absent);  // cleared, not just expired
  EXPECT_EQ(lookup("late", 1'000).state, IdemState::replay);

  // "late" is executed again after it expired: its old index entry must not clear the new record.
  store("late", 1'030, 100);     // expires at 1130
  EXPECT_EQ(expire(1'100), 1u);  // the stale entry (1020) goes alone
  EXPECT_EQ(lookup("late", 1'100).state, IdemState::replay);
  EXPECT_EQ(expire(1'130), 1u);
  EXPECT_EQ(lookup("late", 1'000).state, IdemState::absent);
  // Nothing of either record is left.
  auto tr = store_->create_transaction();
  auto rest = tr.get_range(d.space.idem().range().first, d.space.idem().range().second);
  ASSERT_TRUE(rest.ok());
  EXPECT_TRUE(rest->empty());
}

}  // namespace
}  // namespace chaise::core
