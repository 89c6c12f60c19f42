// Design documents at work over HTTP: validate_doc_update on every write path, JavaScript
// _changes filters (filter=ddoc/name, filter=_view), with CouchDB 3.5's answers.
#include <gtest/gtest.h>
#include <unicode/uversion.h>

#include <fstream>

#include "tests/http/test_credentials.h"
#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;
using Headers = std::vector<std::pair<std::string, std::string>>;

Headers as(std::string_view user, std::string_view password) {
  return {basic_auth(user, password), {"Content-Type", "application/json"}};
}

class DesignTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ini_ = dir_.path() / "local.ini";
    // A short JavaScript time limit (spinning functions time out fast), longer where a sanitizer
    // slows every function down.
    std::ofstream(ini_) << "[chttpd_auth]\niterations = 10\n[admins]\nadmin = secret\n"
                           "[couchdb]\nos_process_timeout = "
                        << 300 * kSanitizerSlowdown << "\n";
    server_ = std::make_unique<ServerProcess>(
        dir_.path() / "data",
        std::vector<std::string>{"--no-admin-party", "--config", ini_.string()});
    client_ = std::make_unique<HttpClient>(server_->port());
    ASSERT_EQ(admin(verb::put, "/db").status, 201u);
  }
  void TearDown() override {
    client_.reset();
    ExitStatus s = server_->stop();
    EXPECT_TRUE(s.exited && s.exit_code == 0);
  }
  HttpResponse admin(verb method, const std::string& target, std::string body = {}) {
    return client_->request(method, target, std::move(body), as("admin", "secret"));
  }
  HttpResponse user(verb method, const std::string& target, std::string body = {}) {
    return client_->request(method, target, std::move(body), as("bob", "pw"));
  }
  void add_user_bob_as_member() {
    ASSERT_EQ(admin(verb::put, "/_users").status, 201u);
    ASSERT_EQ(admin(verb::put, "/_users/org.couchdb.user:bob",
                    R"({"name":"bob","password":"pw","roles":["editor"],"type":"user"})")
                  .status,
              201u);
    ASSERT_EQ(admin(verb::put, "/db/_security",
                    R"({"admins":{"names":["ann"]},"members":{"names":["bob"]}})")
                  .status,
              200u);
  }
  std::string put_ddoc(const std::string& id, const Json& body) {
    auto r = admin(verb::put, "/db/_design/" + id, body.dump());
    EXPECT_EQ(r.status, 201u) << r.body;
    return r.json().value("rev", "");
  }
  static void expect_error(const HttpResponse& r, unsigned status, const std::string& error,
                           const std::string& reason) {
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_EQ(r.json()["error"], error) << r.body;
    EXPECT_EQ(r.json()["reason"], reason) << r.body;
  }

  TempDir dir_;
  fs::path ini_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

const char* kVdu =
    "function(newDoc, oldDoc, userCtx, secObj) {"
    "  if (newDoc.forbid) throw({forbidden: 'no ' + newDoc._id + ' in ' + userCtx.db});"
    "  if (newDoc.who && newDoc.who !== userCtx.name) throw({unauthorized: 'you are ' + "
    "userCtx.name});"
    "  if (newDoc.role && userCtx.roles.indexOf(newDoc.role) < 0) throw({forbidden: 'role'});"
    "  if (newDoc.admin && secObj.admins.names[0] !== newDoc.admin) throw({forbidden: 'admin'});"
    "  if (oldDoc && oldDoc.frozen) throw({forbidden: 'frozen ' + oldDoc._rev});"
    "  if (newDoc._deleted && oldDoc && oldDoc.keep) throw({forbidden: 'keep'});"
    "  if (newDoc.plain) throw('plain');"
    "  if (newDoc.crash) null.x;"
    "  if (newDoc.spin) while (true) {}"
    "}";

TEST_F(DesignTest, ValidateDocUpdateOnEveryWritePath) {
  put_ddoc("v", {{"validate_doc_update", kVdu}});
  // PUT, POST, _bulk_docs (per document), DELETE, attachment PUT, new_edits=false.
  expect_error(admin(verb::put, "/db/a", R"({"forbid":true})"), 403, "forbidden", "no a in db");
  expect_error(admin(verb::post, "/db", R"({"_id":"b","forbid":true})"), 403, "forbidden",
               "no b in db");
  auto bulk = admin(verb::post, "/db/_bulk_docs",
                    R"({"docs":[{"_id":"c"},{"_id":"d","forbid":1},{"_id":"e","who":"zed"}]})");
  ASSERT_EQ(bulk.status, 201u);
  EXPECT_TRUE(bulk.json()[0]["ok"].get<bool>());
  EXPECT_EQ(bulk.json()[1], Json::parse(R"({"id":"d","error":"forbidden","reason":"no d in db"})"));
  EXPECT_EQ(bulk.json()[2],
            Json::parse(R"({"id":"e","error":"unauthorized","reason":"you are admin"})"));
  auto repl = admin(
      verb::post, "/db/_bulk_docs",
      R"({"new_edits":false,"docs":[{"_id":"r","_rev":"1-abc","forbid":true},{"_id":"s","_rev":"1-abc"}]})");
  ASSERT_EQ(repl.status, 201u);
  EXPECT_EQ(repl.json(),
            Json::parse(R"([{"id":"r","rev":"1-abc","error":"forbidden","reason":"no r in db"}])"));
  EXPECT_EQ(admin(verb::get, "/db/r").status, 404u);
  EXPECT_EQ(admin(verb::get, "/db/s").status, 200u);

  // oldDoc is the revision being replaced.
  auto f = admin(verb::put, "/db/f", R"({"frozen":true,"keep":true})");
  ASSERT_EQ(f.status, 201u);
  const std::string rev = f.json()["rev"];
  expect_error(admin(verb::put, "/db/f?rev=" + rev, "{}"), 403, "forbidden", "frozen " + rev);
  expect_error(admin(verb::delete_, "/db/f?rev=" + rev), 403, "forbidden", "frozen " + rev);
  auto att = client_->request(verb::put, "/db/f/x.txt?rev=" + rev, "hi",
                              {as("admin", "secret")[0], {"Content-Type", "text/plain"}});
  expect_error(att, 403, "forbidden", "frozen " + rev);
  // A conflicting edit conflicts; it is not validated.
  expect_error(admin(verb::put, "/db/f", R"({"forbid":true})"), 409, "conflict",
               "Document update conflict.");

  // Other thrown values and failing functions: 500, as CouchDB.
  expect_error(admin(verb::put, "/db/p", R"({"plain":1})"), 500, "unknown_error", "plain");
  auto crash = admin(verb::put, "/db/q", R"({"crash":1})");
  EXPECT_EQ(crash.status, 500u);
  EXPECT_EQ(crash.json()["error"], "TypeError");
  expect_error(admin(verb::put, "/db/t", R"({"spin":1})"), 500, "os_process_error", "timeout");
  // ... and the server goes on.
  EXPECT_EQ(admin(verb::put, "/db/u", "{}").status, 201u);

  // Nothing rejected was written.
  for (auto id : {"a", "b", "d", "e", "p", "q", "t"})
    EXPECT_EQ(admin(verb::get, std::string("/db/") + id).status, 404u) << id;
  EXPECT_EQ(admin(verb::get, "/db/f").json()["_rev"], rev);

  // Design documents are not validated by it; a new revision of the function takes effect.
  put_ddoc("other", {{"forbid", true}});
  const std::string vrev = admin(verb::get, "/db/_design/v").json()["_rev"];
  ASSERT_EQ(
      admin(verb::put, "/db/_design/v?rev=" + vrev,
            Json{{"validate_doc_update", "function(n){ if (n.forbid) throw({forbidden: 'v2'}); }"}}
                .dump())
          .status,
      201u);
  expect_error(admin(verb::put, "/db/a", R"({"forbid":true})"), 403, "forbidden", "v2");
  EXPECT_EQ(admin(verb::put, "/db/p", R"({"plain":1})").status, 201u);
}

TEST_F(DesignTest, ValidateDocUpdateSeesTheUserAndTheSecurityObject) {
  add_user_bob_as_member();
  put_ddoc("v", {{"validate_doc_update", kVdu}});
  EXPECT_EQ(user(verb::put, "/db/a", R"({"who":"bob","role":"editor","admin":"ann"})").status,
            201u);
  expect_error(user(verb::put, "/db/b", R"({"who":"ann"})"), 401, "unauthorized", "you are bob");
  expect_error(user(verb::put, "/db/c", R"({"role":"boss"})"), 403, "forbidden", "role");
  expect_error(user(verb::put, "/db/d", R"({"admin":"bob"})"), 403, "forbidden", "admin");
  // Several design documents: each must accept.
  put_ddoc("w", {{"validate_doc_update",
                  "function(n, o, u){ if (n.x) throw({forbidden: 'w says no to ' + u.name}); }"}});
  expect_error(user(verb::put, "/db/e", R"({"x":1})"), 403, "forbidden", "w says no to bob");
}

