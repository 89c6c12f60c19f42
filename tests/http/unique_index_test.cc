// Unique Mango indexes (core/index/unique_index.h): POST /{db}/_index with
// "unique": true makes the index a constraint enforced inside every interactive write
// transaction (PUT, POST, _bulk_docs, _update, PATCH); replicated writes are never refused but
// are recorded as violations; creation over violating data fails with the offending ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;
using Headers = std::vector<std::pair<std::string, std::string>>;

class UniqueIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    start();
    ASSERT_EQ(call(verb::put, "/db").status, 201u);
  }
  void start() {
    client_.reset();
    server_.reset();
    server_.emplace(dir_.path() / "data");
    client_ = std::make_unique<HttpClient>(server_->port(), 60s);
  }
  HttpResponse call(verb method, std::string_view target, std::string body = {},
                    const Headers& headers = {{"Content-Type", "application/json"}}) {
    return client_->request(method, target, std::move(body), headers);
  }
  // The unique index on "email" (created over the database as it is).
  HttpResponse create_email_index(std::string_view db = "db") {
    return call(verb::post, "/" + std::string(db) + "/_index",
                R"({"index":{"fields":["email"]},"name":"email","ddoc":"uniq","unique":true})");
  }
  void expect_violation(const HttpResponse& r, std::string_view holder) {
    EXPECT_EQ(r.status, 409u) << r.body;
    EXPECT_EQ(r.json()["error"], "conflict") << r.body;
    EXPECT_EQ(r.json()["reason"], "unique constraint email violated by " + std::string(holder))
        << r.body;
  }
  Json email_index() {
    const Json list = call(verb::get, "/db/_index").json()["indexes"];
    for (const auto& i : list)
      if (i["name"] == "email") return i;
    return Json();
  }
  TempDir dir_;
  std::optional<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(UniqueIndexTest, EveryInteractiveWritePathIsRefused) {
  ASSERT_EQ(call(verb::put, "/db/a", R"({"email":"a@x"})").status, 201u);
  ASSERT_EQ(call(verb::put, "/db/b", R"({"email":"b@x"})").status, 201u);
  auto created = create_email_index();
  ASSERT_EQ(created.status, 200u) << created.body;
  EXPECT_EQ(created.json()["result"], "created");
  EXPECT_EQ(create_email_index().json()["result"], "exists");
  EXPECT_EQ(email_index()["unique"], true);
  EXPECT_EQ(email_index()["violations"], Json::array());

  const std::string seq_before = call(verb::get, "/db").json()["update_seq"];
  expect_violation(call(verb::put, "/db/c", R"({"email":"a@x"})"), "a");
  expect_violation(call(verb::post, "/db", R"({"email":"a@x"})"), "a");
  auto bulk = call(verb::post, "/db/_bulk_docs",
                   R"({"docs":[{"_id":"d","email":"new@x"},{"_id":"e","email":"new@x"},)"
                   R"({"_id":"f","email":"b@x"},{"_id":"g","other":1}]})");
  ASSERT_EQ(bulk.status, 201u) << bulk.body;
  EXPECT_EQ(bulk.json()[0]["ok"], true);
  EXPECT_EQ(bulk.json()[1]["reason"], "unique constraint email violated by d");
  EXPECT_EQ(bulk.json()[2]["reason"], "unique constraint email violated by b");
  EXPECT_EQ(bulk.json()[3]["ok"], true);  // no email: not constrained
  expect_violation(call(verb::patch, "/db/b", R"({"email":"a@x"})",
                        {{"Content-Type", "application/merge-patch+json"}}),
                   "a");
  // Update handlers: on a new document (a batch write) and on an existing one (group commit).
  ASSERT_EQ(call(verb::put, "/db/_design/u",
                 R"({"updates":{"set":"function(doc, req) { if (!doc) doc = {_id: req.id};)"
                 R"( doc.email = req.query.email; return [doc, 'saved']; }"}})")
                .status,
            201u);
  EXPECT_EQ(call(verb::put, "/db/_design/u/_update/set/h?email=a%40x").status, 409u);
  EXPECT_EQ(call(verb::put, "/db/_design/u/_update/set/b?email=a%40x").status, 409u);
  EXPECT_EQ(call(verb::get, "/db/h").status, 404u);
  EXPECT_EQ(call(verb::get, "/db/b").json()["email"], "b@x");
  EXPECT_EQ(call(verb::get, "/db/c").status, 404u);

  // The holder may keep its key, change it, and give it up.
  const std::string arev = call(verb::get, "/db/a").json()["_rev"];
  auto kept = call(verb::put, "/db/a", R"({"_rev":")" + arev + R"(","email":"a@x","n":1})");
  ASSERT_EQ(kept.status, 201u) << kept.body;
  ASSERT_EQ(call(verb::put, "/db/a",
                 R"({"_rev":")" + kept.json()["rev"].get<std::string>() + R"(","email":"a2@x"})")
                .status,
            201u);
  EXPECT_EQ(call(verb::put, "/db/c", R"({"email":"a@x"})").status, 201u);  // freed
  expect_violation(call(verb::put, "/db/i", R"({"email":"a2@x"})"), "a");
  const std::string arev3 = call(verb::get, "/db/a").json()["_rev"];
  EXPECT_EQ(call(verb::delete_, "/db/a?rev=" + arev3).status, 200u);
  EXPECT_EQ(call(verb::put, "/db/i", R"({"email":"a2@x"})").status, 201u);
  EXPECT_EQ(call(verb::patch, "/db/b", R"({"email":"b2@x"})",
                 {{"Content-Type", "application/merge-patch+json"}})
                .status,
            201u);
  EXPECT_EQ(call(verb::put, "/db/_design/u/_update/set/j?email=b%40x").status, 201u);
  EXPECT_NE(call(verb::get, "/db").json()["update_seq"], seq_before);

  // It is still a Mango index: _find uses it.
  auto found = call(verb::post, "/db/_find", R"({"selector":{"email":"a@x"}})");
  ASSERT_EQ(found.status, 200u) << found.body;
  ASSERT_EQ(found.json()["docs"].size(), 1u);
  EXPECT_EQ(found.json()["docs"][0]["_id"], "c");

  // The constraint survives a restart.
  start();
  ASSERT_EQ(call(verb::put, "/db/k", R"({"email":"k@x"})").status, 201u);
  expect_violation(call(verb::put, "/db/l", R"({"email":"k@x"})"), "k");
  expect_violation(call(verb::put, "/db/l", R"({"email":"a2@x"})"), "i");
}

