// Regression tests for what a hostile or careless client could send: requests whose cost
// grew quadratically, parameters that overflowed into busy loops or zero timeouts, numbers that
// were silently changed, keys that were turned into other keys, and error reasons that did not say
// what was wrong. Each test starts the real binary on a free port.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/docs/attachments.h"
#include "tests/http/feed_client.h"
#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

const std::vector<std::pair<std::string, std::string>> kJson = {
    {"Content-Type", "application/json"}};

class HardeningTest : public ::testing::Test {
 protected:
  void SetUp() override { start({}); }
  void TearDown() override {
    client_.reset();
    server_.reset();
  }
  // A server on a store of its own, with the database "db" created.
  void start(const std::vector<std::string>& args) {
    ++starts_;
    reopen(args);
    ASSERT_EQ(call(verb::put, "/db").status, 201u);
  }
  // The last store started, served again (with other arguments).
  void reopen(const std::vector<std::string>& args) {
    client_.reset();
    server_.reset();
    server_.emplace(dir_.path() / ("data" + std::to_string(starts_)), args);
    client_ = std::make_unique<HttpClient>(server_->port(), 60s);
  }
  // A server whose [chttpd] changes_timeout is `ms`.
  void start_with_changes_timeout(int ms) {
    const auto ini = dir_.path() / "changes.ini";
    std::ofstream(ini) << "[chttpd]\nchanges_timeout = " << ms << "\n";
    start({"--config", ini.string()});
  }
  HttpResponse call(verb method, std::string_view target, std::string body = {},
                    const std::vector<std::pair<std::string, std::string>>& headers = kJson) {
    return client_->request(method, target, std::move(body), headers);
  }
  HttpResponse get(std::string_view target) { return call(verb::get, target); }
  std::uint16_t port() const { return server_->port(); }

