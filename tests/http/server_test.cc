// Integration tests of the chaise binary's HTTP skeleton: CouchDB's welcome and _up documents,
// error shapes, keep-alive, robustness against bad clients, limits, configuration, and process
// lifecycle (SIGTERM, systemd notify, server uuid persistence). Plus unit tests of the router
// helpers.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "http/api/router.h"
#include "http/transport/request_parse.h"
#include "http/transport/response_stream.h"
#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::field;
using beast_http::verb;

bool is_32_hex(const std::string& text) {
  return std::regex_match(text, std::regex("[0-9a-f]{32}"));
}

// Stops a server by pid (SIGTERM, then SIGKILL) and requires a clean exit: status 0 also means
// no sanitizer report in the server process (ASan/LSan and TSan exit non-zero when they find one).
void expect_clean_stop(ServerProcess& server) {
  const ExitStatus status = server.stop();
  EXPECT_TRUE(status.exited) << "chaise died from signal " << status.term_signal;
  EXPECT_EQ(status.exit_code, 0);
}

// One server per test, on a fresh data directory; stopped by pid in TearDown.
class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { server_.emplace(dir_.path() / "data"); }
  void TearDown() override {
    if (server_) expect_clean_stop(*server_);
    server_.reset();
  }

  std::uint16_t port() const { return server_->port(); }

  TempDir dir_;
  std::optional<ServerProcess> server_;
};

void expect_couchdb_headers(const HttpResponse& response) {
  EXPECT_EQ(response.header(field::content_type), "application/json");
  EXPECT_EQ(response.header(field::cache_control), "must-revalidate");
  EXPECT_EQ(response.header(field::server), "Chaise/0.1.0");
  EXPECT_FALSE(response.header(field::date).empty());
}

TEST_F(ServerTest, WelcomeHasCouchDb3Shape) {
  HttpClient client{port()};
  const HttpResponse response = client.get("/");
  ASSERT_EQ(response.status, 200u);
  expect_couchdb_headers(response);
  ASSERT_FALSE(response.body.empty());
  EXPECT_EQ(response.body.back(), '\n');
  EXPECT_EQ(response.header(field::content_length), std::to_string(response.body.size()));

  const auto body = response.json();
  std::vector<std::string> keys;
  for (const auto& [key, value] : body.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"couchdb", "version", "git_sha", "uuid", "features",
                                            "vendor"}));
  EXPECT_EQ(body["couchdb"], "Welcome");
  EXPECT_EQ(body["version"], "3.5.0");
  EXPECT_EQ(body["git_sha"], "chaise");
  EXPECT_TRUE(is_32_hex(body["uuid"].get<std::string>())) << body["uuid"];
  ASSERT_TRUE(body["features"].is_array());
  for (const auto& feature : body["features"]) EXPECT_TRUE(feature.is_string());
  EXPECT_EQ(body["vendor"], (nlohmann::ordered_json{{"name", "Chaise"}, {"version", "0.1.0"}}));
}

TEST_F(ServerTest, UuidIsStoredInDataDirAndStableAcrossRestart) {
  const std::string first = HttpClient{port()}.get("/").json()["uuid"];
  std::ifstream file(dir_.path() / "data" / "server_uuid");
  std::string stored;
  file >> stored;
  EXPECT_EQ(stored, first);

  EXPECT_EQ(server_->stop().exit_code, 0);
  server_.emplace(dir_.path() / "data");
  const std::string second = HttpClient{port()}.get("/").json()["uuid"];
  EXPECT_EQ(second, first);
}

TEST_F(ServerTest, UuidDiffersOnNewDataDir) {
  const std::string first = HttpClient{port()}.get("/").json()["uuid"];
  TempDir other;
  ServerProcess second_server{other.path() / "data"};
  const std::string second = HttpClient{second_server.port()}.get("/").json()["uuid"];
  expect_clean_stop(second_server);
  EXPECT_TRUE(is_32_hex(second));
  EXPECT_NE(second, first);
}

TEST_F(ServerTest, UpReportsOk) {
  const HttpResponse response = HttpClient{port()}.get("/_up");
  ASSERT_EQ(response.status, 200u);
  expect_couchdb_headers(response);
  EXPECT_EQ(response.body, "{\"status\":\"ok\",\"seeds\":{}}\n");
}

TEST_F(ServerTest, HeadSendsGetHeadersWithoutBody) {
  HttpClient client{port()};
  const HttpResponse get = client.get("/");
  const HttpResponse head = client.head("/");
  ASSERT_EQ(head.status, 200u);
  expect_couchdb_headers(head);
  EXPECT_TRUE(head.body.empty());
  EXPECT_EQ(head.header(field::content_length), std::to_string(get.body.size()));
  // The connection is still in sync: the HEAD response carried no stray body bytes.
  EXPECT_EQ(client.head("/_up").status, 200u);
  EXPECT_EQ(client.get("/_up").body, "{\"status\":\"ok\",\"seeds\":{}}\n");
}

