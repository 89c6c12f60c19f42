// POST /{db}/_purge, GET /{db}/_purged_infos, GET|PUT /{db}/_purged_infos_limit against the real
// server: CouchDB 3.5's answers, documents that leave no trace in reads, feeds and counters, and
// every kind of index forgetting what was purged (lazy views with reduce trees, Mango, synchronous
// and unique indexes), including an index behind the trimmed part of the purge log.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
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
using Ids = std::vector<std::string>;

class PurgeHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path ini = dir_.path() / "local.ini";
    write_file(ini, "[purge]\nmax_document_id_number = 5\nmax_revisions_number = 8\n");
    server_.emplace(dir_.path() / "data", std::vector<std::string>{"--config", ini.string()});
    client_ = std::make_unique<HttpClient>(server_->port(), 60s);
    ASSERT_EQ(call(verb::put, "/db").status, 201u);
  }
  HttpResponse call(verb method, std::string_view target, std::string body = {},
                    const Headers& headers = {{"Content-Type", "application/json"}}) {
    return client_->request(method, target, std::move(body), headers);
  }
  HttpResponse purge(const std::string& body) { return call(verb::post, "/db/_purge", body); }
  std::string put(const std::string& id, const std::string& body) {
    auto r = call(verb::put, "/db/" + id, body);
    EXPECT_EQ(r.status, 201u) << r.body;
    return r.json()["rev"];
  }
  // A conflict on `id`: a second first revision, written as a replicator would.
  void put_conflict(const std::string& id, const std::string& rev, const std::string& body) {
    Json doc = Json::parse(body);
    doc["_rev"] = rev;
    auto r = call(verb::put, "/db/" + id + "?new_edits=false", doc.dump());
    EXPECT_EQ(r.status, 201u) << r.body;
  }
  Ids changes_ids() {
    Ids ids;
    const Json feed = call(verb::get, "/db/_changes").json();
    for (const auto& row : feed["results"]) ids.push_back(row["id"]);
    return ids;
  }
  Ids all_docs_ids() {
    Ids ids;
    const Json all = call(verb::get, "/db/_all_docs").json();
    for (const auto& row : all["rows"]) ids.push_back(row["id"]);
    return ids;
  }
  Ids view_ids(const std::string& path) {
    auto r = call(verb::get, "/db/" + path);
    EXPECT_EQ(r.status, 200u) << r.body;
    Ids ids;
    const Json body = r.json();
    for (const auto& row : body["rows"]) ids.push_back(row["id"]);
    return ids;
  }
  Json info() { return call(verb::get, "/db").json(); }
  static long long seq_n(const Json& seq) {
    const std::string s = seq.get<std::string>();
    return std::stoll(s.substr(0, s.find('-')));
  }
  TempDir dir_;
  std::optional<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(PurgeHttpTest, PurgedDocumentLeavesNoTrace) {
  const std::string a = put("a", R"({"v":1})");
  put("b", R"({"v":2})");
  const long long seq_before = seq_n(info()["update_seq"]);
  EXPECT_EQ(info()["purge_seq"], "0");

  auto r = purge(R"({"a":[")" + a + R"(","1-bogus","9-abc"],"zz":["1-abc"]})");
  ASSERT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(r.body, R"({"purge_seq":null,"purged":{"a":[")" + a +
                        R"("],"zz":[]}})"
                        "\n");

  auto got = call(verb::get, "/db/a");
  EXPECT_EQ(got.status, 404u);
  EXPECT_EQ(got.json()["reason"], "missing");  // not "deleted": no tombstone is left
  EXPECT_EQ(call(verb::get, "/db/a?rev=" + a).status, 404u);
  EXPECT_EQ(changes_ids(), (Ids{"b"}));
  EXPECT_EQ(all_docs_ids(), (Ids{"b"}));
  const Json i = info();
  EXPECT_EQ(i["doc_count"], 1);
  EXPECT_EQ(i["doc_del_count"], 0);
  EXPECT_EQ(seq_n(i["purge_seq"]), 2);
  EXPECT_EQ(seq_n(i["update_seq"]), seq_before + 2);  // one update per purged id, as CouchDB
  // The log keeps the revisions as asked.
  EXPECT_EQ(call(verb::get, "/db/_purged_infos").body,
            R"({"purged_infos":[{"id":"a","revs":[")" + a +
                R"(","1-bogus","9-abc"]},{"id":"zz","revs":["1-abc"]}]})"
                "\n");
  // A new document of the same id starts a new history.
  EXPECT_EQ(put("a", R"({"v":1})"), a);
}

