// core/security/replicator_docs.cc — see replicator_docs.h. Reference: CouchDB 3.5
// src/couch_replicator/src/couch_replicator_docs.erl and couch_replicator_parse.erl,
// couch_replicator_filters.erl (parse/1, view_type/2).
#include "core/security/replicator_docs.h"

#include <algorithm>
#include <array>
#include <variant>

#include "core/query/selector.h"
#include "core/util/json_text.h"

namespace chaise::core {
namespace {

using OJson = nlohmann::ordered_json;

constexpr std::string_view kOwner = "owner";

// How CouchDB prints the exceptions parse_rep_doc_without_id/1 catches with Tag:Err
// (couch_util:to_binary of {throw, {bad_request, Msg}}): Msg a binary or a string.
std::string thrown_bad_request_binary(std::string_view msg) {
  return "{throw,{bad_request,<<\"" + std::string(msg) + "\">>}}";
}
std::string thrown_bad_request_list(std::string_view msg) {
  return "{throw,{bad_request,\"" + std::string(msg) + "\"}}";
}

bool has(const OJson& doc, std::string_view key) { return doc.contains(key); }

// An http(s) URL that ibrowse_lib:parse_url reads: scheme, "://", a host (with an optional
// user:password@ and :port), then anything without spaces or control characters.
bool valid_url(const std::string& url, std::initializer_list<std::string_view> schemes) {
  const std::size_t sep = url.find("://");
  if (sep == std::string::npos) return false;
  const std::string_view scheme(url.data(), sep);
  if (std::find(schemes.begin(), schemes.end(), scheme) == schemes.end()) return false;
  for (unsigned char c : url)
    if (c <= 0x20 || c == 0x7F) return false;
  std::string_view authority(url);
  authority.remove_prefix(sep + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    authority.remove_prefix(at + 1);
  }
  std::string_view host = authority;
  if (const std::size_t colon = authority.rfind(':');
      colon != std::string_view::npos && authority.find(']') == std::string_view::npos) {
    host = authority.substr(0, colon);
    const std::string_view port = authority.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
  }
  return !host.empty();
}

// parse_rep_db/3 for `source` or `target` (and the proxy it goes through).
std::optional<std::string> endpoint_error(const OJson& doc, std::string_view key,
                                          const OJson* proxy) {
  const auto it = doc.find(key);
  if (it == doc.end()) return std::string("Missing replicator database");
  const std::string invalid = "endpoint has an invalid url";
  if (it->is_string()) {
    const std::string& url = it->get_ref<const std::string&>();
    if (!url.starts_with("http://") && !url.starts_with("https://")) {
      return std::string("local_endpoints_not_supported");
    }
    if (!valid_url(url, {"http", "https"})) return invalid;
  } else if (it->is_object()) {
    const auto url = it->find("url");
    if (url == it->end() || !url->is_string() ||
        !valid_url(url->get_ref<const std::string&>(), {"http", "https"})) {
      return invalid;
    }
    if (const auto h = it->find("headers"); h != it->end()) {
      if (!h->is_object() ||
          !std::all_of(h->begin(), h->end(), [](const OJson& v) { return v.is_string(); })) {
        return "endpoint `headers` must be an object of strings";
      }
    }
    if (const auto a = it->find("auth"); a != it->end() && !a->is_object()) {
      return "endpoint `auth` must be an object";
    }
  } else {
    return invalid;
  }
  if (proxy != nullptr && !(proxy->is_string() && proxy->get_ref<const std::string&>().empty())) {
    if (!proxy->is_string()) return std::string("Invalid proxy url");
    if (!valid_url(proxy->get_ref<const std::string&>(), {"http", "https", "socks5"})) {
      return std::string("proxy has an invalid url");
    }
  }
  return std::nullopt;
}

// couch_util:to_integer/1 as the integer options go through it.
std::optional<std::string> integer_option_error(const OJson& v) {
  if (v.is_number_integer()) return std::nullopt;
  if (!v.is_string()) return std::string("{error,function_clause}");
  const std::string& s = v.get_ref<const std::string&>();
  std::size_t k = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (k == s.size()) return std::string("{error,badarg}");
  for (; k < s.size(); ++k)
    if (s[k] < '0' || s[k] > '9') return std::string("{error,badarg}");
  return std::nullopt;
}

// convert_options/1: the members it checks, in the document's order; the first bad one wins.
std::optional<std::string> options_error(const OJson& doc) {
  static constexpr std::array<std::string_view, 4> kBooleans = {"cancel", "create_target",
                                                                "winning_revs_only", "continuous"};
  static constexpr std::array<std::string_view, 6> kIntegers = {
      "worker_processes",   "worker_batch_size",   "http_connections",
      "connection_timeout", "retries_per_request", "checkpoint_interval"};
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& k = it.key();
    const OJson& v = it.value();
    if (std::find(kBooleans.begin(), kBooleans.end(), k) != kBooleans.end() ||
        k == "use_bulk_get") {
      if (!v.is_boolean())
        return thrown_bad_request_binary("parameter `" + k + "` must be a boolean");
    } else if (k == "create_target_params") {
      if (!v.is_object()) {
        return thrown_bad_request_binary("parameter `create_target_params` must be a JSON object");
      }
    } else if (k == "query_params") {
      if (!v.is_object())
        return thrown_bad_request_binary("parameter `query_params` must be an object");
    } else if (k == "doc_ids") {
      if (v.is_null()) continue;
      if (!v.is_array()) return thrown_bad_request_binary("parameter `doc_ids` must be an array");
      if (!std::all_of(v.begin(), v.end(), [](const OJson& id) { return id.is_string(); })) {
        return "parameter `doc_ids` must be an array of strings";
      }
    } else if (k == "selector") {
      if (!v.is_object())
        return thrown_bad_request_binary("parameter `selector` must be a JSON object");
    } else if (std::find(kIntegers.begin(), kIntegers.end(), k) != kIntegers.end()) {
      if (auto e = integer_option_error(v)) return e;
    }
  }
  // check_options/1
  const bool doc_ids = has(doc, "doc_ids") && !doc["doc_ids"].is_null();
  const int given = int{doc_ids} + int{has(doc, "filter")} + int{has(doc, "selector")};
  if (given > 1)
    return thrown_bad_request_list("`doc_ids`,`filter`,`selector` are mutually exclusive");
  return std::nullopt;
}

// couch_replicator_filters:view_type/2 and parse/1.
std::optional<std::string> filter_error(const OJson& doc) {
  if (const auto f = doc.find("filter"); f != doc.end()) {
    if (!f->is_string()) return std::string("{error,badarg}");
    const std::string& filter = f->get_ref<const std::string&>();
    if (filter == "_view") {
      const OJson* view = nullptr;
      if (const auto q = doc.find("query_params"); q != doc.end() && q->contains("view")) {
        view = &(*q)["view"];
      }
      if (view == nullptr || !view->is_string()) return std::string("{error,badarg}");
      const std::string& v = view->get_ref<const std::string&>();
      if (std::count(v.begin(), v.end(), '/') != 1) {
        return thrown_bad_request_binary("Invalid `view` parameter.");
      }
    } else if (!filter.starts_with('_') && filter.find('/') == std::string::npos) {
      return std::string("Invalid filter. Must match `ddocname/filtername`.");
    }
  }
  if (const auto s = doc.find("selector"); s != doc.end()) {
    auto parsed = Selector::parse(*s);
    if (auto* e = std::get_if<CouchError>(&parsed)) return e->reason;
  }
  return std::nullopt;
}

OJson strip_endpoint(const OJson& endpoint) {
  if (endpoint.is_string()) return strip_url_credentials(endpoint.get_ref<const std::string&>());
  if (!endpoint.is_object()) return endpoint;
  OJson out = endpoint;
  out.erase("headers");
  out.erase("auth");
  return out;
}

}  // namespace

