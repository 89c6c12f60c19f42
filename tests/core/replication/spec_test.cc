// Replication requests and ids: the ids are the ones CouchDB 3.5 gives the same replications
// (computed with its couch_replicator_ids on OTP 25 for the server uuid below).
#include "core/replication/spec.h"

#include <gtest/gtest.h>

namespace chaise::core::replication {
namespace {

constexpr std::string_view kUuid = "0123456789abcdef0123456789abcdef";

ReplicationSpec parsed(const Json& body) {
  auto r = parse_replication(body, UserCtx{}, ReplicatorDefaults{});
  if (auto* e = std::get_if<CouchError>(&r)) ADD_FAILURE() << e->reason;
  return std::get<ReplicationSpec>(r);
}

TEST(ReplicationId, MatchesCouchDBs) {
  Json body = {{"source", "http://adm:pass@127.0.0.1:5984/src"},
               {"target", "http://127.0.0.1:5984/tgt"}};
  EXPECT_EQ(replication_id(parsed(body), kUuid, std::nullopt).base,
            "0cff1bd5f9e6f591645c0501c89b1926");

  Json with_ids = body;
  with_ids["doc_ids"] = {"b", "a"};
  EXPECT_EQ(replication_id(parsed(with_ids), kUuid, std::nullopt).base,
            "429361a31ec1770102b2b8fa7f1ac3d4");

  Json view = body;
  view["filter"] = "_view";
  view["query_params"] = {{"view", "d/v"}};
  EXPECT_EQ(replication_id(parsed(view), kUuid, std::nullopt).base,
            "16726703daa045ab97cbaa5d490bc1ed");

  // A selector already in Mango's normal form.
  Json selector = body;
  selector["selector"] = {{"type", {{"$eq", "x"}}}};
  EXPECT_EQ(replication_id(parsed(selector), kUuid, std::nullopt).base,
            "b3831e4e04aef0e5ff6dae026e62605d");
}

// A selector enters the id in Mango's normal form: the ids CouchDB 3.5 answered POST /_replicate
// with (continuous, server uuid below) for the same bodies.
TEST(ReplicationId, HashesTheSelectorInMangosNormalForm) {
  constexpr std::string_view kRefUuid = "5990ref0000000000000000000000000";
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"type":{"$eq":"x"}})", "74f822ee6b28cb38faabd7f153f277ee"},
      {R"({"a":1,"b":{"c":{"$gt":2}},"$nor":[{"d":3}]})", "550b88cef668e89ad2360c4e30340ac9"},
      {R"({"$not":{"x":{"$in":[1,2]},"y":{"$exists":true}},"z":{"$elemMatch":{"$gt":1}},)"
       R"("w":{"$regex":"^a"}})",
       "122df7239be718ca92e99b6eca4f00e5"},
      {R"({"a.b":{"c":{"$lt":1}}})", "86e181e63d8d093e35c9c52b89934fe0"},
  };
  for (const auto& [selector, id] : cases) {
    Json body = {{"source", "http://adm:pass@127.0.0.1:5984/src"},
                 {"target", "http://127.0.0.1:5984/tgt"},
                 {"continuous", true},
                 {"selector", Json::parse(selector)}};
    EXPECT_EQ(replication_id(parsed(body), kRefUuid, std::nullopt).base, id) << selector;
  }
}

TEST(ReplicationId, OptionsExtendTheId) {
  Json body = {{"source", "http://127.0.0.1:5984/a"},
               {"target", "http://127.0.0.1:5984/b"},
               {"continuous", true},
               {"create_target", true}};
  const ReplicationId id = replication_id(parsed(body), kUuid, std::nullopt);
  EXPECT_EQ(id.full, id.base + "+continuous+create_target");
  // The same endpoints given as objects, with the credentials elsewhere, name the same job.
  Json a = {{"source", "http://u:p@127.0.0.1:5984/a"}, {"target", "http://127.0.0.1:5984/b"}};
  Json b = {{"source",
             {{"url", "http://127.0.0.1:5984/a/"},
              {"auth", {{"basic", {{"username", "u"}, {"password", "other"}}}}}}},
            {"target", "http://127.0.0.1:5984/b"}};
  EXPECT_EQ(replication_id(parsed(a), kUuid, std::nullopt).base,
            replication_id(parsed(b), kUuid, std::nullopt).base);
  // Another user is another replication.
  Json c = {{"source", "http://v:p@127.0.0.1:5984/a"}, {"target", "http://127.0.0.1:5984/b"}};
  EXPECT_NE(replication_id(parsed(a), kUuid, std::nullopt).base,
            replication_id(parsed(c), kUuid, std::nullopt).base);
}

TEST(ReplicationSpecTest, RefusesWhatCouchDBRefuses) {
  const auto reason = [](const Json& body) {
    auto r = parse_replication(body, UserCtx{}, ReplicatorDefaults{});
    auto* e = std::get_if<CouchError>(&r);
    return e == nullptr ? std::string("ok") : e->reason;
  };
  EXPECT_EQ(reason({{"target", "http://h/b"}}), "Missing replicator database");
  EXPECT_EQ(reason({{"source", "http://h/a"}, {"target", "ftp://h/b"}}),
            "local_endpoints_not_supported");
  EXPECT_EQ(reason({{"source", "http://h/a"}, {"target", "http://h/b"}, {"continuous", 1}}),
            "{throw,{bad_request,<<\"parameter `continuous` must be a boolean\">>}}");
  EXPECT_EQ(reason({{"source", "http://h/a"},
                    {"target", "http://h/b"},
                    {"doc_ids", {"x"}},
                    {"filter", "d/f"}}),
            "{throw,{bad_request,\"`doc_ids`,`filter`,`selector` are mutually exclusive\"}}");
  EXPECT_EQ(reason({{"source", "http://h/a"}, {"target", "http://h/b"}, {"worker_processes", 0}}),
            "parameter `worker_processes` must be an integer from 1 to 64");
  EXPECT_EQ(reason({{"source", "http://h/a"}, {"target", "http://h/b"}}), "ok");
}

TEST(ReplicationSpecTest, UrlsAsJobsShowThem) {
  EXPECT_EQ(endpoint_url(Json("http://u:p@h:5984/db")), "http://h:5984/db/");
  EXPECT_EQ(endpoint_url(Json({{"url", "https://h/a/b/"}})), "https://h/a/b/");
  EXPECT_EQ(endpoint_url(Json("http://h/db?x=1")), "http://h/db?x=1");
}

}  // namespace
}  // namespace chaise::core::replication
