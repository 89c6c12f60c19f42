// core/db/db_cache.h — which databases exist and their security objects, remembered between
// requests.
//
// Every request that names a database opened it and read its _security in a transaction of its
// own: two storage reads and a JSON parse, a quarter of a small GET's instructions (callgrind).
// Both change only through create_db, delete_db and set_security_json, which mark their
// transactions with touch_metadata(), so what was read stays right until the store's metadata
// generation moves (storage/transaction.h says when a remembered read may be used). A request
// then reads neither, unless a database was created, deleted or secured since.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/db/databases.h"
#include "core/security/security.h"

namespace chaise::core {

struct OpenedDb {
  DbRef db;
  // The stored security object parsed; CouchDB 3's admin-only default when none is stored.
  std::shared_ptr<const SecurityObject> security;
};

// open_db and its security object, as of `tr`'s snapshot (acquired here when not yet). 404 for a
// missing database; 500 for a stored security object that does not parse. Remembers at most
// kDbCacheEntriesMax databases per process (then starts over).
StorageResult<Outcome<OpenedDb>> open_db_with_security(Transaction& tr, std::string_view name);

inline constexpr std::size_t kDbCacheEntriesMax = 4096;

// The database `name` as remembered, valid for `tr`'s snapshot (acquired here when not yet), or
// nullopt: not remembered, changed since, or `tr` changes metadata itself. open_db asks this
// first (and still takes its read conflict on the name).
std::optional<DbRef> remembered_db(Transaction& tr, std::string_view name);

// The key a value is remembered under: its kind ("shard_maps") and what it is of (a database's id
// or name), NUL-separated so that no two pairs share a key.
inline std::string memo_key(std::string_view kind, std::string_view of) {
  std::string key(kind);
  key.push_back('\0');
  key.append(of);
  return key;
}

// Other values that change only in transactions marked touch_metadata() (a database's shard maps,
// its unique and synchronous index registries), remembered the same way under `key` (memo_key of
// the kind of value and the database's id). remembered_read returns the value remembered for
// `tr`'s snapshot, else load(tr) -> StorageResult<V>, remembered when it may be. Read conflicts
// are the caller's to add: a remembered value was not read by `tr`.
namespace detail {
struct Remembering {
  bool may_fill = false;
  std::uint64_t generation = 0;
};
std::shared_ptr<const void> find_remembered(Transaction& tr, const std::string& key,
                                            Remembering& how);
void remember(Transaction& tr, const std::string& key, const Remembering& how,
              std::shared_ptr<const void> value);
}  // namespace detail

template <typename V, typename Load>
StorageResult<std::shared_ptr<const V>> remembered_read(Transaction& tr, const std::string& key,
                                                        Load&& load) {
  detail::Remembering how;
  if (auto hit = detail::find_remembered(tr, key, how))
    return std::static_pointer_cast<const V>(hit);
  StorageResult<V> loaded = load(tr);
  if (!loaded.ok()) return loaded.error();
  auto value = std::make_shared<const V>(std::move(*loaded));
  detail::remember(tr, key, how, value);
  return value;
}

}  // namespace chaise::core