TEST_F(DesignTest, ChangesFilterFunctions) {
  put_ddoc("f", {{"filters",
                  {{"odd", "function(doc, req) { return doc.n % 2 == 1 && req.query.p == 'yes'; }"},
                   {"mine", "function(doc, req) { return doc.owner === req.userCtx.name; }"},
                   {"crash", "function(doc) { return doc.n.x.y; }"},
                   {"syntax", "function(doc) {"}}},
                 {"views", {{"big", {{"map", "function(doc) { if (doc.n > 2) emit(doc.n); }"}}}}}});
  auto bulk = admin(
      verb::post, "/db/_bulk_docs",
      R"({"docs":[{"_id":"1","n":1,"owner":"admin"},{"_id":"2","n":2},{"_id":"3","n":3},{"_id":"4","n":4}]})");
  ASSERT_EQ(bulk.status, 201u);
  auto ids = [](const HttpResponse& r) {
    std::vector<std::string> out;
    const Json j = r.json();
    for (const auto& row : j["results"]) out.push_back(row["id"]);
    return out;
  };
  EXPECT_EQ(ids(admin(verb::get, "/db/_changes?filter=f/odd&p=yes")),
            (std::vector<std::string>{"1", "3"}));
  EXPECT_EQ(ids(admin(verb::get, "/db/_changes?filter=f/odd&p=no")), std::vector<std::string>{});
  EXPECT_EQ(ids(admin(verb::get, "/db/_changes?filter=f/mine")), std::vector<std::string>{"1"});
  EXPECT_EQ(ids(admin(verb::post, "/db/_changes?filter=f/odd&p=yes", "{}")),
            (std::vector<std::string>{"1", "3"}));
  EXPECT_EQ(ids(admin(verb::get, "/db/_changes?filter=_view&view=f/big")),
            (std::vector<std::string>{"3", "4"}));
  // A longpoll feed wakes for a matching change only.
  auto longpoll =
      admin(verb::get, "/db/_changes?filter=f/odd&p=yes&feed=longpoll&since=now&timeout=300");
  EXPECT_EQ(ids(longpoll), std::vector<std::string>{});
  // Errors: compilation before the feed starts (400), a failing function on the first page (500).
  auto syntax = admin(verb::get, "/db/_changes?filter=f/syntax");
  EXPECT_EQ(syntax.status, 400u);
  EXPECT_EQ(syntax.json()["error"], "compilation_error");
  auto crash = admin(verb::get, "/db/_changes?filter=f/crash");
  EXPECT_EQ(crash.status, 500u);
  EXPECT_EQ(crash.json()["error"], "TypeError");
  EXPECT_EQ(admin(verb::get, "/db/_changes").status, 200u);
}

// newDoc/oldDoc carry attachments as CouchDB 3.5 shows them (answer taken from CouchDB): stubs
// carried over complete, a new upload without its digest and with revpos 0.
TEST_F(DesignTest, ValidateDocUpdateSeesAttachmentStubsAsCouchDb) {
  put_ddoc("v", {{"validate_doc_update",
                  "function(n, o) { if (n.show) throw({forbidden: JSON.stringify([n._attachments, "
                  "o && o._attachments])}); }"}});
  auto first =
      admin(verb::put, "/db/x",
            R"({"_attachments":{"a.txt":{"content_type":"text/plain","data":"aGVsbG8="}}})");
  ASSERT_EQ(first.status, 201u) << first.body;
  const std::string rev = first.json()["rev"];
  expect_error(
      admin(
          verb::put, "/db/x?rev=" + rev,
          R"({"show":1,"_attachments":{"a.txt":{"stub":true},"b.bin":{"content_type":"application/octet-stream","data":"AAEC"}}})"),
      403, "forbidden",
      R"([{"a.txt":{"content_type":"text/plain","revpos":1,"digest":"md5-iMaiC8wqiFlD2NjLTemvCQ==","length":5,"stub":true},)"
      R"("b.bin":{"content_type":"application/octet-stream","revpos":0,"length":3,"stub":true}},)"
      R"({"a.txt":{"content_type":"text/plain","revpos":1,"digest":"md5-iMaiC8wqiFlD2NjLTemvCQ==","length":5,"stub":true}}])");
}

// The other built-in reducers, with the answers CouchDB 3.5 gives for the same data.
TEST_F(DesignTest, BuiltinReducersAnswerAsCouchDb) {
  ASSERT_EQ(
      admin(
          verb::post, "/db/_bulk_docs",
          R"({"docs":[{"_id":"a","t":"x","n":5},{"_id":"b","t":"x","n":3},{"_id":"c","t":"y","n":9},{"_id":"d","t":"x","n":3},{"_id":"e","t":"y","n":1}]})")
          .status,
      201u);
  put_ddoc(
      "r",
      {{"views",
        {{"acd", {{"map", "function(d){emit(d.n,null)}"}, {"reduce", "_approx_count_distinct"}}},
         {"first", {{"map", "function(d){emit([d.t,d.n],d._id)}"}, {"reduce", "_first"}}},
         {"last", {{"map", "function(d){emit([d.t,d.n],d._id)}"}, {"reduce", "_last"}}},
         {"top", {{"map", "function(d){emit(d.t,d.n)}"}, {"reduce", "_top_2"}}},
         {"bottom", {{"map", "function(d){emit(d.t,d.n)}"}, {"reduce", "_bottom_2"}}}}}});
  auto rows = [&](const std::string& q) {
    return admin(verb::get, "/db/_design/r/_view/" + q).json()["rows"];
  };
  EXPECT_EQ(rows("acd"), Json::parse(R"([{"key":null,"value":4}])"));
  EXPECT_EQ(rows("first"), Json::parse(R"([{"key":null,"value":"b"}])"));
  EXPECT_EQ(rows("first?descending=true"), Json::parse(R"([{"key":null,"value":"b"}])"));
  EXPECT_EQ(rows("first?group_level=1"),
            Json::parse(R"([{"key":["x"],"value":"b"},{"key":["y"],"value":"e"}])"));
  EXPECT_EQ(rows("last?group_level=1"),
            Json::parse(R"([{"key":["x"],"value":"a"},{"key":["y"],"value":"c"}])"));
  EXPECT_EQ(rows("top?group=true"),
            Json::parse(R"([{"key":"x","value":[5,3]},{"key":"y","value":[9,1]}])"));
  EXPECT_EQ(rows("top"), Json::parse(R"([{"key":null,"value":[9,5]}])"));
  EXPECT_EQ(rows("bottom?group=true"),
            Json::parse(R"([{"key":"x","value":[3,5]},{"key":"y","value":[1,9]}])"));
}

// ---- Views ---------------------------------------------------------------------------------------

class ViewTest : public DesignTest {
 protected:
  void SetUp() override {
    DesignTest::SetUp();
    put_ddoc(
        "v",
        {{"views",
          {{"by_n",
            {{"map", "function(doc) { if (doc.n !== undefined) emit(doc.n, doc.name || null); }"}}},
           {"pairs",
            {{"map", "function(doc) { if (doc.t) emit([doc.t, doc.n], doc.n); }"},
             {"reduce", "_sum"}}},
           {"count",
            {{"map", "function(doc) { if (doc.t) emit(doc.t, null); }"}, {"reduce", "_count"}}},
           {"stats",
            {{"map", "function(doc) { if (doc.t) emit(doc.t, doc.n); }"}, {"reduce", "_stats"}}},
           {"jsred",
            {{"map", "function(doc) { if (doc.t) emit(doc.t, doc.n); }"},
             {"reduce", "function(keys, values, rereduce) { return sum(values); }"}}},
           {"link",
            {{"map", "function(doc) { if (doc.friend) emit(doc._id, {_id: doc.friend}); }"}}}}}});
    Json docs = Json::array();
    for (int i = 1; i <= 6; ++i)
      docs.push_back({{"_id", "d" + std::to_string(i)},
                      {"n", i},
                      {"t", i % 2 ? "odd" : "even"},
                      {"name", "n" + std::to_string(i)}});
    docs.push_back({{"_id", "f"}, {"friend", "d2"}});
    ASSERT_EQ(admin(verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump()).status, 201u);
  }
  Json view(const std::string& q) {
    auto r = admin(verb::get, "/db/_design/v/_view/" + q);
    EXPECT_EQ(r.status, 200u) << q << ": " << r.body;
    return r.json();
  }
  static std::vector<std::string> ids(const Json& j) {
    std::vector<std::string> out;
    for (const auto& row : j["rows"]) out.push_back(row["id"]);
    return out;
  }
};

