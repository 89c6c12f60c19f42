#include "core/index/unique_index.h"

#include "core/db/claims.h"
#include "core/db/db_cache.h"
#include "core/db/idempotency.h"
#include "core/docs/documents.h"
#include "core/index/mango_index.h"
#include "core/query/collation.h"
#include "core/security/security.h"
#include "core/util/digest.h"

namespace chaise::core {

namespace {

using storage::Snapshot;
using storage::Tuple;

storage::Subspace keys_of(const DbRef& db, const std::string& index_id) {
  return db.space.unique_index(index_id).sub(Tuple().add(keyspace::kUniqueKeys));
}
std::string doc_key(const DbRef& db, const std::string& index_id, std::string_view doc_id) {
  return db.space.unique_index(index_id).pack(Tuple().add(keyspace::kUniqueDocs).add(doc_id));
}
std::string violation_key(const DbRef& db, const std::string& index_id, std::string_view doc_id) {
  return db.space.unique_index(index_id).pack(Tuple().add(keyspace::kUniqueViolations).add(doc_id));
}

UniqueIndexes parse_unique_registry(std::string_view raw) {
  UniqueIndexes out;
  OrderedJson j = OrderedJson::parse(raw, nullptr, false);
  if (!j.is_array()) return out;
  for (const OrderedJson& e : j) {
    if (!e.is_object()) continue;
    UniqueIndexDef d;
    d.id = e.value("id", "");
    d.ddoc = e.value("ddoc", "");
    d.name = e.value("name", "");
    d.map = e.value("map", OrderedJson::object());
    d.ready = e.value("ready", false);
    if (!d.id.empty()) out.push_back(std::move(d));
  }
  return out;
}

// The document as a json index's map sees it: the body with its _id.
std::optional<OrderedJson> doc_for_index(std::string_view id, const std::string& body) {
  OrderedJson doc = OrderedJson::parse(body, nullptr, false);
  if (!doc.is_object()) return std::nullopt;
  doc["_id"] = std::string(id);
  return doc;
}

struct KeyHolder {
  std::string doc_id;  // empty: nobody else
};

// Another live document holding `coll` in the index, if any (a conflicting read of the key's
// range: a concurrent claim of the same key fails one of the two transactions).
StorageResult<std::optional<std::string>> other_holder(Transaction& tr, const DbRef& db,
                                                       const std::string& index_id,
                                                       const std::string& coll,
                                                       std::string_view self) {
  auto [b, e] = keys_of(db, index_id).range(Tuple().add_bytes(coll));
  auto kvs = tr.get_range(b, e, 2);
  if (!kvs.ok()) return kvs.error();
  const storage::Subspace keys = keys_of(db, index_id);
  for (const auto& kv : *kvs) {
    auto t = keys.unpack(kv.key);
    const std::string* holder = t && t->size() == 2 ? t->get_string(1) : nullptr;
    if (holder == nullptr) return storage::Error::io_error;
    if (*holder != self) return std::optional<std::string>(*holder);
  }
  return std::optional<std::string>();
}

bool is_design(std::string_view id) { return id.starts_with("_design/"); }

// The unique views a design document body declares: view name -> map.
std::vector<std::pair<std::string, OrderedJson>> declared_unique(const OrderedJson& body) {
  std::vector<std::pair<std::string, OrderedJson>> out;
  if (!body.is_object() || body.value("language", "") != "query") return out;
  auto views = body.find("views");
  if (views == body.end() || !views->is_object()) return out;
  for (auto it = views->begin(); it != views->end(); ++it)
    if (view_declared_unique(it.value()) && it.value().contains("map"))
      out.emplace_back(it.key(), it.value()["map"]);
  return out;
}

bool registered(const UniqueIndexes& list, std::string_view ddoc, const std::string& name,
                const OrderedJson& map) {
  for (const auto& d : list)
    if (d.ddoc == ddoc && d.name == name && d.map == map) return true;
  return false;
}

}  // namespace

std::string unique_index_id(std::string_view ddoc, std::string_view name, const OrderedJson& map) {
  std::string input(ddoc);
  input += '\0';
  input += name;
  input += '\0';
  input += map.dump();
  return md5_hex(input);
}

bool view_declared_unique(const OrderedJson& view) {
  if (!view.is_object()) return false;
  auto o = view.find("options");
  if (o == view.end() || !o->is_object()) return false;
  auto u = o->find("unique");
  return u != o->end() && u->is_boolean() && u->get<bool>();
}

StorageResult<std::shared_ptr<const UniqueIndexes>> read_unique_indexes(Transaction& tr,
                                                                        const DbRef& db) {
  // Every write transaction reads the registry: remembered between transactions (core/db/db_cache.h;
  // write_unique_indexes marks its transaction), with the read conflict taken all the same.
  const std::string key = db.space.meta_key(keyspace::kUniqueIndexes);
  auto r = remembered_read<UniqueIndexes>(tr, memo_key("unique_registry", std::to_string(db.id)),
                                          [&](Transaction& t) -> StorageResult<UniqueIndexes> {
                                            auto raw = t.get(key, storage::Snapshot::yes);
                                            if (!raw.ok()) return raw.error();
                                            if (!raw->has_value()) return UniqueIndexes{};
                                            return parse_unique_registry(**raw);
                                          });
  if (!r.ok()) return r.error();
  tr.add_read_conflict_key(key);
  return *r;
}

void write_unique_indexes(Transaction& tr, const DbRef& db, const UniqueIndexes& list) {
  tr.touch_metadata();  // read_unique_indexes remembers the registry
  if (list.empty()) {
    tr.clear(db.space.meta_key(keyspace::kUniqueIndexes));
    return;
  }
  OrderedJson j = OrderedJson::array();
  for (const auto& d : list)
    j.push_back(OrderedJson{
        {"id", d.id}, {"ddoc", d.ddoc}, {"name", d.name}, {"map", d.map}, {"ready", d.ready}});
  tr.set(db.space.meta_key(keyspace::kUniqueIndexes), j.dump());
}

StorageResult<std::optional<CouchError>> unique_check(Transaction& tr, const DbRef& db,
                                                      const UniqueIndexes& list,
                                                      std::string_view id,
                                                      const std::string* body) {
  using R = std::optional<CouchError>;
  if (body == nullptr) return R();
  if (is_design(id)) {
    // Only POST /_index adds a unique view (it registers the view in the same transaction).
    OrderedJson doc = OrderedJson::parse(*body, nullptr, false);
    for (const auto& [name, map] : declared_unique(doc))
      if (!registered(list, id, name, map))
        return R(err::invalid_design_doc("View " + name +
                                         " is declared unique: unique indexes are created with "
                                         "POST /{db}/_index"));
    return R();
  }
  if (list.empty()) return R();
  auto doc = doc_for_index(id, *body);
  if (!doc) return R();
  for (const UniqueIndexDef& d : list) {
    auto key = mango_index_key(*doc, d.map);
    if (!key) continue;
    auto holder = other_holder(tr, db, d.id, collation_key(*key), id);
    if (!holder.ok()) return holder.error();
    if (*holder)
      return R(err::conflict("unique constraint " + d.name + " violated by " + **holder));
  }
  return R();
}

storage::Status unique_write(Transaction& tr, const DbRef& db, UniqueIndexes& list,
                             std::string_view id, const std::string* body, bool record_violations) {
  if (is_design(id)) {
    // Constraints whose view this body no longer declares (or the document is deleted) go.
    bool changed = false;
    OrderedJson doc = body ? OrderedJson::parse(*body, nullptr, false) : OrderedJson();
    const auto declared = declared_unique(doc);
    for (auto it = list.begin(); it != list.end();) {
      const bool kept =
          it->ddoc != id || std::any_of(declared.begin(), declared.end(), [&](const auto& v) {
            return v.first == it->name && v.second == it->map;
          });
      if (kept) {
        ++it;
        continue;
      }
      auto [b, e] = db.space.unique_index(it->id).range();
      tr.clear_range(b, e);
      it = list.erase(it);
      changed = true;
    }
    if (changed) write_unique_indexes(tr, db, list);
    return {};
  }
  if (list.empty()) return {};
  std::optional<OrderedJson> doc;
  if (body) doc = doc_for_index(id, *body);
  for (const UniqueIndexDef& d : list) {
    std::optional<OrderedJson> key;
    if (doc) key = mango_index_key(*doc, d.map);
    const std::string coll = key ? collation_key(*key) : std::string();
    const std::string mine = doc_key(db, d.id, id);
    auto old = tr.get(mine);
    if (!old.ok()) return old.error();
    const std::string vkey = violation_key(db, d.id, id);
    if (old->has_value()) {
      if (key && **old == coll) continue;  // same key: nothing moves
      tr.clear(keys_of(db, d.id).pack(Tuple().add_bytes(**old).add(id)));
      tr.clear(mine);
      tr.clear(vkey);
    }
    if (!key) continue;
    if (record_violations) {
      auto holder = other_holder(tr, db, d.id, coll, id);
      if (!holder.ok()) return holder.error();
      if (*holder) tr.set(vkey, OrderedJson{{"key", *key}, {"conflicts_with", **holder}}.dump());
    }
    tr.set(keys_of(db, d.id).pack(Tuple().add_bytes(coll).add(id)), key->dump());
    tr.set(mine, coll);
  }
  return {};
}

StorageResult<bool> unique_build_step(Transaction& tr, const DbRef& db, const UniqueIndexDef& def,
                                      std::string& cursor, std::vector<UniqueDuplicate>& dups) {
  const auto& ids = db.space.by_id();
  auto [b, e] = ids.range();
  const std::string begin = cursor.empty() ? b : ids.pack(Tuple().add(cursor)) + '\x00';
  auto kvs = tr.get_range(begin, e, static_cast<int>(kUniqueBuildDocsPerStep));
  if (!kvs.ok()) return kvs.error();
  std::size_t dup_ids = 0;
  for (const auto& d : dups) dup_ids += d.ids.size();
  for (const auto& kv : *kvs) {
    auto k = ids.unpack(kv.key);
    const std::string* id = k && k->size() == 1 ? k->get_string(0) : nullptr;
    auto v = Tuple::unpack(kv.value);
    auto pos = v && v->size() == 3 ? v->get_int(1) : std::nullopt;
    const std::string* hash = pos ? v->get_bytes(2) : nullptr;
    if (id == nullptr || hash == nullptr) return storage::Error::io_error;
    cursor = *id;
    if (is_design(*id)) continue;
    auto body = read_body(tr, db, *id, RevId{*pos, *hash});
    if (!body.ok()) return body.error();
    if (!*body) continue;
    auto doc = doc_for_index(*id, **body);
    if (!doc) continue;
    auto key = mango_index_key(*doc, def.map);
    if (!key) continue;
    const std::string coll = collation_key(*key);
    auto holder = other_holder(tr, db, def.id, coll, *id);
    if (!holder.ok()) return holder.error();
    if (*holder) {
      if (dup_ids >= kUniqueDuplicatesMax) continue;
      auto same =
          std::find_if(dups.begin(), dups.end(), [&](const auto& x) { return x.key == *key; });
      if (same == dups.end()) {
        dups.push_back(UniqueDuplicate{*key, {**holder}});
        same = dups.end() - 1;
        ++dup_ids;
      }
      same->ids.push_back(*id);
      ++dup_ids;
      continue;
    }
    const std::string mine = doc_key(db, def.id, *id);
    auto old = tr.get(mine);
    if (!old.ok()) return old.error();
    if (old->has_value()) continue;  // a write since the build began put it there
    tr.set(keys_of(db, def.id).pack(Tuple().add_bytes(coll).add(*id)), key->dump());
    tr.set(mine, coll);
  }
  return kvs->size() < kUniqueBuildDocsPerStep;
}

StorageResult<bool> unique_finish(Transaction& tr, const DbRef& db, const std::string& index_id,
                                  bool keep) {
  auto cur = read_unique_indexes(tr, db);
  if (!cur.ok()) return cur.error();
  UniqueIndexes list = **cur;
  auto it = std::find_if(list.begin(), list.end(), [&](const auto& d) { return d.id == index_id; });
  if (it == list.end()) return false;
  if (keep) {
    it->ready = true;
  } else {
    auto [b, e] = db.space.unique_index(index_id).range();
    tr.clear_range(b, e);
    list.erase(it);
  }
  write_unique_indexes(tr, db, list);
  return true;
}

StorageResult<std::vector<OrderedJson>> unique_violations(Transaction& tr, const DbRef& db,
                                                          const std::string& index_id,
                                                          std::size_t limit) {
  const auto sub = db.space.unique_index(index_id).sub(Tuple().add(keyspace::kUniqueViolations));
  auto [b, e] = sub.range();
  auto kvs = tr.get_range(b, e, static_cast<int>(limit), storage::Reverse::no, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  std::vector<OrderedJson> out;
  for (const auto& kv : *kvs) {
    auto t = sub.unpack(kv.key);
    const std::string* id = t && t->size() == 1 ? t->get_string(0) : nullptr;
    OrderedJson v = OrderedJson::parse(kv.value, nullptr, false);
    if (id == nullptr || !v.is_object()) continue;
    OrderedJson row = OrderedJson::object();
    row["id"] = *id;
    row["key"] = v.value("key", OrderedJson());
    row["conflicts_with"] = v.value("conflicts_with", OrderedJson());
    out.push_back(std::move(row));
  }
  return out;
}

namespace {

std::string claim_key(const DbRef& db, const std::string& index_id) {
  return db.space.unique_index(index_id).pack(Tuple().add(keyspace::kUniqueBuildClaim));
}

}  // namespace

StorageResult<bool> take_unique_claim(Transaction& tr, const DbRef& db, const std::string& index_id,
                                      std::int64_t now_ms) {
  const std::string key = claim_key(db, index_id);
  auto held = read_claim(tr, key, storage::Snapshot::no);  // two takers conflict
  if (!held.ok()) return held.error();
  if (claim_live(*held, now_ms, kUniqueClaimMs)) return false;
  write_claim(tr, key, node_id(), now_ms);
  return true;
}

StorageResult<bool> unique_claim_held(Transaction& tr, const DbRef& db, const std::string& index_id,
                                      std::int64_t now_ms) {
  auto held = read_claim(tr, claim_key(db, index_id), storage::Snapshot::yes);
  if (!held.ok()) return held.error();
  return claim_live(*held, now_ms, kUniqueClaimMs);
}

storage::Status drop_unique_claim(Transaction& tr, const DbRef& db, const std::string& index_id) {
  return drop_claim(tr, claim_key(db, index_id), node_id());
}

UniqueIndexBuild::UniqueIndexBuild(DbRef db, UniqueIndexDef def)
    : db_(std::move(db)), def_(std::move(def)) {}

storage::Status UniqueIndexBuild::operator()(Transaction& tr) {
  attempt_cursor_ = cursor_;
  attempt_dups_ = dups_;
  write_claim(tr, claim_key(db_, def_.id), node_id(), idem_now_ms());
  auto r = unique_build_step(tr, db_, def_, attempt_cursor_, attempt_dups_);
  if (!r.ok()) return r.error();
  attempt_done_ = *r;
  return {};
}

void UniqueIndexBuild::committed() {
  cursor_ = std::move(attempt_cursor_);
  dups_ = std::move(attempt_dups_);
  done_ = attempt_done_;
}

}  // namespace chaise::core
