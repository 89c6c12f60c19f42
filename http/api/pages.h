// http/api/pages.h — reading a cursor (core/index/cursors.h, core/index/view_index.h) page by
// page, each page in a short transaction of its own, and joining its rows into a JSON array.
//
// A long answer never holds one snapshot for its whole length (FoundationDB's five seconds), and
// the pages after the first read around the block cache, so a stream of a large database reads
// its blocks once instead of pushing the hot ones out.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/util/error.h"
#include "http/api/request.h"
#include "storage/database.h"

namespace chaise::http {

class Pages {
 public:
  explicit Pages(storage::Database& store) : store_(store) {}

  // The transaction of the next page.
  storage::Transaction next_transaction() {
    storage::Transaction tr = store_.create_transaction();
    if (!first_) tr.disable_read_cache();
    first_ = false;
    return tr;
  }

  // Appends the next page of `cursor` (at most `rows_max` rows) to `rows`, read in `tr`; returns
  // whether more pages follow. A storage error is thrown; so is a CouchError of a view cursor (a
  // map or reduce failure), unless `failure` is given, which then receives it (the answer has
  // begun, and can only be cut off) and false is returned.
  template <typename Cursor>
  static bool read(Cursor& cursor, storage::Transaction& tr, std::size_t rows_max,
                   std::vector<std::string>& rows,
                   std::optional<core::CouchError>* failure = nullptr) {
    auto page = value_or_throw(cursor.next_page(tr, rows_max, rows));
    if constexpr (std::is_same_v<decltype(page), bool>) {
      return page;
    } else {
      if (auto* e = std::get_if<core::CouchError>(&page)) {
        if (failure == nullptr) throw HttpError(*e);
        *failure = *e;
        return false;
      }
      return std::get<bool>(page);
    }
  }

  // read() in next_transaction().
  template <typename Cursor>
  bool read_next(Cursor& cursor, std::size_t rows_max, std::vector<std::string>& rows,
                 std::optional<core::CouchError>* failure = nullptr) {
    storage::Transaction tr = next_transaction();
    return read(cursor, tr, rows_max, rows, failure);
  }

 private:
  storage::Database& store_;
  bool first_ = true;
};

// Point reads of a request's many entries (the documents of _revs_diff, _bulk_get), in snapshot
// transactions of `per_transaction` entries each. Answers go out between reads, to a client that
// may read slowly, so a transaction can outlive FoundationDB's five seconds: a read that finds its
// snapshot too old is made again in a fresh transaction (the entries after it read there too).
class EntryReads {
 public:
  EntryReads(storage::Database& store, std::size_t per_transaction)
      : store_(store), per_transaction_(per_transaction) {}

  // `read(tr)` (a storage::Result) for entry `i`, the entries taken in order.
  template <typename Read>
  auto read(std::size_t i, Read&& read) {
    if (!tr_ || i % per_transaction_ == 0) tr_.emplace(store_.create_transaction());
    auto r = read(*tr_);
    if (!r.ok() && r.error() == storage::Error::transaction_too_old) {
      tr_.emplace(store_.create_transaction());
      r = read(*tr_);
    }
    return r;
  }

 private:
  storage::Database& store_;
  const std::size_t per_transaction_;
  std::optional<storage::Transaction> tr_;
};

// The rows of a JSON array as CouchDB streams them: one per line, separated by ",\r\n".
class RowJoiner {
 public:
  // Appends `rows` to `out` and empties `rows`.
  void append(std::string& out, std::vector<std::string>& rows) {
    for (std::string& row : rows) {
      if (!first_) out += ",\r\n";
      first_ = false;
      out += row;
    }
    rows.clear();
  }

 private:
  bool first_ = true;
};

}  // namespace chaise::http
