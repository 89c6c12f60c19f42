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
#include <algorithm>

#include "core/docs/documents.h"
#include "core/docs/stored.h"
#include "core/rev/rev_delta.h"
#include "core/util/json_text.h"

namespace chaise::core {

using storage::KeyValue;
using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;
using storage::Versionstamp;

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
static void pack_parents(std::string* out, const Branch& b) {
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
static bool record_has_header(bool deleted, const std::vector<AttInfo>& atts,
                              const RevId* delta_base) {
  return deleted || !atts.empty() || delta_base != nullptr;
}

// A revision's record: body chunks at Chunk >= 0; when the revision is deleted or has
// attachments, a header (kRevHeaderFormat, Deleted, AttList) split over Chunk -k..-1 (key order is
// byte order, so the pieces concatenate back in order).
// With `delta_base`, the body is a delta against that revision's body (core/rev/rev_delta.h).
void write_rev(Transaction& tr, const DbRef& db, std::string_view id, const RevId& rev,
               std::string_view body, bool deleted, const std::vector<AttInfo>& atts,
               const RevId* delta_base) {
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

StoredBranch* find_leaf(std::vector<StoredBranch>& all, const RevId& rev) {
  for (auto& b : all)
    if (b.branch.leaf == rev) return &b;
  return nullptr;
}

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

StorageResult<std::vector<std::vector<StoredBranch>>> read_branches_of(
    Transaction& tr, const DbRef& db, const std::vector<std::string_view>& ids, Snapshot snapshot) {
  // get_ranges takes ascending, disjoint ranges: each distinct id once, in key order.
  std::vector<std::pair<std::string, std::string>> ranges;
  ranges.reserve(ids.size());
  for (std::string_view id : ids) ranges.push_back(db.space.doc_revisions_range(id));
  std::vector<std::size_t> order(ids.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return ranges[a].first < ranges[b].first; });
  std::vector<storage::KeyRange> distinct;
  std::vector<std::size_t> slot(ids.size());  // ids[i]'s index in `distinct`
  for (std::size_t i : order) {
    if (distinct.empty() || distinct.back().begin != ranges[i].first)
      distinct.push_back({ranges[i].first, ranges[i].second});
    slot[i] = distinct.size() - 1;
  }
  auto read = tr.get_ranges(distinct, 0, snapshot);
  if (!read.ok()) return read.error();
  std::vector<std::vector<StoredBranch>> decoded(distinct.size());
  for (std::size_t r = 0; r < distinct.size(); ++r) {
    for (const KeyValue& kv : (*read)[r]) {
      auto sb = decode_branch(db.space, kv);
      if (!sb) return storage::Error::io_error;
      decoded[r].push_back(std::move(*sb));
    }
  }
  std::vector<std::vector<StoredBranch>> out(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) out[i] = decoded[slot[i]];
  return out;
}

struct ByIdEntry {
  RevId rev;
  bool body_only = false;  // kByIdBodyOnlyFormat
};

static StorageResult<std::optional<ByIdEntry>> read_by_id(Transaction& tr, const DbRef& db,
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

StorageResult<std::optional<RevId>> live_winner_rev(Transaction& tr, const DbRef& db,
                                                    std::string_view id, Snapshot snapshot) {
  auto e = read_by_id(tr, db, id, snapshot);
  if (!e.ok()) return e.error();
  if (!*e) return std::optional<RevId>();
  return std::optional<RevId>(std::move((*e)->rev));
}

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

// Integers below zero are type codes 0x0c..0x13 in FoundationDB's tuple encoding, zero is 0x14.
constexpr unsigned char kTupleIntZero = 0x14;
bool is_header_chunk(std::string_view key, std::size_t chunk_at) {
  return static_cast<unsigned char>(key[chunk_at]) < kTupleIntZero;
}

RevRecord decode_header_or_empty(std::string_view header, bool& ok,
                                 std::optional<RevId>* delta_base) {
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

// `no_header`: the caller knows the record has none (by_id's kByIdBodyOnlyFormat), so a body of
// one chunk is read alone.
StorageResult<std::optional<StoredRecord>> read_stored_record(Transaction& tr, const DbRef& db,
                                                              std::string_view id, const RevId& rev,
                                                              Snapshot snapshot, bool no_header) {
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

}  // namespace chaise::core
