// Update handlers in the group commit of one document (http/api/update.cc): the calls queued for
// a document run in one entry into the JavaScript engine, each on what the call before it saved.
// Over HTTP: nothing is lost under concurrency, each caller gets its own answer, a call that
// throws, is refused by validate_doc_update or runs past os_process_timeout fails alone, and
// calls that save something else take the ordinary path.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/http/test_credentials.h"
#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;

class HotUpdatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path ini = dir_.path() / "local.ini";
    // A short JavaScript time limit, so that a looping handler times out fast.
    std::ofstream(ini) << "[couchdb]\nos_process_timeout = " << 500 * kSanitizerSlowdown << "\n";
    server_ = std::make_unique<ServerProcess>(dir_.path() / "data",
                                              std::vector<std::string>{"--config", ini.string()});
    client_ = std::make_unique<HttpClient>(server_->port(), 60s);
    ASSERT_EQ(call(verb::put, "/db").status, 201u);
    ASSERT_EQ(call(verb::put, "/db/counter", R"({"n":0})").status, 201u);
  }
  void TearDown() override {
    client_.reset();
    ExitStatus s = server_->stop();
    EXPECT_TRUE(s.exited && s.exit_code == 0);
  }
  HttpResponse call(verb method, std::string_view target, std::string body = {},
                    const std::vector<std::pair<std::string, std::string>>& headers = {
                        {"Content-Type", "application/json"}}) {
    return client_->request(method, target, std::move(body), headers);
  }
  void put_updates(const Json& updates, const Json& extra = Json::object()) {
    Json ddoc = extra;
    ddoc["updates"] = updates;
    ASSERT_EQ(call(verb::put, "/db/_design/u", ddoc.dump()).status, 201u);
  }
  // A counter from the server's Prometheus page.
  std::int64_t metric(const std::string& name) {
    const std::string page = call(verb::get, "/_node/_local/_prometheus").body;
    const auto at = page.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    return std::stoll(page.substr(at + name.size() + 2));
  }
  std::int64_t counter() { return call(verb::get, "/db/counter").json()["n"].get<std::int64_t>(); }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

// Runs `each(client, i)` for i in [0, calls) on `clients` connections at once.
template <typename F>
void concurrently(std::uint16_t port, int clients, int calls, F each) {
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      HttpClient client(port, 60s);
      for (int i = 0; i < calls; ++i) each(client, c, i);
    });
  }
  for (auto& t : threads) t.join();
}

TEST_F(HotUpdatesTest, ConcurrentCallsShareEntriesLoseNothingAndEachGetsItsOwnAnswer) {
  put_updates({{"inc",
                "function(doc, req) { doc.n += 1; "
                "return [doc, {json: {n: doc.n, who: req.query.who, rev: doc._rev}}]; }"}});
  constexpr int kClients = 16, kEach = 50;
  const std::int64_t entries_before = metric("chaise_js_calls_total");
  std::mutex mu;
  std::set<std::int64_t> counts;
  std::set<std::string> revs, parents;
  std::atomic<int> wrong{0};
  concurrently(server_->port(), kClients, kEach, [&](HttpClient& client, int c, int i) {
    const std::string who = std::to_string(c) + "-" + std::to_string(i);
    auto r = client.request(verb::post, "/db/_design/u/_update/inc/counter?who=" + who);
    if (r.status != 201 || r.json()["who"] != who || r.header("X-Couch-Id") != "counter") {
      ++wrong;
      return;
    }
    std::lock_guard lock(mu);
    counts.insert(r.json()["n"].get<std::int64_t>());
    revs.insert(r.header("X-Couch-Update-NewRev"));
    parents.insert(r.json()["rev"].get<std::string>());
  });
  EXPECT_EQ(wrong.load(), 0);
  constexpr std::size_t kCalls = kClients * kEach;
  // Each call saw the count the call before it saved, and the revision that call made.
  EXPECT_EQ(counts.size(), kCalls);
  EXPECT_EQ(*counts.rbegin(), static_cast<std::int64_t>(kCalls));
  EXPECT_EQ(revs.size(), kCalls);
  EXPECT_EQ(parents.size(), kCalls);
  EXPECT_EQ(counter(), static_cast<std::int64_t>(kCalls));
  // The calls shared entries into the engine.
  const std::int64_t entries = metric("chaise_js_calls_total") - entries_before;
  EXPECT_GT(entries, 0);
  EXPECT_LT(entries, static_cast<std::int64_t>(kCalls));
  // The revisions chain: the latest is the number of calls after the first.
  auto doc = call(verb::get, "/db/counter").json();
  EXPECT_TRUE(doc["_rev"].get<std::string>().starts_with(std::to_string(kCalls + 1) + "-"));
}

