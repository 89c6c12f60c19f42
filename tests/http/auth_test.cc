// Authentication and authorization through the real server: admins from the config, Basic, the
// AuthSession cookie, proxy headers, /_session, per-database _security, _users, and the startup
// rules for admins. Expected bodies were checked against CouchDB 3.5.0.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/util/base64.h"
#include "tests/http/test_credentials.h"
#include "tests/http/test_server.h"

namespace chaise::test {
namespace {

using beast_http::field;
using beast_http::verb;
using Headers = std::vector<std::pair<std::string, std::string>>;

Headers basic(std::string_view user, std::string_view password) {
  return {basic_auth(user, password)};
}

Headers with(Headers h, std::string name, std::string value) {
  h.emplace_back(std::move(name), std::move(value));
  return h;
}

const Headers kJson = {{"Content-Type", "application/json"}};

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_file(const fs::path& path, std::string_view text) { std::ofstream(path) << text; }

// "AuthSession=<value>" from a Set-Cookie header value.
std::string session_cookie_value(const std::string& set_cookie) {
  return set_cookie.substr(0, set_cookie.find(';'));
}
std::string session_cookie(const HttpResponse& r) {
  return session_cookie_value(r.header(field::set_cookie));
}

class AuthTest : public ::testing::Test {
 protected:
  // A server whose only admin is admin/secret (hashed with few iterations to keep tests fast),
  // plus `extra` ini text.
  void start(std::string_view extra = "") {
    ini_ = dir_.path() / "local.ini";
    write_file(ini_, std::string("[chttpd_auth]\niterations = 10\n[admins]\nadmin = secret\n") +
                         std::string(extra));
    server_ = std::make_unique<ServerProcess>(
        dir_.path() / "data",
        std::vector<std::string>{"--no-admin-party", "--config", ini_.string()});
    client_ = std::make_unique<HttpClient>(server_->port());
  }

  HttpResponse call(verb method, const std::string& target, std::string body = {},
                    const Headers& headers = {}) {
    return client_->request(method, target, std::move(body), headers);
  }
  HttpResponse as_admin(verb method, const std::string& target, std::string body = {}) {
    return call(method, target, std::move(body),
                with(basic("admin", "secret"), "Content-Type", "application/json"));
  }
  // Creates user `name` (password `password`, roles) in _users as the admin.
  void add_user(const std::string& name, const std::string& password,
                const std::string& roles = "[]") {
    as_admin(verb::put, "/_users");
    const auto r = as_admin(verb::put, "/_users/org.couchdb.user:" + name,
                            R"({"name":")" + name + R"(","password":")" + password +
                                R"(","roles":)" + roles + R"(,"type":"user"})");
    ASSERT_EQ(r.status, 201u) << r.body;
  }

