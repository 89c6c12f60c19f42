// Transaction semantics: read-your-writes, snapshot reads, conflicts (point and range), atomic ops,
// versionstamps, limits, transaction_too_old, watches, commit_unknown_result injection.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "storage/database.h"
#include "storage/fdb/fdb_database.h"
#include "storage/subspace.h"
#include "storage/tuple.h"
#include "tests/storage/model_reads.h"
#include "tests/storage/temp_dir.h"

namespace chaise::storage {
namespace {

std::int64_t decode_le64(const std::string& s) {
  std::uint64_t v = 0;
  for (std::size_t i = s.size(); i-- > 0;) v = (v << 8) | static_cast<std::uint8_t>(s[i]);
  return static_cast<std::int64_t>(v);
}

std::string le64(std::int64_t x) {
  std::string s(8, '\0');
  auto u = static_cast<std::uint64_t>(x);
  for (int i = 0; i < 8; ++i, u >>= 8) s[i] = static_cast<char>(u & 0xff);
  return s;
}

// A versionstamped key template: prefix + 10 placeholder bytes + suffix + 4-byte LE offset.
std::string vs_template(std::string_view prefix, std::string_view suffix = {}) {
  std::string k(prefix);
  std::uint32_t off = static_cast<std::uint32_t>(k.size());
  k.append(10, '\xff');
  k.append(suffix);
  for (int i = 0; i < 4; ++i) k.push_back(static_cast<char>((off >> (8 * i)) & 0xff));
  return k;
}

enum class EngineKind { rocksdb, foundationdb };

// The engines a test runs on. TransactionTest's tests describe FoundationDB's semantics and run on
// both; RocksTransactionTest's need the embedded engine (its injected clock, fault hook, stats or
// options); FdbHandlesTest's open several handles on one store, as several Chaise nodes do.
//
// On FoundationDB each test has a store of its own: a key prefix (FdbOptions::key_prefix) named
// after it, cleared before it runs. The cluster is the one CHAISE_FDB_CLUSTER_FILE names, through
// the libfdb_c.so CHAISE_FDB_LIBRARY names; without them the FoundationDB variants skip, loudly.
class TransactionTest : public ::testing::TestWithParam<EngineKind> {
 protected:
  void SetUp() override {
    if (fdb()) {
      const char* cluster = std::getenv("CHAISE_FDB_CLUSTER_FILE");
      const char* library = std::getenv("CHAISE_FDB_LIBRARY");
      if (!cluster || !*cluster || !library || !*library)
        GTEST_SKIP() << "\n*** SKIPPED: no FoundationDB. Set CHAISE_FDB_CLUSTER_FILE and "
                        "CHAISE_FDB_LIBRARY (see ../shared/fdb/README.md) to run this test on "
                        "FoundationDB. ***";
      fdb_options_.cluster_file = cluster;
      fdb_options_.library = library;
      const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
      fdb_options_.key_prefix =
          std::string("chaise-test/") + info->test_suite_name() + "/" + info->name() + "/";
      // The prefix starts empty: its keys from an earlier run (the instance id too) are cleared.
      auto cleaner = open_handle();
      ASSERT_TRUE(cleaner);
      auto tr = cleaner->create_transaction();
      tr.clear_range("", "\xff");
      ASSERT_TRUE(tr.commit().ok());
    }
    reopen();
  }
  bool fdb() const { return GetParam() == EngineKind::foundationdb; }
  // A new handle on the test's store (FoundationDB only: the embedded store has one per path).
  std::unique_ptr<Database> open_handle() {
    std::string why;
    auto r = open_foundationdb(fdb_options_, &why);
    EXPECT_TRUE(r.ok()) << error_name(r.error()) << ": " << why;
    return r.ok() ? std::move(*r) : nullptr;
  }
  void reopen() {
    db_.reset();
    if (fdb()) {
      db_ = open_handle();
      ASSERT_TRUE(db_);
      return;
    }
    Options o;
    o.fsync = false;  // semantics, not durability, are under test here
    o.clock = clock_;
    auto r = Database::open(dir_.path(), o);
    ASSERT_TRUE(r.ok()) << error_name(r.error());
    db_ = std::move(*r);
  }
  // Room the key prefix leaves a key under FoundationDB's key size limit.
  std::size_t key_size_max() const { return kKeySizeMax - fdb_options_.key_prefix.size(); }
  void put(std::string_view k, std::string_view v) {
    auto tr = db_->create_transaction();
    tr.set(k, v);
    ASSERT_TRUE(tr.commit().ok());
  }
  std::optional<std::string> read(std::string_view k) {
    auto tr = db_->create_transaction();
    auto v = tr.get(k);
    EXPECT_TRUE(v.ok());
    return v.ok() ? *v : std::nullopt;
  }
  std::vector<std::string> keys(const std::vector<KeyValue>& kvs) {
    std::vector<std::string> out;
    for (auto& kv : kvs) out.push_back(kv.key);
    return out;
  }

