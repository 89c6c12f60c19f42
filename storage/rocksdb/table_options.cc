// storage/rocksdb/table_options.cc — see table_options.h.
#include "storage/rocksdb/table_options.h"

#include <rocksdb/filter_policy.h>

#include <utility>

namespace chaise::storage {

rocksdb::BlockBasedTableOptions family_table_options(const Options& options,
                                                     std::shared_ptr<rocksdb::Cache> cache) {
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = std::move(cache);
  if (options.table_index_in_cache) {
    // Partitioned index and filter blocks, cached like data blocks (the partitions' own index
    // pinned): memory stays within block_cache_bytes however large the data grows. The price
    // is a cache lookup per partition a read needs: a GET of a random document among 10,000,000
    // takes 12% more server CPU than with the blocks held, PUT 3-5% more (bench/README.md,
    // "Scale"; measured with distinct ids, since repeated ids hide the lookups).
    table.cache_index_and_filter_blocks = true;
    table.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
    table.partition_filters = true;
    table.metadata_block_size = 4096;
    table.pin_top_level_index_and_filter = true;
    table.pin_l0_filter_and_index_blocks_in_cache = true;
    table.cache_index_and_filter_blocks_with_high_priority = true;
  } else {
    // Beside the cache, but charged to it: the data blocks it keeps make room as the tables'
    // index and filter blocks grow, so the two together stay within block_cache_bytes until
    // those blocks alone outgrow it (about 15,000,000 small documents).
    table.cache_usage_options.options_overrides.insert(
        {rocksdb::CacheEntryRole::kBlockBasedTableReader,
         {rocksdb::CacheEntryRoleOptions::Decision::kEnabled}});
  }
  // Ribbon filters below level 0: about 30% smaller than Bloom at the same false-positive rate,
  // for more CPU when a compaction builds them; level 0 (every flush) keeps the cheaper Bloom.
  table.filter_policy.reset(rocksdb::NewRibbonFilterPolicy(10, /*bloom_before_level=*/1));
  // With a prefix extractor the filters hold prefixes only: a point read is filtered by its
  // key's prefix, which for this keyspace is the key itself (by_id, counters) or one document's
  // revisions or body. Whole keys as well made the filters 1.6x larger for no read they served
  // (2,000,000 documents: table readers 20.8 -> 13.0 MiB, GET and _bulk_docs no slower).
  table.whole_key_filtering = options.bloom_prefix_tuple_elements == 0;
  // Index blocks with a full key every 16 entries, the others keeping only what differs from the
  // key before (RocksDB's default is a full key in every entry). Keys here share long prefixes,
  // so the open tables' index takes about half the memory: 12.9 -> 6.4 MiB at 3,000,000
  // documents, leaving the rest of the block cache to data blocks (GET there 28,980 -> 33,638
  // req/s; no slower on a small database). A seek in the index scans up to 15 entries more.
  table.index_block_restart_interval = 16;
  return table;
}

rocksdb::BlockBasedTableOptions hit_family_table_options(rocksdb::BlockBasedTableOptions table) {
  // The hit families' data blocks also carry a hash index of their keys beside the binary-search
  // restarts (RocksDB's DataBlockHashIndex): a point read, as every GET makes of by_id and the
  // body, finds its key in the block by one probe instead of a binary search and a scan.
  // Iterators still seek by binary search, so the families read by range alone do without it.
  // 3,000,000 documents, GET of random ones: 47 -> 43 us of server CPU per request; the open
  // tables' memory unchanged (the index lives in the data blocks, a few percent larger: 200,000
  // documents took 29 -> 30 MiB on disk with it in every family).
  table.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  table.data_block_hash_table_util_ratio = 0.75;
  return table;
}

}  // namespace chaise::storage
