// storage/rocksdb/memtable.h — the memtable representation of the store's column families: an
// ordered skip list with one inserting thread and any number of concurrent readers.
//
// Why not RocksDB's own (SkipListFactory): Debian's librocksdb is built without NDEBUG, so its
// InlineSkipList checks every search step and every insert with extra key comparisons (asserts),
// each through a virtual comparator that also counts into a thread-local perf context. In
// callgrind that made the memtable 17% of a PUT and a quarter of a GET of a recent document
// (bench/README.md, "The memtable"). This one compares keys inline and inserts from where the
// previous insert went when keys come in order (a commit batch writes its keys sorted).
//
// Point reads of the families read by key (a document's by_id entry and body) can go through a
// hash index of the memtable's user keys beside the skip list (index_slots, rounded up to a power
// of two; 0: none): a GET of a recently written document then finds each of its two keys in one
// or two cache misses instead of a search down the list.
//
// Limits, which storage::Engine meets: the column family's comparator is the default bytewise
// one (internal keys are then ordered by user key bytes, then sequence and type descending), and
// inserts do not run concurrently (DBOptions::allow_concurrent_memtable_write = false: RocksDB's
// write group then has one thread insert at a time).
#pragma once

#include <rocksdb/memtablerep.h>

#include <cstddef>
#include <memory>

namespace chaise::storage {

std::shared_ptr<rocksdb::MemTableRepFactory> ordered_memtable_factory(std::size_t index_slots = 0);

}  // namespace chaise::storage
