#include "core/docs/documents.h"
#include "core/docs/stored.h"

namespace chaise::core {

using storage::KeyValue;
using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;

// Compaction, in two phases, each a sequence of bounded steps:
//   "1" + key : bodies. Walks the docs subspace from `key`; a revision that is no longer a leaf
//               loses its body and header, and its attachments one reference each.
//   "2" + key : attachment bytes. Walks the reference counts; an address counted <= 0 loses its
//               chunks and its count.
// Every read is a conflicting one, so a concurrent edit of a document (or upload of equal bytes)
// fails one of the two transactions rather than losing data.
StorageResult<bool> compact_step(Transaction& tr, const DbRef& db, std::string& cursor,
                                 CompactStats& stats) {
  constexpr int kKeysPerStep = 200;
  if (cursor.empty()) cursor = "1";
  if (cursor[0] == '1') {
    std::string begin = cursor.size() > 1 ? cursor.substr(1) : db.space.docs().range().first;
    const std::string end = db.space.docs().range().second;
    auto kvs = tr.get_range(begin, end, kKeysPerStep, Reverse::no, Snapshot::no);
    if (!kvs.ok()) return kvs.error();
    if (kvs->empty()) {
      cursor = "2";
      return false;
    }
    std::string last_id;
    std::vector<StoredBranch> branches;
    std::string next = kvs->back().key + '\x00';
    for (const KeyValue& kv : *kvs) {
      if (kv.key < begin) continue;  // inside a revision already handled in this step
      auto k = db.space.docs().unpack(kv.key);
      const std::string* id = k && k->size() == 4 ? k->get_string(0) : nullptr;
      auto pos = id ? k->get_int(1) : std::nullopt;
      const std::string* hash = id ? k->get_bytes(2) : nullptr;
      if (!id || !pos || !hash) return storage::Error::io_error;
      const RevId rev{*pos, *hash};
      auto [rb, re] = db.space.body_range(*id, rev.pos, rev.hash);
      begin = re;  // skip this revision's other chunks
      if (next < re) next = re;
      if (*id != last_id) {
        ++stats.docs_visited;
        auto all = read_branches(tr, db, *id, Snapshot::no);
        if (!all.ok()) return all.error();
        branches = std::move(*all);
        last_id = *id;
      }
      if (find_leaf(branches, rev)) continue;
      // As stored: a delta's size is what it counted in sizes.active.
      auto stored = read_stored_record(tr, db, *id, rev, Snapshot::no);
      if (!stored.ok()) return stored.error();
      if (!*stored) continue;
      const RevRecord& rec = (*stored)->rec;
      for (const AttInfo& a : rec.atts) tr.add(att_ref_key(db, a.address), -1);
      tr.add(db.space.counter_key(keyspace::kSizeActive),
             -static_cast<std::int64_t>(rec.body.size()));
      tr.clear_range(rb, re);
      ++stats.bodies_removed;
    }
    cursor = "1" + next;
    return false;
  }
  std::string begin = cursor.size() > 1 ? cursor.substr(1) : db.space.att_refs().range().first;
  auto kvs = tr.get_range(begin, db.space.att_refs().range().second, kKeysPerStep, Reverse::no,
                          Snapshot::no);
  if (!kvs.ok()) return kvs.error();
  if (kvs->empty()) return true;
  for (const KeyValue& kv : *kvs) {
    if (keyspace::decode_counter(kv.value) > 0) continue;
    auto k = db.space.att_refs().unpack(kv.key);
    const std::string* address = k && k->size() == 1 ? k->get_bytes(0) : nullptr;
    if (!address) return storage::Error::io_error;
    auto [ab, ae] = att_chunks_range(db, *address);
    tr.clear_range(ab, ae);
    tr.clear(kv.key);
    ++stats.attachments_removed;
  }
  cursor = "2" + kvs->back().key + '\x00';
  return false;
}

}  // namespace chaise::core
