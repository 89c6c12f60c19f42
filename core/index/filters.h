// core/index/filters.h — the JavaScript _changes filters: filter=ddoc/name (filters.<name>(doc, req))
// and filter=_view&view=ddoc/name (a change passes when the view's map emits for it), as CouchDB
// 3 runs them (couch_changes:filter, couch_query_servers:filter_docs / filter_view).
#pragma once

#include <memory>
#include <string>

#include "core/index/cursors.h"
#include "core/js/js.h"

namespace chaise::core {

class JsChangesFilter : public ChangesDocFilter {
 public:
  enum class Kind { filter, view };
  // `ddoc` is the design document (its key names the revision); `req` the JSON request object
  // handed to filter functions (unused for views).
  JsChangesFilter(js::Engine& engine, js::DesignDoc ddoc, Kind kind, std::string name,
                  std::string req);

  bool pass(std::string_view doc) override;
  const std::optional<CouchError>& failed() const override { return failure_; }
  // Compiles the function without running it on a document: a compilation error is reported
  // before the feed starts.
  std::optional<CouchError> check();

 private:
  js::Engine& engine_;
  js::DesignDoc ddoc_;
  Kind kind_;
  std::string name_;
  std::string req_;
  std::optional<CouchError> failure_;
};

// A query-server error as the HTTP answer CouchDB gives for it.
CouchError js_error(const js::JsError& e);

}  // namespace chaise::core
