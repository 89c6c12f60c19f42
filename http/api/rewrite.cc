// /{db}/_design/{ddoc}/_rewrite[/...]: a design document's "rewrites" turn the request into
// another one inside the database, which the router then answers as if the client had sent it
// (chttpd_rewrite, deprecated in CouchDB 3 and still served by it).
//
// "rewrites" is either an array of rules ({"from", "to", "method", "query", "formats"}: the
// first rule whose method and "from" pattern match the path after _rewrite wins; ":name" and "*"
// bind path segments, which "to" and the rule's "query" then use) or the source of a JavaScript
// function of the request that answers the new path (a string) or an object {"path", "method",
// "query", "headers", "body"}, or {"code", "headers", "body"} to answer at once.
//
// A rule's "to" climbs at most two levels (to the database) while [chttpd] secure_rewrites holds,
// as in CouchDB; the rewritten request is authenticated and authorized like any other.
#include <boost/beast/http/verb.hpp>

#include "config/config.h"
#include "core/index/filters.h"
#include "http/api/js_request.h"
#include "http/api/request.h"
#include "http/api/router.h"

namespace chaise::http {

namespace {

// What a pattern segment is: a literal, a ":name" binding, or "*" (the rest of the path).
struct Segment {
  enum class Kind { literal, bind, rest } kind = Kind::literal;
  std::string text;  // the literal, or the binding's name
};

// chttpd_rewrite:parse_path: a rule's "from" or "to" as segments ("" segments dropped).
// More than two ".." segments are refused while [chttpd] secure_rewrites is true (the default).
std::vector<Segment> parse_pattern(std::string_view path, bool secure) {
  std::vector<Segment> out;
  int dot_dots = 0;
  while (!path.empty() || out.empty()) {
    const std::size_t slash = path.find('/');
    const std::string_view part = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view{} : path.substr(slash + 1);
    if (part == "*") {
      out.push_back({Segment::Kind::rest, "*"});
    } else if (part == "..") {
      if (++dot_dots > 2 && secure)
        throw HttpError(core::CouchError{500, "insecure_rewrite_rule", "too many ../.. segments"});
      out.push_back({Segment::Kind::literal, ".."});
    } else if (part.starts_with(':')) {
      out.push_back({Segment::Kind::bind, std::string(part.substr(1))});
    } else if (!part.empty()) {
      out.push_back({Segment::Kind::literal, std::string(part)});
    }
    if (path.empty()) break;
  }
  return out;
}

// Named values: path bindings first, then the query string's, the first of a name wins.
using Bindings = std::vector<std::pair<std::string, Json>>;

const Json* find(const Bindings& b, std::string_view name) {
  for (const auto& [k, v] : b)
    if (k == name) return &v;
  return nullptr;
}

// Query parameters whose values are JSON (chttpd_rewrite's decode_query_value and maybe_json).
bool json_param(std::string_view key) {
  return key == "key" || key == "startkey" || key == "start_key" || key == "endkey" ||
         key == "end_key" || key == "keys";
}

// chttpd_rewrite:bind_path: whether `pattern` matches `parts`; fills `bound` and `remaining`.
bool bind_path(const std::vector<Segment>& pattern, const std::vector<std::string>& parts,
               Bindings& bound, std::vector<std::string>& remaining) {
  std::size_t i = 0;
  for (; i < pattern.size(); ++i) {
    const Segment& s = pattern[i];
    if (s.kind == Segment::Kind::rest && i + 1 == pattern.size()) {
      remaining.assign(parts.begin() + static_cast<std::ptrdiff_t>(std::min(i, parts.size())),
                       parts.end());
      return i <= parts.size();
    }
    if (i >= parts.size()) return false;
    if (s.kind == Segment::Kind::bind) {
      bound.insert(bound.begin(), {s.text, Json(parts[i])});
    } else if (s.text != parts[i]) {
      return false;
    }
  }
  return i == parts.size();
}

// A binding's value with the rule's "formats" applied ("int", "bool").
Json formatted(const std::string& name, Json value, const Json& formats) {
  if (!formats.is_object() || !formats.contains(name) || !value.is_string()) return value;
  const std::string& text = value.get_ref<const std::string&>();
  if (formats[name] == "int") {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(text, &used);
      if (used == text.size()) return Json(v);
    } catch (const std::exception&) {
    }
  } else if (formats[name] == "bool") {
    std::string lower = text;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "true") return Json(true);
    if (lower == "false") return Json(false);
  }
  return value;
}

