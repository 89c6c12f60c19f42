#include "http/auth/cors.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "config/settings.h"
#include "core/util/ascii.h"

namespace chaise::http {

namespace {

constexpr std::array<std::string_view, 19> kSupportedHeaders = {"accept",
                                                                "accept-language",
                                                                "authorization",
                                                                "content-length",
                                                                "content-range",
                                                                "content-type",
                                                                "destination",
                                                                "expires",
                                                                "if-match",
                                                                "last-modified",
                                                                "origin",
                                                                "pragma",
                                                                "x-couch-full-commit",
                                                                "x-couch-id",
                                                                "x-couch-persist",
                                                                "x-couchdb-www-authenticate",
                                                                "x-http-method-override",
                                                                "x-requested-with",
                                                                "x-couchdb-vhost-path"};
constexpr std::array<std::string_view, 9> kSupportedMethods = {
    "CONNECT", "COPY", "DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT", "TRACE"};
constexpr std::array<std::string_view, 6> kSimpleHeaders = {
    "cache-control", "content-language", "content-type", "expires", "last-modified", "pragma"};
constexpr std::array<std::string_view, 6> kCouchHeaders = {
    "accept-ranges",      "etag", "server", "x-couch-request-id", "x-couch-update-newrev",
    "x-couchdb-body-time"};

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

// chttpd_cors:split_list: comma-separated, blanks around commas dropped, trailing empties trimmed.
std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  while (true) {
    const auto comma = text.find(',');
    out.push_back(trim(text.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  while (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

template <typename List>
bool contains(const List& list, std::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

bool origin_accepted(const CorsSettings& s, std::string_view origin) {
  return contains(s.origins, "*") || contains(s.origins, origin);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out.append(", ");
    out.append(item);
  }
  return out;
}

}  // namespace

namespace {

// One host's settings: `section`'s keys, else [cors]'s.
CorsSettings cors_settings(const config::Sections& values, const std::string& section) {
  auto get = [&](std::string_view key, std::string fallback = {}) {
    if (const auto sec = values.find(section); sec != values.end()) {
      if (const auto it = sec->second.find(std::string(key)); it != sec->second.end())
        return it->second;
    }
    return config::get_string(values, "cors", key, std::move(fallback));
  };
  CorsSettings s;
  s.enabled = true;
  s.credentials = get("credentials", "false") == "true";
  s.origins = split_list(get("origins"));
  const std::string methods = get("methods");
  if (methods.empty()) {
    for (auto m : kSupportedMethods) s.methods.emplace_back(m);
  } else {
    s.methods = split_list(methods);
  }
  const std::string headers = get("headers");
  if (headers.empty()) {
    for (auto h : kSupportedHeaders) s.headers.emplace_back(h);
  } else {
    for (const auto& h : split_list(headers)) s.headers.push_back(core::ascii_lower(h));
  }
  const std::string exposed = get("exposed_headers");
  if (exposed.empty()) {
    for (auto h : kCouchHeaders) s.exposed.emplace_back(h);
  } else {
    for (const auto& h : split_list(exposed)) s.exposed.push_back(core::ascii_lower(h));
  }
  s.max_age = get("max_age", "600");
  return s;
}

}  // namespace

CorsConfig cors_config(const config::Sections& values) {
  CorsConfig c;
  if (!config::get_bool(values, "chttpd", "enable_cors", false)) return c;
  c.any_host = cors_settings(values, "cors");
  for (const auto& [section, keys] : values) {
    if (section.starts_with("cors:") && section.size() > 5)
      c.hosts.emplace(section.substr(5), cors_settings(values, section));
  }
  return c;
}

const CorsSettings& CorsConfig::for_request(const Request& req) const {
  if (hosts.empty()) return any_host;
  std::string_view host = req["X-Forwarded-Host"];
  if (host.empty()) host = req[beast_http::field::host];
  if (const auto scheme = host.find("://"); scheme != std::string_view::npos)
    host.remove_prefix(scheme + 3);
  host = host.substr(0, host.find(':'));
  const auto it = hosts.find(host);
  return it == hosts.end() ? any_host : it->second;
}

std::optional<Response> cors_preflight(const Request& req, const CorsSettings& s) {
  if (!s.enabled || req.method() != beast_http::verb::options) return std::nullopt;
  const auto origin_field = req.find(beast_http::field::origin);
  if (origin_field == req.end()) return std::nullopt;
  const std::string origin(origin_field->value());
  if (!origin_accepted(s, origin)) return std::nullopt;
  const auto method = req.find(beast_http::field::access_control_request_method);
  if (method == req.end()) return std::nullopt;
  if (!contains(s.methods, method->value())) return std::nullopt;
  std::string requested;
  if (const auto h = req.find(beast_http::field::access_control_request_headers); h != req.end()) {
    requested = std::string(h->value());
    // chttpd_cors:split_headers: ",\s*"; every one must be allowed.
    for (const auto& name : split_list(requested)) {
      if (!name.empty() && !contains(s.headers, core::ascii_lower(name))) return std::nullopt;
    }
  }
  Response r{beast_http::status::no_content, req.version()};
  r.set(beast_http::field::server, kServerHeader);
  r.set(beast_http::field::date, http_date_now());
  r.set(beast_http::field::access_control_allow_origin, origin);
  r.set(beast_http::field::access_control_max_age, s.max_age);
  r.set(beast_http::field::access_control_allow_methods, join(s.methods));
  if (s.credentials && origin != "*")
    r.set(beast_http::field::access_control_allow_credentials, "true");
  r.set(beast_http::field::access_control_allow_headers, requested);
  r.keep_alive(req.keep_alive());
  r.prepare_payload();
  return r;
}

void add_cors_headers(const Request& req, const CorsSettings& s, Response& response) {
  if (!s.enabled) return;
  const auto origin_field = req.find(beast_http::field::origin);
  if (origin_field == req.end()) return;
  // Matched as sent, case-sensitively (chttpd_cors:headers/2 gets the Origin as a binary, so its
  // lowercasing clause for lists never runs).
  const std::string origin(origin_field->value());
  if (s.origins.empty() || !origin_accepted(s, origin)) return;
  response.set(beast_http::field::access_control_allow_origin, origin);
  if (s.credentials && origin != "*") {
    response.set(beast_http::field::access_control_allow_credentials, "true");
  }
  std::vector<std::string> exposed;
  for (const auto& field : response) {
    const std::string name = core::ascii_lower(field.name_string());
    if (contains(kSimpleHeaders, name) && !contains(exposed, name)) exposed.push_back(name);
  }
  // chttpd_cors:maybe_apply_headers puts content-type first whatever the response's type.
  std::erase(exposed, std::string("content-type"));
  exposed.insert(exposed.begin(), "content-type");
  exposed.insert(exposed.end(), s.exposed.begin(), s.exposed.end());
  response.set(beast_http::field::access_control_expose_headers, join(exposed));
}

}  // namespace chaise::http
