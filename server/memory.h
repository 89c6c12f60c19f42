// server/memory.h — the process's heap: which allocator, and how it gives memory back to the OS.
//
// The server allocates through jemalloc (linked in; sanitizer builds keep their own allocator).
// glibc's malloc, with its arenas limited, was a fifth of a PUT's instructions on the request
// threads (callgrind: _int_free, malloc, malloc_consolidate), and with jemalloc the same binary
// served 40% more PUTs, twice the _bulk_docs and 1.5-2x the streams (bench/README.md), at the
// same RSS. jemalloc is configured for a small, steady footprint: two arenas, freed pages
// returned within about a quarter of a second by its background thread, blocks of 1 MiB and more
// as they are freed (the `malloc_conf` in memory.cc; MALLOC_CONF in the environment overrides
// it).
//
// Without jemalloc (sanitizer builds), glibc's malloc keeps freed memory in up to eight arenas per
// core and raises its mmap threshold after large blocks are freed, which left RSS at two to three
// times the live heap. tune_malloc() then limits the arenas and fixes the threshold, and
// MemoryTrimmer returns the free pages inside them every few seconds (malloc_trim).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace chaise::server {

// glibc: four arenas, a fixed 256 KiB mmap threshold (larger blocks are mapped and returned
// whole), a 1 MiB trim threshold; nothing when GLIBC_TUNABLES is set (the operator's settings
// win). jemalloc: nothing (configured at load). Call first thing in main(), before any thread
// starts.
void tune_malloc();

// Which allocator serves the heap and how it is set, for the startup log line.
std::string allocator_description();

// glibc: calls malloc_trim(0) every `period` on a thread of its own, until destroyed. jemalloc:
// nothing (its background thread returns freed pages).
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
