// GET /_db_updates against the real server: CouchDB 3.5's rows and framing for each feed type,
// one row per (type, database) at its newest event however many updates came, live feeds woken
// by a write to any database, and CouchDB's answers to bad parameters and non-admins.
#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/http/feed_client.h"
#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;

class DbUpdatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.emplace(dir_.path() / "data");
    client_ = std::make_unique<HttpClient>(server_->port(), 60s);
  }
  HttpResponse call(verb method, std::string_view target, std::string body = {}) {
    return client_->request(method, target, std::move(body),
                            {{"Content-Type", "application/json"}});
  }
  // The normal feed's rows as "type:db_name", in order.
  std::vector<std::string> events(const std::string& query = "") {
    auto r = call(verb::get, "/_db_updates" + query);
    EXPECT_EQ(r.status, 200u) << r.body;
    std::vector<std::string> out;
    const Json body = r.json();
    for (const auto& row : body["results"])
      out.push_back(row["type"].get<std::string>() + ":" + row["db_name"].get<std::string>());
    return out;
  }
  // Waits until the feed's newest row is `event` (the recorder folds events in the background).
  bool newest_is(const std::string& event) {
    return eventually([&] {
      auto e = events("?descending=true&limit=1");
      return !e.empty() && e[0] == event;
    });
  }
  TempDir dir_;
  std::optional<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(DbUpdatesTest, OneRowPerDatabaseAndEventAtItsNewestSequence) {
  ASSERT_EQ(call(verb::put, "/a").status, 201u);
  ASSERT_EQ(call(verb::put, "/b").status, 201u);
  for (int i = 0; i < 20; ++i)
    ASSERT_EQ(call(verb::put, "/a/d" + std::to_string(i), "{}").status, 201u);
  ASSERT_EQ(call(verb::delete_, "/b").status, 200u);
  ASSERT_TRUE(newest_is("deleted:b"));
  EXPECT_EQ(events(),
            (std::vector<std::string>{"created:a", "created:b", "updated:a", "deleted:b"}));
  // Another update of a moves its one row to the end.
  ASSERT_EQ(call(verb::put, "/a/late", "{}").status, 201u);
  ASSERT_TRUE(newest_is("updated:a"));
  EXPECT_EQ(events(),
            (std::vector<std::string>{"created:a", "created:b", "deleted:b", "updated:a"}));

  // Paging with since and limit, and descending.
  auto first = call(verb::get, "/_db_updates?limit=2").json();
  ASSERT_EQ(first["results"].size(), 2u);
  EXPECT_EQ(first["last_seq"], first["results"][1]["seq"]);
  EXPECT_EQ(events("?since=" + first["last_seq"].get<std::string>()),
            (std::vector<std::string>{"deleted:b", "updated:a"}));
  EXPECT_EQ(events("?descending=true&limit=2"),
            (std::vector<std::string>{"updated:a", "deleted:b"}));
  EXPECT_TRUE(events("?since=now").empty());
  // The framing of a normal feed, as CouchDB writes it.
  auto raw = call(verb::get, "/_db_updates?limit=1");
  EXPECT_TRUE(
      raw.body.starts_with("{\"results\":[\n{\"db_name\":\"a\",\"type\":\"created\",\"seq\":"))
      << raw.body;
  EXPECT_TRUE(raw.body.ends_with("\"}\n],\n\"last_seq\":" + raw.json()["last_seq"].dump() + "}\n"))
      << raw.body;
}

