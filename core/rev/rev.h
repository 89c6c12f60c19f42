// core/rev/rev.h — revision ids and the revision-tree logic of one document, as pure functions.
//
// Like Couchbase LiteCore's RevTree this file knows nothing about storage: it computes revision
// hashes, orders leaves by CouchDB's winner rule, merges a replicated path into a document's
// branches and stems branches. The storage format (RFC 003: one KV per edit branch, holding the
// leaf and its ancestors' hashes) is written elsewhere; a `Branch` is its in-memory form.
//
// Contract: every function here is pure and thread-safe (no shared state); none throws except
// std::bad_alloc. Client input (rev strings, `_revisions` objects) is validated and answered
// with nullopt, never asserted. The hash layout of compute_rev_hash() is at the top of rev.cc.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace chaise::core {

// Length of a revision hash produced by compute_rev_hash() (an MD5), in raw bytes.
inline constexpr std::size_t kRevHashBytes = 16;

// Default `_revs_limit` of a database (CouchDB's): revisions kept per branch.
inline constexpr int kRevsLimitDefault = 1000;

// A revision id "N-hash".
//
// `hash` holds raw bytes: the 16 decoded bytes when the text form was 32 hex digits (either
// case), otherwise the text verbatim (opaque hashes arrive through new_edits=false). Like
// CouchDB's revid_to_str, str() prints any 16-byte hash as lowercase hex — so a 16-character
// opaque hash such as "1-abcdefghijklmnop" prints back as 32 hex digits. CouchDB has the same
// quirk; it is kept so that Chaise and CouchDB agree on every rev string.
struct RevId {
  std::int64_t pos = 0;  // >= 1 for documents (0 is only used by _local docs, not here)
  std::string hash;      // raw bytes, see above

  // Parses "N-hash" with CouchDB's parse_rev rules, narrowed: N is decimal digits only (no sign;
  // leading zeros are accepted as CouchDB does), 1 <= N <= INT64_MAX; the hash is everything
  // after the first '-', possibly empty (CouchDB's parse_revid keeps "1-" as an empty hash; PouchDB
  // sends such revs with new_edits=false); a 32-byte hash must be hex (CouchDB rejects a
  // 32-character non-hex hash with "Invalid rev format"). Returns nullopt for anything else.
  static std::optional<RevId> parse(std::string_view text);

  // pos + "-" + hash_str(): CouchDB's rev_to_str.
  std::string str() const;
  void append_str(std::string& out) const;  // out += str()

  // The hash part as text: lowercase hex for a 16-byte hash, else the bytes verbatim.
  std::string hash_str() const;

  auto operator<=>(const RevId&) const = default;
  bool operator==(const RevId&) const = default;
};

// The text form of a raw revision hash (lowercase hex when it is 16 bytes, else verbatim).
std::string rev_hash_to_str(std::string_view hash);

// The raw form of the text of a revision hash (decoded when it is 32 hex digits, else verbatim).
// Returns nullopt for 32 bytes that are not all hex digits (an empty text is an empty hash).
std::optional<std::string> rev_hash_from_str(std::string_view text);

// The 16-byte MD5 hash of a new revision (interactive edits, new_edits=true), over a
// deterministic encoding of the edit, so the same edit yields the same rev id on every node.
// `body_json` is the canonical body (compact JSON without underscore members, see
// core/docs/doc_json.h); `attachment_digests` are opaque byte strings, hashed in the given order (the
// caller supplies them in a deterministic order). Never fails.
std::string compute_rev_hash(bool deleted, const std::optional<RevId>& parent,
                             std::string_view body_json,
                             const std::vector<std::string>& attachment_digests);

// One edit branch as stored (RFC 003: one KV per branch): the leaf and its ancestors' raw hashes,
// nearest first — ancestors[i] is the hash at pos leaf.pos - 1 - i. A stemmed branch simply has a
// shorter list. Invariant: ancestors.size() < leaf.pos.
struct Branch {
  RevId leaf;
  bool deleted = false;  // the leaf is a tombstone
  std::vector<std::string> ancestors;

