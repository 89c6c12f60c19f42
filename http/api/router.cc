#include "http/api/router.h"

#include <fmt/compile.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <any>
#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>
#include <iterator>
#include <utility>

#include "config/config.h"
#include "core/db/databases.h"
#include "core/docs/validation.h"
#include "http/api/hot_docs.h"
#include "http/api/idempotency.h"
#include "http/api/metrics.h"
#include "http/api/request.h"
#include "http/api/write_turns.h"
#include "http/auth/auth.h"
#include "http/transport/workers.h"

namespace chaise::http {

namespace {

// CouchDB advertises optional capabilities in the welcome document; clients use the list to decide
// which endpoints to call. A feature is listed only once its endpoints work in Chaise, so that no
// client is sent down a path that answers 404.
// CouchDB 3.5 lists access-ready, partitioned, pluggable-storage-engines, reshard and scheduler.
// Chaise serves partitioned databases (/{db}/_partition/...) and none of the others as CouchDB
// means them (no ?engine=, no _reshard, no _scheduler, no _access).
const std::array<std::string_view, 1> kFeatures = {"partitioned"};

bool is_get_or_head(const Request& request) {
  return request.method() == beast_http::verb::get || request.method() == beast_http::verb::head;
}

}  // namespace

Router::Router(RouterContext context) : context_(std::move(context)) {
  if (!context_.idempotency_in_flight)
    context_.idempotency_in_flight = std::make_shared<IdempotencyInFlight>();
  if (!context_.hot_docs)
    context_.hot_docs = std::make_shared<HotDocs>(context_.js, context_.workers);
  if (!context_.write_turns) context_.write_turns = std::make_shared<WriteTurns>();
}

namespace {

// Requests whose work grows with their body or with the data they read: they run on the worker
// pool. Live feeds stay on their connection's io thread (they mostly wait, and their peer watch and
// timers belong to it); single-document reads and small writes stay inline (a thread hop would
// cost them more than it saves).
// Writes that hash a password (a _users doc, a config admin, a login) and writes that run a
// validate_doc_update (bounded only by os_process_timeout) count as heavy too.
bool is_heavy_request(const Call& call) {
  constexpr std::size_t kLargeBody = 64 * 1024;
  if (call.req.body().size() >= kLargeBody) return true;
  const auto& path = call.path;
  if (path.empty()) return false;
  const auto method = call.req.method();
  const bool write = method == beast_http::verb::put || method == beast_http::verb::post ||
                     method == beast_http::verb::delete_ || method == beast_http::verb::copy;
  if (write) {
    if (path[0] == "_session" || path[0] == "_users" || path[0] == "_node") return true;
    // Its JavaScript runs on the workers when it must (http/api/update.cc).
    if (update_runs_grouped(call)) return false;
    if (core::JsDocValidator::last_had_functions(path[0])) return true;
  }
  if (path.size() == 1) return path[0] == "_dbs_info" || path[0] == "_all_dbs";
  std::size_t at = 1;  // /{db}/_partition/{p}/<endpoint>: look at the endpoint
  if (path[1] == "_partition" && path.size() >= 4) at = 3;
  const std::string& op = path[at];
  static constexpr std::string_view kHeavy[] = {
      "_bulk_docs", "_bulk_get",    "_revs_diff", "_missing_revs", "_find",
      "_explain",   "_index",       "_purge",     "_view_cleanup", "_compact",
      "_all_docs",  "_design_docs", "_local_docs"};
  for (std::string_view h : kHeavy) {
    if (op == h) return true;
  }
  if (op == "_changes") {
    const auto feed = call.query.get("feed");
    return !feed || *feed == "normal";
  }
  // /{db}/_design/{ddoc}/_view|_update|_info|_show|_list/...
  return op == "_design" && path.size() >= at + 3 && !path[at + 2].empty() &&
         path[at + 2].front() == '_';
}

// Authentication as a coroutine, for the worker pool.
boost::asio::awaitable<AuthResult> authenticate_on(const Authenticator& auth, const Request& req,
                                                   Client client,
                                                   Authenticator::Presented presented) {
  co_return auth.authenticate(req, client, presented);
}

// The request's Basic credential, decoded and digested (Authenticator::presented). A keep-alive
// client sends the same Authorization header with every request: the connection remembers the
// last one it decoded, which was a tenth of a GET's instructions (base64 and SHA-256). Nothing
// else is remembered: every request is still checked against the current users and lockouts.
struct CredentialMemo {
  std::string header;
  Authenticator::Presented presented;
};

Authenticator::Presented presented_on_connection(const Authenticator& auth, const Request& req,
                                                 ResponseStream& stream) {
  std::any* slot = stream.connection_memo();
  const auto header = req.find(beast_http::field::authorization);
  if (slot == nullptr || header == req.end()) return auth.presented(req);
  if (auto* memo = std::any_cast<CredentialMemo>(slot); memo && memo->header == header->value())
    return memo->presented;
  CredentialMemo fresh{std::string(header->value()), auth.presented(req)};
  Authenticator::Presented out = fresh.presented;
  *slot = std::move(fresh);
  return out;
}

// Adds the headers every answer gets (a refreshed AuthSession cookie, CORS) to a streamed
// response's head.
class DecoratedStream final : public ResponseStream {
 public:
  DecoratedStream(ResponseStream& inner, std::function<void(Response&)> decorate)
      : inner_(inner), decorate_(std::move(decorate)) {}
  boost::asio::awaitable<bool> begin(Response head) override {
    decorate_(head);
    status_ = head.result_int();
    return inner_.begin(std::move(head));
  }
  boost::asio::awaitable<bool> write(std::string_view data) override {
    bytes_ += data.size();
    return inner_.write(data);
  }
  std::size_t bytes() const { return bytes_; }
  unsigned status() const { return status_; }
  boost::asio::awaitable<bool> flush() override { return inner_.flush(); }
  boost::asio::awaitable<bool> finish() override { return inner_.finish(); }
  bool begun() const override { return inner_.begun(); }
  void watch_peer(std::function<void()> closed) override { inner_.watch_peer(std::move(closed)); }
  std::string peer_address() const override { return inner_.peer_address(); }
  bool secure() const override { return inner_.secure(); }
  bool body_streamed() const override { return inner_.body_streamed(); }
  boost::asio::awaitable<std::optional<std::size_t>> read_body(std::string& out,
                                                               std::size_t max) override {
    if (!tap_) return inner_.read_body(out, max);
    return tapped_read_body(out, max);
  }
  // Hands every piece of a streamed body (and its end) to `tap` as it is read.
  void tap_body(std::function<void(std::string_view, bool)> tap) { tap_ = std::move(tap); }

