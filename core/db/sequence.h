// core/db/sequence.h — update sequences (RFC 000): Incarnation + Versionstamp.
//
// Text form (what clients see in update_seq, seq, last_seq and send back in since):
//   "N-" + 2 lowercase hex digits of the Incarnation (0..255) + 24 lowercase hex digits of the
//   12-byte versionstamp (8-byte commit version, 2-byte batch order, 2-byte order within the
//   transaction). "0" is the sequence before every change.
// N counts the database's document changes up to this one, as CouchDB's sequences start with
// the sum of their shards' update counts ("3-g1AAAA..."). Clients read it: PouchDB's tests and
// tools that show replication progress parse the number before the dash. It is display only:
// order and identity are the versionstamp's, and `since` ignores N. Writers take N from a
// snapshot read of a counter (no conflicts), so concurrent transactions may store the same N, or
// Ns out of their versionstamps' order; a changes feed shows each change with at least the N
// before it (ChangesCursor), so N never goes back along a feed.
// Changes stored without N (count 0) print as the bare 26 hex digits.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "storage/tuple.h"

namespace chaise::core {

struct Sequence {
  std::int64_t incarnation = 0;
  storage::Versionstamp versionstamp;  // all zero = before everything
  std::int64_t count = 0;              // N of the text form; not part of identity or order

  bool is_zero() const;
  std::string str() const;                  // "0" for zero
  void append_str(std::string& out) const;  // out += str()
  // Accepts "0", the 26-hex form (either case) with or without an "N-" prefix; nullopt
  // otherwise. ("now" is the caller's business.)
  static std::optional<Sequence> parse(std::string_view text);
  // The tuple (Incarnation, Versionstamp), as stored in keys and values.
  storage::Tuple tuple() const;
  // Reads (Incarnation, Versionstamp[, Count]) starting at `index`.
  static std::optional<Sequence> from_tuple(const storage::Tuple& t, std::size_t index = 0);
  // The same, read from where `r` stands: (Incarnation, Versionstamp), then a Count if an integer
  // follows.
  static std::optional<Sequence> read(storage::TupleReader& r);
  auto operator<=>(const Sequence& o) const {
    if (auto c = incarnation <=> o.incarnation; c != 0) return c;
    // The order of to_bytes(): the transaction version, then the user version.
    if (auto c = versionstamp.tr_version <=> o.versionstamp.tr_version; c != 0) return c;
    return versionstamp.user_version <=> o.versionstamp.user_version;
  }
  bool operator==(const Sequence& o) const { return (*this <=> o) == 0; }
};

}  // namespace chaise::core
