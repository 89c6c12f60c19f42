#include "core/batch/doc_batches.h"

#include <algorithm>
#include <random>
#include <unordered_set>

#include "core/db/db_updates.h"
#include "core/index/filters.h"
#include "core/index/write_hooks.h"
#include "core/util/json_text.h"

namespace chaise::core {

using storage::Snapshot;
using storage::Tuple;

namespace {
std::string random_tx_id() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string id(16, '\0');
  for (int i = 0; i < 2; ++i) {
    std::uint64_t x = rng();
    for (int j = 0; j < 8; ++j, x >>= 8) id[i * 8 + j] = static_cast<char>(x & 0xff);
  }
  return id;
}

// Whether the attempt that wrote transaction-id key `tx_key` committed (RFC 000): after a
// commit_unknown_result, the key is there exactly when it did (or gone with its database).
StorageResult<bool> attempt_landed(Transaction& tr, const std::string& tx_key) {
  auto seen = tr.get(tx_key);
  if (!seen.ok()) return seen.error();
  return seen->has_value();
}

// Writes this attempt's transaction id and returns its key, for attempt_landed() on a retry.
std::string record_tx_id(Transaction& tr, const DbRef& db, const std::string& tx_id) {
  std::string key = db.space.txids().pack(Tuple().add_bytes(tx_id));
  tr.set(key, "");
  return key;
}

const std::string& item_id(const DocWriteBatch::Item& it) {
  return it.replicated ? it.replicated_doc.id : it.update.id;
}
}  // namespace

DocWriteBatch::DocWriteBatch(std::string db_name, std::vector<Item> items)
    : db_name_(std::move(db_name)),
      items_(std::move(items)),
      results_(items_.size()),
      local_revs_(items_.size()),
      done_(items_.size(), false) {}

