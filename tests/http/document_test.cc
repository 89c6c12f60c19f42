// Integration tests of the document endpoints (http/api/document.cc) against the real
// chaise binary: /{db}/{docid}, /{db}/_design/{name}, /{db}/_local/{name} with GET/HEAD, PUT,
// DELETE, COPY, their query parameters and headers, and CouchDB's exact error answers.
//
// Expected answers come from CouchDB 3.x (apache/couchdb src/chttpd/src/chttpd_db.erl db_doc_req,
// couch_doc_from_req, extract_header_rev, send_doc, send_docs_multipart; couch_doc.erl).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::field;
using beast_http::verb;
using Json = nlohmann::ordered_json;
using Headers = std::vector<std::pair<std::string, std::string>>;

const Headers kJson = {{"Content-Type", "application/json"}};
const Headers kAcceptJson = {{"Accept", "application/json"}};
const std::string kDocMethods = "DELETE,GET,HEAD,POST,PUT,COPY";
const std::string kNewEditsReason =
    "When `new_edits: false`, the document needs `_rev` or `_revisions` specified";

std::string dq(const std::string& s) { return "\"" + s + "\""; }

// A 32-hex-digit revision hash made of one repeated character, for new_edits=false revisions.
std::string hash_of(char c) { return std::string(32, c); }

class DocumentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.emplace(dir_.path() / "data");
    client_ = std::make_unique<HttpClient>(server_->port());
    auto r = call(verb::put, "/db");
    ASSERT_EQ(r.status, 201u) << r.body;
  }

  void TearDown() override {
    client_.reset();
    const ExitStatus status = server_->stop();
    EXPECT_TRUE(status.exited) << "chaise died from signal " << status.term_signal;
    EXPECT_EQ(status.exit_code, 0);
  }

  HttpResponse call(verb method, const std::string& target, std::string body = {},
                    const Headers& headers = {}) {
    return client_->request(method, target, std::move(body), headers);
  }
  HttpResponse get(const std::string& target, const Headers& headers = {}) {
    return call(verb::get, target, {}, headers);
  }
  HttpResponse put(const std::string& target, const std::string& body,
                   const Headers& headers = kJson) {
    return call(verb::put, target, body, headers);
  }
  HttpResponse del(const std::string& target, const Headers& headers = {}) {
    return call(verb::delete_, target, {}, headers);
  }
  HttpResponse post(const std::string& target, const std::string& body,
                    const Headers& headers = kJson) {
    return call(verb::post, target, body, headers);
  }

  // PUTs `body` and returns the new rev (empty, with a test failure, if it was not created).
  std::string create(const std::string& target, const std::string& body) {
    auto r = put(target, body);
    EXPECT_EQ(r.status, 201u) << target << " " << r.body;
    if (r.status != 201u) return "";
    return r.json()["rev"].get<std::string>();
  }

  // Stores `rev` (with `_revisions` when `ancestors` is given) with new_edits=false.
  void replicate(const std::string& id, const std::string& body_json, int pos, char hash,
                 const std::vector<char>& ancestors = {}, bool deleted = false) {
    Json doc = Json::parse(body_json);
    if (ancestors.empty()) {
      doc["_rev"] = std::to_string(pos) + "-" + hash_of(hash);
    } else {
      Json ids = Json::array({hash_of(hash)});
      for (char a : ancestors) ids.push_back(hash_of(a));
      doc["_revisions"] = {{"start", pos}, {"ids", ids}};
    }
    if (deleted) doc["_deleted"] = true;
    auto r = put("/db/" + id + "?new_edits=false", doc.dump());
    EXPECT_TRUE(r.status == 201u || r.status == 200u) << r.body;
  }

  std::string port_host() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  TempDir dir_;
  std::optional<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

void expect_error(const HttpResponse& r, unsigned status, const std::string& error,
                  const std::string& reason) {
  EXPECT_EQ(r.status, status) << r.body;
  ASSERT_FALSE(r.body.empty());
  const Json j = r.json();
  EXPECT_EQ(j, (Json{{"error", error}, {"reason", reason}})) << r.body;
}

std::string rev_pos_prefix(const std::string& rev) { return rev.substr(0, rev.find('-') + 1); }

// ---- GET / PUT basics -------------------------------------------------------------------------

TEST_F(DocumentTest, PutAnswers201WithIdRevEtagAndLocation) {
  auto r = put("/db/doc", R"({"a":1})");
  ASSERT_EQ(r.status, 201u) << r.body;
  const Json j = r.json();
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j.begin().key(), "ok");
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["id"], "doc");
  const std::string rev = j["rev"];
  EXPECT_TRUE(std::regex_match(rev, std::regex("1-[0-9a-f]{32}"))) << rev;
  EXPECT_EQ(r.header(field::etag), dq(rev));
  EXPECT_EQ(r.header(field::location), "http://" + port_host() + "/db/doc");
  EXPECT_EQ(r.header(field::content_type), "application/json");
}

TEST_F(DocumentTest, GetReturnsBodyWithIdAndRevFirstAndKeyOrderKept) {
  const std::string rev = create("/db/doc", R"({"z":1,"a":{"_nested":true},"m":[1,"x"]})");
  auto r = get("/db/doc");
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, R"({"_id":"doc","_rev":")" + rev +
                        R"(","z":1,"a":{"_nested":true},"m":[1,"x"]})"
                        "\n");
  EXPECT_EQ(r.header(field::etag), dq(rev));
}

TEST_F(DocumentTest, PutWithoutContentTypeIsAccepted) {
  // chttpd:json_body does not look at the Content-Type of a document PUT.
  auto r = put("/db/plain", R"({"a":1})", {});
  EXPECT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(get("/db/plain").status, 200u);
}

TEST_F(DocumentTest, UrlIdWinsOverBodyId) {
  create("/db/url-id", R"({"_id":"body-id","v":1})");
  auto r = get("/db/url-id");
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(r.json()["_id"], "url-id");
  EXPECT_EQ(r.json()["v"], 1);
  expect_error(get("/db/body-id"), 404, "not_found", "missing");
}

TEST_F(DocumentTest, HeadHasGetHeadersAndNoBody) {
  const std::string rev = create("/db/doc", R"({"a":"some text"})");
  auto g = get("/db/doc");
  auto h = call(verb::head, "/db/doc");
  EXPECT_EQ(h.status, 200u);
  EXPECT_TRUE(h.body.empty());
  EXPECT_EQ(h.header(field::content_length), std::to_string(g.body.size()));
  EXPECT_EQ(h.header(field::etag), dq(rev));
  auto missing = call(verb::head, "/db/nope");
  EXPECT_EQ(missing.status, 404u);
  EXPECT_TRUE(missing.body.empty());
}

// A plain GET reads the winner named by the document's by_id entry and skips its revision entry;
// a GET with an option that changes nothing here (no deleted conflicts to list) takes the full
// path. Both must answer the same bytes and ETag, whatever the document went through.
TEST_F(DocumentTest, PlainGetAnswersWhatTheFullReadAnswers) {
  create("/db/plain", R"({"a":1,"s":"caf\u00e9 \"q\"","n":[1,2.5,{"x":null}]})");
  create("/db/_design/dd", R"({"views":{}})");
  create("/db/we%20ird%2Fid", R"({"b":true})");
  std::string rev = create("/db/edited", R"({"v":0})");
  for (int i = 1; i <= 5; ++i) {  // superseded revisions are kept as deltas against the next
    auto r = put("/db/edited", R"({"_rev":")" + rev + R"(","v":)" + std::to_string(i) + "}");
    ASSERT_EQ(r.status, 201u) << r.body;
    rev = r.json()["rev"];
  }
  replicate("conflicted", R"({"side":"a"})", 2, 'a', {'1'});
  replicate("conflicted", R"({"side":"b"})", 2, 'b', {'1'});
  replicate("revived", R"({"gone":true})", 2, 'd', {'1'}, true);
  replicate("revived", R"({"back":1})", 3, 'e', {'f', '1'});
  // With an attachment (a header beside the body), after it is gone, and a body of two chunks.
  const std::string att = R"("_attachments":{"a.txt":{"content_type":"text/plain","data":"aGk="}})";
  create("/db/att", "{\"x\":1," + att + "}");
  const std::string had = create("/db/hadatt", "{\"x\":1," + att + "}");
  ASSERT_EQ(put("/db/hadatt", R"({"_rev":")" + had + R"(","x":2})").status, 201u);
  create("/db/big", R"({"s":")" + std::string(300'000, 'x') + R"("})");
  for (const std::string path : {"/db/plain", "/db/_design/dd", "/db/we%20ird%2Fid", "/db/edited",
                                 "/db/conflicted", "/db/att", "/db/hadatt", "/db/big"}) {
    auto plain = get(path);
    auto full = get(path + "?deleted_conflicts=true");
    ASSERT_EQ(plain.status, 200u) << path << plain.body;
    EXPECT_EQ(plain.body, full.body) << path;
    EXPECT_EQ(plain.header(field::etag), full.header(field::etag)) << path;
    EXPECT_EQ(plain.header(field::content_type), full.header(field::content_type)) << path;
  }
  EXPECT_EQ(get("/db/edited").json()["v"], 5);
  EXPECT_EQ(get("/db/conflicted").json()["side"], "b");  // the higher hash wins
  EXPECT_TRUE(get("/db/att").json()["_attachments"]["a.txt"]["stub"]);
  EXPECT_FALSE(get("/db/hadatt").json().contains("_attachments"));
  auto revived = get("/db/revived");
  ASSERT_EQ(revived.status, 200u) << revived.body;
  EXPECT_EQ(revived.json()["back"], 1);
  EXPECT_TRUE(get("/db/revived?deleted_conflicts=true").json().contains("_deleted_conflicts"));
}

