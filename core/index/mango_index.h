// core/index/mango_index.h — Mango "json" indexes: what a language "query" design document's view
// emits for a document, and which index a _find selector can use (CouchDB 3: mango_idx_view,
// mango_native_proc).
//
// A json index over fields [f1, f2, ...] holds one row per document that has every field (and
// matches the index's partial_filter_selector): key [v1, v2, ...], value null. It is stored and
// built like any view (core/index/view_index.h), only its map runs in C++.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/index/view_index.h"
#include "core/query/selector.h"

namespace chaise::core {

struct MangoField {
  std::string name;               // as written: "a.b"
  std::vector<std::string> path;  // ["a", "b"] ("\." keeps a dot inside a name)
  bool descending = false;
};

struct MangoIndex {
  std::string ddoc;  // "_design/..."
  std::string name;
  std::vector<MangoField> fields;
  std::optional<OrderedJson> partial_filter;  // partial_filter_selector
  OrderedJson def;                            // {"fields":[{"f":"asc"}], ...} as GET _index shows
  // Rows kept per partition, for partition queries only (mango_idx:get_idx_partitioned/2: the
  // design document's options.partitioned, else whether the database is partitioned).
  bool partitioned = false;
};

// A design document's options.partitioned when it is a boolean.
std::optional<bool> ddoc_partitioned_option(const OrderedJson& ddoc);

// The selector with CouchDB's normalization of the simple cases (mango_selector:normalize):
// {"a": 1} -> {"a": {"$eq": 1}}, {"a": {"b": 1}} -> {"a.b": {"$eq": 1}}, inside $and/$or/$nor
// too. Used for what is stored (partial_filter_selector), not for matching.
OrderedJson normalize_selector(const OrderedJson& selector);

// Parses a field name into its path; nullopt for an empty segment.
std::optional<std::vector<std::string>> parse_field_path(std::string_view name);
// The value at `path` in `doc`, if there is one.
const OrderedJson* field_value(const OrderedJson& doc, const std::vector<std::string>& path);

// The index fields of a sort or an index definition: ["a", {"b": "desc"}] -> fields. For a
// malformed list, mango_sort:new's 400 (invalid_sort_json, invalid_sort_field; both as CouchDB
// reads an index's fields too) or invalid_field_name.
Outcome<std::vector<MangoField>> parse_mango_fields(const OrderedJson& list);

// The json indexes a design document body defines (language "query"), in view-name order.
std::vector<MangoIndex> mango_indexes(const std::string& ddoc_id, const OrderedJson& ddoc,
                                      bool db_partitioned);

// The key a json index view emits for `doc`, or nullopt when it emits none.
std::optional<OrderedJson> mango_index_key(const OrderedJson& doc, const OrderedJson& map_def);

// Whether `index` can answer `selector` sorted by `sort` (mango_idx_view:is_usable, simplified):
// every indexed field is constrained at the selector's top level by something other than
// {"$exists": false}, and the sort fields (one direction) are a prefix of the index fields.
bool mango_index_usable(const MangoIndex& index, const OrderedJson& selector,
                        const std::vector<MangoField>& sort);

// A key range for the first index field from the selector's top-level conditions on it (rows
// outside it cannot match): start and end keys for an ascending scan (nullopt: open).
struct MangoRange {
  std::optional<OrderedJson> start, end;
};
MangoRange mango_range(const MangoIndex& index, const OrderedJson& selector);

}  // namespace chaise::core