  TempDir dir_{"txn"};
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  FdbOptions fdb_options_;
  std::unique_ptr<Database> db_;
};

void PrintTo(EngineKind kind, std::ostream* os) {
  *os << (kind == EngineKind::rocksdb ? "rocksdb" : "foundationdb");
}

std::string engine_name(const ::testing::TestParamInfo<EngineKind>& info) {
  return info.param == EngineKind::rocksdb ? "rocksdb" : "foundationdb";
}

INSTANTIATE_TEST_SUITE_P(Engines, TransactionTest,
                         ::testing::Values(EngineKind::rocksdb, EngineKind::foundationdb),
                         engine_name);

class RocksTransactionTest : public TransactionTest {};
INSTANTIATE_TEST_SUITE_P(Embedded, RocksTransactionTest, ::testing::Values(EngineKind::rocksdb),
                         engine_name);

class FdbHandlesTest : public TransactionTest {};
INSTANTIATE_TEST_SUITE_P(FoundationDb, FdbHandlesTest, ::testing::Values(EngineKind::foundationdb),
                         engine_name);

TEST_P(TransactionTest, CommittedWritesAreVisibleAndDurableAcrossReopen) {
  put("a", "1");
  put("b", "2");
  EXPECT_EQ(read("a"), "1");
  EXPECT_EQ(read("missing"), std::nullopt);
  std::int64_t v = db_->committed_version();
  reopen();
  EXPECT_EQ(read("b"), "2");
  // FoundationDB's versions advance with time, commits or not.
  if (fdb()) {
    EXPECT_GE(db_->committed_version(), v);
  } else {
    EXPECT_EQ(db_->committed_version(), v);
  }
}

TEST_P(TransactionTest, EstimatedRangeSizeFollowsTheData) {
  // 2,000 values of 1 KiB under "big/", a few small keys around them.
  put("a", "1");
  for (int start = 0; start < 2000; start += 500) {
    auto tr = db_->create_transaction();
    for (int i = start; i < start + 500; ++i) {
      char key[32];
      std::snprintf(key, sizeof key, "big/%05d", i);
      tr.set(key, std::string(1024, static_cast<char>('a' + i % 26)));
    }
    ASSERT_TRUE(tr.commit().ok());
  }
  put("z", "1");
  const auto estimate = [&](std::string_view b, std::string_view e) {
    auto tr = db_->create_transaction();
    auto r = tr.get_estimated_range_size_bytes(b, e);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : -1;
  };
  const std::int64_t all = estimate("big/", "big0");
  EXPECT_GT(all, 1'000'000);  // about 2 MB, in memory or in files
  EXPECT_LT(all, 8'000'000);
  const std::int64_t half = estimate("big/", "big/01000");
  EXPECT_LT(half, all);
  EXPECT_LT(estimate("c", "d"), 100'000);  // nothing there
  EXPECT_EQ(estimate("x", "x"), 0);
  auto tr = db_->create_transaction();
  auto inverted = tr.get_estimated_range_size_bytes("b", "a");
  ASSERT_FALSE(inverted.ok());
  EXPECT_EQ(inverted.error(), Error::inverted_range);
}

TEST_P(TransactionTest, ReadYourWritesPointReads) {
  put("k1", "old");
  put("k2", "old");
  auto tr = db_->create_transaction();
  tr.set("k1", "new");
  tr.clear("k2");
  tr.set("k3", "fresh");
  EXPECT_EQ(*tr.get("k1"), "new");
  EXPECT_EQ(*tr.get("k2"), std::nullopt);
  EXPECT_EQ(*tr.get("k3"), "fresh");
  // Nothing is visible to others before commit.
  EXPECT_EQ(read("k1"), "old");
  EXPECT_EQ(read("k3"), std::nullopt);
  ASSERT_TRUE(tr.commit().ok());
  EXPECT_EQ(read("k1"), "new");
  EXPECT_EQ(read("k2"), std::nullopt);
}

TEST_P(TransactionTest, ReadYourWritesRangeReadsOverPendingSetsAndClears) {
  for (char c = 'a'; c <= 'j'; ++c) put(std::string("r/") + c, "s");
  auto tr = db_->create_transaction();
  tr.clear_range("r/c", "r/f");  // clears c d e
  tr.set("r/d", "w");            // then d is rewritten
  tr.set("r/c0", "w");           // a key storage never had
  tr.clear("r/h");
  tr.add("r/i", le64(1));  // atomic on a stored value: shows base + 1

  auto all = tr.get_range("r/", "r0");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(keys(*all),
            (std::vector<std::string>{"r/a", "r/b", "r/c0", "r/d", "r/f", "r/g", "r/i", "r/j"}));
  EXPECT_EQ((*all)[3].value, "w");
  EXPECT_EQ((*all)[6].value.size(), 8u);  // "s" zero-extended to 8 bytes, plus 1
  EXPECT_EQ(decode_le64((*all)[6].value), 's' + 1);

  auto rev = tr.get_range("r/", "r0", 0, Reverse::yes);
  ASSERT_TRUE(rev.ok());
  auto expect_rev = keys(*all);
  std::reverse(expect_rev.begin(), expect_rev.end());
  EXPECT_EQ(keys(*rev), expect_rev);

  auto lim = tr.get_range("r/", "r0", 3);
  EXPECT_EQ(keys(*lim), (std::vector<std::string>{"r/a", "r/b", "r/c0"}));
  auto lim_rev = tr.get_range("r/", "r0", 3, Reverse::yes);
  EXPECT_EQ(keys(*lim_rev), (std::vector<std::string>{"r/j", "r/i", "r/g"}));
  auto inner = tr.get_range("r/c", "r/g");
  EXPECT_EQ(keys(*inner), (std::vector<std::string>{"r/c0", "r/d", "r/f"}));

  ASSERT_TRUE(tr.commit().ok());
  auto tr2 = db_->create_transaction();
  EXPECT_EQ(keys(*tr2.get_range("r/", "r0")), keys(*all));
}

TEST_P(TransactionTest, RangeReadBoundsAndErrors) {
  put("x", "1");
  auto tr = db_->create_transaction();
  EXPECT_TRUE(tr.get_range("x", "x")->empty());
  EXPECT_EQ(tr.get_range("y", "x").error(), Error::inverted_range);
  EXPECT_EQ(tr.get_range("a", "z", -1).error(), Error::invalid_option_value);
}

TEST_P(TransactionTest, GetRangesEqualsGetRangePerRange) {
  // Keys a/00 .. a/99; the ranges leave gaps of every size (0, a few keys, many keys).
  for (int i = 0; i < 100; ++i) put("a/" + std::string(i < 10 ? "0" : "") + std::to_string(i), "v");
  const std::vector<KeyRange> ranges = {{"a/00", "a/03"}, {"a/03", "a/05"}, {"a/06", "a/08"},
                                        {"a/08", "a/08"}, {"a/2", "a/3"},   {"a/30", "a/31"},
                                        {"a/95", "a/b"},  {"b", "c"}};
  for (int limit : {0, 1, 3}) {
    auto tr = db_->create_transaction();
    auto many = tr.get_ranges(ranges, limit, Snapshot::yes);
    ASSERT_TRUE(many.ok());
    ASSERT_EQ(many->size(), ranges.size());
    for (std::size_t i = 0; i < ranges.size(); ++i)
      EXPECT_EQ((*many)[i], *tr.get_range(ranges[i].begin, ranges[i].end, limit)) << limit << i;
  }
  // With writes of its own, the overlay is read too.
  auto tr = db_->create_transaction();
  tr.clear_range("a/01", "a/02");
  tr.set("a/065", "w");
  auto many = tr.get_ranges(ranges);
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(keys((*many)[0]), (std::vector<std::string>{"a/00", "a/02"}));
  EXPECT_EQ(keys((*many)[2]), (std::vector<std::string>{"a/06", "a/065", "a/07"}));
  // Ranges out of order, overlapping or inverted are refused.
  EXPECT_EQ(tr.get_ranges({{"a/5", "a/6"}, {"a/1", "a/2"}}).error(), Error::invalid_option_value);
  EXPECT_EQ(tr.get_ranges({{"a/1", "a/3"}, {"a/2", "a/4"}}).error(), Error::invalid_option_value);
  EXPECT_EQ(tr.get_ranges({{"a/2", "a/1"}}).error(), Error::inverted_range);
  EXPECT_EQ(tr.get_ranges({{"a/1", "a/2"}}, -1).error(), Error::invalid_option_value);
}

TEST_P(TransactionTest, GetRangesConflictOnWhatTheyRead) {
  for (auto k : {"m/1", "m/2", "m/3", "n/1", "n/2"}) put(k, "v");
  auto t1 = db_->create_transaction();
  ASSERT_TRUE(t1.get_ranges({{"m/", "m0"}, {"n/", "n0"}}, 1).ok());  // saw m/1 and n/1
  put("n/3", "beyond what t1 saw");
  t1.set("q", "x");
  EXPECT_TRUE(t1.commit().ok());

  auto t2 = db_->create_transaction();
  ASSERT_TRUE(t2.get_ranges({{"m/", "m0"}, {"n/", "n0"}}).ok());
  put("n/15", "inside");
  t2.set("q", "y");
  EXPECT_EQ(t2.commit().error(), Error::not_committed);

  auto t3 = db_->create_transaction();
  ASSERT_TRUE(t3.get_ranges({{"m/", "m0"}, {"n/", "n0"}}, 0, Snapshot::yes).ok());
  put("m/15", "inside, but a snapshot read");
  t3.set("q", "z");
  EXPECT_TRUE(t3.commit().ok());
}

// A store whose prefix bloom filters cover a key's first two tuple elements, (space, id).
std::unique_ptr<Database> open_with_prefix_bloom(const std::string& path) {
  Options o;
  o.fsync = false;
  o.bloom_prefix_tuple_elements = 2;
  auto r = Database::open(path, o);
  EXPECT_TRUE(r.ok());
  return std::move(*r);
}

// With prefix bloom filters (Options::bloom_prefix_tuple_elements), range reads inside one
// prefix run in RocksDB's prefix mode and all others in total order: both must return exactly
// what a store without filters returns, from the memtable and from tables written before
// (reopening flushes the recovered log into a table), forward, reverse and limited.
TEST(PrefixBloomTest, RangeReadsAnswerAsWithoutFilters) {
  TempDir dir("txn");
  auto open = [&] { return open_with_prefix_bloom(dir.path()); };
  const std::vector<std::string> ids = {
      "a", std::string("a\0", 2), std::string("a\0b", 3), "ab", "b", "\xff", ""};
  std::map<std::string, std::string> model;
  auto db = open();
  auto write = [&](int round) {
    auto tr = db->create_transaction();
    for (std::int64_t space : {1, 2}) {
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if ((i + space + round) % 3 == 0) continue;  // each round leaves other ids out
        const Subspace s(Tuple().add(space).add(ids[i]));
        for (std::int64_t n = 0; n < round + 2; ++n) {
          std::string k = s.pack(Tuple().add(n).add(static_cast<std::int64_t>(round)));
          tr.set(k, "v" + std::to_string(round));
          model[k] = "v" + std::to_string(round);
        }
      }
    }
    ASSERT_TRUE(tr.commit().ok());
  };
  write(0);
  db.reset();
  db = open();  // round 0 is in a table now
  write(1);
  db.reset();
  db = open();
  write(2);  // round 2 in the memtable
  auto expect_same = [&](const std::string& b, const std::string& e) {
    auto it_b = model.lower_bound(b), it_e = model.lower_bound(e);
    std::vector<KeyValue> all;
    for (auto it = it_b; it != it_e && b < e; ++it) all.push_back({it->first, it->second});
    auto tr = db->create_transaction();
    for (int limit : {0, 1, 2}) {
      for (Reverse rev : {Reverse::no, Reverse::yes}) {
        auto got = tr.get_range(b, e, limit, rev, Snapshot::yes);
        ASSERT_TRUE(got.ok());
        std::vector<KeyValue> want = all;
        if (rev == Reverse::yes) std::reverse(want.begin(), want.end());
        if (limit > 0 && want.size() > static_cast<std::size_t>(limit)) want.resize(limit);
        EXPECT_EQ(*got, want) << limit << static_cast<int>(rev);
      }
    }
  };
  for (std::int64_t space : {0, 1, 2, 3}) {
    for (const std::string& id : ids) {
      const Subspace s(Tuple().add(space).add(id));
      auto [b, e] = s.range();
      expect_same(b, e);                                            // one prefix
      expect_same(s.pack(Tuple().add(std::int64_t{1})), e);         // a part of one
      expect_same(b, Subspace(Tuple().add(space)).range().second);  // across prefixes
    }
    auto [b, e] = Subspace(Tuple().add(space)).range();
    expect_same(b, e);
  }
  expect_same("", "\xff");
  // Point reads, filtered by their key's prefix only: every written key is found (memtable and
  // both generations of tables), and absent keys under present and absent prefixes are not.
  {
    auto tr = db->create_transaction();
    for (const auto& [k, v] : model) {
      auto got = tr.get(k, Snapshot::yes);
      ASSERT_TRUE(got.ok());
      EXPECT_EQ(*got, std::optional<std::string>(v));
    }
    for (std::int64_t space : {1, 2, 3}) {
      for (const std::string& id : ids) {
        const Subspace s(Tuple().add(space).add(id));
        for (const std::string& k : {s.pack(Tuple().add(std::int64_t{99})), s.key(),
                                     s.pack(Tuple().add(std::int64_t{0}).add(std::int64_t{7}))}) {
          auto got = tr.get(k, Snapshot::yes);
          ASSERT_TRUE(got.ok());
          EXPECT_EQ(*got, model.contains(k) ? std::optional<std::string>(model[k]) : std::nullopt);
        }
      }
    }
  }
  // Absent prefixes read nothing, and present ones in either generation of tables are found.
  auto tr = db->create_transaction();
  auto got = tr.get_range(Subspace(Tuple().add(std::int64_t{1}).add("zz")).range().first,
                          Subspace(Tuple().add(std::int64_t{1}).add("zz")).range().second);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->empty());
}

// A transaction reads every one-prefix range through one iterator of its own (seeking it back
// and forth, bounds checked by read_range): reads of many prefixes in any order, through the
// transaction's own sets, clears and range clears, answer as a model of the store overlaid with
// them, and keep the transaction's snapshot while other transactions commit into the same ranges.
TEST(PrefixBloomTest, OneTransactionsRangeReadsAcrossPrefixesAnswerAsAModel) {
  TempDir dir("txn");
  auto open = [&] { return open_with_prefix_bloom(dir.path()); };
  const std::vector<std::string> ids = {"a", std::string("a\0", 2), "ab", "b", "c", "\xff"};
  auto key = [&](std::size_t id, std::int64_t n) {
    return Subspace(Tuple().add(std::int64_t{1}).add(ids[id])).pack(Tuple().add(n));
  };
  std::map<std::string, std::string> model;  // what is committed
  auto db = open();
  {
    auto tr = db->create_transaction();
    for (std::size_t id = 0; id + 1 < ids.size(); ++id)
      for (std::int64_t n = 0; n < 6; n += 2) {
        tr.set(key(id, n), "table");
        model[key(id, n)] = "table";
      }
    ASSERT_TRUE(tr.commit().ok());
  }
  db.reset();
  db = open();  // those are in a table now; what follows is in the memtable
  std::mt19937 rng(20261127);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  int reads = 0, nonempty = 0;
  for (int round = 0; round < 150; ++round) {
    auto tr = db->create_transaction();
    std::map<std::string, std::string> seen = model;  // the snapshot, overlaid with tr's writes
    bool outside_commit = false;
    for (int op = 0; op < 40; ++op) {
      const std::size_t id = pick(ids.size());
      const auto n = static_cast<std::int64_t>(pick(8));
      switch (pick(6)) {
        case 0: {
          const std::string v = "r" + std::to_string(round) + "." + std::to_string(op);
          tr.set(key(id, n), v);
          seen[key(id, n)] = v;
          break;
        }
        case 1:
          tr.clear(key(id, n));
          seen.erase(key(id, n));
          break;
        case 2: {
          const auto m = n + static_cast<std::int64_t>(pick(3));
          tr.clear_range(key(id, n), key(id, m));
          seen.erase(seen.lower_bound(key(id, n)), seen.lower_bound(key(id, m)));
          break;
        }
        default: {
          // The whole prefix, or a part of it starting or ending inside it.
          const Subspace sp(Tuple().add(std::int64_t{1}).add(ids[id]));
          auto [b, e] = sp.range();
          if (pick(2)) b = key(id, n);
          if (pick(2)) e = key(id, n + static_cast<std::int64_t>(pick(4)));
          if (b > e) std::swap(b, e);
          const int limit = static_cast<int>(pick(3));
          const Reverse rev = pick(2) ? Reverse::yes : Reverse::no;
          const std::vector<KeyValue> want = model_range(seen, b, e, limit, rev);
          auto got = tr.get_range(b, e, limit, rev, Snapshot::yes);
          ASSERT_TRUE(got.ok());
          ASSERT_EQ(*got, want) << "round " << round << " op " << op;
          ++reads;
          nonempty += !want.empty();
          if (!outside_commit && pick(4) == 0) {
            // Another transaction writes into the range just read: invisible to this one.
            auto other = db->create_transaction();
            other.set(key(id, n), "outside");
            other.clear(key(id, n + 1));
            ASSERT_TRUE(other.commit().ok());
            model[key(id, n)] = "outside";
            model.erase(key(id, n + 1));
            outside_commit = true;
          }
        }
      }
    }
    if (outside_commit) continue;  // it would conflict; this round's writes are dropped
    ASSERT_TRUE(tr.commit().ok());
    model = std::move(seen);
  }
  EXPECT_GT(reads, 1000);
  EXPECT_GT(nonempty, reads / 3);
}

// A transaction done with its prefix iterator leaves it on its snapshot's shelf; the next
// transaction of the same version seeks it again, in any prefix, and reads exactly what a new one
// would. A transaction of another version never gets it, and a flush or compaction empties the
// shelf (the iterator would keep the memtable it flushed and the tables it replaced).
TEST(PrefixBloomTest, ShelvedIteratorsServeTransactionsOfTheirVersionOnly) {
  TempDir dir("txn");
  auto db = open_with_prefix_bloom(dir.path());
  const Subspace a(Tuple().add(std::int64_t{1}).add("a"));
  const Subspace b(Tuple().add(std::int64_t{1}).add("b"));
  auto put = [&](const std::string& k, const std::string& v) {
    auto tr = db->create_transaction();
    tr.set(k, v);
    ASSERT_TRUE(tr.commit().ok());
  };
  auto range = [](Transaction& tr, const Subspace& s) {
    auto [begin, end] = s.range();
    auto got = tr.get_range(begin, end);
    EXPECT_TRUE(got.ok());
    std::vector<std::string> values;
    for (const KeyValue& kv : *got) values.push_back(kv.value);
    return values;
  };
  using V = std::vector<std::string>;
  put(a.pack(Tuple().add(std::int64_t{1})), "a1");
  put(b.pack(Tuple().add(std::int64_t{1})), "b1");

  {
    auto t1 = db->create_transaction();
    EXPECT_EQ(range(t1, a), V{"a1"});
  }
  EXPECT_EQ(db->stats().iterators_shelved, 1u);
  EXPECT_EQ(db->stats().iterators_reused, 0u);
  auto t2 = db->create_transaction();  // the same version
  EXPECT_EQ(range(t2, b), V{"b1"});
  EXPECT_EQ(db->stats().iterators_reused, 1u);
  EXPECT_EQ(db->stats().iterators_shelved, 0u);
  EXPECT_EQ(range(t2, a), V{"a1"});

  put(a.pack(Tuple().add(std::int64_t{2})), "a2");  // a new version
  EXPECT_EQ(range(t2, a), V{"a1"});                 // t2 still reads its own
  t2.reset();  // shelved on the old version's snapshot, which goes with it
  auto t3 = db->create_transaction();
  EXPECT_EQ(range(t3, a), (V{"a1", "a2"}));
  EXPECT_EQ(db->stats().iterators_reused, 1u);

  // A writing transaction shelves its iterator when it commits; its own writes were read through
  // it before (the overlay), and the next version's transactions do not get it.
  t3.set(b.pack(Tuple().add(std::int64_t{2})), "b2");
  EXPECT_EQ(range(t3, b), (V{"b1", "b2"}));
  ASSERT_TRUE(t3.commit().ok());
  auto t4 = db->create_transaction();
  EXPECT_EQ(range(t4, b), (V{"b1", "b2"}));
  EXPECT_EQ(db->stats().iterators_reused, 1u);
  t4.reset();
  auto t5 = db->create_transaction();
  EXPECT_EQ(range(t5, a), (V{"a1", "a2"}));
  EXPECT_EQ(db->stats().iterators_reused, 2u);
  t5.reset();
  EXPECT_EQ(db->stats().iterators_shelved, 1u);

  ASSERT_TRUE(db->compact_files().ok());  // flushes the memtable, then compacts
  EXPECT_EQ(db->stats().iterators_shelved, 0u);
  auto t6 = db->create_transaction();
  EXPECT_EQ(range(t6, a), (V{"a1", "a2"}));
  EXPECT_EQ(range(t6, b), (V{"b1", "b2"}));
  EXPECT_EQ(db->stats().iterators_reused, 2u);
}

TEST_P(RocksTransactionTest, MetadataGenerationMovesByTwoPerMetadataCommit) {
  auto gen = [&] { return db_->create_transaction().metadata_generation(); };
  const std::uint64_t g0 = gen();
  EXPECT_EQ(g0 % 2, 0u);
  put("plain", "write");  // no metadata: the generation stays
  EXPECT_EQ(gen(), g0);
  auto tr = db_->create_transaction();
  tr.touch_metadata();
  tr.set("meta", "changed");
  ASSERT_TRUE(tr.commit().ok());
  EXPECT_EQ(gen(), g0 + 2);
  // A retried transaction starts unmarked; a read-only one moves nothing.
  auto t2 = db_->create_transaction();
  t2.touch_metadata();
  t2.reset();
  t2.set("other", "x");
  ASSERT_TRUE(t2.commit().ok());
  EXPECT_EQ(gen(), g0 + 2);
  EXPECT_NE(db_->create_transaction().instance_id(), 0u);
}

// Every engine: a snapshot names an even generation, a commit that touches metadata moves it,
// and the transaction that touches it gets none (its own writes are not a snapshot's).
TEST_P(TransactionTest, MetadataGenerationMovesWithMetadataCommits) {
  auto gen = [&] { return db_->create_transaction().snapshot_metadata_generation(); };
  const auto g0 = gen();
  ASSERT_TRUE(g0.has_value());
  EXPECT_EQ(*g0 % 2, 0u);
  auto tr = db_->create_transaction();
  tr.touch_metadata();
  EXPECT_EQ(tr.snapshot_metadata_generation(), std::nullopt);
  tr.set("meta", "changed");
  ASSERT_TRUE(tr.commit().ok());
  const auto g1 = gen();
  ASSERT_TRUE(g1.has_value());
  EXPECT_EQ(*g1 % 2, 0u);
  EXPECT_GT(*g1, *g0);
  EXPECT_GE(db_->create_transaction().metadata_generation(), *g1);
  EXPECT_NE(db_->create_transaction().instance_id(), 0u);
}

TEST_P(TransactionTest, GetKeySelectors) {
  for (auto k : {"b", "d", "f"}) put(k, "v");
  auto tr = db_->create_transaction();
  EXPECT_EQ(*tr.get_key(KeySelector::first_greater_or_equal("d")), "d");
  EXPECT_EQ(*tr.get_key(KeySelector::first_greater_than("d")), "f");
  EXPECT_EQ(*tr.get_key(KeySelector::last_less_than("d")), "b");
  EXPECT_EQ(*tr.get_key(KeySelector::last_less_or_equal("d")), "d");
  EXPECT_EQ(*tr.get_key(KeySelector::last_less_or_equal("e")), "d");
  EXPECT_EQ(*tr.get_key(KeySelector::first_greater_or_equal("e")), "f");
  EXPECT_EQ(*tr.get_key(KeySelector{"b", false, 3}), "f");  // third key >= b
  EXPECT_EQ(*tr.get_key(KeySelector::last_less_than("b")), "");
  EXPECT_EQ(*tr.get_key(KeySelector::first_greater_than("f")), "\xff");
  tr.set("c", "pending");
  tr.clear("d");
  EXPECT_EQ(*tr.get_key(KeySelector::first_greater_than("b")), "c");
  EXPECT_EQ(*tr.get_key(KeySelector::last_less_than("f")), "c");
}

TEST_P(TransactionTest, PointReadConflictsWithLaterWrite) {
  put("k", "0");
  auto t1 = db_->create_transaction();
  ASSERT_TRUE(t1.get("k").ok());
  put("k", "1");  // committed after t1's read version
  t1.set("other", "x");
  auto r = t1.commit();
  EXPECT_EQ(r.error(), Error::not_committed);
  EXPECT_EQ(read("other"), std::nullopt);  // nothing of a rejected transaction is applied
}

TEST_P(TransactionTest, SnapshotReadsAddNoConflict) {
  put("k", "0");
  auto t1 = db_->create_transaction();
  ASSERT_TRUE(t1.get("k", Snapshot::yes).ok());
  ASSERT_TRUE(t1.get_range("a", "z", 0, Reverse::no, Snapshot::yes).ok());
  ASSERT_TRUE(t1.get_key(KeySelector::last_less_than("z"), Snapshot::yes).ok());
  put("k", "1");
  t1.set("other", "x");
  EXPECT_TRUE(t1.commit().ok());
}

TEST_P(TransactionTest, WriteOnlyTransactionsDoNotConflict) {
  auto t1 = db_->create_transaction();
  auto t2 = db_->create_transaction();
  t1.set("k", "1");
  t2.set("k", "2");
  EXPECT_TRUE(t2.commit().ok());
  EXPECT_TRUE(t1.commit().ok());  // blind writes: last writer wins, no conflict
  EXPECT_EQ(read("k"), "1");
}

// RFC 003's insert path: a reverse range read with limit 1 over (revisions, DocID) that finds
// nothing must conflict with a concurrent insert into that range, and only into that range.
TEST_P(TransactionTest, EmptyRangeReadConflictsWithConcurrentInsert) {
  put("rev/docA/1", "x");  // a neighbour outside the range
  auto t1 = db_->create_transaction();
  auto r = t1.get_range("rev/docB/", "rev/docB0", 1, Reverse::yes);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->empty());
  put("rev/docB/1", "concurrent");
  t1.set("rev/docB/1", "mine");
  EXPECT_EQ(t1.commit().error(), Error::not_committed);
  EXPECT_EQ(read("rev/docB/1"), "concurrent");

