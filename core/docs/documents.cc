// Document storage (RFC 003 revisions, RFC 002 by_id and counters, RFC 000 changes + txids).
//
// Value layouts (tuples; see core/db/keyspace.h for the keys):
//   revision, winner  (kRevFormat, (Incarnation, Versionstamp), BranchCount, (ParentHash...), BodySize)
//   revision, other   (kRevFormat, null, null, (ParentHash...), BodySize)
//   by_id             (kByIdFormat or kByIdBodyOnlyFormat, RevPos, RevHash)
//   changes           (kSeqFormat, DocId, RevPos, RevHash, BranchCount, NotDeleted, Count)
//   local             (kLocalFormat, RevCounter, Body)
// The winner's Sequence is the committing transaction's versionstamp, so it is written with
// set_versionstamped_value; the changes key with set_versionstamped_key. Both use the same 2-byte
// user version, so a document's revision and its changes entry name the same sequence.
#include "core/docs/documents.h"

#include <algorithm>
#include <cassert>
#include <unordered_set>

#include "core/rev/couch_rev.h"
#include "core/rev/rev_delta.h"
#include "core/security/replicator_docs.h"
#include "core/security/security.h"
#include "core/util/json_text.h"

namespace chaise::core {

using storage::KeyValue;
using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;
using storage::Versionstamp;

namespace {

std::optional<StoredBranch> decode_branch(const keyspace::DbSpace& space, const KeyValue& kv) {
  auto k = space.revisions().unpack(kv.key);
  auto v = Tuple::unpack(kv.value);
  if (!k || !v || k->size() != 4 || v->size() != 5) return std::nullopt;
  auto not_deleted = k->get_bool(1);
  auto pos = k->get_int(2);
  const std::string* hash = k->get_bytes(3);
  const Tuple* parents = v->get_tuple(3);
  auto size = v->get_int(4);
  if (!not_deleted || !pos || !hash || !parents || !size) return std::nullopt;
  StoredBranch b;
  b.key = kv.key;
  b.branch.leaf = RevId{*pos, *hash};
  b.branch.deleted = !*not_deleted;
  for (std::size_t i = 0; i < parents->size(); ++i) {
    const std::string* p = parents->get_bytes(i);
    if (!p) return std::nullopt;
    b.branch.ancestors.push_back(*p);
  }
  b.body_size = *size;
  if (const Tuple* seq = v->get_tuple(1)) {
    b.seq = Sequence::from_tuple(*seq);
    auto count = v->get_int(2);
    if (!b.seq || !count) return std::nullopt;
    b.is_winner = true;
    b.branch_count = *count;
  }
  return b;
}

// A branch's ancestors' hashes as a nested tuple of byte strings.
void pack_parents(std::string* out, const Branch& b) {
  storage::pack_nested_open(out);
  for (const std::string& h : b.ancestors) storage::pack_bytes(out, h);
  storage::pack_nested_close(out);
}

std::string revision_key(const DbRef& db, std::string_view id, const Branch& b) {
  return db.space.revision_key(id, !b.deleted, b.leaf.pos, b.leaf.hash);
}

// A non-winner branch value.
std::string loser_value(const Branch& b, std::int64_t body_size) {
  std::string v;
  storage::pack_int(&v, keyspace::kRevFormat);
  storage::pack_null(&v);
  storage::pack_null(&v);
  pack_parents(&v, b);
  storage::pack_int(&v, body_size);
  return v;
}

// The winner's value, with this transaction's sequence (versionstamped; offset suffix included).
std::string winner_value_template(const Branch& b, std::int64_t branch_count,
                                  std::int64_t body_size, SeqSlot slot) {
  // (format, (Incarnation, Versionstamp, count), branches, parents, body size)
  std::string v;
  storage::pack_int(&v, keyspace::kRevFormat);
  storage::pack_nested_open(&v);
  storage::pack_int(&v, keyspace::kIncarnation);
  const std::size_t stamp = storage::pack_incomplete_versionstamp(&v, slot.order);
  storage::pack_int(&v, slot.count);
  storage::pack_nested_close(&v);
  storage::pack_int(&v, branch_count);
  pack_parents(&v, b);
  storage::pack_int(&v, body_size);
  storage::append_versionstamp_offset(&v, stamp);
  return v;
}

std::string changes_key(const DbRef& db, std::int64_t shard, const Sequence& s) {
  return db.space.changes().pack(Tuple().add(shard).add(s.incarnation).add(s.versionstamp));
}

// Whether write_rev gives a record a header (Chunks below 0).
bool record_has_header(bool deleted, const std::vector<AttInfo>& atts, const RevId* delta_base) {
  return deleted || !atts.empty() || delta_base != nullptr;
}

// A revision's record: body chunks at Chunk >= 0; when the revision is deleted or has
// attachments, a header (kRevHeaderFormat, Deleted, AttList) split over Chunk -k..-1 (key order is
// byte order, so the pieces concatenate back in order).
// With `delta_base`, the body is a delta against that revision's body (core/rev/rev_delta.h).
void write_rev(Transaction& tr, const DbRef& db, std::string_view id, const RevId& rev,
               std::string_view body, bool deleted, const std::vector<AttInfo>& atts,
               const RevId* delta_base = nullptr) {
  std::int64_t chunk = 0;
  std::size_t off = 0;
  do {
    std::size_t n = std::min(keyspace::kBodyChunkBytes, body.size() - off);
    tr.set(db.space.body_chunk_key(id, rev.pos, rev.hash, chunk++), body.substr(off, n));
    off += n;
  } while (off < body.size());
  if (!record_has_header(deleted, atts, delta_base)) return;
  Tuple h;
  h.add(delta_base ? keyspace::kRevHeaderDeltaFormat : keyspace::kRevHeaderFormat)
      .add(deleted)
      .add_bytes(encode_atts(atts));
  if (delta_base) h.add(delta_base->pos).add_bytes(delta_base->hash);
  const std::string header = h.pack();
  const std::size_t pieces =
      (header.size() + keyspace::kBodyChunkBytes - 1) / keyspace::kBodyChunkBytes;
  for (std::size_t i = 0; i < pieces; ++i) {
    const auto k = -static_cast<std::int64_t>(pieces - i);
    tr.set(
        db.space.body_chunk_key(id, rev.pos, rev.hash, k),
        std::string_view(header).substr(i * keyspace::kBodyChunkBytes, keyspace::kBodyChunkBytes));
  }
}

StorageResult<std::int64_t> store_superseded_as_delta(Transaction& tr, const DbRef& db,
                                                      std::string_view id, const Branch& old_leaf,
                                                      const Branch& added,
                                                      std::string_view added_body);

}  // namespace

storage::Status apply_edit(Transaction& tr, const DbRef& db, std::string_view id, const EditPlan& p,
                           const std::vector<ShardMap>& maps, SeqSlot slot) {
  const auto body_size = static_cast<std::int64_t>(p.body.size());
  std::int64_t active_delta = body_size;
  // The replaced leaf's body stays (CouchDB keeps superseded revisions until compaction), as a
  // delta against the new body when it can.
  if (p.removed) {
    tr.clear(p.removed->key);
    auto saved = store_superseded_as_delta(tr, db, id, p.removed->branch, p.added, p.body);
    if (!saved.ok()) return saved.error();
    active_delta += *saved;
  }
  const bool added_wins = !p.best_other || winner_less(p.best_other->branch, p.added);
  const std::string added_key = revision_key(db, id, p.added);
  if (added_wins) {
    tr.set_versionstamped_value(added_key,
                                winner_value_template(p.added, p.branch_count, body_size, slot));
  } else {
    tr.set(added_key, loser_value(p.added, body_size));
    tr.set_versionstamped_value(
        p.best_other->key,
        winner_value_template(p.best_other->branch, p.branch_count, p.best_other->body_size, slot));
  }
  write_rev(tr, db, id, p.added.leaf, p.body, p.added.deleted, p.atts);
  if (p.uploads) {
    for (const AttUpload& u : *p.uploads)
      if (!u.stub && !u.preuploaded) write_att_chunks(tr, db, u.info.address, u.stored);
  }
  for (const AttInfo& a : p.atts) tr.add(att_ref_key(db, a.address), 1);
  const std::string& new_winner_key = added_wins ? added_key : p.best_other->key;
  if (p.old_winner && (!p.removed || p.old_winner->key != p.removed->key) &&
      p.old_winner->key != new_winner_key) {
    tr.set(p.old_winner->key, loser_value(p.old_winner->branch, p.old_winner->body_size));
  }

  const Branch& winner = added_wins ? p.added : p.best_other->branch;
  const std::int64_t winner_size = added_wins ? body_size : p.best_other->body_size;
  // changes: clear the old entry (its key is the old winner's Sequence), add the new one.
  // The shard of an entry is the route of its partition key in the map in force at its sequence
  // (RFC 004): computed, not stored. New entries go to the current map's shard.
  const std::string pk = partition_key(db, id);
  if (p.old_winner && p.old_winner->seq)
    tr.clear(changes_key(db, route(map_for(maps, *p.old_winner->seq), pk), *p.old_winner->seq));
  // (Shard, Incarnation, Versionstamp) -> (format, id, pos, hash, branches, live, count), packed
  // element by element: every edit writes them.
  std::string ck = db.space.changes().key();
  storage::pack_int(&ck, route(maps.back(), pk));
  storage::pack_int(&ck, keyspace::kIncarnation);
  storage::append_versionstamp_offset(&ck, storage::pack_incomplete_versionstamp(&ck, slot.order));
  std::string seq_value;
  storage::pack_int(&seq_value, keyspace::kSeqFormat);
  storage::pack_string(&seq_value, id);
  storage::pack_int(&seq_value, winner.leaf.pos);
  storage::pack_bytes(&seq_value, winner.leaf.hash);
  storage::pack_int(&seq_value, p.branch_count);
  storage::pack_bool(&seq_value, !winner.deleted);
  storage::pack_int(&seq_value, slot.count);
  tr.set_versionstamped_key(ck, seq_value);
  // by_id: live documents only. Design documents' entries are remembered between transactions
  // (the validation functions, core/docs/validation.cc): writing one marks the transaction.
  if (id.starts_with("_design/")) tr.touch_metadata();
  // Authentication remembers what it read from _users (http/auth/auth.cc) the same way.
  if (db.name == kUsersDb) tr.touch_metadata();
  if (!winner.deleted) {
    // The winner this edit wrote, live, with no attachments and one chunk of body, has no header
    // (nor is it a delta: only a superseded leaf becomes one, and that edit rewrites by_id).
    const bool body_only =
        added_wins && p.atts.empty() && p.body.size() < keyspace::kBodyChunkBytes;
    std::string by_id_value;
    storage::pack_int(&by_id_value,
                      body_only ? keyspace::kByIdBodyOnlyFormat : keyspace::kByIdFormat);
    storage::pack_int(&by_id_value, winner.leaf.pos);
    storage::pack_bytes(&by_id_value, winner.leaf.hash);
    tr.set(db.space.by_id_key(id), by_id_value);
  } else {
    tr.clear(db.space.by_id_key(id));
  }
  // Counters by transition of the winner's state.
  const bool was_live = p.old_winner && !p.old_winner->branch.deleted;
  const bool was_deleted = p.old_winner && p.old_winner->branch.deleted;
  const bool is_live = !winner.deleted;
  std::int64_t dc = 0, ddc = 0;
  if (is_live && !was_live) dc = 1;
  if (!is_live && was_live) dc = -1;
  if (!is_live && !was_deleted) ddc = 1;
  if (is_live && was_deleted) ddc = -1;
  if (dc) tr.add(db.space.counter_key(keyspace::kDocCount), dc);
  if (ddc) tr.add(db.space.counter_key(keyspace::kDocDelCount), ddc);
  const std::int64_t ext_delta = winner_size - (p.old_winner ? p.old_winner->body_size : 0);
  if (ext_delta) tr.add(db.space.counter_key(keyspace::kSizeExternal), ext_delta);
  if (active_delta) tr.add(db.space.counter_key(keyspace::kSizeActive), active_delta);
  // GET /{db}/_partition/{p} reads the same counters per partition.
  if (const auto colon = id.find(':');
      db.partitioned && colon != std::string_view::npos && !id.starts_with("_design/")) {
    const std::string_view part = id.substr(0, colon);
    if (dc) tr.add(db.space.partition_counter_key(part, keyspace::kDocCount), dc);
    if (ddc) tr.add(db.space.partition_counter_key(part, keyspace::kDocDelCount), ddc);
    if (ext_delta) tr.add(db.space.partition_counter_key(part, keyspace::kSizeExternal), ext_delta);
    if (active_delta)
      tr.add(db.space.partition_counter_key(part, keyspace::kSizeActive), active_delta);
  }
  return storage::Status{};
}

namespace {

// Appends members before the closing brace of a serialized JSON object.
std::string append_members(std::string obj, const std::vector<std::string>& members) {
  if (members.empty()) return obj;
  assert(!obj.empty() && obj.back() == '}');
  obj.pop_back();
  bool empty = obj.size() == 1 || obj.find_first_not_of(" \t\r\n", 1) == std::string::npos;
  for (const std::string& m : members) {
    if (!empty) obj.push_back(',');
    obj += m;
    empty = false;
  }
  obj.push_back('}');
  return obj;
}

std::string rev_array(const std::vector<std::string>& revs) {
  std::string out = "[";
  for (std::size_t i = 0; i < revs.size(); ++i) {
    if (i) out.push_back(',');
    out += json_string(revs[i]);
  }
  return out + "]";
}

StoredBranch* find_leaf(std::vector<StoredBranch>& all, const RevId& rev) {
  for (auto& b : all)
    if (b.branch.leaf == rev) return &b;
  return nullptr;
}

}  // namespace

StorageResult<std::vector<StoredBranch>> read_branches(Transaction& tr, const DbRef& db,
                                                       std::string_view id, Snapshot snapshot) {
  auto [b, e] = db.space.doc_revisions_range(id);
  auto kvs = tr.get_range(b, e, 0, Reverse::no, snapshot);
  if (!kvs.ok()) return kvs.error();
  std::vector<StoredBranch> out;
  for (const KeyValue& kv : *kvs) {
    auto sb = decode_branch(db.space, kv);
    if (!sb) return storage::Error::io_error;
    out.push_back(std::move(*sb));
  }
  return out;
}

namespace {
struct ByIdEntry {
  RevId rev;
  bool body_only = false;  // kByIdBodyOnlyFormat
};

StorageResult<std::optional<ByIdEntry>> read_by_id(Transaction& tr, const DbRef& db,
                                                   std::string_view id, Snapshot snapshot) {
  auto named = tr.get(db.space.by_id_key(id), snapshot);
  if (!named.ok()) return named.error();
  if (!named->has_value()) return std::optional<ByIdEntry>();
  // (format, pos, hash), read in place.
  storage::TupleReader v(**named);
  ByIdEntry e;
  std::optional<std::int64_t> format, pos;
  if (!(format = v.read_int()) || !(pos = v.read_int()) || !v.read_bytes(&e.rev.hash) ||
      !v.at_end())
    return storage::Error::io_error;
  e.rev.pos = *pos;
  e.body_only = *format == keyspace::kByIdBodyOnlyFormat;
  return std::optional<ByIdEntry>(std::move(e));
}
}  // namespace

StorageResult<std::optional<RevId>> live_winner_rev(Transaction& tr, const DbRef& db,
                                                    std::string_view id, Snapshot snapshot) {
  auto e = read_by_id(tr, db, id, snapshot);
  if (!e.ok()) return e.error();
  if (!*e) return std::optional<RevId>();
  return std::optional<RevId>(std::move((*e)->rev));
}

namespace {
// An edit that relies on ids_without_revisions: the read conflict its own read of the revisions
// range would have taken.
void conflict_on_revisions(Transaction& tr, const DbRef& db, std::string_view id) {
  auto [b, e] = db.space.doc_revisions_range(id);
  tr.add_read_conflict_range(b, e);
}

// The winner as the last entry of the document's revisions range (live leaves sort after deleted
// ones, then by position and hash: CouchDB's winner order).
StorageResult<std::optional<StoredBranch>> winner_from_range(Transaction& tr, const DbRef& db,
                                                             std::string_view id,
                                                             Snapshot snapshot) {
  auto [b, e] = db.space.doc_revisions_range(id);
  auto kvs = tr.get_range(b, e, 1, Reverse::yes, snapshot);
  if (!kvs.ok()) return kvs.error();
  if (kvs->empty()) return std::optional<StoredBranch>();
  auto sb = decode_branch(db.space, kvs->front());
  if (!sb) return storage::Error::io_error;
  return std::optional<StoredBranch>(std::move(*sb));
}
}  // namespace

StorageResult<std::optional<StoredBranch>> read_winner(Transaction& tr, const DbRef& db,
                                                       std::string_view id, Snapshot snapshot) {
  auto [b, e] = db.space.doc_revisions_range(id);
  // A live document's by_id entry names its winner: two point reads, where the reverse range read
  // below steps over the tombstone every edit leaves in the revisions range until the storage
  // engine compacts it away (a document updated thousands of times a second made that read take
  // milliseconds). The range still goes into the read-conflict set.
  auto named = live_winner_rev(tr, db, id, snapshot);
  if (!named.ok()) return named.error();
  if (*named) {
    const RevId& rev = **named;
    std::string key = db.space.revision_key(id, true, rev.pos, rev.hash);
    auto v = tr.get(key, snapshot);
    if (!v.ok()) return v.error();
    if (v->has_value()) {
      if (snapshot == Snapshot::no) tr.add_read_conflict_range(b, e);
      auto sb = decode_branch(db.space, KeyValue{std::move(key), std::move(**v)});
      if (!sb) return storage::Error::io_error;
      return std::optional<StoredBranch>(std::move(*sb));
    }
  }
  return winner_from_range(tr, db, id, snapshot);
}

namespace {
// Integers below zero are type codes 0x0c..0x13 in FoundationDB's tuple encoding, zero is 0x14.
constexpr unsigned char kTupleIntZero = 0x14;
bool is_header_chunk(std::string_view key, std::size_t chunk_at) {
  return static_cast<unsigned char>(key[chunk_at]) < kTupleIntZero;
}

RevRecord decode_header_or_empty(std::string_view header, bool& ok,
                                 std::optional<RevId>* delta_base = nullptr) {
  RevRecord r;
  ok = true;
  if (header.empty()) return r;
  auto t = Tuple::unpack(header);
  auto format = t && t->size() >= 3 ? t->get_int(0) : std::nullopt;
  const bool delta = format == keyspace::kRevHeaderDeltaFormat && t->size() == 5;
  const bool plain = format == keyspace::kRevHeaderFormat && t->size() == 3;
  auto deleted = delta || plain ? t->get_bool(1) : std::nullopt;
  const std::string* atts = delta || plain ? t->get_bytes(2) : nullptr;
  auto decoded = atts ? decode_atts(*atts) : std::nullopt;
  auto base_pos = delta ? t->get_int(3) : std::nullopt;
  const std::string* base_hash = delta ? t->get_bytes(4) : nullptr;
  if (!deleted || !decoded || (delta && (!base_pos || !base_hash))) {
    ok = false;
    return r;
  }
  r.deleted = *deleted;
  r.atts = std::move(*decoded);
  if (delta_base) {
    if (delta)
      *delta_base = RevId{*base_pos, *base_hash};
    else
      delta_base->reset();
  }
  return r;
}

// A revision's record as stored: with `base`, its body is a delta against that revision.
struct StoredRecord {
  RevRecord rec;
  std::optional<RevId> base;
};

// `no_header`: the caller knows the record has none (by_id's kByIdBodyOnlyFormat), so a body of
// one chunk is read alone.
StorageResult<std::optional<StoredRecord>> read_stored_record(Transaction& tr, const DbRef& db,
                                                              std::string_view id, const RevId& rev,
                                                              Snapshot snapshot,
                                                              bool no_header = false) {
  auto [b, e] = db.space.body_range(id, rev.pos, rev.hash);
  // Most records are one body chunk (Chunk 0) and no header (Chunks below 0: deleted,
  // attachments, delta): two point reads find them, cheaper than a range read. The read-conflict
  // set gets the range, as the range read would give it.
  auto first = tr.get(db.space.body_chunk_key(id, rev.pos, rev.hash, 0), Snapshot::yes);
  if (!first.ok()) return first.error();
  if (*first && (*first)->size() < keyspace::kBodyChunkBytes) {
    bool header_absent = no_header;
    if (!header_absent) {
      auto header = tr.get(db.space.body_chunk_key(id, rev.pos, rev.hash, -1), Snapshot::yes);
      if (!header.ok()) return header.error();
      header_absent = !header->has_value();
    }
    if (header_absent) {
      if (snapshot == Snapshot::no) tr.add_read_conflict_range(b, e);
      StoredRecord r;
      r.rec.body = std::move(**first);
      return std::optional<StoredRecord>(std::move(r));
    }
  }
  auto kvs = tr.get_range(b, e, 0, Reverse::no, snapshot);
  if (!kvs.ok()) return kvs.error();
  if (kvs->empty()) return std::optional<StoredRecord>();
  StoredRecord r;
  std::string header;
  // Every key is b without its last byte, then the packed Chunk; the tuple layer's integer type
  // code tells the sign, so no key is unpacked on this path (every document read goes here).
  const std::size_t chunk_at = b.size() - 1;
  for (const KeyValue& kv : *kvs) {
    if (kv.key.size() <= chunk_at) return storage::Error::io_error;
    (is_header_chunk(kv.key, chunk_at) ? header : r.rec.body) += kv.value;
  }
  bool ok = false;
  RevRecord h = decode_header_or_empty(header, ok, &r.base);
  if (!ok) return storage::Error::io_error;
  r.rec.deleted = h.deleted;
  r.rec.atts = std::move(h.atts);
  return std::optional<StoredRecord>(std::move(r));
}

// Every kDeltaFullEvery-th revision of a path keeps its whole body, and a delta is only made
// against the next position, so reading an old revision applies at most this many deltas.
constexpr std::int64_t kDeltaFullEvery = 64;
constexpr int kDeltaChainMax = static_cast<int>(kDeltaFullEvery) + 1;

// When an edit supersedes the leaf `old_leaf` with `added` (body `added_body`), the leaf's whole
// body becomes a delta against the new one, when that is exact and worth it. Returns the change of
// stored body bytes (<= 0).
StorageResult<std::int64_t> store_superseded_as_delta(Transaction& tr, const DbRef& db,
                                                      std::string_view id, const Branch& old_leaf,
                                                      const Branch& added,
                                                      std::string_view added_body) {
  if (added.deleted || old_leaf.deleted || added.leaf.pos != old_leaf.leaf.pos + 1 ||
      old_leaf.leaf.pos % kDeltaFullEvery == 0)
    return std::int64_t{0};
  auto stored = read_stored_record(tr, db, id, old_leaf.leaf, Snapshot::yes);
  if (!stored.ok()) return stored.error();
  if (!*stored || (*stored)->base) return std::int64_t{0};
  const RevRecord& rec = (*stored)->rec;
  auto delta = make_body_delta(added_body, rec.body);
  if (!delta) return std::int64_t{0};
  // A record of one chunk and no header (any live body under kBodyChunkBytes without
  // attachments) is its chunk 0 alone, which the delta's chunk 0 overwrites: nothing is left to
  // clear. Other records clear their range first. A cleared range is a RocksDB range tombstone,
  // which reads of its memtable re-sort after every commit that adds one and the tables keep
  // until compacted: with a clear per edit, edits cost about a third more server CPU
  // (bench/README.md).
  if (record_has_header(rec.deleted, rec.atts, nullptr) ||
      rec.body.size() >= keyspace::kBodyChunkBytes) {
    auto [b, e] = db.space.body_range(id, old_leaf.leaf.pos, old_leaf.leaf.hash);
    tr.clear_range(b, e);
  }
  write_rev(tr, db, id, old_leaf.leaf, *delta, rec.deleted, rec.atts, &added.leaf);
  return static_cast<std::int64_t>(delta->size()) - static_cast<std::int64_t>(rec.body.size());
}
}  // namespace

StorageResult<std::optional<PlainDoc>> plain_doc_json(Transaction& tr, const DbRef& db,
                                                      std::string_view id) {
  auto entry = read_by_id(tr, db, id, Snapshot::yes);
  if (!entry.ok()) return entry.error();
  if (!*entry) return std::optional<PlainDoc>();
  const RevId& winner = (*entry)->rev;
  // by_id's body-only format: chunk 0 is read without a look for the header.
  auto stored = read_stored_record(tr, db, id, winner, Snapshot::yes, (*entry)->body_only);
  if (!stored.ok()) return stored.error();
  // With attachments the answer needs the revision's path (their revpos); without a stored record,
  // or with a delta (never a winner's), the full read decides.
  if (!*stored || (*stored)->base) return std::optional<PlainDoc>();
  const RevRecord* record = &(*stored)->rec;
  if (!record->atts.empty() || record->deleted) return std::optional<PlainDoc>();
  PlainDoc doc;
  doc.rev = winner;
  // What render_branch writes for a live winner with no option and no attachment.
  doc.json = splice_doc(record->body, id, doc.rev.str(), {});
  return std::optional<PlainDoc>(std::move(doc));
}

StorageResult<RevStatus> rev_status(Transaction& tr, const DbRef& db, std::string_view id,
                                    const RevId& rev) {
  auto [b, e] = db.space.body_range(id, rev.pos, rev.hash);
  // One key is enough unless the header is split over several chunks (a very long attachment
  // list): body chunk 0 first means a live revision without a header.
  auto kvs = tr.get_range(b, e, 1, Reverse::no, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  if (kvs->empty()) return RevStatus::missing;
  const std::size_t chunk_at = b.size() - 1;
  const KeyValue& first = kvs->front();
  if (first.key.size() <= chunk_at) return storage::Error::io_error;
  if (!is_header_chunk(first.key, chunk_at)) return RevStatus::available;
  bool ok = false;
  RevRecord h = decode_header_or_empty(first.value, ok);
  if (!ok) {  // a split header: read the whole record
    auto rec = read_rev(tr, db, id, rev);
    if (!rec.ok()) return rec.error();
    if (!*rec) return RevStatus::missing;
    return (*rec)->deleted ? RevStatus::deleted : RevStatus::available;
  }
  return h.deleted ? RevStatus::deleted : RevStatus::available;
}

StorageResult<std::optional<RevRecord>> read_rev(Transaction& tr, const DbRef& db,
                                                 std::string_view id, const RevId& rev,
                                                 Snapshot snapshot) {
  auto first = read_stored_record(tr, db, id, rev, snapshot);
  if (!first.ok()) return first.error();
  if (!*first) return std::optional<RevRecord>();
  if (!(*first)->base) return std::optional<RevRecord>(std::move((*first)->rec));
  // A delta: follow the bases to a whole body, then apply the deltas back, nearest first. A base
  // that is gone (a compaction under way) makes this revision gone too.
  std::vector<std::string> deltas{std::move((*first)->rec.body)};
  std::optional<RevId> base = (*first)->base;
  std::string whole;
  for (;;) {
    if (static_cast<int>(deltas.size()) > kDeltaChainMax) return storage::Error::io_error;
    auto next = read_stored_record(tr, db, id, *base, snapshot);
    if (!next.ok()) return next.error();
    if (!*next) return std::optional<RevRecord>();
    if (!(*next)->base) {
      whole = std::move((*next)->rec.body);
      break;
    }
    deltas.push_back(std::move((*next)->rec.body));
    base = (*next)->base;
  }
  auto doc = parse_json_text(whole, JsonNumbers::exact);
  auto* j = std::get_if<nlohmann::ordered_json>(&doc);
  if (!j) return storage::Error::io_error;
  for (auto d = deltas.rbegin(); d != deltas.rend(); ++d) {
    auto delta = parse_json_text(*d, JsonNumbers::exact);
    auto* dj = std::get_if<nlohmann::ordered_json>(&delta);
    if (!dj || !apply_body_delta(*j, *dj)) return storage::Error::io_error;
  }
  RevRecord r = std::move((*first)->rec);
  r.body = dump_json(*j);
  return std::optional<RevRecord>(std::move(r));
}

StorageResult<std::vector<std::optional<RevRecord>>> read_revs(
    Transaction& tr, const DbRef& db, const std::vector<std::pair<std::string, RevId>>& revs) {
  std::vector<std::optional<RevRecord>> out(revs.size());
  // Each revision's body keys in key order; the same revision asked twice is read once.
  std::vector<std::pair<std::string, std::string>> bounds;
  bounds.reserve(revs.size());
  for (const auto& [id, rev] : revs) bounds.push_back(db.space.body_range(id, rev.pos, rev.hash));
  std::vector<std::size_t> order(revs.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return bounds[a].first < bounds[b].first; });
  std::vector<storage::KeyRange> ranges;
  std::vector<std::size_t> range_of(revs.size());
  for (std::size_t i : order) {
    if (ranges.empty() || ranges.back().begin != bounds[i].first)
      ranges.push_back({bounds[i].first, bounds[i].second});
    range_of[i] = ranges.size() - 1;
  }
  // A header and up to two body chunks per revision; a longer body is read by read_rev, so one
  // call holds at most a few hundred KB per revision.
  constexpr int kKeysEach = 3;
  auto kvs = tr.get_ranges(ranges, kKeysEach, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  for (std::size_t i = 0; i < revs.size(); ++i) {
    const std::vector<KeyValue>& run = (*kvs)[range_of[i]];
    if (run.empty()) continue;  // never stored, or compacted away
    bool whole = run.size() < static_cast<std::size_t>(kKeysEach);
    std::optional<RevId> base;
    RevRecord rec;
    if (whole) {
      const std::size_t chunk_at = bounds[i].first.size() - 1;
      std::string header;
      for (const KeyValue& kv : run) {
        if (kv.key.size() <= chunk_at) return storage::Error::io_error;
        (is_header_chunk(kv.key, chunk_at) ? header : rec.body) += kv.value;
      }
      bool ok = false;
      RevRecord h = decode_header_or_empty(header, ok, &base);
      if (!ok) return storage::Error::io_error;
      rec.deleted = h.deleted;
      rec.atts = std::move(h.atts);
    }
    if (whole && !base) {
      out[i] = std::move(rec);
      continue;
    }
    auto slow = read_rev(tr, db, revs[i].first, revs[i].second);  // long, or a delta
    if (!slow.ok()) return slow.error();
    out[i] = std::move(*slow);
  }
  return out;
}

StorageResult<std::optional<std::string>> read_body(Transaction& tr, const DbRef& db,
                                                    std::string_view id, const RevId& rev) {
  auto r = read_rev(tr, db, id, rev);
  if (!r.ok()) return r.error();
  if (!*r) return std::optional<std::string>();
  return std::optional<std::string>(std::move((*r)->body));
}

namespace {

CouchError missing_stub(std::string_view id, std::string_view name) {
  return {412, "missing_stub",
          "Invalid attachment stub in " + std::string(id) + " for " + std::string(name)};
}

// The final attachment list of a new revision at `new_pos`: new data as uploaded, stubs taken by
// name from the first stored revision of `bases` (nearest first) that is stored. `interactive`
// gives new data the new revision's pos (a replicated revision keeps the revpos it came with).
StorageResult<Outcome<std::vector<AttInfo>>> resolve_atts(Transaction& tr, const DbRef& db,
                                                          std::string_view id,
                                                          const std::vector<AttUpload>& ups,
                                                          const std::vector<RevId>& bases,
                                                          std::int64_t new_pos, bool interactive) {
  using R = Outcome<std::vector<AttInfo>>;
  std::vector<AttInfo> out;
  std::optional<RevRecord> base;
  bool base_read = false;
  for (const AttUpload& u : ups) {
    if (!u.stub) {
      AttInfo a = u.info;
      a.name = u.name;
      if (interactive || a.revpos <= 0) a.revpos = new_pos;
      if (u.preuploaded) {
        auto present = att_present(tr, db, a.address, a.encoded_length);
        if (!present.ok()) return present.error();
        if (!*present) return R(CouchError{500, "unknown_error", "attachment_data_missing"});
      }
      out.push_back(std::move(a));
      continue;
    }
    if (!base_read) {
      base_read = true;
      // Bounded by the path length (revs_limit); usually the first one is stored.
      for (const RevId& r : bases) {
        // Not a snapshot read: a compaction removing this body conflicts with this edit.
        auto rec = read_rev(tr, db, id, r, Snapshot::no);
        if (!rec.ok()) return rec.error();
        if (*rec) {
          base = std::move(*rec);
          break;
        }
      }
    }
    const AttInfo* found = nullptr;
    if (base)
      for (const AttInfo& a : base->atts)
        if (a.name == u.name) found = &a;
    if (!found) return R(missing_stub(id, u.name));
    out.push_back(*found);
  }
  return R(std::move(out));
}

}  // namespace

std::string new_rev_hash(bool deleted, const std::optional<RevId>& parent, std::string_view body,
                         std::string_view body_term, const std::vector<AttInfo>& atts) {
  std::vector<CouchAttSig> sigs;
  sigs.reserve(atts.size());
  for (const AttInfo& a : atts) sigs.push_back(CouchAttSig{a.name, a.content_type, a.md5});
  std::string h = body_term.empty() ? couch_rev_hash(deleted, parent, body, sigs)
                                    : couch_rev_hash_of_term(deleted, parent, body_term, sigs);
  if (!h.empty()) return h;
  std::vector<std::string> inputs;
  for (const AttInfo& a : atts) inputs.push_back(a.name + '\0' + a.content_type + '\0' + a.md5);
  return compute_rev_hash(deleted, parent, body, inputs);
}

namespace {

StorageResult<std::string> attachments_member(Transaction& tr, const DbRef& db, const Branch& b,
                                              const std::vector<AttInfo>& atts,
                                              const DocReadOptions& o,
                                              std::vector<AttInfo>* follows);

// The winner after edit `p` as a view's map function sees it (what _changes shows with
// include_docs=true&conflicts=true), rendered before apply_edit writes it: the new winner's
// revision key is not readable in its own transaction.
StorageResult<std::string> doc_for_views(Transaction& tr, const DbRef& db, std::string_view id,
                                         const EditPlan& p, const Branch& winner,
                                         std::string_view body, const std::vector<AttInfo>& atts) {
  std::vector<std::string> tail;
  if (p.branch_count > 1) {
    auto before = read_branches(tr, db, id, Snapshot::yes);
    if (!before.ok()) return before.error();
    std::vector<Branch> leaves;
    for (const StoredBranch& sb : *before)
      if (!p.removed || sb.key != p.removed->key) leaves.push_back(sb.branch);
    leaves.push_back(p.added);
    std::sort(leaves.begin(), leaves.end(),
              [](const Branch& x, const Branch& y) { return winner_less(y, x); });  // best first
    std::vector<std::string> conflicts;
    for (const Branch& l : leaves)
      if (!l.deleted && !(l.leaf == winner.leaf)) conflicts.push_back(l.leaf.str());
    if (!conflicts.empty()) tail.push_back("\"_conflicts\":" + rev_array(conflicts));
  }
  auto am = attachments_member(tr, db, winner, atts, DocReadOptions{}, nullptr);
  if (!am.ok()) return am.error();
  if (!am->empty()) tail.push_back(std::move(*am));
  return append_members(splice_doc(body, id, winner.leaf.str(), {}), tail);
}

}  // namespace

StorageResult<std::optional<CouchError>> edit_hooks(Transaction& tr, const DbRef& db,
                                                    EditHooks& hooks, std::string_view id,
                                                    const EditPlan& p, bool interactive) {
  using R = std::optional<CouchError>;
  const bool rendered = hooks.wants_rendered();
  if (!hooks.watches_winner(id) && !rendered) return R();
  const bool added_wins = !p.best_other || winner_less(p.best_other->branch, p.added);
  // The same winner: unique keys and design documents are as they were, but a view still sees
  // the document change (its _conflicts, as when a replicated losing branch arrives).
  const bool same_winner = !added_wins && p.old_winner && p.old_winner->key == p.best_other->key;
  if (same_winner && !rendered) return R();
  const Branch& winner = added_wins ? p.added : p.best_other->branch;
  std::optional<std::string> body;  // the winner's body after the edit, if it is live
  std::vector<AttInfo> atts;
  if (added_wins) {
    if (!p.added.deleted) {
      body = std::string(p.body);
      atts = p.atts;
    }
  } else if (!winner.deleted) {
    auto rec = read_rev(tr, db, id, winner.leaf);
    if (!rec.ok()) return rec.error();
    if (*rec) {
      body = std::move((*rec)->body);
      atts = std::move((*rec)->atts);
    }
  }
  const std::string* bp = body ? &*body : nullptr;
  if (!same_winner) {
    if (interactive) {
      auto refused = hooks.check(tr, db, id, bp);
      if (!refused.ok()) return refused.error();
      if (*refused) return std::move(*refused);
    }
    if (auto st = hooks.winner_changed(tr, db, id, bp, !interactive); !st.ok()) return st.error();
  }
  if (rendered) {
    std::optional<std::string> doc;
    if (body) {
      auto r = doc_for_views(tr, db, id, p, winner, *body, atts);
      if (!r.ok()) return r.error();
      doc = std::move(*r);
    }
    hooks.rendered(std::string(id), std::move(doc));
  }
  return R();
}

StorageResult<std::vector<bool>> ids_without_revisions(
    Transaction& tr, const DbRef& db, const std::vector<std::string_view>& sorted_ids) {
  const std::size_t n = sorted_ids.size();
  std::vector<bool> none(n, false);
  if (n == 0) return none;
  std::vector<std::pair<std::string, std::string>> ranges;
  ranges.reserve(n);
  for (std::string_view id : sorted_ids) ranges.push_back(db.space.doc_revisions_range(id));
  const std::string& span_end = ranges.back().second;
  constexpr std::size_t kIdsPerRead = 8;
  std::size_t i = 0, reads = 0, proved = 0;
  while (i < n && reads < 2 + proved / kIdsPerRead) {
    const std::string& from = ranges[i].first;
    auto first = tr.get_range(from, span_end, 1, Reverse::no, Snapshot::yes);
    if (!first.ok()) return first.error();
    ++reads;
    // Nothing is stored in [from, found): every id whose range lies there has no revision.
    const std::string found = first->empty() ? span_end : first->front().key;
    for (; i < n && ranges[i].first >= from && ranges[i].second <= found; ++i) {
      none[i] = true;
      ++proved;
    }
    // The id whose range holds that key has revisions: its edit reads them.
    if (i < n && ranges[i].first <= found) ++i;
  }
  return none;
}

StorageResult<Outcome<UpdateResult>> update_doc(Transaction& tr, const DbRef& db,
                                                const DocUpdate& u, int revs_limit,
                                                const std::vector<ShardMap>& maps, SeqSlot slot,
                                                EditHooks& hooks, Stored stored) {
  using R = Outcome<UpdateResult>;
  std::optional<StoredBranch> target, winner, prev;
  bool resolved = false;
  if (u.base_rev && u.deleted) {
    // Deleting the winner: the winner and the branch before it, in one read (RFC 003).
    auto [b, e] = db.space.doc_revisions_range(u.id);
    auto kvs = tr.get_range(b, e, 2, Reverse::yes);
    if (!kvs.ok()) return kvs.error();
    if (!kvs->empty()) {
      auto w = decode_branch(db.space, (*kvs)[0]);
      if (!w) return storage::Error::io_error;
      if (!w->branch.deleted && w->branch.leaf == *u.base_rev) {
        target = winner = std::move(*w);
        if (kvs->size() > 1) {
          prev = decode_branch(db.space, (*kvs)[1]);
          if (!prev) return storage::Error::io_error;
        }
        resolved = true;
      }
    }
  }
  if (!resolved && u.base_rev) {
    // The named revision must be a live leaf: 1 point read.
    const std::string key = db.space.revision_key(u.id, true, u.base_rev->pos, u.base_rev->hash);
    auto v = tr.get(key);
    if (!v.ok()) return v.error();
    if (!v->has_value()) return R(conflict());
    target = decode_branch(db.space, KeyValue{key, **v});
    if (!target) return storage::Error::io_error;
    if (target->is_winner) {
      winner = target;
    } else {
      auto w = read_winner(tr, db, u.id, Snapshot::no);  // extending a losing branch: 2nd read
      if (!w.ok()) return w.error();
      winner = std::move(*w);
      if (!winner) return storage::Error::io_error;
    }
  } else if (!resolved) {
    // No base revision: an insert, or a re-creation on a tombstone. One reverse range read
    // (limit 1) answers both without the by_id read first, which a new document always misses
    // (it was a third of a _bulk_docs insert's reads). When the batch already knows nothing is
    // stored, the range goes into the read-conflict set as that read would have put it.
    if (stored == Stored::none) {
      conflict_on_revisions(tr, db, u.id);
    } else {
      auto w = winner_from_range(tr, db, u.id, Snapshot::no);
      if (!w.ok()) return w.error();
      winner = std::move(*w);
      if (winner && !winner->branch.deleted) return R(conflict());
      target = winner;
    }
  }

  EditPlan plan;
  plan.old_winner = winner;
  plan.removed = target;
  plan.body = u.body;
  std::optional<RevId> parent;
  if (target) parent = target->branch.leaf;
  const std::int64_t new_pos = parent ? parent->pos + 1 : 1;
  if (!u.atts.empty()) {
    std::vector<RevId> bases;
    if (parent) bases.push_back(*parent);
    auto atts = resolve_atts(tr, db, u.id, u.atts, bases, new_pos, true);
    if (!atts.ok()) return atts.error();
    if (auto* e = std::get_if<CouchError>(&*atts)) return R(std::move(*e));
    plan.atts = std::get<std::vector<AttInfo>>(std::move(*atts));
    plan.uploads = &u.atts;
  }
  plan.added.leaf = RevId{new_pos, new_rev_hash(u.deleted, parent, u.body, u.body_term, plan.atts)};
  plan.added.deleted = u.deleted;
  if (target) {
    plan.added.ancestors.reserve(target->branch.ancestors.size() + 1);
    plan.added.ancestors.push_back(target->branch.leaf.hash);
    plan.added.ancestors.insert(plan.added.ancestors.end(), target->branch.ancestors.begin(),
                                target->branch.ancestors.end());
  }
  stem(plan.added, revs_limit);
  if (winner && target && winner->key != target->key) {
    plan.best_other = winner;  // extending or deleting a losing branch
  } else if (prev) {
    plan.best_other = prev;  // deleting the winner: the next in line may take over
  }
  plan.branch_count = winner ? winner->branch_count : 1;
  auto refused = edit_hooks(tr, db, hooks, u.id, plan, true);
  if (!refused.ok()) return refused.error();
  if (*refused) return R(std::move(**refused));
  if (auto st = apply_edit(tr, db, u.id, plan, maps, slot); !st.ok()) return st.error();
  return R(UpdateResult{u.id, plan.added.leaf});
}

StorageResult<Outcome<bool>> replicate_doc(Transaction& tr, const DbRef& db, const ReplicatedDoc& d,
                                           int revs_limit, const std::vector<ShardMap>& maps,
                                           SeqSlot slot, EditHooks& hooks, Stored stored) {
  StorageResult<std::vector<StoredBranch>> all = std::vector<StoredBranch>();
  if (stored == Stored::none) {
    conflict_on_revisions(tr, db, d.id);
  } else {
    all = read_branches(tr, db, d.id, Snapshot::no);
  }
  if (!all.ok()) return all.error();
  std::vector<Branch> branches;
  branches.reserve(all->size());
  for (const StoredBranch& sb : *all) branches.push_back(sb.branch);
  MergeResult m = merge_path(branches, d.path, revs_limit);
  if (m.kind == MergeResult::Kind::already_present) return Outcome<bool>(false);

  EditPlan plan;
  if (!d.atts.empty()) {
    std::vector<RevId> bases;
    for (std::size_t i = 1; i < d.path.length(); ++i) bases.push_back(d.path.rev_at(i));
    auto atts = resolve_atts(tr, db, d.id, d.atts, bases, d.path.leaf.pos, false);
    if (!atts.ok()) return atts.error();
    if (auto* e = std::get_if<CouchError>(&*atts)) return Outcome<bool>(std::move(*e));
    plan.atts = std::get<std::vector<AttInfo>>(std::move(*atts));
    plan.uploads = &d.atts;
  }
  if (!all->empty()) plan.old_winner = all->back();
  plan.added = m.branch;
  plan.body = d.body;
  std::size_t remaining = all->size();
  if (m.kind == MergeResult::Kind::extends_branch) {
    plan.removed = (*all)[m.replaced];
    --remaining;
  }
  // Branches are in key order, which is winner order: the best remaining is the last one kept.
  for (std::size_t i = all->size(); i-- > 0;) {
    if (m.kind == MergeResult::Kind::extends_branch && i == m.replaced) continue;
    plan.best_other = (*all)[i];
    break;
  }
  plan.branch_count = static_cast<std::int64_t>(remaining) + 1;
  auto recorded = edit_hooks(tr, db, hooks, d.id, plan, false);
  if (!recorded.ok()) return recorded.error();
  if (auto st = apply_edit(tr, db, d.id, plan, maps, slot); !st.ok()) return st.error();
  return Outcome<bool>(true);
}

namespace {

// couch_db:find_ancestor_rev_pos: the pos of the nearest revision on the path (leaf first) that
// is one of `since`; 0 if none is.
std::int64_t ancestor_pos(const Branch& b, const std::vector<RevId>& since) {
  for (std::size_t i = 0; i < b.length(); ++i) {
    const RevId r = b.rev_at(i);
    if (std::find(since.begin(), since.end(), r) != since.end()) return r.pos;
  }
  return 0;
}

// The "_attachments" member of a document (empty string when it has none).
StorageResult<std::string> attachments_member(Transaction& tr, const DbRef& db, const Branch& b,
                                              const std::vector<AttInfo>& atts,
                                              const DocReadOptions& o,
                                              std::vector<AttInfo>* follows) {
  if (atts.empty()) return std::string();
  const std::int64_t since = o.atts_since ? ancestor_pos(b, *o.atts_since) : 0;
  const bool with_data = o.attachments || o.atts_since.has_value();
  std::string m = "\"_attachments\":{";
  for (std::size_t i = 0; i < atts.size(); ++i) {
    const AttInfo& a = atts[i];
    if (i) m.push_back(',');
    if (!with_data || a.revpos <= since) {
      m += att_member_json(a, AttOutput::stub, o.att_encoding_info);
    } else if (o.att_follows) {
      m += att_member_json(a, AttOutput::follows, o.att_encoding_info);
      if (follows) follows->push_back(a);
    } else {
      auto data = read_att_stored(tr, db, a, 0, a.encoded_length);
      if (!data.ok()) return data.error();
      auto identity = att_identity(a, std::move(*data));  // "data" is always the decoded bytes
      if (!identity) return storage::Error::io_error;
      m += att_member_json(a, AttOutput::data, o.att_encoding_info, *identity);
    }
  }
  return m + "}";
}

// The status of each revision of a path for _revs_info: available, deleted or missing.
StorageResult<std::string> revs_info_member(Transaction& tr, const DbRef& db, std::string_view id,
                                            const Branch& b) {
  std::string ri = "\"_revs_info\":[";
  for (std::size_t i = 0; i < b.length(); ++i) {
    const RevId r = b.rev_at(i);
    std::string status;
    if (i == 0) {
      status = b.deleted ? "deleted" : "available";
    } else {
      auto st = rev_status(tr, db, id, r);  // not the bodies: up to revs_limit ancestors
      if (!st.ok()) return st.error();
      status = *st == RevStatus::missing   ? "missing"
               : *st == RevStatus::deleted ? "deleted"
                                           : "available";
    }
    if (i) ri.push_back(',');
    ri += "{\"rev\":" + json_string(r.str()) + ",\"status\":\"" + status + "\"}";
  }
  return ri + "]";
}

}  // namespace

StorageResult<std::optional<StoredBranch>> find_revision(Transaction& tr, const DbRef& db,
                                                         std::string_view id,
                                                         const std::vector<StoredBranch>& all,
                                                         const RevId& rev) {
  for (const StoredBranch& b : all)
    if (b.branch.leaf == rev) return std::optional<StoredBranch>(b);
  for (const StoredBranch& b : all) {
    const std::int64_t depth = b.branch.leaf.pos - rev.pos;
    if (depth < 1 || depth > static_cast<std::int64_t>(b.branch.ancestors.size()) ||
        b.branch.ancestors[static_cast<std::size_t>(depth - 1)] != rev.hash)
      continue;
    auto rec = read_rev(tr, db, id, rev);
    if (!rec.ok()) return rec.error();
    if (!*rec) return std::optional<StoredBranch>();
    StoredBranch out;
    out.branch.leaf = rev;
    out.branch.deleted = (*rec)->deleted;
    out.branch.ancestors.assign(b.branch.ancestors.begin() + depth, b.branch.ancestors.end());
    out.body_size = static_cast<std::int64_t>((*rec)->body.size());
    return std::optional<StoredBranch>(std::move(out));
  }
  return std::optional<StoredBranch>();
}

namespace {
StorageResult<std::string> render_branch(Transaction& tr, const DbRef& db, std::string_view id,
                                         const std::vector<StoredBranch>& all,
                                         const StoredBranch& b, const DocReadOptions& o,
                                         RenderedAtts* atts_out,
                                         StorageResult<std::optional<RevRecord>> rec);
}  // namespace

StorageResult<std::string> branch_doc_json(Transaction& tr, const DbRef& db, std::string_view id,
                                           const std::vector<StoredBranch>& all,
                                           const StoredBranch& b, const DocReadOptions& o,
                                           RenderedAtts* atts_out) {
  return render_branch(tr, db, id, all, b, o, atts_out, read_rev(tr, db, id, b.branch.leaf));
}

StorageResult<std::string> branch_doc_json(Transaction& tr, const DbRef& db, std::string_view id,
                                           const std::vector<StoredBranch>& all,
                                           const StoredBranch& b, const DocReadOptions& o,
                                           std::optional<RevRecord> record) {
  return render_branch(tr, db, id, all, b, o, nullptr, std::move(record));
}

namespace {
StorageResult<std::string> render_branch(Transaction& tr, const DbRef& db, std::string_view id,
                                         const std::vector<StoredBranch>& all,
                                         const StoredBranch& b, const DocReadOptions& o,
                                         RenderedAtts* atts_out,
                                         StorageResult<std::optional<RevRecord>> rec) {
  if (!rec.ok()) return rec.error();
  std::string_view body = *rec ? std::string_view((*rec)->body) : std::string_view("{}");
  std::optional<std::string> public_body;
  if (o.public_fields) {
    public_body = public_user_doc_body(body, *o.public_fields);
    if (!public_body) return std::string();
    body = *public_body;
  }
  // The branch as the reader sees it: in _replicator, maybe under a made-up leaf revision.
  Branch shown = b.branch;
  if (o.replication_reader && !id.starts_with("_design/")) {
    public_body = masked_replicator_body(body, *o.replication_reader);
    if (public_body) {
      body = *public_body;
      std::optional<RevId> parent;
      if (!shown.ancestors.empty()) parent = RevId{shown.leaf.pos - 1, shown.ancestors.front()};
      static const std::vector<AttInfo> kNoAtts;
      shown.leaf.hash =
          new_rev_hash(shown.deleted, parent, body, {}, *rec ? (*rec)->atts : kNoAtts);
    }
  }
  std::string json = splice_doc(body, id, shown.leaf.str(), {});
  std::vector<std::string> tail;
  if (b.branch.deleted) tail.push_back("\"_deleted\":true");
  if (o.revs) tail.push_back("\"_revisions\":" + revisions_json(shown).dump());
  if (o.revs_info) {
    auto ri = revs_info_member(tr, db, id, shown);
    if (!ri.ok()) return ri.error();
    tail.push_back(std::move(*ri));
  }
  if (o.conflicts || o.deleted_conflicts) {
    std::vector<std::string> conflicts, deleted;
    // Winner order: best first (CouchDB lists conflicts by descending rev).
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if (it->key == all.back().key) continue;
      (it->branch.deleted ? deleted : conflicts).push_back(it->branch.leaf.str());
    }
    if (o.conflicts && !conflicts.empty()) tail.push_back("\"_conflicts\":" + rev_array(conflicts));
    if (o.deleted_conflicts && !deleted.empty())
      tail.push_back("\"_deleted_conflicts\":" + rev_array(deleted));
  }
  // CouchDB's order: _revs_info, _conflicts, _deleted_conflicts, _local_seq, _attachments.
  if (o.local_seq) {
    const StoredBranch& w = all.back();
    if (w.seq) tail.push_back("\"_local_seq\":" + json_string(w.seq->str()));
  }
  if (*rec) {
    if (atts_out) atts_out->any = !(*rec)->atts.empty();
    auto am = attachments_member(tr, db, b.branch, (*rec)->atts, o,
                                 atts_out ? &atts_out->follows : nullptr);
    if (!am.ok()) return am.error();
    if (!am->empty()) tail.push_back(std::move(*am));
  }
  return append_members(std::move(json), tail);
}
}  // namespace

StorageResult<Outcome<std::string>> get_doc_json(Transaction& tr, const DbRef& db,
                                                 std::string_view id, const DocReadOptions& o) {
  using R = Outcome<std::string>;
  const bool need_all = o.rev || o.conflicts || o.deleted_conflicts;
  std::vector<StoredBranch> all;
  if (need_all) {
    auto r = read_branches(tr, db, id, Snapshot::yes);
    if (!r.ok()) return r.error();
    all = std::move(*r);
  } else {
    auto w = read_winner(tr, db, id, Snapshot::yes);
    if (!w.ok()) return w.error();
    if (*w) all.push_back(std::move(**w));
  }
  if (all.empty()) return R(doc_not_found());
  const StoredBranch* chosen = &all.back();
  std::optional<StoredBranch> found;
  if (o.rev) {
    auto f = find_revision(tr, db, id, all, *o.rev);
    if (!f.ok()) return f.error();
    if (!*f) return R(doc_not_found());  // unknown, or superseded and compacted away
    found = std::move(*f);
    chosen = &*found;
  } else if (chosen->branch.deleted) {
    return R(doc_deleted());
  }
  auto json = branch_doc_json(tr, db, id, all, *chosen, o);
  if (!json.ok()) return json.error();
  return R(std::move(*json));
}

StorageResult<std::vector<std::string>> winners_json(
    Transaction& tr, const DbRef& db, const std::vector<std::pair<std::string, RevId>>& docs,
    bool att_encoding_info) {
  std::vector<std::string> out(docs.size());
  if (docs.empty()) return out;
  DocReadOptions o;
  o.att_encoding_info = att_encoding_info;
  auto render = [&](std::size_t i, const RevRecord& rec) -> storage::Status {
    Branch b;
    b.leaf = docs[i].second;
    auto am = attachments_member(tr, db, b, rec.atts, o, nullptr);
    if (!am.ok()) return am.error();
    std::vector<std::string> tail;
    if (!am->empty()) tail.push_back(std::move(*am));
    out[i] = append_members(splice_doc(rec.body, docs[i].first, b.leaf.str(), {}), tail);
    return {};
  };
  // The bodies of all revisions of these documents, in key order: each winner's chunks are one
  // contiguous run. Bounded: what the read does not reach is read document by document.
  std::vector<std::string> prefixes;  // (id, pos, hash) packed: the keys of a winner's chunks
  prefixes.reserve(docs.size());
  for (const auto& [id, rev] : docs)
    prefixes.push_back(db.space.body_prefix(id, rev.pos, rev.hash));
  const std::string begin = db.space.docs().range(Tuple().add(docs.front().first)).first;
  const std::string end = db.space.docs().range(Tuple().add(docs.back().first)).second;
  const int limit = static_cast<int>(docs.size() * 4 + 64);
  auto kvs = tr.get_range(begin, end, limit, Reverse::no, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  std::vector<bool> done(docs.size(), false);
  std::size_t i = 0;
  std::string header, body;
  auto finish = [&]() -> storage::Status {
    bool ok = false;
    std::optional<RevId> base;
    RevRecord rec = decode_header_or_empty(header, ok, &base);
    if (ok && !base && !rec.deleted) {  // (a delta or a tombstone goes the slow way)
      rec.body = std::move(body);
      if (auto st = render(i, rec); !st.ok()) return st;
      done[i] = true;
    }
    header.clear();
    body.clear();
    return {};
  };
  bool open = false;  // collecting the chunks of docs[i]
  for (const KeyValue& kv : *kvs) {
    while (i < prefixes.size() && !kv.key.starts_with(prefixes[i]) && kv.key > prefixes[i]) {
      if (open) {
        if (auto st = finish(); !st.ok()) return st.error();
        open = false;
      }
      ++i;
    }
    if (i == prefixes.size()) break;
    if (!kv.key.starts_with(prefixes[i]) || kv.key.size() <= prefixes[i].size()) continue;
    open = true;
    (is_header_chunk(kv.key, prefixes[i].size()) ? header : body) += kv.value;
  }
  // The last run may continue past what the read returned: only a run the read ended after is
  // complete.
  if (open && kvs->size() < static_cast<std::size_t>(limit))
    if (auto st = finish(); !st.ok()) return st.error();
  for (std::size_t k = 0; k < docs.size(); ++k) {
    if (done[k]) continue;
    auto rec = read_rev(tr, db, docs[k].first, docs[k].second);
    if (!rec.ok()) return rec.error();
    if (!*rec || (*rec)->deleted) {
      out[k] = "null";
      continue;
    }
    i = k;
    if (auto st = render(k, **rec); !st.ok()) return st.error();
  }
  return out;
}

StorageResult<Outcome<std::vector<std::string>>> get_open_revs_json(
    Transaction& tr, const DbRef& db, std::string_view id,
    const std::optional<std::vector<RevId>>& revs, bool latest, const DocReadOptions& o) {
  using R = Outcome<std::vector<std::string>>;
  auto all = read_branches(tr, db, id, Snapshot::yes);
  if (!all.ok()) return all.error();
  std::vector<std::string> out;
  auto ok_entry = [&](const StoredBranch& b) -> storage::Status {
    auto j = branch_doc_json(tr, db, id, *all, b, o);
    if (!j.ok()) return j.error();
    out.push_back("{\"ok\":" + *j + "}");
    return {};
  };
  if (!revs) {
    if (all->empty()) return R(doc_not_found());
    for (auto it = all->rbegin(); it != all->rend(); ++it)
      if (auto s = ok_entry(*it); !s) return s.error();
    return R(std::move(out));
  }
  for (const RevId& rev : *revs) {
    if (StoredBranch* leaf = find_leaf(*all, rev)) {
      if (auto s = ok_entry(*leaf); !s) return s.error();
      continue;
    }
    bool answered = false;
    if (latest) {
      for (auto it = all->rbegin(); it != all->rend(); ++it) {
        const Branch& b = it->branch;
        const std::int64_t depth = b.leaf.pos - rev.pos;
        if (depth >= 1 && depth <= static_cast<std::int64_t>(b.ancestors.size()) &&
            b.ancestors[depth - 1] == rev.hash) {
          if (auto s = ok_entry(*it); !s) return s.error();
          answered = true;
        }
      }
    }
    if (!answered) out.push_back("{\"missing\":" + json_string(rev.str()) + "}");
  }
  return R(std::move(out));
}

OpenRevsSelection select_open_revs(const std::vector<StoredBranch>& all,
                                   const std::optional<std::vector<RevId>>& revs, bool latest) {
  OpenRevsSelection out;
  if (!revs) {
    for (const auto& b : all) out.found.push_back(&b);
  } else {
    for (const RevId& rev : *revs) {
      bool any = false;
      for (const auto& b : all) {
        const std::int64_t depth = b.branch.leaf.pos - rev.pos;
        const bool is_leaf = b.branch.leaf == rev;
        const bool below = latest && depth >= 1 &&
                           depth <= static_cast<std::int64_t>(b.branch.ancestors.size()) &&
                           b.branch.ancestors[static_cast<std::size_t>(depth - 1)] == rev.hash;
        if (is_leaf || below) {
          out.found.push_back(&b);
          any = true;
        }
      }
      if (!any) out.missing.push_back(rev);
    }
  }
  std::sort(out.found.begin(), out.found.end(), [](const StoredBranch* a, const StoredBranch* b) {
    return a->branch.leaf < b->branch.leaf;
  });
  out.found.erase(std::unique(out.found.begin(), out.found.end()), out.found.end());
  std::sort(out.missing.begin(), out.missing.end());
  out.missing.erase(std::unique(out.missing.begin(), out.missing.end()), out.missing.end());
  return out;
}

StorageResult<std::optional<RevsDiff>> revs_diff(Transaction& tr, const DbRef& db,
                                                 std::string_view id,
                                                 const std::vector<std::string>& revs) {
  auto all = read_branches(tr, db, id, Snapshot::yes);
  if (!all.ok()) return all.error();
  std::vector<Branch> branches;
  for (const StoredBranch& sb : *all) branches.push_back(sb.branch);
  RevsDiff d;
  if (branches.empty()) {  // couch_db:get_missing_revs: an unknown document misses them all
    d.missing = revs;
    if (d.missing.empty()) return std::optional<RevsDiff>();
    return std::optional<RevsDiff>(std::move(d));
  }
  // couch_key_tree:find_missing answers the missing revisions sorted; possible_ancestors are the
  // leaves in winner order (couch_doc:to_doc_info) below the highest missing position.
  std::vector<RevId> missing;
  std::vector<std::string> unparsed;
  for (const std::string& text : revs) {
    auto rev = RevId::parse(text);
    if (!rev) {
      unparsed.push_back(text);
    } else if (!contains_rev(branches, *rev)) {
      missing.push_back(std::move(*rev));
    }
  }
  std::sort(missing.begin(), missing.end());
  for (const RevId& r : missing) d.missing.push_back(r.str());
  d.missing.insert(d.missing.end(), unparsed.begin(), unparsed.end());
  if (d.missing.empty()) return std::optional<RevsDiff>();
  if (!missing.empty()) {
    const std::int64_t max_pos = missing.back().pos;
    for (auto it = branches.rbegin(); it != branches.rend(); ++it)
      if (it->leaf.pos < max_pos) d.possible_ancestors.push_back(it->leaf.str());
  }
  return std::optional<RevsDiff>(std::move(d));
}

// ---- _local documents ----

StorageResult<Outcome<std::string>> get_local_json(Transaction& tr, const DbRef& db,
                                                   std::string_view id) {
  using R = Outcome<std::string>;
  auto v = tr.get(db.space.local_key(id), Snapshot::yes);
  if (!v.ok()) return v.error();
  if (!v->has_value()) return R(doc_not_found());
  auto t = Tuple::unpack(**v);
  if (!t || t->size() != 3 || !t->get_int(1) || !t->get_bytes(2)) return storage::Error::io_error;
  return R(splice_doc(*t->get_bytes(2), id, "0-" + std::to_string(*t->get_int(1)), {}));
}

StorageResult<Outcome<std::string>> put_local(Transaction& tr, const DbRef& db, std::string_view id,
                                              const std::optional<std::string>& base_rev,
                                              bool deleted, std::string_view body) {
  using R = Outcome<std::string>;
  const std::string key = db.space.local_key(id);
  // CouchDB 3 (couch_db_updater:update_local_doc_revs) does not compare revisions of _local
  // documents: the new revision is the client's "0-N" plus one (0 when none is given), and a
  // delete always succeeds (the HTTP layer answers 404 for a missing one first).
  std::int64_t prev = 0;
  if (base_rev) {
    std::string_view r = *base_rev;
    if (r.size() < 3 || r.substr(0, 2) != "0-" ||
        r.find_first_not_of("0123456789", 2) != std::string_view::npos || r.size() > 20)
      return R(bad_request("Invalid rev format"));
    prev = std::stoll(std::string(r.substr(2)));
  }
  if (deleted) {
    tr.clear(key);
    return R(std::string("0-0"));
  }
  tr.set(key, Tuple().add(keyspace::kLocalFormat).add(prev + 1).add_bytes(body).pack());
  return R("0-" + std::to_string(prev + 1));
}

}  // namespace chaise::core

namespace chaise::core {

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