// Partitioned databases: /{db}/_partition/{p}/..., answers checked against CouchDB 3.5.0.
TEST_F(DesignTest, PartitionEndpoints) {
  ASSERT_EQ(admin(verb::put, "/pdb?partitioned=true").status, 201u);
  Json docs = Json::array();
  for (int i = 0; i < 30; ++i)
    docs.push_back({{"_id", std::string(i % 3 ? "a:" : "b:") + std::to_string(100 + i)}, {"n", i}});
  docs.push_back({{"_id", "a:gone"}, {"n", 99}, {"_deleted", true}});
  ASSERT_EQ(admin(verb::post, "/pdb/_bulk_docs", Json{{"docs", docs}}.dump()).status, 201u);
  ASSERT_EQ(admin(verb::put, "/pdb/_design/v",
                  R"({"views":{"n":{"map":"function(d){ emit(d.n, 1); }","reduce":"_sum"}}})")
                .status,
            201u);
  ASSERT_EQ(
      admin(
          verb::put, "/pdb/_design/g",
          R"({"options":{"partitioned":false},"views":{"n":{"map":"function(d){ emit(d.n, 1); }","reduce":"_sum"}}})")
          .status,
      201u);
  // The partition's counts.
  Json info = admin(verb::get, "/pdb/_partition/a").json();
  EXPECT_EQ(info["partition"], "a");
  EXPECT_EQ(info["db_name"], "pdb");
  EXPECT_EQ(info["doc_count"], 20);
  EXPECT_EQ(info["doc_del_count"], 1);
  EXPECT_GT(info["sizes"]["external"].get<int>(), 0);
  EXPECT_EQ(admin(verb::get, "/pdb/_partition/zz").json()["doc_count"], 0);
  // _all_docs inside the partition, whatever the bounds say.
  Json all = admin(verb::get, "/pdb/_partition/b/_all_docs").json();
  ASSERT_EQ(all["rows"].size(), 10u);
  for (const auto& row : all["rows"]) EXPECT_EQ(row["id"].get<std::string>().rfind("b:", 0), 0u);
  EXPECT_EQ(admin(verb::get, "/pdb/_partition/a/_all_docs?endkey=%22z%22&descending=false")
                .json()["rows"]
                .size(),
            20u);
  Json desc = admin(verb::get, "/pdb/_partition/a/_all_docs?descending=true&limit=2").json();
  EXPECT_EQ(desc["rows"][0]["id"], "a:129");
  EXPECT_EQ(admin(verb::get, "/pdb/_partition/a/_all_docs?startkey=%22b:%22").json()["rows"].size(),
            0u);
  // A partitioned view answers one partition; a global one refuses a partition, and the reverse.
  Json sum = admin(verb::get, "/pdb/_partition/b/_design/v/_view/n").json();
  EXPECT_EQ(sum["rows"][0]["value"], 10);
  Json rows = admin(verb::get, "/pdb/_partition/b/_design/v/_view/n?reduce=false&limit=3").json();
  EXPECT_EQ(rows["total_rows"], 10);
  EXPECT_EQ(rows["rows"][0]["id"], "b:100");
  EXPECT_EQ(rows["rows"][1]["key"], 3);
  expect_error(admin(verb::get, "/pdb/_design/v/_view/n"), 400, "query_parse_error",
               "`partition` parameter is mandatory for queries to this view.");
  expect_error(admin(verb::get, "/pdb/_partition/a/_design/g/_view/n"), 400, "query_parse_error",
               "`partition` parameter is not supported in this design doc");
  EXPECT_EQ(admin(verb::get, "/pdb/_design/g/_view/n").json()["rows"][0]["value"], 30);
  EXPECT_EQ(admin(verb::get, "/pdb/_partition/a/_design/v/_info").status, 200u);
  // An edit moves a document's row within its partition's index and reductions.
  const std::string rev = admin(verb::get, "/pdb/b:100").json()["_rev"];
  ASSERT_EQ(admin(verb::delete_, "/pdb/b:100?rev=" + rev).status, 200u);
  EXPECT_EQ(admin(verb::get, "/pdb/_partition/b/_design/v/_view/n").json()["rows"][0]["value"], 9);
  EXPECT_EQ(admin(verb::get, "/pdb/_partition/a/_design/v/_view/n").json()["rows"][0]["value"], 20);
  EXPECT_EQ(admin(verb::get, "/pdb/_partition/b").json()["doc_del_count"], 1);
  // Mango inside the partition.
  Json found = admin(verb::post, "/pdb/_partition/b/_find",
                     R"({"selector":{"n":{"$gte":0}},"fields":["_id"]})")
                   .json();
  ASSERT_EQ(found["docs"].size(), 9u);
  for (const auto& d : found["docs"]) EXPECT_EQ(d["_id"].get<std::string>().rfind("b:", 0), 0u);
  EXPECT_EQ(admin(verb::post, "/pdb/_partition/b/_explain", R"({"selector":{"n":1}})")
                .json()["opts"]["partition"],
            "b");
  // Errors, as CouchDB's.
  expect_error(admin(verb::get, "/pdb/_partition/_x"), 400, "illegal_partition",
               "Partition must not start with an underscore");
  expect_error(admin(verb::get, "/pdb/_partition/a%3Ab"), 400, "illegal_partition",
               "Partition must not contain a colon");
  expect_error(admin(verb::get, "/db/_partition/a"), 400, "bad_request",
               "database is not partitioned");
  expect_error(admin(verb::get, "/pdb/_partition/a/_changes"), 404, "not_found", "missing");

  // ?partition= on a view or _all_docs is the same query below /_partition/{p}.
  EXPECT_EQ(admin(verb::get, "/pdb/_design/v/_view/n?partition=b").json()["rows"][0]["value"], 9);
  Json by_query = admin(verb::get, "/pdb/_all_docs?partition=b").json();
  EXPECT_EQ(by_query["rows"], admin(verb::get, "/pdb/_partition/b/_all_docs").json()["rows"]);
  EXPECT_EQ(by_query["rows"].size(), 9u);
  expect_error(admin(verb::get, "/pdb/_design/v/_view/n?partition=_x"), 400, "illegal_partition",
               "Partition must not start with an underscore");
  expect_error(admin(verb::get, "/pdb/_design/v/_view/n?partition="), 400, "illegal_partition",
               "Partition must not be empty");
  expect_error(admin(verb::get, "/pdb/_partition/a/_design/v/_view/n?partition=b"), 400,
               "bad_request", "Conflicting value for `partition` in query string");
  EXPECT_EQ(admin(verb::get, "/pdb/_partition/a/_all_docs?partition=a").json()["rows"].size(), 20u);
  expect_error(admin(verb::get, "/pdb/_design/g/_view/n?partition=a"), 400, "query_parse_error",
               "`partition` parameter is not supported in this design doc");
  expect_error(admin(verb::get, "/db/_all_docs?partition=a"), 400, "query_parse_error",
               "`partition` parameter is not supported on this db");
}

