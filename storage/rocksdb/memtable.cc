#include "storage/rocksdb/memtable.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <string_view>
#include <utility>
#include <vector>

namespace chaise::storage {
namespace {

static_assert(std::endian::native == std::endian::little,
              "an internal key's 8-byte tag is read as RocksDB's little-endian fixed64");

constexpr int kMaxHeight = 12;
// One node in four reaches the next level up (RocksDB's memtable uses the same branching).
constexpr std::uint32_t kBranchingMask = 3;

// An internal key: the user key, then the tag (sequence << 8 | value type).
struct Key {
  const char* user = nullptr;
  std::size_t user_len = 0;
  std::uint64_t tag = 0;
};

const char* decode_varint32(const char* p, std::uint32_t* v) {
  std::uint32_t result = 0;
  for (int shift = 0; shift <= 28; shift += 7) {
    const std::uint32_t byte = static_cast<unsigned char>(*p++);
    result |= (byte & 0x7f) << shift;
    if (!(byte & 0x80)) break;
  }
  *v = result;
  return p;
}

Key internal_key(const char* p, std::size_t n) {
  Key k;
  k.user = p;
  k.user_len = n - 8;
  std::memcpy(&k.tag, p + n - 8, 8);
  return k;
}

// An encoded memtable key (what MemTable::Add writes, and LookupKey::memtable_key): varint32
// internal key length, internal key, then (entries only) the value.
Key entry_key(const char* entry) {
  std::uint32_t n = 0;
  const char* p = decode_varint32(entry, &n);
  return internal_key(p, n);
}

// The internal key order of the bytewise comparator: user key ascending, then tag descending.
int compare(const Key& a, const Key& b) {
  const std::size_t n = std::min(a.user_len, b.user_len);
  if (n) {
    if (int r = std::memcmp(a.user, b.user, n)) return r;
  }
  if (a.user_len != b.user_len) return a.user_len < b.user_len ? -1 : 1;
  if (a.tag != b.tag) return a.tag > b.tag ? -1 : 1;
  return 0;
}

// A node: this header, `height` links, then the entry RocksDB encodes (memory from the memtable's
// arena, freed with it). The key's position and tag are decoded once, when it is inserted.
struct Node {
  std::uint64_t tag = 0;
  std::uint32_t user_len = 0;
  std::uint8_t key_offset = 0;  // of the user key in the entry: the varint's length
  std::uint8_t height = 0;

  std::atomic<Node*>* links() { return reinterpret_cast<std::atomic<Node*>*>(this + 1); }
  const std::atomic<Node*>* links() const {
    return reinterpret_cast<const std::atomic<Node*>*>(this + 1);
  }
  Node* next(int level) const { return links()[level].load(std::memory_order_acquire); }
  char* entry() { return reinterpret_cast<char*>(links() + height); }
  const char* entry() const { return reinterpret_cast<const char*>(links() + height); }
  Key key() const { return Key{entry() + key_offset, user_len, tag}; }
};
static_assert(sizeof(Node) == 16 && alignof(Node) == 8);

class OrderedRep;

// Iterators RocksDB asks for with an arena (a DB iterator's) are only destroyed, never freed: we
// cannot allocate from that arena (its class is not in RocksDB's public headers), so their memory
// comes from a per-thread list of slots. A slot goes back to the list of the thread
// that destroys its iterator and is reused only by that thread, so never while a destructor on
// another thread is still running. The lists hold a few slots each; past that the oldest (whose
// destructor finished long ago) is freed.
class SlotList {
 public:
  ~SlotList() {
    for (void* s : slots_) ::operator delete(s);
  }
  void* take(std::size_t size) {
    if (slots_.empty()) return ::operator new(size);
    void* s = slots_.back();
    slots_.pop_back();
    return s;
  }
  void give(void* s) {
    if (slots_.size() >= kKept) {
      ::operator delete(slots_.front());
      slots_.erase(slots_.begin());
    }
    slots_.push_back(s);
  }