TEST_F(HotUpdatesTest, ACallThatThrowsFailsAloneAndLeavesNoTrace) {
  // The handler changes the document before it throws: the next call must not see that.
  put_updates({{"inc",
                "function(doc, req) { doc.n += 1000; "
                "if (req.query.fail) throw(['error', 'refused', 'by request']); "
                "doc.n -= 999; return [doc, 'ok']; }"}});
  std::atomic<int> ok{0}, failed{0}, other{0};
  concurrently(server_->port(), 8, 40, [&](HttpClient& client, int, int i) {
    const bool fail = i % 3 == 1;
    auto r = client.request(
        verb::post, std::string("/db/_design/u/_update/inc/counter") + (fail ? "?fail=1" : ""));
    if (!fail && r.status == 201 && r.body == "ok") {
      ++ok;
    } else if (fail && r.status == 500 && r.json()["error"] == "refused" &&
               r.json()["reason"] == "by request" && r.header("X-Couch-Update-NewRev").empty()) {
      ++failed;
    } else {
      ++other;
    }
  });
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(failed.load(), 8 * 13);
  EXPECT_EQ(counter(), ok.load());
}

TEST_F(HotUpdatesTest, ALoopingCallTimesOutAloneAndTheOthersGoOn) {
  put_updates({{"inc",
                "function(doc, req) { if (req.query.loop) { doc.n = -1; while (true) {} } "
                "doc.n += 1; return [doc, 'ok']; }"}});
  std::atomic<int> ok{0}, timed_out{0}, other{0};
  std::thread looper([&] {
    HttpClient client(server_->port(), 60s);
    for (int i = 0; i < 2; ++i) {
      auto r = client.request(verb::post, "/db/_design/u/_update/inc/counter?loop=1");
      if (r.status == 500 && r.json()["error"] == "os_process_error" &&
          r.json()["reason"] == "timeout")
        ++timed_out;
      else
        ++other;
    }
  });
  concurrently(server_->port(), 4, 30, [&](HttpClient& client, int, int) {
    auto r = client.request(verb::post, "/db/_design/u/_update/inc/counter");
    if (r.status == 201)
      ++ok;
    else
      ++other;
  });
  looper.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(timed_out.load(), 2);
  EXPECT_EQ(ok.load(), 4 * 30);
  EXPECT_EQ(counter(), 4 * 30);
}

TEST_F(HotUpdatesTest, SlowCallsSpreadOverGroupsAndAllLand) {
  // Each call busy for 300 ms: six of them take longer than one transaction spends on steps.
  put_updates({{"slow",
                "function(doc, req) { var t = Date.now(); while (Date.now() - t < 300) {} "
                "doc.n += 1; return [doc, 'ok']; }"}});
  const std::int64_t groups_before = metric("chaise_hot_doc_groups_total");
  std::atomic<int> ok{0};
  concurrently(server_->port(), 6, 1, [&](HttpClient& client, int, int) {
    if (client.request(verb::post, "/db/_design/u/_update/slow/counter").status == 201) ++ok;
  });
  EXPECT_EQ(ok.load(), 6);
  EXPECT_EQ(counter(), 6);
  EXPECT_GE(metric("chaise_hot_doc_groups_total") - groups_before, 2);
}