  // The same race on a different document does not conflict.
  auto t2 = db_->create_transaction();
  ASSERT_TRUE(t2.get_range("rev/docC/", "rev/docC0", 1, Reverse::yes)->empty());
  put("rev/docD/1", "elsewhere");
  t2.set("rev/docC/1", "mine");
  EXPECT_TRUE(t2.commit().ok());
}

TEST_P(TransactionTest, LimitedRangeReadConflictsOnlyOnObservedPart) {
  for (auto k : {"p/1", "p/2", "p/3"}) put(k, "v");
  auto t1 = db_->create_transaction();
  ASSERT_EQ(t1.get_range("p/", "p0", 2)->size(), 2u);  // observed p/1 p/2
  put("p/4", "beyond");                                // after the last returned key
  t1.set("q", "x");
  EXPECT_TRUE(t1.commit().ok());

  auto t2 = db_->create_transaction();
  ASSERT_EQ(t2.get_range("p/", "p0", 2)->size(), 2u);
  put("p/15", "inside");  // between p/1 and p/2: changes what t2 saw
  t2.set("q", "y");
  EXPECT_EQ(t2.commit().error(), Error::not_committed);

  auto t3 = db_->create_transaction();
  ASSERT_EQ(t3.get_range("p/", "p0", 1, Reverse::yes)->size(), 1u);  // observed p/4 only
  put("p/0", "below");
  t3.set("q", "z");
  EXPECT_TRUE(t3.commit().ok());
}

