// GET /_active_tasks while a view index builds: CouchDB's indexer task with its progress, seen
// by another client during the build, and gone once the build is done.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;

TEST(ActiveTasksHttpTest, AViewBuildIsAnIndexerTask) {
  TempDir dir;
  ServerProcess server(dir.path() / "data");
  HttpClient client(server.port(), 60s);
  const auto put = [&](const std::string& target, const std::string& body) {
    return client.request(verb::put, target, body, {{"Content-Type", "application/json"}});
  };
  ASSERT_EQ(put("/db", "").status, 201u);
  const int n = 3000;
  for (int start = 0; start < n; start += 1000) {
    Json docs = Json::array();
    for (int i = start; i < start + 1000; ++i) docs.push_back({{"i", i}});
    ASSERT_EQ(client
                  .request(verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump(),
                           {{"Content-Type", "application/json"}})
                  .status,
              201u);
  }
  // A map function slow enough (about 0.3 ms a document) for the build to take several steps.
  ASSERT_EQ(
      put("/db/_design/slow",
          R"({"views":{"v":{"map":"function(doc){ var t = Date.now(); while (Date.now() - t < 0.3) {} emit(doc.i, null); }"}}})")
          .status,
      201u);
  EXPECT_EQ(client.get("/_active_tasks").json(), Json::array());

  std::optional<HttpResponse> built;
  std::thread query([&] {
    HttpClient other(server.port(), 120s);
    built = other.get("/db/_design/slow/_view/v?limit=1");
  });
  std::optional<Json> seen;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    const Json tasks = client.get("/_active_tasks").json();
    for (const Json& t : tasks)
      if (t["type"] == "indexer" && t["changes_done"].get<int>() > 0) seen = t;
    if (!seen) std::this_thread::sleep_for(5ms);
  }
  query.join();
  ASSERT_TRUE(built && built->status == 200u) << (built ? built->body : "no answer");
  ASSERT_TRUE(seen) << "no indexer task was seen during the build";
  const Json& t = *seen;
  EXPECT_EQ(t["database"], "db");
  EXPECT_EQ(t["design_document"], "_design/slow");
  EXPECT_EQ(t["node"], "nonode@nohost");
  EXPECT_TRUE(t["pid"].is_string());
  EXPECT_EQ(t["indexer_pid"], t["pid"]);
  EXPECT_EQ(t["total_changes"], n + 1);  // the design document's change too
  EXPECT_LE(t["changes_done"].get<int>(), n + 1);
  EXPECT_EQ(t["progress"], t["changes_done"].get<int>() * 100 / (n + 1));
  EXPECT_TRUE(t["started_on"].is_number_integer());
  EXPECT_TRUE(t["updated_on"].is_number_integer());
  EXPECT_EQ(client.get("/_active_tasks").json(), Json::array());
}

}  // namespace
}  // namespace chaise::test