  TempDir dir_;
  int starts_ = 0;
  std::optional<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// `GET /` on server `port` every 20 ms for `window` (each must answer 200): the latencies in ms,
// sorted.
std::vector<double> probe_welcome(std::uint16_t port, std::chrono::milliseconds window) {
  HttpClient probe(port);
  std::vector<double> ms;
  const auto until = Clock::now() + window;
  while (Clock::now() < until) {
    const auto t0 = Clock::now();
    EXPECT_EQ(probe.get("/").status, 200u);
    ms.push_back(seconds_since(t0) * 1000);
    std::this_thread::sleep_for(20ms);
  }
  std::sort(ms.begin(), ms.end());
  return ms;
}

// 100,000 ids took minutes when each new member of the parsed body (and of the answer) was found
// by a linear scan; it now takes about a second. The bound leaves room for sanitizer builds.
TEST_F(HardeningTest, RevsDiffWithManyIdsIsNotQuadratic) {
  ASSERT_EQ(call(verb::put, "/db/d5", "{}").status, 201u);
  std::string body = "{";
  for (int i = 0; i < 100000; ++i) {
    if (i > 0) body += ',';
    body += "\"d" + std::to_string(i) + "\":[\"1-" + std::string(32, 'a') + "\"]";
  }
  body += '}';
  for (const char* path : {"/db/_revs_diff", "/db/_missing_revs"}) {
    const auto start = Clock::now();
    auto r = call(verb::post, path, body);
    const double took = seconds_since(start);
    ASSERT_EQ(r.status, 200u) << r.body;
    EXPECT_LT(took, 20.0) << path;
    // An answer this large (about 5 MB) is streamed, not built whole before it is sent.
    EXPECT_EQ(r.header(beast_http::field::transfer_encoding), "chunked") << path;
    EXPECT_EQ(r.body.back(), '\n');
    // nlohmann::json (a std::map): ordered_json would parse 100,000 members quadratically.
    nlohmann::json j = nlohmann::json::parse(r.body);
    if (std::string(path) == "/db/_missing_revs") j = j["missing_revs"];
    EXPECT_EQ(j.size(), 100000u);
    const nlohmann::json missing = nlohmann::json::array({"1-" + std::string(32, 'a')});
    for (const char* id : {"d99999", "d5"}) {
      const nlohmann::json expected =
          std::string(path) == "/db/_missing_revs" ? missing : nlohmann::json{{"missing", missing}};
      EXPECT_EQ(j[id], expected) << id;
    }
  }
  // A small answer still goes out whole, with its length.
  auto small = call(verb::post, "/db/_revs_diff", R"({"d5":["1-abc"]})");
  EXPECT_EQ(small.body, R"({"d5":{"missing":["1-abc"]}})"
                        "\n");
  EXPECT_NE(small.header(beast_http::field::content_length), "");
}

// A filter=_doc_ids feed over more ids than it looks up scans the changes and tests each id
// against a sorted copy (it was a linear search per change).
TEST_F(HardeningTest, ChangesDocIdsFilterWithManyIds) {
  std::string docs = "{\"docs\":[";
  for (int i = 0; i < 2000; ++i)
    docs += std::string(i ? "," : "") + "{\"_id\":\"d" + std::to_string(i) + "\"}";
  ASSERT_EQ(call(verb::post, "/db/_bulk_docs", docs + "]}").status, 201u);
  std::string ids = "{\"doc_ids\":[";
  for (int i = 0; i < 60000; i += 2)
    ids += std::string(i ? "," : "") + "\"d" + std::to_string(i) + "\"";
  const auto start = Clock::now();
  auto r = call(verb::post, "/db/_changes?filter=_doc_ids", ids + "]}");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_LT(seconds_since(start), 20.0);
  const Json j = Json::parse(r.body);
  EXPECT_EQ(j["results"].size(), 1000u);  // the even ids below 2000
  for (const Json& row : j["results"]) {
    const std::string id = row["id"];
    EXPECT_EQ(std::stoi(id.substr(1)) % 2, 0) << id;
  }
}

// Integers a double cannot hold and non-zero values a double would round to 0 read back with the
// digits they were written with, through every read path; a number beyond a double's range is
// refused with a reason, and nothing is written.
TEST_F(HardeningTest, NumbersReadBackExactly) {
  const std::string big = std::string(100, '9');
  const std::string body = "{\"big\":" + big + ",\"neg\":-" + big +
                           ",\"u64\":18446744073709551615,\"tiny\":-1e-400,"
                           "\"nested\":[1.5,{\"x\":123456789012345678901234567890}]}";
  const std::string kept = "\"big\":" + big + ",\"neg\":-" + big +
                           ",\"u64\":18446744073709551615,\"tiny\":-1e-400,"
                           "\"nested\":[1.5,{\"x\":123456789012345678901234567890}]}";
  auto put = call(verb::put, "/db/n", body);
  ASSERT_EQ(put.status, 201u) << put.body;
  EXPECT_NE(get("/db/n").body.find(kept), std::string::npos) << get("/db/n").body;
  EXPECT_NE(get("/db/_all_docs?include_docs=true").body.find(kept), std::string::npos);
  EXPECT_NE(get("/db/_changes?include_docs=true").body.find(kept), std::string::npos);
  // A replicated write (new_edits=false) and POST /db keep them too.
  auto bulk = call(verb::post, "/db/_bulk_docs",
                   R"({"new_edits":false,"docs":[{"_id":"r","_rev":"1-)" + std::string(32, 'b') +
                       "\"," + body.substr(1) + "]}");
  ASSERT_EQ(bulk.status, 201u) << bulk.body;
  EXPECT_NE(get("/db/r").body.find(kept), std::string::npos) << get("/db/r").body;
  auto post = call(verb::post, "/db", "{\"_id\":\"p\"," + body.substr(1));
  ASSERT_EQ(post.status, 201u) << post.body;
  EXPECT_NE(get("/db/p").body.find(kept), std::string::npos);

  auto huge = call(verb::put, "/db/h", R"({"a":1e400})");
  EXPECT_EQ(huge.status, 400u);
  EXPECT_EQ(huge.json()["reason"], "invalid UTF-8 JSON: number out of range at byte 10");
  EXPECT_EQ(get("/db/h").status, 404u);
}

// Nesting deeper than the bound is refused while parsing and says so.
TEST_F(HardeningTest, TooDeepJsonSaysWhy) {
  auto r =
      call(verb::put, "/db/deep", "{\"a\":" + std::string(600, '[') + std::string(600, ']') + "}");
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(r.json()["reason"], "invalid UTF-8 JSON: nested deeper than 512 levels");
}