TEST_F(DocumentTest, IfNoneMatchGives304WithoutBody) {
  const std::string rev = create("/db/doc", R"({"a":1})");
  auto r = get("/db/doc", {{"If-None-Match", dq(rev)}});
  EXPECT_EQ(r.status, 304u);
  EXPECT_TRUE(r.body.empty());
  EXPECT_EQ(r.header(field::etag), dq(rev));
  // A list, and a weak validator, match too (chttpd:etag_match).
  EXPECT_EQ(get("/db/doc", {{"If-None-Match", "\"x\", W/" + dq(rev)}}).status, 304u);
  EXPECT_EQ(call(verb::head, "/db/doc", {}, {{"If-None-Match", dq(rev)}}).status, 304u);
  auto other = get("/db/doc", {{"If-None-Match", "\"1-0000\""}});
  EXPECT_EQ(other.status, 200u);
  EXPECT_FALSE(other.body.empty());
  // After an update the old ETag no longer matches.
  create("/db/doc", R"({"_rev":")" + rev + R"(","a":2})");
  EXPECT_EQ(get("/db/doc", {{"If-None-Match", dq(rev)}}).status, 200u);
}

TEST_F(DocumentTest, MissingDocumentAndDatabase) {
  expect_error(get("/db/nope"), 404, "not_found", "missing");
  expect_error(get("/nodb/doc"), 404, "not_found", "Database does not exist.");
  expect_error(put("/nodb/doc", "{}"), 404, "not_found", "Database does not exist.");
  expect_error(del("/nodb/doc?rev=1-abc"), 404, "not_found", "Database does not exist.");
}

// ---- Updates and revision sources -------------------------------------------------------------

TEST_F(DocumentTest, UpdateNeedsTheCurrentRevision) {
  const std::string rev1 = create("/db/doc", R"({"v":1})");
  expect_error(put("/db/doc", R"({"v":2})"), 409, "conflict", "Document update conflict.");
  const std::string rev2 = create("/db/doc", R"({"_rev":")" + rev1 + R"(","v":2})");
  EXPECT_EQ(rev_pos_prefix(rev2), "2-");
  expect_error(put("/db/doc", R"({"_rev":")" + rev1 + R"(","v":3})"), 409, "conflict",
               "Document update conflict.");
  // ?rev= and If-Match name the base revision too.
  const std::string rev3 = create("/db/doc?rev=" + rev2, R"({"v":3})");
  EXPECT_EQ(rev_pos_prefix(rev3), "3-");
  auto r =
      put("/db/doc", R"({"v":4})", {{"Content-Type", "application/json"}, {"If-Match", dq(rev3)}});
  ASSERT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(rev_pos_prefix(r.json()["rev"]), "4-");
  EXPECT_EQ(get("/db/doc").json()["v"], 4);
}

// A refused write changes nothing: no commit (CouchDB answers 409 without writing), and the
// count of changes that sequences begin with ("N-...") moves only with changes, as CouchDB's
// update_seq does. Twenty refusals: at most one commit meanwhile, the janitor's clearing of the
// first write's transaction id.
TEST_F(DocumentTest, RefusedWritesCommitNothing) {
  const std::string rev1 = create("/db/doc", R"({"v":1})");
  auto commits = [&] {
    return settled_commits([&] { return get("/_node/_local/_prometheus").body; });
  };
  const long long before = commits();
  ASSERT_GE(before, 0);
  for (int i = 0; i < 10; ++i) {
    expect_error(put("/db/doc", R"({"v":2})"), 409, "conflict", "Document update conflict.");
    expect_error(del("/db/doc?rev=1-" + hash_of('a')), 409, "conflict",
                 "Document update conflict.");
  }
  auto bulk = post("/db/_bulk_docs", R"({"docs":[{"_id":"doc","v":3},{"_id":"doc","v":4}]})");
  ASSERT_EQ(bulk.status, 201u) << bulk.body;
  EXPECT_EQ(bulk.json()[0]["error"], "conflict") << bulk.body;
  // A replicated revision the database already has is no change either.
  auto again = post("/db/_bulk_docs",
                    R"({"new_edits":false,"docs":[{"_id":"doc","_rev":")" + rev1 + R"(","v":1}]})");
  ASSERT_EQ(again.status, 201u) << again.body;
  EXPECT_LE(commits(), before + 1);
  const std::string rev2 = create("/db/other", "{}");
  ASSERT_FALSE(rev2.empty());
  const std::string seq = get("/db").json()["update_seq"];
  EXPECT_EQ(seq.substr(0, 2), "2-") << seq;
  EXPECT_EQ(get("/db/doc").json()["_rev"], rev1);
}

TEST_F(DocumentTest, RevisionSourcesMustAgree) {
  const std::string rev = create("/db/doc", R"({"v":1})");
  const std::string other = "1-" + hash_of('e');
  expect_error(put("/db/doc?rev=" + other, R"({"_rev":")" + rev + R"("})"), 400, "bad_request",
               "Document rev from request body and query string have different values");
  expect_error(put("/db/doc?rev=" + rev, "{}", {{"If-Match", dq(other)}}), 400, "bad_request",
               "Document rev and etag have different values");
  expect_error(put("/db/doc", R"({"_rev":")" + rev + R"("})", {{"If-Match", dq(other)}}), 400,
               "bad_request", "Document rev and etag have different values");
  expect_error(del("/db/doc?rev=" + rev, {{"If-Match", dq(other)}}), 400, "bad_request",
               "Document rev and etag have different values");
  // All three agreeing is fine.
  auto r = put("/db/doc?rev=" + rev, R"({"_rev":")" + rev + R"(","v":2})", {{"If-Match", dq(rev)}});
  EXPECT_EQ(r.status, 201u) << r.body;
}

TEST_F(DocumentTest, InvalidRevFormatIs400) {
  create("/db/doc", "{}");
  expect_error(get("/db/doc?rev=nodash"), 400, "bad_request", "Invalid rev format");
  expect_error(get("/db/doc?rev=x-abc"), 400, "bad_request", "Invalid rev format");
  expect_error(put("/db/doc", R"({"_rev":"bogus"})"), 400, "bad_request", "Invalid rev format");
  expect_error(put("/db/doc", R"({"_rev":1})"), 400, "bad_request", "Invalid rev format");
  expect_error(put("/db/doc?rev=bogus", "{}"), 400, "bad_request", "Invalid rev format");
  expect_error(put("/db/doc", "{}", {{"If-Match", "\"bogus\""}}), 400, "bad_request",
               "Invalid rev format");
  expect_error(del("/db/doc?rev=bogus"), 400, "bad_request", "Invalid rev format");
  // 32 characters that are not hex are not a revision either (couch_doc:parse_revid).
  expect_error(get("/db/doc?rev=1-" + std::string(32, 'z')), 400, "bad_request",
               "Invalid rev format");
}

TEST_F(DocumentTest, PutDeletedTrueAnswers200) {
  const std::string rev = create("/db/doc", R"({"v":1})");
  auto r = put("/db/doc", R"({"_rev":")" + rev + R"(","_deleted":true})");
  EXPECT_EQ(r.status, 200u) << r.body;  // chttpd_db:update_doc: deleted -> ok -> 200
  EXPECT_EQ(r.json()["ok"], true);
  expect_error(get("/db/doc"), 404, "not_found", "deleted");
}