 private:
  static constexpr std::size_t kKept = 32;
  std::vector<void*> slots_;
};

thread_local SlotList iterator_slots;

// A hash index of the user keys, beside the skip list, for point reads: a slot holds the node of
// a user key's newest version (the first of that key in the list), with the top 16 bits of the
// key's hash in the pointer's unused top bits, so most probes of other keys end without reading
// their node. One writer (the inserting thread) and any number of readers. Its slots come from
// the memtable's arena, on the first insert: an empty memtable holds none, a full one counts them
// against its size (it flushes that much sooner). Once three quarters of the slots are taken it
// indexes no new key and says so (complete() turns false): a read of a key it does not hold then
// searches the skip list.
class PointIndex {
 public:
  PointIndex(std::atomic<std::uint64_t>* slots, std::size_t count)
      : slots_(slots), mask_(count - 1), limit_(count / 4 * 3) {
    for (std::size_t i = 0; i < count; ++i) new (&slots_[i]) std::atomic<std::uint64_t>(0);
  }

  static std::size_t bytes(std::size_t count) {
    return sizeof(PointIndex) + count * sizeof(std::atomic<std::uint64_t>);
  }

  bool complete() const { return complete_.load(std::memory_order_acquire); }

  // The node of the newest version of k's user key; nullptr if none is indexed.
  Node* find(const Key& k) const {
    const std::uint64_t h = hash(k);
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const std::uint64_t v = slots_[i].load(std::memory_order_acquire);
      if (!v) return nullptr;
      if ((v & kTagMask) == (h & kTagMask)) {
        Node* n = node_of(v);
        if (same_user_key(n, k)) return n;
      }
    }
  }

  // The inserting thread, after x is linked into the list.
  void add(Node* x) {
    const Key k = x->key();
    const std::uint64_t h = hash(k);
    const auto address = reinterpret_cast<std::uintptr_t>(x);
    if (address & kTagMask) {  // not a canonical user-space address: leave it out
      complete_.store(false, std::memory_order_release);
      return;
    }
    const std::uint64_t packed = (h & kTagMask) | address;
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const std::uint64_t v = slots_[i].load(std::memory_order_relaxed);
      if (!v) {
        if (used_ >= limit_) {
          complete_.store(false, std::memory_order_release);
          return;
        }
        ++used_;
        slots_[i].store(packed, std::memory_order_release);
        return;
      }
      if ((v & kTagMask) == (h & kTagMask)) {
        Node* n = node_of(v);
        if (same_user_key(n, k)) {
          // Versions come in sequence order, but keep the first in the list's order regardless.
          if (compare(k, n->key()) < 0) slots_[i].store(packed, std::memory_order_release);
          return;
        }
      }
    }
  }

 private:
  static constexpr std::uint64_t kTagMask = 0xffffull << 48;

  static std::uint64_t hash(const Key& k) {
    return std::hash<std::string_view>{}(std::string_view(k.user, k.user_len));
  }
  static Node* node_of(std::uint64_t v) { return reinterpret_cast<Node*>(v & ~kTagMask); }
  static bool same_user_key(const Node* n, const Key& k) {
    if (n->user_len != k.user_len) return false;
    return k.user_len == 0 || std::memcmp(n->key().user, k.user, k.user_len) == 0;
  }

  std::atomic<std::uint64_t>* slots_;
  std::size_t mask_;
  std::size_t limit_;
  std::size_t used_ = 0;  // the inserting thread's
  std::atomic<bool> complete_{true};
};

class OrderedRep final : public rocksdb::MemTableRep {
 public:
  // index_slots: a power of two, or 0 for no PointIndex.
  OrderedRep(rocksdb::Allocator* allocator, std::size_t index_slots)
      : MemTableRep(allocator), index_slots_(index_slots) {
    head_ = new (head_storage_) Node();
    head_->height = kMaxHeight;
    for (int i = 0; i < kMaxHeight; ++i) {
      new (&head_->links()[i]) std::atomic<Node*>(nullptr);
      finger_[i] = head_;
    }
  }

