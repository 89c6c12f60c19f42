// Show, list and rewrite functions against the real server, with CouchDB 3.5's answers (taken
// side by side from the reference CouchDB): status, the headers clients read, bodies; lists
// streamed over many pages and flushes; a client that leaves in the middle of a list; and the
// time limit a spinning function runs into.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;
using Headers = std::vector<std::pair<std::string, std::string>>;

// The design document of most tests (functions as CouchDB's own test suite writes them).
Json render_ddoc() {
  return Json{
      {"shows",
       {{"hello",
         "function(doc, req){ return {body: 'Hello ' + (doc ? doc._id : 'nobody') + ' ' + req.id, "
         "headers: {'X-Foo': 'bar'}}; }"},
        {"str", "function(doc, req){ return 'just a string'; }"},
        {"json", "function(doc, req){ return {json: {doc: doc, q: req.query}}; }"},
        {"code", "function(doc, req){ return {code: 418, body: 'teapot'}; }"},
        {"throws", "function(doc, req){ throw 'oops'; }"},
        {"throwsarr", "function(doc, req){ throw(['error', 'not_found', 'nope']); }"},
        {"undef", "function(doc, req){ }"},
        {"prov",
         "function(doc, req){ provides('html', function(){ return '<p>html</p>'; }); "
         "provides('json', function(){ return {body: '{\"a\":1}'}; }); }"},
        {"sendy", "function(doc, req){ send('a'); send('b'); return 'c'; }"}}},
      {"lists",
       {{"simple",
         "function(head, req){ start({headers: {'Content-Type': 'text/plain'}}); var row; "
         "send('head:' + JSON.stringify(head) + '\\n'); "
         "while (row = getRow()) { send(JSON.stringify(row) + '\\n'); } return 'tail'; }"},
        {"code", "function(head, req){ start({code: 201, headers: {'X-L': 'y'}}); return 'x'; }"},
        {"throws", "function(head, req){ throw 'bad'; }"},
        {"throwsmid",
         "function(head, req){ getRow(); send('partial'); "
         "throw(['error', 'my_err', 'mid reason']); }"},
        {"noret", "function(head, req){ send('only'); }"},
        {"count",
         "function(head, req){ var n = 0, row; while (row = getRow()) { n++; "
         "send(row.id + ' ' + JSON.stringify(row.value) + '\\n'); } return 'rows:' + n; }"},
        {"spin", "function(head, req){ while (true) {} }"},
        {"prov",
         "function(head, req){ provides('json', function(){ send('['); var r; "
         "while (r = getRow()) send(JSON.stringify(r.key) + ','); return ']'; }); }"}}},
      {"views",
       {{"v", {{"map", "function(doc){ if (doc.n) emit(doc.n, doc.n * 2); }"}, {"reduce", "_sum"}}},
        {"big", {{"map", "function(doc){ if (doc.big) emit(doc._id, doc.big); }"}}}}}};
}

class RenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path ini = dir_.path() / "local.ini";
    std::ofstream(ini) << "[couchdb]\nos_process_timeout = " << 500 * kSanitizerSlowdown << "\n";
    server_.emplace(dir_.path() / "data", std::vector<std::string>{"--config", ini.string()});
    client_ = std::make_unique<HttpClient>(server_->port(), 60s);
    ASSERT_EQ(call(verb::put, "/db").status, 201u);
    ASSERT_EQ(call(verb::put, "/db/_design/a", render_ddoc().dump()).status, 201u);
    for (int i = 1; i <= 3; ++i)
      ASSERT_EQ(
          call(verb::put, "/db/d" + std::to_string(i), R"({"n":)" + std::to_string(i) + "}").status,
          201u);
  }
  HttpResponse call(verb method, std::string_view target, std::string body = {},
                    Headers headers = {{"Content-Type", "application/json"}}) {
    return client_->request(method, target, std::move(body), headers);
  }
  HttpResponse get(std::string_view target, Headers headers = {}) {
    return client_->request(verb::get, target, {}, headers);
  }
  TempDir dir_;
  std::optional<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(RenderTest, ShowAnswersAsCouchDB) {
  auto r = get("/db/_design/a/_show/hello/d1");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "Hello d1 d1");
  EXPECT_EQ(r.header("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(r.header("Content-Security-Policy"), "sandbox");
  EXPECT_EQ(r.header("X-Foo"), "bar");
  EXPECT_EQ(r.header("Vary"), "Accept");
  // Without a document, or with one that does not exist: doc is null, req.id the id asked for.
  EXPECT_EQ(get("/db/_design/a/_show/hello").body, "Hello nobody null");
  EXPECT_EQ(get("/db/_design/a/_show/hello/nosuch").body, "Hello nobody nosuch");
  EXPECT_EQ(get("/db/_design/a/_show/str").body, "just a string");

  // The document as CouchDB's query server gets it (with _revisions), the query decoded.
  r = get("/db/_design/a/_show/json/d1?x=1");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  EXPECT_EQ(r.header("Cache-Control"), "must-revalidate");
  EXPECT_EQ(r.header("Content-Security-Policy"), "");
  const Json shown = r.json();
  EXPECT_EQ(shown["doc"]["_id"], "d1");
  EXPECT_EQ(shown["doc"]["n"], 1);
  EXPECT_EQ(shown["doc"]["_revisions"]["start"], 1);
  EXPECT_EQ(shown["q"], Json({{"x", "1"}}));

  r = get("/db/_design/a/_show/code");
  EXPECT_EQ(r.status, 418u);
  EXPECT_EQ(r.body, "teapot");
  r = get("/db/_design/a/_show/undef");  // {}: an empty answer, typed as CouchDB types it
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "");
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  EXPECT_EQ(get("/db/_design/a/_show/sendy").body, "abc");

  r = get("/db/_design/a/_show/throws");
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(r.json()["error"], "render_error");
  EXPECT_EQ(r.json()["reason"],
            "function raised error: (new String(\"oops\")) \nstacktrace: undefined");
  r = get("/db/_design/a/_show/throwsarr");
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.json(), Json({{"error", "not_found"}, {"reason", "nope"}}));
  r = get("/db/_design/a/_show/missing");
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.json(), Json({{"error", "not_found"}, {"reason", "missing json key: missing"}}));
}

TEST_F(RenderTest, ShowProvidesWhatAcceptAsksFor) {
  auto r = get("/db/_design/a/_show/prov");  // no Accept: the first provided
  EXPECT_EQ(r.body, "<p>html</p>");
  EXPECT_EQ(r.header("Content-Type"), "text/html; charset=utf-8");
  r = get("/db/_design/a/_show/prov", {{"Accept", "text/html;q=0.5, application/json"}});
  EXPECT_EQ(r.body, R"({"a":1})");
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  EXPECT_EQ(get("/db/_design/a/_show/prov?format=json").body, R"({"a":1})");
  r = get("/db/_design/a/_show/prov", {{"Accept", "image/png"}});
  EXPECT_EQ(r.status, 406u);
  EXPECT_EQ(r.json()["error"], "not_acceptable");
  EXPECT_EQ(r.json()["reason"],
            "Content-Type image/png not supported, try one of: application/json, text/x-json, "
            "text/html; charset=utf-8");
}

TEST_F(RenderTest, ShowEtagFollowsTheDocument) {
  auto r = get("/db/_design/a/_show/hello/d1");
  const std::string etag = r.header("ETag");
  ASSERT_FALSE(etag.empty());
  r = get("/db/_design/a/_show/hello/d1", {{"If-None-Match", etag}});
  EXPECT_EQ(r.status, 304u);
  EXPECT_EQ(r.body, "");
  const std::string rev = get("/db/d1").json()["_rev"];
  ASSERT_EQ(call(verb::put, "/db/d1", R"({"n":1,"_rev":")" + rev + R"(","x":2})").status, 201u);
  r = get("/db/_design/a/_show/hello/d1", {{"If-None-Match", etag}});
  EXPECT_EQ(r.status, 200u);
  EXPECT_NE(r.header("ETag"), etag);
}

