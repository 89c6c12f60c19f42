// The replicator over real HTTP: Chaise replicating between two Chaise servers (and a database of
// its own, in process) through POST /_replicate and _replicator documents, compared document by
// document (every leaf, its history, its attachments), with _scheduler and _active_tasks.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <string>
#include <thread>

#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;

const std::vector<std::pair<std::string, std::string>> kJson = {
    {"Content-Type", "application/json"}};

HttpResponse post(HttpClient& c, const std::string& target, const Json& body) {
  return c.request(verb::post, target, body.dump(), kJson);
}
HttpResponse put(HttpClient& c, const std::string& target, const Json& body) {
  return c.request(verb::put, target, body.dump(), kJson);
}

std::string url(const ServerProcess& s, const std::string& db) {
  return "http://127.0.0.1:" + std::to_string(s.port()) + "/" + db;
}

// Every document of `db` (deleted ones too) as {id: {rev: document with _revisions and
// attachments inline}}: what two databases must agree on to be equal copies.
std::map<std::string, std::map<std::string, Json>> snapshot(HttpClient& c, const std::string& db) {
  std::map<std::string, std::map<std::string, Json>> out;
  const Json changes = c.get("/" + db + "/_changes?style=all_docs").json();
  for (const Json& row : changes["results"]) {
    const std::string id = row["id"];
    const HttpResponse r =
        c.request(verb::get, "/" + db + "/" + id + "?open_revs=all&revs=true&attachments=true", {},
                  {{"Accept", "application/json"}});
    EXPECT_EQ(r.status, 200u) << id << " " << r.body;
    for (const Json& leaf : r.json()) {
      if (!leaf.contains("ok")) continue;
      Json doc = leaf["ok"];
      if (doc.contains("_attachments"))
        for (auto& [name, att] : doc["_attachments"].items()) att.erase("revpos");
      out[id][doc["_rev"].get<std::string>()] = doc;
    }
  }
  return out;
}

// A database with what replication must carry: plain documents, a deletion, a conflict, an
// attachment, a design document, a _local document (which must not travel).
void fill(HttpClient& c, const std::string& db, int n) {
  ASSERT_EQ(c.request(verb::put, "/" + db).status, 201u);
  Json docs = Json::array();
  for (int i = 0; i < n; ++i) docs.push_back({{"_id", "doc" + std::to_string(i)}, {"i", i}});
  ASSERT_EQ(post(c, "/" + db + "/_bulk_docs", {{"docs", docs}}).status, 201u);
  const std::string rev = c.get("/" + db + "/doc1").json()["_rev"];
  ASSERT_EQ(c.request(verb::delete_, "/" + db + "/doc1?rev=" + rev).status, 200u);
  ASSERT_EQ(post(c, "/" + db + "/_bulk_docs",
                 {{"new_edits", false},
                  {"docs", {{{"_id", "doc2"}, {"_rev", "1-abc"}, {"conflicting", true}}}}})
                .status,
            201u);
  ASSERT_EQ(put(c, "/" + db + "/withatt",
                {{"_attachments",
                  {{"a.txt", {{"content_type", "text/plain"}, {"data", "aGVsbG8gd29ybGQ="}}}}}})
                .status,
            201u);
  ASSERT_EQ(put(c, "/" + db + "/_design/d",
                {{"filters", {{"odd", "function(doc, req) { return doc.i % 2 == 1; }"}}}})
                .status,
            201u);
  ASSERT_EQ(put(c, "/" + db + "/_local/mine", {{"x", 1}}).status, 201u);
}