namespace {

// The document as CouchDB's couch_doc:to_json_obj(Doc, [revs]) shows it to validate_doc_update:
// "_id", "_rev", "_revisions" (replicated edits), "_deleted", every attachment as a stub, then
// the body. Stubs carried over are complete (couch_db merges them with the revision replaced
// before validating); new uploads show what CouchDB knows of them then: no digest yet, and the
// revpos the client sent (0 when none).
std::string vdu_doc_json(std::string_view id, const std::optional<RevId>& rev, const Branch* path,
                         bool deleted, std::string_view body, const std::vector<AttInfo>& atts) {
  std::string out = "{\"_id\":" + json_string(id);
  if (rev) out += ",\"_rev\":" + json_string(rev->str());
  if (path) {
    out += ",\"_revisions\":{\"start\":" + std::to_string(path->leaf.pos) + ",\"ids\":[";
    for (std::size_t i = 0; i < path->length(); ++i) {
      if (i) out += ',';
      out += json_string(path->rev_at(i).hash_str());
    }
    out += "]}";
  }
  if (deleted) out += ",\"_deleted\":true";
  if (!atts.empty()) {
    out += ",\"_attachments\":{";
    for (std::size_t i = 0; i < atts.size(); ++i) {
      const AttInfo& a = atts[i];
      if (i) out += ',';
      out += json_string(a.name) + ":{\"content_type\":" + json_string(a.content_type) +
             ",\"revpos\":" + std::to_string(a.revpos);
      if (!a.md5.empty()) out += ",\"digest\":" + json_string(att_digest_str(a.md5));
      out += ",\"length\":" + std::to_string(a.length) + ",\"stub\":true}";
    }
    out += "}";
  }
  if (body.size() > 2) {
    out += ',';
    out.append(body.substr(1));
  } else {
    out += '}';
  }
  return out;
}

// The attachments of an edit as validate_doc_update sees them: stubs from the revision replaced
// (a stub that names nothing there is left out: the write fails with missing_stub after), new
// uploads as sent.
std::vector<AttInfo> edit_atts(const std::vector<AttUpload>& uploads,
                               const std::vector<AttInfo>& replaced) {
  std::vector<AttInfo> out;
  for (const AttUpload& u : uploads) {
    if (u.carried_over) {
      auto it = std::find_if(replaced.begin(), replaced.end(),
                             [&](const AttInfo& a) { return a.name == u.name; });
      if (it != replaced.end()) out.push_back(*it);
      continue;
    }
    AttInfo a = u.info;
    a.name = u.name;
    a.md5.clear();  // computed as the revision is written
    out.push_back(std::move(a));
  }
  return out;
}

// Runs `v` on one edit, with the revision it replaces as the old document: for an interactive
// edit the leaf it names (none named: a new or deleted document, validated against null); for a
// replicated one the nearest leaf on its path. An edit that will conflict is passed through.
StorageResult<std::optional<CouchError>> validate_item(Transaction& tr, const DbRef& db,
                                                       const DocWriteBatch::Item& it,
                                                       DocValidator& v) {
  const std::string& id = it.replicated ? it.replicated_doc.id : it.update.id;
  if (id.starts_with("_design/")) return std::optional<CouchError>();
  auto branches = read_branches(tr, db, id, storage::Snapshot::yes);
  if (!branches.ok()) return branches.error();
  std::optional<RevId> old_rev;
  if (!it.replicated) {
    if (it.update.base_rev) {
      for (const StoredBranch& b : *branches)
        if (b.branch.leaf == *it.update.base_rev) old_rev = b.branch.leaf;
      if (!old_rev) return std::optional<CouchError>();  // conflicts
    } else if (!branches->empty() && !branches->back().branch.deleted) {
      return std::optional<CouchError>();  // conflicts
    }
  } else {
    const Branch& path = it.replicated_doc.path;
    std::size_t best = path.length();
    for (const StoredBranch& b : *branches)
      for (std::size_t i = 0; i < path.length() && i < best; ++i)
        if (path.rev_at(i) == b.branch.leaf) {
          best = i;
          old_rev = b.branch.leaf;
        }
  }
  std::string old_json = "null";
  std::vector<AttInfo> old_atts;
  if (old_rev) {
    auto rec = read_rev(tr, db, id, *old_rev);
    if (!rec.ok()) return rec.error();
    if (*rec) {
      old_atts = (*rec)->atts;
      old_json = vdu_doc_json(id, old_rev, nullptr, (*rec)->deleted, (*rec)->body, old_atts);
    }
  }
  const DocUpdate& u = it.update;
  const ReplicatedDoc& d = it.replicated_doc;
  const std::string new_json =
      it.replicated
          ? vdu_doc_json(id, d.path.leaf, &d.path, d.path.deleted, d.body,
                         edit_atts(d.atts, old_atts))
          : vdu_doc_json(id, u.base_rev, nullptr, u.deleted, u.body, edit_atts(u.atts, old_atts));
  return v.validate(new_json, old_json);
}

// The body bytes and attachment bytes an item writes: what a round's byte bound counts.
std::size_t item_bytes(const DocWriteBatch::Item& it) {
  std::size_t bytes = it.replicated ? it.replicated_doc.body.size() : it.update.body.size();
  for (const AttUpload& a : it.replicated ? it.replicated_doc.atts : it.update.atts)
    bytes += a.stored.size();
  return bytes;
}

// The sequence slots of a round's edits. The N of this round's "N-..." sequences continues the
// database's count of changes, read as a snapshot so writers never conflict on it (concurrent
// rounds may show the same N; core/db/sequence.h). An edit that wrote nothing (refused, or a
// replicated revision already stored) gives its slot back: the count of changes, and the feeds
// woken by it, move only with changes.
struct SeqSlots {
  std::int64_t count_base = 0;
  std::uint16_t used = 0;
  SeqSlot take() {
    SeqSlot s{used, count_base + used + 1};
    ++used;
    return s;
  }
  void give_back() { --used; }
};

// The ids that inserts of a round name (edits without a base revision, and replicated revisions:
// the replicator's new documents), proved absent together where they follow one another in key
// order. Read before the round writes any document; each id is edited at most once in a round.
struct InsertProof {
  std::vector<std::string_view> ids;  // sorted, distinct
  std::vector<bool> none;             // by ids: no revision stored (empty: nothing proved)
  Stored stored_of(std::string_view id) const {
    if (none.empty()) return Stored::unknown;
    auto at = std::lower_bound(ids.begin(), ids.end(), id);
    return at != ids.end() && *at == id && none[at - ids.begin()] ? Stored::none : Stored::unknown;
  }
};

// Of the first `max` items not done (those the round can take; any other is read as usual).
StorageResult<InsertProof> prove_inserts(Transaction& tr, const DbRef& db,
                                         const std::vector<DocWriteBatch::Item>& items,
                                         const std::vector<bool>& done, std::size_t max) {
  InsertProof p;
  std::size_t pending = 0;
  for (std::size_t i = 0; i < items.size() && pending < max; ++i) {
    const DocWriteBatch::Item& it = items[i];
    if (done[i]) continue;
    ++pending;
    if (it.local) continue;
    if (it.replicated)
      p.ids.push_back(it.replicated_doc.id);
    else if (!it.update.base_rev)
      p.ids.push_back(it.update.id);
  }
  std::sort(p.ids.begin(), p.ids.end());
  p.ids.erase(std::unique(p.ids.begin(), p.ids.end()), p.ids.end());
  if (p.ids.size() > 1) {
    auto none = ids_without_revisions(tr, db, p.ids);
    if (!none.ok()) return none.error();
    p.none = std::move(*none);
  }
  return p;
}

// What one round's edits share.
struct Round {
  Transaction& tr;
  const DbRef& db;
  int revs_limit;
  const std::vector<ShardMap>& maps;
  IndexWriteHooks& hooks;
  SeqSlots& slots;
  const InsertProof& inserts;
};

// One item written: its result, and for a _local document its new revision's text.
struct ItemWrite {
  DocWriteBatch::ItemResult result;
  std::string local_rev;
};

StorageResult<ItemWrite> write_item(Round& r, const DocWriteBatch::Item& it) {
  using Result = DocWriteBatch::ItemResult;
  if (it.local) {
    auto w = put_local(r.tr, r.db, it.update.id, it.local_rev, it.update.deleted, it.update.body);
    if (!w.ok()) return w.error();
    if (failed(*w)) return ItemWrite{Result(std::get<CouchError>(*w)), {}};
    return ItemWrite{Result(UpdateResult{it.update.id, RevId{0, {}}}), std::get<std::string>(*w)};
  }
  if (it.replicated) {
    auto w = replicate_doc(r.tr, r.db, it.replicated_doc, r.revs_limit, r.maps, r.slots.take(),
                           r.hooks, r.inserts.stored_of(it.replicated_doc.id));
    if (!w.ok()) return w.error();
    if (failed(*w)) {
      r.slots.give_back();
      return ItemWrite{Result(std::get<CouchError>(*w)), {}};
    }
    if (!std::get<bool>(*w)) r.slots.give_back();
    return ItemWrite{Result(UpdateResult{it.replicated_doc.id, it.replicated_doc.path.leaf}), {}};
  }
  const Stored stored = it.update.base_rev ? Stored::unknown : r.inserts.stored_of(it.update.id);
  auto w = update_doc(r.tr, r.db, it.update, r.revs_limit, r.maps, r.slots.take(), r.hooks, stored);
  if (!w.ok()) return w.error();
  if (failed(*w)) r.slots.give_back();
  return ItemWrite{std::move(*w), {}};
}

}  // namespace