TEST_F(RenderTest, ListRendersViewRows) {
  auto r = get("/db/_design/a/_list/simple/v?reduce=false");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.header("Content-Type"), "text/plain");
  EXPECT_EQ(r.header("Content-Security-Policy"), "sandbox");
  EXPECT_EQ(r.header("Transfer-Encoding"), "chunked");
  EXPECT_EQ(r.body,
            "head:{\"total_rows\":3,\"offset\":0}\n"
            "{\"id\":\"d1\",\"key\":1,\"value\":2}\n"
            "{\"id\":\"d2\",\"key\":2,\"value\":4}\n"
            "{\"id\":\"d3\",\"key\":3,\"value\":6}\n"
            "tail");
  // A reduction has an empty head; a view of another design document; include_docs.
  EXPECT_EQ(get("/db/_design/a/_list/simple/v").body, "head:{}\n{\"key\":null,\"value\":12}\ntail");
  ASSERT_EQ(call(verb::put, "/db/_design/b",
                 R"({"views":{"w":{"map":"function(d){ if (d.n > 1) emit(d.n, null); }"}}})")
                .status,
            201u);
  EXPECT_EQ(get("/db/_design/a/_list/simple/b/w?limit=1").body,
            "head:{\"total_rows\":2,\"offset\":0}\n{\"id\":\"d2\",\"key\":2,\"value\":null}\ntail");
  const std::string with_doc =
      get("/db/_design/a/_list/simple/v?reduce=false&include_docs=true&limit=1").body;
  const std::size_t first = with_doc.find('\n') + 1;
  const Json row = Json::parse(with_doc.substr(first, with_doc.find('\n', first) - first));
  EXPECT_EQ(row["doc"]["_id"], "d1");
  // POST with keys, as CouchDB takes them from the body.
  r = call(verb::post, "/db/_design/a/_list/simple/v", R"({"keys":[2,3],"reduce":false})");
  EXPECT_EQ(r.body,
            "head:{\"total_rows\":3,\"offset\":1}\n{\"id\":\"d2\",\"key\":2,\"value\":4}\n"
            "{\"id\":\"d3\",\"key\":3,\"value\":6}\ntail");
  // _all_docs as the view.
  r = get("/db/_design/a/_list/simple/_all_docs?limit=2");
  EXPECT_EQ(r.body.substr(0, r.body.find('\n')), "head:{\"total_rows\":5,\"offset\":0}");
  EXPECT_NE(r.body.find("\"id\":\"_design/a\""), std::string::npos);
  // provides() in a list, start()'s code and headers.
  r = get("/db/_design/a/_list/prov/v?reduce=false", {{"Accept", "*/*"}});
  EXPECT_EQ(r.body, "[1,2,3,]");
  EXPECT_EQ(r.header("Content-Type"), "text/x-json");
  r = get("/db/_design/a/_list/code/v?reduce=false");
  EXPECT_EQ(r.status, 201u);
  EXPECT_EQ(r.header("X-L"), "y");
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  EXPECT_EQ(r.body, "x");
  EXPECT_EQ(get("/db/_design/a/_list/noret/v?reduce=false").body, "only");
}

