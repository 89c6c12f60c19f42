// core/db_cache.h — which databases exist and their security objects, remembered between
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
#include <string_view>

#include "core/databases.h"
#include "core/security.h"

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

}  // namespace chaise::core
