#include "core/db/databases.h"

#include <algorithm>

#include "core/db/db_cache.h"
#include "core/db/db_updates.h"
#include "core/db/shards.h"
#include "core/security/security.h"

namespace chaise::core {

using storage::KeyValue;
using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;

namespace {

std::optional<DbRef> decode_db(std::string_view name, std::string_view value) {
  auto t = Tuple::unpack(value);
  if (!t || t->size() < 4) return std::nullopt;
  auto id = t->get_int(1);
  auto partitioned = t->get_bool(2);
  auto created = t->get_int(3);
  if (!id || !partitioned || !created) return std::nullopt;
  return DbRef{std::string(name), *id, *partitioned, *created, keyspace::DbSpace(*id)};
}

}  // namespace

bool valid_db_name(std::string_view name) {
  if (name == "_users" || name == "_replicator" || name == "_global_changes") return true;
  if (name.empty() || name.size() > kDbNameLengthMax) return false;
  if (name[0] < 'a' || name[0] > 'z') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           std::string_view("_$()+-/").find(c) != std::string_view::npos;
  });
}

StorageResult<Outcome<DbRef>> open_db(Transaction& tr, std::string_view name, bool remembered) {
  const std::string key = keyspace::db_names().pack(Tuple().add(name));
  if (remembered) {
    if (auto db = remembered_db(tr, name)) {
      tr.add_read_conflict_key(key);
      return Outcome<DbRef>(std::move(*db));
    }
  }
  auto v = tr.get(key);
  if (!v.ok()) return v.error();
  if (!v->has_value()) return Outcome<DbRef>(err::db_not_found());
  auto ref = decode_db(name, **v);
  if (!ref) return storage::Error::io_error;  // corrupt registry entry
  return Outcome<DbRef>(std::move(*ref));
}

StorageResult<Outcome<DbRef>> create_db(Transaction& tr, std::string_view name, bool partitioned,
                                        std::int64_t now_us) {
  if (!valid_db_name(name)) return Outcome<DbRef>(bad_db_name(name));
  const std::string name_key = keyspace::db_names().pack(Tuple().add(name));
  auto existing = tr.get(name_key);
  if (!existing.ok()) return existing.error();
  if (existing->has_value()) return Outcome<DbRef>(err::file_exists());
  // Ids come from a counter that only grows, so a re-created database never sees old keys.
  const std::string counter_key = keyspace::db_id_counter_key();
  auto counter = tr.get(counter_key);
  if (!counter.ok()) return counter.error();
  std::int64_t id = 1;
  if (counter->has_value()) {
    auto t = Tuple::unpack(**counter);
    if (!t || !t->get_int(0)) return storage::Error::io_error;
    id = *t->get_int(0) + 1;
  }
  tr.touch_metadata();  // core/db/db_cache.h
  tr.set(counter_key, Tuple().add(id).pack());
  tr.set(name_key, Tuple().add(keyspace::kDbFormat).add(id).add(partitioned).add(now_us).pack());
  DbRef db{std::string(name), id, partitioned, now_us, keyspace::DbSpace(id)};
  init_shard_map(tr, db);
  note_db_event(tr, name, DbEvent::created);
  return Outcome<DbRef>(std::move(db));
}

StorageResult<Outcome<DbRef>> create_db_with_default_security(Transaction& tr,
                                                              std::string_view name,
                                                              bool partitioned, std::int64_t now_us,
                                                              bool admin_only) {
  auto r = create_db(tr, name, partitioned, now_us);
  if (r.ok() && !failed(*r))
    set_security_json(tr, std::get<DbRef>(*r), default_security(admin_only).raw.dump());
  return r;
}

bool is_system_db(std::string_view name) {
  return std::find(kSystemDbs.begin(), kSystemDbs.end(), name) != kSystemDbs.end();
}

