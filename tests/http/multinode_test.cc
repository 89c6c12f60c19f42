// Three Chaise servers on one FoundationDB cluster serve the same databases, with no coordination
// of their own: writes through any node are read through every other, concurrent writers through
// all three lose no update and make one winner, every node's _changes shows the same sequence, a
// view built through one is queried through the others, and _security and design documents changed
// through one apply on the others at once. A feed on one node wakes on a write through another.
//
// The cluster is the one CHAISE_FDB_CLUSTER_FILE names, through CHAISE_FDB_LIBRARY (as the storage
// tests); without them every test here skips, saying so. Each test's nodes share a key prefix of
// their own, so the cluster may be shared with other tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
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
using Json = nlohmann::json;
using Headers = std::vector<std::pair<std::string, std::string>>;
using namespace std::chrono_literals;

constexpr int kNodes = 3;
const std::string kAdmin = "admin", kPassword = "secret";

class MultiNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* cluster = std::getenv("CHAISE_FDB_CLUSTER_FILE");
    const char* library = std::getenv("CHAISE_FDB_LIBRARY");
    if (cluster == nullptr || *cluster == 0 || library == nullptr || *library == 0)
      GTEST_SKIP() << "no FoundationDB cluster: set CHAISE_FDB_CLUSTER_FILE and CHAISE_FDB_LIBRARY "
                      "(README, \"Tests against FoundationDB\")";
    std::random_device random;
    cluster_ = cluster;
    library_ = library;
    prefix_ = "multinode/" + std::to_string(random()) + "-" + std::to_string(random()) + "/";
    for (int n = 0; n < kNodes; ++n) {
      nodes_.push_back(start_node(n));
      clients_.push_back(std::make_unique<HttpClient>(nodes_.back()->port(), 60s));
    }
  }

  // Node `n` of the test's installation, with `extra_foundationdb` added to its [foundationdb].
  std::unique_ptr<ServerProcess> start_node(int n, const std::string& extra_foundationdb = "") {
    // Each node its own ini (a node writes the admin's hash back to it), the same settings.
    const auto ini = dir_.path() / ("node" + std::to_string(n) + ".ini");
    std::ofstream(ini) << "[chaise]\nstorage_engine = foundationdb\nnode_name = " << node_name(n)
                       << "\n[foundationdb]\ncluster_file = " << cluster_
                       << "\nlibrary = " << library_ << "\nkey_prefix = " << prefix_ << "\n"
                       << extra_foundationdb
                       << "\n[chttpd_auth]\niterations = 10\n[replicator]\nlease_timeout = 1500\n"
                       << "[admins]\n"
                       << kAdmin << " = " << kPassword << "\n";
    return std::make_unique<ServerProcess>(
        dir_.path() / ("data" + std::to_string(n)),
        std::vector<std::string>{"--no-admin-party", "--config", ini.string()});
  }

  static std::string node_name(int n) { return "node" + std::to_string(n) + "@127.0.0.1"; }
  // Whether `ok()` holds within `within`, asked every 50 ms.
  static bool eventually(const std::function<bool()>& ok, std::chrono::milliseconds within) {
    const auto end = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < end) {
      if (ok()) return true;
      std::this_thread::sleep_for(50ms);
    }
    return ok();
  }

  HttpResponse call(int node, verb method, const std::string& target, std::string body = {},
                    Headers headers = {}) {
    headers.push_back(basic_auth(kAdmin, kPassword));
    if (!body.empty()) headers.emplace_back("Content-Type", "application/json");
    return clients_[node]->request(method, target, std::move(body), headers);
  }
  Json get(int node, const std::string& target) { return call(node, verb::get, target).json(); }
  // A _users member made through `node` (creating _users if it is not there yet).
  bool add_user(int node, const std::string& name, const std::string& password) {
    call(node, verb::put, "/_users");
    const Json doc = {
        {"name", name}, {"password", password}, {"roles", Json::array()}, {"type", "user"}};
    return call(node, verb::put, "/_users/org.couchdb.user:" + name, doc.dump()).status == 201u;
  }
  std::uint16_t port(int node) const { return nodes_[node]->port(); }
  static std::string auth_line() {
    const auto h = basic_auth(kAdmin, kPassword);
    return h.first + ": " + h.second + "\r\n";
  }

  TempDir dir_;
  std::string cluster_, library_, prefix_;
  std::vector<std::unique_ptr<ServerProcess>> nodes_;
  std::vector<std::unique_ptr<HttpClient>> clients_;
};

TEST_F(MultiNodeTest, WritesThroughAnyNodeAreReadThroughEveryOtherInTheSameSequence) {
  // One installation, one identity.
  const Json welcome = get(0, "/");
  for (int n = 1; n < kNodes; ++n) EXPECT_EQ(get(n, "/")["uuid"], welcome["uuid"]) << n;
  ASSERT_EQ(call(0, verb::put, "/db").status, 201u);
  for (int n = 0; n < kNodes; ++n) EXPECT_EQ(call(n, verb::get, "/db").status, 200u) << n;
  for (int i = 0; i < 12; ++i) {
    const std::string id = "d" + std::to_string(i);
    ASSERT_EQ(call(i % kNodes, verb::put, "/db/" + id, Json{{"i", i}}.dump()).status, 201u) << id;
  }
  const Json changes = get(0, "/db/_changes");
  ASSERT_EQ(changes["results"].size(), 12u);
  for (int n = 0; n < kNodes; ++n) {
    EXPECT_EQ(get(n, "/db")["doc_count"], 12) << n;
    EXPECT_EQ(get(n, "/db/d7")["i"], 7) << n;
    EXPECT_EQ(get(n, "/db/_changes"), changes) << n;  // the same rows, seqs and last_seq
    EXPECT_EQ(get(n, "/db/_all_docs")["total_rows"], 12) << n;
  }
  // A database deleted through one node is gone on every other.
  ASSERT_EQ(call(2, verb::delete_, "/db").status, 200u);
  for (int n = 0; n < kNodes; ++n) EXPECT_EQ(call(n, verb::get, "/db/d7").status, 404u) << n;
}