TEST_P(TransactionTest, ExplicitConflictRanges) {
  auto t1 = db_->create_transaction();
  t1.add_read_conflict_range("m/", "m0");
  auto t2 = db_->create_transaction();
  t2.add_write_conflict_key("m/x");  // writes nothing, but claims m/x
  t2.set("unrelated", "1");
  ASSERT_TRUE(t2.commit().ok());
  t1.set("n", "1");
  EXPECT_EQ(t1.commit().error(), Error::not_committed);
}

TEST_P(TransactionTest, ClearRangeConflictsWithPointRead) {
  put("c/1", "v");
  auto t1 = db_->create_transaction();
  ASSERT_TRUE(t1.get("c/1").ok());
  {
    auto t2 = db_->create_transaction();
    t2.clear_range("c/", "c0");
    ASSERT_TRUE(t2.commit().ok());
  }
  t1.set("d", "1");
  EXPECT_EQ(t1.commit().error(), Error::not_committed);
  EXPECT_EQ(read("c/1"), std::nullopt);
}

TEST_P(TransactionTest, LostUpdateIsPreventedUnderContention) {
  put("counter", le64(0));
  // FoundationDB commits take a network round trip or two: fewer of them.
  const int kThreads = 8, kIncrements = fdb() ? 50 : 2000;
  std::atomic<int> retries{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        bool first = true;
        Status s = db_->run([&](Transaction& tr) -> Status {
          if (!first) retries.fetch_add(1);
          first = false;
          auto v = tr.get("counter");
          if (!v.ok()) return v.error();
          tr.set("counter", le64(decode_le64(v->value_or(le64(0))) + 1));
          return {};
        });
        ASSERT_TRUE(s.ok()) << error_name(s.error());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(decode_le64(*read("counter")), kThreads * kIncrements);
  EXPECT_GT(retries.load(), 0) << "8 threads on one key should have conflicted at least once";
}

TEST_P(TransactionTest, AtomicAddNeverConflicts) {
  const int kThreads = 8, kIncrements = fdb() ? 50 : 2000;
  std::atomic<int> attempts{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        Status s = db_->run([&](Transaction& tr) -> Status {
          attempts.fetch_add(1);
          tr.add("counter", 1);
          return {};
        });
        ASSERT_TRUE(s.ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(decode_le64(*read("counter")), kThreads * kIncrements);
  EXPECT_EQ(attempts.load(), kThreads * kIncrements);  // zero retries
}

TEST_P(TransactionTest, AtomicOpsSemantics) {
  auto tr = db_->create_transaction();
  tr.add("a", 5);
  tr.add("a", -7);
  tr.max("mx", le64(3));
  tr.max("mx", le64(9));
  tr.max("mx", le64(4));
  tr.min("mn", le64(3));
  tr.min("mn", le64(9));
  EXPECT_EQ(decode_le64(**tr.get("a")), -2);  // RYW over atomic ops on an absent key
  ASSERT_TRUE(tr.commit().ok());
  EXPECT_EQ(decode_le64(*read("a")), -2);
  EXPECT_EQ(decode_le64(*read("mx")), 9);
  EXPECT_EQ(decode_le64(*read("mn")), 3);

  // Two transactions' adds land in one commit batch and both count.
  auto t1 = db_->create_transaction();
  auto t2 = db_->create_transaction();
  t1.add("a", 10);
  t2.add("a", 100);
  std::atomic<int> done{0};
  t1.commit_async([&](Result<CommitResult> r) {
    EXPECT_TRUE(r.ok());
    done++;
  });
  t2.commit_async([&](Result<CommitResult> r) {
    EXPECT_TRUE(r.ok());
    done++;
  });
  while (done.load() < 2) std::this_thread::yield();
  EXPECT_EQ(decode_le64(*read("a")), 108);
}

// A commit batch is written as its net effect (cleared ranges, then point writes, in key order):
// later transactions' clears, range clears, sets and atomic adds in the same batch must leave
// exactly what applying them one after the other leaves.
TEST_P(RocksTransactionTest, OneBatchLeavesWhatItsTransactionsLeaveInOrder) {
  auto k = [](int i) { return std::string("k") + (i < 10 ? "0" : "") + std::to_string(i); };
  for (int i = 0; i < 20; ++i) put(k(i), "base");
  put("ctr", le64(100));
  // The gate's batch holds the commit thread until the others are queued: they form one batch.
  std::promise<void> open_gate, at_gate;
  std::shared_future<void> gate = open_gate.get_future().share();
  std::atomic<bool> first{true};
  db_->set_commit_fault_hook([&] {
    if (first.exchange(false)) {
      at_gate.set_value();
      gate.wait();
    }
    return CommitFault::none;
  });
  const std::uint64_t batches_before = db_->stats().batches;
  std::vector<Transaction> txns;
  for (int i = 0; i < 5; ++i) txns.push_back(db_->create_transaction());
  txns[0].set("gate", "g");
  txns[1].set(k(5), "t1");
  txns[1].clear_range(k(10), k(15));
  txns[1].add("ctr", 1);
  txns[2].clear_range(k(0), k(8));  // takes t1's k05 with it
  txns[2].set(k(3), "t2");
  txns[2].add("ctr", 2);
  txns[3].clear(k(3));
  txns[3].set(k(12), "t3");
  txns[3].add("ctr", 3);
  txns[3].add("fresh", 7);
  txns[4].set(k(5), "t4");
  txns[4].clear_range(k(11), k(13));  // takes t3's k12 with it
  txns[4].add("ctr", 4);
  txns[4].add("fresh", 1);
  std::atomic<int> done{0};
  auto commit = [&](Transaction& t) {
    t.commit_async([&](Result<CommitResult> r) {
      EXPECT_TRUE(r.ok());
      done++;
    });
  };
  commit(txns[0]);
  at_gate.get_future().wait();
  for (int i = 1; i < 5; ++i) commit(txns[i]);
  open_gate.set_value();
  while (done.load() < 5) std::this_thread::yield();
  db_->set_commit_fault_hook(nullptr);
  EXPECT_EQ(db_->stats().batches - batches_before, 2u);  // the gate's, then one for the rest

  std::map<std::string, std::string> want;
  for (int i : {8, 9, 15, 16, 17, 18, 19}) want[k(i)] = "base";
  want[k(5)] = "t4";
  want["gate"] = "g";
  auto tr = db_->create_transaction();
  for (int i = 0; i < 20; ++i) {
    auto v = tr.get(k(i));
    ASSERT_TRUE(v.ok());
    auto w = want.find(k(i));
    EXPECT_EQ(*v, w == want.end() ? std::nullopt : std::optional<std::string>(w->second)) << k(i);
  }
  EXPECT_EQ(decode_le64(**tr.get("ctr")), 110);
  EXPECT_EQ(decode_le64(**tr.get("fresh")), 8);
  EXPECT_EQ(**tr.get("gate"), "g");
}

// A transaction folds adds of one width into one op: the value read back and the value committed
// must be what applying every op in order to the stored base gives, for bases wider and narrower
// than the operands, carries out of the top byte, and adds mixed with other widths and max/min.
TEST_P(TransactionTest, ManyAtomicOpsOnOneKeyLeaveWhatAppliedInOrderLeaves) {
  std::mt19937 rng(7);
  for (int round = 0; round < 40; ++round) {
    const std::string key = "fold" + std::to_string(round);
    std::optional<std::string> want;
    if (round % 4 != 0) {
      want = std::string(1 + rng() % 6, '\0');
      for (char& c : *want) c = static_cast<char>(rng());
      put(key, *want);
    }
    auto tr = db_->create_transaction();
    const int ops = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < ops; ++i) {
      const unsigned pick = rng() % 10;
      const std::size_t width = pick < 7 ? 2 : 1 + rng() % 5;  // mostly one width: folded
      AtomicOp op{pick == 8   ? MutationType::max
                  : pick == 9 ? MutationType::min
                              : MutationType::add,
                  std::string(width, '\0')};
      for (char& c : op.operand) c = static_cast<char>(rng() % 3 == 0 ? 0xff : rng());
      want = apply_atomic(want ? std::optional<std::string_view>(*want) : std::nullopt, op);
      if (op.type == MutationType::add) tr.add(key, op.operand);
      if (op.type == MutationType::max) tr.max(key, op.operand);
      if (op.type == MutationType::min) tr.min(key, op.operand);
    }
    if (round % 2 == 0) {
      EXPECT_EQ(**tr.get(key, Snapshot::yes), *want) << round;
    }
    ASSERT_TRUE(tr.commit().ok());
    EXPECT_EQ(*read(key), *want) << round;
  }
}

// A prefetched key's get() answers as a get() without the prefetch would: the transaction's own
// writes made in between (set, clear, range clear, add, a versionstamped key) are seen, as is
// the absence of writes; a reset drops it; a get() in the other snapshot mode reads anew.
TEST_P(TransactionTest, APrefetchedGetAnswersAsAPlainGetAfterWritesInBetween) {
  put("p/set", "old");
  put("p/clear", "old");
  put("p/range", "old");
  put("p/add", le64(5));
  put("p/plain", "old");
  auto tr = db_->create_transaction();
  tr.add("p/add-first", le64(4));  // an add folded before the prefetch reaches it
  for (const char* k :
       {"p/set", "p/clear", "p/range", "p/add", "p/plain", "p/absent", "p/add-first"})
    tr.prefetch(k, Snapshot::yes);
  tr.prefetch("p/other-mode", Snapshot::yes);
  tr.set("p/set", "new");
  tr.clear("p/clear");
  tr.clear_range("p/r", "p/s");
  tr.add("p/add", le64(2));
  tr.add("p/add", le64(3));
  tr.set_versionstamped_key(vs_template("p/vs/"), "v");
  EXPECT_EQ(*tr.get("p/set", Snapshot::yes), "new");
  EXPECT_EQ(*tr.get("p/clear", Snapshot::yes), std::nullopt);
  EXPECT_EQ(*tr.get("p/range", Snapshot::yes), std::nullopt);
  EXPECT_EQ(decode_le64(**tr.get("p/add", Snapshot::yes)), 10);
  EXPECT_EQ(*tr.get("p/plain", Snapshot::yes), "old");
  EXPECT_EQ(*tr.get("p/absent", Snapshot::yes), std::nullopt);
  EXPECT_EQ(decode_le64(**tr.get("p/add-first", Snapshot::yes)), 4);
  EXPECT_EQ(*tr.get("p/other-mode", Snapshot::no), std::nullopt);
  // Taken once: the next get() reads again, and sees what the transaction wrote since.
  tr.set("p/plain", "newer");
  EXPECT_EQ(*tr.get("p/plain", Snapshot::yes), "newer");
  ASSERT_TRUE(tr.commit().ok());

  auto after_reset = db_->create_transaction();
  after_reset.prefetch("p/set");
  after_reset.reset();
  after_reset.set("p/set", "reset");
  EXPECT_EQ(*after_reset.get("p/set"), "reset");
}

// A prefetch with Snapshot::no takes the key's read conflict, whether or not a get() follows; with
// Snapshot::yes it takes none, and a later get() with Snapshot::no takes it.
TEST_P(TransactionTest, APrefetchTakesTheReadConflictOfItsSnapshotMode) {
  put("pc/k", "0");
  auto plain = db_->create_transaction();
  plain.prefetch("pc/k", Snapshot::no);
  put("pc/k", "1");
  plain.set("pc/other", "x");
  EXPECT_EQ(plain.commit().error(), Error::not_committed);

  auto snap = db_->create_transaction();
  snap.prefetch("pc/k", Snapshot::yes);
  EXPECT_EQ(*snap.get("pc/k", Snapshot::yes), "1");
  put("pc/k", "2");
  snap.set("pc/other", "y");
  EXPECT_TRUE(snap.commit().ok());

  auto upgraded = db_->create_transaction();
  upgraded.prefetch("pc/k", Snapshot::yes);
  EXPECT_EQ(*upgraded.get("pc/k", Snapshot::no), "2");
  put("pc/k", "3");
  upgraded.set("pc/other", "z");
  EXPECT_EQ(upgraded.commit().error(), Error::not_committed);
  EXPECT_EQ(read("pc/other"), "y");
}

// Adds of one width to one key are folded until the transaction reads or writes the key, or
// commits (both engines; on FoundationDB, fewer calls through its client). 8-byte and 2-byte adds
// mixed with sets, clears, range clears, point, snapshot and range reads on a few keys: every read
// and the committed state must be what applying each op in order gives.
TEST_P(TransactionTest, FoldedAddsMixedWithOtherOpsReadAndCommitAsAppliedInOrder) {
  std::mt19937 rng(11);
  const std::vector<std::string> keys = {"mix/a", "mix/b", "mix/c", "mix/d"};
  for (int round = 0; round < 30; ++round) {
    std::map<std::string, std::string> model;
    {
      auto base = db_->create_transaction();
      base.clear_range("mix/", "mix0");
      for (const std::string& k : keys)
        if (rng() % 2) {
          model[k] = le64(static_cast<std::int64_t>(rng()));
          base.set(k, model[k]);
        }
      ASSERT_TRUE(base.commit().ok());
    }
    auto tr = db_->create_transaction();
    const int ops = 5 + static_cast<int>(rng() % 40);
    for (int i = 0; i < ops; ++i) {
      const std::string& k = keys[rng() % keys.size()];
      const unsigned pick = rng() % 12;
      auto stored = model.find(k);
      const auto current =
          stored == model.end() ? std::nullopt : std::optional<std::string_view>(stored->second);
      if (pick < 6) {  // mostly 8-byte adds, some past 2^63 and negative
        std::uint64_t magnitude = rng();
        if (pick == 5) magnitude <<= 32;
        const auto delta = static_cast<std::int64_t>(pick % 2 ? ~magnitude + 1 : magnitude);
        model[k] = apply_atomic(current, AtomicOp{MutationType::add, le64(delta)});
        tr.add(k, delta);
      } else if (pick == 6) {
        const std::string operand = std::string(2, static_cast<char>(rng()));
        model[k] = apply_atomic(current, AtomicOp{MutationType::add, operand});
        tr.add(k, operand);
      } else if (pick == 7) {
        model[k] = "set" + std::to_string(i);
        tr.set(k, model[k]);
      } else if (pick == 8) {
        model.erase(k);
        tr.clear(k);
      } else if (pick == 9) {
        model.erase(model.lower_bound("mix/b"), model.lower_bound("mix/d"));
        tr.clear_range("mix/b", "mix/d");
      } else if (pick == 10) {
        auto v = tr.get(k, rng() % 2 ? Snapshot::yes : Snapshot::no);
        ASSERT_TRUE(v.ok());
        EXPECT_EQ(*v,
                  stored == model.end() ? std::nullopt : std::optional<std::string>(stored->second))
            << round << " " << i << " " << k;
      } else {
        auto kvs = tr.get_range("mix/", "mix0");
        ASSERT_TRUE(kvs.ok());
        std::map<std::string, std::string> seen;
        for (auto& kv : *kvs) seen[kv.key] = kv.value;
        EXPECT_EQ(seen, model) << round << " " << i;
      }
    }
    ASSERT_TRUE(tr.commit().ok());
    auto after = db_->create_transaction();
    auto kvs = after.get_range("mix/", "mix0");
    ASSERT_TRUE(kvs.ok());
    std::map<std::string, std::string> stored;
    for (auto& kv : *kvs) stored[kv.key] = kv.value;
    EXPECT_EQ(stored, model) << round;
  }
}

TEST_P(TransactionTest, AtomicAddReadsBaseWithConflict) {
  put("a", le64(1));
  auto t1 = db_->create_transaction();
  t1.add("a", 1);
  EXPECT_EQ(decode_le64(**t1.get("a")), 2);  // reading the result reads the base
  put("a", le64(50));
  EXPECT_EQ(t1.commit().error(), Error::not_committed);
}

TEST_P(TransactionTest, VersionstampsAreUniqueAndIncreaseInCommitOrder) {
  const int kThreads = 8, kPerThread = fdb() ? 50 : 300;
  std::mutex mu;
  std::vector<std::string> all;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string prev;
      for (int i = 0; i < kPerThread; ++i) {
        auto tr = db_->create_transaction();
        tr.set_versionstamped_key(vs_template("vs/"), std::to_string(t));
        tr.set_versionstamped_value("vv/" + std::to_string(t), vs_template(""));
        auto r = tr.commit();
        ASSERT_TRUE(r.ok());
        ASSERT_EQ(r->versionstamp.size(), 10u);
        ASSERT_GT(r->versionstamp, prev);  // each thread's later commit has a later stamp
        prev = r->versionstamp;
        std::lock_guard lock(mu);
        all.push_back(r->versionstamp);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> unique(all.begin(), all.end());
  EXPECT_EQ(unique.size(), all.size());
  // The stored keys carry exactly the reported stamps, in key order.
  {
    auto tr = db_->create_transaction();
    auto kvs = tr.get_range("vs/", "vs0");
    ASSERT_EQ(kvs->size(), all.size());
    auto it = unique.begin();
    for (auto& kv : *kvs) EXPECT_EQ(kv.key, "vs/" + *it++);
    // Versionstamped values hold the stamp of the transaction that wrote them.
    auto vv = tr.get("vv/0");
    ASSERT_TRUE(vv.ok() && vv->has_value());
    EXPECT_EQ((*vv)->size(), 10u);
    EXPECT_TRUE(unique.count(**vv));
  }  // transactions must not outlive their Database

  // Across a restart, stamps keep increasing.
  std::string last = *unique.rbegin();
  reopen();
  auto t2 = db_->create_transaction();
  t2.set_versionstamped_key(vs_template("vs/"), "after");
  auto r = t2.commit();
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->versionstamp, last);
}

TEST_P(TransactionTest, VersionstampedValueIsUnreadableBeforeCommit) {
  auto tr = db_->create_transaction();
  tr.set_versionstamped_value("k", vs_template("pre"));
  EXPECT_EQ(tr.get("k").error(), Error::accessed_unreadable);
  auto bad = db_->create_transaction();
  bad.set_versionstamped_key("short", "v");  // no valid offset suffix
  EXPECT_EQ(bad.commit().error(), Error::invalid_option_value);
}

// A store whose size limit is lowered (Options::transaction_size_limit; FoundationDB's size limit)
// says so to its transactions, whose work spread over several transactions sizes itself by it,
// and refuses a commit past it with transaction_too_large, writing nothing.
TEST_P(TransactionTest, ALowerSizeLimitIsToldAndEnforced) {
  constexpr std::size_t kLimit = 20'000;
  std::unique_ptr<Database> db;
  if (fdb()) {
    FdbOptions o = fdb_options_;
    o.transaction_size_limit_bytes = kLimit;
    std::string why;
    auto r = open_foundationdb(o, &why);
    ASSERT_TRUE(r.ok()) << why;
    db = std::move(*r);
  } else {
    db_.reset();
    Options o;
    o.fsync = false;
    o.clock = clock_;
    o.transaction_size_limit = kLimit;
    auto r = Database::open(dir_.path(), o);
    ASSERT_TRUE(r.ok()) << error_name(r.error());
    db = std::move(*r);
  }
  EXPECT_EQ(db->transaction_size_limit(), kLimit);
  {
    auto tr = db->create_transaction();
    EXPECT_EQ(tr.size_limit(), kLimit);
    tr.set("small", std::string(kLimit / 2, 'v'));
    EXPECT_TRUE(tr.commit().ok());
  }
  {
    auto tr = db->create_transaction();
    tr.set("large/0", std::string(kLimit / 2, 'v'));
    tr.set("large/1", std::string(kLimit / 2, 'v'));
    EXPECT_EQ(tr.commit().error(), Error::transaction_too_large);
  }
  auto tr = db->create_transaction();
  EXPECT_EQ(*tr.get("large/0"), std::nullopt);
  EXPECT_EQ(tr.get("small")->value_or("").size(), kLimit / 2);
  EXPECT_EQ(share_of_size_limit(4'000'000, kLimit), 8'000u);
  EXPECT_EQ(share_of_size_limit(4'000'000, kTransactionSizeMax), 4'000'000u);
}

TEST_P(TransactionTest, LimitsReturnFoundationDbErrorCodes) {
  {
    auto tr = db_->create_transaction();
    tr.set(std::string(kKeySizeMax + 1, 'k'), "v");
    EXPECT_EQ(tr.commit().error(), Error::key_too_large);
    EXPECT_EQ(static_cast<int>(Error::key_too_large), 2102);
  }
  {
    auto tr = db_->create_transaction();
    tr.set(std::string(key_size_max(), 'k'), "v");  // exactly at the limit is fine
    EXPECT_TRUE(tr.commit().ok());
  }
  {
    auto tr = db_->create_transaction();
    tr.set("k", std::string(kValueSizeMax + 1, 'v'));
    EXPECT_EQ(tr.commit().error(), Error::value_too_large);
    EXPECT_EQ(static_cast<int>(Error::value_too_large), 2103);
  }
  {
    auto tr = db_->create_transaction();
    tr.set("k", std::string(kValueSizeMax, 'v'));
    EXPECT_TRUE(tr.commit().ok());
  }
  {
    auto tr = db_->create_transaction();
    std::string v(kValueSizeMax, 'v');
    for (int i = 0; i < 101; ++i) tr.set("big/" + std::to_string(i), v);
    EXPECT_EQ(tr.commit().error(), Error::transaction_too_large);
    EXPECT_EQ(static_cast<int>(Error::transaction_too_large), 2101);
    EXPECT_EQ(read("big/0"), std::nullopt);
  }
  {
    auto tr = db_->create_transaction();
    tr.set("\xff/system", "v");
    EXPECT_EQ(tr.commit().error(), Error::key_outside_legal_range);
  }
  {
    auto tr = db_->create_transaction();
    EXPECT_EQ(tr.get(std::string(kKeySizeMax + 1, 'k')).error(), Error::key_too_large);
  }
  // Cleared ranges and versionstamped values: the same checks, one copy for both engines.
  {
    auto tr = db_->create_transaction();
    tr.clear_range("b", "a");
    EXPECT_EQ(tr.commit().error(), Error::inverted_range);
  }
  {
    auto tr = db_->create_transaction();
    tr.clear_range("a", std::string(kKeySizeMax + 1, 'k'));
    EXPECT_EQ(tr.commit().error(), Error::key_too_large);
  }
  {
    auto tr = db_->create_transaction();
    tr.clear_range("a", "\xff\x01");
    EXPECT_EQ(tr.commit().error(), Error::key_outside_legal_range);
  }
  {
    auto tr = db_->create_transaction();
    tr.set_versionstamped_value("k", vs_template(std::string(kValueSizeMax, 'v')));
    EXPECT_EQ(tr.commit().error(), Error::value_too_large);
  }
  {
    auto tr = db_->create_transaction();
    tr.set_versionstamped_value("k", "short");
    EXPECT_EQ(tr.commit().error(), Error::invalid_option_value);
  }
}

// Transactions reading the same committed version share one RocksDB snapshot, each with its own
// lifetime; the snapshot goes when the next version is committed and no view of it is left.
TEST_P(RocksTransactionTest, ViewsOfOneVersionShareOneSnapshot) {
  put("k", "1");
  auto t1 = db_->create_transaction();
  ASSERT_EQ(*t1.get("k"), "1");
  clock_->advance_us(3'000'000);
  auto t2 = db_->create_transaction();
  ASSERT_EQ(*t2.get("k"), "1");
  EXPECT_EQ(db_->stats().snapshots, 1u);
  EXPECT_EQ(t1.get_read_version().value(), t2.get_read_version().value());

  put("k", "2");  // a new version: views of it take their own snapshot
  auto t3 = db_->create_transaction();
  ASSERT_EQ(*t3.get("k"), "2");
  ASSERT_EQ(*t1.get("k"), "1");
  EXPECT_EQ(db_->stats().snapshots, 2u);

  // t1's lifetime runs from its own start, not from the snapshot's.
  clock_->advance_us(2'500'000);
  EXPECT_EQ(t1.get("k").error(), Error::transaction_too_old);
  EXPECT_TRUE(t2.get("k").ok());
  t1.reset();
  t2.reset();
  EXPECT_EQ(db_->stats().snapshots, 1u);
  t3.reset();
  EXPECT_EQ(db_->stats().snapshots, 1u);  // the engine keeps the latest version's until...
  put("other", "x");                      // ...a newer version is committed
  EXPECT_EQ(db_->stats().snapshots, 0u);
  EXPECT_EQ(read("k"), "2");
}

TEST_P(RocksTransactionTest, TransactionTooOldViaInjectedClock) {
  put("k", "v");
  auto tr = db_->create_transaction();
  ASSERT_TRUE(tr.get("k").ok());
  clock_->advance_us(5'000'001);
  EXPECT_EQ(tr.get("k").error(), Error::transaction_too_old);
  tr.set("k", "w");
  EXPECT_EQ(tr.commit().error(), Error::transaction_too_old);
  EXPECT_EQ(static_cast<int>(Error::transaction_too_old), 1007);
  // on_error retries it with a fresh read version.
  ASSERT_TRUE(tr.on_error(Error::transaction_too_old).ok());
  ASSERT_TRUE(tr.get("k").ok());
  tr.set("k", "w");
  EXPECT_TRUE(tr.commit().ok());
  EXPECT_EQ(read("k"), "w");
}

TEST_P(RocksTransactionTest, ResolverRejectsReadVersionsItForgot) {
  // A resolver allowed 300 bytes (about 2 keys) forgets old versions early; a transaction whose
  // read version predates what it remembers cannot be checked and must get 1007, not a silent
  // commit.
  db_.reset();
  Options o;
  o.fsync = false;
  o.clock = clock_;
  o.resolver_bytes_max = 300;
  db_ = std::move(Database::open(dir_.path(), o).value());
  put("k", "v");
  auto tr = db_->create_transaction();
  ASSERT_TRUE(tr.get("k").ok());
  for (int i = 0; i < 5; ++i) put("x" + std::to_string(i), "1");
  tr.set("z", "1");
  EXPECT_EQ(tr.commit().error(), Error::transaction_too_old);
  EXPECT_EQ(read("z"), std::nullopt);
}

TEST_P(TransactionTest, NonRetryableErrorsAreReturnedByOnError) {
  auto tr = db_->create_transaction();
  EXPECT_EQ(tr.on_error(Error::key_too_large).error(), Error::key_too_large);
  EXPECT_TRUE(tr.on_error(Error::not_committed).ok());
  EXPECT_TRUE(tr.on_error(Error::commit_unknown_result).ok());
}

TEST_P(RocksTransactionTest, CommitUnknownResultInjection) {
  std::atomic<int> n{0};
  db_->set_commit_fault_hook([&] {
    int i = n++;
    return i == 0 ? CommitFault::unknown_result_applied
                  : (i == 1 ? CommitFault::unknown_result_not_applied : CommitFault::none);
  });
  auto t1 = db_->create_transaction();
  t1.set("applied", "1");
  EXPECT_EQ(t1.commit().error(), Error::commit_unknown_result);
  EXPECT_EQ(read("applied"), "1");
  auto t2 = db_->create_transaction();
  t2.set("dropped", "1");
  EXPECT_EQ(t2.commit().error(), Error::commit_unknown_result);
  EXPECT_EQ(read("dropped"), std::nullopt);
  db_->set_commit_fault_hook(nullptr);
  EXPECT_TRUE(is_retryable(Error::commit_unknown_result));
  EXPECT_TRUE(is_maybe_committed(Error::commit_unknown_result));
}

TEST_P(TransactionTest, UsedAfterCommitIsAnError) {
  auto tr = db_->create_transaction();
  tr.set("k", "v");
  ASSERT_TRUE(tr.commit().ok());
  EXPECT_EQ(tr.get("k").error(), Error::used_during_commit);
  EXPECT_EQ(tr.commit().error(), Error::used_during_commit);
  tr.reset();
  EXPECT_EQ(*tr.get("k"), "v");
}

class WatchWaiter {
 public:
  WatchCallback callback() {
    return [this](Error e, std::int64_t version) {
      std::lock_guard lock(mu_);
      version_ = version;
      result_ = e;
      cv_.notify_all();
    };
  }
  std::optional<Error> wait_ms(int ms) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return result_.has_value(); });
    return result_;
  }
  std::int64_t version() {
    std::lock_guard lock(mu_);
    return version_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Error> result_;
  std::int64_t version_ = 0;
};

TEST_P(TransactionTest, WatchFiresAfterACommitChangesTheKey) {
  put("w", "1");
  WatchWaiter waiter;
  auto tr = db_->create_transaction();
  ASSERT_TRUE(tr.get("w").ok());
  auto watch = tr.watch("w", waiter.callback());
  ASSERT_TRUE(tr.commit().ok());
  put("w", "1");  // same value: not a change
  put("other", "x");
  EXPECT_EQ(waiter.wait_ms(50), std::nullopt);
  put("w", "2");
  EXPECT_EQ(waiter.wait_ms(5000), Error::success);
}

TEST_P(TransactionTest, WatchFiresAtOnceIfTheKeyChangedBeforeRegistration) {
  put("w", "1");
  WatchWaiter waiter;
  auto tr = db_->create_transaction();
  ASSERT_TRUE(tr.get("w").ok());
  auto watch = tr.watch("w", waiter.callback());
  put("w", "2");  // after tr's read version, before tr commits
  ASSERT_TRUE(tr.commit().ok());
  EXPECT_EQ(waiter.wait_ms(5000), Error::success);
}

TEST_P(TransactionTest, WatchOnClearedRangeAndAtomicAndCancel) {
  put("w/1", "1");
  WatchWaiter cleared, atomic, cancelled;
  auto tr = db_->create_transaction();
  auto w1 = tr.watch("w/1", cleared.callback());
  auto w2 = tr.watch("cnt", atomic.callback());
  auto w3 = tr.watch("never", cancelled.callback());
  ASSERT_TRUE(tr.commit().ok());
  auto t2 = db_->create_transaction();
  t2.clear_range("w/", "w0");
  t2.add("cnt", 1);
  ASSERT_TRUE(t2.commit().ok());
  EXPECT_EQ(cleared.wait_ms(5000), Error::success);
  EXPECT_EQ(atomic.wait_ms(5000), Error::success);
  w3->cancel();
  EXPECT_EQ(cancelled.wait_ms(5000), Error::transaction_cancelled);

  // A commit writing more keys than there are watches: the watches are walked, not the writes.
  put("v/1", "1");
  WatchWaiter by_range, by_point, untouched;
  auto t3 = db_->create_transaction();
  auto w4 = t3.watch("v/1", by_range.callback());
  auto w5 = t3.watch("p/3", by_point.callback());
  auto w6 = t3.watch("q", untouched.callback());
  ASSERT_TRUE(t3.commit().ok());
  auto t4 = db_->create_transaction();
  t4.clear_range("v/", "v0");
  for (int i = 0; i < 8; ++i) t4.set("p/" + std::to_string(i), "x");
  ASSERT_TRUE(t4.commit().ok());
  EXPECT_EQ(by_range.wait_ms(5000), Error::success);
  EXPECT_EQ(by_point.wait_ms(5000), Error::success);
  w6->cancel();
  EXPECT_EQ(untouched.wait_ms(5000), Error::transaction_cancelled);  // not fired by t4
}

// On FoundationDB a commit of this process fires the watches on what it added to itself, with its
// version, and a transaction reading at that version sees the change. FoundationDB's own watch can
// win that race; it carries no version (0), as the embedded engine's always does (its reads are
// always of the newest snapshot). So over five commits each watch carries the commit's version or
// 0, and on FoundationDB at least one carries the version.
TEST_P(TransactionTest, AWatchFiredByThisProcessCarriesAVersionThatShowsTheChange) {
  int with_version = 0;
  for (int round = 1; round <= 5; ++round) {
    SCOPED_TRACE(round);
    WatchWaiter waiter;
    auto tr = db_->create_transaction();
    ASSERT_TRUE(tr.get("cnt").ok());
    auto w = tr.watch("cnt", waiter.callback());
    ASSERT_TRUE(tr.commit().ok());
    auto t2 = db_->create_transaction();
    t2.add("cnt", 5);
    auto committed = t2.commit();
    ASSERT_TRUE(committed.ok());
    ASSERT_EQ(waiter.wait_ms(5000), Error::success);
    const std::int64_t version = waiter.version();
    if (version != 0) {
      ASSERT_TRUE(fdb());
      EXPECT_EQ(version, committed->version);
      ++with_version;
    }
    auto t3 = db_->create_transaction();
    if (version > 0) t3.set_read_version(version);
    auto v = t3.get("cnt");
    ASSERT_TRUE(v.ok() && v->has_value());
    EXPECT_EQ(decode_le64(**v), 5 * round);
    if (version > 0) {
      EXPECT_EQ(*t3.get_read_version(), committed->version);
    }
  }
  if (fdb()) {
    EXPECT_GE(with_version, 1);
  }
}

TEST_P(TransactionTest, WatchOfAFailedTransactionReportsItsError) {
  put("k", "1");
  WatchWaiter waiter;
  auto tr = db_->create_transaction();
  ASSERT_TRUE(tr.get("k").ok());
  auto w = tr.watch("k", waiter.callback());
  put("k", "2");
  tr.set("z", "1");
  EXPECT_EQ(tr.commit().error(), Error::not_committed);
  EXPECT_EQ(waiter.wait_ms(5000), Error::not_committed);
}

// Two handles on one FoundationDB cluster stand for two Chaise nodes.
TEST_P(FdbHandlesTest, WatchFiresOnACommitThroughAnotherHandle) {
  auto other = open_handle();
  ASSERT_TRUE(other);
  put("w", "1");
  WatchWaiter waiter;
  auto tr = db_->create_transaction();
  ASSERT_TRUE(tr.get("w").ok());
  auto watch = tr.watch("w", waiter.callback());
  ASSERT_TRUE(tr.commit().ok());
  EXPECT_EQ(waiter.wait_ms(50), std::nullopt);
  auto t2 = other->create_transaction();
  t2.set("w", "2");
  ASSERT_TRUE(t2.commit().ok());
  EXPECT_EQ(waiter.wait_ms(5000), Error::success);
  EXPECT_EQ(waiter.version(), 0);  // another process's commit: its version is not known here
}

TEST_P(FdbHandlesTest, TransactionsOfTwoHandlesConflict) {
  auto other = open_handle();
  ASSERT_TRUE(other);
  put("k", "0");
  auto t1 = db_->create_transaction();
  ASSERT_TRUE(t1.get("k").ok());
  auto t2 = other->create_transaction();
  ASSERT_TRUE(t2.get("k").ok());
  t2.set("k", "2");
  ASSERT_TRUE(t2.commit().ok());
  t1.set("k", "1");
  EXPECT_EQ(t1.commit().error(), Error::not_committed);
  EXPECT_EQ(static_cast<int>(Error::not_committed), 1020);
  EXPECT_EQ(db_->stats().conflicts, 1u);
  EXPECT_EQ(read("k"), "2");
  // run() retries it on FoundationDB's backoff until it lands.
  Status s = db_->run([&](Transaction& tr) -> Status {
    auto v = tr.get("k");
    if (!v.ok()) return v.error();
    tr.set("k", v->value_or("") + "+1");
    return {};
  });
  ASSERT_TRUE(s.ok()) << error_name(s.error());
  EXPECT_EQ(read("k"), "2+1");
}

TEST_P(FdbHandlesTest, VersionstampsIncreaseAcrossHandles) {
  auto other = open_handle();
  ASSERT_TRUE(other);
  std::string prev;
  constexpr int kCommits = 20;
  for (int i = 0; i < kCommits; ++i) {
    Database& db = i % 2 == 0 ? *db_ : *other;
    auto tr = db.create_transaction();
    tr.set_versionstamped_key(vs_template("vs/"), std::to_string(i));
    auto r = tr.commit();
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->versionstamp.size(), 10u);
    EXPECT_GT(r->versionstamp, prev);
    prev = r->versionstamp;
  }
  // Key order is commit order, whichever handle committed.
  auto tr = other->create_transaction();
  auto kvs = tr.get_range("vs/", "vs0");
  ASSERT_TRUE(kvs.ok());
  ASSERT_EQ(kvs->size(), static_cast<std::size_t>(kCommits));
  for (int i = 0; i < kCommits; ++i) EXPECT_EQ((*kvs)[i].value, std::to_string(i));
  EXPECT_EQ((*kvs).back().key, "vs/" + prev);
}

