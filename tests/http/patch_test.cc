// PATCH /{db}/{docid} (hot documents): JSON Merge Patch and JSON Patch with
// increment, applied by the server in per-document group commits. Concurrent updates of one
// document never conflict with each other, none is lost, and each caller gets its own revision.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;
using Headers = std::vector<std::pair<std::string, std::string>>;

const Headers kJsonPatch = {{"Content-Type", "application/json-patch+json"}};
const Headers kMergePatch = {{"Content-Type", "application/merge-patch+json"}};
const std::string kIncrement = R"([{"op":"increment","path":"/n","value":1}])";

class PatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.emplace(dir_.path() / "data");
    client_ = std::make_unique<HttpClient>(server_->port(), 60s);
    ASSERT_EQ(call(verb::put, "/db").status, 201u);
  }
  HttpResponse call(verb method, std::string_view target, std::string body = {},
                    const Headers& headers = {{"Content-Type", "application/json"}}) {
    return client_->request(method, target, std::move(body), headers);
  }
  TempDir dir_;
  std::optional<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(PatchTest, MergePatchAndJsonPatchEditTheLatestRevision) {
  ASSERT_EQ(
      call(verb::put, "/db/d", R"({"n":1,"name":"a","big":123456789012345678901234567890})").status,
      201u);
  auto merged = call(verb::patch, "/db/d", R"({"name":null,"tags":["x"]})", kMergePatch);
  ASSERT_EQ(merged.status, 201u) << merged.body;
  const std::string rev2 = merged.json()["rev"];
  EXPECT_TRUE(rev2.starts_with("2-"));
  EXPECT_EQ(merged.header(beast_http::field::etag), "\"" + rev2 + "\"");
  auto doc = call(verb::get, "/db/d");
  EXPECT_EQ(doc.body, R"({"_id":"d","_rev":")" + rev2 +
                          R"(","n":1,"big":123456789012345678901234567890,"tags":["x"]})"
                          "\n");

  auto inc = call(
      verb::patch, "/db/d",
      R"([{"op":"increment","path":"/n","value":41},{"op":"add","path":"/tags/-","value":"y"}])",
      kJsonPatch);
  ASSERT_EQ(inc.status, 201u);
  EXPECT_EQ(call(verb::get, "/db/d").json()["n"], 42);
  // application/json is a merge patch.
  EXPECT_EQ(call(verb::patch, "/db/d", R"({"m":true})").status, 201u);

  // Conditional: ?rev= / If-Match must name the latest revision.
  EXPECT_EQ(call(verb::patch, "/db/d?rev=" + rev2, R"({"x":1})", kMergePatch).status, 409u);
  const std::string latest = call(verb::get, "/db/d").json()["_rev"];
  Headers if_match = kMergePatch;
  if_match.emplace_back("If-Match", "\"" + latest + "\"");
  EXPECT_EQ(call(verb::patch, "/db/d", R"({"x":1})", if_match).status, 201u);

  // Errors say what is wrong, and change nothing: no commit either (the writes above recorded no
  // transaction id, so the janitor has nothing to clear meanwhile).
  const std::string before = call(verb::get, "/db/d").body;
  auto commits = [&] {
    return settled_commits([&] { return call(verb::get, "/_node/_local/_prometheus").body; });
  };
  const long long commits_before = commits();
  ASSERT_GE(commits_before, 0);
  auto expect_error = [&](const HttpResponse& r, unsigned status, const char* error) {
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_EQ(r.json()["error"], error) << r.body;
  };
  expect_error(call(verb::patch, "/db/d", R"([{"op":"test","path":"/n","value":0}])", kJsonPatch),
               409, "conflict");
  expect_error(call(verb::patch, "/db/d", R"([{"op":"increment","path":"/tags"}])", kJsonPatch),
               422, "unprocessable_entity");
  expect_error(call(verb::patch, "/db/d", R"([{"op":"fly","path":"/n"}])", kJsonPatch), 400,
               "bad_request");
  expect_error(call(verb::patch, "/db/d", R"({"_deleted":true})", kMergePatch), 400,
               "doc_validation");
  expect_error(call(verb::patch, "/db/d", R"({"a":1})", {{"Content-Type", "text/plain"}}), 415,
               "bad_content_type");
  expect_error(call(verb::patch, "/db/d", "{not json", kMergePatch), 400, "bad_request");
  expect_error(call(verb::patch, "/db/missing", R"({"a":1})", kMergePatch), 404, "not_found");
  expect_error(call(verb::patch, "/db/_local/x", R"({"a":1})", kMergePatch), 400, "bad_request");
  expect_error(call(verb::patch, "/nodb/d", R"({"a":1})", kMergePatch), 404, "not_found");
  EXPECT_EQ(call(verb::get, "/db/d").body, before);
  EXPECT_EQ(commits(), commits_before);
  // A deleted document is not patched back to life.
  ASSERT_EQ(
      call(verb::delete_, "/db/d?rev=" + call(verb::get, "/db/d").json()["_rev"].get<std::string>())
          .status,
      200u);
  expect_error(call(verb::patch, "/db/d", R"({"a":1})", kMergePatch), 404, "not_found");
}

