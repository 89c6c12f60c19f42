// storage/tsan_rocksdb.h — telling ThreadSanitizer about memory RocksDB hands out.
//
// Debian's librocksdb is not built with -fsanitize=thread, and tests/tsan.supp ignores what it
// calls (called_from_lib), its own mutexes included. So TSan cannot see that a block one thread
// decompressed into the block cache reaches the next reader under the cache's lock: a point read
// by another thread, copying the value out of that block (std::string::assign inside
// rocksdb::DB::Get, or our copy of a pinned value), is reported as a race with the allocation
// (design_test ViewTest.ManyRowsPerDocumentStillBuild: the commit thread reading a counter's
// base). Inside an IgnoreRocksDbReads scope this thread's reads are not checked; its writes
// still are. Only point reads are wrapped: a Get and the copy of its value, nothing else of ours.
// Outside TSan builds the scope is empty.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define CHAISE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CHAISE_TSAN 1
#endif
#endif

#ifdef CHAISE_TSAN
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif

namespace chaise::storage {

class IgnoreRocksDbReads {
 public:
#ifdef CHAISE_TSAN
  IgnoreRocksDbReads() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__); }
  ~IgnoreRocksDbReads() { AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
#else
  IgnoreRocksDbReads() {}  // user-provided: a scope object, not an unused variable
#endif
  IgnoreRocksDbReads(const IgnoreRocksDbReads&) = delete;
  IgnoreRocksDbReads& operator=(const IgnoreRocksDbReads&) = delete;
};

}  // namespace chaise::storage
