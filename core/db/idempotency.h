// core/db/idempotency.h — writes made idempotent by a client-supplied key (a command id:
// the IETF httpapi draft's Idempotency-Key header).
//
// The first execution of a write stores its response in the write's own transaction, under
// (db, kIdem, Key), together with a fingerprint of the request; a retry with the same key finds it
// and answers with it instead of writing again. Because the record commits or not together with
// the write, a retry after a lost response or a commit_unknown_result sees exactly one of "never
// happened" and "happened, with this answer".
//
// Records expire after a time to live. A server-wide index (kSystem, kIdemExpiry, ExpiresAtMs,
// DbId, Key) orders them by expiry, so the janitor clears what is due with one range read; an
// expired record that is still there reads as absent.
//
// Like the rest of core/, these are transaction-body pieces: they never commit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/db/databases.h"

namespace chaise::core {

// A response as stored: status, the headers a client reads (ETag, Location, Content-Type, ...) and
// the body.
struct StoredResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool operator==(const StoredResponse&) const = default;
};

// One idempotent request: its key, a digest of what it asks (method, target, user, body...), and
// how long its record lives.
struct IdemRequest {
  std::string key;
  std::string fingerprint;
  std::int64_t ttl_ms = 24 * 3600 * 1000;
};

enum class IdemState {
  absent,    // no record (or an expired one): execute the request
  replay,    // a record with the same fingerprint: answer with `response`
  mismatch,  // the key was used for a different request
};
struct IdemLookup {
  IdemState state = IdemState::absent;
  StoredResponse response;
  bool expired = false;  // absent, but an expired record is still stored (idem_store replaces it)
};

// Reads the record of `r.key` in `db` as of `now_ms`. Inside a write transaction read it with
// Snapshot::no, so that two executions of one key conflict and the later one retries into a replay.
StorageResult<IdemLookup> idem_lookup(Transaction& tr, const DbRef& db, const IdemRequest& r,
                                      std::int64_t now_ms, storage::Snapshot snapshot);

// Writes the record of `r.key` and its expiry index entry. `replace_expired`: the lookup found an
// expired record, whose keys are cleared first (one by one: range tombstones slow every later
// read of RocksDB's memtable).
StorageResult<bool> idem_store(Transaction& tr, const DbRef& db, const IdemRequest& r,
                               std::int64_t now_ms, const StoredResponse& response,
                               bool replace_expired);

// The janitor's step: clears up to `max` records (and index entries) due at `now_ms`. Returns the
// number of index entries handled; fewer than `max` means nothing more is due.
StorageResult<std::size_t> idem_expire_step(Transaction& tr, std::int64_t now_ms, std::size_t max);

// Milliseconds since the Unix epoch (the clock records expire by).
std::int64_t idem_now_ms();

}  // namespace chaise::core
