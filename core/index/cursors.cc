#include "core/index/cursors.h"

#include <algorithm>
#include <limits>
#include <tuple>

namespace chaise::core {

using storage::KeyValue;
using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;

namespace {

constexpr std::string_view kDesignPrefix = "_design/";

const storage::Subspace& index_space(const DbRef& db, AllDocsKind kind) {
  return kind == AllDocsKind::local_docs ? db.space.local() : db.space.by_id();
}

std::string id_key(const DbRef& db, AllDocsKind kind, std::string_view id) {
  return index_space(db, kind).pack(Tuple().add(id));
}

// A reader over what `key` packs after `space`'s prefix; nullopt for a key outside `space`.
std::optional<storage::TupleReader> reader_after(const storage::Subspace& space,
                                                 std::string_view key) {
  if (!space.contains(key)) return std::nullopt;
  return storage::TupleReader(key.substr(space.key().size()));
}

// out += an _all_docs row's value: {"rev":<rev>} (and "deleted":true).
void append_rows_value(std::string& out, const RevId& rev, bool deleted) {
  out += "{\"rev\":";
  append_json_rev(out, rev);
  if (deleted) out += ",\"deleted\":true";
  out.push_back('}');
}

std::string rows_value(const RevId& rev, bool deleted) {
  std::string v;
  append_rows_value(v, rev, deleted);
  return v;
}

// {"id":<id>,"key":<id>,"value":{"rev":<rev>} of an _all_docs row (the caller closes it).
std::string all_docs_row_head(std::string_view id, const RevId& rev, std::size_t more) {
  std::string row;
  row.reserve(64 + 2 * id.size() + more);
  row += "{\"id\":";
  append_json_string(row, id);
  row += ",\"key\":";
  append_json_string(row, id);
  row += ",\"value\":";
  append_rows_value(row, rev, false);
  return row;
}

// Keys in [b, e), counted a page at a time; the count stops once it reaches `cap`.
StorageResult<std::int64_t> count_range(
    Transaction& tr, std::string b, const std::string& e,
    std::int64_t cap = std::numeric_limits<std::int64_t>::max()) {
  constexpr int kPageKeys = 10'000;
  std::int64_t n = 0;
  while (b < e && n < cap) {
    auto kvs = tr.get_range(b, e, kPageKeys, Reverse::no, Snapshot::yes);
    if (!kvs.ok()) return kvs.error();
    n += static_cast<std::int64_t>(kvs->size());
    if (kvs->size() < static_cast<std::size_t>(kPageKeys)) break;
    b = storage::key_after(kvs->back().key);
  }
  return n;
}

}  // namespace

AllDocsCursor::AllDocsCursor(DbRef db, AllDocsQuery q) : db_(std::move(db)), q_(std::move(q)) {
  auto [b, e] = index_space(db_, q_.kind).range();
  begin_ = b;
  end_ = e;
  if (q_.kind == AllDocsKind::design_docs) {
    begin_ = std::max(begin_, id_key(db_, q_.kind, kDesignPrefix));
    end_ = std::min(end_, id_key(db_, q_.kind, "_design0"));  // '0' follows '/'
  }
  // In iteration order: start_key first; descending walks from high to low.
  const std::optional<std::string>& lo = q_.descending ? q_.end_key : q_.start_key;
  const std::optional<std::string>& hi = q_.descending ? q_.start_key : q_.end_key;
  const bool lo_inclusive = q_.descending ? q_.inclusive_end : true;
  const bool hi_inclusive = q_.descending ? true : q_.inclusive_end;
  if (lo) {
    std::string k = id_key(db_, q_.kind, *lo);
    begin_ = std::max(begin_, lo_inclusive ? k : storage::key_after(k));
  }
  if (hi) {
    std::string k = id_key(db_, q_.kind, *hi);
    end_ = std::min(end_, hi_inclusive ? storage::key_after(k) : k);
  }
  to_skip_ = std::max<std::int64_t>(0, q_.skip);
  to_emit_ = q_.limit;
  done_ = begin_ >= end_ || to_emit_ == 0;
}

StorageResult<std::int64_t> AllDocsCursor::total_rows(Transaction& tr) {
  if (total_rows_) return *total_rows_;
  StorageResult<std::int64_t> total = std::int64_t{-1};
  if (q_.kind == AllDocsKind::all_docs) total = read_counter(tr, db_, keyspace::kDocCount);
  // No counter of design documents: they are counted (there are few, and by_id holds only live
  // documents, so the count is CouchDB's doc_design_count).
  if (q_.kind == AllDocsKind::design_docs)
    total = count_range(tr, id_key(db_, q_.kind, kDesignPrefix), id_key(db_, q_.kind, "_design0"));
  if (total.ok()) total_rows_ = *total;
  return total;
}

StorageResult<std::int64_t> AllDocsCursor::offset(Transaction& tr) {
  // Keys of the whole index that come before the cursor's start, in iteration order.
  auto [ib, ie] = index_space(db_, q_.kind).range();
  std::string b = q_.descending ? std::max(begin_, end_) : ib;
  std::string e = q_.descending ? ie : std::min(begin_, ie);
  if (q_.descending && end_ < ie) b = end_;
  auto before = count_range(tr, b, e);
  if (!before.ok()) return before.error();
  // fabric_view_all_docs: min(total_rows, offset + skip); total_rows < 0 has no offset.
  auto total = total_rows(tr);
  if (!total.ok()) return total.error();
  return std::min(*total, *before + to_skip_);
}

StorageResult<std::string> AllDocsCursor::row_json(Transaction& tr, std::string_view id,
                                                   const RevId& rev) {
  std::string row = all_docs_row_head(id, rev, 0);
  if (q_.include_docs) {
    std::string doc;
    if (q_.kind == AllDocsKind::local_docs) {
      auto d = get_local_json(tr, db_, id);
      if (!d.ok()) return d.error();
      doc = failed(*d) ? "null" : std::get<std::string>(*d);
    } else {
      DocReadOptions o{};
      o.conflicts = q_.conflicts;
      o.attachments = q_.attachments;
      o.att_encoding_info = q_.att_encoding_info;
      auto d = get_doc_json(tr, db_, id, o);
      if (!d.ok()) return d.error();
      doc = failed(*d) ? "null" : std::get<std::string>(*d);
    }
    row += ",\"doc\":";
    row += doc;
  }
  row.push_back('}');
  return row;
}

StorageResult<bool> AllDocsCursor::next_page(Transaction& tr, std::size_t rows_max,
                                             std::vector<std::string>& out) {
  if (done_) return false;
  const storage::Subspace& space = index_space(db_, q_.kind);
  std::size_t want = rows_max + static_cast<std::size_t>(std::min<std::int64_t>(to_skip_, 100'000));
  if (to_emit_ >= 0)
    want = std::min<std::size_t>(want, static_cast<std::size_t>(to_emit_ + to_skip_));
  auto kvs = tr.get_range(begin_, end_, static_cast<int>(want),
                          q_.descending ? Reverse::yes : Reverse::no, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  // Plain include_docs of live documents: bodies read together (winners_json).
  const bool batch_docs =
      q_.include_docs && q_.kind != AllDocsKind::local_docs && !q_.conflicts && !q_.attachments;
  std::vector<std::pair<std::string, RevId>> batch;
  std::string id;
  for (const KeyValue& kv : *kvs) {
    if (to_skip_ > 0) {
      --to_skip_;
      continue;
    }
    // Key (id), value (format, pos or local revision number, hash): read in place.
    auto k = reader_after(space, kv.key);
    storage::TupleReader v(kv.value);
    if (!k || !k->read_string(&id) || !v.skip()) return storage::Error::io_error;
    RevId rev;
    if (q_.kind == AllDocsKind::local_docs) {
      auto n = v.read_int();
      if (!n) return storage::Error::io_error;
      rev = RevId{0, std::to_string(*n)};
    } else {
      auto pos = v.read_int();
      if (!pos || !v.read_bytes(&rev.hash)) return storage::Error::io_error;
      rev.pos = *pos;
    }
    if (batch_docs) {
      batch.emplace_back(id, std::move(rev));
    } else {
      auto row = row_json(tr, id, rev);
      if (!row.ok()) return row.error();
      out.push_back(std::move(*row));
    }
    if (to_emit_ > 0) --to_emit_;
  }
  if (batch_docs && !batch.empty()) {
    // The page's documents with one range read over their bodies (ids ascending).
    if (q_.descending) std::reverse(batch.begin(), batch.end());
    auto docs = winners_json(tr, db_, batch, q_.att_encoding_info);
    if (!docs.ok()) return docs.error();
    const std::size_t first = out.size();
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto& [doc_id, rev] = batch[i];
      const std::string& doc = (*docs)[i];
      std::string row = all_docs_row_head(doc_id, rev, doc.size() + 8);
      row += ",\"doc\":";
      row += doc;
      row.push_back('}');
      out.push_back(std::move(row));
    }
    if (q_.descending) std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  }
  if (kvs->size() < want || to_emit_ == 0) {
    done_ = true;
  } else if (q_.descending) {
    end_ = kvs->back().key;
  } else {
    begin_ = storage::key_after(kvs->back().key);
  }
  return !done_;
}

StorageResult<std::vector<std::string>> all_docs_keys(Transaction& tr, const DbRef& db,
                                                      const std::vector<AllDocsKey>& keys,
                                                      const AllDocsQuery& q) {
  std::vector<std::string> rows;
  std::int64_t skip = q.skip, left = q.limit;
  auto emit = [&](std::string row) {
    if (skip > 0) {
      --skip;
      return;
    }
    if (left == 0) return;
    if (left > 0) --left;
    rows.push_back(std::move(row));
  };
  for (const AllDocsKey& k : keys) {
    if (!k.is_id) {
      if (q.kind != AllDocsKind::local_docs)
        emit("{\"key\":" + k.text + ",\"error\":\"not_found\"}");
      continue;
    }
    const std::string& key = k.text;
    if (q.kind == AllDocsKind::local_docs) {
      auto d = get_local_json(tr, db, key);
      if (!d.ok()) return d.error();
      if (failed(*d)) continue;  // CouchDB 3.5 leaves unknown local docs out
      auto v = tr.get(db.space.local_key(key), Snapshot::yes);
      if (!v.ok()) return v.error();
      auto t = Tuple::unpack(v->value_or(""));
      std::string row =
          "{\"id\":" + json_string(key) + ",\"key\":" + json_string(key) + ",\"value\":" +
          rows_value(RevId{0, std::to_string(t ? t->get_int(1).value_or(0) : 0)}, false);
      if (q.include_docs) row += ",\"doc\":" + std::get<std::string>(*d);
      emit(row + "}");
      continue;
    }
    auto w = read_winner(tr, db, key, Snapshot::yes);
    if (!w.ok()) return w.error();
    if (!*w) {
      emit("{\"key\":" + json_string(key) + ",\"error\":\"not_found\"}");
      continue;
    }
    const StoredBranch& b = **w;
    std::string row = "{\"id\":" + json_string(key) + ",\"key\":" + json_string(key) +
                      ",\"value\":" + rows_value(b.branch.leaf, b.branch.deleted);
    if (q.include_docs) {
      if (b.branch.deleted) {
        row += ",\"doc\":null";
      } else {
        DocReadOptions o{};
        o.conflicts = q.conflicts;
        o.attachments = q.attachments;
        o.att_encoding_info = q.att_encoding_info;
        auto d = get_doc_json(tr, db, key, o);
        if (!d.ok()) return d.error();
        row += ",\"doc\":" + (failed(*d) ? std::string("null") : std::get<std::string>(*d));
      }
    }
    emit(row + "}");
  }
  return rows;
}

// ---- _changes ----

ChangesCursor::ChangesCursor(DbRef db, ChangesQuery q)
    : db_(std::move(db)), q_(std::move(q)), last_seq_(q_.since) {
  done_ = q_.limit == 0;
  by_doc_ids_ = q_.doc_ids && q_.doc_ids->size() <= kDocIdsLookupMax;
  lookup_ = by_doc_ids_ || q_.design_only;
  if (q_.doc_ids) {
    sorted_doc_ids_ = *q_.doc_ids;
    std::sort(sorted_doc_ids_.begin(), sorted_doc_ids_.end());
  }
}

std::pair<std::string, std::string> ChangesCursor::shard_range(std::int64_t shard) const {
  auto [b, e] = db_.space.changes().range(Tuple().add(shard));
  if (!q_.since.is_zero() && !q_.descending) {
    std::string k = db_.space.changes().pack(
        Tuple().add(shard).add(q_.since.incarnation).add(q_.since.versionstamp));
    b = std::max(b, storage::key_after(k));
  }
  return {std::move(b), std::move(e)};
}

StorageResult<bool> ChangesCursor::init(Transaction& tr) {
  initialized_ = true;
  auto maps = read_shard_maps(tr, db_, Snapshot::yes);
  if (!maps.ok()) return maps.error();
  maps_ = std::move(*maps);
  std::vector<std::int64_t> shards = all_shards(maps_);
  if (q_.shard) {
    if (std::find(shards.begin(), shards.end(), *q_.shard) == shards.end()) return false;
    shards = {*q_.shard};
  }
  for (std::int64_t shard : shards) {
    ShardScan scan;
    scan.shard = shard;
    std::tie(scan.begin, scan.end) = shard_range(shard);
    scans_.push_back(std::move(scan));
  }
  if (q_.descending) {
    // CouchDB starts a descending feed at the update_seq, whatever `since` says; that is its
    // last_seq until a change is scanned.
    auto u = update_seq(tr, db_);
    if (!u.ok()) return u.error();
    last_seq_ = *u;
  } else if (q_.since.count > 0 && !q_.shard && q_.count_bound) {
    count_bound_ = q_.count_bound;
  } else if (q_.since.count > 0 && !q_.shard) {
    // A feed that goes on from a sequence it gave shows N from there on; a made-up N counts for
    // no more than the database's own. The newest change's stored N is not that bound: Ns are
    // taken without conflicts, so the newest change may hold a smaller N than one a page already
    // showed; the change counter is at least every N handed out.
    auto u = update_seq(tr, db_);
    if (!u.ok()) return u.error();
    auto changes = read_counter(tr, db_, keyspace::kChangeCount);
    if (!changes.ok()) return changes.error();
    count_bound_ = std::min(q_.since.count, std::max(u->count, *changes));
  }
  return true;
}

storage::Status ChangesCursor::fetch(Transaction& tr, ShardScan& scan, std::size_t rows_max) {
  if (scan.begin >= scan.end) {
    scan.exhausted = true;
    return {};
  }
  auto kvs = tr.get_range(scan.begin, scan.end, static_cast<int>(rows_max),
                          q_.descending ? Reverse::yes : Reverse::no, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  const storage::Subspace& space = db_.space.changes();
  for (auto& kv : *kvs) {
    // (shard, incarnation, versionstamp), read in place.
    auto k = reader_after(space, kv.key);
    if (!k || !k->skip()) return storage::Error::io_error;
    auto seq = Sequence::read(*k);
    if (!seq) return storage::Error::io_error;
    scan.buffer.push_back(Entry{*seq, std::move(kv.key), std::move(kv.value)});
  }
  if (kvs->size() < rows_max) {
    scan.exhausted = true;
  } else if (q_.descending) {
    scan.end = scan.buffer.back().key;
  } else {
    scan.begin = storage::key_after(scan.buffer.back().key);
  }
  return {};
}

storage::Status ChangesCursor::finish(Transaction& tr) {
  done_ = true;
  if (q_.shard && !maps_.empty()) {
    const auto& current = maps_.back().shards;
    topology_changed_ = std::find(current.begin(), current.end(), *q_.shard) == current.end();
  }
  // CouchDB (couch_changes:send_lookup_changes) ends a lookup that ran to its end at the
  // update_seq (ascending) or at the last row it sent (descending). Not for one shard's feed: its
  // last_seq must stay inside the shard's topology (RFC 004).
  if (!lookup_ || q_.shard || stopped_by_limit()) return {};
  if (q_.descending && last_row_seq_) {
    last_seq_ = *last_row_seq_;
    return {};
  }
  auto u = update_seq(tr, db_);
  if (!u.ok()) return u.error();
  last_seq_ = *u;
  return {};
}

StorageResult<std::optional<std::string>> ChangesCursor::row_json(
    Transaction& tr, const Sequence& seq, const std::string& id, const RevId& rev,
    std::int64_t branch_count, bool deleted, const std::optional<RevRecord>* record) {
  if (q_.design_only && id.compare(0, 8, "_design/") != 0) return std::optional<std::string>();
  if (q_.doc_ids && !std::binary_search(sorted_doc_ids_.begin(), sorted_doc_ids_.end(), id))
    return std::optional<std::string>();
  std::vector<StoredBranch> branches;
  if ((q_.all_docs_style || (q_.include_docs && q_.conflicts)) && branch_count > 1) {
    auto all = read_branches(tr, db_, id, Snapshot::yes);
    if (!all.ok()) return all.error();
    branches = std::move(*all);
  }
  // The winner as this row names it (the entry is rewritten by every edit, so in this snapshot
  // it is the document's winner): all branch_doc_json needs without revs, revs_info, conflicts
  // or atts_since, and no read of the revisions.
  auto named_winner = [&] {
    StoredBranch w;
    w.branch.leaf = rev;
    w.branch.deleted = deleted;
    w.is_winner = true;
    w.branch_count = branch_count;
    branches.push_back(std::move(w));
  };
  // The winner rendered: from the record read ahead when it is that revision's.
  auto winner_json = [&](const DocReadOptions& o) {
    const StoredBranch& w = branches.back();
    if (record && w.branch.leaf == rev)
      return branch_doc_json(tr, db_, id, branches, w, o, *record);
    return branch_doc_json(tr, db_, id, branches, w, o);
  };
  if (q_.selector || q_.doc_filter) {
    // The winning revision as a document (_id, _rev, _deleted included) must match.
    if (branches.empty()) named_winner();
    auto doc = winner_json(DocReadOptions{});
    if (!doc.ok()) return doc.error();
    if (q_.doc_filter && !q_.doc_filter->pass(*doc)) return std::optional<std::string>();
    if (q_.selector) {
      auto parsed = nlohmann::ordered_json::parse(*doc, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded() || !q_.selector->matches(parsed))
        return std::optional<std::string>();
    }
  }
  const std::int64_t sendable =
      q_.limit >= 0 ? q_.limit - emitted_
                    : ChangesQuery::kCouchLimitDefault - q_.rows_sent_before - emitted_;
  const bool show_seq = q_.seq_interval <= 0 || sendable % q_.seq_interval == 0;
  ++emitted_;
  last_row_seq_ = seq;
  std::string row;
  row.reserve(160 + id.size());
  row += "{\"seq\":";
  if (show_seq) {
    row.push_back('"');
    seq.append_str(row);  // digits, '-' and hex
    row.push_back('"');
  } else {
    row += "null";
  }
  row += ",\"id\":";
  append_json_string(row, id);
  row += ",\"changes\":[{\"rev\":";
  append_json_rev(row, rev);
  row.push_back('}');
  if (q_.all_docs_style) {
    // CouchDB lists the winner first, then the other leaves.
    for (auto it = branches.rbegin(); it != branches.rend(); ++it) {
      if (it->branch.leaf == rev) continue;
      row += ",{\"rev\":";
      append_json_rev(row, it->branch.leaf);
      row.push_back('}');
    }
  }
  row.push_back(']');
  if (deleted) row += ",\"deleted\":true";
  if (q_.include_docs) {
    if (branches.empty()) named_winner();
    {
      DocReadOptions o{};
      o.conflicts = q_.conflicts;
      o.attachments = q_.attachments;
      o.att_encoding_info = q_.att_encoding_info;
      auto d = winner_json(o);
      if (!d.ok()) return d.error();
      row += ",\"doc\":";
      row += *d;
    }
  }
  row.push_back('}');
  return std::optional<std::string>(std::move(row));
}

StorageResult<bool> ChangesCursor::next_page_by_doc_ids(Transaction& tr,
                                                        std::vector<std::string>& out) {
  // Look each document up; its winner carries the sequence of its entry in the changes index.
  struct Hit {
    Sequence seq;
    std::string id;
    StoredBranch winner;
  };
  std::vector<Hit> hits;
  for (const std::string& id : *q_.doc_ids) {
    if (std::any_of(hits.begin(), hits.end(), [&](const Hit& h) { return h.id == id; })) continue;
    auto w = read_winner(tr, db_, id, Snapshot::yes);
    if (!w.ok()) return w.error();
    if (!*w || !(*w)->seq) continue;
    Sequence s = *(*w)->seq;
    if (q_.shard) s.count = 0;  // as in next_page
    if (!q_.descending && !(q_.since < s)) continue;
    if (q_.shard && route(map_for(maps_, s), partition_key(db_, id)) != *q_.shard) continue;
    hits.push_back(Hit{s, id, std::move(**w)});
  }
  std::sort(hits.begin(), hits.end(), [&](const Hit& a, const Hit& b) {
    return q_.descending ? b.seq < a.seq : a.seq < b.seq;
  });
  for (Hit& h : hits) {
    if (q_.limit > 0 && emitted_ >= q_.limit) break;
    monotonic_count(h.seq);
    last_seq_ = h.seq;
    auto row = row_json(tr, h.seq, h.id, h.winner.branch.leaf, h.winner.branch_count,
                        h.winner.branch.deleted, nullptr);
    if (!row.ok()) return row.error();
    if (*row) out.push_back(std::move(**row));
  }
  if (auto st = finish(tr); !st) return st.error();
  return false;
}

void ChangesCursor::monotonic_count(Sequence& s) {
  if (q_.shard || s.count == 0) return;
  if (count_bound_ && (q_.descending ? s.count > *count_bound_ : s.count < *count_bound_))
    s.count = *count_bound_;
  count_bound_ = s.count;
}

StorageResult<bool> ChangesCursor::next_page(Transaction& tr, std::size_t rows_max,
                                             std::vector<std::string>& out) {
  if (!initialized_) {  // also for limit=0: pending and a descending last_seq need the scans
    auto known = init(tr);
    if (!known.ok()) return known.error();
    if (!*known) {  // an unknown shard id has no changes
      done_ = true;
      return false;
    }
  }
  if (done_) return false;
  if (by_doc_ids_) return next_page_by_doc_ids(tr, out);
  // A page also ends once its rows pass kPageBytesMax, so that include_docs over large documents
  // holds one modest page in memory (a thousand 3 KB documents were 3 MB and more per page).
  std::size_t page_bytes = 0;
  for (std::size_t consumed = 0; consumed < rows_max && page_bytes < kPageBytesMax;) {
    if (ready_.empty()) {
      std::size_t n = std::min(kReadyBatch, rows_max - consumed);
      if (q_.limit > 0) n = std::min<std::size_t>(n, static_cast<std::size_t>(q_.limit - emitted_));
      if (auto st = take_ready(tr, std::max<std::size_t>(n, 1), rows_max); !st) return st.error();
      if (ready_.empty()) {
        if (auto st = finish(tr); !st) return st.error();
        return false;
      }
    }
    Ready r = std::move(ready_.front());
    ready_.pop_front();
    ++consumed;
    monotonic_count(r.seq);
    last_seq_ = r.seq;
    auto row = row_json(tr, r.seq, r.id, r.rev, r.branch_count, r.deleted,
                        r.record ? &*r.record : nullptr);
    if (!row.ok()) return row.error();
    if (*row) {
      page_bytes += (*row)->size();
      out.push_back(std::move(**row));
    }
    if (q_.limit > 0 && emitted_ >= q_.limit) {
      if (auto st = finish(tr); !st) return st.error();
      return false;
    }
  }
  return true;
}

storage::Status ChangesCursor::take_ready(Transaction& tr, std::size_t n, std::size_t rows_max) {
  while (ready_.size() < n) {
    ShardScan* best = nullptr;
    for (ShardScan& scan : scans_) {
      if (scan.buffer.empty() && !scan.exhausted) {
        if (auto st = fetch(tr, scan, rows_max); !st) return st;
      }
      if (scan.buffer.empty()) continue;
      const Sequence& s = scan.buffer.front().seq;
      if (!best || (q_.descending ? best->buffer.front().seq < s : s < best->buffer.front().seq))
        best = &scan;
    }
    if (!best) break;
    Entry e = std::move(best->buffer.front());
    best->buffer.pop_front();
    // (format, id, pos, hash, branch count, not deleted[, count]), read in place.
    Ready r{e.seq, {}, {}, 0, false, {}};
    storage::TupleReader v(e.value);
    if (!v.skip() || !v.read_string(&r.id)) return storage::Error::io_error;
    auto pos = v.read_int();
    if (!pos || !v.read_bytes(&r.rev.hash)) return storage::Error::io_error;
    r.rev.pos = *pos;
    auto branch_count = v.read_int();
    auto not_deleted = v.read_bool();
    if (!branch_count || !not_deleted) return storage::Error::io_error;
    r.branch_count = *branch_count;
    r.deleted = !*not_deleted;
    // A shard's feed (RFC 004, Chaise's own) keeps the bare fixed-width form: consumers merge
    // shard feeds by comparing the strings.
    if (!v.at_end() && !q_.shard) r.seq.count = v.read_int().value_or(0);
    ready_.push_back(std::move(r));
  }
  // Rows that show or filter documents: the named revisions' bodies in one ordered walk. Rows
  // that _doc_ids or _design leave out are not read.
  if (!q_.include_docs && !q_.selector && !q_.doc_filter) return {};
  std::vector<std::pair<std::string, RevId>> wanted;
  std::vector<Ready*> owners;
  wanted.reserve(ready_.size());
  owners.reserve(ready_.size());
  for (Ready& r : ready_) {
    if (r.record) continue;
    if (q_.design_only && r.id.compare(0, 8, "_design/") != 0) continue;
    if (q_.doc_ids && !std::binary_search(sorted_doc_ids_.begin(), sorted_doc_ids_.end(), r.id))
      continue;
    wanted.emplace_back(r.id, r.rev);
    owners.push_back(&r);
  }
  if (wanted.empty()) return {};
  auto records = read_revs(tr, db_, wanted);
  if (!records.ok()) return records.error();
  for (std::size_t i = 0; i < owners.size(); ++i) owners[i]->record = std::move((*records)[i]);
  return {};
}

StorageResult<std::int64_t> ChangesCursor::bounded(Transaction& tr, std::int64_t counted) {
  if (counted < kPendingCountMax) return counted;
  auto dc = read_counter(tr, db_, keyspace::kDocCount);
  auto ddc = read_counter(tr, db_, keyspace::kDocDelCount);
  if (!dc.ok()) return dc.error();
  if (!ddc.ok()) return ddc.error();
  return std::max(counted, *dc + *ddc);
}

StorageResult<std::int64_t> ChangesCursor::pending(Transaction& tr) {
  if (!initialized_) {
    auto known = init(tr);
    if (!known.ok()) return known.error();
    if (!*known) return std::int64_t{0};
  }
  std::int64_t n = 0;
  if (lookup_) {
    // couch_changes:send_lookup_changes: CouchDB starts from every change after `since` (all of
    // them descending) and takes one off per document its lookup returns; here those are exactly
    // the rows emitted.
    for (const ShardScan& scan : scans_) {
      auto [b, e] = shard_range(scan.shard);
      auto c = count_range(tr, std::move(b), e, kPendingCountMax - n);
      if (!c.ok()) return c.error();
      n += *c;
    }
    auto total = bounded(tr, n);
    if (!total.ok()) return total.error();
    return std::max<std::int64_t>(0, *total - emitted_);
  }
  if (done_ && !stopped_by_limit()) return std::int64_t{0};
  n += static_cast<std::int64_t>(ready_.size());
  for (const ShardScan& scan : scans_) {
    n += static_cast<std::int64_t>(scan.buffer.size());
    if (scan.exhausted) continue;
    auto c = count_range(tr, scan.begin, scan.end, kPendingCountMax - n);
    if (!c.ok()) return c.error();
    n += *c;
  }
  return bounded(tr, n);
}

}  // namespace chaise::core
