// _all_docs, _design_docs, _local_docs, _all_docs/queries and the normal _changes feed, over HTTP
// against the real server.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <thread>

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
  // couch_mrview_http:parse_boolean ignores case (CouchDB 3.5 answers the same).
  EXPECT_EQ(ids(get("/db/_all_docs?descending=True&startkey=%22c%22").json()["rows"]),
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
  // Raw order, as CouchDB 3.5's _all_docs: objects and arrays sort before every id too.
  EXPECT_TRUE(get("/db/_all_docs?startkey=%22d%22&endkey=%7B%7D").json()["rows"].empty());
  EXPECT_EQ(get("/db/_all_docs?startkey=%7B%7D").json()["rows"].size(), 5u);
  EXPECT_EQ(get("/db/_all_docs?endkey=%5B%5D&descending=true").json()["rows"].size(), 5u);
  auto seq = get("/db/_all_docs?update_seq=true&limit=0").json();
  EXPECT_TRUE(seq["update_seq"].is_string());
  EXPECT_TRUE(seq["rows"].empty());
}

TEST_F(ViewsTest, AllDocsKeysPostAndDeletedDocs) {
  std::string rev = put_doc("a", {});
  put_doc("b", {});
  auto del = client_->request(
      verb::post, "/db/_bulk_docs",
      Json{{"docs", {{{"_id", "a"}, {"_rev", rev}, {"_deleted", true}}}}}.dump(), kJson);
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
  auto r = post(
      "/db/_all_docs/queries",
      R"({"queries":[{"keys":["b"]},{"limit":1,"skip":2},{"startkey":"b","descending":true}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  Json res = r.json()["results"];
  ASSERT_EQ(res.size(), 3u);
  EXPECT_EQ(ids(res[0]["rows"]), (std::vector<std::string>{"b"}));
  EXPECT_EQ(ids(res[1]["rows"]), (std::vector<std::string>{"c"}));
  EXPECT_EQ(ids(res[2]["rows"]), (std::vector<std::string>{"b", "a"}));
}

// _all_docs?include_docs=true reads a page's bodies with one range read (core winners_json):
// every row's doc must be exactly what GET /db/{id} answers, whatever else is stored between
// the winners (superseded revisions, deltas, conflicting branches, attachments, bodies over one
// chunk), forwards and backwards, across pages.
TEST_F(ViewsTest, AllDocsIncludeDocsEqualsDocumentReads) {
  std::vector<std::string> all;
  for (int i = 0; i < 40; ++i) {
    const std::string id = "d" + std::to_string(100 + i);
    all.push_back(id);
    std::string rev =
        put_doc(id, {{"n", i}, {"pad", std::string(static_cast<std::size_t>(i) * 10, 'x')}});
    // Some documents get a long history: superseded bodies (deltas) sort between the winners,
    // enough of them to run past the batch read's bound.
    const int edits = i % 7 == 0 ? 60 : i % 3;
    for (int e = 0; e < edits; ++e) {
      rev = put_doc(id, {{"_rev", rev}, {"n", i}, {"e", e}, {"pad", std::string(40, 'y')}});
      ASSERT_FALSE(rev.empty());
    }
    if (i % 5 == 0)  // a conflicting branch, sometimes the winner
      bulk(Json::array({{{"_id", id},
                         {"_rev", i % 10 == 0 ? "1-ffffffffffffffffffffffffffffffff"
                                              : "1-00000000000000000000000000000000"},
                         {"branch", true}}}),
           false);
    if (i % 4 == 1) {
      auto a = client_->request(
          verb::put,
          "/db/" + id + "/a.txt?rev=" + get("/db/" + id).json()["_rev"].get<std::string>(),
          "attached", {{"Content-Type", "text/plain"}});
      ASSERT_EQ(a.status, 201) << a.body;
    }
  }
  put_doc("big", {{"text", std::string(200'000, 'b')}});  // three body chunks
  all.push_back("big");
  const std::string gone = put_doc("d100x", {{"n", 1}});
  ASSERT_EQ(client_->request(verb::delete_, "/db/d100x?rev=" + gone).status, 200);
  std::sort(all.begin(), all.end());

  for (const char* order : {"", "&descending=true"}) {
    auto r = get(std::string("/db/_all_docs?include_docs=true") + order);
    ASSERT_EQ(r.status, 200);
    const Json rows = r.json()["rows"];
    ASSERT_EQ(rows.size(), all.size());
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const std::string id = rows[k]["id"];
      EXPECT_EQ(id, std::string(*order ? all[all.size() - 1 - k] : all[k]));
      EXPECT_EQ(rows[k]["doc"], get("/db/" + id).json()) << id;
    }
  }
  // _changes renders the winner its row names, without reading the revisions again: the same
  // documents, tombstones included.
  for (const char* extra : {"", "&conflicts=true", "&style=all_docs&conflicts=true"}) {
    const Json changes =
        get(std::string("/db/_changes?include_docs=true") + extra).json()["results"];
    ASSERT_EQ(changes.size(), all.size() + 1);  // and the deleted one
    for (const auto& row : changes) {
      const std::string id = row["id"];
      if (row.value("deleted", false)) {
        EXPECT_EQ(row["doc"],
                  get("/db/" + id + "?rev=" + row["changes"][0]["rev"].get<std::string>()).json());
      } else {
        EXPECT_EQ(row["doc"], get("/db/" + id + (*extra ? "?conflicts=true" : "")).json())
            << id << extra;
      }
    }
  }
  // Across pages of a few rows, and with att_encoding_info.
  auto paged = get("/db/_all_docs?include_docs=true&att_encoding_info=true&skip=3&limit=20");
  const Json rows = paged.json()["rows"];
  ASSERT_EQ(rows.size(), 20u);
  for (const auto& row : rows)
    EXPECT_EQ(row["doc"],
              get("/db/" + row["id"].get<std::string>() + "?att_encoding_info=true").json());
}

TEST_F(ViewsTest, ChangesIncludeDocsReadAheadKeepsLimitPendingAndFilters) {
  // More rows than a read-ahead batch (64), ids out of sequence order, some edited, one deleted,
  // one too long for the batch read.
  Json docs = Json::array();
  for (int i = 0; i < 150; ++i)
    docs.push_back({{"_id", "c" + std::to_string((i * 37) % 150)}, {"n", i}});
  bulk(docs);
  for (int i = 0; i < 150; i += 11) {
    const std::string id = "c" + std::to_string(i);
    put_doc(id, {{"_rev", get("/db/" + id).json()["_rev"]}, {"n", 1000 + i}});
  }
  put_doc("long", {{"text", std::string(250'000, 'l')}});
  const std::string gone = get("/db/c7").json()["_rev"];
  ASSERT_EQ(client_->request(verb::delete_, "/db/c7?rev=" + gone).status, 200);

  auto same_as_get = [&](const Json& row) {
    const std::string id = row["id"];
    const std::string rev = row["changes"][0]["rev"];
    EXPECT_EQ(row["doc"],
              get("/db/" + id + (row.value("deleted", false) ? "?rev=" + rev : "")).json())
        << id;
  };
  const Json all = get("/db/_changes").json();
  const std::size_t total = all["results"].size();
  ASSERT_EQ(total, 151u);
  // A limit inside a batch: the rows, last_seq and pending are those of a feed without read-ahead.
  const Json first = get("/db/_changes?include_docs=true&limit=70").json();
  ASSERT_EQ(first["results"].size(), 70u);
  EXPECT_EQ(first["pending"], total - 70);
  EXPECT_EQ(first["last_seq"], all["results"][69]["seq"]);
  for (std::size_t k = 0; k < 70; ++k) {
    EXPECT_EQ(first["results"][k]["id"], all["results"][k]["id"]);
    same_as_get(first["results"][k]);
  }
  const Json rest =
      get("/db/_changes?include_docs=true&since=" + first["last_seq"].get<std::string>()).json();
  ASSERT_EQ(rest["results"].size(), total - 70);
  for (const auto& row : rest["results"]) same_as_get(row);
  const Json desc = get("/db/_changes?include_docs=true&descending=true&limit=100").json();
  ASSERT_EQ(desc["results"].size(), 100u);
  for (std::size_t k = 0; k < 100; ++k) {
    EXPECT_EQ(desc["results"][k]["id"], all["results"][total - 1 - k]["id"]);
    same_as_get(desc["results"][k]);
  }
  // A selector reads the documents it filters from the same read-ahead.
  const Json sel =
      post("/db/_changes?filter=_selector&include_docs=true", R"({"selector":{"n":{"$gte":1000}}})")
          .json();
  std::size_t expected = 0;
  for (int i = 0; i < 150; i += 11) expected += i == 7 ? 0 : 1;
  ASSERT_EQ(sel["results"].size(), expected);
  for (const auto& row : sel["results"]) {
    EXPECT_GE(row["doc"]["n"].get<int>(), 1000);
    same_as_get(row);
  }
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

// A stream past its first page reads its blocks without keeping them: a scan of a whole database
// leaves the block cache (and so memory, and the blocks point reads keep warm) as it found it.
TEST_F(ViewsTest, LongStreamsPassThroughTheBlockCache) {
  if (servers_run_on_foundationdb()) GTEST_SKIP() << "the embedded store's block cache";
  const std::string filler(400, 'x');
  for (int batch = 0; batch < 12; ++batch) {
    Json docs = Json::array();
    for (int i = batch * 1000; i < (batch + 1) * 1000; ++i) {
      char id[16];
      std::snprintf(id, sizeof id, "d%05d", i);
      docs.push_back({{"_id", id}, {"n", i}, {"filler", filler}});
    }
    bulk(docs);
  }
  // A view of every document with its body, built now (its build reads every document).
  put_doc("_design/v", {{"views", {{"all", {{"map", "function (d) { emit(d.n, d.filler); }"}}}}}});
  ASSERT_EQ(get("/db/_design/v/_view/all?limit=1").status, 200);
  // Restarted, the server finds every document in table files, read through the block cache.
  client_.reset();
  ASSERT_EQ(server_->stop().exit_code, 0);
  server_ = std::make_unique<ServerProcess>(dir_.path(), std::vector<std::string>{});
  client_ = std::make_unique<HttpClient>(server_->port());
  const auto cached = [&] {
    const std::string text = get("/_node/_local/_prometheus").body;
    const std::string name = "chaise_memory_bytes{part=\"block_cache\"} ";
    const auto at = text.find(name);
    EXPECT_NE(at, std::string::npos);
    return at == std::string::npos ? 0.0 : std::stod(text.substr(at + name.size()));
  };
  for (const std::string target :
       {"/db/_all_docs?include_docs=true", "/db/_changes?include_docs=true&style=all_docs",
        "/db/_design/v/_view/all?include_docs=true"}) {
    auto r = get(target);
    ASSERT_EQ(r.status, 200);
    Json body = r.json();
    const Json& rows = body.contains("rows") ? body["rows"] : body["results"];
    ASSERT_GE(rows.size(), 12000u);
    for (const Json& row : rows) {
      if (row.contains("id") && row["id"] == "_design/v") continue;
      ASSERT_EQ(row["doc"]["filler"], filler);
    }
  }
  // Every page through the cache: 12 MB of blocks (the bodies alone are 5.3 MB). The first page
  // of each: 1.3 MB.
  EXPECT_LT(cached(), 3e6);
  // Point reads still fill it.
  const double before = cached();
  for (int i = 0; i < 12000; i += 7) {
    char id[24];
    std::snprintf(id, sizeof id, "/db/d%05d", i);
    ASSERT_EQ(get(id).status, 200);
  }
  EXPECT_GT(cached(), before + 5e5);
}

TEST_F(ViewsTest, ChangesNormalFeed) {
  std::string ra = put_doc("a", {{"v", 1}});
  put_doc("b", {});
  auto up =
      client_->request(verb::post, "/db/_bulk_docs",
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
  // chttpd_db:parse_changes_query: only "true" turns a flag on; other values are ignored.
  for (const char* value : {"yes", "TRUE", "1"}) {
    auto r =
        get(std::string("/db/_changes?limit=1&include_docs=") + value + "&descending=" + value);
    ASSERT_EQ(r.status, 200u) << value << ": " << r.body;
    EXPECT_FALSE(r.json()["results"][0].contains("doc")) << value;
    EXPECT_EQ(r.json()["last_seq"], first) << value;  // ascending
  }
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
  // Without a limit CouchDB counts down from 10^15, which 2 divides: the first row has its seq.
  auto interval = get("/db/_changes?seq_interval=2").json();
  EXPECT_TRUE(interval["results"][0]["seq"].is_string());
  EXPECT_TRUE(interval["results"][1]["seq"].is_null());
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

// total_rows and offset as CouchDB 3.5 reports them (each checked against it): offset counts the
// whole by-id index before the range, plus skip, at most total_rows; a `keys` query has offset
// null; _design_docs counts design documents.
TEST_F(ViewsTest, AllDocsOffsetAndTotalRowsAsCouchDb) {
  for (auto id : {"d1", "d2", "d3", "d4", "d5"}) put_doc(id, {});
  put_doc("_design/x", {});
  put_doc("_design/y", {});
  auto head = [&](const std::string& q) {
    Json j = get("/db/" + q).json();
    return std::make_pair(j["total_rows"], j["offset"]);
  };
  using P = std::pair<Json, Json>;
  EXPECT_EQ(head("_all_docs"), P(7, 0));
  EXPECT_EQ(head("_all_docs?skip=2&limit=2"), P(7, 2));
  EXPECT_EQ(head("_all_docs?skip=2&limit=2&descending=true"), P(7, 2));
  EXPECT_EQ(head("_all_docs?startkey=%22d3%22&skip=1"), P(7, 5));
  EXPECT_EQ(head("_all_docs?skip=100"), P(7, 7));  // clamped
  EXPECT_EQ(head("_all_docs?startkey=%22zzz%22"), P(7, 7));
  EXPECT_EQ(head("_all_docs?endkey=%22d3%22&descending=true"), P(7, 0));
  EXPECT_EQ(head("_all_docs?startkey=1&descending=true"), P(7, 7));  // starts after everything
  EXPECT_EQ(head("_all_docs?keys=%5B%22d1%22,%22zz%22%5D"), P(7, nullptr));
  EXPECT_EQ(head("_all_docs?keys=%5B%22d1%22%5D&skip=1"), P(7, nullptr));
  auto posted = post("/db/_all_docs", R"({"keys":["d2"]})").json();
  EXPECT_TRUE(posted["offset"].is_null());
  // _design_docs: the design documents are counted; the offset still counts the whole index
  // (documents after the design ones too when descending), at most total_rows.
  EXPECT_EQ(head("_design_docs"), P(2, 0));
  EXPECT_EQ(head("_design_docs?skip=1"), P(2, 1));
  EXPECT_EQ(head("_design_docs?descending=true"), P(2, 2));
  EXPECT_EQ(head("_design_docs?startkey=%22_design/xa%22"), P(2, 1));
  EXPECT_EQ(head("_design_docs?keys=%5B%22_design/x%22%5D"), P(2, nullptr));
  EXPECT_EQ(head("_local_docs"), P(nullptr, nullptr));
  // /queries reads a one-element `keys` as `key` (couch_mrview_http:parse_param): a range.
  auto q = post("/db/_all_docs/queries",
                R"({"queries":[{"keys":["d4"]},{"keys":["d1","d2"]},{"keys":["zz"]}]})");
  ASSERT_EQ(q.status, 200) << q.body;
  Json res = q.json()["results"];
  EXPECT_EQ(res[0]["offset"], 5);
  EXPECT_EQ(ids(res[0]["rows"]), (std::vector<std::string>{"d4"}));
  EXPECT_TRUE(res[1]["offset"].is_null());
  EXPECT_EQ(res[2]["offset"], 7);
  EXPECT_TRUE(res[2]["rows"].empty());  // a range, not a {"key","error":"not_found"} row
}

// "pending" is CouchDB's: the changes after the last row (with a filter: after the last change it
// looked at), also for limit=0; filter=_doc_ids and filter=_design report the changes after
// `since` less the rows sent, and end at the update_seq. Checked against CouchDB 3.5.
TEST_F(ViewsTest, ChangesPendingAndLastSeqAsCouchDb) {
  for (int i = 1; i <= 6; ++i) put_doc("d" + std::to_string(i), {{"v", i}});
  put_doc("_design/x", {});
  put_doc("d7", {{"v", 7}});
  const std::string update_seq = get("/db").json()["update_seq"];
  auto feed = [&](const std::string& q) { return get("/db/_changes?" + q).json(); };
  auto rows = [](const Json& j) {
    std::vector<std::string> out;
    for (const auto& r : j["results"]) out.push_back(r["id"]);
    return out;
  };
  using V = std::vector<std::string>;
  const Json all = feed("");
  ASSERT_EQ(all["results"].size(), 8u);
  auto seq_of = [&](int i) { return all["results"][i]["seq"].get<std::string>(); };

  Json j = feed("limit=0");
  EXPECT_TRUE(j["results"].empty());
  EXPECT_EQ(j["pending"], 8);
  EXPECT_EQ(j["last_seq"], "0");
  j = feed("limit=0&descending=true");
  EXPECT_EQ(j["pending"], 8);
  EXPECT_EQ(j["last_seq"], update_seq);  // a descending feed starts at the update_seq
  j = feed("limit=3");
  EXPECT_EQ(j["pending"], 5);
  EXPECT_EQ(j["last_seq"], seq_of(2));
  j = feed("limit=3&descending=true");
  EXPECT_EQ(j["pending"], 5);
  EXPECT_EQ(j["last_seq"], seq_of(5));
  j = feed("limit=0&since=" + seq_of(4));
  EXPECT_EQ(j["pending"], 3);
  // A selector counts what it has not looked at yet.
  auto sel =
      post("/db/_changes?filter=_selector&limit=1", R"({"selector":{"v":{"$gt":4}}})").json();
  EXPECT_EQ(rows(sel), (V{"d5"}));
  EXPECT_EQ(sel["pending"], 3);
  sel = post("/db/_changes?filter=_selector", R"({"selector":{"v":{"$gt":4}}})").json();
  EXPECT_EQ(sel["pending"], 0);
  EXPECT_EQ(sel["last_seq"], update_seq);
  // Looked-up filters.
  j = feed("filter=_doc_ids&doc_ids=%5B%22d2%22,%22d5%22%5D");
  EXPECT_EQ(rows(j), (V{"d2", "d5"}));
  EXPECT_EQ(j["pending"], 6);
  EXPECT_EQ(j["last_seq"], update_seq);
  j = feed("filter=_doc_ids&doc_ids=%5B%22d2%22,%22d5%22%5D&limit=1");
  EXPECT_EQ(j["pending"], 7);
  EXPECT_EQ(j["last_seq"], seq_of(1));
  j = feed("filter=_doc_ids&doc_ids=%5B%22d2%22,%22d5%22%5D&descending=true");
  EXPECT_EQ(rows(j), (V{"d5", "d2"}));
  EXPECT_EQ(j["pending"], 6);
  EXPECT_EQ(j["last_seq"], seq_of(1));
  j = feed("filter=_doc_ids&doc_ids=%5B%22zz%22%5D&descending=true");
  EXPECT_EQ(j["pending"], 8);
  EXPECT_EQ(j["last_seq"], update_seq);
  // `since` is exclusive on the looked-up paths too: a since equal to d2's change leaves it out.
  j = feed("filter=_doc_ids&doc_ids=%5B%22d2%22,%22d5%22%5D&since=" + seq_of(1));
  EXPECT_EQ(rows(j), (V{"d5"}));
  j = feed("filter=_doc_ids&doc_ids=%5B%22d2%22,%22d5%22%5D&since=" + seq_of(4));
  EXPECT_EQ(rows(j), V{});
  j = feed("filter=_design&since=" + seq_of(5));
  EXPECT_EQ(rows(j), (V{"_design/x"}));
  j = feed("filter=_design&since=" + seq_of(6));
  EXPECT_EQ(rows(j), V{});
  j = feed("filter=_design");
  EXPECT_EQ(rows(j), (V{"_design/x"}));
  EXPECT_EQ(j["pending"], 7);
  EXPECT_EQ(j["last_seq"], update_seq);
  j = feed("filter=_design&descending=true");
  EXPECT_EQ(j["pending"], 7);
  EXPECT_EQ(j["last_seq"], seq_of(6));
}

// seq_interval=N: a row has its seq when the rows the feed may still send (limit, or CouchDB's
// default 10^15), counted before it, are a multiple of N; the others have null.
TEST_F(ViewsTest, ChangesSeqIntervalCountsDownFromTheLimit) {
  for (int i = 1; i <= 9; ++i) put_doc("d" + std::to_string(i), {});
  auto with_seq = [&](const std::string& q) {
    std::vector<int> out;
    Json j = get("/db/_changes?" + q).json();
    for (std::size_t i = 0; i < j["results"].size(); ++i)
      if (!j["results"][i]["seq"].is_null()) out.push_back(static_cast<int>(i) + 1);
    EXPECT_TRUE(j["last_seq"].is_string());
    return out;
  };
  EXPECT_EQ(with_seq("seq_interval=3"), (std::vector<int>{2, 5, 8}));
  EXPECT_EQ(with_seq("seq_interval=3&limit=5"), (std::vector<int>{3}));
  EXPECT_EQ(with_seq("seq_interval=2&limit=5&descending=true"), (std::vector<int>{2, 4}));
  EXPECT_EQ(with_seq("seq_interval=1&limit=2"), (std::vector<int>{1, 2}));
  auto bad = get("/db/_changes?seq_interval=x");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.json()["reason"], "invalid_seq_interval");
}

// filter=ddoc/name and filter=_view follow couch_changes:configure_filter: the design document
// and the member must exist (404 otherwise); then the function runs (design_test.cc tests that).
TEST_F(ViewsTest, ChangesFilterFunctionsAndViewsNeedTheirDesignDocs) {
  put_doc("a", {});
  put_doc("_design/nofilters", {{"views", Json::object()}});
  put_doc("_design/f", {{"filters", {{"even", "function(doc) { return true; }"}}}});
  const std::string gone = put_doc("_design/gone", {{"filters", {{"x", "function() {}"}}}});
  ASSERT_EQ(client_->request(verb::delete_, "/db/_design/gone?rev=" + gone).status, 200);
  auto expect = [&](const std::string& q, unsigned status, const std::string& error,
                    const std::string& reason) {
    auto r = get("/db/_changes?" + q);
    EXPECT_EQ(r.status, status) << q << ": " << r.body;
    if (status != 200) {
      EXPECT_EQ(r.json()["error"], error) << q;
      EXPECT_EQ(r.json()["reason"], reason) << q;
    }
  };
  expect("filter=nope/f", 404, "not_found", "missing");
  expect("filter=gone/x", 404, "not_found", "deleted");
  expect("filter=nofilters/f", 404, "not_found", "missing json key: filters");
  expect("filter=f/odd", 404, "not_found", "missing json key: odd");
  expect("filter=a//b", 404, "not_found", "missing");  // empty parts are dropped
  expect("filter=f", 400, "bad_request", "`filter` must be of the form `designname/filtername`");
  expect("filter=a/b/c", 400, "bad_request",
         "`filter` must be of the form `designname/filtername`");
  expect("filter=f%252Feven", 400, "bad_request",
         "`filter` must be of the form `designname/filtername`");
  expect("filter=_nope", 400, "bad_request", "unknown builtin filter name");
  expect("filter=_design/f/even", 400, "bad_request", "unknown builtin filter name");
  expect("filter=_view", 400, "bad_request", "`view` filter parameter is not provided.");
  expect("filter=_view&view=nope/v", 404, "not_found", "missing");
  expect("filter=_view&view=nofilters/v", 404, "not_found", "missing json key: v");
  expect("filter=_view&view=f/v", 404, "not_found", "missing json key: views");
  // CouchDB answers these with 500 case_clause; Chaise with a 400.
  expect("filter=_view&view=f", 400, "bad_request",
         "`view` must be of the form `designname/viewname`");
  // No filter at all: an empty name or only slashes.
  EXPECT_EQ(get("/db/_changes?filter=").json()["results"].size(), 4u);
  EXPECT_EQ(get("/db/_changes?filter=/").json()["results"].size(), 4u);
  // An existing filter function runs.
  auto js = get("/db/_changes?filter=f/even");
  EXPECT_EQ(js.status, 200);
  EXPECT_EQ(js.json()["results"].size(), 4u);
}

// A normal feed carries an ETag and answers If-None-Match with 304 (chttpd_db
// handle_changes_req1); the value changes with the database and with the request.
TEST_F(ViewsTest, ChangesNormalFeedHasETagAndAnswers304) {
  put_doc("a", {});
  auto r = get("/db/_changes");
  ASSERT_EQ(r.status, 200);
  const std::string etag = r.header("ETag");
  ASSERT_FALSE(etag.empty());
  EXPECT_EQ(get("/db/_changes").header("ETag"), etag);
  EXPECT_EQ(client_->head("/db/_changes").header("ETag"), etag);
  auto cached = client_->request(verb::get, "/db/_changes", {}, {{"If-None-Match", etag}});
  EXPECT_EQ(cached.status, 304);
  EXPECT_TRUE(cached.body.empty());
  EXPECT_EQ(cached.header("ETag"), etag);
  // Another query has another answer, so another ETag.
  EXPECT_NE(get("/db/_changes?limit=1&include_docs=true").header("ETag"), etag);
  auto posted = post("/db/_changes?filter=_doc_ids", R"({"doc_ids":["a"]})");
  EXPECT_FALSE(posted.header("ETag").empty());
  EXPECT_NE(posted.header("ETag"), etag);
  // A write changes it.
  put_doc("b", {});
  auto fresh = client_->request(verb::get, "/db/_changes", {}, {{"If-None-Match", etag}});
  EXPECT_EQ(fresh.status, 200);
  EXPECT_EQ(fresh.json()["results"].size(), 2u);
  EXPECT_NE(fresh.header("ETag"), etag);
  // Errors come first, as in CouchDB: the filter is checked before the ETag.
  EXPECT_EQ(
      client_->request(verb::get, "/db/_changes?filter=x/y", {}, {{"If-None-Match", etag}}).status,
      404);
  // Live feeds have none.
  EXPECT_TRUE(get("/db/_changes?feed=longpoll").header("ETag").empty());
}

// Design documents are checked when written (couch_mrview:validate), on every write path.
TEST_F(ViewsTest, DesignDocsAreValidatedOnWrite) {
  auto expect_invalid = [](const HttpResponse& r, const std::string& reason) {
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.json()["error"], "invalid_design_doc") << r.body;
    EXPECT_EQ(r.json()["reason"], reason) << r.body;
  };
  expect_invalid(client_->request(verb::put, "/db/_design/a", R"({"views":{"v":{"map":1}}})"),
                 "`views.v.map` field must have string type");
  expect_invalid(client_->request(verb::put, "/db/_design/a", R"({"views":{"v":{}}})"),
                 "View `v` must contain map function");
  expect_invalid(client_->request(verb::put, "/db/_design/a", R"({"_deleted":true,"views":1})"),
                 "`views` field must have object type");
  expect_invalid(client_->request(verb::put, "/db/_design/a?new_edits=false",
                                  R"({"_rev":"1-abc","language":1})"),
                 "`language` field must have string type");
  expect_invalid(post("/db", R"({"_id":"_design/a","filters":{"f":1}})"),
                 "`filters.f` field must have string or object type");
  expect_invalid(client_->request(verb::put, "/db/_design/a",
                                  R"({"views":{"v":{"map":"function(d){}","reduce":"_median"}}})"),
                 "`_median` is not a supported reduce function.");
  expect_invalid(
      client_->request(verb::put, "/db/_design/a", R"({"options":{"partitioned":true}})"),
      "partitioned option cannot be true in a non-partitioned database.");
  // _bulk_docs: the bad design document is refused in its own entry and not written; the other
  // documents of the request are written (CouchDB 3.5 answers 201 the same way).
  auto bulk_r = post("/db/_bulk_docs",
                     R"({"docs":[{"_id":"_design/b","rewrites":{}},{"_id":"bulk_plain"}]})");
  EXPECT_EQ(bulk_r.status, 201) << bulk_r.body;
  const Json bj = bulk_r.json();
  ASSERT_TRUE(bj.is_array()) << bulk_r.body;
  const Json& err = bj[0];
  EXPECT_EQ(err["id"], "_design/b");
  EXPECT_EQ(err["error"], "invalid_design_doc") << bulk_r.body;
  EXPECT_EQ(err["reason"], "`rewrites` field must have array or string type");
  EXPECT_EQ(bj[1]["ok"], true) << bulk_r.body;
  EXPECT_EQ(get("/db/bulk_plain").status, 200);
  EXPECT_EQ(get("/db/_design/b").status, 404);
  EXPECT_EQ(get("/db/_design/a").status, 404);
  // Valid ones, and the same members on other documents, are written.
  EXPECT_EQ(
      client_
          ->request(
              verb::put, "/db/_design/ok",
              R"({"language":"javascript","views":{"lib":{"x":1},"v":{"map":"function(d){}","reduce":"_sum"}},"options":{"local_seq":true},"rewrites":[],"filters":{"f":"function(){}"}})")
          .status,
      201);
  EXPECT_EQ(client_->request(verb::put, "/db/plain", R"({"views":1})").status, 201);
  EXPECT_EQ(client_->request(verb::put, "/db/_local/x", R"({"views":1})").status, 201);
  ASSERT_EQ(client_->request(verb::put, "/pdb?partitioned=true").status, 201);
  EXPECT_EQ(
      client_->request(verb::put, "/pdb/_design/p", R"({"options":{"partitioned":true}})").status,
      201);
}

TEST_F(ViewsTest, SequencesStartWithTheCountOfChangesAsCouchDBs) {
  // CouchDB's sequences start with the number of updates ("3-g1AAAA..."); PouchDB's checkpoint
  // tests and progress displays read it.
  bulk(Json::array({{{"_id", "a"}}, {{"_id", "b"}}, {{"_id", "c"}}}));
  Json j = get("/db/_changes").json();
  ASSERT_EQ(j["results"].size(), 3u);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(j["results"][i]["seq"].get<std::string>().rfind(std::to_string(i + 1) + "-", 0), 0u)
        << j.dump();
  const std::string third = j["results"][2]["seq"];
  EXPECT_EQ(j["last_seq"], third);
  EXPECT_EQ(get("/db").json()["update_seq"], third);
  Json a = get("/db/a").json();
  put_doc("a", {{"_rev", a["_rev"]}, {"x", 1}});
  // `since` is the versionstamp: with the prefix, without it, or with another N.
  const std::string bare = third.substr(third.find('-') + 1);
  for (const std::string& since : {third, bare, "77-" + bare}) {
    Json after = get("/db/_changes?since=" + since).json();
    ASSERT_EQ(after["results"].size(), 1u) << since << after.dump();
    EXPECT_EQ(after["results"][0]["id"], "a");
    EXPECT_EQ(after["results"][0]["seq"].get<std::string>().rfind("4-", 0), 0u);
  }
  EXPECT_EQ(get("/db/a?local_seq=true").json()["_local_seq"].get<std::string>().rfind("4-", 0), 0u);
  EXPECT_EQ(get("/db/_changes?since=x-" + bare).status, 400);
  // A shard's own feed keeps the bare fixed-width form, which sorts as the sequences do.
  Json shard = get("/db/_changes/0").json();
  ASSERT_EQ(shard["results"].size(), 3u);
  for (const auto& r : shard["results"])
    EXPECT_EQ(r["seq"].get<std::string>().find('-'), std::string::npos) << shard.dump();
}

// The N before the dash never goes down along a feed, nor from one longpoll to the next, however
// concurrent writers' transactions interleave (each takes N from a snapshot read).
TEST_F(ViewsTest, SequenceNumbersNeverGoDownUnderConcurrentBulkWrites) {
  std::vector<std::thread> writers;
  for (int w = 0; w < 6; ++w)
    writers.emplace_back([&, w] {
      HttpClient c(server_->port(), 60s);
      for (int i = 0; i < 25; ++i) {
        Json docs = Json::array();
        for (int j = 0; j <= (w * 7 + i) % 20; ++j)
          docs.push_back({{"_id", "w" + std::to_string(w) + "_" + std::to_string(i) + "_" +
                                      std::to_string(j)}});
        c.request(verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump(), kJson);
      }
    });
  for (auto& t : writers) t.join();
  const auto n_of = [](const Json& seq) {
    const std::string s = seq.get<std::string>();
    return std::stoll(s.substr(0, s.find('-')));
  };
  const Json all = get("/db/_changes").json();
  ASSERT_GT(all["results"].size(), 1000u);
  long long last = 0;
  for (const Json& r : all["results"]) {
    EXPECT_GE(n_of(r["seq"]), last) << r.dump();
    last = n_of(r["seq"]);
  }
  EXPECT_GE(n_of(all["last_seq"]), last);
  // Page by page with since=last_seq, as a client follows a feed.
  std::string since = "0";
  last = 0;
  for (;;) {
    const Json page = get("/db/_changes?limit=97&since=" + since).json();
    if (page["results"].empty()) break;
    for (const Json& r : page["results"]) {
      EXPECT_GE(n_of(r["seq"]), last) << r.dump();
      last = n_of(r["seq"]);
    }
    since = page["last_seq"];
  }
  // Descending: never up.
  const Json down = get("/db/_changes?descending=true").json();
  last = n_of(down["results"][0]["seq"]);
  for (const Json& r : down["results"]) {
    EXPECT_LE(n_of(r["seq"]), last) << r.dump();
    last = n_of(r["seq"]);
  }
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
    std::string seq = seq_order(r["seq"]);
    ASSERT_GT(seq, prev);
    prev = seq;
    seen.insert(r["id"].get<std::string>());
  }
  EXPECT_EQ(seen.size(), 2200u);
}

TEST_F(ViewsTest, AllDocsKeysWithBoundsIsAQueryParseError) {
  for (const std::string q : {"key=%221%22", "startkey=%22a%22", "end_key=%22a%22"}) {
    auto r = client_->request(verb::post, "/db/_all_docs?" + q, R"({"keys":["1"]})",
                              {{"Content-Type", "application/json"}});
    EXPECT_EQ(r.status, 400) << q;
    EXPECT_EQ(
        r.json(),
        Json::parse(R"({"error":"query_parse_error",)"
                    R"("reason":"`keys` is incompatible with `key`, `start_key` and `end_key`"})"))
        << q;
  }
}

}  // namespace
}  // namespace chaise::test