TEST_F(DocumentTest, BatchOkAnswers202AndStillWrites) {
  auto r = put("/db/batched?batch=ok", R"({"v":1})");
  EXPECT_EQ(r.status, 202u) << r.body;
  EXPECT_EQ(r.json(), (Json{{"ok", true}, {"id", "batched"}}));
  EXPECT_EQ(get("/db/batched").status, 200u);
  // A conflicting batch write is accepted and dropped, as CouchDB's background writer does.
  auto again = put("/db/batched?batch=ok", R"({"v":2})");
  EXPECT_EQ(again.status, 202u);
  EXPECT_EQ(get("/db/batched").json()["v"], 1);
}

// ---- Reading parameters -----------------------------------------------------------------------

TEST_F(DocumentTest, RevsAndRevsInfoShapes) {
  const std::string r1 = create("/db/doc", R"({"v":1})");
  const std::string r2 = create("/db/doc", R"({"_rev":")" + r1 + R"(","v":2})");
  const std::string r3 = create("/db/doc", R"({"_rev":")" + r2 + R"(","v":3})");
  auto revs = get("/db/doc?revs=true");
  ASSERT_EQ(revs.status, 200u);
  EXPECT_EQ(revs.json()["_revisions"],
            (Json{{"start", 3}, {"ids", {r3.substr(2), r2.substr(2), r1.substr(2)}}}));
  EXPECT_EQ(revs.header(field::etag), dq(r3));  // _revisions is not meta: the ETag stays

  auto info = get("/db/doc?revs_info=true");
  ASSERT_EQ(info.status, 200u);
  EXPECT_EQ(
      info.json()["_revs_info"],
      Json::parse(R"([{"rev":")" + r3 + R"(","status":"available"},{"rev":")" + r2 +
                  R"(","status":"available"},{"rev":")" + r1 + R"(","status":"available"}])"));
  EXPECT_EQ(info.header(field::etag), "");  // send_doc: no ETag when the doc carries meta
  EXPECT_FALSE(info.json().contains("_revisions"));
  // Compaction drops superseded bodies: their revisions are "missing" from then on.
  ASSERT_EQ(post("/db/_compact", "{}").status, 202u);
  EXPECT_EQ(get("/db/doc?revs_info=true").json()["_revs_info"],
            Json::parse(R"([{"rev":")" + r3 + R"(","status":"available"},{"rev":")" + r2 +
                        R"(","status":"missing"},{"rev":")" + r1 + R"(","status":"missing"}])"));
}

TEST_F(DocumentTest, RevParamReadsSupersededRevisionsUntilCompaction) {
  const std::string r1 = create("/db/doc", R"({"v":1})");
  const std::string r2 = create("/db/doc", R"({"_rev":")" + r1 + R"(","v":2})");
  auto r = get("/db/doc?rev=" + r2);
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(r.json()["v"], 2);
  EXPECT_EQ(r.header(field::etag), dq(r2));
  // Like CouchDB, a superseded revision stays readable until the database is compacted.
  auto old = get("/db/doc?rev=" + r1 + "&revs=true");
  ASSERT_EQ(old.status, 200u) << old.body;
  EXPECT_EQ(old.json()["v"], 1);
  EXPECT_EQ(old.json()["_revisions"], (Json{{"start", 1}, {"ids", {r1.substr(2)}}}));
  ASSERT_EQ(post("/db/_compact", "{}").status, 202u);
  expect_error(get("/db/doc?rev=" + r1), 404, "not_found", "missing");
  EXPECT_EQ(get("/db/doc?rev=" + r2).status, 200u);
  expect_error(get("/db/doc?rev=9-" + hash_of('a')), 404, "not_found", "missing");
  expect_error(get("/db/none?rev=" + r1), 404, "not_found", "missing");
}

TEST_F(DocumentTest, LatestIgnoresRevAndReturnsTheWinner) {
  const std::string r1 = create("/db/doc", R"({"v":1})");
  const std::string r2 = create("/db/doc", R"({"_rev":")" + r1 + R"(","v":2})");
  auto r = get("/db/doc?rev=" + r1 + "&latest=true");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json()["_rev"], r2);
}

TEST_F(DocumentTest, LocalSeqIsAddedOnRequest) {
  create("/db/doc", "{}");
  auto r = get("/db/doc?local_seq=true");
  ASSERT_EQ(r.status, 200u);
  ASSERT_TRUE(r.json().contains("_local_seq")) << r.body;
  EXPECT_EQ(r.header(field::etag), "");
  EXPECT_FALSE(get("/db/doc").json().contains("_local_seq"));
  // Only the value "true" turns an option on; other values are ignored, not errors.
  auto off = get("/db/doc?local_seq=yes&revs=1");
  ASSERT_EQ(off.status, 200u);
  EXPECT_FALSE(off.json().contains("_local_seq"));
  EXPECT_FALSE(off.json().contains("_revisions"));
}

// ---- Conflicts --------------------------------------------------------------------------------

TEST_F(DocumentTest, NewEditsFalseCreatesConflictsVisibleWithConflictsTrue) {
  replicate("doc", R"({"v":"a"})", 1, 'a');
  replicate("doc", R"({"v":"c"})", 1, 'c');
  replicate("doc", R"({"v":"b"})", 1, 'b');
  const std::string ra = "1-" + hash_of('a'), rb = "1-" + hash_of('b'), rc = "1-" + hash_of('c');
  auto plain = get("/db/doc");
  ASSERT_EQ(plain.status, 200u);
  EXPECT_EQ(plain.json()["_rev"], rc);  // highest hash wins among equal positions
  EXPECT_FALSE(plain.json().contains("_conflicts"));
  EXPECT_EQ(plain.header(field::etag), dq(rc));

  auto c = get("/db/doc?conflicts=true");
  ASSERT_EQ(c.status, 200u);
  EXPECT_EQ(c.json()["_conflicts"], (Json{rb, ra}));
  EXPECT_EQ(c.header(field::etag), "");  // conflicts are meta

  auto all = get("/db/doc?open_revs=all", kAcceptJson);
  ASSERT_EQ(all.status, 200u);
  const Json j = all.json();
  ASSERT_EQ(j.size(), 3u) << all.body;
  // fabric_doc_open_revs sorts the leaves by {Pos, RevId}.
  EXPECT_EQ(j[0]["ok"]["_rev"], ra);
  EXPECT_EQ(j[1]["ok"]["_rev"], rb);
  EXPECT_EQ(j[2]["ok"]["_rev"], rc);
  EXPECT_EQ(j[0]["ok"]["v"], "a");
}

TEST_F(DocumentTest, ConflictsWithoutConflictsKeepTheEtag) {
  const std::string rev = create("/db/doc", "{}");
  auto r = get("/db/doc?conflicts=true&deleted_conflicts=true");
  ASSERT_EQ(r.status, 200u);
  EXPECT_FALSE(r.json().contains("_conflicts"));
  EXPECT_EQ(r.header(field::etag), dq(rev));
}

TEST_F(DocumentTest, ConflictResolutionByDeletingTheLosers) {
  replicate("doc", R"({"v":"a"})", 1, 'a');
  replicate("doc", R"({"v":"b"})", 1, 'b');
  const std::string ra = "1-" + hash_of('a');
  auto d = del("/db/doc?rev=" + ra);
  ASSERT_EQ(d.status, 200u) << d.body;
  const std::string tomb = d.json()["rev"];
  EXPECT_EQ(rev_pos_prefix(tomb), "2-");

  auto c = get("/db/doc?conflicts=true&deleted_conflicts=true");
  ASSERT_EQ(c.status, 200u);
  EXPECT_EQ(c.json()["_rev"], "1-" + hash_of('b'));
  EXPECT_FALSE(c.json().contains("_conflicts")) << c.body;
  EXPECT_EQ(c.json()["_deleted_conflicts"], (Json{tomb}));

  auto meta = get("/db/doc?meta=true");
  ASSERT_EQ(meta.status, 200u);
  EXPECT_TRUE(meta.json().contains("_revs_info"));
  EXPECT_EQ(meta.json()["_deleted_conflicts"], (Json{tomb}));
  EXPECT_EQ(meta.header(field::etag), "");
}