StorageResult<std::vector<std::string>> create_system_dbs(storage::Database& store, bool admin_only,
                                                          std::int64_t now_us) {
  std::vector<std::string> created;
  storage::Status s = store.run([&](Transaction& tr) -> storage::Status {
    created.clear();
    for (std::string_view name : kSystemDbs) {
      auto r = create_db_with_default_security(tr, name, false, now_us, admin_only);
      if (!r.ok()) return r.error();
      if (!failed(*r)) created.emplace_back(name);  // else it exists (412 file_exists)
    }
    return {};
  });
  if (!s.ok()) return s.error();
  return created;
}

StorageResult<Outcome<bool>> delete_db(Transaction& tr, std::string_view name) {
  auto ref = open_db(tr, name);
  if (!ref.ok()) return ref.error();
  if (failed(*ref)) return Outcome<bool>(std::get<CouchError>(*ref));
  const DbRef& db = std::get<DbRef>(*ref);
  tr.touch_metadata();  // core/db/db_cache.h
  tr.clear(keyspace::db_names().pack(Tuple().add(name)));
  auto [b, e] = db.space.root().range();
  tr.clear_range(db.space.root().key(), e);
  (void)b;
  note_db_event(tr, name, DbEvent::deleted);
  return Outcome<bool>(true);
}

StorageResult<std::vector<std::string>> list_dbs(Transaction& tr, const AllDbsQuery& q) {
  const storage::Subspace names = keyspace::db_names();
  auto [begin, end] = names.range();
  // Key bounds in iteration order; descending swaps the roles of start and end (CouchDB).
  std::optional<std::string> lo = q.descending ? q.end_key : q.start_key;
  std::optional<std::string> hi = q.descending ? q.start_key : q.end_key;
  const bool hi_inclusive = q.descending ? true : q.inclusive_end;
  const bool lo_inclusive = q.descending ? q.inclusive_end : true;
  if (lo) {
    std::string k = names.pack(Tuple().add(*lo));
    begin = lo_inclusive ? k : storage::key_after(k);
  }
  if (hi) {
    std::string k = names.pack(Tuple().add(*hi));
    end = hi_inclusive ? storage::key_after(k) : k;
  }
  std::vector<std::string> out;
  if (begin >= end) return out;
  const int limit =
      q.limit < 0 ? 0 : static_cast<int>(std::min<std::int64_t>(q.limit + q.skip, 1 << 30));
  if (q.limit == 0) return out;
  auto kvs =
      tr.get_range(begin, end, limit, q.descending ? Reverse::yes : Reverse::no, Snapshot::yes);
  if (!kvs.ok()) return kvs.error();
  std::int64_t skipped = 0;
  for (const KeyValue& kv : *kvs) {
    if (skipped++ < q.skip) continue;
    auto t = names.unpack(kv.key);
    if (t && t->get_string(0)) out.push_back(*t->get_string(0));
  }
  return out;
}

StorageResult<std::int64_t> read_counter(Transaction& tr, const DbRef& db, std::string_view name) {
  auto v = tr.get(db.space.counter_key(name), Snapshot::yes);
  if (!v.ok()) return v.error();
  return v->has_value() ? keyspace::decode_counter(**v) : 0;
}

StorageResult<Sequence> newest_purge(Transaction& tr, const DbRef& db) {
  auto [b, e] = db.space.purged().range();
  auto last = tr.get_range(b, e, 1, Reverse::yes, Snapshot::yes);
  if (!last.ok()) return last.error();
  if (last->empty()) return Sequence{};
  auto t = db.space.purged().unpack(last->front().key);
  auto seq = t ? Sequence::from_tuple(*t) : std::nullopt;  // (Incarnation, Versionstamp)
  if (!seq) return storage::Error::io_error;
  // (PurgedFormat, PurgeSeq, DocId, Revs, Count): core/db/keyspace.h.
  if (auto v = Tuple::unpack(last->front().value); v && v->size() > 4)
    seq->count = v->get_int(4).value_or(0);
  return *seq;
}

