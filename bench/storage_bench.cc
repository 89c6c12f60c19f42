// storage_bench — the storage layer against raw RocksDB on the same machine, same disk, same RocksDB
// options (bench/README.md has the how-to and how to read the numbers).
//
// What is compared, exactly:
//   Commit/threads:N       N threads, each looping: new Transaction, set(16-byte distinct key, 100-byte
//                          value), commit() (blocks until durable, fsync on). items = commits. Our
//                          pipeline resolves, batches and writes concurrent commits as one WriteBatch
//                          with one WAL sync (group commit); `batch_avg` = commits per batch achieved.
//   RawSyncedPut/threads:N N threads, each looping: WriteBatch with the same single put, Write(sync=true)
//                          into one rocksdb::DB. RocksDB group-commits concurrent writers itself (one
//                          leader writes and syncs the WAL for the group). items = puts. This is the
//                          cost floor of the same durable work, so Commit(N) / RawSyncedPut(N) is our
//                          overhead ratio at concurrency N. Our batches also carry the 8-byte version
//                          in the meta column family (one extra put per batch), raw ones do not.
//   RawSyncedBatch/B       One thread writing synced WriteBatches of B such puts: what a perfect group
//                          commit of B transactions per sync would cost (compare with Commit at the
//                          concurrency whose batch_avg is about B).
//   Get / RawGet           Point reads of random keys of a 200k-key data set (16-byte keys, 100-byte
//                          values, flushed to SST files and read through a 256 MiB block cache). Ours:
//                          Transaction::get (snapshot read + read-conflict bookkeeping), a new
//                          Transaction every 100 gets. Raw: DB::Get with default ReadOptions.
//   Scan / RawScan         Ranges of 1000 consecutive keys at random offsets, each value copied out.
//                          Ours: Transaction::get_range (new Transaction per range). Raw: an iterator with
//                          iterate_upper_bound, copying each key and value into a vector, which is what
//                          get_range returns. items = keys.
//   MemtableGet            Point reads (DB::Get) of random present keys among 40k held in one
//                          memtable (storage/rocksdb/memtable.h, the engine's skip list), keys
//                          shaped like the keyspace's: a 30-byte prefix all share, then a
//                          16-byte random id.
//                          What a GET of a recently written document costs in the memtable.
//                          /0: through the skip list; /65536: through the point index (the
//                          engine's for the by_id and body families).
//   MemtableInsert         Writes (no WAL) of batches of 100 new random keys of that shape, sorted
//                          as a commit batch writes them, into that memtable: the commit thread's
//                          insert. items = keys.
//   RawGetLarge            DB::Get of random present keys among 10,000,000 shaped like by_id
//                          entries (a shared 5-byte prefix, an 8-digit id; a 20-byte random
//                          value), in one store with a by_id family's table options and a 32 MiB
//                          block cache, compacted: one of a GET's two point reads at 10M documents.
//   RawMultiGetLarge/B     The same keys read B at a time with DB::MultiGet: what batching
//                          concurrent GETs' reads would save. items = keys.
// Both stores use the engine's RocksDB options (storage/rocksdb/engine.cc), duplicated in
// raw_options().
// Every benchmark works in a fresh directory under the temp dir (/tmp), removed afterwards.
#include <benchmark/benchmark.h>
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "storage/database.h"
#include "storage/rocksdb/memtable.h"
#include "storage/rocksdb/table_options.h"

namespace {

using chaise::storage::Database;
using chaise::storage::KeyValue;
using chaise::storage::Options;
using chaise::storage::Transaction;

constexpr std::size_t kValueSize = 100;
constexpr std::uint64_t kDatasetKeys = 200'000;
constexpr std::uint64_t kLoadBatchKeys = 1000;
constexpr std::uint64_t kScanKeys = 1000;
constexpr int kGetsPerTransaction = 100;
constexpr double kMinTimeSeconds = 2.0;

// Benchmarks measure; a failed operation is a broken build, not a data point.
void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "storage_bench: %s failed\n", what);
  std::abort();
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "chaise-bench-XXXXXX").string();
    check(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// 16 bytes: writer (4 hex digits) + counter (12 hex digits), distinct across threads.
std::string commit_key(int writer, std::uint64_t counter) {
  char buf[32];
  int n = std::snprintf(buf, sizeof buf, "%04x%012" PRIx64, static_cast<unsigned>(writer) & 0xffff,
                        counter & 0xffff'ffff'ffff);
  check(n == 16, "commit_key");
  return std::string(buf, 16);
}

// 16 bytes, sorting like i.
std::string dataset_key(std::uint64_t i) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, i);  // 16 hex digits always fit
  return std::string(buf, 16);
}

