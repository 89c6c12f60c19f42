// The document core against a real store: RFC 003 update paths, winner selection, new_edits=false
// merging and stemming, counters, _changes / _all_docs cursors, _local docs, idempotent retries.
#include "core/docs/documents.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "core/batch/doc_batches.h"
#include "core/db/changes_notifier.h"
#include "core/db/keyspace.h"
#include "core/db/txid_janitor.h"
#include "core/docs/purge.h"
#include "core/index/cursors.h"
#include "storage/database.h"
#include "storage/tuple.h"

namespace chaise::core {
namespace {

using storage::Database;
using storage::Status;
using Json = nlohmann::json;

class DocumentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "chaise-docs-XXXXXX").string();
    dir_ = mkdtemp(tmpl.data());
    storage::Options o;
    o.fsync = false;
    core::keyspace::set_store_options(o);  // the server's filters and column families
    store_ = std::move(Database::open(dir_, o).value());
    create("db");
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  void create(const std::string& name) {
    Status s = store_->run([&](Transaction& tr) -> Status {
      auto r = create_db(tr, name, false, 1);
      if (!r.ok()) return r.error();
      EXPECT_FALSE(failed(*r));
      return {};
    });
    ASSERT_TRUE(s.ok());
  }

  DbRef db(const std::string& name = "db") {
    auto tr = store_->create_transaction();
    auto r = open_db(tr, name);
    EXPECT_TRUE(r.ok() && !failed(*r));
    return std::get<DbRef>(*r);
  }

  std::vector<DocWriteBatch::ItemResult> write(std::vector<DocWriteBatch::Item> items,
                                               const std::string& name = "db") {
    DocWriteBatch batch(name, std::move(items));
    while (batch.has_more()) {
      Status s = store_->run([&](Transaction& tr) { return batch(tr); });
      EXPECT_TRUE(s.ok()) << storage::error_name(s.error());
      batch.committed();
    }
    std::vector<DocWriteBatch::ItemResult> out;
    for (auto& r : batch.results())
      out.push_back(r.value_or(DocWriteBatch::ItemResult(err::conflict())));
    return out;
  }

  static DocWriteBatch::Item edit(std::string id, std::optional<std::string> rev, std::string body,
                                  bool deleted = false) {
    DocWriteBatch::Item it;
    it.update.id = std::move(id);
    if (rev) it.update.base_rev = RevId::parse(*rev);
    it.update.body = std::move(body);
    it.update.deleted = deleted;
    return it;
  }

  // new_edits=false: path given newest first, e.g. {"3-c", "2-b", "1-a"} (hashes are opaque text).
  static DocWriteBatch::Item replicated(std::string id, std::vector<std::string> path,
                                        std::string body = "{}", bool deleted = false) {
    DocWriteBatch::Item it;
    it.replicated = true;
    it.replicated_doc.id = std::move(id);
    it.replicated_doc.path.leaf = *RevId::parse(path[0]);
    it.replicated_doc.path.deleted = deleted;
    for (std::size_t i = 1; i < path.size(); ++i)
      it.replicated_doc.path.ancestors.push_back(RevId::parse(path[i])->hash);
    it.replicated_doc.body = std::move(body);
    return it;
  }

  std::string put(const std::string& id, std::optional<std::string> rev, const std::string& body,
                  bool deleted = false) {
    auto r = write({edit(id, rev, body, deleted)});
    EXPECT_FALSE(failed(r[0])) << (failed(r[0]) ? std::get<CouchError>(r[0]).reason : "");
    return failed(r[0]) ? "" : std::get<UpdateResult>(r[0]).rev.str();
  }

  Outcome<std::string> get(const std::string& id, const DocReadOptions& o = {}) {
    auto tr = store_->create_transaction();
    auto r = get_doc_json(tr, db(), id, o);
    EXPECT_TRUE(r.ok());
    return *r;
  }
  Json get_json(const std::string& id, const DocReadOptions& o = {}) {
    auto r = get(id, o);
    EXPECT_FALSE(failed(r)) << id;
    return failed(r) ? Json() : Json::parse(std::get<std::string>(r));
  }

  // Bytes (keys and values) the docs subspace holds: every document's, or one document's.
  std::size_t stored_bytes(const std::optional<std::string>& id = std::nullopt) {
    auto tr = store_->create_transaction();
    auto [b, e] =
        id ? db().space.docs().range(storage::Tuple().add(*id)) : db().space.docs().range();
    auto kvs = tr.get_range(b, e, 0, storage::Reverse::no, storage::Snapshot::yes);
    EXPECT_TRUE(kvs.ok());
    std::size_t n = 0;
    for (const auto& kv : *kvs) n += kv.key.size() + kv.value.size();
    return n;
  }

  // Every revs[i] of `id` reads back (read_rev) as bodies[i], exactly.
  void expect_history(const std::string& id, const std::vector<std::string>& revs,
                      const std::vector<std::string>& bodies) {
    auto tr = store_->create_transaction();
    for (std::size_t i = 0; i < revs.size(); ++i) {
      auto rec = read_rev(tr, db(), id, *RevId::parse(revs[i]));
      ASSERT_TRUE(rec.ok() && rec->has_value()) << id << " " << i;
      EXPECT_EQ((*rec)->body, bodies[i]) << id << " " << i;
    }
  }

  // Compacts the database "db" to the end, step by step.
  CompactStats compact() {
    std::string cursor;
    CompactStats stats;
    for (bool done = false; !done;) {
      Status s = store_->run([&](Transaction& tr) -> Status {
        auto r = compact_step(tr, db(), cursor, stats);
        if (!r.ok()) return r.error();
        done = *r;
        return {};
      });
      EXPECT_TRUE(s.ok());
      if (!s.ok()) break;
    }
    return stats;
  }

  std::int64_t counter(std::string_view name) {
    auto tr = store_->create_transaction();
    return *read_counter(tr, db(), name);
  }

  std::vector<Json> changes(ChangesQuery q = {}) {
    ChangesCursor c(db(), q);
    std::vector<std::string> rows;
    for (;;) {
      auto tr = store_->create_transaction();
      auto more = c.next_page(tr, 3, rows);  // tiny pages exercise the paging
      EXPECT_TRUE(more.ok());
      if (!*more) break;
    }
    std::vector<Json> out;
    for (auto& r : rows) out.push_back(Json::parse(r));
    return out;
  }

  std::vector<Json> all_docs(AllDocsQuery q = {}) {
    AllDocsCursor c(db(), q);
    std::vector<std::string> rows;
    for (;;) {
      auto tr = store_->create_transaction();
      auto more = c.next_page(tr, 2, rows);
      EXPECT_TRUE(more.ok());
      if (!*more) break;
    }
    std::vector<Json> out;
    for (auto& r : rows) out.push_back(Json::parse(r));
    return out;
  }

  std::string dir_;
  std::unique_ptr<Database> store_;
};

// The per-document keys are packed element by element; they must be the tuple layout keyspace.h
// documents, byte for byte (stored data depends on it).
TEST(DbSpaceKeys, PerDocumentKeysAreTheDocumentedTuples) {
  const keyspace::DbSpace space(7);
  using storage::Tuple;
  for (const std::string& id : {std::string("a"), std::string("_design/x"), std::string("n\0ul", 4),
                                std::string("caf\xc3\xa9")}) {
    const std::string hash("\x00\x01\xff", 3);
    EXPECT_EQ(space.by_id_key(id), space.by_id().pack(Tuple().add(id)));
    EXPECT_EQ(space.doc_revisions_range(id), space.revisions().range(Tuple().add(id)));
    EXPECT_EQ(space.revision_key(id, true, 12, hash),
              space.revisions().pack(Tuple().add(id).add(true).add(12).add_bytes(hash)));
    EXPECT_EQ(space.revision_key(id, false, 1, ""),
              space.revisions().pack(Tuple().add(id).add(false).add(1).add_bytes("")));
    EXPECT_EQ(space.body_range(id, 300, hash),
              space.docs().range(Tuple().add(id).add(300).add_bytes(hash)));
    for (std::int64_t chunk : {-2, -1, 0, 1, 70000})
      EXPECT_EQ(space.body_chunk_key(id, 5, hash, chunk),
                space.docs().pack(Tuple().add(id).add(5).add_bytes(hash).add(chunk)));
  }
}