storage::Status DocWriteBatch::operator()(Transaction& tr) {
  if (attempts_++ == 0) {
    tx_id_ = random_tx_id();
  } else if (!round_.empty() && !tx_key_.empty()) {
    // A retry: if the previous attempt's commit may have landed, the transaction id it wrote tells
    // (gone with its database if that was deleted meanwhile).
    auto landed = attempt_landed(tr, tx_key_);
    if (!landed.ok()) return landed.error();
    // Committed: keep that attempt's results and write nothing; tx_key_ still names its key.
    if (*landed) return {};
    tx_id_ = random_tx_id();
  }
  tx_key_.clear();
  auto dbr = open_db(tr, db_name_);
  if (!dbr.ok()) return dbr.error();
  if (failed(*dbr)) {
    db_missing_ = true;
    return {};
  }
  const DbRef& db = std::get<DbRef>(*dbr);
  const std::int64_t now_ms = idem_ ? idem_now_ms() : 0;
  if (idem_) {
    auto found = idem_lookup(tr, db, *idem_, now_ms, storage::Snapshot::no);
    if (!found.ok()) return found.error();
    idem_expired_ = found->expired;
    if (found->state == IdemState::replay) {
      // A retry after commit_unknown_result whose previous attempt landed finds the answer that
      // attempt stored (the record does what the transaction id does for other batches).
      if (attempts_ > 1 && rendered_ && found->response == *rendered_) return {};
      rendered_.reset();
      replayed_ = std::move(found->response);
      return {};
    }
    rendered_.reset();
    if (found->state == IdemState::mismatch) {
      idem_mismatch_ = true;
      return {};
    }
  }
  auto limit = revs_limit(tr, db);
  if (!limit.ok()) return limit.error();
  // The current shard map, in the read-conflict set: a concurrent reshard fails this attempt.
  auto maps = read_shard_maps(tr, db, storage::Snapshot::no);
  if (!maps.ok()) return maps.error();

  // Unique and synchronous indexes, with the unique one this batch registers (POST /_index).
  auto hooks = read_write_hooks(tr, db);
  if (!hooks.ok()) return hooks.error();
  if (register_unique_) hooks->register_unique(tr, db, *register_unique_);

  bool validate = false;
  if (validator_) {
    auto any = validator_->begin(tr, db);
    if (!any.ok()) return any.error();
    validate = *any;
  }

  auto seq_base = read_counter(tr, db, keyspace::kChangeCount);
  if (!seq_base.ok()) return seq_base.error();
  SeqSlots slots{*seq_base};
  auto inserts = prove_inserts(tr, db, items_, done_, round_docs_max_);
  if (!inserts.ok()) return inserts.error();
  Round round{tr, db, *limit, *maps, *hooks, slots, *inserts};

  // This round: the first not-yet-done occurrence of each id; later ones wait for a later round.
  round_.clear();
  std::unordered_set<std::string_view> seen_ids;  // views into items_, which outlives the round
  std::size_t round_bytes = 0;
  // A round is one transaction: keep it well inside the transaction's size limit (FoundationDB's
  // 10 MB, unless configured lower) and the 2-byte per-transaction versionstamp order; what does
  // not fit waits for the next round.
  const std::size_t body_bytes_max =
      storage::share_of_size_limit(kBodyBytesPerTransactionMax, tr.size_limit());
  const std::size_t tr_bytes_max =
      storage::share_of_size_limit(kTransactionBytesPerRoundMax, tr.size_limit());
  for (std::size_t i = 0; i < items_.size(); ++i) {
    if (done_[i]) continue;
    const std::string& id = item_id(items_[i]);
    const std::size_t bytes = item_bytes(items_[i]);
    if (!round_.empty() &&
        (round_.size() >= round_docs_max_ || round_bytes + bytes > body_bytes_max ||
         (!idem_ && tr.approximate_size() > tr_bytes_max)))
      break;
    // A second edit of one id waits for a later round, so that edits of one document apply in
    // request order, each against the tree the previous one left (couch_db_updater
    // merge_rev_trees): one against another leaf succeeds, one against a consumed leaf conflicts.
    if (seen_ids.count(id)) continue;
    seen_ids.insert(id);
    round_.push_back(i);
    round_bytes += bytes;
    const Item& it = items_[i];
    if (validate && !it.local) {
      auto verdict = validate_item(tr, db, it, *validator_);
      if (!verdict.ok()) return verdict.error();
      if (*verdict) {
        results_[i] = ItemResult(std::move(**verdict));
        continue;
      }
    }
    auto w = write_item(round, it);
    if (!w.ok()) return w.error();
    results_[i] = std::move(w->result);
    if (it.local && !failed(*results_[i])) local_revs_[i] = std::move(w->local_rev);
  }
  if (auto st = hooks->finish(tr, db, js_); !st.ok()) return st.error();
  updated_reduce_trees_ = hooks->sync.updated_reduce_trees;
  // An idempotent batch's record tells whether it committed. A round that writes nothing (every
  // edit refused: 409 conflicts) commits nothing either, so it needs no id: a retry finds none
  // and evaluates the round again, with the same outcome or a newer one. Nor does a round whose
  // commit cannot end in commit_unknown_result (the embedded engine's, outside tests): its id
  // would be two of a new document's six memtable entries (written, then cleared by the
  // janitor), a seventh of a write's memtable bytes, for a retry that never comes.
  if (!idem_ && !tr.read_only() && tr.may_commit_unknown_result()) {
    tx_key_ = record_tx_id(tr, db, tx_id_);
  }
  if (slots.used > 0) {
    note_db_updated(tr, db);  // wakes waiting feeds; for _db_updates
    tr.add(db.space.counter_key(keyspace::kChangeCount), slots.used);
  }
  if (idem_) {
    rendered_ = render_(*this);
    auto stored = idem_store(tr, db, *idem_, now_ms, *rendered_, idem_expired_);
    if (!stored.ok()) return stored.error();
  }
  return {};
}