  rocksdb::KeyHandle Allocate(const size_t len, char** buf) override {
    const int height = random_height();
    const std::size_t size = sizeof(Node) + height * sizeof(std::atomic<Node*>) + len;
    Node* n = new (arena_aligned(size, alignof(Node))) Node();
    n->height = static_cast<std::uint8_t>(height);
    for (int i = 0; i < height; ++i) new (&n->links()[i]) std::atomic<Node*>(nullptr);
    *buf = n->entry();
    return n;
  }

  void Insert(rocksdb::KeyHandle handle) override { insert(static_cast<Node*>(handle)); }
  bool InsertKey(rocksdb::KeyHandle handle) override { return insert(static_cast<Node*>(handle)); }
  bool InsertKeyWithHint(rocksdb::KeyHandle handle, void**) override {
    return insert(static_cast<Node*>(handle));
  }

  bool Contains(const char* key) const override {
    const Key k = entry_key(key);
    const Node* n = find_greater_or_equal(k);
    return n && compare(n->key(), k) == 0;
  }

  // A point read. MemTableRep's own Get (through an iterator) never deletes that iterator, so
  // every rep overrides it. LookupKey's class is not in RocksDB's public headers; its first
  // member is the pointer to its memtable key (LevelDB's layout, kept by every RocksDB since).
  // memtable_test's point reads would fail if that changed.
  void Get(const rocksdb::LookupKey& k, void* arg,
           bool (*callback)(void* arg, const char* entry)) override {
    const char* memtable_key = *reinterpret_cast<const char* const*>(&k);
    const Key key = entry_key(memtable_key);
    for (Node* n = find_for_get(key); n && callback(arg, n->entry()); n = n->next(0)) {
    }
  }

  size_t ApproximateMemoryUsage() override { return 0; }  // all of it is the arena's

  // The entries in [start, end) (internal keys), estimated as RocksDB's skip list estimates
  // them: down from the top level, each step along a level counts for 4^level entries. What
  // DB::GetApproximateSizes (Transaction::get_estimated_range_size_bytes) counts in memory.
  uint64_t ApproximateNumEntries(const rocksdb::Slice& start_ikey,
                                 const rocksdb::Slice& end_ikey) override {
    const std::uint64_t before_end = entries_before(internal_key(end_ikey.data(), end_ikey.size()));
    const std::uint64_t before_start =
        entries_before(internal_key(start_ikey.data(), start_ikey.size()));
    return before_end > before_start ? before_end - before_start : 0;
  }

  class Iter;
  Iterator* GetIterator(rocksdb::Arena* arena) override;

  Node* head() const { return head_; }

  // What Get reads from: the first node at or after k, through the index when it has k's user
  // key (then past that key's versions newer than k's sequence) or is complete.
  Node* find_for_get(const Key& k) const {
    const PointIndex* index = index_.load(std::memory_order_acquire);
    if (!index) return find_greater_or_equal(k);
    Node* n = index->find(k);
    if (!n) return index->complete() ? nullptr : find_greater_or_equal(k);
    while (n && compare(n->key(), k) < 0) n = n->next(0);
    return n;
  }

  // The first node at or after k; nullptr if none.
  Node* find_greater_or_equal(const Key& k) const { return bracket(k).second; }

  // The last node before k; nullptr if none.
  Node* find_less_than(const Key& k) const {
    Node* before = bracket(k).first;
    return before == head_ ? nullptr : before;
  }

  Node* find_last() const {
    Node* x = head_;
    int level = max_height_.load(std::memory_order_relaxed) - 1;
    for (;;) {
      Node* next = x->next(level);
      if (next) {
        x = next;
      } else if (level == 0) {
        return x == head_ ? nullptr : x;
      } else {
        --level;
      }
    }
  }

