#include "core/index/sync_index.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "core/db/db_cache.h"
#include "core/docs/documents.h"
#include "core/index/view_index.h"

namespace chaise::core {

namespace {

std::vector<SyncIndexDef> parse_sync_registry(std::string_view raw) {
  std::vector<SyncIndexDef> out;
  OrderedJson j = OrderedJson::parse(raw, nullptr, false);
  if (!j.is_array()) return out;
  for (const OrderedJson& e : j) {
    if (!e.is_object()) continue;
    SyncIndexDef d;
    d.ddoc = e.value("ddoc", "");
    d.sig = e.value("sig", "");
    d.ready = e.value("ready", false);
    if (!d.ddoc.empty()) out.push_back(std::move(d));
  }
  return out;
}

// The views of registered design documents, by database and signature (a signature fixes the
// views, so an entry never goes stale). Bounded: cleared when full.
constexpr std::size_t kGroupCacheMax = 256;
std::mutex g_groups_mu;
std::map<std::string, std::shared_ptr<const ViewGroup>> g_groups;  // guarded by g_groups_mu

// The group of a ready entry; nullptr when it cannot be had in this transaction (the design
// document is gone, has other views now, or was edited in this very transaction: its winner is
// not readable before commit).
StorageResult<std::shared_ptr<const ViewGroup>> group_for(Transaction& tr, const DbRef& db,
                                                          const SyncIndexDef& d,
                                                          const SyncIndexes& s) {
  const std::string cache_key = std::to_string(db.id) + '/' + d.sig;
  {
    std::lock_guard lock(g_groups_mu);
    if (auto it = g_groups.find(cache_key); it != g_groups.end()) return it->second;
  }
  const bool edited_here =
      std::any_of(s.docs.begin(), s.docs.end(), [&](const auto& e) { return e.first == d.ddoc; });
  if (edited_here) return std::shared_ptr<const ViewGroup>();
  auto json = get_doc_json(tr, db, d.ddoc, DocReadOptions{});
  if (!json.ok()) return json.error();
  if (failed(*json)) return std::shared_ptr<const ViewGroup>();
  auto g = ViewGroup::from_design_doc(d.ddoc, std::get<std::string>(*json), "sync/" + cache_key,
                                      db.partitioned);
  auto* vg = std::get_if<ViewGroup>(&g);
  if (vg == nullptr || vg->signature != d.sig) return std::shared_ptr<const ViewGroup>();
  auto shared = std::make_shared<const ViewGroup>(std::move(*vg));
  std::lock_guard lock(g_groups_mu);
  if (g_groups.size() >= kGroupCacheMax) g_groups.clear();
  g_groups.emplace(cache_key, shared);
  return shared;
}

}  // namespace

bool SyncIndexes::any_ready() const {
  return std::any_of(list.begin(), list.end(), [](const SyncIndexDef& d) { return d.ready; });
}

StorageResult<std::vector<SyncIndexDef>> read_sync_indexes(Transaction& tr, const DbRef& db) {
  // Every write transaction reads the registry: remembered between transactions (core/db/db_cache.h;
  // write_sync_indexes marks its transaction), with the read conflict taken all the same.
  const std::string key = db.space.meta_key(keyspace::kSyncIndexes);
  auto r = remembered_read<std::vector<SyncIndexDef>>(
      tr, memo_key("sync_registry", std::to_string(db.id)),
      [&](Transaction& t) -> StorageResult<std::vector<SyncIndexDef>> {
        auto raw = t.get(key, storage::Snapshot::yes);
        if (!raw.ok()) return raw.error();
        if (!raw->has_value()) return std::vector<SyncIndexDef>();
        return parse_sync_registry(**raw);
      });
  if (!r.ok()) return r.error();
  tr.add_read_conflict_key(key);
  return **r;
}

void write_sync_indexes(Transaction& tr, const DbRef& db, const std::vector<SyncIndexDef>& list) {
  tr.touch_metadata();  // read_sync_indexes remembers the registry
  if (list.empty()) {
    tr.clear(db.space.meta_key(keyspace::kSyncIndexes));
    return;
  }
  OrderedJson j = OrderedJson::array();
  for (const auto& d : list)
    j.push_back(OrderedJson{{"ddoc", d.ddoc}, {"sig", d.sig}, {"ready", d.ready}});
  tr.set(db.space.meta_key(keyspace::kSyncIndexes), j.dump());
}

void sync_design_doc(Transaction& tr, const DbRef& db, SyncIndexes& s, std::string_view id,
                     const std::string* body) {
  std::optional<std::string> sig;
  if (body) {
    auto g = ViewGroup::from_design_doc(std::string(id), *body, "", db.partitioned);
    if (auto* vg = std::get_if<ViewGroup>(&g); vg && vg->sync && !vg->views.empty())
      sig = vg->signature;
  }
  auto it = std::find_if(s.list.begin(), s.list.end(),
                         [&](const SyncIndexDef& d) { return d.ddoc == id; });
  if (!sig) {
    if (it == s.list.end()) return;
    s.list.erase(it);
  } else if (it != s.list.end()) {
    if (it->sig == *sig) return;  // the same views: the index stays as it is
    *it = SyncIndexDef{std::string(id), *sig, false};
  } else {
    s.list.push_back(SyncIndexDef{std::string(id), *sig, false});
  }
  write_sync_indexes(tr, db, s.list);
}

storage::Status sync_index_edits(Transaction& tr, const DbRef& db, SyncIndexes& s, js::Engine* js) {
  if (s.docs.empty()) return {};
  bool demoted = false;
  std::vector<std::string> done;  // design documents with the same views share one index
  for (SyncIndexDef& d : s.list) {
    if (!d.ready || std::find(done.begin(), done.end(), d.sig) != done.end()) continue;
    done.push_back(d.sig);
    auto g = group_for(tr, db, d, s);
    if (!g.ok()) return g.error();
    bool ok = false;
    if (*g) {
      if (has_reduce_trees(**g)) s.updated_reduce_trees = true;
      auto r = index_in_transaction(tr, db, **g, js, s.docs);
      if (!r.ok()) return r.error();
      ok = !failed(*r);
    }
    if (!ok) {  // lazy again until a build catches up (every design document sharing it)
      for (SyncIndexDef& other : s.list)
        if (other.sig == d.sig) other.ready = false;
      demoted = true;
    }
  }
  if (demoted) write_sync_indexes(tr, db, s.list);
  return {};
}

storage::Status sync_index_caught_up(Transaction& tr, const DbRef& db, const std::string& sig) {
  auto list = read_sync_indexes(tr, db);
  if (!list.ok()) return list.error();
  auto it = std::find_if(list->begin(), list->end(),
                         [&](const SyncIndexDef& d) { return d.sig == sig && !d.ready; });
  if (it == list->end()) return {};
  for (SyncIndexDef& d : *list)
    if (d.sig == sig) d.ready = true;  // design documents with the same views share one index
  // Any write committed since this transaction's reads conflicts with it (writers add to the
  // update counter), so no change can fall between the build and the first synchronous writer.
  auto counter = tr.get(db.space.meta_key(keyspace::kUpdateCounter));
  if (!counter.ok()) return counter.error();
  write_sync_indexes(tr, db, *list);
  return {};
}

}  // namespace chaise::core
