// Tests of the server- and database-level endpoints (http/api/server_misc.cc,
// http/api/database.cc), through the router in process (tests/http/in_process.h): /_all_dbs, /_dbs_info, /_uuids,
// PUT/GET/HEAD/DELETE/POST /{db}, _bulk_docs, _revs_diff, _missing_revs, _revs_limit,
// _ensure_full_commit, _compact, _view_cleanup, and CouchDB's exact answers to bad requests.
//
// Expected answers come from CouchDB 3.x (apache/couchdb src/chttpd/src/chttpd_db.erl
// handle_request, create_db_req, db_req; chttpd_misc.erl handle_all_dbs_req,
// handle_dbs_info_req; couch_httpd_misc_handlers.erl handle_uuids_req; fabric_db_info.erl;
// chttpd.erl error_info, absolute_uri).
#include <gtest/gtest.h>
#include <unicode/uversion.h>

#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/http/in_process.h"

namespace chaise::test {
namespace {

using beast_http::field;
using beast_http::verb;
using Json = nlohmann::ordered_json;
using Headers = std::vector<std::pair<std::string, std::string>>;

const Headers kJson = {{"Content-Type", "application/json"}};
const std::string kDbMissing = R"({"error":"not_found","reason":"Database does not exist."})";
const std::string kNewEditsReason =
    "When `new_edits: false`, the document needs `_rev` or `_revisions` specified";

bool is_32_hex(const std::string& text) {
  return std::regex_match(text, std::regex("[0-9a-f]{32}"));
}

std::vector<std::string> keys_of(const Json& object) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.push_back(key);
  return keys;
}

// A 32-hex-digit revision hash made of one repeated character (new_edits=false revisions).
std::string hash_of(char c) { return std::string(32, c); }

class DatabaseTest : public ::testing::Test {
 protected:
  static std::string host() { return std::string(InProcessServer::kHost); }

  HttpResponse call(verb method, const std::string& target, std::string body = {},
                    const Headers& headers = {}) {
    return server_.request(method, target, std::move(body), headers);
  }
  HttpResponse get(const std::string& target) { return call(verb::get, target); }
  HttpResponse post(const std::string& target, const std::string& body,
                    const Headers& headers = kJson) {
    return call(verb::post, target, body, headers);
  }
  HttpResponse post_json(const std::string& target, const Json& body) {
    return post(target, body.dump());
  }

  void create_db(const std::string& name) {
    auto r = call(verb::put, "/" + name);
    ASSERT_EQ(r.status, 201u) << name << ": " << r.body;
  }

  Json info(const std::string& db) {
    auto r = get("/" + db);
    EXPECT_EQ(r.status, 200u) << r.body;
    return r.status == 200u ? r.json() : Json();
  }

  // POSTs {"docs": docs, "new_edits": new_edits} and requires 201.
  Json bulk(const std::string& db, const Json& docs, bool new_edits = true) {
    Json body = {{"docs", docs}};
    if (!new_edits) body["new_edits"] = false;
    auto r = post_json("/" + db + "/_bulk_docs", body);
    EXPECT_EQ(r.status, 201u) << r.body;
    return r.status == 201u ? r.json() : Json::array();
  }

  // Creates `id` and updates it until it has `revisions` revisions; returns them, oldest first.
  std::vector<std::string> edit_chain(const std::string& db, const std::string& id, int revisions) {
    std::vector<std::string> revs;
    for (int i = 0; i < revisions; ++i) {
      Json doc = {{"_id", id}, {"n", i}};
      if (!revs.empty()) doc["_rev"] = revs.back();
      Json result = bulk(db, Json::array({doc}));
      if (result.size() != 1 || !result[0].contains("rev")) {
        ADD_FAILURE() << "update " << i << " of " << id << " failed: " << result.dump();
        break;
      }
      revs.push_back(result[0]["rev"].get<std::string>());
    }
    return revs;
  }

  static void expect_error(const HttpResponse& r, unsigned status, const std::string& error,
                           const std::string& reason) {
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_EQ(r.body, Json({{"error", error}, {"reason", reason}}).dump() + "\n");
  }

  static void expect_method_not_allowed(const HttpResponse& r, const std::string& allowed) {
    expect_error(r, 405, "method_not_allowed", "Only " + allowed + " allowed");
    EXPECT_EQ(r.header(field::allow), allowed);
  }

