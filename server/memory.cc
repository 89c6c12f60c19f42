#include "server/memory.h"

#include <malloc.h>

#include <cstdlib>

namespace chaise::server {

void tune_malloc() {
  if (std::getenv("GLIBC_TUNABLES") != nullptr) return;
  mallopt(M_ARENA_MAX, 4);
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
}

MemoryTrimmer::MemoryTrimmer(std::chrono::milliseconds period) {
  thread_ = std::thread([this, period] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
      lock.unlock();
      malloc_trim(0);
      lock.lock();
    }
  });
}

MemoryTrimmer::~MemoryTrimmer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace chaise::server