// A request reads at a version it asked for itself (its credentials' lookup's, then its database
// opening's), never at one an earlier request left behind: a write acknowledged through one node
// is what the very next request through another reads and updates, for a config admin and for a
// _users member alike.
TEST_F(MultiNodeTest, TheRequestAfterAnAcknowledgedWriteThroughAnotherNodeSeesIt) {
  ASSERT_EQ(call(0, verb::put, "/db").status, 201u);
  ASSERT_TRUE(add_user(0, "ann", "a"));
  ASSERT_EQ(call(0, verb::put, "/db/_security", R"({"members":{"names":["ann"]}})").status, 200u);
  const Headers ann = {basic_auth("ann", "a"), {"Content-Type", "application/json"}};
  std::string rev = call(0, verb::put, "/db/doc", R"({"n":0})").json()["rev"];
  for (int i = 1; i <= 60; ++i) {
    const int writer = i % kNodes, reader = (i + 1) % kNodes;
    const bool member = i % 2 == 0;
    const std::string body = Json{{"_rev", rev}, {"n", i}}.dump();
    const auto put = member ? clients_[writer]->request(verb::put, "/db/doc", body, ann)
                            : call(writer, verb::put, "/db/doc", body);
    ASSERT_EQ(put.status, 201u) << i << " " << put.body;
    rev = put.json()["rev"];
    const auto got = member ? clients_[reader]->request(verb::get, "/db/doc", "", ann)
                            : call(reader, verb::get, "/db/doc");
    ASSERT_EQ(got.status, 200u) << i << " " << got.body;
    EXPECT_EQ(got.json()["_rev"], rev) << i << " through node " << reader;
    EXPECT_EQ(got.json()["n"], i) << i;
  }
}

// One node at a time folds the database events every node logs into _db_updates (the others
// neither watch nor fold, so a write wakes one recorder, not all); every node lists them; when the
// folding node dies, another takes over once its claim lapses.
TEST_F(MultiNodeTest, OneNodeFoldsDatabaseEventsAndAnotherTakesOverWhenItDies) {
  const auto folds = [&](int n) {
    return get(n, "/_node/_local/_stats")["chaise"]["db_updates_folds"]["value"].get<long long>();
  };
  const auto lists = [&](int n, const std::string& db, const std::string& type) {
    const Json rows = get(n, "/_db_updates")["results"];
    return std::any_of(rows.begin(), rows.end(),
                       [&](const Json& r) { return r["db_name"] == db && r["type"] == type; });
  };
  ASSERT_EQ(call(0, verb::put, "/db").status, 201u);
  // The first events may be folded by any node; within a pass or two one holds the claim.
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(call(i % kNodes, verb::put, "/db/warm" + std::to_string(i), "{}").status, 201u);
    std::this_thread::sleep_for(100ms);
  }
  std::this_thread::sleep_for(1500ms);  // every node has looked at the claim since
  std::vector<long long> before;
  for (int n = 0; n < kNodes; ++n) before.push_back(folds(n));
  for (int i = 0; i < 15; ++i) {
    ASSERT_EQ(call(i % kNodes, verb::put, "/db/d" + std::to_string(i), "{}").status, 201u);
    std::this_thread::sleep_for(60ms);  // apart: each write a pass of its own
  }
  ASSERT_TRUE(eventually([&] { return lists(0, "db", "updated"); }, 5s));
  std::vector<int> folding;
  for (int n = 0; n < kNodes; ++n) {
    const long long grew = folds(n) - before[n];
    if (grew > 0) folding.push_back(n);
    EXPECT_TRUE(lists(n, "db", "updated")) << n;
  }
  ASSERT_EQ(folding.size(), 1u) << "nodes that folded: " << Json(folding).dump();
  // The folder killed: a survivor lists a database created after, once the claim has lapsed.
  const int dead = folding[0], alive = (dead + 1) % kNodes;
  nodes_[dead]->stop_with(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_EQ(call(alive, verb::put, "/db2").status, 201u);
  EXPECT_TRUE(eventually([&] { return lists(alive, "db2", "created"); }, 15s));
  std::printf("the killed folder's work was taken over in %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - killed)
                                         .count()));
}