// chttpd_rewrite:replace_var: ":name" and "*" in a rule's query value take the bound value.
Json replace_var(const Json& value, const Bindings& b, const Json& formats) {
  const auto one = [&](const Json& v) -> Json {
    if (!v.is_string()) return v;
    const std::string& s = v.get_ref<const std::string&>();
    std::string name;
    if (s == "*")
      name = "*";
    else if (s.starts_with(':'))
      name = s.substr(1);
    else
      return v;
    const Json* bound = find(b, name);
    return formatted(name, bound ? *bound : v, formats);
  };
  if (value.is_array()) {
    Json out = Json::array();
    for (const Json& v : value) out.push_back(one(v));
    return out;
  }
  return one(value);
}

// A value as text in a path segment or a query string.
std::string as_text(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// chttpd_rewrite:normalize_path: "." dropped, ".." takes the segment before it away. The
// rewritten request is authorized as any other, so a path that climbs out of the database (a
// rewrites function may, as in CouchDB) reaches only what the user may reach.
std::string normalize(std::string_view path) {
  std::vector<std::string_view> out;
  while (!path.empty()) {
    const std::size_t slash = path.find('/');
    const std::string_view part = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view{} : path.substr(slash + 1);
    if (part.empty() || part == ".") continue;
    if (part == ".." && !out.empty() && out.back() != "..") {
      out.pop_back();
      continue;
    }
    out.push_back(part);
  }
  std::string joined;
  for (std::string_view p : out) {
    joined += '/';
    joined += p;
  }
  return joined.empty() ? "/" : joined;
}

// "/{db}/_design/{ddoc}" as CouchDB's path_prefix spells it.
std::string prefix(const Call& call) {
  return "/" + url_encode(call.path[0]) + "/_design/" + url_encode(call.path[2]);
}

// The rewritten request: `method`, `path_and_query` under the design document, the original's
// headers with `headers` over them, and `body` (the original's when nullopt).
Request rewritten(const Call& call, const std::string& method, const std::string& path,
                  const std::string& query, const Json& headers,
                  const std::optional<std::string>& body) {
  Request r{call.req.base()};
  r.method_string(method);
  // A path may carry a query of its own ("../../doc?revs=true").
  std::string_view p = path;
  std::string qs = query;
  if (const std::size_t q = p.find('?'); q != std::string_view::npos) {
    const std::string own(p.substr(q + 1));
    qs = qs.empty() ? own : own.empty() ? qs : own + "&" + qs;
    p = p.substr(0, q);
  }
  std::string target = normalize(prefix(call) + "/" + std::string(p));
  if (!qs.empty()) target += "?" + qs;
  r.target(target);
  if (headers.is_object())
    for (auto it = headers.begin(); it != headers.end(); ++it) r.set(it.key(), as_text(it.value()));
  r.body() = body ? *body : call.req.body();
  if (body || headers.is_object()) r.prepare_payload();
  return r;
}

// The rules of an array "rewrites" (chttpd_rewrite:do_rewrite for a list).
Request by_rules(const Call& call, const Json& rules) {
  std::vector<std::string> parts(call.path.begin() + 4, call.path.end());
  Bindings query;
  for (const auto& [k, v] : call.query.params())
    query.emplace_back(k, json_param(k) ? parse_json_or_throw(v) : Json(v));
  const std::string method(call.req.method_string());
  bool secure = true;
  if (call.ctx.config != nullptr)
    secure = call.ctx.config->get("chttpd", "secure_rewrites").value_or("true") != "false";
  // Every rule is read first, as CouchDB's make_rule reads them: a bad one fails every request.
  struct Rule {
    const Json* json;
    std::vector<Segment> from, to;
  };
  std::vector<Rule> parsed;
  for (const Json& rule : rules) {
    if (!rule.is_object()) continue;
    if (!rule.contains("to"))
      throw HttpError(core::CouchError{500, "error", "invalid_rewrite_target"});
    parsed.push_back({&rule,
                      rule.contains("from") ? parse_pattern(as_text(rule["from"]), secure)
                                            : std::vector<Segment>{{Segment::Kind::rest, "*"}},
                      parse_pattern(as_text(rule["to"]), secure)});
  }
  for (const auto& [rule_json, from, to] : parsed) {
    const Json& rule = *rule_json;
    if (rule.contains("method") && as_text(rule["method"]) != method &&
        as_text(rule["method"]) != "*")
      continue;
    Bindings bound;
    std::vector<std::string> remaining;
    if (!bind_path(from, parts, bound, remaining)) continue;
    for (auto& q : query) bound.push_back(q);
    const Json formats = rule.value("formats", Json::object());
    Bindings args;  // the rule's query, its variables replaced
    if (rule.contains("query") && rule["query"].is_object())
      for (auto it = rule["query"].begin(); it != rule["query"].end(); ++it)
        args.insert(args.begin(), {it.key(), replace_var(it.value(), bound, formats)});
    Bindings all;
    for (const auto& [k, v] : bound)
      if (!find(args, k)) all.emplace_back(k, v);
    for (const auto& a : args) all.push_back(a);
    std::string path;
    for (std::size_t i = 0; i < to.size(); ++i) {
      const Segment& s = to[i];
      std::vector<std::string> pieces;
      if (s.kind == Segment::Kind::rest) {
        pieces = remaining;
      } else if (s.kind == Segment::Kind::bind) {
        const Json* v = find(all, s.text);
        pieces.push_back(v ? as_text(*v) : "undefined");
      } else {
        pieces.push_back(s.text);
      }
      for (const std::string& p : pieces) {
        if (!path.empty()) path += '/';
        path += quote_plus(p);
      }
      if (s.kind == Segment::Kind::rest) break;
    }
    std::string qs;
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if (it->first == "*") continue;
      if (!qs.empty()) qs += '&';
      qs += quote_plus(it->first) + "=" +
            quote_plus(json_param(it->first) ? it->second.dump() : as_text(it->second));
    }
    return rewritten(call, method, path, qs, Json(), std::nullopt);
  }
  throw HttpError(err::not_found());
}

