// core/index/write_hooks.h — the hooks every document edit runs (core/docs/documents.h EditHooks): unique
// indexes (core/index/unique_index.h) and synchronous indexes (core/index/sync_index.h).
//
// A write transaction reads both registries once, with conflict (read_write_hooks), passes the
// hooks to every edit, then calls finish() once its edits are done: the ready synchronous
// indexes take the edited documents' new winners in the same transaction.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/docs/documents.h"
#include "core/index/sync_index.h"
#include "core/index/unique_index.h"

namespace chaise::core {

namespace js {
class Engine;
}

class IndexWriteHooks final : public EditHooks {
 public:
  UniqueIndexes unique;
  SyncIndexes sync;

  // POST /{db}/_index of a unique index: `def` (not ready) replaces any entry of the same id in
  // the registry, written in `tr`, so the design document that declares it is accepted.
  void register_unique(Transaction& tr, const DbRef& db, UniqueIndexDef def);
  // At the end of the transaction's edits: every ready synchronous index takes the rendered
  // documents (`js` runs JavaScript map functions; may be null).
  storage::Status finish(Transaction& tr, const DbRef& db, js::Engine* js);

  bool watches_winner(std::string_view id) const override;
  bool wants_rendered() const override;
  StorageResult<std::optional<CouchError>> check(Transaction& tr, const DbRef& db,
                                                 std::string_view id,
                                                 const std::string* body) override;
  storage::Status winner_changed(Transaction& tr, const DbRef& db, std::string_view id,
                                 const std::string* body, bool record_violations) override;
  void rendered(std::string id, std::optional<std::string> doc) override;
};

// Both registries of `db`, read with conflict.
StorageResult<IndexWriteHooks> read_write_hooks(Transaction& tr, const DbRef& db);

}  // namespace chaise::core