// With CouchDB's default os_process_timeout (5 s) a looping call outlives the transaction that
// ran it: it fails once, and is not run again when that transaction retries.
TEST(HotUpdatesLongLimitTest, ACallPastTheTransactionsLifetimeFailsOnce) {
  TempDir dir;
  const fs::path ini = dir.path() / "local.ini";
  std::ofstream(ini) << "[couchdb]\nos_process_timeout = 6000\n";
  ServerProcess server(dir.path() / "data", {"--config", ini.string()});
  HttpClient client(server.port(), 60s);
  ASSERT_EQ(client.request(verb::put, "/db").status, 201u);
  ASSERT_EQ(client.request(verb::put, "/db/counter", R"({"n":0})").status, 201u);
  ASSERT_EQ(client
                .request(verb::put, "/db/_design/u",
                         R"({"updates":{"spin":"function(doc, req) { while (true) {} }"}})")
                .status,
            201u);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = client.request(verb::post, "/db/_design/u/_update/spin/counter");
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(r.json()["reason"], "timeout");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 6s * 2 * kSanitizerSlowdown);
  EXPECT_EQ(client.request(verb::get, "/db/counter").json()["n"], 0);
}

TEST_F(HotUpdatesTest, ValidationJudgesEachCall) {
  ASSERT_EQ(
      call(
          verb::put, "/db/_design/v",
          R"({"validate_doc_update":"function(n, o, u) { if (n.n > 3) throw({forbidden: 'at most 3, was ' + o.n}); if (u.name !== null && u.name !== 'admin') throw({unauthorized: 'who'}); }"})")
          .status,
      201u);
  put_updates({{"inc", "function(doc, req) { doc.n += 1; return [doc, 'ok']; }"}});
  std::atomic<int> ok{0}, forbidden{0}, other{0};
  concurrently(server_->port(), 8, 5, [&](HttpClient& client, int, int) {
    auto r = client.request(verb::post, "/db/_design/u/_update/inc/counter");
    if (r.status == 201)
      ++ok;
    else if (r.status == 403 && r.json()["error"] == "forbidden" &&
             r.json()["reason"] == "at most 3, was 3")
      ++forbidden;
    else
      ++other;
  });
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ok.load(), 3);
  EXPECT_EQ(forbidden.load(), 8 * 5 - 3);
  EXPECT_EQ(counter(), 3);
}

TEST_F(HotUpdatesTest, IdempotencyKeysReplayExactlyAmongOtherCalls) {
  put_updates({{"inc", "function(doc, req) { doc.n += 1; return [doc, {json: {n: doc.n}}]; }"}});
  std::atomic<int> replays_ok{0}, other{0};
  std::thread keyed([&] {
    HttpClient client(server_->port(), 60s);
    for (int k = 0; k < 10; ++k) {
      const std::vector<std::pair<std::string, std::string>> h = {
          {"Idempotency-Key", "key-" + std::to_string(k)}};
      auto first = client.request(verb::post, "/db/_design/u/_update/inc/counter", "", h);
      auto again = client.request(verb::post, "/db/_design/u/_update/inc/counter", "", h);
      if (first.status == 201 && again.status == 201 && again.body == first.body &&
          again.header("X-Couch-Update-NewRev") == first.header("X-Couch-Update-NewRev") &&
          again.header("Idempotent-Replayed") == "true")
        ++replays_ok;
      else
        ++other;
    }
  });
  concurrently(server_->port(), 4, 25, [&](HttpClient& client, int, int) {
    if (client.request(verb::post, "/db/_design/u/_update/inc/counter").status != 201) ++other;
  });
  keyed.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(replays_ok.load(), 10);
  EXPECT_EQ(counter(), 4 * 25 + 10);  // each keyed call once
}