TEST_F(DbUpdatesTest, LongpollWakesOnAWriteToAnyDatabase) {
  ASSERT_EQ(call(verb::put, "/a").status, 201u);
  ASSERT_TRUE(newest_is("created:a"));
  std::thread writer([port = server_->port()] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    HttpClient other(port);
    other.request(verb::put, "/a/x", "{}", {{"Content-Type", "application/json"}});
  });
  const auto started = std::chrono::steady_clock::now();
  auto r = call(verb::get, "/_db_updates?feed=longpoll&since=now&timeout=20000");
  const auto waited = std::chrono::steady_clock::now() - started;
  writer.join();
  ASSERT_EQ(r.status, 200u);
  const Json body = r.json();
  ASSERT_EQ(body["results"].size(), 1u) << r.body;
  EXPECT_EQ(body["results"][0]["db_name"], "a");
  EXPECT_EQ(body["results"][0]["type"], "updated");
  EXPECT_LT(waited, std::chrono::seconds(10));
  // Without a write, a longpoll feed ends at its timeout with nothing.
  r = call(verb::get, "/_db_updates?feed=longpoll&since=now&timeout=100");
  EXPECT_EQ(r.json()["results"].size(), 0u);
  EXPECT_EQ(r.json()["last_seq"], body["last_seq"]);
}

TEST_F(DbUpdatesTest, ContinuousAndEventsourceFraming) {
  ASSERT_EQ(call(verb::put, "/a").status, 201u);
  ASSERT_TRUE(newest_is("created:a"));
  auto r = call(verb::get, "/_db_updates?feed=continuous&timeout=100");
  ASSERT_EQ(r.status, 200u);
  std::vector<Json> lines;
  std::size_t at = 0;
  while (at < r.body.size()) {
    const std::size_t nl = r.body.find('\n', at);
    lines.push_back(Json::parse(r.body.substr(at, nl - at)));
    at = nl + 1;
  }
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[lines.size() - 2]["db_name"], "a");
  EXPECT_EQ(lines.back().size(), 1u);
  EXPECT_EQ(lines.back()["last_seq"], lines[lines.size() - 2]["seq"]);

  r = call(verb::get, "/_db_updates?feed=eventsource&since=now&timeout=100");
  EXPECT_EQ(r.header(beast_http::field::content_type), "text/event-stream");
  r = call(verb::get, "/_db_updates?feed=eventsource&limit=1");
  const Json first = call(verb::get, "/_db_updates?limit=1").json()["results"][0];
  EXPECT_EQ(r.body, "data: " + first.dump() + "\nid: " + first["seq"].dump() + "\n\n\n");
}

// Each line of a feed's body that holds a row ({"db_name",...}, or an eventsource "data: {...}"),
// as "type:db_name", in order.
std::vector<std::string> feed_events(const std::string& body) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < body.size()) {
    std::size_t nl = body.find('\n', at);
    if (nl == std::string::npos) nl = body.size();
    std::string line = body.substr(at, nl - at);
    at = nl + 1;
    if (line.starts_with("data: ")) line = line.substr(6);
    while (!line.empty() && (line.back() == '\r' || line.back() == ',')) line.pop_back();
    if (!line.starts_with("{")) continue;
    const Json row = Json::parse(line, nullptr, false);
    if (row.is_object() && row.contains("db_name"))
      out.push_back(row["type"].get<std::string>() + ":" + row["db_name"].get<std::string>());
  }
  return out;
}

// For each database: created first, then its updates, deleted last; true when every one of
// `dbs` was seen deleted.
::testing::AssertionResult in_order_per_database(const std::vector<std::string>& events,
                                                 const std::vector<std::string>& dbs) {
  for (const std::string& db : dbs) {
    std::vector<std::string> mine;
    for (const std::string& e : events)
      if (e.substr(e.find(':') + 1) == db) mine.push_back(e.substr(0, e.find(':')));
    if (mine.size() < 3 || mine.front() != "created" || mine.back() != "deleted")
      return ::testing::AssertionFailure() << db << ": " << ::testing::PrintToString(mine);
    for (std::size_t i = 1; i + 1 < mine.size(); ++i)
      if (mine[i] != "updated")
        return ::testing::AssertionFailure() << db << ": " << ::testing::PrintToString(mine);
  }
  return ::testing::AssertionSuccess();
}