// The bytes of purged documents: out of the live sizes at once, out of the store's files
// (sizes.file) once the database is compacted.
TEST_F(PurgeHttpTest, PurgedBytesLeaveTheSizesAndTheFilesAfterCompaction) {
  // 400 documents of 8 KB (incompressible hex, so the files hold about 3 MB); purge 350.
  std::string body;
  std::uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 8000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    body.push_back("0123456789abcdef"[x & 15]);
  }
  std::vector<std::string> revs;
  for (int i = 0; i < 400; ++i)
    revs.push_back(put("p" + std::to_string(i), R"({"blob":")" + body.substr(i % 64) + "\"}"));
  ASSERT_EQ(call(verb::post, "/db/_compact").status, 202u);  // everything in files first
  const Json before = info()["sizes"];
  EXPECT_GT(before["active"].get<long long>(), 3'000'000);
  EXPECT_GT(before["file"].get<long long>(), 1'500'000);
  for (int from = 0; from < 350; from += 5) {  // [purge] max_document_id_number is 5 here
    Json req = Json::object();
    for (int i = from; i < from + 5; ++i) req["p" + std::to_string(i)] = {revs[i]};
    ASSERT_EQ(purge(req.dump()).status, 201u);
  }
  const Json purged = info()["sizes"];
  EXPECT_LT(purged["active"].get<long long>(), before["active"].get<long long>() / 4);
  EXPECT_LT(purged["external"].get<long long>(), before["external"].get<long long>() / 4);
  // A compaction cannot drop bytes that a reader running at that moment (the server's background
  // work) may still see; one after it can. Compacted again a few times at most.
  Json compacted;
  for (int attempt = 0; attempt < 10; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSERT_EQ(call(verb::post, "/db/_compact").status, 202u);
    compacted = info()["sizes"];
    if (compacted["file"].get<long long>() < before["file"].get<long long>() / 2) break;
  }
  EXPECT_LT(compacted["file"].get<long long>(), before["file"].get<long long>() / 2)
      << before.dump() << " then " << compacted.dump();
  EXPECT_EQ(info()["doc_count"], 50);
}

TEST_F(PurgeHttpTest, PurgingOneLeafMovesTheDocumentToANewSequence) {
  put_conflict("c", "1-aaa", R"({"v":1})");
  put_conflict("c", "1-bbb", R"({"v":2})");
  const std::string c2 = put("c", R"({"_rev":"1-bbb","v":3})");
  put("d", "{}");
  ASSERT_EQ(changes_ids(), (Ids{"c", "d"}));
  EXPECT_EQ(call(verb::get, "/db/c?conflicts=true").json()["_conflicts"], Json::array({"1-aaa"}));

  // A non-leaf revision is ignored, as CouchDB ignores it.
  auto r = purge(R"({"c":["1-aaa","1-bbb"]})");
  ASSERT_EQ(r.status, 201u);
  EXPECT_EQ(r.json()["purged"]["c"], Json::array({"1-aaa"}));
  EXPECT_EQ(changes_ids(), (Ids{"d", "c"}));
  const Json doc = call(verb::get, "/db/c?conflicts=true&revs_info=true").json();
  EXPECT_EQ(doc["_rev"], c2);
  EXPECT_FALSE(doc.contains("_conflicts"));
  EXPECT_EQ(doc["_revs_info"].size(), 2u);
  EXPECT_EQ(call(verb::get, "/db/c?rev=1-aaa").status, 404u);
  EXPECT_EQ(call(verb::get, "/db/c?rev=1-bbb").json()["v"], 2);  // history stays

  // A deleted document purged: the tombstone goes, and doc_del_count with it.
  auto del = call(verb::delete_,
                  "/db/d?rev=" + call(verb::get, "/db/d").json()["_rev"].get<std::string>());
  ASSERT_EQ(del.status, 200u);
  EXPECT_EQ(info()["doc_del_count"], 1);
  ASSERT_EQ(purge(R"({"d":[")" + del.json()["rev"].get<std::string>() + R"("]})").status, 201u);
  EXPECT_EQ(info()["doc_del_count"], 0);
  EXPECT_EQ(changes_ids(), (Ids{"c"}));
}

TEST_F(PurgeHttpTest, RequestsAreCheckedAsCouchDBChecksThem) {
  auto expect_400 = [&](const std::string& body, const std::string& reason) {
    auto r = purge(body);
    EXPECT_EQ(r.status, 400u) << body;
    EXPECT_EQ(r.json()["reason"], reason) << body;
  };
  expect_400("[]", "Request body must be a JSON object");
  expect_400(R"({"x":"1-a"})", "Invalid list of revisions");
  expect_400(R"({"x":[1]})", "Invalid rev format");
  expect_400(R"({"x":["junk"]})", "Invalid rev format");
  // [purge] max_document_id_number = 5, max_revisions_number = 8 (this test's ini).
  expect_400(R"({"a":[],"b":[],"c":[],"d":[],"e":[],"f":[]})",
             "Exceeded maximum number of documents.");
  expect_400(R"({"a":["1-a","1-b","1-c","1-d","1-e"],"b":["1-a","1-b","1-c","1-d"]})",
             "Exceeded maximum number of revisions.");
  EXPECT_EQ(purge(R"({"x":[]})").body, R"({"purge_seq":null,"purged":{"x":[]}})"
                                       "\n");
  EXPECT_EQ(call(verb::post, "/db/_purge", "{}", {}).status, 415u);
  EXPECT_EQ(call(verb::get, "/db/_purge").status, 405u);
  EXPECT_EQ(call(verb::post, "/db/_purged_infos", "{}").status, 405u);
  EXPECT_EQ(call(verb::post, "/nodb/_purge", "{}").status, 404u);
  // Nothing of the refused requests was logged.
  EXPECT_EQ(call(verb::get, "/db/_purged_infos").json()["purged_infos"].size(), 1u);
}