TEST_P(FdbHandlesTest, MetadataGenerationMovesForEveryHandle) {
  auto other = open_handle();
  ASSERT_TRUE(other);
  EXPECT_EQ(db_->create_transaction().instance_id(), other->create_transaction().instance_id());
  auto before = db_->create_transaction();
  const auto g0 = before.snapshot_metadata_generation();
  ASSERT_TRUE(g0.has_value());
  auto tr = other->create_transaction();
  tr.touch_metadata();
  tr.set("meta", "x");
  ASSERT_TRUE(tr.commit().ok());
  const auto g1 = db_->create_transaction().snapshot_metadata_generation();
  ASSERT_TRUE(g1.has_value());
  EXPECT_GT(*g1, *g0);
  EXPECT_EQ(*g1 % 2, 0u);
  EXPECT_EQ(before.snapshot_metadata_generation(), g0);  // a snapshot keeps its generation
}

// A cluster nobody answers for: opening fails with transaction_timed_out (1031) once the
// transaction timeout has passed, instead of waiting for ever.
TEST_P(FdbHandlesTest, UnreachableClusterFailsWithTimedOut) {
  const std::string cluster_file = dir_.path() + "/unreachable.cluster";
  {
    std::FILE* f = std::fopen(cluster_file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("chaise:unreachable@127.0.0.1:1\n", f);
    std::fclose(f);
  }
  FdbOptions o = fdb_options_;
  o.cluster_file = cluster_file;
  o.transaction_timeout_ms = 1000;
  const auto start = std::chrono::steady_clock::now();
  std::string why;
  auto r = open_foundationdb(o, &why);
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), Error::transaction_timed_out) << why;
  EXPECT_EQ(static_cast<int>(Error::transaction_timed_out), 1031);
  EXPECT_LT(waited, std::chrono::seconds(5));
}

