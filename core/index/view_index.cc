#include "core/index/view_index.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_set>

#include "core/db/idempotency.h"
#include "core/db/keyspace.h"
#include "core/docs/purge.h"
#include "core/index/cursors.h"
#include "core/index/mango_index.h"
#include "core/index/reduce_tree.h"
#include "core/index/sync_index.h"
#include "core/query/collation.h"
#include "core/util/digest.h"

namespace chaise::core {

namespace {

using storage::KeyValue;
using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;

std::string json_text(std::string_view s) { return OrderedJson(std::string(s)).dump(); }

storage::Subspace index_space(const DbRef& db, const ViewGroup& g) {
  return db.space.view_index(g.signature);
}
std::string seq_key(const DbRef& db, const ViewGroup& g) {
  return index_space(db, g).pack(Tuple().add(keyspace::kViewSeq));
}
// A partitioned group keeps each partition's rows, nodes and count apart: one more element.
Tuple view_tuple(std::int64_t kind, const ViewGroup& g, std::size_t view,
                 const std::string& partition) {
  Tuple t = Tuple().add(kind).add(static_cast<std::int64_t>(view));
  if (g.partitioned) t.add(partition);
  return t;
}
std::string partition_of(std::string_view doc_id) {
  const auto colon = doc_id.find(':');
  return std::string(colon == std::string_view::npos ? std::string_view()
                                                     : doc_id.substr(0, colon));
}
storage::Subspace rows_space(const DbRef& db, const ViewGroup& g, std::size_t view,
                             const std::string& partition = {}) {
  return index_space(db, g).sub(view_tuple(keyspace::kViewRows, g, view, partition));
}
storage::Subspace ids_space(const DbRef& db, const ViewGroup& g) {
  return index_space(db, g).sub(Tuple().add(keyspace::kViewIds));
}
storage::Subspace nodes_space(const DbRef& db, const ViewGroup& g, std::size_t view,
                              const std::string& partition = {}) {
  return index_space(db, g).sub(view_tuple(keyspace::kViewNodes, g, view, partition));
}
std::string count_key(const DbRef& db, const ViewGroup& g, std::size_t view,
                      const std::string& partition = {}) {
  return index_space(db, g).pack(view_tuple(keyspace::kViewCounts, g, view, partition));
}

}  // namespace

// ---- ViewGroup ----------------------------------------------------------------------------------

Outcome<ViewGroup> ViewGroup::from_design_doc(const std::string& ddoc_id, const std::string& json,
                                              const std::string& js_key, bool db_partitioned) {
  OrderedJson doc = OrderedJson::parse(json, nullptr, false);
  if (!doc.is_object()) return err::unknown_error("design document is not JSON");
  ViewGroup g;
  g.ddoc_id = ddoc_id;
  g.ddoc = js::DesignDoc{js_key, json};
  g.language = doc.contains("language") && doc["language"].is_string()
                   ? doc["language"].get<std::string>()
                   : "javascript";
  OrderedJson sig_input = OrderedJson::object();
  sig_input["language"] = g.language;
  g.partitioned = db_partitioned;
  if (auto o = doc.find("options"); o != doc.end() && o->is_object()) {
    g.include_design = o->value("include_design", false) == true;
    g.local_seq = o->value("local_seq", false) == true;
    g.sync = o->value("sync_index", false) == true && !g.local_seq;
    if (o->contains("partitioned") && (*o)["partitioned"] == false) g.partitioned = false;
    sig_input["options"] = *o;
  }
  if (g.partitioned) sig_input["partitioned"] = true;
  auto views = doc.find("views");
  if (views != doc.end() && views->is_object()) {
    for (auto it = views->begin(); it != views->end(); ++it) {
      if (it.key() == "lib") {
        sig_input["lib"] = it.value();
        continue;
      }
      const OrderedJson& v = it.value();
      if (!v.is_object() || !v.contains("map")) continue;
      ViewDef d;
      d.name = it.key();
      if (g.language == "query" && v["map"].is_object()) {
        d.mango_map = v["map"];
        d.map = v["map"].dump();
      } else if (v["map"].is_string()) {
        d.map = v["map"].get<std::string>();
      } else {
        continue;
      }
      if (v.contains("reduce") && v["reduce"].is_string())
        d.reduce = v["reduce"].get<std::string>();
      g.views.push_back(std::move(d));
    }
  }
  std::sort(g.views.begin(), g.views.end(),
            [](const ViewDef& a, const ViewDef& b) { return a.name < b.name; });
  OrderedJson vs = OrderedJson::array();
  for (const ViewDef& d : g.views) {
    OrderedJson o = OrderedJson::object();
    o["name"] = d.name;
    o["map"] = d.map;
    o["reduce"] = d.reduce ? OrderedJson(*d.reduce) : OrderedJson(nullptr);
    vs.push_back(o);
  }
  sig_input["views"] = vs;
  // Indexes of earlier formats (before the reduce tree) are rebuilt under a new signature.
  sig_input["format"] = 2;
  g.signature = md5_hex(sig_input.dump());
  return g;
}

std::optional<std::size_t> ViewGroup::index_of(std::string_view view) const {
  for (std::size_t i = 0; i < views.size(); ++i)
    if (views[i].name == view) return i;
  return std::nullopt;
}

// ---- Building -----------------------------------------------------------------------------------

StorageResult<std::int64_t> view_index_size(Transaction& tr, const DbRef& db, const ViewGroup& g) {
  const auto [begin, end] = index_space(db, g).range();
  return tr.get_estimated_range_size_bytes(begin, end);
}

StorageResult<Sequence> view_index_seq(Transaction& tr, const DbRef& db, const ViewGroup& g,
                                       Snapshot snapshot) {
  auto v = tr.get(seq_key(db, g), snapshot);
  if (!v.ok()) return v.error();
  if (!*v) return Sequence{};
  if (auto s = Sequence::parse(**v)) return *s;
  // Written by a synchronous index's writer: (Incarnation, Versionstamp) of its transaction.
  auto t = Tuple::unpack(**v);
  auto s = t ? Sequence::from_tuple(*t) : std::nullopt;
  if (!s) return storage::Error::io_error;
  return *s;
}

StorageResult<std::int64_t> view_row_count(Transaction& tr, const DbRef& db, const ViewGroup& g,
                                           std::size_t view, const std::string& partition) {
  auto v = tr.get(count_key(db, g, view, partition), Snapshot::yes);
  if (!v.ok()) return v.error();
  return *v ? keyspace::decode_counter(**v) : 0;
}

namespace {

// Only JavaScript views are queried through _view: the "_count" of Mango indexes (kept for
// CouchDB's design document shape) is never read, so it gets no reduce tree.
bool reduces_queried(const ViewGroup& g) { return g.language == "javascript"; }

struct ChangedDoc {
  std::string id;
  bool mapped = false;
  std::size_t doc = 0;  // index into docs
};

// Old rows of `changed` out (through the id index), the rows the views emit for the mapped
// ones in, row counts and reduce trees updated. `limit_writes`: stop once the transaction holds
// kWriteBytesPerStep (at least one document is applied). Returns how many were applied.
StorageResult<Outcome<std::size_t>> index_docs(Transaction& tr, const DbRef& db, const ViewGroup& g,
                                               js::Engine* js_engine,
                                               const std::vector<ChangedDoc>& changed,
                                               const std::vector<std::string>& docs,
                                               bool limit_writes) {
  std::vector<std::string> mapped;
  if (!docs.empty() && !g.views.empty() && g.language == "query") {
    // Mango json indexes: the key is the indexed fields' values, in C++.
    for (const std::string& text : docs) {
      OrderedJson doc = OrderedJson::parse(text, nullptr, false);
      OrderedJson per_view = OrderedJson::array();
      for (const ViewDef& v : g.views) {
        OrderedJson rows = OrderedJson::array();
        if (v.mango_map)
          if (auto key = mango_index_key(doc, *v.mango_map))
            rows.push_back(OrderedJson::array({*key, nullptr}));
        per_view.push_back(std::move(rows));
      }
      mapped.push_back(per_view.dump());
    }
  } else if (!docs.empty() && !g.views.empty()) {
    std::vector<std::string> names;
    for (const ViewDef& v : g.views) names.push_back(v.name);
    auto m = js_engine->map(g.ddoc, names, docs);
    if (auto* e = std::get_if<js::JsError>(&m)) {
      const int status = e->error == "compilation_error" ? 400 : 500;
      return Outcome<std::size_t>(CouchError{status, e->error, e->reason});
    }
    mapped = std::move(std::get<std::vector<std::string>>(m));
  }

  // Row count changes per (view, partition).
  std::map<std::pair<std::size_t, std::string>, std::int64_t> delta;
  const storage::Subspace ids = ids_space(db, g);
  // Rows changed per (view with a reduce function, partition): key suffix -> exists now, for the
  // reduce tree.
  std::map<std::pair<std::size_t, std::string>, std::map<std::string, bool>> touched;
  auto touch = [&](std::size_t v, const std::string& partition, const std::string& suffix,
                   bool exists) {
    if (g.views[v].reduce && reduces_queried(g)) touched[{v, partition}][suffix] = exists;
  };
  // The rows a step writes are bounded too (a document may emit many): once the transaction
  // holds kWriteBytesPerStep, the remaining documents wait for the next step. The first one is
  // always applied, so a step always progresses.
  std::size_t applied = 0;
  for (const ChangedDoc& c : changed) {
    if (limit_writes && applied > 0 &&
        tr.approximate_size() > storage::share_of_size_limit(kWriteBytesPerStep, tr.size_limit()))
      break;
    ++applied;
    const std::string partition = g.partitioned ? partition_of(c.id) : std::string();
    // Old rows out, through the id index.
    auto [b, e] = ids.range(Tuple().add(c.id));
    for (;;) {
      auto kvs = tr.get_range(b, e, 1000, Reverse::no, Snapshot::yes);
      if (!kvs.ok()) return kvs.error();
      for (const KeyValue& kv : *kvs) {
        // Key by key, not a range clear: RocksDB re-fragments every range tombstone in the
        // memtable on each read, and a synchronous index clears one per write.
        tr.clear(kv.key);
        auto t = ids.unpack(kv.key);
        if (!t || t->size() != 5) return storage::Error::io_error;
        auto view = t->get_int(1);
        const std::string* ck = t->get_bytes(2);
        const std::string* vck = t->get_bytes(3);
        auto n = t->get_int(4);
        if (!view || !ck || !vck || !n || *view < 0 ||
            static_cast<std::size_t>(*view) >= g.views.size())
          continue;  // (cannot happen: the signature fixes the views)
        const auto vi = static_cast<std::size_t>(*view);
        const storage::Subspace rows = rows_space(db, g, vi, partition);
        const std::string row_key =
            rows.pack(Tuple().add_bytes(*ck).add(c.id).add_bytes(*vck).add(*n));
        tr.clear(row_key);
        touch(vi, partition, row_key.substr(rows.key().size()), false);
        --delta[{vi, partition}];
      }
      if (kvs->size() < 1000) break;
      b = storage::key_after(kvs->back().key);
    }
    if (!c.mapped) continue;
    OrderedJson per_view = OrderedJson::parse(mapped.at(c.doc), nullptr, false);
    if (!per_view.is_array()) return storage::Error::io_error;
    for (std::size_t v = 0; v < per_view.size() && v < g.views.size(); ++v) {
      const storage::Subspace rows = rows_space(db, g, v, partition);
      std::int64_t n = 0;
      for (const OrderedJson& kv : per_view[v]) {
        if (!kv.is_array() || kv.size() != 2) continue;
        const std::string ck = collation_key(kv[0]);
        const std::string vck = collation_key(kv[1]);
        std::string value = kv[0].dump();
        value += '\n';
        value += kv[1].dump();
        const std::string row_key =
            rows.pack(Tuple().add_bytes(ck).add(c.id).add_bytes(vck).add(n));
        tr.set(row_key, value);
        touch(v, partition, row_key.substr(rows.key().size()), true);
        tr.set(ids.pack(Tuple()
                            .add(c.id)
                            .add(static_cast<std::int64_t>(v))
                            .add_bytes(ck)
                            .add_bytes(vck)
                            .add(n)),
               "");
        ++n;
        ++delta[{v, partition}];
      }
    }
  }
  for (const auto& [vp, d] : delta)
    if (d != 0) tr.add(count_key(db, g, vp.first, vp.second), d);
  for (const auto& [vp, rows_touched] : touched) {
    const auto& [v, partition] = vp;
    Reducer reducer(*g.views[v].reduce, js_engine);
    ReduceTree tree(rows_space(db, g, v, partition), nodes_space(db, g, v, partition), reducer);
    if (auto st = tree.update(tr, rows_touched); !st) return st.error();
  }
  return Outcome<std::size_t>(applied);
}

}  // namespace

StorageResult<Outcome<bool>> update_step(Transaction& tr, const DbRef& db, const ViewGroup& g,
                                         js::Engine& js, std::size_t* applied_out) {
  if (applied_out != nullptr) *applied_out = 0;
  auto since = view_index_seq(tr, db, g, Snapshot::no);
  if (!since.ok()) return since.error();
  if (!since->is_zero()) {
    // Purge entries this index has not taken in were trimmed: it starts again.
    auto trimmed = purges_trimmed_through(tr, db, Snapshot::yes);
    if (!trimmed.ok()) return trimmed.error();
    if (*since < *trimmed) {
      auto [b, e] = index_space(db, g).range();
      tr.clear_range(b, e);
      *since = Sequence{};
    }
  }
  ChangesQuery q;
  q.since = *since;
  q.include_docs = true;
  q.conflicts = true;  // map functions see _conflicts, as in CouchDB
  q.limit = static_cast<std::int64_t>(kDocsPerStep);
  ChangesCursor cursor(db, q);
  std::vector<std::string> rows;
  auto more = cursor.next_page(tr, kDocsPerStep, rows);
  if (!more.ok()) return more.error();
  // Documents purged after the index's sequence lose their rows, in sequence order with the
  // changes (a purged document that stays has a change after its purge). An index never built
  // has no rows to lose.
  std::vector<PurgedInfo> purges;
  if (!since->is_zero()) {
    auto p = purged_infos(tr, db, *since, kDocsPerStep);
    if (!p.ok()) return p.error();
    purges = std::move(*p);
  }
  if (rows.empty() && purges.empty()) {
    if (g.sync)
      if (auto st = sync_index_caught_up(tr, db, g.signature); !st.ok()) return st.error();
    return Outcome<bool>(true);
  }

  struct Event {
    Sequence seq;
    std::string id;
    std::optional<std::string> doc;  // a change's document as the views map it, serialized
  };
  std::vector<Event> changes;
  std::size_t bytes = 0;
  for (const std::string& row : rows) {
    OrderedJson r = OrderedJson::parse(row, nullptr, false);
    if (!r.is_object() || !r.contains("id")) return storage::Error::io_error;
    auto seq = Sequence::parse(r.value("seq", ""));
    if (!seq) return storage::Error::io_error;
    Event ev{*seq, r["id"].get<std::string>(), std::nullopt};
    const bool deleted = r.value("deleted", false);
    const bool design = ev.id.starts_with("_design/");
    if (!deleted && (!design || g.include_design) && r.contains("doc") && r["doc"].is_object()) {
      OrderedJson& d = r["doc"];
      if (g.local_seq) d["_local_seq"] = r["seq"];
      ev.doc = d.dump();
      bytes += ev.doc->size();
    }
    changes.push_back(std::move(ev));
    if (bytes > kBytesPerStep) break;  // the rest waits for the next step
  }
  // What this step can order: up to the last change read when more may follow, and up to the
  // last purge read when more may follow.
  const bool changes_cut = *more || rows.size() >= kDocsPerStep || changes.size() < rows.size();
  const bool purges_cut = purges.size() >= kDocsPerStep;
  std::optional<Sequence> bound;
  if (changes_cut) bound = changes.back().seq;
  if (purges_cut && (!bound || purges.back().seq < *bound)) bound = purges.back().seq;
  std::vector<Event> events;
  std::unordered_set<std::string> changed_ids;
  for (const Event& c : changes)
    if (!bound || !(*bound < c.seq)) changed_ids.insert(c.id);
  std::size_t ci = 0, pi = 0;
  for (;;) {
    const bool take_change = ci < changes.size() && (!bound || !(*bound < changes[ci].seq));
    const bool take_purge = pi < purges.size() && (!bound || !(*bound < purges[pi].seq));
    if (!take_change && !take_purge) break;
    if (take_change && (!take_purge || changes[ci].seq < purges[pi].seq)) {
      events.push_back(std::move(changes[ci++]));
    } else {
      // A document changed after its purge loses its old rows through that change.
      if (!changed_ids.count(purges[pi].id))
        events.push_back(Event{purges[pi].seq, purges[pi].id, std::nullopt});
      ++pi;
    }
  }
  const bool cut = changes_cut || purges_cut || ci < changes.size() || pi < purges.size();

  std::vector<ChangedDoc> changed;
  std::vector<std::string> docs;
  for (Event& ev : events) {
    ChangedDoc c;
    c.id = ev.id;
    if (ev.doc) {
      c.mapped = true;
      c.doc = docs.size();
      docs.push_back(std::move(*ev.doc));
    }
    changed.push_back(std::move(c));
  }
  // Never empty: a dropped purge has its document's change after it among the events.
  auto indexed = index_docs(tr, db, g, &js, changed, docs, true);
  if (!indexed.ok()) return indexed.error();
  if (auto* e = std::get_if<CouchError>(&*indexed)) return Outcome<bool>(std::move(*e));
  const std::size_t applied = std::get<std::size_t>(*indexed);
  if (applied_out != nullptr) *applied_out = applied;
  // Where this step got to: the last event it handled (a purge dropped for a later change of
  // its document is handled by that change).
  const Sequence reached = events[applied - 1].seq;
  tr.set(seq_key(db, g), reached.str());
  const bool caught_up = !cut && applied == events.size();
  if (caught_up && g.sync)
    if (auto st = sync_index_caught_up(tr, db, g.signature); !st.ok()) return st.error();
  return Outcome<bool>(caught_up);
}

namespace {

std::string build_claim_key(const DbRef& db, const ViewGroup& g) {
  return index_space(db, g).pack(Tuple().add(keyspace::kViewBuildClaim));
}

}  // namespace

ViewIndexBuild::ViewIndexBuild(DbRef db, const ViewGroup& g, js::Engine& js)
    : db_(std::move(db)),
      g_(g),
      js_(js),
      owner_(work_owner()),
      claim_key_(build_claim_key(db_, g_)) {}

StorageResult<Outcome<BuildStep>> ViewIndexBuild::step(Transaction& tr, std::size_t* applied) {
  if (applied != nullptr) *applied = 0;
  // Conflicting: two servers taking a free claim at once do not both build.
  auto claim = read_claim(tr, claim_key_, Snapshot::no);
  if (!claim.ok()) return claim.error();
  if (*claim && (*claim)->owner != owner_ && !watch_.lapsed(**claim, ClaimWatch::Clock::now())) {
    if (!target_) {
      auto newest = update_seq(tr, db_);
      if (!newest.ok()) return newest.error();
      target_ = *newest;
    }
    auto seq = view_index_seq(tr, db_, g_, Snapshot::yes);
    if (!seq.ok()) return seq.error();
    return Outcome<BuildStep>(*target_ <= *seq ? BuildStep::caught_up : BuildStep::wait);
  }
  auto r = update_step(tr, db_, g_, js_, applied);
  if (!r.ok()) return r.error();
  if (auto* e = std::get_if<CouchError>(&*r)) return Outcome<BuildStep>(*e);
  if (std::get<bool>(*r)) {
    if (*claim) tr.clear(claim_key_);  // ours, or a lapsed one: either way no build runs now
    return Outcome<BuildStep>(BuildStep::caught_up);
  }
  write_claim(tr, claim_key_, owner_, idem_now_ms());
  return Outcome<BuildStep>(BuildStep::progressed);
}

storage::Status ViewIndexBuild::release(Transaction& tr) {
  return drop_claim(tr, claim_key_, owner_);
}

StorageResult<bool> view_build_running(Transaction& tr, const DbRef& db, const ViewGroup& g) {
  auto claim = read_claim(tr, build_claim_key(db, g), Snapshot::yes);
  if (!claim.ok()) return claim.error();
  return claim_live(*claim, idem_now_ms(),
                    std::chrono::duration_cast<std::chrono::milliseconds>(kViewBuildLapse).count());
}

bool has_reduce_trees(const ViewGroup& g) {
  return reduces_queried(g) && std::any_of(g.views.begin(), g.views.end(),
                                           [](const ViewDef& v) { return v.reduce.has_value(); });
}

StorageResult<Outcome<bool>> index_in_transaction(
    Transaction& tr, const DbRef& db, const ViewGroup& g, js::Engine* js,
    const std::vector<std::pair<std::string, std::optional<std::string>>>& docs) {
  if (g.language != "query" && js == nullptr)
    return Outcome<bool>(err::unknown_error("no JavaScript engine"));
  std::vector<ChangedDoc> changed;
  std::vector<std::string> texts;
  for (const auto& [id, json] : docs) {
    ChangedDoc c;
    c.id = id;
    if (json && (!id.starts_with("_design/") || g.include_design)) {
      c.mapped = true;
      c.doc = texts.size();
      texts.push_back(*json);
    }
    changed.push_back(std::move(c));
  }
  // Reduce trees share nodes between documents: their writers go one at a time.
  if (has_reduce_trees(g)) tr.add_read_conflict_key(seq_key(db, g));
  auto indexed = index_docs(tr, db, g, js, changed, texts, false);
  if (!indexed.ok()) return indexed.error();
  if (auto* e = std::get_if<CouchError>(&*indexed)) return Outcome<bool>(std::move(*e));
  auto stamp = Tuple()
                   .add(keyspace::kIncarnation)
                   .add(storage::Versionstamp::incomplete(0xffff))
                   .pack_with_versionstamp();
  if (!stamp.ok()) return stamp.error();
  tr.set_versionstamped_value(seq_key(db, g), *stamp);
  return Outcome<bool>(true);
}

StorageResult<bool> cleanup_step(Transaction& tr, const DbRef& db,
                                 const std::vector<std::string>& keep) {
  const storage::Subspace& views = db.space.views();
  std::string begin = views.range().first;
  const std::string end = views.range().second;
  for (int i = 0; i < 100; ++i) {
    auto kvs = tr.get_range(begin, end, 1, Reverse::no, Snapshot::no);
    if (!kvs.ok()) return kvs.error();
    if (kvs->empty()) return true;
    auto t = views.unpack(kvs->front().key);
    const std::string* sig = t ? t->get_bytes(0) : nullptr;
    if (!sig) return storage::Error::io_error;
    const std::string sig_prefix = views.pack(Tuple().add_bytes(*sig));
    if (std::find(keep.begin(), keep.end(), *sig) == keep.end())
      tr.clear_range(sig_prefix, storage::strinc(sig_prefix));
    begin = storage::strinc(sig_prefix);
  }
  return false;
}

// ---- Queries ------------------------------------------------------------------------------------

ViewCursor::ViewCursor(DbRef db, std::shared_ptr<const ViewGroup> g, ViewQuery q, js::Engine* js)
    : db_(std::move(db)), g_(std::move(g)), q_(std::move(q)), js_(js) {
  const ViewDef& def = g_->views.at(q_.view);
  reducing_ = def.reduce.has_value() && q_.reduce;
  to_skip_ = q_.skip;
  to_emit_ = q_.limit;
  if (reducing_) reducer_ = std::make_shared<const Reducer>(*def.reduce, js_);
  const storage::Subspace rows = this->rows();
  auto key_prefix = [&](const OrderedJson& k) {
    return rows.pack(Tuple().add_bytes(collation_key(k)));
  };
  auto key_id_prefix = [&](const OrderedJson& k, const std::string& id) {
    return rows.pack(Tuple().add_bytes(collation_key(k)).add(id));
  };
  if (q_.keys) {
    for (const OrderedJson& k : *q_.keys) {
      const std::string p = key_prefix(k);
      ranges_.push_back(Range{p, storage::strinc(p)});
    }
    return;
  }
  auto [all_b, all_e] = rows.range();
  // In key order: lo is where ascending iteration starts.
  const std::optional<OrderedJson>& lo = q_.descending ? q_.end_key : q_.start_key;
  const std::optional<OrderedJson>& hi = q_.descending ? q_.start_key : q_.end_key;
  const std::optional<std::string>& lo_id = q_.descending ? q_.end_docid : q_.start_docid;
  const std::optional<std::string>& hi_id = q_.descending ? q_.start_docid : q_.end_docid;
  std::string b = all_b, e = all_e;
  if (lo) {
    const std::string p = lo_id ? key_id_prefix(*lo, *lo_id) : key_prefix(*lo);
    // Ascending: inclusive start. Descending: the end key is inclusive unless inclusive_end=false.
    if (q_.descending && !q_.inclusive_end)
      b = storage::strinc(p);
    else
      b = p;
  }
  if (hi) {
    const std::string p = hi_id ? key_id_prefix(*hi, *hi_id) : key_prefix(*hi);
    if (!q_.descending && !q_.inclusive_end)
      e = p;
    else
      e = storage::strinc(p);
  }
  b = std::max(b, all_b);
  e = std::min(e, all_e);
  ranges_.push_back(Range{b, e});
}

storage::Subspace ViewCursor::rows() const { return rows_space(db_, *g_, q_.view, q_.partition); }
storage::Subspace ViewCursor::nodes() const { return nodes_space(db_, *g_, q_.view, q_.partition); }

StorageResult<std::int64_t> ViewCursor::offset(Transaction& tr) {
  if (reducing_ || ranges_.empty()) return std::int64_t{0};
  const storage::Subspace rows = this->rows();
  auto [all_b, all_e] = rows.range();
  std::string b = q_.descending ? ranges_.front().end : all_b;
  std::string e = q_.descending ? all_e : ranges_.front().begin;
  std::int64_t n = 0;
  while (b < e) {
    auto kvs = tr.get_range(b, e, 10'000, Reverse::no, Snapshot::yes);
    if (!kvs.ok()) return kvs.error();
    n += static_cast<std::int64_t>(kvs->size());
    if (kvs->size() < 10'000) break;
    b = storage::key_after(kvs->back().key);
  }
  return n + q_.skip;
}

StorageResult<std::string> ViewCursor::doc_for(Transaction& tr, std::string_view id,
                                               std::string_view value_json) {
  // A value {"_id": ..., ["_rev": ...]} names the document to include (linked documents).
  std::string doc_id(id);
  DocReadOptions o;
  o.conflicts = q_.conflicts;
  o.attachments = q_.attachments;
  o.att_encoding_info = q_.att_encoding_info;
  if (!value_json.empty() && value_json.front() == '{') {
    OrderedJson v = OrderedJson::parse(value_json, nullptr, false);
    if (v.is_object() && v.contains("_id") && v["_id"].is_string()) {
      doc_id = v["_id"].get<std::string>();
      if (v.contains("_rev") && v["_rev"].is_string())
        if (auto r = RevId::parse(v["_rev"].get<std::string>())) o.rev = *r;
    }
  }
  auto d = get_doc_json(tr, db_, doc_id, o);
  if (!d.ok()) return d.error();
  if (auto* s = std::get_if<std::string>(&*d)) return *s;
  return std::string("null");
}

StorageResult<Outcome<bool>> ViewCursor::next_page(Transaction& tr, std::size_t rows_max,
                                                   std::vector<std::string>& out) {
  return reducing_ ? reduce_page(tr, rows_max, out) : map_page(tr, rows_max, out);
}

StorageResult<Outcome<bool>> ViewCursor::map_page(Transaction& tr, std::size_t rows_max,
                                                  std::vector<std::string>& out) {
  const storage::Subspace rows = this->rows();
  while (range_ < ranges_.size()) {
    if (to_emit_ == 0) return Outcome<bool>(false);
    Range& r = ranges_[range_];
    if (r.begin >= r.end) {
      ++range_;
      continue;
    }
    const std::size_t want =
        rows_max + static_cast<std::size_t>(std::min<std::int64_t>(to_skip_, 10'000));
    auto kvs = tr.get_range(r.begin, r.end, static_cast<int>(want),
                            q_.descending ? Reverse::yes : Reverse::no, Snapshot::yes);
    if (!kvs.ok()) return kvs.error();
    for (const KeyValue& kv : *kvs) {
      if (q_.descending)
        r.end = kv.key;
      else
        r.begin = storage::key_after(kv.key);
      if (to_skip_ > 0) {
        --to_skip_;
        continue;
      }
      if (to_emit_ == 0) break;
      auto t = rows.unpack(kv.key);
      const std::string* id = t ? t->get_string(1) : nullptr;
      const std::size_t nl = kv.value.find('\n');
      if (!id || nl == std::string::npos) return storage::Error::io_error;
      const std::string_view key_json(kv.value.data(), nl);
      const std::string_view value_json(kv.value.data() + nl + 1, kv.value.size() - nl - 1);
      std::string row = "{\"id\":" + json_text(*id) + ",\"key\":";
      row.append(key_json);
      row += ",\"value\":";
      row.append(value_json);
      if (q_.include_docs) {
        auto d = doc_for(tr, *id, value_json);
        if (!d.ok()) return d.error();
        row += ",\"doc\":" + *d;
      }
      row += '}';
      out.push_back(std::move(row));
      if (to_emit_ > 0) --to_emit_;
    }
    if (kvs->size() < want) {
      r.begin = r.end;
      ++range_;
    }
    if (out.size() >= rows_max) return Outcome<bool>(true);
  }
  return Outcome<bool>(false);
}

namespace {

// A row's key JSON and collation bytes.
struct RowKey {
  std::string json;
  std::string ck;
};

StorageResult<std::optional<RowKey>> boundary_row(Transaction& tr, const storage::Subspace& rows,
                                                  std::string_view b, std::string_view e,
                                                  bool last) {
  auto kvs = tr.get_range(b, e, 1, last ? Reverse::yes : Reverse::no, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  if (kvs->empty()) return std::optional<RowKey>();
  auto t = rows.unpack(kvs->front().key);
  const std::string* ck = t ? t->get_bytes(0) : nullptr;
  const std::size_t nl = kvs->front().value.find('\n');
  if (!ck || nl == std::string::npos) return storage::Error::io_error;
  return std::optional<RowKey>(RowKey{kvs->front().value.substr(0, nl), *ck});
}

}  // namespace

StorageResult<Outcome<bool>> ViewCursor::reduce_page(Transaction& tr, std::size_t rows_max,
                                                     std::vector<std::string>& out) {
  const storage::Subspace rows = this->rows();
  ReduceTree tree(rows, nodes(), *reducer_);
  const bool exact = q_.group_level && *q_.group_level == std::numeric_limits<std::size_t>::max();
  // The key a group reports: CouchDB's is the group's key as of its last row in iteration order
  // (equal keys may differ in text: 1 and 1.0).
  auto group_json = [&](const RowKey& k) {
    if (!q_.group_level || exact) return k.json;
    OrderedJson key = OrderedJson::parse(k.json, nullptr, false);
    return group_key(key, *q_.group_level).dump();
  };
  auto emit = [&](const std::string& key_json,
                  const std::string& partial) -> std::optional<CouchError> {
    if (Reducer::empty(partial)) return std::nullopt;
    auto v = reducer_->finish(partial);
    if (auto* e = std::get_if<CouchError>(&v)) return *e;
    if (to_skip_ > 0) {
      --to_skip_;
      return std::nullopt;
    }
    if (to_emit_ == 0) return std::nullopt;
    out.push_back("{\"key\":" + key_json + ",\"value\":" + std::get<std::string>(v) + "}");
    if (to_emit_ > 0) --to_emit_;
    return std::nullopt;
  };
  constexpr std::size_t kGroupsPerPage = 1000;
  std::size_t groups = 0;
  while (range_ < ranges_.size()) {
    if (to_emit_ == 0) return Outcome<bool>(false);
    Range& r = ranges_[range_];
    if (r.begin >= r.end) {
      ++range_;
      continue;
    }
    std::string gb, ge, key_json = "null";
    if (!q_.group_level || q_.keys) {
      // One group: the whole range (with keys=[...], each key's range is its own group).
      gb = r.begin;
      ge = r.end;
      if (q_.group_level) {
        auto k = boundary_row(tr, rows, gb, ge, !q_.descending);
        if (!k.ok()) return k.error();
        if (*k) key_json = group_json(**k);
      }
      r.begin = r.end;
    } else {
      // The next group in iteration order: its first row, then every row of its key (group=true)
      // or of its key's first group_level elements.
      auto first = boundary_row(tr, rows, r.begin, r.end, q_.descending);
      if (!first.ok()) return first.error();
      if (!*first) {
        r.begin = r.end;
        continue;
      }
      OrderedJson key = OrderedJson::parse((*first)->json, nullptr, false);
      std::string prefix;
      if (!exact && key.is_array() && key.size() >= *q_.group_level) {
        // Arrays starting with the group's elements (the group key itself included): their
        // encodings share the open array.
        std::string open = collation_key(group_key(key, *q_.group_level));
        open.pop_back();  // the array's terminator
        prefix = rows.pack(Tuple().add_bytes(open));
        prefix.pop_back();  // the tuple element's terminator
      } else {
        prefix = rows.pack(Tuple().add_bytes((*first)->ck));
      }
      gb = std::max(prefix, r.begin);
      ge = std::min(storage::strinc(prefix), r.end);
      auto other = boundary_row(tr, rows, gb, ge, !q_.descending);
      if (!other.ok()) return other.error();
      key_json = group_json(*other ? **other : **first);
      if (q_.descending)
        r.end = gb;
      else
        r.begin = ge;
    }
    auto partial = tree.aggregate(tr, gb, ge);
    if (!partial.ok()) return partial.error();
    if (auto e = emit(key_json, *partial)) return Outcome<bool>(*e);
    if (++groups >= kGroupsPerPage || out.size() >= rows_max) return Outcome<bool>(true);
  }
  return Outcome<bool>(false);
}

}  // namespace chaise::core