  TempDir dir_;
  fs::path ini_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(AuthTest, PlainAdminPasswordIsHashedIntoTheConfigFile) {
  start();
  const std::string ini = read_file(ini_);
  EXPECT_EQ(ini.find("admin = secret"), std::string::npos) << ini;
  EXPECT_NE(ini.find("admin = -pbkdf2:sha256-"), std::string::npos) << ini;
  EXPECT_NE(ini.find(",10\n"), std::string::npos) << ini;  // the configured iterations
  EXPECT_EQ(call(verb::get, "/_session", {}, basic("admin", "secret")).json()["userCtx"],
            nlohmann::ordered_json::parse(R"({"name":"admin","roles":["_admin"]})"));
  // The hashed form still works after a restart.
  server_.reset();
  server_ = std::make_unique<ServerProcess>(
      dir_.path() / "data",
      std::vector<std::string>{"--no-admin-party", "--config", ini_.string()});
  client_ = std::make_unique<HttpClient>(server_->port());
  EXPECT_EQ(call(verb::get, "/_all_dbs", {}, basic("admin", "secret")).status, 200u);
}

TEST_F(AuthTest, NoAdminRefusesToStartUnlessAskedOtherwise) {
  const fs::path data = dir_.path() / "data";
  EXPECT_EQ(run_chaise_to_exit({"--port", "0", "--data-dir", data.string()}).exit_code, 1);

  // --create-admin: one admin with a random password, printed once, stored hashed.
  const fs::path ini = dir_.path() / "created.ini";
  write_file(ini, "[chttpd_auth]\niterations = 10\n");
  int out_pipe[2];
  ASSERT_EQ(::pipe2(out_pipe, O_CLOEXEC), 0);
  const pid_t pid = spawn_chaise(
      {"--port", "0", "--data-dir", data.string(), "--config", ini.string(), "--create-admin"}, {},
      out_pipe[1]);
  ::close(out_pipe[1]);
  std::string printed;
  char buffer[512];
  while (printed.find("listening on") == std::string::npos) {
    const ssize_t n = ::read(out_pipe[0], buffer, sizeof buffer);
    if (n <= 0) break;
    printed.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(out_pipe[0]);
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const auto at = printed.find("with password ");
  ASSERT_NE(at, std::string::npos) << printed;
  const std::string password = printed.substr(at + 14, printed.find(' ', at + 14) - at - 14);
  EXPECT_EQ(password.size(), 20u);
  const std::string stored = read_file(ini);
  EXPECT_NE(stored.find("admin = -pbkdf2:sha256-"), std::string::npos) << stored;
  EXPECT_EQ(stored.find(password), std::string::npos);

  // A second start finds the admin and neither creates nor prints another.
  ServerProcess again{data, {"--no-admin-party", "--config", ini.string(), "--create-admin"}};
  HttpClient client{again.port()};
  EXPECT_EQ(client.request(verb::get, "/_all_dbs", {}, basic("admin", password)).status, 200u);
}

TEST_F(AuthTest, EnvironmentAdminAsCouchDbDockerImage) {
  const fs::path ini = dir_.path() / "only.ini";
  write_file(ini, "[chttpd_auth]\niterations = 10\n");
  ServerProcess server{dir_.path() / "data",
                       {"--no-admin-party", "--config", ini.string()},
                       {"COUCHDB_USER=docker", "COUCHDB_PASSWORD=pw"}};
  HttpClient client{server.port()};
  EXPECT_EQ(client.request(verb::get, "/_all_dbs", {}, basic("docker", "pw")).status, 200u);
  EXPECT_EQ(client.request(verb::get, "/_all_dbs", {}, basic("docker", "nope")).status, 401u);
  // The environment's admin lives in memory: the config file does not collect it.
  EXPECT_EQ(read_file(ini).find("docker"), std::string::npos) << read_file(ini);
}

TEST_F(AuthTest, BasicAuthAndServerAdminPaths) {
  start();
  // Anonymous: the welcome, _up, _uuids and _session are open; _all_dbs and db creation are not.
  EXPECT_EQ(call(verb::get, "/").status, 200u);
  EXPECT_EQ(call(verb::get, "/_up").status, 200u);
  EXPECT_EQ(call(verb::get, "/_uuids").status, 200u);
  auto r = call(verb::get, "/_all_dbs");
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(r.body, R"({"error":"unauthorized","reason":"You are not a server admin."})"
                    "\n");
  EXPECT_EQ(r.header(field::www_authenticate), "");
  EXPECT_EQ(call(verb::put, "/db").status, 401u);
  // _replicate needs a user; _scheduler a server admin. Database names stand for this
  // server's own databases, opened with the request's credentials.
  EXPECT_EQ(call(verb::post, "/_replicate", R"({"source":"a","target":"b"})", kJson).status, 401u);
  r = as_admin(verb::post, "/_replicate", R"({"source":"a","target":"b"})");
  EXPECT_EQ(r.status, 500u) << r.body;
  EXPECT_EQ(r.json()["error"], "db_not_found");
  EXPECT_EQ(call(verb::get, "/_scheduler/jobs").status, 401u);
  EXPECT_EQ(as_admin(verb::get, "/_scheduler/jobs").status, 200u);
  // Asked for, the 401 carries WWW-Authenticate.
  r = call(verb::get, "/_all_dbs", {}, {{"X-CouchDB-WWW-Authenticate", "Cookie"}});
  EXPECT_EQ(r.header(field::www_authenticate), "Cookie");

  EXPECT_EQ(as_admin(verb::put, "/db").status, 201u);
  EXPECT_EQ(as_admin(verb::get, "/_all_dbs").body, R"(["db"])"
                                                   "\n");
  r = call(verb::get, "/_all_dbs", {}, basic("admin", "wrong"));
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(r.body, R"({"error":"unauthorized","reason":"Name or password is incorrect."})"
                    "\n");
  r = call(verb::get, "/_all_dbs", {}, basic("nobody", "x"));
  EXPECT_EQ(r.status, 401u);
  // Malformed: invalid base64 is a 400; "Basic:" (PouchDB sends it once) is no credential.
  r = call(verb::get, "/db", {}, {{"Authorization", "Basic !!!"}});
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(r.body,
            R"({"error":"bad_request","reason":"Authorization header has invalid base64 value"})"
            "\n");
  r = call(verb::get, "/db", {}, {{"Authorization", "Basic: YWRtaW46c2VjcmV0"}});
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(r.body,
            R"({"error":"unauthorized","reason":"You are not authorized to access this db."})"
            "\n");
  // Config and node paths are for server admins.
  EXPECT_EQ(call(verb::get, "/_node/_local/_config").status, 401u);
}

TEST_F(AuthTest, NewDatabasesAreAdminOnlyAndSecurityGrantsMembers) {
  start();
  add_user("bob", "pw", R"(["readers"])");
  add_user("carol", "pw");
  ASSERT_EQ(as_admin(verb::put, "/db").status, 201u);
  EXPECT_EQ(as_admin(verb::get, "/db/_security").body,
            R"({"members":{"roles":["_admin"]},"admins":{"roles":["_admin"]}})"
            "\n");
  auto r = call(verb::get, "/db", {}, basic("bob", "pw"));
  EXPECT_EQ(r.status, 403u);
  EXPECT_EQ(r.body, R"({"error":"forbidden","reason":"You are not allowed to access this db."})"
                    "\n");
  EXPECT_EQ(call(verb::get, "/db/_all_docs").status, 401u);
  EXPECT_EQ(call(verb::get, "/db/_changes", {}, basic("bob", "pw")).status, 403u);

  // Members by role, admins by name.
  r = as_admin(
      verb::put, "/db/_security",
      R"({"admins":{"names":["carol"],"roles":[]},"members":{"names":[],"roles":["readers"]}})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.body, "{\"ok\":true}\n");
  const Headers bob = with(basic("bob", "pw"), "Content-Type", "application/json");
  const Headers carol = with(basic("carol", "pw"), "Content-Type", "application/json");
  EXPECT_EQ(call(verb::get, "/db", {}, bob).status, 200u);
  EXPECT_EQ(call(verb::put, "/db/doc", R"({"a":1})", bob).status, 201u);
  EXPECT_EQ(call(verb::get, "/db/doc", {}, bob).status, 200u);
  EXPECT_EQ(call(verb::get, "/db/_changes", {}, bob).status, 200u);
  EXPECT_EQ(call(verb::get, "/db/_changes/_meta?since=0", {}, bob).status, 200u);
  EXPECT_EQ(call(verb::put, "/db/_changes/_meta", R"({"shards":2})", bob).status, 403u);
  EXPECT_EQ(call(verb::get, "/db/_security", {}, bob).status, 200u);
  // Design documents and the security object: db admins only.
  r = call(verb::put, "/db/_design/d", R"({"views":{}})", bob);
  EXPECT_EQ(r.status, 403u);
  EXPECT_EQ(r.body, R"({"error":"forbidden","reason":"You are not a db or server admin."})"
                    "\n");
  r = call(verb::post, "/db/_bulk_docs", R"({"docs":[{"_id":"_design/x"},{"_id":"plain"}]})", bob);
  EXPECT_EQ(r.status, 201u);
  EXPECT_EQ(r.json()[0]["error"], "forbidden");
  EXPECT_EQ(r.json()[1]["ok"], true);
  EXPECT_EQ(call(verb::put, "/db/_security", "{}", bob).status, 403u);
  EXPECT_EQ(call(verb::put, "/db/_revs_limit", "5", bob).status, 403u);
  r = call(verb::post, "/db/_compact", "{}", bob);
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(r.body, R"({"error":"unauthorized","reason":"You are not a server or db admin."})"
                    "\n");
  EXPECT_EQ(call(verb::put, "/db/_design/d", R"({"views":{}})", carol).status, 201u);
  EXPECT_EQ(call(verb::post, "/db/_compact", "{}", carol).status, 202u);
  // A db admin still may not delete the database: that is a server admin's.
  EXPECT_EQ(call(verb::delete_, "/db", {}, carol).status, 401u);
  // Anonymous writes to a members-only database: 401.
  EXPECT_EQ(call(verb::put, "/db/anon", "{}", kJson).status, 401u);
  // A malformed security object is refused and changes nothing.
  r = as_admin(verb::put, "/db/_security", R"({"admins":{"names":"carol"}})");
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(call(verb::get, "/db", {}, bob).status, 200u);
  // Emptied members: the database is public.
  ASSERT_EQ(as_admin(verb::put, "/db/_security", "{}").status, 200u);
  EXPECT_EQ(call(verb::get, "/db/doc").status, 200u);
  EXPECT_EQ(as_admin(verb::get, "/db/_security").body, "{}\n");
  // Remembered databases and security objects (core/db/db_cache.h) change with the next request:
  // access taken away, and a database deleted and created again under the same name.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(call(verb::get, "/db/doc", {}, bob).status, 200u);
  ASSERT_EQ(as_admin(verb::put, "/db/_security", R"({"members":{"names":["carol"]}})").status,
            200u);
  EXPECT_EQ(call(verb::get, "/db/doc", {}, bob).status, 403u);
  EXPECT_EQ(call(verb::get, "/db/doc", {}, carol).status, 200u);
  ASSERT_EQ(as_admin(verb::delete_, "/db").status, 200u);
  EXPECT_EQ(as_admin(verb::get, "/db/doc").status, 404u);
  ASSERT_EQ(as_admin(verb::put, "/db").status, 201u);
  EXPECT_EQ(as_admin(verb::get, "/db/doc").status, 404u);
  EXPECT_EQ(call(verb::get, "/db", {}, carol).status, 403u);  // admin-only again
}

TEST_F(AuthTest, CookieLoginSessionAndLogout) {
  start();
  add_user("bob", "pw", R"(["r1"])");
  // Form body.
  auto r = call(verb::post, "/_session", "name=bob&password=pw",
                {{"Content-Type", "application/x-www-form-urlencoded"}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.body, R"({"ok":true,"name":"bob","roles":["r1"]})"
                    "\n");
  const std::string set_cookie = r.header(field::set_cookie);
  EXPECT_TRUE(set_cookie.starts_with("AuthSession=")) << set_cookie;
  EXPECT_NE(set_cookie.find("; Version=1; Expires="), std::string::npos) << set_cookie;
  EXPECT_NE(set_cookie.find("; Max-Age=600; Path=/; HttpOnly"), std::string::npos) << set_cookie;
  const std::string cookie = session_cookie(r);
  // The secret generated at the first login is kept in the writable config file.
  EXPECT_NE(read_file(ini_).find("secret = "), std::string::npos);

  r = call(verb::get, "/_session", {}, {{"Cookie", cookie}});
  EXPECT_EQ(
      r.body,
      R"({"ok":true,"userCtx":{"name":"bob","roles":["r1"]},"info":{"authentication_handlers":["cookie","default"],"authenticated":"cookie"}})"
      "\n");
  // JSON body, "username" as well as "name".
  r = call(verb::post, "/_session", R"({"username":"bob","password":"pw"})", kJson);
  EXPECT_EQ(r.status, 200u);
  r = call(verb::post, "/_session", R"({"name":"bob","password":"no"})", kJson);
  EXPECT_EQ(r.status, 401u);
  EXPECT_TRUE(r.header(field::set_cookie).starts_with("AuthSession=; Version=1"));
  r = call(verb::post, "/_session", R"({"password":"pw"})", kJson);
  EXPECT_EQ(r.body, R"({"error":"bad_request","reason":"request body must contain a username"})"
                    "\n");
  r = call(verb::post, "/_session", "x", {{"Content-Type", "text/plain"}});
  EXPECT_EQ(r.status, 415u);
  // A cookie that does not decode is a 400; a forged or foreign one is ignored (anonymous).
  r = call(verb::get, "/_session", {}, {{"Cookie", "AuthSession=%%%"}});
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(
      r.body,
      R"({"error":"bad_request","reason":"Malformed AuthSession cookie. Please clear your cookies."})"
      "\n");
  std::string forged = cookie;
  forged[forged.size() - 3] = forged[forged.size() - 3] == 'A' ? 'B' : 'A';
  r = call(verb::get, "/_session", {}, {{"Cookie", forged}});
  EXPECT_EQ(r.json()["userCtx"]["name"], nullptr);
  // ?basic=true asks an anonymous caller to log in.
  EXPECT_EQ(call(verb::get, "/_session?basic=true").status, 401u);
  // Logout clears the cookie.
  r = call(verb::delete_, "/_session");
  EXPECT_EQ(r.body, "{\"ok\":true}\n");
  EXPECT_TRUE(r.header(field::set_cookie).starts_with("AuthSession=; Version=1"));
  EXPECT_EQ(call(verb::put, "/_session").status, 405u);
}

// The cookie's age decides: fresh, refreshed once a tenth of its lifetime has passed, expired at
// its end. The test mints cookies of any age as CouchDB makes them (HMAC-SHA256 of "name:HEXTIME"
// keyed with the server secret and the user's salt), so no test waits for the clock.
TEST_F(AuthTest, CookieIsRefreshedAfterTenthOfItsLifetimeAndExpires) {
  const std::string secret = "cookie-test-secret";
  start("[chttpd_auth]\ntimeout = 600\nsecret = " + secret + "\n");
  // The admin's salt: the second field of its stored hash ("-pbkdf2:sha256-<key>,<salt>,<n>").
  std::ifstream in(ini_);
  std::string line, salt;
  while (std::getline(in, line))
    if (line.starts_with("admin = -pbkdf2")) salt = line.substr(line.find(',') + 1);
  salt = salt.substr(0, salt.find(','));
  ASSERT_FALSE(salt.empty());
  auto mint = [&](std::int64_t stamp) {
    char hex[24];
    std::snprintf(hex, sizeof hex, "%llX", static_cast<long long>(stamp));
    const std::string data = std::string("admin:") + hex;
    return "AuthSession=" + base64url(data + ":" + hmac_sha256(secret + salt, data));
  };
  // A login's cookie is exactly the one minted for its time.
  auto r = call(verb::post, "/_session", "name=admin&password=secret",
                {{"Content-Type", "application/x-www-form-urlencoded"}});
  const std::string login = session_cookie(r);
  const auto decoded = core::base64url_decode(login.substr(login.find('=') + 1));
  ASSERT_TRUE(decoded);
  const std::string time_hex = decoded->substr(6, decoded->find(':', 6) - 6);
  EXPECT_EQ(login, mint(std::stoll(time_hex, nullptr, 16)));

  const std::int64_t now = std::time(nullptr);
  auto name_with = [&](const std::string& cookie, std::string* set_cookie) {
    auto got = call(verb::get, "/_session", {}, {{"Cookie", cookie}});
    *set_cookie = got.header(field::set_cookie);
    return got.json()["userCtx"]["name"];
  };
  std::string set_cookie;
  // Fresh: accepted, no new cookie.
  EXPECT_EQ(name_with(mint(now), &set_cookie), "admin");
  EXPECT_EQ(set_cookie, "");
  // 100 s of 600 gone (more than a tenth): accepted and replaced by a fresh one.
  EXPECT_EQ(name_with(mint(now - 100), &set_cookie), "admin");
  ASSERT_TRUE(set_cookie.starts_with("AuthSession=")) << set_cookie;
  EXPECT_EQ(name_with(session_cookie_value(set_cookie), &set_cookie), "admin");
  // 601 s old: expired, the caller is anonymous.
  EXPECT_EQ(name_with(mint(now - 601), &set_cookie), nullptr);
}

TEST_F(AuthTest, UsersDatabaseRules) {
  start("[couchdb]\ndefault_security = everyone\n");
  ASSERT_EQ(as_admin(verb::put, "/_users").status, 201u);
  // Anonymous sign-up into a public _users; the password is hashed, never stored.
  auto r = call(verb::put, "/_users/org.couchdb.user:bob",
                R"({"name":"bob","password":"pw","roles":[],"type":"user"})", kJson);
  ASSERT_EQ(r.status, 201u) << r.body;
  const auto doc = as_admin(verb::get, "/_users/org.couchdb.user:bob").json();
  EXPECT_FALSE(doc.contains("password"));
  EXPECT_EQ(doc["password_scheme"], "pbkdf2");
  EXPECT_EQ(doc["pbkdf2_prf"], "sha256");
  EXPECT_EQ(doc["iterations"], 10);
  EXPECT_EQ(doc["derived_key"].get<std::string>().size(), 64u);
  EXPECT_EQ(call(verb::get, "/_session", {}, basic("bob", "pw")).json()["userCtx"]["name"], "bob");
  // Signing up with roles, or a system name: refused.
  r = call(verb::put, "/_users/org.couchdb.user:eve",
           R"({"name":"eve","password":"pw","roles":["boss"],"type":"user"})", kJson);
  EXPECT_EQ(r.body, R"({"error":"forbidden","reason":"Only _admin may set roles"})"
                    "\n");
  r = call(verb::put, "/_users/org.couchdb.user:_x",
           R"({"name":"_x","password":"pw","roles":[],"type":"user"})", kJson);
  EXPECT_EQ(r.body, R"({"error":"forbidden","reason":"Username may not start with underscore."})"
                    "\n");
  r = call(verb::put, "/_users/org.couchdb.user:zed", R"({"name":"zed","roles":[]})", kJson);
  EXPECT_EQ(r.body, R"({"error":"forbidden","reason":"doc.type must be user"})"
                    "\n");

  // Bob edits his own document (password change) but not his roles.
  const Headers as_bob = with(basic("bob", "pw"), "Content-Type", "application/json");
  auto mine = call(verb::get, "/_users/org.couchdb.user:bob", {}, as_bob).json();
  mine["roles"] = {"boss"};
  r = call(verb::put, "/_users/org.couchdb.user:bob", mine.dump(), as_bob);
  EXPECT_EQ(r.body, R"({"error":"forbidden","reason":"Only _admin may edit roles"})"
                    "\n");
  mine["roles"] = nlohmann::ordered_json::array();
  mine["password"] = "pw2";
  r = call(verb::put, "/_users/org.couchdb.user:bob", mine.dump(), as_bob);
  ASSERT_EQ(r.status, 201u) << r.body;
  // The old password stops working at once (the verified-credential cache follows the doc).
  EXPECT_EQ(call(verb::get, "/_session", {}, basic("bob", "pw")).status, 401u);
  EXPECT_EQ(call(verb::get, "/_session", {}, basic("bob", "pw2")).status, 200u);

  // Other users' documents are missing to bob; listing _users is for server admins.
  add_user("carol", "pw");
  const Headers as_bob2 = with(basic("bob", "pw2"), "Content-Type", "application/json");
  EXPECT_EQ(call(verb::get, "/_users/org.couchdb.user:carol", {}, as_bob2).status, 404u);
  // Unless [chttpd_auth] public_fields names some of its fields: then those, and only those.
  as_admin(verb::put, "/_node/_local/_config/chttpd_auth/public_fields", R"("name, type")");
  auto pub = call(verb::get, "/_users/org.couchdb.user:carol", {}, as_bob2);
  ASSERT_EQ(pub.status, 200u) << pub.body;
  EXPECT_EQ(pub.json()["name"], "carol");
  EXPECT_FALSE(pub.json().contains("derived_key"));
  EXPECT_FALSE(pub.json().contains("roles"));
  as_admin(verb::delete_, "/_node/_local/_config/chttpd_auth/public_fields");
  r = call(verb::put, "/_users/org.couchdb.user:carol",
           R"({"name":"carol","password":"x","roles":[],"type":"user"})", as_bob2);
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(call(verb::get, "/_users/_all_docs", {}, as_bob2).status, 401u);
  EXPECT_EQ(call(verb::get, "/_users/_changes", {}, as_bob2).status, 401u);
  // The _users security object is not editable by default.
  r = as_admin(verb::put, "/_users/_security", "{}");
  EXPECT_EQ(r.status, 403u);
  EXPECT_EQ(
      r.body,
      R"({"error":"forbidden","reason":"You can't edit the security object of the user database."})"
      "\n");
  // The admin deletes a user; the credential stops working.
  const auto carol = as_admin(verb::get, "/_users/org.couchdb.user:carol").json();
  EXPECT_EQ(call(verb::get, "/_session", {}, basic("carol", "pw")).json()["userCtx"]["name"],
            "carol");
  EXPECT_EQ(as_admin(verb::delete_,
                     "/_users/org.couchdb.user:carol?rev=" + carol["_rev"].get<std::string>())
                .status,
            200u);
  EXPECT_EQ(call(verb::get, "/_session", {}, basic("carol", "pw")).status, 401u);
}

// couch_users_db:after_doc_read holds on every path that reads a document, not only GET: a
// member of _users who is not its admin sees others' documents as their public fields at most.
TEST_F(AuthTest, OthersUserDocsShowOnlyPublicFieldsOnEveryReadPath) {
  start("[couchdb]\ndefault_security = everyone\n[chttpd_auth]\npublic_fields = name, city\n");
  add_user("bob", "pw");
  add_user("carol", "pw");
  add_user("dan", "pw");
  // carol has a public city; dan's public field is taken away below.
  auto carol = as_admin(verb::get, "/_users/org.couchdb.user:carol").json();
  carol["city"] = "Lyon";
  ASSERT_EQ(as_admin(verb::put, "/_users/org.couchdb.user:carol", carol.dump()).status, 201u);
  carol = as_admin(verb::get, "/_users/org.couchdb.user:carol").json();
  const std::string carol_rev = carol["_rev"];
  ASSERT_EQ(as_admin(verb::put, "/_users/_design/v",
                     R"({"views":{"v":{"map":"function(d){emit(d.name, null)}"}}})")
                .status,
            201u);
  const Headers bob = with(basic("bob", "pw"), "Content-Type", "application/json");
  auto secret_free = [](const nlohmann::json& doc) {
    return !doc.contains("derived_key") && !doc.contains("salt") && !doc.contains("roles");
  };

  // GET with meta members: the public body plus the meta.
  auto r = call(verb::get, "/_users/org.couchdb.user:carol?revs=true&revs_info=true", {}, bob);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json()["city"], "Lyon");
  EXPECT_TRUE(secret_free(r.json())) << r.body;
  EXPECT_TRUE(r.json().contains("_revisions"));
  // A given rev, and open_revs.
  r = call(verb::get, "/_users/org.couchdb.user:carol?rev=" + carol_rev, {}, bob);
  EXPECT_TRUE(r.status == 200u && secret_free(r.json())) << r.body;
  r = call(verb::get, "/_users/org.couchdb.user:carol?open_revs=all", {},
           with(bob, "Accept", "application/json"));
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json()[0]["ok"]["city"], "Lyon");
  EXPECT_TRUE(secret_free(r.json()[0]["ok"])) << r.body;
  // The user's own document stays whole.
  EXPECT_TRUE(
      call(verb::get, "/_users/org.couchdb.user:bob", {}, bob).json().contains("derived_key"));

  // _bulk_get: the same documents, a design document refused in its own entry.
  r = call(
      verb::post, "/_users/_bulk_get",
      R"({"docs":[{"id":"org.couchdb.user:carol"},{"id":"org.couchdb.user:bob"},{"id":"_design/v"}]})",
      bob);
  ASSERT_EQ(r.status, 200u) << r.body;
  auto results = r.json()["results"];
  EXPECT_TRUE(secret_free(results[0]["docs"][0]["ok"])) << r.body;
  EXPECT_EQ(results[0]["docs"][0]["ok"]["city"], "Lyon");
  EXPECT_TRUE(results[1]["docs"][0]["ok"].contains("derived_key"));
  EXPECT_EQ(results[2]["docs"][0]["error"]["error"], "forbidden");

  // _find matches the public fields only: a selector on a secret finds bob's own doc alone, and
  // a projection cannot bring a secret back.
  r = call(verb::post, "/_users/_find",
           R"({"selector":{"derived_key":{"$exists":true}},"fields":["_id"]})", bob);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json()["docs"], nlohmann::json::parse(R"([{"_id":"org.couchdb.user:bob"}])"))
      << r.body;
  r = call(verb::post, "/_users/_find",
           R"({"selector":{"name":"carol"},"fields":["_id","salt","city"]})", bob);
  EXPECT_EQ(r.json()["docs"],
            nlohmann::json::parse(R"([{"_id":"org.couchdb.user:carol","city":"Lyon"}])"))
      << r.body;

  // Views and other design-document actions of _users are for its admins.
  r = call(verb::get, "/_users/_design/v/_view/v?include_docs=true", {}, bob);
  EXPECT_EQ(r.status, 403u) << r.body;
  EXPECT_EQ(r.json()["reason"], "Only administrators can view design docs in the users database.");
  EXPECT_EQ(as_admin(verb::get, "/_users/_design/v/_view/v").status, 200u);

  // With no public field left, the document is missing on every path.
  as_admin(verb::put, "/_node/_local/_config/chttpd_auth/public_fields", R"("city")");
  EXPECT_EQ(call(verb::get, "/_users/org.couchdb.user:dan", {}, bob).status, 404u);
  r = call(verb::get, "/_users/org.couchdb.user:dan?open_revs=all", {},
           with(bob, "Accept", "application/json"));
  EXPECT_TRUE(r.json()[0].contains("missing")) << r.body;
  r = call(verb::post, "/_users/_bulk_get", R"({"docs":[{"id":"org.couchdb.user:dan"}]})", bob);
  EXPECT_EQ(r.json()["results"][0]["docs"][0]["error"]["error"], "not_found") << r.body;
  r = call(verb::post, "/_users/_find", R"({"selector":{},"fields":["_id"]})", bob);
  EXPECT_EQ(r.json()["docs"].size(), 2u) << r.body;  // carol (city) and bob (own)
  EXPECT_EQ(call(verb::get, "/_users/org.couchdb.user:dan/att", {}, bob).status, 404u);
}

// [chttpd_auth] upgrade_hash_on_auth (couch_password_hasher): a successful login re-hashes a
// _users password stored with other settings than new passwords get, keeping its salt.
TEST_F(AuthTest, PasswordHashIsUpgradedAfterLogin) {
  start();
  add_user("up", "pw");
  auto doc = [&] { return as_admin(verb::get, "/_users/org.couchdb.user:up").json(); };
  // Waits (up to 10 s) for the stored iterations to become `n`.
  auto wait_for_iterations = [&](int n) {
    for (int i = 0; i < 200; ++i) {
      if (doc()["iterations"] == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  };
  const auto before = doc();
  ASSERT_EQ(before["iterations"], 10);
  as_admin(verb::put, "/_node/_local/_config/chttpd_auth/iterations", R"("12")");
  // A wrong password changes nothing; the right one (Basic) upgrades the hash.
  EXPECT_EQ(call(verb::get, "/_session", {}, basic("up", "nope")).status, 401u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(doc()["_rev"], before["_rev"]);
  EXPECT_EQ(call(verb::get, "/_session", {}, basic("up", "pw")).json()["userCtx"]["name"], "up");
  ASSERT_TRUE(wait_for_iterations(12));
  const auto after = doc();
  EXPECT_EQ(after["salt"], before["salt"]);
  EXPECT_NE(after["derived_key"], before["derived_key"]);
  EXPECT_FALSE(after.contains("password"));
  EXPECT_FALSE(after.contains("preserve_salt"));
  EXPECT_TRUE(after["_rev"].get<std::string>().starts_with("2-"));
  EXPECT_EQ(call(verb::get, "/_session", {}, basic("up", "pw")).json()["userCtx"]["name"], "up");
  EXPECT_EQ(call(verb::get, "/_session", {}, basic("up", "nope")).status, 401u);
  // A cookie login (POST /_session) upgrades too.
  as_admin(verb::put, "/_node/_local/_config/chttpd_auth/iterations", R"("14")");
  auto r = call(verb::post, "/_session", "name=up&password=pw",
                {{"Content-Type", "application/x-www-form-urlencoded"}});
  ASSERT_EQ(r.status, 200u) << r.body;
  ASSERT_TRUE(wait_for_iterations(14));
  // Switched off, nothing is rewritten.
  as_admin(verb::put, "/_node/_local/_config/chttpd_auth/upgrade_hash_on_auth", R"("false")");
  as_admin(verb::put, "/_node/_local/_config/chttpd_auth/iterations", R"("16")");
  const std::string rev = doc()["_rev"];
  EXPECT_EQ(call(verb::get, "/_session", {}, basic("up", "pw")).status, 200u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(doc()["_rev"], rev);
  EXPECT_EQ(doc()["iterations"], 14);
}

TEST_F(AuthTest, RepeatedFailuresLockTheAccountForThatAddress) {
  start();
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(call(verb::get, "/_session", {}, basic("admin", "bad")).status, 401u);
  }
  const auto r = call(verb::get, "/_session", {}, basic("admin", "secret"));
  EXPECT_EQ(r.status, 403u);
  EXPECT_EQ(
      r.body,
      R"({"error":"forbidden","reason":"Account is temporarily locked due to multiple authentication failures"})"
      "\n");
}

// A keep-alive connection that repeats its Authorization header has it decoded once (the
// router's memo); every request is still checked against the user's current document.
TEST_F(AuthTest, CredentialRepeatedOnOneConnectionIsCheckedEveryTime) {
  start();
  add_user("carol", "pw");
  HttpClient carol(server_->port());
  for (int i = 0; i < 3; ++i) {
    const auto r = carol.request(verb::get, "/_session", {}, basic("carol", "pw"));
    ASSERT_EQ(r.status, 200u) << i;
    EXPECT_EQ(r.json()["userCtx"]["name"], "carol");
  }
  // A wrong password on the same connection, then the right one again.
  EXPECT_EQ(carol.request(verb::get, "/_session", {}, basic("carol", "nope")).status, 401u);
  EXPECT_EQ(carol.request(verb::get, "/_session", {}, basic("carol", "pw")).status, 200u);
  // The user is deleted through another connection: carol's next request, with the header her
  // connection remembers, is refused.
  const auto doc = as_admin(verb::get, "/_users/org.couchdb.user:carol").json();
  ASSERT_EQ(as_admin(verb::delete_,
                     "/_users/org.couchdb.user:carol?rev=" + doc["_rev"].get<std::string>())
                .status,
            200u);
  EXPECT_EQ(carol.request(verb::get, "/_session", {}, basic("carol", "pw")).status, 401u);
}

TEST_F(AuthTest, RequireValidUser) {
  start("[chttpd]\nrequire_valid_user = true\n");
  auto r = call(verb::get, "/");
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(r.body, R"({"error":"unauthorized","reason":"Authentication required."})"
                    "\n");
  EXPECT_EQ(r.header(field::www_authenticate), "Basic realm=\"server\"");
  EXPECT_EQ(call(verb::get, "/", {}, basic("admin", "secret")).status, 200u);
  // Logging in stays possible.
  r = call(verb::post, "/_session", R"({"name":"admin","password":"secret"})", kJson);
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(call(verb::get, "/_all_dbs", {}, {{"Cookie", session_cookie(r)}}).status, 200u);
}

TEST_F(AuthTest, ProxyAuthenticationWithSecret) {
  start(
      "[chttpd]\nauthentication_handlers = {chttpd_auth, proxy_authentication_handler}, "
      "{chttpd_auth, cookie_authentication_handler}, {chttpd_auth, "
      "default_authentication_handler}\n"
      "[chttpd_auth]\nproxy_use_secret = true\nsecret = s3cr3t\n");
  // HMAC-SHA256("s3cr3t", "pat"), lowercase hex.
  const std::string token = "e8b313b41b35c3949d354add99ba712889ce18a043423396ee9e9bc3b83b45e4";
  auto r = call(verb::get, "/_session", {},
                {{"X-Auth-CouchDB-UserName", "pat"}, {"X-Auth-CouchDB-Roles", "a, b"}});
  EXPECT_EQ(r.json()["userCtx"]["name"], nullptr);  // no token: not accepted
  EXPECT_EQ(r.json()["info"]["authentication_handlers"],
            nlohmann::ordered_json::parse(R"(["proxy","cookie","default"])"));
  r = call(verb::get, "/_session", {},
           {{"X-Auth-CouchDB-UserName", "pat"},
            {"X-Auth-CouchDB-Roles", "a, b"},
            {"X-Auth-CouchDB-Token", token}});
  EXPECT_EQ(r.json()["userCtx"],
            nlohmann::ordered_json::parse(R"({"name":"pat","roles":["a","b"]})"));
  EXPECT_EQ(r.json()["info"]["authenticated"], "proxy");
}

TEST_F(AuthTest, ConfigApiReadsWritesAndPersists) {
  start();
  EXPECT_EQ(call(verb::get, "/_node/_local/_config").status, 401u);
  EXPECT_EQ(as_admin(verb::get, "/_node/_local").body, R"({"name":"nonode@nohost"})"
                                                       "\n");
  EXPECT_EQ(as_admin(verb::get, "/_node/_local/_config/chttpd_auth/iterations").body, "\"10\"\n");
  auto r = as_admin(verb::get, "/_node/_local/_config/foo/bar");
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.body, R"({"error":"not_found","reason":"unknown_config_value"})"
                    "\n");
  // PUT answers the old value ("" when none), trims, and writes the last config file.
  EXPECT_EQ(as_admin(verb::put, "/_node/_local/_config/foo/bar", R"(" baz ")").body, "\"\"\n");
  EXPECT_EQ(as_admin(verb::put, "/_node/_local/_config/foo/bar", R"("qux")").body, "\"baz\"\n");
  EXPECT_NE(read_file(ini_).find("[foo]\nbar = qux"), std::string::npos) << read_file(ini_);
  EXPECT_EQ(as_admin(verb::get, "/_node/_local/_config/foo").body, R"({"bar":"qux"})"
                                                                   "\n");
  // Not persisted when asked so.
  r = call(verb::put, "/_node/_local/_config/foo/temp", R"("1")",
           with(basic("admin", "secret"), "X-Couch-Persist", "false"));
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(read_file(ini_).find("temp"), std::string::npos);
  EXPECT_EQ(as_admin(verb::get, "/_node/_local/_config/foo/temp").body, "\"1\"\n");
  // Bad values of known keys, non-strings and blacklisted sections are refused.
  r = as_admin(verb::put, "/_node/_local/_config/chttpd_auth/timeout", R"("soon")");
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(as_admin(verb::put, "/_node/_local/_config/foo/bar", "12").body,
            R"({"error":"bad_request","reason":"a JSON string expected"})"
            "\n");
  EXPECT_EQ(as_admin(verb::put, "/_node/_local/_config/query_servers/js", R"("x")").status, 403u);
  EXPECT_EQ(as_admin(verb::delete_, "/_node/_local/_config/foo/bar").body, "\"qux\"\n");
  EXPECT_EQ(as_admin(verb::delete_, "/_node/_local/_config/foo/bar").status, 404u);
  EXPECT_EQ(read_file(ini_).find("bar = qux"), std::string::npos);
  // A new admin through the API: stored hashed, usable at once.
  EXPECT_EQ(as_admin(verb::put, "/_node/_local/_config/admins/second", R"("pw2")").status, 200u);
  EXPECT_TRUE(as_admin(verb::get, "/_node/_local/_config/admins/second")
                  .json()
                  .get<std::string>()
                  .starts_with("-pbkdf2:sha256-"));
  EXPECT_EQ(call(verb::get, "/_all_dbs", {}, basic("second", "pw2")).status, 200u);
  // Auth settings take effect without a restart.
  EXPECT_EQ(call(verb::get, "/").status, 200u);
  as_admin(verb::put, "/_node/_local/_config/chttpd/require_valid_user", R"("true")");
  EXPECT_EQ(call(verb::get, "/").status, 401u);
}

// POST /_node/_local/_config/_reload reads the ini files again: an edit made to the file takes
// effect, a value set without persisting is gone, and a file the server could not start with is
// refused whole (400, nothing changes).
TEST_F(AuthTest, ConfigReloadReadsTheFilesAgain) {
  start();
  auto value = [&](const std::string& path) {
    return as_admin(verb::get, "/_node/_local/_config/" + path);
  };
  auto r = call(verb::put, "/_node/_local/_config/foo/temp", R"("1")",
                with(basic("admin", "secret"), "X-Couch-Persist", "false"));
  ASSERT_EQ(r.status, 200u);
  write_file(ini_, read_file(ini_) + "\n[foo]\nedited = yes\n");
  EXPECT_EQ(value("foo/edited").status, 404u);  // not read until the reload
  EXPECT_EQ(as_admin(verb::get, "/_node/_local/_config/_reload").status, 405u);
  r = as_admin(verb::post, "/_node/_local/_config/_reload");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "{\"ok\":true}\n");
  EXPECT_EQ(value("foo/edited").body, "\"yes\"\n");
  EXPECT_EQ(value("foo/temp").status, 404u);
  EXPECT_EQ(call(verb::get, "/_all_dbs", {}, basic("admin", "secret")).status, 200u);
  // A reloaded setting takes effect as a PUT's would.
  write_file(ini_, read_file(ini_) + "\n[chttpd]\nrequire_valid_user = true\n");
  ASSERT_EQ(as_admin(verb::post, "/_node/_local/_config/_reload").status, 200u);
  EXPECT_EQ(call(verb::get, "/").status, 401u);
  // A bad value: refused with the reason, the running values stay.
  const std::string good = read_file(ini_);
  write_file(ini_, good + "\n[chttpd_auth]\ntimeout = soon\n");
  r = as_admin(verb::post, "/_node/_local/_config/_reload");
  EXPECT_EQ(r.status, 400u) << r.body;
  EXPECT_EQ(r.json()["error"], "bad_request");
  EXPECT_EQ(value("foo/edited").body, "\"yes\"\n");
  EXPECT_EQ(value("chttpd_auth/timeout").status, 404u);
}

TEST_F(AuthTest, CorsPreflightAndResponseHeaders) {
  start(
      "[chttpd]\nenable_cors = true\n[cors]\norigins = http://app.example, http://b.example\n"
      "credentials = true\n");
  // Preflight: answered 204 before authentication, for accepted origins, methods and headers.
  auto r = call(verb::options, "/db", {},
                {{"Origin", "http://app.example"},
                 {"Access-Control-Request-Method", "PUT"},
                 {"Access-Control-Request-Headers", "Content-Type, Authorization"}});
  EXPECT_EQ(r.status, 204u);
  EXPECT_EQ(r.header(field::access_control_allow_origin), "http://app.example");
  EXPECT_EQ(r.header(field::access_control_allow_credentials), "true");
  EXPECT_EQ(r.header(field::access_control_allow_headers), "Content-Type, Authorization");
  EXPECT_EQ(r.header(field::access_control_max_age), "600");
  EXPECT_NE(r.header(field::access_control_allow_methods).find("PUT"), std::string::npos);
  r = call(verb::options, "/db", {},
           {{"Origin", "http://evil.example"}, {"Access-Control-Request-Method", "PUT"}});
  EXPECT_NE(r.status, 204u);
  EXPECT_EQ(r.header(field::access_control_allow_origin), "");
  r = call(verb::options, "/db", {},
           {{"Origin", "http://app.example"},
            {"Access-Control-Request-Method", "PUT"},
            {"Access-Control-Request-Headers", "X-Not-Allowed"}});
  EXPECT_NE(r.status, 204u);
  // Ordinary answers (errors and streams too) carry the headers for an accepted origin only.
  r = call(verb::get, "/_all_dbs", {}, {{"Origin", "http://app.example"}});
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(r.header(field::access_control_allow_origin), "http://app.example");
  EXPECT_EQ(r.header(field::access_control_expose_headers),
            "content-type, cache-control, accept-ranges, etag, server, x-couch-request-id, "
            "x-couch-update-newrev, x-couchdb-body-time");
  ASSERT_EQ(as_admin(verb::put, "/db").status, 201u);
  r = call(verb::get, "/db/_changes", {},
           with(basic("admin", "secret"), "Origin", "http://b.example"));
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.header(field::access_control_allow_origin), "http://b.example");
  r = call(verb::get, "/", {}, {{"Origin", "http://App.example"}});  // case-sensitive, as CouchDB
  EXPECT_EQ(r.header(field::access_control_allow_origin), "");
  // [cors:<host>]: another policy for requests to that host name (Host or X-Forwarded-Host, port
  // and scheme dropped); its keys fall back to [cors]'s (credentials here).
  as_admin(verb::put, "/_node/_local/_config/cors:vhost.example/origins",
           R"("http://only.example")");
  as_admin(verb::put, "/_node/_local/_config/cors:vhost.example/methods", R"("GET")");
  for (const auto& host : {std::pair<std::string, std::string>{"Host", "vhost.example:5984"},
                           {"X-Forwarded-Host", "https://vhost.example"}}) {
    r = call(verb::get, "/", {}, {{host.first, host.second}, {"Origin", "http://only.example"}});
    EXPECT_EQ(r.header(field::access_control_allow_origin), "http://only.example") << host.second;
    EXPECT_EQ(r.header(field::access_control_allow_credentials), "true");
    r = call(verb::get, "/", {}, {{host.first, host.second}, {"Origin", "http://app.example"}});
    EXPECT_EQ(r.header(field::access_control_allow_origin), "") << host.second;
  }
  r = call(verb::options, "/db", {},
           {{"Host", "vhost.example"},
            {"Origin", "http://only.example"},
            {"Access-Control-Request-Method", "PUT"}});
  EXPECT_NE(r.status, 204u);
  r = call(verb::options, "/db", {},
           {{"Host", "vhost.example"},
            {"Origin", "http://only.example"},
            {"Access-Control-Request-Method", "GET"}});
  EXPECT_EQ(r.status, 204u);
  EXPECT_EQ(r.header(field::access_control_allow_methods), "GET");
  // Other hosts keep [cors].
  r = call(verb::get, "/", {}, {{"Origin", "http://app.example"}});
  EXPECT_EQ(r.header(field::access_control_allow_origin), "http://app.example");
  // Disabled (the default): nothing.
  as_admin(verb::put, "/_node/_local/_config/chttpd/enable_cors", R"("false")");
  r = call(verb::get, "/", {}, {{"Origin", "http://app.example"}});
  EXPECT_EQ(r.header(field::access_control_allow_origin), "");
}

TEST_F(AuthTest, MetricsStatsActiveTasksAndMaintenanceMode) {
  start();
  EXPECT_EQ(call(verb::get, "/_node/_local/_prometheus").status, 401u);
  EXPECT_EQ(call(verb::get, "/_active_tasks").status, 401u);
  ASSERT_EQ(as_admin(verb::put, "/db").status, 201u);
  as_admin(verb::put, "/db/d1", "{}");
  call(verb::get, "/nope", {}, basic("admin", "wrong"));
  auto r = as_admin(verb::get, "/_node/_local/_prometheus");
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(r.header(field::content_type), "text/plain; version=2.0");
  const std::string& text = r.body;
  EXPECT_NE(text.find("# TYPE couchdb_httpd_requests_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("couchdb_httpd_request_methods{method=\"PUT\"} 2\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("couchdb_httpd_status_codes{code=\"201\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("couchdb_httpd_status_codes{code=\"401\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("chaise_auth_failures_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("chaise_request_duration_seconds_bucket{le=\"+Inf\"} "), std::string::npos);
  EXPECT_NE(text.find("chaise_open_connections 1\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("chaise_store_commits_total 0\n"), std::string::npos)
      << text;  // some commits
  // _stats: CouchDB's JSON shape, a path picks a part.
  r = as_admin(verb::get, "/_node/_local/_stats/couchdb/httpd/requests");
  EXPECT_EQ(r.json()["type"], "counter");
  EXPECT_GE(r.json()["value"].get<int>(), 6);
  EXPECT_EQ(as_admin(verb::get, "/_node/_local/_stats/no/such").body, "null\n");
  EXPECT_EQ(as_admin(verb::get, "/_active_tasks").body, "[]\n");
  // A live feed shows up while it is open.
  {
    HttpClient feed_client{server_->port()};
    const auto feed_headers = basic("admin", "secret");
    std::thread feed([&] {
      feed_client.request(verb::get, "/db/_changes?feed=longpoll&since=now&timeout=3000", {},
                          feed_headers);
    });
    // Polled, not a fixed sleep: under a sanitizer on a loaded machine the feed may take a while
    // to arrive.
    bool seen = false;
    for (int i = 0; i < 50 && !seen; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      r = as_admin(verb::get, "/_node/_local/_prometheus");
      seen = r.body.find("couchdb_httpd_clients_requesting_changes 1\n") != std::string::npos;
    }
    EXPECT_TRUE(seen) << r.body;
    feed.join();
  }
  // The server lets go of the feed just after its last bytes reach the client: polled too.
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {
    r = as_admin(verb::get, "/_node/_local/_prometheus");
    gone = r.body.find("couchdb_httpd_clients_requesting_changes 0\n") != std::string::npos;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(gone) << r.body;
  // Maintenance mode takes the node out of a load balancer's rotation.
  EXPECT_EQ(call(verb::get, "/_up").body, R"({"status":"ok","seeds":{}})"
                                          "\n");
  as_admin(verb::put, "/_node/_local/_config/couchdb/maintenance_mode", R"("true")");
  r = call(verb::get, "/_up");
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.body, R"({"status":"maintenance_mode"})"
                    "\n");
  as_admin(verb::delete_, "/_node/_local/_config/couchdb/maintenance_mode");
  EXPECT_EQ(call(verb::get, "/_up").status, 200u);
}

TEST_F(AuthTest, UtilsServesTheWebUiFilesAndNothingElse) {
  const fs::path ui = dir_.path() / "ui";
  fs::create_directories(ui / "assets");
  write_file(ui / "index.html", "<html>ui</html>");
  write_file(ui / "assets" / "app.js", "let x = 1;");
  write_file(dir_.path() / "secret.txt", "no");
  fs::create_symlink(dir_.path() / "secret.txt", ui / "link.txt");
  start("[chaise]\nfauxton_dir = " + ui.string() + "\n");
  auto r = call(verb::get, "/_utils");
  EXPECT_EQ(r.status, 301u);
  EXPECT_EQ(r.header(field::location), "/_utils/");
  r = call(verb::get, "/_utils/");  // open to everyone: the UI logs in itself
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "<html>ui</html>");
  EXPECT_EQ(r.header(field::content_type), "text/html; charset=utf-8");
  r = call(verb::get, "/_utils/assets/app.js");
  EXPECT_EQ(r.body, "let x = 1;");
  EXPECT_EQ(r.header(field::content_type), "application/javascript");
  EXPECT_EQ(call(verb::get, "/_utils/..%2Fsecret.txt").status, 404u);
  EXPECT_EQ(call(verb::get, "/_utils/link.txt").status, 404u);  // a symlink out of the UI
  EXPECT_EQ(call(verb::get, "/_utils/assets").status, 404u);
  EXPECT_EQ(call(verb::get, "/_utils/missing.js").status, 404u);
  EXPECT_EQ(call(verb::post, "/_utils/").status, 401u);  // as CouchDB: only GET/HEAD are open
}

TEST_F(AuthTest, AdminPartyFlagMakesEveryoneAdmin) {
  ServerProcess server{dir_.path() / "data"};  // the harness's default: --admin-party
  HttpClient client{server.port()};
  const auto r = client.get("/_session");
  EXPECT_EQ(r.json()["userCtx"],
            nlohmann::ordered_json::parse(R"({"name":null,"roles":["_admin"]})"));
  EXPECT_EQ(client.request(verb::put, "/db").status, 201u);
}

// chttpd:error_headers: a browser (Accept: text/html without application/json or */*) that must
// log in gets 302 to [chttpd_auth] authentication_redirect, with the path it asked for and the
// reason; everyone else gets the 401. Locations checked against CouchDB 3.5.0.
TEST_F(AuthTest, BrowserThatMustLogInIsRedirected) {
  start();
  auto r = call(verb::get, "/_all_dbs", {}, {{"Accept", "text/html"}});
  EXPECT_EQ(r.status, 302u);
  EXPECT_EQ(
      r.header(field::location),
      "http://127.0.0.1:" + std::to_string(server_->port()) +
          "/_utils/session.html?return=%2F_all_dbs&reason=You%20are%20not%20a%20server%20admin.");
  EXPECT_EQ(r.body, R"({"error":"unauthorized","reason":"You are not a server admin."})"
                    "\n");
  r = call(verb::get, "/_node//_local/_config?x=1", {},
           with(basic("admin", "wrong"), "Accept", "text/html"));
  EXPECT_EQ(r.status, 302u);
  EXPECT_EQ(r.header(field::location), "http://127.0.0.1:" + std::to_string(server_->port()) +
                                           "/_utils/"
                                           "session.html?return=%2F_node%2F_local%2F_config&reason="
                                           "Name%20or%20password%20is%20incorrect.");
  // A client that takes JSON (or anything) gets the 401.
  EXPECT_EQ(call(verb::get, "/_all_dbs", {}, {{"Accept", "text/html,*/*;q=0.8"}}).status, 401u);
  EXPECT_EQ(call(verb::get, "/_all_dbs", {}, {{"Accept", "application/json"}}).status, 401u);
  EXPECT_EQ(call(verb::get, "/_all_dbs").status, 401u);
  // Asked for WWW-Authenticate: 401 with it, no redirect.
  r = call(verb::get, "/_all_dbs", {},
           {{"Accept", "text/html"}, {"X-CouchDB-WWW-Authenticate", "Cookie"}});
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(r.header(field::www_authenticate), "Cookie");
  // Fauxton has no session.html: it leads to Fauxton's login view.
  r = call(verb::get, "/_utils/session.html?return=%2F_all_dbs");
  EXPECT_EQ(r.status, 302u);
  EXPECT_EQ(r.header(field::location), "/_utils/#login");
  // An empty authentication_redirect turns the redirect off; [chttpd] WWW-Authenticate is sent.
  server_.reset();
  start(
      "[chttpd_auth]\nauthentication_redirect =\n[chttpd]\nWWW-Authenticate = Basic realm=\"x\"\n");
  r = call(verb::get, "/_all_dbs", {}, {{"Accept", "text/html"}});
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(r.header(field::www_authenticate), "Basic realm=\"x\"");
}

// A document read refused (anonymous on a members-only database; a named non-member) or sent to
// a missing database is answered without throwing: as every refusal is answered, with the 401's
// login redirect and WWW-Authenticate, byte for byte what _all_docs of that database gets.
TEST_F(AuthTest, RefusedDocumentReadsAnswerAsOtherRefusals) {
  start();
  add_user("member", "pw1");
  add_user("stranger", "pw2");
  ASSERT_EQ(as_admin(verb::put, "/members").status, 201u);
  ASSERT_EQ(as_admin(verb::put, "/members/doc", R"({"a":1})").status, 201u);
  ASSERT_EQ(as_admin(verb::put, "/members/_security", R"({"members":{"names":["member"]}})").status,
            200u);
  const std::string origin = "http://127.0.0.1:" + std::to_string(server_->port());
  const std::vector<Headers> asks = {{},
                                     {{"Accept", "text/html"}},
                                     {{"X-CouchDB-WWW-Authenticate", "Cookie"}},
                                     basic("stranger", "pw2"),
                                     with(basic("stranger", "pw2"), "Accept", "text/html")};
  for (const Headers& h : asks) {
    const auto doc = call(verb::get, "/members/doc", {}, h);
    const auto all = call(verb::get, "/members/_all_docs", {}, h);
    EXPECT_EQ(doc.status, all.status);
    EXPECT_EQ(doc.body, all.body);
    EXPECT_EQ(doc.header(field::www_authenticate), all.header(field::www_authenticate));
    EXPECT_EQ(doc.header(field::content_type), all.header(field::content_type));
    std::string location = all.header(field::location);
    if (const auto at = location.find("%2F_all_docs"); at != std::string::npos)
      location.replace(at, 12, "%2Fdoc");
    EXPECT_EQ(doc.header(field::location), location);
  }
  auto r = call(verb::get, "/members/doc");
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(r.body,
            R"({"error":"unauthorized","reason":"You are not authorized to access this db."})"
            "\n");
  r = call(verb::get, "/members/doc", {}, {{"Accept", "text/html"}});
  EXPECT_EQ(r.status, 302u);
  EXPECT_EQ(r.header(field::location),
            origin +
                "/_utils/session.html?return=%2Fmembers%2Fdoc&reason="
                "You%20are%20not%20authorized%20to%20access%20this%20db.");
  r = call(verb::get, "/members/doc", {}, {{"X-CouchDB-WWW-Authenticate", "Cookie"}});
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(r.header(field::www_authenticate), "Cookie");
  r = call(verb::get, "/members/doc", {}, basic("stranger", "pw2"));
  EXPECT_EQ(r.status, 403u);
  EXPECT_EQ(r.body, R"({"error":"forbidden","reason":"You are not allowed to access this db."})"
                    "\n");
  r = call(verb::head, "/members/doc");
  EXPECT_EQ(r.status, 401u);
  EXPECT_TRUE(r.body.empty());
  r = call(verb::get, "/nowhere/doc");
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.body, R"({"error":"not_found","reason":"Database does not exist."})"
                    "\n");
  // A write is refused as before, and the member reads.
  EXPECT_EQ(call(verb::put, "/members/other", R"({"b":2})", kJson).status, 401u);
  r = call(verb::get, "/members/doc", {}, basic("member", "pw1"));
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.json()["a"], 1);
}

// password_regexp from the config applies to _users writes through the server, and a change
// through the config API takes effect at once (answers as CouchDB 3.5.0 gives them).
TEST_F(AuthTest, PasswordRegexpAppliesToUserDocs) {
  start(R"([chttpd_auth]
password_regexp = [{".{10,}", "Min length is 10."}, "\\d+"]
)");
  ASSERT_EQ(as_admin(verb::put, "/_users").status, 201u);
  const auto put_user = [&](const std::string& name, const std::string& pw) {
    return as_admin(
        verb::put, "/_users/org.couchdb.user:" + name,
        R"({"name":")" + name + R"(","password":")" + pw + R"(","roles":[],"type":"user"})");
  };
  auto r = put_user("a", "short");
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(
      r.body,
      R"({"error":"bad_request","reason":"Password does not conform to requirements. Min length is 10."})"
      "\n");
  r = put_user("b", "longenoughbutnodigit");
  EXPECT_EQ(r.body,
            R"({"error":"bad_request","reason":"Password does not conform to requirements."})"
            "\n");
  EXPECT_EQ(put_user("c", "longenough123").status, 201u);
  r = as_admin(verb::put, "/_node/_local/_config/chttpd_auth/password_regexp", R"("notalist")");
  EXPECT_EQ(r.status, 200u);
  r = put_user("d", "longenough123");
  EXPECT_EQ(r.status, 403u);
  EXPECT_EQ(r.body, R"({"error":"forbidden","reason":"Server cannot hash passwords at this time."})"
                    "\n");
  EXPECT_EQ(as_admin(verb::delete_, "/_node/_local/_config/chttpd_auth/password_regexp").status,
            200u);
  EXPECT_EQ(put_user("e", "x").status, 201u);
}

// couch_replicator_docs' rules, with the revs CouchDB 3.5.0 gives the same requests: a writer
// becomes the owner, only the owner or an admin may write a replication document, a bad one is
// refused with CouchDB's reason (the whole _bulk_docs request too), and a reader who is neither
// sees source and target without credentials under CouchDB's made-up rev, on every read path.
TEST_F(AuthTest, ReplicatorDocsKeepTheirOwnerAndHideCredentialsFromOthers) {
  start();
  add_user("bob", "pw");
  add_user("carl", "pw");
  ASSERT_EQ(as_admin(verb::put, "/_replicator").status, 201u);
  ASSERT_EQ(as_admin(verb::put, "/_replicator/_security", R"({"admins":{},"members":{}})").status,
            200u);
  const Headers bob = with(basic("bob", "pw"), "Content-Type", "application/json");
  const Headers carl = with(basic("carl", "pw"), "Content-Type", "application/json");
  const std::string job =
      R"("source":"http://u:secret@example.com/a","target":{"url":"https://example.com/b",)"
      R"("headers":{"Authorization":"Basic Zm9vOmJhcg=="},"auth":{"basic":{"username":"u","password":"p"}}})";
  auto r = call(verb::put, "/_replicator/r1", "{" + job + "}", bob);
  ASSERT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(r.json()["rev"], "1-94a955f6d22aa0587b0016dc07d4532b");  // CouchDB's, owner included
  const std::string stored =
      R"({"_id":"r1","_rev":"1-94a955f6d22aa0587b0016dc07d4532b",)" + job + R"(,"owner":"bob"})";
  EXPECT_EQ(call(verb::get, "/_replicator/r1", {}, bob).body, stored + "\n");
  EXPECT_EQ(as_admin(verb::get, "/_replicator/r1").body, stored + "\n");
  const std::string masked =
      R"({"_id":"r1","_rev":"1-c39400afcd39d6c95c2e75b7608d1116","source":"http://example.com/a",)"
      R"("target":{"url":"https://example.com/b"},"owner":"bob"})";
  EXPECT_EQ(call(verb::get, "/_replicator/r1", {}, carl).body, masked + "\n");
  auto revs = call(verb::get, "/_replicator/r1?revs=true", {}, carl).json();
  EXPECT_EQ(revs["_revisions"]["ids"][0], "c39400afcd39d6c95c2e75b7608d1116");
  EXPECT_EQ(revs["target"], nlohmann::json::parse(R"({"url":"https://example.com/b"})"));
  auto open = call(verb::get, "/_replicator/r1?open_revs=all", {},
                   with(carl, "Accept", "application/json"));
  ASSERT_EQ(open.status, 200u) << open.body;
  EXPECT_EQ(open.json()[0]["ok"]["_rev"], "1-c39400afcd39d6c95c2e75b7608d1116");
  EXPECT_EQ(open.json()[0]["ok"]["source"], "http://example.com/a");
  auto bulk = call(verb::post, "/_replicator/_bulk_get", R"({"docs":[{"id":"r1"}]})", carl);
  EXPECT_EQ(bulk.json()["results"][0]["docs"][0]["ok"]["source"], "http://example.com/a");
  auto found = call(verb::post, "/_replicator/_find", R"({"selector":{"owner":"bob"}})", carl);
  ASSERT_EQ(found.json()["docs"].size(), 1u) << found.body;
  EXPECT_EQ(found.json()["docs"][0]["_rev"], "1-c39400afcd39d6c95c2e75b7608d1116");
  EXPECT_FALSE(found.json()["docs"][0]["target"].contains("headers"));

  // Writes: a body naming another owner is refused; an admin may write any.
  const std::string rev = "1-94a955f6d22aa0587b0016dc07d4532b";
  r = call(verb::put, "/_replicator/r1",
           R"({"_rev":")" + rev + R"(",)" + job + R"(,"owner":"bob"})", carl);
  EXPECT_EQ(r.status, 403u);
  EXPECT_EQ(r.json()["reason"], "Can't update replication documents from other users.");
  r = call(verb::put, "/_replicator/r2", "{" + job + R"(,"owner":"carl"})", bob);
  EXPECT_EQ(r.status, 403u);
  r = call(verb::put, "/_replicator/r1/att?rev=" + rev, "hello", carl);
  EXPECT_EQ(r.status, 403u) << r.body;
  r = as_admin(verb::put, "/_replicator/r3", "{" + job + R"(,"owner":"carl"})");
  const std::string r3_rev = r.json()["rev"];
  EXPECT_EQ(r3_rev, "1-4dc6751f231fb3452ae8ac359e130193");
  // CouchDB's rule looks at the new body only: one without "owner" becomes the writer's.
  r = call(verb::put, "/_replicator/r3", R"({"_rev":")" + r3_rev + R"(",)" + job + "}", bob);
  EXPECT_EQ(r.status, 201u) << r.body;
  EXPECT_EQ(as_admin(verb::get, "/_replicator/r3").json()["owner"], "bob");
  r = as_admin(verb::put, "/_replicator/r4", "{" + job + R"(,"owner":null})");
  EXPECT_EQ(r.json()["rev"], "1-4f6dbf25faec6c9e0cf8167426bcf921");  // owner: "admin"
  EXPECT_EQ(as_admin(verb::get, "/_replicator/r4").json()["owner"], "admin");

  // Validation, with CouchDB's reasons.
  auto refused = [&](const std::string& body) {
    auto res = call(verb::put, "/_replicator/v", body, bob);
    EXPECT_EQ(res.status, 403u) << body;
    return res.json()["reason"].get<std::string>();
  };
  EXPECT_EQ(refused(R"({"target":"http://example.com/b"})"), "Missing replicator database");
  EXPECT_EQ(refused(R"({"source":"db","target":"http://example.com/b"})"),
            "local_endpoints_not_supported");
  EXPECT_EQ(refused(R"({"source":"http://example.com/a","target":{"url":5}})"),
            "endpoint has an invalid url");
  EXPECT_EQ(refused(R"({"source":"http://e.com/a","target":"http://e.com/b","continuous":"yes"})"),
            "{throw,{bad_request,<<\"parameter `continuous` must be a boolean\">>}}");
  EXPECT_EQ(
      refused(
          R"({"source":"http://e.com/a","target":"http://e.com/b","doc_ids":["a"],"filter":"d/f"})"),
      "{throw,{bad_request,\"`doc_ids`,`filter`,`selector` are mutually exclusive\"}}");
  EXPECT_EQ(refused(R"({"source":"http://e.com/a","target":"http://e.com/b","filter":"nofilter"})"),
            "Invalid filter. Must match `ddocname/filtername`.");
  EXPECT_EQ(
      refused(R"({"source":"http://e.com/a","target":"http://e.com/b","worker_processes":"x"})"),
      "{error,badarg}");
  EXPECT_EQ(
      call(verb::put, "/_replicator/v7",
           R"({"source":"http://e.com/a","target":"http://e.com/b","_replication_state":"failed"})",
           bob)
          .status,
      201u);
  auto whole = call(verb::post, "/_replicator/_bulk_docs",
                    R"({"docs":[{"_id":"b1","target":"http://e.com/b"},)"
                    R"({"_id":"b2","source":"http://e.com/a","target":"http://e.com/b"}]})",
                    bob);
  EXPECT_EQ(whole.status, 403u);
  EXPECT_EQ(as_admin(verb::get, "/_replicator/b2").status, 404u);

  // COPY writes the source's body: copying bob's job to a new id is refused to carl.
  r = call(verb::copy, "/_replicator/r1", {}, with(carl, "Destination", "stolen"));
  EXPECT_EQ(r.status, 403u) << r.body;
  r = call(verb::copy, "/_replicator/r1", {}, with(bob, "Destination", "mine"));
  EXPECT_EQ(r.status, 201u) << r.body;

  // Anyone may delete (the tombstone's owner is the deleter, as in CouchDB).
  r = call(verb::delete_, "/_replicator/r1?rev=" + rev, {}, carl);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.json()["rev"], "2-b98e375d32319bf8135da94e583fca0f");
}
}  // namespace
TEST_F(AuthTest, ReplicationsRunAsTheirUserAndOnlyTheyOrAnAdminCancelThem) {
  start();
  add_user("bob", "pw1");
  add_user("eve", "pw2");
  ASSERT_EQ(as_admin(verb::put, "/bobs").status, 201u);
  ASSERT_EQ(as_admin(verb::put, "/bobs/_security",
                     R"({"members":{"names":["bob"]},"admins":{"names":["bob"]}})")
                .status,
            200u);
  ASSERT_EQ(as_admin(verb::put, "/bobs/d1", R"({"x":1})").status, 201u);
  // Database names are this server's databases, opened with the request's own credentials:
  // eve cannot read bob's database through the replicator.
  const auto bob = with(basic("bob", "pw1"), "Content-Type", "application/json");
  const auto eve = with(basic("eve", "pw2"), "Content-Type", "application/json");
  auto r = call(verb::post, "/_replicate", R"({"source":"bobs","target":"evecopy"})", eve);
  EXPECT_EQ(r.status, 403u) << r.body;
  EXPECT_EQ(r.json()["error"], "forbidden");
  EXPECT_EQ(call(verb::get, "/evecopy", {}, basic("admin", "secret")).status, 404u);
  // bob replicates his database into another of his (created by an admin for him).
  ASSERT_EQ(as_admin(verb::put, "/bobcopy").status, 201u);
  ASSERT_EQ(as_admin(verb::put, "/bobcopy/_security",
                     R"({"members":{"names":["bob"]},"admins":{"names":["bob"]}})")
                .status,
            200u);
  r = call(verb::post, "/_replicate", R"({"source":"bobs","target":"bobcopy","continuous":true})",
           bob);
  ASSERT_EQ(r.status, 202u) << r.body;
  const std::string id = r.json()["_local_id"];
  EXPECT_TRUE(eventually([&] { return call(verb::get, "/bobcopy/d1", {}, bob).status == 200u; }));
  EXPECT_EQ(as_admin(verb::get, "/_scheduler/jobs/" + id).json()["user"], "bob");
  // eve may not cancel bob's job; bob may.
  const std::string cancel = R"({"replication_id":")" + id + R"(","cancel":true})";
  r = call(verb::post, "/_replicate", cancel, eve);
  EXPECT_EQ(r.status, 401u) << r.body;
  EXPECT_EQ(r.json()["reason"], "You are not a server admin.");
  r = call(verb::post, "/_replicate", cancel, bob);
  EXPECT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(as_admin(verb::get, "/_scheduler/jobs").json()["total_rows"], 0);
}

}  // namespace chaise::test
