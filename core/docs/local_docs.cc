// _local documents: (kLocal, DocId) = (kLocalFormat, RevCounter, Body), or for a body over one
// value's worth (FoundationDB's 100,000 bytes) (kLocalChunkedFormat, RevCounter, Chunks) with the
// body in (kLocalChunks, DocId, Chunk). Never replicated, not in _changes; their revisions are
// "0-N", N counting the document's writes.
#include "core/docs/documents.h"
#include "core/util/json_text.h"

namespace chaise::core {

using storage::Snapshot;
using storage::Tuple;

namespace {

std::pair<std::string, std::string> chunks_range(const DbRef& db, std::string_view id) {
  return db.space.local_chunks().range(Tuple().add(id));
}

// Whether the stored value `v` keeps its body in chunks.
bool chunked(const std::optional<std::string>& v) {
  if (!v) return false;
  auto t = Tuple::unpack(*v);
  return t && t->get_int(0) == keyspace::kLocalChunkedFormat;
}

}  // namespace

StorageResult<Outcome<std::string>> get_local_json(Transaction& tr, const DbRef& db,
                                                   std::string_view id) {
  using R = Outcome<std::string>;
  auto v = tr.get(db.space.local_key(id), Snapshot::yes);
  if (!v.ok()) return v.error();
  if (!v->has_value()) return R(err::not_found());
  auto t = Tuple::unpack(**v);
  if (!t || t->size() != 3 || !t->get_int(0) || !t->get_int(1)) return storage::Error::io_error;
  const std::string rev = "0-" + std::to_string(*t->get_int(1));
  if (*t->get_int(0) != keyspace::kLocalChunkedFormat) {
    if (!t->get_bytes(2)) return storage::Error::io_error;
    return R(splice_doc(*t->get_bytes(2), id, rev, {}));
  }
  auto [b, e] = chunks_range(db, id);
  auto chunks = tr.get_range(b, e, 0, storage::Reverse::no, Snapshot::yes);
  if (!chunks.ok()) return chunks.error();
  if (static_cast<std::int64_t>(chunks->size()) != t->get_int(2).value_or(-1))
    return storage::Error::io_error;
  std::string body;
  for (const storage::KeyValue& kv : *chunks) body += kv.value;
  return R(splice_doc(body, id, rev, {}));
}

StorageResult<Outcome<bool>> put_local_if(Transaction& tr, const DbRef& db, std::string_view id,
                                          const std::optional<std::string>& rev,
                                          std::string_view body) {
  using R = Outcome<bool>;
  auto v = tr.get(db.space.local_key(id), Snapshot::no);
  if (!v.ok()) return v.error();
  std::optional<std::string> current;
  if (v->has_value()) {
    auto t = Tuple::unpack(**v);
    if (!t || !t->get_int(1)) return storage::Error::io_error;
    current = "0-" + std::to_string(*t->get_int(1));
  }
  if (current != rev) return R(false);
  auto written = put_local(tr, db, id, rev, false, body);
  if (!written.ok()) return written.error();
  if (auto* e = std::get_if<CouchError>(&*written)) return R(*e);
  return R(true);
}

Outcome<bool> put_local_if(storage::Database& store, std::string_view db_name, std::string_view id,
                           const std::optional<std::string>& rev, std::string_view body) {
  std::optional<Outcome<bool>> out;
  storage::Status s = store.run([&](Transaction& tr) -> storage::Status {
    auto db = open_db(tr, db_name);
    if (!db.ok()) return db.error();
    if (auto* e = std::get_if<CouchError>(&*db)) {
      out = *e;
      return {};
    }
    auto r = put_local_if(tr, std::get<DbRef>(*db), id, rev, body);
    if (!r.ok()) return r.error();
    out = std::move(*r);
    return {};
  });
  if (!s.ok()) return storage_failure(s.error());
  return *out;
}

StorageResult<Outcome<std::string>> put_local(Transaction& tr, const DbRef& db, std::string_view id,
                                              const std::optional<std::string>& base_rev,
                                              bool deleted, std::string_view body) {
  using R = Outcome<std::string>;
  const std::string key = db.space.local_key(id);
  // CouchDB 3 (couch_db_updater:update_local_doc_revs) does not compare revisions of _local
  // documents: the new revision is the client's "0-N" plus one (0 when none is given), and a
  // delete always succeeds (the HTTP layer answers 404 for a missing one first).
  std::int64_t prev = 0;
  if (base_rev) {
    std::string_view r = *base_rev;
    if (r.size() < 3 || r.substr(0, 2) != "0-" ||
        r.find_first_not_of("0123456789", 2) != std::string_view::npos || r.size() > 20)
      return R(err::bad_request("Invalid rev format"));
    prev = std::stoll(std::string(r.substr(2)));
  }
  // The stored value says whether chunks are to be cleared (read with conflict: two writers of
  // one _local document go one after the other).
  auto old = tr.get(key, Snapshot::no);
  if (!old.ok()) return old.error();
  auto [cb, ce] = chunks_range(db, id);
  if (chunked(*old)) tr.clear_range(cb, ce);
  if (deleted) {
    tr.clear(key);
    return R(std::string("0-0"));
  }
  if (body.size() <= keyspace::kBodyChunkBytes) {
    tr.set(key, Tuple().add(keyspace::kLocalFormat).add(prev + 1).add_bytes(body).pack());
  } else {
    std::int64_t n = 0;
    for (std::size_t at = 0; at < body.size(); at += keyspace::kBodyChunkBytes, ++n)
      tr.set(db.space.local_chunks().pack(Tuple().add(id).add(n)),
             body.substr(at, keyspace::kBodyChunkBytes));
    tr.set(key, Tuple().add(keyspace::kLocalChunkedFormat).add(prev + 1).add(n).pack());
  }
  return R("0-" + std::to_string(prev + 1));
}

}  // namespace chaise::core