  InProcessServer server_;
};

// ---- PUT /{db}
// ------------------------------------------------------------------------------------

TEST_F(DatabaseTest, PutCreatesDatabaseWithLocation) {
  auto r = call(verb::put, "/db1");
  EXPECT_EQ(r.status, 201u);
  EXPECT_EQ(r.body, "{\"ok\":true}\n");
  EXPECT_EQ(r.header(field::location), "http://" + host() + "/db1");
  EXPECT_EQ(r.header(field::content_type), "application/json");
  EXPECT_EQ(get("/db1").status, 200u);

  // couch_util:url_encode keeps [A-Za-z0-9_.:-] and %-encodes the rest, "/" included.
  r = call(verb::put, "/a%2Fb$c");
  EXPECT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(r.header(field::location), "http://" + host() + "/a%2Fb%24c");

  // chttpd:absolute_uri honours X-Forwarded-Host and X-Forwarded-Proto.
  r = call(verb::put, "/db2", {},
           {{"X-Forwarded-Host", "couch.example:6984"}, {"X-Forwarded-Proto", "https"}});
  EXPECT_EQ(r.status, 201u);
  EXPECT_EQ(r.header(field::location), "https://couch.example:6984/db2");
}

TEST_F(DatabaseTest, PutExistingDatabaseIs412) {
  create_db("db");
  expect_error(call(verb::put, "/db"), 412, "file_exists",
               "The database could not be created, the file already exists.");
}

TEST_F(DatabaseTest, PutIllegalNameIs400) {
  const std::string rule =
      "'. Only lowercase characters (a-z), digits (0-9), and any of the characters _, $, (, ), "
      "+, -, and / are allowed. Must begin with a letter.";
  expect_error(call(verb::put, "/Upper"), 400, "illegal_database_name", "Name: 'Upper" + rule);
  expect_error(call(verb::put, "/1db"), 400, "illegal_database_name", "Name: '1db" + rule);
  expect_error(call(verb::put, "/_foo"), 400, "illegal_database_name", "Name: '_foo" + rule);
  EXPECT_EQ(get("/_all_dbs").body, "[]\n");
  // The system databases are valid names.
  EXPECT_EQ(call(verb::put, "/_users").status, 201u);
  EXPECT_EQ(call(verb::put, "/_replicator").status, 201u);
}

TEST_F(DatabaseTest, PutPartitionedAndShardParameters) {
  auto r = call(verb::put, "/parts?partitioned=true");
  ASSERT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(info("parts")["props"], Json({{"partitioned", true}}));
  EXPECT_EQ(call(verb::put, "/plain?partitioned=false&q=8&n=3").status, 201u);
  EXPECT_EQ(info("plain")["props"], Json::object());

  expect_error(call(verb::put, "/x?partitioned=yes"), 400, "bad_request",
               "Invalid `partitioned` parameter");
  expect_error(call(verb::put, "/x?q=0"), 400, "bad_request",
               "The `q` value should be a positive integer.");
  expect_error(call(verb::put, "/x?n=abc"), 400, "bad_request",
               "The `n` value should be a positive integer.");
  expect_error(call(verb::put, "/_users?partitioned=true"), 400, "bad_request",
               "Cannot partition a system database");
  EXPECT_EQ(get("/x").status, 404u);

  // couch_partition:validate_docid: ids given in a partitioned database need a partition.
  expect_error(post("/parts", R"({"_id":"nopartition"})"), 400, "illegal_docid",
               "Doc id must be of form partition:id");
  expect_error(post("/parts/_bulk_docs", R"({"docs":[{"_id":":x"}]})"), 400, "illegal_partition",
               "Partition must not be empty");
  expect_error(post("/parts", R"({"_id":"p:_x"})"), 400, "illegal_docid",
               "Only reserved document ids may start with underscore.");
  r = post("/parts", R"({"_id":"p:doc"})");
  EXPECT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(post("/parts", R"({"_id":"_design/d"})").status, 201u);
}

// ---- GET/HEAD /{db}
// -------------------------------------------------------------------------------

TEST_F(DatabaseTest, GetDatabaseInfoHasCouchDbShapeAndOrder) {
  create_db("db");
  auto r = get("/db");
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(r.header(field::cache_control), "must-revalidate");
  const Json body = r.json();
  // fabric_db_info.erl: instance_start_time, db_name, purge_seq, update_seq, then the merged shard
  // infos in reverse key order.
  EXPECT_EQ(keys_of(body),
            (std::vector<std::string>{"instance_start_time", "db_name", "purge_seq", "update_seq",
                                      "sizes", "props", "doc_del_count", "doc_count",
                                      "disk_format_version", "compact_running", "cluster"}));
  EXPECT_EQ(body["instance_start_time"], "0");
  EXPECT_EQ(body["db_name"], "db");
  EXPECT_EQ(body["purge_seq"], "0");  // CouchDB's is a string too ("0-g1AAAA...")
  EXPECT_EQ(body["update_seq"], "0");
  EXPECT_EQ(keys_of(body["sizes"]), (std::vector<std::string>{"file", "external", "active"}));
  EXPECT_EQ(body["props"], Json::object());
  EXPECT_EQ(body["doc_del_count"], 0);
  EXPECT_EQ(body["doc_count"], 0);
  EXPECT_EQ(body["disk_format_version"], 8);
  EXPECT_EQ(body["compact_running"], false);
  EXPECT_EQ(body["cluster"].dump(), R"({"q":1,"n":1,"w":1,"r":1})");
}

TEST_F(DatabaseTest, HeadDatabaseHasNoBody) {
  create_db("db");
  auto r = call(verb::head, "/db");
  EXPECT_EQ(r.status, 200u);
  EXPECT_TRUE(r.body.empty());
  EXPECT_EQ(r.header(field::content_type), "application/json");
  r = call(verb::head, "/missing");
  EXPECT_EQ(r.status, 404u);
  EXPECT_TRUE(r.body.empty());
  // The connection is still usable: the HEAD answers had no body on the wire.
  EXPECT_EQ(get("/db").status, 200u);
}

TEST_F(DatabaseTest, InfoCountsAndUpdateSeqFollowWrites) {
  create_db("db");
  std::string seq = info("db")["update_seq"];
  EXPECT_EQ(seq, "0");

  Json result = bulk("db", Json::parse(R"([{"_id":"a","v":1},{"_id":"b","v":2},{"_id":"c"}])"));
  ASSERT_EQ(result.size(), 3u);
  Json i = info("db");
  EXPECT_EQ(i["doc_count"], 3);
  EXPECT_EQ(i["doc_del_count"], 0);
  EXPECT_NE(i["update_seq"], seq);
  EXPECT_GT(i["sizes"]["external"].get<std::int64_t>(), 0);
  EXPECT_GT(i["sizes"]["active"].get<std::int64_t>(), 0);
  seq = i["update_seq"];

  const std::string rev_b = result[1]["rev"];
  result = bulk("db", Json::array({{{"_id", "b"}, {"_rev", rev_b}, {"_deleted", true}}}));
  ASSERT_EQ(result[0]["ok"], true) << result.dump();
  i = info("db");
  EXPECT_EQ(i["doc_count"], 2);
  EXPECT_EQ(i["doc_del_count"], 1);
  EXPECT_GT(i["update_seq"].get<std::string>(), seq);  // sequences sort as strings
  seq = i["update_seq"];

  // _local documents are not counted and do not move the sequence.
  EXPECT_EQ(post("/db", R"({"_id":"_local/x"})").status, 201u);
  i = info("db");
  EXPECT_EQ(i["doc_count"], 2);
  EXPECT_EQ(i["update_seq"], seq);
}

// ---- DELETE /{db}
// ---------------------------------------------------------------------------------

TEST_F(DatabaseTest, DeleteDatabase) {
  create_db("db");
  auto r = call(verb::delete_, "/db");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "{\"ok\":true}\n");
  EXPECT_EQ(get("/db").body, kDbMissing + "\n");
  EXPECT_EQ(get("/db").status, 404u);
  r = call(verb::delete_, "/db");
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.body, kDbMissing + "\n");
  EXPECT_EQ(get("/_all_dbs").body, "[]\n");
}

TEST_F(DatabaseTest, DeleteWithRevIsRefused) {
  create_db("db");
  expect_error(call(verb::delete_, "/db?rev=1-abc"), 400, "bad_request",
               "You tried to DELETE a database with a ?=rev parameter. Did you mean to DELETE a "
               "document instead?");
  EXPECT_EQ(get("/db").status, 200u);
}

TEST_F(DatabaseTest, RecreatedDatabaseStartsEmpty) {
  create_db("db");
  bulk("db", Json::parse(R"([{"_id":"a"},{"_id":"b"}])"));
  EXPECT_EQ(post("/db", R"({"_id":"_local/l"})").status, 201u);
  auto r = call(verb::put, "/db/_revs_limit", "7");
  ASSERT_EQ(r.status, 200u);
  ASSERT_EQ(info("db")["doc_count"], 2);
  ASSERT_EQ(call(verb::delete_, "/db").status, 200u);
  create_db("db");
  const Json i = info("db");
  EXPECT_EQ(i["doc_count"], 0);
  EXPECT_EQ(i["doc_del_count"], 0);
  EXPECT_EQ(i["update_seq"], "0");
  EXPECT_EQ(i["sizes"]["external"], 0);
  EXPECT_EQ(get("/db/_revs_limit").body, "1000\n");
  // The old documents are gone: creating them again needs no revision.
  Json result = bulk("db", Json::parse(R"([{"_id":"a"},{"_id":"_local/l"}])"));
  EXPECT_EQ(result[0]["ok"], true) << result.dump();
  EXPECT_EQ(result[1]["rev"], "0-1") << result.dump();
}

// ---- Errors common to every endpoint
// --------------------------------------------------------------

TEST_F(DatabaseTest, MissingDatabaseIs404Everywhere) {
  for (const auto& [method, target] : std::vector<std::pair<verb, std::string>>{
           {verb::get, "/missing"},
           {verb::post, "/missing"},
           {verb::post, "/missing/_bulk_docs"},
           {verb::post, "/missing/_revs_diff"},
           {verb::post, "/missing/_missing_revs"},
           {verb::get, "/missing/_revs_limit"},
           {verb::put, "/missing/_revs_limit"},
           {verb::post, "/missing/_ensure_full_commit"},
           {verb::post, "/missing/_compact"},
           {verb::post, "/missing/_view_cleanup"},
           {verb::patch, "/missing"},  // the database is looked up before the method
           {verb::get, "/Bad"},        // only PUT validates the name
           {verb::get, "/_unknown"},
           {verb::post, "/_unknown/_bulk_docs"},
           {verb::delete_, "/_unknown"},
       }) {
    auto r = call(method, target, "{}", kJson);
    EXPECT_EQ(r.status, 404u) << target;
    EXPECT_EQ(r.body, kDbMissing + "\n") << target;
  }
}

TEST_F(DatabaseTest, WrongMethodsAre405WithAllow) {
  create_db("db");
  expect_method_not_allowed(call(verb::patch, "/db"), "DELETE,GET,HEAD,POST");
  expect_method_not_allowed(call(verb::copy, "/db"), "DELETE,GET,HEAD,POST");
  expect_method_not_allowed(get("/db/_bulk_docs"), "POST");
  expect_method_not_allowed(get("/db/_revs_diff"), "POST");
  expect_method_not_allowed(call(verb::put, "/db/_missing_revs"), "POST");
  expect_method_not_allowed(post("/db/_revs_limit", "5"), "PUT,GET");
  expect_method_not_allowed(get("/db/_ensure_full_commit"), "POST");
  expect_method_not_allowed(get("/db/_compact"), "POST");
  expect_method_not_allowed(get("/db/_view_cleanup"), "POST");
  expect_method_not_allowed(call(verb::put, "/_all_dbs"), "GET,HEAD");
  expect_method_not_allowed(call(verb::delete_, "/_dbs_info"), "GET,HEAD,POST");
  expect_method_not_allowed(post("/_uuids", "{}"), "GET");
}

