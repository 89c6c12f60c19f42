// http/auth/cors.h — Cross-Origin Resource Sharing as CouchDB 3.5's chttpd_cors does it, so that a web
// page on another origin (PouchDB in a browser, Fauxton served elsewhere) can talk to Chaise.
//
// Off unless [chttpd] enable_cors = true. [cors] origins (comma list, "*" for any), credentials,
// methods, headers, exposed_headers, max_age; a [cors:<host>] section overrides them for requests
// to that host name. A preflight OPTIONS from an accepted origin for a
// supported method and headers is answered 204 before authentication (browsers send no
// credentials with it); every other response to an accepted origin carries
// Access-Control-Allow-Origin (+ -Credentials) and -Expose-Headers.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "http/transport/message.h"

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

// [cors], and per virtual host [cors:<host>] whose keys each fall back to [cors]'s
// (chttpd_cors:cors_config).
struct CorsConfig {
  CorsSettings any_host;
  std::map<std::string, CorsSettings, std::less<>> hosts;  // by host name, without the port
  // The settings for the host `req` is for: X-Forwarded-Host, else Host, without scheme and port.
  const CorsSettings& for_request(const Request& req) const;
};
CorsConfig cors_config(const config::Sections& values);

// The 204 answer to a CORS preflight, or nullopt when `req` is not one Chaise accepts.
std::optional<Response> cors_preflight(const Request& req, const CorsSettings& s);
// Adds the CORS headers for `req`'s Origin to a response (complete or a streamed head).
void add_cors_headers(const Request& req, const CorsSettings& s, Response& response);

}  // namespace chaise::http
