// storage/rocksdb/families.h — which RocksDB column family holds a key.
//
// Keys are one ordered keyspace to every reader; underneath, the keys of a few busy subspaces
// live in column families of their own. Why: a flush writes one level-0 table per column family.
// With every subspace in one family, each flush's table spans them all (a document's revisions,
// its body, by_id, the changes feed), so every compaction out of level 0 overlapped, and rewrote,
// most of the level below, even when ids and sequences arrive in order. Apart, each subspace's
// tables hold one ascending run each and mostly move down without being rewritten.
//
// The rule (Options::family_top, Options::family_subspaces): a key that is a packed tuple whose
// first element is the integer `top` and whose third element is an integer s listed in
// `subspaces` lives in family s; every other key in family 0 (RocksDB's "default"). For Chaise
// that is (kDatabases, DbId, subspace, ...). Only the key's bytes decide, so the rule is a pure
// function of the key.
//
// Plain value type, immutable after construction: safe to share between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chaise::storage {

class Families {
 public:
  // No subspaces: one family (0) for every key.
  Families() = default;
  Families(std::int64_t top, std::vector<std::int64_t> subspaces);

  // How many families: 1 + the number of distinct subspaces.
  std::size_t size() const { return 1 + subspaces_.size(); }
  // The family of `key`: 0, or 1 + the index of its subspace in the (sorted, distinct) list.
  std::size_t of_key(std::string_view key) const;
  // The one family every key of [begin, end) belongs to, when the range provably lies in one
  // (inside one (top, x, s) prefix, or wholly before or after the keys that start with `top`);
  // nullopt when it may span several (a reader then merges them all).
  std::optional<std::size_t> of_range(std::string_view begin, std::string_view end) const;
  // The subspace a family holds: s for family 1 + (index of s), nullopt for family 0.
  std::optional<std::int64_t> subspace(std::size_t family) const {
    if (family == 0 || family > subspaces_.size()) return std::nullopt;
    return subspaces_[family - 1];
  }
  // RocksDB's name of a family's column family: "default", or "subspace-<s>".
  std::string name(std::size_t family) const;
  // The rule as text, stored beside the data: a store opened with another rule moves its keys.
  std::string describe() const;

 private:
  // The bytes of `key`'s third element when its first is `top` and the first three parse.
  std::optional<std::string_view> third_element(std::string_view key) const;
  // The family of a packed third element: 1 + its index in packed_, or 0.
  std::size_t of_element(std::string_view third) const;

  std::int64_t top_ = 0;
  std::vector<std::int64_t> subspaces_;  // sorted, distinct
  std::vector<std::string> packed_;      // each subspace packed as a one-element tuple
  std::string top_begin_;                // pack((top)): the first key that starts with it
  std::string top_end_;                  // strinc(top_begin_)
};

}  // namespace chaise::storage
