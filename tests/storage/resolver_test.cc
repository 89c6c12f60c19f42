// The resolver's window: keys rewritten by later versions, keys written twice in one version, and
// the byte bound that shortens the window under heavy writes.
#include "storage/rocksdb/resolver.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace chaise::storage {
namespace {

KeyRange point(const std::string& k) { return {k, key_after(k)}; }
std::vector<KeyRange> points(const std::vector<std::string>& keys) {
  std::vector<KeyRange> out;
  for (const auto& k : keys) out.push_back(point(k));
  return out;
}
constexpr std::int64_t kLifetime = 1'000'000;

TEST(ResolverTest, RewrittenKeyStaysUntilItsNewestVersionIsForgotten) {
  Resolver r(1u << 20);
  r.begin_version(1, 0);
  // More than twice version 2's keys: their runs stay apart (not merged), so they are
  // forgotten one at a time.
  r.add_writes(points({"k", "only-v1", "x", "y", "z"}));
  r.begin_version(2, 500'000);
  r.add_writes(points({"k"}));
  r.begin_version(3, 2'000'000);
  r.add_writes(points({"other"}));
  // Versions 1 and 2 written at 0 and 0.5 s; at 1.2 s only version 1 is past the lifetime.
  r.expire(1'200'000, kLifetime);
  EXPECT_TRUE(r.too_old(0));
  EXPECT_FALSE(r.too_old(1));
  EXPECT_TRUE(r.conflicts(1, points({"k"})));  // version 2's write of k is remembered
  EXPECT_FALSE(r.conflicts(1, points({"only-v1"})));
  EXPECT_EQ(r.remembered_keys(), 2u);  // k (version 2) and other
  r.expire(2'600'000, kLifetime);
  EXPECT_TRUE(r.too_old(1));
  EXPECT_FALSE(r.conflicts(2, points({"k"})));
  EXPECT_EQ(r.remembered_keys(), 1u);  // the newest version is always kept
}

TEST(ResolverTest, KeyWrittenByTwoTransactionsOfOneBatchIsForgottenOnce) {
  Resolver r(1u << 20);
  r.begin_version(1, 0);
  r.add_writes(points({"a", "b"}));
  r.add_writes(points({"b", "a", "c"}));  // a second transaction of the same batch
  const std::size_t bytes_one_version = r.remembered_bytes();
  r.begin_version(2, 2'000'000);
  r.add_writes(points({"z"}));
  r.expire(2'000'000, kLifetime);  // forgets version 1: each of a, b, c erased exactly once
  EXPECT_EQ(r.remembered_keys(), 1u);
  EXPECT_LT(r.remembered_bytes(), bytes_one_version);
  EXPECT_FALSE(r.conflicts(1, points({"a", "b", "c"})));
  EXPECT_TRUE(r.conflicts(1, points({"z"})));
}

TEST(ResolverTest, ByteBoundForgetsOldestVersionsEarly) {
  const std::size_t bound = 64 * 1024;
  Resolver r(bound);
  std::int64_t v = 0;
  for (; v < 200; ++v) {
    r.begin_version(v + 1, v);  // all within the lifetime
    std::vector<std::string> keys;
    for (int i = 0; i < 10; ++i)
      keys.push_back("doc/" + std::to_string(v) + "/key-long-enough-to-allocate/" +
                     std::to_string(i));
    r.add_writes(points(keys));
    r.add_writes({{"range/" + std::to_string(v) + "/a", "range/" + std::to_string(v) + "/z"}});
    r.expire(v, kLifetime);
  }
  EXPECT_LE(r.remembered_bytes(), bound + 4096);  // at most one version over, before expiry
  EXPECT_GT(r.remembered_bytes(), bound / 2);
  EXPECT_TRUE(r.too_old(1));   // the oldest versions are gone although young
  EXPECT_FALSE(r.too_old(v));  // the newest is there and checked
  EXPECT_TRUE(r.conflicts(
      v - 1, points({"doc/" + std::to_string(v - 1) + "/key-long-enough-to-allocate/3"})));
  EXPECT_TRUE(r.conflicts(
      v - 1, {{"range/" + std::to_string(v - 1) + "/m", "range/" + std::to_string(v - 1) + "/n"}}));
  // Everything but the newest version aged out: its keys alone are counted.
  r.expire(v + 10 * kLifetime, kLifetime);
  EXPECT_EQ(r.remembered_keys(), 11u);
  EXPECT_LT(r.remembered_bytes(), 4096u);
}

// The runs against a plain list of every write: for any read version the resolver can still
// check, a conflict is reported exactly when some write after it intersects a read. Random keys
// from a small alphabet (rewrites, shared prefixes), points and ranges, several transactions per
// batch with searches between them (each transaction's keys a run, unsorted when given), expiry by time and by bytes.
TEST(ResolverTest, RunsAnswerLikeAListOfEveryWrite) {
  struct Write {
    KeyRange range;
    std::int64_t version;
  };
  std::mt19937 rng(20261126);
  auto key = [&] {
    std::string k = "k";
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) k.push_back(static_cast<char>('a' + rng() % 6));
    return k;
  };
  auto range = [&]() -> KeyRange {
    if (rng() % 4 != 0) return point(key());
    std::string a = key(), b = key();
    if (b < a) std::swap(a, b);
    return {a, b + "z"};
  };
  for (std::size_t bound : {std::size_t{1} << 30, std::size_t{16} << 10}) {
    Resolver r(bound);
    std::vector<Write> all;
    std::int64_t version = 0, now = 0;
    int checked = 0;
    for (int batch = 0; batch < 3000; ++batch) {
      ++version;
      now += static_cast<std::int64_t>(rng() % 2000);
      r.expire(now, kLifetime);
      const int txns = 1 + static_cast<int>(rng() % 5);
      for (int t = 0; t < txns; ++t) {
        std::vector<KeyRange> reads;
        for (int i = static_cast<int>(rng() % 4); i >= 0; --i) reads.push_back(range());
        // Mostly recent read versions, some far behind (a few too old to check).
        const std::int64_t back = rng() % 4 == 0 ? rng() % 600 : rng() % 8;
        const std::int64_t rv = version - 1 - back;
        if (rv >= 0 && !r.too_old(rv)) {
          bool expected = false;
          for (const Write& w : all)
            for (const KeyRange& rd : reads)
              if (w.version > rv && w.range.begin < rd.end && rd.begin < w.range.end)
                expected = true;
          ASSERT_EQ(r.conflicts(rv, reads), expected) << "batch " << batch << " rv " << rv;
          ++checked;
        }
        if (t == 0) r.begin_version(version, now);
        std::vector<KeyRange> writes;
        for (int i = static_cast<int>(rng() % 6); i >= 0; --i) writes.push_back(range());
        r.add_writes(writes);
        for (const KeyRange& w : writes) all.push_back({w, version});
      }
      if (bound < (1u << 20)) {
        ASSERT_LE(r.remembered_bytes(), bound + 4096);
      }
    }
    EXPECT_GT(checked, 6000);
    if (bound < (1u << 20)) {
      EXPECT_TRUE(r.too_old(version - 600));  // the bound forgot early
    }
  }
}

}  // namespace
}  // namespace chaise::storage
