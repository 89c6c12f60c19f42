// Documents as CouchDB returns them: a revision's JSON with the members a query asks for
// (_revisions, _revs_info, _conflicts, _deleted_conflicts, _attachments, _local_seq), open_revs,
// and _revs_diff.
#include <algorithm>
#include <cassert>

#include "core/docs/documents.h"
#include "core/docs/stored.h"
#include "core/security/replicator_docs.h"
#include "core/security/security.h"
#include "core/util/json_text.h"

namespace chaise::core {

using storage::KeyValue;
using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;

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

// couch_db:find_ancestor_rev_pos: the pos of the nearest revision on the path (leaf first) that
// is one of `since`; 0 if none is.
static std::int64_t ancestor_pos(const Branch& b, const std::vector<RevId>& since) {
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
static StorageResult<std::string> revs_info_member(Transaction& tr, const DbRef& db,
                                                   std::string_view id, const Branch& b) {
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
  if (all.empty()) return R(err::not_found());
  const StoredBranch* chosen = &all.back();
  std::optional<StoredBranch> found;
  if (o.rev) {
    auto f = find_revision(tr, db, id, all, *o.rev);
    if (!f.ok()) return f.error();
    if (!*f) return R(err::not_found());  // unknown, or superseded and compacted away
    found = std::move(*f);
    chosen = &*found;
  } else if (chosen->branch.deleted) {
    return R(err::doc_deleted());
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
    if (all->empty()) return R(err::not_found());
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

std::optional<RevsDiff> revs_diff(const std::vector<StoredBranch>& all,
                                  const std::vector<std::string>& revs) {
  std::vector<Branch> branches;
  for (const StoredBranch& sb : all) branches.push_back(sb.branch);
  RevsDiff d;
  if (branches.empty()) {  // couch_db:get_missing_revs: an unknown document misses them all
    d.missing = revs;
    if (d.missing.empty()) return std::nullopt;
    return d;
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
  if (d.missing.empty()) return std::nullopt;
  if (!missing.empty()) {
    const std::int64_t max_pos = missing.back().pos;
    for (auto it = branches.rbegin(); it != branches.rend(); ++it)
      if (it->leaf.pos < max_pos) d.possible_ancestors.push_back(it->leaf.str());
  }
  return d;
}

}  // namespace chaise::core
