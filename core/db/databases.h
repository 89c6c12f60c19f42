// core/db/databases.h — the database registry and dbinfo (RFC 002).
//
// Every function here is a transaction body piece: it reads and writes through the Transaction it
// is given and never commits. Run it inside storage::Database::run (tests, tools) or the async
// runner in http/ (requests). Storage errors come back as storage::Error so the runner can retry
// them; CouchDB-level outcomes (404, 412, ...) come back as CouchError values.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/db/keyspace.h"
#include "core/db/sequence.h"
#include "core/rev/rev.h"
#include "core/util/error.h"
#include "storage/database.h"
#include "storage/transaction.h"

namespace chaise::core {

using storage::Transaction;

inline constexpr std::size_t kDbNameLengthMax = 238;
inline constexpr int kRevsLimitMax = 4000;  // RFC 003: ancestors must fit one 100 KB value

// An open database, as of the transaction that opened it.
struct DbRef {
  std::string name;
  std::int64_t id = 0;
  bool partitioned = false;
  std::int64_t created_us = 0;
  keyspace::DbSpace space{0};
};

struct DbInfo {
  std::string name;
  std::int64_t doc_count = 0;
  std::int64_t doc_del_count = 0;
  Sequence update_seq;
  // The newest purge entry's sequence, its N the number of purge entries ever written ("0":
  // nothing was ever purged).
  Sequence purge_seq;
  std::int64_t sizes_external = 0;
  std::int64_t sizes_active = 0;
  // The store's estimate of the bytes the database's keys and values take (until the store
  // compacts them, superseded and purged data included): CouchDB's file size.
  std::int64_t sizes_file = 0;
  bool partitioned = false;
};

// CouchDB's rule: ^[a-z][a-z0-9_$()+/-]*$, at most 238 characters; plus the system databases
// _users, _replicator and _global_changes.
bool valid_db_name(std::string_view name);

// A storage failure or a value.
template <typename T>
using StorageResult = storage::Result<T>;

// 412 file_exists if present, 400 illegal_database_name if the name is bad.
StorageResult<Outcome<DbRef>> create_db(Transaction& tr, std::string_view name, bool partitioned,
                                        std::int64_t now_us);
// create_db, then the security object a new database gets: CouchDB 3's [couchdb]
// default_security, admin_only (members: _admin) or everyone (empty). What PUT /{db} does.
StorageResult<Outcome<DbRef>> create_db_with_default_security(Transaction& tr,
                                                              std::string_view name,
                                                              bool partitioned, std::int64_t now_us,
                                                              bool admin_only);

// The system databases. A server with [couchdb] single_node = true has them from its first
// start on, as CouchDB 3 creates them then (users can sign up and replications be written at once).
inline constexpr std::array<std::string_view, 3> kSystemDbs = {"_users", "_replicator",
                                                               "_global_changes"};
bool is_system_db(std::string_view name);
// Creates those of kSystemDbs that do not exist (one transaction); the names it created.
StorageResult<std::vector<std::string>> create_system_dbs(storage::Database& store, bool admin_only,
                                                          std::int64_t now_us);
// Clears every key of the database (one clear_range). 404 if absent.
StorageResult<Outcome<bool>> delete_db(Transaction& tr, std::string_view name);
// 404 not_found "Database does not exist." if absent. The read conflicts with a concurrent delete.
// With `remembered`, a database that core/db/db_cache.h remembers for this snapshot is not read again
// (its name key still goes into the read-conflict set).
StorageResult<Outcome<DbRef>> open_db(Transaction& tr, std::string_view name,
                                      bool remembered = true);

struct AllDbsQuery {
  std::optional<std::string> start_key;
  std::optional<std::string> end_key;
  bool inclusive_end = true;
  bool descending = false;
  std::int64_t limit = -1;  // -1 = no limit
  std::int64_t skip = 0;
};
StorageResult<std::vector<std::string>> list_dbs(Transaction& tr, const AllDbsQuery& q);

StorageResult<DbInfo> db_info(Transaction& tr, const DbRef& db);
// The sequence of the newest purge entry ("0" when none), N being its sequence's count.
StorageResult<Sequence> newest_purge(Transaction& tr, const DbRef& db);
// The newest sequence of the database: its newest change or purge ("0" when it has none).
StorageResult<Sequence> update_seq(Transaction& tr, const DbRef& db);
StorageResult<int> revs_limit(Transaction& tr, const DbRef& db);
void set_revs_limit(Transaction& tr, const DbRef& db, int limit);
// The security object's JSON text as stored (nullopt: never set). Not a snapshot read: a request
// checked against it conflicts with a concurrent change.
StorageResult<std::optional<std::string>> read_security_json(Transaction& tr, const DbRef& db);
void set_security_json(Transaction& tr, const DbRef& db, std::string_view json);
// A counter's value (0 when never written). Snapshot read: counters only ever move by atomic add.
StorageResult<std::int64_t> read_counter(Transaction& tr, const DbRef& db, std::string_view name);

}  // namespace chaise::core
