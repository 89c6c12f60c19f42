// Password hashes, security objects and the _users rules (core/security/security.h).
#include "core/security/security.h"

#include <gtest/gtest.h>

#include "core/security/replicator_docs.h"

namespace chaise::core {
namespace {

using OJson = nlohmann::ordered_json;

TEST(Pbkdf2, MatchesRfc6070AndCouchDbFormats) {
  // RFC 6070 test vector 2 (HMAC-SHA1, 2 iterations, 20 bytes).
  EXPECT_EQ(pbkdf2_hex("sha", "password", "salt", 2), "ea6c014dc72d6f8ccd1ed92ace1d41f0d8de8957");
  // PBKDF2-HMAC-SHA256("password", "salt", 1), 32 bytes.
  EXPECT_EQ(pbkdf2_hex("sha256", "password", "salt", 1),
            "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b");
  EXPECT_EQ(pbkdf2_hex("md5", "p", "s", 1), "");
  const PasswordHash h = hash_password("secret", "sha256", 5);
  EXPECT_EQ(h.salt.size(), 32u);
  const std::string text = format_admin_hash(h);
  EXPECT_TRUE(text.starts_with("-pbkdf2:sha256-")) << text;
  const auto parsed = parse_admin_hash(text);
  ASSERT_TRUE(parsed);
  EXPECT_TRUE(verify_password(*parsed, "secret"));
  EXPECT_FALSE(verify_password(*parsed, "secreT"));
  // CouchDB 2's form (sha1) and plain text.
  const auto old = parse_admin_hash("-pbkdf2-" + pbkdf2_hex("sha", "pw", "abc", 3) + ",abc,3");
  ASSERT_TRUE(old);
  EXPECT_TRUE(verify_password(*old, "pw"));
  EXPECT_FALSE(parse_admin_hash("plain password"));
  EXPECT_FALSE(parse_admin_hash("-pbkdf2:md5-aa,bb,1"));
  EXPECT_FALSE(parse_admin_hash("-pbkdf2:sha256-aa,bb,0"));
}

TEST(SecurityObject, MembersAndAdmins) {
  const UserCtx anon;
  const UserCtx bob{"bob", {"r"}};
  const UserCtx admin{"root", {"_admin"}};
  SecurityObject open;
  EXPECT_TRUE(is_db_member(anon, open));
  EXPECT_FALSE(is_db_admin(bob, open));
  const SecurityObject locked = default_security(true);
  EXPECT_FALSE(is_db_member(bob, locked));
  EXPECT_TRUE(is_db_member(admin, locked));
  EXPECT_EQ(locked.raw.dump(), R"({"members":{"roles":["_admin"]},"admins":{"roles":["_admin"]}})");
  auto sec = std::get<SecurityObject>(parse_security(
      OJson::parse(R"({"admins":{"names":["bob"]},"members":{"roles":["x"]},"other":1})")));
  EXPECT_TRUE(is_db_admin(bob, sec));
  EXPECT_TRUE(is_db_member(bob, sec));
  EXPECT_FALSE(is_db_member(UserCtx{"carol", {"y"}}, sec));
  EXPECT_TRUE(is_db_member(UserCtx{"carol", {"x"}}, sec));
  EXPECT_TRUE(std::holds_alternative<CouchError>(parse_security(OJson::parse("[]"))));
  EXPECT_TRUE(std::holds_alternative<CouchError>(
      parse_security(OJson::parse(R"({"members":{"names":[1]}})"))));
}

TEST(UsersDb, HashesPasswordsInCouchDbOrder) {
  const UserDbRules rules{"sha256", 7};
  const OJson doc = OJson::parse(
      R"({"_id":"org.couchdb.user:bob","name":"bob","password":"pw","roles":[],"type":"user"})");
  auto out = prepare_user_doc(doc, std::nullopt, UserCtx{}, rules);
  ASSERT_TRUE(std::holds_alternative<OJson>(out)) << std::get<CouchError>(out).reason;
  const OJson& stored = std::get<OJson>(out);
  std::vector<std::string> keys;
  for (const auto& [k, v] : stored.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"_id", "password_scheme", "pbkdf2_prf", "salt",
                                            "iterations", "derived_key", "name", "roles", "type"}));
  const auto creds = user_doc_password(stored);
  ASSERT_TRUE(creds);
  EXPECT_TRUE(verify_password(*creds, "pw"));
  // Another named user writing bob's document: "missing".
  auto other = prepare_user_doc(doc, std::nullopt, UserCtx{"eve", {}}, rules);
  EXPECT_EQ(std::get<CouchError>(other).status, 404);
  // A colon in the name.
  auto colon = prepare_user_doc(
      OJson::parse(R"({"_id":"org.couchdb.user:a:b","name":"a:b","roles":[],"type":"user"})"),
      std::nullopt, UserCtx{"x", {"_admin"}}, rules);
  EXPECT_EQ(std::get<CouchError>(colon).reason, "Character `:` is not allowed in usernames.");
}