TEST_F(DocumentTest, ConflictResolutionByUpdatingTheWinnerBranch) {
  replicate("doc", R"({"v":"a"})", 1, 'a');
  replicate("doc", R"({"v":"b"})", 1, 'b');
  // Extend the losing branch: it becomes the winner (pos 2 beats pos 1).
  auto r = put("/db/doc", R"({"_rev":"1-)" + hash_of('a') + R"(","v":"merged"})");
  ASSERT_EQ(r.status, 201u) << r.body;
  const std::string merged = r.json()["rev"];
  auto c = get("/db/doc?conflicts=true");
  EXPECT_EQ(c.json()["_rev"], merged);
  EXPECT_EQ(c.json()["_conflicts"], (Json{"1-" + hash_of('b')}));
}

TEST_F(DocumentTest, NewEditsFalseStoresTheGivenHistory) {
  replicate("doc", R"({"v":3})", 3, 'c', {'b', 'a'});
  auto r = get("/db/doc?revs=true");
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(r.json()["_rev"], "3-" + hash_of('c'));
  EXPECT_EQ(r.json()["_revisions"],
            (Json{{"start", 3}, {"ids", {hash_of('c'), hash_of('b'), hash_of('a')}}}));
  // The same revision again is accepted and changes nothing.
  auto again =
      put("/db/doc?new_edits=false", R"({"_rev":"3-)" + hash_of('c') + R"(","v":"ignored"})");
  EXPECT_EQ(again.status, 201u) << again.body;
  EXPECT_EQ(again.json()["rev"], "3-" + hash_of('c'));
  EXPECT_EQ(get("/db/doc").json()["v"], 3);
  // An opaque (non-hex) hash is kept verbatim.
  auto opaque = put("/db/opaque?new_edits=false", R"({"_rev":"1-some-opaque-id"})");
  EXPECT_EQ(opaque.status, 201u) << opaque.body;
  EXPECT_EQ(get("/db/opaque").json()["_rev"], "1-some-opaque-id");
}

TEST_F(DocumentTest, NewEditsFalseWithRevFromQueryOrIfMatch) {
  auto r = put("/db/q?new_edits=false&rev=2-" + hash_of('d'), R"({"v":1})");
  EXPECT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(get("/db/q").json()["_rev"], "2-" + hash_of('d'));
  auto m = put("/db/m?new_edits=false", R"({"v":1})",
               {{"Content-Type", "application/json"}, {"If-Match", dq("4-" + hash_of('e'))}});
  EXPECT_EQ(m.status, 201u) << m.body;
  EXPECT_EQ(get("/db/m").json()["_rev"], "4-" + hash_of('e'));
}

TEST_F(DocumentTest, NewEditsFalseNeedsARevision) {
  expect_error(put("/db/doc?new_edits=false", R"({"v":1})"), 400, "bad_request", kNewEditsReason);
  expect_error(get("/db/doc"), 404, "not_found", "missing");
}

TEST_F(DocumentTest, NewEditsFalseTombstoneIsReadableByRev) {
  replicate("doc", "{}", 1, 'a');
  replicate("doc", "{}", 2, 'b', {'a'}, /*deleted=*/true);
  expect_error(get("/db/doc"), 404, "not_found", "deleted");
  auto t = get("/db/doc?rev=2-" + hash_of('b'));
  ASSERT_EQ(t.status, 200u);
  EXPECT_EQ(t.json(), (Json{{"_id", "doc"}, {"_rev", "2-" + hash_of('b')}, {"_deleted", true}}));
}

// ---- open_revs --------------------------------------------------------------------------------

TEST_F(DocumentTest, OpenRevsListAnswersOkAndMissing) {
  replicate("doc", R"({"v":"b"})", 1, 'b');
  const std::string rb = "1-" + hash_of('b');
  const std::string target = "/db/doc?open_revs=" + std::string("[\"2-") + hash_of('f') + "\",\"" +
                             rb + "\",\"1-" + hash_of('0') + "\"]";
  auto r = get(target, kAcceptJson);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.header(field::content_type), "application/json");
  const Json j = r.json();
  ASSERT_EQ(j.size(), 3u) << r.body;
  EXPECT_EQ(j[0]["ok"]["_rev"], rb);
  EXPECT_EQ(j[1], (Json{{"missing", "1-" + hash_of('0')}}));
  EXPECT_EQ(j[2], (Json{{"missing", "2-" + hash_of('f')}}));
}

TEST_F(DocumentTest, OpenRevsOnMissingDocument) {
  expect_error(get("/db/none?open_revs=all", kAcceptJson), 404, "not_found", "missing");
  auto r = get("/db/none?open_revs=[\"1-" + hash_of('a') + "\"]", kAcceptJson);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json(), Json::parse(R"([{"missing":"1-)" + hash_of('a') + R"("}])"));
}

TEST_F(DocumentTest, OpenRevsBadInput) {
  create("/db/doc", "{}");
  expect_error(get("/db/doc?open_revs=[notjson", kAcceptJson), 400, "bad_request",
               "invalid UTF-8 JSON: syntax error: invalid literal at byte 3");
  expect_error(get("/db/doc?open_revs={}", kAcceptJson), 400, "bad_request",
               "Invalid list of revisions");
  expect_error(get("/db/doc?open_revs=[\"nodash\"]", kAcceptJson), 400, "bad_request",
               "Invalid rev format");
  expect_error(get("/db/doc?open_revs=[1]", kAcceptJson), 400, "bad_request", "Invalid rev format");
}

TEST_F(DocumentTest, OpenRevsWithLatestAndRevs) {
  const std::string r1 = create("/db/doc", R"({"v":1})");
  const std::string r2 = create("/db/doc", R"({"_rev":")" + r1 + R"(","v":2})");
  auto without = get("/db/doc?open_revs=[\"" + r1 + "\"]", kAcceptJson);
  EXPECT_EQ(without.json(), (Json::array({Json{{"missing", r1}}})));
  auto with = get("/db/doc?open_revs=[\"" + r1 + "\"]&latest=true&revs=true", kAcceptJson);
  ASSERT_EQ(with.status, 200u);
  const Json j = with.json();
  ASSERT_EQ(j.size(), 1u) << with.body;
  EXPECT_EQ(j[0]["ok"]["_rev"], r2);
  EXPECT_EQ(j[0]["ok"]["_revisions"]["start"], 2);
  // Meta members are not part of open_revs documents (couch_db:open_doc_revs adds none).
  auto meta = get("/db/doc?open_revs=all&conflicts=true&revs_info=true", kAcceptJson);
  EXPECT_FALSE(meta.json()[0]["ok"].contains("_revs_info")) << meta.body;
}

TEST_F(DocumentTest, OpenRevsIncludesDeletedLeaves) {
  const std::string r1 = create("/db/doc", "{}");
  const std::string r2 = del("/db/doc?rev=" + r1).json()["rev"];
  auto r = get("/db/doc?open_revs=all", kAcceptJson);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json(),
            Json::parse(R"([{"ok":{"_id":"doc","_rev":")" + r2 + R"(","_deleted":true}}])"));
}

// Splits a multipart body into its parts (headers + body), checking CouchDB's framing.
std::vector<std::pair<std::string, std::string>> multipart_parts(const std::string& body,
                                                                 const std::string& boundary) {
  std::vector<std::pair<std::string, std::string>> parts;
  const std::string delim = "--" + boundary;
  EXPECT_EQ(body.substr(0, delim.size()), delim);
  EXPECT_EQ(body.substr(body.size() - delim.size() - 2), delim + "--");
  std::size_t pos = delim.size();
  while (pos < body.size() && body.compare(pos, 2, "--") != 0) {
    EXPECT_EQ(body.compare(pos, 2, "\r\n"), 0);
    const std::size_t head_end = body.find("\r\n\r\n", pos);
    const std::size_t next = body.find("\r\n" + delim, head_end);
    if (head_end == std::string::npos || next == std::string::npos) {
      ADD_FAILURE() << "bad multipart framing: " << body;
      break;
    }
    parts.emplace_back(body.substr(pos + 2, head_end - pos - 2),
                       body.substr(head_end + 4, next - head_end - 4));
    pos = next + 2 + delim.size();
  }
  return parts;
}

std::string boundary_of(const HttpResponse& r) {
  std::smatch m;
  const std::string ct = r.header(field::content_type);
  if (!std::regex_match(ct, m, std::regex("multipart/mixed; boundary=\"([0-9a-f]{32})\""))) {
    ADD_FAILURE() << "Content-Type: " << ct;
    return "";
  }
  return m[1];
}

