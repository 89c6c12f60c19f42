#include "core/db/idempotency.h"

#include <algorithm>
#include <chrono>

#include "core/db/keyspace.h"

namespace chaise::core {

using storage::Reverse;
using storage::Snapshot;
using storage::Tuple;

namespace {

constexpr std::int64_t kHeaderChunk = -1;

std::string record_key(const DbRef& db, std::string_view key, std::int64_t chunk) {
  return db.space.idem().pack(Tuple().add_bytes(key).add(chunk));
}

std::pair<std::string, std::string> record_range(const DbRef& db, std::string_view key) {
  return db.space.idem().range(Tuple().add_bytes(key));
}

std::string expiry_key(std::int64_t expires_ms, std::int64_t db_id, std::string_view key) {
  return keyspace::idem_expiry().pack(Tuple().add(expires_ms).add(db_id).add_bytes(key));
}

// Bodies this small are kept in the header's value (one key per record); larger ones in chunks.
constexpr std::size_t kInlineBytesMax = 60'000;

struct Header {
  std::string fingerprint;
  std::int64_t expires_ms = 0;
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::optional<std::string> body;  // inline
};

std::optional<Header> decode_header(std::string_view value) {
  auto t = Tuple::unpack(value);
  if (!t || t->size() != 6 || t->get_int(0) != keyspace::kIdemFormat) return std::nullopt;
  const std::string* fp = t->get_bytes(1);
  auto expires = t->get_int(2);
  auto status = t->get_int(3);
  const Tuple* hs = t->get_tuple(4);
  if (!fp || !expires || !status || !hs || hs->size() % 2 != 0) return std::nullopt;
  Header h{*fp, *expires, static_cast<int>(*status), {}, std::nullopt};
  for (std::size_t i = 0; i < hs->size(); i += 2) {
    const std::string* name = hs->get_bytes(i);
    const std::string* v = hs->get_bytes(i + 1);
    if (!name || !v) return std::nullopt;
    h.headers.emplace_back(*name, *v);
  }
  if (const std::string* body = t->get_bytes(5)) {
    h.body = *body;
  } else if (!t->is_null(5)) {
    return std::nullopt;
  }
  return h;
}

// Clears every key of a record (header and chunks) one by one.
storage::Status clear_record(Transaction& tr, const DbRef& db, std::string_view key) {
  auto [begin, end] = record_range(db, key);
  auto kvs = tr.get_range(begin, end, 0, Reverse::no, Snapshot::no);
  if (!kvs.ok()) return kvs.error();
  for (const auto& kv : *kvs) tr.clear(kv.key);
  return {};
}

}  // namespace

std::int64_t idem_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

StorageResult<IdemLookup> idem_lookup(Transaction& tr, const DbRef& db, const IdemRequest& r,
                                      std::int64_t now_ms, Snapshot snapshot) {
  // The header alone first: most lookups find nothing, and a mismatch needs no body.
  auto head = tr.get(record_key(db, r.key, kHeaderChunk), snapshot);
  if (!head.ok()) return head.error();
  IdemLookup out;
  if (!head->has_value()) return out;
  auto h = decode_header(**head);
  if (!h) return storage::Error::io_error;
  if (h->expires_ms <= now_ms) {
    out.expired = true;
    return out;
  }
  if (h->fingerprint != r.fingerprint) {
    out.state = IdemState::mismatch;
    return out;
  }
  out.state = IdemState::replay;
  out.response.status = h->status;
  out.response.headers = std::move(h->headers);
  if (h->body) {
    out.response.body = std::move(*h->body);
    return out;
  }
  // The body's chunks, in one range read.
  const std::string chunks_begin = record_key(db, r.key, 0);
  const std::string chunks_end = record_range(db, r.key).second;
  auto kvs = tr.get_range(chunks_begin, chunks_end, 0, Reverse::no, snapshot);
  if (!kvs.ok()) return kvs.error();
  for (const auto& kv : *kvs) out.response.body += kv.value;
  return out;
}

StorageResult<bool> idem_store(Transaction& tr, const DbRef& db, const IdemRequest& r,
                               std::int64_t now_ms, const StoredResponse& response,
                               bool replace_expired) {
  if (replace_expired) {
    if (storage::Status s = clear_record(tr, db, r.key); !s.ok()) return s.error();
  }
  const std::int64_t expires = now_ms + std::max<std::int64_t>(r.ttl_ms, 1);
  Tuple headers;
  std::size_t header_bytes = 0;
  for (const auto& [name, value] : response.headers) {
    headers.add_bytes(name).add_bytes(value);
    header_bytes += name.size() + value.size();
  }
  const bool inline_body = response.body.size() + header_bytes <= kInlineBytesMax;
  Tuple head;
  head.add(keyspace::kIdemFormat)
      .add_bytes(r.fingerprint)
      .add(expires)
      .add(static_cast<std::int64_t>(response.status))
      .add(std::move(headers));
  if (inline_body) {
    head.add_bytes(response.body);
  } else {
    head.add(nullptr);
  }
  tr.set(record_key(db, r.key, kHeaderChunk), head.pack());
  std::int64_t chunk = 0;
  for (std::size_t at = 0; !inline_body && at < response.body.size();
       at += keyspace::kBodyChunkBytes)
    tr.set(record_key(db, r.key, chunk++),
           std::string_view(response.body).substr(at, keyspace::kBodyChunkBytes));
  tr.set(expiry_key(expires, db.id, r.key), "");
  return true;
}

StorageResult<std::size_t> idem_expire_step(Transaction& tr, std::int64_t now_ms, std::size_t max) {
  const keyspace::Subspace index = keyspace::idem_expiry();
  const std::string begin = index.range().first;
  const std::string end = index.pack(Tuple().add(now_ms + 1));
  auto due = tr.get_range(begin, end, static_cast<int>(max), Reverse::no, Snapshot::no);
  if (!due.ok()) return due.error();
  for (const auto& kv : *due) {
    tr.clear(kv.key);
    auto t = index.unpack(kv.key);
    auto expires = t && t->size() == 3 ? t->get_int(0) : std::nullopt;
    auto db_id = expires ? t->get_int(1) : std::nullopt;
    const std::string* key = db_id ? t->get_bytes(2) : nullptr;
    if (key == nullptr) continue;  // not ours to interpret; the entry alone goes
    DbRef db;
    db.id = *db_id;
    db.space = keyspace::DbSpace(*db_id);
    // The record goes only if it is the one this entry was written for: a later execution of an
    // expired key wrote a record of its own, with its own entry. (A deleted database's records
    // went with it; clearing nothing is harmless.)
    auto head = tr.get(record_key(db, *key, kHeaderChunk), Snapshot::no);
    if (!head.ok()) return head.error();
    if (!head->has_value()) continue;
    auto h = decode_header(**head);
    if (h && h->expires_ms != *expires) continue;
    if (storage::Status s = clear_record(tr, db, *key); !s.ok()) return s.error();
  }
  return due->size();
}

}  // namespace chaise::core
