// storage/rocksdb/merging_iterator.h — internal to storage/rocksdb/: one ordered iterator over
// several column families whose keys are disjoint (families.h: each key lives in exactly one
// family).
//
// It stands on the smallest (forward) or largest (reverse) key among its children. Because no
// key is in two children, a step moves only the child it stands on; a change of direction
// re-seeks the others beside the current key. Every child must be built with the same snapshot
// and bounds. Used for the rare reads whose range may span families (a whole database, a key
// selector running to the keyspace's end); a read inside one family uses that family's iterator.
#pragma once

#include <rocksdb/iterator.h>

#include <memory>
#include <vector>

namespace chaise::storage {

class MergingIterator final : public rocksdb::Iterator {
 public:
  explicit MergingIterator(std::vector<std::unique_ptr<rocksdb::Iterator>> children);

  bool Valid() const override { return current_ != nullptr; }
  void SeekToFirst() override;
  void SeekToLast() override;
  void Seek(const rocksdb::Slice& target) override;
  void SeekForPrev(const rocksdb::Slice& target) override;
  void Next() override;
  void Prev() override;
  rocksdb::Slice key() const override { return current_->key(); }
  rocksdb::Slice value() const override { return current_->value(); }
  // The first child's error, else OK.
  rocksdb::Status status() const override;

 private:
  void pick_smallest();
  void pick_largest();

  std::vector<std::unique_ptr<rocksdb::Iterator>> children_;
  rocksdb::Iterator* current_ = nullptr;
  bool forward_ = true;
};

}  // namespace chaise::storage