// A body with many members and duplicate names: linear time, the last value wins in the place of
// the first, as before.
TEST_F(HardeningTest, ManyMembersAndDuplicateNames) {
  std::string body = "{\"a\":1,";
  for (int i = 0; i < 50000; ++i)
    body += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  body += "\"a\":2}";
  auto r = call(verb::put, "/db/many", body);
  ASSERT_EQ(r.status, 201u) << r.body;
  const std::string text = get("/db/many").body;
  const nlohmann::json doc = nlohmann::json::parse(text);
  EXPECT_EQ(doc.size(), 50003u);                                  // _id, _rev, a, k0..k49999
  EXPECT_NE(text.find(R"(","a":2,"k0":0,)"), std::string::npos);  // a in its first place
  EXPECT_EQ(doc["k49999"], 49999);
}

// heartbeat and timeout are capped by [chttpd] changes_timeout (couch_changes:get_changes_timeout):
// a heartbeat of 2^63-1 ms used to overflow into a busy loop of newlines.
TEST_F(HardeningTest, HugeHeartbeatIsCappedNotABusyLoop) {
  start_with_changes_timeout(400);
  FeedClient feed(port(), "/db/_changes?feed=continuous&since=now&heartbeat=9223372036854775807");
  ASSERT_TRUE(feed.wait_head(5s));
  feed.wait_end(1500ms);
  // One newline per 400 ms: about 3 in 1.5 s (a busy loop sent thousands).
  std::size_t newlines = std::count(feed.body().begin(), feed.body().end(), '\n');
  EXPECT_GE(newlines, 1u);
  EXPECT_LE(newlines, 6u);
  FeedClient digits(port(),
                    "/db/_changes?feed=continuous&since=now&heartbeat=" + std::string(40, '9'));
  ASSERT_TRUE(digits.wait_head(5s));
  digits.wait_end(1000ms);
  EXPECT_LE(std::count(digits.body().begin(), digits.body().end(), '\n'), 5);
}

TEST_F(HardeningTest, LongpollTimeoutIsAnIntegerAndCapped) {
  start_with_changes_timeout(300);
  for (const char* bad : {"1e3", "1.5", "-5", "abc", ""}) {
    auto r = get(std::string("/db/_changes?feed=longpoll&since=now&timeout=") + bad);
    EXPECT_EQ(r.status, 400u) << bad;
    EXPECT_EQ(r.json()["reason"], std::string("Invalid timeout value: ") + bad);
  }
  for (const std::string& huge : {std::string("9300000000000"), std::string(30, '9')}) {
    const auto start = Clock::now();
    auto r = get("/db/_changes?feed=longpoll&since=now&timeout=" + huge);
    const double took = seconds_since(start);
    EXPECT_EQ(r.status, 200u);
    EXPECT_GE(took, 0.25) << huge;  // waited (a wrapped value returned at once)
    EXPECT_LT(took, 5.0) << huge;   // for changes_timeout, not for ever
  }
  for (const char* bad : {"1.5", "abc", "false"}) {
    auto r = get(std::string("/db/_changes?feed=continuous&heartbeat=") + bad);
    EXPECT_EQ(r.status, 400u) << bad;
    EXPECT_EQ(r.json()["reason"],
              "Invalid heartbeat value. Expecting a positive integer value (in milliseconds).");
  }
  auto zero = get("/db/_changes?feed=continuous&heartbeat=0");
  EXPECT_EQ(zero.json()["reason"],
            "The heartbeat value should be a positive integer (in milliseconds).");
}

// Keys that are not strings name no document: CouchDB answers each as not_found with the key as
// given (they were turned into the strings "1", "null", ...). _local_docs leaves them out.
TEST_F(HardeningTest, AllDocsKeysThatAreNotStrings) {
  ASSERT_EQ(call(verb::put, "/db/1", "{}").status, 201u);
  ASSERT_EQ(call(verb::put, "/db/null", "{}").status, 201u);
  ASSERT_EQ(call(verb::put, "/db/_local/l", "{}").status, 201u);
  auto r = call(verb::post, "/db/_all_docs", R"({"keys":[1,null,{},[],1.5,true,"1"]})");
  ASSERT_EQ(r.status, 200u) << r.body;
  const Json rows = r.json()["rows"];
  ASSERT_EQ(rows.size(), 7u);
  EXPECT_EQ(rows[0], (Json{{"key", 1}, {"error", "not_found"}}));
  EXPECT_EQ(rows[1], (Json{{"key", nullptr}, {"error", "not_found"}}));
  EXPECT_EQ(rows[2], (Json{{"key", Json::object()}, {"error", "not_found"}}));
  EXPECT_EQ(rows[3], (Json{{"key", Json::array()}, {"error", "not_found"}}));
  EXPECT_EQ(rows[4], (Json{{"key", 1.5}, {"error", "not_found"}}));
  EXPECT_EQ(rows[5], (Json{{"key", true}, {"error", "not_found"}}));
  EXPECT_EQ(rows[6]["id"], "1");
  auto local = call(verb::post, "/db/_local_docs", R"({"keys":[1,"_local/nope","_local/l"]})");
  ASSERT_EQ(local.status, 200u) << local.body;
  ASSERT_EQ(local.json()["rows"].size(), 1u);
  EXPECT_EQ(local.json()["rows"][0]["id"], "_local/l");
}

// A request that cannot be read past gets one answer that says why, then the connection closes.
TEST_F(HardeningTest, UnreadableRequestsAreAnsweredThenClosed) {
  {  // headers beyond max_header_bytes (64 KiB): 431, not a silent close
    HttpClient c(port());
    c.send_raw("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(70000, 'a') + "\r\n\r\n");
    auto r = c.read_response();
    EXPECT_EQ(r.status, 431u);
    EXPECT_EQ(r.json()["reason"], "Request header fields too large");
    EXPECT_TRUE(c.wait_closed(5s));
  }
  {  // malformed framing: 400, then close
    HttpClient c(port());
    c.send_raw("POST /db HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}");
    auto r = c.read_response();
    EXPECT_EQ(r.status, 400u);
    EXPECT_EQ(r.json()["error"], "bad_request");
    EXPECT_TRUE(c.wait_closed(5s));
  }
  {  // a transfer coding other than chunked is refused, not ignored
    HttpClient c(port());
    c.send_raw(
        "POST /db HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: gzip, chunked\r\n\r\n9\r\n{\"_id\":1}\r\n0\r\n\r\n");
    auto r = c.read_response();
    EXPECT_EQ(r.status, 501u);
    EXPECT_EQ(r.json()["reason"], "Transfer-Encoding gzip, chunked is not supported");
    EXPECT_TRUE(c.wait_closed(5s));
  }
  {  // plain chunked bodies still work
    HttpClient c(port());
    c.send_raw(
        "PUT /db/chunked HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n");
    EXPECT_EQ(c.read_response().status, 201u);
  }
  EXPECT_EQ(get("/db/chunked").json()["a"], 1);
}

// Silent and slow clients lose their slot quickly: a new connection that sends nothing is closed
// after header_timeout, a body that stops arriving after body_timeout.
TEST_F(HardeningTest, SilentNewConnectionsAndStalledBodiesAreClosed) {
  const auto ini = dir_.path() / "timeouts.ini";
  std::ofstream(ini) << "[chaise]\nheader_timeout_seconds = 1\nbody_timeout_seconds = 1\n";
  start({"--config", ini.string()});
  HttpClient silent(port());
  auto t0 = Clock::now();
  EXPECT_TRUE(silent.wait_closed(10s));
  EXPECT_LT(seconds_since(t0), 5.0);
  HttpClient stalled(port());
  stalled.send_raw(
      "PUT /db/x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 100\r\n\r\n{\"a\":");
  t0 = Clock::now();
  EXPECT_TRUE(stalled.wait_closed(10s));
  EXPECT_LT(seconds_since(t0), 5.0);
  // A keep-alive connection that has sent a request may still wait (idle_timeout, 300 s).
  HttpClient kept(port());
  EXPECT_EQ(kept.get("/").status, 200u);
  EXPECT_FALSE(kept.wait_closed(1500ms));
  EXPECT_EQ(get("/db/x").status, 404u);
}

// One address cannot take every connection slot.
TEST_F(HardeningTest, ConnectionsPerAddressAreCapped) {
  const auto ini = dir_.path() / "per_address.ini";
  std::ofstream(ini) << "[chaise]\nmax_connections_per_address = 3\n";
  start({"--config", ini.string()});  // client_ holds one
  HttpClient second(port()), third(port());
  EXPECT_EQ(second.get("/").status, 200u);
  EXPECT_EQ(third.get("/").status, 200u);
  HttpClient fourth(port());
  EXPECT_TRUE(fourth.wait_closed(5s));  // refused right after accept
  EXPECT_EQ(get("/").status, 200u);     // the others keep working
}

// Bodies held at once are bounded over all connections: beyond it, 503 with Retry-After.
TEST_F(HardeningTest, RequestBytesInFlightAreBounded) {
  const auto ini = dir_.path() / "in_flight.ini";
  std::ofstream(ini) << "[chaise]\nmax_request_bytes_in_flight = 2097152\n";
  start({"--config", ini.string()});
  // One connection announces 1.5 MiB and sends part of it: its bytes are reserved.
  HttpClient slow(port());
  slow.send_raw(
      "PUT /db/a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 1572864\r\n\r\n{\"a\":\"");
  std::this_thread::sleep_for(200ms);
  auto refused = call(verb::put, "/db/b", "{\"b\":\"" + std::string(1 << 20, 'x') + "\"}");
  EXPECT_EQ(refused.status, 503u);
  EXPECT_EQ(refused.header("Retry-After"), "1");
  EXPECT_EQ(refused.json()["error"], "service_unavailable");
  client_ = std::make_unique<HttpClient>(port(), 60s);  // the refused connection was closed
  // Small requests still fit, and once the slow one is gone the large one does too.
  EXPECT_EQ(call(verb::put, "/db/c", "{}").status, 201u);
  slow.send_raw(std::string(1572864 - 6 - 2, 'y') + "\"}");
  EXPECT_EQ(slow.read_response().status, 201u);
  EXPECT_EQ(call(verb::put, "/db/b", "{\"b\":\"" + std::string(1 << 20, 'x') + "\"}").status, 201u);
}

// The value of `chaise_memory_bytes{part="<part>"}` in the Prometheus text, or -1.
long long memory_gauge(const std::string& text, const std::string& part) {
  return metric_value(text, "chaise_memory_bytes{part=\"" + part + "\"}");
}

// Reads of one committed version seek the iterator an earlier one left instead of building their
// own (storage: SharedSnapshot's shelf), and answer the same; reads after a write see the write.
TEST_F(HardeningTest, ReadsOfOneVersionReuseIterators) {
  if (servers_run_on_foundationdb()) GTEST_SKIP() << "the embedded store's shared iterators";
  const std::string reused = "chaise_store_iterators_reused_total";
  auto put = call(verb::put, "/db/doc", R"({"n":1})");
  ASSERT_EQ(put.status, 201u);
  const long long before = metric_value(get("/_node/_local/_prometheus").body, reused);
  ASSERT_GE(before, 0);
  // Each reads the document's revisions range (its leaves), the later ones at the same version.
  auto leaves = [&](const std::string& want, const std::string& gone) {
    for (int i = 0; i < 5; ++i) {
      auto r = get("/db/doc?open_revs=all");
      ASSERT_EQ(r.status, 200u);
      EXPECT_NE(r.body.find(want), std::string::npos) << r.body;
      EXPECT_EQ(r.body.find(gone), std::string::npos) << r.body;
    }
  };
  leaves(R"("n":1)", R"("n":2)");
  const long long after = metric_value(get("/_node/_local/_prometheus").body, reused);
  EXPECT_GE(after, before + 1);
  ASSERT_EQ(call(verb::put, "/db/doc",
                 R"({"n":2,"_rev":")" + put.json()["rev"].get<std::string>() + "\"}")
                .status,
            201u);
  leaves(R"("n":2)", R"("n":1)");
  EXPECT_GE(metric_value(get("/_node/_local/_prometheus").body, reused), after + 1);
}

// Edits of a plain document over HTTP overwrite the superseded revision's record instead of
// clearing its range (a RocksDB range tombstone each), and every revision still reads back.
TEST_F(HardeningTest, EditsOfAPlainDocumentClearNoRange) {
  if (servers_run_on_foundationdb()) GTEST_SKIP() << "the embedded store's range tombstones";
  const std::string clears = "chaise_store_range_clears_total";
  auto body = [](int n) {
    return R"({"n":)" + std::to_string(n) + R"(,"text":")" + std::string(500, 't') + "\"}";
  };
  auto put = call(verb::put, "/db/doc", body(0));
  ASSERT_EQ(put.status, 201u);
  std::vector<std::string> revs{put.json()["rev"].get<std::string>()};
  const long long before = metric_value(get("/_node/_local/_prometheus").body, clears);
  ASSERT_GE(before, 0);
  for (int n = 1; n <= 4; ++n) {
    auto r = call(verb::put, "/db/doc?rev=" + revs.back(), body(n));
    ASSERT_EQ(r.status, 201u) << r.body;
    revs.push_back(r.json()["rev"].get<std::string>());
  }
  EXPECT_EQ(metric_value(get("/_node/_local/_prometheus").body, clears), before);
  for (int n = 0; n <= 4; ++n) {
    auto r = get("/db/doc?rev=" + revs[static_cast<std::size_t>(n)]);
    ASSERT_EQ(r.status, 200u) << r.body;
    EXPECT_EQ(r.json()["n"], n);
    EXPECT_EQ(r.json()["text"], std::string(500, 't'));
  }
  // A deletion clears nothing either (its tombstone is a new revision); the database's deletion
  // is one cleared range.
  ASSERT_EQ(call(verb::delete_, "/db/doc?rev=" + revs.back()).status, 200u);
  EXPECT_EQ(metric_value(get("/_node/_local/_prometheus").body, clears), before);
  ASSERT_EQ(call(verb::delete_, "/db").status, 200u);
  EXPECT_GE(metric_value(get("/_node/_local/_prometheus").body, clears), before + 1);
}

