// Idempotency-Key on every document write (a command id): a retry gets the
// first execution's answer and writes nothing, across a lost answer, a restart and load; another
// request under the same key gets 422; keys expire. Each test starts the real binary.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/http/feed_client.h"
#include "tests/http/test_credentials.h"
#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;
using Headers = std::vector<std::pair<std::string, std::string>>;

Headers with_key(const std::string& key, const std::string& content_type = "application/json") {
  Headers h = {{"Idempotency-Key", key}};
  if (!content_type.empty()) h.emplace_back("Content-Type", content_type);
  return h;
}

class IdempotencyTest : public ::testing::Test {
 protected:
  void SetUp() override { start({}); }
  void TearDown() override {
    client_.reset();
    server_.reset();
  }
  void start(const std::vector<std::string>& args, bool create = true) {
    client_.reset();
    server_.reset();
    server_.emplace(dir_.path() / "data", args);
    client_ = std::make_unique<HttpClient>(server_->port(), 60s);
    if (create) {
      ASSERT_EQ(call(verb::put, "/db").status, 201u);
    }
  }
  HttpResponse call(verb method, std::string_view target, std::string body = {},
                    const Headers& headers = {{"Content-Type", "application/json"}}) {
    return client_->request(method, target, std::move(body), headers);
  }
  Json db_info() { return call(verb::get, "/db").json(); }
  long long metric(const std::string& name) {
    return metric_value(call(verb::get, "/_node/_local/_prometheus").body, name);
  }
  std::int64_t doc_count() { return db_info()["doc_count"].get<std::int64_t>(); }

  // Sends the same request twice under `key`: the second answer must be the first one, replayed,
  // and must write nothing.
  HttpResponse expect_replayed(verb method, const std::string& target, const std::string& body,
                               const std::string& key,
                               const std::string& content_type = "application/json") {
    HttpResponse first = call(method, target, body, with_key(key, content_type));
    EXPECT_TRUE(first.header("Idempotent-Replayed").empty()) << target;
    const Json before = db_info();
    HttpResponse again = call(method, target, body, with_key(key, content_type));
    EXPECT_EQ(again.status, first.status) << target;
    EXPECT_EQ(again.body, first.body) << target;
    for (auto f :
         {beast_http::field::etag, beast_http::field::location, beast_http::field::content_type})
      EXPECT_EQ(again.header(f), first.header(f)) << target << " " << f;
    EXPECT_EQ(again.header("Idempotent-Replayed"), "true") << target;
    const Json after = db_info();
    EXPECT_EQ(after["update_seq"], before["update_seq"]) << target << ": the replay wrote";
    EXPECT_EQ(after["doc_count"], before["doc_count"]) << target;
    return first;
  }

