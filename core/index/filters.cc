#include "core/index/filters.h"

namespace chaise::core {

CouchError js_error(const js::JsError& e) {
  if (e.error == "not_found") return CouchError{404, e.error, e.reason};
  if (e.error == "compilation_error") return CouchError{400, e.error, e.reason};
  return CouchError{500, e.error, e.reason};
}

JsChangesFilter::JsChangesFilter(js::Engine& engine, js::DesignDoc ddoc, Kind kind,
                                 std::string name, std::string req)
    : engine_(engine),
      ddoc_(std::move(ddoc)),
      kind_(kind),
      name_(std::move(name)),
      req_(std::move(req)) {}

bool JsChangesFilter::pass(std::string_view doc) {
  if (failure_) return false;
  std::vector<std::string> docs{std::string(doc)};
  auto r = kind_ == Kind::filter ? engine_.filter(ddoc_, name_, docs, req_)
                                 : engine_.filter_view(ddoc_, name_, docs);
  if (auto* e = std::get_if<js::JsError>(&r)) {
    failure_ = js_error(*e);
    return false;
  }
  const auto& v = std::get<std::vector<bool>>(r);
  return !v.empty() && v[0];
}

std::optional<CouchError> JsChangesFilter::check() {
  auto r = kind_ == Kind::filter ? engine_.filter(ddoc_, name_, {}, req_)
                                 : engine_.filter_view(ddoc_, name_, {});
  if (auto* e = std::get_if<js::JsError>(&r)) return js_error(*e);
  return std::nullopt;
}

}  // namespace chaise::core