TEST_F(DatabaseTest, UnknownPathsAnswerLikeCouchDb) {
  create_db("db");
  // chttpd_misc: a path below /_all_dbs or /_dbs_info is not_found/missing.
  expect_error(get("/_all_dbs/x"), 404, "not_found", "missing");
  expect_error(get("/_dbs_info/x"), 404, "not_found", "missing");
  // An unknown /{db}/_xxx is a document id to CouchDB (db_req falls through to db_doc_req).
  expect_error(get("/db/_nonsense"), 404, "not_found", "missing");
  // Known CouchDB endpoints Chaise lacks say so.
  expect_error(get("/db/_shards"), 501, "not_implemented", "this feature is not yet implemented");
  // Temporary views are gone (CouchDB 3.5: 410 for any method; 404 when the database is absent).
  for (verb method : {verb::post, verb::get})
    expect_error(call(method, "/db/_temp_view", R"({"map":"function(d){emit(1)}"})"), 410, "gone",
                 "Temporary views are not supported in CouchDB");
  expect_error(post("/nodb/_temp_view", "{}"), 404, "not_found", "Database does not exist.");
}

// One node is the whole cluster: its name, as /_node/_local names it (CouchDB 3.5's shape).
TEST_F(DatabaseTest, MembershipListsThisNode) {
  auto r = get("/_membership");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, R"({"all_nodes":["nonode@nohost"],"cluster_nodes":["nonode@nohost"]})"
                    "\n");
  EXPECT_EQ(get("/_node/_local").json()["name"], "nonode@nohost");
  expect_method_not_allowed(post("/_membership", "{}"), "GET");
  expect_error(get("/_membership/x"), 404, "not_found", "missing");
  // A router that was given no way to restart says so (the server's restarts: server_test).
  expect_error(post("/_node/_local/_restart", ""), 501, "not_implemented",
               "this server cannot restart");
}

// GET /_node/_local/_versions: the JavaScript engine and the collation's versions, in CouchDB
// 3.5's shape. CouchDB 3.5 on this machine's ICU 72 reports library 72.1, collator 153.120,
// algorithm 15: the same ICU orders view keys the same way.
TEST_F(DatabaseTest, NodeVersionsNameTheEngineAndTheCollation) {
  auto r = get("/_node/_local/_versions");
  ASSERT_EQ(r.status, 200u) << r.body;
  const auto v = r.json();
  EXPECT_EQ(v["javascript_engine"]["name"], "spidermonkey");
  EXPECT_TRUE(std::regex_match(v["javascript_engine"]["version"].get<std::string>(),
                               std::regex("[1-9][0-9]*")))
      << v;
  EXPECT_EQ(v["collation_driver"]["name"], "libicu");
  EXPECT_EQ(v["collation_driver"]["library_version"], U_ICU_VERSION);
  if (U_ICU_VERSION_MAJOR_NUM == 72) {
    EXPECT_EQ(v["collation_driver"]["collator_version"], "153.120");
    EXPECT_EQ(v["collation_driver"]["collation_algorithm_version"], "15");
  }
  expect_method_not_allowed(post("/_node/_local/_versions", "{}"), "GET");
}

// ---- /_all_dbs, /_dbs_info
// ------------------------------------------------------------------------

TEST_F(DatabaseTest, AllDbsListsAndFilters) {
  EXPECT_EQ(get("/_all_dbs").body, "[]\n");
  for (const char* name : {"c", "a", "b", "d"}) create_db(name);
  auto names = [&](const std::string& query) {
    auto r = get("/_all_dbs" + query);
    EXPECT_EQ(r.status, 200u) << query << ": " << r.body;
    return r.status == 200u ? r.json().dump() : r.body;
  };
  EXPECT_EQ(names(""), R"(["a","b","c","d"])");
  EXPECT_EQ(names("?descending=true"), R"(["d","c","b","a"])");
  EXPECT_EQ(names("?startkey=%22b%22"), R"(["b","c","d"])");
  EXPECT_EQ(names("?start_key=%22b%22&end_key=%22c%22"), R"(["b","c"])");
  EXPECT_EQ(names("?endkey=%22c%22&inclusive_end=false"), R"(["a","b"])");
  EXPECT_EQ(names("?descending=true&startkey=%22c%22&endkey=%22b%22"), R"(["c","b"])");
  EXPECT_EQ(names("?descending=true&startkey=%22c%22&endkey=%22b%22&inclusive_end=false"),
            R"(["c"])");
  EXPECT_EQ(names("?limit=2&skip=1"), R"(["b","c"])");
  EXPECT_EQ(names("?limit=0"), "[]");
  EXPECT_EQ(names("?skip=3"), R"(["d"])");
  EXPECT_EQ(names("?limit=9223372036854775807&skip=1"), R"(["b","c","d"])");
  EXPECT_EQ(names("?limit=9223372036854775807&skip=9223372036854775807"), "[]");
  EXPECT_EQ(names("?descending=TRUE&limit=1"), R"(["d"])");
  // CouchDB collation: numbers sort before strings, objects after.
  EXPECT_EQ(names("?startkey=1"), R"(["a","b","c","d"])");
  EXPECT_EQ(names("?startkey=%7B%7D"), "[]");
  EXPECT_EQ(names("?endkey=null"), "[]");

  expect_error(get("/_all_dbs?limit=-1"), 400, "query_parse_error",
               "Invalid value for positive integer: \"-1\"");
  expect_error(get("/_all_dbs?skip=x"), 400, "query_parse_error",
               "Invalid value for integer: \"x\"");
  expect_error(get("/_all_dbs?descending=maybe"), 400, "query_parse_error",
               "Invalid boolean parameter: \"maybe\"");
  expect_error(get("/_all_dbs?startkey=b"), 400, "bad_request",
               "invalid UTF-8 JSON: syntax error: invalid literal at byte 1");
}

TEST_F(DatabaseTest, DbsInfoPostAnswersEachKey) {
  create_db("a");
  bulk("a", Json::parse(R"([{"_id":"x"}])"));
  auto r = post("/_dbs_info", R"({"keys":["a","missing",7]})");
  ASSERT_EQ(r.status, 200u) << r.body;
  const Json body = r.json();
  ASSERT_EQ(body.size(), 3u);
  EXPECT_EQ(keys_of(body[0]), (std::vector<std::string>{"key", "info"}));
  EXPECT_EQ(body[0]["key"], "a");
  EXPECT_EQ(body[0]["info"], info("a"));
  EXPECT_EQ(body[0]["info"]["doc_count"], 1);
  EXPECT_EQ(body[1].dump(), R"({"key":"missing","error":"not_found"})");
  EXPECT_EQ(body[2].dump(), R"({"key":7,"error":"not_found"})");
}

TEST_F(DatabaseTest, DbsInfoPostErrors) {
  expect_error(post("/_dbs_info", "{}"), 400, "bad_request", "`keys` member must exist.");
  expect_error(post("/_dbs_info", R"({"keys":"a"})"), 400, "bad_request",
               "`keys` member must be an array.");
  expect_error(post("/_dbs_info", "[]"), 400, "bad_request", "Request body must be a JSON object");
  expect_error(post("/_dbs_info", "{"), 400, "bad_request",
               "invalid UTF-8 JSON: syntax error: unexpected end of input; expected string literal "
               "at byte 2");
  expect_error(post("/_dbs_info", R"({"keys":[]})", {{"Content-Type", "text/plain"}}), 415,
               "bad_content_type", "Content-Type must be application/json");
  // [chttpd] max_db_number_for_dbs_info_req = 100.
  Json keys = Json::array();
  for (int i = 0; i < 100; ++i) keys.push_back("db" + std::to_string(i));
  auto r = post_json("/_dbs_info", Json{{"keys", keys}});
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.json().size(), 100u);
  keys.push_back("one_more");
  expect_error(post_json("/_dbs_info", Json{{"keys", keys}}), 400, "bad_request", "too_many_keys");
}

