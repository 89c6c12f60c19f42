#include "core/query/selector.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// Expected values follow CouchDB 3.5: src/mango/src/mango_selector.erl (its eunit vectors are
// ported in the Couch* tests below), mango_error.erl for the reasons, couch_changes.erl for the
// _changes-specific ones.

namespace chaise::core {
namespace {

using Json = nlohmann::ordered_json;

Selector parse_ok_json(const Json& selector) {
  auto parsed = Selector::parse(selector);
  if (auto* e = std::get_if<CouchError>(&parsed)) {
    ADD_FAILURE() << selector.dump() << " was refused: " << e->reason;
    return std::get<Selector>(Selector::parse(Json::object()));
  }
  return std::get<Selector>(std::move(parsed));
}

Selector parse_ok(std::string_view text) { return parse_ok_json(Json::parse(text)); }

// The reason of the 400 a selector gets ("" if it is accepted), whose error is the one
// mango_error gives that reason.
std::string reason_of_json(const Json& selector) {
  auto parsed = Selector::parse(selector);
  auto* e = std::get_if<CouchError>(&parsed);
  if (!e) {
    ADD_FAILURE() << selector.dump() << " was accepted";
    return "";
  }
  EXPECT_EQ(e->status, 400);
  const std::string& r = e->reason;
  const char* expected = r.starts_with("Invalid operator")              ? "invalid_operator"
                         : r.starts_with("Bad argument")                ? "bad_arg"
                         : r.starts_with("Unsupported operator")        ? "not_supported"
                         : r.starts_with("Invalid field normalization") ? "bad_field"
                         : r.starts_with("Invalid field name")          ? "invalid_field_name"
                         : r.starts_with("One or more conditions")      ? "invalid_selector"
                         : r.starts_with("Selector must be")            ? "invalid_selector_json"
                                                                        : "bad_request";
  EXPECT_EQ(e->error, expected) << r;
  return e->reason;
}

std::string reason_of(std::string_view text) { return reason_of_json(Json::parse(text)); }

bool matches(std::string_view selector, std::string_view doc) {
  return parse_ok(selector).matches(Json::parse(doc));
}

// CouchDB's check_selector/2: {"x": cond} must give `expected` on {"x": value}, and
// {"x": {"$not": cond}} the opposite.
void check_condition(std::string_view cond,
                     const std::vector<std::pair<bool, std::string>>& cases) {
  const Json c = Json::parse(cond);
  const Selector positive = parse_ok_json(Json{{"x", c}});
  const Selector negative = parse_ok_json(Json{{"x", Json{{"$not", c}}}});
  for (const auto& [expected, value] : cases) {
    const Json doc = {{"x", Json::parse(value)}};
    EXPECT_EQ(positive.matches(doc), expected) << cond << " on " << value;
    EXPECT_EQ(negative.matches(doc), !expected) << "$not " << cond << " on " << value;
  }
}

bool regex_matches(const std::string& pattern, const std::string& subject) {
  return parse_ok_json(Json{{"x", {{"$regex", pattern}}}}).matches(Json{{"x", subject}});
}

std::string regex_reason(const std::string& pattern) {
  return reason_of_json(Json{{"x", {{"$regex", pattern}}}});
}

// ---- Parsing and its errors -------------------------------------------------------------------

TEST(SelectorParse, NonObjectGetsMangosReason) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"[]", "[]"}, {"\"x\"", "<<120>>"}, {"5", "5"}, {"null", "null"}, {"true", "true"}};
  for (const auto& [text, term] : cases)
    EXPECT_EQ(reason_of(text), std::string("Selector must be a JSON object, not: ") + term) << text;
}

TEST(SelectorParse, UnknownOperatorIsInvalid) {
  EXPECT_EQ(reason_of(R"({"$foo": 1})"), "Invalid operator: $foo");
  EXPECT_EQ(reason_of(R"({"a": {"$foo": 1}})"), "Invalid operator: $foo");
  EXPECT_EQ(reason_of(R"({"a": {"$gt": 1, "$EQ": 2}})"), "Invalid operator: $EQ");
}

TEST(SelectorParse, KnownButUnsupportedOperators) {
  for (const char* op : {"$where", "$geoWithin", "$geoIntersects", "$near", "$nearSphere"}) {
    EXPECT_EQ(reason_of_json(Json{{"a", {{op, 1}}}}), std::string("Unsupported operator: ") + op);
  }
}

TEST(SelectorParse, BadArgumentsAreQuotedAsErlangTerms) {
  EXPECT_EQ(reason_of(R"({"a": {"$in": "foo"}})"),
            "Bad argument for operator $in: <<102,111,111>>");
  EXPECT_EQ(reason_of(R"({"a": {"$in": 5}})"), "Bad argument for operator $in: 5");
  EXPECT_EQ(reason_of(R"({"a": {"$nin": {"a": null}}})"),
            "Bad argument for operator $nin: {[{<<97>>,null}]}");
  EXPECT_EQ(reason_of(R"({"a": {"$all": {}}})"), "Bad argument for operator $all: {[]}");
  EXPECT_EQ(reason_of(R"({"$and": {"a": [1, "b", true, ""]}})"),
            "Bad argument for operator $and: {[{<<97>>,[1,<<98>>,true,<<>>]}]}");
  EXPECT_EQ(reason_of(R"({"$or": "x"})"), "Bad argument for operator $or: <<120>>");
  EXPECT_EQ(reason_of(R"({"$nor": null})"), "Bad argument for operator $nor: null");
  EXPECT_EQ(reason_of(R"({"$not": [1]})"), "Bad argument for operator $not: [1]");
  EXPECT_EQ(reason_of(R"({"a": {"$not": false}})"), "Bad argument for operator $not: false");
  EXPECT_EQ(reason_of(R"({"a": {"$elemMatch": []}})"), "Bad argument for operator $elemMatch: []");
  EXPECT_EQ(reason_of(R"({"a": {"$allMatch": 1}})"), "Bad argument for operator $allMatch: 1");
  EXPECT_EQ(reason_of(R"({"a": {"$keyMapMatch": "k"}})"),
            "Bad argument for operator $keyMapMatch: <<107>>");
  EXPECT_EQ(reason_of(R"({"a": {"$exists": "true"}})"),
            "Bad argument for operator $exists: <<116,114,117,101>>");
  EXPECT_EQ(reason_of(R"({"a": {"$type": 1}})"), "Bad argument for operator $type: 1");
  EXPECT_EQ(reason_of(R"({"a": {"$size": -1}})"), "Bad argument for operator $size: -1");
  EXPECT_EQ(reason_of(R"({"a": {"$size": 1.5}})"), "Bad argument for operator $size: 1.5");
  EXPECT_EQ(reason_of(R"({"a": {"$size": "3"}})"), "Bad argument for operator $size: <<51>>");
  EXPECT_EQ(reason_of(R"({"a": {"$text": [1]}})"), "Bad argument for operator $text: [1]");
  EXPECT_EQ(reason_of(R"({"a": {"$in": "é"}})"), "Bad argument for operator $in: <<195,169>>");
}

TEST(SelectorParse, ModNeedsTwoIntegersAndANonZeroDivisor) {
  EXPECT_EQ(reason_of(R"({"a": {"$mod": [2]}})"), "Bad argument for operator $mod: [2]");
  EXPECT_EQ(reason_of(R"({"a": {"$mod": [2, 1.5]}})"), "Bad argument for operator $mod: [2,1.5]");
  EXPECT_EQ(reason_of(R"({"a": {"$mod": [2.0, 1]}})"), "Bad argument for operator $mod: [2.0,1]");
  EXPECT_EQ(reason_of(R"({"a": {"$mod": [1, 2, 3]}})"), "Bad argument for operator $mod: [1,2,3]");
  EXPECT_EQ(reason_of(R"({"a": {"$mod": "x"}})"), "Bad argument for operator $mod: <<120>>");
  // CouchDB would accept [0, 1] and fail while matching (badarith); its docs require a non-zero
  // divisor, and Chaise refuses it up front.
  EXPECT_EQ(reason_of(R"({"a": {"$mod": [0, 1]}})"), "Bad argument for operator $mod: [0,1]");
}

