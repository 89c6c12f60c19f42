// storage/rocksdb/table_options.h — the block-based table options the engine gives its column
// families (storage/rocksdb/engine.cc), shared with bench/storage_bench.cc so that its raw-RocksDB
// stores build and read tables exactly as the engine does. Pulls in RocksDB: storage/rocksdb/ and
// bench/ only.
#pragma once

#include <rocksdb/cache.h>
#include <rocksdb/table.h>

#include <memory>

#include "storage/database.h"

namespace chaise::storage {

// Every family's table options under `options` (table_index_in_cache, bloom_prefix_tuple_elements),
// reading through `cache`, the block cache all families share.
rocksdb::BlockBasedTableOptions family_table_options(const Options& options,
                                                     std::shared_ptr<rocksdb::Cache> cache);

// `table` for the families read by key (Options::family_hit_subspaces).
rocksdb::BlockBasedTableOptions hit_family_table_options(rocksdb::BlockBasedTableOptions table);

}  // namespace chaise::storage
