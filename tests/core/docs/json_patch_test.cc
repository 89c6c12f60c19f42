// JSON Merge Patch (RFC 7396) and JSON Patch (RFC 6902) with the increment extension
// (core/docs/json_patch.h), including the RFC 6902 appendix cases that matter for documents.
#include "core/docs/json_patch.h"

#include <gtest/gtest.h>

#include "core/util/json_text.h"

namespace chaise::core {
namespace {

using Json = nlohmann::ordered_json;

Json J(const char* text) { return std::get<Json>(parse_json_text(text, JsonNumbers::exact)); }

std::string patched(const char* doc, const char* ops) {
  PatchResult r = json_patch(J(doc), J(ops));
  if (auto* e = std::get_if<CouchError>(&r)) return std::to_string(e->status) + " " + e->error;
  return dump_json(std::get<Json>(r));
}

TEST(JsonPatch, MergePatchFollowsRfc7396) {
  PatchResult r = merge_patch(J(R"({"a":"b","c":{"d":"e","f":"g"},"keep":1})"),
                              J(R"({"a":"z","c":{"f":null},"new":[1]})"));
  EXPECT_EQ(dump_json(std::get<Json>(r)), R"({"a":"z","c":{"d":"e"},"keep":1,"new":[1]})");
  EXPECT_EQ(std::get<CouchError>(merge_patch(J("{}"), J("[1]"))).status, 400);
}

TEST(JsonPatch, OperationsFollowRfc6902) {
  EXPECT_EQ(patched(R"({"foo":"bar"})", R"([{"op":"add","path":"/baz","value":"qux"}])"),
            R"({"foo":"bar","baz":"qux"})");
  EXPECT_EQ(patched(R"({"foo":["bar","baz"]})", R"([{"op":"add","path":"/foo/1","value":"qux"}])"),
            R"({"foo":["bar","qux","baz"]})");
  EXPECT_EQ(patched(R"({"a":[1]})", R"([{"op":"add","path":"/a/-","value":2}])"), R"({"a":[1,2]})");
  EXPECT_EQ(patched(R"({"baz":"qux","foo":"bar"})", R"([{"op":"remove","path":"/baz"}])"),
            R"({"foo":"bar"})");
  EXPECT_EQ(patched(R"({"foo":["bar","qux","baz"]})", R"([{"op":"remove","path":"/foo/1"}])"),
            R"({"foo":["bar","baz"]})");
  EXPECT_EQ(patched(R"({"baz":"qux"})", R"([{"op":"replace","path":"/baz","value":"boo"}])"),
            R"({"baz":"boo"})");
  EXPECT_EQ(patched(R"({"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}})",
                    R"([{"op":"move","from":"/foo/waldo","path":"/qux/thud"}])"),
            R"({"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}})");
  EXPECT_EQ(patched(R"({"a":{"b":1}})", R"([{"op":"copy","from":"/a","path":"/c"}])"),
            R"({"a":{"b":1},"c":{"b":1}})");
  EXPECT_EQ(
      patched(R"({"a/b":1,"m~n":2})",
              R"([{"op":"replace","path":"/a~1b","value":3},{"op":"remove","path":"/m~0n"}])"),
      R"({"a/b":3})");
  // test: equal values pass (numbers by value), others fail the whole patch with 409.
  EXPECT_EQ(
      patched(R"({"n":1})",
              R"([{"op":"test","path":"/n","value":1.0},{"op":"add","path":"/t","value":true}])"),
      R"({"n":1,"t":true})");
  EXPECT_EQ(
      patched(R"({"n":1})",
              R"([{"op":"add","path":"/t","value":true},{"op":"test","path":"/n","value":2}])"),
      "409 conflict");
  EXPECT_EQ(patched(R"({"n":1})", R"([{"op":"remove","path":"/missing"}])"),
            "422 unprocessable_entity");
  EXPECT_EQ(patched(R"({"a":[1]})", R"([{"op":"add","path":"/a/5","value":1}])"),
            "422 unprocessable_entity");
  EXPECT_EQ(patched(R"({"a":1})", R"([{"op":"remove","path":""}])"), "400 bad_request");
}

TEST(JsonPatch, IncrementKeepsIntegersAndRefusesNonNumbers) {
  EXPECT_EQ(patched(R"({"n":41})", R"([{"op":"increment","path":"/n"}])"), R"({"n":42})");
  EXPECT_EQ(patched(R"({"n":1})", R"([{"op":"increment","path":"/n","value":-3}])"), R"({"n":-2})");
  EXPECT_EQ(patched(R"({"n":1.5})", R"([{"op":"increment","path":"/n","value":1}])"),
            R"({"n":2.5})");
  EXPECT_EQ(patched(R"({})", R"([{"op":"increment","path":"/c","value":5}])"), R"({"c":5})");
  EXPECT_EQ(patched(R"({"n":9223372036854775807})", R"([{"op":"increment","path":"/n"}])"),
            R"({"n":9223372036854775808})");
  EXPECT_EQ(patched(R"({"n":"1"})", R"([{"op":"increment","path":"/n"}])"),
            "422 unprocessable_entity");
  // A number kept as text (beyond 64 bits) is not incremented rather than rounded.
  EXPECT_EQ(
      patched(R"({"n":123456789012345678901234567890})", R"([{"op":"increment","path":"/n"}])"),
      "422 unprocessable_entity");
  // The untouched member keeps its digits.
  EXPECT_EQ(patched(R"({"n":1,"big":123456789012345678901234567890})",
                    R"([{"op":"increment","path":"/n"}])"),
            R"({"n":2,"big":123456789012345678901234567890})");
}

TEST(JsonPatch, MalformedPatchesAreRefusedBeforeAnyDocument) {
  for (const char* bad :
       {R"({"op":"add"})", R"([{"op":"jump","path":"/a"}])",
        R"([{"op":"add","path":"a","value":1}])", R"([{"op":"add","path":"/a"}])",
        R"([{"op":"move","path":"/a"}])", R"([{"op":"increment","path":"/a","value":"1"}])",
        R"([{"op":"move","from":"/a","path":"/a/b"}])",
        R"([{"op":"add","path":"/~2","value":1}])"}) {
    auto e = check_json_patch(J(bad));
    ASSERT_TRUE(e.has_value()) << bad;
    EXPECT_EQ(e->status, 400) << bad;
  }
  EXPECT_FALSE(check_json_patch(J(R"([])")).has_value());
}

}  // namespace
}  // namespace chaise::core