// Mango indexes in a partitioned database are partitioned unless `"partitioned": false`: a
// partitioned one answers only /_partition/{p}/_find (reading that partition's rows), a global
// one only /{db}/_find (mango_idx:filter_partition_indexes), as on CouchDB 3.5.
TEST_F(DesignTest, PartitionedAndGlobalMangoIndexes) {
  ASSERT_EQ(admin(verb::put, "/pdb?partitioned=true").status, 201u);
  Json docs = Json::array();
  for (int i = 0; i < 20; ++i)
    docs.push_back(
        {{"_id", std::string(i % 2 ? "p:" : "q:") + std::to_string(100 + i)}, {"a", i}, {"b", i}});
  ASSERT_EQ(admin(verb::post, "/pdb/_bulk_docs", Json{{"docs", docs}}.dump()).status, 201u);
  EXPECT_EQ(
      admin(verb::post, "/pdb/_index", R"({"index":{"fields":["a"]},"ddoc":"ia","name":"ia"})")
          .json()["result"],
      "created");
  EXPECT_EQ(admin(verb::post, "/pdb/_index",
                  R"({"index":{"fields":["b"]},"ddoc":"ib","name":"ib","partitioned":false})")
                .json()["result"],
            "created");
  // The design document records an explicit choice only.
  EXPECT_FALSE(admin(verb::get, "/pdb/_design/ia").json().contains("options"));
  EXPECT_EQ(admin(verb::get, "/pdb/_design/ib").json()["options"], Json({{"partitioned", false}}));
  Json list = admin(verb::get, "/pdb/_index").json();
  ASSERT_EQ(list["indexes"].size(), 3u);
  EXPECT_EQ(list["indexes"][1]["name"], "ia");
  EXPECT_EQ(list["indexes"][1]["partitioned"], true);
  EXPECT_EQ(list["indexes"][2]["name"], "ib");
  EXPECT_EQ(list["indexes"][2]["partitioned"], false);

  // Each scope uses its own indexes; the other scope's index is not a candidate.
  auto explained = [&](const std::string& path, const std::string& body) {
    return admin(verb::post, path, body).json()["index"]["name"].get<std::string>();
  };
  EXPECT_EQ(explained("/pdb/_partition/p/_explain", R"({"selector":{"a":{"$gt":5}}})"), "ia");
  EXPECT_EQ(explained("/pdb/_partition/p/_explain", R"({"selector":{"b":{"$gt":5}}})"),
            "_all_docs");
  EXPECT_EQ(explained("/pdb/_explain", R"({"selector":{"b":{"$gt":5}}})"), "ib");
  EXPECT_EQ(explained("/pdb/_explain", R"({"selector":{"a":{"$gt":5}}})"), "_all_docs");
  EXPECT_EQ(admin(verb::post, "/pdb/_explain", R"({"selector":{"a":1}})").json()["partitioned"],
            true);

  // The partitioned index answers from the partition's rows, sorted.
  Json found = admin(verb::post, "/pdb/_partition/p/_find",
                     R"({"selector":{"a":{"$gt":5}},"sort":["a"],"fields":["_id","a"]})")
                   .json();
  ASSERT_EQ(found["docs"].size(), 7u);
  EXPECT_EQ(found["docs"][0], Json({{"_id", "p:107"}, {"a", 7}}));
  EXPECT_EQ(found["docs"][6], Json({{"_id", "p:119"}, {"a", 19}}));
  Json stats = admin(verb::post, "/pdb/_partition/p/_find",
                     R"({"selector":{"a":{"$gte":0}},"execution_stats":true})")
                   .json()["execution_stats"];
  EXPECT_EQ(stats["total_keys_examined"], 10);  // the partition's rows, not the database's 20
  found = admin(verb::post, "/pdb/_find",
                R"({"selector":{"b":{"$lt":4}},"sort":["b"],"fields":["_id"]})")
              .json();
  ASSERT_EQ(found["docs"].size(), 4u);
  EXPECT_EQ(found["docs"][1]["_id"], "p:101");
  // A sort only the other scope's index could serve: CouchDB's scope-specific errors.
  expect_error(admin(verb::post, "/pdb/_find", R"({"selector":{"a":{"$gt":0}},"sort":["a"]})"), 400,
               "no_usable_index",
               "No global index exists for this sort, try indexing by the sort fields.");
  expect_error(
      admin(verb::post, "/pdb/_partition/p/_find", R"({"selector":{"b":{"$gt":0}},"sort":["b"]})"),
      400, "no_usable_index",
      "No partitioned index exists for this sort, try indexing by the sort fields.");
  expect_error(admin(verb::post, "/db/_find", R"({"selector":{"z":{"$gt":0}},"sort":["z"]})"), 400,
               "no_usable_index",
               "No index exists for this sort, try indexing by the sort fields.");

  // An index may not change an existing design document's option, nor ask for a bad one.
  expect_error(
      admin(verb::post, "/pdb/_index",
            R"({"index":{"fields":["a","b"]},"ddoc":"ia","name":"iab","partitioned":false})"),
      400, "invalid_partitioned_option",
      "Requested partitioned option does not match existing value on design document _design/ia");
  expect_error(
      admin(verb::post, "/pdb/_index", R"({"index":{"fields":["b"]},"ddoc":"ib","name":"ib"})"),
      400, "invalid_partitioned_option",
      "Requested partitioned option does not match existing value on design document _design/ib");
  expect_error(
      admin(verb::post, "/pdb/_index", R"({"index":{"fields":["c"]},"partitioned":"yes"})"), 400,
      "bad_request", "Invalid value for partitioned: \"yes\" (true or false)");
  expect_error(admin(verb::post, "/db/_index", R"({"index":{"fields":["c"]},"partitioned":true})"),
               400, "invalid_design_doc",
               "partitioned option cannot be true in a non-partitioned database.");
  EXPECT_EQ(admin(verb::get, "/db/_index").json()["total_rows"], 1);
  EXPECT_EQ(
      admin(verb::post, "/pdb/_index", R"({"index":{"fields":["a","b"]},"ddoc":"ia","name":"iab"})")
          .json()["result"],
      "created");

  // Edits move rows within their partition's index.
  const std::string rev = admin(verb::get, "/pdb/p:119").json()["_rev"];
  ASSERT_EQ(admin(verb::put, "/pdb/p:119", Json{{"_rev", rev}, {"a", 1}, {"b", 1}}.dump()).status,
            201u);
  found = admin(verb::post, "/pdb/_partition/p/_find",
                R"({"selector":{"a":{"$lt":3}},"fields":["_id"]})")
              .json();
  ASSERT_EQ(found["docs"].size(), 2u);
  EXPECT_EQ(found["docs"][0]["_id"], "p:101");
  EXPECT_EQ(found["docs"][1]["_id"], "p:119");
}

TEST_F(ViewTest, MapQueryParameters) {
  Json all = view("by_n");
  EXPECT_EQ(all["total_rows"], 6);
  EXPECT_EQ(all["offset"], 0);
  EXPECT_EQ(ids(all), (std::vector<std::string>{"d1", "d2", "d3", "d4", "d5", "d6"}));
  EXPECT_EQ(all["rows"][0], Json::parse(R"({"id":"d1","key":1,"value":"n1"})"));
  EXPECT_EQ(ids(view("by_n?key=3")), std::vector<std::string>{"d3"});
  EXPECT_EQ(ids(view("by_n?startkey=2&endkey=4")), (std::vector<std::string>{"d2", "d3", "d4"}));
  EXPECT_EQ(ids(view("by_n?startkey=2&endkey=4&inclusive_end=false")),
            (std::vector<std::string>{"d2", "d3"}));
  EXPECT_EQ(ids(view("by_n?descending=true&startkey=4&endkey=2")),
            (std::vector<std::string>{"d4", "d3", "d2"}));
  EXPECT_EQ(ids(view("by_n?descending=TRUE&startkey=4&endkey=2")),
            (std::vector<std::string>{"d4", "d3", "d2"}));
  EXPECT_EQ(ids(view("by_n?descending=true&startkey=4&endkey=2&inclusive_end=false")),
            (std::vector<std::string>{"d4", "d3"}));
  Json page = view("by_n?skip=2&limit=2");
  EXPECT_EQ(ids(page), (std::vector<std::string>{"d3", "d4"}));
  EXPECT_EQ(page["offset"], 2);
  EXPECT_EQ(view("by_n?startkey=5")["offset"], 4);
  EXPECT_EQ(ids(view("by_n?limit=0")), std::vector<std::string>{});
  auto post = admin(verb::post, "/db/_design/v/_view/by_n", R"({"keys":[5,1,99,5]})");
  ASSERT_EQ(post.status, 200u);
  EXPECT_EQ(ids(post.json()), (std::vector<std::string>{"d5", "d1", "d5"}));
  // include_docs, and linked documents through {"_id": ...} values.
  Json docs = view("by_n?key=2&include_docs=true");
  EXPECT_EQ(docs["rows"][0]["doc"]["name"], "n2");
  Json linked = view("link?include_docs=true");
  EXPECT_EQ(linked["rows"][0]["id"], "f");
  EXPECT_EQ(linked["rows"][0]["doc"]["_id"], "d2");
  EXPECT_TRUE(view("by_n?update_seq=true").contains("update_seq"));
  // Several queries at once.
  auto multi = admin(verb::post, "/db/_design/v/_view/by_n/queries",
                     R"({"queries":[{"key":1},{"startkey":5,"limit":1}]})");
  ASSERT_EQ(multi.status, 200u);
  EXPECT_EQ(ids(multi.json()["results"][0]), std::vector<std::string>{"d1"});
  EXPECT_EQ(ids(multi.json()["results"][1]), std::vector<std::string>{"d5"});
}

TEST_F(ViewTest, ParameterErrorsAsCouchDb) {
  auto expect = [&](const std::string& q, const std::string& reason) {
    auto r = admin(verb::get, "/db/_design/v/_view/" + q);
    expect_error(r, 400, "query_parse_error", reason);
  };
  expect("by_n?reduce=true", "Reduce is invalid for map-only views.");
  expect("by_n?group=true", "Invalid use of grouping on a map view.");
  expect("count?include_docs=true", "`include_docs` is invalid for reduce");
  expect("count?keys=%5B%22a%22,%22b%22%5D",
         "Multi-key fetches for reduce views must use `group=true`");
  expect("by_n?keys=%5B1,2%5D&key=1",
         "`keys` is incompatible with `key`, `start_key` and `end_key`");
  expect("by_n?startkey=3&endkey=1",
         "No rows can match your key range, reverse your start_key and end_key or set "
         "descending=true");
  expect("by_n?limit=-1", "Invalid value for positive integer: \"-1\"");
  expect("by_n?update=maybe", "Invalid value for `update`.");
  expect("count?group=false&group_level=1",
         "Can't specify group=false and group_level>0 at the same time");
  expect_error(admin(verb::get, "/db/_design/v/_view/nope"), 404, "not_found",
               "missing_named_view");
  expect_error(admin(verb::get, "/db/_design/nope/_view/x"), 404, "not_found", "missing");
}