TEST(SelectorParse, FloatsArePrintedLikeErlang) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"1.5", "1.5"},
      {"100.0", "100.0"},
      {"120.0", "120.0"},
      {"1000.0", "1.0e3"},
      {"1200.0", "1.2e3"},
      {"123456.0", "123456.0"},
      {"0.1", "0.1"},
      {"0.001", "0.001"},
      {"0.0001", "1.0e-4"},
      {"12345.678", "12345.678"},
      {"-2.5", "-2.5"},
      {"0.0", "0.0"},
      {"-0.0", "-0.0"},
      {"1e15", "1.0e15"},
      {"1.5e300", "1.5e300"},
      {"1e-10", "1.0e-10"},
      {"9007199254740993.0", "9.007199254740992e15"},
  };
  for (const auto& [json, erlang] : cases) {
    EXPECT_EQ(reason_of(R"({"a": {"$in": )" + json + "}}"),
              "Bad argument for operator $in: " + erlang)
        << json;
  }
  EXPECT_EQ(reason_of(R"({"a": {"$in": 18446744073709551615}})"),
            "Bad argument for operator $in: 18446744073709551615");
  EXPECT_EQ(reason_of(R"({"a": {"$in": -9223372036854775808}})"),
            "Bad argument for operator $in: -9223372036854775808");
}

