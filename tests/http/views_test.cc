// _all_docs, _design_docs, _local_docs, _all_docs/queries and the normal _changes feed, over HTTP
// against the real server.
#include <gtest/gtest.h>

#include <set>

#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;

const std::vector<std::pair<std::string, std::string>> kJson = {
    {"Content-Type", "application/json"}};

class ViewsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(dir_.path(), std::vector<std::string>{});
    client_ = std::make_unique<HttpClient>(server_->port());
    ASSERT_EQ(client_->request(verb::put, "/db").status, 201);
  }
  void TearDown() override {
    client_.reset();
    ExitStatus s = server_->stop();
    EXPECT_TRUE(s.exited && s.exit_code == 0);
  }

  HttpResponse get(const std::string& target) { return client_->get(target); }
  HttpResponse post(const std::string& target, const std::string& body) {
    return client_->request(verb::post, target, body, kJson);
  }
  Json bulk(const Json& docs, bool new_edits = true) {
    Json body = {{"docs", docs}};
    if (!new_edits) body["new_edits"] = false;
    auto r = post("/db/_bulk_docs", body.dump());
    EXPECT_EQ(r.status, 201) << r.body;
    return r.json();
  }
  std::string put_doc(const std::string& id, const Json& doc) {
    auto r = bulk(Json::array({[&] {
      Json d = doc;
      d["_id"] = id;
      return d;
    }()}));
    return r[0].value("rev", "");
  }
  static std::vector<std::string> ids(const Json& rows) {
    std::vector<std::string> out;
    for (const auto& r : rows) out.push_back(r.contains("id") ? r["id"].get<std::string>() : "?");
    return out;
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(ViewsTest, AllDocsShapeOrderAndTotals) {
  for (auto id : {"c", "a", "b"}) put_doc(id, {{"v", id}});
  auto r = get("/db/_all_docs");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  Json j = r.json();
  EXPECT_EQ(j["total_rows"], 3);
  EXPECT_EQ(j["offset"], 0);
  EXPECT_EQ(ids(j["rows"]), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(j["rows"][0]["key"], "a");
  EXPECT_EQ(j["rows"][0]["value"]["rev"].get<std::string>().substr(0, 2), "1-");
  EXPECT_FALSE(j["rows"][0].contains("doc"));
  auto keys_order = std::vector<std::string>();
  for (auto& [k, v] : j.items()) keys_order.push_back(k);
  EXPECT_EQ(keys_order, (std::vector<std::string>{"total_rows", "offset", "rows"}));
}

TEST_F(ViewsTest, AllDocsParameters) {
  for (auto id : {"a", "b", "c", "d", "e"}) put_doc(id, {{"v", id}});
  EXPECT_EQ(ids(get("/db/_all_docs?startkey=%22b%22&endkey=%22d%22").json()["rows"]),
            (std::vector<std::string>{"b", "c", "d"}));
  EXPECT_EQ(ids(get("/db/_all_docs?start_key=%22b%22&end_key=%22d%22&inclusive_end=false")
                    .json()["rows"]),
            (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(ids(get("/db/_all_docs?descending=true&startkey=%22c%22").json()["rows"]),
            (std::vector<std::string>{"c", "b", "a"}));
  auto page = get("/db/_all_docs?skip=1&limit=2").json();
  EXPECT_EQ(ids(page["rows"]), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(page["offset"], 1);
  auto from_c = get("/db/_all_docs?startkey=%22c%22").json();
  EXPECT_EQ(from_c["offset"], 2);
  EXPECT_EQ(from_c["total_rows"], 5);
  EXPECT_EQ(ids(get("/db/_all_docs?key=%22d%22").json()["rows"]), (std::vector<std::string>{"d"}));
  auto docs = get("/db/_all_docs?include_docs=true&limit=1").json();
  EXPECT_EQ(docs["rows"][0]["doc"]["v"], "a");
  EXPECT_EQ(docs["rows"][0]["doc"]["_id"], "a");
  // Non-string keys collate around the ids: numbers before, objects after.
  EXPECT_EQ(ids(get("/db/_all_docs?startkey=1&endkey=%22b%22").json()["rows"]),
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(get("/db/_all_docs?endkey=1").json()["rows"].empty());
  EXPECT_EQ(get("/db/_all_docs?startkey=%22d%22&endkey=%7B%7D").json()["rows"].size(), 2u);
  auto seq = get("/db/_all_docs?update_seq=true&limit=0").json();
  EXPECT_TRUE(seq["update_seq"].is_string());
  EXPECT_TRUE(seq["rows"].empty());
}

TEST_F(ViewsTest, AllDocsKeysPostAndDeletedDocs) {
  std::string rev = put_doc("a", {});
  put_doc("b", {});
  auto del = client_->request(verb::post, "/db/_bulk_docs",
                              Json{{"docs", {{{"_id", "a"}, {"_rev", rev}, {"_deleted", true}}}}}.dump(),
                              kJson);
  ASSERT_EQ(del.status, 201);
  EXPECT_EQ(ids(get("/db/_all_docs").json()["rows"]), (std::vector<std::string>{"b"}));
  auto r = post("/db/_all_docs?include_docs=true", R"({"keys":["b","a","zz"]})");
  ASSERT_EQ(r.status, 200);
  Json rows = r.json()["rows"];
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["id"], "b");
  EXPECT_EQ(rows[1]["value"]["deleted"], true);
  EXPECT_TRUE(rows[1]["doc"].is_null());
  EXPECT_EQ(rows[2], (Json{{"key", "zz"}, {"error", "not_found"}}));
  auto g = get("/db/_all_docs?keys=%5B%22b%22%5D").json();
  EXPECT_EQ(ids(g["rows"]), (std::vector<std::string>{"b"}));
  auto bad = post("/db/_all_docs", R"({"keys":"b"})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.json()["reason"], "`keys` parameter must be an array.");
}

TEST_F(ViewsTest, AllDocsErrors) {
  EXPECT_EQ(get("/missing/_all_docs").status, 404);
  EXPECT_EQ(get("/missing/_all_docs").json()["reason"], "Database does not exist.");
  auto lim = get("/db/_all_docs?limit=-1");
  EXPECT_EQ(lim.status, 400);
  EXPECT_EQ(lim.json()["error"], "query_parse_error");
  auto b = get("/db/_all_docs?descending=maybe");
  EXPECT_EQ(b.status, 400);
  EXPECT_EQ(b.json()["reason"], "Invalid boolean parameter: \"maybe\"");
  EXPECT_EQ(get("/db/_all_docs?startkey=%7Bbad").status, 400);
  auto m = client_->request(verb::put, "/db/_all_docs");
  EXPECT_EQ(m.status, 405);
  EXPECT_EQ(m.header("Allow"), "GET,HEAD,POST");
  EXPECT_EQ(client_->request(verb::post, "/db/_all_docs", "{}").status, 415);
  EXPECT_EQ(post("/db/_all_docs", "[1]").status, 400);
}

TEST_F(ViewsTest, DesignAndLocalDocsListings) {
  put_doc("a", {});
  put_doc("_design/x", {{"views", Json::object()}});
  put_doc("_local/cp", {{"seq", 1}});
  EXPECT_EQ(ids(get("/db/_all_docs").json()["rows"]), (std::vector<std::string>{"_design/x", "a"}));
  auto dd = get("/db/_design_docs").json();
  EXPECT_EQ(ids(dd["rows"]), (std::vector<std::string>{"_design/x"}));
  auto ld = get("/db/_local_docs?include_docs=true").json();
  EXPECT_EQ(ids(ld["rows"]), (std::vector<std::string>{"_local/cp"}));
  EXPECT_TRUE(ld["total_rows"].is_null());
  EXPECT_EQ(ld["rows"][0]["value"]["rev"], "0-1");
  EXPECT_EQ(ld["rows"][0]["doc"]["seq"], 1);
}

TEST_F(ViewsTest, AllDocsQueries) {
  for (auto id : {"a", "b", "c"}) put_doc(id, {});
  auto r = post("/db/_all_docs/queries",
                R"({"queries":[{"keys":["b"]},{"limit":1,"skip":2},{"startkey":"b","descending":true}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  Json res = r.json()["results"];
  ASSERT_EQ(res.size(), 3u);
  EXPECT_EQ(ids(res[0]["rows"]), (std::vector<std::string>{"b"}));
  EXPECT_EQ(ids(res[1]["rows"]), (std::vector<std::string>{"c"}));
  EXPECT_EQ(ids(res[2]["rows"]), (std::vector<std::string>{"b", "a"}));
}

TEST_F(ViewsTest, AllDocsStreamsManyRowsAcrossPages) {
  // More rows than one page (1000) and than one response buffer chunk.
  Json docs = Json::array();
  for (int i = 0; i < 2500; ++i) {
    char id[16];
    std::snprintf(id, sizeof id, "d%05d", i);
    docs.push_back({{"_id", id}, {"n", i}});
  }
  bulk(docs);
  auto r = get("/db/_all_docs?include_docs=true");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("Transfer-Encoding"), "chunked");
  Json rows = r.json()["rows"];
  ASSERT_EQ(rows.size(), 2500u);
  for (int i = 0; i < 2500; ++i) ASSERT_EQ(rows[i]["doc"]["n"], i);
  // The connection stays usable after a streamed response.
  EXPECT_EQ(get("/db").status, 200);
}

TEST_F(ViewsTest, ChangesNormalFeed) {
  std::string ra = put_doc("a", {{"v", 1}});
  put_doc("b", {});
  auto up = client_->request(verb::post, "/db/_bulk_docs",
                             Json{{"docs", {{{"_id", "a"}, {"_rev", ra}, {"v", 2}}}}}.dump(), kJson);
  ASSERT_EQ(up.status, 201);
  auto r = get("/db/_changes");
  ASSERT_EQ(r.status, 200);
  Json j = r.json();
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][0]["id"], "b");
  EXPECT_EQ(j["results"][1]["id"], "a");
  EXPECT_EQ(j["results"][1]["changes"][0]["rev"].get<std::string>().substr(0, 2), "2-");
  EXPECT_EQ(j["last_seq"], j["results"][1]["seq"]);
  EXPECT_EQ(j["pending"], 0);
  EXPECT_EQ(get("/db").json()["update_seq"], j["last_seq"]);
  // since, limit and pending.
  std::string first = j["results"][0]["seq"];
  auto after = get("/db/_changes?since=" + first).json();
  ASSERT_EQ(after["results"].size(), 1u);
  EXPECT_EQ(after["results"][0]["id"], "a");
  auto lim = get("/db/_changes?limit=1").json();
  EXPECT_EQ(lim["results"].size(), 1u);
  EXPECT_EQ(lim["last_seq"], first);
  EXPECT_EQ(lim["pending"], 1);
  auto now = get("/db/_changes?since=now").json();
  EXPECT_TRUE(now["results"].empty());
  EXPECT_EQ(now["last_seq"], j["last_seq"]);
  auto desc = get("/db/_changes?descending=true&limit=1").json();
  EXPECT_EQ(desc["results"][0]["id"], "a");
  auto docs = get("/db/_changes?include_docs=true").json();
  EXPECT_EQ(docs["results"][1]["doc"]["v"], 2);
  // Empty database: last_seq "0".
  ASSERT_EQ(client_->request(verb::put, "/empty").status, 201);
  auto e = get("/empty/_changes").json();
  EXPECT_TRUE(e["results"].empty());
  EXPECT_EQ(e["last_seq"], "0");
}

TEST_F(ViewsTest, ChangesDeletedStyleAllDocsAndConflicts) {
  bulk(Json::array({{{"_id", "x"}, {"_rev", "1-a"}}, {{"_id", "x"}, {"_rev", "1-b"}}}), false);
  std::string rd = put_doc("d", {});
  auto del = post("/db/_bulk_docs",
                  Json{{"docs", {{{"_id", "d"}, {"_rev", rd}, {"_deleted", true}}}}}.dump());
  ASSERT_EQ(del.status, 201);
  Json j = get("/db/_changes?style=all_docs").json();
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][0]["id"], "x");
  EXPECT_EQ(j["results"][0]["changes"].size(), 2u);
  EXPECT_EQ(j["results"][0]["changes"][0]["rev"], "1-b");  // the winner first
  EXPECT_EQ(j["results"][1]["deleted"], true);
  Json main_only = get("/db/_changes").json();
  EXPECT_EQ(main_only["results"][0]["changes"].size(), 1u);
  Json with_docs = get("/db/_changes?include_docs=true&conflicts=true").json();
  EXPECT_EQ(with_docs["results"][0]["doc"]["_conflicts"], Json::array({"1-a"}));
  EXPECT_EQ(with_docs["results"][1]["doc"]["_deleted"], true);
}

TEST_F(ViewsTest, ChangesFilters) {
  for (auto id : {"a", "b", "c"}) put_doc(id, {});
  put_doc("_design/app", {});
  auto ids_of = [](const Json& j) {
    std::vector<std::string> out;
    for (const auto& r : j["results"]) out.push_back(r["id"]);
    return out;
  };
  auto get_ids = get("/db/_changes?filter=_doc_ids&doc_ids=%5B%22c%22,%22a%22,%22zz%22%5D").json();
  EXPECT_EQ(ids_of(get_ids), (std::vector<std::string>{"a", "c"}));  // in sequence order
  auto post_ids = post("/db/_changes?filter=_doc_ids", R"({"doc_ids":["b"]})");
  ASSERT_EQ(post_ids.status, 200) << post_ids.body;
  EXPECT_EQ(ids_of(post_ids.json()), (std::vector<std::string>{"b"}));
  EXPECT_EQ(ids_of(get("/db/_changes?filter=_design").json()),
            (std::vector<std::string>{"_design/app"}));
  auto bad = get("/db/_changes?filter=_doc_ids&doc_ids=%22a%22");
  EXPECT_EQ(bad.status, 400);
  auto interval = get("/db/_changes?seq_interval=2").json();
  EXPECT_TRUE(interval["results"][0]["seq"].is_null());
  EXPECT_TRUE(interval["results"][1]["seq"].is_string());
}

TEST_F(ViewsTest, ChangesErrors) {
  auto since = get("/db/_changes?since=garbage");
  EXPECT_EQ(since.status, 400);
  EXPECT_EQ(since.json()["reason"], "Malformed sequence supplied in 'since' parameter.");
  auto feed = get("/db/_changes?feed=bogus");
  EXPECT_EQ(feed.status, 400);
  EXPECT_EQ(feed.json()["reason"],
            "Supported `feed` types: normal, continuous, live, longpoll, eventsource");
  EXPECT_EQ(get("/db/_changes?style=odd").status, 400);
  EXPECT_EQ(get("/db/_changes?seq_interval=0").status, 400);
  EXPECT_EQ(get("/nope/_changes").status, 404);
  EXPECT_EQ(client_->request(verb::post, "/db/_changes", "{}").status, 415);
}

TEST_F(ViewsTest, ChangesStreamsManyRowsWithSequencesStrictlyIncreasing) {
  Json docs = Json::array();
  for (int i = 0; i < 2200; ++i) docs.push_back({{"_id", "k" + std::to_string(i)}});
  bulk(docs);
  Json j = get("/db/_changes").json();
  ASSERT_EQ(j["results"].size(), 2200u);
  std::set<std::string> seen;
  std::string prev;
  for (const auto& r : j["results"]) {
    std::string seq = r["seq"];
    ASSERT_GT(seq, prev);
    prev = seq;
    seen.insert(r["id"].get<std::string>());
  }
  EXPECT_EQ(seen.size(), 2200u);
}

}  // namespace
}  // namespace chaise::test