TEST_F(ViewTest, Reduce) {
  EXPECT_EQ(view("count")["rows"], Json::parse(R"([{"key":null,"value":6}])"));
  EXPECT_EQ(view("count?group=true")["rows"],
            Json::parse(R"([{"key":"even","value":3},{"key":"odd","value":3}])"));
  EXPECT_EQ(view("pairs?group_level=1")["rows"],
            Json::parse(R"([{"key":["even"],"value":12},{"key":["odd"],"value":9}])"));
  EXPECT_EQ(view("pairs?group=true&limit=2&skip=1")["rows"],
            Json::parse(R"([{"key":["even",4],"value":4},{"key":["even",6],"value":6}])"));
  EXPECT_EQ(view("pairs?startkey=%5B%22odd%22%5D&endkey=%5B%22odd%22,%7B%7D%5D")["rows"],
            Json::parse(R"([{"key":null,"value":9}])"));
  EXPECT_EQ(view("stats?key=%22odd%22")["rows"][0]["value"],
            Json::parse(R"({"sum":9,"count":3,"min":1,"max":5,"sumsqr":35})"));
  EXPECT_EQ(view("jsred?group=true")["rows"],
            Json::parse(R"([{"key":"even","value":12},{"key":"odd","value":9}])"));
  EXPECT_EQ(ids(view("count?reduce=false&key=%22odd%22")),
            (std::vector<std::string>{"d1", "d3", "d5"}));
  auto keyed = admin(verb::post, "/db/_design/v/_view/count?group=true",
                     R"({"keys":["odd","none","even"]})");
  EXPECT_EQ(keyed.json()["rows"],
            Json::parse(R"([{"key":"odd","value":3},{"key":"even","value":3}])"));
  // A value _sum cannot add: CouchDB's error object as the row's value.
  ASSERT_EQ(admin(verb::put, "/db/bad", R"({"t":"odd","n":"x"})").status, 201u);
  Json bad = view("pairs");
  EXPECT_EQ(bad["rows"][0]["value"]["error"], "builtin_reduce_error");
  EXPECT_EQ(bad["rows"][0]["value"]["caused_by"], "x");
  expect_error(admin(verb::get, "/db/_design/v/_view/stats"), 500, "invalid_value",
               "The _stats function requires that map values be numbers or arrays of numbers, not "
               "'<<\"x\">>'");
}

TEST_F(ViewTest, ReduceOverManyRowsRereduces) {
  Json docs = Json::array();
  for (int i = 0; i < 2500; ++i) docs.push_back({{"t", i % 3 ? "x" : "y"}, {"n", 1}});
  ASSERT_EQ(admin(verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump()).status, 201u);
  // 2,500 + 6 rows: more than one batch per group, so the JS reduce also rereduces.
  EXPECT_EQ(view("jsred")["rows"][0]["value"], 2500 + 21);
  EXPECT_EQ(view("count")["rows"][0]["value"], 2506);
  EXPECT_EQ(view("stats")["rows"][0]["value"]["count"], 2506);
  EXPECT_EQ(
      view("count?group=true")["rows"],
      Json::parse(
          R"([{"key":"even","value":3},{"key":"odd","value":3},{"key":"x","value":1666},{"key":"y","value":834}])"));
}

// The reduce tree through the server: several build steps, then edits and deletions applied
// incrementally; every answer equal to what the rows add up to.
TEST_F(ViewTest, ReduceAnswersFollowEditsAcrossBuildStepsAndRanges) {
  std::map<std::string, std::pair<std::string, int>> docs;  // id -> (t, n)
  Json batch = Json::array();
  for (int i = 0; i < 1800; ++i) {
    const std::string id = "r" + std::to_string(i);
    const std::string t = "g" + std::to_string(i % 7);
    docs[id] = {t, i};
    batch.push_back({{"_id", id}, {"t", t}, {"n", i}});
  }
  ASSERT_EQ(admin(verb::post, "/db/_bulk_docs", Json{{"docs", batch}}.dump()).status, 201u);
  auto check = [&](const std::string& when) {
    SCOPED_TRACE(when);
    std::map<std::string, long> by_t;
    std::map<std::pair<std::string, int>, long> by_pair;
    long total = 0;
    for (const auto& [id, tn] : docs) {
      by_t[tn.first] += tn.second;
      by_pair[{tn.first, tn.second}] += tn.second;
      total += tn.second;
    }
    // The six d* documents of the fixture: t even/odd, n 1..6 (untouched here).
    const long fixture = 21;
    EXPECT_EQ(view("pairs")["rows"][0]["value"], total + fixture);
    Json level1 = view("pairs?group_level=1");
    for (const auto& row : level1["rows"]) {
      const std::string t = row["key"][0];
      if (by_t.count(t)) {
        EXPECT_EQ(row["value"], by_t[t]) << t;
      }
    }
    EXPECT_EQ(level1["rows"].size(), by_t.size() + 2);
    // A range inside one group, both directions, and a range ending between keys.
    long in_range = 0;
    for (const auto& [k, v] : by_pair)
      if (k.first == "g3" && k.second >= 200 && k.second <= 1500) in_range += v;
    EXPECT_EQ(
        view("pairs?startkey=%5B%22g3%22,200%5D&endkey=%5B%22g3%22,1500%5D")["rows"][0]["value"],
        in_range);
    EXPECT_EQ(view("pairs?descending=true&startkey=%5B%22g3%22,1500%5D&endkey=%5B%22g3%22,200%5D")
                  ["rows"][0]["value"],
              in_range);
    long below = 0;
    for (const auto& [k, v] : by_pair)
      if (k.first < "g2" || (k.first == "g2" && k.second < 999)) below += v;
    EXPECT_EQ(
        view(
            "pairs?startkey=%5B%22g%22%5D&endkey=%5B%22g2%22,999%5D&inclusive_end=false")["rows"][0]
                                                                                         ["value"],
        below);
    // group=true: one row per pair, in key order and reversed.
    Json exact = view("pairs?group=true&startkey=%5B%22g%22%5D&endkey=%5B%22h%22%5D");
    ASSERT_EQ(exact["rows"].size(), by_pair.size());
    auto it = by_pair.begin();
    for (const auto& row : exact["rows"]) {
      EXPECT_EQ(row["key"], Json::array({it->first.first, it->first.second}));
      EXPECT_EQ(row["value"], it->second);
      ++it;
    }
    Json rev = view(
        "pairs?group=true&descending=true&startkey=%5B%22h%22%5D&endkey=%5B%22g%22%5D&limit=3");
    ASSERT_EQ(rev["rows"].size(), 3u);
    EXPECT_EQ(rev["rows"][0]["value"], by_pair.rbegin()->second);
    Json cnt = view("count?group=true&key=%22g5%22");
    EXPECT_EQ(cnt["rows"][0]["value"], std::count_if(docs.begin(), docs.end(), [](const auto& d) {
                return d.second.first == "g5";
              }));
    EXPECT_EQ(view("jsred?key=%22g4%22")["rows"][0]["value"], by_t["g4"]);
    EXPECT_EQ(view("stats?key=%22g1%22")["rows"][0]["value"]["sum"], by_t["g1"]);
  };
  check("built in several steps");
  // Edit 400 documents (new n, some move group) and delete 150, then query again.
  Json all = admin(verb::get, "/db/_all_docs?startkey=%22r%22&endkey=%22r%7E%22").json();
  Json edits = Json::array();
  int i = 0;
  for (const auto& row : all["rows"]) {
    const std::string id = row["id"];
    const std::string rev = row["value"]["rev"];
    if (i % 4 == 0) {
      const int n = docs[id].second * 3 + 1;
      const std::string t = i % 8 == 0 ? "g9" : docs[id].first;
      docs[id] = {t, n};
      edits.push_back({{"_id", id}, {"_rev", rev}, {"t", t}, {"n", n}});
    } else if (i % 12 == 1) {
      docs.erase(id);
      edits.push_back({{"_id", id}, {"_rev", rev}, {"_deleted", true}});
    }
    ++i;
  }
  ASSERT_EQ(admin(verb::post, "/db/_bulk_docs", Json{{"docs", edits}}.dump()).status, 201u);
  check("after edits and deletions");
}