// Pseudo-random printable bytes (not all one byte, so compression does not flatter either side).
std::string make_value(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string v(kValueSize, '\0');
  for (char& c : v) c = static_cast<char>('!' + rng() % 90);
  return v;
}

// The engine's options (storage/rocksdb/engine.cc Engine::open), for a fair raw baseline.
rocksdb::Options raw_options() {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.IncreaseParallelism(2);
  o.OptimizeLevelStyleCompaction();
  o.write_buffer_size = 64u << 20;
  o.max_total_wal_size = 512u << 20;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(Options{}.block_cache_bytes);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.whole_key_filtering = true;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return o;
}

std::unique_ptr<Database> open_ours(const std::string& path) {
  auto db = Database::open(path, Options{});  // fsync on (the default)
  check(db.ok(), "Database::open");
  return std::move(*db);
}

std::unique_ptr<rocksdb::DB> open_raw(const std::string& path) {
  rocksdb::DB* raw = nullptr;
  check(rocksdb::DB::Open(raw_options(), path, &raw).ok(), "rocksdb::DB::Open");
  return std::unique_ptr<rocksdb::DB>(raw);
}

// ---- a, b: commit throughput (one store per run, created by Setup, removed by Teardown) ----

struct WriteStore {
  TempDir dir;
  std::unique_ptr<Database> ours;
  std::unique_ptr<rocksdb::DB> raw;
};
std::unique_ptr<WriteStore>
    g_write;  // written only by Setup/Teardown, before/after the threads run

void setup_ours(const benchmark::State&) {
  g_write = std::make_unique<WriteStore>();
  g_write->ours = open_ours(g_write->dir.path());
}

void setup_raw(const benchmark::State&) {
  g_write = std::make_unique<WriteStore>();
  g_write->raw = open_raw(g_write->dir.path());
}

// Members are destroyed in reverse order: the stores close before their directory is removed.
void teardown_write(const benchmark::State&) { g_write.reset(); }

void BM_Commit(benchmark::State& state) {
  Database* db = g_write->ours.get();
  const std::int64_t version_at_start = db->committed_version();
  const std::string value = make_value(static_cast<std::uint64_t>(state.thread_index()));
  std::uint64_t counter = 0;
  for (auto _ : state) {
    Transaction tr = db->create_transaction();
    tr.set(commit_key(state.thread_index(), counter++), value);
    auto r = tr.commit();
    check(r.ok(), "commit");
  }
  state.SetItemsProcessed(state.iterations());
  // The loop ends at a barrier of all threads, so every commit is done here. Each batch takes one
  // version, so versions used = batches. Counters are summed over threads: set it in one.
  if (state.thread_index() == 0) {
    const auto batches = static_cast<double>(db->committed_version() - version_at_start);
    const auto commits = static_cast<double>(state.iterations()) * state.threads();
    state.counters["batch_avg"] = batches > 0 ? commits / batches : 0.0;
  }
}