TEST_F(RenderTest, ListErrorsAsCouchDB) {
  auto r = get("/db/_design/a/_list/throws/v?reduce=false");  // before any output: a plain error
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(r.json()["error"], "render_error");
  // After start(): the head carries the error's status, the body CouchDB's chunked error.
  r = get("/db/_design/a/_list/throwsmid/v?reduce=false");
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(r.body, "\n{\"code\":500,\"error\":\"my_err\",\"reason\":\"mid reason\"}\n");
  r = get("/db/_design/a/_list/missing/v");
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.json()["reason"], "missing json key: missing");
  r = get("/db/_design/a/_list/simple/nov");
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.json()["reason"], "missing_named_view");
  r = get("/db/_design/a/_list/simple");
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.json(), Json({{"error", "list_error"}, {"reason", "Invalid path."}}));
  r = call(verb::put, "/db/_design/a/_list/simple/v");
  EXPECT_EQ(r.status, 405u);
  EXPECT_EQ(r.header("Allow"), "GET,POST,HEAD");
  // A function that never ends runs into the time limit, and the engine serves the next call.
  r = get("/db/_design/a/_list/spin/v?reduce=false");
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(r.json(), Json({{"error", "os_process_error"}, {"reason", "timeout"}}));
  EXPECT_EQ(get("/db/_design/a/_show/str").body, "just a string");
}

TEST_F(RenderTest, LongListStreamsPageByPage) {
  // 5,000 rows over several pages of rows and several flushes of output (~1 MB).
  const std::string value(180, 'v');
  const int n = 5000;
  for (int start = 0; start < n; start += 1000) {
    Json docs = Json::array();
    for (int i = start; i < start + 1000; ++i) {
      char id[16];
      std::snprintf(id, sizeof id, "big%05d", i);
      docs.push_back({{"_id", id}, {"big", value}});
    }
    ASSERT_EQ(call(verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump()).status, 201u);
  }
  auto r = get("/db/_design/a/_list/count/big");
  ASSERT_EQ(r.status, 200u);
  EXPECT_GT(r.body.size(), 5000u * 190);
  EXPECT_EQ(r.body.substr(r.body.size() - 9), "rows:5000");
  EXPECT_EQ(r.body.substr(0, 9), "big00000 ");
  EXPECT_NE(r.body.find("\nbig04999 \"" + value + "\"\n"), std::string::npos);

  // Clients that leave in the middle: each list stops, its context is freed for the next call.
  for (int i = 0; i < 4; ++i) {
    HttpClient leaving(server_->port(), 10s);
    leaving.send_raw("GET /db/_design/a/_list/count/big HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(get("/db/_design/a/_show/str").body, "just a string");
  EXPECT_EQ(get("/db/_design/a/_list/count/big?limit=2").body.substr(0, 9), "big00000 ");
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s * kSanitizerSlowdown);
}

TEST_F(RenderTest, RewriteRules) {
  Json ddoc = {
      {"shows", {{"hello", render_ddoc()["shows"]["hello"]}}},
      {"views", render_ddoc()["views"]},
      {"rewrites",
       Json::array({{{"from", "/hello/:id"}, {"to", "_show/hello/:id"}},
                    {{"from", "/all"}, {"to", "_view/v"}, {"query", {{"reduce", "false"}}}},
                    {{"from", "/db/*"}, {"to", "../../*"}},
                    {{"from", "/n/:key"},
                     {"to", "_view/v"},
                     {"query", {{"key", ":key"}, {"reduce", "false"}}},
                     {"formats", {{"key", "int"}}}},
                    {{"from", "/only"}, {"to", "_show/hello"}, {"method", "POST"}},
                    {{"from", "/"}, {"to", "_show/hello"}}})}};
  ASSERT_EQ(call(verb::put, "/db/_design/r", ddoc.dump()).status, 201u);
  EXPECT_EQ(get("/db/_design/r/_rewrite/hello/d2").body, "Hello d2 d2");
  auto r = get("/db/_design/r/_rewrite/all");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.json()["rows"].size(), 3u);
  r = get("/db/_design/r/_rewrite/db/d1");
  EXPECT_EQ(r.json()["_id"], "d1");
  r = get("/db/_design/r/_rewrite/n/2");  // "int" makes the bound key a number
  ASSERT_EQ(r.json()["rows"].size(), 1u);
  EXPECT_EQ(r.json()["rows"][0]["id"], "d2");
  EXPECT_EQ(get("/db/_design/r/_rewrite").body, "Hello nobody null");
  EXPECT_EQ(call(verb::post, "/db/_design/r/_rewrite/only").body, "Hello nobody null");
  r = get("/db/_design/r/_rewrite/only");  // no rule for GET
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.json(), Json({{"error", "not_found"}, {"reason", "missing"}}));
  // A rule with more than two "..": every request through these rules is refused.
  ddoc["rewrites"].push_back({{"from", "/up"}, {"to", "../../../_all_dbs"}});
  ASSERT_EQ(call(verb::put, "/db/_design/up", ddoc.dump()).status, 201u);
  r = get("/db/_design/up/_rewrite/hello/d2");
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(r.json(),
            Json({{"error", "insecure_rewrite_rule"}, {"reason", "too many ../.. segments"}}));
  r = get("/db/_design/a/_rewrite/x");  // no rewrites at all
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.json(), Json({{"error", "rewrite_error"}, {"reason", "Invalid path."}}));
}