// group_level over keys shorter than, as long as and longer than the level (the answers of
// CouchDB 3.5.0 for the same documents).
TEST_F(ViewTest, GroupLevelGroupsKeysOfEveryLength) {
  put_ddoc("gl", {{"views",
                   {{"c",
                     {{"map", "function(d) { if (d.foo !== undefined) emit(d.foo); }"},
                      {"reduce", "_count"}}}}}});
  ASSERT_EQ(
      admin(verb::post, "/db/_bulk_docs", R"({"docs":[{"foo":["foo","bar"]},{"foo":["foo","bar"]},
      {"foo":["foo","bar","baz"]},{"foo":["baz"]},{"foo":["baz","bar"]},{"foo":"s"},{"foo":3}]})")
          .status,
      201u);
  auto rows = [&](const std::string& q) {
    auto r = admin(verb::get, "/db/_design/gl/_view/c?" + q);
    EXPECT_EQ(r.status, 200u) << r.body;
    return r.json()["rows"];
  };
  EXPECT_EQ(rows("group_level=0"), Json::parse(R"([{"key":null,"value":7}])"));
  EXPECT_EQ(
      rows("group_level=1"),
      Json::parse(
          R"([{"key":3,"value":1},{"key":"s","value":1},{"key":["baz"],"value":2},{"key":["foo"],"value":3}])"));
  EXPECT_EQ(
      rows("group_level=2"),
      Json::parse(
          R"([{"key":3,"value":1},{"key":"s","value":1},{"key":["baz"],"value":1},{"key":["baz","bar"],"value":1},{"key":["foo","bar"],"value":3}])"));
  EXPECT_EQ(
      rows("group_level=2&descending=true"),
      Json::parse(
          R"([{"key":["foo","bar"],"value":3},{"key":["baz","bar"],"value":1},{"key":["baz"],"value":1},{"key":"s","value":1},{"key":3,"value":1}])"));
  EXPECT_EQ(
      rows("group=true"),
      Json::parse(
          R"([{"key":3,"value":1},{"key":"s","value":1},{"key":["baz"],"value":1},{"key":["baz","bar"],"value":1},{"key":["foo","bar"],"value":2},{"key":["foo","bar","baz"],"value":1}])"));
}

