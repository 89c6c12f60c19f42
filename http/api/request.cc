#include "http/api/request.h"

#include <cctype>
#include <charconv>

#include "core/db/databases.h"
#include "core/db/txid_janitor.h"
#include "core/docs/validation.h"
#include "core/util/ascii.h"
#include "http/api/txn.h"
#include "http/api/write_turns.h"

namespace chaise::http {

Json parse_json_body(const Request& req, bool require_json_type, core::JsonNumbers numbers) {
  if (require_json_type) {
    const std::string_view type = req[beast_http::field::content_type];
    if (type.substr(0, type.find(';')) != "application/json")
      throw HttpError(err::bad_content_type("Content-Type must be application/json"));
  }
  return parse_json_or_throw(req.body(), numbers);
}

Json parse_json_object_body(const Request& req, bool require_json_type, core::JsonNumbers numbers) {
  Json j = parse_json_body(req, require_json_type, numbers);
  if (!j.is_object()) throw HttpError(err::bad_request("Request body must be a JSON object"));
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

Response storage_error_response(const Request& req, storage::Error e) {
  switch (e) {
    case storage::Error::transaction_too_large:
    case storage::Error::value_too_large:
    case storage::Error::key_too_large:
      return error_response(req, err::too_large());
    default:
      return error_response(req, core::storage_failure(e));
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

std::shared_ptr<core::JsDocValidator> doc_validator(const Call& call) {
  if (!call.ctx.js || call.path.empty()) return nullptr;
  // validate_doc_update sees CouchDB's userCtx ({"db","name","roles"}) and the _security object
  // open_db_or_throw read (shared, not copied: most writes never run a function).
  return std::make_shared<core::JsDocValidator>(
      *call.ctx.js, [db = call.path[0], name = call.user.name, roles = call.user.roles,
                     security = call.security] {
        Json user = Json::object();
        user["db"] = db;
        user["name"] = name ? Json(*name) : Json(nullptr);
        user["roles"] = roles;
        return core::JsDocValidator::Contexts{user.dump(), security->raw.dump()};
      });
}

boost::asio::awaitable<storage::Status> run_doc_batch(const Call& call,
                                                      core::DocWriteBatch& batch) {
  if (auto v = doc_validator(call)) batch.set_validator(std::move(v));
  batch.set_js(call.ctx.js);
  // Writers that update a reduce tree take turns (http/api/write_turns.h): a round learns whether
  // it does from each attempt, so a first attempt that conflicts retries in turn. A round too
  // large for its transaction's lifetime retries smaller (DocWriteBatch::retrying).
  WriteTurns* turns = call.ctx.write_turns.get();
  const std::string& db = call.path.at(0);
  std::int64_t read_version = call.take_read_version();  // the first attempt's
  while (batch.has_more()) {
    WriteTurns::Turn turn;
    auto before_attempt = [&](storage::Error last) -> boost::asio::awaitable<void> {
      if (last != storage::Error::success) batch.retrying(last);
      if (!turn && turns && turns->wanted(db)) turn = co_await turns->take(db);
    };
    storage::Status s = co_await run_txn(
        call.store(),
        [&](storage::Transaction& tr) {
          // Not after waiting for a turn: the writers before it moved the data on.
          if (const std::int64_t v = std::exchange(read_version, 0); v > 0 && !turn)
            tr.set_read_version(v);
          storage::Status st = batch(tr);
          if (turns) turns->learn(db, batch.updated_reduce_trees());
          return st;
        },
        before_attempt);
    if (!s.ok()) co_return s;
    if (call.ctx.janitor && !batch.tx_key().empty()) call.ctx.janitor->committed(batch.tx_key());
    batch.committed();
  }
  co_return storage::Status{};
}

std::string absolute_uri(const Call& call, std::string_view path) {
  return absolute_uri(call.req, call.stream.secure(), path);
}

std::string absolute_uri(const Request& req, bool secure, std::string_view path) {
  std::string_view host = req["X-Forwarded-Host"];
  if (host.empty()) host = req[beast_http::field::host];
  if (host.empty()) host = "localhost";
  const bool https =
      req["X-Forwarded-Ssl"] == "on" || req["X-Forwarded-Proto"] == "https" || secure;
  std::string uri = https ? "https://" : "http://";
  uri.append(host).append(path);
  return uri;
}

bool accepts_media_type(const Request& req, std::string_view type) {
  auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  };
  auto it = req.find(beast_http::field::accept);
  const std::string value = it == req.end() ? std::string("*/*") : core::ascii_lower(it->value());
  const std::string wanted = core::ascii_lower(type);
  const std::string major = wanted.substr(0, wanted.find('/')) + "/*";
  bool accepted = false, refused = false;
  std::string_view rest = value;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    std::string entry(trim(item.substr(0, item.find(';'))));
    double q = 1.0;
    std::string_view params = item.find(';') == std::string_view::npos
                                  ? std::string_view{}
                                  : item.substr(item.find(';') + 1);
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
  HttpError e(err::method_not_allowed("Only " + std::string(allowed) + " allowed"));
  e.allow = std::string(allowed);
  throw e;
}

void require_json_content_type(const Call& call) {
  const std::string_view type = call.req[beast_http::field::content_type];
  if (type.substr(0, type.find(';')) != "application/json")
    throw HttpError(err::bad_content_type("Content-Type must be application/json"));
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
