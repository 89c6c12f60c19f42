// http/transport/message.h — the HTTP messages every layer of http/ speaks: Beast's request and
// response with a string body, the JSON type of response bodies, and the builders of CouchDB's
// JSON answers (headers, error shape, 405). Nothing here knows about routing or databases.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/util/error.h"

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

// --- Response builders, shared by every endpoint -------------------------------------------------

// A JSON response as CouchDB writes it: compact JSON followed by "\n", Content-Type
// application/json, Cache-Control must-revalidate, Server and Date headers, Content-Length set.
// For a HEAD request the body is dropped and Content-Length still states the GET body's length.
Response json_response(const Request& request, Status status, const Json& body);

// CouchDB's error shape, {"error": ..., "reason": ...}, with the error's status.
Response error_response(const Request& request, const core::CouchError& error);

// 405 {"error":"method_not_allowed","reason":"Only <allowed> allowed"} with an Allow header.
// `allowed` is CouchDB's comma-separated list, e.g. "GET,HEAD".
Response method_not_allowed(const Request& request, std::string_view allowed);

// The IMF-fixdate HTTP wants in the Date header, e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date_now();

}  // namespace chaise::http