void BM_RawSyncedPut(benchmark::State& state) {
  rocksdb::DB* db = g_write->raw.get();
  const std::string value = make_value(static_cast<std::uint64_t>(state.thread_index()));
  rocksdb::WriteOptions wo;
  wo.sync = true;
  std::uint64_t counter = 0;
  for (auto _ : state) {
    rocksdb::WriteBatch wb;
    wb.Put(commit_key(state.thread_index(), counter++), value);
    check(db->Write(wo, &wb).ok(), "rocksdb Write");
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_RawSyncedBatch(benchmark::State& state) {
  rocksdb::DB* db = g_write->raw.get();
  const auto puts = static_cast<int>(state.range(0));
  const std::string value = make_value(0);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  std::uint64_t counter = 0;
  for (auto _ : state) {
    rocksdb::WriteBatch wb;
    for (int i = 0; i < puts; ++i) wb.Put(commit_key(0, counter++), value);
    check(db->Write(wo, &wb).ok(), "rocksdb Write");
  }
  state.SetItemsProcessed(state.iterations() * puts);
}

// ---- c: reads over one 200k-key data set, loaded once into both stores on first use ----

struct ReadStore {
  TempDir ours_dir;
  TempDir raw_dir;
  std::unique_ptr<Database> ours;
  std::unique_ptr<rocksdb::DB> raw;
};
std::unique_ptr<ReadStore> g_read;

// Loads both stores, then closes and reopens them: reopening flushes the recovered memtable to an SST
// file, so both serve reads from SST files through the block cache, not from a memtable.
void load_read_store() {
  if (g_read) return;
  g_read = std::make_unique<ReadStore>();
  ReadStore& s = *g_read;
  s.ours = open_ours(s.ours_dir.path());
  s.raw = open_raw(s.raw_dir.path());
  for (std::uint64_t base = 0; base < kDatasetKeys; base += kLoadBatchKeys) {
    Transaction tr = s.ours->create_transaction();
    rocksdb::WriteBatch wb;
    for (std::uint64_t i = base; i < base + kLoadBatchKeys; ++i) {
      const std::string v = make_value(i);
      tr.set(dataset_key(i), v);
      wb.Put(dataset_key(i), v);
    }
    check(tr.commit().ok(), "load commit");
    check(s.raw->Write(rocksdb::WriteOptions(), &wb).ok(), "load Write");
  }
  s.ours.reset();
  s.raw.reset();
  s.ours = open_ours(s.ours_dir.path());
  s.raw = open_raw(s.raw_dir.path());
}

void setup_read(const benchmark::State&) { load_read_store(); }

void BM_Get(benchmark::State& state) {
  Database* db = g_read->ours.get();
  std::mt19937_64 rng(1);
  Transaction tr = db->create_transaction();
  int in_tr = 0;
  for (auto _ : state) {
    if (++in_tr > kGetsPerTransaction) {
      tr = db->create_transaction();
      in_tr = 1;
    }
    auto v = tr.get(dataset_key(rng() % kDatasetKeys));
    check(v.ok() && v->has_value(), "Transaction::get");
    benchmark::DoNotOptimize(v);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_RawGet(benchmark::State& state) {
  rocksdb::DB* db = g_read->raw.get();
  std::mt19937_64 rng(1);
  std::string v;
  for (auto _ : state) {
    check(db->Get(rocksdb::ReadOptions(), dataset_key(rng() % kDatasetKeys), &v).ok(),
          "rocksdb Get");
    benchmark::DoNotOptimize(v);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Scan(benchmark::State& state) {
  Database* db = g_read->ours.get();
  std::mt19937_64 rng(2);
  for (auto _ : state) {
    const std::uint64_t start = rng() % (kDatasetKeys - kScanKeys);
    Transaction tr = db->create_transaction();
    auto kvs = tr.get_range(dataset_key(start), dataset_key(start + kScanKeys));
    check(kvs.ok() && kvs->size() == kScanKeys, "Transaction::get_range");
    benchmark::DoNotOptimize(kvs);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kScanKeys));
}

void BM_RawScan(benchmark::State& state) {
  rocksdb::DB* db = g_read->raw.get();
  std::mt19937_64 rng(2);
  for (auto _ : state) {
    const std::uint64_t start = rng() % (kDatasetKeys - kScanKeys);
    const std::string begin = dataset_key(start), end = dataset_key(start + kScanKeys);
    rocksdb::Slice upper(end);
    rocksdb::ReadOptions ro;
    ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
    std::vector<KeyValue> kvs;
    for (it->Seek(begin); it->Valid(); it->Next())
      kvs.push_back({it->key().ToString(), it->value().ToString()});
    check(it->status().ok() && kvs.size() == kScanKeys, "rocksdb iterator");
    benchmark::DoNotOptimize(kvs);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kScanKeys));
}

// The memtable store: one memtable large enough that nothing is flushed while a benchmark runs.
// 40,000 keys of about 150 bytes: what one of the server's memtables (half of the default 16 MiB
// write_buffer_bytes) holds when it is flushed.
constexpr std::uint64_t kMemtableKeys = 40'000;
constexpr std::size_t kMemtableBatchKeys = 100;

std::uint64_t mix64(std::uint64_t x) {  // splitmix64's finalizer: ids in random order
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string memtable_key(std::uint64_t i) {
  char id[17];
  std::snprintf(id, sizeof id, "%016" PRIx64, mix64(i));
  return std::string(30, 'p') + std::string(id, 16);
}

struct MemtableStore {
  TempDir dir;
  std::unique_ptr<rocksdb::DB> db;
  std::uint64_t next = 0;  // keys 0..next-1 are in it
};

std::unique_ptr<MemtableStore> open_memtable_store(std::size_t index_slots = 0) {
  auto s = std::make_unique<MemtableStore>();
  rocksdb::Options o;
  o.create_if_missing = true;
  o.allow_concurrent_memtable_write = false;  // what storage/rocksdb/memtable.h needs
  o.memtable_factory = chaise::storage::ordered_memtable_factory(index_slots);
  o.write_buffer_size = 1u << 30;
  o.disable_auto_compactions = true;
  rocksdb::DB* raw = nullptr;
  check(rocksdb::DB::Open(o, s->dir.path(), &raw).ok(), "rocksdb open (memtable)");
  s->db.reset(raw);
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  const std::string value = make_value(1);
  for (; s->next < kMemtableKeys; ++s->next)
    check(s->db->Put(wo, memtable_key(s->next), value).ok(), "memtable load");
  return s;
}

void BM_MemtableGet(benchmark::State& state) {
  auto store = open_memtable_store(static_cast<std::size_t>(state.range(0)));
  std::mt19937_64 rng(7);
  std::string v;
  for (auto _ : state) {
    const std::string key = memtable_key(rng() % kMemtableKeys);
    check(store->db->Get(rocksdb::ReadOptions(), key, &v).ok(), "memtable get");
    benchmark::DoNotOptimize(v);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_MemtableInsert(benchmark::State& state) {
  auto store = open_memtable_store();
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  const std::string value = make_value(2);
  std::vector<std::string> keys(kMemtableBatchKeys);
  for (auto _ : state) {
    state.PauseTiming();
    for (std::string& k : keys) k = memtable_key(store->next++);
    std::sort(keys.begin(), keys.end());  // a commit batch writes its keys in order
    rocksdb::WriteBatch batch;
    for (const std::string& k : keys) batch.Put(k, value);
    state.ResumeTiming();
    check(store->db->Write(wo, &batch).ok(), "memtable write");
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kMemtableBatchKeys));
}

// ---- d: point reads among 10,000,000 keys (loaded once, on first use, without a WAL) ----

constexpr std::uint64_t kLargeKeys = 10'000'000;

// A hit family's table options as the engine builds them (storage/rocksdb/table_options.h): partitioned
// index and filters in the block cache (32 MiB, the default), Ribbon filters below level 0,
// hash-indexed data blocks. Its column-family options as in storage/rocksdb/engine.cc: LZ4, level
// sizes from an 8 MiB memtable, no filter on the last level.
rocksdb::Options large_options() {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.IncreaseParallelism(2);
  o.compression = rocksdb::kLZ4Compression;
  o.write_buffer_size = 8u << 20;
  o.max_bytes_for_level_base = 32u << 20;
  o.target_file_size_base = 8u << 20;
  o.level_compaction_dynamic_level_bytes = true;
  o.optimize_filters_for_hits = true;
  const Options defaults;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(
      chaise::storage::hit_family_table_options(chaise::storage::family_table_options(
          defaults, rocksdb::NewLRUCache(defaults.block_cache_bytes)))));
  return o;
}

// Shaped like a by_id key: the tuple prefix of a database's by_id subspace, then the id.
std::string large_key(std::uint64_t i) {
  char buf[32];
  const int n = std::snprintf(buf, sizeof buf,
                              "\x15\x01\x15\x03\x02"
                              "d%08" PRIu64,
                              i);
  check(n == 14, "large_key");
  return std::string(buf, 14);
}

struct LargeStore {
  TempDir dir;
  std::unique_ptr<rocksdb::DB> db;
};
std::unique_ptr<LargeStore> g_large;

void setup_large(const benchmark::State&) {
  if (g_large) return;
  g_large = std::make_unique<LargeStore>();
  rocksdb::DB* raw = nullptr;
  check(rocksdb::DB::Open(large_options(), g_large->dir.path(), &raw).ok(), "open large store");
  g_large->db.reset(raw);
  rocksdb::WriteOptions w;
  w.disableWAL = true;
  std::mt19937_64 rng(3);
  for (std::uint64_t base = 0; base < kLargeKeys; base += kLoadBatchKeys) {
    rocksdb::WriteBatch wb;
    for (std::uint64_t i = base; i < base + kLoadBatchKeys; ++i) {
      std::string v(20, '\0');
      for (char& c : v) c = static_cast<char>(rng());
      wb.Put(large_key(i), v);
    }
    check(g_large->db->Write(w, &wb).ok(), "load large store");
  }
  check(g_large->db->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr).ok(),
        "compact large store");
}

void BM_RawGetLarge(benchmark::State& state) {
  rocksdb::DB* db = g_large->db.get();
  std::mt19937_64 rng(4);
  std::string v;
  for (auto _ : state) {
    check(db->Get(rocksdb::ReadOptions(), large_key(rng() % kLargeKeys), &v).ok(), "Get");
    benchmark::DoNotOptimize(v);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_RawMultiGetLarge(benchmark::State& state) {
  rocksdb::DB* db = g_large->db.get();
  const auto batch = static_cast<std::size_t>(state.range(0));
  std::mt19937_64 rng(5);
  std::vector<std::string> keys(batch);
  std::vector<rocksdb::Slice> slices(batch);
  std::vector<rocksdb::PinnableSlice> values(batch);
  std::vector<rocksdb::Status> statuses(batch);
  for (auto _ : state) {
    for (std::size_t i = 0; i < batch; ++i) {
      keys[i] = large_key(rng() % kLargeKeys);
      slices[i] = keys[i];
      values[i].Reset();
    }
    db->MultiGet(rocksdb::ReadOptions(), db->DefaultColumnFamily(), batch, slices.data(),
                 values.data(), statuses.data());
    for (const rocksdb::Status& st : statuses) check(st.ok(), "MultiGet");
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(batch));
}

BENCHMARK(BM_Commit)
    ->Name("Commit")
    ->Setup(setup_ours)
    ->Teardown(teardown_write)
    ->Threads(1)
    ->Threads(8)
    ->Threads(64)
    ->UseRealTime()
    ->MinTime(kMinTimeSeconds);
BENCHMARK(BM_RawSyncedPut)
    ->Name("RawSyncedPut")
    ->Setup(setup_raw)
    ->Teardown(teardown_write)
    ->Threads(1)
    ->Threads(8)
    ->Threads(64)
    ->UseRealTime()
    ->MinTime(kMinTimeSeconds);
BENCHMARK(BM_RawSyncedBatch)
    ->Name("RawSyncedBatch")
    ->Setup(setup_raw)
    ->Teardown(teardown_write)
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->UseRealTime()
    ->MinTime(kMinTimeSeconds);
BENCHMARK(BM_Get)->Name("Get")->Setup(setup_read)->UseRealTime()->MinTime(kMinTimeSeconds);
BENCHMARK(BM_RawGet)->Name("RawGet")->Setup(setup_read)->UseRealTime()->MinTime(kMinTimeSeconds);
BENCHMARK(BM_Scan)->Name("Scan")->Setup(setup_read)->UseRealTime()->MinTime(kMinTimeSeconds);
BENCHMARK(BM_RawScan)->Name("RawScan")->Setup(setup_read)->UseRealTime()->MinTime(kMinTimeSeconds);
// Without and with the point index, sized as the engine sizes it for an 8 MiB memtable.
BENCHMARK(BM_MemtableGet)
    ->Name("MemtableGet")
    ->Arg(0)
    ->Arg(65536)
    ->UseRealTime()
    ->MinTime(kMinTimeSeconds);
// A bounded count: the memtable grows by each insert (40,000 to 80,000 keys), and stays in memory
// until the store closes.
BENCHMARK(BM_MemtableInsert)
    ->Name("MemtableInsert")
    ->UseRealTime()
    ->Iterations(400)
    ->Repetitions(5);
BENCHMARK(BM_RawGetLarge)
    ->Name("RawGetLarge")
    ->Setup(setup_large)
    ->UseRealTime()
    ->MinTime(kMinTimeSeconds);
BENCHMARK(BM_RawMultiGetLarge)
    ->Name("RawMultiGetLarge")
    ->Arg(8)
    ->Arg(32)
    ->Setup(setup_large)
    ->UseRealTime()
    ->MinTime(kMinTimeSeconds);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_read.reset();  // closes the read stores, then removes their directories
  g_large.reset();
  return 0;
}
