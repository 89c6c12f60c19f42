// storage/tuple_prefix.h — the prefix of a key that RocksDB's prefix bloom filters are built on.
//
// A range read that stays inside one document (its revisions, its body chunks) is the common
// case, and it is usually empty for a new document: without a filter RocksDB positions an
// iterator in every sorted run to find nothing. With Options::bloom_prefix_tuple_elements = N,
// the tables also record a bloom filter of each key's first N tuple elements, and a range read
// whose two bounds share those N elements skips the runs that hold no key with them.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace chaise::storage {

// The length in bytes of the first `elements` elements of the packed tuple `key`, when each of
// them is an integer of up to 8 bytes, a string or a byte string (nothing else is parsed); else
// nullopt. Bytes after them are not looked at, and a string followed by the key's last byte 0xff
// ends there, so both bounds of a range (pack(t) + 0x00, pack(t) + 0xff) have the prefix of the
// keys inside it.
std::optional<std::size_t> tuple_prefix_length(std::string_view key, std::size_t elements);

}  // namespace chaise::storage