std::string strip_url_credentials(const std::string& url) {
  // re:replace(Url, "http(s)?://(?:[^:]+):[^@]+@(.*)$", "http\\1://\\2"): at the first place
  // where it matches, "http" or "https", "://", a user up to the first ":", a password up to the
  // first "@", then a rest without a newline (but a final one).
  for (std::size_t start = url.find("http"); start != std::string::npos;
       start = url.find("http", start + 1)) {
    std::size_t k = start + 4;
    const bool s = k < url.size() && url[k] == 's';
    if (s) ++k;
    if (url.compare(k, 3, "://") != 0) continue;
    const std::size_t user = k + 3;
    const std::size_t colon = url.find(':', user);
    if (colon == std::string::npos || colon == user) continue;
    const std::size_t at = url.find('@', colon + 1);
    if (at == std::string::npos || at == colon + 1) continue;
    const std::size_t newline = url.find('\n', at + 1);
    if (newline != std::string::npos && newline + 1 != url.size()) continue;
    return url.substr(0, start) + (s ? "https://" : "http://") + url.substr(at + 1);
  }
  return url;
}

std::optional<std::string> replication_doc_error(const OJson& doc) {
  // parse_proxy_settings/1
  auto nonempty = [&](std::string_view key) {
    const auto it = doc.find(key);
    return it != doc.end() && !(it->is_string() && it->get_ref<const std::string&>().empty());
  };
  if (nonempty("proxy")) {
    if (nonempty("source_proxy")) {
      return thrown_bad_request_list("`proxy` is mutually exclusive with `source_proxy`");
    }
    if (nonempty("target_proxy")) {
      return thrown_bad_request_list("`proxy` is mutually exclusive with `target_proxy`");
    }
  }
  if (auto e = options_error(doc)) return e;
  const auto id = [&](std::string_view key) { return has(doc, key); };
  if (doc.value("cancel", false) == true && (id("_local_id") || id("replication_id") || id("id"))) {
    return std::nullopt;
  }
  auto proxy_of = [&](std::string_view side) -> const OJson* {
    if (nonempty("proxy")) return &doc["proxy"];
    const auto it = doc.find(side);
    return it == doc.end() ? nullptr : &*it;
  };
  if (auto e = endpoint_error(doc, "source", proxy_of("source_proxy"))) return e;
  if (auto e = endpoint_error(doc, "target", proxy_of("target_proxy"))) return e;
  return filter_error(doc);
}