void DocWriteBatch::register_unique(UniqueIndexDef def) { register_unique_ = std::move(def); }

void DocWriteBatch::set_idempotency(IdemRequest r, Render render) {
  idem_ = std::move(r);
  render_ = std::move(render);
}

bool DocWriteBatch::fits_one_round() const {
  if (items_.size() > kDocsPerTransactionMax) return false;
  std::unordered_set<std::string_view> ids;
  std::size_t bytes = 0;
  for (const Item& it : items_) {
    if (!ids.insert(item_id(it)).second) return false;
    bytes += item_bytes(it);
  }
  return items_.size() <= 1 || bytes <= kBodyBytesPerTransactionMax;
}

DocStepBatch::DocStepBatch(std::string db_name, std::string id, std::vector<DocStep> steps,
                           std::optional<Cache> cache, js::Engine* js)
    : js_(js),
      db_name_(std::move(db_name)),
      id_(std::move(id)),
      steps_(std::move(steps)),
      cache_(std::move(cache)),
      results_(steps_.size(), Outcome<RevId>(CouchError{})),
      deferred_(steps_.size(), false) {}

namespace {

// Where a group's accepted steps stand: the latest revision and body, and the hashes of the new
// revisions, oldest first.
struct StepState {
  RevId cur;
  std::string body;
  std::vector<std::string> chain;
};

// The time an attempt may still spend on steps (DocStepBatch::kStepsTimeMax); steps not begun
// once it has passed are deferred, except the attempt's first.
struct StepBudget {
  std::chrono::steady_clock::time_point until;
  std::vector<bool>& deferred;
  bool begun = false;
  // Whether the next step may begin now; records it as begun.
  bool next() {
    if (begun && std::chrono::steady_clock::now() > until) return false;
    begun = true;
    return true;
  }
};

bool is_timeout(const CouchError& e) {
  return e.error == "os_process_error" && e.reason == "timeout";
}

// Accepts `next_body` as the next revision, after the unique indexes' check: its revision, or
// nullopt with the refusal in `refusal`.
StorageResult<std::optional<RevId>> accept_step(Transaction& tr, const DbRef& db,
                                                const std::string& id, IndexWriteHooks& hooks,
                                                const std::vector<AttInfo>& atts, StepState& st,
                                                std::string next_body,
                                                std::optional<CouchError>& refusal) {
  auto refused = hooks.check(tr, db, id, &next_body);
  if (!refused.ok()) return refused.error();
  if (*refused) {
    refusal = std::move(**refused);
    return std::optional<RevId>();
  }
  const RevId rev{st.cur.pos + 1, new_rev_hash(false, st.cur, next_body, {}, atts)};
  st.chain.push_back(rev.hash);
  st.cur = rev;
  st.body = std::move(next_body);
  return std::optional<RevId>(rev);
}

// The script steps `run` (indexes into `steps`, of one design document) in as few entries into
// the engine as its time budget allows. A call that ran past its time limit voids its entry:
// the state goes back to where the entry started and the entry runs again without that call.
storage::Status run_scripts(Transaction& tr, const DbRef& db, const std::string& id,
                            std::vector<DocStep>& steps, std::vector<std::size_t> run,
                            js::Engine& engine, const std::vector<AttInfo>& atts,
                            IndexWriteHooks& hooks, StepState& st, StepBudget& budget,
                            std::vector<Outcome<RevId>>& results) {
  using Kind = js::UpdateOutcome::Kind;
  auto script = [&](std::size_t k) -> ScriptStep& { return *steps[k].script; };
  // A call that ran past its time limit in an earlier attempt is not run again.
  std::erase_if(run, [&](std::size_t k) {
    if (!steps[k].settled) return false;
    script(k).kind = Kind::failed;
    results[k] = *steps[k].settled;
    return true;
  });
  // Each writer's validator, as a single-step edit would run it; the functions are the
  // database's, the same for every writer in one transaction.
  std::vector<std::shared_ptr<const js::DesignDoc>> functions;
  std::vector<std::size_t> runnable;
  for (std::size_t k : run) {
    ScriptStep& sc = script(k);
    if (sc.validator) {
      auto any = sc.validator->begin(tr, db);
      if (!any.ok()) return any.error();
      if (sc.validator->failure()) {
        sc.kind = Kind::failed;
        results[k] = *sc.validator->failure();
        continue;
      }
      if (*any && !sc.validator->functions().empty()) {
        functions = sc.validator->functions();
        sc.call.user_ctx = sc.validator->contexts().user_ctx;
        sc.call.sec_obj = sc.validator->contexts().sec_obj;
      }
    }
    runnable.push_back(k);
  }
  std::size_t done = 0;
  while (done < runnable.size()) {
    if (!budget.next()) {
      for (std::size_t c = done; c < runnable.size(); ++c) budget.deferred[runnable[c]] = true;
      break;
    }
    std::vector<js::UpdateCall> calls;
    calls.reserve(runnable.size() - done);
    for (std::size_t c = done; c < runnable.size(); ++c) calls.push_back(script(runnable[c]).call);
    const StepState start = st;
    storage::Status failure;
    const js::Engine::Accept accept = [&](std::size_t c,
                                          std::string_view body) -> std::optional<std::string> {
      const std::size_t k = runnable.at(done + c);
      if (body.size() > script(k).max_body_bytes) {
        results[k] = err::document_too_large(id);
        return std::nullopt;
      }
      std::optional<CouchError> refusal;
      auto rev = accept_step(tr, db, id, hooks, atts, st, std::string(body), refusal);
      if (!rev.ok()) {
        failure = rev.error();
        return std::nullopt;
      }
      if (!*rev) {
        results[k] = std::move(*refusal);
        return std::nullopt;
      }
      results[k] = **rev;
      return (*rev)->str();
    };
    auto r = engine.update_many(*script(runnable[done]).ddoc, id, st.cur.str(), st.body, calls,
                                functions, accept);
    if (!failure.ok()) return failure;
    if (auto* e = std::get_if<js::JsError>(&r)) {
      for (std::size_t c = done; c < runnable.size(); ++c) {
        script(runnable[c]).kind = Kind::failed;
        results[runnable[c]] = js_error(*e);
      }
      break;
    }
    js::UpdateBatch& batch = std::get<js::UpdateBatch>(r);
    if (batch.timed_out) {
      st = start;
      const auto late = runnable.begin() + static_cast<std::ptrdiff_t>(std::min(
                                               done + *batch.timed_out, runnable.size() - 1));
      script(*late).kind = Kind::failed;
      steps[*late].settled = js_error(js::JsError{"os_process_error", "timeout"});
      results[*late] = *steps[*late].settled;
      runnable.erase(late);
      continue;
    }
    for (std::size_t c = 0; c < batch.outcomes.size(); ++c) {
      const std::size_t k = runnable[done + c];
      js::UpdateOutcome& o = batch.outcomes[c];
      ScriptStep& sc = script(k);
      sc.kind = o.kind;
      sc.response_json = std::move(o.response_json);
      switch (o.kind) {
        case Kind::saved:
        case Kind::refused:
          break;  // accept() set the outcome
        case Kind::unsaved:
        case Kind::declined:
          results[k] = RevId{};
          break;
        case Kind::failed:
          results[k] = js_error(o.error);
          break;
        case Kind::invalid:
          results[k] =
              JsDocValidator::verdict_error(o.verdict).value_or(err::unknown_error("null"));
          break;
        case Kind::validator_failed:
          results[k] = CouchError{500, o.error.error, o.error.reason};
          break;
      }
    }
    done += batch.outcomes.size();
  }
  return {};
}

// Applies `steps` in order, from `st`: each accepted step becomes a revision, child of the one
// before, and each refused one gets its error in `results` while the next step sees the same
// body. Adjacent script steps of one design document run together (run_scripts); without an
// engine, or on a document with attachments, they are declined.
storage::Status apply_steps(Transaction& tr, const DbRef& db, const std::string& id,
                            std::vector<DocStep>& steps, const std::vector<AttInfo>& atts,
                            IndexWriteHooks& hooks, js::Engine* engine, StepState& st,
                            StepBudget& budget, std::vector<Outcome<RevId>>& results) {
  for (std::size_t i = 0; i < steps.size(); ++i) {
    DocStep& step = steps[i];
    if (step.settled) {
      if (step.script) step.script->kind = js::UpdateOutcome::Kind::failed;
      results[i] = *step.settled;
      continue;
    }
    if (step.script) {
      std::vector<std::size_t> run{i};
      while (i + 1 < steps.size() && steps[i + 1].script &&
             steps[i + 1].script->ddoc->key == step.script->ddoc->key)
        run.push_back(++i);
      if (engine == nullptr || !atts.empty()) {
        for (std::size_t k : run) {
          steps[k].script->kind = js::UpdateOutcome::Kind::declined;
          results[k] = RevId{};
        }
        continue;
      }
      if (auto s = run_scripts(tr, db, id, steps, std::move(run), *engine, atts, hooks, st, budget,
                               results);
          !s.ok())
        return s;
      continue;
    }
    if (!budget.next()) {
      budget.deferred[i] = true;
      continue;
    }
    RevId& cur = st.cur;
    std::string& body = st.body;
    if (step.expected && !(*step.expected == cur)) {
      results[i] = err::conflict();
      continue;
    }
    Outcome<std::string> next = step.apply(body, cur);
    if (auto* e = std::get_if<CouchError>(&next)) {
      results[i] = std::move(*e);
      continue;
    }
    std::string& next_body = std::get<std::string>(next);
    if (step.validator && !id.starts_with("_design/")) {
      auto any = step.validator->begin(tr, db);
      if (!any.ok()) return any.error();
      if (*any) {
        if (auto e =
                step.validator->validate(vdu_doc_json(id, cur, nullptr, false, next_body, atts),
                                         vdu_doc_json(id, cur, nullptr, false, body, atts))) {
          if (is_timeout(*e)) step.settled = *e;
          results[i] = std::move(*e);
          continue;
        }
      }
    }
    std::optional<CouchError> refusal;
    auto rev = accept_step(tr, db, id, hooks, atts, st, std::move(next_body), refusal);
    if (!rev.ok()) return rev.error();
    if (*rev)
      results[i] = **rev;
    else
      results[i] = std::move(*refusal);
  }
  return {};
}

// The edit that writes a group's last revision `leaf` (body `body`) over the winner `w`, with the
// group's other new revisions (`chain`, oldest first, `leaf` last) as its ancestors.
EditPlan chain_plan(const StoredBranch& w, const RevId& leaf, const std::vector<std::string>& chain,
                    std::string_view body, const std::vector<AttInfo>& atts, int revs_limit) {
  EditPlan plan;
  plan.old_winner = w;
  plan.removed = w;
  plan.body = body;
  plan.atts = atts;
  plan.added.leaf = leaf;
  plan.added.ancestors.reserve(chain.size() + w.branch.ancestors.size());
  for (std::size_t k = chain.size() - 1; k-- > 0;) plan.added.ancestors.push_back(chain[k]);
  plan.added.ancestors.push_back(w.branch.leaf.hash);
  plan.added.ancestors.insert(plan.added.ancestors.end(), w.branch.ancestors.begin(),
                              w.branch.ancestors.end());
  stem(plan.added, revs_limit);
  plan.branch_count = w.branch_count;
  return plan;
}

}  // namespace

