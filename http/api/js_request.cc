#include "http/api/js_request.h"

#include <random>

#include "config/config.h"
#include "core/db/db_cache.h"
#include "core/docs/attachments.h"
#include "core/docs/documents.h"
#include "core/index/cursors.h"

namespace chaise::http {

namespace {

std::string random_uuid() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (char& c : out) c = kHex[rng() & 15];
  return out;
}

// application/x-www-form-urlencoded: "a=1&b=x+y" -> {"a":"1","b":"x y"}.
Json form_fields(std::string_view body) {
  Json out = Json::object();
  Query q = Query::parse("/?" + std::string(body));
  for (const auto& [k, v] : q.params()) {
    std::string value = v;
    for (char& c : value)
      if (c == '+') c = ' ';
    out[k] = value;
  }
  return out;
}

Json cookies(const Request& req) {
  Json out = Json::object();
  auto it = req.find(beast_http::field::cookie);
  if (it == req.end()) return out;
  std::string_view rest = it->value();
  while (!rest.empty()) {
    std::size_t semi = rest.find(';');
    std::string_view item = rest.substr(0, semi);
    rest = semi == std::string_view::npos ? std::string_view{} : rest.substr(semi + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    std::size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    out[std::string(item.substr(0, eq))] = std::string(item.substr(eq + 1));
  }
  return out;
}

}  // namespace

Json js_request_object(const Call& call, const std::optional<std::string>& doc_id) {
  Json req = Json::object();
  const std::string db = call.path.empty() ? std::string() : call.path[0];
  req["info"] = Json{{"db_name", db}};
  req["id"] = doc_id ? Json(*doc_id) : Json(nullptr);
  req["uuid"] = random_uuid();
  req["method"] = std::string(call.req.method_string());
  req["requested_path"] = call.path;
  req["path"] = call.path;
  const std::string target(call.req.target());
  req["raw_path"] = target;
  Json query = Json::object();
  for (const auto& [k, v] : call.query.params())
    if (!query.contains(k)) query[k] = v;
  req["query"] = query;
  Json headers = Json::object();
  for (const auto& h : call.req) headers[std::string(h.name_string())] = std::string(h.value());
  req["headers"] = headers;
  const std::string& body = call.req.body();
  req["body"] = body.empty() ? std::string("undefined") : body;
  req["peer"] = call.stream.peer_address();
  auto ct = call.req.find(beast_http::field::content_type);
  const bool form =
      ct != call.req.end() && ct->value().starts_with("application/x-www-form-urlencoded");
  req["form"] = form ? form_fields(body) : Json::object();
  req["cookie"] = cookies(call.req);
  Json user = Json::object();
  user["db"] = db;
  user["name"] = call.user.name ? Json(*call.user.name) : Json(nullptr);
  user["roles"] = call.user.roles;
  req["userCtx"] = user;
  req["secObj"] = call.security->raw;
  return req;
}

Json js_rewrite_request_object(const Call& call) {
  Json req = js_request_object(call, std::nullopt);
  for (const char* field : {"info", "uuid", "id", "form"}) req.erase(field);
  return req;
}

ExternalResponse parse_external_response(const Json& resp) {
  ExternalResponse r;
  if (!resp.is_object()) return r;
  for (auto it = resp.begin(); it != resp.end(); ++it) {
    const std::string& key = it.key();
    const Json& v = it.value();
    if (key == "code") {
      if (v.is_number_integer() && v.get<int>() >= 100 && v.get<int>() <= 999)
        r.code = v.get<int>();
    } else if (key == "stop") {
    } else if (key == "json") {
      r.body = v.dump();
      r.json = true;
      r.content_type = "application/json";
    } else if (key == "body") {
      r.body = v.is_string() ? v.get<std::string>() : v.dump();
      r.json = false;
      r.content_type = "text/html; charset=utf-8";
    } else if (key == "base64") {
      auto decoded = v.is_string() ? core::base64_decode(v.get<std::string>()) : std::nullopt;
      if (!decoded) throw HttpError(err::render_error("invalid base64 in the response"));
      r.body = std::move(*decoded);
      r.json = false;
      r.content_type = "application/binary";
    } else if (key == "headers") {
      if (!v.is_object()) continue;
      r.headers.clear();
      for (auto h = v.begin(); h != v.end(); ++h) {
        const std::string value =
            h.value().is_string() ? h.value().get<std::string>() : h.value().dump();
        if (value.find_first_of("\r\n") != std::string::npos) continue;  // no header injection
        r.headers.emplace_back(h.key(), value);
      }
    } else {
      throw HttpError(core::CouchError{
          500, "external_response_error",
          "Invalid data from external server: {" + Json(key).dump() + "," + v.dump() + "}"});
    }
  }
  for (auto h = r.headers.begin(); h != r.headers.end();) {
    if (boost::beast::iequals(h->first, "Content-Type")) {
      r.content_type = h->second;
      h = r.headers.erase(h);
    } else {
      ++h;
    }
  }
  return r;
}

Response external_head(const Call& call, const ExternalResponse& r) {
  Response out{static_cast<Status>(r.code), call.req.version()};
  out.set(beast_http::field::server, kServerHeader);
  out.set(beast_http::field::date, http_date_now());
  if (r.json) {
    out.set(beast_http::field::cache_control, "must-revalidate");
  } else {
    std::optional<std::string> enabled, value;
    if (call.ctx.config != nullptr) {
      enabled = call.ctx.config->get("csp", "showlist_enable");
      value = call.ctx.config->get("csp", "showlist_header_value");
    }
    if (enabled.value_or("true") != "false")
      out.set("Content-Security-Policy", value.value_or("sandbox"));
  }
  out.set(beast_http::field::content_type, r.content_type);
  for (const auto& [name, value] : r.headers) out.set(name, value);
  out.keep_alive(call.req.keep_alive());
  return out;
}

Response external_response(const Call& call, ExternalResponse r) {
  Response out = external_head(call, r);
  out.body() = std::move(r.body);
  out.prepare_payload();
  return out;
}

std::vector<std::pair<std::string, Json>> read_design_doc_bodies(const Call& call,
                                                                 const core::DbRef& db) {
  auto tr = call.store().create_transaction();
  core::AllDocsQuery q;
  q.kind = core::AllDocsKind::design_docs;
  q.include_docs = true;
  core::AllDocsCursor cursor(db, q);
  std::vector<std::string> rows;
  for (bool more = true; more;) {
    auto m = value_or_throw(cursor.next_page(tr, 1000, rows));
    more = m;
    if (rows.size() > 10'000) throw HttpError(err::unknown_error("too many design documents"));
  }
  std::vector<std::pair<std::string, Json>> out;
  for (const std::string& row : rows) {
    Json r = Json::parse(row, nullptr, false);
    if (!r.is_object() || !r.contains("doc") || !r["doc"].is_object()) continue;
    out.emplace_back(r["id"].get<std::string>(), std::move(r["doc"]));
  }
  return out;
}

namespace {

// A design document as read, or why it could not be.
using DesignDocRead = core::Outcome<std::shared_ptr<const LoadedDesignDoc>>;

storage::Result<DesignDocRead> read_design_doc(storage::Transaction& tr, const core::DbRef& db,
                                               const std::string& id) {
  auto doc = core::get_doc_json(tr, db, id, core::DocReadOptions{});
  if (!doc.ok()) return doc.error();
  if (auto* e = std::get_if<core::CouchError>(&*doc)) return DesignDocRead(std::move(*e));
  std::string& json = std::get<std::string>(*doc);
  auto loaded = std::make_shared<LoadedDesignDoc>();
  loaded->body = Json::parse(json, nullptr, false);
  const std::string rev = loaded->body.is_object() ? loaded->body.value("_rev", "") : "";
  loaded->js = core::js::DesignDoc{std::to_string(db.id) + '\0' + id + '\0' + rev, std::move(json)};
  return DesignDocRead(std::shared_ptr<const LoadedDesignDoc>(std::move(loaded)));
}

}  // namespace

std::shared_ptr<const LoadedDesignDoc> design_doc(storage::Transaction& tr, const core::DbRef& db,
                                                  const std::string& name) {
  const std::string id = "_design/" + name;
  const std::string key = core::memo_key("design_doc", std::to_string(db.id) + '\0' + id);
  auto found = value_or_throw(core::remembered_read<DesignDocRead>(
      tr, key, [&](storage::Transaction& t) -> storage::Result<DesignDocRead> {
        auto r = read_design_doc(t, db, id);
        // Too large to keep: remembered as absent, so the next request reads it again.
        if (r.ok() && !core::failed(*r) &&
            std::get<std::shared_ptr<const LoadedDesignDoc>>(*r)->js.json.size() >
                kRememberedDesignDocMax)
          return DesignDocRead(std::shared_ptr<const LoadedDesignDoc>());
        return r;
      }));
  if (const auto* e = std::get_if<core::CouchError>(&*found)) throw HttpError(*e);
  if (auto d = std::get<std::shared_ptr<const LoadedDesignDoc>>(*found)) return d;
  auto r = value_or_throw(read_design_doc(tr, db, id));
  if (const auto* e = std::get_if<core::CouchError>(&r)) throw HttpError(*e);
  return std::get<std::shared_ptr<const LoadedDesignDoc>>(r);
}

core::js::DesignDoc load_design_doc(storage::Transaction& tr, const core::DbRef& db,
                                    const std::string& name) {
  return design_doc(tr, db, name)->js;
}

std::optional<core::CouchError> check_design_functions(const Call& call, std::string_view id,
                                                       const Json& doc) {
  if (!call.ctx.js || !id.starts_with("_design/") || !doc.is_object()) return std::nullopt;
  if (doc.value("_deleted", false) == true) return std::nullopt;
  const auto lang = doc.find("language");
  if (lang != doc.end() && !(lang->is_string() && *lang == "javascript")) return std::nullopt;
  const auto views = doc.find("views");
  if (views == doc.end() || !views->is_object()) return std::nullopt;
  for (auto it = views->begin(); it != views->end(); ++it) {
    if (it.key() == "lib" || !it.value().is_object()) continue;
    for (const char* part : {"map", "reduce"}) {
      const auto f = it.value().find(part);
      if (f == it.value().end() || !f->is_string()) continue;
      const std::string& source = f->get_ref<const std::string&>();
      if (std::string_view(part) == "reduce" && source.starts_with("_")) continue;
      auto r = call.ctx.js->compiles(source);
      if (auto* e = std::get_if<core::js::JsError>(&r))
        return err::compilation_error(std::string("Compilation of the ") + part +
                                      " function in the '" + it.key() +
                                      "' view failed: " + e->reason);
    }
  }
  return std::nullopt;
}

core::js::Engine& js_engine(const Call& call) {
  if (!call.ctx.js) throw HttpError(err::unknown_error("no JavaScript engine in this server"));
  return *call.ctx.js;
}

}  // namespace chaise::http
