// core/docs/json_patch.h — the two patch formats PATCH /{db}/{docid} accepts, applied to a document's
// body (its members without the "_" ones):
// - JSON Merge Patch (RFC 7396): members of the patch replace the document's, null removes one,
//   objects merge recursively.
// - JSON Patch (RFC 6902): add, remove, replace, move, copy and test operations on JSON Pointers
//   (RFC 6901), plus Chaise's "increment" for counters:
//     {"op": "increment", "path": "/visits", "value": 1}
//   adds `value` (a number, default 1) to the number at `path`, or creates it with `value` when the
//   member is missing. Integers stay integers while the sum fits in 64 bits.
// Operations apply in order, all or nothing. Errors: a malformed patch is 400 bad_request; a test
// that fails is 409 conflict; a path that does not exist (or an increment of something that is not
// a number) is 422 unprocessable_entity.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <variant>

#include "core/util/error.h"

namespace chaise::core {

using PatchResult = std::variant<nlohmann::ordered_json, CouchError>;

// RFC 7396. The result must still be an object (a document body): 400 otherwise.
PatchResult merge_patch(nlohmann::ordered_json doc, const nlohmann::ordered_json& patch);

// Checks that `ops` is a JSON Patch document (an array of well-formed operations), before any
// document is read: nullopt if it is.
std::optional<CouchError> check_json_patch(const nlohmann::ordered_json& ops);
// RFC 6902 (+ increment); `ops` passed check_json_patch.
PatchResult json_patch(nlohmann::ordered_json doc, const nlohmann::ordered_json& ops);

}  // namespace chaise::core