// A commit's outcome is always known to the embedded store, so PUTs and PATCHes record no
// transaction id: each is one commit, and the janitor, whose pass runs every second, has nothing
// to clear afterwards (it committed one more transaction when every write recorded an id). The
// _db_updates recorder's commits, which follow writes in the background, are counted apart.
TEST_F(PatchTest, WritesLeaveTheJanitorNothingToClear) {
  if (servers_run_on_foundationdb())
    GTEST_SKIP() << "on FoundationDB a commit's outcome can be unknown, so every write records its "
                    "transaction id for the janitor";
  auto commits = [&] {
    return settled_commits([&] { return call(verb::get, "/_node/_local/_prometheus").body; });
  };
  const long long before = commits();
  ASSERT_GE(before, 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(call(verb::put, "/db/w" + std::to_string(i), R"({"n":0})").status, 201u);
    ASSERT_EQ(call(verb::patch, "/db/w" + std::to_string(i), kIncrement, kJsonPatch).status, 201u);
  }
  EXPECT_EQ(commits(), before + 6);
  auto passes = [&] {
    return metric_value(call(verb::get, "/_node/_local/_prometheus").body,
                        "chaise_janitor_passes_total");
  };
  const long long passes_before = passes();
  ASSERT_GE(passes_before, 0);
  ASSERT_TRUE(eventually([&] { return passes() >= passes_before + 2; }));  // a whole pass ran
  EXPECT_EQ(commits(), before + 6);
  EXPECT_EQ(call(verb::get, "/db/w2").json()["n"], 1);
}

