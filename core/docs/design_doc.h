// core/docs/design_doc.h — the checks CouchDB makes on a design document when it is written.
//
// CouchDB 3.5 runs them for every write of a "_design/..." document, deleted ones and
// new_edits=false ones included (couch_db:validate_doc_update -> couch_index_server:validate ->
// couch_mrview:validate, whose field checks are couch_mrview:validate_ddoc_fields). A failure is
// a 400 with error "invalid_design_doc".
//
// Contract: a pure function, thread-safe, no I/O, nothing thrown except std::bad_alloc.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "core/util/error.h"

namespace chaise::core {

// Whether the database the document goes to is partitioned (`PUT /{db}?partitioned=true`).
enum class Partitioned : bool { no = false, yes = true };

// Returns nullopt if `id` does not start with "_design/" or `doc` (the document body as the client
// sent it, "_" members included) passes; otherwise {400, "invalid_design_doc", reason}. The checks
// and their reasons, in CouchDB's order (the first failure wins; a member that is absent passes):
//   filters, lists, shows, updates: an object whose members are strings or objects
//       "`filters` field must have object type",
//       "`filters.f` field must have string or object type"
//   language: a string                        "`language` field must have string type"
//   options: an object; its include_design, local_seq and partitioned members booleans
//       "`options.local_seq` field must have boolean type"
//   rewrites: a string or an array            "`rewrites` field must have array or string type"
//   validate_doc_update: a string
//   views: an object; views.lib an object; every other member an object whose map is a string
//       (an object when language is "query") and whose reduce is a string
//       "`views.v` field must have object type", "`views.v.map` field must have string type"
//   every view but lib has a map              "View `v` must contain map function"
//   a view's options is an object             "`views.v.options` field must have object type"
//       (CouchDB answers 500 function_clause there; Chaise gives this clean 400)
//   options.partitioned is not true unless the database is partitioned
//       "partitioned option cannot be true in a non-partitioned database."
//   when the language has a query server in CouchDB (javascript, the default, or query; any case)
//   and some view has a map: a reduce starting with "_" is one of CouchDB's built-ins (_sum*,
//   _count*, _stats*, _approx_count_distinct*, _first*, _last*, _top_N, _bottom_N with N in 1..100)
//       "`_foo` is not a supported reduce function.", "rank value must be between 1 and 100",
//       "invalid rank reducer"
// Not checked here: that JavaScript functions compile (CouchDB: 400 compilation_error on write);
// a function that does not compile fails when it is used (core/js/js.h).
std::optional<CouchError> validate_design_doc(std::string_view id,
                                              const nlohmann::ordered_json& doc,
                                              Partitioned db_partitioned);

}  // namespace chaise::core