 private:
  // About how many entries come before k: O(log n) steps.
  std::uint64_t entries_before(const Key& k) const {
    std::uint64_t count = 0;
    const Node* x = head_;
    for (int level = max_height_.load(std::memory_order_acquire) - 1;;) {
      const Node* next = x->next(level);
      if (next && compare(next->key(), k) < 0) {
        x = next;
        ++count;
      } else if (level == 0) {
        return count;
      } else {
        count *= kBranchingMask + 1;
        --level;
      }
    }
  }

  // At level 0, the last node before k (head_ if none) and the node it linked to when read (the
  // first at or after k, or nullptr). Both come from one read of the link: a node inserted
  // behind it meanwhile may be before k.
  std::pair<Node*, Node*> bracket(const Key& k) const {
    Node* x = head_;
    int level = max_height_.load(std::memory_order_relaxed) - 1;
    for (;;) {
      Node* next = x->next(level);
      if (next && compare(next->key(), k) < 0) {
        x = next;
      } else if (level == 0) {
        return {x, next};
      } else {
        --level;
      }
    }
  }

  int random_height() {
    // xorshift64: the inserting thread's only (RocksDB serializes Allocate with Insert).
    int height = 1;
    while (height < kMaxHeight) {
      rng_ ^= rng_ << 13;
      rng_ ^= rng_ >> 7;
      rng_ ^= rng_ << 17;
      if ((rng_ & kBranchingMask) != 0) break;
      ++height;
    }
    return height;
  }

  // The inserting thread only. Returns false (and links nothing) if an equal key is present.
  bool insert(Node* x) {
    {
      std::uint32_t n = 0;
      const char* entry = x->entry();
      const char* p = decode_varint32(entry, &n);
      x->key_offset = static_cast<std::uint8_t>(p - entry);
      x->user_len = n - 8;
      std::memcpy(&x->tag, p + n - 8, 8);
    }
    const Key k = x->key();
    const int max = max_height_.load(std::memory_order_relaxed);
    // finger_ is the previous insert's splice: at each level, the last node before that key.
    // When this key follows it, find the lowest level whose finger still brackets this key: every
    // level above brackets it too, and only the levels below are searched, from there.
    int level = max;
    if (last_ && compare(last_->key(), k) < 0) {
      level = 0;
      while (level < max) {
        const Node* next = finger_[level]->links()[level].load(std::memory_order_relaxed);
        if (!next || compare(k, next->key()) < 0) break;
        ++level;
      }
    }
    Node* preds[kMaxHeight];
    for (int l = level; l < max; ++l) preds[l] = finger_[l];
    Node* at = level < max ? finger_[level] : head_;
    for (int l = std::min(level, max) - 1; l >= 0; --l) {
      for (;;) {
        Node* next = at->links()[l].load(std::memory_order_relaxed);
        if (next && compare(next->key(), k) < 0) {
          at = next;
        } else {
          break;
        }
      }
      preds[l] = at;
    }
    const Node* after = preds[0]->links()[0].load(std::memory_order_relaxed);
    if (after && compare(after->key(), k) == 0) return false;

    const int height = x->height;
    for (int l = max; l < height; ++l) preds[l] = head_;
    if (height > max) max_height_.store(height, std::memory_order_relaxed);
    for (int l = 0; l < height; ++l) {
      x->links()[l].store(preds[l]->links()[l].load(std::memory_order_relaxed),
                          std::memory_order_relaxed);
      // Publishes the node (its key and links) to readers, who load links with acquire.
      preds[l]->links()[l].store(x, std::memory_order_release);
    }
    const int levels = std::max(max, height);
    for (int l = 0; l < levels; ++l) finger_[l] = l < height ? x : preds[l];
    last_ = x;
    if (index_slots_) index_for_insert()->add(x);
    return true;
  }

  // size bytes from the memtable's arena (freed with it), aligned to align.
  void* arena_aligned(std::size_t size, std::size_t align) {
    char* raw = nullptr;
    MemTableRep::Allocate(size + align - 1, &raw);
    auto at = reinterpret_cast<std::uintptr_t>(raw);
    at = (at + align - 1) & ~static_cast<std::uintptr_t>(align - 1);
    return reinterpret_cast<void*>(at);
  }