// DbSpace is a handle on a layout each thread keeps per database: the prefixes are each
// database's own however many databases a thread goes through (past the per-thread bound too),
// on every thread, and copies keep theirs.
TEST(DbSpaceKeys, EachDatabaseHasItsOwnPrefixesOnEveryThread) {
  using storage::Subspace;
  using storage::Tuple;
  auto check = [](std::int64_t first, std::int64_t count) {
    std::vector<std::pair<std::int64_t, keyspace::DbSpace>> kept;
    for (std::int64_t id = first; id < first + count; ++id) {
      const keyspace::DbSpace space(id);
      const Subspace root(Tuple().add(keyspace::kDatabases).add(id));
      EXPECT_EQ(space.root().key(), root.key());
      EXPECT_EQ(space.by_id().key(), root.sub(Tuple().add(keyspace::kById)).key());
      EXPECT_EQ(space.unique().key(), root.sub(Tuple().add(keyspace::kUnique)).key());
      if (id % 97 == 0) kept.emplace_back(id, space);
    }
    for (const auto& [id, space] : kept) {
      EXPECT_EQ(space.docs().key(), Subspace(Tuple().add(keyspace::kDatabases).add(id))
                                        .sub(Tuple().add(keyspace::kDocs))
                                        .key());
    }
  };
  check(0, 700);
  std::thread other([&] { check(300, 700); });
  other.join();
  check(650, 10);
}

// Sequence's ordering compares the versionstamp's fields; it must be the order of the stored
// bytes: (incarnation, then to_bytes() as bytes).
TEST(SequenceOrder, IsTheOrderOfIncarnationThenTheStampBytes) {
  std::mt19937_64 rng(11);
  auto random_seq = [&] {
    Sequence s;
    s.incarnation = static_cast<std::int64_t>(rng() % 2);
    for (auto& b : s.versionstamp.tr_version) b = static_cast<std::uint8_t>(rng() % 2 ? 0 : rng());
    s.versionstamp.user_version = static_cast<std::uint16_t>(rng() % 3 == 0 ? rng() : rng() % 2);
    return s;
  };
  for (int i = 0; i < 20000; ++i) {
    const Sequence a = random_seq();
    Sequence b = rng() % 4 == 0 ? a : random_seq();
    if (rng() % 4 == 0) b.versionstamp.user_version = static_cast<std::uint16_t>(rng());
    const auto expected = std::pair(a.incarnation, a.versionstamp.to_bytes()) <=>
                          std::pair(b.incarnation, b.versionstamp.to_bytes());
    ASSERT_EQ(a <=> b, expected) << a.str() << " vs " << b.str();
    ASSERT_EQ(a == b, expected == 0);
  }
}

TEST_F(DocumentsTest, InsertReadUpdate) {
  std::string r1 = put("a", std::nullopt, R"({"x":1,"b":[true]})");
  EXPECT_EQ(r1.substr(0, 2), "1-");
  EXPECT_EQ(r1.size(), 34u);
  Json d = get_json("a");
  EXPECT_EQ(d["_id"], "a");
  EXPECT_EQ(d["_rev"], r1);
  EXPECT_EQ(d["x"], 1);
  EXPECT_EQ(counter(keyspace::kDocCount), 1);

  std::string r2 = put("a", r1, R"({"x":2})");
  EXPECT_EQ(r2.substr(0, 2), "2-");
  EXPECT_EQ(get_json("a")["x"], 2);
  EXPECT_EQ(counter(keyspace::kDocCount), 1);

  // Stale rev, no rev, unknown rev: 409.
  for (auto rev : {std::optional<std::string>(r1), std::optional<std::string>(),
                   std::optional<std::string>("9-00000000000000000000000000000000")}) {
    auto r = write({edit("a", rev, "{}")});
    ASSERT_TRUE(failed(r[0]));
    EXPECT_EQ(std::get<CouchError>(r[0]), err::conflict());
  }
  // The same edit gives the same revision everywhere (deterministic hash).
  create("other");
  auto again = write({edit("a", std::nullopt, R"({"x":1,"b":[true]})")}, "other");
  EXPECT_EQ(std::get<UpdateResult>(again[0]).rev.str(), r1);
}

TEST_F(DocumentsTest, DeleteRecreateAndCounters) {
  std::string r1 = put("a", std::nullopt, R"({"v":1})");
  std::string r2 = put("a", r1, "{}", true);
  EXPECT_EQ(get("a"), Outcome<std::string>(err::doc_deleted()));
  EXPECT_EQ(counter(keyspace::kDocCount), 0);
  EXPECT_EQ(counter(keyspace::kDocDelCount), 1);
  // The tombstone is readable by rev.
  DocReadOptions o;
  o.rev = RevId::parse(r2);
  Json t = get_json("a", o);
  EXPECT_EQ(t["_deleted"], true);
  // Updating the deleted leaf conflicts (RFC 003).
  auto r = write({edit("a", r2, "{}")});
  EXPECT_EQ(std::get<CouchError>(r[0]), err::conflict());
  // Re-creating without a rev extends the tombstone.
  std::string r3 = put("a", std::nullopt, R"({"v":3})");
  EXPECT_EQ(r3.substr(0, 2), "3-");
  EXPECT_EQ(counter(keyspace::kDocCount), 1);
  EXPECT_EQ(counter(keyspace::kDocDelCount), 0);
  o.revs = true;
  o.rev.reset();
  Json d = get_json("a", o);
  EXPECT_EQ(d["_revisions"]["start"], 3);
  EXPECT_EQ(d["_revisions"]["ids"].size(), 3u);
  // A new document written deleted counts as deleted.
  put("b", std::nullopt, "{}", true);
  EXPECT_EQ(counter(keyspace::kDocDelCount), 1);
  // Non-leaf revision: conflict.
  auto nl = write({edit("a", r1, "{}")});
  EXPECT_EQ(std::get<CouchError>(nl[0]), err::conflict());
}

TEST_F(DocumentsTest, ChangesHaveOneEntryPerDocumentInSequenceOrder) {
  std::string ra = put("a", std::nullopt, "{}");
  put("b", std::nullopt, "{}");
  put("a", ra, R"({"n":2})");
  put("c", std::nullopt, "{}");
  auto rows = changes();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["id"], "b");
  EXPECT_EQ(rows[1]["id"], "a");
  EXPECT_EQ(rows[2]["id"], "c");
  EXPECT_LT(rows[0]["seq"].get<std::string>(), rows[1]["seq"].get<std::string>());
  EXPECT_LT(rows[1]["seq"].get<std::string>(), rows[2]["seq"].get<std::string>());
  // since: strictly after.
  ChangesQuery q;
  q.since = *Sequence::parse(rows[0]["seq"].get<std::string>());
  auto after = changes(q);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0]["id"], "a");
  // Descending, limit.
  ChangesQuery d;
  d.descending = true;
  d.limit = 2;
  auto desc = changes(d);
  ASSERT_EQ(desc.size(), 2u);
  EXPECT_EQ(desc[0]["id"], "c");
  // update_seq is the last change.
  auto tr = store_->create_transaction();
  EXPECT_EQ(update_seq(tr, db())->str(), rows[2]["seq"]);
}

