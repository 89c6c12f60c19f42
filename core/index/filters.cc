#include "core/index/filters.h"

namespace chaise::core {

CouchError js_error(const js::JsError& e) {
  // chttpd:error_info's statuses for the errors a function may throw by name.
  static constexpr std::pair<std::string_view, int> kStatus[] = {
      {"bad_request", 400}, {"compilation_error", 400}, {"unauthorized", 401}, {"forbidden", 403},
      {"not_found", 404},   {"not_acceptable", 406},    {"conflict", 409}};
  for (const auto& [name, status] : kStatus)
    if (e.error == name) return CouchError{status, e.error, e.reason};
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
