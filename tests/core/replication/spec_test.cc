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
