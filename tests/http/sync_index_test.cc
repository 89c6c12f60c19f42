// Synchronous indexes (core/index/sync_index.h): a design document with
// "options": {"sync_index": true} (or POST /_index with "sync_index": true) is updated inside
// every write transaction, so a query with update=false, which never builds, already sees each
// acknowledged write; its rows are exactly what lazy indexing of the same views gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;
using Headers = std::vector<std::pair<std::string, std::string>>;

class SyncIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    start();
    ASSERT_EQ(call(verb::put, "/db").status, 201u);
  }
  void start(const std::vector<std::string>& args = {}) {
    client_.reset();
    server_.reset();
    server_.emplace(dir_.path() / "data", args);
    client_ = std::make_unique<HttpClient>(server_->port(), 60s);
  }
  HttpResponse call(verb method, std::string_view target, std::string body = {},
                    const Headers& headers = {{"Content-Type", "application/json"}}) {
    return client_->request(method, target, std::move(body), headers);
  }
  // The ids _find returns from index `ddoc` without building it (update: false).
  std::vector<std::string> find_ids(const std::string& ddoc) {
    auto r = call(verb::post, "/db/_find",
                  R"({"selector":{"n":{"$gt":0}},"update":false,"use_index":")" + ddoc + R"("})");
    EXPECT_EQ(r.status, 200u) << r.body;
    std::vector<std::string> ids;
    const Json docs = r.json()["docs"];
    for (const auto& d : docs) ids.push_back(d["_id"].get<std::string>());
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  std::string rev_of(const std::string& id) { return call(verb::get, "/db/" + id).json()["_rev"]; }
  TempDir dir_;
  std::optional<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

using Ids = std::vector<std::string>;

TEST_F(SyncIndexTest, MangoIndexSeesEveryWritePathWithoutABuild) {
  for (const char* id : {"a", "b", "c"})
    ASSERT_EQ(call(verb::put, std::string("/db/") + id, R"({"n":1})").status, 201u);
  auto sync = call(verb::post, "/db/_index",
                   R"({"index":{"fields":["n"]},"ddoc":"sync","name":"n","sync_index":true})");
  ASSERT_EQ(sync.status, 200u) << sync.body;
  ASSERT_EQ(call(verb::post, "/db/_index", R"({"index":{"fields":["n"]},"ddoc":"lazy","name":"n"})")
                .status,
            200u);
  EXPECT_EQ(find_ids("sync"), (Ids{"a", "b", "c"}));  // built when created
  EXPECT_EQ(call(verb::post, "/db/_find", R"({"selector":{"n":1},"use_index":"lazy"})").status,
            200u);  // built by this query
  EXPECT_EQ(call(verb::get, "/db/_design/sync").json()["options"]["sync_index"], true);

  ASSERT_EQ(call(verb::put, "/db/d", R"({"n":2})").status, 201u);
  ASSERT_EQ(call(verb::post, "/db/_bulk_docs", R"({"docs":[{"_id":"e","n":3},{"_id":"f","n":0}]})")
                .status,
            201u);
  ASSERT_EQ(
      call(verb::patch, "/db/f", R"({"n":4})", {{"Content-Type", "application/merge-patch+json"}})
          .status,
      201u);
  ASSERT_EQ(call(verb::delete_, "/db/a?rev=" + rev_of("a")).status, 200u);
  ASSERT_EQ(call(verb::put, "/db/b", R"({"_rev":")" + rev_of("b") + R"(","n":-1})").status, 201u);
  ASSERT_EQ(call(verb::post, "/db", R"({"_id":"g","n":5})").status, 201u);
  ASSERT_EQ(call(verb::put, "/db/_design/u",
                 R"({"updates":{"set":"function(doc, req) { if (!doc) doc = {_id: req.id};)"
                 R"( doc.n = 6; return [doc, 'ok']; }"}})")
                .status,
            201u);
  ASSERT_EQ(call(verb::put, "/db/_design/u/_update/set/h").status, 201u);
  ASSERT_EQ(call(verb::put, "/db/_design/u/_update/set/c").status, 201u);  // existing: hot path

  EXPECT_EQ(find_ids("sync"), (Ids{"c", "d", "e", "f", "g", "h"}));
  // The lazy index, not built since, knows only its old rows (the control): of a, b and c,
  // only c still matches.
  EXPECT_EQ(find_ids("lazy"), (Ids{"c"}));
  // A restart keeps it synchronous.
  start();
  ASSERT_EQ(call(verb::put, "/db/i", R"({"n":7})").status, 201u);
  EXPECT_EQ(find_ids("sync"), (Ids{"c", "d", "e", "f", "g", "h", "i"}));
}

