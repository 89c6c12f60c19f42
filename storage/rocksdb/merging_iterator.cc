#include "storage/rocksdb/merging_iterator.h"

#include <cassert>
#include <string>

namespace chaise::storage {

MergingIterator::MergingIterator(std::vector<std::unique_ptr<rocksdb::Iterator>> children)
    : children_(std::move(children)) {}

void MergingIterator::pick_smallest() {
  forward_ = true;
  current_ = nullptr;
  for (auto& c : children_)
    if (c->Valid() && (!current_ || c->key().compare(current_->key()) < 0)) current_ = c.get();
}

void MergingIterator::pick_largest() {
  forward_ = false;
  current_ = nullptr;
  for (auto& c : children_)
    if (c->Valid() && (!current_ || c->key().compare(current_->key()) > 0)) current_ = c.get();
}

void MergingIterator::SeekToFirst() {
  for (auto& c : children_) c->SeekToFirst();
  pick_smallest();
}

void MergingIterator::SeekToLast() {
  for (auto& c : children_) c->SeekToLast();
  pick_largest();
}

void MergingIterator::Seek(const rocksdb::Slice& target) {
  for (auto& c : children_) c->Seek(target);
  pick_smallest();
}

void MergingIterator::SeekForPrev(const rocksdb::Slice& target) {
  for (auto& c : children_) c->SeekForPrev(target);
  pick_largest();
}

void MergingIterator::Next() {
  assert(Valid());
  if (!forward_) {
    // The others stand before the current key: bring them to the first key after it (no other
    // child holds the current key itself).
    const std::string at = current_->key().ToString();
    for (auto& c : children_)
      if (c.get() != current_) c->Seek(at);
  }
  current_->Next();
  pick_smallest();
}

void MergingIterator::Prev() {
  assert(Valid());
  if (forward_) {
    const std::string at = current_->key().ToString();
    for (auto& c : children_)
      if (c.get() != current_) c->SeekForPrev(at);
  }
  current_->Prev();
  pick_largest();
}

rocksdb::Status MergingIterator::status() const {
  for (const auto& c : children_)
    if (!c->status().ok()) return c->status();
  return rocksdb::Status::OK();
}

}  // namespace chaise::storage