// CouchDB 3.5 sends an ETag on GET /_all_dbs and GET /_dbs_info and answers If-None-Match with
// 304, empty body and the ETag (chttpd_misc handle_all_dbs_info_req, chttpd:etag_respond).
TEST_F(ServerTest, AllDbsAndDbsInfoCarryETagsAndAnswer304) {
  HttpClient client{port()};
  ASSERT_EQ(client.request(verb::put, "/a").status, 201u);
  for (const std::string path : {"/_all_dbs", "/_dbs_info"}) {
    const HttpResponse first = client.get(path);
    ASSERT_EQ(first.status, 200u) << path;
    const std::string etag = first.header(field::etag);
    ASSERT_EQ(etag.size(), 18u) << path << ": " << etag;  // an opaque quoted value
    EXPECT_EQ(etag.front(), '"');
    EXPECT_EQ(etag.back(), '"');
    EXPECT_EQ(client.get(path).header(field::etag), etag) << "stable while nothing changes";
    EXPECT_EQ(client.head(path).header(field::etag), etag) << "HEAD answers like GET";

    const HttpResponse cached = client.request(verb::get, path, {}, {{"If-None-Match", etag}});
    EXPECT_EQ(cached.status, 304u) << path;
    EXPECT_TRUE(cached.body.empty());
    EXPECT_EQ(cached.header(field::etag), etag);
    // chttpd:etag_match: a list of tokens, weak ones too.
    EXPECT_EQ(client.request(verb::get, path, {}, {{"If-None-Match", "\"x\", W/" + etag}}).status,
              304u);
    EXPECT_EQ(client.request(verb::get, path, {}, {{"If-None-Match", "\"x\""}}).status, 200u);
  }
  const std::string before = client.get("/_all_dbs").header(field::etag);
  ASSERT_EQ(client.request(verb::put, "/b").status, 201u);
  const HttpResponse after =
      client.request(verb::get, "/_all_dbs", {}, {{"If-None-Match", before}});
  EXPECT_EQ(after.status, 200u) << "a new database changes the answer and its ETag";
  EXPECT_EQ(after.body, "[\"a\",\"b\"]\n");
  EXPECT_NE(after.header(field::etag), before);
  // POST /_dbs_info has none (CouchDB neither).
  EXPECT_TRUE(client
                  .request(verb::post, "/_dbs_info", R"({"keys":["a"]})",
                           {{"Content-Type", "application/json"}})
                  .header(field::etag)
                  .empty());
}

// GET /{db} "cluster" as a single-node CouchDB 3.5 reports it: q is the number of shard ranges
// (one: Chaise does not split a database), n the copies, w and r = n div 2 + 1
// (fabric_db_info:get_cluster_info).
TEST_F(ServerTest, DbInfoClusterIsOneNodeOneRange) {
  HttpClient client{port()};
  ASSERT_EQ(client.request(verb::put, "/db").status, 201u);
  ASSERT_EQ(client.request(verb::put, "/pdb?partitioned=true").status, 201u);
  for (const std::string db : {"/db", "/pdb"}) {
    const auto info = client.get(db).json();
    EXPECT_EQ(info["cluster"].dump(), R"({"q":1,"n":1,"w":1,"r":1})") << db;
  }
  const auto infos = client.get("/_dbs_info").json();
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_EQ(infos[0]["info"]["cluster"].dump(), R"({"q":1,"n":1,"w":1,"r":1})");
}

TEST_F(ServerTest, WrongMethodIs405WithAllowHeader) {
  HttpClient client{port()};
  for (const auto& [method, target] :
       {std::pair{verb::post, "/"}, std::pair{verb::put, "/"}, std::pair{verb::delete_, "/_up"}}) {
    const HttpResponse response = client.request(method, target, "{}");
    EXPECT_EQ(response.status, 405u) << target;
    expect_couchdb_headers(response);
    EXPECT_EQ(response.header(field::allow), "GET,HEAD");
    EXPECT_EQ(response.body,
              "{\"error\":\"method_not_allowed\",\"reason\":\"Only GET,HEAD allowed\"}\n");
  }
}

TEST_F(ServerTest, UnknownPathIs404) {
  HttpClient client{port()};
  // A path under a database that does not exist: CouchDB checks the database first.
  for (const char* target : {"/no_such_thing", "/a/b/c?x=1"}) {
    const HttpResponse response = client.get(target);
    EXPECT_EQ(response.status, 404u) << target;
    expect_couchdb_headers(response);
    EXPECT_EQ(response.body, "{\"error\":\"not_found\",\"reason\":\"Database does not exist.\"}\n");
  }
  const HttpResponse unknown = client.get("/_nope");
  EXPECT_EQ(unknown.status, 404u);
  EXPECT_EQ(unknown.json()["error"], "not_found");
}

TEST_F(ServerTest, QueryStringAndTrailingSlashStillRouteToWelcome) {
  HttpClient client{port()};
  EXPECT_EQ(client.get("/?foo=bar").status, 200u);
  EXPECT_EQ(client.get("/_up/").status, 200u);
}

TEST_F(ServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  HttpClient client{port()};
  for (int i = 0; i < 50; ++i) {
    const HttpResponse response = client.get(i % 2 == 0 ? "/" : "/_up");
    ASSERT_EQ(response.status, 200u) << "request " << i;
    EXPECT_NE(response.header(field::connection), "close");
  }
}