TEST_F(DatabaseTest, DbsInfoGetListsEveryDatabase) {
  for (const char* name : {"b", "a", "c"}) create_db(name);
  auto r = get("/_dbs_info");
  ASSERT_EQ(r.status, 200u) << r.body;
  Json body = r.json();
  ASSERT_EQ(body.size(), 3u);
  EXPECT_EQ(body[0]["key"], "a");
  EXPECT_EQ(body[0]["info"]["db_name"], "a");
  EXPECT_EQ(body[2]["key"], "c");
  r = get("/_dbs_info?descending=true&limit=2");
  ASSERT_EQ(r.status, 200u) << r.body;
  body = r.json();
  ASSERT_EQ(body.size(), 2u);
  EXPECT_EQ(body[0]["key"], "c");
  EXPECT_EQ(body[1]["key"], "b");

  // More databases than one read transaction serves (the infos are read in chunks).
  for (int i = 0; i < 210; ++i) create_db("many" + std::to_string(1000 + i));
  r = get("/_dbs_info?startkey=%22many%22&endkey=%22many%EF%BF%B0%22");
  ASSERT_EQ(r.status, 200u) << r.body;
  body = r.json();
  ASSERT_EQ(body.size(), 210u);
  for (int i = 0; i < 210; ++i) {
    EXPECT_EQ(body[i]["key"], "many" + std::to_string(1000 + i));
    EXPECT_EQ(body[i]["info"]["db_name"], body[i]["key"]);
  }
}

// ---- /_uuids
// --------------------------------------------------------------------------------------

TEST_F(DatabaseTest, UuidsAreFreshHexWithNoCacheHeaders) {
  auto r = get("/_uuids");
  ASSERT_EQ(r.status, 200u);
  Json body = r.json();
  EXPECT_EQ(keys_of(body), std::vector<std::string>{"uuids"});
  ASSERT_EQ(body["uuids"].size(), 1u);
  EXPECT_TRUE(is_32_hex(body["uuids"][0])) << body.dump();
  // couch_httpd_misc_handlers: these override the default must-revalidate.
  EXPECT_EQ(r.header(field::cache_control), "no-cache");
  EXPECT_EQ(r.header(field::pragma), "no-cache");
  EXPECT_EQ(r.header(field::expires), "Mon, 01 Jan 1990 00:00:00 GMT");
  EXPECT_FALSE(r.header(field::etag).empty());

  std::set<std::string> seen;
  for (int round = 0; round < 2; ++round) {
    r = get("/_uuids?count=1000");
    ASSERT_EQ(r.status, 200u);
    body = r.json();
    ASSERT_EQ(body["uuids"].size(), 1000u);
    for (const auto& u : body["uuids"]) {
      EXPECT_TRUE(is_32_hex(u)) << u;
      seen.insert(u.get<std::string>());
    }
  }
  EXPECT_EQ(seen.size(), 2000u);
  EXPECT_EQ(get("/_uuids?count=0").body, "{\"uuids\":[]}\n");  // CouchDB allows 0
}

// Each id of a server run sorts after the one before it, also where the 26-digit prefix changes
// (every ~8,000 ids; CouchDB draws each new prefix at random, Chaise steps it up).
TEST_F(DatabaseTest, UuidsOfOneServerRunAscendAcrossPrefixes) {
  std::string last;
  std::set<std::string> prefixes;
  for (int round = 0; round < 25; ++round) {
    auto r = get("/_uuids?count=1000");
    ASSERT_EQ(r.status, 200u);
    const Json body = r.json();
    for (const auto& u : body["uuids"]) {
      const std::string id = u.get<std::string>();
      ASSERT_TRUE(is_32_hex(id)) << id;
      ASSERT_GT(id, last) << "round " << round;
      last = id;
      prefixes.insert(id.substr(0, 26));
    }
  }
  EXPECT_GE(prefixes.size(), 2u);  // 25,000 ids at ~2,047 apart in 0xfff000: about three prefixes
}

TEST_F(DatabaseTest, UuidsCountErrors) {
  expect_error(get("/_uuids?count=1001"), 400, "bad_request", "count parameter too large");
  expect_error(get("/_uuids?count=99999999999999999999999"), 400, "bad_request",
               "count parameter too large");
  expect_error(get("/_uuids?count=-1"), 400, "bad_request", "count must be a positive integer");
  expect_error(get("/_uuids?count=abc"), 400, "bad_request", "count must be a positive integer");
  expect_error(get("/_uuids?count="), 400, "bad_request", "count must be a positive integer");
  expect_error(get("/_uuids?count=1.5"), 400, "bad_request", "count must be a positive integer");
}

// ---- POST /{db}
// -----------------------------------------------------------------------------------

TEST_F(DatabaseTest, PostCreatesDocumentWithGeneratedId) {
  create_db("db");
  auto r = post("/db", R"({"a":1,"_rev":"1-ignored00000000000000000000000"})");
  ASSERT_EQ(r.status, 201u) << r.body;
  Json body = r.json();
  EXPECT_EQ(keys_of(body), (std::vector<std::string>{"ok", "id", "rev"}));
  const std::string id = body["id"];
  EXPECT_TRUE(is_32_hex(id)) << id;
  EXPECT_TRUE(std::regex_match(body["rev"].get<std::string>(), std::regex("1-[0-9a-f]{32}")));
  EXPECT_EQ(r.header(field::location), "http://" + host() + "/db/" + id);
  EXPECT_EQ(info("db")["doc_count"], 1);
  // Consecutive ids share a prefix (CouchDB's sequential algorithm).
  r = post("/db", "{}");
  ASSERT_EQ(r.status, 201u);
  EXPECT_EQ(r.json()["id"].get<std::string>().substr(0, 26), id.substr(0, 26));
}

TEST_F(DatabaseTest, PostWithIdUpdatesAndConflicts) {
  create_db("db");
  auto r = post("/db", R"({"_id":"doc/1","v":1})");
  ASSERT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(r.json()["id"], "doc/1");
  EXPECT_EQ(r.header(field::location), "http://" + host() + "/db/doc%2F1");
  const std::string rev = r.json()["rev"];
  expect_error(post("/db", R"({"_id":"doc/1","v":2})"), 409, "conflict",
               "Document update conflict.");
  r = post_json("/db", Json{{"_id", "doc/1"}, {"_rev", rev}, {"v", 3}});
  ASSERT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(r.json()["rev"].get<std::string>().substr(0, 2), "2-");
  expect_error(post_json("/db", Json{{"_id", "doc/1"}, {"_rev", rev}}), 409, "conflict",
               "Document update conflict.");
  EXPECT_EQ(info("db")["doc_count"], 1);
}

TEST_F(DatabaseTest, PostLocalAndBatchOk) {
  create_db("db");
  auto r = post("/db", R"({"_id":"_local/cp","seq":1})");
  ASSERT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(r.body, R"({"ok":true,"id":"_local/cp","rev":"0-1"})"
                    "\n");
  EXPECT_EQ(r.header(field::location), "http://" + host() + "/db/_local%2Fcp");
  r = post("/db", R"({"_id":"_local/cp","_rev":"0-1","seq":2})");
  ASSERT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(r.json()["rev"], "0-2");

  r = post("/db?batch=ok", R"({"_id":"later"})");
  EXPECT_EQ(r.status, 202u);
  EXPECT_EQ(r.body, R"({"ok":true,"id":"later"})"
                    "\n");
  EXPECT_TRUE(r.header(field::location).empty());
  EXPECT_EQ(info("db")["doc_count"], 1);
  // A conflicting batch=ok write is still accepted (CouchDB only logs the failure).
  EXPECT_EQ(post("/db?batch=ok", R"({"_id":"later"})").status, 202u);
}

TEST_F(DatabaseTest, PostRejectsBadRequests) {
  create_db("db");
  expect_error(post("/db", "{}", {}), 415, "bad_content_type",
               "Content-Type must be application/json");
  expect_error(post("/db", "{}", {{"Content-Type", "text/plain"}}), 415, "bad_content_type",
               "Content-Type must be application/json");
  EXPECT_EQ(post("/db", "{}", {{"Content-Type", "application/json; charset=utf-8"}}).status, 201u);
  expect_error(post("/db", "{\"a\":"), 400, "bad_request",
               "invalid UTF-8 JSON: syntax error: unexpected end of input; expected '[', '{', or a "
               "literal at byte 6");
  expect_error(post("/db", ""), 400, "bad_request",
               "invalid UTF-8 JSON: syntax error: unexpected end of input; expected '[', '{', or a "
               "literal at byte 1");
  expect_error(post("/db", "[1,2]"), 400, "bad_request", "Document must be a JSON object");
  expect_error(post("/db", R"({"_id":"_bad"})"), 400, "illegal_docid",
               "Only reserved document ids may start with underscore.");
  expect_error(post("/db", R"({"_id":7})"), 400, "illegal_docid", "Document id must be a string");
  expect_error(post("/db", R"({"_foo":1})"), 400, "doc_validation",
               "Bad special document member: _foo");
  expect_error(post("/db", R"({"_id":"x","_rev":"nope"})"), 400, "bad_request",
               "Invalid rev format");
  expect_error(post("/db", R"({"_id":"_local/x","_rev":"nope"})"), 400, "bad_request",
               "Invalid rev format");
  EXPECT_EQ(info("db")["doc_count"], 1);
}