TEST_F(DocumentTest, OpenRevsMultipartMixed) {
  replicate("doc", R"({"v":"a"})", 1, 'a');
  replicate("doc", R"({"v":"b"})", 1, 'b');
  const std::string missing = "3-" + hash_of('9');
  auto r = get("/db/doc?open_revs=[\"1-" + hash_of('b') + "\",\"1-" + hash_of('a') + "\",\"" +
                   missing + "\"]",
               {{"Accept", "multipart/mixed"}});
  ASSERT_EQ(r.status, 200u) << r.body;
  const std::string b = boundary_of(r);
  auto parts = multipart_parts(r.body, b);
  ASSERT_EQ(parts.size(), 3u) << r.body;
  EXPECT_EQ(parts[0].first, "Content-Type: application/json");
  EXPECT_EQ(Json::parse(parts[0].second)["_rev"], "1-" + hash_of('a'));
  EXPECT_EQ(Json::parse(parts[1].second)["v"], "b");
  EXPECT_EQ(parts[2].first, "Content-Type: application/json; error=\"true\"");
  EXPECT_EQ(Json::parse(parts[2].second), (Json{{"missing", missing}}));
}

TEST_F(DocumentTest, OpenRevsDefaultsToMultipartLikeMochiweb) {
  // No Accept header means */*, which accepts multipart/mixed (mochiweb accepts_content_type).
  create("/db/doc", R"({"v":1})");
  auto none = get("/db/doc?open_revs=all");
  ASSERT_EQ(none.status, 200u);
  EXPECT_EQ(multipart_parts(none.body, boundary_of(none)).size(), 1u);
  auto wildcard = get("/db/doc?open_revs=all", {{"Accept", "text/plain, multipart/*;q=0.5"}});
  EXPECT_NE(wildcard.header(field::content_type).find("multipart/mixed"), std::string::npos);
  auto refused = get("/db/doc?open_revs=all", {{"Accept", "*/*, multipart/mixed;q=0"}});
  EXPECT_EQ(refused.header(field::content_type), "application/json");
  auto head = call(verb::head, "/db/doc?open_revs=all");
  EXPECT_EQ(head.status, 200u);
  EXPECT_TRUE(head.body.empty());
}

TEST_F(DocumentTest, EmptyOpenRevsListMeansAPlainGet) {
  const std::string rev = create("/db/doc", R"({"v":1})");
  auto r = get("/db/doc?open_revs=[]", kAcceptJson);
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(r.json()["_rev"], rev);
}

// ---- DELETE -----------------------------------------------------------------------------------

TEST_F(DocumentTest, DeleteWritesATombstone) {
  const std::string rev = create("/db/doc", R"({"v":1})");
  auto d = del("/db/doc?rev=" + rev);
  ASSERT_EQ(d.status, 200u) << d.body;
  const std::string tomb = d.json()["rev"];
  EXPECT_EQ(d.json(), (Json{{"ok", true}, {"id", "doc"}, {"rev", tomb}}));
  EXPECT_EQ(rev_pos_prefix(tomb), "2-");
  EXPECT_EQ(d.header(field::etag), dq(tomb));
  expect_error(get("/db/doc"), 404, "not_found", "deleted");
  auto t = get("/db/doc?rev=" + tomb);
  ASSERT_EQ(t.status, 200u);
  EXPECT_EQ(t.json(), (Json{{"_id", "doc"}, {"_rev", tomb}, {"_deleted", true}}));
  auto with_deleted = get("/db/doc?deleted=true");
  ASSERT_EQ(with_deleted.status, 200u);
  EXPECT_EQ(with_deleted.json()["_rev"], tomb);
  // Deleting again: the document is deleted (CouchDB opens it first).
  expect_error(del("/db/doc?rev=" + tomb), 404, "not_found", "deleted");
  // A PUT without a revision recreates it on top of the tombstone.
  const std::string again = create("/db/doc", R"({"v":2})");
  EXPECT_EQ(rev_pos_prefix(again), "3-");
}

TEST_F(DocumentTest, DeleteNeedsTheCurrentRevision) {
  expect_error(del("/db/never?rev=1-" + hash_of('a')), 404, "not_found", "missing");
  expect_error(del("/db/never"), 404, "not_found", "missing");
  const std::string r1 = create("/db/doc", "{}");
  expect_error(del("/db/doc"), 409, "conflict", "Document update conflict.");
  create("/db/doc", R"({"_rev":")" + r1 + R"("})");
  expect_error(del("/db/doc?rev=" + r1), 409, "conflict", "Document update conflict.");
  EXPECT_EQ(get("/db/doc").status, 200u);
  const std::string r2 = get("/db/doc").json()["_rev"];
  auto d = del("/db/doc", {{"If-Match", dq(r2)}});
  EXPECT_EQ(d.status, 200u) << d.body;
  EXPECT_EQ(get("/db/doc").status, 404u);
}

// ---- _local documents -------------------------------------------------------------------------

TEST_F(DocumentTest, LocalDocumentRevisionSequence) {
  auto p1 = put("/db/_local/cp", R"({"seq":1})");
  ASSERT_EQ(p1.status, 201u) << p1.body;
  EXPECT_EQ(p1.json(), (Json{{"ok", true}, {"id", "_local/cp"}, {"rev", "0-1"}}));
  EXPECT_EQ(p1.header(field::location), "http://" + port_host() + "/db/_local%2Fcp");
  EXPECT_FALSE(p1.header(field::etag).empty());
  // CouchDB 3 ignores the stored revision of a _local document: the new one is the given
  // "0-N" plus one, or 0-1 without a rev, whatever is stored (no 409).
  EXPECT_EQ(put("/db/_local/cp", R"({"seq":2})").json()["rev"], "0-1");
  EXPECT_EQ(put("/db/_local/cp", R"({"_rev":"0-77","seq":2})").json()["rev"], "0-78");
  auto p2 = put("/db/_local/cp", R"({"_rev":"0-1","seq":2})");
  ASSERT_EQ(p2.status, 201u) << p2.body;
  EXPECT_EQ(p2.json()["rev"], "0-2");
  auto p3 = put("/db/_local/cp?rev=0-2", R"({"seq":3})");
  EXPECT_EQ(p3.json()["rev"], "0-3") << p3.body;
  auto g = get("/db/_local/cp");
  ASSERT_EQ(g.status, 200u);
  EXPECT_EQ(g.body, "{\"_id\":\"_local/cp\",\"_rev\":\"0-3\",\"seq\":3}\n");
  EXPECT_EQ(g.header(field::etag), p3.header(field::etag));
  EXPECT_EQ(get("/db/_local/cp", {{"If-None-Match", g.header(field::etag)}}).status, 304u);
  auto revs = get("/db/_local/cp?revs=true");
  EXPECT_EQ(revs.json()["_revisions"], (Json{{"start", 0}, {"ids", {"3"}}}));
}