TEST_F(ServerTest, PipelinedRequestsAreAnsweredInOrder) {
  HttpClient client{port()};
  client.send_raw(
      "GET /_up HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /missing HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(client.read_response().status, 200u);
  EXPECT_EQ(client.read_response().status, 404u);
  EXPECT_EQ(client.read_response().json()["couchdb"], "Welcome");
}

TEST_F(ServerTest, ConnectionCloseIsHonoured) {
  HttpClient client{port()};
  const HttpResponse response = client.request(verb::get, "/", {}, {{"Connection", "close"}});
  EXPECT_EQ(response.status, 200u);
  EXPECT_EQ(response.header(field::connection), "close");
  EXPECT_TRUE(client.wait_closed(5s));
}

TEST_F(ServerTest, MalformedRequestClosesConnectionAndServerSurvives) {
  for (const char* garbage : {"THIS IS NOT HTTP\r\n\r\n", "GET / HTTX/1.1\r\n\r\n",
                              "GET / HTTP/1.1\r\nContent-Length: banana\r\n\r\n",
                              "\x16\x03\x01\x02\x01\x01\xfc\x03\x03"}) {
    HttpClient bad{port()};
    bad.send_raw(garbage);
    EXPECT_TRUE(bad.wait_closed(5s)) << garbage;
  }
  // A client that connects and vanishes mid-request.
  {
    HttpClient vanishing{port()};
    vanishing.send_raw("GET / HTTP/1.1\r\nHost: x\r\nContent-Le");
  }
  HttpClient good{port()};
  EXPECT_EQ(good.get("/").status, 200u);
}

TEST_F(ServerTest, ConcurrentClientsAreAllServed) {
  constexpr int kClients = 8;
  constexpr int kRequestsEach = 25;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&] {
      HttpClient client{port()};
      for (int i = 0; i < kRequestsEach; ++i) {
        if (client.get("/").status == 200u) ++ok;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(ok.load(), kClients * kRequestsEach);
}

TEST_F(ServerTest, SigtermExitsZero) {
  HttpClient client{port()};
  ASSERT_EQ(client.get("/").status, 200u);
  const ExitStatus status = server_->stop();
  EXPECT_TRUE(status.exited) << "signal " << status.term_signal;
  EXPECT_EQ(status.exit_code, 0);
}

// SIGTERM while 4 clients write: the server stops within seconds, exits 0, and every write it
// acknowledged is there after a restart (writes in flight finish or are refused, never lost after
// an acknowledgement).
TEST_F(ServerTest, SigtermDuringWritesKeepsEveryAcknowledgedWrite) {
  HttpClient setup{port()};
  ASSERT_EQ(setup.request(verb::put, "/db").status, 201u);
  std::atomic<bool> stop{false};
  std::vector<std::vector<std::string>> acked(4);
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      try {
        HttpClient client{port(), 5s};
        for (int i = 0; !stop.load() && i < 100000; ++i) {
          const std::string id = "w" + std::to_string(w) + "-" + std::to_string(i);
          const auto r = client.request(verb::put, "/db/" + id, R"({"v":1})",
                                        {{"Content-Type", "application/json"}});
          if (r.status != 201u) break;
          acked[w].push_back(id);
        }
      } catch (const std::exception&) {
        // The connection ended with the server: expected.
      }
    });
  }
  std::this_thread::sleep_for(700ms);
  const auto t0 = std::chrono::steady_clock::now();
  const ExitStatus status = server_->stop();
  stop = true;
  for (auto& t : writers) t.join();
  EXPECT_TRUE(status.exited);
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  std::size_t total = 0;
  for (const auto& ids : acked) total += ids.size();
  EXPECT_GT(total, 0u);

  server_.emplace(dir_.path() / "data");
  HttpClient check{port()};
  const auto all = check.get("/db/_all_docs").json();
  std::set<std::string> present;
  for (const auto& row : all["rows"]) present.insert(row["id"].get<std::string>());
  for (const auto& ids : acked) {
    for (const auto& id : ids) EXPECT_TRUE(present.count(id)) << id << " was acknowledged";
  }
}

TEST_F(ServerTest, SigintExitsZero) {
  const ExitStatus status = server_->stop_with(SIGINT);
  EXPECT_TRUE(status.exited) << "signal " << status.term_signal;
  EXPECT_EQ(status.exit_code, 0);
}

TEST_F(ServerTest, ShutdownClosesIdleKeepAliveConnectionsPromptly) {
  HttpClient idle{port()};
  ASSERT_EQ(idle.get("/").status, 200u);  // keep-alive connection, now idle
  const auto started = std::chrono::steady_clock::now();
  const ExitStatus status = server_->stop();
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  EXPECT_TRUE(idle.wait_closed(5s));
}

// --- limits and configuration: each starts its own server with an ini file ---------------------

class ConfiguredServerTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto& server : servers_) expect_clean_stop(*server);
    servers_.clear();
  }

  // Starts a server owned by the fixture (stopped and checked in TearDown).
  ServerProcess& start(const std::vector<std::string>& extra_args = {},
                       const std::vector<std::string>& env = {}) {
    servers_.push_back(std::make_unique<ServerProcess>(dir_.path() / "data", extra_args, env));
    return *servers_.back();
  }

  ServerProcess& start_with_ini(std::string_view ini) {
    const fs::path config = dir_.path() / "chaise.ini";
    write_file(config, ini);
    return start({"--config", config.string()});
  }

  TempDir dir_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
};

// /_cluster_setup as Docker images and Ansible roles drive it: enable_single_node stores the admin
// (hashed), bind address and port in the config file and creates the system databases; then the
// node reports itself set up, and finish_cluster has nothing left to do.
TEST_F(ConfiguredServerTest, ClusterSetupOfASingleNode) {
  ServerProcess& server = start_with_ini("[chttpd_auth]\niterations = 10\n");
  HttpClient client{server.port()};
  // Admin party until an admin exists; that admin from then on.
  std::vector<std::pair<std::string, std::string>> auth;
  auto post = [&](const std::string& body) {
    auto headers = auth;
    headers.emplace_back("Content-Type", "application/json");
    return client.request(verb::post, "/_cluster_setup", body, headers);
  };
  auto get = [&](const std::string& target) { return client.request(verb::get, target, "", auth); };
  EXPECT_EQ(client.get("/_cluster_setup").body, R"({"state":"single_node_disabled"})"
                                                "\n");
  auto r = post(R"({"action":"enable_single_node","username":"boss","password":"pw",)"
                R"("bind_address":"127.0.0.1","port":5999})");
  EXPECT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(r.body, R"({"ok":true})"
                    "\n");
  std::ifstream in(dir_.path() / "chaise.ini");
  const std::string ini((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(ini.find("boss = -pbkdf2:"), std::string::npos) << ini;
  EXPECT_NE(ini.find("port = 5999"), std::string::npos) << ini;
  EXPECT_EQ(ini.find("pw\n"), std::string::npos) << ini;
  EXPECT_EQ(get("/_cluster_setup").status, 401u);
  auth = {{"Authorization", "Basic Ym9zczpwdw=="}};  // boss:pw
  EXPECT_EQ(get("/_users").status, 200u);
  EXPECT_EQ(get("/_replicator").status, 200u);
  EXPECT_EQ(get("/_cluster_setup").body, R"({"state":"single_node_enabled"})"
                                         "\n");
  r = post(R"({"action":"finish_cluster"})");
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(r.json()["reason"], "Cluster is already finished");
  EXPECT_EQ(post(R"({"action":"finish_cluster","ensure_dbs_exist":["extra"]})").status, 201u);
  EXPECT_EQ(get("/extra").status, 200u);
  EXPECT_EQ(get("/_cluster_setup?ensure_dbs_exist=[\"nope\"]").body,
            R"({"state":"single_node_disabled"})"
            "\n");
  EXPECT_EQ(post(R"({"action":"bogus"})").json()["reason"], "Invalid Action'");
  EXPECT_EQ(post(R"({"action":"enable_cluster"})").status, 400u);
  EXPECT_EQ(client.request(verb::put, "/_cluster_setup", "", auth).status, 405u);
}

TEST_F(ConfiguredServerTest, BodyOverLimitIs413TooLarge) {
  ServerProcess& server = start_with_ini("[chttpd]\nmax_http_request_size = 1024\n");
  HttpClient client{server.port()};
  const HttpResponse small = client.request(verb::post, "/", std::string(1024, 'x'));
  EXPECT_EQ(small.status, 405u);  // within the limit: reaches the router

  HttpClient big_client{server.port()};
  const HttpResponse big = big_client.request(verb::post, "/", std::string(1025, 'x'));
  EXPECT_EQ(big.status, 413u);
  EXPECT_EQ(big.body, "{\"error\":\"too_large\",\"reason\":\"the request entity is too large\"}\n");
  EXPECT_EQ(big.header(field::connection), "close");

  // Announced with Expect: 100-continue: refused before the body is sent.
  HttpClient expect_client{server.port()};
  expect_client.send_raw(
      "PUT /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_EQ(expect_client.read_response().status, 413u);

  EXPECT_EQ(HttpClient{server.port()}.get("/").status, 200u);
  EXPECT_EQ(server.stop().exit_code, 0);
}

TEST_F(ConfiguredServerTest, ExpectContinueGetsInterimResponse) {
  ServerProcess& server = start();
  HttpClient client{server.port()};
  client.send_raw(
      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_EQ(client.read_response().status, 100u);
  client.send_raw("{}");
  EXPECT_EQ(client.read_response().status, 405u);
}

TEST_F(ConfiguredServerTest, HeaderOverLimitClosesConnection) {
  ServerProcess& server = start_with_ini("[chaise]\nmax_header_bytes = 2048\n");
  HttpClient client{server.port()};
  client.send_raw("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4096, 'a') + "\r\n\r\n");
  EXPECT_TRUE(client.wait_closed(5s));
  EXPECT_EQ(HttpClient{server.port()}.get("/").status, 200u);
}

TEST_F(ConfiguredServerTest, IdleConnectionIsClosedAfterTimeout) {
  ServerProcess& server = start_with_ini("[chaise]\nidle_timeout_seconds = 1\n");
  HttpClient client{server.port()};
  ASSERT_EQ(client.get("/").status, 200u);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_TRUE(client.wait_closed(10s));
  EXPECT_GE(std::chrono::steady_clock::now() - started, 500ms);
}

TEST_F(ConfiguredServerTest, SlowHeadersAreCutOffAfterHeaderTimeout) {
  ServerProcess& server = start_with_ini("[chaise]\nheader_timeout_seconds = 1\n");
  // A plain socket that trickles a header byte every 200 ms: never a complete head.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const auto started = std::chrono::steady_clock::now();
  ASSERT_GT(::send(fd, "GET / HTTP/1.1\r\n", 16, MSG_NOSIGNAL), 0);
  bool closed = false;
  while (!closed && std::chrono::steady_clock::now() - started < 6s) {
    std::this_thread::sleep_for(200ms);
    if (::send(fd, "X", 1, MSG_NOSIGNAL) < 0) closed = true;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) == 1) {
      char c;
      if (::recv(fd, &c, 1, MSG_DONTWAIT) <= 0) closed = true;
    }
  }
  const auto took = std::chrono::steady_clock::now() - started;
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_GE(took, 800ms);
  EXPECT_LT(took, 4s);
  // An idle keep-alive connection is not affected: it waits for idle_timeout (300 s here).
  HttpClient idle{server.port()};
  ASSERT_EQ(idle.get("/").status, 200u);
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(idle.get("/").status, 200u);
}

TEST_F(ConfiguredServerTest, ConnectionsBeyondTheLimitAreRefusedWithOneWarningASecond) {
  const fs::path log = dir_.path() / "limit.log";
  ServerProcess& server = start_with_ini(
      "[chaise]\nmax_connections = 2\n[log]\nwriter = file\nfile = " + log.string() + "\n");
  HttpClient first{server.port()};
  HttpClient second{server.port()};
  ASSERT_EQ(first.get("/").status, 200u);
  ASSERT_EQ(second.get("/").status, 200u);
  for (int i = 0; i < 50; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(server.port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, 2000);  // closed by the server right after accept
    }
    ::close(fd);
  }
  EXPECT_EQ(first.get("/").status, 200u);  // the admitted connections still work
  std::ifstream in(log);
  std::string line;
  int warnings = 0;
  while (std::getline(in, line)) warnings += line.find("refused") != std::string::npos;
  EXPECT_GE(warnings, 1);
  EXPECT_LE(warnings, 3);  // 50 refusals within about a second: not 50 lines
}

TEST_F(ConfiguredServerTest, CommandLineOverridesIniFile) {
  // The ini asks for port 1 and an unusable data_dir; the flags ServerProcess passes (--port 0,
  // --data-dir) must win over the file, whatever their position on the command line.
  ServerProcess& server = start_with_ini(
      "[chttpd]\nport = 1\n[couchdb]\ndatabase_dir = /nonexistent/never\n[chaise]\nio_threads = 1\n"
      "fsync = false\n");
  EXPECT_NE(server.port(), 1);
  EXPECT_EQ(HttpClient{server.port()}.get("/").status, 200u);
  EXPECT_TRUE(fs::exists(dir_.path() / "data" / "server_uuid"));
}

// [chaise] fsync: with it on (the default) every acknowledged commit's WAL write was synced
// before the answer; with it off none is, and the server says so in its metrics.
TEST_F(ConfiguredServerTest, AcknowledgedWritesAreSyncedUnlessFsyncIsOff) {
  if (servers_run_on_foundationdb())
    GTEST_SKIP() << "the embedded store's WAL sync; FoundationDB makes every commit durable itself";
  for (const bool fsync : {true, false}) {
    SCOPED_TRACE(fsync ? "fsync = true" : "fsync = false");
    ServerProcess& server = start_with_ini(fsync ? "" : "[chaise]\nfsync = false\n");
    HttpClient client{server.port()};
    auto metric = [&](const std::string& name) {
      return metric_value(client.get("/_node/_local/_prometheus").body, name);
    };
    const std::string db = fsync ? "/synced" : "/unsynced";
    ASSERT_EQ(client.request(verb::put, db).status, 201u);
    // The _db_updates recorder commits after writes, in the background: its transactions are
    // counted apart, once the one after the database's creation is done.
    auto folds = [&] { return metric("chaise_db_updates_folds_total"); };
    ASSERT_TRUE(eventually([&] { return folds() >= 1; }));
    const long long folds_before = folds();
    const long long synced = metric("chaise_store_synced_batches_total");
    const long long batches = metric("chaise_store_commit_batches_total");
    ASSERT_EQ(
        client.request(verb::put, db + "/doc", R"({"a":1})", {{"Content-Type", "application/json"}})
            .status,
        201u);
    ASSERT_TRUE(eventually([&] { return folds() == folds_before + 1; }));
    EXPECT_EQ(metric("chaise_store_commit_batches_total"), batches + 2);
    EXPECT_EQ(metric("chaise_store_synced_batches_total"), fsync ? synced + 2 : 0);
    EXPECT_EQ(metric("chaise_store_fsync"), fsync ? 1 : 0);
    EXPECT_EQ(client.get("/_node/_local/_stats/chaise/store/fsync").json(), fsync);
    expect_clean_stop(server);
    servers_.clear();
  }
}

// [couchdb] single_node = true: the first start creates _users, _replicator and _global_changes
// with the default security object (CouchDB 3.5 answers the same), so a user can be created at
// once; later starts keep them as they are and recreate only what is missing.
TEST_F(ConfiguredServerTest, SingleNodeStartCreatesTheSystemDatabases) {
  const std::string ini = "[couchdb]\nsingle_node = true\n";
  {
    ServerProcess& server = start_with_ini(ini);
    HttpClient client{server.port()};
    EXPECT_EQ(client.get("/_all_dbs").body, R"(["_global_changes","_replicator","_users"])"
                                            "\n");
    EXPECT_EQ(client.get("/_users/_security").json(),
              nlohmann::ordered_json::parse(
                  R"({"members":{"roles":["_admin"]},"admins":{"roles":["_admin"]}})"));
    const auto user = client.request(verb::put, "/_users/org.couchdb.user:ann",
                                     R"({"name":"ann","password":"pw","roles":[],"type":"user"})",
                                     {{"Content-Type", "application/json"}});
    EXPECT_EQ(user.status, 201u) << user.body;
    ASSERT_EQ(client.request(verb::delete_, "/_replicator").status, 200u);
    expect_clean_stop(server);
    servers_.clear();
  }
  ServerProcess& again = start_with_ini(ini);
  HttpClient client{again.port()};
  EXPECT_EQ(client.get("/_all_dbs").body, R"(["_global_changes","_replicator","_users"])"
                                          "\n");
  EXPECT_EQ(client.get("/_users/org.couchdb.user:ann").status, 200u);  // kept
  EXPECT_EQ(client.get("/_replicator").json()["doc_count"], 0);        // recreated empty
}

// GET /favicon.ico: the UI directory's icon, cached for a year; without one CouchDB 3.5's answer,
// a plain-text 404 cached the same way.
TEST_F(ConfiguredServerTest, FaviconComesFromTheUiDirectory) {
  const fs::path ui = dir_.path() / "ui";
  fs::create_directories(ui);
  {
    ServerProcess& server = start_with_ini("[chaise]\nfauxton_dir = " + ui.string() + "\n");
    HttpClient client{server.port()};
    auto missing = client.get("/favicon.ico");
    EXPECT_EQ(missing.status, 404u);
    EXPECT_EQ(missing.body, "Not found.");
    EXPECT_EQ(missing.header(field::content_type), "text/plain");
    EXPECT_EQ(missing.header(field::cache_control), "public, max-age=31536000");
    write_file(ui / "favicon.ico", std::string("\0\0\1\0icon", 8));
    auto icon = client.get("/favicon.ico");
    EXPECT_EQ(icon.status, 200u);
    EXPECT_EQ(icon.body, std::string("\0\0\1\0icon", 8));
    EXPECT_EQ(icon.header(field::content_type), "image/x-icon");
    EXPECT_EQ(icon.header(field::cache_control), "public, max-age=31536000");
    EXPECT_EQ(client.request(verb::post, "/favicon.ico").status, 405u);
  }
}

// POST /_node/_local/_restart answers {"ok":true}, then the server stops cleanly and starts
// again in the same process (same pid; --port 0 gives it a new port, printed as at first start),
// with its data.
TEST_F(ConfiguredServerTest, RestartStartsTheServerAgainInTheSameProcess) {
  ServerProcess& server = start();
  {
    HttpClient client{server.port()};
    ASSERT_EQ(client.request(verb::put, "/kept").status, 201u);
    EXPECT_EQ(client.get("/_node/_local/_restart").status, 405u);
    auto r = client.request(verb::post, "/_node/_local/_restart");
    EXPECT_EQ(r.status, 200u);
    EXPECT_EQ(r.body, "{\"ok\":true}\n");
  }
  const std::string line = server.read_stdout_line(30s, "the server did not start again");
  ASSERT_TRUE(line.starts_with("chaise listening on 127.0.0.1:")) << line;
  const auto port = static_cast<std::uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
  EXPECT_EQ(::kill(server.pid(), 0), 0);  // the same process
  HttpClient again{port};
  EXPECT_EQ(again.get("/").status, 200u);
  EXPECT_EQ(again.get("/kept").status, 200u);
}

// GET /_node/_local/_system: CouchDB 3.5's fields, with this process's figures (threads for
// processes, JavaScript contexts for couchjs processes, its own queues as message queues).
TEST_F(ConfiguredServerTest, SystemReportsThisProcess) {
  ServerProcess& server = start_with_ini("[chaise]\njs_contexts = 3\n");
  HttpClient client{server.port()};
  ASSERT_EQ(client.request(verb::put, "/db").status, 201u);
  auto r = client.get("/_node/_local/_system");
  ASSERT_EQ(r.status, 200u) << r.body;
  const auto s = r.json();
  for (const char* key :
       {"uptime", "run_queue", "run_queue_dirty_cpu", "context_switches", "io_input", "io_output",
        "os_proc_count", "stale_proc_count", "process_count", "internal_replication_jobs"})
    EXPECT_TRUE(s[key].is_number_integer()) << key << ": " << s;
  EXPECT_EQ(s["os_proc_count"], 3);
  EXPECT_GE(s["process_count"].get<long long>(), 4);  // main, io, workers, JavaScript, store
  EXPECT_GT(s["io_output"].get<long long>(), 0);      // it has answered requests
  EXPECT_GT(s["memory"]["other"].get<long long>(), 0);
  for (const char* queue : {"commits", "workers", "javascript", "janitor"})
    EXPECT_EQ(s["message_queues"][queue], 0) << queue;  // an idle server waits on nothing
  EXPECT_EQ(client.request(verb::post, "/_node/_local/_system").status, 405u);
}

TEST_F(ConfiguredServerTest, DefaultIniFileIsAccepted) {
  ServerProcess& server = start({"--config", CHAISE_SOURCE_DIR "/config/default.ini"});
  EXPECT_EQ(HttpClient{server.port()}.get("/_up").status, 200u);
}

TEST_F(ConfiguredServerTest, BadConfigurationFailsStartup) {
  const fs::path data = dir_.path() / "data";
  const fs::path config = dir_.path() / "bad.ini";
  // A key of the old all-in-[chaise] layout names where it moved.
  write_file(config, "[chaise]\nport = 1\n");
  EXPECT_EQ(
      run_chaise_to_exit({"--config", config.string(), "--data-dir", data.string()}).exit_code, 2);
  write_file(config, "[chttpd]\nport = 70000\n");
  EXPECT_EQ(
      run_chaise_to_exit({"--config", config.string(), "--data-dir", data.string()}).exit_code, 2);
  write_file(config, "[chaise]\nfsync = maybe\n");
  EXPECT_EQ(
      run_chaise_to_exit({"--config", config.string(), "--data-dir", data.string()}).exit_code, 2);
  EXPECT_EQ(run_chaise_to_exit({"--no-such-flag"}).exit_code, 2);
  // Only the last file (the writable one) may be missing, and only in an existing directory.
  EXPECT_EQ(run_chaise_to_exit(
                {"--config", (dir_.path() / "missing.ini").string(), "--config", config.string()})
                .exit_code,
            2);
  EXPECT_EQ(run_chaise_to_exit({"--config", (dir_.path() / "no" / "such.ini").string()}).exit_code,
            2);
}

TEST_F(ConfiguredServerTest, PortInUseFailsStartup) {
  ServerProcess& first = start();
  const ExitStatus second =
      run_chaise_to_exit({"--port", std::to_string(first.port()), "--data-dir",
                          (dir_.path() / "data2").string(), "--admin-party"});
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_EQ(HttpClient{first.port()}.get("/").status, 200u);
}

TEST_F(ConfiguredServerTest, CorruptServerUuidFailsStartup) {
  const fs::path data = dir_.path() / "data";
  fs::create_directories(data);
  write_file(data / "server_uuid", "not-a-uuid\n");
  EXPECT_EQ(run_chaise_to_exit({"--port", "0", "--data-dir", data.string()}).exit_code, 1);
}

TEST_F(ConfiguredServerTest, NotifiesSystemdReadyAndStopping) {
  // Play systemd: a datagram socket named by NOTIFY_SOCKET.
  const fs::path socket_path = dir_.path() / "notify.sock";
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.string().size(), sizeof(address.sun_path));
  std::strcpy(address.sun_path, socket_path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);

  auto receive = [fd]() -> std::string {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 10000) != 1) return "<timeout>";
    char buffer[256];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    return n < 0 ? "<error>" : std::string(buffer, static_cast<std::size_t>(n));
  };

  ServerProcess& server = start({}, {"NOTIFY_SOCKET=" + socket_path.string()});
  EXPECT_EQ(receive(), "READY=1");
  EXPECT_EQ(server.stop().exit_code, 0);
  EXPECT_EQ(receive(), "STOPPING=1");
  ::close(fd);
}

