// The memtable representation (storage/rocksdb/memtable.h) inside a real RocksDB: every read a
// database makes (point reads, iterators both ways, snapshots, flush, WAL replay) against a model.
#include "storage/rocksdb/memtable.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Model = std::map<std::string, std::string>;

// The parameter: the point index's slots (0: none; 16: full after 12 keys, so most keys are read
// from the skip list behind an incomplete index; 1 << 16: every key indexed).
class MemtableTest : public ::testing::TestWithParam<std::size_t> {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');  // a parameterized test's name has one
    dir_ = std::filesystem::temp_directory_path() /
           ("chaise-memtable-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::remove_all(dir_);
    open();
  }
  void TearDown() override {
    db_.reset();
    std::filesystem::remove_all(dir_);
  }
  void open() {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.allow_concurrent_memtable_write = false;
    o.memtable_factory = chaise::storage::ordered_memtable_factory(GetParam());
    o.write_buffer_size = 64u << 20;  // everything stays in the memtable until a test flushes
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_.string(), &raw).ok());
    db_.reset(raw);
  }
  void reopen() {
    db_.reset();
    open();
  }

  std::optional<std::string> get(const std::string& k, const rocksdb::Snapshot* s = nullptr) {
    rocksdb::ReadOptions ro;
    ro.snapshot = s;
    std::string v;
    rocksdb::Status st = db_->Get(ro, k, &v);
    if (st.IsNotFound()) return std::nullopt;
    EXPECT_TRUE(st.ok()) << st.ToString();
    return v;
  }

  // The whole database through one iterator: forward, backward, and from sought positions.
  void expect_matches(const Model& m, const rocksdb::Snapshot* s = nullptr) {
    rocksdb::ReadOptions ro;
    ro.snapshot = s;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    Model forward;
    for (it->SeekToFirst(); it->Valid(); it->Next())
      forward[it->key().ToString()] = it->value().ToString();
    ASSERT_TRUE(it->status().ok());
    EXPECT_EQ(forward, m);
    std::vector<std::string> backward;
    for (it->SeekToLast(); it->Valid(); it->Prev()) backward.push_back(it->key().ToString());
    std::vector<std::string> expected;
    for (auto r = m.rbegin(); r != m.rend(); ++r) expected.push_back(r->first);
    EXPECT_EQ(backward, expected);
    for (const auto& [k, v] : m) EXPECT_EQ(get(k, s), v) << k;
    // Seek and SeekForPrev at keys present and absent, and a step either way from there.
    // The iterator stands at `pos` of the model (m.end(): not valid).
    auto at = [&](Model::const_iterator pos, const std::string& t) {
      if (pos == m.end()) {
        EXPECT_FALSE(it->Valid()) << t;
        return;
      }
      ASSERT_TRUE(it->Valid()) << t;
      EXPECT_EQ(it->key().ToString(), pos->first) << t;
    };
    std::mt19937 rng(7);
    for (int i = 0; i < 200; ++i) {
      const std::string t = random_key(rng);
      auto ge = m.lower_bound(t);
      it->Seek(t);
      at(ge, t);
      if (ge != m.end()) {
        it->Prev();
        at(ge == m.begin() ? m.end() : std::prev(ge), t);
      }
      auto gt = m.upper_bound(t);
      it->SeekForPrev(t);
      at(gt == m.begin() ? m.end() : std::prev(gt), t);
      if (gt != m.begin()) {
        it->Next();
        at(gt, t);
      }
    }
  }

  // Keys with long shared prefixes, of several lengths, some prefixes of others.
  static std::string random_key(std::mt19937& rng) {
    static const std::string prefixes[] = {
        "", "a", "ab", "abc/", "abc/def/", "z\xff", std::string("\0\x01", 2)};
    std::string k = prefixes[rng() % 7];
    const int n = static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) k.push_back(static_cast<char>("\x00\x01mnz\xfe\xff"[rng() % 7]));
    return k;
  }

  std::filesystem::path dir_;
  std::unique_ptr<rocksdb::DB> db_;
};