// Map functions see _conflicts and _attachments; reduce trees stay right.
constexpr const char* kViews =
    R"("views":{"v":{"map":"function(doc) { if (doc.n) emit([doc.n, doc._id], )"
    R"({c: doc._conflicts || [], a: Object.keys(doc._attachments || {})}); }"},)"
    R"("sum":{"map":"function(doc) { if (doc.n) emit(doc._id, doc.n); }","reduce":"_sum"}})";

TEST_F(SyncIndexTest, JavaScriptViewsMatchLazyIndexingOfTheSameViews) {
  ASSERT_EQ(call(verb::put, "/db/a", R"({"n":1})").status, 201u);
  ASSERT_EQ(call(verb::put, "/db/_design/sync",
                 std::string(R"({"options":{"sync_index":true},)") + kViews + "}")
                .status,
            201u);
  ASSERT_EQ(call(verb::put, "/db/_design/lazy", std::string("{") + kViews + "}").status, 201u);
  // A JavaScript index becomes synchronous once built (here by its first query).
  ASSERT_EQ(call(verb::get, "/db/_design/sync/_view/v").status, 200u);

  ASSERT_EQ(call(verb::put, "/db/b", R"({"n":2})").status, 201u);
  // A conflict, through replication.
  ASSERT_EQ(call(verb::post, "/db/_bulk_docs",
                 R"({"new_edits":false,"docs":[{"_id":"b","_rev":"1-ffff","n":20},)"
                 R"({"_id":"c","_rev":"1-abcd","n":3},{"_id":"k","_rev":"1-aaaa","n":7},)"
                 R"({"_id":"k","_rev":"1-bbbb","n":8}]})")
                .status,
            201u);
  // An attachment, then an edit that keeps it.
  ASSERT_EQ(call(verb::put, "/db/c/file.txt?rev=1-abcd", "hello", {{"Content-Type", "text/plain"}})
                .status,
            201u);
  ASSERT_EQ(
      call(verb::put, "/db/c",
           R"({"_rev":")" + rev_of("c") + R"(","n":30,"_attachments":{"file.txt":{"stub":true}}})")
          .status,
      201u);
  // Deleting a conflicted winner: the other branch takes over.
  ASSERT_EQ(call(verb::delete_, "/db/b?rev=" + rev_of("b")).status, 200u);
  ASSERT_EQ(call(verb::delete_, "/db/a?rev=" + rev_of("a")).status, 200u);
  ASSERT_EQ(call(verb::post, "/db/_bulk_docs",
                 R"({"docs":[{"_id":"d","n":4},{"_id":"e","n":5},{"_id":"_design/x","n":9}]})")
                .status,
            201u);

  // A losing branch arriving leaves the winner but changes its _conflicts.
  ASSERT_EQ(call(verb::post, "/db/_bulk_docs",
                 R"({"new_edits":false,"docs":[{"_id":"k","_rev":"1-0000","n":1}]})")
                .status,
            201u);

  for (const char* view : {"v", "sum"}) {
    auto sync = call(verb::get, std::string("/db/_design/sync/_view/") + view + "?update=false");
    auto lazy = call(verb::get, std::string("/db/_design/lazy/_view/") + view);
    ASSERT_EQ(sync.status, 200u) << sync.body;
    EXPECT_EQ(sync.json()["rows"], lazy.json()["rows"]) << view;
  }
  const Json rows = call(verb::get, "/db/_design/sync/_view/v?update=false").json()["rows"];
  ASSERT_EQ(rows.size(), 5u) << rows;
  EXPECT_EQ(rows[0]["key"], Json::array({2, "b"}));  // the surviving branch of b
  EXPECT_EQ(rows[0]["value"]["c"], Json::array()) << rows;
  EXPECT_EQ(rows[3]["key"], Json::array({8, "k"}));
  EXPECT_EQ(rows[3]["value"]["c"], Json::array({"1-aaaa", "1-0000"}));
  EXPECT_EQ(rows[4]["key"], Json::array({30, "c"}));
  EXPECT_EQ(rows[4]["value"]["a"], Json::array({"file.txt"}));
  auto grouped = call(verb::get, "/db/_design/sync/_view/sum?update=false&group=true");
  EXPECT_EQ(grouped.json()["rows"],
            call(verb::get, "/db/_design/lazy/_view/sum?group=true").json()["rows"]);
}