TEST(ReplicationTest, OneShotMakesAnEqualCopyAndResumesFromItsCheckpoint) {
  TempDir dir;
  ServerProcess a(dir.path() / "a");
  ServerProcess b(dir.path() / "b");
  HttpClient ca(a.port(), 60s);
  HttpClient cb(b.port(), 60s);
  fill(ca, "src", 300);

  const Json job = {{"source", url(a, "src")}, {"target", url(b, "tgt")}, {"create_target", true}};
  HttpResponse r = post(ca, "/_replicate", job);
  ASSERT_EQ(r.status, 200u) << r.body;
  Json answer = r.json();
  EXPECT_EQ(answer["ok"], true);
  EXPECT_EQ(answer["replication_id_version"], 4);
  ASSERT_EQ(answer["history"].size(), 1u);
  // 300 documents (doc1 as its tombstone), doc2's conflict, withatt, the design document.
  EXPECT_EQ(answer["history"][0]["docs_written"], 303);
  EXPECT_EQ(answer["history"][0]["missing_found"], 303);
  EXPECT_EQ(snapshot(ca, "src"), snapshot(cb, "tgt"));
  EXPECT_EQ(cb.get("/tgt/_local/mine").status, 404u);

  // Both sides hold the checkpoint under the same id.
  const Json jobs_before = ca.get("/_scheduler/jobs").json();
  EXPECT_EQ(jobs_before["total_rows"], 0);  // a finished one-shot job leaves no job
  const std::string session = answer["session_id"];

  // Nothing new: CouchDB's no_changes answer with the checkpoint as it stands.
  r = post(ca, "/_replicate", job);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json()["no_changes"], true);
  EXPECT_EQ(r.json()["session_id"], session);

  // More documents: the next run starts where the last one ended.
  Json more = Json::array();
  for (int i = 300; i < 350; ++i) more.push_back({{"_id", "doc" + std::to_string(i)}});
  ASSERT_EQ(post(ca, "/src/_bulk_docs", {{"docs", more}}).status, 201u);
  r = post(ca, "/_replicate", job);
  ASSERT_EQ(r.status, 200u) << r.body;
  answer = r.json();
  ASSERT_EQ(answer["history"].size(), 2u);
  EXPECT_EQ(answer["history"][0]["start_last_seq"], answer["history"][1]["recorded_seq"]);
  // Counters go on from the last session: 50 more revisions checked, not 353.
  EXPECT_EQ(answer["history"][0]["missing_checked"].get<int>() -
                answer["history"][1]["missing_checked"].get<int>(),
            50);
  EXPECT_EQ(snapshot(ca, "src"), snapshot(cb, "tgt"));
}

TEST(ReplicationTest, AttachmentsTravelWholeAndOnlyWhenTheTargetLacksThem) {
  TempDir dir;
  ServerProcess a(dir.path() / "a");
  ServerProcess b(dir.path() / "b");
  HttpClient ca(a.port(), 120s);
  HttpClient cb(b.port(), 120s);
  ASSERT_EQ(ca.request(verb::put, "/src").status, 201u);
  // 100 MB of bytes that do not compress, and two small attachments.
  std::string big(100u << 20, '\0');
  std::uint64_t x = 88172645463325252ull;
  for (std::size_t i = 0; i < big.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(&big[i], &x, std::min<std::size_t>(8, big.size() - i));
  }
  HttpResponse r = ca.request(verb::put, "/src/big/blob.bin", big,
                              {{"Content-Type", "application/octet-stream"}});
  ASSERT_EQ(r.status, 201u) << r.body;
  r = put(ca, "/src/small",
          {{"_attachments",
            {{"a.txt", {{"content_type", "text/plain"}, {"data", "b25l"}}},
             {"b.txt", {{"content_type", "text/plain"}, {"data", "dHdv"}}}}}});
  ASSERT_EQ(r.status, 201u);
  const Json job = {{"source", url(a, "src")}, {"target", url(b, "tgt")}, {"create_target", true}};
  r = post(ca, "/_replicate", job);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json()["history"][0]["docs_written"], 2);
  const HttpResponse copy = cb.get("/tgt/big/blob.bin");
  ASSERT_EQ(copy.status, 200u);
  EXPECT_TRUE(copy.body == big) << "the 100 MB attachment differs";

  // A third attachment: the target has the first two, which go as stubs (the target refuses a
  // stub it does not have, so the write proves they were not needed).
  Json small = ca.get("/src/small").json();
  small["_attachments"]["c.txt"] = {{"content_type", "text/plain"}, {"data", "dGhyZWU="}};
  ASSERT_EQ(put(ca, "/src/small", small).status, 201u);
  r = post(ca, "/_replicate", job);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json()["history"][0]["doc_write_failures"], 0);
  EXPECT_EQ(cb.get("/tgt/small/c.txt").body, "three");
  EXPECT_EQ(cb.get("/tgt/small/a.txt").body, "one");
  EXPECT_EQ(cb.get("/tgt/small?revs=true").json(), ca.get("/src/small?revs=true").json());
}