TEST_F(PurgeHttpTest, EveryIndexForgetsPurgedDocuments) {
  for (const char* id : {"a", "b", "c"}) put(id, R"({"n":1,"email":")" + std::string(id) + R"("})");
  ASSERT_EQ(call(verb::put, "/db/_design/v",
                 R"({"views":{"x":{"map":"function(d){if(d.n)emit(d._id,d.n)}","reduce":"_sum"}}})")
                .status,
            201u);
  ASSERT_EQ(
      call(
          verb::put, "/db/_design/s",
          R"({"options":{"sync_index":true},"views":{"x":{"map":"function(d){if(d.n)emit(d._id,1)}"}}})")
          .status,
      201u);
  ASSERT_EQ(
      call(verb::post, "/db/_index", R"({"index":{"fields":["n"]},"ddoc":"m","name":"n"})").status,
      200u);
  ASSERT_EQ(call(verb::post, "/db/_index",
                 R"({"index":{"fields":["email"]},"name":"email","ddoc":"uniq","unique":true})")
                .status,
            200u);
  // Every index built.
  EXPECT_EQ(view_ids("_design/v/_view/x?reduce=false"), (Ids{"a", "b", "c"}));
  EXPECT_EQ(view_ids("_design/s/_view/x"), (Ids{"a", "b", "c"}));
  auto find = [&] {
    auto r = call(verb::post, "/db/_find", R"({"selector":{"n":1},"use_index":"m"})");
    EXPECT_EQ(r.status, 200u) << r.body;
    Ids ids;
    const Json body = r.json();
    for (const auto& d : body["docs"]) ids.push_back(d["_id"]);
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  EXPECT_EQ(find(), (Ids{"a", "b", "c"}));

  const std::string rev_b = call(verb::get, "/db/b").json()["_rev"];
  ASSERT_EQ(purge(R"({"b":[")" + rev_b + R"("]})").status, 201u);
  // The synchronous index forgot in the purge's own transaction: no build needed.
  EXPECT_EQ(view_ids("_design/s/_view/x?update=false"), (Ids{"a", "c"}));
  // The lazy ones on their next update: rows and reductions.
  EXPECT_EQ(view_ids("_design/v/_view/x?reduce=false"), (Ids{"a", "c"}));
  EXPECT_EQ(call(verb::get, "/db/_design/v/_view/x").json()["rows"][0]["value"], 2);
  EXPECT_EQ(call(verb::get, "/db/_design/v/_info").json()["view_index"]["purge_seq"], 1);
  EXPECT_EQ(find(), (Ids{"a", "c"}));
  // The unique key is free again.
  EXPECT_EQ(call(verb::put, "/db/b2", R"({"email":"b"})").status, 201u);
}

// A view behind the oldest purge entry the log still has starts again, and ends right.
TEST_F(PurgeHttpTest, IndexBehindTheTrimmedLogIsRebuilt) {
  for (int i = 0; i < 6; ++i) put("d" + std::to_string(i), R"({"n":1})");
  ASSERT_EQ(call(verb::put, "/db/_design/v",
                 R"({"views":{"x":{"map":"function(d){emit(d._id,1)}","reduce":"_count"}}})")
                .status,
            201u);
  EXPECT_EQ(view_ids("_design/v/_view/x?reduce=false").size(), 6u);
  auto limit = call(verb::put, "/db/_purged_infos_limit", "2");
  EXPECT_EQ(limit.status, 200u);
  EXPECT_EQ(limit.body, "{\"ok\":true}\n");
  EXPECT_EQ(call(verb::get, "/db/_purged_infos_limit").body, "2\n");
  EXPECT_EQ(call(verb::put, "/db/_purged_infos_limit", "0").json()["reason"],
            "`purged_infos_limit` must be positive integer");
  EXPECT_EQ(call(verb::put, "/db/_purged_infos_limit", "\"3\"").status, 400u);
  for (int i = 0; i < 4; ++i) {
    const std::string id = "d" + std::to_string(i);
    const std::string rev = call(verb::get, "/db/" + id).json()["_rev"];
    ASSERT_EQ(purge(R"({")" + id + R"(":[")" + rev + R"("]})").status, 201u);
  }
  const Json log = call(verb::get, "/db/_purged_infos").json()["purged_infos"];
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0]["id"], "d2");
  EXPECT_EQ(log[1]["id"], "d3");
  EXPECT_EQ(view_ids("_design/v/_view/x?reduce=false"), (Ids{"d4", "d5"}));
  EXPECT_EQ(call(verb::get, "/db/_design/v/_view/x").json()["rows"][0]["value"], 2);
}

}  // namespace
}  // namespace chaise::test