storage::Status DocStepBatch::operator()(Transaction& tr) {
  if (attempts_++ > 0 && !tx_key_.empty()) {
    // A retry: if the previous attempt's commit may have landed, its transaction id tells.
    auto landed = attempt_landed(tr, tx_key_);
    if (!landed.ok()) return landed.error();
    if (*landed) return {};  // committed: keep its results
  }
  tx_id_ = random_tx_id();
  tx_key_.clear();
  deferred_.assign(steps_.size(), false);
  auto dbr = open_db(tr, db_name_);
  if (!dbr.ok()) return dbr.error();
  if (failed(*dbr)) {
    db_missing_ = true;
    return {};
  }
  const DbRef& db = std::get<DbRef>(*dbr);
  const std::int64_t now_ms = idem_now_ms();
  // Whatever happens, each step with a key stores its answer with this transaction.
  auto store_answers = [&]() -> storage::Status {
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const DocStep& step = steps_[i];
      if (!step.idem || !step.render) continue;
      // A declined call answers through the ordinary write, which stores its own answer; a
      // deferred one in its own group.
      if (deferred_[i]) continue;
      if (step.script && step.script->kind == js::UpdateOutcome::Kind::declined) continue;
      auto found = idem_lookup(tr, db, *step.idem, now_ms, storage::Snapshot::no);
      if (!found.ok()) return found.error();
      auto stored =
          idem_store(tr, db, *step.idem, now_ms, step.render(results_[i]), found->expired);
      if (!stored.ok()) return stored.error();
    }
    return {};
  };
  auto winner = read_winner(tr, db, id_, Snapshot::no);
  if (!winner.ok()) return winner.error();
  if (!*winner || (*winner)->branch.deleted) {
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      results_[i] = *winner ? err::doc_deleted() : err::not_found();
      // An update handler is called with no document (it may create one): the ordinary way.
      if (steps_[i].script) {
        steps_[i].script->kind = js::UpdateOutcome::Kind::declined;
        results_[i] = RevId{};
      }
    }
    return store_answers();
  }
  const StoredBranch& w = **winner;
  auto hooks = read_write_hooks(tr, db);
  if (!hooks.ok()) return hooks.error();
  if (!cache_ || !(cache_->rev == w.branch.leaf)) {
    auto rec = read_rev(tr, db, id_, w.branch.leaf);
    if (!rec.ok()) return rec.error();
    if (!*rec) return storage::Error::io_error;  // a leaf's body is always stored
    cache_ = Cache{w.branch.leaf, std::move(**rec)};
  }
  const std::vector<AttInfo>& atts = cache_->record.atts;
  StepState state{w.branch.leaf, cache_->record.body, {}};
  StepBudget budget{std::chrono::steady_clock::now() + kStepsTimeMax, deferred_};
  if (auto st = apply_steps(tr, db, id_, steps_, atts, *hooks, js_, state, budget, results_);
      !st.ok())
    return st;
  const RevId& cur = state.cur;
  std::string& body = state.body;
  const std::vector<std::string>& chain = state.chain;
  if (!chain.empty()) {
    auto limit = revs_limit(tr, db);
    if (!limit.ok()) return limit.error();
    auto maps = read_shard_maps(tr, db, storage::Snapshot::no);
    if (!maps.ok()) return maps.error();
    auto count_base = read_counter(tr, db, keyspace::kChangeCount);  // a snapshot read
    if (!count_base.ok()) return count_base.error();
    const EditPlan plan = chain_plan(w, cur, chain, body, atts, *limit);
    // Each step was checked against the unique indexes; the last one's body is what is written.
    auto hooked = edit_hooks(tr, db, *hooks, id_, plan, false);
    if (!hooked.ok()) return hooked.error();
    if (auto st = apply_edit(tr, db, id_, plan, *maps, SeqSlot{0, *count_base + 1}); !st.ok())
      return st.error();
    if (auto st = hooks->finish(tr, db, js_); !st.ok()) return st.error();
    note_db_updated(tr, db);  // wakes waiting feeds; for _db_updates
    tr.add(db.space.counter_key(keyspace::kChangeCount), 1);
    cache_ = Cache{cur, RevRecord{std::move(body), false, atts}};
  }
  if (auto st = store_answers(); !st.ok()) return st;
  // As DocWriteBatch: a transaction that writes nothing (every step refused, no answer to store),
  // or whose commit's outcome is always known, needs no id.
  if (!tr.read_only() && tr.may_commit_unknown_result()) {
    tx_key_ = record_tx_id(tr, db, tx_id_);
  }
  return {};
}