TEST_F(DocumentsTest, ReplicatedConflictsWinnerAndAllDocsStyle) {
  // Two branches off 1-a: 2-b and 2-c. Winner: higher hash ("c" > "b").
  auto r = write({replicated("d", {"2-b", "1-a"}, R"({"side":"b"})"),
                  replicated("d", {"2-c", "1-a"}, R"({"side":"c"})")});
  ASSERT_FALSE(failed(r[0]));
  ASSERT_FALSE(failed(r[1]));
  DocReadOptions o;
  o.conflicts = true;
  Json d = get_json("d", o);
  EXPECT_EQ(d["_rev"], "2-c");
  EXPECT_EQ(d["side"], "c");
  EXPECT_EQ(d["_conflicts"], Json::array({"2-b"}));
  EXPECT_EQ(counter(keyspace::kDocCount), 1);
  ChangesQuery q;
  q.all_docs_style = true;
  auto rows = changes(q);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["changes"].size(), 2u);
  EXPECT_EQ(rows[0]["changes"][0]["rev"], "2-c");
  // Idempotent: the same revisions again change nothing.
  auto seq_before = rows[0]["seq"];
  write({replicated("d", {"2-b", "1-a"}), replicated("d", {"1-a"})});
  EXPECT_EQ(changes(q)[0]["seq"], seq_before);
  // Live beats deleted whatever the position: a deleted 5-z does not win.
  write({replicated("d", {"5-z", "4-y", "3-x", "2-c", "1-a"}, "{}", true)});
  Json after = get_json("d", o);
  EXPECT_EQ(after["_rev"],
            "2-b");  // 2-c was extended by the deleted path; 2-b is the only live leaf
  o.deleted_conflicts = true;
  after = get_json("d", o);
  EXPECT_EQ(after["_deleted_conflicts"], Json::array({"5-z"}));
}

TEST_F(DocumentsTest, InteractiveEditsOfLosingBranchesAndWinnerDeletion) {
  write({replicated("d", {"2-b", "1-a"}, R"({"s":"b"})"),
         replicated("d", {"2-c", "1-a"}, R"({"s":"c"})")});
  // Extend the losing branch 2-b: 3-x beats 2-c by position.
  std::string r3 = put("d", "2-b", R"({"s":"b3"})");
  DocReadOptions o;
  o.conflicts = true;
  Json d = get_json("d", o);
  EXPECT_EQ(d["_rev"], r3);
  EXPECT_EQ(d["_conflicts"], Json::array({"2-c"}));
  // Delete the winner: 2-c is promoted.
  put("d", r3, "{}", true);
  d = get_json("d", o);
  EXPECT_EQ(d["_rev"], "2-c");
  EXPECT_FALSE(d.contains("_conflicts"));
  EXPECT_EQ(counter(keyspace::kDocCount), 1);
  EXPECT_EQ(counter(keyspace::kDocDelCount), 0);
  // by_id points at the promoted winner.
  auto rows = all_docs();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["value"]["rev"], "2-c");
  // Delete the last live leaf: the document is deleted.
  put("d", "2-c", "{}", true);
  EXPECT_EQ(get("d"), Outcome<std::string>(err::doc_deleted()));
  EXPECT_EQ(counter(keyspace::kDocCount), 0);
  EXPECT_EQ(counter(keyspace::kDocDelCount), 1);
  EXPECT_TRUE(all_docs().empty());
}

TEST_F(DocumentsTest, DeletingALosingBranchKeepsTheWinner) {
  write({replicated("d", {"2-b", "1-a"}), replicated("d", {"2-c", "1-a"})});
  put("d", "2-b", "{}", true);
  DocReadOptions o;
  o.conflicts = o.deleted_conflicts = true;
  Json d = get_json("d", o);
  EXPECT_EQ(d["_rev"], "2-c");
  EXPECT_FALSE(d.contains("_conflicts"));
  EXPECT_EQ(d["_deleted_conflicts"].size(), 1u);
  EXPECT_EQ(changes().size(), 1u);
}

TEST_F(DocumentsTest, StemmingToRevsLimit) {
  Status s = store_->run([&](Transaction& tr) -> Status {
    set_revs_limit(tr, db(), 3);
    return {};
  });
  ASSERT_TRUE(s.ok());
  std::string rev = put("a", std::nullopt, "{}");
  for (int i = 0; i < 5; ++i) rev = put("a", rev, "{\"i\":" + std::to_string(i) + "}");
  DocReadOptions o;
  o.revs = true;
  Json d = get_json("a", o);
  EXPECT_EQ(d["_revisions"]["start"], 6);
  EXPECT_EQ(d["_revisions"]["ids"].size(), 3u);
  // Replicated paths are stemmed too.
  write({replicated("r", {"5-e", "4-d", "3-c", "2-b", "1-a"})});
  d = get_json("r", o);
  EXPECT_EQ(d["_revisions"]["ids"], Json::array({"e", "d", "c"}));
}

TEST_F(DocumentsTest, UnknownCommitResultDoesNotDuplicate) {
  for (auto fault : {storage::CommitFault::unknown_result_applied,
                     storage::CommitFault::unknown_result_not_applied}) {
    std::atomic<int> n{0};
    store_->set_commit_fault_hook([&] { return n++ == 0 ? fault : storage::CommitFault::none; });
    std::string id = fault == storage::CommitFault::unknown_result_applied ? "applied" : "dropped";
    auto r = write({edit(id, std::nullopt, "{}"), edit(id + "2", std::nullopt, "{}")});
    store_->set_commit_fault_hook(nullptr);
    ASSERT_FALSE(failed(r[0]));  // a retry that saw its own commit still reports success
    EXPECT_EQ(std::get<UpdateResult>(r[0]).rev.pos, 1);
    // applied: the retry finds its transaction id and commits nothing (read-only, not seen by the
    // pipeline again); not applied: the retry writes again.
    EXPECT_EQ(n.load(), fault == storage::CommitFault::unknown_result_applied ? 1 : 2);
  }
  auto rows = changes();
  EXPECT_EQ(rows.size(), 4u);  // no duplicate changes entries
  EXPECT_EQ(counter(keyspace::kDocCount), 4);
  DocReadOptions o;
  o.revs = true;
  EXPECT_EQ(get_json("applied", o)["_revisions"]["start"], 1);  // no second revision
}