TEST(SelectorParse, RegexAndBeginsWithNeedStringsOrTheOperatorIsInvalid) {
  // mango_selector has no fallback clause for them: a non-string ends in "Invalid operator".
  EXPECT_EQ(reason_of(R"({"a": {"$regex": 5}})"), "Invalid operator: $regex");
  EXPECT_EQ(reason_of(R"({"a": {"$beginsWith": 1}})"), "Invalid operator: $beginsWith");
  EXPECT_EQ(reason_of(R"({"a": {"$regex": "("}})"), "Bad argument for operator $regex: <<40>>");
}

TEST(SelectorParse, BeginsWithRefusesInvalidUtf8) {
  const Json sel = {{"a", {{"$beginsWith", std::string("\xEF")}}}};
  EXPECT_EQ(reason_of_json(sel), "Bad argument for operator $beginsWith: <<239>>");
}

TEST(SelectorParse, ConditionWithoutAFieldIsRefused) {
  const std::string missing = "One or more conditions is missing a field name.";
  EXPECT_EQ(reason_of(R"({"$gt": 5})"), missing);
  EXPECT_EQ(reason_of(R"({"$eq": {"a": 1}})"), missing);
  EXPECT_EQ(reason_of(R"({"$not": {"$gt": 5}})"), missing);
  EXPECT_EQ(reason_of(R"({"$elemMatch": {"a": 1}})"), missing);
  EXPECT_EQ(reason_of(R"({"$regex": "a"})"), missing);
}

TEST(SelectorParse, FieldlessConditionInsideAndIsAcceptedAndAppliesToTheDocument) {
  // CouchDB only checks the top level; below an $and the condition applies to the whole
  // document, an object, which collates above every number.
  EXPECT_TRUE(matches(R"({"$and": [{"$gt": 5}]})", R"({"a": 1})"));
  EXPECT_FALSE(matches(R"({"$and": [{"$lt": 5}]})", R"({"a": 1})"));
}

TEST(SelectorParse, EmptyPathSegmentsAreInvalidFieldNames) {
  EXPECT_EQ(reason_of(R"({"a..b": 1})"), "Invalid field name: a..b");
  EXPECT_EQ(reason_of(R"({".a": 1})"), "Invalid field name: .a");
  EXPECT_EQ(reason_of(R"({"a.": 1})"), "Invalid field name: a.");
  EXPECT_EQ(reason_of(R"({"": 1})"), "Invalid field name: ");
  EXPECT_EQ(reason_of(R"({"a": {"": 1}})"), "Invalid field name: ");
  EXPECT_EQ(reason_of(R"({"a": {"$elemMatch": {"b..c": 1}}})"), "Invalid field name: b..c");
}

TEST(SelectorParse, OperatorErrorsComeBeforeFieldNameErrors) {
  // norm_ops runs over the whole selector before norm_fields looks at names.
  EXPECT_EQ(reason_of(R"({"a..b": 1, "c": {"$foo": 1}})"), "Invalid operator: $foo");
  // Within one pass the first error in document order wins.
  EXPECT_EQ(reason_of(R"({"a": {"$in": 1}, "b": {"$nin": 2}})"),
            "Bad argument for operator $in: 1");
}

TEST(SelectorParse, TextBecomesDefaultWhichOnlyLivesAtTheRoot) {
  EXPECT_TRUE(matches(R"({"$text": "anything"})", R"({"a": 1})"));
  EXPECT_TRUE(matches(R"({"$default": {"$text": 1}})", "{}"));
  EXPECT_TRUE(matches(R"({"$and": [{"$text": "x"}, {"a": 1}]})", R"({"a": 1})"));
  EXPECT_FALSE(matches(R"({"$and": [{"$text": "x"}, {"a": 1}]})", R"({"a": 2})"));
  const std::string dflt = "{[{<<36,100,101,102,97,117,108,116>>,";
  EXPECT_EQ(reason_of(R"({"a": {"$text": "x"}})"),
            "Invalid field normalization on selector: " + dflt +
                "{[{<<36,116,101,120,116>>,<<120>>}]}}]}");
  EXPECT_EQ(reason_of(R"({"$default": 5})"),
            "Invalid field normalization on selector: " + dflt + "5}]}");
  EXPECT_EQ(reason_of(R"({"$not": {"$text": "x"}})"),
            "Bad argument for operator $not: " + dflt + "{[{<<36,116,101,120,116>>,<<120>>}]}}]}");
}

Json nested_objects(int levels) {
  Json j = 1;
  for (int i = 0; i < levels; ++i) j = Json{{"a", std::move(j)}};
  return j;
}

TEST(SelectorParse, NestingIsBoundedAt64Levels) {
  EXPECT_TRUE(parse_ok_json(nested_objects(kSelectorDepthMax)).matches(nested_objects(64)));
  EXPECT_EQ(reason_of_json(nested_objects(kSelectorDepthMax + 1)),
            "Selector is nested too deeply: more than 64 levels of arrays and objects");
  // Arguments count too: {"a": {"$eq": [[...]]}}.
  Json arg = 1;
  for (int i = 0; i < kSelectorDepthMax; ++i) arg = Json::array({std::move(arg)});
  EXPECT_EQ(reason_of_json(Json{{"a", {{"$eq", arg}}}}),
            "Selector is nested too deeply: more than 64 levels of arrays and objects");
  Json ands = Json{{"a", 1}};
  for (int i = 0; i < 40; ++i) ands = Json{{"$and", Json::array({std::move(ands)})}};
  EXPECT_FALSE(std::holds_alternative<Selector>(Selector::parse(ands)));
}

TEST(SelectorParse, SelectorsAreCopyableAndShareTheirTree) {
  const Selector a = parse_ok(R"({"x": {"$gt": 1}})");
  const Selector b = a;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_TRUE(a.matches(Json::parse(R"({"x": 2})")));
  EXPECT_TRUE(b.matches(Json::parse(R"({"x": 2})")));
  EXPECT_FALSE(b.matches(Json::parse(R"({"x": 1})")));
}

TEST(SelectorParse, OneSelectorMatchesFromManyThreadsAtOnce) {
  const Selector s = parse_ok(R"({"n": {"$mod": [2, 0]}, "s": {"$regex": "^a+b$"}})");
  std::vector<std::thread> threads;
  std::vector<int> counts(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&s, &counts, t] {
      for (int i = 0; i < 1000; ++i) {
        const Json doc = {{"n", i}, {"s", std::string(static_cast<std::size_t>(i % 7), 'a') + "b"}};
        if (s.matches(doc)) ++counts[static_cast<std::size_t>(t)];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int c : counts) EXPECT_EQ(c, 428);  // even i with i % 7 != 0
}

// ---- Fields and paths -------------------------------------------------------------------------

TEST(SelectorMatch, EmptySelectorMatchesEverything) {
  const Selector s = parse_ok("{}");
  EXPECT_TRUE(s.matches(Json::parse(R"({"_id": "a", "_rev": "1-x"})")));
  EXPECT_TRUE(s.matches(Json::parse(R"({"_id": "a", "_deleted": true})")));
  EXPECT_TRUE(s.matches(Json(5)));
}

TEST(SelectorMatch, CouchMatchDemo) {
  const std::string doc = R"({"_id": "foo", "_rev": "bar", "user_id": 11})";
  EXPECT_TRUE(matches(R"({"user_id": 11})", doc));
  EXPECT_TRUE(matches(R"({"_id": "foo"})", doc));
  EXPECT_TRUE(matches(R"({"_id": "foo", "_rev": "bar"})", doc));
  EXPECT_FALSE(matches(R"({"user_id": 1234})", doc));
  EXPECT_FALSE(matches(R"({"user_id": "11"})", doc));  // strict types
  EXPECT_FALSE(matches(R"({"_id": "foo", "_rev": "quux"})", doc));
}

TEST(SelectorMatch, CouchObjectSelectors) {
  const std::string doc1 = "{}";
  const std::string doc2 = R"({"x": {}})";
  const std::string doc3 = R"({"x": {"a": 1}})";
  const std::string doc4 = R"({"x": {"a": 1, "b": 2}})";
  const std::string doc5 = R"({"x": []})";
  // An inner {} is equality with the empty object.
  const std::string empty = R"({"x": {}})";
  EXPECT_FALSE(matches(empty, doc1));
  EXPECT_TRUE(matches(empty, doc2));
  EXPECT_FALSE(matches(empty, doc3));
  EXPECT_FALSE(matches(empty, doc5));
  // ... negated, it needs "x" present.
  const std::string not_empty = R"({"$not": {"x": {}}})";
  EXPECT_FALSE(matches(not_empty, doc1));
  EXPECT_FALSE(matches(not_empty, doc2));
  EXPECT_TRUE(matches(not_empty, doc3));
  EXPECT_TRUE(matches(not_empty, doc4));
  EXPECT_TRUE(matches(not_empty, doc5));
  // Inner objects with fields are paths, so extra members are fine.
  EXPECT_TRUE(matches(R"({"x": {"a": 1}})", doc3));
  EXPECT_TRUE(matches(R"({"x": {"a": 1}})", doc4));
  EXPECT_FALSE(matches(R"({"x": {"a": 1}})", doc2));
  EXPECT_FALSE(matches(R"({"x": {"a": 1, "b": 2}})", doc3));
  EXPECT_TRUE(matches(R"({"x": {"a": 1, "b": 2}})", doc4));
  EXPECT_TRUE(matches(R"({"x.b": 2})", doc4));
  EXPECT_FALSE(matches(R"({"x.b": 2})", doc5));
}

TEST(SelectorMatch, DottedAndEscapedPaths) {
  EXPECT_TRUE(matches(R"({"a.b.c": 1})", R"({"a": {"b": {"c": 1}}})"));
  EXPECT_TRUE(matches(R"({"a": {"b.c": 1}})", R"({"a": {"b": {"c": 1}}})"));
  EXPECT_TRUE(matches(R"({"a\\.b": 1})", R"({"a.b": 1})"));
  EXPECT_FALSE(matches(R"({"a\\.b": 1})", R"({"a": {"b": 1}})"));
  EXPECT_TRUE(matches(R"({"a.b\\.c": 1})", R"({"a": {"b.c": 1}})"));
  // Backslashes are dropped from names: "a\b" is the field "ab".
  EXPECT_TRUE(matches(R"({"a\\b": 1})", R"({"ab": 1})"));
}

TEST(SelectorMatch, NumericSegmentsIndexArraysAndNameObjectMembers) {
  EXPECT_TRUE(matches(R"({"a.1": 7})", R"({"a": [6, 7]})"));
  EXPECT_TRUE(matches(R"({"a.0.b": 1})", R"({"a": [{"b": 1}]})"));
  EXPECT_TRUE(matches(R"({"a.0": 1})", R"({"a": {"0": 1}})"));
  EXPECT_TRUE(matches(R"({"a.01": 7})", R"({"a": [6, 7]})"));  // binary_to_integer
  EXPECT_TRUE(matches(R"({"a.+1": 7})", R"({"a": [6, 7]})"));
  EXPECT_TRUE(matches(R"({"a.-0": 6})", R"({"a": [6, 7]})"));
  EXPECT_FALSE(matches(R"({"a.2": 7})", R"({"a": [6, 7]})"));
  EXPECT_FALSE(matches(R"({"a.-1": 7})", R"({"a": [6, 7]})"));
  EXPECT_FALSE(matches(R"({"a.99999999999999999999999": 7})", R"({"a": [6, 7]})"));
}

TEST(SelectorMatch, MissingFieldsMatchOnlyExistsFalse) {
  EXPECT_FALSE(matches(R"({"x": {"$ne": 5}})", "{}"));
  EXPECT_FALSE(matches(R"({"$not": {"x": 5}})", "{}"));
  EXPECT_FALSE(matches(R"({"x": {"$not": {"$eq": 0}}})", "{}"));
  EXPECT_FALSE(matches(R"({"x": {"$nin": [1]}})", "{}"));
  EXPECT_FALSE(matches(R"({"x": {"$lt": 5}})", "{}"));
  EXPECT_FALSE(matches(R"({"x": null})", "{}"));
  EXPECT_FALSE(matches(R"({"x": {"$type": "null"}})", "{}"));
  EXPECT_FALSE(matches(R"({"$nor": [{"x": 1}]})", "{}"));
  EXPECT_FALSE(matches(R"({"x": {"$in": [null, 1]}})", "{}"));
  EXPECT_TRUE(matches(R"({"x": {"$exists": false}})", "{}"));
  EXPECT_TRUE(matches(R"({"$or": [{"x": {"$exists": false}}, {"x": 1}]})", "{}"));
  EXPECT_TRUE(matches(R"({"$or": [{"x": {"$exists": false}}, {"x": 1}]})", R"({"x": 1})"));
  EXPECT_FALSE(matches(R"({"$or": [{"x": {"$exists": false}}, {"x": 1}]})", R"({"x": 2})"));
  EXPECT_TRUE(matches(R"({"$not": {"x": {"$exists": true}}})", "{}"));
  EXPECT_TRUE(matches(R"({"x.y": {"$exists": false}})", R"({"x": {}})"));
  // Negating {"$exists": true, "$eq": 0} gives $or [$exists false, $ne 0]: matches the empty doc.
  check_condition(R"({"x": {"$not": {"$exists": true, "$eq": 0}}})",
                  {{true, R"({"x": 1})"}, {false, R"({"x": 0})"}, {true, "{}"}});
}

TEST(SelectorMatch, PathsThroughNonContainersMatchNothing) {
  // mango_doc:get_field gives bad_path, which fails even $exists: false.
  EXPECT_FALSE(matches(R"({"a.b": {"$exists": false}})", R"({"a": 5})"));
  EXPECT_FALSE(matches(R"({"a.b": {"$exists": false}})", R"({"a": [1]})"));
  EXPECT_FALSE(matches(R"({"a.5": {"$exists": false}})", R"({"a": [1]})"));
  EXPECT_FALSE(matches(R"({"a.b": {"$ne": 1}})", R"({"a": "str"})"));
  EXPECT_FALSE(parse_ok(R"({"a": 1})").matches(Json(5)));
}

TEST(SelectorMatch, DeletedDocumentsCarryTheirDeletedFlag) {
  const std::string deleted = R"({"_id": "a", "_rev": "2-x", "_deleted": true})";
  const std::string live = R"({"_id": "b", "_rev": "1-y", "v": 1})";
  EXPECT_TRUE(matches(R"({"_deleted": true})", deleted));
  EXPECT_FALSE(matches(R"({"_deleted": true})", live));
  EXPECT_FALSE(matches(R"({"_deleted": {"$exists": false}})", deleted));
  EXPECT_TRUE(matches(R"({"_deleted": {"$exists": false}})", live));
}

// ---- Equality and the collation ---------------------------------------------------------------

TEST(SelectorMatch, CouchEqVectors) {
  check_condition(R"({"$eq": 5})", {{true, "5"}, {false, "6"}});
  check_condition(R"({"$eq": "hello"})", {{true, R"("hello")"}, {false, R"("help")"}});
  check_condition(R"({"$eq": [1, [2, 3, 4], 5]})", {{true, "[1, [2, 3, 4], 5]"},
                                                    {false, "[1, [2, 3, 4]]"},
                                                    {false, "[1, [2, 3, 4], 5, 6]"},
                                                    {false, "[1, [2, 7, 4], 5]"}});
  check_condition(R"({"$eq": {"a": {"b": {"c": 7}}}})", {{true, R"({"a": {"b": {"c": 7}}})"},
                                                         {false, R"({"a": {"b": {"c": 8}}})"},
                                                         {false, R"({"a": {"b": {"d": 7}}})"},
                                                         {false, R"({"a": {"d": {"c": 7}}})"}});
}

TEST(SelectorMatch, CouchNeVectors) {
  check_condition(R"({"$ne": 5})", {{false, "5"}, {true, "6"}});
  check_condition(R"({"$ne": [1, [2, 3, 4], 5]})",
                  {{false, "[1, [2, 3, 4], 5]"}, {true, "[1, [2, 3, 4]]"}});
}

TEST(SelectorMatch, ArrayFieldsCompareAsWholeValues) {
  // No element-wise equality: {"tags": "a"} does not match ["a", "b"].
  EXPECT_FALSE(matches(R"({"tags": "a"})", R"({"tags": ["a", "b"]})"));
  EXPECT_TRUE(matches(R"({"tags": ["a", "b"]})", R"({"tags": ["a", "b"]})"));
  EXPECT_FALSE(matches(R"({"tags": ["b", "a"]})", R"({"tags": ["a", "b"]})"));
  EXPECT_TRUE(matches(R"({"tags": {"$gt": "z"}})", R"({"tags": ["0"]})"));  // arrays > strings
}

TEST(SelectorMatch, NumbersCompareByValueAcrossIntegerAndFloat) {
  EXPECT_TRUE(matches(R"({"x": 1})", R"({"x": 1.0})"));
  EXPECT_TRUE(matches(R"({"x": 1.0})", R"({"x": 1})"));
  EXPECT_TRUE(matches(R"({"x": {"$lt": 10}})", R"({"x": 2})"));
  EXPECT_TRUE(matches(R"({"x": {"$lt": -1}})", R"({"x": -1.5})"));
  EXPECT_TRUE(matches(R"({"x": {"$gt": 9007199254740992.0}})", R"({"x": 9007199254740993})"));
  EXPECT_TRUE(matches(R"({"x": {"$gt": 1e19}})", R"({"x": 18446744073709551615})"));
  EXPECT_TRUE(matches(R"({"x": {"$lt": -9223372036854775807}})", R"({"x": -9223372036854775808})"));
  EXPECT_TRUE(matches(R"({"x": {"$gt": 2.5}})", R"({"x": 3})"));
  EXPECT_FALSE(matches(R"({"x": {"$gt": 3.5}})", R"({"x": 3})"));
}

TEST(SelectorMatch, ObjectsCompareMemberByMemberInOrder) {
  EXPECT_FALSE(matches(R"({"x": {"$eq": {"a": 1, "b": 2}}})", R"({"x": {"b": 2, "a": 1}})"));
  EXPECT_TRUE(matches(R"({"x": {"$lt": {"a": 2}}})", R"({"x": {"a": 1, "z": 9}})"));
  EXPECT_TRUE(matches(R"({"x": {"$lt": {"a": 1, "b": 0}}})", R"({"x": {"a": 1}})"));
  EXPECT_TRUE(matches(R"({"x": {"$gt": {"a": 1}}})", R"({"x": {"b": 0}})"));
}

TEST(SelectorMatch, CouchLtLteGtGteVectors) {
  check_condition(R"({"$lt": 5})", {{true, "4"}, {false, "5"}, {false, "6"}});
  check_condition(R"({"$lt": "hello"})",
                  {{true, R"("held")"}, {false, R"("hello")"}, {false, R"("help")"}});
  check_condition(R"({"$lt": [1, 2, 3]})", {{true, "[1, 2, 2]"},
                                            {true, "[1, 2]"},
                                            {false, "[1, 2, 3]"},
                                            {false, "[1, 2, 4]"},
                                            {false, "[1, 3]"}});
  check_condition(R"({"$lte": 5})", {{true, "4"}, {true, "5"}, {false, "6"}});
  check_condition(R"({"$lte": [1, 2, 3]})",
                  {{true, "[1, 2]"}, {true, "[1, 2, 3]"}, {false, "[1, 2, 4]"}});
  check_condition(R"({"$gt": 5})", {{false, "4"}, {false, "5"}, {true, "6"}});
  check_condition(R"({"$gt": "hello"})",
                  {{false, R"("held")"}, {false, R"("hello")"}, {true, R"("help")"}});
  check_condition(R"({"$gt": [1, 2, 3]})", {{false, "[1, 2, 2]"},
                                            {false, "[1, 2]"},
                                            {false, "[1, 2, 3]"},
                                            {true, "[1, 2, 4]"},
                                            {true, "[1, 3]"}});
  check_condition(R"({"$gte": 5})", {{false, "4"}, {true, "5"}, {true, "6"}});
  check_condition(R"({"$gte": [1, 2, 3]})",
                  {{false, "[1, 2]"}, {true, "[1, 2, 3]"}, {true, "[1, 3]"}});
}

TEST(SelectorMatch, DifferentTypesCollateNullFalseTrueNumberStringArrayObject) {
  const std::vector<std::string> ascending = {"null", "false",  "true",  "-5",
                                              "0",    "1e10",   R"("")", R"("a")",
                                              "[]",   "[null]", "{}",    R"({"a": null})"};
  for (std::size_t i = 0; i < ascending.size(); ++i) {
    for (std::size_t j = 0; j < ascending.size(); ++j) {
      const std::string sel = R"({"x": {"$lt": )" + ascending[j] + "}}";
      const std::string doc = R"({"x": )" + ascending[i] + "}";
      EXPECT_EQ(matches(sel, doc), i < j) << ascending[i] << " < " << ascending[j];
      const std::string gte = R"({"x": {"$gte": )" + ascending[j] + "}}";
      EXPECT_EQ(matches(gte, doc), i >= j) << ascending[i] << " >= " << ascending[j];
    }
  }
}

TEST(SelectorMatch, StringsCompareByUtf8BytesNotIcu) {
  // Documented difference: CouchDB's ICU collation puts "a" before "B"; code points do not.
  EXPECT_TRUE(matches(R"({"x": {"$lt": "a"}})", R"({"x": "B"})"));
  EXPECT_TRUE(matches(R"({"x": {"$gt": "z"}})", R"({"x": "é"})"));
  EXPECT_TRUE(matches(R"({"x": {"$lt": "ab"}})", R"({"x": "a"})"));
}

TEST(SelectorMatch, IdComparesInErlangTermOrder) {
  // mango_selector:match/3 compares "_id" with mango_json:cmp_raw/2: strings sort after
  // arrays and objects there, before them in the view collation.
  const std::string doc = R"({"_id": "foo", "x": "foo"})";
  EXPECT_FALSE(matches(R"({"_id": {"$lt": []}})", doc));
  EXPECT_TRUE(matches(R"({"x": {"$lt": []}})", doc));
  EXPECT_TRUE(matches(R"({"_id": {"$gt": {}}})", doc));
  EXPECT_FALSE(matches(R"({"x": {"$gt": {}}})", doc));
  EXPECT_TRUE(matches(R"({"_id": {"$gt": null}})", doc));
  EXPECT_TRUE(matches(R"({"_id": {"$gt": "fo", "$lt": "fop"}})", doc));
  EXPECT_TRUE(matches(R"({"_id": {"$in": ["bar", "foo"]}})", doc));
  // Erlang atoms: false < null < true.
  EXPECT_TRUE(matches(R"({"_id": {"$lt": null}})", R"({"_id": false})"));
  EXPECT_FALSE(matches(R"({"x": {"$lt": null}})", R"({"x": false})"));
}

// ---- $in, $nin, $all ----------------------------------------------------------------------------

TEST(SelectorMatch, CouchInVectors) {
  check_condition(R"({"$in": []})", {{false, "0"}, {false, "true"}, {false, R"("foo")"}});
  check_condition(R"({"$in": [42, false, "bar", [["nested"], "list"], {"b": 2}]})",
                  {{true, "42"},
                   {true, "false"},
                   {true, R"("bar")"},
                   {true, R"({"b": 2})"},
                   {false, "43"},
                   {false, "true"},
                   {false, R"("bars")"},
                   {false, R"({"b": 2, "c": 3})"},
                   // an array field matches if one of its elements is in the list ...
                   {true, "[0, 42]"},
                   {true, "[0, false]"},
                   {true, R"([0, "bar"])"},
                   {true, R"([0, {"b": 2}])"},
                   // ... and is never compared as a whole
                   {false, R"([["nested"], "list"])"},
                   {true, R"([0, [["nested"], "list"]])"}});
}

TEST(SelectorMatch, CouchNinVectors) {
  check_condition(R"({"$nin": []})", {{true, "0"}, {true, "true"}, {true, R"("foo")"}});
  check_condition(R"({"$nin": [42, false, "bar", [["nested"], "list"], {"b": 2}]})",
                  {{false, "42"},
                   {false, "false"},
                   {false, R"({"b": 2})"},
                   {true, "43"},
                   {true, R"("bars")"},
                   {false, "[0, 42]"},
                   {false, R"([0, {"b": 2}])"},
                   {true, R"([["nested"], "list"])"},
                   {false, R"([0, [["nested"], "list"]])"}});
}

TEST(SelectorMatch, InComparesWithTheCollation) {
  EXPECT_TRUE(matches(R"({"x": {"$in": [1]}})", R"({"x": 1.0})"));
  EXPECT_FALSE(matches(R"({"x": {"$in": [[]]}})", R"({"x": []})"));  // elements of [] only
  EXPECT_TRUE(matches(R"({"x": {"$nin": [[]]}})", R"({"x": []})"));
}

TEST(SelectorMatch, CouchAllVectors) {
  check_condition(R"({"$all": []})",
                  {{false, "[]"}, {false, "[42]"}, {false, "{}"}, {false, R"("foo")"}});
  check_condition(R"({"$all": [1, 2, 3, 4]})", {{true, "[3, 2, 4, 1]"},
                                                {true, "[0, 4, 3, 5, 2, 1, 6]"},
                                                {false, "[3, 2, 4]"},
                                                {false, "[]"}});
  // The special form [List]: the field equals List, or contains it.
  check_condition(R"({"$all": [[1, 2, 3, 4]]})", {{true, "[1, 2, 3, 4]"},
                                                  {false, "[4, 3, 2, 1]"},
                                                  {false, "[1, 3, 4]"},
                                                  {false, "[]"},
                                                  {true, "[5, [1, 2, 3, 4], 6]"},
                                                  {false, "[5, [1, 3, 4], 6]"}});
  check_condition(
      R"({"$all": ["hello"]})",
      {{false, R"("hello")"}, {true, R"(["hello"])"}, {true, R"([0, "hello", 1])"}, {false, "[]"}});
  check_condition(R"({"$all": [{"a": 1}]})",
                  {{true, R"([{"a": 1}])"}, {false, R"([{"a": 1, "b": 2}])"}});
}

TEST(SelectorMatch, AllUsesErlangExactMembershipButArithmeticListEquality) {
  // lists:member/2 is =:= (1 is not 1.0); the [List] form uses == (it is).
  EXPECT_FALSE(matches(R"({"x": {"$all": [1]}})", R"({"x": [1.0]})"));
  EXPECT_TRUE(matches(R"({"x": {"$all": [[1]]}})", R"({"x": [1.0]})"));
  EXPECT_TRUE(matches(R"({"x": {"$all": [1.5]}})", R"({"x": [1.5]})"));
}

// ---- $exists, $type, $size, $mod, $regex, $beginsWith ------------------------------------------

TEST(SelectorMatch, CouchExistsVectors) {
  check_condition(R"({"x": {"$exists": true}})",
                  {{true, R"({"x": 0})"}, {false, R"({"y": 0})"}, {false, "{}"}});
  check_condition(R"({"x": {"$exists": false}})",
                  {{false, R"({"x": 0})"}, {true, R"({"y": 0})"}, {true, "{}"}});
  EXPECT_TRUE(matches(R"({"x": {"$exists": true}})", R"({"x": null})"));
}

TEST(SelectorMatch, CouchTypeVectors) {
  check_condition(R"({"$type": "null"})", {{true, "null"}, {false, "false"}, {false, "{}"}});
  check_condition(R"({"$type": "boolean"})", {{true, "true"}, {true, "false"}, {false, "0"}});
  check_condition(R"({"$type": "number"})", {{true, "42"},
                                             {true, "3.14"},
                                             {true, "0"},
                                             {true, "18446744073709551615"},
                                             {false, "true"},
                                             {false, "[1]"},
                                             {false, R"("1")"}});
  check_condition(R"({"$type": "string"})", {{true, R"("")"}, {true, R"("hello")"}, {false, "[]"}});
  check_condition(R"({"$type": "array"})",
                  {{true, "[]"}, {true, "[1, 2]"}, {false, "{}"}, {false, R"("hi")"}});
  check_condition(R"({"$type": "object"})",
                  {{true, "{}"}, {true, R"({"a": 1})"}, {false, R"([{"a": 1}])"}, {false, "null"}});
  // Any string is accepted; an unknown type name never matches.
  check_condition(R"({"$type": "integer"})", {{false, "1"}, {false, "null"}});
}

TEST(SelectorMatch, CouchSizeVectors) {
  check_condition(R"({"$size": 3})", {{false, "3"},
                                      {false, R"("fun")"},
                                      {true, "[0, 0, 0]"},
                                      {false, "[0, 0]"},
                                      {false, "[0, 0, 0, 0]"}});
  check_condition(R"({"$size": 0})", {{true, "[]"}, {false, "{}"}});
}

TEST(SelectorMatch, CouchModVectors) {
  check_condition(R"({"$mod": [28, 1]})",
                  {{true, "1"}, {true, "29"}, {true, "57"}, {false, "58"}, {false, R"("57")"}});
}

TEST(SelectorMatch, ModIsErlangRemOnIntegersOnly) {
  // rem truncates: the remainder has the dividend's sign.
  EXPECT_TRUE(matches(R"({"x": {"$mod": [3, -2]}})", R"({"x": -5})"));
  EXPECT_FALSE(matches(R"({"x": {"$mod": [3, 1]}})", R"({"x": -5})"));
  EXPECT_TRUE(matches(R"({"x": {"$mod": [-3, 2]}})", R"({"x": 5})"));
  EXPECT_FALSE(matches(R"({"x": {"$mod": [2, 0]}})", R"({"x": 4.0})"));  // a float
  EXPECT_TRUE(matches(R"({"x": {"$mod": [10, 5]}})", R"({"x": 18446744073709551615})"));
  EXPECT_TRUE(matches(R"({"x": {"$mod": [-1, 0]}})", R"({"x": -9223372036854775808})"));
}

TEST(SelectorMatch, CouchRegexVectors) {
  check_condition(
      R"({"$regex": "^[0-9a-f]+$"})",
      {{false, R"("")"}, {true, R"("3a0df5e")"}, {false, R"("3a0gf5e")"}, {false, "42"}});
}

TEST(SelectorMatch, CouchBeginsWithVectors) {
  check_condition(R"({"$beginsWith": "foo"})", {{true, R"("foo")"},
                                                {true, R"("food")"},
                                                {true, R"("fool me once")"},
                                                {false, R"("more food")"},
                                                {false, R"("fo")"},
                                                {false, "42"}});
  check_condition(R"({"$beginsWith": ""})", {{true, R"("")"}, {true, R"("x")"}, {false, "[]"}});
  EXPECT_FALSE(matches(R"({"x": {"$beginsWith": "F"}})", R"({"x": "foo"})"));  // case-sensitive
  EXPECT_TRUE(matches(R"({"_id": {"$beginsWith": "f"}})", R"({"_id": "foo"})"));
}

// ---- $elemMatch, $allMatch, $keyMapMatch ------------------------------------------------------

TEST(SelectorMatch, CouchElemMatchAndAllMatchVectors) {
  check_condition(R"({"$elemMatch": {"$eq": 0}})",
                  {{false, "[]"}, {true, "[0]"}, {false, "[1]"}, {true, "[0, 1]"}});
  // $allMatch is false on empty arrays ...
  check_condition(R"({"$allMatch": {"$eq": 0}})",
                  {{false, "[]"}, {true, "[0]"}, {false, "[1]"}, {false, "[0, 1]"}});
  // ... so $not $allMatch is not $elemMatch $not.
  check_condition(R"({"$elemMatch": {"$ne": 0}})",
                  {{false, "[]"}, {false, "[0]"}, {true, "[1]"}, {true, "[0, 1]"}});
  check_condition(R"({"$elemMatch": {"$eq": 0}})", {{false, "0"}, {false, R"({"a": 0})"}});
}

TEST(SelectorMatch, ElemMatchAppliesSubSelectorsToElements) {
  const std::string doc = R"({"tags": [{"name": "a", "n": 1}, {"name": "b", "n": 5}]})";
  EXPECT_TRUE(matches(R"({"tags": {"$elemMatch": {"name": "b", "n": {"$gt": 4}}}})", doc));
  EXPECT_FALSE(matches(R"({"tags": {"$elemMatch": {"name": "a", "n": {"$gt": 4}}}})", doc));
  EXPECT_TRUE(matches(R"({"tags": {"$allMatch": {"n": {"$lt": 6}}}})", doc));
  EXPECT_FALSE(matches(R"({"tags": {"$allMatch": {"name": "a"}}})", doc));
  EXPECT_TRUE(matches(R"({"s": {"$elemMatch": {"$gte": 80, "$lt": 85}}})", R"({"s": [70, 82]})"));
  EXPECT_FALSE(matches(R"({"s": {"$elemMatch": {"$gte": 80, "$lt": 85}}})", R"({"s": [70, 90]})"));
}

TEST(SelectorMatch, CouchKeyMapMatchVectors) {
  check_condition(R"({"$keyMapMatch": {"$regex": "^[a-z]+$"}})", {{true, R"({"hello": 0})"},
                                                                  {true, R"({"a": 1, "b": 2})"},
                                                                  {true, R"({"a": 1, "b4": 2})"},
                                                                  {false, R"({"b4": 2})"},
                                                                  {false, "{}"},
                                                                  {false, R"(["a"])"}});
}

TEST(SelectorMatch, NegationsInsideElemMatchAreNotPushedDown) {
  // norm_negations stops at fields, so {"$not": {"b": 1}} inside $elemMatch stays a $not and
  // matches elements without "b" (at the top level it would become {"b": {"$ne": 1}}).
  EXPECT_TRUE(matches(R"({"a": {"$elemMatch": {"$not": {"b": 1}}}})", R"({"a": [{"c": 1}]})"));
  EXPECT_FALSE(matches(R"({"$not": {"b": 1}})", R"({"c": 1})"));
  // A negated $elemMatch keeps its $not and needs the field.
  const std::string not_elem = R"({"$not": {"a": {"$elemMatch": {"$eq": 1}}}})";
  EXPECT_TRUE(matches(not_elem, R"({"a": [2]})"));
  EXPECT_FALSE(matches(not_elem, R"({"a": [1]})"));
  EXPECT_FALSE(matches(not_elem, "{}"));
}

TEST(SelectorMatch, NorInsideElemMatchNeverMatchesLikeCouch) {
  // CouchDB's matcher has no clause for a $nor left below $elemMatch: it raises, and
  // $elemMatch/$allMatch/$keyMapMatch catch that as "no match".
  EXPECT_FALSE(matches(R"({"a": {"$elemMatch": {"$nor": [{"b": 1}]}}})", R"({"a": [{"b": 2}]})"));
  EXPECT_FALSE(matches(R"({"a": {"$allMatch": {"$nor": [{"b": 1}]}}})", R"({"a": [{"b": 2}]})"));
  EXPECT_FALSE(
      matches(R"({"a": {"$keyMapMatch": {"$nor": [{"$eq": "k"}]}}})", R"({"a": {"j": 1}})"));
  // Evaluation is left to right: a branch decided before the $nor is reached still counts ...
  const std::string or_nor = R"({"a": {"$elemMatch": {"$or": [{"b": 2}, {"$nor": [{"b": 1}]}]}}})";
  EXPECT_TRUE(matches(or_nor, R"({"a": [{"b": 2}]})"));
  EXPECT_FALSE(matches(or_nor, R"({"a": [{"b": 3}]})"));
  // ... and the error stops the scan of the array even if a later element would match.
  EXPECT_FALSE(matches(or_nor, R"({"a": [{"b": 3}, {"b": 2}]})"));
  // At the top level $nor is normalized away and works.
  EXPECT_TRUE(matches(R"({"$nor": [{"a": 1}, {"b": 1}]})", R"({"a": 2, "b": 2})"));
  EXPECT_FALSE(matches(R"({"$nor": [{"a": 1}, {"b": 1}]})", R"({"a": 2, "b": 1})"));
}

// ---- Combinations -----------------------------------------------------------------------------

TEST(SelectorMatch, CouchAndVectors) {
  const std::string empty_and = R"({"x": {"$and": []}})";
  for (const char* doc : {R"({"x": 0})", R"({"x": false})", R"({"x": []})", "{}"}) {
    EXPECT_TRUE(matches(empty_and, doc)) << doc;
    // {"$not": {"$and": []}} becomes {"$or": []}, which matches anything too.
    EXPECT_TRUE(matches(R"({"x": {"$not": {"$and": []}}})", doc)) << doc;
  }
  const std::string multi = R"({"x": {"$and": [{"$gt": 3}, {"$lt": 7}]}})";
  EXPECT_TRUE(matches(multi, R"({"x": 6})"));
  EXPECT_FALSE(matches(multi, R"({"x": 2})"));
  EXPECT_FALSE(matches(multi, R"({"x": 9})"));
  EXPECT_FALSE(matches(multi, "{}"));
  const std::string not_multi = R"({"x": {"$not": {"$and": [{"$gt": 3}, {"$lt": 7}]}}})";
  EXPECT_FALSE(matches(not_multi, R"({"x": 6})"));
  EXPECT_TRUE(matches(not_multi, R"({"x": 2})"));
  EXPECT_TRUE(matches(not_multi, R"({"x": 9})"));
  EXPECT_FALSE(matches(not_multi, "{}"));
}

TEST(SelectorMatch, CouchOrVectors) {
  for (const char* doc : {R"({"x": 0})", R"({"x": []})", "{}"}) {
    EXPECT_TRUE(matches(R"({"x": {"$or": []}})", doc)) << doc;
    EXPECT_TRUE(matches(R"({"x": {"$not": {"$or": []}}})", doc)) << doc;
  }
  const std::string multi = R"({"x": {"$or": [{"$lt": 3}, {"$gt": 7}]}})";
  EXPECT_FALSE(matches(multi, R"({"x": 6})"));
  EXPECT_TRUE(matches(multi, R"({"x": 2})"));
  EXPECT_TRUE(matches(multi, R"({"x": 9})"));
  EXPECT_FALSE(matches(multi, "{}"));
  const std::string not_multi = R"({"x": {"$not": {"$or": [{"$lt": 3}, {"$gt": 7}]}}})";
  EXPECT_TRUE(matches(not_multi, R"({"x": 6})"));
  EXPECT_FALSE(matches(not_multi, R"({"x": 2})"));
  EXPECT_FALSE(matches(not_multi, "{}"));
}

TEST(SelectorMatch, CouchNorVectors) {
  for (const char* doc : {R"({"x": 0})", R"({"x": []})", "{}"}) {
    EXPECT_TRUE(matches(R"({"x": {"$nor": []}})", doc)) << doc;
  }
  const std::string multi = R"({"x": {"$nor": [{"$lt": 3}, {"$gt": 7}]}})";
  EXPECT_TRUE(matches(multi, R"({"x": 6})"));
  EXPECT_FALSE(matches(multi, R"({"x": 2})"));
  EXPECT_FALSE(matches(multi, R"({"x": 9})"));
  EXPECT_FALSE(matches(multi, "{}"));
}

TEST(SelectorMatch, TopLevelEmptyCombinators) {
  EXPECT_TRUE(matches(R"({"$and": []})", R"({"a": 1})"));
  EXPECT_TRUE(matches(R"({"$or": []})", R"({"a": 1})"));
  EXPECT_TRUE(matches(R"({"$nor": []})", R"({"a": 1})"));
  EXPECT_TRUE(parse_ok(R"({"$and": []})").matches(Json(5)));
}

TEST(SelectorMatch, OrInsideAndAndImplicitAnd) {
  const std::string sel = R"({"type": "post", "$or": [{"n": 1}, {"n": {"$gt": 10}}]})";
  EXPECT_TRUE(matches(sel, R"({"type": "post", "n": 1})"));
  EXPECT_TRUE(matches(sel, R"({"type": "post", "n": 11})"));
  EXPECT_FALSE(matches(sel, R"({"type": "post", "n": 5})"));
  EXPECT_FALSE(matches(sel, R"({"type": "page", "n": 1})"));
  const std::string range = R"({"x": {"$gt": 1, "$lt": 5}})";
  EXPECT_TRUE(matches(range, R"({"x": 3})"));
  EXPECT_FALSE(matches(range, R"({"x": 5})"));
  // An operator and a sub-field under one field: both apply to it.
  const std::string mixed = R"({"x": {"$exists": true, "y": 2}})";
  EXPECT_TRUE(matches(mixed, R"({"x": {"y": 2}})"));
  EXPECT_FALSE(matches(mixed, R"({"x": {"y": 3}})"));
}

TEST(SelectorMatch, NotOfInIsNinAndNeedsTheField) {
  const std::string sel = R"({"x": {"$not": {"$in": [1, 2]}}})";
  EXPECT_TRUE(matches(sel, R"({"x": 3})"));
  EXPECT_FALSE(matches(sel, R"({"x": 1})"));
  EXPECT_FALSE(matches(sel, "{}"));
  EXPECT_TRUE(matches(sel, R"({"x": [3, 4]})"));
  EXPECT_FALSE(matches(sel, R"({"x": [1, 5]})"));
}

TEST(SelectorMatch, DoubleNegationCancels) {
  EXPECT_TRUE(matches(R"({"$not": {"$not": {"x": 1}}})", R"({"x": 1})"));
  EXPECT_FALSE(matches(R"({"$not": {"$not": {"x": 1}}})", R"({"x": 2})"));
  EXPECT_TRUE(matches(R"({"x": {"$not": {"$not": {"$gt": 1}}}})", R"({"x": 2})"));
  EXPECT_TRUE(matches(R"({"$not": {"$nor": [{"x": 1}, {"y": 1}]}})", R"({"y": 1})"));
  EXPECT_FALSE(matches(R"({"$not": {"$nor": [{"x": 1}, {"y": 1}]}})", R"({"y": 2})"));
}

TEST(SelectorMatch, NegatedTerminalsWithoutAnOppositeKeepNot) {
  check_condition(R"({"$size": 1})", {{true, "[1]"}, {false, "[]"}, {false, R"("a")"}});
  check_condition(R"({"$type": "string"})", {{true, R"("a")"}, {false, "1"}});
  check_condition(R"({"$regex": "a"})", {{true, R"("cat")"}, {false, R"("dog")"}, {false, "1"}});
  check_condition(R"({"$mod": [2, 1]})", {{true, "3"}, {false, "4"}, {false, "3.0"}});
  EXPECT_FALSE(matches(R"({"x": {"$not": {"$size": 1}}})", "{}"));
}

// ---- Bounded work ------------------------------------------------------------------------------

TEST(SelectorMatch, DeepDocumentsAreNotRecursedInto) {
  // Built by moves only: nlohmann's copy constructor itself recurses.
  Json deep = 1;
  for (int i = 0; i < 100'000; ++i) {
    Json outer = Json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  Json doc = Json::object();
  doc["a"] = std::move(deep);
  EXPECT_TRUE(parse_ok(R"({"a": {"$gt": [[0]]}})").matches(doc));
  EXPECT_FALSE(parse_ok(R"({"a": {"$eq": [[[1]]]}})").matches(doc));
  EXPECT_TRUE(parse_ok(R"({"a": {"$type": "array"}})").matches(doc));
  EXPECT_FALSE(parse_ok(R"({"a": {"$all": [[1]]}})").matches(doc));
}

// ---- $regex engine ----------------------------------------------------------------------------

struct RegexCase {
  const char* pattern;
  std::string subject;
  bool expected;
};

TEST(SelectorRegex, FollowsPcreSemantics) {
  const std::vector<RegexCase> cases = {
      {"abc", "xabcx", true},
      {"^abc", "xabc", false},
      {"", "anything", true},
      {"^$", "", true},
      {"^$", "a", false},
      // $ also matches before a final newline; \z does not; \Z does.
      {"abc$", "abc\n", true},
      {"abc\\z", "abc\n", false},
      {"abc\\Z", "abc\n", true},
      {"abc$", "abc\n\n", false},
      {"\\Aa", "ba", false},
      {"\\Ga", "ba", false},
      {"\\Ga", "ab", true},
      // multiline
      {"^b", "a\nb", false},
      {"(?m)^b", "a\nb", true},
      {"(?m)a$", "a\nb", true},
      {"a$", "a\nb", false},
      {"(?m)^$", "a\n", false},  // no line starts after a final newline
      {"(?m)^$", "a\n\nb", true},
      {"^$", "\n", true},
      {"(?m)^$", "\n", true},
      {"(?m)^$", "\n\n", true},
      {"(?m)^\\s*$", "a\n", false},
      {"(?m)^\\s*$", "a\n \n", true},
      {"(?m)^\\s*$", "a\n\nb", true},
      {"(?m)^\\z", "a\n", false},
      {"(?m)^a*", "x\n", true},
      {"(?m)^[\\x80-\\xff]*$", "\xC3\xA9\n", true},
      {"(?m)^[\\x80-\\xff]*$", "a\n", false},
      {"(?m)^(?:a|\\n)*x", "a\n\nx", true},
      {"(?m)a$\\n", "a\n", true},
      {"(?m)a$\\nb", "a\nb\n", true},
      {"a\\n\\z", "a\n", true},
      {"\\n\\Z", "a\n", true},
      {"a\\Z", "a\n", true},
      {"a\\z|b$", "a\nb\n", true},
      {"a\\z|b$", "a\nc\n", false},
      // bytes from 0x80 up, in alternatives (RE2 2022-06 mis-factors them in Latin-1 mode)
      {"\\xe9a|\\xe9b",
       "x\xE9"
       "b",
       true},
      {"\xE9|\xE9", "\xE9", true},
      // \B between the two bytes of "é" (RE2 must not search from inside a UTF-8 rune)
      {"\\B",
       "a\xE9"
       "b",
       false},
      {"\\B", "\xE9\xE9", true},
      // . excludes only \n unless (?s)
      {"a.c", "a\nc", false},
      {"(?s)a.c", "a\nc", true},
      {"a.c", "a\rc", true},
      // bytes, not characters: "é" is two bytes
      {"^.$", "\xC3\xA9", false},
      {"^..$", "\xC3\xA9", true},
      {"^\\W+$", "\xC3\xA9", true},
      // case-insensitivity and its scope
      {"(?i)hello", "HeLLo", true},
      {"hello", "HeLLo", false},
      {"(?i:h)ello", "Hello", true},
      {"(?i:h)ello", "HELLO", false},
      {"a(?i)b|c", "C", true},
      {"(a(?i)b)c", "aBC", false},
      {"(a(?i)b)c", "aBc", true},
      {"(?i)a(?-i:b)", "Ab", true},
      {"(?i)a(?-i:b)", "AB", false},
      {"(?i)(?-i)a", "A", false},
      {"(?i)[^a]", "A", false},
      {"(?i)[a-c]", "B", true},
      {"(?i)\\x41", "a", true},
      {"(?i)\xC3\xA9", "\xC3\x89", false},  // ASCII-only folding
      // classes
      {"[a-c]+$", "xxabc", true},
      {"^[^a-c]+$", "def", true},
      {"^[^a-c]+$", "dbf", false},
      {"[]a]", "]", true},
      {"[^]a]", "]", false},
      {"[a-]", "-", true},
      {"[\\d-z]", "-", true},
      {"[[:alpha:]]+[[:digit:]]", "abc1", true},
      {"^[[:^digit:]]+$", "abc", true},
      {"^[[:^digit:]]+$", "ab1", false},
      {"[[:punct:]]", "!", true},
      {"[\\x41-\\x43]{3}", "ABC", true},
      {"[\\b]", "\b", true},
      {"[.]", "a", false},
      {"[\\]]", "]", true},
      // escapes
      {"a\\.b", "a.b", true},
      {"a\\.b", "axb", false},
      {"\\x41", "A", true},
      {"\\x{41}", "A", true},
      {"\\t\\n", "\t\n", true},
      {"\\e", "\x1B", true},
      {"\\cA", "\x01", true},
      {"\\010", "\b", true},
      {"\\o{101}", "A", true},
      {"\\s+x", " \tx", true},
      {"^\\S+$", "a b", false},
      {"^\\w+$", "a_1", true},
      {"^\\h$", "\t", true},
      {"^\\v$", "\n", true},
      {"^\\D$", "5", false},
      {"\\Qa.b\\E", "a.b", true},
      {"\\Qa.b\\E", "axb", false},
      {"^\\Qab\\E+$", "abbb", true},
      {"\\bfoo\\b", "a foo b", true},
      {"\\bfoo\\b", "afoob", false},
      {"\\Bfoo", "afoo", true},
      {"\\$\\^", "$^", true},
      // quantifiers
      {"^\\d{3}-\\d{4}$", "555-1234", true},
      {"^\\d{3}-\\d{4}$", "555-12345", false},
      {"^a{2,3}$", "aaa", true},
      {"^a{2,3}$", "aaaa", false},
      {"^a{2,}$", "aaaaa", true},
      {"^a{2,}$", "a", false},
      {"^a{0}$", "", true},
      {"^a?b+c*$", "bbb", true},
      {"a*?b", "aaab", true},
      {"^a+?$", "aaa", true},
      {"x{", "x{", true},
      {"x{,2}", "x{,2}", true},
      {"x{a}", "x{a}", true},
      // groups and alternation
      {"^(cat|dog)s?$", "dogs", true},
      {"^(cat|dog)s?$", "cow", false},
      {"^(?:a|b)*c$", "ababc", true},
      {"^(a*)*$", "aaa", true},
      {"^(a|)+$", "", true},
      {"^(|a)b", "b", true},
      {"(?<year>\\d{4})-", "2024-", true},
      {"(?P<y>a)(?'z'b)", "ab", true},
      {"(?|a|b)", "b", true},
      {"(?U)a+", "a", true},
      // comments and extended mode
      {"a(?#comment)b", "ab", true},
      {"(?x) a b # comment\n c", "abc", true},
      {"(?x)a\\ b", "a b", true},
      {"(?x)[ ]", " ", true},
      {"(?x:a b)c d", "abc d", true},
  };
  for (const RegexCase& c : cases) {
    EXPECT_EQ(regex_matches(c.pattern, c.subject), c.expected)
        << "/" << c.pattern << "/ on \"" << c.subject << "\"";
  }
}

TEST(SelectorRegex, InvalidPatternsGetCouchReason) {
  for (const char* pattern :
       {"(",       ")",        "a)",  "[a",   "*a",       "a|*",   "+",    "?",     "{2}",
        "a{3,2}",  "a{70000}", "\\",  "(?<n", "(?<1a>x)", "(?z)",  "(?i",  "[z-a]", "[[:foo:]]",
        "[a-\\d]", "\\x{100}", "\\c", "(?P",  "\\L",      "[\\B]", "a(?#x"}) {
    std::string expected = "Bad argument for operator $regex: ";
    expected += "<<";
    for (std::size_t i = 0; pattern[i] != '\0'; ++i) {
      if (i > 0) expected += ",";
      expected += std::to_string(static_cast<unsigned char>(pattern[i]));
    }
    expected += ">>";
    EXPECT_EQ(regex_reason(pattern), expected) << pattern;
  }
}

TEST(SelectorRegex, UnsupportedPcreFeaturesAreRefusedWithTheReason) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"(a)\\1", "backreferences"},
      {"(?<n>a)\\k<n>", "backreferences"},
      {"(?=a)", "lookahead assertions"},
      {"(?!a)", "lookahead assertions"},
      {"(?<=a)b", "lookbehind assertions"},
      {"(?<!a)b", "lookbehind assertions"},
      {"(?>a)", "atomic groups"},
      {"a++", "possessive quantifiers"},
      {"a*+", "possessive quantifiers"},
      {"(?(1)a|b)", "conditional groups"},
      {"(?R)", "recursion"},
      {"(*FAIL)", "backtracking control verbs"},
      {"\\p{L}", "\\p and \\P (Unicode properties)"},
      {"\\R", "\\R"},
      {"\\y", "unknown escapes such as \\y"},
      {"[\\y]", "unknown escapes such as \\y"},
      {"^*", "a quantifier on an assertion"},
      {"a**", "a quantifier following a quantifier"},
      {"a{20000}", "patterns over 20000 instructions (large counted repetitions)"},
      {"(a{1000}){1000}", "patterns over 20000 instructions (large counted repetitions)"},
      {"a$\\n", "$ or \\Z followed by pattern that can match a newline"},
      {"a\\Z\\s", "$ or \\Z followed by pattern that can match a newline"},
      {"(?m)^(a$\\n)?",
       "(?m)^ that can end a match together with $ followed by pattern that can match a "
       "newline"},
  };
  for (const auto& [pattern, feature] : cases) {
    const std::string reason = regex_reason(pattern);
    EXPECT_NE(reason.find("Bad argument for operator $regex: <<"), std::string::npos) << pattern;
    EXPECT_NE(reason.find(std::string(" (not supported by Chaise: ") + feature + ")"),
              std::string::npos)
        << pattern << ": " << reason;
  }
  // The limit counts every instruction: \A, 19,998 bytes and the final match.
  EXPECT_TRUE(regex_matches("\\Aa{19998}", std::string(19998, 'a')));
  EXPECT_NE(regex_reason("\\Aa{19998}$"), "");
}