// 16 clients x 200 increments of one counter: every acknowledged update counts exactly once,
// each caller's revision is its own and in the document's history, and the updates were grouped
// (the bodies of revisions inside a group are not kept).
TEST_F(PatchTest, ConcurrentIncrementsOfOneDocumentAreNeitherLostNorConflicting) {
  ASSERT_EQ(call(verb::put, "/db/counter", R"({"n":0})").status, 201u);
  ASSERT_EQ(call(verb::put, "/db/_revs_limit", "4000").status, 200u);  // the whole history
  constexpr int kClients = 16, kEach = 200;
  std::mutex mu;
  std::set<std::string> revs;
  std::atomic<int> acknowledged{0}, other{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&] {
      HttpClient client(server_->port(), 60s);
      for (int i = 0; i < kEach; ++i) {
        auto r = client.request(verb::patch, "/db/counter", kIncrement, kJsonPatch);
        if (r.status != 201) {
          ++other;
          continue;
        }
        ++acknowledged;
        std::lock_guard lock(mu);
        revs.insert(r.json()["rev"].get<std::string>());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(acknowledged.load(), kClients * kEach);
  EXPECT_EQ(revs.size(), static_cast<std::size_t>(kClients * kEach));  // one revision each
  auto doc = call(verb::get, "/db/counter?revs_info=true").json();
  EXPECT_EQ(doc["n"], kClients * kEach);
  EXPECT_EQ(doc["_rev"].get<std::string>(),
            "3201-" + doc["_revs_info"][0]["rev"].get<std::string>().substr(5));
  std::size_t missing = 0;
  std::set<std::string> history;
  for (const auto& r : doc["_revs_info"]) {
    history.insert(r["rev"].get<std::string>());
    missing += r["status"] == "missing";
  }
  for (const std::string& rev : revs) EXPECT_TRUE(history.count(rev)) << rev;
  EXPECT_GT(missing, 0u);
  // _changes: the document once, at its latest revision.
  auto changes = call(verb::get, "/db/_changes").json();
  ASSERT_EQ(changes["results"].size(), 1u);
  EXPECT_EQ(changes["results"][0]["changes"][0]["rev"], doc["_rev"]);
}

// Update handlers that save the document they were called on take the same group commit:
// 16 clients x 100 bumps of one counter through _update, none answered 409, none lost, each
// answer carrying the count its own run produced.
TEST_F(PatchTest, UpdateHandlersOfOneDocumentNeverConflictWithEachOther) {
  ASSERT_EQ(
      call(
          verb::put, "/db/_design/u",
          R"({"updates":{"bump":"function(doc, req) { doc.n += 1; return [doc, {json: {n: doc.n}}]; }"}})")
          .status,
      201u);
  ASSERT_EQ(call(verb::put, "/db/counter", R"({"n":0})").status, 201u);
  constexpr int kClients = 16, kEach = 100;
  std::mutex mu;
  std::set<int> counts;
  std::set<std::string> revs;
  std::atomic<int> other{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&] {
      HttpClient client(server_->port(), 60s);
      for (int i = 0; i < kEach; ++i) {
        auto r = client.request(verb::post, "/db/_design/u/_update/bump/counter");
        if (r.status != 201) {
          ++other;
          continue;
        }
        std::lock_guard lock(mu);
        counts.insert(r.json()["n"].get<int>());
        revs.insert(r.header("X-Couch-Update-NewRev"));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(other.load(), 0);
  // Every answer saw a different count: the handler ran on the revision its update extended.
  EXPECT_EQ(counts.size(), static_cast<std::size_t>(kClients * kEach));
  EXPECT_EQ(*counts.rbegin(), kClients * kEach);
  EXPECT_EQ(revs.size(), static_cast<std::size_t>(kClients * kEach));
  EXPECT_EQ(call(verb::get, "/db/counter").json()["n"], kClients * kEach);
}

TEST_F(PatchTest, ValidationAndIdempotencyApplyToEachUpdate) {
  ASSERT_EQ(
      call(
          verb::put, "/db/_design/v",
          R"({"validate_doc_update":"function(n, o) { if (n.n > 3) throw({forbidden: 'at most 3'}); }"})")
          .status,
      201u);
  ASSERT_EQ(call(verb::put, "/db/c", R"({"n":0})").status, 201u);
  std::vector<unsigned> statuses;
  for (int i = 0; i < 5; ++i)
    statuses.push_back(call(verb::patch, "/db/c", kIncrement, kJsonPatch).status);
  EXPECT_EQ(statuses, (std::vector<unsigned>{201, 201, 201, 403, 403}));
  EXPECT_EQ(call(verb::get, "/db/c").json()["n"], 3);

  Headers keyed = kJsonPatch;
  keyed.emplace_back("Idempotency-Key", "dec-1");
  const std::string dec = R"([{"op":"increment","path":"/n","value":-1}])";
  auto first = call(verb::patch, "/db/c", dec, keyed);
  ASSERT_EQ(first.status, 201u);
  auto again = call(verb::patch, "/db/c", dec, keyed);
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(again.header("Idempotent-Replayed"), "true");
  EXPECT_EQ(call(verb::get, "/db/c").json()["n"], 2);
  EXPECT_EQ(
      call(verb::patch, "/db/c", R"([{"op":"increment","path":"/n","value":-2}])", keyed).status,
      422u);
}

}  // namespace
}  // namespace chaise::test