// 50 writers over 20 databases: each database is created, written by its writers at once, then
// deleted. Every feed type sees each database's created, updated and deleted rows, in that order.
TEST_F(DbUpdatesTest, ConcurrentWritersToManyDatabasesReachEveryFeedInOrder) {
  const std::string now =
      call(verb::get, "/_db_updates?descending=true&limit=1").json()["last_seq"].get<std::string>();
  FeedClient continuous(server_->port(), "/_db_updates?feed=continuous&heartbeat=500&since=" + now);
  FeedClient eventsource(server_->port(),
                         "/_db_updates?feed=eventsource&heartbeat=500&since=" + now);
  std::vector<std::string> longpolled;
  std::atomic<bool> longpoll_done{false};
  std::thread longpoll([&] {
    HttpClient c(server_->port(), 60s);
    std::string since = now;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!longpoll_done && std::chrono::steady_clock::now() < deadline) {
      auto r = c.get("/_db_updates?feed=longpoll&timeout=2000&since=" + since);
      if (r.status != 200u) break;
      const Json body = r.json();
      for (const auto& row : body["results"])
        longpolled.push_back(row["type"].get<std::string>() + ":" +
                             row["db_name"].get<std::string>());
      since = body["last_seq"].get<std::string>();
    }
  });

  constexpr int kDbs = 20, kWriters = 50, kDocsEach = 10;
  std::vector<std::string> dbs;
  for (int d = 0; d < kDbs; ++d) dbs.push_back("many" + std::to_string(d));
  for (const std::string& db : dbs) ASSERT_EQ(call(verb::put, "/" + db).status, 201u);
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&, w] {
      HttpClient c(server_->port(), 60s);
      for (int i = 0; i < kDocsEach; ++i) {
        auto r = c.request(verb::put,
                           "/" + dbs[w % kDbs] + "/w" + std::to_string(w) + "_" + std::to_string(i),
                           R"({"v":1})", {{"Content-Type", "application/json"}});
        if (r.status != 201u) ++failures;
      }
    });
  for (auto& t : writers) t.join();
  EXPECT_EQ(failures, 0);
  for (const std::string& db : dbs) ASSERT_EQ(call(verb::delete_, "/" + db).status, 200u);

  const std::string last = "deleted:" + dbs.back();
  const std::string last_row = "\"db_name\":\"" + dbs.back() + "\",\"type\":\"deleted\"";
  ASSERT_TRUE(continuous.wait_for(last_row, 30s));
  ASSERT_TRUE(eventsource.wait_for(last_row, 30s));
  ASSERT_TRUE(eventually([&] {
    auto e = events("?since=" + now);
    return std::find(e.begin(), e.end(), last) != e.end();
  }));
  longpoll_done = true;
  longpoll.join();
  EXPECT_TRUE(in_order_per_database(events("?since=" + now), dbs));
  EXPECT_TRUE(in_order_per_database(feed_events(continuous.body()), dbs));
  EXPECT_TRUE(in_order_per_database(feed_events(eventsource.body()), dbs));
  EXPECT_TRUE(in_order_per_database(longpolled, dbs));
}

TEST_F(DbUpdatesTest, BadRequestsAndNonAdmins) {
  auto expect_400 = [&](const std::string& query, const std::string& reason) {
    auto r = call(verb::get, "/_db_updates" + query);
    EXPECT_EQ(r.status, 400u) << query;
    EXPECT_EQ(r.json()["reason"], reason) << query;
  };
  expect_400("?feed=sideways", "Supported `feed` types: normal, continuous, longpoll, eventsource");
  expect_400("?limit=-1", "invalid_integer");
  expect_400("?timeout=abc", "invalid_integer");
  expect_400("?heartbeat=1.5", "invalid_integer");
  expect_400("?since=junk", "Malformed sequence supplied in 'since' parameter.");
  EXPECT_EQ(call(verb::post, "/_db_updates", "{}").status, 405u);

  const fs::path ini = dir_.path() / "admins.ini";
  write_file(ini, "[admins]\nadmin = secret\n");
  TempDir other_dir;
  ServerProcess locked(other_dir.path() / "data", {"--config", ini.string(), "--no-admin-party"});
  HttpClient anonymous(locked.port());
  auto r = anonymous.get("/_db_updates");
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(r.json()["reason"], "You are not a server admin.");
}

}  // namespace
}  // namespace chaise::test
