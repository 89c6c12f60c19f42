// Crash durability of the commit pipeline: kill -9 a committing process (crash_child.cc, which
// documents the keys each transaction writes and the id grammar) at random moments, reopen, and check
// that every acknowledged transaction survived and that no transaction is partially visible.
//
// Each cycle: fork/exec crash_child on the same data directory with a new incarnation number (its
// "seed", 1, 2, 3..., the prefix of its ids), let it run 20-300 ms, SIGKILL it, read its ACK lines
// until EOF, reopen the Database here and check:
//   - all of t/<id>/{a,b,c} or none, with the right values; every ACKed id present;
//   - per (incarnation, thread), the present counters are 0..m-1 (commits of one thread are sequential,
//     so a hole means an acknowledged commit was lost behind a later one);
//   - "count" == number of transactions present == number of vs/ keys, each vs/ key naming one of them;
//   - vs/ keys (versionstamps) sort in commit order: by incarnation, and by counter within a thread;
//     a new incarnation's versionstamps are above the committed_version seen before it started, and the
//     largest equals committed_version (every batch writes vs/ keys and the version together);
//   - committed_version never goes backwards, and ids present once stay present.
//
// The kill moments come from a fixed seed (printed; override with CHAISE_DURABILITY_SEED=<n>).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "storage/database.h"
#include "tests/storage/temp_dir.h"

namespace chaise::storage {
namespace {

constexpr int kCycles = 40;
// ThreadSanitizer slows the child's start (its runtime, then the store's open) past 300 ms, after
// which no cycle would see an acknowledgement.
#if defined(__SANITIZE_THREAD__)
constexpr int kRunMsScale = 5;
#else
constexpr int kRunMsScale = 1;
#endif
constexpr int kRunMsMin = 20 * kRunMsScale;
constexpr int kRunMsMax = 300 * kRunMsScale;
constexpr std::uint64_t kDefaultSeed = 20240601;
// Bound on what one child incarnation may print (an ACK line is 33 bytes).
constexpr std::size_t kChildOutputBytesMax = 64u << 20;
constexpr std::size_t kIdSize = 28;  // 16 hex "." 2 digits "." 8 hex

// A parsed id (grammar in crash_child.cc).
struct TxnId {
  std::uint64_t incarnation = 0;
  int thread = 0;
  std::uint32_t counter = 0;
};

bool parse_id(const std::string& id, TxnId& out) {
  if (id.size() != kIdSize || id[16] != '.' || id[19] != '.') return false;
  auto all_of = [&](std::size_t pos, std::size_t n, const char* set) {
    return id.find_first_not_of(set, pos) >= pos + n;
  };
  if (!all_of(0, 16, "0123456789abcdef") || !all_of(17, 2, "0123456789") ||
      !all_of(20, 8, "0123456789abcdef"))
    return false;
  out.incarnation = std::stoull(id.substr(0, 16), nullptr, 16);
  out.thread = std::stoi(id.substr(17, 2));
  out.counter = static_cast<std::uint32_t>(std::stoul(id.substr(20, 8), nullptr, 16));
  return true;
}

std::uint64_t decode_be64(std::string_view s) {
  std::uint64_t v = 0;
  for (char c : s.substr(0, 8)) v = (v << 8) | static_cast<std::uint8_t>(c);
  return v;
}

std::int64_t decode_le64(std::string_view s) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(s[i]);
  return static_cast<std::int64_t>(v);
}

struct ChildRun {
  std::vector<std::string> acked;
  int wait_status = 0;
  bool output_ok = true;  // only whole, well-formed ACK lines
};

// Appends the ids of `out`'s "ACK <id>" lines to run.acked; anything else clears run.output_ok.
void parse_acks(const std::string& out, ChildRun& run) {
  std::size_t pos = 0;
  while (pos < out.size()) {
    std::size_t nl = out.find('\n', pos);
    if (nl == std::string::npos) {
      ADD_FAILURE() << "partial line from child: " << out.substr(pos);
      run.output_ok = false;
      break;
    }
    std::string line = out.substr(pos, nl - pos);
    pos = nl + 1;
    TxnId id;
    if (line.rfind("ACK ", 0) != 0 || !parse_id(line.substr(4), id)) {
      ADD_FAILURE() << "malformed line from child: " << line;
      run.output_ok = false;
      continue;
    }
    run.acked.push_back(line.substr(4));
  }
}

// Starts crash_child on `dir`, lets it run `run_ms`, SIGKILLs it, and collects its ACKs.
ChildRun run_and_kill(const std::string& dir, std::uint64_t incarnation, int run_ms) {
  ChildRun run;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    run.output_ok = false;
    return run;
  }
  const std::string seed_arg = std::to_string(incarnation);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec. Die with the test if it dies first.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::dup2(fds[1], STDOUT_FILENO) < 0) ::_exit(126);
    ::execl(CRASH_CHILD_PATH, "crash_child", dir.c_str(), seed_arg.c_str(), nullptr);
    ::_exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    ::close(fds[0]);
    run.output_ok = false;
    return run;
  }

  std::string out;
  char buf[1 << 16];
  bool eof = false;
  auto read_some = [&] {
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) return;
    if (n <= 0) {
      eof = true;
      return;
    }
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > kChildOutputBytesMax) eof = true;
  };
  // Drain while it runs, so a full pipe never throttles the child.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(run_ms);
  while (!eof) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fds[0], POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r > 0) read_some();
  }
  ::kill(pid, SIGKILL);
  while (!eof) read_some();  // the write end closes when the child is gone
  ::close(fds[0]);
  while (::waitpid(pid, &run.wait_status, 0) < 0 && errno == EINTR) {
  }
  if (out.size() > kChildOutputBytesMax) {
    ADD_FAILURE() << "child printed more than " << kChildOutputBytesMax << " bytes";
    run.output_ok = false;
  }

  parse_acks(out, run);
  return run;
}

