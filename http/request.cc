#include "http/request.h"

#include "core/validation.h"

#include <cctype>

#include <charconv>

#include "core/databases.h"
#include "core/txid_janitor.h"
#include "http/txn.h"

namespace chaise::http {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string decode_component(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out.push_back(' ');
    } else if (in[i] == '%') {
      if (i + 2 >= in.size()) throw_bad_request("Invalid URL encoding");
      int hi = hex_digit(in[i + 1]), lo = hex_digit(in[i + 2]);
      if (hi < 0 || lo < 0) throw_bad_request("Invalid URL encoding");
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

}  // namespace

Query Query::parse(std::string_view target) {
  Query q;
  auto qm = target.find('?');
  if (qm == std::string_view::npos) return q;
  std::string_view rest = target.substr(qm + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    std::string key = decode_component(pair.substr(0, eq));
    std::string value = eq == std::string_view::npos ? "" : decode_component(pair.substr(eq + 1));
    q.params_.emplace_back(std::move(key), std::move(value));
  }
  return q;
}

std::optional<std::string> Query::get(std::string_view key) const {
  for (const auto& [k, v] : params_)
    if (k == key) return v;
  return std::nullopt;
}

bool Query::get_bool(std::string_view key, bool fallback) const {
  auto v = get(key);
  if (!v) return fallback;
  if (*v == "true") return true;
  if (*v == "false") return false;
  throw_query_parse_error("Invalid boolean parameter: \"" + *v + "\"");
}

std::optional<std::int64_t> Query::get_int(std::string_view key) const {
  auto v = get(key);
  if (!v) return std::nullopt;
  std::int64_t out = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || p != v->data() + v->size())
    throw_query_parse_error("Invalid value for integer: \"" + *v + "\"");
  return out;
}

std::optional<Json> Query::get_json(std::string_view key) const {
  auto v = get(key);
  if (!v) return std::nullopt;
  return parse_json_or_throw(*v);
}

Json parse_json_or_throw(std::string_view text, core::JsonNumbers numbers) {
  auto parsed = core::parse_json_text(text, numbers);
  if (auto* reason = std::get_if<std::string>(&parsed)) throw_bad_request(*reason);
  return std::move(std::get<Json>(parsed));
}

Json parse_json_body(const Request& req, bool require_json_type, core::JsonNumbers numbers) {
  if (require_json_type) {
    const std::string_view type = req[beast_http::field::content_type];
    if (type.substr(0, type.find(';')) != "application/json")
      throw HttpError(415, "bad_content_type", "Content-Type must be application/json");
  }
  return parse_json_or_throw(req.body(), numbers);
}

Json parse_json_object_body(const Request& req, bool require_json_type, core::JsonNumbers numbers) {
  Json j = parse_json_body(req, require_json_type, numbers);
  if (!j.is_object()) throw_bad_request("Request body must be a JSON object");
  return j;
}

Response raw_json_response(const Request& req, Status status, std::string body) {
  Response response{status, req.version()};
  response.set(beast_http::field::server, kServerHeader);
  response.set(beast_http::field::date, http_date_now());
  response.set(beast_http::field::content_type, "application/json");
  response.set(beast_http::field::cache_control, "must-revalidate");
  response.keep_alive(req.keep_alive());
  response.body() = std::move(body);
  response.body().push_back('\n');
  response.prepare_payload();
  if (req.method() == beast_http::verb::head) response.body().clear();
  return response;
}

Response couch_error_response(const Request& req, const core::CouchError& e) {
  return error_response(req, static_cast<Status>(e.status), e.error, e.reason);
}

Response storage_error_response(const Request& req, storage::Error e) {
  switch (e) {
    case storage::Error::transaction_too_large:
    case storage::Error::value_too_large:
    case storage::Error::key_too_large:
      return error_response(req, Status::payload_too_large, "too_large",
                            "the request entity is too large");
    default:
      return error_response(req, Status::internal_server_error, "unknown_error",
                            std::string(storage::error_name(e)));
  }
}

Response stream_head(const Request& req) {
  Response head{Status::ok, req.version()};
  head.set(beast_http::field::server, kServerHeader);
  head.set(beast_http::field::date, http_date_now());
  head.set(beast_http::field::content_type, "application/json");
  head.set(beast_http::field::cache_control, "must-revalidate");
  return head;
}

boost::asio::awaitable<storage::Status> run_doc_batch(const Call& call, core::DocWriteBatch& batch) {
  if (call.ctx.js && !call.path.empty()) {
    // validate_doc_update sees CouchDB's userCtx ({"db","name","roles"}) and the _security object
    // open_db_or_throw read.
    Json user = Json::object();
    user["db"] = call.path[0];
    user["name"] = call.user.name ? Json(*call.user.name) : Json(nullptr);
    user["roles"] = call.user.roles;
    batch.set_validator(std::make_shared<core::JsDocValidator>(*call.ctx.js, user.dump(),
                                                               call.security.raw.dump()));
  }
  while (batch.has_more()) {
    storage::Status s = co_await run_txn(call.store(), [&](storage::Transaction& tr) { return batch(tr); });
    if (!s.ok()) co_return s;
    if (call.ctx.janitor && !batch.tx_key().empty()) call.ctx.janitor->committed(batch.tx_key());
    batch.committed();
  }
  co_return storage::Status{};
}

bool accepts_media_type(const Request& req, std::string_view type) {
  auto lower = [](std::string_view v) {
    std::string out(v);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  };
  auto it = req.find(beast_http::field::accept);
  const std::string value = it == req.end() ? std::string("*/*") : lower(it->value());
  const std::string wanted = lower(type);
  const std::string major = wanted.substr(0, wanted.find('/')) + "/*";
  bool accepted = false, refused = false;
  std::string_view rest = value;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    std::string entry(trim(item.substr(0, item.find(';'))));
    double q = 1.0;
    std::string_view params =
        item.find(';') == std::string_view::npos ? std::string_view{} : item.substr(item.find(';') + 1);
    while (!params.empty()) {
      const std::size_t semi = params.find(';');
      std::string_view p = trim(params.substr(0, semi));
      params = semi == std::string_view::npos ? std::string_view{} : params.substr(semi + 1);
      if (p.starts_with("q=")) {
        try {
          q = std::stod(std::string(p.substr(2)));
        } catch (const std::exception&) {
          return false;
        }
      } else if (!p.empty()) {
        entry += ";" + std::string(p);
      }
    }
    const bool match = entry == wanted || entry == major;
    if (q > 0.0 && (match || entry == "*/*")) accepted = true;
    if (q == 0.0 && match) refused = true;
  }
  return accepted && !refused;
}

void throw_method_not_allowed(std::string_view allowed) {
  HttpError e(405, "method_not_allowed", "Only " + std::string(allowed) + " allowed");
  e.allow = std::string(allowed);
  throw e;
}

void require_json_content_type(const Call& call) {
  const std::string_view type = call.req[beast_http::field::content_type];
  if (type.substr(0, type.find(';')) != "application/json")
    throw HttpError(415, "bad_content_type", "Content-Type must be application/json");
}

void require_method(const Call& call, std::string_view allowed) {
  std::string_view m = call.req.method_string();
  std::string_view rest = allowed;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    if (rest.substr(0, comma) == m) return;
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  throw_method_not_allowed(allowed);
}

}  // namespace chaise::http
