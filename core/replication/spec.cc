// core/replication/spec.cc — see spec.h. Reference: CouchDB 3.5 couch_replicator_parse.erl,
// couch_replicator_ids.erl, couch_replicator_utils.erl (normalize_basic_auth).
#include "core/replication/spec.h"

#include <algorithm>
#include <charconv>

#include "core/query/selector.h"
#include "core/rev/couch_rev.h"
#include "core/security/replicator_docs.h"
#include "core/util/base64.h"

namespace chaise::core::replication {
namespace {

struct UrlParts {
  std::string scheme;
  std::string user;
  std::string password;
  bool has_credentials = false;
  std::string host;
  std::optional<int> port;
  std::string path;  // from the first '/' (query included), "" when none
  std::string rest;  // the URL without its user:password@
};

UrlParts split_url(const std::string& url) {
  UrlParts p;
  const auto sep = url.find("://");
  if (sep == std::string::npos) {
    p.rest = url;
    return p;
  }
  p.scheme = url.substr(0, sep);
  const std::size_t auth_begin = sep + 3;
  std::size_t auth_end = url.find_first_of("/?#", auth_begin);
  if (auth_end == std::string::npos) auth_end = url.size();
  std::string authority = url.substr(auth_begin, auth_end - auth_begin);
  p.path = url.substr(auth_end);
  if (const auto at = authority.rfind('@'); at != std::string::npos) {
    const std::string userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    const auto colon = userinfo.find(':');
    // Userinfo without ':' names no user (couch_replicator_utils:extract_creds_from_url).
    if (colon != std::string::npos) {
      p.user = userinfo.substr(0, colon);
      p.password = userinfo.substr(colon + 1);
      p.has_credentials = true;
    }
  }
  p.rest = p.scheme + "://" + authority + p.path;
  std::string host = authority;
  std::string port_text;
  if (!host.empty() && host.front() == '[') {
    const auto close = host.find(']');
    if (close != std::string::npos) {
      if (close + 1 < host.size() && host[close + 1] == ':') port_text = host.substr(close + 2);
      host = host.substr(1, close - 1);
    }
  } else if (const auto colon = host.rfind(':'); colon != std::string::npos) {
    port_text = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  p.host = host;
  int port = p.scheme == "https" ? 443 : 80;
  if (!port_text.empty())
    std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  const bool default_port =
      (p.scheme == "https" && port == 443) || (p.scheme == "http" && (port == 80 || port == 5984));
  if (!default_port) p.port = port;
  return p;
}

// maybe_add_trailing_slash/1: a '/' at the end unless the URL has a query.
std::string with_trailing_slash(std::string url) {
  if (url.find('?') == std::string::npos && (url.empty() || url.back() != '/')) url += '/';
  return url;
}

const std::string* url_of(const Json& endpoint) {
  if (endpoint.is_string()) return &endpoint.get_ref<const std::string&>();
  if (endpoint.is_object()) {
    const auto it = endpoint.find("url");
    if (it != endpoint.end() && it->is_string()) return &it->get_ref<const std::string&>();
  }
  return nullptr;
}

// The basic-auth user: "auth": {"basic": {"username", "password"}}, the URL's, then an
// Authorization: Basic header's (normalize_basic_auth's order).
std::optional<std::string> basic_user(const Json& endpoint, const UrlParts& url) {
  if (auto basic = basic_auth(endpoint)) return std::move(basic->first);
  if (url.has_credentials) return url.user;
  if (auto basic = header_basic_auth(endpoint)) return std::move(basic->first);
  return std::nullopt;
}

ReplicationIdEndpoint id_endpoint(const Json& endpoint) {
  ReplicationIdEndpoint e;
  const std::string* url = url_of(endpoint);
  const UrlParts parts = split_url(with_trailing_slash(url ? *url : std::string()));
  e.user = basic_user(endpoint, parts);
  e.host = parts.host;
  e.port = parts.port;
  e.path = parts.path;
  if (endpoint.is_object()) {
    if (const auto h = endpoint.find("headers"); h != endpoint.end() && h->is_object()) {
      for (auto it = h->begin(); it != h->end(); ++it) {
        if (!it->is_string()) continue;
        std::string lower = it.key();
        std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
        if (lower == "authorization") continue;
        if (it.key() == "Accept" && *it == "application/json") continue;
        e.headers.emplace_back(it.key(), it->get<std::string>());
      }
      // lists:ukeysort(1, ...): sorted by name, the first of equal names kept.
      std::stable_sort(e.headers.begin(), e.headers.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      e.headers.erase(std::unique(e.headers.begin(), e.headers.end(),
                                  [](const auto& a, const auto& b) { return a.first == b.first; }),
                      e.headers.end());
    }
  }
  return e;
}

// ejsort: objects with their keys sorted, recursively.
Json sorted(const Json& j) {
  if (j.is_array()) {
    Json out = Json::array();
    for (const Json& v : j) out.push_back(sorted(v));
    return out;
  }
  if (!j.is_object()) return j;
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  Json out = Json::object();
  for (const auto& k : keys) out[k] = sorted(j[k]);
  return out;
}

// re:replace(Code, "^\\s*(.*?)\\s*$", "\\1"): in Erlang's string "\\s" is a space and '.' stops
// at a newline, so only spaces around one-line code go.
std::string trim_spaces(const std::string& s) {
  const std::string_view body =
      std::string_view(s).substr(0, !s.empty() && s.back() == '\n' ? s.size() - 1 : s.size());
  if (body.find('\n') != std::string_view::npos) return s;
  const auto b = body.find_first_not_of(' ');
  if (b == std::string_view::npos) return {};
  const auto e = body.find_last_not_of(' ');
  return std::string(body.substr(b, e - b + 1));
}

std::optional<std::int64_t> integer_option(const Json& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_string()) {
    std::int64_t n = 0;
    const std::string& s = v.get_ref<const std::string&>();
    const char* b = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
    const auto [end, ec] = std::from_chars(b, s.data() + s.size(), n);
    if (ec == std::errc() && end == s.data() + s.size()) return n;
  }
  return std::nullopt;
}

}  // namespace

Outcome<ReplicationSpec> parse_replication(const Json& body, const UserCtx& user,
                                           const ReplicatorDefaults& d) {
  if (!body.is_object()) return err::bad_request("Request body must be a JSON object");
  if (auto reason = replication_doc_error(body)) return err::bad_request(*reason);
  ReplicationSpec s;
  static_cast<ReplicatorDefaults&>(s) = d;
  s.user = user;
  s.source = body.at("source");
  s.target = body.at("target");
  const auto boolean = [&](std::string_view key, bool& out) {
    if (const auto it = body.find(key); it != body.end() && it->is_boolean()) out = it->get<bool>();
  };
  boolean("continuous", s.continuous);
  boolean("create_target", s.create_target);
  boolean("winning_revs_only", s.winning_revs_only);
  boolean("use_checkpoints", s.use_checkpoints);
  boolean("use_bulk_get", s.use_bulk_get);
  if (const auto it = body.find("create_target_params"); it != body.end() && it->is_object())
    s.create_target_params = *it;
  if (const auto it = body.find("filter"); it != body.end() && it->is_string())
    s.filter = it->get<std::string>();
  if (const auto it = body.find("query_params"); it != body.end() && it->is_object())
    s.query_params = *it;
  if (const auto it = body.find("doc_ids"); it != body.end() && it->is_array()) s.doc_ids = *it;
  if (const auto it = body.find("selector"); it != body.end() && it->is_object()) s.selector = *it;
  if (const auto it = body.find("since_seq"); it != body.end()) s.since_seq = *it;
  struct IntOption {
    std::string_view key;
    std::int64_t lo;
    std::int64_t hi;
    std::function<void(std::int64_t)> set;
  };
  const IntOption ints[] = {
      {"worker_processes", 1, 64, [&](std::int64_t v) { s.worker_processes = int(v); }},
      {"worker_batch_size", 1, 100'000, [&](std::int64_t v) { s.worker_batch_size = int(v); }},
      {"http_connections", 1, 1000, [&](std::int64_t v) { s.http_connections = int(v); }},
      {"connection_timeout", 1, 3'600'000, [&](std::int64_t v) { s.connection_timeout_ms = v; }},
      {"retries_per_request", 0, 100, [&](std::int64_t v) { s.retries_per_request = int(v); }},
      {"checkpoint_interval", 1, 86'400'000, [&](std::int64_t v) { s.checkpoint_interval_ms = v; }},
  };
  for (const auto& o : ints) {
    const auto it = body.find(o.key);
    if (it == body.end()) continue;
    const auto v = integer_option(*it);
    if (!v || *v < o.lo || *v > o.hi) {
      return err::bad_request("parameter `" + std::string(o.key) + "` must be an integer from " +
                              std::to_string(o.lo) + " to " + std::to_string(o.hi));
    }
    o.set(*v);
  }
  return s;
}

std::optional<std::pair<std::string, std::string>> basic_auth(const Json& endpoint) {
  if (!endpoint.is_object()) return std::nullopt;
  const auto a = endpoint.find("auth");
  if (a == endpoint.end() || !a->is_object()) return std::nullopt;
  const auto b = a->find("basic");
  if (b == a->end() || !b->is_object()) return std::nullopt;
  const auto u = b->find("username");
  const auto p = b->find("password");
  if (u == b->end() || p == b->end() || !u->is_string() || !p->is_string()) return std::nullopt;
  return std::pair{u->get<std::string>(), p->get<std::string>()};
}

std::optional<std::pair<std::string, std::string>> header_basic_auth(const Json& endpoint) {
  if (!endpoint.is_object()) return std::nullopt;
  const auto h = endpoint.find("headers");
  if (h == endpoint.end() || !h->is_object()) return std::nullopt;
  for (auto it = h->begin(); it != h->end(); ++it) {
    std::string name = it.key();
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    if (name != "authorization" || !it->is_string()) continue;
    const std::string& v = it->get_ref<const std::string&>();
    if (v.size() < 6 || !std::equal(v.begin(), v.begin() + 6, "basic ", [](char a, char b) {
          return ::tolower(static_cast<unsigned char>(a)) == b;
        }))
      continue;
    const auto decoded = base64_decode(std::string_view(v).substr(6));
    if (!decoded) continue;
    const auto colon = decoded->find(':');
    if (colon != std::string::npos)
      return std::pair{decoded->substr(0, colon), decoded->substr(colon + 1)};
  }
  return std::nullopt;
}

ReplicationId replication_id(const ReplicationSpec& spec, std::string_view server_uuid,
                             const std::optional<std::string>& filter_code) {
  std::vector<Json> filter;
  if (spec.filter.starts_with('_')) {
    filter = {Json(spec.filter), spec.query_params};
  } else if (!spec.filter.empty()) {
    filter = {Json(trim_spaces(filter_code.value_or(""))), spec.query_params};
  } else if (spec.doc_ids) {
    // lists:usort: sorted by bytes, without duplicates.
    std::vector<std::string> ids;
    for (const Json& id : *spec.doc_ids)
      if (id.is_string()) ids.push_back(id.get<std::string>());
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    filter = {Json(ids)};
  } else if (spec.selector) {
    // couch_replicator_filters:parse: the selector in Mango's normal form (one that does not
    // parse fails the job when the source reads it; its id hashes it as given).
    auto parsed = Selector::parse(*spec.selector);
    const Selector* s = std::get_if<Selector>(&parsed);
    filter = {sorted(s != nullptr ? s->normal_form() : *spec.selector)};
  }
  ReplicationId id;
  id.base = replication_id_hash(server_uuid, id_endpoint(spec.source), id_endpoint(spec.target),
                                filter, spec.winning_revs_only);
  id.full = id.base;
  if (spec.continuous) id.full += "+continuous";
  if (spec.create_target) id.full += "+create_target";
  return id;
}

std::string endpoint_url(const Json& endpoint) {
  const std::string* url = url_of(endpoint);
  if (url == nullptr) return {};
  return with_trailing_slash(split_url(*url).rest);
}

std::string masked_url(const Json& endpoint) {
  const std::string* url = url_of(endpoint);
  if (url == nullptr) return {};
  const UrlParts p = split_url(*url);
  if (!p.has_credentials) return with_trailing_slash(*url);
  const auto sep = url->find("://");
  std::string out = p.scheme + "://" + p.user + ":*****@" + p.rest.substr(sep + 3);
  return with_trailing_slash(out);
}

}  // namespace chaise::core::replication