// What survives across cycles, to check monotonicity.
struct History {
  std::set<std::string> acked;         // every id ever acknowledged
  std::set<std::string> present;       // ids present at the last verification
  std::int64_t committed_version = 0;  // at the last verification
};

// The transactions present (ids), checking that each has all of t/<id>/{a,b,c} with their values.
std::set<std::string> read_transactions(Transaction& tr) {
  auto rows = tr.get_range("t/", "t0", 0, Reverse::no, Snapshot::yes);
  EXPECT_TRUE(rows.ok()) << error_name(rows.error());
  if (!rows.ok()) return {};
  std::map<std::string, std::string> fields_by_id;
  for (const KeyValue& kv : *rows) {
    const std::string& k = kv.key;
    TxnId id;
    if (k.size() != 2 + kIdSize + 2 || k[2 + kIdSize] != '/' ||
        !parse_id(k.substr(2, kIdSize), id)) {
      ADD_FAILURE() << "unexpected key " << k;
      continue;
    }
    const std::string ids = k.substr(2, kIdSize);
    const std::string field = k.substr(3 + kIdSize);
    EXPECT_EQ(kv.value, field + ":" + ids) << "wrong value at " << k;
    fields_by_id[ids] += field;
  }
  std::set<std::string> present;
  for (const auto& [id, fields] : fields_by_id) {
    EXPECT_EQ(fields, "abc") << "transaction " << id << " is partially visible";
    present.insert(id);
  }
  return present;
}

// Per (incarnation, thread) the counters present are 0..m-1 (ids sort by incarnation, thread,
// counter), and no incarnation is newer than the last one started.
void check_no_holes(const std::set<std::string>& present, std::uint64_t incarnation) {
  std::map<std::pair<std::uint64_t, int>, std::uint32_t> next_counter;
  for (const std::string& ids : present) {
    TxnId id;
    ASSERT_TRUE(parse_id(ids, id));
    EXPECT_LE(id.incarnation, incarnation) << ids;
    std::uint32_t& next = next_counter[{id.incarnation, id.thread}];
    EXPECT_EQ(id.counter, next) << "hole before " << ids
                                << ": a commit acknowledged earlier is lost";
    next = id.counter + 1;
  }
}

// "count" is the number of transactions present.
void check_count(Transaction& tr, const std::set<std::string>& present) {
  auto count = tr.get("count", Snapshot::yes);
  ASSERT_TRUE(count.ok()) << error_name(count.error());
  if (present.empty()) {
    EXPECT_FALSE(count->has_value());
    return;
  }
  ASSERT_TRUE(count->has_value());
  ASSERT_EQ((*count)->size(), 8u);
  EXPECT_EQ(decode_le64(**count), static_cast<std::int64_t>(present.size()));
}