TEST_F(DatabaseTest, OversizedDocumentIs413) {
  create_db("db");
  const std::string big(8'000'001, 'x');
  Json doc = {{"_id", "big"}, {"data", big}};
  expect_error(post_json("/db", doc), 413, "document_too_large", "big");
  expect_error(post_json("/db/_bulk_docs", Json{{"docs", Json::array({{{"_id", "small"}}, doc})}}),
               413, "document_too_large", "big");
  // The whole request is refused: the small document was not written either.
  EXPECT_EQ(info("db")["doc_count"], 0);
  // Just under the limit is fine ({"data":"..."} is 11 bytes more than the string).
  doc["data"] = std::string(8'000'000 - 11, 'x');
  auto r = post_json("/db", doc);
  EXPECT_EQ(r.status, 201u) << r.body.substr(0, 200);
  EXPECT_EQ(info("db")["doc_count"], 1);
}

// ---- _bulk_docs ---------------------------------------------------------------------------------

TEST_F(DatabaseTest, BulkDocsInteractiveEdits) {
  create_db("db");
  Json first = bulk("db", Json::parse(R"([{"_id":"a","v":1},{"v":2},{"_id":"_local/l"}])"));
  ASSERT_EQ(first.size(), 3u) << first.dump();
  EXPECT_EQ(keys_of(first[0]), (std::vector<std::string>{"ok", "id", "rev"}));
  EXPECT_EQ(first[0]["id"], "a");
  EXPECT_TRUE(is_32_hex(first[1]["id"])) << first.dump();
  EXPECT_EQ(first[2]["rev"], "0-1");
  const std::string rev_a = first[0]["rev"];

  // Update with the right rev, conflict with none or a stale one, delete, and a duplicate id.
  Json second = bulk("db", Json::array({
                               {{"_id", "a"}, {"_rev", rev_a}, {"v", 3}},
                               {{"_id", "a"}, {"_rev", rev_a}, {"v", 4}},
                               {{"_id", first[1]["id"]}, {"v", 5}},
                               {{"_id", "new"}, {"_deleted", true}},
                               {{"_id", "_local/l"}, {"_rev", "0-1"}},
                           }));
  ASSERT_EQ(second.size(), 5u);
  EXPECT_EQ(second[0]["ok"], true) << second.dump();
  EXPECT_EQ(second[0]["rev"].get<std::string>().substr(0, 2), "2-");
  const Json conflict = {
      {"id", "a"}, {"error", "conflict"}, {"reason", "Document update conflict."}};
  EXPECT_EQ(second[1], conflict);
  EXPECT_EQ(second[2], Json({{"id", first[1]["id"]},
                             {"error", "conflict"},
                             {"reason", "Document update conflict."}}));
  EXPECT_EQ(second[3]["ok"], true) << second.dump();  // a new document may start deleted
  EXPECT_EQ(second[4]["rev"], "0-2");
  Json i = info("db");
  EXPECT_EQ(i["doc_count"], 2);
  EXPECT_EQ(i["doc_del_count"], 1);

  // An empty list is fine.
  EXPECT_EQ(bulk("db", Json::array()), Json::array());
}

TEST_F(DatabaseTest, BulkDocsEditsOfOneIdApplyInOrder) {
  create_db("db");
  const std::string a = hash_of('a'), b = hash_of('b');
  EXPECT_EQ(bulk("db",
                 Json::array({{{"_id", "x"}, {"_rev", "1-" + a}, {"v", 1}},
                              {{"_id", "x"}, {"_rev", "1-" + b}, {"v", 2}}}),
                 false),
            Json::array());
  // Deleting both leaves of a conflict in one request: each edit targets its own leaf, so both
  // succeed (CouchDB 3.5 answers the same); a third against a consumed leaf conflicts.
  Json r = bulk("db", Json::array({{{"_id", "x"}, {"_rev", "1-" + b}, {"_deleted", true}},
                                   {{"_id", "x"}, {"_rev", "1-" + a}, {"_deleted", true}},
                                   {{"_id", "x"}, {"_rev", "1-" + a}, {"v", 3}}}));
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0]["rev"], "2-d57ce398f63417fd01c5c372e5e048e6") << r.dump();
  EXPECT_EQ(r[1]["rev"], "2-feb66c19c888ee9b72419b1cf5e7b7c7") << r.dump();
  EXPECT_EQ(r[2]["error"], "conflict");
  EXPECT_EQ(call(verb::get, "/db/x").status, 404u);
  EXPECT_EQ(info("db")["doc_del_count"], 1);
}

TEST_F(DatabaseTest, ReplicatedBranchKeepsTheSharedHistoryBelowItsFork) {
  create_db("db");
  const std::string a = hash_of('a'), b = hash_of('b'), c = hash_of('c'), e = hash_of('e');
  bulk(
      "db",
      Json::array(
          {{{"_id", "x"}, {"_rev", "3-" + c}, {"_revisions", {{"start", 3}, {"ids", {c, b, a}}}}}}),
      false);
  // The client sends a sibling of 3-c with only 2-b as history; 1-a is known here.
  bulk("db",
       Json::array(
           {{{"_id", "x"}, {"_rev", "3-" + e}, {"_revisions", {{"start", 3}, {"ids", {e, b}}}}}}),
       false);
  auto r = call(verb::get, "/db/x?rev=3-" + e + "&revs=true");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json()["_revisions"], (Json{{"start", 3}, {"ids", {e, b, a}}}));
}

