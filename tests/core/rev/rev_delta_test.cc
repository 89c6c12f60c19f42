// Deltas of revision bodies (core/rev/rev_delta.h): every delta given back rebuilds its target's exact
// bytes, and the ones that cannot are refused rather than approximated.
#include "core/rev/rev_delta.h"

#include <gtest/gtest.h>

#include <random>
#include <variant>

#include "core/util/json_text.h"

namespace chaise::core {
namespace {

using Json = nlohmann::ordered_json;

std::string rebuild(std::string_view base, std::string_view delta) {
  auto b = parse_json_text(base, JsonNumbers::exact);
  auto d = parse_json_text(delta, JsonNumbers::exact);
  EXPECT_TRUE(std::holds_alternative<Json>(b) && std::holds_alternative<Json>(d));
  Json doc = std::get<Json>(b);
  EXPECT_TRUE(apply_body_delta(doc, std::get<Json>(d))) << delta;
  return dump_json(doc);
}

std::string padding() { return std::string(200, 'x'); }

TEST(RevDelta, OneChangedFieldCostsAboutThatField) {
  const std::string base = R"({"a":1,"big":")" + padding() + R"(","n":{"c":[1,2,3],"d":"e"}})";
  const std::string target = R"({"a":2,"big":")" + padding() + R"(","n":{"c":[1,2,3],"d":"e"}})";
  auto delta = make_body_delta(base, target);
  ASSERT_TRUE(delta);
  EXPECT_EQ(*delta, R"({"u":{"a":2}})");
  EXPECT_EQ(rebuild(base, *delta), target);
}

TEST(RevDelta, NestedRemovalsAdditionsAndArraysInPlace) {
  const std::string base =
      R"({"big":")" + padding() + R"(","n":{"c":[1,{"x":1},3],"d":"e","gone":true},"arr":[1,2]})";
  const std::string target =
      R"({"big":")" + padding() + R"(","n":{"c":[1,{"x":2},3],"d":"e","new":null},"arr":[1,2,3]})";
  auto delta = make_body_delta(base, target);
  ASSERT_TRUE(delta);
  EXPECT_EQ(
      *delta,
      R"({"p":{"n":{"r":{"gone":true},"p":{"c":{"p":{"1":{"u":{"x":2}}}}},"u":{"new":null}}},)"
      R"("u":{"arr":[1,2,3]}})");
  EXPECT_EQ(rebuild(base, *delta), target);
}

TEST(RevDelta, WhatCannotBeRebuiltExactlyIsRefused) {
  const std::string big = padding();
  // Members reordered, or one removed from the middle: "o" keeps the order exact.
  const std::string reordered = R"({"b":2,"a":1,"c":")" + big + R"("})";
  auto d0 = make_body_delta(R"({"a":1,"b":2,"c":")" + big + R"("})", reordered);
  ASSERT_TRUE(d0);
  EXPECT_EQ(*d0, R"({"o":["b","a","c"]})");
  EXPECT_EQ(rebuild(R"({"a":1,"b":2,"c":")" + big + R"("})", *d0), reordered);
  const std::string middle = R"({"a":1,"m":[1],"c":")" + big + R"("})";
  auto d3 = make_body_delta(R"({"a":1,"c":")" + big + R"("})", middle);
  ASSERT_TRUE(d3);
  EXPECT_EQ(rebuild(R"({"a":1,"c":")" + big + R"("})", *d3), middle);
  // 1 and 1.0 compare equal but print differently; so do big integers kept as text.
  const std::string t1 = R"({"v":1.0,"c":")" + big + R"("})";
  auto d1 = make_body_delta(R"({"v":1,"c":")" + big + R"("})", t1);
  ASSERT_TRUE(d1);
  EXPECT_EQ(rebuild(R"({"v":1,"c":")" + big + R"("})", *d1), t1);
  const std::string t2 = R"({"v":123456789012345678901234567890,"c":")" + big + R"("})";
  auto d2 = make_body_delta(R"({"v":123456789012345678901234567891,"c":")" + big + R"("})", t2);
  ASSERT_TRUE(d2);
  EXPECT_EQ(rebuild(R"({"v":123456789012345678901234567891,"c":")" + big + R"("})", *d2), t2);
  // Not worth it: most of the body changed, or the body is tiny.
  EXPECT_FALSE(make_body_delta(R"({"c":")" + big + R"("})", R"({"c":")" + big + "y" + R"("})"));
  EXPECT_FALSE(make_body_delta(R"({"a":1})", R"({"a":2})"));
  // Not JSON objects.
  EXPECT_FALSE(make_body_delta("[1]", R"({"c":")" + big + R"("})"));
}

TEST(RevDelta, MalformedDeltasAreRejected) {
  Json doc = Json::parse(R"({"a":[1,2],"o":{}})");
  for (const char* bad : {R"([])", R"({"x":{}})", R"({"u":1})", R"({"r":{"missing":true}})",
                          R"({"p":{"a":{"u":{"2":0}}}})", R"({"p":{"a":{"u":{"-1":0}}}})",
                          R"({"p":{"a":{"r":{"0":true}}}})", R"({"p":{"missing":{}}})",
                          R"({"p":{"o":{"p":{"x":{}}}}})", R"({"o":["a"]})", R"({"o":["a","a"]})",
                          R"({"o":["a","x"]})", R"({"o":"a"})", R"({"p":{"a":{"o":["0","1"]}}})"}) {
    Json copy = doc;
    EXPECT_FALSE(apply_body_delta(copy, Json::parse(bad))) << bad;
  }
}

// Random documents and random edits of them: whatever delta comes back rebuilds the target.
Json random_value(std::mt19937& rng, int depth) {
  switch (rng() % (depth > 3 ? 4 : 6)) {
    case 0:
      return static_cast<int>(rng() % 5);
    case 1:
      return std::string(rng() % 3, 'k');
    case 2:
      return rng() % 2 == 0;
    case 3:
      return nullptr;
    case 4: {
      Json a = Json::array();
      for (unsigned i = rng() % 4; i > 0; --i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      Json o = Json::object();
      for (unsigned i = rng() % 5; i > 0; --i)
        o[std::string(1, static_cast<char>('a' + rng() % 6))] = random_value(rng, depth + 1);
      return o;
    }
  }
}

void mutate(Json& j, std::mt19937& rng, int depth) {
  if (j.is_object() && !j.empty() && rng() % 3 != 0) {
    auto it = j.begin();
    std::advance(it, rng() % j.size());
    if (rng() % 4 == 0) {
      j.erase(it.key());
    } else {
      mutate(it.value(), rng, depth + 1);
    }
  } else if (j.is_array() && !j.empty() && rng() % 3 != 0) {
    if (rng() % 4 == 0) {
      j.push_back(random_value(rng, depth + 1));
    } else {
      mutate(j[rng() % j.size()], rng, depth + 1);
    }
  } else if (j.is_object()) {
    j[std::string(1, static_cast<char>('a' + rng() % 8))] = random_value(rng, depth + 1);
  } else {
    j = random_value(rng, depth + 1);
  }
}

TEST(RevDelta, RandomEditsRebuildExactly) {
  std::mt19937 rng(20261125);
  int made = 0;
  for (int i = 0; i < 20000; ++i) {
    Json base = Json::object();
    base["pad"] = padding();
    for (int m = 0; m < 4; ++m)
      base[std::string(1, static_cast<char>('a' + m))] = random_value(rng, 0);
    Json target = base;
    for (unsigned e = 1 + rng() % 3; e > 0; --e) mutate(target, rng, 0);
    if (!target.is_object()) continue;
    const std::string b = dump_json(base), t = dump_json(target);
    auto delta = make_body_delta(b, t);
    if (!delta) continue;
    ++made;
    ASSERT_EQ(rebuild(b, *delta), t) << b << "\n" << t << "\n" << *delta;
  }
  EXPECT_GT(made, 10000);
}

// A body whose objects are huge would cost n*n to diff: it is kept whole, quickly.
TEST(RevDelta, HugeObjectsAreKeptWholeWithinABound) {
  Json base = Json::object();
  for (int i = 0; i < 20000; ++i) base["k" + std::to_string(i)] = i;
  Json target = base;
  target["k5"] = -1;
  EXPECT_FALSE(make_body_delta(dump_json(base), dump_json(target)));
}

}  // namespace
}  // namespace chaise::core