// The client knob future_version_retry_delay is the process's network's: an open asking for
// another value than the first open's is refused, as is a value out of range; the same value
// opens.
TEST_P(FdbHandlesTest, TheRetryDelayKnobIsTheFirstOpensAndInRange) {
  std::string why;
  FdbOptions o = fdb_options_;
  o.future_version_retry_delay_us = 0;
  auto zero = open_foundationdb(o, &why);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error(), Error::invalid_option_value);
  EXPECT_NE(why.find("future_version_retry_delay_us"), std::string::npos) << why;
  o.future_version_retry_delay_us = fdb_options_.future_version_retry_delay_us + 1;
  auto other = open_foundationdb(o, &why);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error(), Error::invalid_option_value);
  EXPECT_NE(why.find("knobs"), std::string::npos) << why;
  auto same = open_foundationdb(fdb_options_, &why);
  ASSERT_TRUE(same.ok()) << why;
}

// A handle has at most max_watches watches waiting: one more fails at once with too_many_watches,
// and a slot is free again once a watch ends. A watch outlives the transaction timeout.
TEST_P(FdbHandlesTest, WatchesPastMaxWatchesFailAndOutliveTheTransactionTimeout) {
  FdbOptions o = fdb_options_;
  o.max_watches = 2;
  o.transaction_timeout_ms = 500;
  std::string why;
  auto opened = open_foundationdb(o, &why);
  ASSERT_TRUE(opened.ok()) << why;
  auto& db = *opened;
  // Three watches, each in a transaction of its own: the third is refused.
  WatchWaiter w[4];
  std::shared_ptr<Watch> watches[4];
  for (int i = 0; i < 3; ++i) {
    auto tr = db->create_transaction();
    watches[i] = tr.watch(std::string(1, static_cast<char>('a' + i)), w[i].callback());
    ASSERT_TRUE(tr.commit().ok());
    if (i < 2) {
      EXPECT_EQ(w[i].wait_ms(100), std::nullopt) << i;
    }
  }
  EXPECT_EQ(w[2].wait_ms(5000), Error::too_many_watches);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(w[0].wait_ms(0), std::nullopt);  // still waiting, past the 500 ms timeout
  put("a", "1");
  EXPECT_EQ(w[0].wait_ms(5000), Error::success);
  // Its slot is free again.
  auto tr = db->create_transaction();
  watches[3] = tr.watch("d", w[3].callback());
  ASSERT_TRUE(tr.commit().ok());
  EXPECT_EQ(w[3].wait_ms(300), std::nullopt);
  watches[1]->cancel();
  watches[3]->cancel();
}