void DocWriteBatch::retrying(storage::Error e) {
  if (e != storage::Error::transaction_too_old || idem_) return;
  // The attempt may have failed before it formed its round (round_ then empty or the last one's).
  const std::size_t tried =
      round_.empty() ? round_docs_max_ : std::min(round_docs_max_, round_.size());
  round_docs_max_ = std::max<std::size_t>(1, tried / 2);
}

void DocWriteBatch::committed() {
  for (std::size_t i : round_) done_[i] = true;
  round_.clear();
  attempts_ = 0;
  while (next_round_ < items_.size() && done_[next_round_]) ++next_round_;
  for (std::size_t i = next_round_; i < items_.size(); ++i)
    if (!done_[i]) return;
  next_round_ = items_.size();
}

// ---- PurgeBatch ------------------------------------------------------------------------------

PurgeBatch::PurgeBatch(std::string db_name, std::vector<PurgeRequest> requests)
    : db_name_(std::move(db_name)), requests_(std::move(requests)), purged_(requests_.size()) {}

storage::Status PurgeBatch::operator()(Transaction& tr) {
  if (attempts_++ == 0) {
    tx_id_ = random_tx_id();
  } else if (!tx_key_.empty()) {
    auto landed = attempt_landed(tr, tx_key_);
    if (!landed.ok()) return landed.error();
    if (*landed) return {};  // that attempt's results stand
    tx_id_ = random_tx_id();
  }
  tx_key_.clear();
  round_end_ = next_;
  auto dbr = open_db(tr, db_name_);
  if (!dbr.ok()) return dbr.error();
  if (failed(*dbr)) {
    db_missing_ = true;
    return {};
  }
  const DbRef& db = std::get<DbRef>(*dbr);
  auto maps = read_shard_maps(tr, db, Snapshot::no);
  if (!maps.ok()) return maps.error();
  auto hooks = read_write_hooks(tr, db);
  if (!hooks.ok()) return hooks.error();
  auto seq_base = read_counter(tr, db, keyspace::kChangeCount);
  if (!seq_base.ok()) return seq_base.error();
  // With conflict: concurrent purges of the database go one after the other.
  auto purge_base = purge_seq(tr, db, Snapshot::no);
  if (!purge_base.ok()) return purge_base.error();

  // A document purged twice in one request goes in a later transaction the second time: its
  // new winner entry is not readable in the transaction that wrote it.
  std::unordered_set<std::string_view> seen;
  std::int64_t n = 0;
  for (std::size_t i = next_; i < requests_.size(); ++i) {
    const PurgeRequest& r = requests_[i];
    if (seen.count(r.id) || static_cast<std::size_t>(n) >= kDocsPerTransactionMax) break;
    if (n > 0 && tr.approximate_size() >
                     storage::share_of_size_limit(kBytesPerTransactionMax, tr.size_limit()))
      break;
    seen.insert(r.id);
    // The log entry sorts before the document's new changes entry: an index takes the purge in
    // before the change (core/docs/purge.h).
    const std::int64_t count = *seq_base + n + 1;
    const SeqSlot change{static_cast<std::uint16_t>(2 * n + 1), count};
    auto purged = purge_doc(tr, db, r, *maps, change, *hooks);
    if (!purged.ok()) return purged.error();
    log_purge(tr, db, r, *purge_base + n + 1, static_cast<std::uint16_t>(2 * n), count);
    purged_[i] = std::move(*purged);
    ++n;
    round_end_ = i + 1;
  }
  if (auto st = hooks->finish(tr, db, js_); !st.ok()) return st.error();
  // Before the counter moves: the trim counts the committed entries from it.
  auto trimmed = trim_purged_infos(tr, db, n, kTrimMax);
  if (!trimmed.ok()) return trimmed.error();
  tr.add(db.space.counter_key(keyspace::kChangeCount), n);
  tr.add(db.space.counter_key(keyspace::kPurgeSeq), n);
  note_db_updated(tr, db);  // wakes waiting feeds; for _db_updates
  if (tr.may_commit_unknown_result()) tx_key_ = record_tx_id(tr, db, tx_id_);
  return {};
}

void PurgeBatch::committed() {
  next_ = round_end_;
  attempts_ = 0;
  tx_key_.clear();
}

}  // namespace chaise::core