TEST_F(MultiNodeTest, ConcurrentWritersThroughAllNodesLoseNoUpdateAndMakeOneWinner) {
  ASSERT_EQ(call(0, verb::put, "/db").status, 201u);
  ASSERT_EQ(call(0, verb::put, "/db/hot", R"({"n":0})").status, 201u);
  ASSERT_EQ(call(0, verb::put, "/db/counter", R"({"n":0})").status, 201u);
  constexpr int kUpdates = 25, kCreates = 20, kBulk = 150;
  std::atomic<int> created_wins{0}, created_conflicts{0}, other{0};
  std::vector<std::thread> writers;
  for (int n = 0; n < kNodes; ++n) {
    writers.emplace_back([&, n] {
      HttpClient c(port(n), 60s);
      const Headers auth = {basic_auth(kAdmin, kPassword), {"Content-Type", "application/json"}};
      // Read-modify-write of one document, retried on 409: every update counts once.
      for (int done = 0; done < kUpdates;) {
        const Json doc = c.request(verb::get, "/db/hot", "", auth).json();
        Json next = doc;
        next["n"] = doc["n"].get<int>() + 1;
        const auto r = c.request(verb::put, "/db/hot", next.dump(), auth);
        if (r.status == 201u) {
          ++done;
        } else if (r.status != 409u) {
          other.fetch_add(1);
          return;
        }
      }
      // Increments applied by the server (the hot-document path), from every node at once.
      const Headers patch = {basic_auth(kAdmin, kPassword),
                             {"Content-Type", "application/json-patch+json"}};
      for (int i = 0; i < kUpdates; ++i) {
        if (c.request(verb::patch, "/db/counter", R"([{"op":"increment","path":"/n"}])", patch)
                .status != 201u)
          other.fetch_add(1);
      }
      // Creates of the same ids through every node: one 201 each, the others 409.
      for (int i = 0; i < kCreates; ++i) {
        const auto r =
            c.request(verb::put, "/db/same" + std::to_string(i), Json{{"by", n}}.dump(), auth);
        if (r.status == 201u) {
          created_wins.fetch_add(1);
        } else if (r.status == 409u) {
          created_conflicts.fetch_add(1);
        } else {
          other.fetch_add(1);
        }
      }
      // A _bulk_docs of distinct ids per node.
      Json docs = Json::array();
      for (int i = 0; i < kBulk; ++i)
        docs.push_back({{"_id", "n" + std::to_string(n) + "-" + std::to_string(i)}});
      if (c.request(verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump(), auth).status != 201u)
        other.fetch_add(1);
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(created_wins.load(), kCreates);
  EXPECT_EQ(created_conflicts.load(), kCreates * (kNodes - 1));
  for (int n = 0; n < kNodes; ++n) {
    EXPECT_EQ(get(n, "/db/hot")["n"], kUpdates * kNodes) << n;
    EXPECT_EQ(get(n, "/db/counter")["n"], kUpdates * kNodes) << n;
    EXPECT_EQ(get(n, "/db")["doc_count"], 2 + kCreates + kBulk * kNodes) << n;
    // One winner and no conflicting branch anywhere.
    EXPECT_EQ(get(n, "/db/hot?conflicts=true").count("_conflicts"), 0u) << n;
    EXPECT_EQ(get(n, "/db/same3?conflicts=true").count("_conflicts"), 0u) << n;
  }
  // Each document once in the feed, and every node's feed the same.
  const Json changes = get(0, "/db/_changes");
  std::set<std::string> ids;
  for (const Json& row : changes["results"]) ids.insert(row["id"].get<std::string>());
  EXPECT_EQ(ids.size(), changes["results"].size());
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(2 + kCreates + kBulk * kNodes));
  for (int n = 1; n < kNodes; ++n) EXPECT_EQ(get(n, "/db/_changes"), changes) << n;
}

TEST_F(MultiNodeTest, AViewBuiltThroughOneNodeIsQueriedThroughTheOthers) {
  ASSERT_EQ(call(0, verb::put, "/db").status, 201u);
  Json docs = Json::array();
  for (int i = 0; i < 300; ++i) docs.push_back({{"_id", "d" + std::to_string(i)}, {"k", i % 7}});
  ASSERT_EQ(call(0, verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump()).status, 201u);
  const Json ddoc = {
      {"views", {{"by_k", {{"map", "function(d) { emit(d.k, 1); }"}, {"reduce", "_sum"}}}}}};
  ASSERT_EQ(call(1, verb::put, "/db/_design/v", ddoc.dump()).status, 201u);
  const Json built = get(1, "/db/_design/v/_view/by_k?group=true");
  ASSERT_EQ(built["rows"].size(), 7u) << built;
  for (int n = 0; n < kNodes; ++n) {
    EXPECT_EQ(get(n, "/db/_design/v/_view/by_k?group=true"), built) << n;
    EXPECT_EQ(get(n, "/db/_design/v/_view/by_k?reduce=false&key=3")["rows"].size(), 43u) << n;
  }
  // A change through a third node shows in the others' next query.
  const std::string rev = get(2, "/db/d3")["_rev"];
  ASSERT_EQ(call(2, verb::put, "/db/d3", Json{{"_rev", rev}, {"k", 100}}.dump()).status, 201u);
  for (int n = 0; n < kNodes; ++n) {
    EXPECT_EQ(get(n, "/db/_design/v/_view/by_k?key=100")["rows"][0]["value"], 1) << n;
    EXPECT_EQ(get(n, "/db/_design/v/_view/by_k?reduce=false&key=3")["rows"].size(), 42u) << n;
  }
  // Mango through another node, on an index made through a third.
  ASSERT_EQ(call(2, verb::post, "/db/_index", R"({"index":{"fields":["k"]},"name":"k"})").status,
            200u);
  const auto found =
      call(0, verb::post, "/db/_find", R"({"selector":{"k":{"$gt":5}},"limit":100})");
  ASSERT_EQ(found.status, 200u) << found.body;
  EXPECT_EQ(found.json()["docs"].size(), 43u);  // k == 6, and d3's 100
}

TEST_F(MultiNodeTest, SecurityAndDesignDocumentsChangedThroughOneNodeApplyOnEveryOtherAtOnce) {
  ASSERT_EQ(call(0, verb::put, "/db").status, 201u);
  ASSERT_EQ(call(2, verb::put, "/_users").status, 201u);
  ASSERT_TRUE(add_user(0, "bob", "b"));
  const Headers bob = {basic_auth("bob", "b"), {"Content-Type", "application/json"}};
  // Every node reads the database's security (admin_only by default: bob is refused).
  for (int n = 0; n < kNodes; ++n)
    EXPECT_EQ(clients_[n]->request(verb::get, "/db", "", bob).status, 403u) << n;
  // Made a member through node 0: every node lets bob in at once.
  ASSERT_EQ(call(0, verb::put, "/db/_security", R"({"members":{"names":["bob"]}})").status, 200u);
  for (int n = 0; n < kNodes; ++n)
    EXPECT_EQ(clients_[n]->request(verb::get, "/db", "", bob).status, 200u) << n;
  // A session cookie made by node 0 holds on the others: the nodes share the cookie secret
  // (kept in the store when no [chttpd_auth] secret is configured).
  const auto login =
      clients_[0]->request(verb::post, "/_session", R"({"name":"bob","password":"b"})",
                           {{"Content-Type", "application/json"}});
  ASSERT_EQ(login.status, 200u) << login.body;
  const std::string cookie =
      login.header("Set-Cookie").substr(0, login.header("Set-Cookie").find(';'));
  for (int n = 0; n < kNodes; ++n) {
    const auto r = clients_[n]->request(verb::get, "/_session", "", {{"Cookie", cookie}});
    EXPECT_EQ(r.json()["userCtx"]["name"], "bob") << n << " " << r.body;
  }
  // A new password through node 1 holds on node 2 at once; the old one no longer does.
  const Json user = get(1, "/_users/org.couchdb.user:bob");
  Json changed = user;
  changed["password"] = "b2";
  ASSERT_EQ(call(1, verb::put, "/_users/org.couchdb.user:bob", changed.dump()).status, 201u);
  EXPECT_EQ(clients_[2]->request(verb::get, "/db", "", bob).status, 401u);
  EXPECT_EQ(clients_[2]->request(verb::get, "/db", "", {basic_auth("bob", "b2")}).status, 200u);
  // A validate_doc_update saved through node 1 refuses writes through node 2 at once.
  const Json ddoc = {
      {"validate_doc_update", "function(d) { if (!d.ok) throw({forbidden: 'needs ok'}); }"}};
  ASSERT_EQ(call(1, verb::put, "/db/_design/check", ddoc.dump()).status, 201u);
  for (int n = 0; n < kNodes; ++n) {
    const auto r = call(n, verb::put, "/db/x" + std::to_string(n), R"({"ok":false})");
    EXPECT_EQ(r.status, 403u) << n << " " << r.body;
    EXPECT_EQ(call(n, verb::put, "/db/y" + std::to_string(n), R"({"ok":true})").status, 201u) << n;
  }
  // Removed through node 2: writes through node 0 pass again.
  const std::string rev = get(2, "/db/_design/check")["_rev"];
  ASSERT_EQ(call(2, verb::delete_, "/db/_design/check?rev=" + rev).status, 200u);
  EXPECT_EQ(call(0, verb::put, "/db/z", R"({"ok":false})").status, 201u);
}

TEST_F(MultiNodeTest, FeedsOnOneNodeWakeOnAWriteThroughAnother) {
  ASSERT_EQ(call(0, verb::put, "/db").status, 201u);
  FeedClient longpoll(port(1), "/db/_changes?feed=longpoll&since=now&timeout=20000", "GET", "",
                      auth_line());
  FeedClient continuous(port(2), "/db/_changes?feed=continuous&since=now&timeout=20000", "GET", "",
                        auth_line());
  ASSERT_TRUE(longpoll.wait_head(10s));
  ASSERT_TRUE(continuous.wait_head(10s));
  EXPECT_FALSE(longpoll.wait_end(300ms)) << "nothing was written yet";
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(call(0, verb::put, "/db/woken", "{}").status, 201u);
  EXPECT_TRUE(longpoll.wait_end(5s)) << longpoll.body();
  EXPECT_TRUE(continuous.wait_for("\"woken\"", 5s)) << continuous.body();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  std::printf("a write through node 0 reached feeds on nodes 1 and 2 in %lld ms\n",
              static_cast<long long>(took.count()));
  EXPECT_NE(longpoll.body().find("\"woken\""), std::string::npos);
  EXPECT_LT(took, 2s);
}

// A node whose transactions may write at most 1 MB ([foundationdb] transaction_size_limit) splits
// what spans transactions to fit: a 3 MB _bulk_docs, the view over it, attachments written beside
// their document (inline in its JSON, or a multipart/related part) or streamed. A document too large for one transaction gets 413, and nothing is
// written. What it wrote, the other nodes read.
TEST_F(MultiNodeTest, ANodeWithALowerTransactionSizeLimitSplitsItsWritesToFit) {
  auto limited = start_node(kNodes, "transaction_size_limit = 1000000");
  HttpClient c(limited->port(), 60s);
  auto lim = [&](verb method, const std::string& target, std::string body = {},
                 const std::string& type = "application/json") {
    Headers h{basic_auth(kAdmin, kPassword)};
    if (!body.empty()) h.emplace_back("Content-Type", type);
    return c.request(method, target, std::move(body), h);
  };
  ASSERT_EQ(lim(verb::put, "/big").status, 201u);
  constexpr int kDocs = 600;
  const std::string filler(5'000, 'x');
  Json docs = Json::array();
  for (int i = 0; i < kDocs; ++i) docs.push_back({{"_id", "d" + std::to_string(i)}, {"f", filler}});
  const HttpResponse bulk = lim(verb::post, "/big/_bulk_docs", Json{{"docs", docs}}.dump());
  ASSERT_EQ(bulk.status, 201u) << bulk.body.substr(0, 300);
  for (const auto& r : bulk.json()) ASSERT_TRUE(r.contains("ok")) << r.dump();
  EXPECT_EQ(get(0, "/big")["doc_count"], kDocs);
  // Each row carries its document: 3 MB of rows, written in steps that fit.
  ASSERT_EQ(lim(verb::put, "/big/_design/v",
                R"({"views":{"all":{"map":"function(doc) { emit(doc._id, doc.f); }"}}})")
                .status,
            201u);
  const HttpResponse view = lim(verb::get, "/big/_design/v/_view/all?limit=1");
  ASSERT_EQ(view.status, 200u) << view.body.substr(0, 300);
  EXPECT_EQ(view.json()["total_rows"], kDocs);
  // An attachment inline in its document's JSON (600 KB) and one streamed (2.5 MB).
  std::string inline_bytes(600'000, '\0'), streamed(2'500'000, '\0');
  std::mt19937 random(7);
  for (char& b : inline_bytes) b = static_cast<char>(random());
  for (char& b : streamed) b = static_cast<char>(random());
  const Json with_att = {
      {"_attachments",
       {{"a.bin",
         {{"content_type", "application/octet-stream"}, {"data", base64(inline_bytes)}}}}}};
  const HttpResponse put_inline = lim(verb::put, "/big/inline", with_att.dump());
  ASSERT_EQ(put_inline.status, 201u) << put_inline.body;
  const HttpResponse put_streamed =
      lim(verb::put, "/big/streamed/s.bin", streamed, "application/octet-stream");
  ASSERT_EQ(put_streamed.status, 201u) << put_streamed.body;
  const std::string boundary = "sizelimitboundary";
  const Json follows = {{"_attachments",
                         {{"p.bin",
                           {{"content_type", "application/octet-stream"},
                            {"follows", true},
                            {"length", inline_bytes.size()}}}}}};
  const HttpResponse put_multipart =
      lim(verb::put, "/big/multipart",
          "--" + boundary + "\r\nContent-Type: application/json\r\n\r\n" + follows.dump() +
              "\r\n--" + boundary + "\r\n\r\n" + inline_bytes + "\r\n--" + boundary + "--",
          "multipart/related; boundary=\"" + boundary + "\"");
  ASSERT_EQ(put_multipart.status, 201u) << put_multipart.body;
  EXPECT_EQ(call(0, verb::get, "/big/multipart/p.bin").body, inline_bytes);
  EXPECT_EQ(call(0, verb::get, "/big/inline/a.bin").body, inline_bytes);
  EXPECT_EQ(call(0, verb::get, "/big/streamed/s.bin").body, streamed);
  // One document's body over the limit.
  const HttpResponse too_large =
      lim(verb::put, "/big/huge", Json{{"f", std::string(1'200'000, 'x')}}.dump());
  EXPECT_EQ(too_large.status, 413u) << too_large.body;
  EXPECT_EQ(call(0, verb::get, "/big/huge").status, 404u);
  // The same 3 MB through a node with FoundationDB's own limit is one round: both work.
  for (auto& d : docs) d["_id"] = "e" + d["_id"].get<std::string>().substr(1);
  EXPECT_EQ(call(1, verb::post, "/big/_bulk_docs", Json{{"docs", docs}}.dump()).status, 201u);
  EXPECT_EQ(get(2, "/big")["doc_count"], 2 * kDocs + 4);  // and the design document
  const ExitStatus s = limited->stop();
  EXPECT_TRUE(s.exited && s.exit_code == 0);
}

// A node allowed fewer storage watches than it has databases with waiting feeds (max_watches) polls
// those databases instead: every feed still gets its change, and the waiting costs next to no CPU
// (a refused watch must not wake its feeds to read, wait and be refused again in a loop).
TEST_F(MultiNodeTest, FeedsPastTheWatchLimitArePolledInsteadOfSpinning) {
  // Two watches: the database events' recorder takes one, one database's feeds the other.
  auto limited = start_node(kNodes, "max_watches = 2");
  constexpr int kDbs = 4;
  std::vector<std::unique_ptr<FeedClient>> feeds;
  for (int i = 0; i < kDbs; ++i) {
    const std::string db = "/w" + std::to_string(i);
    ASSERT_EQ(call(0, verb::put, db).status, 201u);
    feeds.push_back(std::make_unique<FeedClient>(
        limited->port(), db + "/_changes?feed=continuous&since=now&timeout=30000", "GET", "",
        auth_line()));
    ASSERT_TRUE(feeds.back()->wait_head(10s)) << i;
  }
  std::this_thread::sleep_for(500ms);  // every feed waits
  const double cpu_before = process_cpu_seconds(limited->pid());
  std::this_thread::sleep_for(2s);
  const double idle_cpu = process_cpu_seconds(limited->pid()) - cpu_before;
  EXPECT_LT(idle_cpu, 0.3) << "feeds waiting past the watch limit cost CPU";
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kDbs; ++i) {
      const std::string id = "r" + std::to_string(round) + "-" + std::to_string(i);
      ASSERT_EQ(call(0, verb::put, "/w" + std::to_string(i) + "/" + id, "{}").status, 201u);
    }
    for (int i = 0; i < kDbs; ++i) {
      const std::string id = "r" + std::to_string(round) + "-" + std::to_string(i);
      EXPECT_TRUE(feeds[i]->wait_for("\"" + id + "\"", 3s)) << i << ": " << feeds[i]->body();
    }
  }
  std::printf("4 feeds past a limit of 2 watches: %.2f s of CPU over 2 s of waiting\n", idle_cpu);
  std::this_thread::sleep_for(300ms);  // the feeds wait again
  HttpClient c(limited->port(), 60s);
  const Json storage =
      c.request(verb::get, "/_node/_local/_system", "", {basic_auth(kAdmin, kPassword)})
          .json()["storage"];
  // (Which of them holds the two watches, the recorder among them, is a race.)
  EXPECT_EQ(storage["feed_watches"].get<int>() + storage["feed_polled_databases"].get<int>(), kDbs)
      << storage.dump();
  EXPECT_GE(storage["feed_polled_databases"], kDbs - 2) << storage.dump();
  feeds.clear();
  const ExitStatus s = limited->stop();
  EXPECT_TRUE(s.exited && s.exit_code == 0);
}

// RFC 004's sharded feed across nodes: consumers of one database's changes shards, each through a
// different node, split its changes between them (each change in exactly one shard's feed), and a
// reshard through yet another node ends every one of their live feeds with topology_changed.
TEST_F(MultiNodeTest, ConsumersOnDifferentNodesSplitOneDatabasesChanges) {
  ASSERT_EQ(call(0, verb::put, "/db").status, 201u);
  const auto resharded = call(0, verb::put, "/db/_changes/_meta", R"({"shards":3})");
  ASSERT_EQ(resharded.status, 200u) << resharded.body;
  const Json shards = resharded.json()["shards"];
  ASSERT_EQ(shards.size(), 3u);
  for (int n = 0; n < kNodes; ++n)
    EXPECT_EQ(get(n, "/db/_changes/_meta")["topology"].back()["shards"], shards) << n;
  // Shard i's consumer reads through node i.
  std::vector<std::unique_ptr<FeedClient>> consumers;
  for (int n = 0; n < kNodes; ++n) {
    consumers.push_back(std::make_unique<FeedClient>(port(n),
                                                     "/db/_changes/" +
                                                         std::to_string(shards[n].get<int>()) +
                                                         "?feed=continuous&since=0&timeout=30000",
                                                     "GET", "", auth_line()));
    ASSERT_TRUE(consumers.back()->wait_head(10s)) << n;
  }
  constexpr int kDocs = 60;
  for (int i = 0; i < kDocs; ++i)
    ASSERT_EQ(call(i % kNodes, verb::put, "/db/s" + std::to_string(i), "{}").status, 201u) << i;
  // The ids each consumer has seen so far.
  auto seen = [&](int n) {
    std::vector<std::string> ids;
    const std::string& body = consumers[n]->body();
    for (std::size_t at = 0; (at = body.find("\"id\":\"", at)) != std::string::npos;) {
      at += 6;
      ids.push_back(body.substr(at, body.find('"', at) - at));
    }
    return ids;
  };
  std::size_t total = 0;
  for (const auto until = std::chrono::steady_clock::now() + 20s;
       total < kDocs && std::chrono::steady_clock::now() < until;) {
    total = 0;
    for (int n = 0; n < kNodes; ++n) {
      consumers[n]->wait_for("\n\n(never sent)", 50ms);  // reads what has come
      total += seen(n).size();
    }
  }
  std::multiset<std::string> all;
  for (int n = 0; n < kNodes; ++n) {
    const auto ids = seen(n);
    EXPECT_FALSE(ids.empty()) << "shard " << shards[n] << " got none of " << kDocs;
    all.insert(ids.begin(), ids.end());
  }
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kDocs)) << "each change in exactly one shard";
  for (int i = 0; i < kDocs; ++i) EXPECT_EQ(all.count("s" + std::to_string(i)), 1u) << i;
  // A reshard through node 1 ends every consumer's feed, whichever node serves it.
  const auto again = call(1, verb::put, "/db/_changes/_meta", R"({"shards":2})");
  ASSERT_EQ(again.status, 200u) << again.body;
  for (int n = 0; n < kNodes; ++n) {
    ASSERT_TRUE(consumers[n]->wait_end(10s)) << n << " " << consumers[n]->body();
    EXPECT_NE(consumers[n]->body().find("\"topology_changed\":true"), std::string::npos)
        << consumers[n]->body();
  }
  EXPECT_EQ(get(2, "/db/_changes/_meta")["topology"].back()["shards"], again.json()["shards"]);
}