TEST(SelectorRegex, NestingIsBounded) {
  const std::string ok =
      std::string(kRegexNestingMax, '(') + "a" + std::string(kRegexNestingMax, ')');
  EXPECT_TRUE(regex_matches(ok, "a"));
  const std::string deep =
      std::string(kRegexNestingMax + 1, '(') + "a" + std::string(kRegexNestingMax + 1, ')');
  EXPECT_NE(regex_reason(deep), "");
}

TEST(SelectorRegex, PathologicalPatternsRunInLinearTime) {
  const auto start = std::chrono::steady_clock::now();
  const std::string as(100'000, 'a');
  EXPECT_FALSE(regex_matches("(a+)+b", as));
  EXPECT_FALSE(regex_matches("^(a|aa)*$", as + "b"));
  EXPECT_TRUE(regex_matches("(a+)+b", as + "b"));
  std::string abab;
  for (int i = 0; i < 100'000; ++i) abab += "ab";
  EXPECT_FALSE(regex_matches("(a|b)*c", abab));
  EXPECT_TRUE(regex_matches("^(a|b)*c$", abab + "c"));
  EXPECT_TRUE(regex_matches("c", std::string(5'000'000, 'a') + "c"));
  EXPECT_FALSE(regex_matches(".*x", std::string(1'000'000, 'a')));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(SelectorRegex, GivesUpAsNoMatchOnlyPastTheCostBound) {
  // PCRE's match_limit makes CouchDB answer nomatch to these two; RE2 answers them right.
  EXPECT_TRUE(regex_matches("a{0,1000}b", std::string(20'000, 'a') + "b"));
  std::string abab;
  for (int i = 0; i < 1'000'000; ++i) abab += "ab";
  EXPECT_TRUE(regex_matches("^(a|b)*c$", abab + "c"));
  // Subject bytes x RE2 instructions over kRegexCostMax: no match, without running.
  const std::string as(kRegexCostMax / 1000, 'a');
  EXPECT_TRUE(regex_matches("a{0,10}b", as + "b"));
  EXPECT_FALSE(regex_matches("a{0,1000}b", as + "b"));
}

TEST(SelectorRegex, PatternsThatDefeatTheDfaStayBounded) {
  // [ab]*a[ab]{20} needs 2^20 DFA states: RE2 falls back to its NFA, and the cost bound keeps
  // that to a fraction of a second per value (27 instructions x 1.5 MB is within the bound).
  std::string subject;
  std::uint32_t x = 1;
  for (int i = 0; i < 1'500'000; ++i) {
    x = x * 1103515245 + 12345;
    subject += (x >> 16) & 1 ? 'a' : 'b';
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(regex_matches("[ab]*a[ab]{20}c", subject));
  EXPECT_TRUE(regex_matches("[ab]*a[ab]{20}c", subject + "a" + std::string(20, 'b') + "c"));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(10));
  std::cerr << "[ab]*a[ab]{20}c over 1.5 MB, twice: "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
}

// Found by fuzz_selector's 10M-execution run: the translation to RE2 spelled X+ as X X*, and each
// nesting level copied the text of the one below, so nested repetitions doubled the pattern at
// every level: 28 levels of (...)+ allocated gigabytes. X+ is now RE2's own +, and every copy of
// a counted repetition counts against one budget for the whole pattern.
TEST(SelectorRegex, NestedRepetitionsStayWithinBoundedMemory) {
  std::string plus = "a";
  for (int level = 0; level < 28; ++level) plus = "(" + plus + ")+";
  std::string counted = "a";
  for (int level = 0; level < 28; ++level) counted = "(" + counted + "){2}";
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  EXPECT_TRUE(regex_matches(plus, "xaay"));
  EXPECT_FALSE(regex_matches(plus, "xy"));
  const std::string reason = regex_reason(counted);  // 2^28 a's: refused, not built
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  EXPECT_NE(reason.find("large counted repetitions"), std::string::npos) << reason;
  // ru_maxrss is in KiB: the peak grew by less than 64 MiB (it was gigabytes).
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024);
}

}  // namespace
}  // namespace chaise::core