// Documents that emit many rows each: a build step stops adding documents once its writes are
// large, instead of failing with transaction_too_large forever.
TEST_F(ViewTest, ManyRowsPerDocumentStillBuild) {
  put_ddoc("many", {{"views",
                     {{"m",
                       {{"map",
                         "function(d) { if (d.many !== undefined) for (var j = 0; j < 100; j++) "
                         "emit(['a fairly long key to make rows big', d.many, j], j); }"},
                        {"reduce", "_count"}}}}}});
  Json docs = Json::array();
  for (int i = 0; i < 600; ++i) docs.push_back({{"many", i}});
  ASSERT_EQ(admin(verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump()).status, 201u);
  auto r = admin(verb::get, "/db/_design/many/_view/m?reduce=false&limit=1");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json()["total_rows"], 60'000);
  EXPECT_EQ(admin(verb::get, "/db/_design/many/_view/m").json()["rows"][0]["value"], 60'000);
}

// GET /{db}/_design/{ddoc}/_info: CouchDB 3.5's members, with updates_pending counting the
// database's changes the index has not taken in (all three counts alike on one node) and the
// collator's version (153.120 with ICU 72, as CouchDB reports it on this machine).
TEST_F(ViewTest, DesignInfoCountsTheChangesTheIndexLacks) {
  auto info = [&] {
    auto r = admin(verb::get, "/db/_design/v/_info");
    EXPECT_EQ(r.status, 200u) << r.body;
    return r.json();
  };
  Json i = info();
  EXPECT_EQ(i["name"], "v");
  const Json& vi = i["view_index"];
  for (const char* key : {"signature", "language", "sizes", "update_seq", "purge_seq",
                          "updater_running", "compact_running", "waiting_clients", "waiting_commit",
                          "updates_pending", "collator_versions"})
    EXPECT_TRUE(vi.contains(key)) << key;
  // Not built yet: the design document and the 7 documents are pending.
  EXPECT_EQ(vi["updates_pending"], Json::parse(R"({"minimum":8,"preferred":8,"total":8})"));
  ASSERT_EQ(vi["collator_versions"].size(), 1u);
  if (U_ICU_VERSION_MAJOR_NUM == 72) {
    EXPECT_EQ(vi["collator_versions"][0], "153.120");
  }
  EXPECT_LT(vi["sizes"]["active"].get<std::int64_t>(), 1000);  // nothing built
  view("by_n?limit=1");                                        // builds the index
  EXPECT_EQ(info()["view_index"]["updates_pending"]["total"], 0);
  // The sizes are the store's estimate of the index's bytes: they grow with its rows.
  const std::int64_t small = info()["view_index"]["sizes"]["active"];
  Json docs = Json::array();
  for (int i = 0; i < 2000; ++i) docs.push_back({{"n", i}, {"name", std::string(200, 'x')}});
  ASSERT_EQ(admin(verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump()).status, 201u);
  view("by_n?limit=1");
  const Json sizes = info()["view_index"]["sizes"];
  EXPECT_GT(sizes["active"].get<std::int64_t>(), small + 200'000) << sizes.dump();
  EXPECT_EQ(sizes["file"], sizes["active"]);
  EXPECT_EQ(sizes["external"], sizes["active"]);
  ASSERT_EQ(admin(verb::post, "/db/_bulk_docs", R"({"docs":[{"_id":"x"},{"_id":"y"}]})").status,
            201u);
  EXPECT_EQ(info()["view_index"]["updates_pending"]["total"], 2);
  EXPECT_EQ(admin(verb::get, "/db/_design/nope/_info").status, 404u);
}

TEST_F(ViewTest, IndexFollowsEditsDeletesAndDesignChanges) {
  EXPECT_EQ(view("by_n")["total_rows"], 6);
  const std::string rev = admin(verb::get, "/db/d1").json()["_rev"];
  ASSERT_EQ(admin(verb::put, "/db/d1?rev=" + rev, R"({"n":100,"name":"moved"})").status, 201u);
  const std::string rev2 = admin(verb::get, "/db/d2").json()["_rev"];
  ASSERT_EQ(admin(verb::delete_, "/db/d2?rev=" + rev2).status, 200u);
  // stale=ok / update=false answer from the index as it is.
  EXPECT_EQ(view("by_n?update=false")["total_rows"], 6);
  Json now = view("by_n");
  EXPECT_EQ(now["total_rows"], 5);
  EXPECT_EQ(ids(now), (std::vector<std::string>{"d3", "d4", "d5", "d6", "d1"}));
  EXPECT_EQ(now["rows"][4]["value"], "moved");
  EXPECT_EQ(view("count?group=true")["rows"],
            Json::parse(R"([{"key":"even","value":2},{"key":"odd","value":2}])"));
  // A new revision of the design document with other views: a new index; cleanup drops the old.
  const std::string old_sig =
      admin(verb::get, "/db/_design/v/_info").json()["view_index"]["signature"];
  const std::string drev = admin(verb::get, "/db/_design/v").json()["_rev"];
  ASSERT_EQ(admin(verb::put, "/db/_design/v?rev=" + drev,
                  R"({"views":{"by_n":{"map":"function(doc){ if (doc.n) emit(-doc.n, null); }"}}})")
                .status,
            201u);
  Json neg = view("by_n");
  EXPECT_EQ(ids(neg), (std::vector<std::string>{"d1", "d6", "d5", "d4", "d3"}));
  EXPECT_NE(admin(verb::get, "/db/_design/v/_info").json()["view_index"]["signature"], old_sig);
  EXPECT_EQ(admin(verb::post, "/db/_view_cleanup", "{}").status, 202u);
  EXPECT_EQ(ids(view("by_n")), (std::vector<std::string>{"d1", "d6", "d5", "d4", "d3"}));
}

TEST_F(ViewTest, MapErrorsAndTimeouts) {
  // View functions are compiled when the design document is written, as CouchDB does.
  auto r = admin(verb::put, "/db/_design/bad", R"({"views":{"syntax":{"map":"function(doc) {"}}})");
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(r.json()["error"], "compilation_error");
  EXPECT_TRUE(r.json()["reason"].get<std::string>().starts_with(
      "Compilation of the map function in the 'syntax' view failed: "));
  expect_error(admin(verb::put, "/db/_design/bad", R"({"views":{"v":{"map":"42"}}})"), 400,
               "compilation_error",
               "Compilation of the map function in the 'v' view failed: Expression does not eval "
               "to a function. (42)");
  auto red = admin(
      verb::post, "/db/_bulk_docs",
      R"({"docs":[{"_id":"_design/bad","views":{"v":{"map":"function(d){}","reduce":"function(k,v){ return ( }"}}}]})");
  EXPECT_EQ(red.json()[0]["error"], "compilation_error");
  EXPECT_EQ(admin(verb::get, "/db/_design/bad").status, 404u);
  put_ddoc(
      "ok",
      {{"views",
        {{"throws",
          {{"map", "function(doc) { if (doc.n == 2) throw 'no'; if (doc.n) emit(doc.n); }"}}}}}});
  // A document the function throws on emits nothing; the others are indexed.
  auto ok = admin(verb::get, "/db/_design/ok/_view/throws");
  EXPECT_EQ(ok.json()["total_rows"], 5) << ok.body;
  put_ddoc("spin", {{"views", {{"s", {{"map", "function(doc) { while (true) {} }"}}}}}});
  auto spin = admin(verb::get, "/db/_design/spin/_view/s");
  EXPECT_EQ(spin.status, 500u);
  EXPECT_EQ(spin.json()["error"], "os_process_error") << spin.body;
  EXPECT_EQ(view("by_n")["total_rows"], 6);
}

TEST_F(ViewTest, UpdateHandlers) {
  put_ddoc(
      "u",
      {{"updates",
        {{"bump",
          "function(doc, req) { if (!doc) { return [{_id: req.id || req.uuid, n: 1}, 'created']; }"
          " doc.n += Number(req.query.by || 1); return [doc, {json: {n: doc.n}}]; }"},
         {"echo",
          "function(doc, req) { return [null, {code: 202, headers: {'X-Echo': req.body}, body: "
          "'ok'}]; }"}}}});
  auto created = admin(verb::put, "/db/_design/u/_update/bump/counter");
  EXPECT_EQ(created.status, 201u) << created.body;
  EXPECT_EQ(created.body, "created");
  EXPECT_FALSE(created.header("X-Couch-Update-NewRev").empty());
  auto bumped = admin(verb::post, "/db/_design/u/_update/bump/counter?by=5");
  EXPECT_EQ(bumped.status, 201u);
  EXPECT_EQ(bumped.json(), Json::parse(R"({"n":6})"));
  EXPECT_EQ(admin(verb::get, "/db/counter").json()["n"], 6);
  auto echo = admin(verb::post, "/db/_design/u/_update/echo", "hello");
  EXPECT_EQ(echo.status, 202u);
  EXPECT_EQ(echo.body, "ok");
  EXPECT_EQ(echo.header("X-Echo"), "hello");
  expect_error(admin(verb::get, "/db/_design/u/_update/bump/counter"), 405, "method_not_allowed",
               "Update functions do not allow GET");
  EXPECT_EQ(admin(verb::post, "/db/_design/u/_update/nope").status, 404u);
}

// ---- Mango ---------------------------------------------------------------------------------------

class MangoTest : public DesignTest {
 protected:
  void SetUp() override {
    DesignTest::SetUp();
    Json docs = Json::array();
    const char* names[] = {"ann", "bob", "cy", "dee", "eve", "fay"};
    for (int i = 0; i < 6; ++i)
      docs.push_back({{"_id", std::string("p") + std::to_string(i)},
                      {"name", names[i]},
                      {"age", 20 + 5 * i},
                      {"team", i % 2 ? "red" : "blue"},
                      {"addr", {{"city", i < 3 ? "oslo" : "rome"}}}});
    docs.push_back({{"_id", "noage"}, {"name", "zed"}});
    ASSERT_EQ(admin(verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump()).status, 201u);
  }
  Json find(const Json& body, unsigned status = 200) {
    auto r = admin(verb::post, "/db/_find", body.dump());
    EXPECT_EQ(r.status, status) << body.dump() << ": " << r.body;
    return r.json();
  }
  static std::vector<std::string> ids(const Json& j) {
    std::vector<std::string> out;
    for (const auto& d : j["docs"]) out.push_back(d.value("_id", "?"));
    return out;
  }
};

TEST_F(MangoTest, FindWithoutAnIndexScansAllDocs) {
  Json r = find({{"selector", {{"age", {{"$gte", 30}}}, {"team", "blue"}}}});
  EXPECT_EQ(ids(r), (std::vector<std::string>{"p2", "p4"}));
  EXPECT_EQ(r["warning"], "No matching index found, create an index to optimize query time.");
  EXPECT_EQ(ids(find({{"selector", {{"addr.city", "rome"}}}, {"sort", {"_id"}}})),
            (std::vector<std::string>{"p3", "p4", "p5"}));
  EXPECT_EQ(ids(find({{"selector", {{"_id", {{"$gt", nullptr}}}}},
                      {"sort", {{{"_id", "desc"}}}},
                      {"limit", 2}})),
            (std::vector<std::string>{"p5", "p4"}));
  // fields projects, nested fields too.
  Json f = find({{"selector", {{"name", "bob"}}}, {"fields", {"name", "addr.city"}}});
  EXPECT_EQ(f["docs"][0], Json::parse(R"({"name":"bob","addr":{"city":"oslo"}})"));
  // A sort no index can serve.
  Json e = find({{"selector", {{"age", {{"$gt", 0}}}}}, {"sort", {"age"}}}, 400);
  EXPECT_EQ(e["error"], "no_usable_index");
  EXPECT_EQ(find({{"limit", 1}}, 400)["error"], "missing_required_key");
  EXPECT_EQ(find({{"selector", {{"a", {{"$bogus", 1}}}}}}, 400),
            Json({{"error", "invalid_operator"}, {"reason", "Invalid operator: $bogus"}}));
  // Mango's error names, as CouchDB 3.5 gives them.
  EXPECT_EQ(find({{"selector", {{"a", {{"$in", 1}}}}}}, 400),
            Json({{"error", "bad_arg"}, {"reason", "Bad argument for operator $in: 1"}}));
  EXPECT_EQ(find({{"selector", {{"a", {{"$where", 1}}}}}}, 400)["error"], "not_supported");
  EXPECT_EQ(find({{"selector", {{"$keyMapMatch", {{"a", 1}}}}}}, 400),
            Json({{"error", "invalid_selector"},
                  {"reason", "One or more conditions is missing a field name."}}));
  EXPECT_EQ(find({{"selector", "x"}}, 400),
            Json({{"error", "invalid_selector_json"},
                  {"reason", "Selector must be a JSON object, not: <<120>>"}}));
}

TEST_F(MangoTest, JsonIndexesServeSortsAndRanges) {
  auto created = admin(verb::post, "/db/_index",
                       R"({"index":{"fields":["age"]},"name":"by_age","ddoc":"people"})");
  ASSERT_EQ(created.status, 200u) << created.body;
  EXPECT_EQ(created.json(),
            Json::parse(R"({"result":"created","id":"_design/people","name":"by_age"})"));
  EXPECT_EQ(admin(verb::post, "/db/_index",
                  R"({"index":{"fields":["age"]},"name":"by_age","ddoc":"people"})")
                .json()["result"],
            "exists");
  Json list = admin(verb::get, "/db/_index").json();
  EXPECT_EQ(list["total_rows"], 2);
  EXPECT_EQ(list["indexes"][1]["def"], Json::parse(R"({"fields":[{"age":"asc"}]})"));
  Json r = find({{"selector", {{"age", {{"$gt", 26}}}}},
                 {"sort", {{{"age", "desc"}}}},
                 {"execution_stats", true}});
  EXPECT_EQ(ids(r), (std::vector<std::string>{"p5", "p4", "p3", "p2"}));
  EXPECT_FALSE(r.contains("warning"));
  EXPECT_EQ(r["execution_stats"]["results_returned"], 4);
  // The document without the field is not in the index.
  EXPECT_EQ(ids(find({{"selector", {{"age", {{"$exists", true}}}, {"name", {{"$gt", nullptr}}}}},
                      {"sort", {"age"}}}))
                .size(),
            6u);
  // The index follows edits.
  const std::string rev = admin(verb::get, "/db/p0").json()["_rev"];
  ASSERT_EQ(admin(verb::put, "/db/p0?rev=" + rev, R"({"name":"ann","age":99})").status, 201u);
  EXPECT_EQ(ids(find({{"selector", {{"age", {{"$gt", 40}}}}}, {"sort", {"age"}}})),
            (std::vector<std::string>{"p5", "p0"}));
  // Paging with bookmarks.
  Json page1 = find({{"selector", {{"age", {{"$gt", 0}}}}}, {"sort", {"age"}}, {"limit", 2}});
  EXPECT_EQ(ids(page1), (std::vector<std::string>{"p1", "p2"}));
  Json page2 = find({{"selector", {{"age", {{"$gt", 0}}}}},
                     {"sort", {"age"}},
                     {"limit", 2},
                     {"bookmark", page1["bookmark"]}});
  EXPECT_EQ(ids(page2), (std::vector<std::string>{"p3", "p4"}));
  // _explain names the index; deleting it brings back the warning.
  auto ex = admin(verb::post, "/db/_explain", R"({"selector":{"age":{"$gt":1}}})");
  EXPECT_EQ(ex.json()["index"]["name"], "by_age");
  EXPECT_EQ(admin(verb::delete_, "/db/_index/people/json/by_age").status, 200u);
  EXPECT_EQ(admin(verb::get, "/db/_index").json()["total_rows"], 1);
  EXPECT_TRUE(find({{"selector", {{"age", {{"$gt", 26}}}}}})["warning"].is_string());
  EXPECT_EQ(admin(verb::delete_, "/db/_index/people/json/by_age").status, 404u);
}

// allow_fallback: false refuses a query that no index serves (unless use_index's or a choice
// among several usable ones), with CouchDB 3.5's errors; the fallback's warnings name both what
// use_index asked for and the scan. GET /_index pages with limit and skip. Checked against CouchDB.
TEST_F(MangoTest, AllowFallbackUseIndexWarningsAndIndexPaging) {
  for (const char* f : {"f1", "f2", "age"})
    ASSERT_EQ(admin(verb::post, "/db/_index",
                    Json{{"index", {{"fields", {f}}}},
                         {"ddoc", std::string("d_") + f},
                         {"name", std::string("i_") + f}}
                        .dump())
                  .status,
              200u);
  const Json by_name = {{"name", "bob"}};
  Json e = find({{"selector", by_name}, {"allow_fallback", false}}, 400);
  EXPECT_EQ(
      e,
      Json::parse(
          R"({"error":"invalid_index","reason":"You must specify an index with the `use_index` parameter."})"));
  e = find({{"selector", by_name}, {"use_index", "d_f1"}, {"allow_fallback", false}}, 400);
  EXPECT_EQ(e["reason"],
            "_design/d_f1 specified by `use_index` could not be found or it is not suitable.");
  e = find({{"selector", by_name}, {"use_index", {"d_f1", "nope"}}, {"allow_fallback", false}},
           400);
  EXPECT_EQ(e["reason"],
            "_design/d_f1, nope specified by `use_index` could not be found or it is not "
            "suitable.");
  Json r = find({{"selector", by_name}, {"use_index", "d_f1"}});
  EXPECT_EQ(ids(r), (std::vector<std::string>{"p1"}));
  EXPECT_EQ(r["warning"],
            "_design/d_f1 was not used because it does not contain a valid index for this "
            "query.\nNo matching index found, create an index to optimize query time.");
  // One usable index for a sort: CouchDB still wants it named when fallback is off.
  const Json adults = {{"age", {{"$gt", 21}}}};
  e = find({{"selector", adults}, {"sort", {"age"}}, {"allow_fallback", false}}, 400);
  EXPECT_EQ(e["error"], "invalid_index");
  r = find(
      {{"selector", adults}, {"sort", {"age"}}, {"use_index", "d_age"}, {"allow_fallback", false}});
  EXPECT_EQ(ids(r), (std::vector<std::string>{"p1", "p2", "p3", "p4", "p5"}));
  EXPECT_FALSE(r.contains("warning"));
  // Without a sort, _all_docs is a second usable index: the choice is allowed.
  EXPECT_EQ(ids(find({{"selector", adults}, {"allow_fallback", false}})).size(), 5u);
  // Booleans are booleans.
  EXPECT_EQ(find({{"selector", by_name}, {"conflicts", "no"}}, 400)["error"], "invalid_boolean");
  EXPECT_EQ(find({{"selector", by_name}, {"allow_fallback", 0}}, 400)["error"], "invalid_boolean");
  // GET /_index: total_rows counts all (_all_docs too); limit and skip page the list.
  Json page = admin(verb::get, "/db/_index?limit=2&skip=1").json();
  EXPECT_EQ(page["total_rows"], 4);
  ASSERT_EQ(page["indexes"].size(), 2u);
  EXPECT_EQ(page["indexes"][0]["ddoc"], "_design/d_age");
  EXPECT_EQ(admin(verb::get, "/db/_index?skip=9").json()["indexes"], Json::array());
  for (const char* bad : {"limit=0", "limit=x", "skip=-1"}) {
    auto b = admin(verb::get, std::string("/db/_index?") + bad);
    EXPECT_EQ(b.status, 400u) << bad;
    EXPECT_EQ(b.json()["error"], "invalid_list_index_params") << bad;
  }
}

// POST /_index/_bulk_delete: each named design document loses its Mango indexes (and goes when
// nothing else is left); the answer lists successes and failures newest first, CouchDB 3.5's
// shape and errors.
TEST_F(MangoTest, BulkDeleteOfIndexes) {
  auto index = [&](const char* ddoc, const char* field) {
    ASSERT_EQ(admin(verb::post, "/db/_index",
                    Json{{"index", {{"fields", {field}}}}, {"ddoc", ddoc}, {"name", field}}.dump())
                  .status,
              200u);
  };
  index("b1", "age");
  index("b1", "name");  // two in one design document (CouchDB crashes on that one)
  index("b2", "team");
  put_ddoc("js", {{"views", {{"v", {{"map", "function(d){ emit(1); }"}}}}}});
  auto r = admin(verb::post, "/db/_index/_bulk_delete",
                 R"({"docids":["b1","_design/b2","js","nope","b1"]})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json(),
            Json::parse(R"({"success":[{"id":"_design/b2","ok":true},{"id":"_design/b1","ok":true}],
                                       "fail":[{"id":"_design/nope","error":"not_found"},{"id":"_design/js","error":"not_found"}]})"));
  EXPECT_EQ(admin(verb::get, "/db/_index").json()["total_rows"], 1);
  EXPECT_EQ(admin(verb::get, "/db/_design/b1").status, 404u);
  EXPECT_EQ(admin(verb::get, "/db/_design/js").status, 200u);
  const std::pair<const char*, const char*> errors[] = {
      {R"({"docids":"x"})", "invalid_bulk_docs"},
      {R"({})", "missing_required_key"},
      {R"({"docids":[1]})", "invalid_index_name"},
      {R"({"docids":["a/b"]})", "invalid_index_name"}};
  for (const auto& [body, error] : errors) {
    auto e = admin(verb::post, "/db/_index/_bulk_delete", body);
    EXPECT_EQ(e.status, 400u) << body;
    EXPECT_EQ(e.json()["error"], error) << body;
  }
  EXPECT_EQ(admin(verb::post, "/db/_index/_bulk_delete", R"({"docids":"x"})").json()["reason"],
            "Bulk Delete requires an array of non-null docids. Docids: \"x\"");
  EXPECT_EQ(admin(verb::get, "/db/_index/_bulk_delete").status, 405u);
  // Members may not delete design documents: the request is refused whole.
  index("b3", "age");
  add_user_bob_as_member();
  EXPECT_EQ(user(verb::post, "/db/_index/_bulk_delete", R"({"docids":["b3"]})").status, 403u);
  EXPECT_EQ(admin(verb::get, "/db/_design/b3").status, 200u);
}

TEST_F(MangoTest, UnnamedIndexesGetCouchDBsNames) {
  // The ids and names CouchDB 3.5 gives these definitions (mango_idx:gen_name).
  auto r = admin(verb::post, "/db/_index", R"({"index":{"fields":["a"]}})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json(), Json::parse(R"({"result":"created",
      "id":"_design/7095fd2321a986309496ad2ac9c3498246175757",
      "name":"7095fd2321a986309496ad2ac9c3498246175757"})"));
  r = admin(verb::post, "/db/_index", R"({"index":{"fields":["a"]},"name":"foo"})");
  EXPECT_EQ(r.json()["id"], "_design/db1a22e6df7577e2844a28bcc06a06c873e8c19d");
  EXPECT_EQ(r.json()["name"], "foo");
  r = admin(verb::post, "/db/_index", R"({"index":{"fields":["a"]},"ddoc":"bar"})");
  EXPECT_EQ(r.json()["id"], "_design/bar");
  EXPECT_EQ(r.json()["name"], "bf8861589342292f2b578f85c828ae24c1280a6a");
  // The same definition again: the same index.
  r = admin(verb::post, "/db/_index", R"({"index":{"fields":["a"]}})");
  EXPECT_EQ(r.json()["result"], "exists");
}

TEST_F(MangoTest, PartialIndexesAndErrors) {
  auto created = admin(
      verb::post, "/db/_index",
      R"({"index":{"fields":["name"],"partial_filter_selector":{"team":"red"}},"ddoc":"reds","name":"red_names"})");
  ASSERT_EQ(created.status, 200u) << created.body;
  // Stored normalized, as CouchDB stores it.
  EXPECT_EQ(admin(verb::get, "/db/_design/reds")
                .json()["views"]["red_names"]["map"]["partial_filter_selector"],
            Json::parse(R"({"team":{"$eq":"red"}})"));
  Json r = find({{"selector", {{"name", {{"$gt", nullptr}}}, {"team", "red"}}},
                 {"use_index", "reds"},
                 {"sort", {"name"}}});
  EXPECT_EQ(ids(r), (std::vector<std::string>{"p1", "p3", "p5"}));
  EXPECT_EQ(
      admin(verb::post, "/db/_index", R"({"index":{"fields":[{"a":"desc"},"b"]}})").json()["error"],
      "unsupported_mixed_sort");
  EXPECT_EQ(admin(verb::post, "/db/_index", R"({"index":{"fields":["a"]},"type":"text"})").status,
            400u);
  // Creating an index writes a design document: members may not.
  add_user_bob_as_member();
  EXPECT_EQ(user(verb::post, "/db/_index", R"({"index":{"fields":["x"]}})").status, 403u);
  EXPECT_EQ(user(verb::post, "/db/_find", R"({"selector":{"name":"bob"}})").status, 200u);
}

}  // namespace
}  // namespace chaise::test