// The build of a unique index is claimed in the store: while it runs through one node, another
// node refuses a second build of it and reports it as running.
TEST_F(MultiNodeTest, AUniqueIndexBuildThroughOneNodeIsSeenByTheOthers) {
  ASSERT_EQ(call(0, verb::put, "/db").status, 201u);
  for (int b = 0; b < 10; ++b) {
    Json docs = Json::array();
    for (int i = 0; i < 1000; ++i)
      docs.push_back({{"email", "u" + std::to_string(b * 1000 + i) + "@example.com"}});
    ASSERT_EQ(call(b % kNodes, verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump()).status,
              201u);
  }
  const std::string index =
      R"({"index":{"fields":["email"]},"name":"email","ddoc":"uniq","unique":true})";
  HttpResponse built;
  std::thread builder([&] {
    HttpClient c(port(0), 120s);
    built = c.request(verb::post, "/db/_index", index,
                      {basic_auth(kAdmin, kPassword), {"Content-Type", "application/json"}});
  });
  // Once the build has begun (its index is listed, not ready), the others see it running.
  bool seen_running = false, refused = false;
  for (int i = 0; i < 400 && !(seen_running && refused); ++i) {
    const Json list = get(2, "/db/_index")["indexes"];
    for (const Json& idx : list) {
      if (idx.value("name", "") != "email" || !idx.contains("build")) continue;
      seen_running = seen_running || idx["build"] == "running";
      if (idx["build"] == "running" && !refused) {
        const auto again = call(1, verb::post, "/db/_index", index);
        refused = again.status == 409u;
        EXPECT_TRUE(refused || again.status == 200u) << again.status << " " << again.body;
      }
    }
    std::this_thread::sleep_for(10ms);
  }
  builder.join();
  EXPECT_EQ(built.status, 200u) << built.body;
  EXPECT_TRUE(seen_running) << "the build was never seen running through another node";
  EXPECT_TRUE(refused) << "a second build through another node was not refused";
  // Built: the constraint holds through every node.
  for (int n = 0; n < kNodes; ++n) {
    const auto dup = call(n, verb::post, "/db", R"({"email":"u7@example.com"})");
    EXPECT_EQ(dup.status, 409u) << n << " " << dup.body;
  }
}