// [chttpd_auth] password_regexp as CouchDB's local.ini writes it; messages as couch_users_db
// gives them (checked against CouchDB 3.5.0).
TEST(UsersDb, PasswordRegexpRules) {
  EXPECT_TRUE(parse_password_rules("")->empty());
  EXPECT_TRUE(parse_password_rules(" [] ")->empty());
  const auto rules =
      parse_password_rules(R"([{".{10,}", "Min length is 10."}, "\\d+", {"[A-Z]"}])");
  ASSERT_TRUE(rules);
  ASSERT_EQ(rules->size(), 3u);
  EXPECT_EQ((*rules)[0].regexp, ".{10,}");
  EXPECT_EQ((*rules)[0].message, "Password does not conform to requirements. Min length is 10.");
  EXPECT_EQ((*rules)[1].regexp, "\\d+");
  EXPECT_EQ((*rules)[1].message, "Password does not conform to requirements.");
  EXPECT_EQ((*rules)[2].regexp, "[A-Z]");
  for (const char* bad : {"notalist", "[", "[\"a\"", "[1]", "[{\"a\", 2}]", "[\"a\"] x", "[,]"}) {
    EXPECT_FALSE(parse_password_rules(bad)) << bad;
  }

  UserDbRules with_rules{"sha256", 3, *rules};
  const auto doc = [](const std::string& pw) {
    return OJson{{"_id", "org.couchdb.user:bob"},
                 {"name", "bob"},
                 {"password", pw},
                 {"roles", OJson::array()},
                 {"type", "user"}};
  };
  auto r = prepare_user_doc(doc("Short1"), std::nullopt, UserCtx{}, with_rules);
  EXPECT_EQ(std::get<CouchError>(r).status, 400);
  EXPECT_EQ(std::get<CouchError>(r).reason,
            "Password does not conform to requirements. Min length is 10.");
  r = prepare_user_doc(doc("Longenoughnodigit"), std::nullopt, UserCtx{}, with_rules);
  EXPECT_EQ(std::get<CouchError>(r).reason, "Password does not conform to requirements.");
  r = prepare_user_doc(doc("Longenough123"), std::nullopt, UserCtx{}, with_rules);
  EXPECT_TRUE(std::holds_alternative<OJson>(r));
  // A document without a new password is not checked.
  OJson no_password = doc("x");
  no_password.erase("password");
  EXPECT_TRUE(std::holds_alternative<OJson>(
      prepare_user_doc(no_password, std::nullopt, UserCtx{}, with_rules)));
  // Rules that cannot be read (or compiled) refuse every password change, as CouchDB does.
  UserDbRules unreadable{"sha256", 3, std::nullopt};
  r = prepare_user_doc(doc("Longenough123"), std::nullopt, UserCtx{}, unreadable);
  EXPECT_EQ(std::get<CouchError>(r).status, 403);
  EXPECT_EQ(std::get<CouchError>(r).reason, "Server cannot hash passwords at this time.");
  UserDbRules bad_regexp{"sha256", 3, std::vector<PasswordRule>{{"(", "x"}}};
  r = prepare_user_doc(doc("Longenough123"), std::nullopt, UserCtx{}, bad_regexp);
  EXPECT_EQ(std::get<CouchError>(r).status, 403);
}

