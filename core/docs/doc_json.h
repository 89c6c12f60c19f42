// core/docs/doc_json.h — a CouchDB document's JSON: parsing and validating a document body on write,
// and splicing the stored body into a response on read.
//
// Contract: pure functions, thread-safe, no I/O. Client input is answered with a CouchError (a
// CouchDB status/error/reason triple, COUCHDB-API.md section 0), never asserted; nothing throws
// except std::bad_alloc.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/docs/design_doc.h"  // design documents are also checked on write (validate_design_doc)
#include "core/rev/rev.h"
#include "core/util/error.h"

namespace chaise::core {

// A document body taken apart (CouchDB couch_doc:transfer_fields).
struct ParsedDoc {
  std::optional<std::string> id;  // _id if present (a valid doc id, see validate_docid)
  // The revision the document claims to be: the leaf of _revisions when _revisions is present
  // (CouchDB then ignores _rev), else _rev if present.
  std::optional<RevId> rev;
  bool deleted = false;                               // _deleted
  std::optional<Branch> revisions;                    // _revisions (leaf.deleted = `deleted`)
  std::optional<nlohmann::ordered_json> attachments;  // _attachments (an object), unvalidated
  // Compact JSON of the object without its extracted/dropped "_" members, keys in received order
  // ("{}" if empty). _access and CouchDB's five _replication_* members stay in it. This is the
  // canonical body that is stored and hashed (compute_rev_hash).
  std::string body;
  // `body` as couch_rev_hash reads it (CouchBodyTerm), built from the parsed values when
  // parse_doc is asked to; empty when not asked or the body has no such term. Lets an
  // interactive edit hash its new revision without parsing `body` again.
  std::string body_term;
};

// Parses a JSON value that is a document. Members are handled in received order and the first
// error wins, as in CouchDB:
// - _id: must be a string ({400, illegal_docid, "Document id must be a string"}) that passes
//   validate_docid().
// - _rev: must be a string RevId::parse() accepts, else {400, bad_request, "Invalid rev format"};
//   not even looked at when _revisions came before it (CouchDB).
// - _revisions: an object, parsed by parse_revisions_or_reason(); a malformed one gives
//   {400, doc_validation, <reason>}.
// - _deleted: a boolean; _attachments: an object. Any other type is treated as an unknown member.
// - _revs_info, _conflicts, _deleted_conflicts, _local_seq: dropped silently.
// - _access, _replication_state, _replication_state_time, _replication_state_reason,
//   _replication_id, _replication_stats: kept in the body.
// - any other top-level "_x": {400, doc_validation, "Bad special document member: _x"}.
// Nested "_x" keys inside member values are ordinary data. A non-object gives
// {400, bad_request, "Document must be a JSON object"}; a string that is not valid UTF-8 (only
// possible for a value built in code, the JSON parser rejects it) {400, bad_request,
// "invalid UTF-8 JSON"}.
// `with_body_term`: also build ParsedDoc::body_term (for an interactive edit, which hashes it;
// replicated revisions and _local documents have no use for it).
std::variant<ParsedDoc, CouchError> parse_doc(const nlohmann::ordered_json& doc,
                                              bool with_body_term = false);

// Doc id validation (CouchDB couch_doc:validate_docid), in CouchDB's order; nullopt if valid:
// ""                         -> {400, illegal_docid, "Document id must not be empty"}
// "_design/" exactly         -> {400, illegal_docid, "Illegal document id `_design/`"}
// "_local/" exactly          -> {400, illegal_docid, "Illegal document id `_local/`"}
// not valid UTF-8            -> {400, illegal_docid, "Document id must be valid UTF-8"}
// "_..." other than "_design/<x>" and "_local/<x>"
//                            -> {400, illegal_docid, "Only reserved document ids may start with
//                                underscore."}
// UTF-8 is checked strictly (no overlong forms, surrogates or code points above U+10FFFF), which
// is stricter than CouchDB's byte-pattern check.
std::optional<CouchError> validate_docid(std::string_view id);

// True if `s` is well-formed UTF-8 (RFC 3629).
bool is_valid_utf8(std::string_view s);

// Splices stored body bytes into a response document without re-parsing the body. Returns
// {"_id":<id>,"_rev":<rev>, extra members..., body members...} where `extra_members` are already
// serialized "\"key\":value" pairs (emitted in order) and id and rev are escaped by json_string().
//   splice_doc("{\"a\":1}", "x", "1-abc", {"\"_deleted\":true"})
//     == "{\"_id\":\"x\",\"_rev\":\"1-abc\",\"_deleted\":true,\"a\":1}"
//   splice_doc("{}", "x", "1-abc", {}) == "{\"_id\":\"x\",\"_rev\":\"1-abc\"}"
// Precondition: `body` is a serialized JSON object (as ParsedDoc::body); asserted on its braces.
std::string splice_doc(std::string_view body, std::string_view id, std::string_view rev,
                       const std::vector<std::string>& extra_members);

// A JSON string literal for `s`, quotes included, escaped exactly as nlohmann's dump() does
// (\" \\ \b \f \n \r \t, other control characters as \u00xx, everything else as UTF-8). Bytes
// that are not valid UTF-8 are replaced by U+FFFD instead of throwing.
std::string json_string(std::string_view s);
// out += json_string(s), without a string of its own.
void append_json_string(std::string& out, std::string_view s);
// out += json_string(rev.str()).
void append_json_rev(std::string& out, const RevId& rev);

}  // namespace chaise::core