TEST_F(ConfiguredServerTest, PingsTheSystemdWatchdogWhileHealthy) {
  const fs::path socket_path = dir_.path() / "watchdog.sock";
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strcpy(address.sun_path, socket_path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ServerProcess& server =
      start({}, {"NOTIFY_SOCKET=" + socket_path.string(), "WATCHDOG_USEC=200000"});
  int pings = 0;
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (pings < 3 && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 1000) != 1) continue;
    char buffer[64];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n > 0 && std::string(buffer, static_cast<std::size_t>(n)) == "WATCHDOG=1") ++pings;
  }
  EXPECT_GE(pings, 3);  // every 100 ms (half of WATCHDOG_USEC)
  EXPECT_EQ(server.stop().exit_code, 0);
  ::close(fd);
}

// The log file's text once it holds `needle`, or after 4 s: info lines reach the file within a
// second (server/log_sink.h).
std::string wait_for_log_text(const fs::path& log, std::string_view needle) {
  std::string text;
  for (int i = 0; i < 40 && text.find(needle) == std::string::npos; ++i) {
    std::this_thread::sleep_for(100ms);
    std::ifstream in(log);
    std::stringstream s;
    s << in.rdbuf();
    text = s.str();
  }
  return text;
}

TEST_F(ConfiguredServerTest, LogFileIsReopenedOnSighup) {
  const fs::path log = dir_.path() / "chaise.log";
  ServerProcess& server = start_with_ini("[log]\nwriter = file\nfile = " + log.string() + "\n");
  HttpClient{server.port()}.get("/first");
  ASSERT_TRUE(fs::exists(log));
  fs::rename(log, dir_.path() / "chaise.log.1");  // what logrotate does
  ::kill(server.pid(), SIGHUP);
  std::this_thread::sleep_for(300ms);
  HttpClient{server.port()}.get("/second");
  const std::string text = wait_for_log_text(log, "GET /second 404");
  // The access line: method, target, status, body bytes, milliseconds, user.
  EXPECT_TRUE(
      std::regex_search(text, std::regex(R"(\[info\] GET /second 404 \d+ \d+\.\d{3}ms -\n)")))
      << text;
  EXPECT_EQ(server.stop().exit_code, 0);
}

