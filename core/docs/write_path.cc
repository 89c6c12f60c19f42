// The write path of RFC 003: an interactive edit (update_doc) or a replicated revision
// (replicate_doc) becomes an EditPlan against the document's stored branches, runs the edit hooks,
// and apply_edit writes it: revision entries, body, changes, by_id and counters, all blind writes.
#include <algorithm>

#include "core/docs/documents.h"
#include "core/docs/stored.h"
#include "core/rev/couch_rev.h"
#include "core/security/security.h"
#include "core/util/json_text.h"

namespace chaise::core {

using storage::KeyValue;
using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;

void clear_change(Transaction& tr, const DbRef& db, std::string_view id,
                  const std::vector<ShardMap>& maps, const Sequence& seq) {
  // The shard of an entry is the route of its partition key in the map in force at its sequence
  // (RFC 004): computed, not stored.
  tr.clear(changes_key(db, route(map_for(maps, seq), partition_key(db, id)), seq));
}

void write_change(Transaction& tr, const DbRef& db, std::string_view id, const Branch& winner,
                  std::int64_t branch_count, const std::vector<ShardMap>& maps, SeqSlot slot) {
  // New entries go to the current map's shard. (Shard, Incarnation, Versionstamp) -> (format,
  // id, pos, hash, branches, live, count), packed element by element: every edit writes them.
  std::string ck = db.space.changes().key();
  storage::pack_int(&ck, route(maps.back(), partition_key(db, id)));
  storage::pack_int(&ck, keyspace::kIncarnation);
  storage::append_versionstamp_offset(&ck, storage::pack_incomplete_versionstamp(&ck, slot.order));
  std::string seq_value;
  storage::pack_int(&seq_value, keyspace::kSeqFormat);
  storage::pack_string(&seq_value, id);
  storage::pack_int(&seq_value, winner.leaf.pos);
  storage::pack_bytes(&seq_value, winner.leaf.hash);
  storage::pack_int(&seq_value, branch_count);
  storage::pack_bool(&seq_value, !winner.deleted);
  storage::pack_int(&seq_value, slot.count);
  tr.set_versionstamped_key(ck, seq_value);
}

void count_winner_change(Transaction& tr, const DbRef& db, std::string_view id, WinnerState before,
                         WinnerState after, std::int64_t external_delta,
                         std::int64_t active_delta) {
  std::int64_t dc = 0, ddc = 0;
  if (after == WinnerState::live && before != WinnerState::live) dc = 1;
  if (after != WinnerState::live && before == WinnerState::live) dc = -1;
  if (after == WinnerState::deleted && before != WinnerState::deleted) ddc = 1;
  if (after != WinnerState::deleted && before == WinnerState::deleted) ddc = -1;
  if (dc) tr.add(db.space.counter_key(keyspace::kDocCount), dc);
  if (ddc) tr.add(db.space.counter_key(keyspace::kDocDelCount), ddc);
  if (external_delta) tr.add(db.space.counter_key(keyspace::kSizeExternal), external_delta);
  if (active_delta) tr.add(db.space.counter_key(keyspace::kSizeActive), active_delta);
  // GET /{db}/_partition/{p} reads the same counters per partition.
  if (const auto colon = id.find(':');
      db.partitioned && colon != std::string_view::npos && !id.starts_with("_design/")) {
    const std::string_view part = id.substr(0, colon);
    if (dc) tr.add(db.space.partition_counter_key(part, keyspace::kDocCount), dc);
    if (ddc) tr.add(db.space.partition_counter_key(part, keyspace::kDocDelCount), ddc);
    if (external_delta)
      tr.add(db.space.partition_counter_key(part, keyspace::kSizeExternal), external_delta);
    if (active_delta)
      tr.add(db.space.partition_counter_key(part, keyspace::kSizeActive), active_delta);
  }
}

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
      if (!u.carried_over && !u.preuploaded) write_att_chunks(tr, db, u.info.address, u.stored);
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
  if (p.old_winner && p.old_winner->seq) clear_change(tr, db, id, maps, *p.old_winner->seq);
  write_change(tr, db, id, winner, p.branch_count, maps, slot);
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
  const auto state = [](const std::optional<StoredBranch>& b) {
    return !b ? WinnerState::none : b->branch.deleted ? WinnerState::deleted : WinnerState::live;
  };
  const std::int64_t ext_delta = winner_size - (p.old_winner ? p.old_winner->body_size : 0);
  count_winner_change(tr, db, id, state(p.old_winner),
                      winner.deleted ? WinnerState::deleted : WinnerState::live, ext_delta,
                      active_delta);
  return storage::Status{};
}

namespace {

CouchError missing_stub(std::string_view id, std::string_view name) {
  return err::missing_stub("Invalid attachment stub in " + std::string(id) + " for " +
                           std::string(name));
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
    if (!u.carried_over) {
      AttInfo a = u.info;
      a.name = u.name;
      if (interactive || a.revpos <= 0) a.revpos = new_pos;
      if (u.preuploaded) {
        auto present = att_present(tr, db, a.address, a.encoded_length);
        if (!present.ok()) return present.error();
        if (!*present) return R(err::unknown_error("attachment_data_missing"));
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
  inputs.reserve(atts.size());
  for (const AttInfo& a : atts) inputs.push_back(a.name + '\0' + a.content_type + '\0' + a.md5);
  return compute_rev_hash(deleted, parent, body, inputs);
}

StorageResult<std::string> doc_for_views(Transaction& tr, const DbRef& db, std::string_view id,
                                         std::vector<Branch> leaves, const Branch& winner,
                                         std::string_view body, const std::vector<AttInfo>& atts) {
  std::vector<std::string> tail;
  std::sort(leaves.begin(), leaves.end(),
            [](const Branch& x, const Branch& y) { return winner_less(y, x); });  // best first
  std::vector<std::string> conflicts;
  for (const Branch& l : leaves)
    if (!l.deleted && !(l.leaf == winner.leaf)) conflicts.push_back(l.leaf.str());
  if (!conflicts.empty()) tail.push_back("\"_conflicts\":" + rev_array(conflicts));
  auto am = attachments_member(tr, db, winner, atts, DocReadOptions{}, nullptr);
  if (!am.ok()) return am.error();
  if (!am->empty()) tail.push_back(std::move(*am));
  return append_members(splice_doc(body, id, winner.leaf.str(), {}), tail);
}

namespace {

// Every leaf of the document after edit `p` (none but the added one when it has a single
// branch), read before apply_edit writes it: the new winner's revision key is not readable in
// its own transaction.
StorageResult<std::vector<Branch>> leaves_after(Transaction& tr, const DbRef& db,
                                                std::string_view id, const EditPlan& p) {
  std::vector<Branch> leaves;
  if (p.branch_count > 1) {
    auto before = read_branches(tr, db, id, Snapshot::yes);
    if (!before.ok()) return before.error();
    for (const StoredBranch& sb : *before)
      if (!p.removed || sb.key != p.removed->key) leaves.push_back(sb.branch);
  }
  leaves.push_back(p.added);
  return leaves;
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
      auto leaves = leaves_after(tr, db, id, p);
      if (!leaves.ok()) return leaves.error();
      auto r = doc_for_views(tr, db, id, std::move(*leaves), winner, *body, atts);
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
    if (!v->has_value()) return R(err::conflict());
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
      if (winner && !winner->branch.deleted) return R(err::conflict());
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

}  // namespace chaise::core