TEST_F(UniqueIndexTest, CreationOverViolatingDataFailsWithTheOffendingIds) {
  for (int i = 0; i < 1200; ++i)  // more than one build step
    ASSERT_EQ(call(verb::put, "/db/d" + std::to_string(i),
                   Json{{"email", "e" + std::to_string(i) + "@x"}}.dump())
                  .status,
              201u);
  ASSERT_EQ(call(verb::put, "/db/dup1", R"({"email":"e7@x"})").status, 201u);
  ASSERT_EQ(call(verb::put, "/db/dup2", R"({"email":"e7@x"})").status, 201u);
  ASSERT_EQ(call(verb::put, "/db/dup3", R"({"email":"e1100@x"})").status, 201u);
  auto r = create_email_index();
  ASSERT_EQ(r.status, 409u) << r.body;
  EXPECT_EQ(r.json()["error"], "conflict");
  EXPECT_EQ(r.json()["reason"], "unique constraint email violated by d7, dup1, dup2, d1100, dup3");
  EXPECT_EQ(r.json()["duplicates"][0]["key"], Json::array({"e7@x"}));
  // Nothing is left: no index, no design document, no constraint.
  EXPECT_TRUE(email_index().is_null());
  EXPECT_EQ(call(verb::get, "/db/_design/uniq").status, 404u);
  EXPECT_EQ(call(verb::put, "/db/dup4", R"({"email":"e7@x"})").status, 201u);

  // Once the duplicates are gone it is created, over every document.
  for (const char* id : {"dup1", "dup2", "dup3", "dup4"}) {
    const std::string rev = call(verb::get, std::string("/db/") + id).json()["_rev"];
    ASSERT_EQ(call(verb::delete_, std::string("/db/") + id + "?rev=" + rev).status, 200u);
  }
  ASSERT_EQ(create_email_index().status, 200u);
  expect_violation(call(verb::put, "/db/x", R"({"email":"e1199@x"})"), "d1199");
  expect_violation(call(verb::put, "/db/x", R"({"email":"e0@x"})"), "d0");
}

TEST_F(UniqueIndexTest, ReplicatedWritesAreRecordedNotRefused) {
  ASSERT_EQ(create_email_index().status, 200u);
  ASSERT_EQ(call(verb::put, "/db/a", R"({"email":"a@x"})").status, 201u);
  auto rep = call(verb::post, "/db/_bulk_docs",
                  R"({"new_edits":false,"docs":[{"_id":"r","_rev":"1-abc","email":"a@x"}]})");
  ASSERT_EQ(rep.status, 201u) << rep.body;
  EXPECT_EQ(call(verb::get, "/db/r").json()["email"], "a@x");
  Json v = email_index()["violations"];
  ASSERT_EQ(v.size(), 1u) << v;
  EXPECT_EQ(v[0], Json({{"id", "r"}, {"key", {"a@x"}}, {"conflicts_with", "a"}}));
  // Both now hold the key: nobody else may take it while either does.
  auto third = call(verb::put, "/db/t", R"({"email":"a@x"})");
  EXPECT_EQ(third.status, 409u);
  // Editing the violating document clears its record.
  auto fixed = call(verb::put, "/db/r", R"({"_rev":"1-abc","email":"r@x"})");
  ASSERT_EQ(fixed.status, 201u) << fixed.body;
  EXPECT_EQ(email_index()["violations"], Json::array());
}

