// Request handling for Chaise: a plain function of (request) -> response.
//
// The router knows nothing about sockets, sessions or threads: the server (http/server.h) reads a
// complete request, hands it to Router::handle, and writes back whatever comes out. That keeps every
// endpoint testable without a network and keeps CouchDB's wire formats (status codes, error bodies,
// headers) in one place.
//
// Adding an endpoint: add a branch to Router::dispatch in router.cc (or a helper it calls), build the
// answer with json_response / error_response / method_not_allowed below. Handlers may throw; the
// single exception boundary is Router::handle, which turns anything thrown into CouchDB's
// 500 {"error":"unknown_error","reason":...}.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chaise::http {

namespace beast_http = boost::beast::http;

using Request = beast_http::request<beast_http::string_body>;
using Response = beast_http::response<beast_http::string_body>;
using Status = beast_http::status;

// Response bodies keep their keys in insertion order, so they read like CouchDB's
// (`{"couchdb":"Welcome","version":...}`, `{"error":...,"reason":...}`).
using Json = nlohmann::ordered_json;

inline constexpr std::string_view kCouchDbVersion = "3.5.0";  // the CouchDB API level we speak
inline constexpr std::string_view kChaiseVersion = "0.1.0";
inline constexpr std::string_view kServerHeader = "Chaise/0.1.0";

// Everything the router needs to know about the server it runs in. Grows as layers are wired in
// (the core database handle goes here).
struct RouterContext {
  // 32 lowercase hex digits, stable for the lifetime of the data directory (see server/main.cc).
  std::string server_uuid;
};

class Router {
 public:
  explicit Router(RouterContext context);

  // Answers one request. Never throws: an exception escaping an endpoint becomes a 500
  // unknown_error response. The response's keep_alive flag follows the request's; the server may
  // still close the connection (shutdown, errors). HEAD is answered like GET with the body removed
  // and Content-Length kept. Thread-safe: may be called concurrently from every io thread.
  Response handle(const Request& request) const noexcept;

 private:
  Response dispatch(const Request& request) const;
  Response welcome(const Request& request) const;
  Response up(const Request& request) const;

  RouterContext context_;
};

// --- Response builders, shared by every endpoint -------------------------------------------------

// A JSON response as CouchDB writes it: compact JSON followed by "\n", Content-Type
// application/json, Cache-Control must-revalidate, Server and Date headers, Content-Length set.
// For a HEAD request the body is dropped and Content-Length still states the GET body's length.
Response json_response(const Request& request, Status status, const Json& body);

// CouchDB's error shape: {"error": error, "reason": reason}.
Response error_response(const Request& request, Status status, std::string_view error,
                        std::string_view reason);

// 405 {"error":"method_not_allowed","reason":"Only <allowed> allowed"} with an Allow header.
// `allowed` is CouchDB's comma-separated list, e.g. "GET,HEAD".
Response method_not_allowed(const Request& request, std::string_view allowed);

// Runs `handler(request)` and turns any exception into 500 unknown_error (reason = what()).
// This is the one exception boundary between endpoints and the server; Router::handle uses it.
Response guarded(const Request& request, const std::function<Response(const Request&)>& handler) noexcept;

// Splits the path of a request target ("/db/doc%2Fid?rev=1") into percent-decoded segments
// (["db", "doc/id"]); the query string is ignored. Splitting happens before decoding, so an encoded
// "%2F" stays inside its segment, as CouchDB requires for database names and document ids.
// "/" gives an empty vector; empty segments from "//" or a trailing "/" are dropped.
// Returns nullopt when the target does not start with '/' or holds a malformed %-escape.
std::optional<std::vector<std::string>> path_segments(std::string_view target);

// The IMF-fixdate HTTP wants in the Date header, e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date_now();

}  // namespace chaise::http