// A _local document may be as large as any document (max_document_size): its body is kept in
// chunks, each under FoundationDB's value limit.
TEST_F(DocumentTest, LargeLocalDocumentsReadBackWhole) {
  const std::string big(1'000'000, 'b');
  auto p = put("/db/_local/big", R"({"data":")" + big + R"("})");
  ASSERT_EQ(p.status, 201u) << p.body.substr(0, 200);
  auto g = get("/db/_local/big");
  ASSERT_EQ(g.status, 200u);
  EXPECT_EQ(g.json()["data"], big);
  EXPECT_EQ(g.json()["_rev"], "0-1");
  auto listed = get("/db/_local_docs?include_docs=true");
  ASSERT_EQ(listed.status, 200u);
  EXPECT_EQ(listed.json()["rows"][0]["doc"]["data"], big);
  EXPECT_EQ(listed.json()["rows"][0]["value"]["rev"], "0-1");
  // Smaller again, then larger, then gone: each read is exactly the last write.
  EXPECT_EQ(put("/db/_local/big", R"({"_rev":"0-1","data":"small"})").status, 201u);
  EXPECT_EQ(get("/db/_local/big").body,
            "{\"_id\":\"_local/big\",\"_rev\":\"0-2\",\"data\":\"small\"}\n");
  const std::string bigger(300'000, 'c');
  EXPECT_EQ(put("/db/_local/big", R"({"_rev":"0-2","data":")" + bigger + R"("})").status, 201u);
  EXPECT_EQ(get("/db/_local/big").json()["data"], bigger);
  EXPECT_EQ(del("/db/_local/big").status, 200u);
  EXPECT_EQ(get("/db/_local/big").status, 404u);
  EXPECT_EQ(put("/db/_local/big", R"({"data":"again"})").json()["rev"], "0-1");
  EXPECT_EQ(get("/db/_local/big").json()["data"], "again");
}

TEST_F(DocumentTest, LocalDocumentDelete) {
  expect_error(del("/db/_local/none?rev=0-1"), 404, "not_found", "missing");
  create("/db/_local/cp", "{}");
  // Any rev, or none, deletes it (CouchDB 3).
  auto d = del("/db/_local/cp?rev=0-7");
  ASSERT_EQ(d.status, 200u) << d.body;
  EXPECT_EQ(d.json(), (Json{{"ok", true}, {"id", "_local/cp"}, {"rev", "0-0"}}));
  expect_error(del("/db/_local/cp"), 404, "not_found", "missing");
  create("/db/_local/cp", "{}");
  EXPECT_EQ(del("/db/_local/cp").status, 200u);
  expect_error(get("/db/_local/cp"), 404, "not_found", "missing");
  auto again = put("/db/_local/cp", "{}");
  EXPECT_EQ(again.json()["rev"], "0-1") << again.body;
}

TEST_F(DocumentTest, LocalDocumentsStayOutOfAllDocsAndChanges) {
  create("/db/_local/cp", R"({"x":1})");
  create("/db/visible", "{}");
  auto all = get("/db/_all_docs");
  ASSERT_EQ(all.status, 200u) << all.body;
  EXPECT_EQ(all.json()["rows"].size(), 1u) << all.body;
  EXPECT_EQ(all.json()["rows"][0]["id"], "visible");
  auto changes = get("/db/_changes");
  ASSERT_EQ(changes.status, 200u) << changes.body;
  EXPECT_EQ(changes.json()["results"].size(), 1u) << changes.body;
}

TEST_F(DocumentTest, LocalDocumentErrors) {
  expect_error(get("/db/_local"), 400, "bad_request", "Invalid _local document id.");
  expect_error(get("/db/_local/cp/att.txt"), 400, "bad_request",
               "_local documents do not accept attachments.");
  // A _local document's attachments are dropped, as CouchDB 3.5 does (only the attachment path
  // is refused).
  auto with_atts = put("/db/_local/att",
                       R"({"_attachments":{"a.txt":{"content_type":"text/plain","data":"aGk="}}})");
  EXPECT_EQ(with_atts.status, 201u) << with_atts.body;
  EXPECT_EQ(get("/db/_local/att").body, "{\"_id\":\"_local/att\",\"_rev\":\"0-1\"}\n");
  // _revisions of a _local document (PouchDB sends start 0) is accepted and not kept.
  auto with_revs = put("/db/_local/att", R"({"_rev":"0-1","_revisions":{"start":0,"ids":["1"]}})");
  EXPECT_EQ(with_revs.status, 201u) << with_revs.body;
  EXPECT_FALSE(get("/db/_local/att").json().contains("_revisions"));
  expect_error(put("/db/_local/cp", R"({"_rev":"nodash"})"), 400, "bad_request",
               "Invalid rev format");
  expect_error(get("/db/_local/cp"), 404, "not_found", "missing");
}

TEST_F(DocumentTest, LocalDocumentsAreOutsideTheRevisionTree) {
  create("/db/_local/cp", R"({"x":1})");
  // couch_db:open_doc_revs looks in the revision tree, where _local documents never are.
  expect_error(get("/db/_local/cp?open_revs=all", kAcceptJson), 404, "not_found", "missing");
  auto listed = get("/db/_local/cp?open_revs=[\"0-1\"]", kAcceptJson);
  ASSERT_EQ(listed.status, 200u) << listed.body;
  EXPECT_EQ(listed.json(), Json::parse(R"([{"missing":"0-1"}])"));
  expect_error(get("/db/_local/cp?rev=0-1"), 404, "not_found", "missing");
  EXPECT_EQ(get("/db/_local/cp").status, 200u);
}

// ---- Design documents -------------------------------------------------------------------------

TEST_F(DocumentTest, DesignDocumentsBehaveLikeDocuments) {
  auto p = put("/db/_design/app", R"({"views":{"v":{"map":"function(doc){}"}}})");
  ASSERT_EQ(p.status, 201u) << p.body;
  EXPECT_EQ(p.json()["id"], "_design/app");
  EXPECT_EQ(p.header(field::location), "http://" + port_host() + "/db/_design%2Fapp");
  const std::string rev = p.json()["rev"];
  auto g = get("/db/_design/app");
  ASSERT_EQ(g.status, 200u);
  EXPECT_EQ(g.json()["_id"], "_design/app");
  EXPECT_EQ(g.header(field::etag), dq(rev));
  expect_error(put("/db/_design/app", "{}"), 409, "conflict", "Document update conflict.");
  EXPECT_EQ(del("/db/_design/app?rev=" + rev).status, 200u);
  expect_error(get("/db/_design/app"), 404, "not_found", "deleted");
  // "_design" alone is an ordinary (and, for writes, illegal) id.
  expect_error(put("/db/_design", "{}"), 400, "illegal_docid",
               "Only reserved document ids may start with underscore.");
}

TEST_F(DocumentTest, DesignActionsNeedTheDesignDocument) {
  expect_error(get("/db/_design/none/_view/v"), 404, "not_found", "missing");
  create("/db/_design/app", R"({"views":{}})");
  expect_error(get("/db/_design/app/_view/v"), 404, "not_found", "missing_named_view");
  EXPECT_EQ(get("/db/_design/app/_info").status, 200u);
  expect_error(get("/db/_design/app/_show/s"), 404, "not_found", "missing json key: shows");
  expect_error(get("/db/_design/app/_list/s/v"), 404, "not_found", "missing json key: lists");
  expect_error(get("/db/_design/app/_rewrite/x"), 404, "rewrite_error", "Invalid path.");
}

TEST_F(DocumentTest, EncodedSlashInDesignAndLocalIds) {
  // chttpd_db:db_req: GET of _design%2F{name} is a 301 to the unencoded path; other methods and
  // _local%2F{name} address the document itself.
  auto p = put("/db/_design%2Fapp", "{}");
  ASSERT_EQ(p.status, 201u) << p.body;
  EXPECT_EQ(p.json()["id"], "_design/app");
  auto r = get("/db/_design%2Fapp?revs=true");
  EXPECT_EQ(r.status, 301u);
  EXPECT_TRUE(r.body.empty());
  EXPECT_EQ(r.header(field::location), "http://" + port_host() + "/db/_design/app?revs=true");
  auto l = put("/db/_local%2Fcp", R"({"v":1})");
  ASSERT_EQ(l.status, 201u) << l.body;
  EXPECT_EQ(l.json()["rev"], "0-1");
  EXPECT_EQ(get("/db/_local/cp").json()["v"], 1);
}

// ---- COPY -------------------------------------------------------------------------------------

TEST_F(DocumentTest, CopyToANewDocument) {
  const std::string src = create("/db/src", R"({"v":1,"k":"x"})");
  auto c = call(verb::copy, "/db/src", {}, {{"Destination", "dst"}});
  ASSERT_EQ(c.status, 201u) << c.body;
  const std::string rev = c.json()["rev"];
  EXPECT_EQ(c.json(), (Json{{"ok", true}, {"id", "dst"}, {"rev", rev}}));
  EXPECT_EQ(c.header(field::etag), dq(rev));
  EXPECT_EQ(c.header(field::location), "http://" + port_host() + "/db/dst");
  auto g = get("/db/dst");
  EXPECT_EQ(g.body, R"({"_id":"dst","_rev":")" + rev +
                        R"(","v":1,"k":"x"})"
                        "\n");
  EXPECT_EQ(get("/db/src").json()["_rev"], src);  // the source is untouched
}

TEST_F(DocumentTest, CopyOverAnExistingDocumentNeedsItsRevision) {
  create("/db/src", R"({"v":"src"})");
  const std::string dst = create("/db/dst", R"({"v":"dst"})");
  expect_error(call(verb::copy, "/db/src", {}, {{"Destination", "dst"}}), 409, "conflict",
               "Document update conflict.");
  auto c = call(verb::copy, "/db/src", {}, {{"Destination", "dst?rev=" + dst}});
  ASSERT_EQ(c.status, 201u) << c.body;
  EXPECT_EQ(rev_pos_prefix(c.json()["rev"]), "2-");
  EXPECT_EQ(get("/db/dst").json()["v"], "src");
}