TEST_F(UniqueIndexTest, DesignDocumentsDeclareNoConstraintOutsideIndexCreation) {
  ASSERT_EQ(call(verb::put, "/db/a", R"({"email":"a@x"})").status, 201u);
  auto direct = call(verb::put, "/db/_design/x",
                     R"({"language":"query","views":{"v":{"map":{"fields":{"email":"asc"}},)"
                     R"("reduce":"_count","options":{"unique":true}}}})");
  EXPECT_EQ(direct.status, 400u) << direct.body;
  EXPECT_EQ(direct.json()["error"], "invalid_design_doc");

  // Multi-field keys, a partial filter, and the constraint leaving with its index.
  auto created = call(verb::post, "/db/_index",
                      R"({"index":{"fields":["org","email"],"partial_filter_selector":)"
                      R"({"active":true}},"name":"email","ddoc":"uniq","unique":true})");
  ASSERT_EQ(created.status, 200u) << created.body;
  ASSERT_EQ(call(verb::put, "/db/b", R"({"org":1,"email":"a@x","active":true})").status, 201u);
  ASSERT_EQ(call(verb::put, "/db/c", R"({"org":2,"email":"a@x","active":true})").status, 201u);
  ASSERT_EQ(call(verb::put, "/db/d", R"({"org":1,"email":"a@x","active":false})").status, 201u);
  expect_violation(call(verb::put, "/db/e", R"({"org":1,"email":"a@x","active":true})"), "b");
  // Adding another index to the same design document keeps the constraint.
  ASSERT_EQ(call(verb::post, "/db/_index", R"({"index":{"fields":["n"]},"name":"n","ddoc":"uniq"})")
                .status,
            200u);
  expect_violation(call(verb::put, "/db/e", R"({"org":1,"email":"a@x","active":true})"), "b");
  ASSERT_EQ(call(verb::delete_, "/db/_index/uniq/json/email").status, 200u);
  EXPECT_EQ(call(verb::put, "/db/e", R"({"org":1,"email":"a@x","active":true})").status, 201u);
  EXPECT_EQ(call(verb::post, "/db/_index", R"({"index":{"fields":["x"]},"unique":"yes"})").status,
            400u);
}

TEST_F(UniqueIndexTest, ConcurrentClientsRacingForEmailsLeaveOneOwnerEach) {
  ASSERT_EQ(create_email_index().status, 200u);
  constexpr int kClients = 64;
  constexpr int kEmails = 1000;
  constexpr int kClaimsPerClient = 200;
  std::atomic<int> created{0}, refused{0}, other{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      HttpClient client(server_->port(), 60s);
      std::mt19937 rng(c);
      std::uniform_int_distribution<int> pick(0, kEmails - 1);
      for (int i = 0; i < kClaimsPerClient; ++i) {
        const std::string email = "user" + std::to_string(pick(rng)) + "@x";
        auto r =
            (i % 3 == 0)
                ? client.request(verb::post, "/db/_bulk_docs",
                                 Json{{"docs", {{{"email", email}, {"client", c}}}}}.dump(),
                                 {{"Content-Type", "application/json"}})
                : client.request(verb::post, "/db", Json{{"email", email}, {"client", c}}.dump(),
                                 {{"Content-Type", "application/json"}});
        if (r.status == 201u && (i % 3 != 0 || r.json()[0].contains("ok")))
          ++created;
        else if (r.status == 409u || (r.status == 201u && r.json()[0]["error"] == "conflict"))
          ++refused;
        else
          ++other;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(created + refused, kClients * kClaimsPerClient);
  auto all = call(verb::get, "/db/_all_docs?include_docs=true");
  ASSERT_EQ(all.status, 200u);
  std::map<std::string, int> owners;
  const Json rows = all.json()["rows"];
  for (const auto& row : rows)
    if (row["doc"].contains("email")) ++owners[row["doc"]["email"].get<std::string>()];
  EXPECT_EQ(static_cast<int>(owners.size()), created.load());
  for (const auto& [email, n] : owners) EXPECT_EQ(n, 1) << email;
  EXPECT_GT(created.load(), kEmails / 2);  // most emails were claimed
  EXPECT_GT(refused.load(), 0);
}

}  // namespace
}  // namespace chaise::test
