// http/transport/request_parse.h — reading what a client sends: the path and query string of the request
// target (percent-decoding with CouchDB's rules) and JSON text, with CouchDB's error answers
// (HttpError) for what cannot be read. No I/O and no storage: every function here sees only client
// bytes, and each has a libFuzzer target in tests/fuzz/.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/util/error.h"
#include "core/util/json_text.h"

namespace chaise::http {

using Json = nlohmann::ordered_json;

// The table of CouchDB's errors (core/util/error.h): `throw HttpError(err::forbidden("..."))`.
namespace err = core::err;

// A CouchDB error answer, thrown by request helpers and endpoints; Router::handle converts it.
// Every error is a core::CouchError, built from the table; this is its one thrown form.
class HttpError : public std::runtime_error {
 public:
  explicit HttpError(core::CouchError e) : std::runtime_error(e.reason), error_(std::move(e)) {}
  const core::CouchError& error() const { return error_; }
  std::string allow;  // 405: the Allow header

 private:
  core::CouchError error_;
};

// Query string parameters, percent-decoded ('+' is a space, as Erlang's parse_qs does).
class Query {
 public:
  // Malformed %-escapes make the whole query a 400.
  static Query parse(std::string_view target);

  // The first value of `key`, or nullopt.
  std::optional<std::string> get(std::string_view key) const;
  bool has(std::string_view key) const { return get(key).has_value(); }
  // "true"/"false" in any case (parse_boolean); anything else: 400 query_parse_error "Invalid
  // boolean parameter: ...".
  bool get_bool(std::string_view key, bool fallback) const;
  // A decimal integer; anything else: 400 query_parse_error "Invalid value for integer: ...".
  std::optional<std::int64_t> get_int(std::string_view key) const;
  // A JSON value (startkey, key, keys, ...); invalid JSON: 400 bad_request.
  std::optional<Json> get_json(std::string_view key) const;
  const std::vector<std::pair<std::string, std::string>>& params() const { return params_; }

 private:
  std::vector<std::pair<std::string, std::string>> params_;
};

// couch_mrview_http:parse_boolean: "true" or "false" in any case; nullopt for anything else.
std::optional<bool> parse_boolean(std::string_view text);

// Splits the path of a request target ("/db/doc%2Fid?rev=1") into percent-decoded segments
// (["db", "doc/id"]); the query string is ignored. Splitting happens before decoding, so an encoded
// "%2F" stays inside its segment, as CouchDB requires for database names and document ids.
// "/" gives an empty vector; empty segments from "//" or a trailing "/" are dropped.
// Returns nullopt when the target does not start with '/' or holds a malformed %-escape.
std::optional<std::vector<std::string>> path_segments(std::string_view target);

// The value of a hexadecimal digit (either case), or -1.
int hex_digit(char c);

// Percent-decodes a path segment ('+' stays '+'); nullopt for a malformed %-escape.
std::optional<std::string> percent_decode(std::string_view in);

// mochiweb_util:unquote, as chttpd applies it to a Destination header or a filter's name: %XX
// decoded, '+' a space, anything else (a malformed escape too) kept as it is.
std::string unquote_plus(std::string_view in);

// couch_util:url_encode: keeps [A-Za-z0-9_.:-], %-encodes every other byte in uppercase hex.
std::string url_encode(std::string_view text);
// mochiweb_util:quote_plus: keeps [A-Za-z0-9_.~-], a space becomes '+', every other byte %XX.
std::string quote_plus(std::string_view text);

// Client JSON text as a value (core::parse_json_text); 400 bad_request with the parser's reason
// ("invalid UTF-8 JSON: ...") if it is not JSON or nests deeper than core::kJsonDepthMax.
Json parse_json_or_throw(std::string_view text,
                         core::JsonNumbers numbers = core::JsonNumbers::doubles);
}  // namespace chaise::http