TEST_F(DocumentsTest, ConcurrentWritersToOneDocumentExactlyOneWins) {
  std::string base = put("hot", std::nullopt, "{}");
  constexpr int kWriters = 8;
  std::atomic<int> ok{0}, conflicts{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      auto r = write({edit("hot", base, "{\"w\":" + std::to_string(i) + "}")});
      (failed(r[0]) ? conflicts : ok)++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(conflicts.load(), kWriters - 1);
  EXPECT_EQ(get_json("hot")["_rev"].get<std::string>().substr(0, 2), "2-");
}

TEST_F(DocumentsTest, ConcurrentInsertsOfOneIdExactlyOneWins) {
  constexpr int kWriters = 8;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      auto r = write({edit("new", std::nullopt, "{\"w\":" + std::to_string(i) + "}")});
      if (!failed(r[0])) ok++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(counter(keyspace::kDocCount), 1);
  EXPECT_EQ(changes().size(), 1u);
}

// Batches of inserts prove their ids absent together (ids_without_revisions): the answer never
// claims an id that has revisions (live or deleted), and ids that follow one another beyond
// everything stored are all proved.
TEST_F(DocumentsTest, IdsWithoutRevisionsNeverClaimsAStoredId) {
  std::mt19937 rng(1127);
  std::vector<std::string> pool;
  for (const char* p : {"a", "b", "m", "z"})
    for (int i = 0; i < 40; ++i) pool.push_back(std::string(p) + std::to_string(1000 + i * 3));
  pool.push_back(std::string("a\0", 2));
  pool.push_back("a");
  std::set<std::string> stored;
  std::vector<DocWriteBatch::Item> items;
  for (const std::string& id : pool) {
    if (rng() % 3 != 0) continue;
    stored.insert(id);
    items.push_back(edit(id, std::nullopt, "{}", rng() % 4 == 0));  // some written deleted
  }
  write(items);
  for (int round = 0; round < 200; ++round) {
    std::set<std::string> ask;
    const std::size_t n = 2 + rng() % 30;
    if (round % 2) {
      // A run of neighbours: consecutive numbers under one letter.
      const std::string p(1, "abmz"[rng() % 4]);
      const int from = 995 + static_cast<int>(rng() % 130);
      for (std::size_t k = 0; k < n; ++k) ask.insert(p + std::to_string(from + k));
    } else {
      for (std::size_t k = 0; k < n; ++k) ask.insert(pool[rng() % pool.size()]);
    }
    std::vector<std::string_view> ids(ask.begin(), ask.end());
    auto tr = store_->create_transaction();
    auto none = ids_without_revisions(tr, db(), ids);
    ASSERT_TRUE(none.ok());
    ASSERT_EQ(none->size(), ids.size());
    for (std::size_t k = 0; k < ids.size(); ++k) {
      if ((*none)[k]) {
        EXPECT_FALSE(stored.contains(std::string(ids[k]))) << ids[k];
      }
    }
  }
  std::vector<std::string> fresh;
  for (int i = 0; i < 500; ++i) fresh.push_back("zz" + std::to_string(100000 + i));
  std::vector<std::string_view> ids(fresh.begin(), fresh.end());
  auto tr = store_->create_transaction();
  auto none = ids_without_revisions(tr, db(), ids);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(std::count(none->begin(), none->end(), true), 500);
}

// Inserts in one batch among live and deleted documents answer as CouchDB's: new ids are
// created at 1-, live ones conflict, deleted ones are re-created on their tombstone.
TEST_F(DocumentsTest, InsertBatchesAmongLiveAndDeletedDocuments) {
  std::vector<DocWriteBatch::Item> first;
  for (int i = 0; i < 30; i += 3)
    first.push_back(edit("d" + std::to_string(100 + i), std::nullopt, "{}"));
  write(first);
  std::string del_rev = put("d150", std::nullopt, "{}");
  put("d150", del_rev, "{}", true);
  std::vector<DocWriteBatch::Item> batch;
  for (int i = 0; i < 60; ++i)
    batch.push_back(edit("d" + std::to_string(100 + i), std::nullopt, R"({"n":1})"));
  auto r = write(batch);
  ASSERT_EQ(r.size(), 60u);
  for (int i = 0; i < 60; ++i) {
    const std::string id = "d" + std::to_string(100 + i);
    if (i < 30 && i % 3 == 0) {
      EXPECT_EQ(std::get<CouchError>(r[i]), err::conflict()) << id;
    } else if (i == 50) {
      ASSERT_FALSE(failed(r[i]));
      EXPECT_EQ(std::get<UpdateResult>(r[i]).rev.pos, 3) << id;
    } else {
      ASSERT_FALSE(failed(r[i])) << id;
      EXPECT_EQ(std::get<UpdateResult>(r[i]).rev.pos, 1) << id;
    }
  }
  EXPECT_EQ(counter(keyspace::kDocCount), 60);
  EXPECT_EQ(counter(keyspace::kDocDelCount), 0);
}

// Batches that insert the same ids at once: each id is created by exactly one of them (the
// batch that proved its ids absent without reading each one still conflicts on their ranges).
TEST_F(DocumentsTest, ConcurrentInsertBatchesOfOneIdSetEachIdOnce) {
  constexpr int kWriters = 6;
  constexpr int kIds = 40;
  std::atomic<int> created{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::vector<DocWriteBatch::Item> items;
      for (int i = 0; i < kIds; ++i)
        items.push_back(edit("c" + std::to_string(1000 + i), std::nullopt,
                             "{\"w\":" + std::to_string(w) + "}"));
      for (const auto& r : write(items)) created += failed(r) ? 0 : 1;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(created.load(), kIds);
  EXPECT_EQ(counter(keyspace::kDocCount), kIds);
  EXPECT_EQ(changes().size(), static_cast<std::size_t>(kIds));
  for (int i = 0; i < kIds; ++i) {
    DocReadOptions o;
    o.conflicts = true;
    Json d = get_json("c" + std::to_string(1000 + i), o);
    EXPECT_FALSE(d.contains("_conflicts")) << d.dump();
    EXPECT_EQ(d["_rev"].get<std::string>().substr(0, 2), "1-");
  }
}

// new_edits=false batches (the replicator's) take the same proof: revisions of stored documents
// extend their branches, new documents start with the path given, and concurrent batches of
// one revision set store each revision once.
TEST_F(DocumentsTest, ReplicatedBatchesAmongStoredDocuments) {
  std::vector<DocWriteBatch::Item> first;
  for (int i = 0; i < 30; i += 3)
    first.push_back(replicated("r" + std::to_string(100 + i), {"1-a"}));
  write(first);
  std::vector<DocWriteBatch::Item> second;
  for (int i = 0; i < 60; ++i)
    second.push_back(replicated("r" + std::to_string(100 + i), {"2-b", "1-a"}));
  for (const auto& r : write(second)) EXPECT_FALSE(failed(r));
  for (int i = 0; i < 60; ++i) {
    DocReadOptions o;
    o.conflicts = true;
    Json d = get_json("r" + std::to_string(100 + i), o);
    EXPECT_EQ(d["_rev"], "2-b");
    EXPECT_FALSE(d.contains("_conflicts")) << d.dump();
  }
  EXPECT_EQ(counter(keyspace::kDocCount), 60);

  constexpr int kWriters = 6;
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&] {
      std::vector<DocWriteBatch::Item> items;
      for (int i = 0; i < 40; ++i)
        items.push_back(replicated("s" + std::to_string(1000 + i), {"1-x"}));
      for (const auto& r : write(items)) EXPECT_FALSE(failed(r));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter(keyspace::kDocCount), 100);
  EXPECT_EQ(changes().size(), 100u);
}

TEST_F(DocumentsTest, DuplicateIdsInOneBatch) {
  auto r = write({edit("x", std::nullopt, "{}"), edit("x", std::nullopt, "{}")});
  EXPECT_FALSE(failed(r[0]));
  EXPECT_EQ(std::get<CouchError>(r[1]), err::conflict());
  // Replicated duplicates are applied one after the other.
  auto rr = write({replicated("y", {"1-a"}), replicated("y", {"2-b", "1-a"})});
  EXPECT_FALSE(failed(rr[0]));
  EXPECT_FALSE(failed(rr[1]));
  EXPECT_EQ(get_json("y")["_rev"], "2-b");
}

TEST_F(DocumentsTest, AllDocsRangesAndKeys) {
  for (auto id : {"a", "b", "c", "d", "_design/x"})
    put(id, std::nullopt, "{\"id\":\"" + std::string(id) + "\"}");
  std::string rd = get_json("d")["_rev"];
  put("d", rd, "{}", true);
  auto ids = [](const std::vector<Json>& rows) {
    std::vector<std::string> out;
    for (auto& r : rows) out.push_back(r["id"]);
    return out;
  };
  EXPECT_EQ(ids(all_docs()), (std::vector<std::string>{"_design/x", "a", "b", "c"}));
  AllDocsQuery q;
  q.start_key = "a";
  q.end_key = "b";
  EXPECT_EQ(ids(all_docs(q)), (std::vector<std::string>{"a", "b"}));
  q.inclusive_end = false;
  EXPECT_EQ(ids(all_docs(q)), (std::vector<std::string>{"a"}));
  AllDocsQuery d;
  d.descending = true;
  d.start_key = "b";
  EXPECT_EQ(ids(all_docs(d)), (std::vector<std::string>{"b", "a", "_design/x"}));
  AllDocsQuery sl;
  sl.skip = 1;
  sl.limit = 2;
  sl.include_docs = true;
  auto rows = all_docs(sl);
  EXPECT_EQ(ids(rows), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(rows[0]["doc"]["id"], "a");
  AllDocsQuery dd;
  dd.kind = AllDocsKind::design_docs;
  EXPECT_EQ(ids(all_docs(dd)), (std::vector<std::string>{"_design/x"}));
  {
    AllDocsCursor c(db(), q);
    auto tr = store_->create_transaction();
    EXPECT_EQ(*c.total_rows(tr), 4);
    EXPECT_EQ(*c.offset(tr), 1);  // "_design/x" sorts before "a"
  }
  auto tr = store_->create_transaction();
  auto keyed =
      all_docs_keys(tr, db(), std::vector<AllDocsKey>{{"c"}, {"d"}, {"zz"}}, AllDocsQuery{});
  ASSERT_TRUE(keyed.ok());
  ASSERT_EQ(keyed->size(), 3u);
  EXPECT_EQ(Json::parse((*keyed)[1])["value"]["deleted"], true);
  EXPECT_EQ(Json::parse((*keyed)[2])["error"], "not_found");
}

TEST_F(DocumentsTest, LocalDocuments) {
  DocWriteBatch::Item it = edit("_local/cp", std::nullopt, R"({"seq":1})");
  it.local = true;
  DocWriteBatch b("db", {it});
  ASSERT_TRUE(store_->run([&](Transaction& tr) { return b(tr); }).ok());
  EXPECT_EQ(b.local_revs()[0], "0-1");
  auto tr = store_->create_transaction();
  auto r = put_local(tr, db(), "_local/cp", std::string("0-1"), false, R"({"seq":2})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::get<std::string>(*r), "0-2");
  ASSERT_TRUE(tr.commit().ok());
  auto t2 = store_->create_transaction();
  auto j = get_local_json(t2, db(), "_local/cp");
  EXPECT_EQ(Json::parse(std::get<std::string>(*j))["_rev"], "0-2");
  EXPECT_TRUE(changes().empty());
  EXPECT_TRUE(all_docs().empty());
  EXPECT_EQ(counter(keyspace::kDocCount), 0);
  AllDocsQuery lq;
  lq.kind = AllDocsKind::local_docs;
  auto rows = all_docs(lq);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["value"]["rev"], "0-2");
}

// put_local_if writes only over the revision it was given; of two transactions that saw the same
// one, the second to commit conflicts, and finds on its retry that the revision moved.
TEST_F(DocumentsTest, PutLocalIfComparesTheRevision) {
  EXPECT_EQ(put_local_if(*store_, "db", "_local/lease", std::nullopt, R"({"owner":"a"})"),
            Outcome<bool>(true));
  EXPECT_EQ(put_local_if(*store_, "db", "_local/lease", std::nullopt, R"({"owner":"b"})"),
            Outcome<bool>(false));
  EXPECT_EQ(put_local_if(*store_, "db", "_local/lease", std::string("0-7"), R"({"owner":"b"})"),
            Outcome<bool>(false));
  EXPECT_EQ(put_local_if(*store_, "db", "_local/lease", std::string("0-1"), R"({"owner":"b"})"),
            Outcome<bool>(true));
  // Two writers that both read 0-2.
  auto t1 = store_->create_transaction();
  auto t2 = store_->create_transaction();
  EXPECT_EQ(*put_local_if(t1, db(), "_local/lease", std::string("0-2"), R"({"owner":"c"})"),
            Outcome<bool>(true));
  EXPECT_EQ(*put_local_if(t2, db(), "_local/lease", std::string("0-2"), R"({"owner":"d"})"),
            Outcome<bool>(true));
  ASSERT_TRUE(t1.commit().ok());
  auto second = t2.commit();
  ASSERT_FALSE(second.ok());
  ASSERT_TRUE(t2.on_error(second.error()).ok());
  EXPECT_EQ(*put_local_if(t2, db(), "_local/lease", std::string("0-2"), R"({"owner":"d"})"),
            Outcome<bool>(false));
  auto t3 = store_->create_transaction();
  const Json lease = Json::parse(std::get<std::string>(*get_local_json(t3, db(), "_local/lease")));
  EXPECT_EQ(lease["owner"], "c");
  EXPECT_EQ(lease["_rev"], "0-3");
  EXPECT_EQ(put_local_if(*store_, "nonesuch", "_local/lease", std::nullopt, "{}"),
            Outcome<bool>(err::db_not_found()));
}

// A round of documents that outlives its transaction (here a lifetime of 20 ms, where FoundationDB
// allows 5 s) is cut in half at each retry until it fits, instead of failing the same way until
// the attempts run out.
TEST_F(DocumentsTest, ARoundTooSlowForItsTransactionRetriesSmaller) {
  store_.reset();
  storage::Options o;
  o.fsync = false;
  o.transaction_lifetime_us = 20'000;
  core::keyspace::set_store_options(o);
  store_ = std::move(Database::open(dir_, o).value());
  std::vector<DocWriteBatch::Item> items;
  for (int i = 0; i < 10'000; ++i)
    items.push_back(edit("d" + std::to_string(i), std::nullopt, "{}"));
  DocWriteBatch batch("db", std::move(items));
  int too_old = 0;
  while (batch.has_more()) {
    auto tr = store_->create_transaction();
    for (int attempt = 0;; ++attempt) {
      ASSERT_LT(attempt, 20) << "a round never fits";
      storage::Error e = batch(tr).error();
      if (e == storage::Error::success) {
        auto c = tr.commit();
        if (c.ok()) break;
        e = c.error();
      }
      if (e == storage::Error::transaction_too_old) ++too_old;
      batch.retrying(e);
      ASSERT_TRUE(tr.on_error(e).ok()) << storage::error_name(e);
    }
    batch.committed();
  }
  for (const auto& r : batch.results()) ASSERT_TRUE(r && !failed(*r));
  EXPECT_EQ(counter(keyspace::kDocCount), 10'000);
  // (On a machine that writes 10,000 documents within 20 ms nothing was cut.)
  RecordProperty("too_old", too_old);
}

TEST_F(DocumentsTest, LargeBodiesAreChunked) {
  std::string big = "{\"s\":\"" + std::string(350'000, 'x') + "\"}";
  std::string r = put("big", std::nullopt, big);
  EXPECT_EQ(get_json("big")["s"].get<std::string>().size(), 350'000u);
  put("big", r, "{}");  // the old chunks stay (a superseded revision) until compaction
  EXPECT_EQ(counter(keyspace::kSizeActive), static_cast<std::int64_t>(big.size()) + 2);
}

TEST_F(DocumentsTest, DeleteAndRecreateDatabaseStartsEmpty) {
  put("a", std::nullopt, "{}");
  Status s = store_->run([&](Transaction& tr) -> Status {
    auto r = delete_db(tr, "db");
    if (!r.ok()) return r.error();
    return {};
  });
  ASSERT_TRUE(s.ok());
  create("db");
  EXPECT_EQ(counter(keyspace::kDocCount), 0);
  EXPECT_TRUE(changes().empty());
  EXPECT_EQ(get("a"), Outcome<std::string>(err::not_found()));
}

TEST_F(DocumentsTest, JanitorClearsTransactionIdsOfCommittedWrites) {
  auto txid_count = [&] {
    auto tr = store_->create_transaction();
    auto [b, e] = db().space.txids().range();
    return tr.get_range(b, e)->size();
  };
  TxIdJanitor janitor(*store_, std::chrono::hours(1));
  // Ids are written only where a commit may end in commit_unknown_result: with a fault hook set.
  store_->set_commit_fault_hook([] { return storage::CommitFault::none; });
  for (int i = 0; i < 3; ++i) {
    DocWriteBatch batch("db", {edit("j" + std::to_string(i), std::nullopt, "{}")});
    ASSERT_TRUE(store_->run([&](Transaction& tr) { return batch(tr); }).ok());
    ASSERT_FALSE(batch.tx_key().empty());
    janitor.committed(batch.tx_key());
    batch.committed();
  }
  store_->set_commit_fault_hook(nullptr);
  EXPECT_EQ(txid_count(), 3u);  // each write transaction recorded its id
  janitor.flush();
  EXPECT_EQ(txid_count(), 0u);
  EXPECT_EQ(janitor.cleared(), 3u);
  EXPECT_EQ(counter(keyspace::kDocCount), 3);  // the documents themselves stay
}

// The embedded engine knows every commit's outcome (no fault hook): a write records no
// transaction id, so there is nothing for the janitor to clear, and its documents, changes and
// counters are all there.
TEST_F(DocumentsTest, WritesRecordNoTransactionIdWhenEveryCommitOutcomeIsKnown) {
  auto tr = store_->create_transaction();
  EXPECT_FALSE(tr.may_commit_unknown_result());
  DocWriteBatch batch("db", {edit("k1", std::nullopt, "{}"), edit("k2", std::nullopt, "{}")});
  ASSERT_TRUE(store_->run([&](Transaction& t) { return batch(t); }).ok());
  EXPECT_TRUE(batch.tx_key().empty());
  batch.committed();
  std::string rev = put("k3", std::nullopt, "{}");
  put("k3", rev, "{\"v\":2}");
  auto [b, e] = db().space.txids().range();
  auto check = store_->create_transaction();
  EXPECT_TRUE(check.get_range(b, e)->empty());
  EXPECT_EQ(changes().size(), 3u);
  EXPECT_EQ(counter(keyspace::kDocCount), 3);
  store_->set_commit_fault_hook([] { return storage::CommitFault::none; });
  EXPECT_TRUE(store_->create_transaction().may_commit_unknown_result());
  store_->set_commit_fault_hook(nullptr);
}

TEST_F(DocumentsTest, JanitorClearsInSmallTransactions) {
  // One transaction per second of PUTs held the commit thread for 20 ms: the default clears
  // at most 500 keys per transaction, so 1,200 queued ids take three.
  TxIdJanitor janitor(*store_, std::chrono::hours(1));
  // Before queueing: the janitor's thread starts a pass as soon as 500 keys wait.
  const std::uint64_t before = store_->stats().commits;
  for (int i = 0; i < 1200; ++i)
    janitor.committed(db().space.txids().pack(storage::Tuple().add(std::to_string(i))));
  janitor.flush();
  EXPECT_EQ(janitor.cleared(), 1200u);
  EXPECT_GE(store_->stats().commits - before, 3u);  // and more if its thread ran passes too
}

TEST_F(DocumentsTest, BatchLargerThanOneTransactionIsSplitIntoRounds) {
  std::vector<DocWriteBatch::Item> items;
  const std::size_t n = DocWriteBatch::kDocsPerTransactionMax + 500;
  for (std::size_t i = 0; i < n; ++i)
    items.push_back(edit("r" + std::to_string(i), std::nullopt, "{}"));
  auto results = write(std::move(items));
  ASSERT_EQ(results.size(), n);
  for (auto& r : results) ASSERT_FALSE(failed(r));
  EXPECT_EQ(counter(keyspace::kDocCount), static_cast<std::int64_t>(n));
  auto rows = changes();
  ASSERT_EQ(rows.size(), n);
  std::set<std::string> seqs;
  for (auto& r : rows) seqs.insert(r["seq"].get<std::string>());
  EXPECT_EQ(seqs.size(), n);  // every document has its own sequence
  // Bodies over the per-transaction byte budget go in several rounds too.
  std::vector<DocWriteBatch::Item> big;
  for (int i = 0; i < 6; ++i)
    big.push_back(edit("big" + std::to_string(i), std::nullopt,
                       "{\"s\":\"" + std::string(1'500'000, 'x') + "\"}"));
  for (auto& r : write(std::move(big))) EXPECT_FALSE(failed(r));
}

TEST_F(DocumentsTest, NotifierWakesWaitersOnceWithOneWatchPerDatabase) {
  ChangesNotifier notifier(*store_);
  auto seen = [&] {
    auto tr = store_->create_transaction();
    return *read_update_counter(tr, db());
  };
  std::atomic<int> woken{0};
  const std::int64_t before = seen();
  std::vector<std::shared_ptr<ChangesNotifier::Waiter>> waiters;
  for (int i = 0; i < 100; ++i)
    waiters.push_back(notifier.wait(db(), before, [&](std::int64_t) { woken++; }));
  auto cancelled = notifier.wait(db(), before, [&](std::int64_t) { woken += 1000; });
  cancelled.reset();  // dropping the handle cancels it
  EXPECT_EQ(notifier.armed_watches(), 1u);
  EXPECT_EQ(woken.load(), 0);
  put("n", std::nullopt, "{}");
  for (int i = 0; i < 500 && woken.load() < 100; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(woken.load(), 100);  // each waiter exactly once, the cancelled one never
  EXPECT_EQ(notifier.armed_watches(), 0u);
  // A waiter that saw an older counter than the database has is woken at once.
  std::atomic<bool> immediate{false};
  auto w = notifier.wait(db(), before, [&](std::int64_t) { immediate = true; });
  EXPECT_TRUE(immediate.load());
  EXPECT_GT(seen(), before);
  // Writes to another database do not wake this one's waiters: once the notifier has woken a
  // waiter of "other" for the write, this database's waiter is still asleep.
  create("other");
  const DbRef other = db("other");
  auto tr = store_->create_transaction();
  const std::int64_t other_counter = *read_update_counter(tr, other);
  std::atomic<bool> this_woken{false}, other_woken{false};
  auto w2 = notifier.wait(db(), seen(), [&](std::int64_t) { this_woken = true; });
  auto w3 = notifier.wait(other, other_counter, [&](std::int64_t) { other_woken = true; });
  DocWriteBatch b("other", {edit("x", std::nullopt, "{}")});
  ASSERT_TRUE(store_->run([&](Transaction& t) { return b(t); }).ok());
  for (int i = 0; i < 2500 && !other_woken.load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(other_woken.load());
  EXPECT_FALSE(this_woken.load());
}

TEST_F(DocumentsTest, RevsDiff) {
  write({replicated("d", {"2-b", "1-a"})});
  write({replicated("e", {"1-e"})});
  auto tr = store_->create_transaction();
  // Several documents in one read, repeats and unknown ids included, answered in request order.
  auto read = read_branches_of(tr, db(), {"e", "d", "missing", "d"}, storage::Snapshot::yes);
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->size(), 4u);
  EXPECT_EQ((*read)[0].size(), 1u);
  EXPECT_TRUE((*read)[2].empty());
  auto r = revs_diff((*read)[1], {"2-b", "1-a", "3-c"});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->missing, std::vector<std::string>{"3-c"});
  EXPECT_EQ(r->possible_ancestors, std::vector<std::string>{"2-b"});
  EXPECT_FALSE(revs_diff((*read)[3], {"2-b"}).has_value());
  EXPECT_FALSE(revs_diff((*read)[0], {"1-e"}).has_value());
  EXPECT_EQ(revs_diff((*read)[2], {"1-x"})->missing, std::vector<std::string>{"1-x"});
}

// Superseded bodies are kept as deltas against their successor (core/rev/rev_delta.h): every old
// revision reads back byte for byte, history costs a fraction of the document per edit, and
// compaction drops it.
// A by_id entry says when its winner's record is the body alone (kByIdBodyOnlyFormat): the edit
// that wrote it made it win, live, with one chunk of body. A plain read then reads chunk 0 alone;
// any other entry, one a store wrote before the format existed included, has it look for a header.
TEST_F(DocumentsTest, ByIdSaysWhenTheWinnersRecordIsItsBodyAlone) {
  auto format = [&](const std::string& id) -> std::int64_t {
    auto tr = store_->create_transaction();
    auto v = tr.get(db().space.by_id_key(id), storage::Snapshot::yes);
    EXPECT_TRUE(v.ok() && v->has_value()) << id;
    auto t = storage::Tuple::unpack(**v);
    EXPECT_TRUE(t && t->get_int(0)) << id;
    return t && t->get_int(0) ? *t->get_int(0) : -1;
  };
  // The plain read answers what the full read answers.
  auto expect_plain_read = [&](const std::string& id) {
    auto tr = store_->create_transaction();
    auto plain = plain_doc_json(tr, db(), id);
    ASSERT_TRUE(plain.ok() && plain->has_value()) << id;
    EXPECT_EQ(Json::parse((*plain)->json), get_json(id)) << id;
    EXPECT_EQ((*plain)->rev.str(), get_json(id)["_rev"]) << id;
  };
  const std::string r1 = put("small", std::nullopt, R"({"a":1})");
  EXPECT_EQ(format("small"), keyspace::kByIdBodyOnlyFormat);
  expect_plain_read("small");
  put("small", r1, R"({"a":2})");
  EXPECT_EQ(format("small"), keyspace::kByIdBodyOnlyFormat);
  expect_plain_read("small");
  EXPECT_EQ(get_json("small")["a"], 2);

  put("big", std::nullopt, "{\"s\":\"" + std::string(keyspace::kBodyChunkBytes, 'x') + "\"}");
  EXPECT_EQ(format("big"), keyspace::kByIdFormat);  // two chunks
  expect_plain_read("big");

  // An edit whose revision loses leaves the winner's record unknown to it.
  write({replicated("c", {"2-c", "1-a"}, R"({"side":"c"})")});
  EXPECT_EQ(format("c"), keyspace::kByIdBodyOnlyFormat);
  write({replicated("c", {"2-b", "1-a"}, R"({"side":"b"})")});
  EXPECT_EQ(format("c"), keyspace::kByIdFormat);
  expect_plain_read("c");
  EXPECT_EQ(get_json("c")["side"], "c");

  // A store written before: every entry in the first format, read through the header's absence.
  {
    auto tr = store_->create_transaction();
    auto v = tr.get(db().space.by_id_key("small"), storage::Snapshot::yes);
    ASSERT_TRUE(v.ok() && v->has_value());
    auto t = storage::Tuple::unpack(**v);
    ASSERT_TRUE(t && t->size() == 3);
    tr.set(db().space.by_id_key("small"), storage::Tuple()
                                              .add(keyspace::kByIdFormat)
                                              .add(*t->get_int(1))
                                              .add_bytes(*t->get_bytes(2))
                                              .pack());
    ASSERT_TRUE(tr.commit().ok());
  }
  EXPECT_EQ(format("small"), keyspace::kByIdFormat);
  expect_plain_read("small");
}

TEST_F(DocumentsTest, HistoryIsKeptAsDeltasAndReadsBackExactly) {
  std::string payload;
  for (int i = 0; payload.size() < 4000; ++i) payload += "word" + std::to_string(i % 10) + " ";
  payload.resize(4000);
  auto body_at = [&](int i) {
    Json b = {{"n", i}, {"payload", payload}, {"tags", {"a", "b"}}};
    if (i % 7 == 3) b["tags"].push_back("extra");  // an array that grows
    if (i % 11 == 5) b["meta"] = {{"edited", i}};  // a member that comes and goes
    if (i % 13 == 0) b["big"] = 123456789012345678901234567890.0;
    return b.dump();
  };
  std::vector<std::string> revs{put("h", std::nullopt, body_at(0))};
  std::vector<std::string> bodies{body_at(0)};
  const std::size_t one = stored_bytes();
  constexpr int kEdits = 300;
  for (int i = 1; i <= kEdits; ++i) {
    bodies.push_back(body_at(i));
    revs.push_back(put("h", revs.back(), bodies.back()));
  }
  const double per_edit = static_cast<double>(stored_bytes() - one) / kEdits;
  std::printf("history of a %zu-byte document: %.0f stored bytes per edit\n", bodies[0].size(),
              per_edit);
  EXPECT_LT(per_edit, bodies[0].size() / 10.0);
  expect_history("h", revs, bodies);
  // A conflict branching off an old revision: both branches and the old bodies still read.
  write({replicated("h", {"11-conflict", revs[9], revs[8]}, R"({"other":true})")});
  revs.push_back(put("h", revs.back(), body_at(kEdits + 1)));
  bodies.push_back(body_at(kEdits + 1));
  {
    auto tr = store_->create_transaction();
    for (int i : {0, 8, 9, 10, 63, 64, 65, kEdits, kEdits + 1}) {
      auto rec = read_rev(tr, db(), "h", *RevId::parse(revs[i]));
      ASSERT_TRUE(rec.ok() && rec->has_value()) << i;
      EXPECT_EQ((*rec)->body, bodies[i]) << i;
    }
  }
  // Compaction leaves the leaves only, and sizes.active counts exactly their bodies.
  const CompactStats stats = compact();
  EXPECT_EQ(stats.bodies_removed, static_cast<std::int64_t>(kEdits + 1));
  auto tr = store_->create_transaction();
  auto gone = read_rev(tr, db(), "h", *RevId::parse(revs[5]));
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->has_value());
  EXPECT_EQ(get_json("h")["n"], kEdits + 1);
  EXPECT_EQ(
      counter(keyspace::kSizeActive),
      static_cast<std::int64_t>(bodies.back().size() + std::string(R"({"other":true})").size()));
}

// Superseding a leaf whose record is one chunk without a header: the delta's chunk 0 overwrites
// it, and no range is cleared (each would be a RocksDB range tombstone that reads step through).
// A record of two chunks still clears its range. Every revision reads back exactly either way.
TEST_F(DocumentsTest, SupersededOneChunkRecordsAreOverwrittenNotCleared) {
  auto body_at = [](int i, std::size_t pad) {
    return Json{{"n", i}, {"payload", std::string(pad, 'p')}}.dump();
  };
  const std::uint64_t clears = store_->stats().range_clears;
  std::vector<std::string> bodies{body_at(0, 2000)};
  std::vector<std::string> revs{put("small", std::nullopt, bodies.back())};
  for (int i = 1; i <= 5; ++i) {
    bodies.push_back(body_at(i, 2000));
    revs.push_back(put("small", revs.back(), bodies.back()));
  }
  EXPECT_EQ(store_->stats().range_clears, clears);
  // The five superseded revisions are deltas, not whole bodies.
  EXPECT_LT(stored_bytes("small"), 2 * bodies.back().size());
  expect_history("small", revs, bodies);
  EXPECT_EQ(get_json("small")["n"], 5);

  std::vector<std::string> big_bodies{body_at(0, keyspace::kBodyChunkBytes + 1000)};
  std::vector<std::string> big_revs{put("big", std::nullopt, big_bodies.back())};
  big_bodies.push_back(body_at(1, keyspace::kBodyChunkBytes + 1000));
  big_revs.push_back(put("big", big_revs.back(), big_bodies.back()));
  EXPECT_EQ(store_->stats().range_clears, clears + 1);  // the first record's two chunks
  EXPECT_LT(stored_bytes("big"), big_bodies.back().size() + 1000);
  expect_history("big", big_revs, big_bodies);
}

// ---- Purge ----

class PurgeTest : public DocumentsTest {
 protected:
  // Purges `requests` ({id, revs}) and returns, per request, the revisions purged.
  std::vector<std::vector<std::string>> purge(
      const std::vector<std::pair<std::string, std::vector<std::string>>>& requests) {
    std::vector<PurgeRequest> rs;
    for (const auto& [id, revs] : requests) {
      PurgeRequest r;
      r.id = id;
      for (const std::string& rev : revs) r.revs.push_back(*RevId::parse(rev));
      rs.push_back(std::move(r));
    }
    PurgeBatch batch("db", std::move(rs));
    while (batch.has_more()) {
      Status s = store_->run([&](Transaction& tr) { return batch(tr); });
      EXPECT_TRUE(s.ok()) << storage::error_name(s.error());
      batch.committed();
    }
    std::vector<std::vector<std::string>> out;
    for (const auto& revs : batch.purged()) {
      out.emplace_back();
      for (const RevId& rev : revs) out.back().push_back(rev.str());
    }
    return out;
  }
  std::size_t keys_in(const std::pair<std::string, std::string>& range) {
    auto tr = store_->create_transaction();
    auto kvs =
        tr.get_range(range.first, range.second, 0, storage::Reverse::no, storage::Snapshot::yes);
    EXPECT_TRUE(kvs.ok());
    return kvs->size();
  }
  std::vector<PurgedInfo> log() {
    auto tr = store_->create_transaction();
    auto infos = purged_infos(tr, db(), Sequence{}, 100000);
    EXPECT_TRUE(infos.ok());
    return *infos;
  }
};

// A long history kept as deltas, with a conflict branching off an old revision: purging the main
// leaf removes every revision only it named, keeps the shared ones readable (the one whose delta
// base went is stored whole), and sizes.active counts what remains.
TEST_F(PurgeTest, PurgedBranchLeavesNoBodyAndSharedHistoryStaysReadable) {
  const std::string payload(4000, 'w');
  auto body_at = [&](int i) { return Json{{"n", i}, {"payload", payload}}.dump(); };
  std::vector<std::string> revs{put("h", std::nullopt, body_at(0))};
  std::vector<std::string> bodies{body_at(0)};
  for (int i = 1; i <= 30; ++i) {
    bodies.push_back(body_at(i));
    revs.push_back(put("h", revs.back(), bodies.back()));
  }
  const std::string conflict_body = R"({"other":true})";
  write({replicated("h", {"11-conflict", revs[9], revs[8]}, conflict_body)});
  EXPECT_EQ(stored_bytes("h") < bodies[0].size() * 3, true);  // the history is deltas

  auto purged = purge({{"h", {revs.back(), revs[5], "7-unknown"}}});
  ASSERT_EQ(purged.size(), 1u);
  EXPECT_EQ(purged[0], (std::vector<std::string>{revs.back()}));  // leaves only
  // The conflict is the winner now; its ancestors read back exactly, the purged ones not at all.
  Json doc = get_json("h");
  EXPECT_EQ(doc["_rev"], "11-conflict");
  EXPECT_EQ(doc["other"], true);
  expect_history("h", {revs[0], revs[8], revs[9]}, {bodies[0], bodies[8], bodies[9]});
  {
    auto tr = store_->create_transaction();
    for (int i : {10, 11, 20, 30}) {
      auto rec = read_rev(tr, db(), "h", *RevId::parse(revs[i]));
      ASSERT_TRUE(rec.ok());
      EXPECT_FALSE(rec->has_value()) << i;
    }
  }
  EXPECT_EQ(counter(keyspace::kDocCount), 1);
  EXPECT_EQ(counter(keyspace::kSizeExternal), static_cast<std::int64_t>(conflict_body.size()));
  // sizes.active is the stored bodies: compaction, which keeps the leaf alone, brings it there.
  compact();
  EXPECT_EQ(counter(keyspace::kSizeActive), static_cast<std::int64_t>(conflict_body.size()));

  // The last leaf: nothing of the document is left.
  EXPECT_EQ(purge({{"h", {"11-conflict"}}})[0], (std::vector<std::string>{"11-conflict"}));
  EXPECT_TRUE(failed(get("h")));
  EXPECT_EQ(stored_bytes("h"), 0u);
  EXPECT_EQ(keys_in(db().space.revisions().range(storage::Tuple().add("h"))), 0u);
  EXPECT_EQ(keys_in(db().space.by_id().range()), 0u);
  EXPECT_EQ(keys_in(db().space.changes().range()), 0u);
  EXPECT_EQ(counter(keyspace::kDocCount), 0);
  EXPECT_EQ(counter(keyspace::kSizeExternal), 0);
  EXPECT_EQ(counter(keyspace::kSizeActive), 0);
  const auto entries = log();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].purge_seq, 1);
  EXPECT_EQ(entries[0].revs, (std::vector<std::string>{revs.back(), revs[5], "7-unknown"}));
  EXPECT_EQ(entries[1].purge_seq, 2);
}

// Attachment bytes go with the last revision that names them, and stay while another does.
TEST_F(PurgeTest, AttachmentBytesGoWithTheLastRevisionNamingThem) {
  auto with_att = [](std::string id, std::string data) {
    DocWriteBatch::Item it = edit(std::move(id), std::nullopt, R"({"a":1})");
    AttUpload u;
    u.name = "file.bin";
    u.info.content_type = "application/octet-stream";
    set_att_data(u, std::move(data));
    it.update.atts.push_back(std::move(u));
    return it;
  };
  const std::string shared(200'000, 's'), own(150'000, 'o');
  auto r = write({with_att("x", shared), with_att("y", shared), with_att("z", own)});
  for (const auto& one : r) ASSERT_FALSE(failed(one));
  auto address_of = [&](const std::string& id) {
    auto tr = store_->create_transaction();
    auto rec = read_rev(tr, db(), id,
                        std::get<UpdateResult>(r[id == "x"   ? 0
                                                 : id == "y" ? 1
                                                             : 2])
                            .rev);
    EXPECT_TRUE(rec.ok() && rec->has_value());
    return (*rec)->atts.at(0).address;
  };
  const std::string shared_address = address_of("x"), own_address = address_of("z");
  ASSERT_GT(keys_in(att_chunks_range(db(), shared_address)), 0u);
  purge({{"x", {std::get<UpdateResult>(r[0]).rev.str()}},
         {"z", {std::get<UpdateResult>(r[2]).rev.str()}}});
  EXPECT_EQ(keys_in(att_chunks_range(db(), own_address)), 0u);
  EXPECT_GT(keys_in(att_chunks_range(db(), shared_address)), 0u);  // y still names them
  purge({{"y", {std::get<UpdateResult>(r[1]).rev.str()}}});
  EXPECT_EQ(keys_in(att_chunks_range(db(), shared_address)), 0u);
  EXPECT_EQ(keys_in(db().space.att_refs().range()), 0u);
}

// Every request is logged and moves the database's sequence; the log keeps the newest
// purged_infos_limit entries.
TEST_F(PurgeTest, LogIsTrimmedToItsLimit) {
  Status s = store_->run([&](Transaction& tr) -> Status {
    set_purged_infos_limit(tr, db(), 3);
    return {};
  });
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 5; ++i) purge({{"missing" + std::to_string(i), {"1-abc"}}});
  const auto entries = log();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].id, "missing2");
  EXPECT_EQ(entries[2].purge_seq, 5);
  auto tr = store_->create_transaction();
  EXPECT_EQ(*purges_trimmed_through(tr, db(), storage::Snapshot::yes) < entries[0].seq, true);
  EXPECT_EQ(*purge_seq(tr, db(), storage::Snapshot::yes), 5);
  EXPECT_EQ(update_seq(tr, db())->count, 5);  // each request counts as an update
}