TEST_F(DatabaseTest, RevsDiffOrdersLikeCouchDB) {
  create_db("db");
  const std::string a = hash_of('a'), b = hash_of('b'), d = hash_of('d');
  bulk(
      "db",
      Json::array(
          {{{"_id", "x"}, {"_rev", "1-" + a}},
           {{"_id", "x"}, {"_rev", "2-" + b}, {"_revisions", {{"start", 2}, {"ids", {b, d}}}}},
           {{"_id", "x"}, {"_rev", "3-" + d}, {"_revisions", {{"start", 3}, {"ids", {d, a, b}}}}}}),
      false);
  // CouchDB 3.5's answer to the same request: missing sorted, possible_ancestors in winner order.
  auto r = post_json("/db/_revs_diff",
                     Json{{"x", {"4-" + a, "5-" + a, "2-" + d, "3-" + b, "6-" + b, "1-" + a}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json()["x"]["missing"], Json({"2-" + d, "3-" + b, "4-" + a, "5-" + a, "6-" + b}));
  EXPECT_EQ(r.json()["x"]["possible_ancestors"], Json({"3-" + d, "2-" + b, "1-" + a}));
}

TEST_F(DatabaseTest, BulkDocsRequestErrors) {
  create_db("db");
  const std::string url = "/db/_bulk_docs";
  expect_error(post(url, "{}"), 400, "bad_request", "POST body must include `docs` parameter.");
  expect_error(post(url, R"({"docs":{}})"), 400, "bad_request",
               "`docs` parameter must be an array.");
  expect_error(post(url, "[]"), 400, "bad_request", "Request body must be a JSON object");
  expect_error(post(url, "{\"docs\":["), 400, "bad_request",
               "invalid UTF-8 JSON: syntax error: unexpected end of input; expected '[', '{', or a "
               "literal at byte 10");
  expect_error(post(url, R"({"docs":[],"new_edits":"no"})"), 400, "bad_request",
               "`new_edits` parameter must be a boolean.");
  expect_error(post(url, R"({"docs":[]})", {}), 415, "bad_content_type",
               "Content-Type must be application/json");
  // One bad document fails the whole request (couch_db:doc_from_json_obj_validate throws).
  expect_error(post(url, R"({"docs":[{"_id":"ok"},5]})"), 400, "bad_request",
               "Document must be a JSON object");
  expect_error(post(url, R"({"docs":[{"_id":"ok"},{"_id":"_x"}]})"), 400, "illegal_docid",
               "Only reserved document ids may start with underscore.");
  expect_error(post(url, R"({"docs":[{"_id":"ok"},{"_id":"y","_rev":"x"}]})"), 400, "bad_request",
               "Invalid rev format");
  expect_error(post(url, R"({"docs":[{"_id":"ok"},{"_id":"y","_zap":1}]})"), 400, "doc_validation",
               "Bad special document member: _zap");
  expect_error(post(url, R"({"docs":[{"_id":"ok"},{"_id":"y","_revisions":{"start":"1"}}]})"), 400,
               "doc_validation", "_revisions.start isn't an integer.");
  expect_error(post(url, R"({"docs":[{"_id":"ok","_rev":"1-abc"},{"_id":"y"}],
                            "new_edits":false})"),
               400, "bad_request", kNewEditsReason);
  expect_error(
      post(url, R"({"docs":[{"_id":"ok"},{"_id":"a","_attachments":{"f":{"data":"e"}}}]})"), 400,
      "bad_request", "Invalid attachment data for f");

  const Json i = info("db");
  EXPECT_EQ(i["doc_count"], 0);
  EXPECT_EQ(i["update_seq"], "0");
}

TEST_F(DatabaseTest, BulkDocsReplicatedEditsListOnlyFailures) {
  create_db("db");
  const std::string a = hash_of('a'), b = hash_of('b'), c = hash_of('c');
  Json docs = Json::array({
      {{"_id", "x"}, {"v", 1}, {"_revisions", {{"start", 3}, {"ids", {c, b, a}}}}},
      {{"_id", "y"}, {"_rev", "1-" + a}},
      {{"_id", "z"}, {"_rev", "2-" + b}, {"_deleted", true}},
      {{"_id", "_local/cp"}, {"_rev", "0-0"}, {"last_seq", "42"}},
  });
  EXPECT_EQ(bulk("db", docs, false), Json::array());
  Json i = info("db");
  EXPECT_EQ(i["doc_count"], 2);
  EXPECT_EQ(i["doc_del_count"], 1);
  const std::string seq = i["update_seq"];

  // Replaying the same revisions changes nothing (CouchDB ignores known revisions).
  docs.erase(3);  // (a _local document is not replicated: it would be a new edit)
  EXPECT_EQ(bulk("db", docs, false), Json::array());
  i = info("db");
  EXPECT_EQ(i["doc_count"], 2);
  EXPECT_EQ(i["update_seq"], seq);

  // Every stored revision is known, ancestors included.
  auto r =
      post_json("/db/_revs_diff",
                Json{{"x", {"3-" + c, "2-" + b, "1-" + a}}, {"y", {"1-" + a}}, {"z", {"2-" + b}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.body, "{}\n");

  // A conflicting branch is added, not refused.
  EXPECT_EQ(bulk("db", Json::array({{{"_id", "y"}, {"_rev", "1-" + b}}}), false), Json::array());
  r = post_json("/db/_revs_diff", Json{{"y", {"1-" + a, "1-" + b}}});
  EXPECT_EQ(r.body, "{}\n");
  EXPECT_EQ(info("db")["doc_count"], 2);
}

TEST_F(DatabaseTest, BulkDocsThousandDocuments) {
  create_db("db");
  Json docs = Json::array();
  for (int i = 0; i < 1000; ++i)
    docs.push_back({{"_id", "doc" + std::to_string(i)}, {"n", i}, {"text", "some text"}});
  Json result = bulk("db", docs);
  ASSERT_EQ(result.size(), 1000u);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(result[i]["ok"], true) << result[i].dump();
    EXPECT_EQ(result[i]["id"], "doc" + std::to_string(i));
  }
  EXPECT_EQ(info("db")["doc_count"], 1000);
  // And again: every one conflicts.
  result = bulk("db", docs);
  ASSERT_EQ(result.size(), 1000u);
  EXPECT_EQ(result[999]["error"], "conflict");
  EXPECT_EQ(info("db")["doc_count"], 1000);
}

// Inserts in one request among stored documents (a batch proves its new ids absent with one
// ordered read): new and server-named ids are created at 1-, live ones conflict, deleted ones are
// re-created on their tombstone, and replicated revisions extend the branches they name.
TEST_F(DatabaseTest, BulkDocsInsertsAmongLiveAndDeletedDocuments) {
  create_db("db");
  Json first = Json::array();
  for (int i = 0; i < 30; i += 3) first.push_back({{"_id", "d" + std::to_string(100 + i)}});
  Json made = bulk("db", first);
  ASSERT_EQ(made.size(), 10u);
  Json gone =
      bulk("db", Json::array({{{"_id", "d112"}, {"_rev", made[4]["rev"]}, {"_deleted", true}}}));
  ASSERT_EQ(gone[0]["ok"], true) << gone.dump();
  Json docs = Json::array();
  for (int i = 0; i < 30; ++i) docs.push_back({{"_id", "d" + std::to_string(100 + i)}, {"n", i}});
  for (int i = 0; i < 5; ++i) docs.push_back({{"n", i}});  // server-generated ids
  Json result = bulk("db", docs);
  ASSERT_EQ(result.size(), 35u);
  for (int i = 0; i < 30; ++i) {
    const std::string id = "d" + std::to_string(100 + i);
    if (i == 12) {
      EXPECT_EQ(result[i]["rev"].get<std::string>().substr(0, 2), "3-") << result[i].dump();
    } else if (i % 3 == 0) {
      EXPECT_EQ(result[i]["error"], "conflict") << id;
    } else {
      EXPECT_EQ(result[i]["rev"].get<std::string>().substr(0, 2), "1-") << result[i].dump();
    }
  }
  for (int i = 30; i < 35; ++i) EXPECT_EQ(result[i]["ok"], true) << result[i].dump();
  EXPECT_EQ(info("db")["doc_count"], 35);
  EXPECT_EQ(info("db")["doc_del_count"], 0);
  // new_edits=false: a child of a stored leaf replaces it, a new document starts at its path.
  const std::string leaf = made[0]["rev"].get<std::string>();
  Json repl = Json::array(
      {{{"_id", "d100"},
        {"_revisions", {{"start", 2}, {"ids", {"b2", leaf.substr(2)}}}},
        {"_rev", "2-b2"}},
       {{"_id", "d200"}, {"_revisions", {{"start", 2}, {"ids", {"b2", "a1"}}}}, {"_rev", "2-b2"}}});
  bulk("db", repl, false);
  for (const char* id : {"d100", "d200"}) {
    auto r = get(std::string("/db/") + id + "?conflicts=true");
    ASSERT_EQ(r.status, 200u) << r.body;
    EXPECT_EQ(r.json()["_rev"], "2-b2");
    EXPECT_FALSE(r.json().contains("_conflicts")) << r.body;
  }
}

// 40 documents of 300 KB are 12 MB: more than one 10 MB transaction can hold, so the request is
// split over several transactions, and the answer keeps the request's order.
TEST_F(DatabaseTest, BulkDocsLargerThanOneTransaction) {
  create_db("db");
  const std::string payload(300'000, 'p');
  Json docs = Json::array();
  for (int i = 0; i < 40; ++i) docs.push_back({{"_id", "big" + std::to_string(i)}, {"p", payload}});
  Json result = bulk("db", docs);
  ASSERT_EQ(result.size(), 40u);
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(result[i]["id"], "big" + std::to_string(i));
    EXPECT_EQ(result[i]["ok"], true) << result[i].dump();
  }
  EXPECT_EQ(info("db")["doc_count"], 40);
}

// ---- _revs_diff, _missing_revs ------------------------------------------------------------------

TEST_F(DatabaseTest, RevsDiffReportsMissingAndPossibleAncestors) {
  create_db("db");
  const std::vector<std::string> revs = edit_chain("db", "doc", 2);
  ASSERT_EQ(revs.size(), 2u);
  const std::string future = "3-" + hash_of('f');
  const std::string other = "1-" + hash_of('e');
  auto r = post_json("/db/_revs_diff", Json{{"doc", {revs[0], revs[1], future, other}},
                                            {"unknown", {"1-" + hash_of('a')}},
                                            {"present", Json::array()}});
  ASSERT_EQ(r.status, 200u) << r.body;
  const Json body = r.json();
  EXPECT_EQ(keys_of(body), (std::vector<std::string>{"doc", "unknown"}));
  EXPECT_EQ(body["doc"]["missing"], Json({other, future}));  // sorted, as CouchDB answers
  // The leaf 2-x is older than the missing 3-f, so it may be one of its ancestors.
  EXPECT_EQ(body["doc"]["possible_ancestors"], Json({revs[1]}));
  EXPECT_EQ(body["unknown"].dump(), R"({"missing":["1-)" + hash_of('a') + R"("]})");

  // Hex hashes come back in lowercase (couch_doc:rev_to_str).
  std::string upper = "9-" + std::string(32, 'A');
  r = post_json("/db/_revs_diff", Json{{"doc", {upper}}});
  EXPECT_EQ(r.json()["doc"]["missing"], Json({"9-" + std::string(32, 'a')}));

  r = post_json("/db/_revs_diff", Json{{"doc", revs}});
  EXPECT_EQ(r.body, "{}\n");

  // More documents than one read transaction serves.
  Json many = Json::object();
  for (int i = 0; i < 2500; ++i) many["id" + std::to_string(i)] = {"1-" + hash_of('c')};
  many["doc"] = revs;
  r = post_json("/db/_revs_diff", many);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json().size(), 2500u);
  EXPECT_FALSE(r.json().contains("doc"));
}

TEST_F(DatabaseTest, MissingRevsListsOnlyMissing) {
  create_db("db");
  const std::vector<std::string> revs = edit_chain("db", "doc", 1);
  ASSERT_EQ(revs.size(), 1u);
  const std::string missing = "2-" + hash_of('b');
  auto r = post_json("/db/_missing_revs", Json{{"doc", {revs[0], missing}}, {"gone", {missing}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json(), Json({{"missing_revs", {{"doc", {missing}}, {"gone", {missing}}}}}));
  r = post_json("/db/_missing_revs", Json{{"doc", revs}});
  EXPECT_EQ(r.body, "{\"missing_revs\":{}}\n");
}

TEST_F(DatabaseTest, RevsDiffRequestErrors) {
  create_db("db");
  for (const char* path : {"/db/_revs_diff", "/db/_missing_revs"}) {
    expect_error(post(path, R"({"doc":"1-abc"})"), 400, "bad_request",
                 "Invalid revisions, must be a list");
    expect_error(post(path, R"({"doc":[1]})"), 400, "bad_request", "Invalid rev format");
    expect_error(post(path, R"({"doc":["abc"]})"), 400, "bad_request", "Invalid rev format");
    expect_error(post(path, "[]"), 400, "bad_request", "Request body must be a JSON object");
    expect_error(post(path, "{", kJson), 400, "bad_request",
                 "invalid UTF-8 JSON: syntax error: unexpected end of input; expected string "
                 "literal at byte 2");
    expect_error(post(path, "{}", {}), 415, "bad_content_type",
                 "Content-Type must be application/json");
  }
}

// ---- _revs_limit
// ----------------------------------------------------------------------------------

TEST_F(DatabaseTest, RevsLimitRoundTrip) {
  create_db("db");
  auto r = get("/db/_revs_limit");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "1000\n");
  // chttpd:json_body: no Content-Type needed.
  r = call(verb::put, "/db/_revs_limit", "5");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "{\"ok\":true}\n");
  EXPECT_EQ(get("/db/_revs_limit").body, "5\n");
  EXPECT_EQ(call(verb::put, "/db/_revs_limit", "4000", kJson).status, 200u);
  EXPECT_EQ(get("/db/_revs_limit").body, "4000\n");

  const std::string positive = "The revs_limit must be a positive integer.";
  expect_error(call(verb::put, "/db/_revs_limit", "0"), 400, "bad_request", positive);
  expect_error(call(verb::put, "/db/_revs_limit", "-3"), 400, "bad_request", positive);
  expect_error(call(verb::put, "/db/_revs_limit", "2.5"), 400, "bad_request", positive);
  expect_error(call(verb::put, "/db/_revs_limit", "\"10\""), 400, "bad_request", positive);
  expect_error(call(verb::put, "/db/_revs_limit", "18446744073709551615"), 400, "bad_request",
               "The revs_limit must not be greater than 4000.");
  expect_error(call(verb::put, "/db/_revs_limit", "4001"), 400, "bad_request",
               "The revs_limit must not be greater than 4000.");
  expect_error(call(verb::put, "/db/_revs_limit", "ten"), 400, "bad_request",
               "invalid UTF-8 JSON: syntax error: invalid literal at byte 2");
  EXPECT_EQ(get("/db/_revs_limit").body, "4000\n");
}

// rev_stemming_test.exs: once revs_limit is 5, a document keeps only its last 5 revisions.
TEST_F(DatabaseTest, RevsLimitStemsEditedDocuments) {
  create_db("db");
  create_db("control");
  ASSERT_EQ(call(verb::put, "/db/_revs_limit", "5").status, 200u);
  const std::vector<std::string> revs = edit_chain("db", "doc", 10);
  const std::vector<std::string> control = edit_chain("control", "doc", 10);
  ASSERT_EQ(revs.size(), 10u);
  ASSERT_EQ(control.size(), 10u);

  // The control database (limit 1000) knows every revision.
  auto r = post_json("/control/_revs_diff", Json{{"doc", control}});
  EXPECT_EQ(r.body, "{}\n");
  // With limit 5 the first five revisions were stemmed away.
  r = post_json("/db/_revs_diff", Json{{"doc", revs}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json()["doc"]["missing"],
            Json(std::vector<std::string>(revs.begin(), revs.begin() + 5)));

  // And GET ?revs=true lists five ids, the newest first.
  r = get("/db/doc?revs=true");
  ASSERT_EQ(r.status, 200u) << r.body;
  const Json doc = r.json();
  EXPECT_EQ(doc["_revisions"]["start"], 10);
  ASSERT_EQ(doc["_revisions"]["ids"].size(), 5u);
  EXPECT_EQ("10-" + doc["_revisions"]["ids"][0].get<std::string>(), revs[9]);
  EXPECT_EQ("6-" + doc["_revisions"]["ids"][4].get<std::string>(), revs[5]);
}

// ---- _ensure_full_commit, _compact, _view_cleanup
// -------------------------------------------------

TEST_F(DatabaseTest, EnsureFullCommit) {
  create_db("db");
  auto r = post("/db/_ensure_full_commit", "");
  EXPECT_EQ(r.status, 201u);
  EXPECT_EQ(r.body, R"({"ok":true,"instance_start_time":"0"})"
                    "\n");
  // Its instance_start_time matches the database's (the replicator compares them).
  EXPECT_EQ(r.json()["instance_start_time"], info("db")["instance_start_time"]);
  expect_error(post("/db/_ensure_full_commit", "", {}), 415, "bad_content_type",
               "Content-Type must be application/json");
}

TEST_F(DatabaseTest, CompactAndViewCleanupAreAccepted) {
  create_db("db");
  auto r = post("/db/_compact", "");
  EXPECT_EQ(r.status, 202u);
  EXPECT_EQ(r.body, "{\"ok\":true}\n");
  expect_error(post("/db/_compact", "", {}), 415, "bad_content_type",
               "Content-Type must be application/json");
  expect_error(post("/db/_compact/nope", ""), 404, "not_found", "missing");
  ASSERT_EQ(post("/db", R"({"_id":"_design/views"})").status, 201u);
  EXPECT_EQ(post("/db/_compact/views", "").status, 202u);

  r = post("/db/_view_cleanup", "", {});  // CouchDB does not check its Content-Type
  EXPECT_EQ(r.status, 202u);
  EXPECT_EQ(r.body, "{\"ok\":true}\n");
}

// ---- Robustness
// -----------------------------------------------------------------------------------

// Malformed bodies and wrong types are answered with 4xx, never crash the server, never write.
TEST_F(DatabaseTest, MalformedRequestsWriteNothing) {
  create_db("db");
  const std::vector<std::string> bodies = {
      "",
      "{",
      "nul",
      "[]",
      "\"docs\"",
      "-123",
      "{\"docs\":null}",
      "{\"docs\":[null]}",
      "{\"docs\":[[]]}",
      "{\"docs\":[{\"_id\":null}]}",
      "{\"docs\":[{\"_id\":\"\"}]}",
      "{\"docs\":[{\"_id\":\"_design/\"}]}",
      "{\"docs\":[{\"_rev\":17}]}",
      "{\"docs\":[{\"_revisions\":{\"start\":2,\"ids\":[\"a\",\"b\",\"c\"]}}],\"new_edits\":false}",
      "{\"docs\":[{\"_id\":\"\\ud800\"}]}",
      std::string(600, '[') + std::string(600, ']'),
      "{\"docs\":[{\"a\":1}],\"new_edits\":0}",
      "{\"a\":[\"1-" + hash_of('a') + "\",{}]}",
      std::string("{\"docs\":[{\"a\":\"\xff\xfe\"}]}"),
  };
  for (const std::string& body : bodies) {
    // (POST /{db} is left out: most of these bodies are valid documents to it.)
    for (const char* path :
         {"/db/_bulk_docs", "/db/_revs_diff", "/db/_missing_revs", "/_dbs_info"}) {
      auto r = post(path, body);
      EXPECT_GE(r.status, 400u) << path << " " << body;
      EXPECT_LT(r.status, 500u) << path << " " << body << " -> " << r.body;
      EXPECT_NO_THROW(r.json()) << r.body;
    }
    auto r = call(verb::put, "/db/_revs_limit", body);
    EXPECT_EQ(r.status, 400u) << body;
  }
  EXPECT_EQ(get("/").status, 200u);
  const Json i = info("db");
  EXPECT_EQ(i["doc_count"], 0);
  EXPECT_EQ(i["doc_del_count"], 0);
  EXPECT_EQ(i["update_seq"], "0");
  EXPECT_EQ(get("/db/_revs_limit").body, "1000\n");
}

// ---- _bulk_get (chttpd_db _bulk_get, answers checked against CouchDB 3.5) ----------------------

TEST_F(DatabaseTest, BulkGetAnswersEveryEntryInOrder) {
  create_db("db");
  const std::string a = hash_of('a'), b = hash_of('b');
  // Two leaves of "c" (a conflict), one of "d".
  ASSERT_EQ(post("/db/_bulk_docs", R"({"new_edits":false,"docs":[
      {"_id":"c","_rev":"1-)" + a + R"(","v":1},{"_id":"c","_rev":"1-)" +
                                       b + R"(","v":2},
      {"_id":"d","_rev":"1-)" + a + R"(","w":1}]})")
                .status,
            201u);
  auto r = post("/db/_bulk_get?revs=true", R"({"docs":[{"id":"c"},{"id":"d","rev":"1-)" + a +
                                               R"("},{"id":"d","rev":"9-)" + a +
                                               R"("},{"id":"nope"},{"rev":"1-x"},5,{"id":"_bad"},
      {"id":"d","rev":"zz"},{"id":"d","atts_since":"x"}]})");
  ASSERT_EQ(r.status, 200u) << r.body;
  const Json res = r.json()["results"];
  ASSERT_EQ(res.size(), 9u) << r.body;
  EXPECT_EQ(res[0]["id"], "c");
  ASSERT_EQ(res[0]["docs"].size(), 2u);  // no rev: every leaf, sorted by revision
  EXPECT_EQ(res[0]["docs"][0]["ok"]["_rev"], "1-" + a);
  EXPECT_EQ(res[0]["docs"][1]["ok"]["_rev"], "1-" + b);
  EXPECT_EQ(res[1]["docs"][0]["ok"]["_revisions"], (Json{{"start", 1}, {"ids", {a}}}));
  auto err = [&](std::size_t i) { return res[i]["docs"][0]["error"].dump(); };
  EXPECT_EQ(err(2), R"({"rev":"9-)" + a + R"(","reason":"missing","id":"d","error":"not_found"})");
  EXPECT_EQ(err(3), R"({"rev":"undefined","reason":"missing","id":"nope","error":"not_found"})");
  EXPECT_EQ(err(4),
            R"({"rev":null,"reason":"document id missed","id":null,"error":"bad_request"})");
  EXPECT_EQ(
      err(5),
      R"({"rev":null,"reason":"document must be a JSON object","id":null,"error":"bad_request"})");
  EXPECT_EQ(
      err(6),
      R"({"rev":null,"reason":"Only reserved document ids may start with underscore.","id":"_bad","error":"illegal_docid"})");
  EXPECT_EQ(err(7), R"({"rev":"zz","reason":"Invalid rev format","id":"d","error":"bad_request"})");
  EXPECT_EQ(
      err(8),
      R"({"rev":"x","reason":"att_since value must be array of revs.","id":"d","error":"bad_request"})");
}

