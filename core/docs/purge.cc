#include "core/docs/purge.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/docs/stored.h"
#include "core/security/security.h"

namespace chaise::core {

using storage::KeyValue;
using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;

namespace {

using RevKey = std::pair<std::int64_t, std::string>;  // (pos, raw hash)

void add_path(std::set<RevKey>& out, const Branch& b) {
  for (std::size_t i = 0; i < b.length(); ++i) {
    const RevId r = b.rev_at(i);
    out.emplace(r.pos, r.hash);
  }
}

// The stored revisions of `id` (their bodies' key ranges), in key order: one read each.
StorageResult<std::vector<RevId>> stored_revisions(Transaction& tr, const DbRef& db,
                                                   std::string_view id) {
  std::vector<RevId> out;
  auto [begin, end] = db.space.docs().range(Tuple().add(id));
  for (;;) {
    auto kvs = tr.get_range(begin, end, 1, Reverse::no, Snapshot::no);
    if (!kvs.ok()) return kvs.error();
    if (kvs->empty()) return out;
    auto k = db.space.docs().unpack(kvs->front().key);
    auto pos = k && k->size() == 4 ? k->get_int(1) : std::nullopt;
    const std::string* hash = pos ? k->get_bytes(2) : nullptr;
    if (!hash) return storage::Error::io_error;
    out.push_back(RevId{*pos, *hash});
    begin = db.space.body_range(id, *pos, *hash).second;
  }
}

// Attachment references dropped by removed bodies: the count is rewritten (read with conflict),
// and bytes that no stored revision names any more go at once.
storage::Status drop_att_refs(Transaction& tr, const DbRef& db,
                              const std::map<std::string, std::int64_t>& drops) {
  for (const auto& [address, n] : drops) {
    const std::string key = att_ref_key(db, address);
    auto v = tr.get(key, Snapshot::no);
    if (!v.ok()) return v.error();
    const std::int64_t left = (*v ? keyspace::decode_counter(**v) : 0) - n;
    if (left > 0) {
      tr.set(key, keyspace::encode_counter(left));
      continue;
    }
    auto [ab, ae] = att_chunks_range(db, address);
    tr.clear_range(ab, ae);
    tr.clear(key);
  }
  return {};
}

}  // namespace

StorageResult<std::vector<RevId>> purge_doc(Transaction& tr, const DbRef& db, const PurgeRequest& r,
                                            const std::vector<ShardMap>& maps, SeqSlot slot,
                                            EditHooks& hooks) {
  auto all = read_branches(tr, db, r.id, Snapshot::no);
  if (!all.ok()) return all.error();
  std::vector<RevId> purged;
  std::vector<bool> gone(all->size(), false);
  for (const RevId& rev : r.revs) {
    for (std::size_t i = 0; i < all->size(); ++i) {
      if (gone[i] || !((*all)[i].branch.leaf == rev)) continue;
      gone[i] = true;
      purged.push_back(rev);
    }
  }
  if (purged.empty()) return purged;

  std::vector<StoredBranch> kept;
  std::set<RevKey> on_purged_paths, on_kept_paths;
  for (std::size_t i = 0; i < all->size(); ++i) {
    if (gone[i]) {
      add_path(on_purged_paths, (*all)[i].branch);
    } else {
      add_path(on_kept_paths, (*all)[i].branch);
      kept.push_back((*all)[i]);
    }
  }
  const StoredBranch& old_winner = all->back();
  const StoredBranch* winner = kept.empty() ? nullptr : &kept.back();  // key order: winner last
  const bool winner_changed = !winner || winner->key != old_winner.key;

  // The indexes kept in this transaction see the new winner (or its absence) first, from the
  // bodies as they are before anything is removed.
  if (hooks.watches_winner(r.id) || hooks.wants_rendered()) {
    std::optional<RevRecord> rec;
    if (winner && !winner->branch.deleted) {
      auto got = read_rev(tr, db, r.id, winner->branch.leaf, Snapshot::no);
      if (!got.ok()) return got.error();
      rec = std::move(*got);
    }
    const std::string* body = rec ? &rec->body : nullptr;
    if (winner_changed)
      if (auto st = hooks.winner_changed(tr, db, r.id, body, true); !st.ok()) return st.error();
    if (hooks.wants_rendered()) {
      std::optional<std::string> doc;
      if (rec) {
        std::vector<Branch> leaves;
        for (const StoredBranch& sb : kept) leaves.push_back(sb.branch);
        auto d =
            doc_for_views(tr, db, r.id, std::move(leaves), winner->branch, rec->body, rec->atts);
        if (!d.ok()) return d.error();
        doc = std::move(*d);
      }
      hooks.rendered(r.id, std::move(doc));
    }
  }

  // Bodies. A revision on a purged path and on no kept one goes; one on both stays, but if its
  // body is a delta against a revision that goes, it is stored whole first. All reads come
  // before the first removal, since a delta is read through its base.
  auto stored = stored_revisions(tr, db, r.id);
  if (!stored.ok()) return stored.error();
  std::int64_t active_delta = 0;
  std::map<std::string, std::int64_t> att_drops;
  std::vector<RevId> removed;
  std::vector<std::pair<RevId, RevRecord>> rewritten;
  for (const RevId& rev : *stored) {
    const RevKey k{rev.pos, rev.hash};
    if (!on_purged_paths.count(k)) continue;
    auto rec = read_stored_record(tr, db, r.id, rev, Snapshot::no);
    if (!rec.ok()) return rec.error();
    if (!*rec) continue;
    const RevRecord& as_stored = (*rec)->rec;
    if (!on_kept_paths.count(k)) {
      for (const AttInfo& a : as_stored.atts) ++att_drops[a.address];
      active_delta -= static_cast<std::int64_t>(as_stored.body.size());
      removed.push_back(rev);
    } else if ((*rec)->base && on_purged_paths.count({(*rec)->base->pos, (*rec)->base->hash}) &&
               !on_kept_paths.count({(*rec)->base->pos, (*rec)->base->hash})) {
      auto whole = read_rev(tr, db, r.id, rev, Snapshot::no);
      if (!whole.ok()) return whole.error();
      if (!*whole) return storage::Error::io_error;
      active_delta += static_cast<std::int64_t>((*whole)->body.size()) -
                      static_cast<std::int64_t>(as_stored.body.size());
      rewritten.emplace_back(rev, std::move(**whole));
    }
  }
  for (const RevId& rev : removed) {
    auto [b, e] = db.space.body_range(r.id, rev.pos, rev.hash);
    tr.clear_range(b, e);
  }
  for (const auto& [rev, rec] : rewritten) {
    auto [b, e] = db.space.body_range(r.id, rev.pos, rev.hash);
    tr.clear_range(b, e);
    write_rev(tr, db, r.id, rev, rec.body, rec.deleted, rec.atts);
  }
  if (auto st = drop_att_refs(tr, db, att_drops); !st.ok()) return st.error();

  // Revision entries, the changes entry, by_id and the counters.
  for (std::size_t i = 0; i < all->size(); ++i)
    if (gone[i]) tr.clear((*all)[i].key);
  if (old_winner.seq) clear_change(tr, db, r.id, maps, *old_winner.seq);
  if (winner) {
    const auto branches = static_cast<std::int64_t>(kept.size());
    tr.set_versionstamped_value(
        winner->key, winner_value_template(winner->branch, branches, winner->body_size, slot));
    write_change(tr, db, r.id, winner->branch, branches, maps, slot);
  }
  if (winner && !winner->branch.deleted) {
    std::string by_id_value;
    storage::pack_int(&by_id_value, keyspace::kByIdFormat);
    storage::pack_int(&by_id_value, winner->branch.leaf.pos);
    storage::pack_bytes(&by_id_value, winner->branch.leaf.hash);
    tr.set(db.space.by_id_key(r.id), by_id_value);
  } else {
    tr.clear(db.space.by_id_key(r.id));
  }
  const auto state = [](const StoredBranch* b) {
    return !b ? WinnerState::none : b->branch.deleted ? WinnerState::deleted : WinnerState::live;
  };
  count_winner_change(tr, db, r.id, state(&old_winner), state(winner),
                      (winner ? winner->body_size : 0) - old_winner.body_size, active_delta);
  // What remembers design documents and _users between transactions (see apply_edit).
  if (r.id.starts_with("_design/") || db.name == kUsersDb) tr.touch_metadata();
  return purged;
}

// ---- The purge log -------------------------------------------------------------------------

void log_purge(Transaction& tr, const DbRef& db, const PurgeRequest& r, std::int64_t purge_seq,
               std::uint16_t order, std::int64_t count) {
  std::string key = db.space.purged().key();
  storage::pack_int(&key, keyspace::kIncarnation);
  storage::append_versionstamp_offset(&key, storage::pack_incomplete_versionstamp(&key, order));
  Tuple revs;
  for (const RevId& rev : r.revs) revs.add(rev.str());
  tr.set_versionstamped_key(
      key,
      Tuple().add(keyspace::kPurgedFormat).add(purge_seq).add(r.id).add(revs).add(count).pack());
}

namespace {

StorageResult<PurgedInfo> decode_purged(const DbRef& db, const KeyValue& kv) {
  auto k = db.space.purged().unpack(kv.key);
  auto v = Tuple::unpack(kv.value);
  auto seq = k ? Sequence::from_tuple(*k) : std::nullopt;
  if (!seq || !v || v->size() < 5) return storage::Error::io_error;
  PurgedInfo info;
  info.seq = *seq;
  auto ps = v->get_int(1);
  const std::string* id = v->get_string(2);
  const Tuple* revs = v->get_tuple(3);
  auto count = v->get_int(4);
  if (!ps || !id || !revs || !count) return storage::Error::io_error;
  info.purge_seq = *ps;
  info.id = *id;
  info.seq.count = *count;
  for (std::size_t i = 0; i < revs->size(); ++i) {
    const std::string* rev = revs->get_string(i);
    if (!rev) return storage::Error::io_error;
    info.revs.push_back(*rev);
  }
  return info;
}

std::string purged_key(const DbRef& db, const Sequence& s) {
  return db.space.purged().pack(s.tuple());
}

}  // namespace

StorageResult<std::int64_t> purge_seq(Transaction& tr, const DbRef& db, Snapshot snapshot) {
  auto v = tr.get(db.space.counter_key(keyspace::kPurgeSeq), snapshot);
  if (!v.ok()) return v.error();
  return *v ? keyspace::decode_counter(**v) : 0;
}

StorageResult<std::vector<PurgedInfo>> purged_infos(Transaction& tr, const DbRef& db,
                                                    const Sequence& after, std::size_t limit) {
  auto [b, e] = db.space.purged().range();
  if (!after.is_zero()) b = storage::key_after(purged_key(db, after));
  auto kvs = tr.get_range(b, e, static_cast<int>(limit), Reverse::no, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  std::vector<PurgedInfo> out;
  out.reserve(kvs->size());
  for (const KeyValue& kv : *kvs) {
    auto info = decode_purged(db, kv);
    if (!info.ok()) return info.error();
    out.push_back(std::move(*info));
  }
  return out;
}

StorageResult<std::optional<PurgedInfo>> purged_info_at(Transaction& tr, const DbRef& db,
                                                        const Sequence& at) {
  using R = std::optional<PurgedInfo>;
  if (at.is_zero()) return R();
  auto [b, e] = db.space.purged().range();
  auto kvs =
      tr.get_range(b, storage::key_after(purged_key(db, at)), 1, Reverse::yes, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  if (kvs->empty()) return R();
  auto info = decode_purged(db, kvs->front());
  if (!info.ok()) return info.error();
  return R(std::move(*info));
}

StorageResult<std::int64_t> purged_infos_limit(Transaction& tr, const DbRef& db) {
  auto v = tr.get(db.space.meta_key(keyspace::kPurgedInfosLimit), Snapshot::no);
  if (!v.ok()) return v.error();
  if (!*v) return kPurgedInfosLimitDefault;
  auto t = Tuple::unpack(**v);
  auto limit = t ? t->get_int(0) : std::nullopt;
  if (!limit) return storage::Error::io_error;
  return *limit;
}

void set_purged_infos_limit(Transaction& tr, const DbRef& db, std::int64_t limit) {
  tr.set(db.space.meta_key(keyspace::kPurgedInfosLimit), Tuple().add(limit).pack());
}

namespace {

struct Trimmed {
  std::int64_t count = 0;
  Sequence through;
};

StorageResult<Trimmed> read_trimmed(Transaction& tr, const DbRef& db, Snapshot snapshot) {
  auto v = tr.get(db.space.meta_key(keyspace::kPurgeTrimmed), snapshot);
  if (!v.ok()) return v.error();
  Trimmed t;
  if (!*v) return t;
  auto parsed = Tuple::unpack(**v);
  auto count = parsed ? parsed->get_int(0) : std::nullopt;
  const Tuple* seq = count ? parsed->get_tuple(1) : nullptr;
  auto s = seq ? Sequence::from_tuple(*seq) : std::nullopt;
  if (!s) return storage::Error::io_error;
  t.count = *count;
  t.through = *s;
  return t;
}

}  // namespace

StorageResult<bool> trim_purged_infos(Transaction& tr, const DbRef& db, std::int64_t written,
                                      std::size_t max) {
  auto limit = purged_infos_limit(tr, db);
  auto total = purge_seq(tr, db, Snapshot::no);
  auto trimmed = read_trimmed(tr, db, Snapshot::no);
  for (storage::Error e : {limit.error(), total.error(), trimmed.error()})
    if (e != storage::Error::success) return e;
  // Entries this transaction logged are not readable yet (versionstamped keys), and they are
  // the newest: only older ones are trimmed, so at most the committed entries go.
  const std::int64_t committed = *total - trimmed->count;
  const std::int64_t excess = std::min(committed, committed + written - *limit);
  if (excess <= 0) return false;
  const auto n =
      static_cast<std::size_t>(std::min<std::int64_t>(excess, static_cast<std::int64_t>(max)));
  auto [b, e] = db.space.purged().range();
  auto kvs = tr.get_range(b, e, static_cast<int>(n), Reverse::no, Snapshot::no);
  if (!kvs.ok()) return kvs.error();
  if (kvs->empty()) return false;
  auto last = decode_purged(db, kvs->back());
  if (!last.ok()) return last.error();
  tr.clear_range(b, storage::key_after(kvs->back().key));
  tr.set(db.space.meta_key(keyspace::kPurgeTrimmed),
         Tuple()
             .add(trimmed->count + static_cast<std::int64_t>(kvs->size()))
             .add(last->seq.tuple())
             .pack());
  return excess > static_cast<std::int64_t>(kvs->size());
}

StorageResult<Sequence> purges_trimmed_through(Transaction& tr, const DbRef& db,
                                               Snapshot snapshot) {
  auto t = read_trimmed(tr, db, snapshot);
  if (!t.ok()) return t.error();
  return t->through;
}

}  // namespace chaise::core