// Purges racing edits of the same documents: every transaction that loses retries, and the
// counters, by_id and the changes feed agree with what is stored at the end.
TEST_F(PurgeTest, PurgesRacingEditsLeaveConsistentCounters) {
  constexpr int kDocs = 20;
  std::vector<std::string> revs(kDocs);
  for (int i = 0; i < kDocs; ++i) revs[i] = put("r" + std::to_string(i), std::nullopt, "{}");
  std::atomic<bool> stop{false};
  std::thread editor([&] {
    std::mt19937 rng(7);
    while (!stop.load()) {
      const std::string id = "r" + std::to_string(rng() % kDocs);
      auto cur = get(id);
      if (failed(cur)) {
        write({edit(id, std::nullopt, R"({"again":true})")});
        continue;
      }
      const std::string rev = Json::parse(std::get<std::string>(cur))["_rev"];
      write({edit(id, rev, R"({"n":)" + std::to_string(rng() % 1000) + "}")});
    }
  });
  std::mt19937 rng(11);
  int purged = 0;
  for (int round = 0; round < 60; ++round) {
    const std::string id = "r" + std::to_string(rng() % kDocs);
    auto cur = get(id);
    if (failed(cur)) continue;
    purged += static_cast<int>(
        purge({{id, {Json::parse(std::get<std::string>(cur))["_rev"].get<std::string>()}}})[0]
            .size());
  }
  stop = true;
  editor.join();
  EXPECT_GT(purged, 0);  // some purges won their race
  std::int64_t live = 0;
  for (int i = 0; i < kDocs; ++i) live += failed(get("r" + std::to_string(i))) ? 0 : 1;
  EXPECT_EQ(counter(keyspace::kDocCount), live);
  EXPECT_EQ(static_cast<std::int64_t>(all_docs().size()), live);
  EXPECT_EQ(static_cast<std::int64_t>(changes().size()), live + counter(keyspace::kDocDelCount));
}

}  // namespace
}  // namespace chaise::core
