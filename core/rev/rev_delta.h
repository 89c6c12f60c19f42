// core/rev/rev_delta.h — superseded revision bodies stored as deltas, so that
// keeping history does not multiply the bytes written.
//
// When an edit supersedes a leaf, the leaf's body is rewritten as a delta against the new
// revision's body, so that keeping history (CouchDB keeps superseded bodies until compaction)
// costs about what the edit changed instead of a whole copy of the document.
//
// A delta is a JSON object applied to a JSON object (or array):
//   "u": {key: value}   the member is set to value (added when missing);
//   "p": {key: delta}   the member is patched by a nested delta (an object or array);
//   "r": {key: true}    the member is removed;
//   "o": [key...]       (Chaise's addition, objects only) the members' order afterwards, when
//                       it is not the base's order with new members appended.
// Array elements are addressed by their decimal index; an array is only patched in place when its
// length does not change (otherwise its parent replaces it whole with "u"). Members are applied
// in the order r, u, p, o.
//
// make_body_delta() proves each delta: it returns one only when applying it to `base` gives back
// exactly the bytes of `target` (key order and number text included) and it is smaller than half
// of `target`; otherwise the body is kept whole.
//
// Contract: pure functions, thread-safe; bodies are compact JSON objects as stored.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace chaise::core {

// A delta that turns `base` into `target`, or nullopt when none is exact and worth storing.
std::optional<std::string> make_body_delta(std::string_view base, std::string_view target);

// Applies a parsed delta to `doc` in place. False if the delta is malformed or does not fit `doc`
// (a stored delta that fails is corruption: the caller reports it).
bool apply_body_delta(nlohmann::ordered_json& doc, const nlohmann::ordered_json& delta);

}  // namespace chaise::core
