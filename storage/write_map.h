// storage/write_map.h — the buffered writes of one transaction (and of one commit batch), readable
// in key order so reads can overlay them on a snapshot (read-your-writes).
//
// State = a set of disjoint cleared ranges, then point writes on top of them. Invariants:
// - a point write of kind `atomic` (ops on an unknown base) never lies inside a cleared range: when
// the
//   base is known (a set, a clear, a cleared range) the op is evaluated at once into a `set`;
// - clear_range erases the point writes inside it, so a point write inside a cleared range was made
//   after the clear and wins over it.
// Applying a WriteMap = clear every cleared range, then apply every point write.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chaise::storage {

struct KeyRange {
  std::string begin;  // inclusive
  std::string end;    // exclusive
};

// The key right after `key` in byte order: key + '\0'. [key, key_after(key)) is the one-key range.
std::string key_after(std::string_view key);

enum class MutationType : std::uint8_t { add, max, min };

struct AtomicOp {
  MutationType type;
  std::string operand;
};

// FoundationDB's atomic op semantics on little-endian integers of the operand's width: the base is
// truncated or zero-extended to the operand's width; an absent base is zero for add and yields the
// operand for max/min. Returns the new value.
std::string apply_atomic(const std::optional<std::string_view>& base, const AtomicOp& op);

struct PointWrite {
  enum class Kind : std::uint8_t { set, clear, atomic, versionstamped_value };
  Kind kind = Kind::set;
  std::string value;          // set: the value; versionstamped_value: the template (with offset)
  std::vector<AtomicOp> ops;  // atomic: ops to apply, in order, to the committed base
};

struct VersionstampedKey {
  std::string key_template;  // with the 4-byte little-endian offset suffix
  std::string value;
};

// Disjoint, non-adjacent, sorted half-open ranges.
class RangeSet {
 public:
  void add(std::string_view begin, std::string_view end);
  // The range containing `key`, or nullptr.
  const std::pair<const std::string, std::string>* find(std::string_view key) const;
  bool empty() const { return ranges_.empty(); }
  void clear() { ranges_.clear(); }
  const std::map<std::string, std::string, std::less<>>& ranges() const { return ranges_; }

 private:
  std::map<std::string, std::string, std::less<>> ranges_;  // begin -> end
};

class WriteMap {
 public:
  using Points = std::map<std::string, PointWrite, std::less<>>;

  WriteMap() = default;
  // Copies and moves leave the insertion hint behind (it points into one map's nodes).
  WriteMap(const WriteMap& other);
  WriteMap(WriteMap&& other) noexcept;
  WriteMap& operator=(const WriteMap& other);
  WriteMap& operator=(WriteMap&& other) noexcept;

  void set(std::string_view key, std::string_view value);
  void clear(std::string_view key);
  void clear_range(std::string_view begin, std::string_view end);
  // False, changing nothing, when the key holds a versionstamped value (its base is unreadable).
  bool atomic(std::string_view key, AtomicOp op);
  void set_versionstamped_value(std::string_view key, std::string_view value_template);

  // What this map knows of `key`.
  enum class Known : std::uint8_t { unknown, absent, value, atomic, unreadable };
  struct Lookup {
    Known known = Known::unknown;
    const PointWrite* write = nullptr;  // for value (kind set), atomic, unreadable
  };
  Lookup lookup(std::string_view key) const;

  const Points& points() const { return points_; }
  // The point writes, to change in place (the commit thread evaluates atomic and versionstamped
  // writes into sets where they are). Keys stay as they are.
  Points& points_to_evaluate() { return points_; }
  const RangeSet& cleared() const { return cleared_; }
  bool empty() const { return points_.empty() && cleared_.empty(); }
  void reset() {
    points_.clear();
    cleared_.clear();
    hint_.reset();
  }

 private:
  // The entry for `key`, added if absent. Keys written in ascending order (a sorted map merged
  // into another, a transaction's run of versionstamped keys) go next to the last one without a
  // search when nothing lies between: two comparisons instead of a dozen on long shared prefixes.
  PointWrite& slot(std::string_view key);

  Points points_;
  RangeSet cleared_;
  std::optional<Points::iterator> hint_;  // the entry slot() returned last
};

}  // namespace chaise::storage