TEST(ReplicationTest, RevisionsTheTargetRefusesAreCountedAndTheRestIsWritten) {
  TempDir dir;
  ServerProcess a(dir.path() / "a");
  HttpClient ca(a.port(), 60s);
  ASSERT_EQ(ca.request(verb::put, "/src").status, 201u);
  Json docs = Json::array();
  for (int i = 0; i < 10; ++i)
    docs.push_back({{"_id", "d" + std::to_string(i)}, {"ok", i % 3 != 0}});
  ASSERT_EQ(post(ca, "/src/_bulk_docs", {{"docs", docs}}).status, 201u);
  ASSERT_EQ(ca.request(verb::put, "/tgt").status, 201u);
  ASSERT_EQ(put(ca, "/tgt/_design/guard",
                {{"validate_doc_update",
                  "function(doc) { if (doc.ok === false) throw({forbidden: 'not ok'}); }"}})
                .status,
            201u);
  const HttpResponse r = post(ca, "/_replicate", {{"source", "src"}, {"target", "tgt"}});
  ASSERT_EQ(r.status, 200u) << r.body;
  const Json h = r.json()["history"][0];
  EXPECT_EQ(h["doc_write_failures"], 4);  // d0, d3, d6, d9
  EXPECT_EQ(h["docs_written"], 6);
  EXPECT_EQ(ca.get("/tgt/d3").status, 404u);
  EXPECT_EQ(ca.get("/tgt/d4").status, 200u);
}

