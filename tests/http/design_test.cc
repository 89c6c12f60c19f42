// Design documents at work over HTTP: validate_doc_update on every write path, JavaScript
// _changes filters (filter=ddoc/name, filter=_view), with CouchDB 3.5's answers.
#include <gtest/gtest.h>

#include <boost/beast/core/detail/base64.hpp>
#include <fstream>

#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;
using Headers = std::vector<std::pair<std::string, std::string>>;

std::string base64(std::string_view text) {
  std::string out(boost::beast::detail::base64::encoded_size(text.size()), '\0');
  out.resize(boost::beast::detail::base64::encode(out.data(), text.data(), text.size()));
  return out;
}

Headers as(std::string_view user, std::string_view password) {
  return {{"Authorization", "Basic " + base64(std::string(user) + ":" + std::string(password))},
          {"Content-Type", "application/json"}};
}

class DesignTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ini_ = dir_.path() / "local.ini";
    std::ofstream(ini_) << "[chttpd_auth]\niterations = 10\n[admins]\nadmin = secret\n"
                           "[couchdb]\nos_process_timeout = 300\n";
    server_ = std::make_unique<ServerProcess>(
        dir_.path() / "data", std::vector<std::string>{"--no-admin-party", "--config", ini_.string()});
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
    "  if (newDoc.who && newDoc.who !== userCtx.name) throw({unauthorized: 'you are ' + userCtx.name});"
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
  expect_error(admin(verb::post, "/db", R"({"_id":"b","forbid":true})"), 403, "forbidden", "no b in db");
  auto bulk = admin(verb::post, "/db/_bulk_docs",
                    R"({"docs":[{"_id":"c"},{"_id":"d","forbid":1},{"_id":"e","who":"zed"}]})");
  ASSERT_EQ(bulk.status, 201u);
  EXPECT_TRUE(bulk.json()[0]["ok"].get<bool>());
  EXPECT_EQ(bulk.json()[1], Json::parse(R"({"id":"d","error":"forbidden","reason":"no d in db"})"));
  EXPECT_EQ(bulk.json()[2], Json::parse(R"({"id":"e","error":"unauthorized","reason":"you are admin"})"));
  auto repl = admin(verb::post, "/db/_bulk_docs",
                    R"({"new_edits":false,"docs":[{"_id":"r","_rev":"1-abc","forbid":true},{"_id":"s","_rev":"1-abc"}]})");
  ASSERT_EQ(repl.status, 201u);
  EXPECT_EQ(repl.json(), Json::parse(R"([{"id":"r","rev":"1-abc","error":"forbidden","reason":"no r in db"}])"));
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
  expect_error(admin(verb::put, "/db/f", R"({"forbid":true})"), 409, "conflict", "Document update conflict.");

  // Other thrown values and failing functions: 500, as CouchDB.
  expect_error(admin(verb::put, "/db/p", R"({"plain":1})"), 500, "unknown_error", "plain");
  auto crash = admin(verb::put, "/db/q", R"({"crash":1})");
  EXPECT_EQ(crash.status, 500u);
  EXPECT_EQ(crash.json()["error"], "TypeError");
  expect_error(admin(verb::put, "/db/t", R"({"spin":1})"), 500, "os_process_error", "timeout");
  // ... and the server goes on.
  EXPECT_EQ(admin(verb::put, "/db/u", "{}").status, 201u);

  // Nothing rejected was written.
  for (auto id : {"a", "b", "d", "e", "p", "q", "t"}) EXPECT_EQ(admin(verb::get, std::string("/db/") + id).status, 404u) << id;
  EXPECT_EQ(admin(verb::get, "/db/f").json()["_rev"], rev);

  // Design documents are not validated by it; a new revision of the function takes effect.
  put_ddoc("other", {{"forbid", true}});
  const std::string vrev = admin(verb::get, "/db/_design/v").json()["_rev"];
  ASSERT_EQ(admin(verb::put, "/db/_design/v?rev=" + vrev,
                  Json{{"validate_doc_update", "function(n){ if (n.forbid) throw({forbidden: 'v2'}); }"}}.dump())
                .status,
            201u);
  expect_error(admin(verb::put, "/db/a", R"({"forbid":true})"), 403, "forbidden", "v2");
  EXPECT_EQ(admin(verb::put, "/db/p", R"({"plain":1})").status, 201u);
}

TEST_F(DesignTest, ValidateDocUpdateSeesTheUserAndTheSecurityObject) {
  add_user_bob_as_member();
  put_ddoc("v", {{"validate_doc_update", kVdu}});
  EXPECT_EQ(user(verb::put, "/db/a", R"({"who":"bob","role":"editor","admin":"ann"})").status, 201u);
  expect_error(user(verb::put, "/db/b", R"({"who":"ann"})"), 401, "unauthorized", "you are bob");
  expect_error(user(verb::put, "/db/c", R"({"role":"boss"})"), 403, "forbidden", "role");
  expect_error(user(verb::put, "/db/d", R"({"admin":"bob"})"), 403, "forbidden", "admin");
  // Several design documents: each must accept.
  put_ddoc("w", {{"validate_doc_update", "function(n, o, u){ if (n.x) throw({forbidden: 'w says no to ' + u.name}); }"}});
  expect_error(user(verb::put, "/db/e", R"({"x":1})"), 403, "forbidden", "w says no to bob");
}

TEST_F(DesignTest, ChangesFilterFunctions) {
  put_ddoc("f", {{"filters",
                  {{"odd", "function(doc, req) { return doc.n % 2 == 1 && req.query.p == 'yes'; }"},
                   {"mine", "function(doc, req) { return doc.owner === req.userCtx.name; }"},
                   {"crash", "function(doc) { return doc.n.x.y; }"},
                   {"syntax", "function(doc) {"}}},
                 {"views", {{"big", {{"map", "function(doc) { if (doc.n > 2) emit(doc.n); }"}}}}}});
  auto bulk = admin(verb::post, "/db/_bulk_docs",
                    R"({"docs":[{"_id":"1","n":1,"owner":"admin"},{"_id":"2","n":2},{"_id":"3","n":3},{"_id":"4","n":4}]})");
  ASSERT_EQ(bulk.status, 201u);
  auto ids = [](const HttpResponse& r) {
    std::vector<std::string> out;
    const Json j = r.json();
    for (const auto& row : j["results"]) out.push_back(row["id"]);
    return out;
  };
  EXPECT_EQ(ids(admin(verb::get, "/db/_changes?filter=f/odd&p=yes")), (std::vector<std::string>{"1", "3"}));
  EXPECT_EQ(ids(admin(verb::get, "/db/_changes?filter=f/odd&p=no")), std::vector<std::string>{});
  EXPECT_EQ(ids(admin(verb::get, "/db/_changes?filter=f/mine")), std::vector<std::string>{"1"});
  EXPECT_EQ(ids(admin(verb::post, "/db/_changes?filter=f/odd&p=yes", "{}")), (std::vector<std::string>{"1", "3"}));
  EXPECT_EQ(ids(admin(verb::get, "/db/_changes?filter=_view&view=f/big")), (std::vector<std::string>{"3", "4"}));
  // A longpoll feed wakes for a matching change only.
  auto longpoll = admin(verb::get, "/db/_changes?filter=f/odd&p=yes&feed=longpoll&since=now&timeout=300");
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

}  // namespace
}  // namespace chaise::test