TEST_F(DocumentTest, CopyOfASpecificRevisionAndEncodedDestination) {
  replicate("src", R"({"v":"a"})", 1, 'a');
  replicate("src", R"({"v":"b"})", 1, 'b');
  auto c = call(verb::copy, "/db/src?rev=1-" + hash_of('a'), {}, {{"Destination", "new%2Fid+x"}});
  ASSERT_EQ(c.status, 201u) << c.body;
  EXPECT_EQ(c.json()["id"], "new/id x");  // mochiweb unquote: %2F and '+' decoded
  EXPECT_EQ(get("/db/new%2Fid%20x").json()["v"], "a");
}

TEST_F(DocumentTest, CopyErrors) {
  create("/db/src", "{}");
  expect_error(call(verb::copy, "/db/src"), 400, "bad_request",
               "Destination header is mandatory for COPY.");
  expect_error(call(verb::copy, "/db/src", {}, {{"Destination", "http://h/db/x"}}), 400,
               "bad_request", "Destination URL must be relative.");
  expect_error(call(verb::copy, "/db/src", {}, {{"Destination", "_bad"}}), 400, "illegal_docid",
               "Only reserved document ids may start with underscore.");
  expect_error(call(verb::copy, "/db/src", {}, {{"Destination", "x?rev=bogus"}}), 400,
               "bad_request", "Invalid rev format");
  expect_error(call(verb::copy, "/db/none", {}, {{"Destination", "x"}}), 404, "not_found",
               "missing");
  expect_error(get("/db/x"), 404, "not_found", "missing");
}

TEST_F(DocumentTest, CopyLocalDocuments) {
  create("/db/_local/a", R"({"v":1})");
  auto c = call(verb::copy, "/db/_local/a", {}, {{"Destination", "_local/b"}});
  ASSERT_EQ(c.status, 201u) << c.body;
  EXPECT_EQ(c.json()["rev"], "0-1");
  EXPECT_EQ(get("/db/_local/b").body, "{\"_id\":\"_local/b\",\"_rev\":\"0-1\",\"v\":1}\n");
}

// ---- Document ids that need %-encoding --------------------------------------------------------

TEST_F(DocumentTest, EncodedIdsRoundTrip) {
  struct Case {
    std::string path, id, location;
  };
  const std::vector<Case> cases = {
      {"a%2Fb", "a/b", "a%2Fb"},
      {"%C3%BC", "\xC3\xBC", "%C3%BC"},
      {"with%20space", "with space", "with%20space"},
      {"q%3Fx%23y%26z", "q?x#y&z", "q%3Fx%23y%26z"},
      {"keep.-_:", "keep.-_:", "keep.-_:"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.id);
    auto p = put("/db/" + c.path, R"({"v":1})");
    ASSERT_EQ(p.status, 201u) << p.body;
    EXPECT_EQ(p.json()["id"], c.id);
    EXPECT_EQ(p.header(field::location), "http://" + port_host() + "/db/" + c.location);
    auto g = get("/db/" + c.path);
    ASSERT_EQ(g.status, 200u);
    EXPECT_EQ(g.json()["_id"], c.id);
    const std::string rev = g.json()["_rev"];
    EXPECT_EQ(del("/db/" + c.path + "?rev=" + rev).status, 200u);
  }
}

// ---- Sizes ------------------------------------------------------------------------------------

TEST_F(DocumentTest, TwoMegabyteDocumentRoundTrip) {
  std::string big(2 * 1024 * 1024, 'x');
  for (std::size_t i = 0; i < big.size(); i += 97) big[i] = static_cast<char>('a' + i % 26);
  const std::string rev = create("/db/big", Json{{"payload", big}}.dump());
  auto g = get("/db/big");
  ASSERT_EQ(g.status, 200u);
  EXPECT_EQ(g.json()["payload"].get<std::string>(), big);
  EXPECT_EQ(g.json()["_rev"], rev);
}

// A client whose socket takes little at a time: the server sends what the kernel accepts at once
// and the rest asynchronously; the whole answer arrives, and the connection serves the next
// request.
TEST_F(DocumentTest, LargeAnswerToASlowReaderArrivesWholeAndKeepsTheConnection) {
  const std::string big(7'000'000, 'z');
  create("/db/big", Json{{"payload", big}}.dump());
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  const int small = 16 * 1024;  // set before connect, so the window stays small
  ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server_->port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string request = "GET /db/big HTTP/1.1\r\nHost: x\r\n\r\n";
  // Reads one whole answer (head, then Content-Length bytes); its body.
  std::string pending;
  auto read_answer = [&]() -> std::optional<std::string> {
    std::size_t head_end = std::string::npos, length = 0;
    for (;;) {
      if (head_end == std::string::npos) {
        head_end = pending.find("\r\n\r\n");
        if (head_end != std::string::npos) {
          const auto at = pending.find("Content-Length: ");
          if (at == std::string::npos || at > head_end) return std::nullopt;
          length = std::stoul(pending.substr(at + 16));
          head_end += 4;
        }
      }
      if (head_end != std::string::npos && pending.size() >= head_end + length) {
        std::string body = pending.substr(head_end, length);
        pending.erase(0, head_end + length);
        return body;
      }
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 30000) <= 0) return std::nullopt;
      char chunk[8192];
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) return std::nullopt;
      pending.append(chunk, static_cast<std::size_t>(n));
    }
  };
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::this_thread::sleep_for(300ms);  // the server's first send fills what the kernel takes
  auto first = read_answer();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(Json::parse(*first)["payload"].get<std::string>(), big);
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  auto second = read_answer();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(*second, *first);
  ::close(fd);
}

TEST_F(DocumentTest, DocumentLargerThanMaxDocumentSizeIs413) {
  const std::string huge = Json{{"payload", std::string(8'100'000, 'y')}}.dump();
  // couch_doc:from_json_obj_validate names the body's _id ("" when it has none).
  expect_error(put("/db/huge", huge), 413, "document_too_large", "");
  Json with_id = Json::parse(huge);
  with_id["_id"] = "named";
  expect_error(put("/db/huge", with_id.dump()), 413, "document_too_large", "named");
  expect_error(get("/db/huge"), 404, "not_found", "missing");
  EXPECT_EQ(put("/db/after", "{}").status, 201u);  // the server is still fine
}

// ---- Bad input never writes and never crashes -------------------------------------------------

TEST_F(DocumentTest, BadBodiesAreRejectedWithoutWriting) {
  struct Case {
    std::string body;
    unsigned status;
    std::string error, reason;
  };
  const std::vector<Case> cases = {
      {"{\"a\":", 400, "bad_request",
       "invalid UTF-8 JSON: syntax error: unexpected end of input; expected '[', '{', or a literal "
       "at byte 6"},
      {"not json", 400, "bad_request",
       "invalid UTF-8 JSON: syntax error: invalid literal at byte 2"},
      {"", 400, "bad_request",
       "invalid UTF-8 JSON: syntax error: unexpected end of input; expected '[', '{', or a literal "
       "at byte 1"},
      {"[1,2]", 400, "bad_request", "Document must be a JSON object"},
      {"\"str\"", 400, "bad_request", "Document must be a JSON object"},
      {R"({"_foo":1})", 400, "doc_validation", "Bad special document member: _foo"},
      {R"({"_id":"_bad"})", 400, "illegal_docid",
       "Only reserved document ids may start with underscore."},
      {R"({"_id":5})", 400, "illegal_docid", "Document id must be a string"},
      {R"({"_revisions":{"start":"x","ids":[]}})", 400, "doc_validation",
       "_revisions.start isn't an integer."},
      {std::string(600, '[') + std::string(600, ']'), 400, "bad_request",
       "invalid UTF-8 JSON: nested deeper than 512 levels"},
      {"{\"a\":\"\xff\xfe\"}", 400, "bad_request",
       "invalid UTF-8 JSON: syntax error: invalid string: ill-formed UTF-8 byte at byte 7"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 40));
    expect_error(put("/db/victim", c.body), c.status, c.error, c.reason);
    expect_error(get("/db/victim"), 404, "not_found", "missing");
  }
  auto info = get("/db");
  ASSERT_EQ(info.status, 200u);
  EXPECT_EQ(info.json()["doc_count"], 0);
}

TEST_F(DocumentTest, BadUpdatesLeaveTheDocumentAlone) {
  const std::string rev = create("/db/doc", R"({"v":1})");
  expect_error(put("/db/doc", R"({"_rev":")" + rev + R"(","_foo":1})"), 400, "doc_validation",
               "Bad special document member: _foo");
  expect_error(put("/db/doc", "[]"), 400, "bad_request", "Document must be a JSON object");
  expect_error(put("/db/doc", R"({"_attachments":{"a.txt":{"stub":true}},"_rev":")" + rev + "\"}"),
               412, "missing_stub", "Invalid attachment stub in doc for a.txt");
  expect_error(put("/db/doc", R"({"_attachments":{"a.txt":{"data":"!!"}},"_rev":")" + rev + "\"}"),
               400, "bad_request", "Invalid attachment data for a.txt");
  auto g = get("/db/doc");
  EXPECT_EQ(g.json()["_rev"], rev);
  EXPECT_EQ(g.json()["v"], 1);
}