// The conflict window's memory is bounded by [chaise] conflict_window_bytes: writes that go past it
// shorten the window instead of growing it, concurrent writers still conflict correctly, and once
// the writes stop the window empties (its memory is not kept until the next commit).
TEST_F(HardeningTest, ConflictWindowMemoryIsBounded) {
  const auto ini = dir_.path() / "window.ini";
  std::ofstream(ini) << "[chaise]\nconflict_window_bytes = 131072\n";
  start({"--config", ini.string()});
  std::vector<std::thread> writers;
  std::atomic<int> created{0};
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      HttpClient c(port(), 60s);
      for (int b = 0; b < 10; ++b) {
        Json docs = Json::array();
        for (int i = 0; i < 100; ++i)
          docs.push_back({{"_id", "w" + std::to_string(w) + "-" + std::to_string(b * 100 + i)}});
        auto r = c.request(verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump(), kJson);
        if (r.status == 201u)
          for (const auto& row : r.json()) created += row.contains("ok") ? 1 : 0;
      }
    });
  }
  // Meanwhile one document updated by racing clients: every acknowledged update is kept, none
  // twice from the same revision.
  ASSERT_EQ(call(verb::put, "/db/counter", R"({"n":0})").status, 201u);
  std::atomic<int> acked{0};
  std::vector<std::thread> racers;
  for (int t = 0; t < 4; ++t) {
    racers.emplace_back([&] {
      HttpClient c(port(), 60s);
      for (int i = 0; i < 25; ++i) {
        Json doc = c.get("/db/counter").json();
        doc["n"] = doc["n"].get<int>() + 1;
        if (c.request(verb::put, "/db/counter", doc.dump(), kJson).status == 201u) ++acked;
      }
    });
  }
  for (auto& t : writers) t.join();
  for (auto& t : racers) t.join();
  EXPECT_EQ(created.load(), 4000);
  EXPECT_EQ(get("/db/counter").json()["n"], acked.load());
  EXPECT_EQ(get("/db").json()["doc_count"], 4001);
  const std::string text = get("/_node/_local/_prometheus").body;
  const long long window = memory_gauge(text, "conflict_window");
  // One version over the bound at most: the newest batch is always kept.
  EXPECT_GE(window, 0) << text;
  EXPECT_LE(window, 131072 + 64 * 1024) << text;
  for (const char* part : {"block_cache", "memtables", "table_readers"})
    EXPECT_GE(memory_gauge(text, part), 0) << part;
  // Idle: what aged out of the 5 s window is forgotten without another commit. The newest
  // version stays: the transaction-ID janitor's last pass, which cleared the ids of the last
  // second's writes (about 140 keys here).
  ASSERT_EQ(call(verb::put, "/db/last", "{}").status, 201u);
  std::this_thread::sleep_for(6500ms);
  const std::string idle = get("/_node/_local/_prometheus").body;
  EXPECT_LT(memory_gauge(idle, "conflict_window"), 48 * 1024) << idle;
}

