// core/rev/couch_rev.h — CouchDB 3.x's own revision hash, reproduced byte for byte.
//
// CouchDB (couch_db:new_revid/1) names a new revision
//   md5(term_to_binary([Deleted, OldStart, OldRev, Body, Atts2], [{minor_version, 1}]))
// where Body is the document as jiffy decodes it. couch_rev_hash() rebuilds that Erlang term
// from the JSON text and encodes it in Erlang's external term format, so the same edit made on
// Chaise and on a CouchDB 3.x node yields the same rev id. The byte layout and the jiffy and
// Erlang rules it follows are written at the top of couch_rev.cc.
//
// Contract: pure functions, thread-safe (no shared state), no I/O; nothing throws except
// std::bad_alloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/rev/rev.h"

namespace chaise::core {

// Arrays and objects nested inside a body that couch_rev_hash() reads: it bounds the recursion
// of its JSON reader. CouchDB has no such limit; a deeper body gets no CouchDB hash here.
inline constexpr std::size_t kCouchRevNestingMax = 1000;

// One attachment as it enters CouchDB's hash: {Name, Type, Md5}.
struct CouchAttSig {
  std::string name;          // the attachment name (UTF-8)
  std::string content_type;  // CouchDB's default is "application/octet-stream"
  // The 16 raw bytes of the digest CouchDB stores ("digest": "md5-<base64>"). Note CouchDB's is
  // the MD5 of the bytes it writes to disk: for a compressible content type (text/*,
  // application/json, ... in [attachments] compressible_types) that is the gzip stream, not the
  // data the client sent.
  std::string md5;
};

// CouchDB's revision hash (16 raw MD5 bytes) of an interactive edit.
//   deleted: the new revision is a tombstone (_deleted: true, or a DELETE).
//   parent:  the revision being edited; nullopt for a new document. Its hash enters as raw bytes
//            (RevId keeps a 32-hex-digit hash as 16 decoded bytes, as CouchDB does). When a
//            client re-creates a deleted document (no rev given), CouchDB hashes the edit as a
//            child of the deleted winner (couch_db_updater:merge_rev_tree): pass that leaf.
//   body_json: the body as JSON text, an object, without the special members CouchDB's
//            transfer_fields removes (_id, _rev, _attachments, ...) — e.g. ParsedDoc::body. It is
//            read with jiffy's rules: keys keep their received order; a key repeated in one
//            object keeps only its last value, at the position of its last occurrence (jiffy's
//            dedupe_keys); an integer literal is an exact integer; a literal with '.', 'e' or
//            'E' is a double.
//   atts:    the attachments in document order (CouchDB hashes them in reverse; done here).
// Returns an empty string when there is no such hash:
// - body_json is not a JSON object jiffy accepts, or has a float out of double range (1e400):
//   CouchDB answers 400 bad_request;
// - an integer Erlang rounds to infinity as a double (magnitude 2^1024 - 2^970 or more):
//   CouchDB answers 500 (badarith).
//   Bad numbers in a value that a repeated key drops do no harm, in CouchDB as here;
// - an attachment's md5 is empty: CouchDB then makes a random rev;
// - body_json nests deeper than kCouchRevNestingMax.
// The caller then answers like CouchDB or falls back to compute_rev_hash().
std::string couch_rev_hash(bool deleted, const std::optional<RevId>& parent,
                           std::string_view body_json, const std::vector<CouchAttSig>& atts);

// The body part of couch_rev_hash's input built from parsed values instead of from text, member
// by member, so that a write hashes its body without reading it again (parse_doc builds it next
// to ParsedDoc::body). For a body whose text is the compact JSON of the same members
// (dump_json), couch_rev_hash_of_term(d, p, term, atts) == couch_rev_hash(d, p, text, atts).
class CouchBodyTerm {
 public:
  // Adds `key: value` after the members added before. Keys must be distinct, as in an object
  // (nlohmann's objects are).
  void member(std::string_view key, const nlohmann::ordered_json& value);
  // The term of the object so far; empty when it has none (a number CouchDB fails on, nesting
  // deeper than kCouchRevNestingMax, a binary value that is not number text): the caller then
  // hashes the text, which answers the same for those cases.
  std::string finish() const;

 private:
  std::string members_;  // the members' tuples, without the list header
  std::size_t count_ = 0;
  bool failed_ = false;
};

// couch_rev_hash() with the body given as CouchBodyTerm::finish()'s term. Empty `body_term`:
// no hash (as couch_rev_hash for a body without one).
std::string couch_rev_hash_of_term(bool deleted, const std::optional<RevId>& parent,
                                   std::string_view body_term,
                                   const std::vector<CouchAttSig>& atts);

// The options of POST /{db}/_index that name a Mango index created without a name or ddoc.
struct MangoIndexNaming {
  std::optional<std::string> ddoc;  // as given ("x" or "_design/x"); nullopt: auto_name
  std::optional<std::string> name;  // nullopt: auto_name
  std::optional<bool> partitioned;  // nullopt: db_default
  std::string type = "json";
  std::int64_t w = 2;
  // Chaise's own options (CouchDB refuses them): in the term as {sync_index, true} and
  // {unique, true} when set, so that such an index is named apart from a plain one.
  bool sync_index = false;
  bool unique = false;
};
// CouchDB's generated name of a Mango index (mango_idx:gen_name), so that clients and tools that
// match on it find the same design document on Chaise: the SHA-1, as 40 lowercase hex digits, of
//   term_to_binary({Def, [{ddoc, D}, {def, Def}, {name, N}, {partitioned, P}, {type, T}, {w, W}]},
//                  [{minor_version, 1}])
// where Def is the "index" member of the request body `body_json` as jiffy reads it (keys in
// their order, a repeated key's last value, nothing normalized) and D, N, P, T, W the options
// above (atoms auto_name and db_default for those not given). Empty when the body is not an
// object jiffy reads or has no object "index".
std::string mango_index_gen_name(std::string_view body_json, const MangoIndexNaming& o);

// One endpoint of a replication as CouchDB's replication id (version 4) sees it:
// {remote, User, Host, NonDefaultPort, Path, Headers, undefined}, with User and Host, Path and
// the header names and values Erlang strings.
struct ReplicationIdEndpoint {
  std::optional<std::string> user;  // the basic-auth user; nullopt: undefined
  std::string host;
  std::optional<int> port;                                   // nullopt: default (80, 443, 5984)
  std::string path;                                          // with its trailing '/'
  std::vector<std::pair<std::string, std::string>> headers;  // custom headers, sorted by name
};
// couch_replicator_ids:replication_id(Rep, 4) before its options are appended: the MD5, in 32
// lowercase hex digits, of
//   term_to_binary([UUID, Source, Target | Filter] ++ [<<"winning_revs_only">> if set],
//                  [{minor_version, 1}])
// where UUID is `server_uuid` as a binary and `filter` the JSON values of the filter part
// (strings as binaries, objects as jiffy's {[{K, V}]}). Empty if a filter value has no term.
std::string replication_id_hash(std::string_view server_uuid, const ReplicationIdEndpoint& source,
                                const ReplicationIdEndpoint& target,
                                const std::vector<nlohmann::ordered_json>& filter,
                                bool winning_revs_only);

}  // namespace chaise::core