// A view is built by one node at a time, under its claim in the store: queries through the others
// wait for that build instead of mapping the same documents again (couchdb.mrview.map_doc counts
// every document mapped, wasted or not); when the builder dies, one of them takes the
// build over (after the claim lapses, 10 s unchanged) and every query answers.
TEST_F(MultiNodeTest, AViewIsBuiltByOneNodeAtATimeAndAnotherTakesOverWhenItDies) {
  ASSERT_EQ(call(0, verb::put, "/db").status, 201u);
  constexpr int kDocs = 9000, kKeys = 9;
  for (int b = 0; b < kDocs / 1500; ++b) {
    Json docs = Json::array();
    for (int i = b * 1500; i < (b + 1) * 1500; ++i)
      docs.push_back({{"_id", "d" + std::to_string(i)}, {"k", i % kKeys}});
    ASSERT_EQ(call(b % kNodes, verb::post, "/db/_bulk_docs", Json{{"docs", docs}}.dump()).status,
              201u);
  }
  // Two design documents, two indexes (their map functions differ, so do their signatures).
  for (const std::string name : {"a", "b"}) {
    const Json ddoc = {
        {"views",
         {{"by_k",
           {{"map", "function(d) { emit(d.k, '" + name + "'); }"}, {"reduce", "_count"}}}}}};
    ASSERT_EQ(call(0, verb::put, "/db/_design/" + name, ddoc.dump()).status, 201u);
  }
  Json expected = Json::array();
  for (int k = 0; k < kKeys; ++k) expected.push_back({{"key", k}, {"value", kDocs / kKeys}});

  std::vector<bool> alive(kNodes, true);
  // Documents mapped, over the live nodes.
  auto mapped = [&] {
    std::int64_t sum = 0;
    for (int n = 0; n < kNodes; ++n)
      if (alive[n])
        sum += get(n, "/_node/_local/_stats/couchdb/mrview/map_doc")["value"].get<std::int64_t>();
    return sum;
  };
  // The same query through every node at once; `ended` counts the queries that ended (answered,
  // or cut off by a node's death), and their answers are read once they have all been joined.
  std::atomic<int> ended{0};
  auto query_all = [&](const std::string& ddoc_id, std::vector<HttpResponse>& answers) {
    ended = 0;
    std::vector<std::thread> queries;
    for (int n = 0; n < kNodes; ++n) {
      // The target by value: the threads outlive this call.
      queries.emplace_back([&, n, target = "/db/" + ddoc_id + "/_view/by_k?group=true"] {
        try {
          HttpClient c(port(n), 180s);
          answers[n] = c.request(verb::get, target, "", {basic_auth(kAdmin, kPassword)});
        } catch (const std::exception&) {
          // a node killed meanwhile
        }
        ++ended;
      });
    }
    return queries;
  };
  // Who builds `ddoc_id`, as each node's _active_tasks says.
  auto builders = [&](const std::string& ddoc_id) {
    std::vector<int> out;
    for (int n = 0; n < kNodes; ++n) {
      if (!alive[n]) continue;
      for (const Json& t : get(n, "/_active_tasks"))  // every node's: this node's own
        if (t.value("type", "") == "indexer" && t.value("design_document", "") == ddoc_id &&
            t.value("node", "") == node_name(n))
          out.push_back(n);
    }
    return out;
  };

  // 1. Three queries at once: one build. The nodes may each map a first batch before one of them
  // holds the claim (kDocsPerStep, 500), no more; the changes are the documents and two design
  // documents.
  {
    const std::int64_t before = mapped();
    std::vector<HttpResponse> answers(kNodes);
    auto queries = query_all("_design/a", answers);
    bool seen_running = false;
    std::size_t most = 0;  // builders seen at once
    while (ended < kNodes) {
      const auto b = builders("_design/a");
      most = std::max(most, b.size());
      if (!b.empty() && !seen_running)
        seen_running = get((b[0] + 1) % kNodes,
                           "/db/_design/a/_info")["view_index"]["updater_running"] == true;
      std::this_thread::sleep_for(10ms);
    }
    for (auto& q : queries) q.join();
    for (int n = 0; n < kNodes; ++n) {
      ASSERT_EQ(answers[n].status, 200u) << n << " " << answers[n].body;
      EXPECT_EQ(answers[n].json()["rows"], expected) << n;
    }
    EXPECT_LE(most, 1u) << "two nodes built the view at once";
    EXPECT_TRUE(seen_running) << "no other node saw the build running";
    EXPECT_LE(mapped() - before, kDocs + 2 + 2 * 500) << "the nodes built the same view at once";
  }

  // 2. The builder dies mid-build: another takes the build over and every live query answers.
  std::vector<HttpResponse> answers(kNodes);
  auto queries = query_all("_design/b", answers);
  int first = -1;
  std::size_t most = 0;
  for (int i = 0; i < 3000 && first < 0; ++i) {
    const auto b = builders("_design/b");
    most = std::max(most, b.size());
    if (!b.empty()) first = b[0];
    std::this_thread::sleep_for(5ms);
  }
  if (first < 0) {
    for (auto& q : queries) q.join();
    FAIL() << "no node was seen building";
  }
  nodes_[first]->stop_with(SIGKILL);
  alive[first] = false;
  int second = -1;
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < until) {
    const auto b = builders("_design/b");
    most = std::max(most, b.size());
    if (!b.empty()) second = b[0];
    if (ended == kNodes) break;  // the killed node's query ends too, cut off
    std::this_thread::sleep_for(20ms);
  }
  for (auto& q : queries) q.join();
  EXPECT_LE(most, 1u) << "two nodes built the view at once";
  EXPECT_GE(second, 0) << "no node took the build over";
  EXPECT_NE(second, first);
  for (int n = 0; n < kNodes; ++n) {
    if (n == first) continue;
    ASSERT_EQ(answers[n].status, 200u) << n << " " << answers[n].body;
    EXPECT_EQ(answers[n].json()["rows"], expected) << n;
    EXPECT_EQ(get(n, "/db/_design/b/_info")["view_index"]["updater_running"], false) << n;
  }
}