TEST_F(SyncIndexTest, DesignDocumentsWithTheSameViewsShareOneIndex) {
  const std::string views =
      R"("views":{"v":{"map":"function(doc) { if (doc.n) emit(doc.n, null); }"}})";
  ASSERT_EQ(
      call(verb::put, "/db/_design/a", R"({"options":{"sync_index":true},)" + views + "}").status,
      201u);
  ASSERT_EQ(
      call(verb::put, "/db/_design/b", R"({"options":{"sync_index":true},)" + views + "}").status,
      201u);
  ASSERT_EQ(call(verb::get, "/db/_design/a/_view/v").status, 200u);  // builds both
  ASSERT_EQ(call(verb::put, "/db/x", R"({"n":1})").status, 201u);
  // An edit of one of them that keeps its views, in the same transaction as a document.
  auto bulk =
      call(verb::post, "/db/_bulk_docs",
           R"({"docs":[{"_id":"_design/a","_rev":")" + rev_of("_design/a") +
               R"(","note":1,"options":{"sync_index":true},)" + views + R"(},{"_id":"y","n":2}]})");
  ASSERT_EQ(bulk.status, 201u) << bulk.body;
  ASSERT_EQ(call(verb::put, "/db/z", R"({"n":3})").status, 201u);
  for (const char* ddoc : {"a", "b"}) {
    const Json rows = call(verb::get, std::string("/db/_design/") + ddoc + "/_view/v?update=false")
                          .json()["rows"];
    ASSERT_EQ(rows.size(), 3u) << ddoc << rows;
    EXPECT_EQ(rows[0]["id"], "x");
    EXPECT_EQ(rows[1]["id"], "y");
    EXPECT_EQ(rows[2]["id"], "z");
  }
}

// With 64 io threads, 16 writers at once, and a reduce tree every writer updates: writers of one
// node take turns (http/api/write_turns.h), so none times out and they hardly conflict.
TEST_F(SyncIndexTest, ConcurrentWritersKeepTheIndexExact) {
  start({"--io-threads", "64"});
  ASSERT_EQ(call(verb::post, "/db/_index",
                 R"({"index":{"fields":["n"]},"ddoc":"m","name":"n","sync_index":true})")
                .status,
            200u);
  ASSERT_EQ(call(verb::put, "/db/_design/js",
                 R"({"options":{"sync_index":true},"views":{"nomap":{"map":)"
                 R"("function(doc) { if (doc.n) emit(doc.n, null); }"},"count":{"map":)"
                 R"("function(doc) { if (doc.n) emit(null, 1); }","reduce":"_count"}}})")
                .status,
            201u);
  ASSERT_EQ(call(verb::get, "/db/_design/js/_view/nomap").status, 200u);
  // The first write learns that writers take turns.
  ASSERT_EQ(call(verb::put, "/db/first", R"({"m":1})").status, 201u);
  auto conflicts = [&] {
    return metric_value(call(verb::get, "/_node/_local/_prometheus").body,
                        "chaise_store_conflicts_total");
  };
  const long long conflicts_before = conflicts();
  constexpr int kClients = 16;
  constexpr int kDocs = 60;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      HttpClient client(server_->port(), 60s);
      for (int i = 0; i < kDocs; ++i) {
        auto r = client.request(verb::put, "/db/c" + std::to_string(c) + "-" + std::to_string(i),
                                Json{{"n", i + 1}}.dump(), {{"Content-Type", "application/json"}});
        if (r.status != 201u) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LT(conflicts() - conflicts_before, kClients);  // 0 here; hundreds without turns
  EXPECT_EQ(find_ids("m").size(), 25u);                 // _find's default limit
  auto all = call(verb::post, "/db/_find",
                  R"({"selector":{"n":{"$gt":0}},"update":false,"use_index":"m","limit":10000})");
  EXPECT_EQ(all.json()["docs"].size(), static_cast<std::size_t>(kClients * kDocs));
  EXPECT_EQ(call(verb::get, "/db/_design/js/_view/nomap?update=false&limit=0").json()["total_rows"],
            kClients * kDocs);
  EXPECT_EQ(call(verb::get, "/db/_design/js/_view/count?update=false").json()["rows"][0]["value"],
            kClients * kDocs);
}

}  // namespace
}  // namespace chaise::test
