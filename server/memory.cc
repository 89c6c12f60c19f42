#include "server/memory.h"

#include <malloc.h>

#include <cstdlib>

#ifdef CHAISE_JEMALLOC
#include <jemalloc/jemalloc.h>

// Read by jemalloc when it initializes (before main). Two arenas for a 2-core server's threads;
// pages freed are returned to the OS within about a quarter of a second, by jemalloc's own
// background thread (created with every signal blocked, so sigwait in main still receives
// SIGTERM). _bulk_docs at 95,000 docs/s frees hundreds of MB a second: with 1 s the server held
// 97-103 MiB after it, with 250 ms 87-88 MiB at the same rate; with 0 (every free returned at
// once) the rate halved. Allocations of 1 MiB and more (memtable arena blocks, above all: the
// memtables' hash index and 1 MiB blocks, a new set every flush) go to jemalloc's arena for large
// ones, which returns them as they are freed: run.sh's peak RSS during _bulk_docs 97-99 -> 88-90
// MiB at the same rate; at 4 MiB the peak did not move.
extern "C" {
const char* malloc_conf =
    "narenas:2,dirty_decay_ms:250,muzzy_decay_ms:0,background_thread:true,"
    "oversize_threshold:1048576";
}
#endif

namespace chaise::server {

void tune_malloc() {
#ifndef CHAISE_JEMALLOC
  if (std::getenv("GLIBC_TUNABLES") != nullptr) return;
  mallopt(M_ARENA_MAX, 4);
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
#endif
}

std::string allocator_description() {
#ifdef CHAISE_JEMALLOC
  unsigned narenas = 0;
  bool background = false;
  std::size_t n = sizeof(narenas), b = sizeof(background);
  const char* version = nullptr;
  std::size_t v = sizeof(version);
  std::size_t oversize = 0, o = sizeof(oversize);
  if (mallctl("opt.narenas", &narenas, &n, nullptr, 0) != 0 ||
      mallctl("background_thread", &background, &b, nullptr, 0) != 0 ||
      mallctl("version", &version, &v, nullptr, 0) != 0 ||
      mallctl("opt.oversize_threshold", &oversize, &o, nullptr, 0) != 0)
    return "jemalloc (settings unreadable)";
  return std::string("jemalloc ") + version + ", " + std::to_string(narenas) + " arenas, " +
         (background ? "background purging" : "no background purging") + ", blocks of " +
         std::to_string(oversize >> 10) + " KiB and more returned at once";
#else
  return "glibc malloc, trimmed every few seconds";
#endif
}

MemoryTrimmer::MemoryTrimmer(std::chrono::milliseconds period) {
#ifdef CHAISE_JEMALLOC
  (void)period;
#else
  thread_ = std::thread([this, period] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
      lock.unlock();
      malloc_trim(0);
      lock.lock();
    }
  });
#endif
}

MemoryTrimmer::~MemoryTrimmer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace chaise::server