// One vs/ key per transaction present, sorted in commit order; the newest incarnation's versions are
// above `version_before_incarnation`; the largest is `committed`.
void check_versionstamps(Transaction& tr, const std::set<std::string>& present,
                         std::uint64_t incarnation, std::int64_t version_before_incarnation,
                         std::int64_t committed) {
  auto vs = tr.get_range("vs/", "vs0", 0, Reverse::no, Snapshot::yes);
  ASSERT_TRUE(vs.ok()) << error_name(vs.error());
  EXPECT_EQ(vs->size(), present.size());
  std::set<std::string> vs_ids;
  std::map<std::pair<std::uint64_t, int>, std::int64_t> last_counter;
  std::uint64_t last_incarnation = 0;
  std::int64_t max_version = 0;
  for (const KeyValue& kv : *vs) {
    ASSERT_EQ(kv.key.size(), 3 + kVersionstampSize) << "bad versionstamped key";
    const auto version = static_cast<std::int64_t>(decode_be64(kv.key.substr(3, 8)));
    max_version = std::max(max_version, version);
    EXPECT_LE(version, committed);
    TxnId id;
    ASSERT_TRUE(parse_id(kv.value, id)) << "bad vs/ value " << kv.value;
    EXPECT_TRUE(present.count(kv.value)) << "vs/ key for absent transaction " << kv.value;
    EXPECT_TRUE(vs_ids.insert(kv.value).second) << "two vs/ keys for " << kv.value;
    EXPECT_GE(id.incarnation, last_incarnation)
        << "versionstamp of " << kv.value << " sorts before an earlier incarnation's";
    last_incarnation = id.incarnation;
    if (id.incarnation == incarnation) {
      EXPECT_GT(version, version_before_incarnation)
          << "versionstamp of " << kv.value << " reuses a version committed before its process";
    }
    auto [it, fresh] = last_counter.try_emplace({id.incarnation, id.thread}, -1);
    EXPECT_GT(static_cast<std::int64_t>(id.counter), it->second)
        << "versionstamp of " << kv.value << " sorts before its thread's earlier commit";
    it->second = id.counter;
  }
  if (!vs->empty()) {
    EXPECT_EQ(max_version, committed) << "committed_version is not the last batch's";
  }
}

// Opens `dir`, checks everything listed at the top of this file for incarnations <= `incarnation`
// (whose process started when `version_before_incarnation` was the committed version), updates `h`,
// and closes the Database.
void verify(const std::string& dir, std::uint64_t incarnation,
            std::int64_t version_before_incarnation, History& h) {
  auto opened = Database::open(dir, Options{});
  ASSERT_TRUE(opened.ok()) << error_name(opened.error());
  std::unique_ptr<Database> db = std::move(*opened);
  const std::int64_t committed = db->committed_version();
  EXPECT_GE(committed, h.committed_version) << "committed_version went backwards";

  Transaction tr = db->create_transaction();
  std::set<std::string> present = read_transactions(tr);
  // Acknowledged => present; present once => present forever.
  for (const std::string& id : h.acked)
    EXPECT_TRUE(present.count(id)) << "acknowledged transaction " << id << " was lost";
  for (const std::string& id : h.present)
    EXPECT_TRUE(present.count(id)) << "transaction " << id << " was visible before, now lost";
  check_no_holes(present, incarnation);
  check_count(tr, present);
  check_versionstamps(tr, present, incarnation, version_before_incarnation, committed);

  h.present = std::move(present);
  h.committed_version = committed;
}

std::uint64_t test_seed() {
  if (const char* s = std::getenv("CHAISE_DURABILITY_SEED")) return std::strtoull(s, nullptr, 10);
  return kDefaultSeed;
}