// Any node answers /_membership, /_active_tasks and /_scheduler/jobs for all of them, as a node of
// a CouchDB cluster does; a node that stops drops out of them at once.
TEST_F(MultiNodeTest, EveryNodeListsTheNodesAndTheJobsOfAll) {
  Json all_names = Json::array();
  for (int n = 0; n < kNodes; ++n) all_names.push_back(node_name(n));
  for (int n = 0; n < kNodes; ++n) {
    EXPECT_TRUE(eventually([&] { return get(n, "/_membership")["all_nodes"] == all_names; }, 5s))
        << n << ": " << get(n, "/_membership").dump();
    EXPECT_EQ(get(n, "/_membership")["cluster_nodes"], all_names) << n;
    EXPECT_EQ(get(n, "/_node/_local")["name"], node_name(n)) << n;
    EXPECT_EQ(call(n, verb::get, "/_node/" + node_name(n) + "/_config/chaise/node_name").status,
              200u)
        << n;
  }
  // A continuous replication asked of node 0 runs there.
  ASSERT_EQ(call(0, verb::put, "/src").status, 201u);
  ASSERT_EQ(call(0, verb::put, "/src/d", "{}").status, 201u);
  const std::string base =
      "http://" + kAdmin + ":" + kPassword + "@127.0.0.1:" + std::to_string(port(0)) + "/";
  const Json spec = {{"source", base + "src"},
                     {"target", base + "tgt"},
                     {"create_target", true},
                     {"continuous", true}};
  const auto started = call(0, verb::post, "/_replicate", spec.dump());
  ASSERT_EQ(started.status, 202u) << started.body;
  const std::string id = started.json()["_local_id"];
  auto job_on = [&](int n) {
    const Json jobs = get(n, "/_scheduler/jobs");
    for (const Json& j : jobs["jobs"])
      if (j["id"] == id) return j;
    return Json();
  };
  auto task_on = [&](int n) {
    for (const Json& t : get(n, "/_active_tasks"))
      if (t.value("type", "") == "replication" && t["replication_id"] == id) return t;
    return Json();
  };
  for (int n = 0; n < kNodes; ++n) {
    EXPECT_TRUE(eventually([&] { return !job_on(n).is_null() && !task_on(n).is_null(); }, 5s)) << n;
    EXPECT_EQ(job_on(n)["node"], node_name(0)) << n;
    EXPECT_EQ(task_on(n)["node"], node_name(0)) << n;
    EXPECT_EQ(get(n, "/_scheduler/jobs")["total_rows"], 1) << n;
    const auto one = call(n, verb::get, "/_scheduler/jobs/" + id);
    EXPECT_EQ(one.status, 200u) << n << ": " << one.body;
    EXPECT_EQ(one.json()["node"], node_name(0)) << n;
  }
  EXPECT_EQ(call(1, verb::get, "/_scheduler/jobs/nonesuch").status, 404u);
  // Cancelled on node 0: gone from every node's lists within a report or two.
  Json cancel = spec;
  cancel["cancel"] = true;
  ASSERT_EQ(call(0, verb::post, "/_replicate", cancel.dump()).status, 200u);
  for (int n = 0; n < kNodes; ++n)
    EXPECT_TRUE(eventually([&] { return job_on(n).is_null() && task_on(n).is_null(); }, 5s)) << n;
  // A node that stops is dropped at once.
  const ExitStatus s = nodes_[2]->stop();
  EXPECT_TRUE(s.exited && s.exit_code == 0);
  const Json two = Json::array({node_name(0), node_name(1)});
  EXPECT_EQ(get(0, "/_membership")["all_nodes"], two);
  EXPECT_EQ(get(1, "/_membership")["all_nodes"], two);
}