// The index and filter blocks of table files: in the block cache by default and with
// table_index_in_cache = true, beside it (reported as table_readers) with false. Small memtables
// make the writes flush. A store written with them beside the cache reads the same after a
// restart with the default.
TEST_F(HardeningTest, TableIndexInCacheMovesIndexBlocksIntoTheCache) {
  if (servers_run_on_foundationdb()) GTEST_SKIP() << "the embedded store's table files";
  // Long ids and values that do not compress make the index blocks (one key per data block, about
  // 50 KB here) far outweigh the table readers' own overhead of about 2 KB a file, whose count
  // varies with flush timing.
  const std::string prefix(600, 'k');
  auto id = [&](int i) { return prefix + std::to_string(i); };
  auto value = [](int i) {
    std::mt19937 bits(static_cast<unsigned>(i));
    std::string v(500, ' ');
    for (char& c : v) c = static_cast<char>('a' + bits() % 26);
    return v;
  };
  auto write_docs = [&] {
    for (int b = 0; b < 8; ++b) {
      Json docs = Json::array();
      for (int i = 0; i < 500; ++i)
        docs.push_back({{"_id", id(b * 500 + i)}, {"v", value(b * 500 + i)}});
      ASSERT_EQ(call(verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump()).status, 201u);
    }
  };
  auto expect_reads = [&] {
    for (int i = 0; i < 4000; i += 397) {
      auto r = get("/db/" + id(i));
      ASSERT_EQ(r.status, 200u);
      EXPECT_EQ(r.json()["v"], value(i));
    }
    EXPECT_EQ(get("/db").json()["doc_count"], 4000);
  };
  // The server's arguments: small memtables, and the setting unless empty (the default).
  auto config = [&](const std::string& setting) {
    const auto ini = dir_.path() / "tables.ini";
    std::ofstream(ini) << "[chaise]\nwrite_buffer_bytes = 1048576\n"
                       << (setting.empty() ? "" : "table_index_in_cache = " + setting + "\n");
    return std::vector<std::string>{"--config", ini.string()};
  };
  long long beside = -1;
  for (const std::string setting : {"false", "true", ""}) {
    SCOPED_TRACE("table_index_in_cache = " + setting);
    start(config(setting));
    write_docs();
    expect_reads();
    const std::string text = get("/_node/_local/_prometheus").body;
    const long long readers = memory_gauge(text, "table_readers");
    if (setting == "false") {
      beside = readers;
      EXPECT_GT(readers, 0) << text;  // 4 MB of documents went to table files
      reopen(config(""));             // the tables written beside the cache, read under the default
      expect_reads();
    } else {
      EXPECT_LT(readers, beside) << text;
      EXPECT_GT(memory_gauge(text, "block_cache"), 0) << text;
    }
  }
}

