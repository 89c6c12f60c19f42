#include "core/docs/design_doc.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace chaise::core {
namespace {

using Json = nlohmann::ordered_json;

// The reason CouchDB 3.5 gives for `body` as _design/t ("" = accepted), or "<none>".
std::string reason_for(std::string_view body, Partitioned p = Partitioned::no) {
  auto e = validate_design_doc("_design/t", Json::parse(body), p);
  if (!e) return "";
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->error, "invalid_design_doc");
  return e->reason;
}

// Golden vectors: each body PUT to a CouchDB 3.5.0 database as _design/tN, with its answer.
TEST(DesignDoc, ReasonsAreCouchDbs) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"views":1})", "`views` field must have object type"},
      {R"({"views":[]})", "`views` field must have object type"},
      {R"({"views":null})", "`views` field must have object type"},
      {R"({"views":{"v":1}})", "`views.v` field must have object type"},
      {R"({"views":{"v":{}}})", "View `v` must contain map function"},
      {R"({"views":{"v":{"map":1}}})", "`views.v.map` field must have string type"},
      {R"({"views":{"v":{"map":"function(doc){emit(1,1)}","reduce":1}}})",
       "`views.v.reduce` field must have string type"},
      {R"({"views":{"v":{"map":"f","reduce":"_foo"}}})",
       "`_foo` is not a supported reduce function."},
      {R"({"views":{"v":{"map":"f","reduce":"_sumx"}}})", ""},
      {R"({"views":{"v":{"map":"f","reduce":"_top_0"}}})", "rank value must be between 1 and 100"},
      {R"({"views":{"v":{"map":"f","reduce":"_top_101"}}})",
       "rank value must be between 1 and 100"},
      {R"({"views":{"v":{"map":"f","reduce":"_top_x"}}})", "invalid rank reducer"},
      {R"({"views":{"v":{"map":"f","reduce":"_bottom_100"}}})", ""},
      {R"({"views":{"lib":1}})", "`views.lib` field must have object type"},
      {R"({"views":{"lib":{"a":1}}})", ""},
      {R"({"views":{"lib":{"map":1}}})", "`views.lib.map` field must have string type"},
      {R"({"language":1})", "`language` field must have string type"},
      {R"({"language":null})", "`language` field must have string type"},
      {R"({"language":"python","views":{"v":{"map":"x","reduce":"_foo"}}})", ""},
      {R"({"filters":1})", "`filters` field must have object type"},
      {R"({"filters":{"a":1}})", "`filters.a` field must have string or object type"},
      {R"({"filters":{"a":{}}})", ""},
      {R"({"filters":{"a":"x","b":[]}})", "`filters.b` field must have string or object type"},
      {R"({"lists":{"a":1}})", "`lists.a` field must have string or object type"},
      {R"({"shows":{"a":null}})", "`shows.a` field must have string or object type"},
      {R"({"updates":[]})", "`updates` field must have object type"},
      {R"({"rewrites":{}})", "`rewrites` field must have array or string type"},
      {R"({"rewrites":"x"})", ""},
      {R"({"rewrites":[1]})", ""},
      {R"({"validate_doc_update":1})", "`validate_doc_update` field must have string type"},
      {R"({"options":1})", "`options` field must have object type"},
      {R"({"options":{"include_design":1}})",
       "`options.include_design` field must have boolean type"},
      {R"({"options":{"local_seq":"x"}})", "`options.local_seq` field must have boolean type"},
      {R"({"options":{"partitioned":true}})",
       "partitioned option cannot be true in a non-partitioned database."},
      {R"({"options":{"partitioned":"x"}})", "`options.partitioned` field must have boolean type"},
      {R"({"options":{"partitioned":false}})", ""},
      {R"({"language":"query","views":{"v":{"map":"x"}}})",
       "`views.v.map` field must have object type"},
      {R"({"language":"query","views":{"v":{"map":{}}}})", ""},
      {R"({"language":"query","views":{"v":{"map":{"fields":{"a":"asc"}},"reduce":"_foo"}}})",
       "`_foo` is not a supported reduce function."},
      {R"({"views":{"b":{"map":1},"a":{"x":1}}})", "`views.b.map` field must have string type"},
      {R"({"views":{"a":{"x":1},"b":{"map":1}}})", "`views.b.map` field must have string type"},
      {R"({"filters":1,"views":1})", "`filters` field must have object type"},
      {R"({"views":1,"filters":1})", "`filters` field must have object type"},
      {R"({"_deleted":true,"views":1})", "`views` field must have object type"},
  };
  for (const auto& [body, reason] : cases) EXPECT_EQ(reason_for(body), reason) << body;
}

TEST(DesignDoc, ViewOptionsMustBeAnObjectWhereCouchDbCrashes) {
  // CouchDB 3.5 answers 500 function_clause; Chaise a 400 in the same style as the others.
  EXPECT_EQ(reason_for(R"({"views":{"v":{"map":"f","options":1}}})"),
            "`views.v.options` field must have object type");
  EXPECT_EQ(reason_for(R"({"views":{"v":{"map":"f","options":{"collation":"raw"}}}})"), "");
}

TEST(DesignDoc, PartitionedOptionNeedsAPartitionedDatabase) {
  EXPECT_EQ(reason_for(R"({"options":{"partitioned":true}})", Partitioned::yes), "");
  EXPECT_EQ(reason_for(R"({"options":{"partitioned":false}})", Partitioned::yes), "");
}

TEST(DesignDoc, RankAndLanguageEdges) {
  EXPECT_EQ(reason_for(R"({"views":{"v":{"map":"f","reduce":"_top_01"}}})"), "");
  EXPECT_EQ(reason_for(R"({"views":{"v":{"map":"f","reduce":"_top_+5"}}})"), "");
  EXPECT_EQ(reason_for(R"({"views":{"v":{"map":"f","reduce":"_top_-1"}}})"),
            "rank value must be between 1 and 100");
  EXPECT_EQ(reason_for(R"({"views":{"v":{"map":"f","reduce":"_top_99999999999999999999"}}})"),
            "rank value must be between 1 and 100");
  EXPECT_EQ(reason_for(R"({"views":{"v":{"map":"f","reduce":"_bottom_"}}})"),
            "invalid rank reducer");
  EXPECT_EQ(reason_for(R"({"views":{"v":{"map":"f","reduce":"_topx"}}})"),
            "`_topx` is not a supported reduce function.");
  // JavaScript reduce functions are not compiled; the language is matched in any case.
  EXPECT_EQ(reason_for(R"({"views":{"v":{"map":"f","reduce":"function(k,v){}"}}})"), "");
  EXPECT_EQ(reason_for(R"({"language":"JavaScript","views":{"v":{"map":"f","reduce":"_x"}}})"),
            "`_x` is not a supported reduce function.");
}

TEST(DesignDoc, OnlyDesignDocumentsAreChecked) {
  const Json bad = Json::parse(R"({"views":1})");
  EXPECT_FALSE(validate_design_doc("doc", bad, Partitioned::no));
  EXPECT_FALSE(validate_design_doc("_local/x", bad, Partitioned::no));
  EXPECT_FALSE(validate_design_doc("_designx", bad, Partitioned::no));
  EXPECT_TRUE(validate_design_doc("_design/x", bad, Partitioned::no));
  EXPECT_FALSE(validate_design_doc("_design/x", Json::parse("{}"), Partitioned::no));
}

}  // namespace
}  // namespace chaise::core