TEST_P(MemtableTest, RandomWritesReadBackInKeyOrderWithSnapshotsFlushAndReplay) {
  std::mt19937 rng(42);
  Model m;
  std::vector<std::pair<const rocksdb::Snapshot*, Model>> snaps;
  for (int round = 0; round < 60; ++round) {
    rocksdb::WriteBatch wb;
    Model next = m;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const std::string k = random_key(rng);
      if (rng() % 4 == 0) {
        wb.Delete(k);
        next.erase(k);
      } else {
        const std::string v = "v" + std::to_string(round) + "." + std::to_string(i);
        wb.Put(k, v);
        next[k] = v;
      }
    }
    ASSERT_TRUE(db_->Write(rocksdb::WriteOptions(), &wb).ok());
    m = std::move(next);
    if (round % 10 == 0) snaps.emplace_back(db_->GetSnapshot(), m);
  }
  expect_matches(m);
  // Older versions of the same keys: ordered by sequence within one user key.
  for (auto& [s, sm] : snaps) expect_matches(sm, s);
  for (auto& [s, sm] : snaps) db_->ReleaseSnapshot(s);
  reopen();  // the WAL replays into a new memtable
  expect_matches(m);
  ASSERT_TRUE(db_->Flush(rocksdb::FlushOptions()).ok());  // the flush reads the memtable in order
  expect_matches(m);
}

TEST_P(MemtableTest, AscendingDescendingAndInterleavedInserts) {
  Model m;
  auto put = [&](const std::string& k) {
    ASSERT_TRUE(db_->Put(rocksdb::WriteOptions(), k, k + "!").ok());
    m[k] = k + "!";
  };
  char buf[32];
  for (int i = 0; i < 3000; ++i) {  // ascending: each insert follows the previous one
    std::snprintf(buf, sizeof buf, "asc/%08d", i);
    put(buf);
  }
  for (int i = 3000; i > 0; --i) {  // descending: each goes before the previous one
    std::snprintf(buf, sizeof buf, "desc/%08d", i);
    put(buf);
  }
  for (int i = 0; i < 3000; ++i) {  // two interleaved ascending runs, far apart
    std::snprintf(buf, sizeof buf, "%s/%08d", i % 2 ? "b" : "y", i);
    put(buf);
  }
  for (int i = 0; i < 3000; ++i) {  // between existing keys
    std::snprintf(buf, sizeof buf, "asc/%08d+", i);
    put(buf);
  }
  for (int i = 0; i < 2000; ++i) put("same");  // one user key, many sequences
  expect_matches(m);
}

// Readers on other threads while one thread writes: every read sees keys in order and never loses
// a key it saw before (run under TSan for the publication of new nodes).
TEST_P(MemtableTest, ConcurrentReadersSeeAConsistentOrderedList) {
  constexpr int kKeys = 20000;
  std::atomic<bool> done{false};
  std::atomic<int> written{0};
  std::atomic<long> failures{0};
  auto key = [](int i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "k%08d", static_cast<int>((i * 7919L) % kKeys));
    return std::string(buf);
  };
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!done.load()) {
        const int w = written.load();
        std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
        std::string prev;
        int n = 0;
        for (it->SeekToFirst(); it->Valid(); it->Next(), ++n) {
          if (!prev.empty() && !(prev < it->key().ToString())) ++failures;
          prev = it->key().ToString();
        }
        if (n < w) ++failures;  // every key written before the iterator was made is there
        if (w > 0) {
          std::string v;
          if (!db_->Get(rocksdb::ReadOptions(), key(w - 1), &v).ok()) ++failures;
        }
      }
    });
  }
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(db_->Put(rocksdb::WriteOptions(), key(i), "v").ok());
    written.store(i + 1);
  }
  done.store(true);
  for (auto& t : readers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(PointIndex, MemtableTest, ::testing::Values(0, 16, 1 << 16),
                         [](const auto& info) { return "slots" + std::to_string(info.param); });

}  // namespace