TEST_F(DocumentTest, MultipartRelatedUploadStoresFollowingAttachments) {
  // What CouchDB's replicator sends: the document, then the bytes of each "follows" attachment.
  const std::string body =
      "--b\r\nContent-Type: application/json\r\n\r\n{\"_rev\":\"1-" + hash_of('a') +
      "\",\"_attachments\":{\"a.txt\":{\"content_type\":\"text/plain\",\"revpos\":1,"
      "\"follows\":true,\"length\":2},\"b.bin\":{\"follows\":true,\"length\":3}}}\r\n"
      "--b\r\nContent-Disposition: attachment; filename=\"a.txt\"\r\n\r\nhi\r\n"
      "--b\r\n\r\nxyz\r\n--b--";
  auto r =
      put("/db/mp?new_edits=false", body, {{"Content-Type", "multipart/related; boundary=\"b\""}});
  ASSERT_EQ(r.status, 201u) << r.body;
  auto a = get("/db/mp/a.txt");
  ASSERT_EQ(a.status, 200u) << a.body;
  EXPECT_EQ(a.body, "hi");
  EXPECT_EQ(a.header(field::content_type), "text/plain");
  EXPECT_EQ(get("/db/mp/b.bin").body, "xyz");
  auto doc = get("/db/mp").json();
  // text/plain is stored gzip'd (CouchDB does the same): the digest is of the gzip stream.
  EXPECT_EQ(doc["_attachments"]["a.txt"]["digest"], "md5-QTVOnBwGnrw6Tx9YG1ZRyA==");
  EXPECT_EQ(doc["_attachments"]["b.bin"]["digest"], "md5-0W+zbwkR+HiZjBNhka9wXg==");
  EXPECT_EQ(doc["_attachments"]["b.bin"]["content_type"], "application/octet-stream");
  // A part missing for an announced attachment writes nothing.
  const std::string short_body =
      "--b\r\nContent-Type: application/json\r\n\r\n{\"_attachments\":{\"x\":{\"follows\":true}}}"
      "\r\n--b--";
  expect_error(put("/db/mp2", short_body, {{"Content-Type", "multipart/related; boundary=b"}}), 400,
               "bad_request", "Attachment data missing for x");
  expect_error(get("/db/mp2"), 404, "not_found", "missing");
}

TEST_F(DocumentTest, LocationHonoursForwardedHeaders) {
  auto r = put("/db/fwd", "{}",
               {{"X-Forwarded-Host", "couch.example:443"}, {"X-Forwarded-Proto", "https"}});
  ASSERT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(r.header(field::location), "https://couch.example:443/db/fwd");
}

// ---- Methods and other paths ------------------------------------------------------------------

TEST_F(DocumentTest, UnsupportedMethodsAre405WithAllow) {
  create("/db/doc", "{}");
  // (PATCH is Chaise's server-side update: tests/http/patch_test.cc.)
  for (verb m : {verb::options, verb::trace}) {
    auto r = call(m, "/db/doc");
    expect_error(r, 405, "method_not_allowed", "Only " + kDocMethods + " allowed");
    EXPECT_EQ(r.header(field::allow), kDocMethods);
  }
}

TEST_F(DocumentTest, PostToADocumentNeedsAFormUpload) {
  expect_error(call(verb::post, "/db/doc", "{}", kJson), 400, "bad_request",
               "Referer header required.");
  const Headers referer = {{"Referer", "http://" + port_host() + "/page"},
                           {"Content-Type", "application/json"}};
  expect_error(call(verb::post, "/db/doc", "{}", referer), 415, "bad_content_type",
               "Content-Type must be multipart/form-data");
  expect_error(call(verb::post, "/db/doc", "{}",
                    {{"Referer", "http://elsewhere/"}, {"Content-Type", "application/json"}}),
               400, "bad_request", "Referer header must match host.");
}

TEST_F(DocumentTest, AttachmentPathsAnswerLikeAMissingAttachment) {
  const std::string rev = create("/db/doc", "{}");
  expect_error(get("/db/doc/file.txt"), 404, "not_found", "Document is missing attachment");
  expect_error(get("/db/doc/dir/file.txt?rev=" + rev), 404, "not_found",
               "Document is missing attachment");
  expect_error(get("/db/none/file.txt"), 404, "not_found", "missing");
  expect_error(get("/db/_design/none/file.txt"), 404, "not_found", "missing");
  expect_error(del("/db/doc/file.txt?rev=" + rev), 404, "not_found",
               "Document is missing attachment");
  expect_error(del("/db/doc/file.txt?rev=1-" + hash_of('7')), 409, "not_found", "missing_rev");
  expect_error(del("/db/doc/_file"), 400, "bad_request", "Attachment name can't start with '_'");
  auto patch = call(verb::patch, "/db/doc/file.txt");
  expect_error(patch, 405, "method_not_allowed", "Only DELETE,GET,HEAD,PUT allowed");
  EXPECT_EQ(get("/db/doc").json()["_rev"], rev);
}

TEST_F(DocumentTest, ManyRequestsOnOneConnectionStayHealthy) {
  // Interleaves good and bad requests on one keep-alive connection.
  std::string rev;
  for (int i = 0; i < 50; ++i) {
    auto r = put("/db/counter", rev.empty()
                                    ? R"({"n":0})"
                                    : R"({"_rev":")" + rev + R"(","n":)" + std::to_string(i) + "}");
    ASSERT_EQ(r.status, 201u) << r.body;
    rev = r.json()["rev"];
    EXPECT_EQ(put("/db/counter", "{bad").status, 400u);
    EXPECT_EQ(get("/db/counter?rev=zzz").status, 400u);
  }
  EXPECT_EQ(rev_pos_prefix(rev), "50-");
  EXPECT_EQ(get("/db/counter").json()["n"], 49);
}

// A rev with an empty hash ("1-") is CouchDB's parse_revid of "": kept verbatim by
// new_edits=false (PouchDB's test 7829), answered like any other rev. Answers checked against
// CouchDB 3.5.0.
TEST_F(DocumentTest, BareRevWithEmptyHashIsStoredAndServedAsCouchDBDoes) {
  auto r = post("/db/_bulk_docs",
                R"({"new_edits":false,"docs":[{"_id":"foo","_rev":"1-","integer":1}]})");
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.json(), Json::array());
  Json d = get("/db/foo?revs=true&revs_info=true").json();
  EXPECT_EQ(d["_rev"], "1-");
  EXPECT_EQ(d["_revisions"], (Json{{"start", 1}, {"ids", {""}}}));
  EXPECT_EQ(d["_revs_info"], (Json::array({{{"rev", "1-"}, {"status", "available"}}})));
  EXPECT_EQ(get("/db/foo?rev=1-").json()["integer"], 1);
  EXPECT_EQ(get("/db/_all_docs").json()["rows"][0]["value"]["rev"], "1-");
  r = post("/db/_bulk_docs", R"({"new_edits":false,"docs":[{"_id":"foo","_rev":"2-abc",
          "_revisions":{"start":2,"ids":["abc",""]},"integer":2}]})");
  ASSERT_EQ(r.status, 201) << r.body;
  Json open = get("/db/foo?revs=true&open_revs=all", kAcceptJson).json();
  ASSERT_EQ(open.size(), 1u) << open.dump();
  EXPECT_EQ(open[0]["ok"]["_revisions"], (Json{{"start", 2}, {"ids", {"abc", ""}}}));
  EXPECT_EQ(post("/db/_revs_diff", R"({"foo":["1-","2-abc","3-x"]})").json(),
            (Json{{"foo", {{"missing", {"3-x"}}, {"possible_ancestors", {"2-abc"}}}}}));
  // Interactively, "1-" names no leaf of a new document: a conflict, not a format error.
  EXPECT_EQ(put("/db/bar", R"({"_rev":"1-"})").status, 409);
  auto del = this->del("/db/foo?rev=2-abc");
  EXPECT_EQ(del.status, 200) << del.body;
  EXPECT_EQ(del.json()["rev"], "3-7b9df18b81d238089ea853ac2a1ff843");  // CouchDB's rev too
}

}  // namespace
}  // namespace chaise::test