StorageResult<Sequence> update_seq(Transaction& tr, const DbRef& db) {
  // The newest entry over every shard that ever existed (sequences are unique across shards).
  auto maps = read_shard_maps(tr, db, Snapshot::yes);
  if (!maps.ok()) return maps.error();
  Sequence newest;
  for (std::int64_t shard : all_shards(*maps)) {
    auto [begin, end] = db.space.changes().range(Tuple().add(shard));
    auto last = tr.get_range(begin, end, 1, Reverse::yes, Snapshot::yes);
    if (!last.ok()) return last.error();
    if (last->empty()) continue;
    auto t = db.space.changes().unpack(last->front().key);
    if (!t) return storage::Error::io_error;
    auto seq = Sequence::from_tuple(*t, 1);  // (ShardId, Incarnation, Versionstamp)
    if (!seq) return storage::Error::io_error;
    if (auto v = Tuple::unpack(last->front().value); v && v->size() > 6)
      seq->count = v->get_int(6).value_or(0);
    if (newest < *seq) newest = *seq;
  }
  // A purge is an update too (CouchDB counts it in update_seq): the newest purge entry, even
  // when it removed the document whose change was the newest.
  auto purge = newest_purge(tr, db);
  if (!purge.ok()) return purge.error();
  if (newest < *purge) newest = *purge;
  return newest;
}

StorageResult<int> revs_limit(Transaction& tr, const DbRef& db) {
  // Every write reads it: remembered between transactions (core/db/db_cache.h), since only
  // set_revs_limit writes it and marks its transaction.
  auto remembered = remembered_read<int>(
      tr, "revs_limit:" + std::to_string(db.id), [&](Transaction& t) -> StorageResult<int> {
        auto v = t.get(db.space.meta_key(keyspace::kRevsLimit), Snapshot::yes);
        if (!v.ok()) return v.error();
        if (!v->has_value()) return kRevsLimitDefault;
        auto parsed = Tuple::unpack(**v);
        if (!parsed || !parsed->get_int(0)) return storage::Error::io_error;
        return static_cast<int>(*parsed->get_int(0));
      });
  if (!remembered.ok()) return remembered.error();
  return **remembered;
}

void set_revs_limit(Transaction& tr, const DbRef& db, int limit) {
  tr.touch_metadata();  // core/db/db_cache.h: revs_limit is remembered
  tr.set(db.space.meta_key(keyspace::kRevsLimit),
         Tuple().add(static_cast<std::int64_t>(limit)).pack());
}

StorageResult<std::optional<std::string>> read_security_json(Transaction& tr, const DbRef& db) {
  auto v = tr.get(db.space.meta_key(keyspace::kSecurity), Snapshot::no);
  if (!v.ok()) return v.error();
  return std::move(*v);
}

void set_security_json(Transaction& tr, const DbRef& db, std::string_view json) {
  tr.touch_metadata();  // core/db/db_cache.h
  tr.set(db.space.meta_key(keyspace::kSecurity), json);
}

StorageResult<DbInfo> db_info(Transaction& tr, const DbRef& db) {
  DbInfo info;
  info.name = db.name;
  info.partitioned = db.partitioned;
  auto dc = read_counter(tr, db, keyspace::kDocCount);
  auto ddc = read_counter(tr, db, keyspace::kDocDelCount);
  auto ext = read_counter(tr, db, keyspace::kSizeExternal);
  auto act = read_counter(tr, db, keyspace::kSizeActive);
  auto seq = update_seq(tr, db);
  auto purges = read_counter(tr, db, keyspace::kPurgeSeq);
  auto purge = newest_purge(tr, db);
  const auto [begin, end] = db.space.root().range();
  auto file = tr.get_estimated_range_size_bytes(begin, end);
  for (storage::Error e : {dc.error(), ddc.error(), ext.error(), act.error(), seq.error(),
                           purges.error(), purge.error(), file.error()})
    if (e != storage::Error::success) return e;
  info.sizes_file = *file;
  info.purge_seq = *purge;
  info.purge_seq.count = *purges;
  info.doc_count = *dc;
  info.doc_del_count = *ddc;
  info.sizes_external = *ext;
  info.sizes_active = *act;
  info.update_seq = *seq;
  return info;
}

}  // namespace chaise::core