// A _replicator document's job runs on one node, the one holding its lease, and every node's
// /_scheduler/docs shows it running there; when that node dies, another takes the job over (after
// lease_timeout, 1.5 s here) and goes on from the checkpoint.
TEST_F(MultiNodeTest, AReplicatorDocumentsJobRunsOnOneNodeAndMovesWhenThatNodeDies) {
  // The databases live on a server of their own (admin party), which no node's death touches.
  ServerProcess outside(dir_.path() / "outside");
  HttpClient co(outside.port(), 60s);
  const std::string base = "http://127.0.0.1:" + std::to_string(outside.port()) + "/";
  ASSERT_EQ(co.request(verb::put, "/src").status, 201u);
  for (int i = 0; i < 10; ++i)
    ASSERT_EQ(co.request(verb::put, "/src/d" + std::to_string(i), "{}").status, 201u);
  ASSERT_EQ(call(0, verb::put, "/_replicator").status, 201u);
  const Json job = {{"source", base + "src"},
                    {"target", base + "tgt"},
                    {"create_target", true},
                    {"continuous", true},
                    {"checkpoint_interval", 200}};
  const auto put_job = call(1, verb::put, "/_replicator/follow", job.dump());
  ASSERT_EQ(put_job.status, 201u) << put_job.body;
  // The nodes running it, as their own _active_tasks say (live nodes only).
  std::vector<bool> alive(kNodes, true);
  auto runners = [&] {
    std::vector<int> out;
    for (int n = 0; n < kNodes; ++n) {
      if (!alive[n]) continue;
      for (const Json& t : get(n, "/_active_tasks"))  // every node's: this node's own
        if (t.value("type", "") == "replication" && t.value("doc_id", "") == "follow" &&
            t.value("node", "") == node_name(n))
          out.push_back(n);
    }
    return out;
  };
  // Never two at once, from the start: every node races for the lease as it reads the document,
  // and a lease is written only over the revision its writer read (core::put_local_if).
  std::size_t most = 0;
  for (int i = 0; i < 40; ++i) {
    most = std::max(most, runners().size());
    std::this_thread::sleep_for(25ms);
  }
  EXPECT_LE(most, 1u) << "two nodes ran the job at once";
  ASSERT_TRUE(eventually([&] { return co.get("/tgt/d9").status == 200u; }, 20s));
  // One node, and the same one, over several lease periods.
  std::vector<int> first = runners();
  ASSERT_EQ(first.size(), 1u);
  for (int i = 0; i < 8; ++i) {
    std::this_thread::sleep_for(500ms);
    EXPECT_EQ(runners(), first) << "sample " << i;
  }
  const int runner = first[0];
  auto task_of = [&](int n) {
    for (const Json& t : get(n, "/_active_tasks"))
      if (t.value("type", "") == "replication" && t.value("doc_id", "") == "follow" &&
          t.value("node", "") == node_name(n))
        return t;
    return Json::object();
  };
  const Json first_id = task_of(runner)["replication_id"];
  ASSERT_TRUE(first_id.is_string());
  // Every node shows the document's job as the runner reports it.
  for (int n = 0; n < kNodes; ++n) {
    Json d = get(n, "/_scheduler/docs/_replicator/follow");
    EXPECT_EQ(d["state"], "running") << n << " " << d.dump();
    EXPECT_EQ(d["node"], node_name(runner)) << n << " " << d.dump();
    EXPECT_EQ(d["id"], first_id) << n;
    EXPECT_GE(d["info"]["docs_written"].get<int>(), 10) << n << " " << d.dump();
    Json running = get(n, "/_scheduler/docs?states=running");
    EXPECT_EQ(running["total_rows"], 1) << n << " " << running.dump();
    EXPECT_EQ(get(n, "/_scheduler/docs?states=pending")["total_rows"], 0) << n;
  }
  // The runner dies without a word; another node takes the job over.
  nodes_[runner]->stop_with(SIGKILL);
  alive[runner] = false;
  ASSERT_EQ(co.request(verb::put, "/src/after", "{}").status, 201u);
  EXPECT_TRUE(eventually([&] { return co.get("/tgt/after").status == 200u; }, 20s));
  EXPECT_TRUE(eventually([&] { return runners().size() == 1u; }, 10s));
  const std::vector<int> now = runners();
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(now[0], runner);
  // It goes on from the job's checkpoint: the replication id, which names the checkpoint, is the
  // same on every node (the nodes share the uuid it hashes).
  EXPECT_EQ(task_of(now[0])["replication_id"], first_id);
  EXPECT_NE(task_of(now[0])["checkpointed_source_seq"], "0");
}

}  // namespace
}  // namespace chaise::test