TEST_P(FdbHandlesTest, TransactionTooOldAfterFiveSeconds) {
  put("k", "v");
  auto tr = db_->create_transaction();
  ASSERT_TRUE(tr.get("k").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5500));
  tr.set("k", "w");
  auto c = tr.commit();  // its read version is older than the cluster's 5-second window
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(), Error::transaction_too_old);
  ASSERT_TRUE(tr.on_error(c.error()).ok());
  EXPECT_EQ(*tr.get("k"), "v");
  tr.set("k", "w");
  EXPECT_TRUE(tr.commit().ok());
  EXPECT_EQ(read("k"), "w");
}

}  // namespace
}  // namespace chaise::storage

namespace chaise::storage {
namespace {

// The write map against a plain model, with runs of ascending keys (placed by the insertion hint),
// descending ones, repeats, range clears between them, and copies and moves of the map midway.
TEST(WriteMapTest, PlacesKeysWhereAModelDoes) {
  std::mt19937 rng(26);
  WriteMap m;
  std::map<std::string, std::optional<std::string>> model;  // nullopt: cleared
  auto key = [&](int i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "k%05d", i);
    return std::string(buf);
  };
  for (int step = 0; step < 4000; ++step) {
    const unsigned op = rng() % 20;
    if (op == 0) {
      int a = static_cast<int>(rng() % 2000), b = a + static_cast<int>(rng() % 50);
      m.clear_range(key(a), key(b));
      for (auto it = model.lower_bound(key(a)); it != model.end() && it->first < key(b);)
        it = model.erase(it);
      continue;
    }
    if (op == 1) {
      WriteMap copy(m);
      m = std::move(copy);
    } else if (op == 2) {
      WriteMap moved(std::move(m));
      m = moved;
    }
    const int start = static_cast<int>(rng() % 2000);
    const int len = 1 + static_cast<int>(rng() % 30);
    const int dir = rng() % 4 == 0 ? -1 : 1;
    for (int i = 0; i < len; ++i) {
      const std::string k = key(start + dir * i * static_cast<int>(1 + rng() % 3));
      if (rng() % 5 == 0) {
        m.clear(k);
        model[k] = std::nullopt;
      } else {
        const std::string v = std::to_string(step) + "/" + std::to_string(i);
        m.set(k, v);
        model[k] = v;
      }
    }
  }
  std::map<std::string, std::optional<std::string>> got;
  for (const auto& [k, w] : m.points()) {
    ASSERT_TRUE(w.kind == PointWrite::Kind::set || w.kind == PointWrite::Kind::clear);
    got[k] = w.kind == PointWrite::Kind::set ? std::optional<std::string>(w.value) : std::nullopt;
  }
  EXPECT_EQ(got, model);
}

}  // namespace
}  // namespace chaise::storage
