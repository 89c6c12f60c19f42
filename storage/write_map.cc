#include "storage/write_map.h"

#include <cassert>

namespace chaise::storage {

std::string key_after(std::string_view key) {
  std::string k(key);
  k.push_back('\0');
  return k;
}

// Atomic operands and bases are little-endian integers of the operand's width (FoundationDB's
// rule):
//   add: (base + operand) mod 2^(8*width), two's complement, so negative deltas work;
//   max/min: compared as unsigned little-endian integers of that width.
std::string apply_atomic(const std::optional<std::string_view>& base, const AtomicOp& op) {
  const std::string& operand = op.operand;
  const std::size_t width = operand.size();
  if (!base) return operand;  // absent: zero + operand for add; the operand itself for max/min
  std::string b(width, '\0');
  for (std::size_t i = 0; i < width && i < base->size(); ++i) b[i] = (*base)[i];
  switch (op.type) {
    case MutationType::add: {
      unsigned carry = 0;
      for (std::size_t i = 0; i < width; ++i) {
        unsigned sum =
            static_cast<std::uint8_t>(b[i]) + static_cast<std::uint8_t>(operand[i]) + carry;
        b[i] = static_cast<char>(sum & 0xff);
        carry = sum >> 8;
      }
      return b;
    }
    case MutationType::max:
    case MutationType::min: {
      int cmp = 0;  // compare from the most significant byte (the last one)
      for (std::size_t i = width; i-- > 0 && cmp == 0;) {
        auto x = static_cast<std::uint8_t>(b[i]), y = static_cast<std::uint8_t>(operand[i]);
        cmp = x < y ? -1 : (x > y ? 1 : 0);
      }
      bool keep_base = op.type == MutationType::max ? cmp >= 0 : cmp <= 0;
      return keep_base ? b : operand;
    }
  }
  assert(false);
  return operand;
}

void RangeSet::add(std::string_view begin, std::string_view end) {
  if (begin >= end) return;
  std::string b(begin), e(end);
  // Merge with every range that overlaps or touches [b, e).
  auto it = ranges_.upper_bound(b);
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->second >= b) it = prev;
  }
  while (it != ranges_.end() && it->first <= e) {
    if (it->first < b) b = it->first;
    if (it->second > e) e = it->second;
    it = ranges_.erase(it);
  }
  ranges_.emplace(std::move(b), std::move(e));
}

const std::pair<const std::string, std::string>* RangeSet::find(std::string_view key) const {
  auto it = ranges_.upper_bound(key);
  if (it == ranges_.begin()) return nullptr;
  --it;
  return key < it->second ? &*it : nullptr;
}

WriteMap::WriteMap(const WriteMap& other) : points_(other.points_), cleared_(other.cleared_) {}

WriteMap::WriteMap(WriteMap&& other) noexcept
    : points_(std::move(other.points_)), cleared_(std::move(other.cleared_)) {
  other.reset();
}

WriteMap& WriteMap::operator=(const WriteMap& other) {
  if (this != &other) {
    points_ = other.points_;
    cleared_ = other.cleared_;
    hint_.reset();
  }
  return *this;
}

WriteMap& WriteMap::operator=(WriteMap&& other) noexcept {
  if (this != &other) {
    points_ = std::move(other.points_);
    cleared_ = std::move(other.cleared_);
    hint_.reset();
    other.reset();
  }
  return *this;
}

PointWrite& WriteMap::slot(std::string_view key) {
  if (hint_) {
    const Points::iterator last = *hint_;
    if (last->first == key) return last->second;
    const Points::iterator next = std::next(last);
    if (last->first < key && (next == points_.end() || key <= next->first)) {
      hint_ = next != points_.end() && next->first == key
                  ? next
                  : points_.emplace_hint(next, std::string(key), PointWrite{});
      return (*hint_)->second;
    }
  }
  auto it = points_.lower_bound(key);
  if (it == points_.end() || it->first != key)
    it = points_.emplace_hint(it, std::string(key), PointWrite{});
  hint_ = it;
  return it->second;
}

void WriteMap::set(std::string_view key, std::string_view value) {
  PointWrite& w = slot(key);
  w.kind = PointWrite::Kind::set;
  w.value.assign(value);
  w.ops.clear();
}

void WriteMap::clear(std::string_view key) {
  PointWrite& w = slot(key);
  w.kind = PointWrite::Kind::clear;
  w.value.clear();
  w.ops.clear();
}

void WriteMap::clear_range(std::string_view begin, std::string_view end) {
  if (begin >= end) return;
  hint_.reset();
  points_.erase(points_.lower_bound(begin), points_.lower_bound(end));
  cleared_.add(begin, end);
}

bool WriteMap::atomic(std::string_view key, AtomicOp op) {
  auto it = points_.lower_bound(key);
  if (it == points_.end() || it->first != key) {
    PointWrite w;
    if (cleared_.find(key)) {  // base known absent
      w.kind = PointWrite::Kind::set;
      w.value = apply_atomic(std::nullopt, op);
    } else {
      w.kind = PointWrite::Kind::atomic;
      w.ops.push_back(std::move(op));
    }
    points_.emplace_hint(it, std::string(key), std::move(w));
    return true;
  }
  PointWrite& w = it->second;
  switch (w.kind) {
    case PointWrite::Kind::set:
      w.value = apply_atomic(std::string_view(w.value), op);
      break;
    case PointWrite::Kind::clear:
      w.kind = PointWrite::Kind::set;
      w.value = apply_atomic(std::nullopt, op);
      break;
    case PointWrite::Kind::atomic:
      // Adds of one width fold into one: (x + a) + b == x + (a + b), both modulo 2^(8 * width),
      // whatever x's own width (it is cut or zero-extended to the operand's width either way).
      // A counter bumped by every document of a batch is then one op at commit, not thousands.
      if (AtomicOp& last = w.ops.back(); op.type == MutationType::add &&
                                         last.type == MutationType::add &&
                                         last.operand.size() == op.operand.size()) {
        last.operand = apply_atomic(std::string_view(last.operand), op);
      } else {
        w.ops.push_back(std::move(op));
      }
      break;
    case PointWrite::Kind::versionstamped_value:
      // The base is a value not known until commit.
      return false;
  }
  return true;
}

void WriteMap::set_versionstamped_value(std::string_view key, std::string_view value_template) {
  PointWrite& w = slot(key);
  w.kind = PointWrite::Kind::versionstamped_value;
  w.value.assign(value_template);
  w.ops.clear();
}

WriteMap::Lookup WriteMap::lookup(std::string_view key) const {
  auto it = points_.find(key);
  if (it != points_.end()) {
    const PointWrite& w = it->second;
    switch (w.kind) {
      case PointWrite::Kind::set:
        return {Known::value, &w};
      case PointWrite::Kind::clear:
        return {Known::absent, nullptr};
      case PointWrite::Kind::atomic:
        return {Known::atomic, &w};
      case PointWrite::Kind::versionstamped_value:
        return {Known::unreadable, &w};
    }
  }
  if (cleared_.find(key)) return {Known::absent, nullptr};
  return {Known::unknown, nullptr};
}

}  // namespace chaise::storage