// The memtables are charged to the block cache: once reads have filled it, writes that fill the
// memtables take their room from its blocks, so the memory parts block_cache and memtables
// together stay within [chaise] block_cache_bytes.
TEST_F(HardeningTest, MemtablesShareTheBlockCacheBound) {
  if (servers_run_on_foundationdb())
    GTEST_SKIP() << "the embedded store's memtables and block cache";
  const auto ini = dir_.path() / "shared.ini";
  // Memtables of 3 MiB each (half of write_buffer_bytes): the writes below flush none.
  std::ofstream(ini) << "[chaise]\nblock_cache_bytes = 4194304\nwrite_buffer_bytes = 6291456\n";
  const std::vector<std::string> args{"--config", ini.string()};
  start(args);
  const std::string v(500, 'v');
  auto write_docs = [&](int first, int count) {
    for (int b = first; b < first + count; b += 1000) {
      Json docs = Json::array();
      for (int i = b; i < b + 1000; ++i)
        docs.push_back({{"_id", "d" + std::to_string(i)}, {"v", v}});
      ASSERT_EQ(call(verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump()).status, 201u);
    }
  };
  auto read_docs = [&] {  // every block of the first 12,000 documents, through the cache
    for (int i = 0; i < 12000; i += 4) {
      auto r = get("/db/d" + std::to_string(i));
      ASSERT_EQ(r.status, 200u);
      ASSERT_EQ(r.json()["v"], v);
    }
  };
  write_docs(0, 12000);
  reopen(args);  // the documents in table files, the memtables empty
  read_docs();
  const std::string full = get("/_node/_local/_prometheus").body;
  // 6 MB of bodies read (LZ4 makes them 0.9 MB on disk; the cache holds them uncompressed): the
  // cache is full, about 3 MiB of blocks beside the empty memtables' reservations.
  EXPECT_GT(memory_gauge(full, "block_cache"), 5 << 19) << full;
  write_docs(12000, 2000);  // about 3.4 MiB of memtables in all families
  read_docs();
  const std::string text = get("/_node/_local/_prometheus").body;
  const long long memtables = memory_gauge(text, "memtables");
  EXPECT_GT(memtables, 2 << 20) << text;
  // Blocks made room: without the charge the two reached 7.6 MB. The bound holds per
  // shard of the cache (8 of 512 KiB here), and the reservations come in 256 KiB steps, each in
  // one shard: some shards run over while others keep blocks, so it holds to about a MiB.
  EXPECT_LE(memory_gauge(text, "block_cache") + memtables, (4 << 20) + (3 << 19)) << text;
}

