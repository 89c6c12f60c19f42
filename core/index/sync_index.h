// core/index/sync_index.h — synchronous indexes: views visible as soon as the write that
// changes them is acknowledged.
//
// A design document with "options": {"sync_index": true} (JavaScript views or Mango json
// indexes; POST /{db}/_index takes "sync_index": true) has its index updated inside the write
// transaction of every document edit, so a query right after a write's 201 sees it and finds
// nothing to build. Default stays CouchDB's lazy indexing (built from _changes at query time).
//
// The registry (kMeta, kSyncIndexes) lists such design documents by view signature, each
// "ready" or not. Every write transaction reads it with conflict (one point read). A design
// document edit updates it in the same transaction (a new or changed signature starts not
// ready; a deleted document or one without the option leaves it). The index is built as any
// view (core/index/view_index.h update_step, from a query or from POST /_index); the build step that
// catches up marks it ready, reading the database's update counter with conflict so that no
// write committed after its read can slip between the build and the writers.
//
// Once ready, each write transaction renders every edited document's new winner as a map
// function sees it (_id, _rev, body, _conflicts, and _attachments as CouchDB's metadata-only
// "stub": true entries; nothing for a deleted one),
// replaces its rows, and sets the index's sequence to its own versionstamp: the index stays
// caught up and update_step finds nothing after it. Writers of a group without reduce functions
// never conflict with each other; a group with reduce functions (Mango indexes have "_count")
// serializes its writers through a conflicting read of the index sequence, because its reduce
// tree's nodes are shared (SyncIndexes::updated_reduce_trees tells the caller, which can then
// let one process's writers take turns instead of racing). A writer that cannot run the views (a
// map function that fails to compile, no JavaScript engine) marks the index not ready instead: it
// falls back to lazy indexing until a build catches up again.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/db/databases.h"

namespace chaise::core {

namespace js {
class Engine;
}

struct SyncIndexDef {
  std::string ddoc;  // "_design/..."
  std::string sig;   // the view signature it was registered with
  bool ready = false;
};

struct SyncIndexes {
  std::vector<SyncIndexDef> list;
  bool any_ready() const;
  // Edited documents' new winners as the views see them (nullopt: deleted), in edit order.
  std::vector<std::pair<std::string, std::optional<std::string>>> docs;
  // Set by sync_index_edits when an index it updated keeps reduce trees: this writer conflicts
  // with every other such writer of the database.
  bool updated_reduce_trees = false;
};

// The registry, read with conflict.
StorageResult<std::vector<SyncIndexDef>> read_sync_indexes(Transaction& tr, const DbRef& db);
void write_sync_indexes(Transaction& tr, const DbRef& db, const std::vector<SyncIndexDef>& list);

// A design document edit (`body` the new winner's, nullptr when deleted): registers, re-registers
// or removes its entry.
void sync_design_doc(Transaction& tr, const DbRef& db, SyncIndexes& s, std::string_view id,
                     const std::string* body);

// At the end of a write transaction: every ready index takes s.docs.
storage::Status sync_index_edits(Transaction& tr, const DbRef& db, SyncIndexes& s, js::Engine* js);

// For update_step once it has caught up with the database: marks `sig`'s entry ready.
storage::Status sync_index_caught_up(Transaction& tr, const DbRef& db, const std::string& sig);

}  // namespace chaise::core
