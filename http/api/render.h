// http/api/render.h — the rows a list function reads, from a view (http/api/view.cc) or from
// _all_docs (http/api/cursors.cc), for /{db}/_design/{d}/_list (http/api/render.cc).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "http/api/request.h"

namespace chaise::core {
struct DbRef;
}

namespace chaise::http {

// One query's answer, read page by page, each page in a transaction of its own.
class ListRows {
 public:
  virtual ~ListRows() = default;
  // The list function's `head`: {"total_rows","offset"[,"update_seq"]}, or {} for a reduction.
  virtual const std::string& head() const = 0;
  // Appends the next page's rows (JSON texts, as the query answers them) to `rows`; whether more
  // follow. A storage error throws; a map or reduce failure ends the rows in `failure`.
  virtual bool next_page(std::vector<std::string>& rows,
                         std::optional<core::CouchError>& failure) = 0;
};

// The rows of view `view` of design document `ddoc` for the query in the request's query string
// and `body` (a POST's, or nullptr), with the view's parameters and errors; the index is brought
// up to date first unless the query says otherwise.
boost::asio::awaitable<std::unique_ptr<ListRows>> view_list_rows(const Call& call,
                                                                 const core::DbRef& db,
                                                                 const std::string& ddoc,
                                                                 const std::string& view,
                                                                 const Json* body);
// The rows of _all_docs for the query in the request's query string and `body`.
std::unique_ptr<ListRows> all_docs_list_rows(const Call& call, const core::DbRef& db,
                                             const Json* body);

}  // namespace chaise::http
