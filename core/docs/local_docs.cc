// _local documents: (kLocal, DocId) = (kLocalFormat, RevCounter, Body). Never replicated, not in
// _changes; their revisions are "0-N", N counting the document's writes.
#include "core/docs/documents.h"
#include "core/util/json_text.h"

namespace chaise::core {

using storage::Snapshot;
using storage::Tuple;

StorageResult<Outcome<std::string>> get_local_json(Transaction& tr, const DbRef& db,
                                                   std::string_view id) {
  using R = Outcome<std::string>;
  auto v = tr.get(db.space.local_key(id), Snapshot::yes);
  if (!v.ok()) return v.error();
  if (!v->has_value()) return R(err::not_found());
  auto t = Tuple::unpack(**v);
  if (!t || t->size() != 3 || !t->get_int(1) || !t->get_bytes(2)) return storage::Error::io_error;
  return R(splice_doc(*t->get_bytes(2), id, "0-" + std::to_string(*t->get_int(1)), {}));
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
  if (deleted) {
    tr.clear(key);
    return R(std::string("0-0"));
  }
  tr.set(key, Tuple().add(keyspace::kLocalFormat).add(prev + 1).add_bytes(body).pack());
  return R("0-" + std::to_string(prev + 1));
}

}  // namespace chaise::core