  // The inserting thread's: the index, made on the first insert.
  PointIndex* index_for_insert() {
    PointIndex* index = index_.load(std::memory_order_relaxed);
    if (index) return index;
    char* at =
        static_cast<char*>(arena_aligned(PointIndex::bytes(index_slots_), alignof(PointIndex)));
    auto* slots = reinterpret_cast<std::atomic<std::uint64_t>*>(at + sizeof(PointIndex));
    index = new (at) PointIndex(slots, index_slots_);
    index_.store(index, std::memory_order_release);
    return index;
  }

  alignas(Node) unsigned char head_storage_[sizeof(Node) + kMaxHeight * sizeof(std::atomic<Node*>)];
  Node* head_ = nullptr;
  std::atomic<int> max_height_{1};
  // The inserting thread's state.
  Node* finger_[kMaxHeight];
  Node* last_ = nullptr;
  std::uint64_t rng_ = 0x9e3779b97f4a7c15ull;
  const std::size_t index_slots_;
  std::atomic<PointIndex*> index_{nullptr};
};

class OrderedRep::Iter final : public rocksdb::MemTableRep::Iterator {
 public:
  Iter(const OrderedRep* rep, bool slotted) : rep_(rep), slotted_(slotted) {}
  // RocksDB deletes an iterator it got without an arena, and only destroys one it got with one:
  // that one's memory is a slot, back to this thread's list (reused after this returns).
  ~Iter() override {
    if (slotted_) iterator_slots.give(this);
  }

  bool Valid() const override { return node_ != nullptr; }
  const char* key() const override { return node_->entry(); }
  void Next() override { node_ = node_->next(0); }
  void Prev() override { node_ = rep_->find_less_than(node_->key()); }
  void Seek(const rocksdb::Slice& ikey, const char* memtable_key) override {
    node_ = rep_->find_greater_or_equal(target(ikey, memtable_key));
  }
  void SeekForPrev(const rocksdb::Slice& ikey, const char* memtable_key) override {
    const Key k = target(ikey, memtable_key);
    Node* n = rep_->find_greater_or_equal(k);
    node_ = n && compare(n->key(), k) == 0 ? n : rep_->find_less_than(k);
  }
  void SeekToFirst() override { node_ = rep_->head()->next(0); }
  void SeekToLast() override { node_ = rep_->find_last(); }

 private:
  static Key target(const rocksdb::Slice& ikey, const char* memtable_key) {
    return memtable_key ? entry_key(memtable_key) : internal_key(ikey.data(), ikey.size());
  }

  const OrderedRep* rep_;
  Node* node_ = nullptr;
  bool slotted_;
};

rocksdb::MemTableRep::Iterator* OrderedRep::GetIterator(rocksdb::Arena* arena) {
  if (!arena) return new Iter(this, false);
  return new (iterator_slots.take(sizeof(Iter))) Iter(this, true);
}

class OrderedFactory final : public rocksdb::MemTableRepFactory {
 public:
  explicit OrderedFactory(std::size_t index_slots) : index_slots_(index_slots) {}
  using MemTableRepFactory::CreateMemTableRep;
  rocksdb::MemTableRep* CreateMemTableRep(const rocksdb::MemTableRep::KeyComparator&,
                                          rocksdb::Allocator* allocator,
                                          const rocksdb::SliceTransform*,
                                          rocksdb::Logger*) override {
    return new OrderedRep(allocator, index_slots_);
  }
  const char* Name() const override { return "chaise.OrderedMemTable"; }

 private:
  std::size_t index_slots_;
};

}  // namespace

std::shared_ptr<rocksdb::MemTableRepFactory> ordered_memtable_factory(std::size_t index_slots) {
  return std::make_shared<OrderedFactory>(
      index_slots ? std::bit_ceil(std::max<std::size_t>(index_slots, 16)) : 0);
}

}  // namespace chaise::storage
