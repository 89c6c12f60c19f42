// storage/subspace.h — a key prefix under which tuples are packed: FoundationDB's Subspace.
//
// A subspace is raw prefix bytes (usually themselves a packed tuple). Its keys are prefix +
// pack(t); unpack() strips the prefix. Plain value type: copyable, no shared state, no
// thread-safety concerns beyond those of std::string.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "storage/error.h"
#include "storage/tuple.h"

namespace chaise::storage {

class Subspace {
 public:
  Subspace() = default;  // empty prefix: the whole keyspace
  // prefix = raw_prefix + t.pack()
  explicit Subspace(const Tuple& t, std::string_view raw_prefix = {});
  static Subspace from_raw(std::string_view raw_prefix);

  // The raw prefix bytes.
  const std::string& key() const { return prefix_; }

  // The subspace prefix + t.pack().
  Subspace sub(const Tuple& t) const;

  // prefix + t.pack(). pack() with no argument is the prefix itself.
  std::string pack(const Tuple& t = {}) const;

  // prefix + t.pack() + 4-byte little-endian offset of the incomplete versionstamp, the offset
  // counted from the start of the key (prefix included). Errors as Tuple::pack_with_versionstamp.
  Result<std::string> pack_with_versionstamp(const Tuple& t) const;

  // The tuple packed after the prefix, or nullopt if `key` does not start with the prefix or the
  // rest is not a canonical tuple encoding. The prefix itself unpacks to the empty tuple.
  std::optional<Tuple> unpack(std::string_view key) const;

  // True if `key` starts with the prefix (the prefix itself included).
  bool contains(std::string_view key) const;

  // FoundationDB's range(t): [prefix + pack(t) + "\x00", prefix + pack(t) + "\xff"), the keys of
  // every tuple that extends t in this subspace. It excludes the key prefix + pack(t) itself. (Not
  // every key that starts with prefix + pack(t) lies inside: those continuing with 0xff do not; no
  // tuple encoding starts with 0xff.)
  std::pair<std::string, std::string> range(const Tuple& t = {}) const;

 private:
  std::string prefix_;
};

}  // namespace chaise::storage