TEST_F(HotUpdatesTest, CallsThatSaveSomethingElseTakeTheOrdinaryPath) {
  put_updates({
      {"copy", "function(doc, req) { return [{_id: 'copy-' + doc.n, n: doc.n}, 'copied']; }"},
      {"drop", "function(doc, req) { doc._deleted = true; return [doc, 'dropped']; }"},
      {"peek", "function(doc, req) { doc.n = 99; return [null, {code: 202, json: {n: doc.n}}]; }"},
      {"inc",
       "function(doc, req) { if (!doc) return [{_id: req.id, n: 1}, 'new']; "
       "doc.n += 1; return [doc, 'up']; }"},
  });
  auto copied = call(verb::post, "/db/_design/u/_update/copy/counter");
  EXPECT_EQ(copied.status, 201u);
  EXPECT_EQ(copied.header("X-Couch-Id"), "copy-0");
  EXPECT_EQ(call(verb::get, "/db/copy-0").json()["n"], 0);

  auto peeked = call(verb::post, "/db/_design/u/_update/peek/counter");
  EXPECT_EQ(peeked.status, 202u);
  EXPECT_EQ(peeked.json()["n"], 99);
  EXPECT_TRUE(peeked.header("X-Couch-Update-NewRev").empty());
  EXPECT_EQ(counter(), 0);

  // A document that does not exist yet: the handler gets null and creates it.
  auto created = call(verb::post, "/db/_design/u/_update/inc/fresh");
  EXPECT_EQ(created.status, 201u);
  EXPECT_EQ(created.body, "new");
  EXPECT_EQ(call(verb::post, "/db/_design/u/_update/inc/fresh").body, "up");

  // A document with an attachment is updated the ordinary way, its attachment kept.
  auto doc = call(verb::get, "/db/fresh").json();
  ASSERT_EQ(call(verb::put, "/db/fresh/a.txt?rev=" + doc["_rev"].get<std::string>(), "hello",
                 {{"Content-Type", "text/plain"}})
                .status,
            201u);
  EXPECT_EQ(call(verb::post, "/db/_design/u/_update/inc/fresh").status, 201u);
  auto fresh = call(verb::get, "/db/fresh").json();
  EXPECT_EQ(fresh["n"], 3);
  EXPECT_TRUE(fresh.contains("_attachments"));
  EXPECT_EQ(call(verb::get, "/db/fresh/a.txt").body, "hello");

  // A handler may add an attachment as base64 data, as a PUT can.
  put_updates({{"attach",
                "function(doc, req) { doc._attachments = doc._attachments || {}; "
                "doc._attachments['b.txt'] = {content_type: 'text/plain', data: 'Ynll'}; "
                "return [doc, 'attached']; }"}},
              {{"_rev", call(verb::get, "/db/_design/u").json()["_rev"]}});
  EXPECT_EQ(call(verb::post, "/db/_design/u/_update/attach/fresh").status, 201u);
  EXPECT_EQ(call(verb::get, "/db/fresh/b.txt").body, "bye");
  EXPECT_EQ(call(verb::get, "/db/fresh/a.txt").body, "hello");
  // Larger than one transaction may carry: its bytes are written before the document.
  put_updates(
      {{"big",
        "function(doc, req) { doc._attachments['big.bin'] = "
        "{content_type: 'application/octet-stream', data: req.body}; return [doc, 'ok']; }"}},
      {{"_rev", call(verb::get, "/db/_design/u").json()["_rev"]}});
  const std::string megabytes(12 * 1024 * 1024, '\x07');
  EXPECT_EQ(call(verb::post, "/db/_design/u/_update/big/fresh", base64(megabytes),
                 {{"Content-Type", "text/plain"}})
                .status,
            201u);
  EXPECT_TRUE(call(verb::get, "/db/fresh/big.bin").body == megabytes);

  put_updates({{"drop", "function(doc, req) { doc._deleted = true; return [doc, 'dropped']; }"}},
              {{"_rev", call(verb::get, "/db/_design/u").json()["_rev"]}});
  auto dropped = call(verb::post, "/db/_design/u/_update/drop/counter");
  EXPECT_EQ(dropped.status, 201u);
  EXPECT_EQ(call(verb::get, "/db/counter").status, 404u);
}

}  // namespace
}  // namespace chaise::test
