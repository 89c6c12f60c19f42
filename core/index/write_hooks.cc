#include "core/index/write_hooks.h"

#include <algorithm>
#include <utility>

namespace chaise::core {

void IndexWriteHooks::register_unique(Transaction& tr, const DbRef& db, UniqueIndexDef def) {
  std::erase_if(unique, [&](const UniqueIndexDef& d) { return d.id == def.id; });
  unique.push_back(std::move(def));
  write_unique_indexes(tr, db, unique);
}

storage::Status IndexWriteHooks::finish(Transaction& tr, const DbRef& db, js::Engine* js) {
  return sync_index_edits(tr, db, sync, js);
}

bool IndexWriteHooks::watches_winner(std::string_view id) const {
  return !unique.empty() || id.starts_with("_design/");
}

bool IndexWriteHooks::wants_rendered() const { return sync.any_ready(); }

StorageResult<std::optional<CouchError>> IndexWriteHooks::check(Transaction& tr, const DbRef& db,
                                                                std::string_view id,
                                                                const std::string* body) {
  return unique_check(tr, db, unique, id, body);
}

storage::Status IndexWriteHooks::winner_changed(Transaction& tr, const DbRef& db,
                                                std::string_view id, const std::string* body,
                                                bool record_violations) {
  if (auto st = unique_write(tr, db, unique, id, body, record_violations); !st.ok()) return st;
  if (id.starts_with("_design/")) sync_design_doc(tr, db, sync, id, body);
  return {};
}

void IndexWriteHooks::rendered(std::string id, std::optional<std::string> doc) {
  sync.docs.emplace_back(std::move(id), std::move(doc));
}

StorageResult<IndexWriteHooks> read_write_hooks(Transaction& tr, const DbRef& db) {
  IndexWriteHooks h;
  auto unique = read_unique_indexes(tr, db);
  if (!unique.ok()) return unique.error();
  h.unique = **unique;
  auto sync = read_sync_indexes(tr, db);
  if (!sync.ok()) return sync.error();
  h.sync.list = std::move(*sync);
  return h;
}

}  // namespace chaise::core
