// http/cors.h — Cross-Origin Resource Sharing as CouchDB 3.5's chttpd_cors does it, so that a web
// page on another origin (PouchDB in a browser, Fauxton served elsewhere) can talk to Chaise.
//
// Off unless [chttpd] enable_cors = true. [cors] origins (comma list, "*" for any), credentials,
// methods, headers, exposed_headers, max_age. A preflight OPTIONS from an accepted origin for a
// supported method and headers is answered 204 before authentication (browsers send no
// credentials with it); every other response to an accepted origin carries
// Access-Control-Allow-Origin (+ -Credentials) and -Expose-Headers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "http/router.h"

namespace chaise::http {

struct CorsSettings {
  bool enabled = false;
  bool credentials = false;
  std::vector<std::string> origins;  // "*" accepts any
  std::vector<std::string> methods;  // as configured (case-sensitive match, as CouchDB)
  std::vector<std::string> headers;  // lowercase
  std::vector<std::string> exposed;  // lowercase
  std::string max_age = "600";
};

CorsSettings cors_settings(const config::Sections& values);

// The 204 answer to a CORS preflight, or nullopt when `req` is not one Chaise accepts.
std::optional<Response> cors_preflight(const Request& req, const CorsSettings& s);
// Adds the CORS headers for `req`'s Origin to a response (complete or a streamed head).
void add_cors_headers(const Request& req, const CorsSettings& s, Response& response);

}  // namespace chaise::http