// The startup line names the allocator and its settings as read back from it: jemalloc's
// malloc_conf (server/memory.cc) is in force, not just linked.
TEST_F(ConfiguredServerTest, StartupLogNamesTheAllocatorInForce) {
  const fs::path log = dir_.path() / "chaise.log";
  ServerProcess& server = start_with_ini("[log]\nwriter = file\nfile = " + log.string() + "\n");
  const std::string text = wait_for_log_text(log, "allocator=");
#ifdef CHAISE_SERVER_USES_JEMALLOC
  EXPECT_NE(text.find("allocator=jemalloc"), std::string::npos) << text;
  EXPECT_NE(text.find("2 arenas, background purging, blocks of 1024 KiB and more returned at once"),
            std::string::npos)
      << text;
#else
  EXPECT_NE(text.find("allocator=glibc malloc"), std::string::npos) << text;
#endif
  EXPECT_EQ(server.stop().exit_code, 0);
}

// --- router helpers (no process) ------------------------------------------------------------

http::Request make_request(verb method, std::string_view target) {
  http::Request request{method, target, 11};
  return request;
}

// A ResponseStream for calling the router directly: nothing streams in these tests.
class NoStream final : public http::ResponseStream {
 public:
  boost::asio::awaitable<bool> begin(http::Response) override { co_return false; }
  boost::asio::awaitable<bool> write(std::string_view) override { co_return false; }
  boost::asio::awaitable<bool> flush() override { co_return false; }
  boost::asio::awaitable<bool> finish() override { co_return false; }
  bool begun() const override { return false; }
  void watch_peer(std::function<void()>) override {}
};

