// server/memory.h — how the process's heap gives memory back to the OS.
//
// glibc's malloc keeps freed memory in up to eight arenas per core and raises its mmap threshold
// after large blocks are freed, so large buffers then come from (and stay in) the arenas. Under
// bench/http/run.sh's workloads that left RSS at two to three times the live heap (98 MB held for
// 40 MB in use after _bulk_docs). tune_malloc() limits the arenas and fixes the threshold;
// MemoryTrimmer returns the free pages inside the arenas every few seconds (malloc_trim), which
// brought RSS after that workload from 119 to 75 MiB.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace chaise::server {

// Four arenas, a fixed 256 KiB mmap threshold (larger blocks are mapped and returned whole), a
// 1 MiB trim threshold. Does nothing when GLIBC_TUNABLES is set: the operator's settings win.
// Call first thing in main(), before any thread starts.
void tune_malloc();

// Calls malloc_trim(0) every `period` on a thread of its own, until destroyed.
class MemoryTrimmer {
 public:
  explicit MemoryTrimmer(std::chrono::milliseconds period);
  ~MemoryTrimmer();
  MemoryTrimmer(const MemoryTrimmer&) = delete;
  MemoryTrimmer& operator=(const MemoryTrimmer&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace chaise::server