  TempDir dir_;
  std::optional<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(IdempotencyTest, EveryWriteKindReplaysItsFirstAnswer) {
  // POST /db: without a key, a retry makes a second document; with one, it does not.
  auto posted = expect_replayed(verb::post, "/db", R"({"a":1})", "post-1");
  EXPECT_EQ(posted.status, 201u);
  EXPECT_EQ(doc_count(), 1);

  auto put = expect_replayed(verb::put, "/db/doc", R"({"n":1})", "put-1");
  ASSERT_EQ(put.status, 201u);
  const std::string rev1 = put.json()["rev"];
  // An edit naming rev1: executed twice it would answer 409 the second time.
  auto edit = expect_replayed(verb::put, "/db/doc?rev=" + rev1, R"({"n":2})", "put-2");
  ASSERT_EQ(edit.status, 201u);
  const std::string rev2 = edit.json()["rev"];
  // A conflict is an answer like any other: replayed as it was.
  EXPECT_EQ(expect_replayed(verb::put, "/db/doc?rev=" + rev1, R"({"n":3})", "put-3").status, 409u);

  auto att =
      expect_replayed(verb::put, "/db/doc/file.txt?rev=" + rev2, "hello", "att-1", "text/plain");
  ASSERT_EQ(att.status, 201u);
  const std::string rev3 = att.json()["rev"];
  auto att_del = expect_replayed(verb::delete_, "/db/doc/file.txt?rev=" + rev3, "", "att-2", "");
  ASSERT_EQ(att_del.status, 200u);
  const std::string rev4 = att_del.json()["rev"];

  auto copy = client_->request(verb::copy, "/db/doc", "",
                               {{"Destination", "copied"}, {"Idempotency-Key", "copy-1"}});
  ASSERT_EQ(copy.status, 201u);
  auto copy_again = client_->request(verb::copy, "/db/doc", "",
                                     {{"Destination", "copied"}, {"Idempotency-Key", "copy-1"}});
  EXPECT_EQ(copy_again.body, copy.body);
  EXPECT_EQ(copy_again.header("Idempotent-Replayed"), "true");

  // DELETE: executed again it would be 404 deleted (CouchDB opens the document first).
  auto del = expect_replayed(verb::delete_, "/db/doc?rev=" + rev4, "", "del-1", "");
  EXPECT_EQ(del.status, 200u);

  auto local = expect_replayed(verb::put, "/db/_local/cp", R"({"seq":1})", "local-1");
  EXPECT_EQ(local.status, 201u);

  auto bulk =
      expect_replayed(verb::post, "/db/_bulk_docs",
                      R"({"docs":[{"_id":"b1"},{"_id":"b2","x":1},{"_id":"copied"}]})", "bulk-1");
  ASSERT_EQ(bulk.status, 201u);
  EXPECT_EQ(bulk.json()[2]["error"], "conflict");

  auto index = expect_replayed(verb::post, "/db/_index",
                               R"({"index":{"fields":["x"]},"name":"by-x","ddoc":"ix"})", "idx-1");
  EXPECT_EQ(index.status, 200u);
  EXPECT_EQ(index.json()["result"], "created");

  // An update handler that counts: executed twice the counter would say 2.
  ASSERT_EQ(
      call(
          verb::put, "/db/_design/u",
          R"({"updates":{"bump":"function(doc, req) { if (!doc) doc = {_id: req.id, n: 0}; doc.n += 1; return [doc, {json: {n: doc.n}}]; }"}})")
          .status,
      201u);
  auto bumped = expect_replayed(verb::post, "/db/_design/u/_update/bump/counter", "", "upd-1");
  EXPECT_EQ(bumped.json()["n"], 1);
  EXPECT_FALSE(bumped.header("X-Couch-Update-NewRev").empty());
  EXPECT_EQ(call(verb::get, "/db/counter").json()["n"], 1);
}

TEST_F(IdempotencyTest, AKeyBelongsToOneRequest) {
  ASSERT_EQ(call(verb::post, "/db", R"({"a":1})", with_key("k")).status, 201u);
  auto other_body = call(verb::post, "/db", R"({"a":2})", with_key("k"));
  EXPECT_EQ(other_body.status, 422u);
  EXPECT_EQ(other_body.json()["error"], "unprocessable_entity");
  EXPECT_EQ(call(verb::post, "/db/_bulk_docs", R"({"docs":[]})", with_key("k")).status, 422u);
  EXPECT_EQ(doc_count(), 1);
  // Keys are per database.
  ASSERT_EQ(call(verb::put, "/db2").status, 201u);
  EXPECT_EQ(call(verb::post, "/db2", R"({"a":2})", with_key("k")).status, 201u);
  // The structured-field form names the same key.
  auto quoted = call(verb::post, "/db", R"({"a":1})", with_key("\"k\""));
  EXPECT_EQ(quoted.header("Idempotent-Replayed"), "true");

  for (const std::string& bad : {std::string(256, 'k'), std::string("\"\""), std::string("a\"b")}) {
    auto r = call(verb::post, "/db", R"({"a":3})", with_key(bad));
    EXPECT_EQ(r.status, 400u) << bad;
    EXPECT_EQ(r.json()["error"], "bad_request");
  }
  // Reads ignore the header.
  EXPECT_EQ(client_->request(verb::get, "/db", "", {{"Idempotency-Key", "k"}}).status, 200u);
  EXPECT_EQ(doc_count(), 1);
}

// A key's stored answer belongs to the user and the target that made it: the same key and body
// from another user, or to another document, is another request (422), never a replay.
TEST_F(IdempotencyTest, AKeyIsNotReplayedToAnotherUserOrTarget) {
  const auto ini = dir_.path() / "two-admins.ini";
  write_file(ini, "[chttpd_auth]\niterations = 10\n[admins]\nalice = a-secret\nbob = b-secret\n");
  start({"--no-admin-party", "--config", ini.string()}, false);
  const Headers alice = {basic_auth("alice", "a-secret"),
                         {"Content-Type", "application/json"},
                         {"Idempotency-Key", "k"}};
  Headers bob = alice;
  bob[0] = basic_auth("bob", "b-secret");
  // The fixture's database "db" (empty) is kept.
  auto first = client_->request(verb::put, "/db/d1", R"({"a":1})", alice);
  ASSERT_EQ(first.status, 201u) << first.body;
  EXPECT_EQ(
      client_->request(verb::put, "/db/d1", R"({"a":1})", alice).header("Idempotent-Replayed"),
      "true");
  auto as_bob = client_->request(verb::put, "/db/d1", R"({"a":1})", bob);
  EXPECT_EQ(as_bob.status, 422u) << as_bob.body;
  EXPECT_TRUE(as_bob.header("Idempotent-Replayed").empty());
  auto other_target = client_->request(verb::put, "/db/d2", R"({"a":1})", alice);
  EXPECT_EQ(other_target.status, 422u) << other_target.body;
  EXPECT_EQ(client_->request(verb::get, "/db/d2", "", {alice[0]}).status, 404u);
  EXPECT_EQ(client_->request(verb::get, "/db", "", {alice[0]}).json()["doc_count"], 1);
}

TEST_F(IdempotencyTest, ARequestTooLargeForOneTransactionIsRefusedWhole) {
  std::string docs = R"({"docs":[)";
  for (int i = 0; i < 10'001; ++i)
    docs += (i ? "," : "") + std::string(R"({"_id":"d)") + std::to_string(i) + "\"}";
  docs += "]}";
  auto r = call(verb::post, "/db/_bulk_docs", docs, with_key("big"));
  EXPECT_EQ(r.status, 413u) << r.body;
  auto twice =
      call(verb::post, "/db/_bulk_docs", R"({"docs":[{"_id":"x"},{"_id":"x"}]})", with_key("dup"));
  EXPECT_EQ(twice.status, 413u);
  EXPECT_EQ(doc_count(), 0);
  // Without a key the same requests are written in several transactions, as before.
  auto unkeyed = call(verb::post, "/db/_bulk_docs", docs);
  EXPECT_EQ(unkeyed.status, 201u) << unkeyed.body;
  EXPECT_EQ(doc_count(), 10'001);
}

// The answer is lost (the client hangs up right after sending); the retry must not write again.
TEST_F(IdempotencyTest, ALostAnswerRetriedLeavesOneDocument) {
  auto send_and_hang_up = [&](const std::string& extra_header) {
    const std::string body = R"({"order":"A-17"})";
    RawConnection c(server_->port());
    ASSERT_TRUE(c.send_all(
        "POST /db HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
        extra_header + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
  };
  auto wait_for_docs = [&](std::int64_t n) {
    for (int i = 0; i < 500 && doc_count() < n; ++i) std::this_thread::sleep_for(10ms);
    return doc_count();
  };
  send_and_hang_up("Idempotency-Key: order-A-17\r\n");
  ASSERT_EQ(wait_for_docs(1), 1);
  // The first request holds its key from before its commit until its handler is done (answering
  // a client that is gone): a retry in between is told 409, still being processed, and tries
  // again, as a client would.
  auto retry = call(verb::post, "/db", R"({"order":"A-17"})", with_key("order-A-17"));
  for (int i = 0; i < 500 && retry.status == 409u; ++i) {
    EXPECT_NE(retry.body.find("still being processed"), std::string::npos) << retry.body;
    std::this_thread::sleep_for(10ms);
    retry = call(verb::post, "/db", R"({"order":"A-17"})", with_key("order-A-17"));
  }
  EXPECT_EQ(retry.status, 201u);
  EXPECT_EQ(retry.header("Idempotent-Replayed"), "true");
  auto all = call(verb::get, "/db/_all_docs").json();
  ASSERT_EQ(all["rows"].size(), 1u);
  EXPECT_EQ(all["rows"][0]["id"], retry.json()["id"]);  // the answer names the one document
  // The replay means the first request's handler is done (it held the key until then): nothing
  // more can come of it.
  EXPECT_EQ(doc_count(), 1);

  // The same without a key: the retry is a second order.
  send_and_hang_up("");
  ASSERT_EQ(wait_for_docs(2), 2);
  EXPECT_EQ(call(verb::post, "/db", R"({"order":"A-17"})").status, 201u);
  EXPECT_EQ(doc_count(), 3);
}

TEST_F(IdempotencyTest, RecordsSurviveARestartAndExpire) {
  auto first = call(verb::post, "/db", R"({"a":1})", with_key("r1"));
  ASSERT_EQ(first.status, 201u);
  ASSERT_EQ(server_->stop().exit_code, 0);
  start({}, false);
  auto again = call(verb::post, "/db", R"({"a":1})", with_key("r1"));
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(again.header("Idempotent-Replayed"), "true");

  // With a 1 s time to live, the key is forgotten (and its record cleared) after a second.
  ASSERT_EQ(server_->stop().exit_code, 0);
  const auto ini = dir_.path() / "ttl.ini";
  std::ofstream(ini) << "[chaise]\nidempotency_key_ttl = 1\n";
  start({"--config", ini.string()}, false);
  auto short_lived = call(verb::post, "/db", R"({"b":1})", with_key("r2"));
  ASSERT_EQ(short_lived.status, 201u);
  EXPECT_EQ(call(verb::post, "/db", R"({"b":1})", with_key("r2")).header("Idempotent-Replayed"),
            "true");
  // The time to live passes, and a janitor pass (every second) clears the record.
  ASSERT_TRUE(eventually([&] { return metric("chaise_idempotency_expired_total") >= 1; }, 10s));
  auto later = call(verb::post, "/db", R"({"b":1})", with_key("r2"));
  EXPECT_EQ(later.status, 201u);
  EXPECT_TRUE(later.header("Idempotent-Replayed").empty());
  EXPECT_NE(later.json()["id"], short_lived.json()["id"]);
  EXPECT_EQ(doc_count(), 3);
}

// A key whose first request is still running is answered 409; once it is done, replayed. Here
// the first request is a chunked attachment upload that waits for its last chunk.
TEST_F(IdempotencyTest, AKeyInFlightIsAConflictAndStreamedBodiesAreFingerprinted) {
  RawConnection c(server_->port());
  ASSERT_TRUE(
      c.send_all("PUT /db/doc/big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                 "application/octet-stream\r\n"
                 "Idempotency-Key: up-1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"));
  ASSERT_TRUE(eventually([&] { return metric("chaise_idempotency_in_flight") == 1; }));
  auto second = call(verb::put, "/db/doc/big.bin", "hello world",
                     with_key("up-1", "application/octet-stream"));
  EXPECT_EQ(second.status, 409u) << second.body;
  EXPECT_EQ(second.json()["error"], "conflict");
  ASSERT_TRUE(c.send_all("6\r\n world\r\n0\r\n\r\n"));
  std::string rest;
  const std::string head = c.read_head(rest);
  EXPECT_NE(head.find("201 Created"), std::string::npos) << head;
  // The same bytes sent whole get the stored answer; other bytes are another request.
  auto same = call(verb::put, "/db/doc/big.bin", "hello world",
                   with_key("up-1", "application/octet-stream"));
  EXPECT_EQ(same.status, 201u);
  EXPECT_EQ(same.header("Idempotent-Replayed"), "true");
  auto other = call(verb::put, "/db/doc/big.bin", "hello there",
                    with_key("up-1", "application/octet-stream"));
  EXPECT_EQ(other.status, 422u);
  auto stored = call(verb::get, "/db/doc/big.bin");
  EXPECT_EQ(stored.body, "hello world");
  EXPECT_EQ(call(verb::get, "/db/doc").json()["_rev"].get<std::string>().substr(0, 2), "1-");
}

// 8 clients, 10,000 requests: each either a new key or a retry of one of its earlier keys (the
// same body), and one in ten sent on a connection cut before the answer. In the end every key is
// one document, and every answer a key got is the same.
TEST_F(IdempotencyTest, TenThousandRandomRetriesUnderLoadCreateNoDuplicate) {
  constexpr int kClients = 8, kRequestsPerClient = 1'250;
  std::mutex mu;
  std::map<std::string, std::set<std::string>> answers;  // key -> distinct answer bodies
  std::atomic<int> failures{0};
  auto body_of = [](const std::string& key) { return R"({"key":")" + key + "\"}"; };
  std::vector<std::thread> clients;
  std::vector<std::vector<std::string>> keys(kClients);
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(1234 + c);
      HttpClient client(server_->port(), 60s);
      for (int i = 0; i < kRequestsPerClient; ++i) {
        std::string key;
        if (keys[c].empty() || rng() % 10 < 6) {
          key = "c" + std::to_string(c) + "-" + std::to_string(i);
          keys[c].push_back(key);
        } else {
          key = keys[c][rng() % keys[c].size()];
        }
        const std::string body = body_of(key);
        if (rng() % 10 == 0) {
          RawConnection cut(server_->port());
          cut.send_all(
              "POST /db HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              "Idempotency-Key: " +
              key + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
          continue;
        }
        auto r = client.request(verb::post, "/db", body, with_key(key));
        // 409: the same key still in flight from a cut connection; the final pass retries it.
        if (r.status == 409) continue;
        if (r.status != 201) {
          ++failures;
          continue;
        }
        std::lock_guard lock(mu);
        answers[key].insert(r.body);
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(failures.load(), 0);
  // Every key once more, until it has an answer (a cut request may still be running).
  std::size_t distinct = 0;
  for (int c = 0; c < kClients; ++c) {
    for (const std::string& key : keys[c]) {
      ++distinct;
      HttpResponse r;
      for (int attempt = 0; attempt < 100; ++attempt) {
        r = call(verb::post, "/db", body_of(key), with_key(key));
        if (r.status != 409) break;
        std::this_thread::sleep_for(10ms);
      }
      ASSERT_EQ(r.status, 201u) << key << " " << r.body;
      answers[key].insert(r.body);
    }
  }
  for (const auto& [key, bodies] : answers) EXPECT_EQ(bodies.size(), 1u) << key;
  EXPECT_EQ(doc_count(), static_cast<std::int64_t>(distinct));
  // And no key is in two documents.
  auto all = call(verb::get, "/db/_all_docs?include_docs=true").json();
  std::set<std::string> seen;
  for (const auto& row : all["rows"]) EXPECT_TRUE(seen.insert(row["doc"]["key"]).second);
  EXPECT_EQ(seen.size(), distinct);
}

}  // namespace
}  // namespace chaise::test