// CPU-heavy requests run on the worker pool, not on the threads that read and write connections:
// while 8 clients keep sending the heaviest requests above, `GET /` still answers promptly.
TEST_F(HardeningTest, HeavyRequestsDoNotHoldUpCheapOnes) {
  std::string revs = "{";
  for (int i = 0; i < 80000; ++i) {
    if (i > 0) revs += ',';
    revs += "\"d" + std::to_string(i) + "\":[\"1-" + std::string(32, 'a') + "\"]";
  }
  revs += '}';
  std::string docs = "{\"docs\":[";
  for (int i = 0; i < 2000; ++i)
    docs += std::string(i ? "," : "") + "{\"v\":\"" + std::string(200, 'v') + "\"}";
  docs += "]}";
  std::atomic<bool> stop{false};
  std::atomic<int> heavy_done{0};
  std::vector<std::thread> heavy;
  for (int t = 0; t < 8; ++t) {
    heavy.emplace_back([&, t] {
      HttpClient c(port(), 120s);
      while (!stop.load()) {
        const bool diff = t % 2 == 0;
        auto r = c.request(verb::post, diff ? "/db/_revs_diff" : "/db/_bulk_docs",
                           diff ? revs : docs, kJson);
        if (r.status == 200u || r.status == 201u) heavy_done.fetch_add(1);
      }
    });
  }
  std::this_thread::sleep_for(500ms);  // the heavy requests are under way
  const std::vector<double> ms = probe_welcome(port(), 4s);
  stop.store(true);
  for (auto& t : heavy) t.join();
  const double p50 = ms[ms.size() / 2], p99 = ms[ms.size() * 99 / 100];
  std::printf(
      "GET / under 8 heavy clients: %zu probes, p50 %.2f ms, p99 %.2f ms, max %.2f ms; "
      "%d heavy requests done\n",
      ms.size(), p50, p99, ms.back(), heavy_done.load());
  EXPECT_GT(heavy_done.load(), 0);  // the heavy requests did run (and finish) meanwhile
  // Measured p99 on the 2-core machine: see the issue note. The bound leaves room for sanitizer
  // builds and a loaded CI machine; without the worker pool a probe waited for whole requests
  // (seconds).
  EXPECT_LT(p99, 250.0);
}