std::optional<CouchError> prepare_replicator_doc(OJson& doc, const UserCtx& writer,
                                                 bool writer_is_admin) {
  const bool replicator = writer.has_role(kReplicatorRole);
  const OJson name = writer.name ? OJson(*writer.name) : OJson(nullptr);
  if (!replicator) {
    const auto owner = doc.find(kOwner);
    if (owner == doc.end()) {
      doc[std::string(kOwner)] = name;
    } else if (*owner != name) {
      if (!writer_is_admin) {
        return err::forbidden("Can't update replication documents from other users.");
      }
      if (owner->is_null()) *owner = name;
    }
  }
  const bool deleted = doc.value("_deleted", false) == true;
  const auto state = doc.find("_replication_state");
  const bool failed = state != doc.end() && *state == "failed";
  if (replicator || deleted || failed) return std::nullopt;
  if (auto reason = replication_doc_error(doc)) return err::forbidden(*reason);
  return std::nullopt;
}

std::optional<std::string> masked_replicator_body(std::string_view body_json,
                                                  const std::optional<std::string>& reader) {
  auto parsed = parse_json_text(body_json, JsonNumbers::exact);
  auto* body = std::get_if<OJson>(&parsed);
  if (body == nullptr || !body->is_object()) return std::nullopt;
  const auto owner = body->find(kOwner);
  const OJson name = reader ? OJson(*reader) : OJson(nullptr);
  if (owner != body->end() && *owner == name) return std::nullopt;
  for (std::string_view side : {"source", "target"}) {
    if (const auto it = body->find(side); it != body->end()) *it = strip_endpoint(*it);
  }
  return dump_json(*body, false);
}

}  // namespace chaise::core
