// couch_peruser against the real server: a user document gets its database, named as CouchDB
// names it, with the user as admin and member; deleting the user deletes the database or takes
// the user out of it ([couch_peruser] delete_dbs); the setting turned on later covers the users
// that already exist.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::verb;
using Json = nlohmann::ordered_json;

class PerUserTest : public ::testing::Test {
 protected:
  void start(const std::string& ini_text) {
    const fs::path ini = dir_.path() / "local.ini";
    write_file(ini, "[couchdb]\nsingle_node = true\n" + ini_text);
    server_.emplace(dir_.path() / "data", std::vector<std::string>{"--config", ini.string()});
    client_ = std::make_unique<HttpClient>(server_->port(), 60s);
  }
  HttpResponse call(verb method, std::string_view target, std::string body = {}) {
    return client_->request(method, target, std::move(body),
                            {{"Content-Type", "application/json"}});
  }
  std::string add_user(const std::string& name) {
    auto r = call(verb::put, "/_users/org.couchdb.user:" + name,
                  R"({"name":")" + name + R"(","password":"pw","roles":[],"type":"user"})");
    EXPECT_EQ(r.status, 201u) << r.body;
    return r.json()["rev"];
  }
  void delete_user(const std::string& name, const std::string& rev) {
    ASSERT_EQ(call(verb::delete_, "/_users/org.couchdb.user:" + name + "?rev=" + rev).status, 200u);
  }
  bool exists(const std::string& db) { return call(verb::get, "/" + db).status == 200; }
  TempDir dir_;
  std::optional<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(PerUserTest, EachUserGetsADatabaseThatGoesWithTheUser) {
  start("[couch_peruser]\nenable = true\ndelete_dbs = true\n");
  const std::string rev = add_user("bob");
  ASSERT_TRUE(eventually([&] { return exists("userdb-626f62"); }));
  EXPECT_EQ(call(verb::get, "/userdb-626f62/_security").json(),
            Json::parse(R"({"members":{"roles":["_admin"],"names":["bob"]},)"
                        R"("admins":{"roles":["_admin"],"names":["bob"]}})"));
  // The user can use it; another user cannot.
  add_user("eve");
  ASSERT_TRUE(eventually([&] { return exists("userdb-657665"); }));
  HttpClient bob(server_->port());
  const std::string basic_bob = "Basic " + std::string("Ym9iOnB3");  // bob:pw
  EXPECT_EQ(bob.request(verb::put, "/userdb-626f62/doc", "{}",
                        {{"Authorization", basic_bob}, {"Content-Type", "application/json"}})
                .status,
            201u);
  EXPECT_EQ(bob.request(verb::get, "/userdb-657665", "", {{"Authorization", basic_bob}}).status,
            403u);

  delete_user("bob", rev);
  EXPECT_TRUE(eventually([&] { return !exists("userdb-626f62"); }));
  EXPECT_TRUE(exists("userdb-657665"));
}

TEST_F(PerUserTest, WithoutDeleteDbsTheUserLeavesTheDatabase) {
  start("[couch_peruser]\nenable = true\n");
  const std::string rev = add_user("ann");
  ASSERT_TRUE(eventually([&] { return exists("userdb-616e6e"); }));
  delete_user("ann", rev);
  ASSERT_TRUE(eventually([&] {
    const Json sec = call(verb::get, "/userdb-616e6e/_security").json();
    return sec["admins"]["names"] == Json::array() && sec["members"]["names"] == Json::array();
  }));
  EXPECT_TRUE(exists("userdb-616e6e"));
}

TEST_F(PerUserTest, TurnedOnLaterCoversExistingUsersWithItsPrefix) {
  start("");
  add_user("x.y");
  ASSERT_EQ(
      call(verb::put, "/_node/_local/_config/couch_peruser/database_prefix", R"("home-")").status,
      200u);
  EXPECT_FALSE(exists("home-782e79"));  // off by default
  ASSERT_EQ(call(verb::put, "/_node/_local/_config/couch_peruser/enable", R"("true")").status,
            200u);
  EXPECT_TRUE(eventually([&] { return exists("home-782e79"); }));
}

}  // namespace
}  // namespace chaise::test