TEST(ReplicationTest, FiltersPickTheDocuments) {
  TempDir dir;
  ServerProcess a(dir.path() / "a");
  HttpClient ca(a.port(), 60s);
  fill(ca, "src", 20);
  const auto ids = [&](const std::string& db) {
    std::vector<std::string> out;
    const Json all = ca.get("/" + db + "/_all_docs").json();
    for (const Json& row : all["rows"]) out.push_back(row["id"]);
    return out;
  };
  // Database names stand for this server's own databases (replicated in process).
  HttpResponse r = post(ca, "/_replicate",
                        {{"source", "src"},
                         {"target", "by_ids"},
                         {"create_target", true},
                         {"doc_ids", {"doc3", "doc5", "nope"}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(ids("by_ids"), (std::vector<std::string>{"doc3", "doc5"}));
  r = post(ca, "/_replicate",
           {{"source", "src"},
            {"target", "by_selector"},
            {"create_target", true},
            {"selector", {{"i", {{"$gte", 17}}}}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(ids("by_selector"), (std::vector<std::string>{"doc17", "doc18", "doc19"}));
  r = post(ca, "/_replicate",
           {{"source", url(a, "src")},
            {"target", url(a, "by_filter")},
            {"create_target", true},
            {"filter", "d/odd"}});
  ASSERT_EQ(r.status, 200u) << r.body;
  // doc1 is deleted; its tombstone has no i.
  EXPECT_EQ(ids("by_filter").size(), 9u);
}

TEST(ReplicationTest, ContinuousJobsFollowTheSourceUntilCancelled) {
  TempDir dir;
  ServerProcess a(dir.path() / "a");
  ServerProcess b(dir.path() / "b");
  HttpClient ca(a.port(), 60s);
  HttpClient cb(b.port(), 60s);
  fill(ca, "src", 50);
  const Json job = {{"source", url(a, "src")},
                    {"target", url(b, "tgt")},
                    {"create_target", true},
                    {"continuous", true}};
  HttpResponse r = post(ca, "/_replicate", job);
  ASSERT_EQ(r.status, 202u) << r.body;
  const std::string id = r.json()["_local_id"];
  EXPECT_TRUE(id.ends_with("+continuous+create_target")) << id;

  ASSERT_EQ(put(ca, "/src/later", {{"x", 1}}).status, 201u);
  EXPECT_TRUE(eventually([&] { return cb.get("/tgt/later").status == 200u; }, 10s));

  const Json jobs = ca.get("/_scheduler/jobs").json();
  ASSERT_EQ(jobs["total_rows"], 1);
  EXPECT_EQ(jobs["jobs"][0]["id"], id);
  EXPECT_EQ(jobs["jobs"][0]["source"], url(a, "src") + "/");
  EXPECT_EQ(ca.get("/_scheduler/jobs/" + id).json()["id"], id);
  bool task = false;
  const Json tasks = ca.get("/_active_tasks").json();
  for (const Json& t : tasks)
    task |= t["type"] == "replication" && t["replication_id"] == id && t["continuous"] == true;
  EXPECT_TRUE(task);

  r = post(ca, "/_replicate", {{"replication_id", id}, {"cancel", true}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json(), (Json{{"ok", true}, {"_local_id", id}}));
  EXPECT_EQ(ca.get("/_scheduler/jobs").json()["total_rows"], 0);
  r = post(ca, "/_replicate", {{"replication_id", id}, {"cancel", true}});
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.json(), (Json{{"error", "not_found"}, {"reason", "missing"}}));
  EXPECT_EQ(ca.get("/_scheduler/jobs/" + id).status, 404u);
}

// A source that takes no Basic credentials at all, only cookies, and whose cookies last 3 s: the
// replicator logs in through /_session and logs in again when its cookie has expired.
TEST(ReplicationTest, RemoteCredentialsGoThroughACookieSessionRenewedWhenItExpires) {
  TempDir dir;
  const fs::path ini = dir.path() / "cookies.ini";
  write_file(ini,
             "[chttpd_auth]\niterations = 10\ntimeout = 3\n[admins]\nadmin = secret\n"
             "[chttpd]\nauthentication_handlers = {chttpd_auth, cookie_authentication_handler}\n");
  ServerProcess a(dir.path() / "a", {"--no-admin-party", "--config", ini.string()});
  ServerProcess b(dir.path() / "b");
  HttpClient ca(a.port(), 60s);
  HttpClient cb(b.port(), 60s);
  const auto login = [&] {
    const HttpResponse r = ca.request(verb::post, "/_session", "name=admin&password=secret",
                                      {{"Content-Type", "application/x-www-form-urlencoded"}});
    EXPECT_EQ(r.status, 200u) << r.body;
    const std::string cookie(r.headers[beast_http::field::set_cookie]);
    return std::vector<std::pair<std::string, std::string>>{
        {"Content-Type", "application/json"}, {"Cookie", cookie.substr(0, cookie.find(';'))}};
  };
  auto as_admin = login();
  ASSERT_EQ(ca.request(verb::put, "/src", "", as_admin).status, 201u);
  ASSERT_EQ(ca.request(verb::put, "/src/_security",
                       R"({"members":{"names":["admin"]},"admins":{"names":["admin"]}})", as_admin)
                .status,
            200u);
  ASSERT_EQ(ca.request(verb::put, "/src/first", R"({"x":1})", as_admin).status, 201u);
  // Basic credentials alone get nowhere on this server.
  ASSERT_EQ(
      ca.request(verb::get, "/src/first", "", {{"Authorization", "Basic YWRtaW46c2VjcmV0"}}).status,
      401u);

  const std::string source = "http://admin:secret@127.0.0.1:" + std::to_string(a.port()) + "/src";
  HttpResponse r =
      post(cb, "/_replicate", {{"source", source}, {"target", "tgt"}, {"create_target", true}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(cb.get("/tgt/first").status, 200u);

  r = post(cb, "/_replicate", {{"source", source}, {"target", "tgt"}, {"continuous", true}});
  ASSERT_EQ(r.status, 202u) << r.body;
  std::this_thread::sleep_for(4s);  // the replicator's cookie has expired
  as_admin = login();
  ASSERT_EQ(ca.request(verb::put, "/src/second", R"({"x":2})", as_admin).status, 201u);
  EXPECT_TRUE(eventually([&] { return cb.get("/tgt/second").status == 200u; }, 20s));
  EXPECT_EQ(cb.get("/_scheduler/jobs").json()["jobs"][0]["info"]["doc_write_failures"], 0);
}

TEST(ReplicationTest, BadRequestsGetCouchDBsAnswers) {
  TempDir dir;
  ServerProcess a(dir.path() / "a");
  HttpClient ca(a.port(), 60s);
  HttpResponse r = post(ca, "/_replicate", {{"target", "http://127.0.0.1:1/x"}});
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(r.json(), (Json{{"error", "error"}, {"reason", "Missing replicator database"}}));
  r = post(ca, "/_replicate", {{"source", "http://127.0.0.1:1/x"}, {"target", "http://"}});
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(r.json()["error"], "invalid_replication");
  r = post(ca, "/_replicate",
           {{"source", "http://127.0.0.1:1/x"}, {"target", "y"}, {"create_target", "yes"}});
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(r.json()["reason"], "parameter `create_target` must be a boolean");
  // A source that does not exist.
  r = post(ca, "/_replicate", {{"source", url(a, "nosuch")}, {"target", url(a, "t")}});
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(r.json(), (Json{{"error", "db_not_found"},
                            {"reason", "could not open " + url(a, "nosuch") + "/"}}));
  // Nobody listens there: the job fails after its retries, within the test's patience.
  r = post(ca, "/_replicate",
           {{"source", "http://127.0.0.1:1/x"},
            {"target", url(a, "t")},
            {"retries_per_request", 1},
            {"connection_timeout", 2000}});
  EXPECT_EQ(r.status, 500u) << r.body;
  EXPECT_EQ(ca.request(verb::get, "/_replicate").status, 405u);
  EXPECT_EQ(ca.get("/_scheduler/docs?states=nope").status, 400u);
}

TEST(ReplicatorDbTest, DocumentsRunJobsAndRecordHowTheyEnded) {
  TempDir dir;
  ServerProcess a(dir.path() / "a");
  ServerProcess b(dir.path() / "b");
  HttpClient ca(a.port(), 60s);
  HttpClient cb(b.port(), 60s);
  fill(ca, "src", 100);
  ASSERT_EQ(ca.request(verb::put, "/_replicator").status, 201u);
  ASSERT_EQ(put(ca, "/_replicator/once",
                {{"source", url(a, "src")}, {"target", url(b, "tgt")}, {"create_target", true}})
                .status,
            201u);
  ASSERT_TRUE(eventually(
      [&] { return ca.get("/_replicator/once").json().value("_replication_state", "") != ""; },
      20s));
  Json doc = ca.get("/_replicator/once").json();
  EXPECT_EQ(doc["_replication_state"], "completed") << doc.dump();
  EXPECT_EQ(doc["_replication_stats"]["docs_written"], 103);
  EXPECT_TRUE(doc.contains("_replication_state_time"));
  EXPECT_EQ(snapshot(ca, "src"), snapshot(cb, "tgt"));
  Json sdoc = ca.get("/_scheduler/docs/_replicator/once").json();
  EXPECT_EQ(sdoc["state"], "completed");
  EXPECT_EQ(sdoc["info"]["docs_written"], 103);

  ASSERT_EQ(put(ca, "/_replicator/broken", {{"source", url(a, "nosuch")}, {"target", url(b, "x")}})
                .status,
            201u);
  ASSERT_TRUE(eventually(
      [&] { return ca.get("/_replicator/broken").json().value("_replication_state", "") != ""; },
      20s));
  doc = ca.get("/_replicator/broken").json();
  EXPECT_EQ(doc["_replication_state"], "failed");
  EXPECT_EQ(doc["_replication_state_reason"],
            "db_not_found: could not open " + url(a, "nosuch") + "/");
  EXPECT_EQ(ca.get("/_scheduler/docs?states=failed").json()["docs"].size(), 1u);
}

TEST(ReplicatorDbTest, ContinuousJobsSurviveARestartAndStopWhenTheirDocumentGoes) {
  TempDir dir;
  // a holds the databases; b runs the job (its port changes on restart, a's does not).
  ServerProcess a(dir.path() / "a");
  HttpClient ca(a.port(), 60s);
  fill(ca, "src", 10);
  const fs::path b_data = dir.path() / "b";
  auto b = std::make_unique<ServerProcess>(b_data);
  {
    HttpClient cb(b->port(), 60s);
    ASSERT_EQ(cb.request(verb::put, "/_replicator").status, 201u);
    ASSERT_EQ(put(cb, "/_replicator/follow",
                  {{"source", url(a, "src")},
                   {"target", url(a, "tgt")},
                   {"create_target", true},
                   {"continuous", true},
                   {"checkpoint_interval", 100}})
                  .status,
              201u);
    ASSERT_TRUE(eventually([&] { return ca.get("/tgt/doc9").status == 200u; }, 10s));
    const Json sdoc = cb.get("/_scheduler/docs/_replicator/follow").json();
    EXPECT_EQ(sdoc["state"], "running") << sdoc.dump();
    // A checkpoint is written while the job runs.
    ASSERT_TRUE(eventually(
        [&] {
          const Json tasks = cb.get("/_active_tasks").json();
          return !tasks.empty() && tasks[0]["checkpointed_source_seq"] != "0";
        },
        10s));
  }
  ASSERT_EQ(b->stop().exit_code, 0);
  ASSERT_EQ(put(ca, "/src/while_down", {{"x", 1}}).status, 201u);
  b = std::make_unique<ServerProcess>(b_data);
  HttpClient cb(b->port(), 60s);
  // The job is read from its document again and goes on from its checkpoint.
  EXPECT_TRUE(eventually([&] { return ca.get("/tgt/while_down").status == 200u; }, 20s));
  ASSERT_EQ(put(ca, "/src/after", {{"x", 1}}).status, 201u);
  EXPECT_TRUE(eventually([&] { return ca.get("/tgt/after").status == 200u; }, 20s));
  const Json jobs = cb.get("/_scheduler/jobs").json();
  ASSERT_EQ(jobs["total_rows"], 1);
  // The counters are cumulative over sessions (as CouchDB's), and only the two new documents
  // are written after the restart: 13 before it, 15 in all.
  // 10 documents, doc2's conflict, withatt, the design document, then 2 new ones. The job counts
  // a write once its _bulk_docs has answered, a moment after the target shows the document.
  Json info;
  EXPECT_TRUE(eventually(
      [&] {
        info = cb.get("/_scheduler/jobs").json()["jobs"][0]["info"];
        return info["docs_written"] == 15;
      },
      5s))
      << info.dump();

  ASSERT_EQ(
      cb.request(verb::delete_, "/_replicator/follow?rev=" +
                                    cb.get("/_replicator/follow").json()["_rev"].get<std::string>())
          .status,
      200u);
  EXPECT_TRUE(
      eventually([&] { return cb.get("/_scheduler/jobs").json()["total_rows"] == 0; }, 10s));
  EXPECT_EQ(cb.get("/_scheduler/docs/_replicator/follow").status, 404u);
}

TEST(ReplicatorDbTest, TheReplicatorSectionGivesEveryJobItsDefaults) {
  TempDir dir;
  const fs::path ini = dir.path() / "replicator.ini";
  write_file(ini, "[replicator]\ncheckpoint_interval = 4321\n");
  ServerProcess a(dir.path() / "a", {"--config", ini.string()});
  HttpClient ca(a.port(), 60s);
  ASSERT_EQ(ca.request(verb::put, "/src").status, 201u);
  ASSERT_EQ(ca.request(verb::put, "/_replicator").status, 201u);
  ASSERT_EQ(put(ca, "/_replicator/bydoc",
                {{"source", url(a, "src")},
                 {"target", url(a, "t1")},
                 {"create_target", true},
                 {"continuous", true}})
                .status,
            201u);
  ASSERT_EQ(
      post(ca, "/_replicate",
           {{"source", "src"}, {"target", "t2"}, {"create_target", true}, {"continuous", true}})
          .status,
      202u);
  std::vector<Json> seen;
  ASSERT_TRUE(eventually(
      [&] {
        const Json tasks = ca.get("/_active_tasks").json();
        seen.assign(tasks.begin(), tasks.end());
        return seen.size() == 2;
      },
      10s));
  for (const Json& t : seen) EXPECT_EQ(t["checkpoint_interval"], 4321) << t.dump();
}

TEST(ReplicatorDbTest, ADocumentWhoseFilterCannotBeFetchedIsInErrorUntilItChanges) {
  TempDir dir;
  ServerProcess a(dir.path() / "a");
  HttpClient ca(a.port(), 60s);
  ASSERT_EQ(ca.request(verb::put, "/src").status, 201u);
  ASSERT_EQ(put(ca, "/src/one", {{"i", 1}}).status, 201u);
  ASSERT_EQ(put(ca, "/src/two", {{"i", 2}}).status, 201u);
  ASSERT_EQ(ca.request(verb::put, "/_replicator").status, 201u);
  Json rep = {{"source", url(a, "src")},
              {"target", url(a, "tgt")},
              {"create_target", true},
              {"filter", "d/odd"}};
  HttpResponse r = put(ca, "/_replicator/f", rep);
  ASSERT_EQ(r.status, 201u) << r.body;
  ASSERT_TRUE(eventually(
      [&] { return ca.get("/_scheduler/docs/_replicator/f").json()["state"] == "error"; }, 20s));
  const Json sdoc = ca.get("/_scheduler/docs/_replicator/f").json();
  EXPECT_EQ(sdoc["id"], nullptr);
  EXPECT_EQ(sdoc["error_count"], 1);
  EXPECT_TRUE(sdoc["info"]["error"].get<std::string>().starts_with(
      "Couldn't open document `_design/d` from source database `" + url(a, "src") + "/`"))
      << sdoc.dump();
  EXPECT_EQ(ca.get("/_scheduler/jobs").json()["total_rows"], 0);
  // Unlike "failed", "error" is not written to the document: it is tried again.
  EXPECT_FALSE(ca.get("/_replicator/f").json().contains("_replication_state"));

  // Once the filter exists, a change to the document defines the replication again at once.
  ASSERT_EQ(put(ca, "/src/_design/d",
                {{"filters", {{"odd", "function(doc, req) { return doc.i % 2 == 1; }"}}}})
                .status,
            201u);
  rep["_rev"] = r.json()["rev"];
  rep["note"] = "the filter is there now";
  ASSERT_EQ(put(ca, "/_replicator/f", rep).status, 201u);
  ASSERT_TRUE(eventually(
      [&] {
        return ca.get("/_replicator/f").json().value("_replication_state", "") == "completed";
      },
      20s));
  EXPECT_EQ(ca.get("/tgt/one").status, 200u);
  EXPECT_EQ(ca.get("/tgt/two").status, 404u);
}

// One slot, two continuous jobs: at each interval the running one stops (checkpointing) and the
// waiting one runs, so both keep following their sources.
TEST(ReplicatorDbTest, WhenJobsWaitForASlotContinuousJobsTakeTurns) {
  TempDir dir;
  const fs::path ini = dir.path() / "churn.ini";
  write_file(ini, "[replicator]\nmax_jobs = 1\ninterval = 1000\nmax_churn = 1\n");
  ServerProcess a(dir.path() / "a", {"--config", ini.string()});
  HttpClient ca(a.port(), 60s);
  for (const std::string db : {"s1", "s2"}) {
    ASSERT_EQ(ca.request(verb::put, "/" + db).status, 201u);
    ASSERT_EQ(put(ca, "/" + db + "/first", {{"x", 1}}).status, 201u);
    const HttpResponse r =
        post(ca, "/_replicate",
             {{"source", db}, {"target", "t" + db}, {"create_target", true}, {"continuous", true}});
    ASSERT_EQ(r.status, 202u) << r.body;
  }
  EXPECT_TRUE(eventually([&] { return ca.get("/ts1/first").status == 200u; }, 20s));
  EXPECT_TRUE(eventually([&] { return ca.get("/ts2/first").status == 200u; }, 20s));
  ASSERT_EQ(put(ca, "/s1/later", {{"x", 2}}).status, 201u);
  ASSERT_EQ(put(ca, "/s2/later", {{"x", 2}}).status, 201u);
  EXPECT_TRUE(eventually([&] { return ca.get("/ts1/later").status == 200u; }, 20s));
  EXPECT_TRUE(eventually([&] { return ca.get("/ts2/later").status == 200u; }, 20s));

  const Json jobs = ca.get("/_scheduler/jobs").json();
  ASSERT_EQ(jobs["total_rows"], 2) << jobs.dump();
  int running = 0;
  int stops = 0;
  for (const Json& j : jobs["jobs"]) {
    running += j["pid"].is_null() ? 0 : 1;
    for (const Json& h : j["history"]) stops += h["type"] == "stopped" ? 1 : 0;
  }
  EXPECT_LE(running, 1) << jobs.dump();
  EXPECT_GE(stops, 2) << jobs.dump();
}

TEST(ReplicatorDbTest, AnUnreachableSourceMakesTheJobCrashWithItsReason) {
  TempDir dir;
  ServerProcess a(dir.path() / "a");
  HttpClient ca(a.port(), 60s);
  ASSERT_EQ(ca.request(verb::put, "/_replicator").status, 201u);
  ASSERT_EQ(put(ca, "/_replicator/nowhere",
                {{"source", "http://127.0.0.1:1/src"},
                 {"target", url(a, "tgt")},
                 {"retries_per_request", 0},
                 {"connection_timeout", 2000}})
                .status,
            201u);
  ASSERT_TRUE(eventually(
      [&] { return ca.get("/_scheduler/docs/_replicator/nowhere").json()["state"] == "crashing"; },
      20s));
  const Json sdoc = ca.get("/_scheduler/docs/_replicator/nowhere").json();
  EXPECT_EQ(sdoc["error_count"], 1);
  EXPECT_NE(sdoc["info"]["error"].get<std::string>().find("127.0.0.1:1"), std::string::npos)
      << sdoc.dump();
  const Json job = ca.get("/_scheduler/jobs").json()["jobs"][0];
  EXPECT_EQ(job["history"][0]["type"], "crashed");
  // The document is not marked: the job is retried after its backoff.
  EXPECT_FALSE(ca.get("/_replicator/nowhere").json().contains("_replication_state"));
}

TEST(ReplicatorDbTest, AJobKilledMidwayResumesFromItsCheckpointToAnEqualCopy) {
  TempDir dir;
  ServerProcess a(dir.path() / "a");
  HttpClient ca(a.port(), 60s);
  ASSERT_EQ(ca.request(verb::put, "/src").status, 201u);
  constexpr int kDocs = 10000;
  for (int k = 0; k < kDocs / 500; ++k) {
    Json docs = Json::array();
    for (int i = 0; i < 500; ++i)
      docs.push_back({{"_id", "d" + std::to_string(k * 500 + i)}, {"pad", std::string(200, 'x')}});
    ASSERT_EQ(post(ca, "/src/_bulk_docs", {{"docs", docs}}).status, 201u);
  }
  const fs::path b_data = dir.path() / "b";
  auto b = std::make_unique<ServerProcess>(b_data);
  {
    HttpClient cb(b->port(), 60s);
    ASSERT_EQ(cb.request(verb::put, "/_replicator").status, 201u);
    ASSERT_EQ(put(cb, "/_replicator/pull",
                  {{"source", url(a, "src")},
                   {"target", url(a, "tgt")},
                   {"create_target", true},
                   {"worker_batch_size", 50},
                   {"worker_processes", 1},
                   {"checkpoint_interval", 50}})
                  .status,
              201u);
    ASSERT_TRUE(eventually(
        [&] {
          const HttpResponse r = ca.get("/tgt");
          return r.status == 200u && r.json()["doc_count"].get<int>() >= 2000;
        },
        30s));
  }
  b->stop_with(SIGKILL);
  const int copied = ca.get("/tgt").json()["doc_count"].get<int>();
  ASSERT_LT(copied, kDocs) << "the job finished before it was killed";
  b = std::make_unique<ServerProcess>(b_data);
  HttpClient cb(b->port(), 60s);
  ASSERT_TRUE(eventually(
      [&] { return cb.get("/_replicator/pull").json().value("_replication_state", "") != ""; },
      60s));
  const Json doc = cb.get("/_replicator/pull").json();
  EXPECT_EQ(doc["_replication_state"], "completed") << doc.dump();
  EXPECT_EQ(ca.get("/tgt").json()["doc_count"], kDocs);
  EXPECT_EQ(snapshot(ca, "src"), snapshot(ca, "tgt"));
  // The newest history entry starts where an older one ended: the job resumed from its
  // checkpoint instead of reading the source from 0.
  const Json local = ca.get("/tgt/_local_docs?include_docs=true").json();
  ASSERT_EQ(local["rows"].size(), 1u) << local.dump();
  const Json history = local["rows"][0]["doc"]["history"];
  ASSERT_GE(history.size(), 2u);
  EXPECT_NE(history[0]["start_last_seq"], 0) << history.dump();
}

}  // namespace
}  // namespace chaise::test