// couch_replicator_docs:strip_credentials/1's regex, case by case.
// couch_peruser:user_db_name: the hex of the name's bytes, one digit for a byte below 0x10.
TEST(PerUser, DatabaseNamesAndSecurityAsCouchDbMakesThem) {
  EXPECT_EQ(peruser_db_name("userdb-", "bob"), "userdb-626f62");
  EXPECT_EQ(peruser_db_name("userdb-", "caf\xc3\xa9"), "userdb-636166c3a9");
  EXPECT_EQ(peruser_db_name("p-", std::string("a\x0a", 2)), "p-61a");
  auto added =
      security_with_user(OJson::parse(R"({"admins":{"roles":["_admin"]},"x":1})"), "bob", true);
  ASSERT_TRUE(added);
  EXPECT_EQ(added->dump(),
            R"({"admins":{"roles":["_admin"],"names":["bob"]},"x":1,"members":{"names":["bob"]}})");
  EXPECT_FALSE(security_with_user(*added, "bob", true));  // already there
  auto removed = security_with_user(*added, "bob", false);
  ASSERT_TRUE(removed);
  EXPECT_EQ((*removed)["admins"]["names"], OJson::array());
  EXPECT_FALSE(security_with_user(OJson::object(), "bob", false));
}

TEST(ReplicatorDocs, StripUrlCredentialsAsCouchDbsRegexDoes) {
  EXPECT_EQ(strip_url_credentials("http://u:p@host/db"), "http://host/db");
  EXPECT_EQ(strip_url_credentials("https://u:p@host:5984/db"), "https://host:5984/db");
  EXPECT_EQ(strip_url_credentials("https://a:b@c:d@host"),
            "https://c:d@host");  // first ':' and '@'
  EXPECT_EQ(strip_url_credentials("x http://u:p@h"), "x http://h");
  EXPECT_EQ(strip_url_credentials("http://host/db"), "http://host/db");
  EXPECT_EQ(strip_url_credentials("http://u@host/db"), "http://u@host/db");  // no password
  EXPECT_EQ(strip_url_credentials("http://:p@host"), "http://:p@host");      // no user
  EXPECT_EQ(strip_url_credentials("http://u:p@h\nx"), "http://u:p@h\nx");    // "." stops at \n
  EXPECT_EQ(strip_url_credentials("http://u:p@h\n"), "http://h\n");  // "$" before a final \n
}

TEST(ReplicatorDocs, OwnerIsSetAndEnforced) {
  UserCtx bob{std::string("bob"), {}};
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(
      R"({"_id":"r","source":"http://e.com/a","target":"http://e.com/b"})");
  EXPECT_FALSE(prepare_replicator_doc(doc, bob, false));
  EXPECT_EQ(doc.back(), "bob");
  doc["owner"] = "carl";
  auto e = prepare_replicator_doc(doc, bob, false);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 403);
  EXPECT_FALSE(prepare_replicator_doc(doc, bob, true));  // an admin keeps carl as the owner
  EXPECT_EQ(doc["owner"], "carl");
  UserCtx replicator{std::string("r"), {std::string(kReplicatorRole)}};
  nlohmann::ordered_json bad = nlohmann::ordered_json::parse(R"({"_id":"r","owner":"x"})");
  EXPECT_FALSE(prepare_replicator_doc(bad, replicator, false));  // neither rule for the replicator
}
}  // namespace
}  // namespace chaise::core