TEST_F(RenderTest, RewriteFunction) {
  const std::string fn =
      "function(req){ var p = req.path[4];"
      " if (p === 'x') return {path: '../../d1', query: {revs_info: 'true'}};"
      " if (p === 'code') return {code: 403, body: 'no way', headers: {'X-R': '1'}};"
      " if (p === 'str') return '../../d2';"
      " if (p === 'bad') return {path: 5};"
      " if (p === 'loop') return '_rewrite/loop';"
      " if (p === 'req') return {path: '_show/r', method: 'POST', body: "
      "JSON.stringify(Object.keys(req))};"
      " if (p === 'throw') throw new Error('boom');"
      " return false; }";
  const Json ddoc = {
      {"rewrites", fn},
      {"shows", {{"r", "function(doc, req){ return req.method + ' ' + req.body; }"}}}};
  ASSERT_EQ(call(verb::put, "/db/_design/f", ddoc.dump()).status, 201u);
  auto r = get("/db/_design/f/_rewrite/x");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.json()["_id"], "d1");
  EXPECT_EQ(r.json()["_revs_info"].size(), 1u);
  r = get("/db/_design/f/_rewrite/code");
  EXPECT_EQ(r.status, 403u);
  EXPECT_EQ(r.body, "no way");
  EXPECT_EQ(r.header("X-R"), "1");
  EXPECT_EQ(get("/db/_design/f/_rewrite/str").json()["_id"], "d2");
  r = get("/db/_design/f/_rewrite/bad");
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(r.json(), Json({{"error", "rewrite_error"}, {"reason", "bad path"}}));
  r = get("/db/_design/f/_rewrite/loop");
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(r.json(),
            Json({{"error", "bad_request"}, {"reason", "Exceeded rewrite recursion limit"}}));
  r = get("/db/_design/f/_rewrite/nothing");
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.json(), Json({{"error", "rewrite_error"}, {"reason", "Invalid path."}}));
  r = get("/db/_design/f/_rewrite/throw");
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(r.json()["error"], "rewrite_error");
  // The request object of a rewrites function, and a rewritten method and body.
  EXPECT_EQ(get("/db/_design/f/_rewrite/req").body,
            "POST [\"method\",\"requested_path\",\"path\",\"raw_path\",\"query\",\"headers\","
            "\"body\",\"peer\",\"cookie\",\"userCtx\",\"secObj\"]");
}

TEST_F(RenderTest, UpdateHandlerAnswersCarryThePolicy) {
  const Json ddoc = {{"updates",
                      {{"u", "function(doc, req){ return [null, 'plain']; }"},
                       {"j", "function(doc, req){ return [null, {json: {ok: 1}}]; }"}}}};
  ASSERT_EQ(call(verb::put, "/db/_design/u", ddoc.dump()).status, 201u);
  auto r = call(verb::post, "/db/_design/u/_update/u");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.header("Content-Security-Policy"), "sandbox");
  r = call(verb::post, "/db/_design/u/_update/j");
  EXPECT_EQ(r.header("Content-Security-Policy"), "");
  EXPECT_EQ(r.header("Cache-Control"), "must-revalidate");
}

}  // namespace
}  // namespace chaise::test
