#include "storage/rocksdb/families.h"

#include <algorithm>

#include "storage/tuple.h"
#include "storage/tuple_prefix.h"

namespace chaise::storage {

Families::Families(std::int64_t top, std::vector<std::int64_t> subspaces)
    : top_(top), subspaces_(std::move(subspaces)) {
  std::sort(subspaces_.begin(), subspaces_.end());
  subspaces_.erase(std::unique(subspaces_.begin(), subspaces_.end()), subspaces_.end());
  for (std::int64_t s : subspaces_) packed_.push_back(Tuple().add(s).pack());
  top_begin_ = Tuple().add(top_).pack();
  top_end_ = strinc(top_begin_);
}

namespace {

// Whether `end` <= `prefix` + 0xff, without building that key.
bool at_most_prefix_then_ff(std::string_view end, std::string_view prefix) {
  const std::string_view head = end.substr(0, prefix.size());
  if (head != prefix) return head < prefix;
  return end.size() <= prefix.size() + 1 || static_cast<std::uint8_t>(end[prefix.size()]) != 0xff;
}

}  // namespace

std::optional<std::string_view> Families::third_element(std::string_view key) const {
  if (!key.starts_with(top_begin_)) return std::nullopt;
  const auto second_end = tuple_prefix_length(key, 2);
  if (!second_end) return std::nullopt;
  const auto third_size = tuple_prefix_length(key.substr(*second_end), 1);
  if (!third_size) return std::nullopt;
  return key.substr(*second_end, *third_size);
}

std::size_t Families::of_element(std::string_view third) const {
  for (std::size_t i = 0; i < packed_.size(); ++i)
    if (third == packed_[i]) return i + 1;
  return 0;
}

std::size_t Families::of_key(std::string_view key) const {
  if (subspaces_.empty()) return 0;
  const auto third = third_element(key);
  return third ? of_element(*third) : 0;
}

std::optional<std::size_t> Families::of_range(std::string_view begin, std::string_view end) const {
  if (subspaces_.empty()) return 0;
  // Wholly before or after the keys that start with `top`: none of them is in a subspace's family.
  if (end <= top_begin_ || begin >= top_end_) return 0;
  const auto third = third_element(begin);
  if (!third) return std::nullopt;
  // Every key of [begin, end) starts with begin's three elements when end <= them + 0xff (a key
  // that does not start with them sorts before them, or at or after them + 0xff), and every such
  // key has those three elements as its own first three: one family.
  const std::string_view prefix =
      begin.substr(0, static_cast<std::size_t>(third->data() + third->size() - begin.data()));
  if (!at_most_prefix_then_ff(end, prefix)) return std::nullopt;
  return of_element(*third);
}

std::string Families::name(std::size_t family) const {
  if (family == 0) return "default";
  return "subspace-" + std::to_string(subspaces_.at(family - 1));
}

std::string Families::describe() const {
  if (subspaces_.empty()) return "families 1: one";
  std::string out = "families 1: top " + std::to_string(top_) + ", subspaces";
  for (std::int64_t s : subspaces_) out += " " + std::to_string(s);
  return out;
}

}  // namespace chaise::storage