 private:
  boost::asio::awaitable<std::optional<std::size_t>> tapped_read_body(std::string& out,
                                                                      std::size_t max) {
    const std::size_t before = out.size();
    std::optional<std::size_t> n = co_await inner_.read_body(out, max);
    if (n) tap_(std::string_view(out).substr(before, *n), *n == 0);
    co_return n;
  }

  ResponseStream& inner_;
  std::function<void(Response&)> decorate_;
  std::function<void(std::string_view, bool)> tap_;
  std::size_t bytes_ = 0;
  unsigned status_ = 0;
};

// chttpd:error_headers for a 401: the WWW-Authenticate header a client asked for
// (X-CouchDB-WWW-Authenticate) or [chttpd] WWW-Authenticate names; with require_valid_user the
// browser's Basic prompt; otherwise a browser (accepts text/html, not application/json) asking for
// something it must log in for is sent to [chttpd_auth] authentication_redirect with 302.
void add_unauthorized_headers(const Request& request, bool secure, const RouterContext& ctx,
                              const core::CouchError& error, Response& response) {
  if (response.result() != Status::unauthorized) return;
  if (const auto asked = request.find("X-CouchDB-WWW-Authenticate"); asked != request.end()) {
    response.set(beast_http::field::www_authenticate, asked->value());
    return;
  }
  // A setting's value; nullopt when it is empty (CouchDB's "undefined").
  const auto configured = [&](std::string_view section, std::string_view key,
                              std::string fallback) -> std::optional<std::string> {
    std::string value = std::move(fallback);
    if (ctx.config != nullptr) {
      if (auto v = ctx.config->get(section, key)) value = std::move(*v);
    }
    if (value.empty()) return std::nullopt;
    return value;
  };
  if (auto type = configured("chttpd", "WWW-Authenticate", "")) {
    response.set(beast_http::field::www_authenticate, *type);
    return;
  }
  if (error.error != "unauthorized") return;
  // "undefined" in CouchDB's terms: an empty value turns the redirect off.
  const auto redirect =
      configured("chttpd_auth", "authentication_redirect", "/_utils/session.html");
  if (!redirect) return;
  if (ctx.auth != nullptr && ctx.auth->settings()->require_valid_user) {
    response.set(beast_http::field::www_authenticate, "Basic realm=\"server\"");
    return;
  }
  if (accepts_media_type(request, "application/json") ||
      !accepts_media_type(request, "text/html")) {
    return;
  }
  // The path the user asked for, decoded and with "//" collapsed (mochiweb's get(path)).
  const std::string_view target = request.target();
  const std::string_view raw_path = target.substr(0, target.find('?'));
  std::string path = percent_decode(raw_path).value_or(std::string(raw_path));
  path.erase(
      std::unique(path.begin(), path.end(), [](char a, char b) { return a == '/' && b == '/'; }),
      path.end());
  const std::string location =
      *redirect + "?return=" + url_encode(path) + "&reason=" + url_encode(error.reason);
  response.result(Status::found);
  response.set(beast_http::field::location, absolute_uri(request, secure, location));
}

// The answer to an error, thrown by a handler or returned to answer_error: CouchDB's error body
// and, for a 401, chttpd's headers above.
Response error_answer(const Request& request, bool secure, const RouterContext& ctx,
                      const core::CouchError& error) {
  Response answer = error_response(request, error);
  add_unauthorized_headers(request, secure, ctx, error, answer);
  return answer;
}

}  // namespace

MaybeResponse Router::handle(const Request& request, ResponseStream& raw_stream) const {
  return handle_request(request, raw_stream, 0);
}

MaybeResponse Router::handle_as(const Request& request, ResponseStream& stream,
                                core::UserCtx user) const {
  return handle_request(request, stream, 0, std::move(user));
}

MaybeResponse Router::handle_request(const Request& request, ResponseStream& raw_stream,
                                     int rewrites, std::optional<core::UserCtx> as_user) const {
  const auto started = std::chrono::steady_clock::now();
  std::string user_name;
  std::size_t streamed_bytes = 0;
  // One access-log line and the metrics, for whatever answer leaves here.
  // The server's own requests (the replicator watching _replicator) are neither logged nor
  // counted: they are not traffic.
  const bool internal = as_user.has_value();
  const auto done = [&](const std::optional<Response>& r, unsigned streamed_status) {
    if (internal) return;
    const unsigned status = r ? r->result_int() : streamed_status;
    const auto took = std::chrono::steady_clock::now() - started;
    if (context_.metrics != nullptr)
      context_.metrics->record_request(request.method(), status, took);
    spdlog::logger* log = spdlog::default_logger_raw();
    if (context_.access_log && log->should_log(spdlog::level::info)) {
      // Formatted with a format compiled once, not parsed again for every request (1.4% of a
      // GET's server CPU was fmt parsing this format string).
      const std::size_t bytes = r ? r->body().size() : streamed_bytes;
      fmt::memory_buffer line;
      fmt::format_to(std::back_inserter(line), FMT_COMPILE("{} {} {} {} {:.3f}ms {}"),
                     std::string_view(request.method_string()), std::string_view(request.target()),
                     status, bytes, std::chrono::duration<double, std::milli>(took).count(),
                     user_name.empty() ? std::string_view("-") : std::string_view(user_name));
      log->log(spdlog::level::info, spdlog::string_view_t(line.data(), line.size()));
    }
  };
  std::optional<Response> response;
  std::optional<core::CouchError> error;
  std::string allow;
  AuthResult auth;
  std::shared_ptr<const AuthSettings> settings;
  if (as_user) {
    auth.user = std::move(*as_user);
  } else if (context_.auth != nullptr) {
    settings = context_.auth->settings();
    // A CORS preflight is answered before authentication: browsers send no credentials with it.
    if (auto preflight = cors_preflight(request, settings->cors.for_request(request))) {
      done(preflight, 0);
      co_return std::move(*preflight);
    }
    Client client{raw_stream.peer_address(), raw_stream.secure()};
    Authenticator::Presented presented =
        presented_on_connection(*context_.auth, request, raw_stream);
    if (context_.workers != nullptr && context_.auth->may_hash_password(presented)) {
      auth = co_await context_.workers->run(
          authenticate_on(*context_.auth, request, std::move(client), std::move(presented)));
    } else {
      auth = context_.auth->authenticate(request, client, presented);
    }
    if (auth.error && auth.error->status == 401 && context_.metrics != nullptr) {
      context_.metrics->record_auth_failure();
    }
    if (auth.upgrade) {
      schedule_hash_upgrade(*context_.auth, context_.workers, context_.janitor,
                            std::move(*auth.upgrade));
    }
  } else {
    auth.user.roles = {std::string(core::kAdminRole)};
  }
  const auto decorate = [&](Response& r) {
    if (auth.set_cookie && r.find(beast_http::field::set_cookie) == r.end()) {
      r.set(beast_http::field::set_cookie, *auth.set_cookie);
    }
    if (settings) add_cors_headers(request, settings->cors.for_request(request), r);
  };
  DecoratedStream stream{raw_stream, decorate};
  if (auth.user.name) user_name = *auth.user.name;
  if (auth.error) {
    // Refused credentials are answered without throwing: unwinding cost more than serving a
    // GET, so a client sending wrong passwords at a high rate would cost more than one
    // sending right ones.
    error = std::move(auth.error);
  } else {
    try {
      const auto segments = path_segments(request.target());
      if (!segments) throw HttpError(err::bad_request("Invalid request path"));
      Call call{request,
                stream,
                context_,
                *segments,
                Query::parse(request.target()),
                std::move(auth.user),
                std::move(auth.handler),
                Call::no_security(),
                std::nullopt,
                nullptr,
                rewrites,
                auth.read_version};
      authorize_request(call);
      if (auto early =
              co_await begin_idempotent(call, [&](std::function<void(std::string_view, bool)> tap) {
                stream.tap_body(std::move(tap));
              })) {
        response = std::move(*early);
      } else if (context_.workers != nullptr && is_heavy_request(call)) {
        response = co_await context_.workers->run(dispatch(call));
      } else {
        response = co_await dispatch(call);
      }
    } catch (const HttpError& e) {
      error = e.error();
      allow = e.allow;
    } catch (const std::exception& e) {
      error = err::unknown_error(e.what());
    }
  }
  streamed_bytes = stream.bytes();
  if (!error) {
    if (response) decorate(*response);
    done(response, stream.status());
    co_return response;
  }
  if (stream.begun()) {  // mid-stream: nothing sane to add; the connection ends
    done(std::nullopt, stream.status());
    co_return std::nullopt;
  }
  if (!allow.empty()) {
    std::optional<Response> answer = method_not_allowed(request, allow);
    decorate(*answer);
    done(answer, 0);
    co_return answer;
  }
  std::optional<Response> answer = error_answer(request, raw_stream.secure(), context_, *error);
  decorate(*answer);
  done(answer, 0);
  co_return answer;
}

Response answer_error(const Call& call, const core::CouchError& error) {
  return error_answer(call.req, call.stream.secure(), call.ctx, error);
}

MaybeResponse Router::dispatch(Call& call) const {
  const auto& path = call.path;
  if (path.empty()) co_return welcome(call.req);
  if (path.size() == 1 && path[0] == "_up") co_return up(call.req);
  if (path.size() == 1 && path[0] == "favicon.ico") co_return handle_favicon(call);
  if (path[0].front() == '_' && !core::valid_db_name(path[0]))
    co_return co_await handle_server(call);
  if (path.size() == 1) co_return co_await handle_database(call);
  if (path.size() >= 3 && path[1] == "_partition" && !call.partition) {
    if (!enter_partition(call)) co_return partition_info(call);
    co_return co_await dispatch(call);
  }
  partition_from_query(call);
  static const std::array<std::string_view, 4> kViews = {"_all_docs", "_design_docs", "_local_docs",
                                                         "_changes"};
  if (std::find(kViews.begin(), kViews.end(), path[1]) != kViews.end())
    co_return co_await handle_cursors(call);
  if (path.size() >= 4 && path[1] == "_design" && path[3] == "_rewrite" && !call.partition)
    co_return co_await rewrite(call);
  if (path[1].front() == '_' && path[1] != "_design" && path[1] != "_local")
    co_return co_await handle_database(call);
  co_return co_await handle_document(call);
}

MaybeResponse Router::rewrite(Call& call) const {
  std::int64_t limit = 100;
  if (context_.config != nullptr)
    if (auto v = context_.config->get("chttpd", "rewrite_limit"))
      limit = std::strtoll(v->c_str(), nullptr, 10);
  if (call.rewrites >= limit) throw HttpError(err::bad_request("Exceeded rewrite recursion limit"));
  const core::DbRef db = open_db_or_throw(call);
  Rewrite r = rewrite_request(call, db);
  if (r.answer) co_return std::move(*r.answer);
  co_return co_await handle_request(*r.request, call.stream, call.rewrites + 1);
}

// GET / -- CouchDB's chttpd_misc:handle_welcome_req.
Response Router::welcome(const Request& request) const {
  if (!is_get_or_head(request)) return method_not_allowed(request, "GET,HEAD");
  Json features = Json::array();
  for (std::string_view feature : kFeatures) features.push_back(feature);
  const Json body = {
      {"couchdb", "Welcome"},
      {"version", kCouchDbVersion},
      {"git_sha", "chaise"},
      {"uuid", context_.server_uuid},
      {"features", std::move(features)},
      {"vendor", {{"name", "Chaise"}, {"version", kChaiseVersion}}},
  };
  return json_response(request, Status::ok, body);
}

// How long /_up waits for the store's answer.
constexpr std::chrono::milliseconds kUpProbeTime{2000};

// GET /_up -- CouchDB 3's health check: 404 {"status":"maintenance_mode"} (or "nolb") while
// [couchdb] maintenance_mode says so, for load balancers to take the node out.
Response Router::up(const Request& request) const {
  if (!is_get_or_head(request)) return method_not_allowed(request, "GET,HEAD");
  if (context_.config != nullptr) {
    const auto mode = context_.config->get("couchdb", "maintenance_mode");
    if (mode == "true")
      return json_response(request, Status::not_found, Json{{"status", "maintenance_mode"}});
    if (mode == "nolb") return json_response(request, Status::not_found, Json{{"status", "nolb"}});
  }
  // A node whose store does not answer (a FoundationDB cluster out of reach) is out of service:
  // 503, so that a load balancer sends requests to the nodes that can serve them.
  const storage::StoreHealth health = context_.store->probe(kUpProbeTime);
  if (!health.available)
    return json_response(request, Status::service_unavailable,
                         Json{{"status", "nok"}, {"reason", "storage: " + health.error}});
  const Json body = {{"status", "ok"}, {"seeds", Json::object()}};
  return json_response(request, Status::ok, body);
}

}  // namespace chaise::http
