// CouchDB's view collation as bytes (core/query/collation.h): the order couch_ejson_compare gives.
#include "core/query/collation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace chaise::core {
namespace {

using Json = nlohmann::ordered_json;

// CouchDB's documented collation sequence (docs: "Views Collation"), in order.
const char* kOrdered[] = {"null",
                          "false",
                          "true",
                          "-1e300",
                          "-2",
                          "-1.5",
                          "0",
                          "1",
                          "2",
                          "3.0",
                          "4",
                          "1e300",
                          R"("")",
                          R"(" ")",
                          R"("0")",
                          R"("9")",
                          R"("a")",
                          R"("A")",
                          R"("aa")",
                          R"("b")",
                          R"("B")",
                          R"("ba")",
                          R"("bb")",
                          R"("é")",
                          R"("f")",
                          R"("ř")",
                          R"("ü")",
                          R"("z")",
                          R"("日本")",
                          R"(["a"])",
                          R"(["b"])",
                          R"(["b","c"])",
                          R"(["b","c","a"])",
                          R"(["b","d"])",
                          R"(["b","d","e"])",
                          "[[]]",
                          R"([{}])",
                          R"({})",
                          R"({"a":1})",
                          R"({"a":2})",
                          R"({"b":1})",
                          R"({"b":2})",
                          R"({"b":2,"a":1})",
                          R"({"b":2,"c":2})"};

TEST(CollationTest, CouchDbOrder) {
  std::vector<std::string> keys;
  for (const char* k : kOrdered) keys.push_back(collation_key(Json::parse(k)));
  for (std::size_t i = 0; i + 1 < keys.size(); ++i)
    EXPECT_LT(collate(keys[i], keys[i + 1]), 0) << kOrdered[i] << " < " << kOrdered[i + 1];
  // Shuffled and sorted by bytes, the sequence comes back.
  std::vector<std::size_t> idx(keys.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::shuffle(idx.begin(), idx.end(), std::mt19937(7));
  std::sort(idx.begin(), idx.end(),
            [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
  for (std::size_t i = 0; i < idx.size(); ++i) EXPECT_EQ(idx[i], i);
}

TEST(CollationTest, EqualValuesEqualBytes) {
  EXPECT_EQ(collation_key(Json::parse("1")), collation_key(Json::parse("1.0")));
  EXPECT_EQ(collation_key(Json::parse("0")), collation_key(Json::parse("-0.0")));
  // Canonically equivalent strings (precomposed vs combining accent) collate equal.
  EXPECT_EQ(collation_key(Json("\xC3\xA9")), collation_key(Json("e\xCC\x81")));
  EXPECT_NE(collation_key(Json("a")), collation_key(Json("A")));
}

TEST(CollationTest, GroupKeys) {
  Json k = Json::parse(R"(["a","b","c"])");
  EXPECT_EQ(group_key(k, 2), Json::parse(R"(["a","b"])"));
  EXPECT_EQ(group_key(k, 5), k);
  EXPECT_EQ(group_key(Json("s"), 1), Json("s"));
  // A group key is a prefix in collation order too: everything in the group sorts after it.
  EXPECT_LT(collate(collation_key(group_key(k, 2)), collation_key(k)), 0);
}

}  // namespace
}  // namespace chaise::core