// couch_query_servers:validate_rewrite_response: the object a rewrites function answered.
void validate_function_answer(const Json& a) {
  const auto bad = [](const std::string& what) {
    throw HttpError(core::CouchError{500, "rewrite_error", what});
  };
  if (!a.is_object()) bad("bad rewrite");
  for (auto it = a.begin(); it != a.end(); ++it) {
    const std::string& k = it.key();
    const Json& v = it.value();
    if ((k == "method" || k == "path" || k == "body") && !v.is_string()) bad("bad " + k);
    if (k == "headers" || k == "query") {
      if (!v.is_object()) bad("bad " + k);
      for (auto f = v.begin(); f != v.end(); ++f)
        if (!f.value().is_string())
          bad("object key/value must be strings " + Json(f.key()).dump() + "=" + f.value().dump());
    }
    if (k == "code" && !(v.is_number_integer() && v.get<int>() >= 200 && v.get<int>() < 600))
      bad("bad code");
  }
}

}  // namespace

Rewrite rewrite_request(Call& call, const core::DbRef& db) {
  std::shared_ptr<const LoadedDesignDoc> loaded;
  {
    auto tr = call.store().create_transaction();
    loaded = design_doc(tr, db, call.path[2]);
  }
  const Json& ddoc = loaded->body;
  const auto rules = ddoc.is_object() ? ddoc.find("rewrites") : ddoc.end();
  if (rules != ddoc.end() && rules->is_array())
    return Rewrite{by_rules(call, *rules), std::nullopt};
  if (rules == ddoc.end() || !rules->is_string())
    throw HttpError(core::CouchError{404, "rewrite_error", "Invalid path."});
  auto r = js_engine(call).rewrite(loaded->js, js_rewrite_request_object(call).dump());
  if (auto* e = std::get_if<core::js::JsError>(&r)) throw HttpError(core::js_error(*e));
  const auto& answer = std::get<std::optional<std::string>>(r);
  if (!answer) throw HttpError(core::CouchError{404, "rewrite_error", "Invalid path."});
  const Json a = Json::parse(*answer, nullptr, false);
  validate_function_answer(a);
  if (a.contains("forbidden")) throw HttpError(err::forbidden(as_text(a["forbidden"])));
  if (a.contains("unauthorized")) throw HttpError(err::unauthorized(as_text(a["unauthorized"])));
  const std::optional<std::string> body =
      a.contains("body") ? std::optional<std::string>(a["body"].get<std::string>()) : std::nullopt;
  if (a.contains("code")) {
    Response out{static_cast<Status>(a["code"].get<int>()), call.req.version()};
    out.set(beast_http::field::server, kServerHeader);
    out.set(beast_http::field::date, http_date_now());
    if (a.contains("headers"))
      for (auto it = a["headers"].begin(); it != a["headers"].end(); ++it)
        out.set(it.key(), it.value().get<std::string>());
    out.body() = body ? *body : call.req.body();
    out.keep_alive(call.req.keep_alive());
    out.prepare_payload();
    return Rewrite{std::nullopt, std::move(out)};
  }
  if (!a.contains("path"))
    throw HttpError(
        core::CouchError{500, "rewrite_error", "Rewrite result must produce a new path."});
  const std::string method =
      a.contains("method") ? a["method"].get<std::string>() : std::string(call.req.method_string());
  std::string qs;
  if (a.contains("query")) {
    for (auto it = a["query"].begin(); it != a["query"].end(); ++it) {
      if (!qs.empty()) qs += '&';
      qs += quote_plus(it.key()) + "=" + quote_plus(it.value().get<std::string>());
    }
  } else {
    const std::string target(call.req.target());
    if (const std::size_t q = target.find('?'); q != std::string::npos) qs = target.substr(q + 1);
  }
  return Rewrite{
      rewritten(call, method, a["path"].get<std::string>(), qs, a.value("headers", Json()), body),
      std::nullopt};
}

}  // namespace chaise::http
