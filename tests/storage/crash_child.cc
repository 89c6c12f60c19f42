// crash_child <dbdir> <seed> — the victim process of durability_test.
//
// Opens the Database at <dbdir> (fsync on) and commits transactions from kThreads threads until it is
// killed (or kRunTimeMax passes, so a forgotten child cannot run forever). Each transaction has a
// unique id and writes, atomically:
//
//   t/<id>/a, t/<id>/b, t/<id>/c   value "<field>:<id>" (field = a, b, c)
//   count                          atomic add of 1 (8-byte little-endian int64)
//   vs/<versionstamp>              value <id>   (set_versionstamped_key)
//
// id grammar (fixed width, so ids sort by seed, then thread, then counter):
//   id      = seed "." thread "." counter
//   seed    = 16 lowercase hex digits (argv[2]; the test passes a different seed to every incarnation)
//   thread  = 2 decimal digits
//   counter = 8 lowercase hex digits, 0, 1, 2... per thread
//
// Every thread commits its transactions one after another, so counter n+1 is committed only after
// counter n was acknowledged. After commit() succeeds the thread writes "ACK <id>\n" to stdout with one
// write(2) (shorter than PIPE_BUF, so lines from different threads never interleave and nothing sits in
// a user-space buffer when the process is killed).
//
// Exit status: killed by the test (the normal end); 1 usage; 2 Database::open failed; 3 a commit
// failed (blind writes never conflict, so any error is a bug); 4 stdout failed; 5 ran kRunTimeMax.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "storage/database.h"

namespace {

using chaise::storage::Database;
using chaise::storage::Options;
using chaise::storage::Transaction;

constexpr int kThreads = 4;
constexpr auto kRunTimeMax = std::chrono::seconds(60);

// Writes all of `s` to fd 1; exits on failure (the reader is gone: nothing left to report to).
void write_stdout(const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(STDOUT_FILENO, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) std::_Exit(4);
    done += static_cast<std::size_t>(n);
  }
}

void fail(int code, const std::string& what) {
  std::string msg = "crash_child: " + what + "\n";
  (void)!::write(STDERR_FILENO, msg.data(), msg.size());
  std::_Exit(code);
}

std::string make_id(std::uint64_t seed, int thread, std::uint32_t counter) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016" PRIx64 ".%02d.%08" PRIx32, seed, thread, counter);
  return buf;
}

// "vs/" + 10 placeholder bytes + the 4-byte little-endian offset (3) of the placeholder.
std::string versionstamped_key_template() {
  std::string t = "vs/";
  const std::uint32_t offset = static_cast<std::uint32_t>(t.size());
  t.append(chaise::storage::kVersionstampSize, '\0');
  for (int i = 0; i < 4; ++i) t.push_back(static_cast<char>((offset >> (8 * i)) & 0xff));
  return t;
}

void commit_loop(Database* db, std::uint64_t seed, int thread,
                 std::chrono::steady_clock::time_point deadline) {
  const std::string vs_template = versionstamped_key_template();
  for (std::uint32_t counter = 0;; ++counter) {
    if (std::chrono::steady_clock::now() > deadline) std::_Exit(5);
    const std::string id = make_id(seed, thread, counter);
    Transaction tr = db->create_transaction();
    for (const char* field : {"a", "b", "c"})
      tr.set("t/" + id + "/" + field, std::string(field) + ":" + id);
    tr.add("count", std::int64_t{1});
    tr.set_versionstamped_key(vs_template, id);
    auto r = tr.commit();
    if (!r.ok())
      fail(3,
           "commit of " + id + " failed: " + std::string(chaise::storage::error_name(r.error())));
    write_stdout("ACK " + id + "\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) fail(1, "usage: crash_child <dbdir> <seed>");
  char* end = nullptr;
  errno = 0;
  const std::uint64_t seed = std::strtoull(argv[2], &end, 10);
  if (errno != 0 || end == argv[2] || *end != '\0') fail(1, "bad seed");

  Options options;
  options.fsync = true;
  auto db = Database::open(argv[1], options);
  if (!db.ok()) fail(2, "open failed: " + std::string(chaise::storage::error_name(db.error())));

  const auto deadline = std::chrono::steady_clock::now() + kRunTimeMax;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back(commit_loop, db->get(), seed, t, deadline);
  for (auto& t : threads) t.join();  // never returns: the threads end the process
  return 0;
}