// A validate_doc_update may run for up to os_process_timeout; writes to a database that has one
// run on the worker pool, so `GET /` still answers promptly while such writes keep coming.
TEST_F(HardeningTest, SlowValidationDoesNotHoldUpCheapOnes) {
  const Json ddoc = {{"validate_doc_update",
                      "function(newDoc) { var t = Date.now(); while (Date.now() - t < 400) {} }"}};
  ASSERT_EQ(call(verb::put, "/db/_design/slow", ddoc.dump()).status, 201u);
  ASSERT_EQ(call(verb::put, "/db/first", "{}").status, 201u);  // the server learns of the validator
  std::atomic<bool> stop{false};
  std::atomic<int> writes{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 6; ++t) {
    writers.emplace_back([&] {
      HttpClient c(port(), 60s);
      while (!stop.load()) {
        if (c.request(verb::post, "/db", "{\"v\":1}", kJson).status == 201u) writes.fetch_add(1);
      }
    });
  }
  std::this_thread::sleep_for(300ms);
  const std::vector<double> ms = probe_welcome(port(), 3s);
  stop.store(true);
  for (auto& t : writers) t.join();
  const double p99 = ms[ms.size() * 99 / 100];
  std::printf(
      "GET / under 6 writers with a 400 ms validator: %zu probes, p50 %.2f ms, p99 %.2f ms, "
      "%d writes\n",
      ms.size(), ms[ms.size() / 2], p99, writes.load());
  EXPECT_GT(writes.load(), 0);
  // On the io threads, a probe behind a write waited for its 400 ms validator.
  EXPECT_LT(p99, 250.0);
}

// Checking a password not verified before costs a PBKDF2 hash (about 0.15 s at the iterations
// configured here); that runs on the worker pool, so `GET /` still answers promptly while clients
// keep sending unknown passwords (up to the failed-login throttle).
TEST_F(HardeningTest, PasswordHashingDoesNotHoldUpCheapOnes) {
  const auto ini = dir_.path() / "admins.ini";
  {
    std::ofstream out(ini);
    out << "[chttpd_auth]\niterations = 500000\n[admins]\n";
    for (int i = 0; i < 10; ++i) out << "a" << i << " = secret" << i << "\n";
  }
  server_.reset();
  server_.emplace(dir_.path() / "auth-data",
                  std::vector<std::string>{"--no-admin-party", "--config", ini.string()});
  std::atomic<bool> stop{false};
  std::atomic<int> unauthorized{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 6; ++t) {
    clients.emplace_back([&, t] {
      HttpClient c(port(), 60s);
      for (int n = 0; !stop.load(); ++n) {
        const std::string cred =
            "a" + std::to_string((t + 6 * n) % 10) + ":wrong" + std::to_string(n);
        const auto r = c.request(verb::get, "/_all_dbs", {},
                                 {{"Authorization", "Basic " + core::base64_encode(cred)}});
        if (r.status == 401u) unauthorized.fetch_add(1);
      }
    });
  }
  std::this_thread::sleep_for(300ms);
  const std::vector<double> ms = probe_welcome(port(), 3s);
  stop.store(true);
  for (auto& t : clients) t.join();
  const double p99 = ms[ms.size() * 99 / 100];
  std::printf(
      "GET / under 6 clients sending unknown passwords: %zu probes, p50 %.2f ms, "
      "p99 %.2f ms, %d answered 401\n",
      ms.size(), ms[ms.size() / 2], p99, unauthorized.load());
  EXPECT_GT(unauthorized.load(), 2);  // passwords were checked (hashed) meanwhile
  EXPECT_LT(p99, 150.0);  // on the io threads, a probe waited behind hashes of 0.15 s each
}

}  // namespace
}  // namespace chaise::test