TEST_F(DatabaseTest, BulkGetRequestErrors) {
  create_db("db");
  auto expect = [](const HttpResponse& r, unsigned status, const std::string& reason) {
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_EQ(r.json()["reason"], reason) << r.body;
  };
  expect(post("/db/_bulk_get", "{}"), 400, "Missing JSON list of 'docs'.");
  expect(post("/db/_bulk_get?rev=1", R"({"docs":[]})"), 400,
         "\"rev\" query parameter is not acceptable");
  expect(get("/db/_bulk_get"), 405, "Only POST allowed");
  expect(call(verb::post, "/db/_bulk_get", R"({"docs":[]})", {{"Content-Type", "text/plain"}}), 415,
         "Content-Type must be application/json");
  expect(post("/db/_bulk_get", R"({"docs":5})"), 400, "`docs` parameter must be an array.");
  expect(post("/nodb/_bulk_get", R"({"docs":[]})"), 404, "Database does not exist.");
  auto empty = post("/db/_bulk_get", R"({"docs":[]})");
  EXPECT_EQ(empty.status, 200u);
  EXPECT_EQ(empty.json(), Json::parse(R"({"results":[]})"));
}

TEST_F(DatabaseTest, BulkGetWithAttachmentsAndLatest) {
  create_db("db");
  auto p = post("/db",
                R"({"_id":"x","_attachments":{"f":{"content_type":"text/plain","data":"aGk="}}})");
  ASSERT_EQ(p.status, 201u) << p.body;
  const std::string r1 = p.json()["rev"];
  auto p2 = call(verb::put, "/db/x",
                 R"({"_rev":")" + r1 + R"(","v":2,"_attachments":{"f":{"stub":true}}})",
                 {{"Content-Type", "application/json"}});
  ASSERT_EQ(p2.status, 201u) << p2.body;
  auto r = post("/db/_bulk_get?latest=true&attachments=true",
                R"({"docs":[{"id":"x","rev":")" + r1 + R"("},{"id":"x","atts_since":[")" +
                    p2.json()["rev"].get<std::string>() + R"("]}]})");
  ASSERT_EQ(r.status, 200u) << r.body;
  const Json res = r.json()["results"];
  // latest: the leaf that descends from r1; attachments inline.
  EXPECT_EQ(res[0]["docs"][0]["ok"]["_rev"], p2.json()["rev"]);
  EXPECT_EQ(res[0]["docs"][0]["ok"]["_attachments"]["f"]["data"], "aGk=");
  // atts_since covering the attachment's revpos: a stub.
  EXPECT_EQ(res[1]["docs"][0]["ok"]["_attachments"]["f"]["stub"], true);
  // Multipart when the client accepts only multipart.
  auto mp = call(verb::post, "/db/_bulk_get?attachments=true", R"({"docs":[{"id":"x"}]})",
                 {{"Content-Type", "application/json"}, {"Accept", "multipart/mixed"}});
  ASSERT_EQ(mp.status, 200u);
  EXPECT_TRUE(mp.header(field::content_type).starts_with("multipart/mixed"))
      << mp.header(field::content_type);
  EXPECT_NE(mp.body.find("X-Doc-Id: x"), std::string::npos) << mp.body;
  EXPECT_NE(mp.body.find("Content-Encoding: gzip"), std::string::npos) << mp.body;
}

}  // namespace
}  // namespace chaise::test