TEST(Durability, KilledCommitterLosesNoAcknowledgedTransactionAndShowsNoPartialOne) {
  const std::uint64_t seed = test_seed();
  std::printf("durability seed %llu (set CHAISE_DURABILITY_SEED to change)\n",
              static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> run_ms_dist(kRunMsMin, kRunMsMax);
  TempDir dir("durability");

  // Create the store here, so no cycle kills the child in the middle of creating it.
  {
    auto db = Database::open(dir.path(), Options{});
    ASSERT_TRUE(db.ok()) << error_name(db.error());
    EXPECT_EQ((*db)->committed_version(), 0);
  }

  History h;
  std::size_t acks_total = 0;
  for (int cycle = 0; cycle < kCycles; ++cycle) {
    const std::uint64_t incarnation = static_cast<std::uint64_t>(cycle) + 1;
    const int run_ms = run_ms_dist(rng);
    const std::int64_t version_before = h.committed_version;
    ChildRun run = run_and_kill(dir.path(), incarnation, run_ms);
    ASSERT_TRUE(WIFSIGNALED(run.wait_status) && WTERMSIG(run.wait_status) == SIGKILL)
        << "crash_child did not die of our SIGKILL: wait status " << run.wait_status
        << (WIFEXITED(run.wait_status)
                ? " (exit code " + std::to_string(WEXITSTATUS(run.wait_status)) + ")"
                : std::string());
    ASSERT_TRUE(run.output_ok);
    acks_total += run.acked.size();
    h.acked.insert(run.acked.begin(), run.acked.end());

    verify(dir.path(), incarnation, version_before, h);
    std::printf("cycle %2d: ran %3d ms, %5zu acks, %6zu transactions present, version %lld\n",
                cycle, run_ms, run.acked.size(), h.present.size(),
                static_cast<long long>(h.committed_version));
    if (HasFatalFailure() || HasNonfatalFailure())
      break;  // one cycle's failures are enough to read
  }
  EXPECT_GT(acks_total, 0u) << "the child never acknowledged a commit: nothing was tested";
  EXPECT_EQ(h.acked.size(), acks_total) << "an id was acknowledged twice";
  EXPECT_GE(h.present.size(), h.acked.size());
}

// versionstamped key template: "vs/" + 10 placeholder bytes + offset 3 (little-endian).
std::string vs_template() {
  std::string t = "vs/";
  t.append(kVersionstampSize, '\0');
  t.append(std::string("\x03\x00\x00\x00", 4));
  return t;
}

TEST(Durability, CleanReopenKeepsCommittedVersionAndVersionstampsKeepGrowing) {
  TempDir dir("durability");
  std::int64_t last_version = 0;
  std::string last_vs;
  for (int round = 0; round < 5; ++round) {
    auto opened = Database::open(dir.path(), Options{});
    ASSERT_TRUE(opened.ok()) << error_name(opened.error());
    std::unique_ptr<Database> db = std::move(*opened);
    EXPECT_EQ(db->committed_version(), last_version) << "reopen changed committed_version";

    Transaction tr = db->create_transaction();
    const std::string value = "round " + std::to_string(round);
    tr.set_versionstamped_key(vs_template(), value);
    tr.add("count", std::int64_t{1});
    auto r = tr.commit();
    ASSERT_TRUE(r.ok()) << error_name(r.error());
    EXPECT_GT(r->version, last_version);
    ASSERT_EQ(r->versionstamp.size(), kVersionstampSize);
    EXPECT_GT(r->versionstamp, last_vs) << "versionstamp did not grow across a reopen";
    EXPECT_EQ(static_cast<std::int64_t>(decode_be64(r->versionstamp)), r->version);
    EXPECT_EQ(db->committed_version(), r->version);

    Transaction rd = db->create_transaction();
    auto got = rd.get("vs/" + r->versionstamp);
    ASSERT_TRUE(got.ok()) << error_name(got.error());
    EXPECT_EQ(*got, std::optional<std::string>(value)) << "key does not carry the returned stamp";
    auto all = rd.get_range("vs/", "vs0");
    ASSERT_TRUE(all.ok()) << error_name(all.error());
    ASSERT_EQ(all->size(), static_cast<std::size_t>(round + 1));
    EXPECT_EQ(all->back().key, "vs/" + r->versionstamp) << "newest versionstamp does not sort last";
    auto count = rd.get("count");
    ASSERT_TRUE(count.ok() && count->has_value());
    EXPECT_EQ(decode_le64(**count), round + 1);

    last_version = r->version;
    last_vs = r->versionstamp;
  }
}

}  // namespace
}  // namespace chaise::storage