http::Response call_router(const http::Router& router, const http::Request& request) {
  boost::asio::io_context ioc;
  NoStream stream;
  auto future = boost::asio::co_spawn(ioc, router.handle(request, stream), boost::asio::use_future);
  ioc.run();
  return future.get().value();
}

TEST(RouterTest, RouterAnswersWithoutNetwork) {
  http::RouterContext context;
  context.server_uuid = "0123456789abcdef0123456789abcdef";
  const http::Router router{context};
  const http::Response response = call_router(router, make_request(verb::get, "/"));
  EXPECT_EQ(response.result(), http::Status::ok);
  EXPECT_EQ(nlohmann::json::parse(response.body())["uuid"], "0123456789abcdef0123456789abcdef");
}

TEST(RouterTest, ClientErrorsBecomeCouchDbErrorBodies) {
  const http::Router router{http::RouterContext{}};
  const http::Response bad = call_router(router, make_request(verb::get, "/%zz"));
  EXPECT_EQ(bad.result(), http::Status::bad_request);
  EXPECT_EQ(bad.body(), "{\"error\":\"bad_request\",\"reason\":\"Invalid request path\"}\n");
  EXPECT_EQ(bad[field::content_type], "application/json");
  const http::Response wrong = call_router(router, make_request(verb::post, "/"));
  EXPECT_EQ(wrong.result(), http::Status::method_not_allowed);
  EXPECT_EQ(wrong[field::allow], "GET,HEAD");
}

TEST(RouterTest, PathSegmentsSplitBeforeDecoding) {
  using Segments = std::vector<std::string>;
  EXPECT_EQ(http::path_segments("/"), Segments{});
  EXPECT_EQ(http::path_segments("/db/doc?rev=1-a"), (Segments{"db", "doc"}));
  EXPECT_EQ(http::path_segments("/a%2Fb/c%20d"), (Segments{"a/b", "c d"}));
  EXPECT_EQ(http::path_segments("//db//"), (Segments{"db"}));
  EXPECT_EQ(http::path_segments("/bad%2"), std::nullopt);
  EXPECT_EQ(http::path_segments("/bad%g0"), std::nullopt);
  EXPECT_EQ(http::path_segments("*"), std::nullopt);
  EXPECT_EQ(http::path_segments(""), std::nullopt);
}

}  // namespace
}  // namespace chaise::test