  // The rev at `i` steps from the leaf (0 = the leaf itself). Precondition: i <= ancestors.size().
  RevId rev_at(std::size_t i) const;
  // Number of revisions on the path (leaf included).
  std::size_t length() const { return ancestors.size() + 1; }

  bool operator==(const Branch&) const = default;
};

// CouchDB's winner order (couch_doc:to_doc_info_path): a live leaf beats a deleted one, then the
// higher pos, then the higher hash bytes (unsigned, lexicographic). True if `a` sorts before `b`,
// i.e. `b` wins over `a`. This is also the order of the revisions KVs (winner last).
bool winner_less(const Branch& a, const Branch& b);

// Index of the winning branch. Precondition: `branches` is non-empty.
std::size_t winner_index(const std::vector<Branch>& branches);

// True if `rev` is the leaf or one of the (remaining, i.e. not stemmed) ancestors of any branch.
bool contains_rev(const std::vector<Branch>& branches, const RevId& rev);

// Outcome of merge_path().
struct MergeResult {
  enum class Kind {
    already_present,  // the incoming leaf is known: nothing to store (CouchDB ignores it too)
    extends_branch,   // `branch` replaces branches[replaced], whose leaf is on the incoming path
    new_branch,       // `branch` is a new leaf (a conflict, or the document's first branch)
  };
  Kind kind = Kind::already_present;
  std::size_t replaced = 0;  // extends_branch only
  Branch branch;             // extends_branch / new_branch: the branch to store, already stemmed
};

// The new_edits=false merge (replication). `incoming` is the full path supplied by the client:
// its leaf, deleted flag and ancestors nearest first (from `_revisions`, or just `_rev`).
// - The incoming leaf is already a leaf or a remaining ancestor of some branch: already_present.
// - Else, if the leaf of some branch equals an entry of the incoming ancestors, the incoming path
//   extends that branch (the nearest one if stored data were inconsistent enough to offer two):
//   the new ancestors are the incoming ones, continued with that branch's older ancestors where
//   the incoming path is shorter (no history is lost), then stemmed to `revs_limit`.
// - Else new_branch: the incoming path stemmed to `revs_limit`.
// `revs_limit` below 1 is treated as 1 (CouchDB: max(1, Val)). Precondition: `incoming` satisfies
// the Branch invariant (as parse_revisions() guarantees).
MergeResult merge_path(const std::vector<Branch>& branches, const Branch& incoming, int revs_limit);

// Keeps at most `revs_limit` revisions on the path: the leaf and revs_limit - 1 ancestors.
// `revs_limit` below 1 is treated as 1.
void stem(Branch& b, int revs_limit);

// The `_revisions` value of a branch: {"start": leaf.pos, "ids": [leaf hash, ancestors...]}, each
// hash as text (hex for 16-byte hashes).
nlohmann::ordered_json revisions_json(const Branch& b);

// Parses a `_revisions` value {"start": N, "ids": [...]} into a path (leaf = N-ids[0], deleted =
// false). Members other than "start" and "ids" are ignored. On failure returns a reason in
// CouchDB's words where CouchDB has one ("_revisions.start isn't an integer.", "_revisions.ids
// isn't a array.", "RevId isn't a string", "RevId isn't a valid hexadecimal"), else Chaise's.
// Rejected: not an object; start not an integer or < 1; ids not an array, empty, or longer than
// start; an id that is not a string, is empty, or is 32 bytes of non-hex.
std::variant<Branch, std::string> parse_revisions_or_reason(
    const nlohmann::ordered_json& revisions);

// parse_revisions_or_reason() without the reason: nullopt if malformed.
std::optional<Branch> parse_revisions(const nlohmann::ordered_json& revisions);

}  // namespace chaise::core
